//! `tensorfile edit FILE --set K=V --unset K --rename OLD=NEW`: change a
//! file's metadata and tensor names, in place when only the header changes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile_ops::edit::{edit, EditRequest};

use super::looking::shown;
use super::{out, Failure, Usage};
use crate::progress::Bar;

/// Arguments of `edit`.
#[derive(clap::Args)]
pub struct Args {
    /// The safetensors file to edit, or an object at a store URL (s3://,
    /// gs://, az://): copied to a temporary directory (TMPDIR), edited
    /// and put back whole in its place.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Set metadata key K to the string V (repeatable).
    #[arg(long, value_name = "K=V", value_parser = parse_pair)]
    set: Vec<(String, String)>,
    /// Remove metadata key K, if present (repeatable).
    #[arg(long, value_name = "K")]
    unset: Vec<String>,
    /// Rename tensor OLD to NEW (repeatable; all at once, so two may swap).
    #[arg(long, value_name = "OLD=NEW", value_parser = parse_pair)]
    rename: Vec<(String, String)>,
    /// Rewrite the file atomically even when it could be edited in place.
    #[arg(long)]
    rewrite: bool,
    /// Largest header length accepted and written, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = tensorfile_core::DEFAULT_MAX_HEADER_LEN)]
    max_header_len: u64,
    /// Do not sync the write to disk.
    #[arg(long)]
    no_sync: bool,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(&self.file), self.json)
    }
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// A map of pairs, refusing a key given twice with two values.
fn map_of(flag: &str, pairs: &[(String, String)]) -> Result<BTreeMap<String, String>, Failure> {
    let mut map = BTreeMap::new();
    for (k, v) in pairs {
        if let Some(old) = map.insert(k.clone(), v.clone()) {
            if &old != v {
                return Err(Usage::failure(format!("{flag} {k:?} is given twice")));
            }
        }
    }
    Ok(map)
}

impl Args {
    /// The operation's request.
    pub fn request(&self) -> Result<EditRequest, Failure> {
        if self.set.is_empty() && self.unset.is_empty() && self.rename.is_empty() && !self.rewrite {
            return Err(Usage::failure(
                "nothing to do: give --set, --unset, --rename or --rewrite",
            ));
        }
        Ok(EditRequest {
            file: self.file.clone(),
            set: map_of("--set", &self.set)?,
            unset: self.unset.clone(),
            rename: map_of("--rename", &self.rename)?,
            rewrite: self.rewrite,
            max_header_len: self.max_header_len,
            sync: !self.no_sync,
        })
    }
}

/// Edits FILE and says how.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    // Silent in place (one block); a bar on a terminal for a rewrite.
    let bar = Bar::bytes_when_told("edit", |message| super::warn(message));
    let report = edit(&args.request()?, &bar)?;
    drop(bar);
    if args.json {
        super::out_json(&report)?;
    } else {
        match &report.reason {
            None => out(format_args!(
                "{}: edited in place ({} header bytes)",
                shown(&report.file),
                report.header_len + 8
            )),
            Some(reason) => out(format_args!("{}: rewritten: {reason}", shown(&report.file))),
        }
    }
    Ok(ExitCode::SUCCESS)
}
