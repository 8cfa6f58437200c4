//! `tensorfile merge INDEX|DIR OUT`: join a sharded checkpoint into one
//! canonical file, or consolidate a torch distributed checkpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile_ops::merge::{merge, MergeRequest};

use super::words::{bytes, plural};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `merge`.
#[derive(clap::Args)]
pub struct Args {
    /// The index, or a directory holding one; or a directory holding a torch
    /// distributed checkpoint's rank files (shard-R-model-K-of-N.safetensors,
    /// written by DCP's HuggingFaceStorageWriter with save_distributed=True),
    /// which is consolidated.
    #[arg(value_name = "INDEX|DIR")]
    input: PathBuf,
    /// The file to write (replaced atomically), or an object store URL
    /// (s3://, gs://, az://): made in a temporary directory (TMPDIR), then
    /// uploaded. For a DCP checkpoint, OUT not ending in .safetensors is a
    /// directory that gets the set torch's fqn_to_index_mapping says
    /// (model-0000K-of-0000N.safetensors and the index; all or none).
    #[arg(value_name = "OUT")]
    output: PathBuf,
    /// With OUT at a store URL: replace an object already there (else
    /// refused). Not atomic for concurrent readers.
    #[arg(long)]
    replace: bool,
    /// Do not sync OUT to disk (faster; still atomic).
    #[arg(long)]
    no_sync: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(&self.input), self.json)
    }
}

impl Args {
    /// The operation's request.
    pub fn request(&self) -> MergeRequest {
        MergeRequest {
            input: self.input.clone(),
            output: self.output.clone(),
            sync: !self.no_sync,
            timeout: super::remote::timeout_seconds(),
            replace: self.replace,
        }
    }
}

/// Validates the set (or the DCP checkpoint), then streams every tensor into OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::bytes_when_told("merge", |message| super::warn(message));
    let report = merge(&args.request(), &bar)?;
    drop(bar);
    if args.json {
        super::out_json(&report)?;
    } else if let Some(ranks) = report.dcp_ranks {
        out(format_args!(
            "{}: {} consolidated from a DCP checkpoint of {} ({}), {} of data",
            report.output.display(),
            plural(report.tensors as u64, "tensor"),
            plural(ranks as u64, "rank"),
            plural(report.shards as u64, "file"),
            bytes(report.data_bytes)
        ));
    } else {
        out(format_args!(
            "{}: {} from {}, {} of data",
            report.output.display(),
            plural(report.tensors as u64, "tensor"),
            plural(report.shards as u64, "shard"),
            bytes(report.data_bytes)
        ));
    }
    Ok(ExitCode::SUCCESS)
}
