//! Partial files: a file written over several runs (a download resumed
//! after an interruption) needs a name that outlives the process, which
//! an [`AtomicFile`](super::AtomicFile)'s temporary never has. It is
//! written under [`PartialFile::path`], a hidden name beside the target
//! (`.<target>.tensorfile-partial`, which the sweep of stale temporaries
//! never touches), and put in the target's place at once by
//! [`PartialFile::commit`].
//!
//! The name is predictable, so what is found there is not trusted: every
//! step works relative to the target's directory, opened once (a link
//! planted in the path later changes nothing), never follows a symbolic
//! link at the partial name or its companions, and uses a file found there
//! only when it is a regular file owned by this user (checked on the open
//! file). Anything else is refused ([`OutputError::UnsafePartial`]) and
//! left as it is. A symbolic link at the target itself is replaced by the
//! rename, not followed: the download stays in the target's directory. A
//! directory or anything but a regular file at the target is refused; a
//! replaced file's permission bits are kept.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file::Named;
use super::target::permission_bits;
use super::temp::{file_identity, Dir};
use crate::error::OutputError;
use crate::{Error, Result};

/// The suffix of a partial file's name.
pub const PARTIAL_SUFFIX: &str = ".tensorfile-partial";

/// A file being written over one or more runs, under a hidden name beside
/// its target.
#[derive(Debug)]
pub struct PartialFile {
    target: PathBuf,
    /// The target's directory, held open.
    dir: Arc<Dir>,
    name: OsString,
    partial: OsString,
    mode: Option<u32>,
}

impl PartialFile {
    /// The partial file of a save to `target`, in the target's directory
    /// (opened now; nothing is created yet).
    ///
    /// # Errors
    /// The directory cannot be opened, or a directory or anything but a
    /// regular file or a symbolic link is at the target
    /// ([`Error::Output`]).
    pub fn for_target(target: impl AsRef<Path>) -> Result<PartialFile> {
        let path = target.as_ref();
        let Some(name) = path.file_name() else {
            return Err(Error::io(
                path,
                io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
            ));
        };
        let dir_path = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir = Dir::open(&dir_path).map_err(|e| Error::io(&dir_path, e))?;
        let refuse = |problem| Error::Output {
            path: path.to_path_buf(),
            problem,
        };
        let mode = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(path, e)),
            Ok(m) if m.file_type().is_symlink() => None,
            Ok(m) if m.is_dir() => return Err(refuse(OutputError::Directory)),
            Ok(m) if !m.is_file() => return Err(refuse(OutputError::NotRegular)),
            Ok(m) => Some(permission_bits(&m)),
        };
        let mut partial = OsString::from(".");
        partial.push(name);
        partial.push(PARTIAL_SUFFIX);
        Ok(PartialFile {
            target: path.to_path_buf(),
            dir: Arc::new(dir),
            name: name.to_os_string(),
            partial,
            mode,
        })
    }

    /// Where the partial file is.
    pub fn path(&self) -> PathBuf {
        self.dir.path.join(&self.partial)
    }

    fn companion_name(&self, suffix: &str) -> OsString {
        let mut name = self.partial.clone();
        name.push(".");
        name.push(suffix);
        name
    }

    /// Where a file beside it for a writer's own notes (what has been
    /// written, for resuming) is: `.<target>.tensorfile-partial.<suffix>`.
    pub fn companion(&self, suffix: &str) -> PathBuf {
        self.dir.path.join(self.companion_name(suffix))
    }

    /// Opens `name` in the directory without following a link; only a
    /// regular file of this user passes. `None`: nothing is there (when
    /// not creating).
    fn open_ours(&self, name: &OsStr, write: bool, create: bool) -> Result<Option<File>> {
        let path = self.dir.path.join(name);
        let refuse = |found| Error::Output {
            path: path.clone(),
            problem: OutputError::UnsafePartial { found },
        };
        let file = match self.dir.open_nofollow(name, write, create) {
            Ok(file) => file,
            Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if is_link_refusal(&e) => return Err(refuse("a symbolic link")),
            Err(e) => return Err(Error::io(&path, e)),
        };
        // The open file's own metadata (fstat): no race with a rename.
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        if !meta.is_file() {
            return Err(refuse("not a regular file"));
        }
        if !owned_by_us(&meta) {
            return Err(refuse("a file of another user"));
        }
        Ok(Some(file))
    }

    /// Opens the partial file for reading and writing, creating it if it
    /// does not exist; its bytes are kept.
    ///
    /// # Errors
    /// [`OutputError::UnsafePartial`] when a symbolic link, anything but a
    /// regular file, or another user's file is at its name (it is left as
    /// it is); the file cannot be opened (the error names it).
    pub fn open(&self) -> Result<File> {
        let file = self.open_ours(&self.partial, true, true)?;
        file.ok_or_else(|| Error::io(self.path(), io::ErrorKind::NotFound.into()))
    }

    /// The companion `suffix` ([`PartialFile::companion`]), if it exists
    /// and is at most `limit` bytes long.
    ///
    /// # Errors
    /// As [`PartialFile::open`], for the companion; reading it fails.
    pub fn read_companion(&self, suffix: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let name = self.companion_name(suffix);
        let Some(file) = self.open_ours(&name, false, false)? else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(self.companion(suffix), e))?;
        Ok((bytes.len() as u64 <= limit).then_some(bytes))
    }

    /// Puts `bytes` in the companion `suffix`, atomically: a new file
    /// renamed over the name (a link there is replaced, not followed).
    ///
    /// # Errors
    /// The new file cannot be made, written or renamed; the old companion
    /// is then as it was.
    pub fn write_companion(&self, suffix: &str, bytes: &[u8]) -> Result<()> {
        let name = self.companion_name(suffix);
        let path = self.companion(suffix);
        let (mut file, mut temp) =
            Named::create(&self.dir, &name).map_err(|e| Error::io(&path, e))?;
        file.write_all(bytes).map_err(|e| Error::io(&path, e))?;
        drop(file);
        temp.rename_to(&name).map_err(|e| Error::io(&path, e))
    }

    /// Removes the companion `suffix` (never what a link there leads to),
    /// if it exists.
    ///
    /// # Errors
    /// It exists and cannot be removed.
    pub fn remove_companion(&self, suffix: &str) -> Result<()> {
        self.unlink(&self.companion_name(suffix))
    }

    fn unlink(&self, name: &OsStr) -> Result<()> {
        match self.dir.unlink(name) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(Error::io(self.dir.path.join(name), e))
            }
            _ => Ok(()),
        }
    }

    /// Removes the partial file (and nothing else), if it exists.
    ///
    /// # Errors
    /// It exists and cannot be removed.
    pub fn discard(&self) -> Result<()> {
        self.unlink(&self.partial)
    }

    /// Syncs `file` (the partial file, as [`PartialFile::open`] gave it) if
    /// asked, gives it the replaced file's permission bits, renames it over
    /// the target and syncs the directory (if asked).
    ///
    /// # Errors
    /// A sync or the rename fails, or the partial name no longer holds
    /// `file` (something replaced it meanwhile); the target is then as it
    /// was.
    pub fn commit(&self, file: File, sync: bool) -> Result<()> {
        let path = self.path();
        if sync {
            file.sync_all().map_err(|e| Error::io(&path, e))?;
        }
        if let Some(mode) = self.mode {
            super::target::set_mode(&file, mode).map_err(|e| Error::io(&self.target, e))?;
        }
        let ours = file_identity(&file).map_err(|e| Error::io(&path, e))?;
        drop(file);
        let there = self
            .dir
            .identity(&self.partial)
            .map_err(|e| Error::io(&path, e))?;
        if there != Some(ours) {
            return Err(Error::Output {
                path,
                problem: OutputError::UnsafePartial {
                    found: "another file than the one written",
                },
            });
        }
        self.dir
            .rename(&self.partial, &self.name)
            .map_err(|e| Error::io(&self.target, e))?;
        if sync {
            self.dir.sync().map_err(|e| Error::io(&self.dir.path, e))?;
        }
        Ok(())
    }
}

/// Whether opening without following links failed because of a link
/// (`ELOOP`; `EMLINK` on FreeBSD).
#[cfg(unix)]
fn is_link_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP | libc::EMLINK))
}

#[cfg(not(unix))]
fn is_link_refusal(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Other && e.to_string() == "a symbolic link"
}

/// Whether this user owns the file.
#[cfg(unix)]
fn owned_by_us(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    meta.uid() == unsafe { libc::geteuid() }
}

#[cfg(not(unix))]
fn owned_by_us(_meta: &std::fs::Metadata) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_partial_file_outlives_its_writer_and_replaces_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("model.safetensors");
        std::fs::write(&target, b"old").unwrap();
        let partial = PartialFile::for_target(&target).unwrap();
        assert_eq!(
            partial.path(),
            dir.path().join(".model.safetensors.tensorfile-partial")
        );
        partial.open().unwrap().write_all(b"new ").unwrap();
        // A later run finds the bytes and goes on.
        let partial = PartialFile::for_target(&target).unwrap();
        let mut file = partial.open().unwrap();
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0)).unwrap();
        file.write_all(b"bytes").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        partial.commit(file, true).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new bytes");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_directory_target_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = PartialFile::for_target(dir.path()).unwrap_err();
        assert!(
            matches!(err, Error::Output { .. } | Error::Io { .. }),
            "{err}"
        );
    }
}
