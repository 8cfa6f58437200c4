//! `tensorfile validate [--json] FILE...`: check files against the reader rules.

use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile_ops::validate::{validate, ValidateReport, ValidateRequest};

use super::words::plural;
use super::{out, Failure};

/// Arguments of `validate`.
#[derive(clap::Args)]
pub struct Args {
    /// One JSON object per file and line instead of text.
    #[arg(long)]
    json: bool,
    /// Largest header length accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = tensorfile_core::DEFAULT_MAX_HEADER_LEN)]
    max_header_len: u64,
    /// The files to check (a directory or an index checks a whole set);
    /// s3://, gs://, az://, hf:// and http(s):// URLs read only the headers.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        // Each file reports its own verdict; other errors name no one file.
        (None, self.json)
    }
}

/// Checks each file; exit 1 when any is invalid or unreadable.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let mut all_valid = true;
    // Many files (every shard of a checkpoint, say) take a while: a bar
    // over the inputs. A set's shard headers are read concurrently, as one
    // step of it.
    let bar = match args.files.len() {
        0 | 1 => crate::progress::Bar::hidden(),
        n => crate::progress::Bar::counted(n as u64, "validating", "inputs"),
    };
    for path in &args.files {
        bar.inc(1);
        let request = ValidateRequest {
            path: path.clone(),
            max_header_len: args.max_header_len,
            timeout: super::remote::timeout_seconds(),
        };
        let mut report = validate(&request, &())?;
        all_valid &= report.valid;
        // Errors quote the file's bytes: made printable here, as every
        // line of the command is.
        report.error = report.error.map(|e| super::escape_text(&e).into_owned());
        bar.suspend(|| print(&report, args.json))?;
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Prints a verdict: one line (and one per warning), or one JSON object.
fn print(r: &ValidateReport, json: bool) -> Result<(), Failure> {
    if json {
        return super::out_json(r);
    }
    let name = r.file.display();
    match (&r.error, r.shards, r.tensors, r.data_bytes) {
        (Some(err), ..) => out(format_args!("{name}: invalid: {err}")),
        (None, Some(shards), Some(tensors), Some(bytes)) => out(format_args!(
            "{name}: ok ({}, {}, {} of data)",
            plural(shards as u64, "shard"),
            plural(tensors as u64, "tensor"),
            super::words::bytes(bytes)
        )),
        (None, ..) => out(format_args!("{name}: ok")),
    }
    for warning in &r.warnings {
        out(format_args!("{name}: warning: {warning}"));
    }
    Ok(())
}
