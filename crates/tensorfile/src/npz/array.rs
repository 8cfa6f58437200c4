//! One array as [`TensorData`]: C order, little-endian, in a safetensors
//! dtype, whatever the file stores.
//!
//! Stored little-endian C-order data is read by range; big-endian values
//! are swapped and sub-byte values packed on the way (still by range).
//! Deflated members are inflated in one pass ([`TensorData::produce`]);
//! Fortran-order arrays are read whole (within
//! [`NpzLimits::max_reorder_bytes`](super::NpzLimits)) and reordered.

use tensorfile_core::writer::PIECE;

use super::descr::{self, Element};
use super::error::NpzError;
use super::read::{zip_error, Bytes, NpyInfo, NpzFile};
use crate::source::ByteSource;
use crate::{Dtype, Error, Result, TensorData};

/// How stored bytes become the tensor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transform {
    /// As they are.
    Copy,
    /// Each `unit` bytes reversed (big-endian values).
    Swap(usize),
    /// One value of `bits` bits per byte, packed into a bit stream.
    Pack(u32),
}

impl Transform {
    /// Input bytes and output bytes of the smallest whole group.
    fn group(self) -> (u64, u64) {
        match self {
            Transform::Copy => (1, 1),
            Transform::Swap(u) => (u as u64, u as u64),
            Transform::Pack(bits) => {
                let (codes, bytes) = crate::bits::group(bits);
                (codes as u64, bytes as u64)
            }
        }
    }

    /// Applies it to whole groups of `input`, appending to `out`.
    fn apply(self, input: &mut [u8], out: &mut Vec<u8>) {
        match self {
            Transform::Copy => out.extend_from_slice(input),
            Transform::Swap(u) => {
                for v in input.chunks_exact_mut(u) {
                    v.reverse();
                }
                out.extend_from_slice(input);
            }
            Transform::Pack(bits) => {
                let (n, b) = self.group();
                let start = out.len();
                out.resize(start + input.len() / n as usize * b as usize, 0);
                crate::bits::pack(bits, input, &mut out[start..]);
            }
        }
    }
}

/// One array of an [`NpzFile`], read as a safetensors tensor.
#[derive(Debug)]
pub struct NpyArray<'a, S: ByteSource> {
    file: &'a NpzFile<S>,
    info: &'a NpyInfo,
    dtype: Dtype,
    transform: Transform,
    byte_len: u64,
}

impl<S: ByteSource> NpzFile<S> {
    /// Every array as [`TensorData`](crate::TensorData) in C order and
    /// little-endian, as `np.load` gives it: big-endian values swapped,
    /// Fortran-order arrays reordered, deflated members inflated as they
    /// are read. Opaque arrays (ml_dtypes types) are read as `opaque`:
    /// items of its width as they are, or for F4 and F6 one value in the
    /// low bits of each byte, packed.
    ///
    /// # Errors
    /// An opaque array with no `opaque` dtype, or one whose items cannot
    /// hold it ([`NpzError::Opaque`], [`NpzError::OpaqueWidth`]); sub-byte
    /// values that do not fill whole bytes.
    pub fn tensors(&self, opaque: Option<Dtype>) -> Result<Vec<NpyArray<'_, S>>> {
        self.arrays()
            .iter()
            .map(|info| NpyArray::new(self, info, opaque).map_err(|e| self.name_error(e)))
            .collect()
    }
}

impl<'a, S: ByteSource> NpyArray<'a, S> {
    fn new(
        file: &'a NpzFile<S>,
        info: &'a NpyInfo,
        opaque: Option<Dtype>,
    ) -> Result<NpyArray<'a, S>> {
        let (dtype, transform) = match info.element {
            Element::Plain { dtype, big_endian } => {
                let unit = descr::swap_unit(dtype);
                let t = if big_endian && unit > 1 {
                    Transform::Swap(unit)
                } else {
                    Transform::Copy
                };
                (dtype, t)
            }
            Element::Opaque { itemsize } => {
                let descr = info.header.descr.to_string();
                let descr = descr.trim_matches('\'').to_string();
                let Some(dtype) = opaque else {
                    return Err(NpzError::Opaque {
                        array: info.name.clone(),
                        descr,
                    }
                    .into());
                };
                match descr::opaque_as(itemsize, dtype) {
                    descr::Opaque::Whole => (dtype, Transform::Copy),
                    descr::Opaque::LowBits(bits) => (dtype, Transform::Pack(bits)),
                    descr::Opaque::Misfit => {
                        return Err(NpzError::OpaqueWidth {
                            array: info.name.clone(),
                            descr,
                            itemsize: u64::from(itemsize),
                            dtype,
                            bits: dtype.bits(),
                        }
                        .into())
                    }
                }
            }
        };
        let byte_len = dtype.byte_len(info.numel).ok_or_else(|| NpzError::Shape {
            array: info.name.clone(),
            shape: info.header.shape.clone(),
            problem: format!(
                "{} {dtype} values do not fill whole bytes ({} bits each)",
                info.numel,
                dtype.bits()
            ),
        })?;
        Ok(NpyArray {
            file,
            info,
            dtype,
            transform,
            byte_len,
        })
    }

    /// What the file says about the array.
    pub fn info(&self) -> &NpyInfo {
        self.info
    }

    fn source(&self) -> &dyn ByteSource {
        self.file.source()
    }

    /// An error naming the file.
    fn named(&self, e: Error) -> tensorfile_core::Error {
        self.file.name_error(e).into()
    }

    /// The data's stored bytes `offset..offset + buf.len()` (C or Fortran
    /// order, as stored).
    fn read_stored(&self, offset: u64, buf: &mut [u8]) -> tensorfile_core::Result<()> {
        let at = self.info.header.data_offset + offset;
        self.info
            .bytes
            .read(self.source(), at, buf)
            .map_err(|e| self.named(zip_error(e)))
    }

    /// Every stored data byte, in C order (reordered when Fortran), held
    /// in memory within the limit.
    fn c_order_bytes(&self) -> tensorfile_core::Result<Vec<u8>> {
        let len = self.info.data_len();
        let limit = self.file.limits().max_reorder_bytes;
        let too_much = || {
            self.named(
                NpzError::Memory {
                    array: self.info.name.clone(),
                    bytes: len,
                    limit,
                }
                .into(),
            )
        };
        let factor = if self.info.reordered() { 2 } else { 1 };
        if len.saturating_mul(factor) > limit {
            return Err(too_much());
        }
        let n = usize::try_from(len).map_err(|_| too_much())?;
        let mut stored = Vec::new();
        stored.try_reserve_exact(n).map_err(|_| too_much())?;
        stored.resize(n, 0);
        self.read_stored(0, &mut stored)?;
        if !self.info.reordered() {
            return Ok(stored);
        }
        let mut c = Vec::new();
        c.try_reserve_exact(n).map_err(|_| too_much())?;
        c.resize(n, 0);
        fortran_to_c(
            &stored,
            &mut c,
            &self.info.header.shape,
            self.info.itemsize as usize,
        );
        Ok(c)
    }

    /// The stored span (in C order) whose whole groups make the output
    /// bytes `offset..offset + len`: (input start, input end, output bytes
    /// to skip).
    fn span(&self, offset: u64, len: u64) -> (u64, u64, usize) {
        let (gin, gout) = self.transform.group();
        let first = offset / gout;
        let last = (offset + len).div_ceil(gout);
        (first * gin, last * gin, (offset - first * gout) as usize)
    }
}

/// Reorders a Fortran-order array (`shape` slowest first, items of `size`
/// bytes) into C order: item `(i0, .., in)` is at Fortran position
/// `i0 + d0 * (i1 + d1 * (...))`.
fn fortran_to_c(src: &[u8], dst: &mut [u8], shape: &[u64], size: usize) {
    let n = shape.len();
    // Fortran strides in items: 1, d0, d0 * d1, ...
    let mut stride = vec![0usize; n];
    let mut s = 1usize;
    for k in 0..n {
        stride[k] = s;
        s *= shape[k] as usize;
    }
    let inner = shape[n - 1] as usize;
    let step = stride[n - 1] * size;
    let mut index = vec![0usize; n - 1];
    for row in dst.chunks_exact_mut(inner * size) {
        let base: usize = index.iter().zip(&stride).map(|(i, s)| i * s).sum::<usize>() * size;
        for (j, item) in row.chunks_exact_mut(size).enumerate() {
            let from = base + j * step;
            item.copy_from_slice(&src[from..from + size]);
        }
        // The next row: the odometer over the outer dimensions, last first.
        for k in (0..n - 1).rev() {
            index[k] += 1;
            if index[k] < shape[k] as usize {
                break;
            }
            index[k] = 0;
        }
    }
}

impl<S: ByteSource> TensorData for NpyArray<'_, S> {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[u64] {
        &self.info.header.shape
    }

    fn byte_len(&self) -> u64 {
        self.byte_len
    }

    /// Stored C-order data is read by range; the rest is made in one pass.
    fn seekable(&self) -> bool {
        matches!(self.info.bytes, Bytes::Stored { .. }) && !self.info.reordered()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> tensorfile_core::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if !matches!(end, Some(e) if e <= self.byte_len) {
            return Err(tensorfile_core::Error::Slice {
                tensor: self.info.name.clone(),
                problem: format!(
                    "{} bytes at offset {offset} reach past its {} bytes",
                    buf.len(),
                    self.byte_len
                ),
            });
        }
        if buf.is_empty() {
            return Ok(());
        }
        let (start, stop, skip) = self.span(offset, buf.len() as u64);
        let mut input = if self.info.reordered() {
            let all = self.c_order_bytes()?;
            all[start as usize..stop as usize].to_vec()
        } else {
            let mut input = vec![0u8; (stop - start) as usize];
            self.read_stored(start, &mut input)?;
            input
        };
        if self.transform == Transform::Copy {
            buf.copy_from_slice(&input[skip..skip + buf.len()]);
            return Ok(());
        }
        let mut out = Vec::with_capacity(input.len());
        self.transform.apply(&mut input, &mut out);
        buf.copy_from_slice(&out[skip..skip + buf.len()]);
        Ok(())
    }

    fn produce(
        &self,
        each: &mut dyn FnMut(u64, &[u8]) -> tensorfile_core::Result<()>,
    ) -> tensorfile_core::Result<()> {
        if self.seekable() {
            // By range, a piece at a time (the trait's way).
            let mut buf = vec![0u8; (self.byte_len.min(PIECE as u64)) as usize];
            let mut at = 0u64;
            while at < self.byte_len {
                let n = (self.byte_len - at).min(PIECE as u64) as usize;
                self.read_at(at, &mut buf[..n])?;
                each(at, &buf[..n])?;
                at += n as u64;
            }
            return Ok(());
        }
        let (gin, _) = self.transform.group();
        let mut out_at = 0u64;
        let mut out = Vec::new();
        let mut emit = |input: &mut [u8]| -> tensorfile_core::Result<()> {
            out.clear();
            self.transform.apply(input, &mut out);
            each(out_at, &out)?;
            out_at += out.len() as u64;
            Ok(())
        };
        if self.info.reordered() {
            let mut all = self.c_order_bytes()?;
            let piece = (PIECE as u64 / gin).max(1) * gin;
            for chunk in all.chunks_mut(piece as usize) {
                emit(chunk)?;
            }
            return Ok(());
        }
        // A deflated member in C order: inflated once, from the data's
        // start, in whole groups (a group split across two inflated pieces
        // waits in `carry`).
        let Bytes::Deflated(entry) = &self.info.bytes else {
            return Ok(());
        };
        let data_start = self.info.header.data_offset;
        let mut carry: Vec<u8> = Vec::with_capacity(PIECE + gin as usize);
        let mut failed: Option<tensorfile_core::Error> = None;
        let inflated = entry.inflate_prefix(self.source(), entry.size, |at, piece| {
            if failed.is_some() {
                return;
            }
            let mut piece = piece;
            if at < data_start {
                let skip = (data_start - at).min(piece.len() as u64) as usize;
                piece = &piece[skip..];
            }
            carry.extend_from_slice(piece);
            let whole = carry.len() as u64 / gin * gin;
            if whole >= PIECE as u64 {
                let rest = carry.split_off(whole as usize);
                if let Err(e) = emit(&mut carry) {
                    failed = Some(e);
                }
                carry = rest;
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        inflated.map_err(|e| self.named(zip_error(e)))?;
        if !carry.is_empty() {
            emit(&mut carry)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::fortran_to_c;

    #[test]
    fn fortran_order_is_reordered() {
        // A (2, 3) array stored column-major: [[0, 1, 2], [3, 4, 5]] is
        // stored 0 3 1 4 2 5.
        let src = [0u8, 3, 1, 4, 2, 5];
        let mut dst = [0u8; 6];
        fortran_to_c(&src, &mut dst, &[2, 3], 1);
        assert_eq!(dst, [0, 1, 2, 3, 4, 5]);
        // (2, 3, 4) of 2-byte items: item (i, j, k) = 12 i + 4 j + k.
        let mut src = vec![0u8; 48];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    let f = i + 2 * (j + 3 * k);
                    let v = (12 * i + 4 * j + k) as u16;
                    src[2 * f..2 * f + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let mut dst = vec![0u8; 48];
        fortran_to_c(&src, &mut dst, &[2, 3, 4], 2);
        let values: Vec<u16> = dst
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(values, (0..24).collect::<Vec<u16>>());
    }
}
