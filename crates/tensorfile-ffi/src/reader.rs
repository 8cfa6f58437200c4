//! `fs_file`: an open file, and every function that reads one.
//!
//! Everything C can ask of a file (the `tm_tensor` structs, shapes as
//! `int64_t`, the names, the metadata strings) is built when the file is
//! opened, except the data of the PyTorch tensors that must be read or
//! gathered: those are produced on first access, once (a `OnceLock` per tensor), and
//! never change after. Any number of threads may read one `fs_file` at
//! once.

use std::ffi::{c_char, c_int};
use std::sync::OnceLock;

use tensorfile_core::{Dtype, Metadata, SafeTensors};

use crate::aligned::AlignedFile;
use crate::args::{c_path, c_str, handle};
use crate::error::{guard, Failure, TL_EUNSUPPORTED};
use crate::strings::StringTable;
use crate::types::{tl_dtype_of, tm_tensor};

/// What keeps the tensors' bytes alive.
pub(crate) enum Storage {
    /// A read-only map of the file (`fs_mmap`).
    Mapped(#[allow(dead_code)] SafeTensors),
    /// The file read into 64-aligned slots (`fs_open`).
    Aligned(#[allow(dead_code)] AlignedFile),
    /// Another loader's data, made on first access (a PyTorch checkpoint
    /// and the tensors gathered from it).
    Lazy(Box<dyn Lazy>),
}

/// Data a loader makes on a tensor's first access and keeps until the file
/// is closed.
pub(crate) trait Lazy {
    /// The data of tensor `index` (made on the first call, then the same).
    fn data(&self, index: usize) -> Result<*const u8, Failure>;
    /// The loader's own type, for its tests.
    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any;
}

impl Storage {
    /// The data of tensor `index`, whose part was lazy: only other loaders
    /// have such tensors.
    fn data(&self, index: usize) -> Result<*const u8, Failure> {
        match self {
            Storage::Lazy(loaded) => loaded.data(index),
            _ => Err(Failure::internal(format_args!(
                "tensor {index} has no data"
            ))),
        }
    }
}

/// An open file: an opaque handle from `fs_open`, `fs_mmap`,
/// `fs_load_pytorch` or `fs_mmap_pytorch`, freed by `fs_close`.
pub struct fs_file {
    view: View,
    /// Dropped after `view`, whose data pointers point into it.
    _storage: Storage,
}

/// The C view of a file's tensors and metadata.
struct View {
    /// Each tensor's C struct; `data` is NULL in those of lazy tensors.
    templates: Vec<tm_tensor>,
    /// Each tensor's C struct with its data, the one C gets: set when the
    /// view is built, or on first access for lazy tensors (or the failure
    /// of that access, given again to later ones).
    tensors: Vec<OnceLock<Result<tm_tensor, Failure>>>,
    /// Every tensor's dimensions, back to back; `tm_tensor::shape` points in.
    _dims: Vec<i64>,
    names: StringTable,
    /// Tensor indices sorted by name bytes, for lookup by name.
    by_name: Vec<usize>,
    /// Metadata keys in ascending byte order, and their values.
    meta_keys: StringTable,
    meta_values: StringTable,
}

/// One tensor as the view is built from.
#[derive(Clone, Copy)]
pub(crate) struct Part<'a> {
    pub(crate) name: &'a str,
    pub(crate) dtype: Dtype,
    pub(crate) shape: &'a [u64],
    /// The data, or `None` for a tensor whose data the storage produces on
    /// first access ([`Storage`]'s `data`).
    pub(crate) data: Option<*const u8>,
    pub(crate) nbytes: u64,
}

impl View {
    /// The C view of `parts` (in file order). Names, shapes and metadata
    /// are copied; data pointers are kept as they are.
    fn build(parts: &[Part<'_>], metadata: Option<&Metadata>) -> Result<View, Failure> {
        let mut dims = Vec::with_capacity(parts.iter().map(|p| p.shape.len()).sum());
        for p in parts {
            for &d in p.shape {
                dims.push(i64::try_from(d).map_err(|_| {
                    Failure::new(
                        TL_EUNSUPPORTED,
                        format!(
                            "tensor {:?}: dimension {d} of shape {:?} does not fit int64_t",
                            p.name, p.shape
                        ),
                    )
                })?);
            }
        }
        let mut templates = Vec::with_capacity(parts.len());
        let mut tensors = Vec::with_capacity(parts.len());
        let mut at = 0usize;
        for p in parts {
            let too_big = || {
                Failure::new(
                    TL_EUNSUPPORTED,
                    format!("tensor {:?}: shape {:?} is too large", p.name, p.shape),
                )
            };
            let ndim = i32::try_from(p.shape.len()).map_err(|_| too_big())?;
            let nbytes = usize::try_from(p.nbytes).map_err(|_| too_big())?;
            let t = tm_tensor {
                dtype: tl_dtype_of(p.dtype),
                ndim,
                // `dims` is never touched again, so its buffer stays put;
                // `at` counts the dims pushed for earlier tensors.
                shape: dims.as_ptr().wrapping_add(at),
                data: p.data.unwrap_or(std::ptr::null()).cast(),
                nbytes,
            };
            templates.push(t);
            let slot = OnceLock::new();
            if p.data.is_some() {
                let _ = slot.set(Ok(t));
            }
            tensors.push(slot);
            at += p.shape.len();
        }
        let names = StringTable::new(parts.iter().map(|p| p.name.as_bytes()));
        let mut by_name: Vec<usize> = (0..names.len()).collect();
        by_name.sort_unstable_by(|&a, &b| names.bytes(a).cmp(&names.bytes(b)));
        let empty = Metadata::new();
        let metadata = metadata.unwrap_or(&empty);
        Ok(View {
            templates,
            tensors,
            _dims: dims,
            names,
            by_name,
            meta_keys: StringTable::new(metadata.keys().map(|k| k.as_bytes())),
            meta_values: StringTable::new(metadata.values().map(|v| v.as_bytes())),
        })
    }

    /// Checks index `i`, with the failure C gets for a bad one.
    fn index(&self, i: c_int) -> Result<usize, Failure> {
        let index = usize::try_from(i)
            .map_err(|_| Failure::invalid(format!("tensor index {i} is negative")))?;
        if index >= self.tensors.len() {
            return Err(Failure::not_found(format!(
                "tensor index {i} is out of range (the file has {} tensors)",
                self.tensors.len()
            )));
        }
        Ok(index)
    }

    /// The index of the tensor called `name`.
    fn find(&self, name: &str) -> Option<usize> {
        let at = self
            .by_name
            .binary_search_by(|&i| self.names.bytes(i).cmp(&Some(name.as_bytes())))
            .ok()?;
        self.by_name.get(at).copied()
    }

    /// The index of metadata key `key`.
    fn find_key(&self, key: &str) -> Option<usize> {
        // Keys are in ascending byte order (a BTreeMap's).
        let n = self.meta_keys.len();
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.meta_keys.bytes(mid)?.cmp(key.as_bytes()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}

impl fs_file {
    /// What keeps the data alive.
    #[cfg(test)]
    pub(crate) fn storage(&self) -> &Storage {
        &self._storage
    }

    /// Tensor `index` (in range) with its data: a lazy tensor's is made on
    /// the first call, by one thread while the others wait; a failure is
    /// kept and given again.
    fn tensor(&self, index: usize) -> Result<&tm_tensor, Failure> {
        let slot =
            self.view.tensors.get(index).ok_or_else(|| {
                Failure::not_found(format!("tensor index {index} is out of range"))
            })?;
        let made = slot.get_or_init(|| {
            let template = self.view.templates[index];
            let data = self._storage.data(index)?;
            Ok(tm_tensor {
                data: data.cast(),
                ..template
            })
        });
        made.as_ref().map_err(Failure::clone)
    }

    /// The C view of `parts` and `metadata`, held by `fs_file::with_storage`.
    pub(crate) fn build(
        parts: &[Part<'_>],
        metadata: Option<&Metadata>,
    ) -> Result<Unowned, Failure> {
        View::build(parts, metadata).map(Unowned)
    }

    fn mapped(file: SafeTensors) -> Result<fs_file, Failure> {
        let parts: Vec<Part<'_>> = file
            .tensors()
            .map(|t| Part {
                name: t.name(),
                dtype: t.dtype(),
                shape: t.shape(),
                data: Some(t.data().as_ptr()),
                nbytes: t.data().len() as u64,
            })
            .collect();
        let view = fs_file::build(&parts, file.metadata())?;
        drop(parts);
        // The data pointers stay valid as `file` moves: the map does not.
        Ok(view.with_storage(Storage::Mapped(file)))
    }

    fn aligned(file: AlignedFile) -> Result<fs_file, Failure> {
        let parts: Vec<Part<'_>> = file
            .header
            .tensors()
            .enumerate()
            .map(|(i, t)| Part {
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                data: Some(file.data(i)),
                nbytes: t.nbytes(),
            })
            .collect();
        let view = fs_file::build(&parts, file.header.metadata())?;
        drop(parts);
        Ok(view.with_storage(Storage::Aligned(file)))
    }
}

/// A file's view before the storage its data pointers point into joins it.
pub(crate) struct Unowned(View);

impl Unowned {
    /// The file: the view and what keeps its data alive.
    pub(crate) fn with_storage(self, storage: Storage) -> fs_file {
        fs_file {
            view: self.0,
            _storage: storage,
        }
    }
}

/// Boxes a file for C.
pub(crate) fn into_handle(file: fs_file) -> *mut fs_file {
    Box::into_raw(Box::new(file))
}

/// Reads the file at `path` into memory and validates it (all five reader
/// rules). Every tensor's `data` is aligned to at least 64 bytes. The file
/// is not used after this returns.
///
/// Returns NULL on failure: `TL_EFORMAT` (the file breaks the format),
/// `TL_EIO`, `TL_ENOMEM`, `TL_EINVAL` (NULL or empty `path`),
/// `TL_EUNSUPPORTED` (a dimension over `INT64_MAX`).
///
/// Ownership: the caller owns the handle and frees it with `fs_close`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_open(path: *const c_char) -> *mut fs_file {
    guard(|| {
        // SAFETY: by the caller's contract.
        let path = unsafe { c_path(path) }?;
        fs_file::aligned(AlignedFile::read(path)?).map(into_handle)
    })
}

/// Maps the file at `path` read-only and validates it: zero-copy, tensors'
/// `data` point into the map with the file's own alignment (which may be
/// anything: test `(uintptr_t)t->data % N`). The file must not be
/// modified in place while mapped (replacing it by rename, as `fs_write`
/// does, is safe).
///
/// Returns NULL on failure, with the codes of `fs_open`.
///
/// Ownership: the caller owns the handle and frees it with `fs_close`,
/// which unmaps the file.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_mmap(path: *const c_char) -> *mut fs_file {
    guard(|| {
        // SAFETY: by the caller's contract.
        let path = unsafe { c_path(path) }?;
        fs_file::mapped(SafeTensors::open(path)?).map(into_handle)
    })
}

/// The number of tensors, or a negative code (`TL_EINVAL` for NULL).
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_num_tensors(f: *const fs_file) -> c_int {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        c_int::try_from(f.view.tensors.len())
            .map_err(|_| Failure::new(TL_EUNSUPPORTED, "more than INT_MAX tensors"))
    })
}

/// The tensor names in file order (the order of their bytes in the file),
/// then NULL: a read-only array of read-only strings. NULL with
/// `TL_EINVAL` when `f` is NULL.
///
/// Ownership: the array and the strings belong to `f` and live until
/// `fs_close(f)`; do not free or modify them. A name holding a NUL
/// character reads as cut short here: see `fs_tensor_name_at`.
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_tensor_name_list(f: *const fs_file) -> *const *const c_char {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        Ok(f.view.names.ptrs())
    })
}

/// The array of `fs_tensor_name_list` under the name and type of the
/// original API (`const char **`). Read-only all the same: the array is
/// the file's, and writing into it is undefined behavior. Prefer
/// `fs_tensor_name_list`, whose type says so.
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_tensor_names(f: *const fs_file) -> *mut *const c_char {
    // SAFETY: by the caller's contract. The C type drops the array's
    // `const` for the original signature; nothing writes through it.
    unsafe { fs_tensor_name_list(f) }.cast_mut()
}

/// The name of tensor `i` (file order, `0 <= i < fs_num_tensors(f)`);
/// when `len` is not NULL, `*len` receives its length in bytes, which
/// counts any NUL characters inside the name. NULL on failure:
/// `TL_EINVAL` (NULL `f`, negative `i`), `TL_ENOTFOUND` (`i` past the end).
///
/// Ownership: as for `fs_tensor_name_list` (the same pointer as its `i`th).
///
/// # Safety
/// `f` is NULL or a live handle; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fs_tensor_name_at(
    f: *const fs_file,
    i: c_int,
    len: *mut usize,
) -> *const c_char {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        f.view.index(i)?;
        let (ptr, n) = f
            .view
            .names
            .get(i as usize)
            .ok_or_else(|| Failure::not_found(format!("tensor index {i} is out of range")))?;
        if !len.is_null() {
            // SAFETY: non-NULL and writable, by the caller's contract.
            unsafe { len.write(n) };
        }
        Ok(ptr)
    })
}

/// The tensor called `name`, read-only. NULL on failure: `TL_EINVAL`
/// (NULL argument, `name` not UTF-8), `TL_ENOTFOUND` (no such tensor), and
/// for a tensor of `fs_load_pytorch` read or gathered on this first
/// access, the codes of `fs_load_pytorch` (`TL_EUNSUPPORTED` for a budget
/// exceeded, `TL_EFORMAT` for a broken record, `TL_ENOMEM`, `TL_EIO` for a
/// file truncated underneath); a failed access fails again the same way.
///
/// Ownership: the struct, its `shape` and its `data` belong to `f` and live
/// until `fs_close(f)`; they are read-only. Each call returns the same
/// pointer for the same tensor.
///
/// # Safety
/// `f` is NULL or a live handle; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_tensor(f: *const fs_file, name: *const c_char) -> *const tm_tensor {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        // SAFETY: by the caller's contract.
        let name = unsafe { c_str(name, "tensor name") }?;
        let i = f
            .view
            .find(name)
            .ok_or_else(|| Failure::not_found(format!("no tensor named {name:?}")))?;
        Ok(std::ptr::from_ref(f.tensor(i)?))
    })
}

/// `fs_tensor` under the name and type of the original API (`tm_tensor *`).
/// The struct, its shape and its data are read-only all the same: they
/// are the file's (a map of it, for `fs_mmap`, is read-only memory), and
/// writing through the pointer is undefined behavior. Prefer `fs_tensor`,
/// whose type says so.
///
/// # Safety
/// As for `fs_tensor`.
#[no_mangle]
pub unsafe extern "C" fn fs_get_tensor(f: *const fs_file, name: *const c_char) -> *mut tm_tensor {
    // SAFETY: by the caller's contract. The C type drops the `const` for
    // the original signature; nothing writes through it.
    unsafe { fs_tensor(f, name) }.cast_mut()
}

/// Tensor `i` in file order (`0 <= i < fs_num_tensors(f)`), read-only: the
/// way to reach every tensor, those whose names hold NUL characters
/// included. NULL on failure: `TL_EINVAL` (NULL `f`, negative `i`),
/// `TL_ENOTFOUND` (`i` past the end), or the failure of gathering a
/// PyTorch tensor as for `fs_tensor`. Ownership: as for `fs_tensor`.
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_tensor_at(f: *const fs_file, i: c_int) -> *const tm_tensor {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        let t = f.tensor(f.view.index(i)?)?;
        Ok(std::ptr::from_ref(t))
    })
}

/// `fs_tensor_at` under the name and type of the original API
/// (`tm_tensor *`); read-only all the same, as for `fs_get_tensor`. Prefer
/// `fs_tensor_at`.
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_get_tensor_at(f: *const fs_file, i: c_int) -> *mut tm_tensor {
    // SAFETY: by the caller's contract; nothing writes through the pointer.
    unsafe { fs_tensor_at(f, i) }.cast_mut()
}

/// The metadata value of `key`. NULL on failure: `TL_EINVAL` (NULL
/// argument, `key` not UTF-8), `TL_ENOTFOUND` (no such key, or no metadata).
/// A key or value holding a NUL character cannot be given or read whole
/// here: see `fs_metadata_key_at` and `fs_metadata_value_at`.
///
/// Ownership: the string belongs to `f` and lives until `fs_close(f)`.
///
/// # Safety
/// `f` is NULL or a live handle; `key` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_get_metadata(f: *const fs_file, key: *const c_char) -> *const c_char {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        // SAFETY: by the caller's contract.
        let key = unsafe { c_str(key, "metadata key") }?;
        f.view
            .find_key(key)
            .and_then(|i| f.view.meta_values.get(i))
            .map(|(ptr, _)| ptr)
            .ok_or_else(|| Failure::not_found(format!("no metadata key {key:?}")))
    })
}

/// The metadata keys in ascending byte order, then NULL (just NULL when
/// the file has no metadata): a read-only array of read-only strings.
/// NULL with `TL_EINVAL` when `f` is NULL.
///
/// Ownership: the array and the strings belong to `f` and live until
/// `fs_close(f)`. A key holding a NUL character reads as cut short here:
/// see `fs_metadata_key_at`.
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_metadata_key_list(f: *const fs_file) -> *const *const c_char {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        Ok(f.view.meta_keys.ptrs())
    })
}

/// The array of `fs_metadata_key_list` under the name and type of the
/// original API (`const char **`); read-only all the same (writing into it
/// is undefined behavior). Prefer `fs_metadata_key_list`.
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_metadata_keys(f: *const fs_file) -> *mut *const c_char {
    // SAFETY: by the caller's contract; nothing writes through the array.
    unsafe { fs_metadata_key_list(f) }.cast_mut()
}

/// The number of metadata entries (0 when the file has no metadata), or a
/// negative code (`TL_EINVAL` for NULL).
///
/// # Safety
/// `f` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn fs_num_metadata(f: *const fs_file) -> c_int {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        c_int::try_from(f.view.meta_keys.len())
            .map_err(|_| Failure::new(TL_EUNSUPPORTED, "more than INT_MAX metadata entries"))
    })
}

/// Entry `i` of `table` (the metadata keys or values) for C: its pointer,
/// with its length written to `len` when that is not NULL.
///
/// # Safety
/// `len` is NULL or writable.
unsafe fn metadata_at(
    table: &StringTable,
    i: c_int,
    len: *mut usize,
) -> Result<*const c_char, Failure> {
    let index = usize::try_from(i)
        .map_err(|_| Failure::invalid(format!("metadata index {i} is negative")))?;
    let (ptr, n) = table.get(index).ok_or_else(|| {
        Failure::not_found(format!(
            "metadata index {i} is out of range (the file has {} entries)",
            table.len()
        ))
    })?;
    if !len.is_null() {
        // SAFETY: non-NULL and writable, by the caller's contract.
        unsafe { len.write(n) };
    }
    Ok(ptr)
}

/// The key of metadata entry `i` (ascending byte order of the keys, `0 <=
/// i < fs_num_metadata(f)`); when `len` is not NULL, `*len` receives its
/// length in bytes, which counts any NUL characters inside the key. The
/// string is NUL-terminated after those `*len` bytes. NULL on failure:
/// `TL_EINVAL` (NULL `f`, negative `i`), `TL_ENOTFOUND` (`i` past the end).
///
/// Ownership: as for `fs_metadata_key_list` (the same pointer as its `i`th).
///
/// # Safety
/// `f` is NULL or a live handle; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fs_metadata_key_at(
    f: *const fs_file,
    i: c_int,
    len: *mut usize,
) -> *const c_char {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        // SAFETY: by the caller's contract.
        unsafe { metadata_at(&f.view.meta_keys, i, len) }
    })
}

/// The value of metadata entry `i` (the entry whose key
/// `fs_metadata_key_at` gives); when `len` is not NULL, `*len` receives
/// its length in bytes, which counts any NUL characters inside the value.
/// The way to read every value, those of keys or values holding NUL
/// characters included. NULL on failure, with the codes of
/// `fs_metadata_key_at`.
///
/// Ownership: as for `fs_get_metadata` (the same pointer for the same key).
///
/// # Safety
/// `f` is NULL or a live handle; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fs_metadata_value_at(
    f: *const fs_file,
    i: c_int,
    len: *mut usize,
) -> *const c_char {
    guard(|| {
        // SAFETY: by the caller's contract.
        let f = unsafe { handle(f, "file") }?;
        // SAFETY: by the caller's contract.
        unsafe { metadata_at(&f.view.meta_values, i, len) }
    })
}

/// Closes a file: frees the handle, its tensors, names and strings, and
/// unmaps or frees the data. Every pointer obtained from `f` becomes
/// invalid. `fs_close(NULL)` does nothing and returns 0; otherwise returns 0.
///
/// # Safety
/// `f` is NULL or a live handle, not used again after this call (by any
/// thread).
#[no_mangle]
pub unsafe extern "C" fn fs_close(f: *mut fs_file) -> c_int {
    guard(|| {
        if !f.is_null() {
            // SAFETY: a live handle from Box::into_raw, given up by the caller.
            drop(unsafe { Box::from_raw(f) });
        }
        Ok(0)
    })
}
