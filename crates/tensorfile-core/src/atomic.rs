//! Saving to a path, atomically.
//!
//! The file is written to a temporary file in the target's directory, synced,
//! renamed over the target, and the directory synced. Readers see the old
//! file or the new one, never a mix:
//!
//! - Any failure (refused input, a source that errors, a full disk, a panic)
//!   leaves the old file as it was and removes the temporary file.
//! - The rename gives the target a new inode, so a process that has the old
//!   file memory-mapped keeps reading the old bytes.
//! - A new file gets the mode a plain create gives (0666 less the umask); a
//!   replaced file keeps its mode. (A symbolic link at the target is replaced
//!   by the file, as `rename` does; the mode is taken from the link's target.)
//!
//! Syncing ([`WriteOptions::sync`]) can be turned off for speed when
//! durability across a power loss does not matter; the rename cannot.
//!
//! [`AtomicFile`] is that machinery on its own, for any format: the
//! safetensors savers here and other formats' writers use it.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use crate::error::WriteError;
use crate::plan::{claim, lock, Plan, Ranges, Sink, SlotMap};
use crate::writer::{plan_tensors, write_tensors, Layout};
use crate::{Error, Metadata, Result, StreamWriter, TensorData, TensorSpec, WriteOptions};

/// The output of a path-level [`StreamWriter`]: the temporary file, buffered
/// so that many small tensors do not cost a system call each. Pieces at least
/// as large as the buffer go straight to the file.
pub type FileSink = BufWriter<File>;

/// Buffer size of [`FileSink`].
const SINK_BUFFER: usize = 1 << 20;

/// Saves `tensors` and `metadata` as the canonical file at `path`, atomically.
///
/// Tensors may come in any order, as [`TensorRef`](crate::TensorRef)s, the
/// reader's views, or anything else implementing [`TensorData`].
pub fn save<T: TensorData>(
    path: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = T>,
    metadata: Option<&Metadata>,
    options: &WriteOptions,
) -> Result<()> {
    let tensors: Vec<T> = tensors.into_iter().collect();
    let layout = plan_tensors(&tensors, metadata, options)?;
    save_layout(path, layout, options, |w| write_tensors(w, &tensors))
}

/// Saves a file streamed by `body` to `path`, atomically.
///
/// The header for `specs` and `metadata` is written first; `body` then hands
/// over every tensor's bytes in file order (see [`StreamWriter`]). If `body`
/// fails, or leaves a tensor short, nothing at `path` changes.
///
/// ```no_run
/// use tensorfile_core::{save_streaming, Dtype, TensorSpec, WriteOptions};
/// let specs = [TensorSpec::new("x", Dtype::F32, [1 << 20])];
/// save_streaming("x.safetensors", &specs, None, &WriteOptions::default(), |w| {
///     let source = std::fs::File::open("x.bin").map_err(tensorfile_core::Error::Stream)?;
///     w.write_from("x", source)?;
///     Ok(())
/// })?;
/// # Ok::<(), tensorfile_core::Error>(())
/// ```
pub fn save_streaming<F>(
    path: impl AsRef<Path>,
    specs: &[TensorSpec],
    metadata: Option<&Metadata>,
    options: &WriteOptions,
    body: F,
) -> Result<()>
where
    F: FnOnce(&mut StreamWriter<FileSink>) -> Result<()>,
{
    let layout = Layout::new(specs, metadata, options)?;
    save_layout(path, layout, options, body)
}

/// [`save_streaming`] with a layout planned beforehand (`options.sync` is
/// used; the layout carries the rest).
pub fn save_layout<F>(
    path: impl AsRef<Path>,
    layout: Layout,
    options: &WriteOptions,
    body: F,
) -> Result<()>
where
    F: FnOnce(&mut StreamWriter<FileSink>) -> Result<()>,
{
    save_with(
        path.as_ref(),
        layout,
        options.sync,
        |file| BufWriter::with_capacity(SINK_BUFFER, file),
        |sink| sink.into_inner().map_err(|e| e.into_error()),
        body,
    )
}

/// The atomic save, generic over the sink wrapped around the temporary file
/// (the seam tests use to simulate a full disk).
fn save_with<W: Write, F>(
    path: &Path,
    layout: Layout,
    sync: bool,
    wrap: impl FnOnce(File) -> W,
    unwrap: impl FnOnce(W) -> io::Result<File>,
    body: F,
) -> Result<()>
where
    F: FnOnce(&mut StreamWriter<W>) -> Result<()>,
{
    let temp = AtomicFile::create(path)?;
    temp.reserve(layout.file_len())?;
    let at_path = |e: Error| match e {
        Error::Write(WriteError::Output(source)) => Error::io(path, source),
        other => other,
    };
    let file = temp.file.try_clone().map_err(|e| Error::io(path, e))?;
    let mut writer = StreamWriter::new(wrap(file), layout).map_err(at_path)?;
    body(&mut writer).map_err(at_path)?;
    let sink = writer.finish().map_err(at_path)?;
    let file = unwrap(sink).map_err(|e| Error::io(path, e))?;
    drop(file);
    temp.commit(sync)
}

/// A file being written for an atomic save: a temporary file beside the
/// target, which [`AtomicFile::commit`] syncs and renames over the target.
/// Dropped without a commit (an error, a panic), it is removed and the
/// target is left as it was.
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
    path: std::path::PathBuf,
    dir: std::path::PathBuf,
    file: File,
    temp_path: tempfile::TempPath,
}

impl AtomicFile {
    /// Creates the temporary file in the target's directory, with the mode
    /// a plain create gives, or the replaced file's mode.
    ///
    /// # Errors
    /// The target has no file name, or the temporary cannot be created
    /// (the error names the directory).
    pub fn create(path: impl AsRef<Path>) -> Result<AtomicFile> {
        let path = path.as_ref();
        let file_name = path.file_name().ok_or_else(|| {
            Error::io(
                path,
                io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
            )
        })?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let old_permissions = match fs::metadata(path) {
            Ok(meta) => Some(meta.permissions()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(path, e)),
        };
        let mut prefix = OsString::from(".");
        prefix.push(file_name);
        prefix.push(".");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        // tempfile creates files 0600. Asking for 0666 makes open(2) apply the
        // umask (and any default ACL) itself, exactly as for a plain create;
        // this avoids reading the process-wide umask, which cannot be done
        // without briefly changing it under other threads.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(fs::Permissions::from_mode(0o666));
        }
        let temp = builder.tempfile_in(dir).map_err(|e| Error::io(dir, e))?;
        // From here on, dropping `temp_path` (on any error or panic) removes the file.
        let (file, temp_path) = temp.into_parts();
        if let Some(permissions) = old_permissions {
            file.set_permissions(permissions)
                .map_err(|e| Error::io(&*temp_path, e))?;
        }
        Ok(AtomicFile {
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            file,
            temp_path,
        })
    }

    /// The file being written (positioned at its start when created).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The target path.
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

    /// Syncs the file (if asked), renames it over the target and syncs the
    /// directory (if asked).
    ///
    /// # Errors
    /// A sync or the rename fails; the target is then as it was and the
    /// temporary file is removed.
    pub fn commit(self, sync: bool) -> Result<()> {
        let AtomicFile {
            path,
            dir,
            file,
            temp_path,
        } = self;
        let (path, dir) = (path.as_path(), dir.as_path());
        if sync {
            file.sync_all().map_err(|e| Error::io(path, e))?;
        }
        drop(file);
        temp_path
            .persist(path)
            .map_err(|e| Error::io(path, e.error))?;
        if sync {
            // The rename is durable only once the directory entry is.
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io(dir, e))?;
        }
        Ok(())
    }
}

/// Writes tensors' bytes at their places in a planned file, from several
/// threads at once, in any order: each byte of each tensor must be written
/// exactly once. See [`save_positional`].
///
/// Writing from two threads lets two cores copy into the page cache, which
/// is most of the cost of writing a large file whose bytes are at hand; and
/// workers that each produce part of one tensor (rows of a quantized
/// weight) can each write their own part.
pub struct PositionalWriter<'a> {
    file: &'a File,
    layout: &'a Layout,
    /// The byte ranges of each tensor (in file order) written so far.
    written: Vec<Mutex<Ranges>>,
}

impl PositionalWriter<'_> {
    /// The plan being written.
    pub fn layout(&self) -> &Layout {
        self.layout
    }

    /// Writes `bytes` into the tensor at `index` in file order
    /// ([`Layout::slot`]), starting `offset` bytes into the tensor. None of
    /// these bytes may have been written before.
    ///
    /// # Errors
    /// The range is outside the tensor or overlaps bytes already written
    /// ([`WriteError::Overlap`]), or the write fails.
    pub fn write(&self, index: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        if let Some(at) = claim(self.layout, &self.written, index, offset, bytes.len())? {
            write_all_at(self.file, bytes, at).map_err(WriteError::Output)?;
        }
        Ok(())
    }

    /// Checks every tensor is complete.
    fn finish(&self) -> Result<()> {
        for (slot, written) in self.layout.slots().zip(&self.written) {
            let filled = lock(written).total();
            if filled != slot.byte_len() {
                return Err(WriteError::TooShort {
                    tensor: slot.name().to_string(),
                    expected: slot.byte_len(),
                    received: filled,
                }
                .into());
            }
        }
        Ok(())
    }
}

#[cfg(unix)]
fn write_all_at(file: &File, bytes: &[u8], at: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, at)
}

#[cfg(windows)]
fn write_all_at(file: &File, mut bytes: &[u8], mut at: u64) -> io::Result<()> {
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

/// Saves a planned file atomically (as [`save_streaming`] does) with its
/// tensors' bytes given by `body` through a [`PositionalWriter`], which
/// several threads may use at once. Every tensor must be complete when
/// `body` returns; otherwise, or on any error, the target is left as it was.
pub fn save_positional<F>(
    path: impl AsRef<Path>,
    layout: Layout,
    options: &WriteOptions,
    body: F,
) -> Result<()>
where
    F: FnOnce(&PositionalWriter<'_>) -> Result<()>,
{
    let path = path.as_ref();
    let temp = AtomicFile::create(path)?;
    let at_path = |e: Error| match e {
        Error::Write(WriteError::Output(source)) => Error::io(path, source),
        other => other,
    };
    temp.write_all_at(layout.header(), 0)?;
    // The full length up front: writes at any offset then fill the file.
    temp.set_len(layout.file_len())?;
    temp.reserve(layout.file_len())?;
    let writer = PositionalWriter {
        file: &temp.file,
        layout: &layout,
        written: layout.slots().map(|_| Mutex::default()).collect(),
    };
    body(&writer).map_err(at_path)?;
    writer.finish()?;
    temp.commit(options.sync)
}

/// Saves what `plan` produces as the canonical safetensors file at `path`,
/// atomically: the jobs run in parallel, each writing its pieces at their
/// places, and `progress` hears of every byte written. A job's error, or a
/// tensor left incomplete, leaves `path` as it was.
///
/// # Errors
/// The layout is refused (see [`Layout::new`]), a job fails, or writing
/// fails (naming `path`).
pub fn save_plan(
    path: impl AsRef<Path>,
    plan: &Plan<'_>,
    options: &WriteOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<()> {
    let layout = plan.layout(options)?;
    let slots = SlotMap::new(&layout);
    save_positional(path, layout, options, |w| {
        let sink = PlanSink { w, slots: &slots };
        plan.run(&sink, |i| slots.rank(i), progress)
    })
}

/// Maps a plan's tensor indices to the positional writer's slots.
struct PlanSink<'w, 'a> {
    w: &'w PositionalWriter<'a>,
    slots: &'w SlotMap,
}

impl Sink for PlanSink<'_, '_> {
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        let index = self.slots.slot(tensor).ok_or(WriteError::Trailing {
            extra: bytes.len() as u64,
        })?;
        self.w.write(index, offset, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dtype, TensorRef};

    /// A disk that fills up after `room` bytes: short writes, then ENOSPC.
    struct FullDisk {
        file: File,
        room: usize,
    }

    impl Write for FullDisk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.file.write(&buf[..n])
        }
        fn flush(&mut self) -> io::Result<()> {
            self.file.flush()
        }
    }

    fn entries(dir: &Path) -> Vec<OsString> {
        let mut names: Vec<OsString> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_full_disk_leaves_the_old_file_and_no_litter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        fs::write(&path, b"old contents").unwrap();
        let data = vec![7u8; 3 << 20];
        let tensor = TensorRef {
            name: "big",
            dtype: Dtype::U8,
            shape: &[3 << 20],
            data: &data,
        };
        // Fail in the header, in the middle of the data, and one byte short of the end.
        for room in [4, 1 << 20, (3 << 20) + 80 - 1] {
            let tensors = [tensor];
            let layout = plan_tensors(&tensors, None, &WriteOptions::default()).unwrap();
            let err = save_with(
                &path,
                layout,
                true,
                |file| FullDisk { file, room },
                |sink| Ok(sink.file),
                |w| write_tensors(w, &tensors),
            )
            .unwrap_err();
            match &err {
                Error::Io { path: p, source } => {
                    assert_eq!(p, &path);
                    assert_eq!(source.raw_os_error(), Some(28));
                }
                other => panic!("expected an I/O error, got {other:?}"),
            }
            assert_eq!(fs::read(&path).unwrap(), b"old contents");
            assert_eq!(entries(dir.path()), ["m.safetensors"]);
        }
        // With room to spare the same seam saves the file.
        let tensors = [tensor];
        let layout = plan_tensors(&tensors, None, &WriteOptions::default()).unwrap();
        save_with(
            &path,
            layout,
            true,
            |file| FullDisk {
                file,
                room: 4 << 20,
            },
            |sink| Ok(sink.file),
            |w| write_tensors(w, &tensors),
        )
        .unwrap();
        assert_eq!(
            fs::read(&path).unwrap(),
            crate::serialize(tensors, None).unwrap()
        );
        assert_eq!(entries(dir.path()), ["m.safetensors"]);
    }
}
