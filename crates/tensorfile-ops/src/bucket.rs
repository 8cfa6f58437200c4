//! Outputs at store URLs (`s3://`, `gs://`, `az://`, `abfss://`): the
//! output is made locally, in a private temporary directory under
//! `TMPDIR`, as it would be anywhere else, and then uploaded: a file as one
//! object, a set's shards first and its index last, so that a reader never
//! sees an index whose shards are missing. Each object is complete or
//! absent ([`tensorfile_remote::upload`]); the temporary directory is
//! removed whatever happens (a run killed by a signal leaves it, and the
//! next run on this machine removes it).
//!
//! The local space needed is the output's size. Without `replace`, an
//! output whose object (or any of the set's names) is already in the
//! bucket is refused before anything is uploaded. With it, a set's old
//! index is removed first, then the shards are replaced and the new index
//! put last: a reader during the replacement finds no index, never an
//! index naming shards of two sets. A replacement is not atomic for
//! concurrent readers.

use std::path::{Path, PathBuf};

use tensorfile::{Error, Result};

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
/// result is then uploaded to `output` (see the module's documentation)
/// and the paths of the report mapped back by `remap`.
///
/// # Errors
/// `run`'s error, or the upload's (naming the object).
pub(crate) fn via_local<R>(
    output: &Path,
    replace: bool,
    run: impl FnOnce(&Path) -> Result<R>,
    remap: impl FnOnce(&mut R, &dyn Fn(&Path) -> PathBuf),
) -> Result<R> {
    let Some(url) = store_url(output) else {
        return run(output);
    };
    imp::via_local(url, replace, run, remap)
}

#[cfg(not(any(feature = "gcs", feature = "azure", feature = "s3-store")))]
mod imp {
    use super::*;

    pub(super) fn via_local<R>(
        url: &str,
        _replace: bool,
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
    use tensorfile_remote::upload::{self, UploadOptions};
    use tensorfile_remote::{Problem, RemoteError, RemoteOptions};

    /// The longest any one request of the upload waits.
    const WAIT: Duration = Duration::from_secs(600);

    fn remote_error(e: RemoteError) -> Error {
        let url = e.url.clone();
        tensorfile_core::Error::io(PathBuf::from(url), e.into_io_unnamed()).into()
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
        publish(&local, &base, replace, &remote)?;
        let local_root = local.clone();
        remap(&mut report, &|p: &Path| match p.strip_prefix(&local_root) {
            Ok(rest) if rest.as_os_str().is_empty() => PathBuf::from(&base),
            Ok(rest) => PathBuf::from(format!("{base}/{}", rest.to_string_lossy())),
            Err(_) => p.to_path_buf(),
        });
        drop(tmp);
        Ok(report)
    }

    /// [`Problem::Exists`] when `url` is an object.
    fn refuse_existing(url: &str, remote: &RemoteOptions) -> Result<()> {
        if upload::exists(url, remote, WAIT).map_err(remote_error)? {
            return Err(remote_error(RemoteError::new(url, Problem::Exists)));
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
    fn publish(local: &Path, base: &str, replace: bool, remote: &RemoteOptions) -> Result<()> {
        let files = files_of(local, base)?;
        if !replace {
            for (_, url) in &files {
                refuse_existing(url, remote)?;
            }
        } else {
            for (_, url) in files.iter().filter(|(_, u)| is_index(u)) {
                upload::remove(url, remote, WAIT).map_err(remote_error)?;
            }
        }
        let options = UploadOptions::default().with_if_absent(!replace);
        let mut put: Vec<&str> = Vec::new();
        for (path, url) in &files {
            // What a run killed during this object's upload left.
            let swept = upload::remove_pending(url, WAIT).map_err(remote_error);
            let done = swept.and_then(|_| {
                upload::upload_file(path, url, remote, options.clone())
                    .map_err(|e| io_error(path, e))
            });
            if let Err(e) = done {
                let exists = matches!(&e, Error::Core(tensorfile_core::Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists);
                if !exists {
                    for url in put.iter().rev() {
                        let _ = upload::remove(url, remote, WAIT);
                    }
                }
                return Err(e);
            }
            put.push(url);
        }
        Ok(())
    }
}
