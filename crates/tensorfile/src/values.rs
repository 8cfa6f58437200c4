//! A tensor's elements as `f64` values, read in fixed-size blocks: what
//! [`crate::diff`] and [`crate::stats`] look at.
//!
//! Every dtype reads: floats exactly (as `decode_f64`),
//! integers and BOOL as their values (64-bit integers beyond 2^53 round),
//! C64 as its real and imaginary parts in turn (two values per element),
//! and quantized weights (int4, MLX) as their dequantized values, the ones
//! `tensorfile dequantize` writes (the same row reader).
//!
//! Work is cut into blocks of `BLOCK` values and tasks of `TASK`
//! blocks, whatever the number of threads; a task's blocks are read in
//! order, and tasks' results come back in order (`map_tasks`), so that
//! sums combined in that order do not depend on the thread count. Each
//! worker holds one block per input (and one row of a quantized weight), so
//! memory stays bounded whatever the tensor's size; a tensor whose bytes
//! cannot be read at an offset (a gathered view of a PyTorch checkpoint) is
//! gathered once and held while it is read.

use crate::cast::decode_f64;
use crate::quant::rows::WeightRows;
use crate::quant::{LogicalWeight, Scheme};
use crate::writer::TensorData;
use crate::{Dtype, Error, Result};

/// Values in a block (128 KiB of f64: a block of each input and its
/// bytes stay in a core's L2 cache through the passes over it).
pub(crate) const BLOCK: usize = 1 << 14;
/// Blocks in a task: the unit of parallel work and of ordered combining.
pub(crate) const TASK: usize = 64;

/// A value type the passes of [`crate::stats`] and [`crate::diff`] take:
/// f64, or f32 (widened exactly to f64 before any arithmetic, so that
/// both give the same figures).
pub trait Value: Copy + Send + Sync + Into<f64> {
    /// The values as f32, when they are (for the passes written for f32
    /// lanes).
    fn as_f32(values: &[Self]) -> Option<&[f32]>;
}

impl Value for f32 {
    fn as_f32(values: &[f32]) -> Option<&[f32]> {
        Some(values)
    }
}

impl Value for f64 {
    fn as_f32(_: &[f64]) -> Option<&[f32]> {
        None
    }
}

/// What the values are stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// A tensor of this dtype.
    Plain(Dtype),
    /// A quantized weight: its scheme, and its scales' dtype.
    Quantized(Scheme, Dtype),
}

impl Stored {
    /// The relative step between neighbouring values (one unit in the last
    /// place at 1.0): `2^-mantissa bits` for a float dtype, 0 for integers
    /// (exact), and for a quantized weight `2^(1 - bits)`, the step of its
    /// codes relative to a group's largest value.
    pub fn epsilon(self) -> f64 {
        match self {
            Stored::Plain(d) => crate::cast::epsilon(d).unwrap_or(0.0),
            Stored::Quantized(Scheme::Int4Sym { .. }, _) => 2f64.powi(-3),
            Stored::Quantized(Scheme::Mlx(p), _) => 2f64.powi(1 - p.bits.min(64) as i32),
        }
    }

    /// The smallest positive normal value of the values' dtype (below it a
    /// nonzero value is subnormal), when it has subnormals.
    pub fn smallest_normal(self) -> Option<f64> {
        match self {
            Stored::Plain(d) => crate::cast::smallest_normal(d),
            Stored::Quantized(..) => None,
        }
    }

    /// Its name: the dtype's, or the quantized layout's.
    pub fn describe(self) -> String {
        match self {
            Stored::Plain(d) => d.name().to_string(),
            Stored::Quantized(s, _) => s.describe(),
        }
    }
}

/// Where the values come from.
enum Source<'a> {
    /// Read at any offset.
    Stored(&'a dyn TensorData<crate::Error>),
    /// Gathered once, when first read ([`Values::prepare`]): a tensor
    /// that cannot be read at an offset.
    Held(&'a dyn TensorData<crate::Error>, Vec<u8>),
    /// Dequantized a row at a time.
    /// (Boxed: a row source is large beside a reference.)
    Quantized(Box<WeightRows<'a, &'a dyn TensorData<crate::Error>>>),
}

/// The values of one tensor or quantized weight.
pub struct Values<'a> {
    name: String,
    shape: Vec<u64>,
    stored: Stored,
    len: u64,
    source: Source<'a>,
}

/// The number of values of `dtype` elements of `shape` (two per C64).
fn value_count(name: &str, dtype: Dtype, shape: &[u64]) -> Result<u64> {
    let per = if dtype == Dtype::C64 { 2 } else { 1 };
    shape
        .iter()
        .try_fold(per, |n: u64, &d| n.checked_mul(d))
        .ok_or_else(|| Error::not_found(format!("{name}: its element count overflows")))
}

impl<'a> Values<'a> {
    /// The values of a stored tensor. One that cannot be read at an
    /// offset is gathered by [`Values::prepare`] (and held until these
    /// values are dropped).
    ///
    /// # Errors
    /// Its bytes are not what its dtype and shape need.
    pub fn plain(t: &'a dyn TensorData<crate::Error>) -> Result<Values<'a>> {
        let dtype = t.dtype();
        let len = value_count(t.name(), dtype, t.shape())?;
        let want = dtype.byte_len(t.shape().iter().product::<u64>());
        if want != Some(t.byte_len()) {
            return Err(Error::not_found(format!(
                "{}: holds {} bytes, not what {:?} of {dtype} needs",
                t.name(),
                t.byte_len(),
                t.shape()
            )));
        }
        let source = if t.seekable() || t.bytes().is_some() {
            Source::Stored(t)
        } else {
            Source::Held(t, Vec::new())
        };
        Ok(Values {
            name: t.name().to_string(),
            shape: t.shape().to_vec(),
            stored: Stored::Plain(dtype),
            len,
            source,
        })
    }

    /// The dequantized values of a quantized weight whose parts are in
    /// `tensors`.
    ///
    /// # Errors
    /// The parts do not make the weight.
    pub fn quantized(
        weight: &LogicalWeight<'a>,
        tensors: &'a [&'a dyn TensorData<crate::Error>],
    ) -> Result<Values<'a>> {
        let rows = WeightRows::new(weight, tensors)?;
        // WeightRows refuses a plain weight: there is always a scheme.
        let stored = match weight.storage {
            Some(s) => Stored::Quantized(s, weight.dtype),
            None => Stored::Plain(weight.dtype),
        };
        Ok(Values {
            name: weight.name.clone(),
            shape: weight.shape.clone(),
            stored,
            len: value_count(&weight.name, Dtype::F32, &weight.shape)?,
            source: Source::Quantized(Box::new(rows)),
        })
    }

    /// Makes the values ready to read: gathers a tensor that cannot be
    /// read at an offset (once).
    ///
    /// # Errors
    /// Gathering fails.
    pub fn prepare(&mut self) -> Result<()> {
        if let Source::Held(t, held) = &mut self.source {
            if held.is_empty() && t.byte_len() > 0 {
                held.reserve_exact(usize::try_from(t.byte_len()).unwrap_or(0));
                t.produce(&mut |_, piece| {
                    held.extend_from_slice(piece);
                    Ok(())
                })?;
            }
        }
        Ok(())
    }

    /// The tensor's (or weight's) name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its shape (a quantized weight's logical shape).
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// What it is stored as.
    pub fn stored(&self) -> Stored {
        self.stored
    }

    /// The number of values (elements; two per C64 element).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it has no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether every value is exactly an f32 (a stored float narrower
    /// than F64, or C64's parts), so that [`Reader::read_f32`] reads them.
    pub fn fits_f32(&self) -> bool {
        matches!(self.stored, Stored::Plain(d) if d.is_float() && d != Dtype::F64)
    }

    /// The number of tasks its values make.
    pub fn tasks(&self) -> usize {
        let per = (BLOCK * TASK) as u64;
        usize::try_from(self.len.div_ceil(per)).unwrap_or(usize::MAX)
    }

    /// A reader of its blocks, one per worker.
    pub fn reader(&self) -> Reader<'_, 'a> {
        Reader {
            values: self,
            bytes: Vec::new(),
            rows: match &self.source {
                Source::Quantized(r) => Some(WeightRows::clone(r)),
                _ => None,
            },
            row: Vec::new(),
            row_at: None,
        }
    }
}

/// Reads blocks of one [`Values`], with its own buffers.
pub struct Reader<'v, 'a> {
    values: &'v Values<'a>,
    bytes: Vec<u8>,
    rows: Option<WeightRows<'a, &'a dyn TensorData<crate::Error>>>,
    row: Vec<f32>,
    row_at: Option<usize>,
}

impl Reader<'_, '_> {
    /// Values `start .. start + out.len()` into `out` (`start` a multiple
    /// of 8, so that packed dtypes start on a whole byte). Gives the stored
    /// bytes they were decoded from, for a stored tensor.
    ///
    /// # Errors
    /// A range past the end, or a failed read naming the tensor.
    pub fn read(&mut self, start: u64, out: &mut [f64]) -> Result<Option<&[u8]>> {
        let v = self.values;
        self.check(start, out.len())?;
        if !matches!(v.stored, Stored::Plain(_)) {
            self.read_rows(start, out)?;
            return Ok(None);
        }
        let (dtype, bytes) = self.stored_bytes(start, out.len())?;
        decode(&v.name, dtype, bytes, out)?;
        Ok(Some(bytes))
    }

    /// [`Reader::read`] into f32, for values that are exactly f32
    /// ([`Values::fits_f32`]): half the bytes of f64 for every pass over
    /// them, and the same values.
    ///
    /// # Errors
    /// As [`Reader::read`]; values that are not exactly f32.
    pub fn read_f32<'s>(&'s mut self, start: u64, out: &'s mut [f32]) -> Result<Option<&'s [u8]>> {
        let v = self.values;
        self.check(start, out.len())?;
        if !v.fits_f32() {
            return Err(Error::not_found(format!("{}: not f32 values", v.name)));
        }
        // F32 (and C64's parts) read from a file straight into `out`: on a
        // little-endian machine its bytes are the values.
        if let (Stored::Plain(Dtype::F32 | Dtype::C64), Source::Stored(t)) = (v.stored, &v.source) {
            if cfg!(target_endian = "little") && t.bytes().is_none() {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
                // Four bytes a value (C64: two values an element).
                t.read_at(start * 4, bytes)?;
                return Ok(Some(bytes));
            }
        }
        let (dtype, bytes) = self.stored_bytes(start, out.len())?;
        crate::cast::decode_f32(dtype, bytes, out).map_err(|source| Error::Cast {
            tensor: v.name.clone(),
            source,
        })?;
        Ok(Some(bytes))
    }

    /// Refuses a range past the end, or one that starts inside a byte.
    fn check(&self, start: u64, n: usize) -> Result<()> {
        let v = self.values;
        let end = start.checked_add(n as u64);
        if end.is_none_or(|e| e > v.len) || !start.is_multiple_of(8) {
            return Err(Error::not_found(format!(
                "{}: values {start}.. of {} asked",
                v.name, v.len
            )));
        }
        Ok(())
    }

    /// The stored bytes of values `start .. start + n` of a stored tensor
    /// (checked), and the dtype they decode as (C64: its F32 parts).
    fn stored_bytes(&mut self, start: u64, n: usize) -> Result<(Dtype, &[u8])> {
        let v = self.values;
        let dtype = match v.stored {
            Stored::Plain(d) => d,
            Stored::Quantized(..) => Dtype::F32,
        };
        // Values to elements: C64 has two per element.
        let (first, count, as_dtype) = if dtype == Dtype::C64 {
            (start / 2, n / 2, Dtype::F32)
        } else {
            (start, n, dtype)
        };
        let bits = u64::from(dtype.bits());
        let at = first * bits / 8;
        let len = (count as u64 * bits).div_ceil(8) as usize;
        let bytes: &[u8] = match &v.source {
            Source::Held(_, all) => all.get(at as usize..at as usize + len).ok_or_else(|| {
                Error::not_found(format!("{}: not gathered (prepare first)", v.name))
            })?,
            Source::Stored(t) => t.bytes_at(at, len, &mut self.bytes)?,
            Source::Quantized(_) => &[],
        };
        Ok((as_dtype, bytes))
    }

    /// Values of a quantized weight, from whole rows.
    fn read_rows(&mut self, start: u64, out: &mut [f64]) -> Result<()> {
        let Some(rows) = self.rows.as_mut() else {
            return Ok(());
        };
        let cols = rows.cols() as u64;
        if cols == 0 {
            return Ok(());
        }
        self.row.resize(cols as usize, 0.0);
        let mut done = 0usize;
        while done < out.len() {
            let at = start + done as u64;
            let r = (at / cols) as usize;
            if self.row_at != Some(r) {
                rows.row(r, &mut self.row)?;
                self.row_at = Some(r);
            }
            let from = (at % cols) as usize;
            let n = (cols as usize - from).min(out.len() - done);
            for (o, &x) in out[done..done + n]
                .iter_mut()
                .zip(&self.row[from..from + n])
            {
                *o = f64::from(x);
            }
            done += n;
        }
        Ok(())
    }
}

/// The tensors of a file or set with its quantized weights found: what
/// can be read as values, either as stored or dequantized.
pub struct Catalog<'a> {
    tensors: &'a [&'a dyn TensorData<crate::Error>],
    weights: Vec<LogicalWeight<'a>>,
    /// Part name to the weight it makes.
    part_of: std::collections::HashMap<&'a str, usize>,
}

impl<'a> Catalog<'a> {
    /// Finds the quantized weights of `tensors` (int4 by the metadata, MLX
    /// by `mlx`, a model's config.json `quantization`, or the metadata), as
    /// `find_quantized` does.
    ///
    /// # Errors
    /// Quantization parameters that contradict each other or the parts.
    pub fn new(
        tensors: &'a [&'a dyn TensorData<crate::Error>],
        metadata: Option<&crate::Metadata>,
        mlx: Option<&crate::quant::QuantConfig>,
    ) -> Result<Catalog<'a>> {
        let weights = crate::quant::file::find_quantized(tensors, metadata, mlx)?;
        let mut part_of = std::collections::HashMap::new();
        for (i, w) in weights.iter().enumerate() {
            for p in &w.parts {
                part_of.insert(*p, i);
            }
        }
        Ok(Catalog {
            tensors,
            weights,
            part_of,
        })
    }

    /// The stored tensors.
    pub fn tensors(&self) -> &'a [&'a dyn TensorData<crate::Error>] {
        self.tensors
    }

    /// The quantized weights.
    pub fn weights(&self) -> &[LogicalWeight<'a>] {
        &self.weights
    }

    /// The quantized weight a stored tensor is a part of.
    pub fn weight_of_part(&self, name: &str) -> Option<&LogicalWeight<'a>> {
        self.part_of.get(name).map(|&i| &self.weights[i])
    }

    /// The quantized weight of this logical name.
    pub fn weight(&self, name: &str) -> Option<&LogicalWeight<'a>> {
        self.weights.iter().find(|w| w.name == name)
    }

    /// The stored tensor of this name.
    pub fn tensor(&self, name: &str) -> Option<&'a dyn TensorData<crate::Error>> {
        self.tensors.iter().copied().find(|t| t.name() == name)
    }

    /// The dequantized values of a weight.
    ///
    /// # Errors
    /// As [`Values::quantized`].
    pub fn dequantized(&self, w: &LogicalWeight<'a>) -> Result<Values<'a>> {
        Values::quantized(w, self.tensors)
    }

    /// What a model's values are: every quantized weight dequantized (in
    /// the place of its codes) and every other tensor as stored, in the
    /// tensors' order; `keep(name)` says which to take.
    ///
    /// # Errors
    /// A weight whose parts do not make it, or a tensor whose bytes are
    /// not its shape's.
    pub fn model_values(&self, keep: impl Fn(&str) -> bool) -> Result<Vec<Values<'a>>> {
        let mut out = Vec::new();
        for t in self.tensors {
            match self.weight_of_part(t.name()) {
                Some(w) if w.parts.first() == Some(&t.name()) => {
                    if keep(&w.name) {
                        out.push(self.dequantized(w)?);
                    }
                }
                Some(_) => {}
                None => {
                    if keep(t.name()) {
                        out.push(Values::plain(*t)?);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Decodes elements of any dtype into f64.
fn decode(name: &str, dtype: Dtype, src: &[u8], out: &mut [f64]) -> Result<()> {
    let int = |size: usize, f: &dyn Fn(&[u8]) -> f64, out: &mut [f64]| {
        for (o, b) in out.iter_mut().zip(src.chunks_exact(size)) {
            *o = f(b);
        }
    };
    match dtype {
        Dtype::BOOL | Dtype::U8 => int(1, &|b| f64::from(b[0]), out),
        Dtype::I8 => int(1, &|b| f64::from(b[0] as i8), out),
        Dtype::U16 => int(2, &|b| f64::from(u16::from_le_bytes([b[0], b[1]])), out),
        Dtype::I16 => int(2, &|b| f64::from(i16::from_le_bytes([b[0], b[1]])), out),
        Dtype::U32 => int(
            4,
            &|b| f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            out,
        ),
        Dtype::I32 => int(
            4,
            &|b| f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            out,
        ),
        Dtype::U64 => int(
            8,
            &|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64,
            out,
        ),
        Dtype::I64 => int(
            8,
            &|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f64,
            out,
        ),
        _ => decode_f64(dtype, src, out).map_err(|source| Error::Cast {
            tensor: name.to_string(),
            source,
        })?,
    }
    Ok(())
}

/// The values of task `k` of a tensor of `len` values: its blocks' bounds
/// (`start`, `len`), in order.
pub(crate) fn task_blocks(len: u64, k: usize) -> impl Iterator<Item = (u64, usize)> {
    let first = (k * TASK) as u64 * BLOCK as u64;
    (0..TASK as u64).map_while(move |b| {
        let start = first + b * BLOCK as u64;
        (start < len).then(|| (start, (len - start).min(BLOCK as u64) as usize))
    })
}

/// Runs `f(k)` for every task `0..tasks` on the pool and returns the
/// results in task order (so that combining them in order is the same
/// whatever the thread count).
pub(crate) fn map_tasks<R: Send>(tasks: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    use rayon::prelude::*;
    if tasks <= 1 || crate::parallel::threads() <= 1 {
        return (0..tasks).map(f).collect();
    }
    crate::parallel::install(|| (0..tasks).into_par_iter().map(f).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::OwnedTensor;
    use crate::writer::TensorSpec;

    fn tensor(dtype: Dtype, shape: Vec<u64>, data: Vec<u8>) -> OwnedTensor {
        OwnedTensor {
            spec: TensorSpec::new("t", dtype, shape),
            data,
        }
    }

    #[test]
    fn every_dtype_reads_as_its_values() {
        let cases: [(Dtype, Vec<u8>, Vec<f64>); 5] = [
            (Dtype::I8, vec![0xFF, 2], vec![-1.0, 2.0]),
            (Dtype::U16, vec![1, 1], vec![257.0]),
            (Dtype::BF16, vec![0x80, 0x3F], vec![1.0]),
            (
                Dtype::C64,
                [1f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect(),
                vec![1.0, -2.0],
            ),
            (Dtype::F4, vec![0x21], vec![0.5, 1.0]),
        ];
        for (dtype, bytes, want) in cases {
            let n = if dtype == Dtype::C64 {
                1
            } else {
                want.len() as u64
            };
            let t = tensor(dtype, vec![n], bytes);
            let v = Values::plain(&t).unwrap();
            assert_eq!(v.len(), want.len() as u64);
            let mut out = vec![0.0; want.len()];
            v.reader().read(0, &mut out).unwrap();
            assert_eq!(out, want, "{dtype}");
        }
        let t = tensor(Dtype::F32, vec![3], vec![0; 12]);
        let v = Values::plain(&t).unwrap();
        assert!(v.reader().read(8, &mut [0.0]).is_err());
        let short = tensor(Dtype::F32, vec![3], vec![0; 11]);
        assert!(Values::plain(&short).is_err());
    }

    #[test]
    fn tasks_cover_the_values_in_blocks() {
        let len = (BLOCK * TASK * 2 + 5) as u64;
        let mut at = 0;
        for k in 0..3 {
            for (start, n) in task_blocks(len, k) {
                assert_eq!(start, at);
                at += n as u64;
            }
        }
        assert_eq!(at, len);
        assert_eq!(map_tasks(5, |k| k * 2), [0, 2, 4, 6, 8]);
    }
}
