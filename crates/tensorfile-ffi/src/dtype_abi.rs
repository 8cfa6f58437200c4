//! The C dtype enum, generated from the core's dtype table (its C ABI
//! numbers) by `TENSORFILE_BLESS=1 cargo test -p tensorfile-ffi --test header`;
//! do not edit.

use tensorfile_core::Dtype;

/// An element type. The values are fixed (an ABI): a dtype added later
/// gets the next free number; `fs_dtype_name` and `fs_dtype_from_name`
/// convert to and from the header names.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum tl_dtype {
    /// Boolean, one byte per value (0 or 1).
    TL_BOOL = 0,
    /// 4-bit float E2M1 (no NaN, no infinity), two values per byte.
    TL_F4 = 1,
    /// 6-bit float E2M3, four values per three bytes.
    TL_F6_E2M3 = 2,
    /// 6-bit float E3M2, four values per three bytes.
    TL_F6_E3M2 = 3,
    /// Unsigned 8-bit integer.
    TL_U8 = 4,
    /// Signed 8-bit integer.
    TL_I8 = 5,
    /// 8-bit float E5M2 (IEEE-like, with infinities).
    TL_F8_E5M2 = 6,
    /// 8-bit float E4M3 "fn" (no infinity; NaN is S.1111.111).
    TL_F8_E4M3 = 7,
    /// 8-bit power of two E8M0 (scale format of the MX types).
    TL_F8_E8M0 = 8,
    /// 8-bit float E4M3 "fnuz" (no infinity, no negative zero; NaN is 0x80).
    TL_F8_E4M3FNUZ = 9,
    /// 8-bit float E5M2 "fnuz" (no infinity, no negative zero; NaN is 0x80).
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
    /// Complex number of two F32 (real, imaginary).
    TL_C64 = 18,
    /// IEEE double precision.
    TL_F64 = 19,
    /// Signed 64-bit integer.
    TL_I64 = 20,
    /// Unsigned 64-bit integer.
    TL_U64 = 21,
}

impl tl_dtype {
    /// The C value of a dtype.
    pub(crate) const fn of(dtype: Dtype) -> tl_dtype {
        match dtype {
            Dtype::BOOL => tl_dtype::TL_BOOL,
            Dtype::F4 => tl_dtype::TL_F4,
            Dtype::F6_E2M3 => tl_dtype::TL_F6_E2M3,
            Dtype::F6_E3M2 => tl_dtype::TL_F6_E3M2,
            Dtype::U8 => tl_dtype::TL_U8,
            Dtype::I8 => tl_dtype::TL_I8,
            Dtype::F8_E5M2 => tl_dtype::TL_F8_E5M2,
            Dtype::F8_E4M3 => tl_dtype::TL_F8_E4M3,
            Dtype::F8_E8M0 => tl_dtype::TL_F8_E8M0,
            Dtype::F8_E4M3FNUZ => tl_dtype::TL_F8_E4M3FNUZ,
            Dtype::F8_E5M2FNUZ => tl_dtype::TL_F8_E5M2FNUZ,
            Dtype::I16 => tl_dtype::TL_I16,
            Dtype::U16 => tl_dtype::TL_U16,
            Dtype::F16 => tl_dtype::TL_F16,
            Dtype::BF16 => tl_dtype::TL_BF16,
            Dtype::I32 => tl_dtype::TL_I32,
            Dtype::U32 => tl_dtype::TL_U32,
            Dtype::F32 => tl_dtype::TL_F32,
            Dtype::C64 => tl_dtype::TL_C64,
            Dtype::F64 => tl_dtype::TL_F64,
            Dtype::I64 => tl_dtype::TL_I64,
            Dtype::U64 => tl_dtype::TL_U64,
        }
    }
}
