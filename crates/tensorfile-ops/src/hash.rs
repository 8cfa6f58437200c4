//! `hash`: the sha256 of every file (what the Hub records as the LFS
//! object id), of each safetensors file's data section, and optionally of
//! every tensor; a model-signing manifest of a directory
//! (`docs/commands/hash.md`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::one_line;
use tensorfile::digest::{
    data_start, dir_files, file_digests, tensor_digests, DirFile, FileDigest, Manifest,
    Sha256Digest, GIT_PATHS,
};
use tensorfile::{FileSource, Progress, ReadOptions, Result, SafeTensors, TensorData};

/// What `hash` is asked.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HashRequest {
    /// Files, or directories (every file under them, git files left out,
    /// links followed).
    pub paths: Vec<PathBuf>,
    /// Also the sha256 of every tensor of each safetensors file or PyTorch
    /// checkpoint (the digests `inspect --hash` gives).
    pub per_tensor: bool,
    /// Only the whole-file sha256 (no data-section digest).
    pub file_only: bool,
    /// Write the model-signing manifest of the one directory given here
    /// (atomically): the unsigned in-toto statement listing each file with
    /// its sha256.
    pub write_manifest: Option<PathBuf>,
}

impl HashRequest {
    /// The digests of `paths`' files, whole and data sections.
    pub fn new(paths: impl IntoIterator<Item = impl Into<PathBuf>>) -> HashRequest {
        HashRequest {
            paths: paths.into_iter().map(Into::into).collect(),
            ..HashRequest::default()
        }
    }
}

/// What `hash` found: what `hash --json` prints (keys in ascending byte
/// order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HashReport {
    /// Every file, input by input.
    pub files: Vec<HashedFile>,
    /// The manifest written, as given, or `null`.
    pub manifest: Option<String>,
}

impl HashReport {
    /// Whether a `*.safetensors` file is invalid (its whole-file digest
    /// is there all the same): the command then exits 1.
    pub fn any_invalid(&self) -> bool {
        self.files.iter().any(|f| f.invalid.is_some())
    }
}

/// One file's digests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HashedFile {
    /// The sha256 of its data section, for a safetensors file.
    pub data_sha256: Option<String>,
    /// Where its data section starts, for a safetensors file.
    pub data_start: Option<u64>,
    /// The input it was found under (itself, or a directory), as given.
    pub input: String,
    /// Why a `*.safetensors` file has no data-section digest (its header
    /// is invalid); the key is absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// Its name: relative and `/`-separated inside a directory, the path
    /// as given otherwise.
    pub name: String,
    /// Its path.
    pub path: String,
    /// The sha256 of every byte (sha256sum's, the Hub's LFS oid).
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// With `per_tensor`, every tensor's sha256 (empty for a file that
    /// holds no tensors); the key is absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensors: Option<Vec<TensorHash>>,
    /// Whether it was found under a directory (not given itself).
    #[serde(skip)]
    pub in_dir: bool,
}

/// A tensor's sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorHash {
    /// Its name.
    pub name: String,
    /// The sha256 of its bytes, in hex.
    pub sha256: String,
}

/// The files of `path` (itself, or every file under the directory, the git
/// files and `skip` left out), named as shown: relative and `/`-separated
/// inside a directory, the path as given otherwise.
pub(crate) fn entries(path: &Path, skip: &[String]) -> Result<Vec<DirFile>> {
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
    dir_files(path, &ignore)
}

/// `file` relative to `dir`, when it is inside it.
pub(crate) fn inside(dir: &Path, file: &Path) -> Option<String> {
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
) -> Result<Vec<std::result::Result<Option<u64>, String>>> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        if !data {
            out.push(Ok(None));
            continue;
        }
        match data_start(&e.path) {
            Ok(start) => out.push(Ok(start)),
            // Invalid as safetensors: the whole file is still hashed.
            Err(err) if err.format().is_some() => out.push(Err(one_line(&err))),
            // Unreadable: no digest at all.
            Err(err) => return Err(err),
        }
    }
    Ok(out)
}

/// The bytes of every file to hash (a progress total).
fn total_size(jobs: &[(PathBuf, Option<u64>)]) -> u64 {
    jobs.iter()
        .filter_map(|(p, _)| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// The sha256 (and data-section sha256 when `data`) of every entry, on the
/// pool, the bytes counted on `progress` (its total told first).
pub(crate) fn digest_all(
    entries: &[DirFile],
    data: bool,
    progress: &dyn Progress,
) -> Result<Vec<FileDigest>> {
    let starts = data_starts(entries, data)?;
    let jobs: Vec<(PathBuf, Option<u64>)> = entries
        .iter()
        .zip(starts)
        .map(|(e, s)| (e.path.clone(), s.ok().flatten()))
        .collect();
    progress.total(total_size(&jobs));
    file_digests(&jobs, progress).into_iter().collect()
}

/// Per-tensor digests of a safetensors file or a PyTorch checkpoint (the
/// digests `inspect --hash` gives); `None` for any other file.
fn per_tensor(path: &Path) -> Result<Option<Vec<TensorHash>>> {
    fn named<T: TensorData<tensorfile::Error>>(tensors: &[T]) -> Result<Vec<TensorHash>> {
        let digests = tensor_digests(tensors)?;
        Ok(tensors
            .iter()
            .zip(digests)
            .map(|(t, d)| TensorHash {
                name: t.name().to_string(),
                sha256: d.hex(),
            })
            .collect())
    }
    match tensorfile::probe(path)?.kind() {
        tensorfile::InputKind::Safetensors => {
            let source = FileSource::open(path).map_err(|e| tensorfile_core::Error::io(path, e))?;
            let file = SafeTensors::from_source(source, &ReadOptions::default())?;
            let tensors: Vec<_> = file.tensor_data().collect();
            named(&tensors).map(Some)
        }
        #[cfg(feature = "pytorch")]
        tensorfile::InputKind::Pytorch => {
            let ckpt = tensorfile::pytorch::Checkpoint::open(path)?;
            let tensors: Vec<_> = ckpt.tensors().collect();
            named(&tensors).map(Some)
        }
        _ => Ok(None),
    }
}

/// Writes the model-signing manifest of the one directory hashed.
fn write_manifest(
    dir: &Path,
    manifest_path: &Path,
    files: &[(DirFile, Sha256Digest)],
) -> Result<()> {
    let mut ignore: Vec<String> = GIT_PATHS.iter().map(|s| s.to_string()).collect();
    ignore.extend(inside(dir, manifest_path));
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let listed = files.iter().map(|(e, d)| (e.name.clone(), *d)).collect();
    // Links followed (a Hub cache snapshot is all links): say so, or
    // model-signing would refuse them when it verifies.
    let linked = files.iter().any(|(e, _)| e.linked);
    let manifest = Manifest::new(name, listed, ignore, linked);
    let text = manifest.to_statement_json() + "\n";
    let file = tensorfile_core::AtomicFile::create(manifest_path)?;
    file.write_all_at(text.as_bytes(), 0)?;
    file.commit(true)?;
    Ok(())
}

/// Hashes every file of every input (the files of all inputs at once on
/// the pool, each file's two digests in one pass, the bytes counted on
/// `progress`), and writes the manifest when asked.
///
/// # Errors
///
/// `write_manifest` with other than one directory
/// ([`Error::Request`](tensorfile::Error::Request)); without it, a directory
/// holding no files (an I/O error on it); an input that cannot be
/// read; a manifest that cannot be written. An invalid `*.safetensors`
/// file is not an error: its entry says why ([`HashedFile::invalid`]).
pub fn hash(request: &HashRequest, progress: &dyn Progress) -> Result<HashReport> {
    if request.write_manifest.is_some() && (request.paths.len() != 1 || !request.paths[0].is_dir())
    {
        return Err(tensorfile::Error::request(
            "--write-manifest takes one directory (the model's)",
        ));
    }
    let mut found: Vec<(&PathBuf, DirFile)> = Vec::new();
    for path in &request.paths {
        let skip: Vec<String> = request
            .write_manifest
            .as_deref()
            .and_then(|m| inside(path, m))
            .into_iter()
            .collect();
        let listed = entries(path, &skip)?;
        // An empty directory is a mistake more often than a model: say so
        // rather than print nothing and succeed. (A manifest of nothing is
        // asked for on purpose: `verify` then says it verified nothing.)
        if listed.is_empty() && request.write_manifest.is_none() {
            return Err(tensorfile::Error::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "this is a directory holding no files to hash",
                ),
            ));
        }
        found.extend(listed.into_iter().map(|e| (path, e)));
    }
    let files: Vec<DirFile> = found.iter().map(|(_, e)| e.clone()).collect();
    let starts = data_starts(&files, !request.file_only)?;
    let jobs: Vec<(PathBuf, Option<u64>)> = files
        .iter()
        .zip(&starts)
        .map(|(e, s)| (e.path.clone(), s.clone().ok().flatten()))
        .collect();
    progress.total(total_size(&jobs));
    let digests = file_digests(&jobs, progress);
    let mut hashed = Vec::with_capacity(found.len());
    let mut listed = Vec::with_capacity(found.len());
    for (((input, entry), digest), start) in found.into_iter().zip(digests).zip(starts) {
        let digest = digest?;
        let invalid = start.err();
        let tensors = if request.per_tensor && invalid.is_none() {
            per_tensor(&entry.path)?
        } else {
            None
        };
        hashed.push(HashedFile {
            data_sha256: digest.data.map(|x| x.sha256.hex()),
            data_start: digest.data.map(|x| x.start),
            input: input.to_string_lossy().into_owned(),
            invalid,
            name: entry.name.clone(),
            path: entry.path.to_string_lossy().into_owned(),
            sha256: digest.sha256.hex(),
            size: digest.size,
            // `--per-tensor` lists every file's tensors, none for a file
            // that has none.
            tensors: request.per_tensor.then(|| tensors.unwrap_or_default()),
            in_dir: input.is_dir(),
        });
        listed.push((entry, digest.sha256));
    }
    if let Some(manifest_path) = &request.write_manifest {
        write_manifest(&request.paths[0], manifest_path, &listed)?;
    }
    Ok(HashReport {
        files: hashed,
        manifest: request
            .write_manifest
            .as_ref()
            .map(|m| m.to_string_lossy().into_owned()),
    })
}
