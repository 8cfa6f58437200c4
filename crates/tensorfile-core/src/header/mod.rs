//! The validated header (reader rules 1 and 5 here, 2 to 4 in the private `parse` module):
//! every tensor's description, the metadata, and lookup by name.
//!
//! A header is stored as compact tables: one string buffer for all names,
//! one vector for all dimensions, a 32-byte record per tensor and a hash
//! index of names. Nothing is allocated per tensor, which keeps parsing fast
//! and its memory near the size of the header text.

use std::fmt;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::accept::Accept;
use crate::dtype::{numel, Dtype};
use crate::error::FormatError;
use crate::{Metadata, DEFAULT_MAX_HEADER_LEN};

mod keys;
mod parse;

/// Where [`SafeTensors::open_with`](crate::SafeTensors::open_with) keeps a file's bytes
/// ([`ReadOptions::backend`](ReadOptions::backend)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// A read-only memory map: nothing is copied, but the file must not be
    /// truncated while it is open (see [`SafeTensors::open`](crate::SafeTensors::open)).
    #[default]
    Map,
    /// The whole file read into memory the process owns: nothing done to
    /// the file later affects what was read.
    Load,
}

/// Options for reading a file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReadOptions {
    /// The largest header length N accepted (reader rule 1).
    /// Default: [`DEFAULT_MAX_HEADER_LEN`] (100,000,000 bytes). Headers of
    /// 4 GiB or more are refused whatever the cap: the tables index the
    /// header with 32-bit offsets.
    pub max_header_len: u64,
    /// The dtypes the caller accepts, checked after a successful parse.
    /// Default: every dtype.
    pub accept: Accept,
    /// Where [`SafeTensors::open_with`](crate::SafeTensors::open_with) keeps
    /// a file's bytes: mapped, or read into memory the process owns.
    /// Default: [`Backend::Map`]. Other ways in read through their own
    /// source and ignore it.
    pub backend: Backend,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_header_len: DEFAULT_MAX_HEADER_LEN,
            accept: Accept::default(),
            backend: Backend::default(),
        }
    }
}

impl ReadOptions {
    /// Sets the header cap.
    pub fn max_header_len(mut self, limit: u64) -> Self {
        self.max_header_len = limit;
        self
    }

    /// Sets where [`SafeTensors::open_with`](crate::SafeTensors::open_with)
    /// keeps the file's bytes.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Sets the dtypes accepted (anything that converts to an [`Accept`],
    /// such as the model layer's contracts).
    pub fn accept(mut self, accept: impl Into<Accept>) -> Self {
        self.accept = accept.into();
        self
    }

    /// Checks every tensor of a parsed header against [`ReadOptions::accept`],
    /// in data order; the first one outside it is the error.
    ///
    /// # Errors
    /// [`crate::Error::UnsupportedFormat`] naming the tensor.
    pub fn check_accepted(&self, header: &Header) -> Result<(), crate::Error> {
        if self.accept.is_any() {
            return Ok(());
        }
        match header.tensors().find(|t| !self.accept.allows(t.dtype)) {
            None => Ok(()),
            Some(t) => Err(crate::Error::UnsupportedFormat {
                tensor: t.name.to_string(),
                dtype: t.dtype,
                accepted: self.accept,
            }),
        }
    }
}

/// One tensor's record. Names and dimensions are stored back to back in
/// header order, so a record keeps only where its own end: it starts where
/// the previous record's ends. 32 bytes.
#[derive(Debug, Clone, Copy)]
struct Entry {
    begin: u64,
    end: u64,
    name_end: u32,
    dims_end: u32,
    dtype: Dtype,
}

// The parser's memory budget depends on this.
const _: () = assert!(std::mem::size_of::<Entry>() == 32);

/// A tensor's description in the header: name, dtype, shape and where its
/// bytes are in the data buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    /// The tensor's name (unescaped).
    pub name: &'a str,
    /// Its element type.
    pub dtype: Dtype,
    /// Its dimensions, outermost first; empty for a scalar.
    pub shape: &'a [u64],
    /// `[begin, end)` in bytes, relative to the start of the data buffer.
    pub data_offsets: (u64, u64),
}

impl TensorInfo<'_> {
    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        // Validated at parse time: the product fits, since its byte length does.
        numel(self.shape).unwrap_or(0)
    }

    /// Number of bytes.
    pub fn nbytes(&self) -> u64 {
        self.data_offsets.1 - self.data_offsets.0
    }
}

/// The tables a parse fills, in header order.
#[derive(Clone, Default)]
struct Tables {
    entries: Vec<Entry>,
    names: String,
    dims: Vec<u64>,
    /// Entry indices, hashed by name.
    index: HashTable<u32>,
    metadata: Option<Metadata>,
    warnings: Vec<String>,
}

impl Tables {
    /// Where entry `i`'s name and dimensions start: where entry `i - 1`'s end.
    fn starts(&self, i: usize) -> (usize, usize) {
        match i.checked_sub(1).map(|p| &self.entries[p]) {
            Some(p) => (p.name_end as usize, p.dims_end as usize),
            None => (0, 0),
        }
    }

    fn name(&self, i: usize) -> &str {
        name_at(&self.entries, &self.names, i)
    }

    fn info(&self, i: usize) -> TensorInfo<'_> {
        let (name_start, dims_start) = self.starts(i);
        let e = &self.entries[i];
        TensorInfo {
            name: &self.names[name_start..e.name_end as usize],
            dtype: e.dtype,
            shape: &self.dims[dims_start..e.dims_end as usize],
            data_offsets: (e.begin, e.end),
        }
    }
}

/// Entry `i`'s name, from the tables' parts (for borrows split by field).
fn name_at<'a>(entries: &[Entry], names: &'a str, i: usize) -> &'a str {
    let start = i.checked_sub(1).map_or(0, |p| entries[p].name_end as usize);
    &names[start..entries[i].name_end as usize]
}

/// A validated header: every tensor's description and the metadata.
///
/// Lookup by name is O(1); iteration is in data order (by begin offset, then
/// end) or in name order.
#[derive(Clone)]
pub struct Header {
    header_len: u64,
    data_len: u64,
    tables: Tables,
    /// Entry indices sorted by (begin, end): data order.
    order: Vec<u32>,
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Header")
            .field("header_len", &self.header_len)
            .field("data_len", &self.data_len)
            .field("tensors", &self.len())
            .field("metadata", &self.tables.metadata)
            .finish_non_exhaustive()
    }
}

/// The hasher for the name index. Fixed seeds: lookups need no randomness
/// for safety here (inputs are bounded by the header cap) and fixed seeds
/// keep behaviour reproducible.
fn hash_name(name: &str) -> u64 {
    foldhash::fast::FixedState::with_seed(0x7e45_0f11e).hash_one(name)
}

impl Header {
    /// Validates the 8-byte prefix of a file of `file_len` bytes against rule
    /// 1 and returns N, the header length.
    ///
    /// # Errors
    ///
    /// [`FormatError::TooShort`] when there are fewer than 8 bytes,
    /// [`FormatError::HeaderTooLarge`] when N is over `options.max_header_len`
    /// (or `u32::MAX`), and [`FormatError::HeaderPastEof`] when 8 + N passes
    /// `file_len`; each says what the prefix looks like when it is another
    /// format's signature or text ([`FormatError::looks_like`]).
    pub fn check_prefix(
        prefix: &[u8],
        file_len: u64,
        options: &ReadOptions,
    ) -> Result<u64, FormatError> {
        let Some(bytes) = prefix.get(..8) else {
            return Err(FormatError::TooShort {
                len: file_len,
                looks_like: None,
            }
            .looking_at(prefix));
        };
        let mut n = [0u8; 8];
        n.copy_from_slice(bytes);
        let header_len = u64::from_le_bytes(n);
        let limit = options.max_header_len.min(u32::MAX as u64);
        if header_len > limit {
            return Err(FormatError::HeaderTooLarge {
                header_len,
                limit,
                looks_like: None,
            }
            .looking_at(prefix));
        }
        let end = header_len.checked_add(8);
        match end {
            Some(end) if end <= file_len => Ok(header_len),
            _ => Err(FormatError::HeaderPastEof {
                header_len,
                end: end.unwrap_or(u64::MAX),
                len: file_len,
                looks_like: None,
            }
            .looking_at(prefix)),
        }
    }

    /// Parses and validates a whole file held in memory (rules 1 to 5).
    ///
    /// # Errors
    ///
    /// The [`FormatError`] of the first rule `bytes` breaks (see
    /// [`Header::check_prefix`] and [`Header::parse`]).
    pub fn from_file_bytes(bytes: &[u8], options: &ReadOptions) -> Result<Header, FormatError> {
        let file_len = bytes.len() as u64;
        let header_len = Header::check_prefix(bytes, file_len, options)?;
        // Both fit: check_prefix verified 8 + N <= len.
        let text = &bytes[8..8 + header_len as usize];
        Header::parse(text, file_len - 8 - header_len).map_err(|e| e.looking_at(bytes))
    }

    /// Parses the header text (the N bytes after the length) of a file whose
    /// data buffer is `data_len` bytes long, and checks rules 2 to 5.
    ///
    /// # Errors
    ///
    /// [`FormatError::HeaderTooLarge`] when the text is over `u32::MAX` bytes;
    /// otherwise the [`FormatError`] of the first rule broken: invalid JSON,
    /// a bad entry or metadata, or offsets that do not tile `data_len` bytes.
    pub fn parse(text: &[u8], data_len: u64) -> Result<Header, FormatError> {
        if text.len() > u32::MAX as usize {
            return Err(FormatError::HeaderTooLarge {
                header_len: text.len() as u64,
                limit: u32::MAX as u64,
                looks_like: None,
            });
        }
        let tables = parse::parse(text)?;
        let mut header = Header {
            header_len: text.len() as u64,
            data_len,
            tables,
            order: Vec::new(),
        };
        header.check_tiling()?;
        Ok(header)
    }

    /// Rule 5: sorted by (begin, end), the tensors tile the data buffer.
    fn check_tiling(&mut self) -> Result<(), FormatError> {
        let entries = &self.tables.entries;
        let mut order: Vec<u32> = (0..entries.len() as u32).collect();
        // Canonical files list tensors in data order already; pdqsort makes
        // that case linear.
        order.sort_unstable_by_key(|&i| {
            let e = &entries[i as usize];
            (e.begin, e.end)
        });
        let mut expected = 0u64;
        let mut previous: Option<u32> = None;
        for &i in &order {
            let e = &entries[i as usize];
            if e.begin != expected {
                return Err(FormatError::NotContiguous {
                    tensor: self.tables.name(i as usize).to_string(),
                    begin: e.begin,
                    expected,
                    previous: previous.map(|p| self.tables.name(p as usize).to_string()),
                });
            }
            expected = e.end;
            previous = Some(i);
        }
        if expected != self.data_len {
            return Err(FormatError::NotCovered {
                end: expected,
                data_len: self.data_len,
            });
        }
        self.order = order;
        Ok(())
    }

    /// N: the header's length in bytes, padding included.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Where the data buffer starts in the file: 8 + N.
    pub fn data_start(&self) -> u64 {
        8 + self.header_len
    }

    /// The data buffer's length in bytes.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tables.entries.len()
    }

    /// Whether the file holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.tables.entries.is_empty()
    }

    /// The metadata; `None` when the header has no `__metadata__` or it is `null`.
    pub fn metadata(&self) -> Option<&Metadata> {
        self.tables.metadata.as_ref()
    }

    /// Things a reader accepts but a careful writer would not have written,
    /// such as unknown fields in a tensor entry.
    pub fn warnings(&self) -> &[String] {
        &self.tables.warnings
    }

    /// The tensor of that name, in O(1).
    pub fn get(&self, name: &str) -> Option<TensorInfo<'_>> {
        let t = &self.tables;
        let &i = t
            .index
            .find(hash_name(name), |&i| t.name(i as usize) == name)?;
        Some(t.info(i as usize))
    }

    /// The tensors in data order (by begin offset, then end offset).
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorInfo<'_>> + '_ {
        self.order
            .iter()
            .map(move |&i| self.tables.info(i as usize))
    }

    /// The tensors in ascending byte order of their names.
    pub fn tensors_by_name(&self) -> Vec<TensorInfo<'_>> {
        let mut all: Vec<TensorInfo<'_>> = self.tensors().collect();
        all.sort_unstable_by(|a, b| a.name.cmp(b.name));
        all
    }

    /// The tensor at position `i` in data order.
    pub fn tensor_at(&self, i: usize) -> Option<TensorInfo<'_>> {
        let &e = self.order.get(i)?;
        Some(self.tables.info(e as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LooksLike;

    /// The error of reading `bytes` as a whole file.
    fn refused(bytes: &[u8]) -> FormatError {
        Header::from_file_bytes(bytes, &ReadOptions::default()).unwrap_err()
    }

    #[test]
    fn rule_1_and_2_errors_say_what_other_files_look_like() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01";
        let e = refused(png);
        assert_eq!(e.rule(), 1);
        assert_eq!(e.looks_like(), Some(LooksLike::Png));
        assert_eq!(
            e.to_string(),
            "rule 1: the header length is 727905341920923785 bytes, over the limit of 100000000; \
             this looks like a PNG image, not a safetensors file"
        );
        // Too short, and past the end of the file.
        let e = refused(b"hi\n");
        assert!(matches!(e, FormatError::TooShort { .. }), "{e}");
        assert!(e
            .to_string()
            .ends_with("; this looks like plain text, not a safetensors file"));
        let e = refused(b"\x1f\x8b\x08\0\0\0\0\0\x02\x03");
        assert!(matches!(e, FormatError::HeaderPastEof { .. }), "{e}");
        assert_eq!(e.looks_like(), Some(LooksLike::Gzip));
        // A gzip stream without a time stamp, long enough that its header
        // length (560927) fits: its "header" is not UTF-8 (rule 2).
        let mut gzip = b"\x1f\x8b\x08\0\0\0\0\0\x02\x03\xff".to_vec();
        gzip.resize(600_000, 0xff);
        let e = refused(&gzip);
        assert!(matches!(e, FormatError::NotUtf8 { .. }), "{e}");
        assert!(e
            .to_string()
            .ends_with("; this looks like gzip-compressed data, not a safetensors file"));
    }

    #[test]
    fn broken_safetensors_files_get_no_hint() {
        // A header length past the end, a header that is not JSON, and
        // one that is no object: their first bytes are a length.
        for bytes in [
            &b"\x40\0\0\0\0\0\0\0{\"a\":1}"[..],
            b"\x02\0\0\0\0\0\0\0{x",
            b"\x02\0\0\0\0\0\0\0[]",
        ] {
            let e = refused(bytes);
            assert_eq!(e.looks_like(), None, "{e}");
            assert!(!e.to_string().contains("looks like"), "{e}");
        }
    }
}
