//! Opening `.npy` arrays and `.npz` archives: every array's header read
//! and checked when the file is opened, its data read on demand.

use std::path::{Path, PathBuf};

use tensorfile_zip::{Entry, Method, ZipError, ZipIndex};

use super::descr::{self, Element};
use super::error::NpzError;
use super::header::{self, Descr, NpyHeader};
use crate::source::{ByteSource, FileSource};
use crate::{Error, Result};

/// Bounds on what opening and reading a file may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpzLimits {
    /// The longest `.npy` header read, in bytes (1 MiB by default; numpy
    /// writes 118 bytes for a plain array, and refuses more than 10000 in
    /// `np.load` unless told otherwise).
    pub max_header_len: u64,
    /// The most bytes held to put Fortran-order arrays in C order, by all
    /// the arrays being reordered at once: 1 GiB by default. An array is
    /// reordered a block at a time (half the budget at most, plus the
    /// output piece), in one pass over its data per block, so any array
    /// converts within it; it only decides how many passes a large one
    /// takes.
    pub max_reorder_bytes: u64,
    /// The zip reader's bounds (the central directory's size).
    pub zip: tensorfile_zip::ReadLimits,
}

impl Default for NpzLimits {
    fn default() -> NpzLimits {
        NpzLimits {
            max_header_len: 1 << 20,
            max_reorder_bytes: 1 << 30,
            zip: tensorfile_zip::ReadLimits::default(),
        }
    }
}

/// Where an array's bytes (header and data) are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bytes {
    /// A range of the source: a `.npy` file, or a stored member.
    Stored {
        /// The array's first byte in the source.
        start: u64,
        /// Its length.
        len: u64,
    },
    /// A deflated member, inflated on demand.
    Deflated(Entry),
}

impl Bytes {
    /// The array's length in bytes (inflated).
    pub(crate) fn len(&self) -> u64 {
        match self {
            Bytes::Stored { len, .. } => *len,
            Bytes::Deflated(e) => e.size,
        }
    }

    /// Fills `buf` with the bytes at `offset` of the array. A deflated
    /// member is inflated from its start (callers read its header once,
    /// and its data in one pass).
    pub(crate) fn read(
        &self,
        source: &dyn ByteSource,
        offset: u64,
        buf: &mut [u8],
    ) -> std::result::Result<(), ZipError> {
        match self {
            Bytes::Stored { start, .. } => {
                source
                    .read_exact_at(start + offset, buf)
                    .map_err(|e| ZipError::Read {
                        what: "array data".into(),
                        offset: start + offset,
                        kind: e.kind(),
                        message: e.to_string(),
                    })
            }
            Bytes::Deflated(e) => {
                let end = offset + buf.len() as u64;
                e.inflate_prefix(source, end, |at, piece| {
                    copy_overlap(at, piece, offset, buf);
                })
            }
        }
    }
}

/// Copies the part of `piece` (at `at`) that falls in `buf` (at `offset`).
pub(crate) fn copy_overlap(at: u64, piece: &[u8], offset: u64, buf: &mut [u8]) {
    let end = offset + buf.len() as u64;
    let (s, e) = (at.max(offset), (at + piece.len() as u64).min(end));
    if s < e {
        buf[(s - offset) as usize..(e - offset) as usize]
            .copy_from_slice(&piece[(s - at) as usize..(e - at) as usize]);
    }
}

/// One array of a file: what its header says, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyInfo {
    /// The array's name: the member's name without `.npy` (as `np.load`
    /// gives it), or for a single `.npy` file the name it was opened with.
    pub name: String,
    /// The zip member holding it (`None` for a `.npy` file).
    pub member: Option<String>,
    /// How the member is stored (`None` for a `.npy` file).
    pub method: Option<Method>,
    /// The header.
    pub header: NpyHeader,
    /// What its items are.
    pub element: Element,
    /// Its element count.
    pub numel: u64,
    /// Bytes per item as stored.
    pub itemsize: u64,
    pub(crate) bytes: Bytes,
    /// The zip member (`None` for a `.npy` file): its CRC-32 is checked
    /// when the array is read in one pass.
    pub(crate) entry: Option<Entry>,
}

impl NpyInfo {
    /// Whether its data is stored in Fortran order and must be reordered
    /// (arrays with at most one dimension longer than 1, or empty ones,
    /// are the same in both).
    pub fn reordered(&self) -> bool {
        self.header.fortran_order
            && self.numel > 0
            && self.header.shape.iter().filter(|&&d| d > 1).count() > 1
    }

    /// Bytes of data (the header's shape and item size).
    pub fn data_len(&self) -> u64 {
        self.numel * self.itemsize
    }
}

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// A single `.npy` array.
    Npy,
    /// A `.npz` archive of `.npy` members.
    Npz,
}

/// An opened `.npy` file or `.npz` archive, its arrays checked.
#[derive(Debug)]
pub struct NpzFile<S: ByteSource = FileSource> {
    source: S,
    path: Option<PathBuf>,
    container: Container,
    arrays: Vec<NpyInfo>,
    limits: NpzLimits,
}

impl NpzFile<FileSource> {
    /// Opens a `.npy` file or a `.npz` archive (which one is decided by
    /// the first bytes: `\x93NUMPY` or a zip), with default limits. A
    /// `.npy` file's array is named after the file (`w` for `w.npy`).
    ///
    /// # Errors
    /// The file cannot be read, or breaks the format (see [`NpzError`]),
    /// naming it.
    pub fn open(path: impl AsRef<Path>) -> Result<NpzFile<FileSource>> {
        NpzFile::open_with(path, &NpzLimits::default())
    }

    /// [`NpzFile::open`] with limits.
    ///
    /// # Errors
    /// As [`NpzFile::open`].
    pub fn open_with(path: impl AsRef<Path>, limits: &NpzLimits) -> Result<NpzFile<FileSource>> {
        let path = path.as_ref();
        let source = FileSource::open(path).map_err(|e| Error::io(path, e))?;
        let name = path
            .file_stem()
            .map_or_else(|| "arr_0".to_string(), |s| s.to_string_lossy().into_owned());
        let file = NpzFile::from_source(source, &name, limits).map_err(|e| e.at(path))?;
        Ok(NpzFile {
            path: Some(path.to_path_buf()),
            ..file
        })
    }
}

impl<S: ByteSource> NpzFile<S> {
    /// Reads the arrays `source` holds: a `.npy` array (named `npy_name`)
    /// or a `.npz` archive.
    ///
    /// # Errors
    /// As [`NpzFile::open`].
    pub fn from_source(source: S, npy_name: &str, limits: &NpzLimits) -> Result<NpzFile<S>> {
        let mut head = [0u8; 6];
        let n = source.len().min(6) as usize;
        source
            .read_exact_at(0, &mut head[..n])
            .map_err(Error::from)?;
        let (container, arrays) = if head[..n] == header::MAGIC[..n] && n == 6 {
            let bytes = Bytes::Stored {
                start: 0,
                len: source.len(),
            };
            let info = read_info(&source, npy_name.to_string(), None, None, bytes, limits)?;
            (Container::Npy, vec![info])
        } else {
            (Container::Npz, read_archive(&source, limits)?)
        };
        Ok(NpzFile {
            source,
            path: None,
            container,
            arrays,
            limits: *limits,
        })
    }

    /// Whether this is a `.npy` file or a `.npz` archive.
    pub fn container(&self) -> Container {
        self.container
    }

    /// The path, if the file was opened from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The arrays, in the archive's order.
    pub fn arrays(&self) -> &[NpyInfo] {
        &self.arrays
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    pub(crate) fn limits(&self) -> &NpzLimits {
        &self.limits
    }

    /// Names this file in an error.
    pub(crate) fn name_error(&self, e: Error) -> Error {
        match &self.path {
            Some(p) => e.at(p),
            None => e,
        }
    }
}

/// Reads and checks one array's header.
fn read_info(
    source: &dyn ByteSource,
    name: String,
    member: Option<String>,
    method: Option<Method>,
    bytes: Bytes,
    limits: &NpzLimits,
) -> Result<NpyInfo> {
    let total = bytes.len();
    let mut head = vec![0u8; total.min(12) as usize];
    bytes.read(source, 0, &mut head).map_err(zip_error)?;
    let ((major, _), hlen) = header::read_prefix(&name, &head)?;
    if hlen > limits.max_header_len {
        return Err(NpzError::HeaderTooLong {
            array: name,
            len: hlen,
            limit: limits.max_header_len,
        }
        .into());
    }
    let need = header::prefix_len(major) + hlen;
    if need > total {
        return Err(NpzError::Truncated {
            array: name,
            what: format!("the {hlen}-byte .npy header"),
            needed: need,
            available: total,
        }
        .into());
    }
    // `need` <= max_header_len + 12 and <= the array's length.
    let mut all = vec![0u8; need as usize];
    bytes.read(source, 0, &mut all).map_err(zip_error)?;
    let header = header::parse(&name, &all)?;
    let descr_text = header.descr.to_string();
    let refuse = |reason: String| -> Error {
        NpzError::Dtype {
            array: name.clone(),
            descr: descr_text.clone(),
            reason,
        }
        .into()
    };
    let element = match &header.descr {
        Descr::Structured(_) => {
            return Err(refuse(
                "a structured dtype (a list of fields): safetensors holds one dtype per tensor; save each field as its own array".into(),
            ))
        }
        Descr::Simple(s) => descr::element(s).map_err(refuse)?,
    };
    let itemsize = match element {
        Element::Plain { dtype, .. } => u64::from(dtype.bits() / 8),
        Element::Opaque { itemsize } => u64::from(itemsize),
    };
    let shape_error = |problem: &str| -> Error {
        NpzError::Shape {
            array: name.clone(),
            shape: header.shape.clone(),
            problem: problem.to_string(),
        }
        .into()
    };
    let numel = crate::dtype::numel(&header.shape)
        .ok_or_else(|| shape_error("the element count does not fit 64 bits"))?;
    let data = numel
        .checked_mul(itemsize)
        .ok_or_else(|| shape_error("the byte count does not fit 64 bits"))?;
    let found = total - header.data_offset;
    if found != data {
        return Err(NpzError::DataLength {
            array: name,
            shape: header.shape,
            expected: data,
            found,
        }
        .into());
    }
    Ok(NpyInfo {
        name,
        member,
        method,
        header,
        element,
        numel,
        itemsize,
        bytes,
        entry: None,
    })
}

/// A zip error: a failed read of the file as an I/O error (so that the
/// file is named), anything else as the archive's fault.
pub(crate) fn zip_error(e: ZipError) -> Error {
    match e.io_error() {
        Some(io) => Error::from(io),
        None => NpzError::Zip(e).into(),
    }
}

/// Reads the archive's directory and every member's header.
fn read_archive(source: &dyn ByteSource, limits: &NpzLimits) -> Result<Vec<NpyInfo>> {
    let index = ZipIndex::read_with(source, &limits.zip).map_err(zip_error)?;
    check_no_overlap(index.entries())?;
    let mut arrays = Vec::with_capacity(index.entries().len());
    for e in index.entries() {
        // A zip's directory entries hold nothing; tools other than numpy
        // write them.
        if e.name.ends_with('/') && e.size == 0 {
            continue;
        }
        let Some(name) = e.name.strip_suffix(".npy") else {
            return Err(NpzError::NotArray {
                member: e.name.clone(),
            }
            .into());
        };
        // Names are unique: the zip reader refuses a name given twice, and
        // stripping `.npy` from every member keeps them apart.
        let bytes = match e.method {
            Method::Stored => Bytes::Stored {
                start: e.data_offset,
                len: e.size,
            },
            Method::Deflated => Bytes::Deflated(e.clone()),
        };
        let mut info = read_info(
            source,
            name.to_string(),
            Some(e.name.clone()),
            Some(e.method),
            bytes,
            limits,
        )?;
        info.entry = Some(e.clone());
        arrays.push(info);
    }
    Ok(arrays)
}

/// Refuses members whose stored bytes overlap: numpy never writes them,
/// and overlapping members are how some zip bombs make one stream count
/// many times.
fn check_no_overlap(entries: &[Entry]) -> Result<()> {
    let mut spans: Vec<(u64, u64, &str)> = entries
        .iter()
        .filter(|e| e.compressed_size > 0)
        .map(|e| {
            (
                e.data_offset,
                e.data_offset + e.compressed_size,
                e.name.as_str(),
            )
        })
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((_, a_end, a), (b_start, b_end, b)) = (w[0], w[1]);
        if b_start < a_end {
            return Err(NpzError::Overlap {
                first: a.to_string(),
                second: b.to_string(),
                start: b_start,
                end: a_end.min(b_end),
            }
            .into());
        }
    }
    Ok(())
}
