//! `tensorfile shard IN OUTDIR --max-shard-size 5GB [--prefix model]`:
//! split a file into shards the way huggingface_hub does.

use std::path::PathBuf;
use std::process::ExitCode;

use super::size::parse_size;
use serde_json::json;
use tensorfile::set::{split, SplitOptions};
use tensorfile::WriteOptions;

use super::{out, Failure};

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

/// Splits IN into OUTDIR.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    super::safetensors_input(&args.input)?;
    // Read, not mapped: a file truncated underneath is an error, not a signal.
    let source = super::remote::open_set(&args.input, &tensorfile::ReadOptions::default())?;
    let options = SplitOptions::new(args.max_shard_size, args.prefix)
        .with_write(WriteOptions::default().with_sync(!args.no_sync));
    let bar = crate::progress::Bar::bytes(source.data_len(), "shard");
    let summary = split(&source, &args.out_dir, &options, &bar);
    drop(bar);
    let summary = summary?;
    if args.json {
        out(json!({
            "input": args.input,
            "files": summary.files,
            "index": summary.index,
            "total_size": summary.total_size,
        }));
    } else {
        for file in &summary.files {
            out(file.display());
        }
        if let Some(index) = &summary.index {
            out(index.display());
        }
        out(format_args!(
            "{} shards, {} tensors, {} data bytes",
            summary.files.len(),
            source.len(),
            summary.total_size
        ));
    }
    Ok(ExitCode::SUCCESS)
}
