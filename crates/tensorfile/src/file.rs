//! Opening a file: the ways in, and the validated file they give.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Deref;
use std::path::Path;

use memmap2::{Mmap, MmapMut, MmapOptions};

use crate::error::{Error, FormatError, Result};
use crate::header::{Header, ReadOptions, TensorInfo};
use crate::view::TensorView;
use crate::Metadata;

/// Where a file's bytes live.
enum Buffer {
    /// A read-only memory map of the file.
    Mapped(Mmap),
    /// Anonymous memory the file was read into (page-aligned, huge pages when
    /// the system grants them).
    Loaded(MmapMut),
    /// A caller's buffer.
    Owned(Vec<u8>),
}

impl Deref for Buffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Buffer::Mapped(m) => m,
            Buffer::Loaded(m) => m,
            Buffer::Owned(v) => v,
        }
    }
}

/// A validated safetensors file: its header and its bytes.
///
/// Every way in checks all five reader rules before returning, so every
/// tensor it hands out is in bounds and has the right length.
///
/// ```
/// # fn main() -> tensorfile::Result<()> {
/// let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"),
///     "/../../tests/fixtures/valid/worked_example.safetensors"))?;
/// let file = tensorfile::SafeTensors::from_bytes(bytes)?;
/// let w = file.tensor("w")?;
/// assert_eq!(w.shape(), &[2, 2]);
/// assert_eq!(&*w.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
/// assert_eq!(file.metadata().unwrap()["format"], "tinyllm");
/// # Ok(()) }
/// ```
pub struct SafeTensors {
    buffer: Buffer,
    header: Header,
}

impl std::fmt::Debug for SafeTensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafeTensors")
            .field("len", &self.buffer.len())
            .field("header", &self.header)
            .finish()
    }
}

impl SafeTensors {
    /// Opens a file by memory-mapping it read-only: nothing is copied, and
    /// tensors borrow from the map. The file must not be modified while it
    /// is open (tensorfile's own writer replaces files by renaming, which
    /// is safe).
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        SafeTensors::open_with(path, &ReadOptions::default())
    }

    /// [`SafeTensors::open`] with options.
    pub fn open_with(path: impl AsRef<Path>, options: &ReadOptions) -> Result<SafeTensors> {
        let path = path.as_ref();
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        // The header is read with plain reads, not through the map: parsing
        // then leaves the map untouched, so opening costs no page faults and
        // closing no page-table teardown (a fifth of the time to open a
        // 200-tensor file). Reading also checks rules 1 to 5 before mapping.
        let header = read_header_of_len(&mut file, len, options).map_err(|e| e.at(path))?;
        SafeTensors::map(&file, path, len, header)
    }

    /// Maps a file whose header was read and validated before (a shard of a
    /// set, see [`crate::ShardedTensors`]) without parsing it again. The file
    /// must still be as long as that header says.
    pub(crate) fn map_with_header(path: &Path, header: Header) -> Result<SafeTensors> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len != header.data_start() + header.data_len() {
            let changed = std::io::Error::other("the file changed since its header was read");
            return Err(Error::io(path, changed));
        }
        SafeTensors::map(&file, path, len, header)
    }

    /// Maps `file` (`len` bytes, at `path`) read-only, with its validated header.
    fn map(file: &File, path: &Path, len: u64, header: Header) -> Result<SafeTensors> {
        let size = usize::try_from(len)
            .map_err(|_| Error::io(path, std::io::Error::other("file too large to map")))?;
        // SAFETY: the map is read-only and private to this value. Another
        // process truncating or rewriting the file in place while it is
        // mapped is outside what any mmap-based reader can guard against;
        // the documentation says so. The length is the one just read, which
        // spares memmap2 a second `fstat` (and 8 + N <= len was checked, so
        // the map is not empty).
        let map =
            unsafe { MmapOptions::new().len(size).map(file) }.map_err(|e| Error::io(path, e))?;
        Ok(SafeTensors {
            buffer: Buffer::Mapped(map),
            header,
        })
    }

    /// Reads a whole file into memory the process owns, then validates it.
    ///
    /// The destination is anonymous memory advised to use huge pages, which
    /// saves most of the page faults a fresh `Vec` would take; the file is
    /// read with plain `read` calls, so the source is not mapped at all.
    /// Tensors are aligned as in the file, relative to a page-aligned base.
    pub fn load(path: impl AsRef<Path>) -> Result<SafeTensors> {
        SafeTensors::load_with(path, &ReadOptions::default())
    }

    /// [`SafeTensors::load`] with options.
    pub fn load_with(path: impl AsRef<Path>, options: &ReadOptions) -> Result<SafeTensors> {
        let path = path.as_ref();
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len < 8 {
            return Err(FormatError::TooShort { len }.into());
        }
        // Check rule 1 before allocating anything the size of the file.
        let mut prefix = [0u8; 8];
        file.read_exact(&mut prefix)
            .map_err(|e| Error::io(path, e))?;
        Header::check_prefix(&prefix, len, options)?;
        let size = usize::try_from(len)
            .map_err(|_| Error::io(path, std::io::Error::other("file too large for memory")))?;
        let mut memory = MmapOptions::new()
            .len(size)
            .map_anon()
            .map_err(|e| Error::io(path, e))?;
        #[cfg(target_os = "linux")]
        {
            // Advice only: the copy is correct with or without huge pages.
            let _ = memory.advise(memmap2::Advice::HugePage);
        }
        // The whole file, prefix included, so that halves split on a huge
        // page boundary of the buffer; the buffer is what gets validated.
        read_in_parallel(&file, &mut memory).map_err(|e| Error::io(path, e))?;
        SafeTensors::from_buffer(Buffer::Loaded(memory), options)
    }

    /// Validates a file held in a byte buffer, taking ownership of it.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<SafeTensors> {
        SafeTensors::from_bytes_with(bytes, &ReadOptions::default())
    }

    /// [`SafeTensors::from_bytes`] with options.
    pub fn from_bytes_with(bytes: Vec<u8>, options: &ReadOptions) -> Result<SafeTensors> {
        SafeTensors::from_buffer(Buffer::Owned(bytes), options)
    }

    /// Reads a whole stream, then validates it. The header length is
    /// checked against the cap before the rest is read.
    pub fn from_reader(mut reader: impl Read) -> Result<SafeTensors> {
        SafeTensors::from_reader_with(&mut reader, &ReadOptions::default())
    }

    /// [`SafeTensors::from_reader`] with options.
    pub fn from_reader_with(mut reader: impl Read, options: &ReadOptions) -> Result<SafeTensors> {
        let mut bytes = Vec::new();
        let mut prefix = [0u8; 8];
        let got = read_up_to(&mut reader, &mut prefix)?;
        bytes.extend_from_slice(&prefix[..got]);
        if got == 8 {
            let n = u64::from_le_bytes(prefix);
            if n > options.max_header_len {
                return Err(FormatError::HeaderTooLarge {
                    header_len: n,
                    limit: options.max_header_len,
                }
                .into());
            }
            reader.read_to_end(&mut bytes)?;
        }
        SafeTensors::from_bytes_with(bytes, options)
    }

    fn from_buffer(buffer: Buffer, options: &ReadOptions) -> Result<SafeTensors> {
        let header = Header::from_file_bytes(&buffer, options)?;
        options.contract.check(&header)?;
        Ok(SafeTensors { buffer, header })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The metadata, if the file has any.
    pub fn metadata(&self) -> Option<&Metadata> {
        self.header.metadata()
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.header.len()
    }

    /// Whether the file holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.header.is_empty()
    }

    /// The whole file's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buffer
    }

    /// The data buffer: every tensor's bytes, back to back.
    pub fn data(&self) -> &[u8] {
        // data_start <= len: checked by rule 1.
        &self.buffer[self.header.data_start() as usize..]
    }

    fn view<'a>(&'a self, info: TensorInfo<'a>) -> TensorView<'a> {
        let (begin, end) = info.data_offsets;
        // In bounds: rule 5 checked that the tensors tile the data buffer.
        TensorView::new(info, &self.data()[begin as usize..end as usize])
    }

    /// The tensor of that name, in O(1).
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        self.get(name)
            .ok_or_else(|| Error::NotFound(name.to_string()))
    }

    /// The tensor of that name, if there is one.
    pub fn get(&self, name: &str) -> Option<TensorView<'_>> {
        self.header.get(name).map(|info| self.view(info))
    }

    /// The tensors in data order (the order of their bytes in the file).
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorView<'_>> + '_ {
        self.header.tensors().map(move |info| self.view(info))
    }

    /// The tensors in ascending byte order of their names.
    pub fn tensors_by_name(&self) -> Vec<TensorView<'_>> {
        self.header
            .tensors_by_name()
            .into_iter()
            .map(|info| self.view(info))
            .collect()
    }

    /// The names in data order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.header.tensors().map(|info| info.name)
    }
}

/// Fills `out` from the start of `file`. Large reads are split
/// in two halves read at once by two threads: most of the cost is the
/// kernel zeroing and mapping fresh pages on first touch and copying into
/// them, and each half's pages are touched by the thread that reads them.
fn read_in_parallel(file: &File, out: &mut [u8]) -> std::io::Result<()> {
    /// Below this, a second thread costs more than it saves.
    const SPLIT_FROM: usize = 64 << 20;
    #[cfg(unix)]
    if out.len() >= SPLIT_FROM {
        use std::os::unix::fs::FileExt;
        // Split on a 2 MiB boundary so that no huge page is shared.
        let half = (out.len() / 2) & !((2 << 20) - 1);
        let (first, second) = out.split_at_mut(half);
        let (theirs, mine) = crate::parallel::both(
            || file.read_exact_at(second, half as u64),
            || file.read_exact_at(first, 0),
        );
        return mine.and(theirs);
    }
    let mut reader = file;
    reader.seek(SeekFrom::Start(0))?;
    reader.read_exact(out)
}

/// Reads and validates only the header of a seekable stream: 8 + N bytes
/// are read; the data is never touched, and rule 5 is checked against the
/// stream's length.
pub fn read_header<R: Read + Seek>(mut reader: R, options: &ReadOptions) -> Result<Header> {
    let len = reader.seek(SeekFrom::End(0))?;
    reader.seek(SeekFrom::Start(0))?;
    read_header_of_len(reader, len, options)
}

/// [`read_header`] from the start of a stream whose length is known.
fn read_header_of_len(mut reader: impl Read, len: u64, options: &ReadOptions) -> Result<Header> {
    let mut prefix = [0u8; 8];
    let got = read_up_to(&mut reader, &mut prefix)?;
    let header_len = Header::check_prefix(&prefix[..got], len, options)?;
    // N <= the cap and 8 + N <= the stream length: a justified allocation.
    let mut text = vec![0u8; header_len as usize];
    reader.read_exact(&mut text)?;
    let header = Header::parse(&text, len - 8 - header_len)?;
    options.contract.check(&header)?;
    Ok(header)
}

/// Reads a path's header only (see [`read_header`]).
pub fn read_header_from_path(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Header> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    read_header(std::io::BufReader::new(file), options).map_err(|e| e.at(path))
}

/// Fills `buf` as far as the stream allows; returns how many bytes were read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(got)
}
