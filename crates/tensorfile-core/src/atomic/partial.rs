//! Partial files: a file written over several runs (a download resumed
//! after an interruption) needs a name that outlives the process, which
//! an [`AtomicFile`](super::AtomicFile)'s temporary never has. It is
//! written under [`PartialFile::path`], a hidden name beside the target
//! (`.<target>.tensorfile-partial`, which the sweep of stale temporaries
//! never touches), and put in the target's place at once by
//! [`PartialFile::commit`], with the same rules as every save: a symbolic
//! link at the target is followed, a directory or anything but a regular
//! file is refused, a replaced file's permission bits are kept, and the
//! rename replaces the target in one step.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::target::{self, Target};
use super::temp::Dir;
use crate::{Error, Result};

/// The suffix of a partial file's name.
pub const PARTIAL_SUFFIX: &str = ".tensorfile-partial";

/// A file being written over one or more runs, under a hidden name beside
/// its target.
#[derive(Debug)]
pub struct PartialFile {
    target: PathBuf,
    dir: PathBuf,
    name: OsString,
    partial: OsString,
    mode: Option<u32>,
}

impl PartialFile {
    /// The partial file of a save to `target` (nothing is created yet).
    ///
    /// # Errors
    /// As [`AtomicFile::create`](super::AtomicFile::create): the target is
    /// a directory, a link to one or to nothing, or not a regular file.
    pub fn for_target(target: impl AsRef<Path>) -> Result<PartialFile> {
        let path = target.as_ref();
        let Target { dir, name, mode } = target::resolve(path)?;
        let mut partial = OsString::from(".");
        partial.push(&name);
        partial.push(PARTIAL_SUFFIX);
        Ok(PartialFile {
            target: path.to_path_buf(),
            dir,
            name,
            partial,
            mode,
        })
    }

    /// Where the partial file is.
    pub fn path(&self) -> PathBuf {
        self.dir.join(&self.partial)
    }

    /// A file beside it for a writer's own notes (what has been written,
    /// for resuming): `.<target>.tensorfile-partial.<suffix>`.
    pub fn companion(&self, suffix: &str) -> PathBuf {
        let mut name = self.partial.clone();
        name.push(".");
        name.push(suffix);
        self.dir.join(name)
    }

    /// Opens the partial file for writing, creating it if it does not
    /// exist; its bytes are kept.
    ///
    /// # Errors
    /// The file cannot be opened (the error names it).
    pub fn open(&self) -> Result<File> {
        let path = self.path();
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, e))
    }

    /// Removes the partial file (and nothing else), if it exists.
    ///
    /// # Errors
    /// It exists and cannot be removed.
    pub fn discard(&self) -> Result<()> {
        let path = self.path();
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&path, e)),
            _ => Ok(()),
        }
    }

    /// Syncs the partial file (if asked), gives it the replaced file's
    /// permission bits, renames it over the target and syncs the directory
    /// (if asked).
    ///
    /// # Errors
    /// A sync or the rename fails; the target is then as it was.
    pub fn commit(self, file: File, sync: bool) -> Result<()> {
        let path = self.path();
        if sync {
            file.sync_all().map_err(|e| Error::io(&path, e))?;
        }
        if let Some(mode) = self.mode {
            target::set_mode(&file, mode).map_err(|e| Error::io(&self.target, e))?;
        }
        drop(file);
        let dir = Dir::open(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        dir.rename(&self.partial, &self.name)
            .map_err(|e| Error::io(&self.target, e))?;
        if sync {
            dir.sync().map_err(|e| Error::io(&self.dir, e))?;
        }
        Ok(())
    }
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
