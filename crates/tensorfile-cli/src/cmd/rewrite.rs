//! `tensorfile rewrite IN OUT [--align 64|4096]`: write the canonical file.

use std::process::ExitCode;

use tensorfile_core::Align;
use tensorfile_ops::rewrite::{rewrite, RewriteRequest};

use super::words::{bytes, plural};
use super::{out, Failure};
use crate::progress::Bar;

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

impl Args {
    /// The operation's request.
    pub fn request(&self) -> RewriteRequest {
        RewriteRequest {
            files: self.io.in_out(),
            align: self.align.bytes(),
            embed_hash: self.embed.embed_hash,
        }
    }
}

/// Reads IN (a file or a set; positional reads: a file truncated
/// underneath is an error, not a signal) and copies its tensors into an
/// atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::bytes_when_told("rewrite", |message| super::warn(message));
    let report = rewrite(&args.request(), &bar)?;
    drop(bar);
    if args.io.json {
        super::out_json(&report)?;
    } else {
        out(format_args!(
            "{}: {}, {}",
            report.output.display(),
            plural(report.tensors as u64, "tensor"),
            bytes(report.bytes)
        ));
    }
    Ok(ExitCode::SUCCESS)
}
