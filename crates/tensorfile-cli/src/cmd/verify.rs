//! `tensorfile verify`: a directory against a manifest (ours, or the
//! statement inside a model-signing bundle), a file against a sha256, or a
//! safetensors file against the per-tensor digests in its metadata.
//!
//! Exit status: 0 when everything matches, 1 on any mismatch, missing or
//! extra file (or tensor) and when nothing was checked at all (a manifest
//! that lists no file of an empty directory: "nothing verified"), 2 when an input cannot be read or the
//! arguments do not make a check.

use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile_ops::verify::{verify, VerifyRequest};

use super::looking::{comparison, escape, shown};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `verify`.
#[derive(clap::Args)]
pub struct Args {
    /// The directory or file to check.
    #[arg(value_name = "DIR|FILE")]
    path: PathBuf,
    /// A manifest written by `hash --write-manifest`, or a model-signing
    /// signature bundle (`model.sig`), whose statement is read WITHOUT
    /// checking the signature (use `model_signing verify` for that).
    #[arg(long, value_name = "M.json", conflicts_with = "sha256")]
    manifest: Option<PathBuf>,
    /// The sha256 the file must have (64 hex digits).
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
    /// Print JSON: verdict ("ok", "mismatch" or "nothing verified"),
    /// mismatched, missing and extra.
    #[arg(long)]
    json: bool,
}

/// Checks; see the module's exit statuses.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let (path, json) = (args.path.clone(), args.json);
    comparison(Some(&path), json, || check(args))
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(&self.path), self.json)
    }
}

impl Args {
    /// The request: the path and which check.
    fn request(&self) -> VerifyRequest {
        let mut request = VerifyRequest::new(&self.path);
        request.manifest = self.manifest.clone();
        request.sha256 = self.sha256.clone();
        request
    }
}

fn check(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::bytes_when_told("hashing", |m| super::warn(m));
    let report = verify(&args.request(), &bar)?;
    drop(bar);
    let code = if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if args.json {
        out(serde_json::to_string(&report).map_err(|e| e.to_string())?);
        return Ok(code);
    }
    for m in &report.mismatched {
        out(format_args!(
            "MISMATCH {}: expected {}, found {}",
            escape(&m.name),
            m.expected,
            m.found
        ));
    }
    for n in &report.missing {
        out(format_args!("MISSING {}", escape(n)));
    }
    let files = report.checked == "files";
    for n in &report.extra {
        let why = if files {
            "not in the manifest"
        } else {
            "no recorded digest"
        };
        out(format_args!("EXTRA {} ({why})", escape(n)));
    }
    let failed = report.verdict == "mismatch";
    // `checked` names the things: "files" or "tensors".
    let thing = report.checked.strip_suffix('s').unwrap_or(&report.checked);
    out(format_args!(
        "{}: {} ({} checked, {} mismatched, {} missing, {} extra)",
        shown(&args.path),
        if failed { "FAILED" } else { &report.verdict },
        super::words::plural(report.count as u64, thing),
        report.mismatched.len(),
        report.missing.len(),
        report.extra.len()
    ));
    if let Some(note) = &report.note {
        out(format_args!("note: {note}"));
    }
    Ok(code)
}
