//! `tensorfile validate [--json] FILE...`: check files against the reader rules.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::InputKind as Kind;
use tensorfile::ReadOptions;
use tensorfile_core::read_header_from_path;

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
    /// s3://, hf:// and http(s):// URLs read only the headers.
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

/// The header of a file, local or remote (one request when it fits in 64
/// KiB): only the header is read; rule 5 is checked against the length.
fn header_of(
    path: &std::path::Path,
    url: Option<&str>,
    options: &ReadOptions,
) -> tensorfile::Result<tensorfile::Header> {
    match url {
        Some(u) => Ok(super::remote::single_file(u, options)?.header().clone()),
        None => Ok(read_header_from_path(path, options)?),
    }
}

/// Checks each file; exit 1 when any is invalid or unreadable.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let options = ReadOptions::default().max_header_len(args.max_header_len);
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
        let url = super::remote::url(path);
        let kind = tensorfile::probe(path).map(|p| p.kind());
        // A model directory or a sharded checkpoint's index: see `set`.
        if matches!(kind, Ok(Kind::SafetensorsSet)) {
            all_valid &= bar.suspend(|| super::set::validate(path, &options, args.json));
            continue;
        }
        if matches!(kind, Ok(Kind::Gguf)) {
            all_valid &= bar.suspend(|| super::gguf::validate(path, args.json));
            continue;
        }
        let name = path.display();
        // Only the header is read: rule 5 is checked against the file's length.
        let (error, rule, warnings): (Option<String>, Option<u8>, Vec<String>) = match kind {
            Ok(Kind::Safetensors) => match header_of(path, url, &options) {
                Ok(header) => (None, None, header.warnings().to_vec()),
                Err(err) => {
                    let detail: &(dyn std::error::Error + 'static) = match err.core() {
                        Some(core) => core,
                        None => err.detail(),
                    };
                    let text = super::one_line(detail);
                    (Some(text), err.rule(), Vec::new())
                }
            },
            Ok(other) => (Some(super::not_safetensors(path, other)), None, Vec::new()),
            Err(err) => (Some(super::one_line(&err)), None, Vec::new()),
        };
        all_valid &= error.is_none();
        bar.suspend(|| {
            if args.json {
                out(json!({
                    "file": path,
                    "valid": error.is_none(),
                    "rule": rule,
                    "error": error,
                    "warnings": warnings,
                }));
            } else {
                match &error {
                    None => out(format_args!("{name}: ok")),
                    Some(err) => out(format_args!("{name}: invalid: {err}")),
                }
                for warning in &warnings {
                    out(format_args!("{name}: warning: {warning}"));
                }
            }
        });
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
