//! A validated safetensors file over any byte source, and the ways in.
//!
//! [`SafeTensors<S>`] is a header checked against all five reader rules
//! plus the [`ByteSource`] it came from. Over any source it gives the
//! tensors' descriptions, their bytes (borrowed where the source lends,
//! read into caller memory where it cannot) and slices fetched by their
//! byte ranges alone. Over a source held in memory ([`InMemory`]) it also
//! gives zero-copy [`TensorView`]s.
//!
//! | way in | source | zero-copy views | safe if truncated underneath |
//! | --- | --- | --- | --- |
//! | [`SafeTensors::open`] | memory map | yes | no (`SIGBUS`) |
//! | [`SafeTensors::open_with`], [`Backend::Load`] | file read into memory | yes | yes |
//! | [`SafeTensors::from_source`] of a [`FileSource`] | positional reads | no (reads) | yes |
//! | [`SafeTensors::from_source`] of a `Vec<u8>` | an owned buffer | yes | yes |
//! | [`SafeTensors::from_slice`] | a borrowed `&[u8]` | yes | yes |
//! | [`SafeTensors::from_source`] | any [`ByteSource`] | where it lends | as the source |

use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Deref;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::header::{Backend, Header, ReadOptions, TensorInfo};
use crate::slice::{SliceArg, TensorSlice};
use crate::source::{open_regular, ByteSource, FileSource, InMemory, LoadedFile, MappedFile};
use crate::view::TensorView;
use crate::writer::TensorData;
use crate::Metadata;

/// How many bytes the first read of a header asks for: most headers fit,
/// so a file whose header is read from a remote source costs one request.
pub const HEADER_PROBE: u64 = 64 << 10;

/// Where the bytes of the default [`SafeTensors`] live: a memory map, a
/// file read into memory, or an owned buffer.
#[derive(Debug)]
pub enum Backing {
    /// A read-only memory map of the file ([`Backend::Map`]).
    Mapped(MappedFile),
    /// The file read into memory the process owns ([`Backend::Load`]).
    Loaded(LoadedFile),
    /// A caller's buffer (given to [`SafeTensors::from_source`]).
    Owned(Vec<u8>),
}

impl Deref for Backing {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Loaded(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

crate::source::in_memory!(held: Backing);

/// A validated safetensors file: its header and its byte source.
///
/// Every way in checks all five reader rules before returning, so every
/// tensor it hands out is in bounds and has the right length.
///
/// ```
/// # fn main() -> tensorfile_core::Result<()> {
/// // A file made in memory (the format page's worked example).
/// let data: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let w = tensorfile_core::TensorRef { name: "w", dtype: tensorfile_core::Dtype::F32, shape: &[2, 2], data: &data };
/// let bytes = tensorfile_core::serialize([w], None)?;
///
/// let file = tensorfile_core::SafeTensors::from_slice(&bytes)?; // borrowed: no copy
/// let w = file.tensor("w")?;
/// assert_eq!(w.shape(), &[2, 2]);
/// assert_eq!(&*w.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
/// # Ok(()) }
/// ```
pub struct SafeTensors<S = Backing> {
    source: S,
    header: Header,
    /// The file the source was opened from, named in errors.
    path: Option<PathBuf>,
}

impl<S> std::fmt::Debug for SafeTensors<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafeTensors")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl SafeTensors {
    /// Opens a file by memory-mapping it read-only: nothing is copied, and
    /// tensors borrow from the map.
    ///
    /// The map's contract holds: if another process truncates the file while
    /// it is open, touching its bytes kills the process with `SIGBUS`. Read
    /// it into memory ([`Backend::Load`] with [`SafeTensors::open_with`]) or
    /// with positional reads ([`SafeTensors::from_source`] of a
    /// [`FileSource`]) where that matters (tensorfile's own writer replaces
    /// files by renaming, which is safe).
    ///
    /// # Errors
    /// The file cannot be opened (or is not a regular file), or breaks a
    /// reader rule; the error names the file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        SafeTensors::open_with(path, &ReadOptions::default())
    }

    /// [`SafeTensors::open`] with options; [`ReadOptions::backend`] says
    /// whether the file is mapped ([`Backend::Map`]) or read into memory
    /// ([`Backend::Load`]).
    ///
    /// # Errors
    /// As [`SafeTensors::open`]; with [`Backend::Load`], a file truncated
    /// while being read is an I/O error naming it.
    pub fn open_with(path: impl AsRef<Path>, options: &ReadOptions) -> Result<SafeTensors> {
        let path = path.as_ref();
        match options.backend {
            Backend::Map => SafeTensors::map(path, options),
            Backend::Load => SafeTensors::load(path, options),
        }
    }

    fn map(path: &Path, options: &ReadOptions) -> Result<SafeTensors> {
        // The header is read with plain reads, not through the map: parsing
        // then leaves the map untouched, so opening costs no page faults and
        // closing no page-table teardown (a fifth of the time to open a
        // 200-tensor file). Reading also checks rules 1 to 5 before mapping.
        let source = FileSource::open(path).map_err(|e| Error::io(path, e))?;
        let header = read_header_from(&source, options).map_err(|e| e.at(path))?;
        let map = source.into_mapped().map_err(|e| Error::io(path, e))?;
        Ok(SafeTensors {
            source: Backing::Mapped(map),
            header,
            path: Some(path.to_path_buf()),
        })
    }

    /// Reads the whole file into memory the process owns. The destination
    /// is anonymous memory advised to use huge pages where the kernel gives
    /// them without stalling, which saves most of the page faults a fresh
    /// `Vec` would take; the file is read with plain
    /// `read` calls, so it is not mapped at all and nothing done to it later
    /// affects what was read. Tensors are aligned as in the file, relative
    /// to a page-aligned base.
    fn load(path: &Path, options: &ReadOptions) -> Result<SafeTensors> {
        let (file, len) = open_regular(path).map_err(|e| Error::io(path, e))?;
        // Check rule 1 before allocating anything the size of the file.
        let mut prefix = [0u8; 8];
        let got = len.min(8) as usize;
        crate::source::read_file_at(&file, len, 0, &mut prefix[..got])
            .map_err(|e| Error::io(path, e))?;
        Header::check_prefix(&prefix[..got], len, options).map_err(|e| Error::from(e).at(path))?;
        let loaded = LoadedFile::read(&file, len).map_err(|e| Error::io(path, e))?;
        SafeTensors::from_source(Backing::Loaded(loaded), options)
            .map(|f| f.named(path))
            .map_err(|e| e.at(path))
    }
}

impl<'a> SafeTensors<&'a [u8]> {
    /// Validates a file held in borrowed memory (the caller's own map, a
    /// Python buffer, `include_bytes!`): nothing is copied, and tensors
    /// borrow from `bytes`.
    ///
    /// # Errors
    /// The bytes break a reader rule.
    pub fn from_slice(bytes: &'a [u8]) -> Result<SafeTensors<&'a [u8]>> {
        SafeTensors::from_source(bytes, &ReadOptions::default())
    }
}

impl<S: ByteSource> SafeTensors<S> {
    /// Reads and validates the header of any byte source (see
    /// [`read_header_from`]); the data is read later, on demand. An owned
    /// buffer (`Vec<u8>`, or [`Backing::Owned`] for the default type) gives
    /// zero-copy views; a [`FileSource`] gives positional reads, safe
    /// against the file being truncated underneath (a read then fails with
    /// an I/O error naming the file); a remote file, range requests.
    ///
    /// # Errors
    /// A read fails, or the source breaks a reader rule; the error names
    /// the file when the source knows it ([`ByteSource::path`]).
    pub fn from_source(source: S, options: &ReadOptions) -> Result<SafeTensors<S>> {
        let path = source.path().map(Path::to_path_buf);
        let header = read_header_from(&source, options).map_err(|e| match &path {
            Some(p) => e.at(p),
            None => e,
        })?;
        Ok(SafeTensors {
            source,
            header,
            path,
        })
    }

    /// Names the file this came from, for error messages.
    pub fn named(mut self, path: impl Into<PathBuf>) -> SafeTensors<S> {
        self.path = Some(path.into());
        self
    }

    /// The file this came from, when it was opened from a path (or named).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The byte source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The byte source, mutably: for a caller that owns the bytes (a file
    /// loaded into memory) and hands them out writeable. The header is
    /// parsed already, so changing the data changes no description.
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
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

    /// The names in data order.
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.header.tensors().map(|info| info.name)
    }

    /// The description of the tensor of that name.
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is none.
    pub fn info(&self, name: &str) -> Result<TensorInfo<'_>> {
        self.header
            .get(name)
            .ok_or_else(|| Error::NotFound(name.to_string()))
    }

    /// Names this file in an error.
    fn at(&self, e: impl Into<Error>) -> Error {
        let e = e.into();
        match &self.path {
            Some(path) => e.at(path),
            None => e,
        }
    }

    /// Fills `buf` with the bytes of `info`'s tensor from `offset` bytes in.
    ///
    /// # Errors
    /// The range is past the tensor's end, or the read fails (the error
    /// names the file).
    pub fn read_at(&self, info: &TensorInfo<'_>, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (begin, end) = info.data_offsets;
        let start = begin.checked_add(offset);
        let within = start
            .and_then(|s| s.checked_add(buf.len() as u64))
            .is_some_and(|e| e <= end);
        if !within {
            return Err(Error::Slice {
                tensor: info.name.to_string(),
                problem: format!(
                    "{} bytes at offset {offset} reach past its {} bytes",
                    buf.len(),
                    end - begin
                ),
            });
        }
        // In bounds of the data buffer, which ends at the source's end (rule 5).
        let at = self.header.data_start() + begin + offset;
        self.source
            .read_exact_at(at, buf)
            .map_err(|e| self.at(Error::Stream(e)))
    }

    /// The bytes of `info`'s tensor: borrowed from the source when it lends
    /// them, else read into a new buffer.
    ///
    /// # Errors
    /// The read fails (the error names the file).
    pub fn read_tensor(&self, info: &TensorInfo<'_>) -> Result<Cow<'_, [u8]>> {
        if let Some(bytes) = self.lend(info) {
            return Ok(Cow::Borrowed(bytes));
        }
        let mut buf = zeroed_buffer(info.name, info.nbytes())?;
        self.read_at(info, 0, &mut buf)?;
        Ok(Cow::Owned(buf))
    }

    /// The tensor's bytes borrowed from the source, when it lends them.
    fn lend(&self, info: &TensorInfo<'_>) -> Option<&[u8]> {
        let all = self.source.as_slice()?;
        let start = usize::try_from(self.header.data_start() + info.data_offsets.0).ok()?;
        let end = usize::try_from(self.header.data_start() + info.data_offsets.1).ok()?;
        all.get(start..end)
    }

    /// A slice of the tensor of that name, planned from the header alone
    /// (see [`TensorSlice`]); read it with [`SafeTensors::read_slice`].
    ///
    /// # Errors
    /// No tensor of that name, or the arguments do not fit its shape.
    pub fn slice(&self, name: &str, args: &[SliceArg]) -> Result<TensorSlice<'_>> {
        TensorSlice::new(self.info(name)?, args)
    }

    /// The bytes of a slice, reading from the source only the byte ranges
    /// it covers (neighbouring ranges are read together).
    ///
    /// # Errors
    /// A read fails (the error names the file).
    pub fn read_slice(&self, slice: &TensorSlice<'_>) -> Result<Vec<u8>> {
        let info = slice.info();
        let mut out = zeroed_buffer(info.name, slice.nbytes())?;
        if let Some(bytes) = self.lend(&info) {
            slice.gather_into(bytes, &mut out);
            return Ok(out);
        }
        let data_start = self.header.data_start() + info.data_offsets.0;
        let mut filled = 0usize;
        let mut requests: Vec<(u64, &mut [u8])> = Vec::new();
        let mut rest: &mut [u8] = &mut out;
        for range in slice.merged_byte_ranges() {
            let len = (range.end - range.start) as usize;
            let (piece, tail) = rest.split_at_mut(len);
            rest = tail;
            filled += len;
            requests.push((data_start + range.start, piece));
        }
        debug_assert_eq!(filled as u64, slice.nbytes());
        self.source
            .read_ranges(&mut requests)
            .map_err(|e| self.at(Error::Stream(e)))?;
        Ok(out)
    }

    /// Every tensor, in data order, as [`TensorData`] that reads its bytes
    /// from the source on demand (borrowing where the source lends): what
    /// the writer and the transforms take.
    pub fn tensor_data(&self) -> impl ExactSizeIterator<Item = FileTensor<'_, S>> + '_ {
        self.header
            .tensors()
            .map(move |info| FileTensor { file: self, info })
    }
}

/// A buffer of `len` zero bytes for tensor `name`, or an error naming the
/// tensor when that much memory cannot be had (asked for with
/// `try_reserve_exact`, so a header's claim never aborts the process).
///
/// ```
/// let buf = tensorfile_core::file::zeroed_buffer("w", 16)?;
/// assert_eq!(buf, [0; 16]);
/// let err = tensorfile_core::file::zeroed_buffer("w", u64::MAX).unwrap_err();
/// assert!(err.to_string().contains("\"w\""));
/// # Ok::<(), tensorfile_core::Error>(())
/// ```
///
/// # Errors
/// [`Error::Stream`] of kind `OutOfMemory`.
pub fn zeroed_buffer(name: &str, len: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let fits = usize::try_from(len)
        .ok()
        .filter(|&n| buf.try_reserve_exact(n).is_ok());
    match fits {
        Some(n) => {
            buf.resize(n, 0);
            Ok(buf)
        }
        None => Err(Error::Stream(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("tensor {name:?}: cannot allocate {len} bytes"),
        ))),
    }
}

impl<S: InMemory> SafeTensors<S> {
    /// The whole file's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.source.bytes()
    }

    /// The data buffer: every tensor's bytes, back to back.
    pub fn data(&self) -> &[u8] {
        // data_start <= len: checked by rule 1.
        &self.source.bytes()[self.header.data_start() as usize..]
    }

    fn view<'a>(&'a self, info: TensorInfo<'a>) -> TensorView<'a> {
        let (begin, end) = info.data_offsets;
        // In bounds: rule 5 checked that the tensors tile the data buffer.
        TensorView::new(info, &self.data()[begin as usize..end as usize])
    }

    /// The tensor of that name, in O(1), borrowed from the source.
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is none.
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
}

/// One tensor of a [`SafeTensors`] over any source, as [`TensorData`]: its
/// bytes are borrowed when the source lends them and read on demand when
/// it does not.
pub struct FileTensor<'a, S> {
    file: &'a SafeTensors<S>,
    info: TensorInfo<'a>,
}

impl<S> Clone for FileTensor<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for FileTensor<'_, S> {}

impl<S> std::fmt::Debug for FileTensor<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info.fmt(f)
    }
}

impl<'a, S: ByteSource> FileTensor<'a, S> {
    /// The header's description of the tensor.
    pub fn info(&self) -> TensorInfo<'a> {
        self.info
    }

    /// The tensor's name (as [`TensorData::name`], which is ambiguous on a
    /// tensor that implements it for every error).
    pub fn name(&self) -> &'a str {
        self.info.name
    }

    /// Its element type.
    pub fn dtype(&self) -> crate::Dtype {
        self.info.dtype
    }

    /// Its dimensions.
    pub fn shape(&self) -> &'a [u64] {
        self.info.shape
    }
}

impl<S: ByteSource, E: From<Error>> TensorData<E> for FileTensor<'_, S> {
    fn name(&self) -> &str {
        self.info.name
    }
    fn dtype(&self) -> crate::Dtype {
        self.info.dtype
    }
    fn shape(&self) -> &[u64] {
        self.info.shape
    }
    fn byte_len(&self) -> u64 {
        self.info.nbytes()
    }
    fn bytes(&self) -> Option<&[u8]> {
        self.file.lend(&self.info)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), E> {
        Ok(self.file.read_at(&self.info, offset, buf)?)
    }
}

/// Reads and validates the header of a byte source: one read of up to
/// [`HEADER_PROBE`] bytes, and a second only when the header is longer.
/// Rule 5 is checked against the source's length; no data byte is needed.
/// A source held in memory is parsed where it is, without a copy.
///
/// # Errors
/// A read fails, or the header breaks a reader rule.
pub fn read_header_from(source: &impl ByteSource, options: &ReadOptions) -> Result<Header> {
    let len = source.len();
    let header = match source.as_slice() {
        Some(bytes) => Header::from_file_bytes(bytes, options)?,
        None => {
            let probe = len.min(HEADER_PROBE) as usize;
            let mut head = vec![0u8; probe];
            source.read_exact_at(0, &mut head)?;
            let header_len = Header::check_prefix(&head, len, options)?;
            // 8 + N <= len and N <= the cap: a justified allocation.
            let end = 8 + header_len as usize;
            if end > head.len() {
                let have = head.len();
                head.resize(end, 0);
                source.read_exact_at(have as u64, &mut head[have..])?;
            }
            Header::parse(&head[8..end], len - end as u64).map_err(|e| e.looking_at(&head))?
        }
    };
    options.check_accepted(&header)?;
    Ok(header)
}

/// Reads and validates only the header of a seekable stream: 8 + N bytes
/// are read; the data is never touched, and rule 5 is checked against the
/// stream's length.
///
/// # Errors
/// A read fails, or the header breaks a reader rule.
pub fn read_header<R: Read + Seek>(mut reader: R, options: &ReadOptions) -> Result<Header> {
    let len = reader.seek(SeekFrom::End(0))?;
    reader.seek(SeekFrom::Start(0))?;
    let mut prefix = [0u8; 8];
    let got = read_up_to(&mut reader, &mut prefix)?;
    let header_len = Header::check_prefix(&prefix[..got], len, options)?;
    // N <= the cap and 8 + N <= the stream length: a justified allocation.
    let mut text = vec![0u8; header_len as usize];
    reader.read_exact(&mut text)?;
    let header = Header::parse(&text, len - 8 - header_len).map_err(|e| e.looking_at(&prefix))?;
    options.check_accepted(&header)?;
    Ok(header)
}

/// Reads a path's header only (see [`read_header_from`]), with positional
/// reads; the error names the file.
///
/// # Errors
/// The file cannot be opened (or is not a regular file), or its header
/// breaks a reader rule.
pub fn read_header_from_path(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Header> {
    let path = path.as_ref();
    let source = FileSource::open(path).map_err(|e| Error::io(path, e))?;
    read_header_from(&source, options).map_err(|e| e.at(path))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FormatError, LooksLike};

    #[test]
    fn a_stream_says_what_its_first_bytes_look_like() {
        // A gzip stream without a time stamp: its "header length" fits, its
        // header is not UTF-8. Read from a stream (eight bytes, then the
        // header), the rule 2 error still names gzip.
        let mut gzip = b"\x1f\x8b\x08\0\0\0\0\0\x02\x03\xff".to_vec();
        gzip.resize(600_000, 0xff);
        let e = read_header(std::io::Cursor::new(&gzip), &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(e.format(), Some(FormatError::NotUtf8 { .. })),
            "{e}"
        );
        assert_eq!(
            e.format().and_then(FormatError::looks_like),
            Some(LooksLike::Gzip)
        );
        // Eight bytes of text, and no more.
        let e = read_header(std::io::Cursor::new(b"words!"), &ReadOptions::default()).unwrap_err();
        assert_eq!(
            e.format().and_then(FormatError::looks_like),
            Some(LooksLike::Text)
        );
    }
}
