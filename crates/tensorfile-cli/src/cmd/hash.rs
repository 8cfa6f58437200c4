//! `tensorfile hash FILE|DIR... [--per-tensor] [--json] [--write-manifest
//! M.json]`: sha256 of every file, of each safetensors file's data
//! section, and optionally of every tensor; a model-signing manifest.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};
use tensorfile::digest::{
    data_start, dir_files, file_digests, tensor_digests, DirFile, FileDigest, Manifest,
    Sha256Digest, GIT_PATHS,
};
use tensorfile::{FileSource, ReadOptions, SafeTensors, TensorData};

use super::looking::{escape, shown};
use super::{out, Failure, Usage};
use crate::progress::Bar;

/// Arguments of `hash`.
#[derive(clap::Args)]
pub struct Args {
    /// Files, or directories (every file under them, git files left out,
    /// links followed).
    #[arg(value_name = "FILE|DIR", required = true)]
    paths: Vec<PathBuf>,
    /// Also the sha256 of every tensor of each safetensors file (the
    /// digests `inspect --hash` prints).
    #[arg(long)]
    per_tensor: bool,
    /// Only the whole-file sha256 (no data-section digest: one hash per
    /// byte instead of two).
    #[arg(long)]
    file_only: bool,
    /// Write a manifest of DIR's files: the unsigned in-toto statement
    /// that OpenSSF model signing (the `model-signing` package) signs,
    /// listing each file with its sha256. `verify DIR --manifest` checks it.
    #[arg(long, value_name = "M.json")]
    write_manifest: Option<PathBuf>,
    /// Print JSON: every file's size, sha256, data-section sha256 and start,
    /// and tensors' sha256.
    #[arg(long)]
    json: bool,
}

/// The files of `path` (itself, or every file under the directory, the git
/// files and `skip` left out), named as shown: relative and `/`-separated
/// inside a directory, the path as given otherwise.
pub fn entries(path: &Path, skip: &[String]) -> Result<Vec<DirFile>, Failure> {
    if !path.is_dir() {
        let linked = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        return Ok(vec![DirFile {
            name: path.display().to_string(),
            path: path.to_path_buf(),
            linked,
        }]);
    }
    let mut ignore: Vec<String> = GIT_PATHS.iter().map(|s| s.to_string()).collect();
    ignore.extend(skip.iter().cloned());
    Ok(dir_files(path, &ignore)?)
}

/// `file` relative to `dir`, when it is inside it.
pub fn inside(dir: &Path, file: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let parent = file.parent().filter(|p| !p.as_os_str().is_empty());
    let parent = parent.unwrap_or(Path::new(".")).canonicalize().ok()?;
    let rel = parent.join(file.file_name()?);
    let rel = rel.strip_prefix(&dir).ok()?;
    Some(
        rel.iter()
            .map(|c| c.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
    )
}

/// Where each entry's data section starts when `data`; an entry named
/// `*.safetensors` whose header is invalid has none, and the error is
/// handed back beside it (its whole-file digest is still worth having: it
/// is what a corrupted download is checked with).
fn data_starts(
    entries: &[DirFile],
    data: bool,
) -> Result<Vec<Result<Option<u64>, String>>, Failure> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        if !data {
            out.push(Ok(None));
            continue;
        }
        match data_start(&e.path) {
            Ok(start) => out.push(Ok(start)),
            // Invalid as safetensors: the whole file is still hashed.
            Err(err) if err.format().is_some() => out.push(Err(super::one_line(&err))),
            // Unreadable: no digest at all.
            Err(err) => return Err(err.into()),
        }
    }
    Ok(out)
}

/// The sha256 (and data-section sha256 when `data`) of every entry, on the pool.
pub fn digest_all(entries: &[DirFile], data: bool) -> Result<Vec<FileDigest>, Failure> {
    let starts = data_starts(entries, data)?;
    let jobs: Vec<(PathBuf, Option<u64>)> = entries
        .iter()
        .zip(starts)
        .map(|(e, s)| (e.path.clone(), s.ok().flatten()))
        .collect();
    let bar = Bar::bytes(total_size(&jobs), "hashing");
    let mut out = Vec::with_capacity(jobs.len());
    for got in file_digests(&jobs, &bar) {
        out.push(got?);
    }
    Ok(out)
}

/// The bytes of every file to hash (for a progress bar).
fn total_size(jobs: &[(PathBuf, Option<u64>)]) -> u64 {
    jobs.iter()
        .filter_map(|(p, _)| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Per-tensor digests of a safetensors file or a PyTorch checkpoint (the
/// digests `inspect --hash` prints); `None` for any other file.
fn per_tensor(path: &Path) -> Result<Option<Vec<(String, Sha256Digest)>>, Failure> {
    fn named<T: TensorData<tensorfile::Error>>(
        tensors: &[T],
    ) -> Result<Vec<(String, Sha256Digest)>, Failure> {
        let digests = tensor_digests(tensors)?;
        Ok(tensors
            .iter()
            .map(|t| t.name().to_string())
            .zip(digests)
            .collect())
    }
    match tensorfile::probe(path)?.kind() {
        tensorfile::InputKind::Safetensors => {
            let source = FileSource::open(path).map_err(|e| tensorfile::CoreError::io(path, e))?;
            let file = SafeTensors::from_source(source, &ReadOptions::default())?;
            let tensors: Vec<_> = file.tensor_data().collect();
            named(&tensors).map(Some)
        }
        tensorfile::InputKind::Pytorch => {
            let ckpt = tensorfile::pytorch::Checkpoint::open(path)?;
            let tensors: Vec<_> = ckpt.tensors().collect();
            named(&tensors).map(Some)
        }
        _ => Ok(None),
    }
}

/// One file hashed.
struct Hashed {
    /// The input it was found under (itself, or a directory).
    input: PathBuf,
    entry: DirFile,
    digest: FileDigest,
    /// Why a `*.safetensors` file has no data-section digest (its header is invalid).
    invalid: Option<String>,
    tensors: Option<Vec<(String, Sha256Digest)>>,
}

/// Hashes every file of every input: the files of all inputs at once on
/// the pool, each file's two digests in one pass.
fn hash_all(args: &Args) -> Result<Vec<Hashed>, Failure> {
    let mut found: Vec<(PathBuf, DirFile)> = Vec::new();
    for path in &args.paths {
        let skip: Vec<String> = args
            .write_manifest
            .as_deref()
            .and_then(|m| inside(path, m))
            .into_iter()
            .collect();
        found.extend(entries(path, &skip)?.into_iter().map(|e| (path.clone(), e)));
    }
    let files: Vec<DirFile> = found.iter().map(|(_, e)| e.clone()).collect();
    let starts = data_starts(&files, !args.file_only)?;
    let jobs: Vec<(PathBuf, Option<u64>)> = files
        .iter()
        .zip(&starts)
        .map(|(e, s)| (e.path.clone(), s.clone().ok().flatten()))
        .collect();
    let bar = Bar::bytes(total_size(&jobs), "hashing");
    let digests = file_digests(&jobs, &bar);
    drop(bar);
    let mut out = Vec::with_capacity(found.len());
    for (((input, entry), digest), start) in found.into_iter().zip(digests).zip(starts) {
        let digest = digest?;
        let invalid = start.err();
        let tensors = if args.per_tensor && invalid.is_none() {
            per_tensor(&entry.path)?
        } else {
            None
        };
        out.push(Hashed {
            input,
            entry,
            digest,
            invalid,
            tensors,
        });
    }
    Ok(out)
}

/// Writes the model-signing manifest of the one directory hashed.
fn write_manifest(dir: &Path, manifest_path: &Path, hashed: &[Hashed]) -> Result<(), Failure> {
    let mut ignore: Vec<String> = GIT_PATHS.iter().map(|s| s.to_string()).collect();
    ignore.extend(inside(dir, manifest_path));
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let files = hashed
        .iter()
        .map(|h| (h.entry.name.clone(), h.digest.sha256))
        .collect();
    // Links followed (a Hub cache snapshot is all links): say so, or
    // model-signing would refuse them when it verifies.
    let linked = hashed.iter().any(|h| h.entry.linked);
    let manifest = Manifest::new(name, files, ignore, linked);
    let text = manifest.to_statement_json() + "\n";
    let file = tensorfile_core::AtomicFile::create(manifest_path)?;
    file.write_all_at(text.as_bytes(), 0)?;
    file.commit(true)?;
    Ok(())
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&Path>, bool) {
        (
            self.paths
                .first()
                .map(PathBuf::as_path)
                .filter(|_| self.paths.len() == 1),
            self.json,
        )
    }
}

/// Hashes the inputs; exit 1 when one cannot be read, or when a
/// `*.safetensors` file is invalid (its whole-file digest is printed all
/// the same).
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    if args.write_manifest.is_some() && (args.paths.len() != 1 || !args.paths[0].is_dir()) {
        return Err(Usage::failure(
            "--write-manifest takes one directory (the model's)",
        ));
    }
    let hashed = hash_all(&args)?;
    if let Some(manifest_path) = &args.write_manifest {
        write_manifest(&args.paths[0], manifest_path, &hashed)?;
    }
    for h in &hashed {
        if let Some(why) = &h.invalid {
            eprintln!("tensorfile: {why} (its data section is not hashed)");
        }
    }
    let code = if hashed.iter().any(|h| h.invalid.is_some()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    if args.json {
        let files: Vec<Value> = hashed
            .iter()
            .map(|h| {
                let d = &h.digest;
                let mut v = json!({
                    "input": h.input,
                    "name": h.entry.name,
                    "path": h.entry.path,
                    "size": d.size,
                    "sha256": d.sha256.hex(),
                    "data_sha256": d.data.map(|x| x.sha256.hex()),
                    "data_start": d.data.map(|x| x.start),
                });
                if let Some(why) = &h.invalid {
                    v["invalid"] = json!(why);
                }
                if args.per_tensor {
                    v["tensors"] = Value::Array(
                        h.tensors
                            .iter()
                            .flatten()
                            .map(|(n, d)| json!({"name": n, "sha256": d.hex()}))
                            .collect(),
                    );
                }
                v
            })
            .collect();
        out(json!({"files": files, "manifest": args.write_manifest}));
        return Ok(code);
    }
    for h in &hashed {
        let name = if h.input.is_dir() {
            shown(&h.entry.path)
        } else {
            escape(&h.entry.name)
        };
        // The first line of each file in sha256sum's format.
        out(format_args!("{}  {name}", h.digest.sha256));
        if let Some(data) = h.digest.data {
            out(format_args!(
                "  data section from byte {}: {}",
                data.start, data.sha256
            ));
        }
        for (n, d) in h.tensors.iter().flatten() {
            out(format_args!("  tensor {}: {d}", escape(n)));
        }
    }
    if let Some(m) = &args.write_manifest {
        out(format_args!("manifest: {}", shown(m)));
    }
    Ok(code)
}

/// `--embed-hash` of the commands that write safetensors.
#[derive(clap::Args)]
pub struct EmbedArgs {
    /// Record every tensor's sha256 in OUT's metadata (each file's own
    /// tensors, for a set), under the key "tensorfile.sha256" (a JSON object
    /// of tensor name to hex digest); `tensorfile verify OUT` then names any
    /// tensor whose bytes changed. Each file written is read back and saved
    /// once more (atomically) to do it.
    #[arg(long)]
    pub embed_hash: bool,
}
