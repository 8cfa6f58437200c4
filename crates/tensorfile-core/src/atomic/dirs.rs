//! Output directories a save creates, removed again if the save fails: a
//! failed set leaves no new directory behind, and an existing one as it
//! was.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The directories [`NewDirs::create`] made for an output directory,
/// removed again (each only while empty) when dropped, unless
/// [`NewDirs::keep`] is called.
///
/// ```
/// use tensorfile_core::atomic::NewDirs;
/// let tmp = tempfile::tempdir()?;
/// let out = tmp.path().join("a/b");
/// drop(NewDirs::create(&out)?); // the save failed: a and a/b go again
/// assert!(!tmp.path().join("a").exists());
/// NewDirs::create(&out)?.keep(); // it succeeded: they stay
/// assert!(out.is_dir());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "dropping it removes the directories it made"]
pub struct NewDirs {
    /// Made here, innermost first.
    made: Vec<PathBuf>,
}

impl NewDirs {
    /// Creates `dir` and any missing parent, remembering only the ones
    /// made here (not those another process made meanwhile).
    ///
    /// # Errors
    /// A directory cannot be made, or `dir` is not a directory.
    pub fn create(dir: &Path) -> Result<NewDirs> {
        let missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
            .collect();
        let mut made = NewDirs { made: Vec::new() };
        for d in missing.iter().rev() {
            match std::fs::create_dir(d) {
                Ok(()) => made.made.insert(0, d.to_path_buf()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(d, e)),
            }
        }
        if !dir.is_dir() {
            return Err(Error::io(
                dir,
                io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
            ));
        }
        Ok(made)
    }

    /// The save succeeded: the directories stay.
    pub fn keep(mut self) {
        self.made.clear();
    }
}

impl Drop for NewDirs {
    fn drop(&mut self) {
        // Innermost first; remove_dir refuses a directory that is not
        // empty, so anything another process put there stays.
        for d in &self.made {
            let _ = std::fs::remove_dir(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_it_made_goes_and_only_when_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let old = tmp.path().join("old");
        std::fs::create_dir(&old).unwrap();
        drop(NewDirs::create(&old.join("x/y")).unwrap());
        assert!(old.is_dir() && !old.join("x").exists());
        let made = NewDirs::create(&old.join("x/y")).unwrap();
        std::fs::write(old.join("x/other"), b"kept").unwrap();
        drop(made);
        assert!(old.join("x/other").exists() && !old.join("x/y").exists());
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(NewDirs::create(&file).is_err());
    }
}
