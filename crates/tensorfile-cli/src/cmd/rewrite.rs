//! `tensorfile rewrite IN OUT [--align 64|4096]`: write the canonical file.

use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::{convert_plan, CastOptions};
use tensorfile_core::Align;

use super::inout;
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

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        self.io.report_to()
    }
}

fn parse_align(s: &str) -> Result<Align, String> {
    s.parse::<u64>()
        .ok()
        .and_then(Align::from_bytes)
        .ok_or_else(|| format!("`{s}` is not an alignment; expected 8, 64 or 4096"))
}

/// Reads IN (a file or a set; positional reads: a file truncated
/// underneath is an error, not a signal) and copies its tensors into an
/// atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let read = args.io.read_options();
    let input = inout::open(&args.io.input, &read)?;
    let options = args.io.write_options().with_align(args.align);
    // OUT may be IN (the in-place canonical rewrite): the save renames a
    // new inode over the name, and IN's open file keeps reading the old one.
    let tensors = input.tensors();
    let metadata = input.metadata()?;
    let (plan, summary) = convert_plan(&tensors, metadata.as_ref(), None, CastOptions::default())?;
    let mut written = inout::write(
        &input,
        &tensors,
        &plan,
        &args.io.output,
        args.io.max_shard_size,
        &options,
        "rewrite",
    )?;
    args.embed.apply(&mut written, &options)?;
    if args.io.json {
        out(json!({
            "input": args.io.input,
            "output": args.io.output,
            "files": written.files,
            "index": written.index,
            "tensors": summary.tensors,
            "bytes": written.bytes,
            "align": args.align.bytes(),
        }));
    } else {
        out(format_args!(
            "{}: {} tensors, {} bytes",
            args.io.output.display(),
            summary.tensors,
            written.bytes
        ));
    }
    Ok(ExitCode::SUCCESS)
}
