//! `tensorfile rewrite IN OUT [--align 64|4096]`: write the canonical file.

use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::{save_converted, CastOptions};
use tensorfile::{Align, SafeTensors, WriteOptions};

use super::{out, Failure};

/// Arguments of `rewrite`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    io: super::FileArgs,
    /// Pad the header so that the data starts at a multiple of 64 or 4096
    /// bytes (canonical except for the padding). Default: 8, canonical.
    #[arg(long, value_name = "BYTES", default_value = "8", value_parser = parse_align)]
    align: Align,
    #[command(flatten)]
    embed: super::hash::EmbedArgs,
}

fn parse_align(s: &str) -> Result<Align, String> {
    s.parse::<u64>()
        .ok()
        .and_then(Align::from_bytes)
        .ok_or_else(|| format!("`{s}` is not an alignment; expected 8, 64 or 4096"))
}

/// Reads IN (positional reads: a file truncated underneath is an error,
/// not a signal) and copies its tensors into an atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    super::safetensors_input(&args.io.input)?;
    let read = args.io.read_options();
    let input = SafeTensors::open_pread_with(&args.io.input, &read)?;
    let options = WriteOptions {
        align: args.align,
        ..args.io.write_options()
    };
    // OUT may be IN (the in-place canonical rewrite, the one case
    // `refuse_input_as_output` is not asked about): the save renames a new
    // inode over the name, and IN's open file keeps reading the old one.
    let tensors: Vec<_> = input.tensor_data().collect();
    let metadata = input.metadata();
    save_converted(
        &args.io.output,
        &tensors,
        metadata,
        None,
        CastOptions::default(),
        &options,
    )?;
    args.embed.apply(&args.io.output, &options)?;
    let bytes = args.io.output_size()?;
    if args.io.json {
        out(json!({
            "input": args.io.input,
            "output": args.io.output,
            "tensors": input.len(),
            "bytes": bytes,
            "align": args.align.bytes(),
        }));
    } else {
        out(format_args!(
            "{}: {} tensors, {bytes} bytes",
            args.io.output.display(),
            input.len()
        ));
    }
    Ok(ExitCode::SUCCESS)
}
