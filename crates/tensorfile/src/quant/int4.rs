//! int4-g\<group\>-sym: symmetric 4-bit weights with one F16 scale per
//! group of a row.
//!
//! For each group: `scale = absmax / 7` computed in f32 and rounded to F16;
//! `q = clip(round_half_even(w / f32(scale)), -8, 7)`, 0 where the scale is
//! 0; the value read back is `q * f32(scale)` (exact in f32).
//!
//! ```
//! use tensorfile::quant::int4;
//! use tensorfile::Dtype;
//! let w: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
//! let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
//! let q = int4::quantize("w", Dtype::F32, &[1, 8], &bytes, 8)?;
//! assert_eq!(q.qweight.len(), 4);
//! let back = int4::dequantize("w", &q.qweight, &q.scales, &[1, 8], 8)?;
//! for (a, b) in w.iter().zip(&back) {
//!     assert!((a - b).abs() <= 0.25 + 1e-6); // half of the step 3.5 / 7
//! }
//! # Ok::<(), tensorfile::Error>(())
//! ```

use half::f16;

use super::QuantError;
use crate::{Dtype, Error, Result};

/// What went wrong in one row (the caller adds the row and the tensor).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RowFault {
    NotFinite { col: usize, value: f32 },
    ScaleOverflow { group: usize, scale: f32 },
}

impl RowFault {
    pub(crate) fn at_row(self, row: u64) -> QuantError {
        match self {
            RowFault::NotFinite { col, value } => QuantError::NotFinite {
                row,
                col: col as u64,
                value,
            },
            RowFault::ScaleOverflow { group, scale } => QuantError::ScaleOverflow {
                row,
                group: group as u64,
                scale,
            },
        }
    }
}

/// Adding 1.5 * 2^23 to an f32 of magnitude below 2^22 rounds it to an
/// integer, ties to even, and leaves that integer in two's complement in
/// the low bits of the sum: one vectorizable add replaces a rounding call
/// (a library call without SSE4.1) and a float-to-int conversion.
const ROUND: f32 = 12_582_912.0;

/// The F16 scale of one group, checking every value is finite.
#[inline(always)]
fn group_scale(group: &[f32], offset: usize, index: usize) -> Result<f16, RowFault> {
    // With the sign bit cleared, f32 bit patterns order like the values they
    // hold, and infinities and NaNs sort above every finite value. So one
    // integer max gives the absmax and says whether anything is not finite;
    // unlike a float compare-and-select chain, it vectorizes.
    let max_bits = group
        .iter()
        .map(|w| (w.to_bits() & 0x7FFF_FFFF) as i32)
        .fold(0i32, i32::max);
    if max_bits >= 0x7F80_0000 {
        let (col, &value) = group
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite())
            .unwrap_or((0, &f32::NAN));
        return Err(RowFault::NotFinite {
            col: offset + col,
            value,
        });
    }
    let scale = f32::from_bits(max_bits as u32) / 7.0;
    let half = f16::from_f32(scale);
    if half.is_infinite() {
        return Err(RowFault::ScaleOverflow {
            group: index,
            scale,
        });
    }
    Ok(half)
}

/// Quantizes one row: `packed` gets `row.len() / 2` bytes (column `2b` in
/// the low nibble of byte `b`), `scales` one scale per group; `codes` is
/// scratch of `row.len()` bytes. `group` is even and divides the row.
///
/// As in the casts, the portable build is SSE2 (4 lanes); on CPUs with
/// AVX2 the same loop compiled for 8 lanes is chosen at run time.
pub(crate) fn quantize_row(
    row: &[f32],
    group: usize,
    scales: &mut [f16],
    codes: &mut [u8],
    packed: &mut [u8],
) -> Result<(), RowFault> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { quantize_row_avx2(row, group, scales, codes, packed) };
    }
    quantize_row_portable(row, group, scales, codes, packed)
}

/// [`quantize_row_portable`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_row_avx2(
    row: &[f32],
    group: usize,
    scales: &mut [f16],
    codes: &mut [u8],
    packed: &mut [u8],
) -> Result<(), RowFault> {
    quantize_row_portable(row, group, scales, codes, packed)
}

#[inline(always)]
fn quantize_row_portable(
    row: &[f32],
    group: usize,
    scales: &mut [f16],
    codes: &mut [u8],
    packed: &mut [u8],
) -> Result<(), RowFault> {
    let groups = row.chunks_exact(group).zip(codes.chunks_exact_mut(group));
    for (i, ((g, c), s)) in groups.zip(scales.iter_mut()).enumerate() {
        *s = group_scale(g, i * group, i)?;
        let scale = s.to_f32();
        if scale == 0.0 {
            c.fill(0);
            continue;
        }
        for (&w, code) in g.iter().zip(c.iter_mut()) {
            // Clipping before rounding gives the same integers as after,
            // and keeps the quotient in the rounding trick's range.
            let x = (w / scale).clamp(-8.0, 7.0);
            *code = ((x + ROUND).to_bits() & 0x0F) as u8;
        }
    }
    for (pair, byte) in codes.chunks_exact(2).zip(packed.iter_mut()) {
        *byte = pair[0] | (pair[1] << 4);
    }
    Ok(())
}

/// Dequantizes one row: `out.len()` values from `out.len() / 2` bytes.
pub(crate) fn dequantize_row(packed: &[u8], scales: &[f16], group: usize, out: &mut [f32]) {
    let groups = out
        .chunks_exact_mut(group)
        .zip(packed.chunks_exact(group / 2));
    for ((o, p), s) in groups.zip(scales) {
        let scale = s.to_f32();
        for (pair, &b) in o.chunks_exact_mut(2).zip(p) {
            // Sign-extend each nibble through an arithmetic shift.
            pair[0] = f32::from(((b << 4) as i8) >> 4) * scale;
            pair[1] = f32::from((b as i8) >> 4) * scale;
        }
    }
}

/// `[out, in]` of a weight for int4 with groups of `group`; the error
/// names the problem.
pub(crate) fn check_shape(shape: &[u64], group: u64) -> Result<(usize, usize), QuantError> {
    let &[rows, cols] = shape else {
        return Err(QuantError::Shape(format!(
            "has shape {shape:?}: only 2-D weights quantize"
        )));
    };
    if group == 0 || group % 2 != 0 || cols % group != 0 {
        return Err(QuantError::Shape(format!(
            "has {cols} inputs (shape {shape:?}), which groups of {group} do not divide"
        )));
    }
    let rows = usize::try_from(rows).map_err(|_| QuantError::Shape("too many rows".into()))?;
    let cols = usize::try_from(cols).map_err(|_| QuantError::Shape("too many columns".into()))?;
    Ok((rows, cols))
}

/// Whether int4 takes weights of this dtype: F32, F16 and BF16.
pub fn accepts(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16)
}

/// An int4-quantized weight: the bytes of `<name>.qweight` (U8 `[out, in /
/// 2]`) and `<name>.scales` (F16 `[out, in / group]`, little-endian).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Int4Tensor {
    /// The packed 4-bit values.
    pub qweight: Vec<u8>,
    /// The F16 scales' bytes.
    pub scales: Vec<u8>,
}

fn wrap(name: &str) -> impl Fn(QuantError) -> Error + '_ {
    move |problem| Error::Quant {
        tensor: name.to_string(),
        problem,
    }
}

/// Quantizes a whole weight (`data`: bytes of `dtype` F32, F16 or BF16,
/// shape `[out, in]`) with groups of `group`. Errors name `name`.
pub fn quantize(
    name: &str,
    dtype: Dtype,
    shape: &[u64],
    data: &[u8],
    group: u64,
) -> Result<Int4Tensor> {
    let err = wrap(name);
    if !accepts(dtype) {
        return Err(err(QuantError::Dtype {
            dtype,
            wanted: "int4 quantizes F32, F16 or BF16".into(),
        }));
    }
    let (rows, cols) = check_shape(shape, group).map_err(&err)?;
    let elem = dtype.bits() as usize / 8;
    if Some(data.len()) != rows.checked_mul(cols).and_then(|n| n.checked_mul(elem)) {
        return Err(err(QuantError::Shape(format!(
            "holds {} bytes, not shape {shape:?} of {dtype}",
            data.len()
        ))));
    }
    let group = group as usize;
    let groups = cols / group;
    let mut qweight = vec![0u8; rows * cols / 2];
    let mut scales = vec![f16::ZERO; rows * groups];
    // Row buffers only when there are rows: a shape like [0, 2^40] holds no
    // bytes, and must not cost a row of 2^40 values.
    let row_len = if rows == 0 { 0 } else { cols };
    let mut buf = vec![0f32; row_len];
    let mut codes = vec![0u8; row_len];
    if rows > 0 && cols > 0 {
        let rows_iter = data
            .chunks_exact(cols * elem)
            .zip(qweight.chunks_exact_mut(cols / 2))
            .zip(scales.chunks_exact_mut(groups));
        for (r, ((src, q), s)) in rows_iter.enumerate() {
            crate::cast::decode_f32(dtype, src, &mut buf)
                .map_err(|e| err(QuantError::Shape(e.to_string())))?;
            quantize_row(&buf, group, s, &mut codes, q).map_err(|f| err(f.at_row(r as u64)))?;
        }
    }
    Ok(Int4Tensor {
        qweight,
        scales: scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
    })
}

/// Dequantizes a whole int4 weight of logical shape `[out, in]` from its
/// qweight and F16 scales bytes: `out * in` f32 values, row-major.
pub fn dequantize(
    name: &str,
    qweight: &[u8],
    scales: &[u8],
    shape: &[u64],
    group: u64,
) -> Result<Vec<f32>> {
    let err = wrap(name);
    let (rows, cols) = check_shape(shape, group).map_err(&err)?;
    let group = group as usize;
    let groups = cols / group;
    let sizes = rows
        .checked_mul(cols)
        .and_then(|n| Some((n, rows.checked_mul(groups)?.checked_mul(2)?)));
    let Some((numel, scale_bytes)) = sizes else {
        return Err(err(QuantError::Layout(format!(
            "shape {shape:?} holds more values than memory can address"
        ))));
    };
    if qweight.len() != numel / 2 || scales.len() != scale_bytes {
        return Err(err(QuantError::Layout(format!(
            "{} qweight bytes and {} scale bytes do not make shape {shape:?} in groups of {group}",
            qweight.len(),
            scales.len()
        ))));
    }
    let mut out = vec![0f32; numel];
    let mut s = vec![f16::ZERO; if rows == 0 { 0 } else { groups }];
    if cols > 0 {
        let rows_iter = out
            .chunks_exact_mut(cols)
            .zip(qweight.chunks_exact(cols / 2))
            .zip(scales.chunks_exact(groups * 2));
        for ((o, q), sb) in rows_iter {
            for (d, b) in s.iter_mut().zip(sb.chunks_exact(2)) {
                *d = f16::from_le_bytes([b[0], b[1]]);
            }
            dequantize_row(q, &s, group, o);
        }
    }
    Ok(out)
}
