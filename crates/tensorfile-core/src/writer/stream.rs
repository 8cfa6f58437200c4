//! Streaming the tensors' bytes after the header.

use std::io::{self, Read, Write};

use super::{Layout, Slot, TensorSpec, WriteOptions};
use crate::error::WriteError;
use crate::{Metadata, Result};

/// Size of the buffer [`StreamWriter::write_from`] reads through.
const READ_PIECE: usize = 1 << 20;

/// Writes a planned file to `W`: the header at creation, then each tensor's
/// bytes in file order ([`Layout::slots`]), in pieces of any size.
///
/// It holds the header and at most one piece: one `write_all` per piece,
/// nothing copied. Any error stops it: later calls fail with
/// [`WriteError::Poisoned`]. [`StreamWriter::finish`] checks that every
/// tensor is complete.
///
/// ```
/// use tensorfile_core::writer::{StreamWriter, TensorSpec, WriteOptions};
/// use tensorfile_core::Dtype;
///
/// let specs = vec![
///     TensorSpec::new("c", Dtype::U8, [1]),
///     TensorSpec::new("b", Dtype::U8, [3]),
///     TensorSpec::new("a", Dtype::U8, [2]),
/// ];
/// let mut w = StreamWriter::create(Vec::new(), &specs, None, &WriteOptions::default())?;
/// assert_eq!(w.expected().map(|s| s.name()), Some("a")); // file order: by name
/// w.write(&[1])?;
/// w.write(&[2, 3, 4, 5])?; // a piece may end one tensor and go on with the next
/// w.write_from("c", &[6u8][..])?; // a whole tensor, from any `Read`
/// let bytes = w.finish()?;
/// assert_eq!(&bytes[bytes.len() - 6..], &[1, 2, 3, 4, 5, 6]);
/// # Ok::<(), tensorfile_core::Error>(())
/// ```
#[derive(Debug)]
pub struct StreamWriter<W: Write> {
    out: W,
    layout: Layout,
    /// Index in file order of the tensor being filled (`slots.len()` when done).
    current: usize,
    /// Bytes of the current tensor written so far.
    filled: u64,
    poisoned: bool,
    /// Reused by `write_from`; allocated on first use.
    buf: Vec<u8>,
}

impl StreamWriter<Vec<u8>> {
    /// A writer into memory whose output buffer is the layout's own header
    /// buffer, grown once to the file's size: the header is neither copied
    /// nor held twice (for many small tensors that is most of the memory).
    pub(crate) fn in_memory(mut layout: Layout) -> Result<StreamWriter<Vec<u8>>> {
        let mut out = layout.take_header();
        let too_large = || WriteError::DataTooLarge {
            tensor: String::new(),
        };
        let data_len = usize::try_from(layout.data_len()).map_err(|_| too_large())?;
        out.try_reserve_exact(data_len).map_err(|_| too_large())?;
        Ok(StreamWriter::started(out, layout))
    }
}

impl<W: Write> StreamWriter<W> {
    /// A writer whose output already holds the header.
    fn started(out: W, layout: Layout) -> StreamWriter<W> {
        StreamWriter {
            out,
            layout,
            current: 0,
            filled: 0,
            poisoned: false,
            buf: Vec::new(),
        }
    }

    /// Plans the layout of `specs` and writes the header to `out`.
    ///
    /// # Errors
    ///
    /// [`Error::Write`](crate::Error::Write) when `specs` cannot be planned (see [`Layout::new`]) or
    /// the header cannot be written to `out` ([`WriteError::Output`]).
    pub fn create(
        out: W,
        specs: &[TensorSpec],
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<StreamWriter<W>> {
        StreamWriter::new(out, Layout::new(specs, metadata, options)?)
    }

    /// Writes the header of `layout` to `out`.
    ///
    /// # Errors
    ///
    /// [`Error::Write`](crate::Error::Write) with [`WriteError::Output`] when `out` refuses the
    /// header.
    pub fn new(mut out: W, layout: Layout) -> Result<StreamWriter<W>> {
        out.write_all(layout.header()).map_err(WriteError::Output)?;
        Ok(StreamWriter::started(out, layout))
    }

    /// The plan being written. (Its header is empty for the writer behind
    /// [`super::serialize`], which took the header bytes as its output.)
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The tensor whose bytes come next, `None` when every tensor is complete.
    pub fn expected(&self) -> Option<Slot<'_>> {
        self.layout.slot(self.current)
    }

    /// Bytes still missing from the tensor that comes next.
    pub fn remaining(&self) -> u64 {
        self.expected().map_or(0, |s| s.byte_len() - self.filled)
    }

    /// The output, for inspection. Writing to it directly corrupts the file.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Moves past zero-size tensors not named `name`: they need no bytes.
    fn skip_empty_except(&mut self, name: Option<&str>) {
        while let Some(slot) = self.layout.slot(self.current) {
            if self.filled > 0 || slot.byte_len() > 0 || Some(slot.name()) == name {
                break;
            }
            self.current += 1;
        }
    }

    fn check_live(&self) -> Result<(), WriteError> {
        if self.poisoned {
            Err(WriteError::Poisoned)
        } else {
            Ok(())
        }
    }

    /// Runs `f`, poisoning the writer if it fails.
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, WriteError>) -> Result<T> {
        self.check_live()?;
        let result = f(self);
        if result.is_err() {
            self.poisoned = true;
        }
        Ok(result?)
    }

    /// Writes the next bytes of the data buffer. A piece may end one tensor
    /// and go on with the next; it may not go past the last tensor.
    ///
    /// # Errors
    ///
    /// [`Error::Write`](crate::Error::Write): [`WriteError::Trailing`] when `piece` goes past the
    /// last tensor, [`WriteError::Output`] when the output fails,
    /// [`WriteError::Poisoned`] after an earlier failure.
    pub fn write(&mut self, piece: &[u8]) -> Result<()> {
        self.guarded(|w| {
            let left = w.layout.data_len() - w.data_written();
            let len = piece.len() as u64;
            if len > left {
                return Err(WriteError::Trailing { extra: len - left });
            }
            w.out.write_all(piece).map_err(WriteError::Output)?;
            w.advance(len);
            Ok(())
        })
    }

    /// Writes all of the next tensor's bytes (none of which may be written
    /// yet); for callers that follow the layout's order themselves.
    pub(crate) fn write_next(&mut self, data: &[u8]) -> Result<()> {
        self.guarded(|w| {
            let expected = w.layout.slot_len(w.current).ok_or(WriteError::Trailing {
                extra: data.len() as u64,
            })?;
            if w.filled != 0 || data.len() as u64 != expected {
                let slot = w.layout.slot(w.current).ok_or(WriteError::Poisoned)?;
                if w.filled != 0 {
                    return Err(WriteError::Started {
                        tensor: slot.name().to_string(),
                        filled: w.filled,
                    });
                }
                return Err(WriteError::LengthMismatch {
                    tensor: slot.name().to_string(),
                    dtype: slot.dtype(),
                    shape: slot.shape().to_vec(),
                    expected,
                    actual: data.len() as u64,
                });
            }
            w.out.write_all(data).map_err(WriteError::Output)?;
            w.current += 1;
            Ok(())
        })
    }

    /// Writes all of tensor `name`'s bytes, which must be the next tensor
    /// with none of its bytes written yet, and `data` exactly its length.
    ///
    /// # Errors
    ///
    /// [`Error::Write`](crate::Error::Write): [`WriteError::OutOfOrder`] or [`WriteError::Started`]
    /// when `name` is not the next untouched tensor,
    /// [`WriteError::LengthMismatch`] when `data` is not its length,
    /// [`WriteError::Output`] or [`WriteError::Poisoned`].
    pub fn write_tensor(&mut self, name: &str, data: &[u8]) -> Result<()> {
        self.guarded(|w| {
            let len = data.len() as u64;
            let expected = w.expect_start(name)?;
            if len != expected {
                let (dtype, shape) = match w.expected() {
                    Some(slot) => (slot.dtype(), slot.shape().to_vec()),
                    None => return Err(WriteError::Poisoned),
                };
                return Err(WriteError::LengthMismatch {
                    tensor: name.to_string(),
                    dtype,
                    shape,
                    expected,
                    actual: len,
                });
            }
            w.out.write_all(data).map_err(WriteError::Output)?;
            w.advance(len);
            Ok(())
        })
    }

    /// Writes tensor `name`'s bytes from `source`, which must be the next
    /// tensor with none of its bytes written yet, and `source` must hold
    /// exactly its length (use [`Read::take`] to cut a longer stream).
    /// Returns the number of bytes written.
    ///
    /// # Errors
    ///
    /// [`Error::Write`](crate::Error::Write): as [`StreamWriter::write_tensor`] for `name`;
    /// [`WriteError::TooLong`] or [`WriteError::TooShort`] when `source` does
    /// not hold exactly its length, [`WriteError::Input`] when it fails.
    pub fn write_from<R: Read>(&mut self, name: &str, mut source: R) -> Result<u64> {
        self.guarded(|w| {
            let expected = w.expect_start(name)?;
            if w.buf.is_empty() {
                w.buf = vec![0; READ_PIECE];
            }
            let mut received = 0u64;
            loop {
                let n = match source.read(&mut w.buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(source) => {
                        return Err(WriteError::Input {
                            tensor: name.to_string(),
                            expected,
                            received,
                            source,
                        })
                    }
                };
                let total = received + n as u64;
                if total > expected {
                    return Err(WriteError::TooLong {
                        tensor: name.to_string(),
                        expected,
                        received: total,
                    });
                }
                let piece = w.buf.get(..n).ok_or(WriteError::Poisoned)?;
                w.out.write_all(piece).map_err(WriteError::Output)?;
                received = total;
            }
            if received < expected {
                return Err(WriteError::TooShort {
                    tensor: name.to_string(),
                    expected,
                    received,
                });
            }
            w.advance(received);
            Ok(received)
        })
    }

    /// Checks every tensor is complete, flushes and returns the output.
    ///
    /// # Errors
    ///
    /// [`Error::Write`](crate::Error::Write): [`WriteError::TooShort`] when a tensor is incomplete,
    /// [`WriteError::Output`] when the flush fails, [`WriteError::Poisoned`]
    /// after an earlier failure.
    pub fn finish(mut self) -> Result<W> {
        self.check_live()?;
        self.skip_empty_except(None);
        if let Some(slot) = self.expected() {
            return Err(WriteError::TooShort {
                tensor: slot.name().to_string(),
                expected: slot.byte_len(),
                received: self.filled,
            }
            .into());
        }
        self.out.flush().map_err(WriteError::Output)?;
        Ok(self.out)
    }

    /// The byte length of tensor `name`, if it is next and untouched.
    fn expect_start(&mut self, name: &str) -> Result<u64, WriteError> {
        self.skip_empty_except(Some(name));
        match self.layout.slot(self.current) {
            Some(slot) if slot.name() == name && self.filled == 0 => Ok(slot.byte_len()),
            Some(slot) if slot.name() == name => Err(WriteError::Started {
                tensor: name.to_string(),
                filled: self.filled,
            }),
            expected => Err(WriteError::OutOfOrder {
                expected: expected.map(|s| s.name().to_string()),
                got: name.to_string(),
            }),
        }
    }

    /// Bytes of the data buffer written so far.
    fn data_written(&self) -> u64 {
        self.layout
            .slot_begin(self.current)
            .map_or(self.layout.data_len(), |begin| begin + self.filled)
    }

    /// Accounts for `len` bytes written (at most what is left). Stops at a
    /// tensor boundary when the bytes run out, so that a zero-size tensor
    /// there can still be named by `write_tensor`.
    fn advance(&mut self, len: u64) {
        let mut left = len;
        // Only lengths are needed: `slot_len` spares building a `Slot`,
        // which matters when a file has many small tensors.
        while let Some(slot_len) = self.layout.slot_len(self.current) {
            let room = slot_len - self.filled;
            if left < room {
                self.filled += left;
                return;
            }
            left -= room;
            self.current += 1;
            self.filled = 0;
            if left == 0 {
                return;
            }
        }
    }
}
