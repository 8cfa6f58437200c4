//! MLX's quantized weights: bit packing, the affine quantizer, and
//! dequantization in every mode (affine, mxfp4, mxfp8, nvfp4).
//!
//! A row of codes is one little-endian bit stream, least-significant bits
//! first: code `k` is bits `k * bits .. (k + 1) * bits` of the row, so 3-,
//! 5- and 6-bit codes straddle bytes and U32 words.
//!
//! ```
//! use tensorfile::quant::mlx;
//! let mut packed = [0u8; 4];
//! mlx::pack(4, &[1, 2, 3, 4, 5, 6, 7, 8], &mut packed)?;
//! assert_eq!(packed, [0x21, 0x43, 0x65, 0x87]); // first code in the low bits
//! let codes = [1u8, 2, 3, 4, 5, 6, 7, 0]; // eight 3-bit codes: three bytes
//! let mut packed = [0u8; 3];
//! mlx::pack(3, &codes, &mut packed)?;
//! assert_eq!(packed[0], 0b11_010_001); // code 2 straddles the first two bytes
//! let mut back = [0u8; 8];
//! mlx::unpack(3, &packed, &mut back)?;
//! assert_eq!(back, codes);
//! assert!(mlx::unpack(0, &packed, &mut back).is_err()); // MLX packs 2 to 8 bits
//! # Ok::<(), tensorfile::quant::QuantError>(())
//! ```

use half::{bf16, f16};

use super::{Mode, QuantError, QuantParams, MLX_BITS};
use crate::{Dtype, Error, Result};

/// `bits` as a width MLX packs (2, 3, 4, 5, 6 or 8), or the error saying
/// it is not one.
fn packed_width(bits: u32) -> Result<u32, QuantError> {
    if MLX_BITS.contains(&u64::from(bits)) {
        Ok(bits)
    } else {
        Err(QuantError::Params(format!(
            "MLX packs 2, 3, 4, 5, 6 or 8 bits a code, not {bits}"
        )))
    }
}

/// Unpacks `codes.len()` codes of `bits` (2, 3, 4, 5, 6 or 8) from the bit
/// stream `packed`, which holds exactly `codes.len() * bits / 8` bytes; the
/// count is a multiple of 8 (as in any whole number of U32 words). A
/// shorter stream fills only the codes it holds. Any other width is a
/// [`QuantError::Params`].
pub fn unpack(bits: u32, packed: &[u8], codes: &mut [u8]) -> Result<(), QuantError> {
    match packed_width(bits)? {
        8 => {
            let n = codes.len().min(packed.len());
            codes[..n].copy_from_slice(&packed[..n]);
        }
        4 => {
            for (c, &b) in codes.chunks_exact_mut(2).zip(packed) {
                c[0] = b & 0x0F;
                c[1] = b >> 4;
            }
        }
        2 => {
            for (c, &b) in codes.chunks_exact_mut(4).zip(packed) {
                c[0] = b & 3;
                c[1] = (b >> 2) & 3;
                c[2] = (b >> 4) & 3;
                c[3] = b >> 6;
            }
        }
        _ => {
            // Eight codes fill exactly `bits` bytes.
            let mask = (1u64 << bits) - 1;
            for (c, chunk) in codes
                .chunks_exact_mut(8)
                .zip(packed.chunks_exact(bits as usize))
            {
                let mut v = 0u64;
                for (i, &b) in chunk.iter().enumerate() {
                    v |= u64::from(b) << (8 * i);
                }
                for (k, code) in c.iter_mut().enumerate() {
                    *code = ((v >> (k as u32 * bits)) & mask) as u8;
                }
            }
        }
    }
    Ok(())
}

/// Packs codes (each below `2^bits`) into the bit stream `packed`
/// (`codes.len() * bits / 8` bytes); the inverse of [`unpack`]. A shorter
/// buffer takes only the codes it holds. `bits` is 2, 3, 4, 5, 6 or 8;
/// any other width is a [`QuantError::Params`].
pub fn pack(bits: u32, codes: &[u8], packed: &mut [u8]) -> Result<(), QuantError> {
    match packed_width(bits)? {
        8 => {
            let n = packed.len().min(codes.len());
            packed[..n].copy_from_slice(&codes[..n]);
        }
        4 => {
            for (c, b) in codes.chunks_exact(2).zip(packed.iter_mut()) {
                *b = (c[0] & 0x0F) | (c[1] << 4);
            }
        }
        _ => {
            let mask = (1u64 << bits) - 1;
            for (c, chunk) in codes
                .chunks_exact(8)
                .zip(packed.chunks_exact_mut(bits as usize))
            {
                let mut v = 0u64;
                for (k, &code) in c.iter().enumerate() {
                    v |= (u64::from(code) & mask) << (k as u32 * bits);
                }
                for (i, b) in chunk.iter_mut().enumerate() {
                    *b = (v >> (8 * i)) as u8;
                }
            }
        }
    }
    Ok(())
}

/// The affine parameters `(scale, bias)` of one group, in f32: MLX's,
/// with the edge's code lowered where MLX's would leave a weight more than
/// half a step from its value.
///
/// MLX: n = 2^bits - 1; scale = max((max - min) / n, 1e-7); the edge is
/// min when |min| > |max|, else max with the scale negated; q0 =
/// round(edge / scale); when q0 != 0, scale = edge / q0 and bias = edge,
/// else bias = 0. That makes the edge (the weight of largest magnitude)
/// exact, but the grid `bias + q * scale`, q in 0..=n, can then stop short
/// of the other end of the group, whose weights clamp to the grid's end up
/// to a whole step away: MLX's own files here do that in 93 of 252 groups
/// (up to 0.997 of a step).
///
/// The format requires every weight within half a step, so where the far
/// end would land more than half a step past the grid, |q0| is lowered
/// (a coarser step; the edge stays exact and the bias is still the edge)
/// until it does not. Every other group gets MLX's parameters bit for bit.
///
/// `bits` is 2, 3, 4, 5, 6 or 8 (any other width is a
/// [`QuantError::Params`]); `group` holds finite values (an empty group,
/// or one with NaN or an infinity, gives parameters of no use, but no
/// failure).
pub fn affine_params(group: &[f32], bits: u32) -> Result<(f32, f32), QuantError> {
    let bits = packed_width(bits)?;
    Ok(affine_params_of(group, bits))
}

/// [`affine_params`] for a width already checked.
fn affine_params_of(group: &[f32], bits: u32) -> (f32, f32) {
    let n = ((1u32 << bits) - 1) as f32;
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for &w in group {
        lo = lo.min(w);
        hi = hi.max(w);
    }
    let step = ((hi - lo) / n).max(1e-7);
    let (scale, edge, far) = if lo.abs() > hi.abs() {
        (step, lo, hi)
    } else {
        (-step, hi, lo)
    };
    let mut q0 = (edge / scale).round_ties_even();
    if q0 == 0.0 {
        return (scale, 0.0);
    }
    if q0.is_infinite() {
        // Only a constant group of magnitude above about 3e31 (the step is
        // the 1e-7 floor): every weight is the edge, exact with any step.
        return (scale, edge);
    }
    // The far end's unrounded code, computed as `affine_code` computes it:
    // it rounds to at most n (so the weight is within half a step) exactly
    // when it is at most n + 0.5. That fails only when |q0| <= n (MLX's
    // grid is then short by up to one step), so |q0| is lowered by one,
    // rarely two, and the bound on |q0| keeps the loop finite.
    while q0.abs() > 1.0 && q0.abs() <= n && (far - edge) / (edge / q0) > n + 0.5 {
        q0 -= q0.signum();
    }
    (edge / q0, edge)
}

/// The code of `w` in a group with `scale` and `bias`: clamp(round((w -
/// bias) / scale), 0, n).
fn affine_code(w: f32, scale: f32, bias: f32, n: f32) -> u8 {
    ((w - bias) / scale).round_ties_even().clamp(0.0, n) as u8
}

/// Quantizes one row to affine codes: `scales` and `biases` get one f32 per
/// group; `codes` one code per element. Fails on a non-finite value, or a
/// group whose range f32 cannot hold.
pub(crate) fn affine_quantize_row(
    row: &[f32],
    bits: u32,
    group: usize,
    scales: &mut [f32],
    biases: &mut [f32],
    codes: &mut [u8],
) -> Result<(), super::int4::RowFault> {
    if let Some(col) = row.iter().position(|w| !w.is_finite()) {
        return Err(super::int4::RowFault::NotFinite {
            col,
            value: row[col],
        });
    }
    let n = ((1u32 << bits) - 1) as f32;
    let groups = row.chunks_exact(group).zip(codes.chunks_exact_mut(group));
    let params = scales.iter_mut().zip(biases.iter_mut());
    for (i, ((g, c), (s, b))) in groups.zip(params).enumerate() {
        let (scale, bias) = affine_params_of(g, bits);
        // Weights near f32's limits can span more than f32 holds: the
        // range, the scale or the top code's value (scale * n + bias, as
        // the dequantizer computes it) would be infinite, and the weights
        // would come back as infinities or NaN.
        let top = scale * n;
        if !scale.is_finite() || !top.is_finite() || !(top + bias).is_finite() {
            return Err(super::int4::RowFault::RangeOverflow { group: i });
        }
        *s = scale;
        *b = bias;
        for (&w, code) in g.iter().zip(c.iter_mut()) {
            *code = affine_code(w, scale, bias, n);
        }
    }
    Ok(())
}

/// The arithmetic of affine dequantization: in the scales' dtype, rounded
/// after the multiply and after the add, as MLX computes it. (f32
/// arithmetic rounded to F16 or BF16 is exactly the narrow arithmetic: f32
/// has more than twice their precision plus two bits, so the double
/// rounding never differs.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    F32,
    F16,
    BF16,
}

impl Arith {
    pub(crate) fn of(dtype: Dtype) -> Option<Arith> {
        match dtype {
            Dtype::F32 => Some(Arith::F32),
            Dtype::F16 => Some(Arith::F16),
            Dtype::BF16 => Some(Arith::BF16),
            _ => None,
        }
    }
}

fn round_f16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

fn round_bf16(x: f32) -> f32 {
    bf16::from_f32(x).to_f32()
}

/// Affine dequantization of one row of codes, generic over the rounding so
/// the inner loop has no dispatch.
fn affine_row_with(
    round: impl Fn(f32) -> f32,
    bits: u32,
    group: usize,
    codes: &[u8],
    scales: &[f32],
    biases: &[f32],
    out: &mut [f32],
) {
    let levels = 1usize << bits;
    let mut table = [0f32; 256];
    let groups = out.chunks_exact_mut(group).zip(codes.chunks_exact(group));
    for ((o, c), (&s, &b)) in groups.zip(scales.iter().zip(biases)) {
        let value = |q: u8| round(round(s * f32::from(q)) + b);
        if levels <= group {
            // Fewer levels than elements: a table per group is cheaper.
            for (q, t) in table[..levels].iter_mut().enumerate() {
                *t = value(q as u8);
            }
            for (v, &q) in o.iter_mut().zip(c) {
                *v = table[q as usize];
            }
        } else {
            for (v, &q) in o.iter_mut().zip(c) {
                *v = value(q);
            }
        }
    }
}

/// Affine dequantization of one row (scales and biases already decoded).
pub(crate) fn affine_row(
    arith: Arith,
    bits: u32,
    group: usize,
    codes: &[u8],
    scales: &[f32],
    biases: &[f32],
    out: &mut [f32],
) {
    match arith {
        Arith::F32 => affine_row_with(|x| x, bits, group, codes, scales, biases, out),
        Arith::F16 => affine_row_with(round_f16, bits, group, codes, scales, biases, out),
        Arith::BF16 => affine_row_with(round_bf16, bits, group, codes, scales, biases, out),
    }
}

/// Floating-point-mode dequantization of one row: `values` holds the
/// decoded codes and becomes `code * scale` (exact in f32).
pub(crate) fn fp_row(group: usize, scales: &[f32], values: &mut [f32]) {
    for (o, &s) in values.chunks_exact_mut(group).zip(scales) {
        for v in o.iter_mut() {
            *v *= s;
        }
    }
}

/// An MLX affine-quantized weight: the bytes of `<m>.weight` (U32 `[out,
/// in * bits / 32]`), `<m>.scales` and `<m>.biases` (the input's dtype,
/// `[out, in / group]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlxTensor {
    /// The packed codes, as U32 bytes.
    pub weight: Vec<u8>,
    /// The scales' bytes.
    pub scales: Vec<u8>,
    /// The biases' bytes.
    pub biases: Vec<u8>,
}

fn wrap(name: &str) -> impl Fn(QuantError) -> Error + '_ {
    move |problem| Error::Quant {
        tensor: name.to_string(),
        problem,
    }
}

/// `[out, in]` of a weight for MLX packing with `params`.
pub(crate) fn check_shape(
    shape: &[u64],
    params: &QuantParams,
) -> Result<(usize, usize), QuantError> {
    params.validate().map_err(QuantError::Params)?;
    let &[rows, cols] = shape else {
        return Err(QuantError::Shape(format!(
            "has shape {shape:?}: only 2-D weights quantize"
        )));
    };
    let whole_words = cols.checked_mul(params.bits).is_some_and(|b| b % 32 == 0);
    if cols % params.group_size != 0 || !whole_words {
        return Err(QuantError::Shape(format!(
            "has {cols} inputs (shape {shape:?}): groups of {} must divide them and {} bits each fill whole U32 words",
            params.group_size, params.bits
        )));
    }
    let rows = usize::try_from(rows).map_err(|_| QuantError::Shape("too many rows".into()))?;
    let cols = usize::try_from(cols).map_err(|_| QuantError::Shape("too many columns".into()))?;
    Ok((rows, cols))
}

/// Quantizes a whole weight (`data`: bytes of F32, F16 or BF16, shape
/// `[out, in]`) with MLX's affine quantizer, held to half a step per
/// weight (see [`affine_params`]); scales and biases are stored in the
/// input's dtype.
pub fn quantize_affine(
    name: &str,
    dtype: Dtype,
    shape: &[u64],
    data: &[u8],
    params: QuantParams,
) -> Result<MlxTensor> {
    let err = wrap(name);
    if params.mode != Mode::Affine {
        return Err(err(QuantError::Params(format!(
            "only affine mode quantizes, not {}",
            params.mode
        ))));
    }
    if Arith::of(dtype).is_none() {
        return Err(err(QuantError::Dtype {
            dtype,
            wanted: "MLX affine quantizes F32, F16 or BF16".into(),
        }));
    }
    let (rows, cols) = check_shape(shape, &params).map_err(&err)?;
    let elem = dtype.bits() as usize / 8;
    if Some(data.len()) != rows.checked_mul(cols).and_then(|n| n.checked_mul(elem)) {
        return Err(err(QuantError::Shape(format!(
            "holds {} bytes, not shape {shape:?} of {dtype}",
            data.len()
        ))));
    }
    if rows == 0 || cols == 0 {
        // No values, so every part is empty; and a shape like [2^40, 0] or
        // [0, 2^60] must cost neither a loop over its rows nor a row buffer.
        return Ok(MlxTensor {
            weight: Vec::new(),
            scales: Vec::new(),
            biases: Vec::new(),
        });
    }
    // `data` holds rows * cols values, so every size below is at most its
    // length (and a row buffer at most one row of it).
    let (bits, group) = (params.bits as u32, params.group_size as usize);
    let groups = cols / group;
    let row_bytes = cols * bits as usize / 8;
    let mut out = MlxTensor {
        weight: vec![0; rows * row_bytes],
        scales: vec![0; rows * groups * elem],
        biases: vec![0; rows * groups * elem],
    };
    let mut buf = vec![0f32; cols];
    let mut codes = vec![0u8; cols];
    let (mut s, mut b) = (vec![0f32; groups], vec![0f32; groups]);
    let opts = crate::cast::CastOptions::default();
    let encode = |v: &[f32], dst: &mut [u8]| {
        crate::cast::encode_f32(v, dtype, dst, opts)
            .map_err(|e| err(QuantError::Shape(e.to_string())))
    };
    for r in 0..rows {
        let src = &data[r * cols * elem..(r + 1) * cols * elem];
        crate::cast::decode_f32(dtype, src, &mut buf)
            .map_err(|e| err(QuantError::Shape(e.to_string())))?;
        affine_quantize_row(&buf, bits, group, &mut s, &mut b, &mut codes)
            .map_err(|f| err(f.at_row(r as u64)))?;
        pack(
            bits,
            &codes,
            &mut out.weight[r * row_bytes..(r + 1) * row_bytes],
        )
        .map_err(&err)?;
        let span = r * groups * elem..(r + 1) * groups * elem;
        encode(&s, &mut out.scales[span.clone()])?;
        encode(&b, &mut out.biases[span])?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_params_keep_half_a_step_on_random_groups() {
        // Groups of 2 to 64 weights at magnitudes from 2^-150 to 2^90:
        // centred or shifted, with repeated values, -0.0 and outliers. The
        // parameters are finite with a non-zero step, and every weight comes
        // back within half a step, up to f32 rounding at the size of the
        // weight, the step or the bias.
        let mut seed = 0x0123_4567_89AB_CDEFu64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..20_000 {
            let bits = [2u32, 3, 4, 5, 6, 8][round % 6];
            let n = ((1u32 << bits) - 1) as f32;
            let len = [2usize, 3, 32, 64][(next() % 4) as usize];
            let mag = 2f32.powi((next() % 240) as i32 - 150);
            let center = [0.0, mag * 1000.0, -mag * 37.0, mag][(next() % 4) as usize];
            let group: Vec<f32> = (0..len)
                .map(|i| match next() % 8 {
                    0 => center,
                    1 => -0.0,
                    2 if i == 0 => center - mag * (next() % 1000) as f32,
                    _ => center + ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * mag,
                })
                .collect();
            let (scale, bias) = affine_params(&group, bits).unwrap();
            assert!(
                scale.is_finite() && scale != 0.0 && bias.is_finite(),
                "b{bits} {group:?}: ({scale}, {bias})"
            );
            for &w in &group {
                let back = scale * f32::from(affine_code(w, scale, bias, n)) + bias;
                let tolerance = 1e-6 * w.abs().max(scale.abs()).max(bias.abs());
                assert!(
                    (w - back).abs() <= scale.abs() * 0.5 + tolerance,
                    "b{bits} {group:?}: {w} came back as {back}, step {scale}"
                );
            }
        }
    }
}
