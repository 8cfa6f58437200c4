//! The element types a safetensors file can hold: one table, from which
//! the enum, the names, the sizes, the writer's order, the C library's
//! numbers and the names frameworks give each dtype (torch, numpy,
//! ml_dtypes) all come.
//!
//! Adding a dtype is adding one row to the `dtype_table!` invocation below
//! (and, in the C library, regenerating its `tl_dtype` enum, which a test
//! checks against this table).

use std::ffi::CStr;
use std::fmt;

/// What kind of values a dtype holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Booleans (0 or 1).
    Bool,
    /// Unsigned integers.
    Unsigned,
    /// Signed integers.
    Signed,
    /// Real floating-point numbers (including the 4-, 6- and 8-bit formats).
    Float,
    /// Complex numbers (two floats).
    Complex,
}

/// Generates [`Dtype`] and its table-driven methods from one row per dtype:
/// `Variant = "header name", bits, kind, canonical writer rank, C ABI
/// number, torch name, numpy typestr, ml_dtypes name; "description"` (a
/// framework without the dtype: `-`). The variants are declared in the reference
/// library's enumeration order (which `Ord` follows); the rank and the C
/// number are written out, so that inserting a dtype never renumbers the
/// C ABI or moves another dtype in the writer's order by accident.
macro_rules! dtype_table {
    ($($variant:ident = $name:literal, $bits:literal, $kind:ident, $rank:literal, $abi:literal,
       $torch:tt, $numpy:tt, $ml:tt; $doc:literal)*) => {
        /// An element type, as named in a safetensors header.
        ///
        /// Declared in the reference library's enumeration order.
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
        pub enum Dtype {
            $(#[doc = $doc] $variant,)*
        }

        impl Dtype {
            /// Every dtype, in the reference library's order.
            pub const ALL: &'static [Dtype] = &[$(Dtype::$variant),*];

            /// The name used in headers, such as `"F8_E4M3"`.
            pub const fn name(self) -> &'static str {
                match self { $(Dtype::$variant => $name,)* }
            }

            /// [`Dtype::name`] as a NUL-terminated C string.
            pub const fn c_name(self) -> &'static CStr {
                match self {
                    $(Dtype::$variant => match CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                        Ok(c) => c,
                        Err(_) => c"?",
                    },)*
                }
            }

            /// The dtype a header name denotes. Names are case-sensitive, as
            /// in the format: `"bf16"` is not a dtype. (Use
            /// [`Dtype::from_name_ignore_case`] for command-line arguments.)
            pub fn from_name(name: &str) -> Option<Dtype> {
                // A match on the string compiles to a length switch plus a
                // few comparisons: cheaper than a map for a few dozen names.
                Some(match name { $($name => Dtype::$variant,)* _ => return None })
            }

            /// Bits per element: 4 for F4, 6 for the F6 types, 64 for C64 (two F32).
            pub const fn bits(self) -> u32 {
                match self { $(Dtype::$variant => $bits,)* }
            }

            /// What kind of values it holds.
            pub const fn kind(self) -> Kind {
                match self { $(Dtype::$variant => Kind::$kind,)* }
            }

            /// Position in the canonical writer's order: larger alignments
            /// first, as the reference library writes (U64 is 0, BOOL last).
            pub const fn canonical_rank(self) -> u8 {
                match self { $(Dtype::$variant => $rank,)* }
            }

            /// The C library's `tl_dtype` value (`TL_F32` is 17).
            pub const fn c_abi(self) -> u8 {
                match self { $(Dtype::$variant => $abi,)* }
            }

            /// The dtype of a C `tl_dtype` value.
            pub const fn from_c_abi(value: u8) -> Option<Dtype> {
                match value { $($abi => Some(Dtype::$variant),)* _ => None }
            }

            /// One line saying what the dtype holds (the table's description).
            pub const fn description(self) -> &'static str {
                match self { $(Dtype::$variant => $doc,)* }
            }

            /// torch's name for it (`torch.<name>`): `float32`, `bfloat16`,
            /// `float8_e4m3fn`, ...; `None` where torch has no such dtype. F4's
            /// is `float4_e2m1fn_x2`, torch's type of two F4 values per element.
            pub const fn torch_name(self) -> Option<&'static str> {
                match self { $(Dtype::$variant => column!($torch),)* }
            }

            /// The dtype torch names `name` ([`Dtype::torch_name`]; no aliases).
            pub fn from_torch_name(name: &str) -> Option<Dtype> {
                Dtype::ALL.iter().copied().find(|d| d.torch_name() == Some(name))
            }

            /// numpy's array-interface type string for it, little-endian
            /// (`"<f4"`, `"|b1"`), where numpy has the type itself; `None` for
            /// BF16, the float8, F4 and F6 types.
            pub const fn numpy_typestr(self) -> Option<&'static str> {
                match self { $(Dtype::$variant => column!($numpy),)* }
            }

            /// The dtype whose numpy type string is `typestr` without its
            /// byte order (`"f4"`, `"b1"`).
            pub fn from_numpy_kind(kind_and_size: &str) -> Option<Dtype> {
                Dtype::ALL.iter().copied().find(|d| {
                    d.numpy_typestr().and_then(|t| t.get(1..)) == Some(kind_and_size)
                })
            }

            /// The name of the numpy type ml_dtypes gives a dtype numpy lacks
            /// whose items are whole bytes (`bfloat16`, `float8_e4m3fn`, ...);
            /// `None` for the dtypes numpy has and for F4 and F6, whose
            /// values are packed below a byte here.
            pub const fn ml_dtypes_name(self) -> Option<&'static str> {
                match self { $(Dtype::$variant => column!($ml),)* }
            }
        }
    };
}

/// A framework-name cell of the table: `-` (none) or a name.
macro_rules! column {
    (-) => {
        None
    };
    ($name:literal) => {
        Some($name)
    };
}

dtype_table! {
    // Variant = name, bits, kind, rank, C ABI, torch, numpy, ml_dtypes; description
    BOOL = "BOOL", 8, Bool, 21, 0, "bool", "|b1", -; "Boolean, one byte per value (0 or 1)."
    F4 = "F4", 4, Float, 20, 1, "float4_e2m1fn_x2", -, -; "4-bit float E2M1 (no NaN, no infinity), two values per byte."
    F6_E2M3 = "F6_E2M3", 6, Float, 19, 2, -, -, -; "6-bit float E2M3, four values per three bytes."
    F6_E3M2 = "F6_E3M2", 6, Float, 18, 3, -, -, -; "6-bit float E3M2, four values per three bytes."
    U8 = "U8", 8, Unsigned, 17, 4, "uint8", "|u1", -; "Unsigned 8-bit integer."
    I8 = "I8", 8, Signed, 16, 5, "int8", "|i1", -; "Signed 8-bit integer."
    F8_E5M2 = "F8_E5M2", 8, Float, 15, 6, "float8_e5m2", -, "float8_e5m2"; "8-bit float E5M2 (IEEE-like, with infinities)."
    F8_E4M3 = "F8_E4M3", 8, Float, 14, 7, "float8_e4m3fn", -, "float8_e4m3fn"; "8-bit float E4M3 \"fn\" (no infinity; NaN is S.1111.111)."
    F8_E8M0 = "F8_E8M0", 8, Float, 13, 8, "float8_e8m0fnu", -, "float8_e8m0fnu"; "8-bit power of two E8M0 (scale format of the MX types)."
    F8_E4M3FNUZ = "F8_E4M3FNUZ", 8, Float, 12, 9, "float8_e4m3fnuz", -, "float8_e4m3fnuz"; "8-bit float E4M3 \"fnuz\" (no infinity, no negative zero; NaN is 0x80)."
    F8_E5M2FNUZ = "F8_E5M2FNUZ", 8, Float, 11, 10, "float8_e5m2fnuz", -, "float8_e5m2fnuz"; "8-bit float E5M2 \"fnuz\" (no infinity, no negative zero; NaN is 0x80)."
    I16 = "I16", 16, Signed, 10, 11, "int16", "<i2", -; "Signed 16-bit integer."
    U16 = "U16", 16, Unsigned, 9, 12, "uint16", "<u2", -; "Unsigned 16-bit integer."
    F16 = "F16", 16, Float, 8, 13, "float16", "<f2", -; "IEEE half precision."
    BF16 = "BF16", 16, Float, 7, 14, "bfloat16", -, "bfloat16"; "bfloat16."
    I32 = "I32", 32, Signed, 6, 15, "int32", "<i4", -; "Signed 32-bit integer."
    U32 = "U32", 32, Unsigned, 5, 16, "uint32", "<u4", -; "Unsigned 32-bit integer."
    F32 = "F32", 32, Float, 4, 17, "float32", "<f4", -; "IEEE single precision."
    C64 = "C64", 64, Complex, 3, 18, "complex64", "<c8", -; "Complex number of two F32 (real, imaginary)."
    F64 = "F64", 64, Float, 2, 19, "float64", "<f8", -; "IEEE double precision."
    I64 = "I64", 64, Signed, 1, 20, "int64", "<i8", -; "Signed 64-bit integer."
    U64 = "U64", 64, Unsigned, 0, 21, "uint64", "<u8", -; "Unsigned 64-bit integer."
}

impl Dtype {
    /// Like [`Dtype::from_name`], but `bf16` and `BF16` both work: for user input.
    pub fn from_name_ignore_case(name: &str) -> Option<Dtype> {
        Dtype::from_name(&name.to_ascii_uppercase())
    }

    /// Bytes per element for dtypes of 8 bits or more; `None` for F4 and F6.
    pub const fn size(self) -> Option<usize> {
        let bits = self.bits();
        if bits.is_multiple_of(8) {
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
        matches!(self.kind(), Kind::Float | Kind::Complex)
    }

    /// Whether this is a signed or unsigned integer type (BOOL excluded).
    pub const fn is_int(self) -> bool {
        matches!(self.kind(), Kind::Signed | Kind::Unsigned)
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
}

/// Why a shape has no byte length in a dtype ([`Dtype::tensor_bytes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// # Errors
    ///
    /// [`ByteLenError::Overflow`] when the element or bit count overflows
    /// `u64`; [`ByteLenError::NotWholeBytes`] when sub-byte elements leave a
    /// partial byte.
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

/// A dtype name that is not one ([`Dtype`]'s `FromStr`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{0}`; expected one of {names}", names = Dtype::ALL.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "))]
pub struct UnknownDtype(pub String);

impl std::str::FromStr for Dtype {
    type Err = UnknownDtype;

    /// Parses a dtype name in either case (`bf16` or `BF16`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dtype::from_name_ignore_case(s).ok_or_else(|| UnknownDtype(s.to_string()))
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
    fn names_round_trip() {
        for &d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
            assert_eq!(d.c_name().to_str(), Ok(d.name()));
            assert_eq!(d.name().to_lowercase().parse::<Dtype>(), Ok(d));
            assert_eq!(Dtype::from_c_abi(d.c_abi()), Some(d));
        }
        assert_eq!(Dtype::from_name("u8"), None);
        assert_eq!(Dtype::from_c_abi(22), None);
    }

    #[test]
    fn framework_names_round_trip() {
        for &d in Dtype::ALL {
            if let Some(t) = d.torch_name() {
                assert_eq!(Dtype::from_torch_name(t), Some(d));
            }
            if let Some(t) = d.numpy_typestr() {
                assert_eq!(Dtype::from_numpy_kind(&t[1..]), Some(d));
                assert_eq!(d.size(), t[2..].parse().ok(), "{d}");
            }
            // numpy has it, or ml_dtypes does, or it is packed below a byte.
            let ways = [d.numpy_typestr(), d.ml_dtypes_name()];
            assert_eq!(
                ways.iter().flatten().count(),
                usize::from(!d.is_sub_byte()),
                "{d}"
            );
        }
        assert_eq!(Dtype::BF16.torch_name(), Some("bfloat16"));
        assert_eq!(Dtype::F16.numpy_typestr(), Some("<f2"));
        assert_eq!(Dtype::F8_E4M3.ml_dtypes_name(), Some("float8_e4m3fn"));
        assert_eq!(Dtype::from_torch_name("float"), None);
        assert_eq!(Dtype::from_numpy_kind("f16"), None);
    }

    /// The C library's numbers are an ABI: they never change. (A new dtype
    /// gets the next free number, wherever it sits in the enumeration.)
    #[test]
    fn c_abi_numbers_are_pinned() {
        let pinned = [
            ("BOOL", 0),
            ("F4", 1),
            ("F6_E2M3", 2),
            ("F6_E3M2", 3),
            ("U8", 4),
            ("I8", 5),
            ("F8_E5M2", 6),
            ("F8_E4M3", 7),
            ("F8_E8M0", 8),
            ("F8_E4M3FNUZ", 9),
            ("F8_E5M2FNUZ", 10),
            ("I16", 11),
            ("U16", 12),
            ("F16", 13),
            ("BF16", 14),
            ("I32", 15),
            ("U32", 16),
            ("F32", 17),
            ("C64", 18),
            ("F64", 19),
            ("I64", 20),
            ("U64", 21),
        ];
        for (name, abi) in pinned {
            assert_eq!(
                Dtype::from_name(name).map(Dtype::c_abi),
                Some(abi),
                "{name}"
            );
        }
        assert_eq!(
            Dtype::ALL.len(),
            pinned.len(),
            "a new dtype needs a pinned number here"
        );
        let mut numbers: Vec<u8> = Dtype::ALL.iter().map(|d| d.c_abi()).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(
            numbers.len(),
            Dtype::ALL.len(),
            "two dtypes share a C number"
        );
    }

    /// The writer's order is the reference library's: a dtype's rank is its
    /// position from the end of the reference's enumeration.
    #[test]
    fn canonical_ranks_are_the_reference_order_reversed() {
        for (i, &d) in Dtype::ALL.iter().enumerate() {
            assert_eq!(d.canonical_rank() as usize, Dtype::ALL.len() - 1 - i, "{d}");
        }
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
