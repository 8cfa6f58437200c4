//! A Python file object as a [`ByteSource`]: for `_safe_open_handle` on
//! objects without a real file behind them (fsspec's remote files, an
//! `io.BytesIO`), read lazily through their `seek` and `read` methods so
//! that only the header and the tensors asked for are fetched.

use std::io;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
use tensorfile::ByteSource;

/// A seekable, readable binary Python file object.
pub struct PyFile {
    file: Py<PyAny>,
    len: u64,
    /// A `seek` and its `read`s must not interleave with another thread's.
    /// Taken only while detached from the interpreter (every read runs
    /// under `Python::detach`), so that a thread holding the lock never
    /// waits for a thread that holds the interpreter and waits for the lock.
    lock: Mutex<()>,
}

/// An exception a file object's method raised, carried inside the
/// [`io::Error`] of the failed read so that [`crate::errors`] can give it
/// back to Python: a `BaseException` that is not an `Exception`
/// (`KeyboardInterrupt`, `SystemExit`) unchanged, anything else as the
/// `SafetensorError` this message makes.
#[derive(Debug)]
pub struct CallbackError {
    /// Which call failed, for the message ("read failed").
    what: &'static str,
    /// What it raised.
    pub raised: PyErr,
}

impl std::fmt::Display for CallbackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.raised)
    }
}

impl std::error::Error for CallbackError {}

/// A Python exception as an I/O error, its text and the exception kept.
fn py_io(what: &'static str, raised: PyErr) -> io::Error {
    io::Error::other(CallbackError { what, raised })
}

impl PyFile {
    /// Wraps `file`, finding its length by seeking to its end.
    pub fn new(py: Python<'_>, file: Py<PyAny>) -> PyResult<PyFile> {
        let len: u64 = file.call_method1(py, "seek", (0, 2))?.extract(py)?;
        Ok(PyFile {
            file,
            len,
            lock: Mutex::new(()),
        })
    }

    fn read_attached(&self, py: Python<'_>, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file
            .call_method1(py, "seek", (offset,))
            .map_err(|e| py_io("seek failed", e))?;
        let mut filled = 0;
        while filled < buf.len() {
            let want = buf.len() - filled;
            let chunk = self
                .file
                .call_method1(py, "read", (want,))
                .map_err(|e| py_io("read failed", e))?;
            let chunk = chunk.bind(py);
            let copied = if let Ok(b) = chunk.cast::<PyBytes>() {
                copy_into(b.as_bytes(), &mut buf[filled..])?
            } else if let Ok(b) = chunk.cast::<PyByteArray>() {
                // SAFETY: the bytearray is not touched by Python code while
                // the interpreter is held here and the bytes are copied out.
                copy_into(unsafe { b.as_bytes() }, &mut buf[filled..])?
            } else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the file object's read() returned no bytes (open it in binary mode)",
                ));
            };
            if copied == 0 {
                return Err(tensorfile_core::source::truncated(
                    offset,
                    buf.len(),
                    offset + filled as u64,
                ));
            }
            filled += copied;
        }
        Ok(())
    }
}

/// Copies a chunk `read()` returned; one longer than asked for is an error
/// (a file object that ignores its argument).
fn copy_into(chunk: &[u8], out: &mut [u8]) -> io::Result<usize> {
    let asked = out.len();
    let dest = out.get_mut(..chunk.len()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the file object's read({asked}) returned {} bytes",
                chunk.len()
            ),
        )
    })?;
    dest.copy_from_slice(chunk);
    Ok(chunk.len())
}

impl ByteSource for PyFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.len) {
            return Err(tensorfile_core::source::truncated(
                offset,
                buf.len(),
                self.len,
            ));
        }
        if buf.is_empty() {
            return Ok(());
        }
        let _turn = self
            .lock
            .lock()
            .map_err(|_| io::Error::other("a read of the file object panicked"))?;
        Python::attach(|py| self.read_attached(py, offset, buf))
    }
}
