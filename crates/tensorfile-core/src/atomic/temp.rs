//! The temporary files of atomic saves: the target's directory held open,
//! files without a name (Linux `O_TMPFILE`) and named ones, the registry of
//! named ones that a signal handler removes, and the sweep of stale ones.
//!
//! Every step names files relative to the open directory (`openat`,
//! `linkat`, `renameat`, `unlinkat`), so a save finishes in the directory
//! it started in even if the process changes its working directory.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::path::PathBuf;

/// Longest part of the target's name kept in a temporary's name: with our
/// suffix the name stays well under the usual 255-byte limit.
const STEM_MAX: usize = 120;

/// What every temporary name of ours has after the target's name.
const MARK: &str = ".tensorfile-";

/// Length of the random part of a temporary name.
const RANDOM_LEN: usize = 6;

/// Whether saves must use named temporaries: `TENSORFILE_NO_TMPFILE` set to
/// anything but `0` or empty (for testing the fallback where `O_TMPFILE`
/// works). Read at each save.
pub(crate) fn named_forced() -> bool {
    std::env::var_os("TENSORFILE_NO_TMPFILE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// A name for a temporary beside `target`:
/// `.<target>.tensorfile-<pid>-<host>-<random>.tmp`, where `<host>` is
/// eight hex digits identifying this host and PID namespace (so that a
/// sweep never takes a live writer's file for a dead one's). A long target
/// name is shortened: the name stays recognizable and legal.
pub(crate) fn temp_name(target: &OsStr) -> OsString {
    let bytes = target.as_encoded_bytes();
    let stem = match target.to_str() {
        // Text is cut on a character boundary.
        Some(text) => {
            let mut end = text.len().min(STEM_MAX);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            &bytes[..end]
        }
        // Other Unix names are bytes, cut anywhere; elsewhere they are kept.
        None if cfg!(unix) => &bytes[..bytes.len().min(STEM_MAX)],
        None => bytes,
    };
    let mut name = Vec::with_capacity(stem.len() + 48);
    name.push(b'.');
    name.extend_from_slice(stem);
    name.extend_from_slice(
        format!(
            "{MARK}{}-{:08x}-{}.tmp",
            std::process::id(),
            host_tag(),
            random_part()
        )
        .as_bytes(),
    );
    // SAFETY: `name` is ASCII, then `target`'s encoded bytes cut on a
    // character boundary (text), anywhere (Unix, where any bytes are an
    // `OsStr`) or not at all, then ASCII.
    unsafe { OsString::from_encoded_bytes_unchecked(name) }
}

/// The writer's PID, if `name` is one of our temporary names made on this
/// host and PID namespace ([`temp_name`]).
pub(crate) fn temp_name_pid(name: &OsStr) -> Option<u32> {
    let name = name.as_encoded_bytes();
    let rest = name.strip_prefix(b".")?.strip_suffix(b".tmp")?;
    let (rest, random) = rest.split_at(rest.len().checked_sub(RANDOM_LEN + 1)?);
    let random = random.strip_prefix(b"-")?;
    if !random.iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    let (rest, host) = rest.split_at(rest.len().checked_sub(9)?);
    let host = std::str::from_utf8(host.strip_prefix(b"-")?).ok()?;
    if host.len() != 8 || u32::from_str_radix(host, 16).ok()? != host_tag() {
        return None;
    }
    let at = rest
        .windows(MARK.len())
        .rposition(|w| w == MARK.as_bytes())?;
    let pid = std::str::from_utf8(&rest[at + MARK.len()..]).ok()?;
    if at == 0 || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|&p| p > 0)
}

/// Six characters from `[0-9A-Za-z]`, different at each call.
fn random_part() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    let mut x = h.finish();
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..RANDOM_LEN)
        .map(|_| {
            let d = DIGITS[(x % 62) as usize];
            x /= 62;
            d as char
        })
        .collect()
}

/// This host and PID namespace, as a 32-bit FNV-1a hash of the host name
/// and (on Linux) the PID namespace's identity.
fn host_tag() -> u32 {
    static TAG: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *TAG.get_or_init(|| {
        let mut bytes = host_name();
        bytes.push(0);
        if let Ok(ns) = std::fs::read_link("/proc/self/ns/pid") {
            bytes.extend_from_slice(ns.as_os_str().as_encoded_bytes());
        }
        bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
    })
}

#[cfg(unix)]
fn host_name() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Vec::new();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf[..len].to_vec()
}

#[cfg(not(unix))]
fn host_name() -> Vec<u8> {
    std::env::var("COMPUTERNAME")
        .unwrap_or_default()
        .into_bytes()
}

/// Whether the process `pid` is alive (or may be: only a definite "no such
/// process" counts as dead).
#[cfg(unix)]
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    // SAFETY: signal 0 checks the process exists; nothing is delivered.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Removes our temporaries in `dir` whose writer is no longer alive: names
/// of the form [`temp_name`] gives, made on this host and PID namespace,
/// regular files, with a PID that no process has. Nothing else is touched
/// (another program's temporaries, a download's partial file, a live
/// writer's file). Errors are ignored: the sweep is a courtesy.
#[cfg(unix)]
pub(crate) fn sweep(dir: &Dir) {
    let Ok(entries) = std::fs::read_dir(&dir.path) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = temp_name_pid(&name) else {
            continue;
        };
        if pid == me || alive(pid) {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = dir.unlink(&name);
        }
    }
}

#[cfg(not(unix))]
pub(crate) fn sweep(_dir: &Dir) {}

/// The directory of a save's target, held open.
#[derive(Debug)]
pub(crate) struct Dir {
    /// The path it was opened by (for error messages and listing).
    pub(crate) path: PathBuf,
    #[cfg(unix)]
    fd: std::os::fd::OwnedFd,
}

#[cfg(unix)]
mod sys {
    //! The Unix system calls of a save, relative to its directory.

    use std::ffi::{CString, OsStr};
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    use crate::atomic::temp::Dir;

    /// `name` as a C string (a name with a NUL byte cannot exist).
    pub(super) fn c_name(name: &OsStr) -> io::Result<CString> {
        CString::new(name.as_bytes()).map_err(|_| io::ErrorKind::InvalidInput.into())
    }

    /// Retries a call interrupted by a signal; -1 becomes the error.
    fn check(mut call: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
        loop {
            let rc = call();
            if rc != -1 {
                return Ok(rc);
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(e);
            }
        }
    }

    impl Dir {
        /// Opens the directory at `path`.
        pub(crate) fn open(path: &Path) -> io::Result<Dir> {
            let c = c_name(path.as_os_str())?;
            let open = |flags| {
                // SAFETY: `c` is a valid C string for the call's duration.
                check(|| unsafe {
                    libc::open(c.as_ptr(), flags | libc::O_DIRECTORY | libc::O_CLOEXEC)
                })
            };
            let fd = match open(libc::O_RDONLY) {
                Ok(fd) => fd,
                // A directory one may write but not list: enough for every
                // step but syncing it.
                #[cfg(target_os = "linux")]
                Err(e) if e.raw_os_error() == Some(libc::EACCES) => open(libc::O_PATH)?,
                Err(e) => return Err(e),
            };
            Ok(Dir {
                path: path.to_path_buf(),
                // SAFETY: `fd` was just opened and is owned by nothing else.
                fd: unsafe { OwnedFd::from_raw_fd(fd) },
            })
        }

        /// The descriptor (for the signal registry).
        pub(crate) fn raw(&self) -> RawFd {
            self.fd.as_raw_fd()
        }

        /// Syncs the directory: its entries are then durable.
        pub(crate) fn sync(&self) -> io::Result<()> {
            // SAFETY: a system call on a descriptor we own.
            check(|| unsafe { libc::fsync(self.fd.as_raw_fd()) }).map(drop)
        }

        /// Opens `name` in this directory with `flags` (and `mode`, when
        /// they create it): the one `openat` every open here goes through.
        fn open_at(&self, name: &OsStr, flags: libc::c_int) -> io::Result<File> {
            let c = c_name(name)?;
            // SAFETY: `c` is a valid C string and the descriptor is ours.
            let fd = check(|| unsafe {
                libc::openat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    flags,
                    0o666 as libc::c_uint,
                )
            })?;
            // SAFETY: `fd` was just opened and is owned by nothing else.
            Ok(unsafe { File::from_raw_fd(fd) })
        }

        /// Creates the file `name` (which must not exist), readable and
        /// writable, with mode 0666 less the umask.
        pub(crate) fn create_named(&self, name: &OsStr) -> io::Result<File> {
            self.open_at(
                name,
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            )
        }

        /// Opens the existing file `name` for reading (to sync it).
        pub(crate) fn open_file(&self, name: &OsStr) -> io::Result<File> {
            self.open_at(name, libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        }

        /// Opens the file `name` for reading (and writing, if `write`),
        /// creating it if `create` (mode 0666 less the umask), never
        /// following a symbolic link (`ELOOP` then) and never blocking on
        /// a FIFO; what was opened is the caller's to check (`fstat`).
        pub(crate) fn open_nofollow(
            &self,
            name: &OsStr,
            write: bool,
            create: bool,
        ) -> io::Result<File> {
            let mut flags = libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK;
            flags |= if write { libc::O_RDWR } else { libc::O_RDONLY };
            if create {
                flags |= libc::O_CREAT;
            }
            let file = self.open_at(name, flags)?;
            let fd = file.as_raw_fd();
            // Back to blocking I/O (it only mattered for opening a FIFO).
            // SAFETY: fcntl on a descriptor we own.
            let status = check(|| unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
            check(|| unsafe { libc::fcntl(fd, libc::F_SETFL, status & !libc::O_NONBLOCK) })?;
            Ok(file)
        }

        /// Renames `from` to `to`, replacing `to`.
        pub(crate) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
            let (from, to) = (c_name(from)?, c_name(to)?);
            let fd = self.fd.as_raw_fd();
            // SAFETY: valid C strings and our descriptor.
            check(|| unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) }).map(drop)
        }

        /// Removes the file `name`.
        pub(crate) fn unlink(&self, name: &OsStr) -> io::Result<()> {
            let c = c_name(name)?;
            // SAFETY: a valid C string and our descriptor.
            check(|| unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(drop)
        }

        /// The device and inode of `name` (not following a symbolic link),
        /// or `None` if nothing has that name.
        pub(crate) fn identity(&self, name: &OsStr) -> io::Result<Option<(u64, u64)>> {
            let c = c_name(name)?;
            let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
            // SAFETY: `st` is written by a successful call before it is read.
            let rc = check(|| unsafe {
                libc::fstatat(
                    self.fd.as_raw_fd(),
                    c.as_ptr(),
                    st.as_mut_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            });
            match rc {
                Ok(_) => {
                    // SAFETY: the call succeeded, so `st` is initialized.
                    let st = unsafe { st.assume_init() };
                    #[allow(clippy::unnecessary_cast)] // the types differ across platforms
                    Ok(Some((st.st_dev as u64, st.st_ino as u64)))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        }

        /// Creates a file without a name in the directory (`O_TMPFILE`),
        /// with mode 0666 less the umask; `None` where the kernel or the
        /// file system cannot, or where it could not be given a name later
        /// (no `/proc/self/fd` to link it through).
        #[cfg(target_os = "linux")]
        pub(crate) fn create_anonymous(&self) -> io::Result<Option<File>> {
            static PROC_FD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            if !*PROC_FD.get_or_init(|| Path::new("/proc/self/fd").is_dir()) {
                return Ok(None);
            }
            let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC;
            // SAFETY: a constant C string and our descriptor.
            let fd = check(|| unsafe {
                libc::openat(
                    self.fd.as_raw_fd(),
                    c".".as_ptr(),
                    flags,
                    0o666 as libc::c_uint,
                )
            });
            match fd {
                // SAFETY: `fd` was just opened and is owned by nothing else.
                Ok(fd) => Ok(Some(unsafe { File::from_raw_fd(fd) })),
                // No O_TMPFILE in this kernel (EISDIR: it saw O_DIRECTORY
                // alone) or this file system (EOPNOTSUPP).
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EISDIR | libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS)
                    ) =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        }

        /// Gives the unnamed `file` the name `name` in the directory:
        /// `linkat` with `AT_EMPTY_PATH` (which needs CAP_DAC_READ_SEARCH),
        /// else through `/proc/self/fd/N` (which needs `/proc`).
        #[cfg(target_os = "linux")]
        pub(crate) fn link(&self, file: &File, name: &OsStr) -> io::Result<()> {
            let c = c_name(name)?;
            let dir = self.fd.as_raw_fd();
            // SAFETY: valid C strings and descriptors we own.
            let direct = check(|| unsafe {
                libc::linkat(
                    file.as_raw_fd(),
                    c"".as_ptr(),
                    dir,
                    c.as_ptr(),
                    libc::AT_EMPTY_PATH,
                )
            });
            match direct {
                Ok(_) => return Ok(()),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT | libc::EPERM | libc::EINVAL)
                    ) => {}
                Err(e) => return Err(e),
            }
            let proc = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: as above.
            check(|| unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    proc.as_ptr(),
                    dir,
                    c.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            })
            .map(drop)
        }
    }
}

#[cfg(not(unix))]
impl Dir {
    pub(crate) fn open(path: &std::path::Path) -> io::Result<Dir> {
        if !std::fs::metadata(path)?.is_dir() {
            return Err(io::ErrorKind::NotFound.into());
        }
        Ok(Dir {
            path: path.to_path_buf(),
        })
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        Ok(()) // directories cannot be opened for syncing here
    }

    pub(crate) fn create_named(&self, name: &OsStr) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.path.join(name))
    }

    pub(crate) fn open_file(&self, name: &OsStr) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path.join(name))
    }

    pub(crate) fn open_nofollow(
        &self,
        name: &OsStr,
        write: bool,
        create: bool,
    ) -> io::Result<File> {
        let path = self.path.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(io::Error::other("a symbolic link"));
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .create(create)
            .truncate(false)
            .open(path)
    }

    pub(crate) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        std::fs::rename(self.path.join(from), self.path.join(to))
    }

    pub(crate) fn unlink(&self, name: &OsStr) -> io::Result<()> {
        std::fs::remove_file(self.path.join(name))
    }

    pub(crate) fn identity(&self, name: &OsStr) -> io::Result<Option<(u64, u64)>> {
        match std::fs::symlink_metadata(self.path.join(name)) {
            Ok(_) => Ok(Some((0, 0))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The device and inode of an open file.
#[cfg(unix)]
pub(crate) fn file_identity(file: &File) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
pub(crate) fn file_identity(_file: &File) -> io::Result<(u64, u64)> {
    Ok((0, 0))
}

pub(crate) use registry::{remove_registered, Registration};

#[cfg(unix)]
mod registry {
    //! The process-wide list of named temporaries that exist right now, in
    //! a form a signal handler can walk without locks or allocation.
    //!
    //! Nodes are never freed (a node whose entry is taken out is reused), so
    //! the handler may walk the list while other threads change it. An
    //! entry is freed only when no handler has started: a handler sets
    //! `DYING` before reading entries, and the process ends after it.

    use std::ffi::{CString, OsStr};
    use std::io;
    use std::ptr;
    use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::SeqCst};

    use crate::atomic::temp::Dir;

    /// One named temporary: its directory's descriptor and its name.
    struct Entry {
        dir: libc::c_int,
        name: CString,
    }

    struct Node {
        entry: AtomicPtr<Entry>,
        /// Set before the node is published, never changed after.
        next: *mut Node,
    }

    /// The list's first node.
    static HEAD: AtomicPtr<Node> = AtomicPtr::new(ptr::null_mut());

    /// A handler has started removing entries (the process is ending).
    static DYING: AtomicBool = AtomicBool::new(false);

    /// A registered temporary; dropping it takes the entry out (it does
    /// not remove the file). Drop it before closing the directory.
    pub(crate) struct Registration {
        node: &'static Node,
    }

    // SAFETY: a `Registration` only touches its node through atomics.
    unsafe impl Send for Registration {}
    // SAFETY: as above; `&Registration` gives no access at all.
    unsafe impl Sync for Registration {}

    impl std::fmt::Debug for Registration {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Registration")
        }
    }

    impl Registration {
        /// Registers the temporary `name` in `dir`, which must stay open
        /// while the registration lives.
        pub(crate) fn new(dir: &Dir, name: &OsStr) -> io::Result<Registration> {
            let entry = Box::into_raw(Box::new(Entry {
                dir: dir.raw(),
                name: crate::atomic::temp::sys::c_name(name)?,
            }));
            let mut node = HEAD.load(SeqCst);
            while !node.is_null() {
                // SAFETY: nodes are leaked, never freed: the pointer is valid.
                let n: &'static Node = unsafe { &*node };
                if n.entry
                    .compare_exchange(ptr::null_mut(), entry, SeqCst, SeqCst)
                    .is_ok()
                {
                    return Ok(Registration { node: n });
                }
                node = n.next;
            }
            let mut head = HEAD.load(SeqCst);
            // Leaked: nodes live as long as the process.
            let node = Box::into_raw(Box::new(Node {
                entry: AtomicPtr::new(entry),
                next: head,
            }));
            loop {
                match HEAD.compare_exchange(head, node, SeqCst, SeqCst) {
                    // SAFETY: leaked, so valid for the rest of the process.
                    Ok(_) => {
                        return Ok(Registration {
                            node: unsafe { &*node },
                        })
                    }
                    Err(now) => {
                        head = now;
                        // SAFETY: not yet published: ours alone.
                        unsafe { (*node).next = now };
                    }
                }
            }
        }
    }

    impl Drop for Registration {
        fn drop(&mut self) {
            let entry = self.node.entry.swap(ptr::null_mut(), SeqCst);
            // A handler that began before the swap may be reading the
            // entry: then leave it (the process is ending anyway).
            if !entry.is_null() && !DYING.load(SeqCst) {
                // SAFETY: the entry came from `Box::into_raw`, and no one
                // else can reach it any more.
                drop(unsafe { Box::from_raw(entry) });
            }
        }
    }

    /// Removes every registered temporary. Async-signal-safe: atomics and
    /// `unlinkat` only; meant for a signal handler, after which the
    /// process must end (registrations are no longer freed).
    pub(crate) fn remove_registered() {
        DYING.store(true, SeqCst);
        let mut node = HEAD.load(SeqCst);
        while !node.is_null() {
            // SAFETY: nodes are never freed.
            let n = unsafe { &*node };
            let entry = n.entry.load(SeqCst);
            if !entry.is_null() {
                // SAFETY: entries are not freed once DYING is set, and this
                // one was not freed before (it was still in its node after
                // DYING was set).
                let e = unsafe { &*entry };
                // SAFETY: a C string and a descriptor; a failure is ignored.
                unsafe { libc::unlinkat(e.dir, e.name.as_ptr(), 0) };
            }
            node = n.next;
        }
    }
}

#[cfg(not(unix))]
mod registry {
    //! No signals to clean up after here: registrations do nothing.

    use std::ffi::OsStr;
    use std::io;

    use crate::atomic::temp::Dir;

    #[derive(Debug)]
    pub(crate) struct Registration;

    impl Registration {
        pub(crate) fn new(_dir: &Dir, _name: &OsStr) -> io::Result<Registration> {
            Ok(Registration)
        }
    }

    pub(crate) fn remove_registered() {}
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the named
/// temporaries of saves in progress, then end the process by the same
/// signal (its default action), so the exit status says what happened.
/// A signal that is ignored, or has a handler already, is left as it is
/// (`nohup` keeps working). See the [module docs](super).
///
/// # Errors
/// The system refuses to install a handler.
#[cfg(unix)]
pub fn remove_temporaries_on_signal() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction with valid pointers; the handler only does
        // async-signal-safe things.
        unsafe {
            let mut old = std::mem::zeroed::<libc::sigaction>();
            if libc::sigaction(sig, ptr_null(), &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            if old.sa_sigaction != libc::SIG_DFL {
                continue;
            }
            let mut new = std::mem::zeroed::<libc::sigaction>();
            new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut new.sa_mask);
            for other in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut new.sa_mask, other);
            }
            if libc::sigaction(sig, &new, ptr_null()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

#[cfg(unix)]
fn ptr_null() -> *mut libc::sigaction {
    std::ptr::null_mut()
}

/// The handler: remove the temporaries, restore the default action, and
/// raise the signal again (delivered when the handler returns).
#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    remove_registered();
    // SAFETY: signal and raise are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Does nothing where there are no such signals.
#[cfg(not(unix))]
pub fn remove_temporaries_on_signal() -> io::Result<()> {
    Ok(())
}

/// Removes the named temporaries of every save in progress in this process
/// (see [`remove_temporaries_on_signal`]), for a program that handles
/// signals itself. Async-signal-safe; the saves in progress then fail or
/// leave nothing, and the program must end soon after (what this removes
/// is no longer freed).
pub fn remove_temporaries() {
    remove_registered();
}

#[cfg(test)]
mod tests {
    use crate::atomic::temp::*;

    #[test]
    fn names_are_ours_and_parsed_back() {
        let name = temp_name(OsStr::new("model.safetensors"));
        let text = name.to_str().unwrap();
        assert!(text.starts_with(".model.safetensors.tensorfile-"), "{text}");
        assert!(text.ends_with(".tmp"), "{text}");
        assert_eq!(temp_name_pid(&name), Some(std::process::id()));
        assert_ne!(name, temp_name(OsStr::new("model.safetensors")));
        // A long name is shortened, on a character boundary.
        let long = "é".repeat(200);
        let name = temp_name(OsStr::new(&long));
        assert!(name.len() < 200, "{}", name.len());
        assert_eq!(temp_name_pid(&name), Some(std::process::id()));
    }

    #[test]
    fn other_names_are_not_ours() {
        let tag = format!("{:08x}", host_tag());
        let other_host = format!("{:08x}", host_tag() ^ 1);
        for name in [
            "model.safetensors".to_string(),
            ".model.safetensors.tmp".to_string(),
            ".model.safetensors.a1b2c3.tmp".to_string(), // tempfile's names
            ".model.safetensors.part".to_string(),
            "model.safetensors.tensorfile-12-{tag}-abcdef.tmp".replace("{tag}", &tag),
            format!(".m.tensorfile-12-{other_host}-abcdef.tmp"),
            format!(".m.tensorfile-12-{tag}-abcde.tmp"),
            format!(".m.tensorfile-12-{tag}-abc.ef.tmp"),
            format!(".m.tensorfile--{tag}-abcdef.tmp"),
            format!(".m.tensorfile-0-{tag}-abcdef.tmp"),
            format!(".m.tensorfile-1x-{tag}-abcdef.tmp"),
            format!(".tensorfile-12-{tag}-abcdef.tmp"),
            format!(".m.tensorfile-12-{tag}-abcdef.tmp.part"),
        ] {
            assert_eq!(temp_name_pid(OsStr::new(&name)), None, "{name}");
        }
        let ours = format!(".m.tensorfile-12-{tag}-abcdef.tmp");
        assert_eq!(temp_name_pid(OsStr::new(&ours)), Some(12));
    }

    #[cfg(unix)]
    #[test]
    fn the_sweep_takes_only_dead_writers_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        // A PID no process has: a child that has exited and been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let tag = format!("{:08x}", host_tag());
        let me = std::process::id();
        let stale = format!(".m.safetensors.tensorfile-{dead}-{tag}-abcdef.tmp");
        let keep = [
            format!(".m.safetensors.tensorfile-{me}-{tag}-abcdef.tmp"), // alive: us
            format!(".m.safetensors.tensorfile-1-{tag}-abcdef.tmp"),    // alive: init
            format!(
                ".m.safetensors.tensorfile-{dead}-{:08x}-abcdef.tmp",
                host_tag() ^ 1
            ),
            format!(".m.safetensors.tensorfile-{dead}-{tag}-abcdef.tmp.part"),
            ".m.safetensors.Xy12Ab.tmp".to_string(),
            ".m.safetensors.part".to_string(),
            "m.safetensors".to_string(),
        ];
        for name in keep.iter().chain([&stale]) {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        // A directory with a stale name is not a file of ours.
        let stale_dir = format!(".d.tensorfile-{dead}-{tag}-abcdef.tmp");
        std::fs::create_dir(dir.path().join(&stale_dir)).unwrap();
        sweep(&Dir::open(dir.path()).unwrap());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected: Vec<String> = keep.to_vec();
        expected.push(stale_dir);
        expected.sort();
        assert_eq!(left, expected);
    }
}
