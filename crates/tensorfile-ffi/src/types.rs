//! The plain C types (`tl_dtype`, `tm_tensor`), the dtype helpers and the
//! library version.

use std::ffi::{c_char, c_int};

use tensorfile_core::Dtype;

use crate::args::c_str;
pub use crate::dtype_abi::tl_dtype;
use crate::error::{guard, Failure};

// `tm_tensor::dtype` is read as a C `int` (see `tm_tensor_fields`): a C
// caller may store any value there, and a Rust enum must never hold one
// that is not a variant.
const _: () = assert!(std::mem::size_of::<tl_dtype>() == std::mem::size_of::<c_int>());
/// The `tl_dtype` of a Rust dtype.
pub(crate) fn tl_dtype_of(dtype: Dtype) -> tl_dtype {
    tl_dtype::of(dtype)
}

/// The Rust dtype of a C `tl_dtype` value, refusing values out of range.
pub(crate) fn dtype_of(value: c_int) -> Result<Dtype, Failure> {
    u8::try_from(value)
        .ok()
        .and_then(Dtype::from_c_abi)
        .ok_or_else(|| Failure::invalid(format!("{value} is not a tl_dtype value")))
}

/// One tensor: a plain struct.
///
/// From a reader (`fs_tensor`, `fs_tensor_at`, and the original
/// `fs_get_tensor`, `fs_get_tensor_at`), every pointer in it is owned by
/// the `fs_file` and lives until `fs_close`; the struct and what it points
/// to are read-only. Given to the writer
/// (`fs_add_tensor`), the struct and its `shape` array are copied at once,
/// while the `data` bytes are borrowed until `fs_write` or
/// `fs_writer_free` returns.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct tm_tensor {
    /// Element type.
    pub dtype: tl_dtype,
    /// Number of dimensions; 0 for a scalar.
    pub ndim: i32,
    /// `ndim` dimensions, outermost first. NULL is allowed when `ndim` is 0.
    pub shape: *const i64,
    /// The elements: little-endian, C order (the last index varies fastest).
    /// From `fs_open` the address is a multiple of 64; from `fs_mmap` it is
    /// the file's own alignment (test `(uintptr_t)data % N`). Non-NULL even
    /// when `nbytes` is 0 (then it must not be read).
    pub data: *const std::ffi::c_void,
    /// Bytes at `data`: the element count times the dtype's size
    /// (sub-byte dtypes: bits / 8).
    pub nbytes: usize,
}

/// The library version, such as `"0.1.0"`. Static: never freed.
#[no_mangle]
pub extern "C" fn fs_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The header name of a dtype (`"F32"`, `"BF16"`, `"F8_E4M3"`...): a static
/// string, never freed. `dtype` is a `tl_dtype` value; NULL with
/// `TL_EINVAL` when it is not one.
#[no_mangle]
pub extern "C" fn fs_dtype_name(dtype: c_int) -> *const c_char {
    guard(|| Ok(dtype_of(dtype)?.c_name().as_ptr()))
}

/// Bits per element of a dtype: 4 (F4), 6 (F6_*), 8, 16, 32 or 64; C64 is
/// 64. `TL_EINVAL` when `dtype` is not a `tl_dtype` value.
#[no_mangle]
pub extern "C" fn fs_dtype_bits(dtype: c_int) -> c_int {
    guard(|| Ok(dtype_of(dtype)?.bits() as c_int))
}

/// The `tl_dtype` value for a header name (`"BF16"`; case-sensitive, as in
/// the format). `TL_EINVAL` for NULL or a name that is not a dtype.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fs_dtype_from_name(name: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        let name = unsafe { c_str(name, "name") }?;
        Dtype::from_name(name)
            .map(|d| c_int::from(d.c_abi()))
            .ok_or_else(|| Failure::invalid(format!("unknown dtype {name:?}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_values_are_the_core_table_s() {
        for &d in Dtype::ALL {
            assert_eq!(tl_dtype_of(d) as c_int, c_int::from(d.c_abi()));
            assert_eq!(dtype_of(c_int::from(d.c_abi())).unwrap(), d);
        }
        assert!(dtype_of(22).is_err());
        assert!(dtype_of(-1).is_err());
        assert!(dtype_of(256).is_err());
    }
}
