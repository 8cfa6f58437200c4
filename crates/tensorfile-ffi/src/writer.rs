//! `fs_writer`: collects tensors and metadata, then writes the canonical
//! file atomically.
//!
//! Tensors' bytes are borrowed, not copied: `fs_add_tensor` records where
//! they are and `fs_write` streams them straight to the file, so writing a
//! model costs no second copy of it in memory.

use std::collections::HashSet;
use std::ffi::{c_char, c_int};
use std::path::PathBuf;
use std::ptr;

use tensorfile_core::{save, Dtype, Metadata, TensorRef, TensorSpec, WriteOptions};

use crate::args::{c_path, c_str, handle_mut};
use crate::error::{guard, Failure};
use crate::types::{dtype_of, tm_tensor};

/// A writer in progress: an opaque handle from `fs_writer_new`, consumed
/// by `fs_write` or `fs_writer_free`.
pub struct fs_writer {
    path: PathBuf,
    tensors: Vec<Pending>,
    names: HashSet<String>,
    metadata: Metadata,
}

/// A tensor added but not yet written.
struct Pending {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    /// The caller's bytes, borrowed until `fs_write` or `fs_writer_free`.
    data: *const u8,
    len: usize,
}

impl Pending {
    /// Reads the caller's `tm_tensor` field by field, checking each.
    ///
    /// # Safety
    /// `t` is non-NULL and points at a readable `tm_tensor` whose `shape`
    /// (if `ndim > 0`) points at `ndim` readable `int64_t`.
    unsafe fn from_c(name: &str, t: *const tm_tensor) -> Result<Pending, Failure> {
        // The dtype is read as an int: C may have stored any value there.
        // SAFETY: `t` is readable (caller's contract); `tl_dtype` has the
        // size and alignment of `int` (asserted in types.rs).
        let dtype = unsafe { ptr::addr_of!((*t).dtype).cast::<c_int>().read() };
        // SAFETY: as above, plain integer and pointer fields.
        let (ndim, shape, data, nbytes) = unsafe {
            (
                ptr::addr_of!((*t).ndim).read(),
                ptr::addr_of!((*t).shape).read(),
                ptr::addr_of!((*t).data).read(),
                ptr::addr_of!((*t).nbytes).read(),
            )
        };
        let bad = |what: String| Failure::invalid(format!("tensor {name:?}: {what}"));
        let dtype = dtype_of(dtype).map_err(|e| bad(e.message))?;
        let ndim = usize::try_from(ndim).map_err(|_| bad(format!("ndim is {ndim}")))?;
        let dims: &[i64] = if ndim == 0 {
            &[]
        } else if shape.is_null() {
            return Err(bad(format!("shape is NULL but ndim is {ndim}")));
        } else {
            // SAFETY: `ndim` readable dims, by the caller's contract.
            unsafe { std::slice::from_raw_parts(shape, ndim) }
        };
        let shape = dims
            .iter()
            .map(|&d| u64::try_from(d).map_err(|_| bad(format!("negative dimension in {dims:?}"))))
            .collect::<Result<Vec<u64>, Failure>>()?;
        let spec = TensorSpec::new(name, dtype, shape);
        let expected = spec
            .byte_len()
            .map_err(|e| Failure::invalid(e.to_string()))?;
        if expected != nbytes as u64 {
            return Err(bad(format!(
                "nbytes is {nbytes}, but shape {:?} x {dtype} needs {expected}",
                spec.shape
            )));
        }
        if data.is_null() && nbytes > 0 {
            return Err(bad(format!("data is NULL but nbytes is {nbytes}")));
        }
        Ok(Pending {
            name: spec.name,
            dtype,
            shape: spec.shape,
            data: data.cast(),
            len: nbytes,
        })
    }

    /// The borrowed bytes.
    ///
    /// # Safety
    /// The caller's bytes are still alive and unchanged (the contract of
    /// `fs_add_tensor`).
    unsafe fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            &[]
        } else {
            // SAFETY: `len` readable bytes at `data` (non-NULL, checked in
            // `from_c`), alive by the caller's contract.
            unsafe { std::slice::from_raw_parts(self.data, self.len) }
        }
    }
}

/// A writer that will write the file at `path` (nothing is touched until
/// `fs_write`). NULL with `TL_EINVAL` for a NULL or empty path.
///
/// Ownership: the caller owns the writer until it passes it to `fs_write`
/// or `fs_writer_free`, which free it. `path` is copied.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_writer_new(path: *const c_char) -> *mut fs_writer {
    guard(|| {
        // SAFETY: by the caller's contract.
        let path = unsafe { c_path(path) }?;
        Ok(Box::into_raw(Box::new(fs_writer {
            path: path.to_path_buf(),
            tensors: Vec::new(),
            names: HashSet::new(),
            metadata: Metadata::new(),
        })))
    })
}

/// Adds a tensor. Checks everything at once, so `fs_write` refuses nothing
/// the caller declared: `TL_EINVAL` for a NULL argument, a name that is not
/// UTF-8, already added or `"__metadata__"`, a dtype out of range, a
/// negative `ndim` or dimension, a NULL `shape` with `ndim > 0`, a NULL
/// `data` with `nbytes > 0`, and `nbytes` other than dtype x shape.
///
/// Ownership: `name`, the struct `t` and its `shape` array are copied; the
/// caller may free them on return. The bytes at `t->data` are NOT copied:
/// they are read during `fs_write`, so they must stay alive and unchanged
/// until `fs_write` or `fs_writer_free` returns.
///
/// # Safety
/// `w` is NULL or a live writer; `name` NULL or a NUL-terminated string;
/// `t` NULL or a readable `tm_tensor` whose `shape` holds `ndim` values and
/// whose `data` holds `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn fs_add_tensor(
    w: *mut fs_writer,
    name: *const c_char,
    t: *const tm_tensor,
) -> c_int {
    guard(|| {
        // SAFETY: by the caller's contract.
        let w = unsafe { handle_mut(w, "writer") }?;
        // SAFETY: by the caller's contract.
        let name = unsafe { c_str(name, "tensor name") }?;
        if t.is_null() {
            return Err(Failure::invalid(format!(
                "tensor {name:?}: the tensor is NULL"
            )));
        }
        if name == "__metadata__" {
            return Err(Failure::invalid(
                "a tensor cannot be named \"__metadata__\": that key holds the metadata map",
            ));
        }
        if w.names.contains(name) {
            return Err(Failure::invalid(format!(
                "a tensor named {name:?} was already added"
            )));
        }
        // SAFETY: `t` non-NULL and readable, by the caller's contract.
        let pending = unsafe { Pending::from_c(name, t) }?;
        w.names.insert(pending.name.clone());
        w.tensors.push(pending);
        Ok(0)
    })
}

/// Sets metadata `key` to `value` (replacing an earlier value). Both are
/// copied. `TL_EINVAL` for a NULL argument or a string that is not UTF-8.
/// The file's `__metadata__` lists the keys in ascending byte order and is
/// omitted when no key is set.
///
/// # Safety
/// `w` is NULL or a live writer; `key` and `value` NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn fs_set_metadata(
    w: *mut fs_writer,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: by the caller's contract.
        let w = unsafe { handle_mut(w, "writer") }?;
        // SAFETY: by the caller's contract.
        let key = unsafe { c_str(key, "metadata key") }?;
        // SAFETY: by the caller's contract.
        let value = unsafe { c_str(value, "metadata value") }?;
        w.metadata.insert(key.to_string(), value.to_string());
        Ok(0)
    })
}

/// Writes the file, then frees the writer, whether writing succeeded or
/// not. The file is the canonical one (the bytes the reference library
/// writes for these tensors and metadata) and is saved atomically: written
/// to a temporary file beside it, synced, then renamed over `path`. On
/// failure `path` is left as it was.
///
/// Returns 0, or `TL_EIO` (writing failed; `path` is a directory, a FIFO
/// or a device, or a symbolic link to a directory or to nothing),
/// `TL_ENOMEM`, `TL_EUNSUPPORTED` (a header over 100,000,000 bytes, the
/// format's cap), `TL_EINVAL` (NULL `w`).
///
/// # Safety
/// `w` is NULL or a live writer, not used again after this call; the bytes
/// of every added tensor are still alive and unchanged.
#[no_mangle]
pub unsafe extern "C" fn fs_write(w: *mut fs_writer) -> c_int {
    guard(|| {
        if w.is_null() {
            return Err(Failure::invalid("writer is NULL"));
        }
        // SAFETY: a live writer from Box::into_raw, given up by the caller.
        let w = unsafe { Box::from_raw(w) };
        let tensors = w.tensors.iter().map(|t| TensorRef {
            name: &t.name,
            dtype: t.dtype,
            shape: &t.shape,
            // SAFETY: alive and unchanged, by the caller's contract.
            data: unsafe { t.bytes() },
        });
        let metadata = (!w.metadata.is_empty()).then_some(&w.metadata);
        save(&w.path, tensors, metadata, &WriteOptions::default())?;
        Ok(0)
    })
}

/// Frees a writer without writing anything. `fs_writer_free(NULL)` does
/// nothing. Returns 0.
///
/// # Safety
/// `w` is NULL or a live writer, not used again after this call.
#[no_mangle]
pub unsafe extern "C" fn fs_writer_free(w: *mut fs_writer) -> c_int {
    guard(|| {
        if !w.is_null() {
            // SAFETY: a live writer from Box::into_raw, given up by the caller.
            drop(unsafe { Box::from_raw(w) });
        }
        Ok(0)
    })
}
