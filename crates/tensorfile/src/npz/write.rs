//! Writing `.npy` files and `.npz` archives as numpy writes them: the
//! header of `np.save` (version 1.0, C order, little-endian, the dtype
//! string numpy gives the same array), and for `.npz` the zip of
//! `np.savez` (stored members with ZIP64 local headers, `name.npy` per
//! array, in the order given) or of `np.savez_compressed` (deflated by
//! zlib, as Python's `zipfile` deflates).
//! Saves are atomic: the output appears complete or not at all.
//!
//! For arrays numpy has a dtype for, the stored archive is byte for byte
//! the one `np.savez(path, **arrays)` writes, and the deflated one the one
//! `np.savez_compressed(path, **arrays)` writes; BF16 and the F8 types are
//! written as ml_dtypes' arrays are (`<V2`, `<V1`, `<f1`), and F4 and F6
//! one value per byte in the low bits (`<V1`), as ml_dtypes holds them.

use std::io::{BufWriter, Write};
use std::path::Path;

use tensorfile_zip::{Method, ZipWriter};

use super::descr;
use super::error::NpzError;
use super::header;
use crate::Progress;
use crate::{AtomicFile, Error, Result, TensorData};

/// Bytes written to the output at a time.
const BUFFER: usize = 1 << 20;

/// How to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct NpzWriteOptions {
    /// Deflate the members as `np.savez_compressed` does (zlib, level 6)
    /// instead of storing them.
    pub compress: bool,
    /// Sync the file and its directory before the rename.
    pub sync: bool,
}

tensorfile_core::with_fields!(NpzWriteOptions {
    with_compress => compress: bool,
    with_sync => sync: bool,
});

impl Default for NpzWriteOptions {
    fn default() -> NpzWriteOptions {
        NpzWriteOptions {
            compress: false,
            sync: true,
        }
    }
}

/// What a save wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpzWritten {
    /// Arrays written.
    pub arrays: usize,
    /// Bytes of array data (headers excluded).
    pub data_bytes: u64,
    /// The file's length.
    pub file_bytes: u64,
}

/// The `.npy` header numpy writes for `t`, and whether its values are
/// unpacked to one per byte first.
fn npy_header(t: &dyn TensorData<crate::Error>) -> (Vec<u8>, bool) {
    let (descr, unpack) = descr::descr_of(t.dtype());
    (header::write(descr, t.shape()), unpack)
}

/// Writes `t`'s data to `out` as a `.npy` body: its bytes in order, or
/// sub-byte values one per byte (a group split between two pieces waits
/// for the next). Returns the bytes written.
fn write_data(t: &dyn TensorData<crate::Error>, unpack: bool, out: &mut dyn Write) -> Result<u64> {
    let mut written = 0u64;
    let mut codes = Vec::new();
    let mut carry: Vec<u8> = Vec::new();
    let bits = t.dtype().bits();
    let group = crate::bits::group(bits).1;
    t.produce(&mut |_, piece| {
        let r = if unpack {
            carry.extend_from_slice(piece);
            let whole = carry.len() / group * group;
            codes.clear();
            codes.extend(crate::bits::codes(bits, &carry[..whole]));
            carry.drain(..whole);
            out.write_all(&codes).map(|()| codes.len())
        } else {
            out.write_all(piece).map(|()| piece.len())
        };
        written += r? as u64;
        Ok(())
    })?;
    Ok(written)
}

/// Refuses a tensor whose values cannot be unpacked in whole groups
/// (F4 and F6 pieces are whole groups when the byte count is).
fn check_writable(t: &dyn TensorData<crate::Error>) -> Result<()> {
    let (_, unpack) = descr::descr_of(t.dtype());
    if unpack {
        let (_, bytes) = crate::bits::group(t.dtype().bits());
        if !t.byte_len().is_multiple_of(bytes as u64) {
            return Err(NpzError::Write(format!(
                "tensor {:?}: {} bytes of {} are not whole groups of {bytes} bytes",
                t.name(),
                t.byte_len(),
                t.dtype()
            ))
            .into());
        }
    }
    Ok(())
}

/// Saves `tensors` as a `.npz` archive at `path`, one member
/// `<name>.npy` per tensor, in the order given; `progress` gets the data
/// bytes as they are written.
///
/// # Errors
/// A name too long for a zip member or given twice, a tensor's read error,
/// or a failed write (nothing is left at `path` then).
pub fn save_npz<T: TensorData<crate::Error>>(
    path: impl AsRef<Path>,
    tensors: &[T],
    options: &NpzWriteOptions,
    progress: &dyn Progress,
) -> Result<NpzWritten> {
    let path = path.as_ref();
    npz_to(path, tensors, options, progress).map_err(|e| e.at(path))
}

fn npz_to<T: TensorData<crate::Error>>(
    path: &Path,
    tensors: &[T],
    options: &NpzWriteOptions,
    progress: &dyn Progress,
) -> Result<NpzWritten> {
    for t in tensors {
        check_writable(t)?;
    }
    let file = AtomicFile::create(path)?;
    let method = if options.compress {
        Method::Deflated
    } else {
        Method::Stored
    };
    let mut data_bytes = 0u64;
    let zip_err = |e: tensorfile_zip::ZipError| -> Error { NpzError::Zip(e).into() };
    let mut zip = ZipWriter::new(BufWriter::with_capacity(BUFFER, file.file())).map_err(zip_err)?;
    for t in tensors {
        let (head, unpack) = npy_header(t);
        let mut member = zip
            .start(&format!("{}.npy", t.name()), method)
            .map_err(zip_err)?;
        member.write_all(&head).map_err(Error::from)?;
        let n = write_data(t, unpack, &mut member)?;
        member.finish().map_err(zip_err)?;
        data_bytes += n;
        progress.advance(t.byte_len());
    }
    let out = zip.finish().map_err(zip_err)?;
    out.into_inner().map_err(|e| Error::from(e.into_error()))?;
    let file_bytes = file
        .file()
        .metadata()
        .map(|m| m.len())
        .map_err(Error::from)?;
    file.commit(options.sync)?;
    Ok(NpzWritten {
        arrays: tensors.len(),
        data_bytes,
        file_bytes,
    })
}

/// Saves one tensor as a `.npy` file at `path`, as `np.save` writes it.
///
/// # Errors
/// A tensor's read error, or a failed write (nothing is left at `path`).
pub fn save_npy<T: TensorData<crate::Error>>(
    path: impl AsRef<Path>,
    tensor: &T,
    sync: bool,
    progress: &dyn Progress,
) -> Result<NpzWritten> {
    let path = path.as_ref();
    npy_to(path, tensor, sync, progress).map_err(|e| e.at(path))
}

fn npy_to<T: TensorData<crate::Error>>(
    path: &Path,
    tensor: &T,
    sync: bool,
    progress: &dyn Progress,
) -> Result<NpzWritten> {
    check_writable(tensor)?;
    let file = AtomicFile::create(path)?;
    let (head, unpack) = npy_header(tensor);
    let mut out = BufWriter::with_capacity(BUFFER, file.file());
    out.write_all(&head).map_err(Error::from)?;
    let data_bytes = write_data(tensor, unpack, &mut out)?;
    out.flush().map_err(Error::from)?;
    drop(out);
    progress.advance(tensor.byte_len());
    file.commit(sync)?;
    Ok(NpzWritten {
        arrays: 1,
        data_bytes,
        file_bytes: head.len() as u64 + data_bytes,
    })
}
