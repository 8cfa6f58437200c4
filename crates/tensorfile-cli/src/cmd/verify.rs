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

use serde_json::json;
use tensorfile::digest::{
    check_embedded, embedded_hashes, Manifest, ManifestSource, Sha256Digest, TensorCheck,
    TENSOR_SHA256_KEY,
};
use tensorfile::ReadOptions;
use tensorfile_core::ShardedTensors;

use super::hash::{digest_all, entries, inside};
use super::looking::{comparison, escape, shown};
use super::{out, Failure, Usage};

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

fn check(args: Args) -> Result<ExitCode, Failure> {
    if let Some(manifest) = &args.manifest {
        return check_manifest(&args, manifest);
    }
    if let Some(hex) = &args.sha256 {
        let want: Sha256Digest = hex
            .parse()
            .map_err(|e| Usage::failure(format_args!("--sha256: {e}")))?;
        if args.path.is_dir() {
            return Err(Usage::failure(
                "--sha256 checks one file; for a directory give --manifest",
            ));
        }
        let entry = entries(&args.path, &[])?.remove(0);
        let got = digest_all(std::slice::from_ref(&entry), false)?[0].sha256;
        let ok = got == want;
        return Ok(report(
            &args,
            ok,
            if ok {
                vec![]
            } else {
                vec![(entry.name, want.hex(), got.hex())]
            },
            vec![],
            vec![],
            1,
            None,
        ));
    }
    check_embedded_hashes(&args)
}

fn code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn check_manifest(args: &Args, path: &std::path::Path) -> Result<ExitCode, Failure> {
    let (manifest, source) = Manifest::read(path)?;
    if !args.path.is_dir() {
        return Err(Usage::failure(format_args!(
            "{}: a manifest lists a directory's files; give the directory",
            shown(&args.path)
        )));
    }
    let mut skip = manifest.ignore_paths.clone();
    skip.extend(inside(&args.path, path));
    let found = entries(&args.path, &skip)?;
    let digests = digest_all(&found, false)?;
    let pairs: Vec<(String, Sha256Digest)> = found
        .iter()
        .zip(&digests)
        .map(|(e, d)| (e.name.clone(), d.sha256))
        .collect();
    let check = manifest.check(&pairs);
    let note = (source == ManifestSource::Bundle)
        .then_some("the bundle's signature was not checked, only the file digests it lists");
    let mismatched = check
        .mismatched
        .iter()
        .map(|(n, w, g)| (n.clone(), w.hex(), g.hex()))
        .collect();
    Ok(report(
        args,
        check.ok(),
        mismatched,
        check.missing.clone(),
        check.extra.clone(),
        check.matched + check.mismatched.len(),
        note,
    ))
}

fn check_embedded_hashes(args: &Args) -> Result<ExitCode, Failure> {
    let kind = super::safetensors_input(&args.path)?;
    // A file, or every shard of a set: each file's own tensors against the
    // digests in its own metadata.
    let set = ShardedTensors::open_pread(&args.path, &ReadOptions::default())?;
    let (mut mismatched, mut missing, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    let mut checked = 0;
    for shard in set.shards() {
        let Some(expected) = embedded_hashes(shard.file().metadata())
            .map_err(|e| format!("{}: {e}", shown(shard.path())))?
        else {
            return Err(Usage::failure(format_args!(
                "{}: no per-tensor digests in its metadata (key {TENSOR_SHA256_KEY:?}, written by --embed-hash); give --sha256 or --manifest",
                shown(shard.path())
            )));
        };
        let tensors: Vec<_> = shard.file().tensor_data().collect();
        checked += tensors.len();
        // In a set, names are the tensors' (unique across shards); the
        // missing ones say which file recorded them.
        let within = |n: String| {
            if kind.is_set() && set.shards().len() > 1 {
                format!("{n} (in {})", shard.name())
            } else {
                n
            }
        };
        for c in check_embedded(&tensors, &expected)? {
            match c {
                TensorCheck::Same(_) => {}
                TensorCheck::Differs(n, w, g) => mismatched.push((n, w.hex(), g.hex())),
                TensorCheck::Missing(n) => missing.push(within(n)),
                TensorCheck::Unrecorded(n) => extra.push(n),
            }
        }
    }
    let ok = mismatched.is_empty() && missing.is_empty() && extra.is_empty();
    Ok(report(args, ok, mismatched, missing, extra, checked, None))
}

/// Prints the verdict and every mismatch, missing and extra name; returns
/// the exit status. No difference found in no file (or tensor) at all is
/// "nothing verified", a failure: it proves nothing about the input.
fn report(
    args: &Args,
    ok: bool,
    mismatched: Vec<(String, String, String)>,
    missing: Vec<String>,
    extra: Vec<String>,
    checked: usize,
    note: Option<&str>,
) -> ExitCode {
    let nothing = ok && checked == 0;
    let verdict = match (ok, nothing) {
        (true, false) => "ok",
        (true, true) => "nothing verified",
        (false, _) => "mismatch",
    };
    let what = if args.manifest.is_some() || args.sha256.is_some() {
        "files"
    } else {
        "tensors"
    };
    if args.json {
        let mismatched: Vec<_> = mismatched
            .iter()
            .map(|(n, w, g)| json!({"name": n, "expected": w, "found": g}))
            .collect();
        out(json!({
            "path": args.path,
            "verdict": verdict,
            "checked": what,
            "count": checked,
            "mismatched": mismatched,
            "missing": missing,
            "extra": extra,
            "signature_checked": false,
            "note": note,
        }));
        return code(ok && !nothing);
    }
    for (n, w, g) in &mismatched {
        out(format_args!(
            "MISMATCH {}: expected {w}, found {g}",
            escape(n)
        ));
    }
    for n in &missing {
        out(format_args!("MISSING {}", escape(n)));
    }
    for n in &extra {
        let why = if what == "files" {
            "not in the manifest"
        } else {
            "no recorded digest"
        };
        out(format_args!("EXTRA {} ({why})", escape(n)));
    }
    out(format_args!(
        "{}: {} ({checked} {what} checked, {} mismatched, {} missing, {} extra)",
        shown(&args.path),
        if ok { verdict } else { "FAILED" },
        mismatched.len(),
        missing.len(),
        extra.len()
    ));
    if let Some(note) = note {
        out(format_args!("note: {note}"));
    }
    code(ok && !nothing)
}
