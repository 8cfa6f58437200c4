//! The element types a safetensors file can hold.

use std::fmt;

/// An element type, as named in a safetensors header.
///
/// The discriminants follow the reference library's enumeration (and the C
/// library's `tl_dtype`): `Bool` is 0, `U64` is 21.
///
/// ```
/// use tensorfile_core::Dtype;
/// assert_eq!(Dtype::from_name("BF16"), Some(Dtype::BF16));
/// assert_eq!(Dtype::BF16.bits(), 16);
/// assert_eq!(Dtype::F4.byte_len(3), None); // 12 bits: not a whole number of bytes
/// ```
// Variants are spelled as in headers (`F8_E4M3`), so code reads like the format.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Dtype {
    /// Boolean, one byte per value (0 or 1).
    BOOL = 0,
    /// 4-bit float E2M1 (no NaN, no infinity), two values per byte.
    F4,
    /// 6-bit float E2M3, four values per three bytes.
    F6_E2M3,
    /// 6-bit float E3M2, four values per three bytes.
    F6_E3M2,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// 8-bit float E5M2 (IEEE-like, with infinities).
    F8_E5M2,
    /// 8-bit float E4M3 "fn" (no infinity; NaN is S.1111.111).
    F8_E4M3,
    /// 8-bit power of two E8M0 (scale format of the MX types).
    F8_E8M0,
    /// 8-bit float E4M3 "fnuz" (no infinity, no negative zero; NaN is 0x80).
    F8_E4M3FNUZ,
    /// 8-bit float E5M2 "fnuz" (no infinity, no negative zero; NaN is 0x80).
    F8_E5M2FNUZ,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE single precision.
    F32,
    /// Complex number of two F32 (real, imaginary).
    C64,
    /// IEEE double precision.
    F64,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
}

impl Dtype {
    /// Every dtype, in the reference library's order (the order of the discriminants).
    pub const ALL: [Dtype; 22] = [
        Dtype::BOOL,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// The name used in headers, such as `"F8_E4M3"`.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    /// The dtype a header name denotes. Names are case-sensitive, as in the
    /// format: `"bf16"` is not a dtype. (Use [`Dtype::from_name_ignore_case`]
    /// for command-line arguments.)
    pub fn from_name(name: &str) -> Option<Dtype> {
        // A match on the string compiles to a length switch plus a few
        // comparisons: cheaper than a map for 22 short names.
        Some(match name {
            "BOOL" => Dtype::BOOL,
            "F4" => Dtype::F4,
            "F6_E2M3" => Dtype::F6_E2M3,
            "F6_E3M2" => Dtype::F6_E3M2,
            "U8" => Dtype::U8,
            "I8" => Dtype::I8,
            "F8_E5M2" => Dtype::F8_E5M2,
            "F8_E4M3" => Dtype::F8_E4M3,
            "F8_E8M0" => Dtype::F8_E8M0,
            "F8_E4M3FNUZ" => Dtype::F8_E4M3FNUZ,
            "F8_E5M2FNUZ" => Dtype::F8_E5M2FNUZ,
            "I16" => Dtype::I16,
            "U16" => Dtype::U16,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            "I32" => Dtype::I32,
            "U32" => Dtype::U32,
            "F32" => Dtype::F32,
            "C64" => Dtype::C64,
            "F64" => Dtype::F64,
            "I64" => Dtype::I64,
            "U64" => Dtype::U64,
            _ => return None,
        })
    }

    /// Like [`Dtype::from_name`], but `bf16` and `BF16` both work: for user input.
    pub fn from_name_ignore_case(name: &str) -> Option<Dtype> {
        Dtype::from_name(&name.to_ascii_uppercase())
    }

    /// The dtype with this discriminant (`0..=21`).
    pub fn from_index(index: u8) -> Option<Dtype> {
        Dtype::ALL.get(index as usize).copied()
    }

    /// Bits per element: 4 for F4, 6 for the F6 types, 64 for C64 (two F32).
    pub const fn bits(self) -> u32 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// Bytes per element for dtypes of 8 bits or more; `None` for F4 and F6.
    pub const fn size(self) -> Option<usize> {
        let bits = self.bits();
        if bits % 8 == 0 {
            Some((bits / 8) as usize)
        } else {
            None
        }
    }

    /// Whether elements are smaller than a byte (F4, F6_E2M3, F6_E3M2).
    pub const fn is_sub_byte(self) -> bool {
        self.bits() < 8
    }

    /// Whether this is a floating-point format (C64 included).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::F4
                | Dtype::F6_E2M3
                | Dtype::F6_E3M2
                | Dtype::F8_E5M2
                | Dtype::F8_E4M3
                | Dtype::F8_E8M0
                | Dtype::F8_E4M3FNUZ
                | Dtype::F8_E5M2FNUZ
                | Dtype::F16
                | Dtype::BF16
                | Dtype::F32
                | Dtype::C64
                | Dtype::F64
        )
    }

    /// Whether this is a signed or unsigned integer type (BOOL excluded).
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            Dtype::U8
                | Dtype::I8
                | Dtype::I16
                | Dtype::U16
                | Dtype::I32
                | Dtype::U32
                | Dtype::I64
                | Dtype::U64
        )
    }

    /// Byte length of `numel` elements, or `None` when it overflows `u64`
    /// or is not a whole number of bytes (sub-byte dtypes).
    pub const fn byte_len(self, numel: u64) -> Option<u64> {
        let bits = match numel.checked_mul(self.bits() as u64) {
            Some(bits) => bits,
            None => return None,
        };
        if bits % 8 == 0 {
            Some(bits / 8)
        } else {
            None
        }
    }

    /// Position in the canonical writer's order: U64 first (0), BOOL last
    /// (21). This is the reverse of the enumeration, so that types with
    /// larger alignment come first.
    pub const fn canonical_rank(self) -> u8 {
        21 - self as u8
    }
}

/// Why a shape has no byte length in a dtype ([`Dtype::tensor_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteLenError {
    /// The element count, or its bit count, overflows 64 bits.
    Overflow,
    /// The elements of a sub-byte dtype do not fill whole bytes.
    NotWholeBytes {
        /// The element count.
        numel: u64,
    },
}

impl Dtype {
    /// Byte length of a tensor of `shape` in this dtype, telling an overflow
    /// from a count of sub-byte elements that does not fill whole bytes.
    ///
    /// ```
    /// use tensorfile_core::dtype::{ByteLenError, Dtype};
    /// assert_eq!(Dtype::F32.tensor_bytes(&[2, 3]), Ok(24));
    /// assert_eq!(Dtype::F4.tensor_bytes(&[3]), Err(ByteLenError::NotWholeBytes { numel: 3 }));
    /// assert_eq!(Dtype::U8.tensor_bytes(&[u64::MAX, 2]), Err(ByteLenError::Overflow));
    /// ```
    pub fn tensor_bytes(self, shape: &[u64]) -> Result<u64, ByteLenError> {
        let numel = numel(shape).ok_or(ByteLenError::Overflow)?;
        let bits = numel
            .checked_mul(self.bits() as u64)
            .ok_or(ByteLenError::Overflow)?;
        if bits % 8 == 0 {
            Ok(bits / 8)
        } else {
            Err(ByteLenError::NotWholeBytes { numel })
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Dtype {
    type Err = String;

    /// Parses a dtype name in either case (`bf16` or `BF16`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dtype::from_name_ignore_case(s).ok_or_else(|| {
            let names: Vec<&str> = Dtype::ALL.iter().map(|d| d.name()).collect();
            format!("unknown dtype `{s}`; expected one of {}", names.join(", "))
        })
    }
}

/// Number of elements of a shape: the product of its dimensions, 1 for a
/// scalar (`[]`), `None` on overflow.
pub fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_order() {
        for (i, d) in Dtype::ALL.iter().enumerate() {
            assert_eq!(*d as usize, i);
            assert_eq!(Dtype::from_name(d.name()), Some(*d));
            assert_eq!(Dtype::from_index(i as u8), Some(*d));
            assert_eq!(d.name().to_lowercase().parse::<Dtype>(), Ok(*d));
        }
        assert_eq!(Dtype::from_name("u8"), None);
        assert_eq!(Dtype::from_index(22), None);
        assert_eq!(Dtype::U64.canonical_rank(), 0);
        assert_eq!(Dtype::BOOL.canonical_rank(), 21);
    }

    #[test]
    fn byte_lengths() {
        assert_eq!(Dtype::F32.byte_len(4), Some(16));
        assert_eq!(Dtype::F4.byte_len(4), Some(2));
        assert_eq!(Dtype::F4.byte_len(3), None);
        assert_eq!(Dtype::F6_E2M3.byte_len(4), Some(3));
        assert_eq!(Dtype::F6_E2M3.byte_len(2), None);
        assert_eq!(Dtype::U64.byte_len(u64::MAX), None);
        assert_eq!(numel(&[]), Some(1));
        assert_eq!(numel(&[3, 0, 5]), Some(0));
        assert_eq!(numel(&[u64::MAX, 2]), None);
    }
}
