//! Why a tensor cannot be quantized or dequantized (a leaf: the umbrella
//! error wraps it).

use crate::Dtype;

/// Why a tensor cannot be quantized or dequantized. Carried by
/// [`crate::Error::Quant`] with the tensor's name.
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
    /// MLX affine: a group's weights span so much that its scale, or the
    /// value of its largest code, is not a finite f32.
    #[error(
        "row {row}, group {group}: the weights span more than f32 holds (the affine grid would reach infinity)"
    )]
    RangeOverflow {
        /// Row.
        row: u64,
        /// Group index within the row.
        group: u64,
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
