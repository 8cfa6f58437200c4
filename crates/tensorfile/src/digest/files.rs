//! Digests of whole files, read with positional reads in large pieces (a
//! file truncated underneath is an error, never a signal), several files
//! at once on the pool; and the sha256 of a safetensors file's data
//! section, computed in the same pass.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::sha::{Hasher, Sha256Digest};
use crate::source::{ByteSource, FileSource};
use crate::Progress;
use crate::{parallel, Error, ReadOptions, Result};

/// Bytes read at a time.
const READ: usize = 8 << 20;

/// What [`file_digest`] found for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    /// The file's size in bytes.
    pub size: u64,
    /// The sha256 of every byte: what the Hugging Face Hub records as a
    /// file's LFS object id, and what `sha256sum` prints.
    pub sha256: Sha256Digest,
    /// For a safetensors file, the sha256 of its data section (every byte
    /// after the header): the hash kohya's scripts, A1111 and ModelSpec's
    /// `modelspec.hash_sha256` record.
    pub data: Option<DataDigest>,
}

/// The digest of a safetensors file's data section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataDigest {
    /// Where the data section starts (8 + the header length).
    pub start: u64,
    /// The sha256 of the bytes from `start` to the end.
    pub sha256: Sha256Digest,
}

/// Where the data section of the safetensors file at `path` starts, after
/// its header has been read and checked; `Ok(None)` when the file is not
/// safetensors: another kind by [`crate::probe`], or a file whose
/// header does not read and whose name does not end in `.safetensors`.
///
/// # Errors
/// The file cannot be read, or is named `*.safetensors` but its header is
/// invalid.
pub fn data_start(path: &Path) -> Result<Option<u64>> {
    if crate::input::probe(path)?.kind() != crate::input::Kind::Safetensors {
        return Ok(None);
    }
    match tensorfile_core::read_header_from_path(path, &ReadOptions::default()) {
        Ok(header) => Ok(Some(header.data_start())),
        Err(_) if !path.to_string_lossy().ends_with(".safetensors") => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The sha256 of the file at `path` and, when `data_start` is given, of
/// its bytes from there on, in one pass (the two hashes run on two threads
/// of the pool when it has them).
///
/// # Errors
/// The file cannot be opened or read, or it shrank while being read.
///
/// # Example
///
/// ```
/// use tensorfile::digest::{data_start, file_digest};
/// use tensorfile::{save, Dtype, Metadata, TensorRef, WriteOptions};
/// // The format page's worked example: a 96-byte header, 16 bytes of data.
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("worked_example.safetensors");
/// let data: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let w = TensorRef { name: "w", dtype: Dtype::F32, shape: &[2, 2], data: &data };
/// let format = Metadata::from([("format".to_string(), "tinyllm".to_string())]);
/// save(&path, [w], Some(&format), &WriteOptions::default())?;
/// let d = file_digest(&path, data_start(&path)?)?;
/// assert_eq!(d.size, 120);
/// assert_eq!(d.data.unwrap().start, 104);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn file_digest(path: &Path, data_start: Option<u64>) -> Result<FileDigest> {
    file_digest_counted(path, data_start, &())
}

/// [`file_digest`], telling `on_bytes` of each piece hashed.
///
/// # Errors
/// As [`file_digest`].
pub fn file_digest_counted(
    path: &Path,
    data_start: Option<u64>,
    on_bytes: &dyn Progress,
) -> Result<FileDigest> {
    let source = FileSource::open(path).map_err(|e| Error::io(path, e))?;
    let size = source.len();
    let mut whole = Hasher::new();
    let mut data = data_start
        .filter(|&s| s <= size)
        .map(|s| (s, Hasher::new()));
    let mut buf = vec![0u8; READ.min(size as usize).max(1)];
    let mut at = 0u64;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        let piece = &mut buf[..n];
        source
            .read_exact_at(at, piece)
            .map_err(|e| Error::io(path, e))?;
        let piece = &buf[..n];
        match &mut data {
            Some((start, h)) if *start < at + n as u64 => {
                let from = start.saturating_sub(at) as usize;
                parallel::both(|| whole.update(piece), || h.update(&piece[from..]));
            }
            _ => whole.update(piece),
        }
        at += n as u64;
        on_bytes.advance(n as u64);
    }
    // The file may have grown: what was hashed is the size it had when opened.
    Ok(FileDigest {
        size,
        sha256: whole.finish(),
        data: data.map(|(start, h)| DataDigest {
            start,
            sha256: h.finish(),
        }),
    })
}

/// [`file_digest`] of several files, as many at once as the pool has
/// threads, in the order given; each one's data section too when its
/// `Option<u64>` says where it starts. `on_bytes` is told of each piece
/// hashed.
pub fn file_digests(
    files: &[(PathBuf, Option<u64>)],
    on_bytes: &dyn Progress,
) -> Vec<Result<FileDigest>> {
    let slots: Vec<Mutex<Option<Result<FileDigest>>>> =
        files.iter().map(|_| Mutex::new(None)).collect();
    parallel::for_each_index(files.len(), |i| {
        let (path, start) = &files[i];
        let got = file_digest_counted(path, *start, on_bytes);
        if let Ok(mut slot) = slots[i].lock() {
            *slot = Some(got);
        }
        true
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .ok()
                .flatten()
                .unwrap_or_else(|| Err(Error::not_found("a digest that was never computed")))
        })
        .collect()
}

/// The paths git keeps beside a model, which model-signing leaves out of
/// its manifests by default.
pub const GIT_PATHS: [&str; 4] = [".git", ".gitattributes", ".github", ".gitignore"];

/// A file of a directory: its path relative to the directory, with `/`
/// between components, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirFile {
    /// The relative path, `/`-separated.
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Whether a symbolic link was followed to reach it (the file or a
    /// directory on the way is a link), as in a Hugging Face cache
    /// snapshot: a manifest then says `allow_symlinks`.
    pub linked: bool,
}

/// Whether `name` (relative, `/`-separated) is one of `ignore` or inside one.
pub fn is_ignored(name: &str, ignore: &[String]) -> bool {
    ignore.iter().any(|i| {
        let i = i.trim_end_matches('/');
        name == i
            || name
                .strip_prefix(i)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Every regular file under `dir`, symbolic links followed to the files
/// they name, except those `ignore` names (relative paths; a directory
/// takes what is under it), sorted as model-signing sorts them: by path
/// component, so `a/b` comes before `a.txt`.
///
/// # Errors
/// A directory cannot be read, a path is not UTF-8, or a link leads to
/// something that is neither a file nor a directory.
pub fn dir_files(dir: &Path, ignore: &[String]) -> Result<Vec<DirFile>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new(), false)];
    while let Some((at, prefix, under_link)) = stack.pop() {
        let entries = std::fs::read_dir(&at).map_err(|e| Error::io(&at, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&at, e))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                return Err(Error::io(
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "the name is not UTF-8"),
                ));
            };
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            if is_ignored(&rel, ignore) {
                continue;
            }
            let linked = under_link
                || entry
                    .file_type()
                    .map_err(|e| Error::io(&path, e))?
                    .is_symlink();
            let meta = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
            if meta.is_dir() {
                stack.push((path, rel, linked));
            } else if meta.is_file() {
                out.push(DirFile {
                    name: rel,
                    path,
                    linked,
                });
            } else {
                return Err(Error::io(
                    &path,
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "not a regular file or directory",
                    ),
                ));
            }
        }
    }
    out.sort_by(|a, b| a.name.split('/').cmp(b.name.split('/')));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_one_shot_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..(READ * 2 + 77)).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        for start in [0u64, 5, READ as u64 + 3, bytes.len() as u64] {
            let d = file_digest(&path, Some(start)).unwrap();
            assert_eq!(d.sha256, Sha256Digest::of(&bytes));
            let data = d.data.unwrap();
            assert_eq!(data.sha256, Sha256Digest::of(&bytes[start as usize..]));
        }
        let empty = dir.path().join("e");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(
            file_digest(&empty, None).unwrap().sha256,
            Sha256Digest::of(b"")
        );
        let counted = std::sync::atomic::AtomicU64::new(0);
        let all = file_digests(
            &[
                (path.clone(), None),
                (empty, None),
                (dir.path().join("x"), None),
            ],
            &|n| {
                counted.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            },
        );
        assert_eq!(counted.into_inner(), bytes.len() as u64);
        assert_eq!(all[0].as_ref().unwrap().sha256, Sha256Digest::of(&bytes));
        assert!(all[2].is_err());
    }

    #[test]
    fn files_sorted_by_component_and_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
        for f in ["a.txt", "a/b", ".git/objects/x", ".gitattributes", "z"] {
            std::fs::write(dir.path().join(f), f).unwrap();
        }
        let ignore: Vec<String> = GIT_PATHS.iter().map(|s| s.to_string()).collect();
        let names: Vec<String> = dir_files(dir.path(), &ignore)
            .unwrap()
            .into_iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["a/b", "a.txt", "z"]);
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("a"), dir.path().join("l")).unwrap();
            let files = dir_files(dir.path(), &ignore).unwrap();
            let linked: Vec<(&str, bool)> =
                files.iter().map(|f| (f.name.as_str(), f.linked)).collect();
            assert_eq!(
                linked,
                [
                    ("a/b", false),
                    ("a.txt", false),
                    ("l/b", true),
                    ("z", false)
                ]
            );
        }
        assert!(is_ignored(".git/objects/x", &ignore));
        assert!(!is_ignored(".gitx", &ignore));
    }
}
