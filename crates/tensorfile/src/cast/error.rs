//! Why a cast was refused (a leaf: the umbrella error wraps it).

use crate::Dtype;

/// Why a cast was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CastError {
    /// This pair of dtypes does not convert (with these options).
    #[error("cannot cast {from} to {to}: {reason}")]
    Unsupported {
        /// Source dtype.
        from: Dtype,
        /// Target dtype.
        to: Dtype,
        /// Why not.
        reason: &'static str,
    },
    /// A value does not fit the target integer dtype.
    #[error("element {index}: {from} value {value} does not fit {to}")]
    OutOfRange {
        /// Element index (within the tensor, or the slice).
        index: u64,
        /// The value, as text.
        value: String,
        /// Source dtype.
        from: Dtype,
        /// Target dtype.
        to: Dtype,
    },
    /// A strict cast met a value it would change beyond rounding (see
    /// [`Losses`](super::Losses)).
    #[error("element {index}: {from} value {value} {what} in {to} (a strict cast)")]
    Lossy {
        /// Element index (within the tensor, or the slice).
        index: u64,
        /// The value, as text.
        value: String,
        /// Source dtype.
        from: Dtype,
        /// Target dtype.
        to: Dtype,
        /// What would happen to it (`overflows to inf`, `becomes NaN`,
        /// `saturates`, `flushes to zero`).
        what: &'static str,
    },
    /// A BOOL element is neither 0 nor 1.
    #[error("element {index}: BOOL byte {byte:#04x} is neither 0 nor 1")]
    InvalidBool {
        /// Element index.
        index: u64,
        /// The byte.
        byte: u8,
    },
    /// A byte buffer is not a whole number of elements (or, for F4 and F6,
    /// of packing groups).
    #[error("{len} bytes are not a whole number of {dtype} elements")]
    Length {
        /// The dtype.
        dtype: Dtype,
        /// The buffer length.
        len: u64,
    },
    /// The target cannot hold this many elements in whole bytes (F4 needs
    /// an even count, F6 a multiple of 4).
    #[error("{numel} elements of {dtype} are not a whole number of bytes")]
    NotWholeBytes {
        /// The dtype.
        dtype: Dtype,
        /// The element count.
        numel: u64,
    },
    /// A destination buffer has the wrong size.
    #[error("destination holds {actual} bytes, but {expected} are needed")]
    BufferSize {
        /// Bytes needed.
        expected: u64,
        /// Bytes given.
        actual: u64,
    },
    /// A shape's byte count overflows 64 bits.
    #[error("the byte count of shape {shape:?} x {dtype} overflows 64 bits")]
    ShapeOverflow {
        /// The dtype.
        dtype: Dtype,
        /// The shape.
        shape: Vec<u64>,
    },
    /// A streamed tensor received a different number of bytes than its
    /// shape and dtype need.
    #[error("the tensor needs {expected} bytes of {dtype}, but {actual} were given")]
    TensorLength {
        /// The source dtype.
        dtype: Dtype,
        /// Bytes the shape needs.
        expected: u64,
        /// Bytes received (so far, when too many).
        actual: u64,
    },
}

impl CastError {
    /// This error's kind: a pair of dtypes or a value the cast does not
    /// convert (or, strict, would change beyond rounding) is [`ErrorKind::Unsupported`](tensorfile_core::ErrorKind::Unsupported),
    /// a BOOL byte other than 0 or 1 [`Format`](tensorfile_core::ErrorKind::Format),
    /// buffers and lengths that disagree
    /// [`InvalidArgument`](tensorfile_core::ErrorKind::InvalidArgument).
    pub fn kind(&self) -> tensorfile_core::ErrorKind {
        use tensorfile_core::ErrorKind;
        match self {
            CastError::Unsupported { .. }
            | CastError::OutOfRange { .. }
            | CastError::Lossy { .. } => ErrorKind::Unsupported,
            CastError::InvalidBool { .. } => ErrorKind::Format,
            CastError::Length { .. }
            | CastError::NotWholeBytes { .. }
            | CastError::BufferSize { .. }
            | CastError::ShapeOverflow { .. }
            | CastError::TensorLength { .. } => ErrorKind::InvalidArgument,
        }
    }
}
