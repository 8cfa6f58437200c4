//! NumPy-style slicing of a tensor, as tensor-parallel loaders need: the
//! sliced shape and the byte ranges to read, planned from the header alone
//! (so a remote or unmapped file is read only where the slice covers it),
//! or an owned copy.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::header::TensorInfo;

/// How to slice one dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceArg {
    /// One position (negative counts from the end); the dimension is removed.
    Index(i64),
    /// `start:stop:step`, NumPy-style: bounds may be negative (counting from
    /// the end) or absent (the ends); `step` must be positive. Bounds past
    /// either end are errors; `start >= stop` gives an empty result.
    Range {
        /// First position, default 0.
        start: Option<i64>,
        /// One past the last position, default the dimension's length.
        stop: Option<i64>,
        /// Distance between positions, at least 1.
        step: u64,
    },
}

impl SliceArg {
    /// The whole dimension (`:`).
    pub fn full() -> SliceArg {
        SliceArg::Range {
            start: None,
            stop: None,
            step: 1,
        }
    }

    /// `start..stop` with step 1.
    pub fn range(start: i64, stop: i64) -> SliceArg {
        SliceArg::Range {
            start: Some(start),
            stop: Some(stop),
            step: 1,
        }
    }
}

/// What a dimension keeps: `count` positions from `start`, `step` apart.
#[derive(Debug, Clone, Copy)]
struct Kept {
    start: u64,
    step: u64,
    count: u64,
}

/// A slice of a tensor: its shape and where its bytes are, from the
/// tensor's description alone. [`crate::SafeTensors::read_slice`] reads it
/// from any source; [`crate::TensorView::slice`] gives one over bytes at hand.
#[derive(Debug, Clone)]
pub struct TensorSlice<'a> {
    info: TensorInfo<'a>,
    shape: Vec<u64>,
    kept: Vec<Kept>,
    /// Element strides of the whole tensor, C order.
    strides: Vec<u64>,
    /// Elements in the result.
    numel: u64,
    /// Dimensions from this one inward form one contiguous run per outer position.
    run_dim: usize,
    /// Elements in one contiguous run.
    run_len: u64,
}

impl<'a> TensorSlice<'a> {
    /// Plans the slice of the tensor `info` describes: one [`SliceArg`] per
    /// leading dimension (missing ones take the whole dimension).
    ///
    /// # Errors
    /// [`Error::Slice`] when the arguments do not fit the shape (too many,
    /// out of range, step 0), or cut sub-byte elements off a byte boundary.
    pub fn new(info: TensorInfo<'a>, args: &[SliceArg]) -> Result<TensorSlice<'a>> {
        let dims = info.shape;
        let fail = |problem: String| Error::Slice {
            tensor: info.name.to_string(),
            problem,
        };
        if args.len() > dims.len() {
            return Err(fail(format!(
                "{} slice arguments for a tensor of {} dimensions",
                args.len(),
                dims.len()
            )));
        }
        let mut shape = Vec::with_capacity(dims.len());
        let mut kept = Vec::with_capacity(dims.len());
        for (axis, &dim) in dims.iter().enumerate() {
            let arg = args.get(axis).copied().unwrap_or_else(SliceArg::full);
            let resolve = |i: i64, what: &str, allow_end: bool| -> Result<u64> {
                let limit = if allow_end {
                    dim
                } else {
                    dim.saturating_sub(1)
                };
                let abs = if i < 0 {
                    dim.checked_sub(i.unsigned_abs())
                } else {
                    Some(i as u64)
                };
                match abs {
                    Some(p) if p <= limit && (allow_end || dim > 0) => Ok(p),
                    _ => Err(fail(format!(
                        "{what} {i} is out of range for dimension {axis} of length {dim}"
                    ))),
                }
            };
            match arg {
                SliceArg::Index(i) => {
                    let p = resolve(i, "index", false)?;
                    kept.push(Kept {
                        start: p,
                        step: 1,
                        count: 1,
                    });
                }
                SliceArg::Range { start, stop, step } => {
                    if step == 0 {
                        return Err(fail(format!("step 0 in dimension {axis}")));
                    }
                    let start = start.map_or(Ok(0), |s| resolve(s, "start", true))?;
                    let stop = stop.map_or(Ok(dim), |s| resolve(s, "stop", true))?;
                    let count = if stop > start {
                        (stop - start).div_ceil(step)
                    } else {
                        0
                    };
                    shape.push(count);
                    kept.push(Kept { start, step, count });
                }
            }
        }
        // The bounds that make the arithmetic below and in `element_runs`
        // safe: the tensor's element count and bit count fit 64 bits (the
        // header parser checks both; a description made by hand could
        // carry anything), and its bytes are that many. Every offset, stride and
        // run length is then at most the element count. A tensor with a
        // zero dimension has no elements: its other dimensions may be
        // huge (`[0, 2^40, 2^40]` is valid) and take no part in any
        // product.
        let bits = u64::from(info.dtype.bits());
        let total = if dims.contains(&0) {
            Some(0)
        } else {
            crate::dtype::numel(dims)
        };
        let total = total
            .filter(|n| n.checked_mul(bits).is_some())
            .ok_or_else(|| {
                fail(format!(
                    "shape {dims:?} has more elements than 64 bits count"
                ))
            })?;
        if Some(info.nbytes()) != info.dtype.byte_len(total) {
            return Err(fail(format!(
                "holds {} bytes, not the bytes of shape {dims:?}",
                info.nbytes()
            )));
        }
        let (numel, strides, run_dim, run_len) = if total == 0 {
            (0, vec![0; dims.len()], 0, 0)
        } else {
            let numel = kept.iter().map(|k| k.count).product::<u64>();
            // Element strides of the full tensor, C order: each is the
            // product of the dimensions inside it, at most `total`.
            let mut strides = vec![1u64; dims.len()];
            for d in (0..dims.len().saturating_sub(1)).rev() {
                strides[d] = strides[d + 1] * dims[d + 1];
            }
            // The innermost dimensions taken whole, plus the first one
            // taken with step 1, are contiguous in memory: one run per
            // outer position.
            let mut run_dim = dims.len();
            let mut run_len = 1u64;
            while run_dim > 0 {
                let k = kept[run_dim - 1];
                if k.step != 1 && k.count > 1 {
                    break;
                }
                run_dim -= 1;
                run_len *= k.count;
                if k.count != dims[run_dim] {
                    break;
                }
            }
            (numel, strides, run_dim, run_len)
        };
        let slice = TensorSlice {
            info,
            shape,
            kept,
            strides,
            numel,
            run_dim,
            run_len,
        };
        if info.dtype.is_sub_byte() {
            if let Some(bad) = slice
                .element_runs()
                .find(|r| (r.start * bits) % 8 != 0 || (r.end * bits) % 8 != 0)
            {
                return Err(fail(format!(
                    "the slice cuts {} elements at element {}, not on a byte boundary",
                    info.dtype,
                    if (bad.start * bits) % 8 != 0 {
                        bad.start
                    } else {
                        bad.end
                    }
                )));
            }
        }
        Ok(slice)
    }

    /// The shape of the result (indexed dimensions removed).
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The description of the tensor being sliced.
    pub fn info(&self) -> TensorInfo<'a> {
        self.info
    }

    /// Number of elements in the result.
    pub fn numel(&self) -> u64 {
        self.numel
    }

    /// Number of bytes in the result.
    pub fn nbytes(&self) -> u64 {
        self.numel() * self.info.dtype.bits() as u64 / 8
    }

    /// Element ranges, in C order, one per contiguous run.
    fn element_runs(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        // No product here overflows: the tensor has elements (else `done`
        // starts true), so every position times its stride is inside it
        // (see `new`).
        let strides = &self.strides;
        let mut done = self.numel == 0;
        // With elements kept, every start is inside its dimension.
        let base: u64 = if done {
            0
        } else {
            self.kept
                .iter()
                .zip(strides)
                .map(|(k, s)| k.start * s)
                .sum()
        };
        let outer = &self.kept[..self.run_dim];
        let mut position = vec![0u64; outer.len()];
        let run_len = self.run_len;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let offset = base
                + outer
                    .iter()
                    .zip(&position)
                    .zip(strides)
                    .map(|((k, &p), s)| p * k.step * s)
                    .sum::<u64>();
            // Advance the odometer over the outer dimensions.
            done = true;
            for d in (0..outer.len()).rev() {
                position[d] += 1;
                if position[d] < outer[d].count {
                    done = false;
                    break;
                }
                position[d] = 0;
            }
            Some(offset..offset + run_len)
        })
    }

    /// Byte ranges to read, relative to the start of the tensor's bytes, in
    /// C order of the result. Adjacent runs are not merged beyond what the
    /// slice's shape makes contiguous.
    pub fn byte_ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        let bits = self.info.dtype.bits() as u64;
        self.element_runs()
            .map(move |r| r.start * bits / 8..r.end * bits / 8)
    }

    /// Byte ranges relative to the file's data buffer (add the file's data
    /// start for absolute file offsets).
    pub fn data_ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        let begin = self.info.data_offsets.0;
        self.byte_ranges()
            .map(move |r| r.start + begin..r.end + begin)
    }

    /// [`TensorSlice::byte_ranges`] with neighbouring ranges joined: the
    /// fewest reads that fetch the slice, in order.
    pub fn merged_byte_ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        let mut runs = self.byte_ranges().peekable();
        std::iter::from_fn(move || {
            let mut range = runs.next()?;
            while let Some(next) = runs.next_if(|n| n.start == range.end) {
                range.end = next.end;
            }
            Some(range)
        })
    }

    /// Copies the slice out of the tensor's bytes (`data`, all of them)
    /// into `out`, which holds [`TensorSlice::nbytes`] bytes. Ranges that
    /// `data` does not hold are left as they are in `out`.
    pub(crate) fn gather_into(&self, data: &[u8], out: &mut [u8]) {
        let mut at = 0usize;
        for r in self.byte_ranges() {
            let len = (r.end - r.start) as usize;
            let src = data.get(r.start as usize..r.end as usize);
            if let (Some(src), Some(dst)) = (src, out.get_mut(at..at + len)) {
                dst.copy_from_slice(src);
            }
            at += len;
        }
    }
}

/// A slice of a tensor whose bytes are at hand
/// ([`TensorView::slice`](crate::TensorView::slice)): a
/// [`TensorSlice`] (by `Deref`) that can also copy itself out.
#[derive(Debug, Clone)]
pub struct SlicedView<'a> {
    slice: TensorSlice<'a>,
    data: &'a [u8],
}

impl<'a> SlicedView<'a> {
    pub(crate) fn new(
        info: TensorInfo<'a>,
        data: &'a [u8],
        args: &[SliceArg],
    ) -> Result<SlicedView<'a>> {
        Ok(SlicedView {
            slice: TensorSlice::new(info, args)?,
            data,
        })
    }

    /// The result's bytes, copied into a new buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.slice.nbytes() as usize];
        self.slice.gather_into(self.data, &mut out);
        out
    }

    /// The slice's plan, without the bytes.
    pub fn slice(&self) -> &TensorSlice<'a> {
        &self.slice
    }
}

impl<'a> std::ops::Deref for SlicedView<'a> {
    type Target = TensorSlice<'a>;
    fn deref(&self) -> &TensorSlice<'a> {
        &self.slice
    }
}
