//! The ggml type table: every tensor type a GGUF file can name, with its
//! block size (elements per block), type size (bytes per block), bits per
//! weight and name, as ggml defines them (`ggml.h`, `ggml.c`; the same
//! numbers as gguf-py's `GGML_QUANT_SIZES`).

use std::fmt;

/// A ggml tensor type (the `type` field of a GGUF tensor info).
///
/// ```
/// use tensorfile::gguf::GgmlType;
/// let t = GgmlType::from_id(12).unwrap();
/// assert_eq!(t, GgmlType::Q4_K);
/// assert_eq!((t.block_size(), t.type_size()), (256, 144));
/// assert_eq!(t.bits_per_weight(), 4.5);
/// assert_eq!(GgmlType::from_name("q8_0"), Some(GgmlType::Q8_0));
/// ```
// Variants are spelled as ggml spells them (`Q4_K`, `IQ2_XXS`).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    /// IEEE single precision.
    F32,
    /// IEEE half precision.
    F16,
    /// 4-bit, blocks of 32 with an f16 scale: `d * (q - 8)`.
    Q4_0,
    /// 4-bit, blocks of 32 with f16 scale and minimum: `d * q + m`.
    Q4_1,
    /// 5-bit, blocks of 32 with an f16 scale: `d * (q - 16)`.
    Q5_0,
    /// 5-bit, blocks of 32 with f16 scale and minimum.
    Q5_1,
    /// 8-bit, blocks of 32 with an f16 scale: `d * q`.
    Q8_0,
    /// 8-bit, blocks of 32 with f32 scale and sum (an intermediate format).
    Q8_1,
    /// 2-bit K-quant, super-blocks of 256.
    Q2_K,
    /// 3-bit K-quant.
    Q3_K,
    /// 4-bit K-quant.
    Q4_K,
    /// 5-bit K-quant.
    Q5_K,
    /// 6-bit K-quant.
    Q6_K,
    /// 8-bit K-quant (an intermediate format).
    Q8_K,
    /// 2.06-bit importance quant.
    IQ2_XXS,
    /// 2.31-bit importance quant.
    IQ2_XS,
    /// 3.06-bit importance quant.
    IQ3_XXS,
    /// 1.56-bit importance quant.
    IQ1_S,
    /// 4.5-bit non-linear quant, blocks of 32.
    IQ4_NL,
    /// 3.44-bit importance quant.
    IQ3_S,
    /// 2.5-bit importance quant.
    IQ2_S,
    /// 4.25-bit non-linear quant, super-blocks of 256.
    IQ4_XS,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// IEEE double precision.
    F64,
    /// 1.75-bit importance quant.
    IQ1_M,
    /// bfloat16.
    BF16,
    /// Ternary, 1.69 bits per weight.
    TQ1_0,
    /// Ternary, 2.06 bits per weight.
    TQ2_0,
    /// OCP MX FP4: E2M1 codes in blocks of 32 with an E8M0 scale.
    MXFP4,
    /// NVIDIA FP4: E2M1 codes in blocks of 16 with UE4M3 scales (ggml
    /// blocks of 64).
    NVFP4,
    /// 1-bit, blocks of 128.
    Q1_0,
    /// 2-bit, blocks of 64.
    Q2_0,
}

/// `(type, id, name, block size, type size)`.
const TABLE: [(GgmlType, u32, &str, u64, u64); 35] = {
    use GgmlType::*;
    [
        (F32, 0, "F32", 1, 4),
        (F16, 1, "F16", 1, 2),
        (Q4_0, 2, "Q4_0", 32, 18),
        (Q4_1, 3, "Q4_1", 32, 20),
        (Q5_0, 6, "Q5_0", 32, 22),
        (Q5_1, 7, "Q5_1", 32, 24),
        (Q8_0, 8, "Q8_0", 32, 34),
        (Q8_1, 9, "Q8_1", 32, 40),
        (Q2_K, 10, "Q2_K", 256, 84),
        (Q3_K, 11, "Q3_K", 256, 110),
        (Q4_K, 12, "Q4_K", 256, 144),
        (Q5_K, 13, "Q5_K", 256, 176),
        (Q6_K, 14, "Q6_K", 256, 210),
        (Q8_K, 15, "Q8_K", 256, 292),
        (IQ2_XXS, 16, "IQ2_XXS", 256, 66),
        (IQ2_XS, 17, "IQ2_XS", 256, 74),
        (IQ3_XXS, 18, "IQ3_XXS", 256, 98),
        (IQ1_S, 19, "IQ1_S", 256, 50),
        (IQ4_NL, 20, "IQ4_NL", 32, 18),
        (IQ3_S, 21, "IQ3_S", 256, 110),
        (IQ2_S, 22, "IQ2_S", 256, 82),
        (IQ4_XS, 23, "IQ4_XS", 256, 136),
        (I8, 24, "I8", 1, 1),
        (I16, 25, "I16", 1, 2),
        (I32, 26, "I32", 1, 4),
        (I64, 27, "I64", 1, 8),
        (F64, 28, "F64", 1, 8),
        (IQ1_M, 29, "IQ1_M", 256, 56),
        (BF16, 30, "BF16", 1, 2),
        (TQ1_0, 34, "TQ1_0", 256, 54),
        (TQ2_0, 35, "TQ2_0", 256, 66),
        (MXFP4, 39, "MXFP4", 32, 17),
        (NVFP4, 40, "NVFP4", 64, 36),
        (Q1_0, 41, "Q1_0", 128, 18),
        (Q2_0, 42, "Q2_0", 64, 18),
    ]
};

/// Type ids ggml once had and removed from GGUF files.
const REMOVED: [(u32, &str); 8] = [
    (4, "Q4_2"),
    (5, "Q4_3"),
    (31, "Q4_0_4_4"),
    (32, "Q4_0_4_8"),
    (33, "Q4_0_8_8"),
    (36, "IQ4_NL_4_4"),
    (37, "IQ4_NL_4_8"),
    (38, "IQ4_NL_8_8"),
];

impl GgmlType {
    /// Every type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|row| row.0)
    }

    fn row(self) -> &'static (GgmlType, u32, &'static str, u64, u64) {
        // The table is in declaration order: the discriminant indexes it.
        &TABLE[self as usize]
    }

    /// The type with this id, if ggml has one.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|row| row.1 == id).map(|row| row.0)
    }

    /// The name of a type id ggml removed from GGUF files (`Q4_0_4_4`, ...).
    pub fn removed_name(id: u32) -> Option<&'static str> {
        REMOVED.iter().find(|r| r.0 == id).map(|r| r.1)
    }

    /// The type named `name` (any case: `q4_k`, `Q4_K`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE
            .iter()
            .find(|row| row.2.eq_ignore_ascii_case(name))
            .map(|row| row.0)
    }

    /// The id written in GGUF files.
    pub fn id(self) -> u32 {
        self.row().1
    }

    /// The name ggml gives it (`Q4_K`).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Elements per block (1 for the plain types).
    pub fn block_size(self) -> u64 {
        self.row().3
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.row().4
    }

    /// Bits per weight: `type_size * 8 / block_size`.
    pub fn bits_per_weight(self) -> f64 {
        (self.type_size() * 8) as f64 / self.block_size() as f64
    }

    /// Whether values are stored one per element (F32, F16, BF16, F64 and
    /// the integers), not in quantized blocks.
    pub fn is_plain(self) -> bool {
        self.block_size() == 1
    }

    /// The safetensors dtype holding the same elements, for the plain types.
    pub fn plain_dtype(self) -> Option<crate::Dtype> {
        use crate::Dtype;
        Some(match self {
            GgmlType::F32 => Dtype::F32,
            GgmlType::F16 => Dtype::F16,
            GgmlType::BF16 => Dtype::BF16,
            GgmlType::F64 => Dtype::F64,
            GgmlType::I8 => Dtype::I8,
            GgmlType::I16 => Dtype::I16,
            GgmlType::I32 => Dtype::I32,
            GgmlType::I64 => Dtype::I64,
            _ => return None,
        })
    }

    /// Whether this library decodes it to f32: every type but the
    /// intermediate formats Q8_1 and Q8_K and the new Q1_0 and Q2_0 (which
    /// gguf-py 0.19 cannot decode either). Integer types are not
    /// decoded but read as they are.
    pub fn dequantizes(self) -> bool {
        !matches!(
            self,
            GgmlType::Q8_1
                | GgmlType::Q8_K
                | GgmlType::Q1_0
                | GgmlType::Q2_0
                | GgmlType::I8
                | GgmlType::I16
                | GgmlType::I32
                | GgmlType::I64
        )
    }

    /// The bytes of `elements` elements (a whole number of blocks), or
    /// `None` when they are not whole blocks or the count overflows.
    pub fn bytes_for(self, elements: u64) -> Option<u64> {
        if !elements.is_multiple_of(self.block_size()) {
            return None;
        }
        (elements / self.block_size()).checked_mul(self.type_size())
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for GgmlType {
    type Err = String;
    fn from_str(s: &str) -> Result<GgmlType, String> {
        GgmlType::from_name(s).ok_or_else(|| format!("unknown ggml type {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_indexed_by_discriminant_and_ids_are_unique() {
        for (i, row) in TABLE.iter().enumerate() {
            assert_eq!(row.0 as usize, i, "{}", row.2);
            assert_eq!(GgmlType::from_id(row.1), Some(row.0));
            assert_eq!(GgmlType::removed_name(row.1), None);
            assert_eq!(row.0.name(), row.2);
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::removed_name(31), Some("Q4_0_4_4"));
        assert_eq!(GgmlType::from_id(43), None);
    }
}
