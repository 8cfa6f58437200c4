//! `verify`: a directory against a manifest (ours, or the statement inside
//! a model-signing bundle), a file against a sha256, or a safetensors file
//! or set against the per-tensor digests in its metadata
//! (`docs/commands/verify.md`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::hash::{digest_all, entries, inside};
use tensorfile::digest::{
    check_embedded, embedded_hashes, DigestError, Manifest, ManifestSource, Sha256Digest,
    TensorCheck, TENSOR_SHA256_KEY,
};
use tensorfile::set::ShardedTensors;
use tensorfile::{Progress, ReadOptions, Result};

/// What `verify` is asked: one of three checks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VerifyRequest {
    /// The directory (with `manifest`) or file (with `sha256`, or
    /// neither: its embedded digests) to check.
    pub path: PathBuf,
    /// A manifest written by `hash --write-manifest`, or a model-signing
    /// bundle (`model.sig`) whose statement is read WITHOUT checking its
    /// signature.
    pub manifest: Option<PathBuf>,
    /// The sha256 the file must have (64 hex digits).
    pub sha256: Option<String>,
}

impl VerifyRequest {
    /// A check of `path` against the per-tensor digests in its metadata.
    pub fn new(path: impl Into<PathBuf>) -> VerifyRequest {
        VerifyRequest {
            path: path.into(),
            ..VerifyRequest::default()
        }
    }
}

/// What `verify` found: what `verify --json` prints (keys in ascending
/// byte order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VerifyReport {
    /// What was checked: `files` (a manifest, a sha256) or `tensors`.
    pub checked: String,
    /// How many files or tensors were checked.
    pub count: usize,
    /// Files not in the manifest, or tensors with no recorded digest.
    pub extra: Vec<String>,
    /// Files or tensors whose digest differs.
    pub mismatched: Vec<Mismatch>,
    /// Files in the manifest but not found, or tensors recorded but not
    /// there.
    pub missing: Vec<String>,
    /// A note on what was not checked (a bundle's signature), or `null`.
    pub note: Option<String>,
    /// The path checked, as given.
    pub path: String,
    /// Always `false`: a bundle's signature is not checked.
    pub signature_checked: bool,
    /// `ok`, `mismatch`, or `nothing verified` (no file or tensor at all:
    /// a failure, it proves nothing).
    pub verdict: String,
}

impl VerifyReport {
    /// Whether everything matched and something was checked (exit 0).
    pub fn passed(&self) -> bool {
        self.verdict == "ok"
    }
}

/// A file or tensor whose digest differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mismatch {
    /// The sha256 expected.
    pub expected: String,
    /// The sha256 found.
    pub found: String,
    /// Its name.
    pub name: String,
}

/// A manifest or embedded digests that cannot be read, as the library's
/// error naming `path`.
fn unreadable(path: &Path, e: DigestError) -> tensorfile::Error {
    match e {
        DigestError::Read(e) => e,
        DigestError::Manifest { path, problem } => tensorfile::Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, problem),
        ),
        other => tensorfile::Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        ),
    }
}

/// The report of a check: `ok` when nothing differs, is missing or extra.
fn report(
    request: &VerifyRequest,
    mismatched: Vec<(String, Sha256Digest, Sha256Digest)>,
    missing: Vec<String>,
    extra: Vec<String>,
    count: usize,
    note: Option<&str>,
) -> VerifyReport {
    let ok = mismatched.is_empty() && missing.is_empty() && extra.is_empty();
    let verdict = match (ok, count == 0) {
        (true, false) => "ok",
        (true, true) => "nothing verified",
        (false, _) => "mismatch",
    };
    let checked = if request.manifest.is_some() || request.sha256.is_some() {
        "files"
    } else {
        "tensors"
    };
    VerifyReport {
        checked: checked.to_string(),
        count,
        extra,
        mismatched: mismatched
            .into_iter()
            .map(|(name, w, g)| Mismatch {
                expected: w.hex(),
                found: g.hex(),
                name,
            })
            .collect(),
        missing,
        note: note.map(str::to_string),
        path: request.path.to_string_lossy().into_owned(),
        signature_checked: false,
        verdict: verdict.to_string(),
    }
}

/// Runs the check `request` asks for, the bytes hashed counted on
/// `progress`.
///
/// # Errors
///
/// A request that does not make a check (a sha256 that is not 64 hex
/// digits, `sha256` for a directory, `manifest` for a file, a file without
/// embedded digests): [`Error::Request`](tensorfile::Error::Request). An input
/// or manifest that cannot be read.
pub fn verify(request: &VerifyRequest, progress: &dyn Progress) -> Result<VerifyReport> {
    if let Some(manifest) = &request.manifest {
        return check_manifest(request, manifest, progress);
    }
    if let Some(hex) = &request.sha256 {
        let want: Sha256Digest = hex
            .parse()
            .map_err(|e| tensorfile::Error::request(format!("--sha256: {e}")))?;
        if request.path.is_dir() {
            return Err(tensorfile::Error::request(
                "--sha256 checks one file; for a directory give --manifest",
            ));
        }
        let entry = entries(&request.path, &[])?.remove(0);
        let got = digest_all(std::slice::from_ref(&entry), false, progress)?[0].sha256;
        let mismatched = if got == want {
            vec![]
        } else {
            vec![(entry.name, want, got)]
        };
        return Ok(report(request, mismatched, vec![], vec![], 1, None));
    }
    check_embedded_hashes(request)
}

fn check_manifest(
    request: &VerifyRequest,
    path: &Path,
    progress: &dyn Progress,
) -> Result<VerifyReport> {
    let (manifest, source) = Manifest::read(path).map_err(|e| unreadable(path, e))?;
    if !request.path.is_dir() {
        return Err(tensorfile::Error::request(format!(
            "{}: a manifest lists a directory's files; give the directory",
            request.path.display()
        )));
    }
    let mut skip = manifest.ignore_paths.clone();
    skip.extend(inside(&request.path, path));
    let found = entries(&request.path, &skip)?;
    let digests = digest_all(&found, false, progress)?;
    let pairs: Vec<(String, Sha256Digest)> = found
        .iter()
        .zip(&digests)
        .map(|(e, d)| (e.name.clone(), d.sha256))
        .collect();
    let check = manifest.check(&pairs);
    let note = (source == ManifestSource::Bundle)
        .then_some("the bundle's signature was not checked, only the file digests it lists");
    let count = check.matched + check.mismatched.len();
    Ok(report(
        request,
        check.mismatched,
        check.missing,
        check.extra,
        count,
        note,
    ))
}

fn check_embedded_hashes(request: &VerifyRequest) -> Result<VerifyReport> {
    let path = &request.path;
    // A directory holding no model weights is checked against a manifest:
    // say what to give, not what the directory lacks.
    if path.is_dir() && tensorfile::dir_weights(path).is_none() {
        return Err(tensorfile::Error::request(format!(
            "{}: to verify a directory, give its manifest: --manifest FILE (written by \
             `tensorfile hash --write-manifest`, or a model-signing bundle such as model.sig)",
            path.display()
        )));
    }
    let kind = tensorfile::probe(path)?.kind();
    if !kind.is_safetensors() {
        return Err(crate::transform::not_safetensors(path, kind));
    }
    // A file, or every shard of a set: each file's own tensors against the
    // digests in its own metadata.
    let set = ShardedTensors::open_pread(path, &ReadOptions::default())?;
    let (mut mismatched, mut missing, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    let mut checked = 0;
    for shard in set.shards() {
        let expected =
            embedded_hashes(shard.file().metadata()).map_err(|e| unreadable(shard.path(), e))?;
        let Some(expected) = expected else {
            return Err(tensorfile::Error::request(format!(
                "{}: no per-tensor digests in its metadata (key {TENSOR_SHA256_KEY:?}, written by --embed-hash); give --sha256 or --manifest",
                shard.path().display()
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
                TensorCheck::Differs(n, w, g) => mismatched.push((n, w, g)),
                TensorCheck::Missing(n) => missing.push(within(n)),
                TensorCheck::Unrecorded(n) => extra.push(n),
            }
        }
    }
    Ok(report(request, mismatched, missing, extra, checked, None))
}
