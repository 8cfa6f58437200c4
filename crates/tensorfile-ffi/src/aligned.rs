//! Reading a file into memory with every tensor 64-byte aligned (`fs_open`).
//!
//! A file's tensors sit back to back with no padding, so their offsets can
//! be anything. The header is read and validated first; then the data is
//! read once, sequentially, straight into one 64-byte aligned allocation
//! (the core's `AlignedBuffer`: huge pages where they help) in which each
//! tensor gets a slot starting at a multiple of 64.
//! The file is never mapped, and no byte is copied twice.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use tensorfile_core::read::AlignedBuffer;
use tensorfile_core::{read_header, Error, Header, ReadOptions};

use crate::error::{io_code, Failure};

/// The alignment `fs_open` promises for every tensor's data.
pub(crate) const ALIGN: usize = 64;

/// Where a zero-byte tensor's data pointer points: non-NULL and aligned.
#[repr(C, align(64))]
struct Empty([u8; 0]);
static EMPTY: Empty = Empty([]);

/// A file read into aligned slots.
pub(crate) struct AlignedFile {
    /// The validated header.
    pub(crate) header: Header,
    /// The slots (`None` when the tensors hold no bytes at all).
    memory: Option<AlignedBuffer>,
    /// Offset of each tensor's slot in `memory`, in data order.
    slots: Vec<usize>,
}

impl AlignedFile {
    /// Reads and validates `path`.
    pub(crate) fn read(path: &Path) -> Result<AlignedFile, Failure> {
        let with_path = |e: std::io::Error| Failure::from(Error::io(path, e));
        let mut file = File::open(path).map_err(with_path)?;
        // Validates all five rules; rule 5 against the file's length.
        let header = read_header(&mut file, &ReadOptions::default()).map_err(|e| match e {
            Error::Stream(io) => with_path(io),
            other => Failure::from(other),
        })?;

        let mut slots = Vec::with_capacity(header.len());
        let mut total = 0usize;
        for t in header.tensors() {
            slots.push(total);
            // The lengths add up to the data buffer's length (rule 5), which
            // is at most the file's: the padding of at most 63 bytes each is
            // all that can overflow, on a 32-bit host.
            let len = usize::try_from(t.nbytes()).ok();
            total = len
                .and_then(|len| len.checked_next_multiple_of(ALIGN))
                .and_then(|padded| total.checked_add(padded))
                .ok_or_else(|| {
                    Failure::new(
                        crate::error::TL_ENOMEM,
                        format!("{}: the tensors do not fit in memory", path.display()),
                    )
                })?;
        }
        if total == 0 {
            return Ok(AlignedFile {
                header,
                memory: None,
                slots,
            });
        }
        let mut memory = AlignedBuffer::new(total).map_err(|e| {
            Failure::new(
                io_code(&e),
                format!("{}: cannot allocate {total} bytes: {e}", path.display()),
            )
        })?;

        file.seek(SeekFrom::Start(header.data_start()))
            .map_err(with_path)?;
        // Reads at least as large as the buffer bypass it; small tensors
        // share system calls.
        let mut reader = BufReader::with_capacity(1 << 20, file);
        for (t, &slot) in header.tensors().zip(&slots) {
            // In bounds: `total` was summed from these very lengths.
            let len = t.nbytes() as usize;
            let dest = memory.get_mut(slot..slot + len).ok_or_else(|| {
                Failure::internal(format_args!("tensor {:?}: slot out of bounds", t.name))
            })?;
            reader.read_exact(dest).map_err(|e| {
                Failure::new(
                    io_code(&e),
                    format!(
                        "{}: reading tensor {:?} (data bytes {}..{}) failed: {e}",
                        path.display(),
                        t.name,
                        t.data_offsets.0,
                        t.data_offsets.1
                    ),
                )
            })?;
        }
        Ok(AlignedFile {
            header,
            memory: Some(memory),
            slots,
        })
    }

    /// The data of tensor `i` (data order): 64-byte aligned.
    pub(crate) fn data(&self, i: usize) -> *const u8 {
        match (&self.memory, self.slots.get(i)) {
            // A slot offset is at most the mapping's length.
            (Some(m), Some(&slot)) => m.as_ptr().wrapping_add(slot),
            _ => EMPTY.0.as_ptr(),
        }
    }
}
