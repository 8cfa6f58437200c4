//! A private local directory for an output that is made here and then
//! uploaded: `TMPDIR/tensorfile-upload-<host>-<pid>-<n>/`, mode 0700,
//! removed when dropped. A process that handles its own signals removes
//! the process's with [`remove_all`] before it ends; one killed otherwise
//! leaves it, and the next [`Scratch::new`] on the same machine removes
//! those whose process is gone.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The scratch directories of this process that exist now.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes every scratch directory of this process (a process being
/// stopped by a signal, from a thread of its own: not async-signal-safe).
/// The [`Scratch`]es stay valid objects; their directories are gone.
pub fn remove_all() {
    for path in live().drain(..) {
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// The start of a scratch directory's name, before host and PID.
const PREFIX: &str = "tensorfile-upload-";

/// A private temporary directory (see the module's documentation).
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Makes one in `std::env::temp_dir()` (`TMPDIR`), after removing
    /// those of killed processes of this machine.
    ///
    /// # Errors
    /// The directory cannot be made (naming it).
    pub fn new() -> io::Result<Scratch> {
        let dir = std::env::temp_dir();
        let mine = format!("{PREFIX}{}-", host());
        sweep(&dir, &mine);
        let pid = std::process::id();
        for attempt in 0u32..100 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let path = dir.join(format!("{mine}{pid}-{nanos:x}{attempt}"));
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                builder.mode(0o700);
            }
            match builder.create(&path) {
                Ok(()) => {
                    live().push(path.clone());
                    return Ok(Scratch { path });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{}: no free scratch directory name", dir.display()),
        ))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Removed while the list is held: a `remove_all` meanwhile (a
        // signal's thread, which ends the process next) waits for it
        // rather than the process ending with it half done.
        let mut live = live();
        let _ = std::fs::remove_dir_all(&self.path);
        live.retain(|p| *p != self.path);
    }
}

/// This machine's name, made safe for a file name.
fn host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = if rc == 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Removes the scratch directories in `dir` named `mine<pid>-...` whose
/// process is gone.
fn sweep(dir: &Path, mine: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(mine)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if pid > 0 && gone(pid) && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Whether no process has this PID.
fn gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks the PID.
    let rc = unsafe { libc::kill(pid, 0) };
    rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_private_removed_and_swept() {
        let s = Scratch::new().unwrap();
        let path = s.path().to_path_buf();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        std::fs::write(path.join("f"), b"x").unwrap();
        drop(s);
        assert!(!path.exists());
        // One of a process that is gone (no PID is this large on Linux).
        let dead = std::env::temp_dir().join(format!("{PREFIX}{}-999999999-0", host()));
        std::fs::create_dir_all(dead.join("sub")).unwrap();
        let s = Scratch::new().unwrap();
        assert!(!dead.exists());
        drop(s);
    }
}
