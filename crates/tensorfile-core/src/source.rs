//! Byte sources: "bytes at offsets", wherever they live.
//!
//! Every reader in this library reads through [`ByteSource`]: a length, a
//! positional read into the caller's buffer, and, for sources that hold
//! their bytes in memory, a borrowed slice. Headers are read and validated
//! from any source; tensors borrow where the source can lend and are read
//! into caller memory where it cannot. (The shape follows the `object`
//! crate's `ReadRef`: one small trait over slices and files alike.)
//!
//! | source | borrows | safe if the file is truncated underneath |
//! | --- | --- | --- |
//! | `&[u8]`, `Vec<u8>`, `Box<[u8]>`, `Arc<[u8]>` | yes | yes (the bytes are ours) |
//! | [`LoadedFile`] (a file read into memory) | yes | yes |
//! | [`FileSource`] (positional reads) | no | yes: an error names the file |
//! | [`MappedFile`] (a read-only memory map) | yes | **no**: the kernel sends `SIGBUS` |
//! | [`PrivateMap`] (a copy-on-write map of one range, writeable) | yes | **no**: `SIGBUS` too |
//!
//! A memory map is the fastest way in and gives zero-copy views, but the
//! map's contract holds: if another process truncates the file while it is
//! mapped, touching a page past the new end kills the process. Long reads
//! of an input (hashing, converting, casting, quantizing, copying) therefore
//! go through [`FileSource`], whose reads fail with
//! [`truncated`]'s error instead.
//!
//! ```
//! use tensorfile_core::source::ByteSource;
//! let bytes: &[u8] = b"0123456789";
//! let mut buf = [0u8; 3];
//! bytes.read_exact_at(4, &mut buf)?;
//! assert_eq!(&buf, b"456");
//! assert_eq!(ByteSource::len(&bytes), 10);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Mmap, MmapMut, MmapOptions};

/// Bytes at offsets: a file, a memory map, a buffer, or (in other crates) a
/// remote object.
///
/// Implementations must be usable from several threads at once (reads take
/// `&self`) and must never return bytes other than the source's: a read
/// that cannot be satisfied in full is an error.
pub trait ByteSource: Send + Sync {
    /// The source's length in bytes.
    fn len(&self) -> u64;

    /// Whether the source is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset..offset + buf.len()`.
    ///
    /// # Errors
    /// A range past the end, or a source that became shorter than it was
    /// ([`truncated`]), gives `UnexpectedEof`; other failures are the
    /// underlying I/O error.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// The whole source as one borrowed slice, when it is held in memory
    /// (slices, buffers, maps): readers then borrow instead of copying.
    fn as_slice(&self) -> Option<&[u8]> {
        None
    }

    /// The file (or URL) the bytes come from, when the source knows it:
    /// readers name it in their errors.
    fn path(&self) -> Option<&Path> {
        None
    }

    /// Fills several buffers, each from its offset. Sources where a request
    /// is expensive (remote objects) override this to coalesce neighbouring
    /// ranges and run them concurrently; the default reads them in turn.
    ///
    /// # Errors
    /// As [`ByteSource::read_exact_at`], for the first range that fails.
    fn read_ranges(&self, ranges: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        for (offset, buf) in ranges.iter_mut() {
            self.read_exact_at(*offset, buf)?;
        }
        Ok(())
    }
}

/// The error of a read past the end of a source that used to be longer: the
/// file changed or was truncated while being read.
pub fn truncated(offset: u64, wanted: usize, len: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "changed or truncated while being read: {wanted} bytes at offset {offset} reach past its end at byte {len}"
        ),
    )
}

/// The range `offset..offset + len` of a slice of `total` bytes, or the
/// [`truncated`] error.
fn range_in(offset: u64, len: usize, total: usize) -> io::Result<std::ops::Range<usize>> {
    usize::try_from(offset)
        .ok()
        .and_then(|start| Some(start..start.checked_add(len)?))
        .filter(|r| r.end <= total)
        .ok_or_else(|| truncated(offset, len, total as u64))
}

/// A source held in memory: reads are copies out of the slice.
pub(crate) fn read_slice(bytes: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let range = range_in(offset, buf.len(), bytes.len())?;
    buf.copy_from_slice(&bytes[range]);
    Ok(())
}

/// [`ByteSource`] for types that deref to their bytes; with `held:`, also
/// [`InMemory`] (the loaded and mapped files, the core's backing).
macro_rules! in_memory {
    (held: $($t:ty),* $(,)?) => {$(
        $crate::source::in_memory!($t);
        impl $crate::source::InMemory for $t {
            fn bytes(&self) -> &[u8] {
                self
            }
        }
    )*};
    ($($t:ty),* $(,)?) => {$(
        impl $crate::source::ByteSource for $t {
            fn len(&self) -> u64 {
                <[u8]>::len(self) as u64
            }
            fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
                $crate::source::read_slice(self, offset, buf)
            }
            fn as_slice(&self) -> Option<&[u8]> {
                Some(self)
            }
        }
    )*};
}

in_memory!(&[u8], Vec<u8>, Box<[u8]>, Arc<[u8]>);
in_memory!(held: LoadedFile);
pub(crate) use in_memory;

impl<S: ByteSource + ?Sized> ByteSource for Arc<S> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn path(&self) -> Option<&Path> {
        (**self).path()
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_exact_at(offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        (**self).as_slice()
    }
    fn read_ranges(&self, ranges: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_ranges(ranges)
    }
}

impl<S: ByteSource + ?Sized> ByteSource for Box<S> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn path(&self) -> Option<&Path> {
        (**self).path()
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_exact_at(offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        (**self).as_slice()
    }
    fn read_ranges(&self, ranges: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_ranges(ranges)
    }
}

/// A source that always holds its bytes in memory, so that views can borrow
/// them for as long as the source lives.
pub trait InMemory: ByteSource {
    /// Every byte of the source.
    fn bytes(&self) -> &[u8];
}

macro_rules! lends {
    ($($t:ty),* $(,)?) => {$(
        impl InMemory for $t {
            fn bytes(&self) -> &[u8] {
                self
            }
        }
    )*};
}

lends!(&[u8], Vec<u8>, Box<[u8]>, Arc<[u8]>);

/// Opens `path` for reading, refusing anything but a regular file: a FIFO,
/// a socket or a device would block a reader or never end, and a directory
/// has no bytes. The file is opened non-blocking, so that a FIFO is
/// refused instead of waiting for a writer.
///
/// # Errors
/// The system's error, or `InvalidInput` saying what the path is instead.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc_nonblock());
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", file_kind(&meta)),
        ));
    }
    Ok((file, meta.len()))
}

#[cfg(unix)]
fn libc_nonblock() -> i32 {
    libc::O_NONBLOCK
}

/// What a non-regular file is, in words.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_block_device() || t.is_char_device() {
            return "a device";
        }
    }
    "not a plain file"
}

/// A file read with positional reads (`pread`), never mapped: safe on
/// network file systems and against files truncated underneath (a read past
/// the new end is the [`truncated`] error, not a signal).
///
/// The length is the one the file had when opened; reads never go past it.
#[derive(Debug)]
pub struct FileSource {
    file: File,
    len: u64,
    path: PathBuf,
}

impl FileSource {
    /// Opens a regular file (see [`open_regular`]).
    ///
    /// # Errors
    /// The system's error, or `InvalidInput` for what is not a regular file.
    pub fn open(path: impl AsRef<Path>) -> io::Result<FileSource> {
        let path = path.as_ref();
        let (file, len) = open_regular(path)?;
        Ok(FileSource {
            file,
            len,
            path: path.to_path_buf(),
        })
    }

    /// A file already open (say, a descriptor handed over by another
    /// language), named `path` in errors. Anything but a regular file is
    /// refused, as [`open_regular`] does.
    ///
    /// # Errors
    /// The system's error, or `InvalidInput` for what is not a regular file.
    pub fn from_file(file: File, path: impl AsRef<Path>) -> io::Result<FileSource> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a regular file ({})", file_kind(&meta)),
            ));
        }
        Ok(FileSource {
            file,
            len: meta.len(),
            path: path.as_ref().to_path_buf(),
        })
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Maps the file read-only (see [`MappedFile`]), at the length it had
    /// when opened.
    ///
    /// # Errors
    /// The system's error, or `InvalidInput` when it does not fit the
    /// address space.
    pub fn into_mapped(self) -> io::Result<MappedFile> {
        MappedFile::map(self.file, self.len, &self.path)
    }
}

/// `pread` until `buf` is full; a short file is [`truncated`].
pub(crate) fn read_file_at(file: &File, len: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let end = offset.checked_add(buf.len() as u64);
    if end.is_none_or(|end| end > len) {
        return Err(truncated(offset, buf.len(), len));
    }
    let mut done = 0usize;
    while done < buf.len() {
        let at = offset + done as u64;
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(file, &mut buf[done..], at);
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_read(file, &mut buf[done..], at);
        match n {
            Ok(0) => {
                let now = file.metadata().map(|m| m.len()).unwrap_or(at);
                return Err(truncated(offset, buf.len(), now));
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl ByteSource for FileSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn path(&self) -> Option<&Path> {
        Some(&self.path)
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        read_file_at(&self.file, self.len, offset, buf)
    }
}

/// A file memory-mapped read-only: zero-copy, but **not** safe against the
/// file being truncated by another process while mapped (see the module
/// documentation). tensorfile's own writer replaces files by renaming a new
/// one over the name, which is safe: the map keeps the old bytes.
#[derive(Debug)]
pub struct MappedFile {
    map: Option<Mmap>,
    file: File,
    path: PathBuf,
}

impl MappedFile {
    /// Maps a regular file (see [`open_regular`]).
    ///
    /// # Errors
    /// The system's error, or `InvalidInput` for what is not a regular file
    /// or does not fit the address space.
    pub fn open(path: impl AsRef<Path>) -> io::Result<MappedFile> {
        let path = path.as_ref();
        let (file, len) = open_regular(path)?;
        MappedFile::map(file, len, path)
    }

    /// Maps `file` (`len` bytes long, opened from `path`).
    pub(crate) fn map(file: File, len: u64, path: &Path) -> io::Result<MappedFile> {
        let size = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too large to map"))?;
        // An empty file cannot be mapped; it has no bytes to lend anyway.
        let map = if size == 0 {
            None
        } else {
            // SAFETY: the map is read-only and private to this value.
            // Another process truncating or rewriting the file in place while
            // it is mapped is outside what any map-based reader can guard
            // against; the module documentation says so and offers
            // `FileSource` instead. The length is the one just read, which
            // spares memmap2 a second `fstat`.
            Some(unsafe { MmapOptions::new().len(size).map(&file) }?)
        };
        Ok(MappedFile {
            map,
            file,
            path: path.to_path_buf(),
        })
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file, for positional reads that must not fault.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }
}

impl ByteSource for MappedFile {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        read_slice(self, offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }
    fn path(&self) -> Option<&Path> {
        Some(&self.path)
    }
}

impl InMemory for MappedFile {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// One byte range of a file mapped private and copy-on-write
/// (`MAP_PRIVATE`, readable and writeable): the pages are the page cache's
/// until written, and a write gives this map its own copy of the page, never
/// reaching the file or any other map of it. Zero-copy *and* writeable, for
/// callers that hand mutable buffers out (the Python package's arrays).
///
/// The contract of [`MappedFile`] holds: if another process truncates the
/// file underneath, touching a page past the new end sends `SIGBUS`.
pub struct PrivateMap {
    map: Option<MmapMut>,
    /// Where the range starts within the map (the map begins on a page).
    skip: usize,
    len: usize,
}

impl std::fmt::Debug for PrivateMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateMap")
            .field("len", &self.len)
            .finish()
    }
}

/// The system's page size (the alignment of map offsets).
fn page_size() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 {
            return n as u64;
        }
    }
    4096
}

impl PrivateMap {
    /// Maps `len` bytes of `file` from `offset`, private and copy-on-write.
    /// The range must lie within the file's current length.
    ///
    /// # Errors
    /// The range is past the file's end (`UnexpectedEof`, see [`truncated`])
    /// or does not fit the address space, or the system refuses the map
    /// (for example `ENOMEM` past the process's limit on maps).
    pub fn map(file: &File, offset: u64, len: usize) -> io::Result<PrivateMap> {
        let file_len = file.metadata()?.len();
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > file_len) {
            return Err(truncated(offset, len, file_len));
        }
        if len == 0 {
            return Ok(PrivateMap {
                map: None,
                skip: 0,
                len: 0,
            });
        }
        let start = offset - offset % page_size();
        let skip = (offset - start) as usize;
        let total = skip
            .checked_add(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "too large to map"))?;
        // SAFETY: a private copy-on-write map: writes through it never reach
        // the file. The range was checked against the file's length just now;
        // a file truncated later by another process is outside what a map
        // can guard against (the type's documentation says so).
        let map = unsafe { MmapOptions::new().offset(start).len(total).map_copy(file) }?;
        Ok(PrivateMap {
            map: Some(map),
            skip,
            len,
        })
    }

    /// The range's first byte, for handing the writeable bytes to code
    /// outside Rust (the pointer stays valid while the map lives). Dangling
    /// but non-null and aligned for any element when the range is empty.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match &mut self.map {
            // skip < the map's length: in bounds.
            Some(map) => map[self.skip..].as_mut_ptr(),
            None => std::ptr::NonNull::<u64>::dangling().as_ptr().cast(),
        }
    }

    /// The range's bytes, writeable (copy-on-write).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let (skip, len) = (self.skip, self.len);
        match &mut self.map {
            Some(map) => &mut map[skip..skip + len],
            None => &mut [],
        }
    }
}

impl Deref for PrivateMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.map {
            Some(map) => &map[self.skip..self.skip + self.len],
            None => &[],
        }
    }
}

/// A whole file read into anonymous memory the process owns (page-aligned,
/// huge pages where the system grants them): the file is read with plain
/// reads and never mapped, so nothing done to it afterwards affects these
/// bytes.
pub struct LoadedFile {
    memory: Option<MmapMut>,
}

impl std::fmt::Debug for LoadedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedFile")
            .field("len", &<[u8]>::len(self))
            .finish()
    }
}

impl LoadedFile {
    /// Reads `len` bytes of `file` into new page-aligned memory, two halves
    /// at once on two threads for large files (most of the cost is the
    /// kernel zeroing and mapping fresh pages on first touch, and each half's
    /// pages are touched by the thread that reads them).
    ///
    /// # Errors
    /// Allocation or read failures; a file shorter than `len` is
    /// [`truncated`].
    pub fn read(file: &File, len: u64) -> io::Result<LoadedFile> {
        let size = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "too large for memory"))?;
        if size == 0 {
            return Ok(LoadedFile { memory: None });
        }
        let mut memory = huge_page_memory(size)?;
        read_in_parallel(file, len, &mut memory)?;
        Ok(LoadedFile {
            memory: Some(memory),
        })
    }
}

/// `len` zero bytes of anonymous, page-aligned memory, advised to use
/// transparent huge pages (`madvise(MADV_HUGEPAGE)` on Linux) where that
/// cannot make a page fault wait (see [`huge_pages_help`]): fewer page
/// faults when it is first written. Advice only: where the kernel refuses
/// it, the memory is the same with ordinary pages.
pub(crate) fn huge_page_memory(len: usize) -> io::Result<MmapMut> {
    let memory = MmapOptions::new().len(len).map_anon()?;
    #[cfg(target_os = "linux")]
    if huge_pages_help() {
        let _ = memory.advise(memmap2::Advice::HugePage);
    }
    Ok(memory)
}

/// Whether advising huge pages speeds first writes up, decided once per
/// process from the kernel's THP defrag setting. With `madvise`,
/// `defer+madvise` or `always`, a fault in an advised region compacts
/// memory until a 2 MiB page is free, and with most memory in page cache
/// that stall costs more than the faults it saves: measured here (defrag
/// `madvise`), 1 GiB into fresh memory took 3-4x longer advised than not,
/// in the C baseline and in `load_file` alike (BENCHMARKS.md, read plans).
/// With `defer` or `never` a fault takes a huge page only if one is free,
/// so the advice can only help.
#[cfg(target_os = "linux")]
fn huge_pages_help() -> bool {
    static HELP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HELP.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/defrag")
            .ok()
            .and_then(|text| selected_thp_mode(&text).map(|mode| matches!(mode, "defer" | "never")))
            .unwrap_or(false)
    })
}

/// The bracketed choice of a THP setting (`always defer [madvise] never`).
#[cfg(target_os = "linux")]
fn selected_thp_mode(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let len = text[start..].find(']')?;
    Some(&text[start..start + len])
}

/// Fills `out` from the start of `file` (`len` bytes long), in pieces read
/// at once on the pool's threads.
fn read_in_parallel(file: &File, len: u64, out: &mut [u8]) -> io::Result<()> {
    use rayon::prelude::*;
    /// Below this per thread, another thread costs more than it saves.
    const PIECE_FROM: usize = 32 << 20;
    // Pieces of whole 2 MiB huge pages, so that no page is shared.
    let bounds = crate::parallel::pieces(out.len(), 2 << 20, PIECE_FROM);
    if bounds.len() <= 1 {
        return read_file_at(file, len, 0, out);
    }
    let mut outs = Vec::with_capacity(bounds.len());
    let mut rest = out;
    for &(s, e) in &bounds {
        let (piece, tail) = rest.split_at_mut(e - s);
        outs.push((s, piece));
        rest = tail;
    }
    crate::parallel::install(|| {
        outs.into_par_iter()
            .try_for_each(|(at, piece)| read_file_at(file, len, at as u64, piece))
    })
}

impl LoadedFile {
    /// The loaded bytes, writeable: the memory is the process's own, so
    /// changing it changes nothing on disk.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.memory {
            Some(memory) => memory,
            None => &mut [],
        }
    }
}

impl Deref for LoadedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.memory.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_selected_thp_mode_is_the_bracketed_one() {
        assert_eq!(
            selected_thp_mode("always defer defer+madvise [madvise] never\n"),
            Some("madvise")
        );
        assert_eq!(selected_thp_mode("always [defer] never"), Some("defer"));
        assert_eq!(selected_thp_mode("always defer never"), None);
        assert_eq!(selected_thp_mode("[unclosed"), None);
    }

    #[test]
    fn slices_read_in_bounds_and_refuse_past_the_end() {
        let bytes: Vec<u8> = (0..100).collect();
        let mut buf = [0u8; 10];
        bytes.read_exact_at(90, &mut buf).unwrap();
        assert_eq!(buf[0], 90);
        let err = bytes.read_exact_at(91, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(err.to_string(), truncated(91, 10, 100).to_string());
        let err = bytes.read_exact_at(u64::MAX, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(ByteSource::as_slice(&bytes).map(<[u8]>::len), Some(100));
    }

    #[test]
    fn a_file_truncated_underneath_is_an_error_not_a_signal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 1 << 16]).unwrap();
        let source = FileSource::open(&path).unwrap();
        let mut buf = vec![0u8; 1 << 12];
        source.read_exact_at(1 << 15, &mut buf).unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(100)
            .unwrap();
        let err = source.read_exact_at(1 << 15, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(
            err.to_string(),
            truncated(1 << 15, 1 << 12, 100).to_string()
        );
    }

    #[test]
    fn private_maps_are_writeable_without_touching_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        // An offset off a page boundary, spanning pages.
        let mut map = PrivateMap::map(&file, 5000, 10_000).unwrap();
        assert_eq!(&map[..], &bytes[5000..15_000]);
        map.as_mut_slice()[0] = 0xEE;
        assert_eq!(map[0], 0xEE);
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        let other = PrivateMap::map(&file, 5000, 10).unwrap();
        assert_eq!(other[0], bytes[5000]);
        let err = PrivateMap::map(&file, 19_999, 2).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let mut empty = PrivateMap::map(&file, 20_000, 0).unwrap();
        assert!(empty.is_empty());
        assert!(!empty.as_mut_ptr().is_null());
    }

    #[cfg(unix)]
    #[test]
    fn fifos_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain system call on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = FileSource::open(&fifo).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let err = MappedFile::open(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("a directory"), "{err}");
        let err = FileSource::from_file(File::open(dir.path()).unwrap(), "d").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("a directory"), "{err}");
        let plain = dir.path().join("f");
        std::fs::write(&plain, b"12345").unwrap();
        let source = FileSource::from_file(File::open(&plain).unwrap(), "named").unwrap();
        assert_eq!((source.len(), source.path()), (5, Path::new("named")));
    }
}
