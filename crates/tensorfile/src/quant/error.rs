//! Why a tensor cannot be quantized or dequantized (a leaf: the umbrella
//! error wraps it).

use crate::Dtype;

/// Why a tensor cannot be quantized or dequantized. Carried by
/// [`crate::Error::Quant`] with the tensor's name. A `row` counts the rows
/// of every matrix of the tensor in order (row-major over every dimension
/// but the last: row `e * out + o` of an expert stack `[E, out, in]`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QuantError {
    /// A weight to quantize holds NaN or an infinity.
    #[error("element [{row}, {col}] is {value}: only finite weights quantize")]
    NotFinite {
        /// Row.
        row: u64,
        /// Column.
        col: u64,
        /// The value.
        value: f32,
    },
    /// A group's scale does not fit F16.
    #[error("row {row}, group {group}: the scale {scale} (absmax / 7) overflows F16")]
    ScaleOverflow {
        /// Row.
        row: u64,
        /// Group index within the row.
        group: u64,
        /// The f32 scale.
        scale: f32,
    },
    /// MLX: MLX's quantization of a group would dequantize (as MLX does by
    /// default: affine in the scales' dtype, mxfp4/mxfp8 in BF16) to an
    /// infinity or NaN: the weights span more than that arithmetic holds
    /// (near the dtype's largest values). MLX writes such groups; they are
    /// refused here.
    #[error(
        "row {row}, group {group}: the weights reach past what their dtype holds (MLX's quantization of them dequantizes to infinity or NaN)"
    )]
    RangeOverflow {
        /// Row.
        row: u64,
        /// Group index within the row.
        group: u64,
    },
    /// MLX mxfp4/mxfp8: a group's E8M0 exponent is below -127 (its largest
    /// magnitude is below about 6e-38, which only F32 holds), so the scale
    /// byte MLX writes wraps around 256 and brings the weights back near
    /// `2^(exponent + 256)`. MLX writes it; it is refused here.
    #[error(
        "row {row}, group {group}: the scale exponent {exponent} is below E8M0's -127 (MLX would store it wrapped around and read the weights back near 2^{})",
        .exponent + 256
    )]
    ScaleOutOfRange {
        /// Row.
        row: u64,
        /// Group index within the row.
        group: u64,
        /// The exponent MLX computes, `round(log2(absmax / max code))`.
        exponent: i32,
    },
    /// The tensor's shape does not fit the scheme.
    #[error("{0}")]
    Shape(String),
    /// The tensor's dtype does not fit.
    #[error("is {dtype}, but {wanted}")]
    Dtype {
        /// Its dtype.
        dtype: Dtype,
        /// What is needed.
        wanted: String,
    },
    /// A quantized weight's layout is wrong: a part missing, mismatched or
    /// of the wrong shape or dtype, or parameters that contradict it.
    #[error("{0}")]
    Layout(String),
    /// The parameters to dequantize are unknown or contradictory.
    #[error("{0}")]
    Params(String),
}

impl QuantError {
    /// This error's kind: weights, shapes and dtypes the scheme cannot
    /// represent are [`ErrorKind::Unsupported`](tensorfile_core::ErrorKind::Unsupported),
    /// a quantized weight's broken layout [`Format`](tensorfile_core::ErrorKind::Format),
    /// unknown or contradictory parameters
    /// [`InvalidArgument`](tensorfile_core::ErrorKind::InvalidArgument).
    pub fn kind(&self) -> tensorfile_core::ErrorKind {
        use tensorfile_core::ErrorKind;
        match self {
            QuantError::NotFinite { .. }
            | QuantError::ScaleOverflow { .. }
            | QuantError::RangeOverflow { .. }
            | QuantError::ScaleOutOfRange { .. }
            | QuantError::Shape(_)
            | QuantError::Dtype { .. } => ErrorKind::Unsupported,
            QuantError::Layout(_) => ErrorKind::Format,
            QuantError::Params(_) => ErrorKind::InvalidArgument,
        }
    }
}
