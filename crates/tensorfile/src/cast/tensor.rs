//! Whole tensors: in one call, or streamed in chunks of any size so a file
//! converts with bounded memory.

use super::{check_cast, convert, CastError, CastOptions, LossTally, Losses};
use crate::{dtype, Dtype, Error, Result};

/// Converts one tensor's bytes as it arrives, in chunks of any size.
///
/// ```
/// use tensorfile::cast::{CastOptions, TensorCast};
/// use tensorfile::Dtype;
///
/// let src: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let mut cast = TensorCast::new("w", Dtype::F32, &[3], Dtype::BF16, CastOptions::default())?;
/// let mut out = Vec::new();
/// for chunk in src.chunks(5) {
///     cast.push(chunk, &mut out)?; // chunks need not hold whole elements
/// }
/// cast.finish()?;
/// assert_eq!(out, [0x80, 0x3F, 0x00, 0x40, 0x40, 0x40]);
/// # Ok::<(), tensorfile::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TensorCast {
    name: String,
    from: Dtype,
    to: Dtype,
    opts: CastOptions,
    input_len: u64,
    output_len: u64,
    /// Elements per conversion unit: 4 when either side is F6, 2 for F4, else 1.
    group: u64,
    /// Source bytes of one unit.
    group_bytes: usize,
    /// Source bytes received so far.
    received: u64,
    /// The start of an incomplete unit, held until the next chunk.
    carry: Vec<u8>,
    /// What the conversion lost so far (shared by clones: the jobs of one
    /// tensor count into one total).
    losses: LossTally,
}

impl TensorCast {
    /// Prepares the cast of tensor `name` (used in error messages) of dtype
    /// `from` and shape `shape` into `to`. Fails when the pair does not
    /// convert under `opts` or the target cannot hold the element count.
    ///
    /// # Errors
    ///
    /// [`Error::Cast`] naming `name`: [`CastError::Unsupported`] when the pair
    /// does not convert under `opts`, [`CastError::ShapeOverflow`] or
    /// [`CastError::NotWholeBytes`] when `shape` has no whole byte count in
    /// `from` or `to`.
    pub fn new(
        name: &str,
        from: Dtype,
        shape: &[u64],
        to: Dtype,
        opts: CastOptions,
    ) -> Result<TensorCast> {
        let wrap = |source| Error::Cast {
            tensor: name.to_string(),
            source,
        };
        check_cast(from, to, opts).map_err(wrap)?;
        let overflow = |dtype| {
            wrap(CastError::ShapeOverflow {
                dtype,
                shape: shape.to_vec(),
            })
        };
        let numel = dtype::numel(shape).ok_or_else(|| overflow(from))?;
        // Elements per whole group of packed codes (see `bits`).
        let group = |d: Dtype| {
            if d.is_sub_byte() {
                crate::bits::group(d.bits()).0 as u64
            } else {
                1
            }
        };
        // Name the side whose packing the count does not fill (the target first).
        for dtype in [to, from] {
            if numel % group(dtype) != 0 {
                return Err(wrap(CastError::NotWholeBytes { dtype, numel }));
            }
        }
        let group = group(from).max(group(to));
        let whole = |dtype: Dtype| dtype.byte_len(numel).ok_or_else(|| overflow(dtype));
        let input_len = whole(from)?;
        let output_len = whole(to)?;
        Ok(TensorCast {
            name: name.to_string(),
            from,
            to,
            opts,
            input_len,
            output_len,
            group,
            group_bytes: (group * u64::from(from.bits()) / 8) as usize,
            received: 0,
            carry: Vec::new(),
            losses: LossTally::default(),
        })
    }

    /// Bytes of source data the tensor has.
    pub fn input_len(&self) -> u64 {
        self.input_len
    }

    /// Bytes of converted data it produces.
    pub fn output_len(&self) -> u64 {
        self.output_len
    }

    /// What the values converted so far lost beyond rounding (by this cast
    /// and its clones).
    pub fn losses(&self) -> Losses {
        self.losses.get()
    }

    /// The running total of [`TensorCast::losses`], to read after the cast
    /// has been moved into the jobs that run it.
    pub fn loss_tally(&self) -> LossTally {
        self.losses.clone()
    }

    fn error(&self, source: CastError) -> Error {
        Error::Cast {
            tensor: self.name.clone(),
            source,
        }
    }

    /// Converts the next `chunk` of source bytes, appending the result to
    /// `out`. A chunk may end inside an element (or an F4/F6 group): the
    /// remainder is kept for the next call.
    ///
    /// # Errors
    ///
    /// [`Error::Cast`] naming the tensor: [`CastError::TensorLength`] when more
    /// bytes arrive than the tensor holds, and the first element that does not
    /// convert ([`CastError::OutOfRange`], [`CastError::InvalidBool`], strict
    /// [`CastError::Lossy`]).
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let total = self.received.saturating_add(chunk.len() as u64);
        if total > self.input_len {
            return Err(self.error(CastError::TensorLength {
                dtype: self.from,
                expected: self.input_len,
                actual: total,
            }));
        }
        let mut chunk = chunk;
        // Source offset of the first byte not yet converted.
        let mut done = self.received - self.carry.len() as u64;
        if !self.carry.is_empty() {
            let take = (self.group_bytes - self.carry.len()).min(chunk.len());
            let (head, rest) = chunk.split_at(take);
            self.carry.extend_from_slice(head);
            chunk = rest;
            if self.carry.len() == self.group_bytes {
                let carry = std::mem::take(&mut self.carry);
                self.convert_into(&carry, done, out)?;
                done += carry.len() as u64;
                self.carry = carry;
                self.carry.clear();
            }
        }
        let whole = chunk.len() - chunk.len() % self.group_bytes;
        let (body, tail) = chunk.split_at(whole);
        self.convert_into(body, done, out)?;
        self.carry.extend_from_slice(tail);
        self.received = total;
        Ok(())
    }

    /// Source bytes of one conversion unit (an element, or a group of F4/F6
    /// elements that fill whole bytes): ranges converted on their own with
    /// [`TensorCast::convert_into`] start at a multiple of it.
    pub(crate) fn unit_bytes(&self) -> usize {
        self.group_bytes
    }

    /// Where the output of source byte `at` (the start of a unit) begins.
    pub(crate) fn output_offset(&self, at: u64) -> u64 {
        at / self.group_bytes as u64 * self.group * u64::from(self.to.bits()) / 8
    }

    /// Converts `src`, whole units starting at source byte `at`, appending
    /// to `out`; element indices in errors count from the tensor's start.
    pub(crate) fn convert_into(&self, src: &[u8], at: u64, out: &mut Vec<u8>) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let units = (src.len() / self.group_bytes) as u64;
        let out_bytes = units * self.group * u64::from(self.to.bits()) / 8;
        let first = at / self.group_bytes as u64 * self.group;
        let start = out.len();
        out.resize(start + out_bytes as usize, 0);
        let dst = &mut out[start..];
        match convert(self.from, src, self.to, dst, self.opts, first) {
            Ok(losses) => {
                self.losses.add(losses);
                Ok(())
            }
            Err(e) => {
                out.truncate(start);
                Err(self.error(e))
            }
        }
    }

    /// Ends the tensor: fails unless exactly [`TensorCast::input_len`] bytes
    /// were pushed.
    ///
    /// # Errors
    ///
    /// [`Error::Cast`] with [`CastError::TensorLength`] when fewer bytes were
    /// pushed than the tensor holds.
    pub fn finish(self) -> Result<()> {
        if self.received != self.input_len {
            return Err(self.error(CastError::TensorLength {
                dtype: self.from,
                expected: self.input_len,
                actual: self.received,
            }));
        }
        Ok(())
    }
}

/// Converts a whole tensor's bytes (`src`, dtype `from`, shape `shape`) into
/// a new buffer of dtype `to`. `name` is used in error messages.
///
/// # Errors
///
/// The errors of [`TensorCast::new`] and [`TensorCast::push`], and
/// [`CastError::TensorLength`] when `src` is not the tensor's length.
///
/// ```
/// use tensorfile::cast::{cast_tensor, CastOptions};
/// use tensorfile::Dtype;
///
/// let bf16 = [0x80, 0x3F, 0x00, 0xC0]; // 1.0, -2.0
/// let f32 = cast_tensor("w", Dtype::BF16, &[2], &bf16, Dtype::F32, CastOptions::default())?;
/// assert_eq!(f32, [0, 0, 0x80, 0x3F, 0, 0, 0, 0xC0]);
/// # Ok::<(), tensorfile::Error>(())
/// ```
pub fn cast_tensor(
    name: &str,
    from: Dtype,
    shape: &[u64],
    src: &[u8],
    to: Dtype,
    opts: CastOptions,
) -> Result<Vec<u8>> {
    let cast = TensorCast::new(name, from, shape, to, opts)?;
    if src.len() as u64 != cast.input_len {
        return Err(cast.error(CastError::TensorLength {
            dtype: from,
            expected: cast.input_len,
            actual: src.len() as u64,
        }));
    }
    let len = usize::try_from(cast.output_len).map_err(|_| {
        cast.error(CastError::ShapeOverflow {
            dtype: to,
            shape: shape.to_vec(),
        })
    })?;
    // `vec!` of zeros comes from calloc: large buffers cost no extra pass.
    let mut out = vec![0u8; len];
    convert(from, src, to, &mut out, opts, 0).map_err(|e| cast.error(e))?;
    Ok(out)
}
