//! `tensorfile rewrite IN OUT [--align 64|4096]`: write the canonical file.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::{save, Align, ReadOptions, SafeTensors, WriteOptions};

use super::{out, Failure};

/// Arguments of `rewrite`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to read.
    #[arg(value_name = "IN")]
    input: PathBuf,
    /// The file to write (replaced atomically; may be IN itself).
    #[arg(value_name = "OUT")]
    output: PathBuf,
    /// Pad the header so that the data starts at a multiple of 64 or 4096
    /// bytes (canonical except for the padding). Default: 8, canonical.
    #[arg(long, value_name = "BYTES", default_value = "8", value_parser = parse_align)]
    align: Align,
    /// Largest header length accepted in IN and written to OUT, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = tensorfile::DEFAULT_MAX_HEADER_LEN)]
    max_header_len: u64,
    /// Do not sync OUT and its directory to disk (faster; the replacement
    /// stays atomic, but may be lost on a power failure).
    #[arg(long)]
    no_sync: bool,
    /// Print the result as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_align(s: &str) -> Result<Align, String> {
    s.parse::<u64>()
        .ok()
        .and_then(Align::from_bytes)
        .ok_or_else(|| format!("`{s}` is not an alignment; expected 8, 64 or 4096"))
}

/// Reads IN (memory-mapped) and streams its tensors into an atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let read = ReadOptions::default().max_header_len(args.max_header_len);
    let input = SafeTensors::open_with(&args.input, &read)?;
    let options = WriteOptions {
        max_header_len: args.max_header_len,
        align: args.align,
        sync: !args.no_sync,
    };
    // The map of IN stays valid even when OUT is IN: the save renames a new
    // inode over the name, it never writes into the mapped one.
    save(&args.output, input.tensors(), input.metadata(), &options)?;
    let bytes = std::fs::metadata(&args.output)
        .map_err(|e| tensorfile::Error::io(&args.output, e))?
        .len();
    if args.json {
        out(json!({
            "input": args.input,
            "output": args.output,
            "tensors": input.len(),
            "bytes": bytes,
            "align": args.align.bytes(),
        }));
    } else {
        out(format_args!(
            "{}: {} tensors, {bytes} bytes",
            args.output.display(),
            input.len()
        ));
    }
    Ok(ExitCode::SUCCESS)
}
