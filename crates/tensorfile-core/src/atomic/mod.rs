//! Saving to a path, atomically.
//!
//! A save writes a temporary file in the target's directory, syncs it,
//! renames it over the target and syncs the directory. Readers see the old
//! file or the new one, never a mix, and nothing else is left:
//!
//! - Any failure (refused input, a source that errors, a full disk, a panic)
//!   leaves the old file as it was and no temporary file.
//! - On Linux the temporary file has no name while it is written
//!   (`O_TMPFILE`): an interrupted process, even one killed by `SIGKILL`,
//!   leaves nothing, whatever the file's size. At the commit it is linked
//!   under a hidden name and renamed over the target at once, so a name
//!   exists only for that instant.
//! - Where that is not possible (other systems; file systems without
//!   `O_TMPFILE`; no `/proc/self/fd` to link through; or
//!   `TENSORFILE_NO_TMPFILE=1` in the environment, for testing), the
//!   temporary is a hidden file named
//!   `.<target>.tensorfile-<pid>-<host>-<random>.tmp`. A program that
//!   calls [`remove_temporaries_on_signal`] has it removed on SIGINT,
//!   SIGTERM and SIGHUP (the process then ends by that signal); one left by
//!   a process that died otherwise is removed by the next save to that
//!   directory, by its name and only once no process has its PID. No other
//!   file is ever touched: not another program's temporaries, nor a
//!   download's partial file.
//! - The rename gives the target a new inode, so a process that has the old
//!   file open or memory-mapped keeps reading the old bytes.
//! - A new file gets the mode a plain create gives (0666 less the umask); a
//!   replaced file keeps its permission bits, never setuid, setgid or
//!   sticky.
//! - A symbolic link at the target is followed: the file it leads to is
//!   replaced, atomically, in its own directory, and the link stays. A
//!   link to a directory or to nothing is refused ([`Error::Output`]), as
//!   is a directory, a FIFO, a socket or a device at the target.
//!
//! Syncing ([`WriteOptions::sync`]) can be turned off for speed when
//! durability across a power loss does not matter; the rename cannot.
//!
//! [`AtomicFile`] is that machinery on its own, for any format: the
//! safetensors savers here and other formats' writers use it.
//! [`AtomicSet`] commits several files together (shards, then their
//! index): all of them or none. [`check_not_input`] refuses an output that
//! is one of the inputs. [`PartialFile`] is a file written over several
//! runs (a resumed download) under a hidden name of its own, committed the
//! same way.

mod dirs;
mod file;
mod partial;
mod set;
mod target;
mod temp;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

pub use dirs::NewDirs;
use file::write_all_at;
pub use file::AtomicFile;
pub use partial::{PartialFile, PARTIAL_SUFFIX};
pub use set::AtomicSet;
pub use target::check_not_input;
#[cfg(test)]
pub(crate) use temp::temp_name;
pub use temp::{remove_temporaries, remove_temporaries_on_signal};

use crate::error::WriteError;
use crate::plan::{claim, lock, Plan, Ranges, Sink, SlotMap};
use crate::progress::Progress;
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
///
/// # Errors
///
/// [`Error::Write`] when the tensors cannot be planned (duplicate or
/// reserved names, a byte length that does not match dtype and shape, a
/// header over the cap), and [`Error::Io`] when the temporary file cannot
/// be created, written, synced or renamed onto `path`.
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
/// # Errors
///
/// [`Error::Write`] when `specs` cannot be planned or `body` writes out of
/// order, too much or too little; [`Error::Io`] when the file cannot be
/// written or committed; any error `body` returns, unchanged.
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
///
/// # Errors
///
/// As [`save_streaming`], without the planning errors: [`Error::Write`]
/// when `body` breaks the layout, [`Error::Io`] on the file, or `body`'s
/// own error.
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
    let file = temp.file().try_clone().map_err(|e| Error::io(path, e))?;
    let mut writer = StreamWriter::new(wrap(file), layout).map_err(at_path)?;
    body(&mut writer).map_err(at_path)?;
    let sink = writer.finish().map_err(at_path)?;
    let file = unwrap(sink).map_err(|e| Error::io(path, e))?;
    drop(file);
    temp.commit(sync)
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

    /// Copies `len` bytes of `source` from byte `at` into the tensor at
    /// `index` in file order, `offset` bytes into it, as
    /// [`PositionalWriter::write`] of them would, within the kernel where
    /// it can (`copy_file_range` on Linux).
    ///
    /// # Errors
    /// As [`PositionalWriter::write`]; a read of `source` that fails or
    /// ends early (naming its file).
    pub fn copy_file(
        &self,
        index: usize,
        offset: u64,
        source: &crate::source::FileSource,
        at: u64,
        len: u64,
    ) -> Result<()> {
        let Ok(n) = usize::try_from(len) else {
            return Err(WriteError::DataTooLarge {
                tensor: String::new(),
            }
            .into());
        };
        match claim(self.layout, &self.written, index, offset, n)? {
            Some(to) => copy_range(source, at, self.file, to, len),
            None => Ok(()),
        }
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

/// Saves a planned file atomically (as [`save_streaming`] does) with its
/// tensors' bytes given by `body` through a [`PositionalWriter`], which
/// several threads may use at once. Every tensor must be complete when
/// `body` returns; otherwise, or on any error, the target is left as it was.
///
/// # Errors
///
/// [`Error::Write`] when a tensor is left incomplete or written out of its
/// slot, [`Error::Io`] when the temporary file cannot be created, written
/// or committed, or any error `body` returns.
pub fn save_positional<F>(
    path: impl AsRef<Path>,
    layout: Layout,
    options: &WriteOptions,
    body: F,
) -> Result<()>
where
    F: FnOnce(&PositionalWriter<'_>) -> Result<()>,
{
    let temp = AtomicFile::create(path)?;
    write_positional(&temp, layout, body)?;
    temp.commit(options.sync)
}

/// Writes a planned file into `file` as [`save_positional`] does, without
/// committing it: the caller commits it, alone or in an [`AtomicSet`].
/// The file's space is reserved up front.
///
/// # Errors
/// As [`save_positional`]; `file` should then be dropped.
pub fn write_positional<F>(file: &AtomicFile, layout: Layout, body: F) -> Result<()>
where
    F: FnOnce(&PositionalWriter<'_>) -> Result<()>,
{
    let path = file.path();
    positional_into(file, layout, |w| body(w).map_err(|e| at_path(path, e)))
}

/// [`write_positional`] with a body whose error is any that the core's
/// converts into, passed through as it is (the body names the file in its
/// own write errors: see [`PlanSink`]).
fn positional_into<E, F>(file: &AtomicFile, layout: Layout, body: F) -> Result<(), E>
where
    E: From<Error>,
    F: FnOnce(&PositionalWriter<'_>) -> Result<(), E>,
{
    file.write_all_at(layout.header(), 0)?;
    // The full length up front: writes at any offset then fill the file.
    file.set_len(layout.file_len())?;
    file.reserve(layout.file_len())?;
    let writer = PositionalWriter {
        file: file.file(),
        layout: &layout,
        written: layout.slots().map(|_| Mutex::default()).collect(),
    };
    body(&writer)?;
    Ok(writer.finish()?)
}

/// A failed write to the output names the file being written.
fn at_path(path: &Path, e: Error) -> Error {
    match e {
        Error::Write(WriteError::Output(source)) => Error::io(path, source),
        other => other,
    }
}

/// Saves what `plan` produces as the canonical safetensors file at `path`,
/// atomically: the jobs run in parallel, each writing its pieces at their
/// places, and `progress` hears of every byte written. A job's error, or a
/// tensor left incomplete, leaves `path` as it was.
///
/// # Errors
/// The layout is refused (see [`Layout::new`]), a job fails, or writing
/// fails (naming `path`).
pub fn save_plan<E: From<Error> + Send>(
    path: impl AsRef<Path>,
    plan: &Plan<'_, E>,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<(), E> {
    // A refused layout creates nothing.
    let layout = plan.layout(options)?;
    let temp = AtomicFile::create(path)?;
    write_layout_plan(&temp, layout, plan, progress)?;
    Ok(temp.commit(options.sync)?)
}

/// Writes what `plan` produces into `file` as [`save_plan`] does, without
/// committing it: the caller commits it, alone or in an [`AtomicSet`]
/// (the shards of a set, say).
///
/// # Errors
/// As [`save_plan`]; `file` should then be dropped.
pub fn write_plan<E: From<Error> + Send>(
    file: &AtomicFile,
    plan: &Plan<'_, E>,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<(), E> {
    write_layout_plan(file, plan.layout(options)?, plan, progress)
}

fn write_layout_plan<E: From<Error> + Send>(
    file: &AtomicFile,
    layout: Layout,
    plan: &Plan<'_, E>,
    progress: &dyn Progress,
) -> Result<(), E> {
    let slots = SlotMap::new(&layout);
    positional_into(file, layout, |w| {
        let sink = PlanSink {
            w,
            slots: &slots,
            path: file.path(),
        };
        plan.run(&sink, |i| slots.rank(i), progress)
    })
}

/// Writes what `plan` produces into several files at once, committing none
/// (the caller commits them, in an [`AtomicSet`]): tensor `i` of the plan
/// goes to `files[part_of[i]]`, each file holding its tensors in the
/// canonical layout with `metadata`. The jobs run once, in parallel, each
/// piece going to its file (a job whose tensors land in two files writes
/// both).
///
/// # Errors
/// `part_of` does not give every tensor a file, a layout is refused, a job
/// fails, or writing fails (naming the file).
pub fn write_plan_parts<E: From<Error> + Send>(
    files: &[AtomicFile],
    plan: &Plan<'_, E>,
    part_of: &[usize],
    metadata: Option<&Metadata>,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<(), E> {
    let specs = plan.specs();
    if part_of.len() != specs.len() || part_of.iter().any(|&k| k >= files.len()) {
        return Err(Error::Stream(io::Error::other(format!(
            "invalid split: {} tensors, {} assignments into {} files",
            specs.len(),
            part_of.len(),
            files.len()
        )))
        .into());
    }
    // Each file's declarations, and each plan tensor's place among them.
    let mut decls: Vec<Vec<TensorSpec>> = vec![Vec::new(); files.len()];
    let mut local = Vec::with_capacity(specs.len());
    for (spec, &k) in specs.iter().zip(part_of) {
        local.push(decls[k].len());
        decls[k].push(spec.clone());
    }
    let mut layouts = Vec::with_capacity(files.len());
    for d in &decls {
        layouts.push(Layout::new(d, metadata, options)?);
    }
    let slot_maps: Vec<SlotMap> = layouts.iter().map(SlotMap::new).collect();
    for (file, layout) in files.iter().zip(&layouts) {
        file.write_all_at(layout.header(), 0)?;
        file.set_len(layout.file_len())?;
        file.reserve(layout.file_len())?;
    }
    let writers: Vec<PositionalWriter<'_>> = files
        .iter()
        .zip(&layouts)
        .map(|(file, layout)| PositionalWriter {
            file: file.file(),
            layout,
            written: layout.slots().map(|_| Mutex::default()).collect(),
        })
        .collect();
    let sink = PartsSink {
        writers: &writers,
        files,
        slot_maps: &slot_maps,
        part_of,
        local: &local,
    };
    let rank = |i: usize| {
        let k = part_of[i];
        ((k as u64) << 32) | slot_maps[k].rank(local[i]).min(u32::MAX as u64)
    };
    plan.run(&sink, rank, progress)?;
    for (w, file) in writers.iter().zip(files) {
        if let Err(e) = w.finish() {
            return Err(e.at(file.path()).into());
        }
    }
    Ok(())
}

/// Routes a plan's tensors to the writers of several files.
struct PartsSink<'s, 'a> {
    writers: &'s [PositionalWriter<'a>],
    files: &'s [AtomicFile],
    slot_maps: &'s [SlotMap],
    part_of: &'s [usize],
    local: &'s [usize],
}

impl PartsSink<'_, '_> {
    /// The part that holds `tensor` and the tensor's slot in it; a tensor
    /// no part holds is `len` bytes too many.
    fn place(&self, tensor: usize, len: u64) -> Result<(usize, usize), Error> {
        let trailing = || Error::from(WriteError::Trailing { extra: len });
        let k = *self.part_of.get(tensor).ok_or_else(trailing)?;
        let j = *self.local.get(tensor).ok_or_else(trailing)?;
        let index = self.slot_maps[k].slot(j).ok_or_else(trailing)?;
        Ok((k, index))
    }
}

impl<E: From<Error>> Sink<E> for PartsSink<'_, '_> {
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<(), E> {
        let (k, index) = self.place(tensor, bytes.len() as u64)?;
        self.writers[k]
            .write(index, offset, bytes)
            .map_err(|e| at_path(self.files[k].path(), e).into())
    }

    fn copy_file(
        &self,
        tensor: usize,
        offset: u64,
        source: &crate::source::FileSource,
        at: u64,
        len: u64,
    ) -> Result<(), E> {
        let (k, index) = self.place(tensor, len)?;
        self.writers[k]
            .copy_file(index, offset, source, at, len)
            .map_err(|e| at_path(self.files[k].path(), e).into())
    }
}

/// Copies `len` bytes of `source` at `at` to `out` at `to`: in the kernel
/// with `copy_file_range` on Linux, falling back to reads and writes where
/// the file systems refuse it.
fn copy_range(
    source: &crate::source::FileSource,
    mut at: u64,
    out: &File,
    mut to: u64,
    mut len: u64,
) -> Result<()> {
    use crate::source::ByteSource;
    let named = |e| Error::io(source.path(), e);
    #[cfg(target_os = "linux")]
    while len > 0 {
        use std::os::fd::AsRawFd;
        let (mut off_in, mut off_out) = (at as libc::loff_t, to as libc::loff_t);
        // SAFETY: two open descriptors and two offsets of ours; the call
        // reads and writes no memory of this process.
        let n = unsafe {
            libc::copy_file_range(
                source.file().as_raw_fd(),
                &mut off_in,
                out.as_raw_fd(),
                &mut off_out,
                len.min(1 << 30) as usize,
                0,
            )
        };
        if n > 0 {
            (at, to, len) = (at + n as u64, to + n as u64, len - n as u64);
            continue;
        }
        if n == 0 {
            return Err(named(crate::source::truncated(at, len as usize, at)));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Not between these files: the copy below.
            Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL | libc::EPERM) => {
                break
            }
            _ => return Err(WriteError::Output(e).into()),
        }
    }
    let mut buf = vec![0u8; (len as usize).min(crate::writer::PIECE)];
    while len > 0 {
        let n = (len as usize).min(buf.len());
        source.read_exact_at(at, &mut buf[..n]).map_err(named)?;
        write_all_at(out, &buf[..n], to).map_err(WriteError::Output)?;
        (at, to, len) = (at + n as u64, to + n as u64, len - n as u64);
    }
    Ok(())
}

/// Maps a plan's tensor indices to the positional writer's slots; a
/// failed write names the file.
struct PlanSink<'w, 'a> {
    w: &'w PositionalWriter<'a>,
    slots: &'w SlotMap,
    path: &'w Path,
}

impl<E: From<Error>> Sink<E> for PlanSink<'_, '_> {
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<(), E> {
        let index = self
            .slots
            .slot(tensor)
            .ok_or(Error::from(WriteError::Trailing {
                extra: bytes.len() as u64,
            }))?;
        self.w
            .write(index, offset, bytes)
            .map_err(|e| at_path(self.path, e).into())
    }

    fn copy_file(
        &self,
        tensor: usize,
        offset: u64,
        source: &crate::source::FileSource,
        at: u64,
        len: u64,
    ) -> Result<(), E> {
        let index = self
            .slots
            .slot(tensor)
            .ok_or(Error::from(WriteError::Trailing { extra: len }))?;
        self.w
            .copy_file(index, offset, source, at, len)
            .map_err(|e| at_path(self.path, e).into())
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::fs;
    #[cfg(unix)]
    use std::os::unix::fs::PermissionsExt;

    use super::file::Kind;
    use super::*;
    use crate::error::OutputError;
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

    fn named(path: &Path) -> AtomicFile {
        AtomicFile::create_with(path, &mut Vec::new(), Kind::Named).unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_unnamed_temporary_has_no_name_until_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let out = AtomicFile::create(&path).unwrap();
        out.reserve(1 << 20).unwrap();
        out.write_all_at(b"hello", 0).unwrap();
        assert_eq!(entries(dir.path()), Vec::<OsString>::new());
        drop(out);
        assert_eq!(entries(dir.path()), Vec::<OsString>::new());
        let out = AtomicFile::create(&path).unwrap();
        out.write_all_at(b"hello", 0).unwrap();
        out.commit(true).unwrap();
        assert_eq!(entries(dir.path()), ["out.bin"]);
        assert_eq!(fs::read(&path).unwrap(), b"hello");
    }

    #[test]
    fn a_named_temporary_is_hidden_ours_and_gone_unless_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        fs::write(&path, b"old").unwrap();
        let out = named(&path);
        out.write_all_at(b"new", 0).unwrap();
        let names = entries(dir.path());
        assert_eq!(names.len(), 2, "{names:?}");
        let temp = names.iter().find(|n| *n != "out.bin").unwrap();
        assert!(temp.to_str().unwrap().starts_with(".out.bin.tensorfile-"));
        assert_eq!(temp::temp_name_pid(temp), Some(std::process::id()));
        drop(out);
        assert_eq!(entries(dir.path()), ["out.bin"]);
        assert_eq!(fs::read(&path).unwrap(), b"old");
        let out = named(&path);
        out.write_all_at(b"new", 0).unwrap();
        out.commit(false).unwrap();
        assert_eq!(entries(dir.path()), ["out.bin"]);
        assert_eq!(fs::read(&path).unwrap(), b"new");
    }

    #[cfg(unix)]
    #[test]
    fn a_save_sweeps_a_dead_writers_temporary_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let ours = temp::temp_name("m.safetensors".as_ref());
        let stale = ours
            .to_str()
            .unwrap()
            .replace(&format!("-{me}-"), &format!("-{dead}-"));
        assert_eq!(temp::temp_name_pid(stale.as_ref()), Some(dead));
        let live = ours.to_str().unwrap().to_string();
        for name in [&stale, &live, &".m.safetensors.part".to_string()] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        let out = AtomicFile::create(dir.path().join("other.bin")).unwrap();
        drop(out);
        let mut expected = vec![OsString::from(".m.safetensors.part"), live.into()];
        expected.sort();
        assert_eq!(entries(dir.path()), expected);
    }

    #[cfg(unix)]
    #[test]
    fn modes_new_replaced_and_never_setuid() {
        let dir = tempfile::tempdir().unwrap();
        // What open(2) with 0666 gives under the current umask.
        let plain = dir.path().join("plain");
        fs::File::create(&plain).unwrap();
        let umasked = fs::metadata(&plain).unwrap().permissions().mode() & 0o7777;
        for kind in [Kind::Best, Kind::Named] {
            let path = dir.path().join("new.bin");
            let _ = fs::remove_file(&path);
            AtomicFile::create_with(&path, &mut Vec::new(), kind)
                .unwrap()
                .commit(false)
                .unwrap();
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, umasked, "{kind:?}");
            for (old, new) in [
                (0o4755, 0o755),
                (0o2750, 0o750),
                (0o1644, 0o644),
                (0o600, 0o600),
                (0o444, 0o444),
            ] {
                fs::set_permissions(&path, fs::Permissions::from_mode(old)).unwrap();
                AtomicFile::create_with(&path, &mut Vec::new(), kind)
                    .unwrap()
                    .commit(false)
                    .unwrap();
                let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
                assert_eq!(mode, new, "{kind:?} {old:o}");
            }
        }
    }

    fn problem(result: Result<AtomicFile>) -> OutputError {
        match result {
            Err(Error::Output { problem, .. }) => problem,
            other => panic!("expected an output error, got {other:?}"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_is_followed_to_a_file_and_refused_otherwise() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let real_dir = dir.path().join("real");
        fs::create_dir(&real_dir).unwrap();
        let real = real_dir.join("m.bin");
        fs::write(&real, b"old").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("link.bin");
        symlink("real/m.bin", &link).unwrap();
        for kind in [Kind::Best, Kind::Named] {
            let out = AtomicFile::create_with(&link, &mut Vec::new(), kind).unwrap();
            out.write_all_at(b"new", 0).unwrap();
            out.commit(true).unwrap();
            // The link stays; the file it leads to is the new one, with
            // the old one's mode, and nothing else is in either directory.
            assert!(fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink());
            assert_eq!(fs::read(&real).unwrap(), b"new");
            assert_eq!(
                fs::metadata(&real).unwrap().permissions().mode() & 0o777,
                0o640
            );
            assert_eq!(entries(dir.path()), ["link.bin", "real"]);
            assert_eq!(entries(&real_dir), ["m.bin"]);
            fs::write(&real, b"old").unwrap();
        }
        let to_dir = dir.path().join("to_dir");
        symlink("real", &to_dir).unwrap();
        assert!(matches!(
            problem(AtomicFile::create(&to_dir)),
            OutputError::LinkToDirectory { .. }
        ));
        let dangling = dir.path().join("dangling");
        symlink("nowhere/m.bin", &dangling).unwrap();
        assert!(matches!(
            problem(AtomicFile::create(&dangling)),
            OutputError::DanglingLink { .. }
        ));
        assert_eq!(
            problem(AtomicFile::create(&real_dir)),
            OutputError::Directory
        );
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(problem(AtomicFile::create(&fifo)), OutputError::NotRegular);
        // Refusals leave everything as it was.
        assert_eq!(
            entries(dir.path()),
            ["dangling", "fifo", "link.bin", "real", "to_dir"]
        );
        assert_eq!(entries(&real_dir), ["m.bin"]);
        assert_eq!(fs::read(&real).unwrap(), b"old");
    }

    #[cfg(unix)]
    #[test]
    fn an_output_that_is_an_input_is_refused_by_identity() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pt");
        fs::write(&input, b"checkpoint").unwrap();
        let other = dir.path().join("other.pt");
        fs::write(&other, b"checkpoint").unwrap();
        let hard = dir.path().join("hard.safetensors");
        fs::hard_link(&input, &hard).unwrap();
        let soft = dir.path().join("soft.safetensors");
        std::os::unix::fs::symlink("in.pt", &soft).unwrap();
        let dotted = dir.path().join(".").join("in.pt");
        for out in [&input, &hard, &soft, &dotted] {
            match check_not_input(out, [&other, &input]) {
                Err(Error::Output {
                    path,
                    problem: OutputError::IsInput { input: i },
                }) => {
                    assert_eq!(&path, out);
                    assert_eq!(i, input);
                }
                other => panic!("{}: {other:?}", out.display()),
            }
        }
        // Same contents, another file; a new output; a missing input.
        check_not_input(&other, [&input]).unwrap();
        check_not_input(dir.path().join("new.safetensors"), [&input]).unwrap();
        check_not_input(&input, [dir.path().join("missing")]).unwrap();
        let err = check_not_input(&input, [&input]).unwrap_err();
        assert!(err.to_string().contains("in.pt: is the input"), "{err}");
    }

    fn set_of(dir: &Path, names: &[&str]) -> AtomicSet {
        let mut set = AtomicSet::new();
        for name in names {
            let file = set.create(dir.join(name)).unwrap();
            file.write_all_at(name.as_bytes(), 0).unwrap();
            set.add(file).unwrap();
        }
        set
    }

    #[test]
    fn a_set_appears_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let names = ["a", "b", "c", "index"];
        drop(set_of(dir.path(), &names));
        assert_eq!(entries(dir.path()), Vec::<OsString>::new());
        let set = set_of(dir.path(), &names);
        assert_eq!(set.len(), 4);
        let paths: Vec<_> = set.paths().map(Path::to_path_buf).collect();
        assert_eq!(paths, names.map(|n| dir.path().join(n)));
        set.commit(true).unwrap();
        assert_eq!(entries(dir.path()), names);
        for name in names {
            assert_eq!(fs::read(dir.path().join(name)).unwrap(), name.as_bytes());
        }
        // More files than the set keeps open: the rest are staged early
        // (named, closed, and synced by opening them again).
        set::TEST_BUDGET.with(|b| b.set(Some(2)));
        let many: Vec<String> = (0..5).map(|i| format!("f{i:04}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let sub = dir.path().join("many");
        fs::create_dir(&sub).unwrap();
        let set = set_of(&sub, &many);
        let unnamed = if cfg!(target_os = "linux") && !temp::named_forced() {
            2
        } else {
            0
        };
        assert_eq!(entries(&sub).len(), 5 - unnamed, "{:?}", entries(&sub));
        drop(set);
        assert_eq!(entries(&sub), Vec::<OsString>::new());
        set_of(&sub, &many).commit(true).unwrap();
        set::TEST_BUDGET.with(|b| b.set(None));
        assert_eq!(entries(&sub), many);
        assert_eq!(
            fs::read(sub.join(many[many.len() - 1])).unwrap(),
            many[many.len() - 1].as_bytes()
        );
    }

    #[test]
    fn a_set_failing_midway_removes_what_it_committed() {
        let dir = tempfile::tempdir().unwrap();
        let set = set_of(dir.path(), &["a", "b", "c"]);
        // Something in the way of the second file: its rename fails.
        fs::create_dir(dir.path().join("b")).unwrap();
        match set.commit(false) {
            Err(Error::Set { path, kept, .. }) => {
                assert_eq!(path, dir.path().join("b"));
                assert!(kept.is_empty(), "{kept:?}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(entries(dir.path()), ["b"]);
        // A file that replaced an old one cannot be taken back: it is kept
        // and said so.
        fs::remove_dir(dir.path().join("b")).unwrap();
        fs::write(dir.path().join("a"), b"old").unwrap();
        let set = set_of(dir.path(), &["a", "c", "b"]);
        fs::create_dir(dir.path().join("b")).unwrap();
        let err = set.commit(false).unwrap_err();
        match &err {
            Error::Set { path, kept, .. } => {
                assert_eq!(path, &dir.path().join("b"));
                assert_eq!(kept, &[dir.path().join("a")]);
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("kept"), "{err}");
        assert_eq!(entries(dir.path()), ["a", "b"]);
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"a");
    }
}
