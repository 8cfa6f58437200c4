//! Outputs at store URLs (`s3://`, `gs://`, `az://`, `abfss://`): the
//! output is made locally, in a private temporary directory under
//! `TMPDIR`, as it would be anywhere else, and then uploaded: a file as one
//! object, a set's shards first and its index last, so that a reader never
//! sees an index whose shards are missing. Each object is complete or
//! absent ([`tensorfile_remote::upload`]); on a failure the objects this
//! run put are removed; the temporary directory is removed whatever
//! happens. A process stopping on a signal through
//! [`tensorfile_remote::interrupt`] (the CLI) takes this same error path
//! (see [`tensorfile_remote::upload`]); one killed outright leaves the
//! temporary directory, which the next run on this machine removes, and
//! its pending multipart upload, which the next upload to the same object
//! sweeps.
//!
//! The local space needed is the output's size. Without `replace`, an
//! output whose object (or any of the set's names) is already in the
//! bucket is refused before anything is uploaded. With it, a set's old
//! index is read and removed first, then the shards are replaced, the new
//! index put last, and the old set's shards the new one does not name
//! removed: a reader during the replacement finds no index, never an
//! index naming shards of two sets. A replacement is not atomic for
//! concurrent readers.

use std::path::{Path, PathBuf};

use tensorfile::{Error, Progress, Result};

/// Whether `output` names an object in a store.
pub(crate) fn store_url(output: &Path) -> Option<&str> {
    let s = output.to_str()?;
    let (scheme, _) = s.split_once("://")?;
    matches!(
        scheme.to_ascii_lowercase().as_str(),
        "s3" | "gs" | "az" | "abfs" | "abfss"
    )
    .then_some(s)
}

/// Runs `run` with the output it is to write: `output` itself when it is
/// local; for a store URL, a path in a private temporary directory, whose
/// result is then uploaded to `output` (see the module's documentation),
/// a further stage of `progress` counting its bytes, and the paths of the
/// report mapped back by `remap`.
///
/// # Errors
/// `run`'s error, or the upload's (naming the object).
pub(crate) fn via_local<R>(
    output: &Path,
    replace: bool,
    progress: &dyn Progress,
    run: impl FnOnce(&Path) -> Result<R>,
    remap: impl FnOnce(&mut R, &dyn Fn(&Path) -> PathBuf),
) -> Result<R> {
    let Some(url) = store_url(output) else {
        return run(output);
    };
    imp::via_local(url, replace, progress, run, remap)
}

#[cfg(not(any(feature = "gcs", feature = "azure", feature = "s3-store")))]
mod imp {
    use super::*;

    pub(super) fn via_local<R>(
        url: &str,
        _replace: bool,
        _progress: &dyn Progress,
        _run: impl FnOnce(&Path) -> Result<R>,
        _remap: impl FnOnce(&mut R, &dyn Fn(&Path) -> PathBuf),
    ) -> Result<R> {
        Err(Error::request(format!(
            "{url}: this build cannot write to object stores (tensorfile-ops' features `s3-store`, `gcs`, `azure`)"
        )))
    }
}

#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
mod imp {
    use super::*;
    use std::time::Duration;
    use tensorfile_core::OutputError;
    use tensorfile_remote::upload::{self, UploadOptions};
    use tensorfile_remote::{Problem, RemoteError, RemoteOptions};

    /// The longest any one request of the upload waits.
    const WAIT: Duration = Duration::from_secs(600);

    /// A store's error as ours; an object already there (refused without
    /// `replace`) as [`OutputError::Exists`], which names the flag.
    fn remote_error(e: RemoteError) -> Error {
        let url = e.url.clone();
        if e.problem == Problem::Exists {
            return exists(&url);
        }
        tensorfile_core::Error::io(PathBuf::from(url), e.into_io_unnamed()).into()
    }

    fn exists(url: &str) -> Error {
        tensorfile_core::Error::Output {
            path: PathBuf::from(url),
            problem: OutputError::Exists,
        }
        .into()
    }

    fn io_error(path: &Path, e: std::io::Error) -> Error {
        match RemoteError::of_io(&e) {
            Some(r) => remote_error(r.clone()),
            None => tensorfile_core::Error::io(path, e).into(),
        }
    }

    pub(super) fn via_local<R>(
        url: &str,
        replace: bool,
        progress: &dyn Progress,
        run: impl FnOnce(&Path) -> Result<R>,
        remap: impl FnOnce(&mut R, &dyn Fn(&Path) -> PathBuf),
    ) -> Result<R> {
        let parsed = tensorfile_remote::store::StoreUrl::parse(url).map_err(remote_error)?;
        let base = url.trim_end_matches('/').to_string();
        let name = parsed
            .key
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .filter(|n| !n.is_empty())
            .unwrap_or("model")
            .to_string();
        let remote = RemoteOptions::default();
        if !replace {
            // A file's object: refused before the work (a set's names are
            // known only once it is made, and checked then).
            refuse_existing(&base, &remote)?;
        }
        let tmp = tensorfile_remote::scratch::Scratch::new()
            .map_err(|e| io_error(&std::env::temp_dir(), e))?;
        let local = tmp.path().join(&name);
        let mut report = run(&local)?;
        publish(&local, &base, replace, &remote, progress)?;
        let local_root = local.clone();
        remap(&mut report, &|p: &Path| match p.strip_prefix(&local_root) {
            Ok(rest) if rest.as_os_str().is_empty() => PathBuf::from(&base),
            Ok(rest) => PathBuf::from(format!("{base}/{}", rest.to_string_lossy())),
            Err(_) => p.to_path_buf(),
        });
        drop(tmp);
        Ok(report)
    }

    /// [`OutputError::Exists`] when `url` is an object.
    fn refuse_existing(url: &str, remote: &RemoteOptions) -> Result<()> {
        if upload::exists(url, remote, WAIT).map_err(remote_error)? {
            return Err(exists(url));
        }
        Ok(())
    }

    /// The local output's files with their URLs: a file alone, or a
    /// directory's files (recursively, no links), indexes last.
    fn files_of(local: &Path, base: &str) -> Result<Vec<(PathBuf, String)>> {
        let meta = std::fs::symlink_metadata(local).map_err(|e| io_error(local, e))?;
        if meta.is_file() {
            return Ok(vec![(local.to_path_buf(), base.to_string())]);
        }
        let mut out = Vec::new();
        let mut dirs = vec![local.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).map_err(|e| io_error(&dir, e))? {
                let entry = entry.map_err(|e| io_error(&dir, e))?;
                let path = entry.path();
                let kind = entry.file_type().map_err(|e| io_error(&path, e))?;
                if kind.is_dir() {
                    dirs.push(path);
                } else if kind.is_file() {
                    let rel = path.strip_prefix(local).unwrap_or(&path);
                    let rel = rel.to_string_lossy().replace('\\', "/");
                    out.push((path, format!("{base}/{rel}")));
                }
            }
        }
        out.sort_by(|a, b| (is_index(&a.1), &a.1).cmp(&(is_index(&b.1), &b.1)));
        Ok(out)
    }

    fn is_index(url: &str) -> bool {
        url.ends_with(".index.json")
    }

    /// Uploads the local output to `base` (see the module's
    /// documentation); on a failure, the objects this run put are removed.
    fn publish(
        local: &Path,
        base: &str,
        replace: bool,
        remote: &RemoteOptions,
        progress: &dyn Progress,
    ) -> Result<()> {
        // A write under way until the objects put are removed on a
        // failure: a signal (the CLI's) waits for that.
        let _busy = tensorfile_remote::interrupt::Busy::new();
        let files = files_of(local, base)?;
        let is_set = std::fs::symlink_metadata(local).is_ok_and(|m| m.is_dir());
        // The indexes a set already there may have: the new one's, or
        // where a set cut into one file had one.
        let new_indexes: Vec<String> = files
            .iter()
            .filter(|(_, u)| is_index(u))
            .map(|(_, u)| u.clone())
            .collect();
        let indexes: Vec<String> = if !is_set {
            Vec::new()
        } else if new_indexes.is_empty() {
            files
                .iter()
                .filter(|(_, u)| u.ends_with(".safetensors"))
                .map(|(_, u)| format!("{u}.index.json"))
                .collect()
        } else {
            new_indexes
        };
        // With `replace`, the old set's shards the new one does not
        // overwrite: removed once the new index is in place.
        let mut stale: Vec<String> = Vec::new();
        if !replace {
            for url in files.iter().map(|(_, u)| u).chain(&indexes) {
                refuse_existing(url, remote)?;
            }
        } else {
            for url in &indexes {
                let old =
                    upload::read_small(url, remote, WAIT, MAX_INDEX_LEN).map_err(remote_error)?;
                if let (Some(old), Some((dir, _))) = (old, url.rsplit_once('/')) {
                    stale.extend(shards_of(&old).map(|name| format!("{dir}/{name}")));
                }
                upload::remove(url, remote, WAIT).map_err(remote_error)?;
            }
        }
        let options = UploadOptions::default().with_if_absent(!replace);
        let total = files
            .iter()
            .map(|(p, _)| std::fs::metadata(p).map_or(0, |m| m.len()))
            .sum();
        progress.stage(&format!("uploading to {base}"), total);
        let mut put: Vec<&str> = Vec::new();
        for (path, url) in &files {
            // What a run killed during this object's upload left.
            let swept = upload::remove_pending(url, WAIT).map_err(remote_error);
            let done = swept.and_then(|_| {
                upload::upload_file(path, url, remote, options.clone(), progress)
                    .map_err(|e| io_error(path, e))
            });
            if let Err(e) = done {
                // A writer that raced in keeps what it put; ours go.
                let raced = matches!(
                    &e,
                    Error::Core(tensorfile_core::Error::Output {
                        problem: OutputError::Exists,
                        ..
                    })
                );
                if !raced {
                    for url in put.iter().rev() {
                        let _ = upload::remove(url, remote, WAIT);
                    }
                }
                return Err(e);
            }
            put.push(url);
        }
        stale.sort();
        stale.dedup();
        for url in stale.iter().filter(|u| !put.contains(&u.as_str())) {
            upload::remove(url, remote, WAIT).map_err(remote_error)?;
        }
        Ok(())
    }

    /// The longest old index read to find its shards (the Hub's largest
    /// are a few MB).
    const MAX_INDEX_LEN: u64 = 64 << 20;

    /// The shard file names an index's `weight_map` gives: plain names of
    /// `.safetensors` files in the index's directory (anything else, in an
    /// index not ours, is left alone).
    fn shards_of(index: &[u8]) -> impl Iterator<Item = String> {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(index).ok();
        let names: Vec<String> = parsed
            .as_ref()
            .and_then(|v| v.get("weight_map"))
            .and_then(|m| m.as_object())
            .map(|m| {
                m.values()
                    .filter_map(|v| v.as_str())
                    .filter(|n| {
                        n.ends_with(".safetensors")
                            && !n.contains(['/', '\\'])
                            && !n.starts_with('.')
                    })
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        names.into_iter()
    }
}
