//! `tensorfile shard IN OUTDIR --max-shard-size 5GB [--prefix model]`:
//! split a file into shards the way huggingface_hub does.

use std::path::PathBuf;
use std::process::ExitCode;

use super::size::parse_size;
use tensorfile_ops::shard::{shard, ShardRequest};

use super::words::{bytes, plural};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `shard`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to split (or a directory or index, to re-shard a set).
    #[arg(value_name = "IN")]
    input: PathBuf,
    /// The directory to write the shards and index to (created if needed;
    /// must not already hold weights with this prefix).
    #[arg(value_name = "OUTDIR")]
    out_dir: PathBuf,
    /// Largest data size of a shard: bytes, or decimal KB, MB, GB, TB
    /// (5GB = 5,000,000,000 bytes). A larger tensor gets a shard alone.
    #[arg(long, value_name = "SIZE", default_value = "5GB", value_parser = parse_size)]
    max_shard_size: u64,
    /// File name prefix: PREFIX-00001-of-00003.safetensors,
    /// PREFIX.safetensors.index.json.
    #[arg(long, value_name = "PREFIX", default_value = "model", value_parser = parse_prefix)]
    prefix: String,
    /// Do not sync the files to disk (faster; each stays atomic).
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

fn parse_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() || s.contains(['/', '\\', '\0']) || s == "." || s == ".." {
        Err(format!("`{s}` is not a file name prefix"))
    } else {
        Ok(s.to_string())
    }
}

impl Args {
    /// The operation's request.
    pub fn request(&self) -> ShardRequest {
        ShardRequest {
            input: self.input.clone(),
            out_dir: self.out_dir.clone(),
            max_shard_size: self.max_shard_size,
            prefix: self.prefix.clone(),
            sync: !self.no_sync,
            timeout: super::remote::timeout_seconds(),
        }
    }
}

/// Splits IN into OUTDIR.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::bytes_when_told("shard", |message| super::warn(message));
    let report = shard(&args.request(), &bar)?;
    drop(bar);
    if args.json {
        super::out_json(&report)?;
    } else {
        for file in &report.files {
            out(file.display());
        }
        if let Some(index) = &report.index {
            out(index.display());
        }
        out(format_args!(
            "{}, {}, {} of data",
            plural(report.files.len() as u64, "shard"),
            plural(report.tensors as u64, "tensor"),
            bytes(report.total_size)
        ));
    }
    Ok(ExitCode::SUCCESS)
}
