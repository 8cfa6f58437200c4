//! The plain C types (`tl_dtype`, `tm_tensor`), the dtype helpers and the
//! library version.

use std::ffi::{c_char, c_int, CStr};

use tensorfile_core::Dtype;

use crate::args::c_str;
use crate::error::{guard, Failure};

/// An element type. The values are the reference library's dtype order
/// (`TL_BOOL` = 0 ... `TL_U64` = 21), so a `tl_dtype` converts to and from
/// the Rust `tensorfile::Dtype` by value.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tl_dtype {
    /// Boolean, one byte per value.
    TL_BOOL = 0,
    /// 4-bit float E2M1, two values per byte (low nibble first).
    TL_F4 = 1,
    /// 6-bit float E2M3, four values per three bytes.
    TL_F6_E2M3 = 2,
    /// 6-bit float E3M2, four values per three bytes.
    TL_F6_E3M2 = 3,
    /// Unsigned 8-bit integer.
    TL_U8 = 4,
    /// Signed 8-bit integer.
    TL_I8 = 5,
    /// 8-bit float E5M2.
    TL_F8_E5M2 = 6,
    /// 8-bit float E4M3 (fn).
    TL_F8_E4M3 = 7,
    /// 8-bit power of two E8M0.
    TL_F8_E8M0 = 8,
    /// 8-bit float E4M3 (fnuz).
    TL_F8_E4M3FNUZ = 9,
    /// 8-bit float E5M2 (fnuz).
    TL_F8_E5M2FNUZ = 10,
    /// Signed 16-bit integer.
    TL_I16 = 11,
    /// Unsigned 16-bit integer.
    TL_U16 = 12,
    /// IEEE half precision.
    TL_F16 = 13,
    /// bfloat16.
    TL_BF16 = 14,
    /// Signed 32-bit integer.
    TL_I32 = 15,
    /// Unsigned 32-bit integer.
    TL_U32 = 16,
    /// IEEE single precision.
    TL_F32 = 17,
    /// Complex: two F32 (real, imaginary).
    TL_C64 = 18,
    /// IEEE double precision.
    TL_F64 = 19,
    /// Signed 64-bit integer.
    TL_I64 = 20,
    /// Unsigned 64-bit integer.
    TL_U64 = 21,
}

// `tm_tensor::dtype` is read as a C `int` (see `tm_tensor_fields`): a C
// caller may store any value there, and a Rust enum must never hold one
// that is not a variant.
const _: () = assert!(std::mem::size_of::<tl_dtype>() == std::mem::size_of::<c_int>());
const _: () = assert!(tl_dtype::TL_U64 as u8 == Dtype::U64 as u8);
const _: () = assert!(tl_dtype::TL_BF16 as u8 == Dtype::BF16 as u8);

/// The `tl_dtype` of a Rust dtype.
pub(crate) fn tl_dtype_of(dtype: Dtype) -> tl_dtype {
    use tl_dtype::*;
    const ALL: [tl_dtype; 22] = [
        TL_BOOL,
        TL_F4,
        TL_F6_E2M3,
        TL_F6_E3M2,
        TL_U8,
        TL_I8,
        TL_F8_E5M2,
        TL_F8_E4M3,
        TL_F8_E8M0,
        TL_F8_E4M3FNUZ,
        TL_F8_E5M2FNUZ,
        TL_I16,
        TL_U16,
        TL_F16,
        TL_BF16,
        TL_I32,
        TL_U32,
        TL_F32,
        TL_C64,
        TL_F64,
        TL_I64,
        TL_U64,
    ];
    // Both enumerations have the reference library's order (checked in tests).
    ALL[dtype as usize]
}

/// The Rust dtype of a C `tl_dtype` value, refusing values out of range.
pub(crate) fn dtype_of(value: c_int) -> Result<Dtype, Failure> {
    u8::try_from(value)
        .ok()
        .and_then(Dtype::from_index)
        .ok_or_else(|| {
            Failure::invalid(format!(
                "{value} is not a tl_dtype (TL_BOOL = 0 to TL_U64 = 21)"
            ))
        })
}

/// One tensor: a plain struct.
///
/// From a reader (`fs_get_tensor`, `fs_get_tensor_at`), every pointer in it
/// is owned by the `fs_file` and lives until `fs_close`; treat the struct
/// and what it points to as read-only. Given to the writer
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
    guard(|| {
        let d = dtype_of(dtype)?;
        Ok(NAMES[d as usize].as_ptr())
    })
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
            .map(|d| d as c_int)
            .ok_or_else(|| Failure::invalid(format!("unknown dtype {name:?}")))
    })
}

/// The dtype names as NUL-terminated static strings, by discriminant.
static NAMES: [&CStr; 22] = [
    c"BOOL",
    c"F4",
    c"F6_E2M3",
    c"F6_E3M2",
    c"U8",
    c"I8",
    c"F8_E5M2",
    c"F8_E4M3",
    c"F8_E8M0",
    c"F8_E4M3FNUZ",
    c"F8_E5M2FNUZ",
    c"I16",
    c"U16",
    c"F16",
    c"BF16",
    c"I32",
    c"U32",
    c"F32",
    c"C64",
    c"F64",
    c"I64",
    c"U64",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_follow_the_core_order() {
        for d in Dtype::ALL {
            assert_eq!(tl_dtype_of(d) as c_int, d as c_int);
            assert_eq!(NAMES[d as usize].to_str().unwrap(), d.name());
            assert_eq!(dtype_of(d as c_int).unwrap(), d);
        }
        assert!(dtype_of(22).is_err());
        assert!(dtype_of(-1).is_err());
        assert!(dtype_of(256).is_err());
    }
}
