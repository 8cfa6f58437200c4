//! [`AtomicFile`]: one file written beside its target and put in its place
//! at once.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::target::{self, Target};
use super::temp::{self, Dir, Registration};
use crate::{Error, Result};

/// A file being written for an atomic save, in the target's directory,
/// which [`AtomicFile::commit`] syncs and puts in the target's place.
/// Dropped without a commit (an error, a panic), it is gone and the target
/// is as it was.
///
/// On Linux the file has no name while it is written (`O_TMPFILE`): an
/// interrupted process, even one killed by `SIGKILL`, leaves nothing. The
/// commit links it under a hidden temporary name and renames that over the
/// target. Elsewhere, or where the file system cannot, it is a hidden named
/// temporary; see the [module docs](super) for what removes one left
/// behind.
///
/// ```
/// use std::io::Write;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("out.bin");
/// let out = tensorfile_core::atomic::AtomicFile::create(&path)?;
/// out.file().write_all(b"hello")?;
/// out.commit(true)?;
/// assert_eq!(std::fs::read(&path)?, b"hello");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AtomicFile {
    /// The target as given.
    path: PathBuf,
    /// The name to rename over, in `dir` (a symbolic link's target's).
    name: OsString,
    file: File,
    temp: Temp,
    dir: Arc<Dir>,
}

/// The temporary's state.
#[derive(Debug)]
enum Temp {
    /// No name yet (`O_TMPFILE`).
    #[cfg(target_os = "linux")]
    Anonymous,
    /// A hidden named file.
    Named(Named),
}

/// A hidden named temporary of ours, removed when dropped unless it was
/// renamed away; registered meanwhile, so that a signal handler can remove
/// it (see [`temp::remove_temporaries_on_signal`]).
#[derive(Debug)]
pub(crate) struct Named {
    /// Taken out of the registry first when dropped, before `dir` closes.
    registration: Option<Registration>,
    name: OsString,
    dir: Arc<Dir>,
    /// Whether the file still has this name (not renamed away).
    present: bool,
}

impl Named {
    /// Creates a new temporary file beside `target` in `dir`.
    pub(crate) fn create(dir: &Arc<Dir>, target: &OsStr) -> io::Result<(File, Named)> {
        let mut last = None;
        for _ in 0..16 {
            let name = temp::temp_name(target);
            // Registered before it exists: a signal between the two removes
            // nothing of anyone's (the name is ours alone).
            let registration = Registration::new(dir, &name)?;
            match dir.create_named(&name) {
                Ok(file) => {
                    let named = Named {
                        registration: Some(registration),
                        name,
                        dir: dir.clone(),
                        present: true,
                    };
                    return Ok((file, named));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
    }

    /// Links the unnamed `file` in `dir` under a new temporary name.
    #[cfg(target_os = "linux")]
    fn link(dir: &Arc<Dir>, target: &OsStr, file: &File) -> io::Result<Named> {
        let mut last = None;
        for _ in 0..16 {
            let name = temp::temp_name(target);
            let registration = Registration::new(dir, &name)?;
            match dir.link(file, &name) {
                Ok(()) => {
                    return Ok(Named {
                        registration: Some(registration),
                        name,
                        dir: dir.clone(),
                        present: true,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
    }

    /// The temporary's name in its directory.
    pub(crate) fn name(&self) -> &OsStr {
        &self.name
    }

    /// Renames the temporary over `target`; it has no name of its own
    /// after that.
    pub(crate) fn rename_to(&mut self, target: &OsStr) -> io::Result<()> {
        self.dir.rename(&self.name, target)?;
        self.present = false;
        self.registration = None;
        Ok(())
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        if self.present {
            let _ = self.dir.unlink(&self.name);
        }
        self.registration = None;
    }
}

/// An [`AtomicFile`] whose writing is done, with a hidden name, ready to be
/// renamed over its target ([`AtomicFile::stage`]).
#[derive(Debug)]
pub(crate) struct Staged {
    pub(crate) path: PathBuf,
    pub(crate) name: OsString,
    pub(crate) dir: Arc<Dir>,
    pub(crate) temp: Named,
    /// Device and inode: to remove it again only if it is still ours.
    pub(crate) identity: (u64, u64),
}

impl Staged {
    /// Syncs the staged file, opening it again by its temporary name.
    pub(crate) fn sync(&self) -> Result<()> {
        self.dir
            .open_file(self.temp.name())
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Renames it over the target.
    pub(crate) fn publish(&mut self) -> Result<()> {
        self.temp
            .rename_to(&self.name)
            .map_err(|e| Error::io(&self.path, e))
    }
}

/// How to make the temporary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Unnamed where the system can, else named.
    Best,
    /// Named always (the fallback, chosen for testing).
    #[cfg_attr(not(test), allow(dead_code))]
    Named,
}

impl AtomicFile {
    /// Creates the temporary file for a save to `path`. A new file gets the
    /// mode a plain create gives (0666 less the umask); a replaced file's
    /// permission bits are kept (but never setuid, setgid or sticky). A
    /// symbolic link at `path` is followed: the file it leads to is
    /// replaced, in its own directory, and the link stays. Stale
    /// temporaries of ours in the directory (from a process that died) are
    /// removed first.
    ///
    /// # Errors
    /// The target has no file name; it is a directory, a symbolic link to
    /// one or to nothing, or not a regular file ([`Error::Output`]); or the
    /// temporary cannot be created (the error names the directory).
    pub fn create(path: impl AsRef<Path>) -> Result<AtomicFile> {
        AtomicFile::create_with(path.as_ref(), &mut Vec::new(), Kind::Best)
    }

    /// [`AtomicFile::create`], reusing an open directory from `dirs` when
    /// the target's is there (each directory is opened and swept once), and
    /// adding the one it opens.
    pub(crate) fn create_with(
        path: &Path,
        dirs: &mut Vec<Arc<Dir>>,
        kind: Kind,
    ) -> Result<AtomicFile> {
        let Target { dir, name, mode } = target::resolve(path)?;
        let dir = match dirs.iter().find(|d| d.path == dir) {
            Some(open) => open.clone(),
            None => {
                let open = Arc::new(Dir::open(&dir).map_err(|e| Error::io(&dir, e))?);
                temp::sweep(&open);
                dirs.push(open.clone());
                open
            }
        };
        let (file, temp) = open_temp(&dir, &name, kind).map_err(|e| Error::io(&dir.path, e))?;
        if let Some(mode) = mode {
            target::set_mode(&file, mode).map_err(|e| Error::io(path, e))?;
        }
        Ok(AtomicFile {
            path: path.to_path_buf(),
            name,
            file,
            temp,
            dir,
        })
    }

    /// The file being written (positioned at its start when created).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The target path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes all of `bytes` at offset `at` of the file.
    ///
    /// # Errors
    /// The write fails (the error names the target).
    pub fn write_all_at(&self, bytes: &[u8], at: u64) -> Result<()> {
        write_all_at(&self.file, bytes, at).map_err(|e| Error::io(&self.path, e))
    }

    /// Sets the file's length (zero-filled): writes at any offset then
    /// land inside it.
    ///
    /// # Errors
    /// The system's error, naming the target.
    pub fn set_len(&self, len: u64) -> Result<()> {
        self.file.set_len(len).map_err(|e| Error::io(&self.path, e))
    }

    /// Allocates the file's `len` bytes on disk up front where the file
    /// system can: a full disk is then reported before any work is done,
    /// and writes at any offset skip per-page block reservation (measured:
    /// int4 quantization of 1 GiB wrote its 150 MB in 20-27 ms instead of
    /// 30-37 ms, and replacing that file later costs about half as much).
    /// File systems that cannot allocate ahead are written as before.
    ///
    /// # Errors
    /// The file system has no room (the error names the target).
    pub fn reserve(&self, len: u64) -> Result<()> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let Ok(len) = libc::off_t::try_from(len) else {
                return Ok(()); // the writes will fail with the reason
            };
            if len == 0 {
                return Ok(()); // fallocate refuses an empty range
            }
            loop {
                // SAFETY: a plain system call on a file descriptor we own;
                // it touches no memory of ours.
                if unsafe { libc::fallocate(self.file.as_raw_fd(), 0, 0, len) } == 0 {
                    break;
                }
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => break,
                    _ => return Err(Error::io(&self.path, e)),
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = len;
        Ok(())
    }

    /// Syncs the file (if asked), puts it in the target's place and syncs
    /// the directory (if asked). A new name appears in the directory only
    /// for the instant between the link and the rename (Linux), and the
    /// rename replaces the target in one step.
    ///
    /// # Errors
    /// A sync, the link or the rename fails; the target is then as it was
    /// and the temporary file is gone. (A failure to sync the directory
    /// after the rename is reported too; the target is then new.)
    pub fn commit(self, sync: bool) -> Result<()> {
        let dir = self.dir.clone();
        let mut staged = self.stage(sync)?;
        staged.publish()?;
        if sync {
            // The rename is durable only once the directory entry is.
            dir.sync().map_err(|e| Error::io(&dir.path, e))?;
        }
        Ok(())
    }

    /// Finishes the file: syncs it if asked, and gives an unnamed file a
    /// hidden temporary name, ready to be renamed over the target.
    pub(crate) fn stage(self, sync: bool) -> Result<Staged> {
        let AtomicFile {
            path,
            name,
            file,
            temp,
            dir,
        } = self;
        if sync {
            file.sync_all().map_err(|e| Error::io(&path, e))?;
        }
        let identity = temp::file_identity(&file).map_err(|e| Error::io(&path, e))?;
        let temp = match temp {
            Temp::Named(named) => named,
            #[cfg(target_os = "linux")]
            Temp::Anonymous => Named::link(&dir, &name, &file).map_err(|e| Error::io(&path, e))?,
        };
        drop(file);
        Ok(Staged {
            path,
            name,
            dir,
            temp,
            identity,
        })
    }
}

/// Creates the temporary: unnamed where the system can, unless asked not
/// to (`kind`, or [`temp::named_forced`]).
fn open_temp(dir: &Arc<Dir>, target: &OsStr, kind: Kind) -> io::Result<(File, Temp)> {
    #[cfg(target_os = "linux")]
    if kind == Kind::Best && !temp::named_forced() {
        if let Some(file) = dir.create_anonymous()? {
            return Ok((file, Temp::Anonymous));
        }
    }
    let _ = kind;
    let (file, named) = Named::create(dir, target)?;
    Ok((file, Temp::Named(named)))
}

/// Writes all of `bytes` at offset `at` of `file`.
#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, bytes: &[u8], at: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, at)
}

#[cfg(windows)]
pub(crate) fn write_all_at(file: &File, mut bytes: &[u8], mut at: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !bytes.is_empty() {
        let n = file.seek_write(bytes, at)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
        at += n as u64;
    }
    Ok(())
}
