//! Reading quantized weights back, a row at a time: [`RowSource`] turns
//! one row of a stored weight (int4 or any MLX mode) into f32 values, for
//! [`dequantize_weight`] in memory and for `dequantize_file` batch by
//! batch.

use half::f16;

use super::int4;
use super::layout::{int4_weight, mlx_weight, LogicalWeight};
use super::mlx::{self, Arith, Geometry};
use super::{quant_error, Mode, QuantError, Scheme};
use crate::cast::decode_f32;
use crate::header::TensorInfo;
use crate::writer::{TensorData, TensorSpec};
use crate::{Dtype, Result};

/// Dequantizes one stored weight (found with
/// [`quantized_weights`](crate::quant::quantized_weights) or
/// [`logical_weight`](crate::quant::logical_weight)) into f32 values of its
/// logical shape, row-major; `tensors` holds its parts (and may hold
/// others). Values are computed as MLX computes them: MLX affine in the
/// scales' dtype, mxfp4/mxfp8/nvfp4 in BF16 (MLX's default output dtype),
/// nvfp4 with a global scale in F32. A plain weight is decoded as it is.
///
/// # Errors
///
/// [`Error::Quant`](crate::Error::Quant) naming the weight: [`QuantError::Layout`] when a part
/// is missing from `tensors`, [`QuantError::Shape`] when the parts' lengths
/// do not make the logical shape,
/// [`QuantError::Dtype`] when a plain weight is not a float dtype, and the
/// read errors of a part's bytes.
///
/// ```
/// use tensorfile::quant::{dequantize_weight, int4_quantize, quantized_weights};
/// use tensorfile::{serialize, Dtype, SafeTensors, TensorRef};
/// let w: Vec<f32> = (0..64).map(|i| i as f32 / 8.0 - 4.0).collect();
/// let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
/// let q = int4_quantize("l", Dtype::F32, &[2, 32], &bytes, 32)?;
/// let file = serialize(
///     [
///         TensorRef { name: "l.qweight", dtype: Dtype::U8, shape: &[2, 16], data: &q.qweight },
///         TensorRef { name: "l.scales", dtype: Dtype::F16, shape: &[2, 1], data: &q.scales },
///     ],
///     None,
/// )?;
/// let file = SafeTensors::from_source(file, &tensorfile::ReadOptions::default())?;
/// let header = file.header();
/// let names = header.tensors().map(|t| t.name);
/// let weights = quantized_weights(names, |n| header.get(n), Some(32), None)?;
/// let values = dequantize_weight(&weights[0], &file.tensors_by_name())?;
/// assert_eq!(values.len(), 64);
/// assert!(values.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 4.0 / 7.0 / 2.0 + 1e-3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn dequantize_weight<T: TensorData<crate::Error>>(
    weight: &LogicalWeight<'_>,
    tensors: &[T],
) -> Result<Vec<f32>> {
    let part = |name: &str| tensors.iter().find(|t| t.name() == name);
    let missing = || quant_error(&weight.name, QuantError::Layout("a part is missing".into()));
    let codes = weight
        .parts
        .first()
        .and_then(|n| part(n))
        .ok_or_else(missing)?;
    check_len(codes)?;
    let numel = checked_numel(weight, codes)?;
    if weight.storage.is_none() {
        let mut out = vec![0f32; numel];
        let mut scratch = Vec::new();
        let bytes = codes.bytes_at(0, codes.byte_len() as usize, &mut scratch)?;
        decode_f32(codes.dtype(), bytes, &mut out).map_err(|e| {
            quant_error(
                &weight.name,
                QuantError::Dtype {
                    dtype: codes.dtype(),
                    wanted: e.to_string(),
                },
            )
        })?;
        return Ok(out);
    }
    if numel == 0 {
        return Ok(Vec::new());
    }
    check_storage(weight, tensors)?;
    let arith = default_arith(weight);
    let mut source: RowSource<'_, T> =
        RowSource::new(weight, arith, |j| weight.parts.get(j).and_then(|n| part(n)))?;
    let mut out = vec![0f32; numel];
    for (r, row) in out.chunks_exact_mut(source.cols).enumerate() {
        source.row(r, row, &weight.name)?;
    }
    Ok(out)
}

/// Checks a quantized weight against what its parts make of it under the
/// layout rules ([`int4_weight`], [`mlx_weight`]). A weight's fields are
/// public, so its storage may hold any group size or bits and its parts
/// any shapes; the row arithmetic relies on what those rules check (an
/// even group dividing the inputs, MLX's widths and group sizes, scales
/// of `[out, in / group]`), so anything else is a [`QuantError::Layout`].
fn check_storage<T: TensorData<crate::Error>>(
    weight: &LogicalWeight<'_>,
    tensors: &[T],
) -> Result<()> {
    // Only the weight's own parts are looked at.
    let lookup = |n: &str| -> Option<TensorInfo<'_>> {
        if !weight.parts.contains(&n) {
            return None;
        }
        let t = tensors.iter().find(|t| t.name() == n)?;
        Some(TensorInfo {
            name: t.name(),
            dtype: t.dtype(),
            shape: t.shape(),
            data_offsets: (0, t.byte_len()),
        })
    };
    let derived = match weight.storage {
        None => return Ok(()),
        Some(Scheme::Int4Sym { group }) => int4_weight(&weight.name, &lookup, Some(group)),
        Some(Scheme::Mlx(p)) => match weight.name.strip_suffix(".weight") {
            Some(module) => mlx_weight(module, &lookup, Some(p)),
            None => Ok(None),
        },
    };
    let wrong = |why: String| {
        quant_error(
            &weight.name,
            QuantError::Layout(format!(
                "is not the weight its parts {:?} make as {} of shape {:?}: {why}",
                weight.parts,
                storage_name(weight.storage),
                weight.shape
            )),
        )
    };
    match derived {
        Ok(Some(d)) if d == *weight => Ok(()),
        Ok(Some(d)) => Err(wrong(format!(
            "they make {} of shape {:?} from {:?}",
            storage_name(d.storage),
            d.shape,
            d.parts
        ))),
        Ok(None) => Err(wrong("they are not a quantized weight".into())),
        Err(e) => Err(wrong(e.to_string())),
    }
}

/// A weight's storage in a message: its scheme, or plain.
fn storage_name(storage: Option<Scheme>) -> String {
    storage.map_or_else(|| "plain".into(), |s| s.describe())
}

/// The arithmetic MLX dequantizes a floating-point-mode weight in by
/// default: BF16, its default output dtype (with a global scale the scales
/// are decoded in it and the values computed in F32).
pub(super) fn default_arith(weight: &LogicalWeight<'_>) -> Arith {
    match weight.storage {
        Some(Scheme::Mlx(p)) if p.mode != Mode::Affine => Arith::BF16,
        _ => Arith::F32,
    }
}

/// The element count of a weight's logical shape, checked (before anything
/// is allocated: the fields of a weight are public) against the values its
/// stored codes hold.
pub(super) fn checked_numel<T: TensorData<crate::Error>>(
    weight: &LogicalWeight<'_>,
    codes: &T,
) -> Result<usize> {
    let bits = match weight.storage {
        None => u64::from(codes.dtype().bits()),
        Some(s) => s.bits(),
    };
    let held = codes
        .byte_len()
        .checked_mul(8)
        .and_then(|b| b.checked_div(bits));
    weight
        .shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .filter(|&n| Some(n) == held)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            quant_error(
                &weight.name,
                QuantError::Layout(format!(
                    "shape {:?} is not the values its codes {:?} hold",
                    weight.shape,
                    codes.name()
                )),
            )
        })
}

/// Dequantizes one row of a weight into f32, reading the row's bytes of
/// each part (borrowed where the parts are in memory). Rows count over
/// every dimension but the last (the rows of every expert in turn).
pub(super) struct RowSource<'a, T> {
    storage: Scheme,
    pub(super) cols: usize,
    pub(super) rows: usize,
    rows_per_matrix: usize,
    codes: &'a T,
    scales: &'a T,
    biases: Option<&'a T>,
    global: Option<&'a T>,
    scale_dtype: Dtype,
    /// The arithmetic of floating-point modes (the output's).
    arith: Arith,
    /// The global scale of matrix `.0`, once read.
    global_cache: Option<(usize, f32)>,
    raw_codes: Vec<u8>,
    raw_scales: Vec<u8>,
    raw_biases: Vec<u8>,
    code_buf: Vec<u8>,
    scale_buf: Vec<f32>,
    bias_buf: Vec<f32>,
    half_buf: Vec<f16>,
}

impl<T> Clone for RowSource<'_, T> {
    fn clone(&self) -> Self {
        RowSource {
            storage: self.storage,
            cols: self.cols,
            rows: self.rows,
            rows_per_matrix: self.rows_per_matrix,
            codes: self.codes,
            scales: self.scales,
            biases: self.biases,
            global: self.global,
            scale_dtype: self.scale_dtype,
            arith: self.arith,
            global_cache: None,
            raw_codes: Vec::new(),
            raw_scales: Vec::new(),
            raw_biases: Vec::new(),
            code_buf: self.code_buf.clone(),
            scale_buf: self.scale_buf.clone(),
            bias_buf: self.bias_buf.clone(),
            half_buf: self.half_buf.clone(),
        }
    }
}

/// A part's `len` bytes at `at`, or the error: a part shorter than its
/// shape, or a failed read.
fn span<'s, T: TensorData<crate::Error>>(
    part: &'s T,
    at: usize,
    len: usize,
    raw: &'s mut Vec<u8>,
    name: &str,
) -> Result<&'s [u8]> {
    let end = (at as u64).checked_add(len as u64);
    if end.is_none_or(|end| end > part.byte_len()) {
        return Err(quant_error(
            name,
            QuantError::Layout("a part is shorter than its shape".into()),
        ));
    }
    part.bytes_at(at as u64, len, raw)
}

impl<'a, T: TensorData<crate::Error>> RowSource<'a, T> {
    /// The rows of `w`, whose parts `part(j)` gives in the order of
    /// `w.parts`; floating-point modes compute in `arith` (the output's).
    /// The parts' shapes must be the layout's (as
    /// [`mlx_weight`](super::layout::mlx_weight) checks them); they are
    /// checked again here against the logical shape, so that every read
    /// stays inside its part.
    pub(super) fn new(
        w: &LogicalWeight<'a>,
        arith: Arith,
        part: impl Fn(usize) -> Option<&'a T>,
    ) -> Result<RowSource<'a, T>> {
        let missing = || quant_error(&w.name, QuantError::Layout("a part went missing".into()));
        let bad = |why: String| quant_error(&w.name, QuantError::Layout(why));
        let codes = part(0).ok_or_else(missing)?;
        let scales = part(1).ok_or_else(missing)?;
        let (biases, global) = match w.storage {
            Some(Scheme::Mlx(p)) if p.mode == Mode::Affine => {
                (Some(part(2).ok_or_else(missing)?), None)
            }
            Some(Scheme::Mlx(p)) if p.global_scale => (None, Some(part(2).ok_or_else(missing)?)),
            _ => (None, None),
        };
        for t in [Some(codes), Some(scales), biases, global]
            .into_iter()
            .flatten()
        {
            check_len(t)?;
        }
        let geometry = Geometry::of(&w.shape)
            .ok_or_else(|| bad(format!("shape {:?} is not a weight's", w.shape)))?;
        let Some(storage) = w.storage else {
            return Err(bad("is not quantized".into()));
        };
        let (group, bits) = (storage.group_size(), storage.bits());
        let cols = geometry.cols;
        let groups = usize::try_from(group)
            .ok()
            .and_then(|g| cols.checked_div(g).filter(|n| n * g == cols))
            .ok_or_else(|| bad(format!("groups of {group} do not divide {cols} inputs")))?;
        // Every part must hold exactly what the rows read from it.
        let scale_size = u64::from(scales.dtype().bits() / 8);
        let per_row = [
            (codes, (cols as u64).checked_mul(bits).map(|b| b / 8)),
            (scales, Some(groups as u64 * scale_size)),
        ];
        let mut wanted: Vec<(&T, Option<u64>)> = per_row.to_vec();
        if let Some(b) = biases {
            wanted.push((b, Some(groups as u64 * scale_size)));
        }
        for (t, row_bytes) in wanted {
            let total = row_bytes.and_then(|b| b.checked_mul(geometry.rows as u64));
            if total != Some(t.byte_len()) {
                return Err(bad(format!(
                    "{:?} holds {} bytes, not the {} rows of {:?}",
                    t.name(),
                    t.byte_len(),
                    geometry.rows,
                    w.shape
                )));
            }
        }
        if let Some(g) = global {
            let n = g.byte_len() / 4;
            if n != 1 && n != geometry.matrices as u64 {
                return Err(bad(format!(
                    "{:?} holds {n} global scales, not one or one per matrix ({})",
                    g.name(),
                    geometry.matrices
                )));
            }
        }
        Ok(RowSource {
            storage,
            cols,
            rows: geometry.rows,
            rows_per_matrix: geometry.rows_per_matrix,
            codes,
            scales,
            biases,
            global,
            scale_dtype: scales.dtype(),
            arith,
            global_cache: None,
            raw_codes: Vec::new(),
            raw_scales: Vec::new(),
            raw_biases: Vec::new(),
            code_buf: vec![0; cols],
            scale_buf: vec![0.0; groups],
            bias_buf: vec![0.0; groups],
            half_buf: vec![f16::ZERO; groups],
        })
    }

    /// The global scale of row `r`'s matrix (the one scale, when there is
    /// one for all).
    fn global_of(&mut self, r: usize, name: &str) -> Result<Option<f32>> {
        let Some(g) = self.global else {
            return Ok(None);
        };
        let matrix = if g.byte_len() == 4 {
            0
        } else {
            r.checked_div(self.rows_per_matrix).unwrap_or(0)
        };
        if let Some((_, v)) = self.global_cache.filter(|&(m, _)| m == matrix) {
            return Ok(Some(v));
        }
        let mut raw = Vec::new();
        let b = span(g, matrix * 4, 4, &mut raw, name)?;
        let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        self.global_cache = Some((matrix, v));
        Ok(Some(v))
    }

    pub(super) fn row(&mut self, r: usize, out: &mut [f32], name: &str) -> Result<()> {
        let bad = |e: crate::cast::CastError| quant_error(name, QuantError::Layout(e.to_string()));
        let groups = self.scale_buf.len();
        let cols = self.cols;
        match self.storage {
            Scheme::Int4Sym { group: group_size } => {
                let q = span(
                    self.codes,
                    r * cols / 2,
                    cols / 2,
                    &mut self.raw_codes,
                    name,
                )?;
                let s = span(
                    self.scales,
                    r * groups * 2,
                    groups * 2,
                    &mut self.raw_scales,
                    name,
                )?;
                for (d, b) in self.half_buf.iter_mut().zip(s.chunks_exact(2)) {
                    *d = f16::from_le_bytes([b[0], b[1]]);
                }
                int4::dequantize_row(q, &self.half_buf, group_size as usize, out);
                Ok(())
            }
            Scheme::Mlx(p) => {
                let global = self.global_of(r, name)?;
                let row_bytes = cols * p.bits as usize / 8;
                let codes = span(
                    self.codes,
                    r * row_bytes,
                    row_bytes,
                    &mut self.raw_codes,
                    name,
                )?;
                let elem = self.scale_dtype.bits() as usize / 8;
                let (at, len) = (r * groups * elem, groups * elem);
                let s = span(self.scales, at, len, &mut self.raw_scales, name)?;
                let group = p.group_size as usize;
                mlx::unpack(p.bits as u32, codes, &mut self.code_buf)
                    .map_err(|e| quant_error(name, e))?;
                if p.mode != Mode::Affine {
                    mlx::fp_row(p.mode, self.arith, global, group, &self.code_buf, s, out);
                    return Ok(());
                }
                let biases = self.biases.ok_or_else(|| {
                    quant_error(name, QuantError::Layout("the biases are missing".into()))
                })?;
                let b = span(biases, at, len, &mut self.raw_biases, name)?;
                decode_f32(self.scale_dtype, s, &mut self.scale_buf).map_err(bad)?;
                decode_f32(self.scale_dtype, b, &mut self.bias_buf).map_err(bad)?;
                let arith = Arith::of(self.scale_dtype).unwrap_or(Arith::F32);
                mlx::affine_row(
                    arith,
                    p.bits as u32,
                    group,
                    &self.code_buf,
                    &self.scale_buf,
                    &self.bias_buf,
                    out,
                );
                Ok(())
            }
        }
    }
}

/// A stored weight read back a row at a time, as [`dequantize_weight`]
/// computes it (MLX's default arithmetic), for readers that stream a
/// weight's values (`diff`, `stats`) instead of holding them all. Rows count
/// over every dimension but the last; row `r` holds elements
/// `r * cols .. (r + 1) * cols` of the row-major logical shape.
pub(crate) struct WeightRows<'a, T> {
    name: String,
    rows: RowSource<'a, T>,
}

impl<T> Clone for WeightRows<'_, T> {
    fn clone(&self) -> Self {
        WeightRows {
            name: self.name.clone(),
            rows: self.rows.clone(),
        }
    }
}

impl<'a, T: TensorData<crate::Error>> WeightRows<'a, T> {
    /// The rows of a quantized `weight` whose parts are in `tensors`.
    ///
    /// # Errors
    /// A plain weight, parts that are missing or do not make the weight.
    pub fn new(weight: &LogicalWeight<'a>, tensors: &'a [T]) -> Result<WeightRows<'a, T>> {
        check_storage(weight, tensors)?;
        let part = |j: usize| {
            let n = weight.parts.get(j)?;
            tensors.iter().find(|t| t.name() == *n)
        };
        Ok(WeightRows {
            name: weight.name.clone(),
            rows: RowSource::new(weight, default_arith(weight), part)?,
        })
    }

    /// The values in a row.
    pub fn cols(&self) -> usize {
        self.rows.cols
    }

    /// Row `r`'s values into `out` (`cols` long).
    ///
    /// # Errors
    /// A failed read, or `r` or `out` out of range.
    pub fn row(&mut self, r: usize, out: &mut [f32]) -> Result<()> {
        if r >= self.rows.rows || out.len() != self.rows.cols {
            return Err(quant_error(
                &self.name,
                QuantError::Layout(format!(
                    "row {r} of {} values asked of {} rows of {}",
                    out.len(),
                    self.rows.rows,
                    self.rows.cols
                )),
            ));
        }
        self.rows.row(r, out, &self.name)
    }
}

/// Checks a tensor's bytes against its shape and dtype (a [`TensorData`]
/// from outside may disagree).
pub(super) fn check_len<T: TensorData<crate::Error>>(t: &T) -> Result<()> {
    let spec = TensorSpec::new(t.name(), t.dtype(), t.shape());
    let expected = spec.byte_len()?;
    if t.byte_len() != expected {
        return Err(quant_error(
            t.name(),
            QuantError::Shape(format!(
                "holds {} bytes, but shape {:?} of {} needs {expected}",
                t.byte_len(),
                t.shape(),
                t.dtype()
            )),
        ));
    }
    Ok(())
}
