//! Borrowed views of one tensor, and typed access to its elements.

use std::borrow::Cow;

use crate::dtype::{numel, Dtype};
use crate::error::{Error, Result};
use crate::header::TensorInfo;
use crate::slice::{SliceArg, SlicedView};

/// A Rust element type that matches one dtype's bytes exactly, so a tensor's
/// bytes can be viewed as a slice of it.
pub trait Element: bytemuck::Pod {
    /// The dtype whose elements this type holds.
    const DTYPE: Dtype;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: Dtype = Dtype::$d; })*
    };
}

element! {
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64,
    half::f16 => F16, half::bf16 => BF16,
    [f32; 2] => C64,
}

/// One tensor of a file: its name, dtype, shape and bytes, borrowed from
/// the file (zero-copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorView<'a> {
    info: TensorInfo<'a>,
    data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// A view of `data` described by `info`. The caller guarantees that
    /// `data` is the tensor's bytes (its length matches dtype and shape).
    pub(crate) fn new(info: TensorInfo<'a>, data: &'a [u8]) -> Self {
        TensorView { info, data }
    }

    /// A view of `data` described by `info` (from a validated header),
    /// for readers of other containers of safetensors files.
    ///
    /// # Errors
    /// [`Error::Slice`] when `data` is not as long as `info` says.
    pub fn from_parts(info: TensorInfo<'a>, data: &'a [u8]) -> Result<Self> {
        if data.len() as u64 != info.nbytes() {
            return Err(Error::Slice {
                tensor: info.name.to_string(),
                problem: format!("{} bytes given for {} bytes", data.len(), info.nbytes()),
            });
        }
        Ok(TensorView { info, data })
    }

    /// The tensor's name.
    pub fn name(&self) -> &'a str {
        self.info.name
    }

    /// Its element type.
    pub fn dtype(&self) -> Dtype {
        self.info.dtype
    }

    /// Its dimensions, outermost first (empty for a scalar).
    pub fn shape(&self) -> &'a [u64] {
        self.info.shape
    }

    /// Its bytes: little-endian, C order.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// `[begin, end)` of its bytes, relative to the file's data buffer.
    pub fn data_offsets(&self) -> (u64, u64) {
        self.info.data_offsets
    }

    /// The header's description of this tensor.
    pub fn info(&self) -> TensorInfo<'a> {
        self.info
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        numel(self.info.shape).unwrap_or(0)
    }

    /// Whether the bytes' address is a multiple of `T`'s alignment, so that
    /// [`TensorView::as_slice`] can borrow instead of copy.
    pub fn is_aligned_for<T: Element>(&self) -> bool {
        (self.data.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    }

    /// The elements as `&[T]`: borrowed when the bytes are aligned for `T`,
    /// an owned copy when they are not (MLX writes unaligned files).
    /// `T` must match the dtype (`f32` for F32, `half::bf16` for BF16, ...).
    ///
    /// # Errors
    ///
    /// [`Error::DtypeMismatch`] when `T` is not the tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<Cow<'a, [T]>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::DtypeMismatch {
                tensor: self.name().to_string(),
                actual: self.dtype(),
                requested: T::DTYPE,
            });
        }
        Ok(match bytemuck::try_cast_slice(self.data) {
            Ok(slice) => Cow::Borrowed(slice),
            Err(_) => Cow::Owned(bytemuck::pod_collect_to_vec(self.data)),
        })
    }

    /// A NumPy-style slice: one [`SliceArg`] per leading dimension (missing
    /// ones take the whole dimension). See [`crate::TensorSlice`].
    ///
    /// # Errors
    ///
    /// [`Error::Slice`] when there are more arguments than dimensions, an
    /// index or range is out of bounds, or a step is zero.
    ///
    /// ```
    /// # fn main() -> tensorfile_core::Result<()> {
    /// # use tensorfile_core::{Dtype, TensorRef};
    /// # let data: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|x| x.to_le_bytes()).collect();
    /// # let w = TensorRef { name: "w", dtype: Dtype::F32, shape: &[2, 2], data: &data };
    /// # let file = tensorfile_core::SafeTensors::from_source(tensorfile_core::serialize([w], None)?, &Default::default())?;
    /// use tensorfile_core::SliceArg;
    /// let w = file.tensor("w")?; // [[1, 2], [3, 4]]
    /// let column = w.slice(&[SliceArg::full(), SliceArg::Index(1)])?;
    /// assert_eq!(column.shape(), &[2]);
    /// assert_eq!(bytemuck::pod_collect_to_vec::<u8, f32>(&column.to_vec()), [2.0, 4.0]);
    /// # Ok(()) }
    /// ```
    pub fn slice(&self, args: &[SliceArg]) -> Result<SlicedView<'a>> {
        SlicedView::new(self.info, self.data, args)
    }
}
