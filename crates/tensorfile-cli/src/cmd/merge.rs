//! `tensorfile merge INDEX|DIR OUT`: join a sharded checkpoint into one
//! canonical file.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::set::merge;
use tensorfile::WriteOptions;

use super::{out, Failure};

/// Arguments of `merge`.
#[derive(clap::Args)]
pub struct Args {
    /// The index, or a directory holding one.
    #[arg(value_name = "INDEX|DIR")]
    input: PathBuf,
    /// The file to write (replaced atomically).
    #[arg(value_name = "OUT")]
    output: PathBuf,
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

/// Validates the set, then streams every tensor into OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    super::safetensors_input(&args.input)?;
    // Read, not mapped: a file truncated underneath is an error, not a signal.
    let source = super::remote::open_set(&args.input, &tensorfile::ReadOptions::default())?;
    let options = WriteOptions::default().with_sync(!args.no_sync);
    let bar = crate::progress::Bar::bytes(source.data_len(), "merge");
    let result = merge(&source, &args.output, &options, &bar);
    drop(bar);
    result?;
    if args.json {
        out(json!({
            "input": args.input,
            "output": args.output,
            "shards": source.shards().len(),
            "tensors": source.len(),
            "data_bytes": source.data_len(),
        }));
    } else {
        out(format_args!(
            "{}: {} tensors from {} shards, {} data bytes",
            args.output.display(),
            source.len(),
            source.shards().len(),
            source.data_len()
        ));
    }
    Ok(ExitCode::SUCCESS)
}
