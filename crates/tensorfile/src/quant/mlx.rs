//! MLX's quantized weights: bit packing, MLX's quantizer in every mode
//! (affine, mxfp4, mxfp8, nvfp4, nvfp4 with a global scale) and
//! dequantization, each bit for bit as `mx.quantize` and `mx.dequantize`
//! compute them on MLX 0.32's CPU backend (the backend the fixtures were
//! made on; its GPU kernels round some steps differently).
//!
//! # What is computed
//!
//! Weights are split into groups of `group_size` consecutive elements of a
//! row; every group is quantized on its own, in f32 from the input's values
//! (F32, F16 or BF16), rounding to the input's dtype where MLX does.
//!
//! - **affine**, `n = 2^bits - 1`: `scale = max((max - min) / n, 1e-7)`;
//!   the edge is `min` when `|min| > |max|`, else `max` with the scale
//!   negated; `q0 = round(edge / scale)`; when `q0 != 0`, `scale = edge /
//!   q0` and `bias = edge`, else `bias = 0`. Each code is
//!   `clamp(round((w - bias) / scale), 0, n)` with the f32 scale; scale
//!   and bias are then stored in the input's dtype. The edge (the weight
//!   of largest magnitude) comes back exactly; the grid can stop short of
//!   the other end, whose weights then come back up to a whole step off.
//!   That is MLX's trade: an earlier quantizer here lowered the edge's code
//!   to keep every weight within half a step, which coarsened the step and
//!   raised the mean error (weight RMS error 1.5 to 1.6 times MLX's at 2
//!   bits, 1.07 to 1.11 at 3 bits), so it was dropped.
//! - **mxfp4 / mxfp8** (groups of 32): `s = absmax / m` in the input's
//!   dtype (`m` = 6, or 448); the E8M0 exponent `k` makes `2^k` the
//!   smallest power of two at least `s` (0 when `s` is 0); each `w / 2^k`,
//!   rounded to the dtype, becomes the E2M1 code of the nearest value
//!   (ties to the smaller magnitude, and `+0` for anything that rounds to
//!   zero) or the E4M3 code (round to nearest even, saturating at 448, NaN
//!   and infinities to 448 too). The scale byte is `k + 127`.
//! - **nvfp4** (groups of 16): `s = absmax / 6` in the input's dtype, times
//!   `2688 / global_scale` in f32 when there is a global scale, stored as
//!   E4M3; each `w / E4M3(s)`, rounded to the dtype and times the same
//!   factor, becomes the E2M1 code of the nearest value (in f32).
//!
//! Dequantization: affine `scale * q + bias` in the scales' dtype (rounded
//! after the multiply and after the add); mxfp4/mxfp8 `value * 2^(s - 127)`
//! and nvfp4 `value * E4M3(s)`, in the output dtype (BF16 by default), and
//! with a global scale `value * (E4M3(s) * (global_scale / 2688))` in F32.
//! E4M3 byte 0x7F (and 0xFF) is NaN; E8M0 byte 0xFF is 2^128, infinity.
//!
//! Where MLX's own result would not stand for the weights, quantizing is
//! refused with the row and group: a group whose values dequantize (as MLX
//! does by default) to infinity or NaN ([`QuantError::RangeOverflow`];
//! weights near F32's or F16's largest values), and an mxfp4/mxfp8 group whose
//! exponent is below -127 with a code that is not zero
//! ([`QuantError::ScaleOutOfRange`]; F32 groups whose largest magnitude is
//! below about 6e-38), where MLX's scale byte wraps around. Weights that
//! are not finite are refused ([`QuantError::NotFinite`]). Every other
//! group gets MLX's bytes.
//!
//! A row of codes is one little-endian bit stream, least-significant bits
//! first: code `k` is bits `k * bits .. (k + 1) * bits` of the row, so 3-,
//! 5- and 6-bit codes straddle bytes and U32 words.
//!
//! ```
//! use tensorfile::quant::{mlx_pack, mlx_unpack};
//! let mut packed = [0u8; 4];
//! mlx_pack(4, &[1, 2, 3, 4, 5, 6, 7, 8], &mut packed)?;
//! assert_eq!(packed, [0x21, 0x43, 0x65, 0x87]); // first code in the low bits
//! let codes = [1u8, 2, 3, 4, 5, 6, 7, 0]; // eight 3-bit codes: three bytes
//! let mut packed = [0u8; 3];
//! mlx_pack(3, &codes, &mut packed)?;
//! assert_eq!(packed[0], 0b11_010_001); // code 2 straddles the first two bytes
//! let mut back = [0u8; 8];
//! mlx_unpack(3, &packed, &mut back)?;
//! assert_eq!(back, codes);
//! assert!(mlx_unpack(0, &packed, &mut back).is_err()); // MLX packs 2 to 8 bits
//! # Ok::<(), tensorfile::quant::QuantError>(())
//! ```

use half::{bf16, f16};

use super::int4::RowFault;
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
///
/// # Errors
///
/// [`QuantError::Params`] when `bits` is not 2, 3, 4, 5, 6 or 8.
pub fn unpack(bits: u32, packed: &[u8], codes: &mut [u8]) -> Result<(), QuantError> {
    crate::bits::unpack(packed_width(bits)?, packed, codes);
    Ok(())
}

/// Packs codes (each below `2^bits`) into the bit stream `packed`
/// (`codes.len() * bits / 8` bytes); the inverse of [`unpack`]. A shorter
/// buffer takes only the codes it holds. `bits` is 2, 3, 4, 5, 6 or 8;
/// any other width is a [`QuantError::Params`].
///
/// # Errors
///
/// [`QuantError::Params`] when `bits` is not 2, 3, 4, 5, 6 or 8.
pub fn pack(bits: u32, codes: &[u8], packed: &mut [u8]) -> Result<(), QuantError> {
    crate::bits::pack(packed_width(bits)?, codes, packed);
    Ok(())
}

// ---------------------------------------------------------------- arithmetic

/// The arithmetic MLX computes in: f32, or f32 rounded to F16 or BF16 after
/// each operation (f32 arithmetic rounded to F16 or BF16 is exactly what
/// MLX's CPU backend computes for those types, which converts to f32 and
/// back around every operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arith {
    F32,
    F16,
    BF16,
}

impl Arith {
    /// The arithmetic of a dtype, if MLX computes in it.
    pub(crate) fn of(dtype: Dtype) -> Option<Arith> {
        match dtype {
            Dtype::F32 => Some(Arith::F32),
            Dtype::F16 => Some(Arith::F16),
            Dtype::BF16 => Some(Arith::BF16),
            _ => None,
        }
    }

    /// `x` rounded to this arithmetic's type (to nearest, ties to even;
    /// overflow to infinity).
    #[inline(always)]
    pub(crate) fn round(self, x: f32) -> f32 {
        match self {
            Arith::F32 => x,
            Arith::F16 => round_f16(x),
            Arith::BF16 => round_bf16(x),
        }
    }

    /// Bytes of one value.
    fn size(self) -> usize {
        match self {
            Arith::F32 => 4,
            Arith::F16 | Arith::BF16 => 2,
        }
    }

    /// Writes `x` (already a value of this type) little-endian into `out`.
    fn put(self, x: f32, out: &mut [u8]) {
        match self {
            Arith::F32 => out.copy_from_slice(&x.to_le_bytes()),
            Arith::F16 => out.copy_from_slice(&f16::from_f32(x).to_le_bytes()),
            Arith::BF16 => out.copy_from_slice(&bf16::from_f32(x).to_le_bytes()),
        }
    }
}

#[inline(always)]
fn round_f16(x: f32) -> f32 {
    let h = f16::from_f32(x);
    if h.is_nan() {
        return mlx_nan(Dtype::F16, x);
    }
    h.to_f32()
}

#[inline(always)]
fn round_bf16(x: f32) -> f32 {
    let b = bf16::from_f32(x);
    if b.is_nan() {
        return mlx_nan(Dtype::BF16, x);
    }
    b.to_f32()
}

/// `x` with a NaN replaced by the NaN MLX's arithmetic in `dtype` leaves,
/// read as f32: MLX converts every F16 NaN to 0x7D00 (sign kept), which
/// reads back as f32 0x7FE00000; every BF16 NaN to the positive 0x7FC0 (f32
/// 0x7FC00000). Other values and dtypes are left as they are.
#[inline]
pub(crate) fn mlx_nan(dtype: Dtype, x: f32) -> f32 {
    if !x.is_nan() {
        return x;
    }
    match dtype {
        Dtype::F16 => f32::from_bits((x.to_bits() & 0x8000_0000) | 0x7FE0_0000),
        Dtype::BF16 => f32::from_bits(0x7FC0_0000),
        _ => x,
    }
}

/// Rewrites the NaNs of encoded values (`bytes`, little-endian `dtype`) as
/// MLX's conversion to `dtype` writes them: F16 0x7D00 with the sign kept,
/// BF16 the positive 0x7FC0. Other dtypes are left as they are.
pub(crate) fn mlx_nan_bytes(dtype: Dtype, bytes: &mut [u8]) {
    let fix = |h: u16| match dtype {
        Dtype::F16 if h & 0x7C00 == 0x7C00 && h & 0x03FF != 0 => Some((h & 0x8000) | 0x7D00),
        Dtype::BF16 if h & 0x7F80 == 0x7F80 && h & 0x007F != 0 => Some(0x7FC0),
        _ => None,
    };
    if matches!(dtype, Dtype::F16 | Dtype::BF16) {
        for pair in bytes.chunks_exact_mut(2) {
            if let Some(h) = fix(u16::from_le_bytes([pair[0], pair[1]])) {
                pair.copy_from_slice(&h.to_le_bytes());
            }
        }
    }
}

// ---------------------------------------------------------------- number formats

/// The values of the 16 E2M1 codes, in code order (MLX's table).
pub(crate) const FP4_VALUES: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// `x` as an E4M3 byte, as MLX's `to_fp8` makes it: round to nearest even;
/// magnitudes from 464 up, infinities and NaN give 448 (0x7E); the sign is
/// kept (-0 is 0x80).
/// (Examples: the test `e4m3_examples` below.)
pub(crate) fn e4m3_from_f32(x: f32) -> u8 {
    let sign = ((x.to_bits() >> 24) & 0x80) as u8;
    let a = x.abs();
    if a.is_nan() || a >= 464.0 {
        return sign | 0x7E;
    }
    let code = if a < 2f32.powi(-6) {
        // Subnormal: whole multiples of 2^-9 (exact scaling, then one
        // rounding); 8 is the smallest normal, 0x08.
        (a * 512.0).round_ties_even() as u8
    } else {
        // Normal: keep 3 of f32's 23 mantissa bits, rounding the other 20
        // to nearest even; a carry moves into the exponent.
        let bits = a.to_bits();
        let exponent = (bits >> 23) as i32 - 127 + 7; // 1..=15
        let mantissa = bits & 0x7F_FFFF;
        let (kept, rest) = (mantissa >> 20, mantissa & 0xF_FFFF);
        let up = rest > 0x8_0000 || (rest == 0x8_0000 && kept & 1 == 1);
        let rounded = ((exponent as u32) << 3) + kept + u32::from(up);
        rounded as u8
    };
    sign | code
}

/// The value of an E4M3 byte as MLX's `from_fp8` gives it: 0x7F and 0xFF
/// are NaN (f32 0x7FF00000 with the sign, as MLX decodes them through
/// F16), 0x80 is -0.
pub(crate) fn e4m3_to_f32(code: u8) -> f32 {
    let magnitude = code & 0x7F;
    let value = if magnitude == 0x7F {
        f32::from_bits(0x7FF0_0000)
    } else {
        let (exponent, mantissa) = (i32::from(magnitude >> 3), f32::from(magnitude & 7));
        if exponent == 0 {
            mantissa * 2f32.powi(-9)
        } else {
            (8.0 + mantissa) * 2f32.powi(exponent - 10)
        }
    };
    if code & 0x80 != 0 {
        -value
    } else {
        value
    }
}

/// `2^(code - 127)` of an E8M0 byte, as MLX computes it in f32 (byte 0 is
/// 2^-127, a subnormal; byte 255 is 2^128, infinity).
pub(crate) fn e8m0_to_f32(code: u8) -> f32 {
    match code {
        0 => f32::from_bits(0x0040_0000),
        c => f32::from_bits(u32::from(c) << 23),
    }
}

/// The exponent of the smallest power of two at least `x` (a finite f32,
/// not negative); 0 for 0. This is MLX's E8M0 scale: rounding up keeps
/// the group's largest magnitude within the codes' range.
fn ceil_log2(x: f32) -> i32 {
    let bits = x.to_bits() & 0x7FFF_FFFF;
    let (exponent, mantissa) = ((bits >> 23) as i32, bits & 0x7F_FFFF);
    match (exponent, mantissa) {
        (0, 0) => 0,
        // Subnormal: mantissa * 2^-149.
        (0, m) => 32 - (m - 1).leading_zeros() as i32 - 149,
        (e, 0) => e - 127,
        (e, _) => e - 127 + 1,
    }
}

/// MLX's E2M1 code for `q` (already in the arithmetic `arith`): the first
/// table index with the smallest `|q - value|`, that difference rounded to
/// `arith`; NaN differences never win (NaN and infinities give code 0).
#[inline]
fn fp4_code(q: f32, arith: Arith) -> u8 {
    if q.is_finite() && q.abs() <= 16.0 {
        // Here every difference to the nearest table values is exact in
        // f32, F16 and BF16 alike, so the table's order decides ties: the
        // smaller magnitude (the lower index), and +0 for anything that is
        // nearest to zero (index 0 comes before -0 at index 8).
        let a = q.abs();
        let m = if a <= 0.25 {
            0
        } else if a <= 0.75 {
            1
        } else if a <= 1.25 {
            2
        } else if a <= 1.75 {
            3
        } else if a <= 2.5 {
            4
        } else if a <= 3.5 {
            5
        } else if a <= 5.0 {
            6
        } else {
            7
        };
        return if m == 0 || q > 0.0 { m } else { m | 8 };
    }
    let distance = |v: f32| arith.round(q - v).abs();
    let mut best = distance(FP4_VALUES[0]);
    let mut index = 0u8;
    for (i, &v) in FP4_VALUES.iter().enumerate().skip(1) {
        let d = distance(v);
        if d < best {
            best = d;
            index = i as u8;
        }
    }
    index
}

// ---------------------------------------------------------------- quantizing

/// The affine parameters `(scale, bias)` of one group, in f32, exactly as
/// MLX computes them (see the module docs); `group` holds finite values.
///
/// ```
/// use tensorfile::quant::mlx_affine_params as affine_params;
/// // The edge (largest magnitude, here -2) is exact: bias = -2, and
/// // -2 + 3 * scale is the far end of the 2-bit grid.
/// let (scale, bias) = affine_params(&[-2.0, 0.0, 0.5, 1.0], 2)?;
/// assert_eq!((scale, bias), (1.0, -2.0));
/// assert!(affine_params(&[1.0], 0).is_err()); // MLX packs 2 to 8 bits
/// # Ok::<(), tensorfile::quant::QuantError>(())
/// ```
///
/// # Errors
/// [`QuantError::Params`] for a width MLX does not pack.
pub fn affine_params(group: &[f32], bits: u32) -> Result<(f32, f32), QuantError> {
    let bits = packed_width(bits)?;
    Ok(affine_params_of(group, bits))
}

/// [`affine_params`] for a width already checked.
fn affine_params_of(group: &[f32], bits: u32) -> (f32, f32) {
    let n = ((1u32 << bits) - 1) as f32;
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for &w in group {
        if w > hi {
            hi = w;
        }
        if w < lo {
            lo = w;
        }
    }
    let mask = lo.abs() > hi.abs();
    let step = (hi - lo) / n;
    let step = if step < 1e-7 { 1e-7 } else { step };
    let (scale, edge) = if mask { (step, lo) } else { (-step, hi) };
    let q0 = (edge / scale).round_ties_even();
    if q0 != 0.0 {
        (edge / q0, edge)
    } else {
        (scale, 0.0)
    }
}

/// Adding then subtracting 1.5 * 2^23 rounds an f32 of magnitude below
/// 2^22 to an integer, ties to even, without a call to a rounding function
/// (which SSE2 lacks).
const ROUND: f32 = 12_582_912.0;

/// MLX's affine code of `w`: `clamp(round((w - bias) / scale), 0, n)`,
/// where NaN (a zero scale) gives 0.
#[inline(always)]
fn affine_code(w: f32, scale: f32, bias: f32, n: f32) -> u8 {
    // Clamping to [-1, n + 1] first changes no result (and sends NaN to
    // -1, hence 0), and keeps the value small enough for ROUND.
    let x = ((w - bias) / scale).max(-1.0).min(n + 1.0);
    ((x + ROUND) - ROUND).max(0.0).min(n) as u8
}

/// What a row of weights is quantized into: one code per element, and
/// per group the scale's bytes (the input's dtype in affine mode, one byte
/// otherwise) and, in affine mode, the bias's.
pub(crate) struct RowParts<'a> {
    pub(crate) codes: &'a mut [u8],
    pub(crate) scales: &'a mut [u8],
    pub(crate) biases: &'a mut [u8],
}

/// Quantizes one row (finite values of the input's dtype `arith`, decoded
/// to f32) with `params`; `global` is the global scale of the row's matrix
/// (nvfp4 with one). Fails on a value that is not finite and on the groups
/// refused in the module docs.
pub(crate) fn quantize_row(
    params: &QuantParams,
    arith: Arith,
    global: Option<f32>,
    row: &[f32],
    out: RowParts<'_>,
) -> Result<(), RowFault> {
    if let Some(col) = row.iter().position(|w| !w.is_finite()) {
        return Err(RowFault::NotFinite {
            col,
            value: row[col],
        });
    }
    let group = params.group_size as usize;
    let RowParts {
        codes,
        scales,
        biases,
    } = out;
    match params.mode {
        Mode::Affine => {
            let bits = params.bits as u32;
            let n = ((1u32 << bits) - 1) as f32;
            let size = arith.size();
            let groups = row.chunks_exact(group).zip(codes.chunks_exact_mut(group));
            let stored = scales
                .chunks_exact_mut(size)
                .zip(biases.chunks_exact_mut(size));
            for (i, ((g, c), (s, b))) in groups.zip(stored).enumerate() {
                let (scale, bias) = affine_params_of(g, bits);
                let (mut low, mut high) = (u8::MAX, 0u8);
                for (&w, code) in g.iter().zip(c.iter_mut()) {
                    let q = affine_code(w, scale, bias, n);
                    low = low.min(q);
                    high = high.max(q);
                    *code = q;
                }
                let (scale, bias) = (arith.round(scale), arith.round(bias));
                // Values rise or fall with the code: the extremes decide.
                let value = |q: u8| arith.round(arith.round(scale * f32::from(q)) + bias);
                if !(value(low).is_finite() && value(high).is_finite()) {
                    return Err(RowFault::RangeOverflow { group: i });
                }
                arith.put(scale, s);
                arith.put(bias, b);
            }
        }
        Mode::Mxfp4 | Mode::Mxfp8 => {
            let fp8 = params.mode == Mode::Mxfp8;
            let top = if fp8 { 448.0 } else { 6.0 };
            let groups = row.chunks_exact(group).zip(codes.chunks_exact_mut(group));
            for (i, ((g, c), s)) in groups.zip(scales.iter_mut()).enumerate() {
                let amax = g.iter().fold(0f32, |m, w| m.max(w.abs()));
                let scale = arith.round(amax / top);
                let exponent = ceil_log2(scale);
                // 2^exponent: a value of the dtype (scale is one, and so is
                // the next power of two up).
                let power = 2f64.powi(exponent) as f32;
                let mut any = false;
                for (&w, code) in g.iter().zip(c.iter_mut()) {
                    let q = arith.round(w / power);
                    *code = if fp8 {
                        e4m3_from_f32(q)
                    } else {
                        fp4_code(q, arith)
                    };
                    any |= *code & if fp8 { 0x7F } else { 0x07 } != 0;
                }
                if exponent < -127 && any {
                    return Err(RowFault::ScaleOutOfRange { group: i, exponent });
                }
                // The largest value, as MLX dequantizes it by default (in
                // BF16): infinite when rounding to the nearest code goes
                // past 2^128 (weights near f32's largest values).
                let largest = c
                    .iter()
                    .map(|&q| {
                        if fp8 {
                            e4m3_to_f32(q)
                        } else {
                            FP4_VALUES[usize::from(q & 15)]
                        }
                    })
                    .fold(0f32, |m, v| m.max(v.abs()));
                if exponent >= -127 && !round_bf16(largest * power).is_finite() {
                    return Err(RowFault::RangeOverflow { group: i });
                }
                // MLX converts exponent + 127 to a byte by truncating to an
                // integer and keeping its low 8 bits.
                *s = (exponent + 127) as u8;
            }
        }
        Mode::Nvfp4 => {
            let encode = global.map_or(1.0, |g| 2688.0 / g);
            let groups = row.chunks_exact(group).zip(codes.chunks_exact_mut(group));
            for ((g, c), s) in groups.zip(scales.iter_mut()) {
                let amax = g.iter().fold(0f32, |m, w| m.max(w.abs()));
                let scale = e4m3_from_f32(arith.round(amax / 6.0) * encode);
                let divisor = arith.round(e4m3_to_f32(scale));
                for (&w, code) in g.iter().zip(c.iter_mut()) {
                    *code = fp4_code(arith.round(w / divisor) * encode, Arith::F32);
                }
                *s = scale;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- dequantizing

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

/// Floating-point-mode dequantization of one row: `codes` holds one code
/// per element (a nibble's value for E2M1, the byte for E4M3), `scales` one
/// byte per group; values are computed in `arith` (MLX's output dtype), or
/// with a global scale in f32 from scales decoded in `arith`, as MLX
/// computes them.
pub(crate) fn fp_row(
    mode: Mode,
    arith: Arith,
    global: Option<f32>,
    group: usize,
    codes: &[u8],
    scales: &[u8],
    out: &mut [f32],
) {
    let value = |c: u8| match mode {
        Mode::Mxfp8 => e4m3_to_f32(c),
        _ => FP4_VALUES[usize::from(c & 0x0F)],
    };
    let groups = out.chunks_exact_mut(group).zip(codes.chunks_exact(group));
    for ((o, c), &s) in groups.zip(scales) {
        let (scale, arith) = match (mode, global) {
            // MLX decodes the scale into the output dtype, then promotes
            // to F32 to apply the global scale.
            (Mode::Nvfp4, Some(g)) => (arith.round(e4m3_to_f32(s)) * (g / 2688.0), Arith::F32),
            (Mode::Nvfp4, None) => (arith.round(e4m3_to_f32(s)), arith),
            _ => (arith.round(e8m0_to_f32(s)), arith),
        };
        for (v, &q) in o.iter_mut().zip(c) {
            *v = arith.round(arith.round(value(q)) * scale);
        }
    }
}

// ---------------------------------------------------------------- whole tensors

/// The geometry of an MLX weight: `rows` rows of `cols` inputs, in
/// `matrices` matrices of `rows_per_matrix` rows (the last two dimensions
/// of the shape are a matrix; any before them are batch, like experts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) matrices: usize,
    pub(crate) rows_per_matrix: usize,
}

impl Geometry {
    /// The geometry of `shape` (rank 2 or more); `None` when a count does
    /// not fit usize.
    pub(crate) fn of(shape: &[u64]) -> Option<Geometry> {
        let (&cols, lead) = shape.split_last()?;
        let (&rows_per_matrix, batch) = lead.split_last()?;
        let matrices = batch.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?;
        let rows = matrices.checked_mul(rows_per_matrix)?;
        Some(Geometry {
            rows: usize::try_from(rows).ok()?,
            cols: usize::try_from(cols).ok()?,
            matrices: usize::try_from(matrices).ok()?,
            rows_per_matrix: usize::try_from(rows_per_matrix).ok()?,
        })
    }

    /// The matrix row `r` belongs to.
    pub(crate) fn matrix_of(&self, r: usize) -> usize {
        r.checked_div(self.rows_per_matrix).unwrap_or(0)
    }
}

/// Checks that a weight of `shape` can be packed with `params` (rank 2 or
/// more, the groups dividing the last dimension, whole U32 words a row)
/// and gives its geometry.
pub(crate) fn check_shape(shape: &[u64], params: &QuantParams) -> Result<Geometry, QuantError> {
    params.validate()?;
    let Some(&cols) = shape.last().filter(|_| shape.len() >= 2) else {
        return Err(QuantError::Shape(format!(
            "has shape {shape:?}: MLX quantizes weights of 2 or more dimensions"
        )));
    };
    let whole_words = cols.checked_mul(params.bits).is_some_and(|b| b % 32 == 0);
    if cols % params.group_size != 0 || !whole_words {
        return Err(QuantError::Shape(format!(
            "has {cols} inputs (shape {shape:?}): groups of {} must divide them and {} bits each fill whole U32 words",
            params.group_size, params.bits
        )));
    }
    Geometry::of(shape).ok_or_else(|| QuantError::Shape(format!("shape {shape:?} is too large")))
}

/// The shapes of the parts of a weight of `shape` quantized with `params`:
/// the U32 codes, the scales (and biases), and the global scale (the
/// leading dimensions; `[]` for a matrix); `None` when a size overflows.
pub(crate) fn part_shapes(shape: &[u64], params: &QuantParams) -> Option<[Vec<u64>; 3]> {
    let (&cols, lead) = shape.split_last()?;
    let words = cols.checked_mul(params.bits)? / 32;
    let groups = cols.checked_div(params.group_size)?;
    let with = |last: u64| lead.iter().copied().chain([last]).collect::<Vec<u64>>();
    let batch = lead.split_last()?.1.to_vec();
    Some([with(words), with(groups), batch])
}

/// A weight quantized with MLX's packing: the bytes of `<m>.weight` (U32
/// `[..., out, in * bits / 32]`), `<m>.scales` (`[..., out, in / group]`:
/// the input's dtype in affine mode, U8 otherwise), `<m>.biases` (affine
/// only; empty otherwise) and `<m>.global_scale` (nvfp4 with a global
/// scale: F32, one per matrix, shape `[...]`; empty otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlxTensor {
    /// The packed codes, as U32 bytes.
    pub weight: Vec<u8>,
    /// The scales' bytes.
    pub scales: Vec<u8>,
    /// The biases' bytes (affine mode).
    pub biases: Vec<u8>,
    /// The global scales' F32 bytes, one per matrix (nvfp4 with one).
    pub global_scale: Vec<u8>,
}

fn wrap(name: &str) -> impl Fn(QuantError) -> Error + '_ {
    move |problem| Error::Quant {
        tensor: name.to_string(),
        problem,
    }
}

/// The largest magnitude of each matrix of a weight: the global scale
/// mlx-lm gives each expert (`max(abs(w))` in the weight's dtype, as F32).
/// `row_max(r)` gives the largest magnitude of row `r`.
pub(crate) fn global_scales(
    geometry: &Geometry,
    mut row_max: impl FnMut(usize) -> Result<f32>,
) -> Result<Vec<f32>> {
    let mut out = vec![0f32; geometry.matrices];
    for r in 0..geometry.rows {
        let amax = row_max(r)?;
        if let Some(slot) = out.get_mut(geometry.matrix_of(r)) {
            *slot = slot.max(amax);
        }
    }
    Ok(out)
}

/// The largest magnitude of `values`.
pub(crate) fn abs_max(values: &[f32]) -> f32 {
    values.iter().fold(0f32, |m, w| m.max(w.abs()))
}

/// Quantizes a whole weight (`data`: the little-endian bytes of F32, F16 or
/// BF16, shape `[..., out, in]`, leading dimensions batch) as
/// `mx.quantize` does with `params` (see the module docs); with
/// `params.global_scale` (nvfp4), each matrix gets the global scale mlx-lm
/// gives an expert, its largest magnitude.
///
/// # Errors
///
/// [`Error::Quant`] naming `name`: [`QuantError::Dtype`] for a dtype other
/// than F32, F16 or BF16, [`QuantError::Shape`] or [`QuantError::Params`]
/// when `shape`, `data` and `params` do not agree, and
/// [`QuantError::NotFinite`] or an overflow variant for a weight that does
/// not quantize.
///
/// ```
/// use tensorfile::quant::{mlx_quantize, Mode, QuantParams};
/// use tensorfile::Dtype;
/// let w: Vec<f32> = (0..2 * 3 * 32).map(|i| (i % 7) as f32 - 3.0).collect();
/// let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
/// let q = mlx_quantize("experts.weight", Dtype::F32, &[2, 3, 32], &bytes, QuantParams::affine(4, 32))?;
/// assert_eq!(q.weight.len(), 2 * 3 * 4 * 4); // [2, 3, 4] U32
/// assert_eq!(q.scales.len(), 2 * 3 * 4); // [2, 3, 1] F32
/// let p = QuantParams { global_scale: true, ..QuantParams::floating(Mode::Nvfp4).unwrap() };
/// let q = mlx_quantize("experts.weight", Dtype::F32, &[2, 3, 32], &bytes, p)?;
/// assert_eq!(q.global_scale, [3f32, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
/// # Ok::<(), tensorfile::Error>(())
/// ```
pub fn quantize(
    name: &str,
    dtype: Dtype,
    shape: &[u64],
    data: &[u8],
    params: QuantParams,
) -> Result<MlxTensor> {
    let err = wrap(name);
    let Some(arith) = Arith::of(dtype) else {
        return Err(err(QuantError::Dtype {
            dtype,
            wanted: "MLX quantizes F32, F16 or BF16".into(),
        }));
    };
    let g = check_shape(shape, &params).map_err(&err)?;
    let elem = arith.size();
    let row_in = g.cols * elem;
    if Some(data.len()) != g.rows.checked_mul(row_in) {
        return Err(err(QuantError::Shape(format!(
            "holds {} bytes, not shape {shape:?} of {dtype}",
            data.len()
        ))));
    }
    if g.rows == 0 || g.cols == 0 {
        // No values, whatever the other dimensions say: empty parts, and no
        // global scales to make up for matrices without values.
        if params.global_scale && g.matrices > 0 {
            return Err(err(QuantError::Shape(format!(
                "has shape {shape:?}: matrices without values get no global scale"
            ))));
        }
        return Ok(MlxTensor {
            weight: Vec::new(),
            scales: Vec::new(),
            biases: Vec::new(),
            global_scale: Vec::new(),
        });
    }
    let group = params.group_size as usize;
    let groups = g.cols / group;
    let scale_size = if params.mode == Mode::Affine { elem } else { 1 };
    let row_out = g.cols * params.bits as usize / 8;
    // Every output is smaller than the input (at most 8 bits per element
    // plus a scale and bias per group of two or more).
    let mut out = MlxTensor {
        weight: vec![0; g.rows * row_out],
        scales: vec![0; g.rows * groups * scale_size],
        biases: vec![
            0;
            if params.mode == Mode::Affine {
                g.rows * groups * elem
            } else {
                0
            }
        ],
        global_scale: Vec::new(),
    };
    let decode = |r: usize| -> Result<Vec<f32>> {
        let mut v = vec![0f32; g.cols];
        crate::cast::decode_f32(dtype, &data[r * row_in..(r + 1) * row_in], &mut v)
            .map_err(|e| err(QuantError::Shape(e.to_string())))?;
        Ok(v)
    };
    let globals = if params.global_scale {
        let s = global_scales(&g, |r| decode(r).map(|row| abs_max(&row)))?;
        out.global_scale = s.iter().flat_map(|x| x.to_le_bytes()).collect();
        Some(s)
    } else {
        None
    };
    let mut codes = vec![0u8; g.cols];
    for r in 0..g.rows {
        let row = decode(r)?;
        let bias_span = if params.mode == Mode::Affine {
            r * groups * elem..(r + 1) * groups * elem
        } else {
            0..0
        };
        let parts = RowParts {
            codes: &mut codes,
            scales: &mut out.scales[r * groups * scale_size..(r + 1) * groups * scale_size],
            biases: &mut out.biases[bias_span],
        };
        let global = globals.as_ref().map(|s| s[g.matrix_of(r)]);
        quantize_row(&params, arith, global, &row, parts).map_err(|f| err(f.at_row(r as u64)))?;
        pack(
            params.bits as u32,
            &codes,
            &mut out.weight[r * row_out..(r + 1) * row_out],
        )
        .map_err(&err)?;
    }
    Ok(out)
}

/// [`quantize`] in affine mode only (`params.mode` must be affine).
///
/// # Errors
///
/// [`Error::Quant`] with [`QuantError::Params`] when `params.mode` is not
/// affine, then the errors of [`quantize`].
pub fn quantize_affine(
    name: &str,
    dtype: Dtype,
    shape: &[u64],
    data: &[u8],
    params: QuantParams,
) -> Result<MlxTensor> {
    if params.mode != Mode::Affine {
        return Err(wrap(name)(QuantError::Params(format!(
            "quantize_affine takes affine mode, not {} (use mlx::quantize)",
            params.mode
        ))));
    }
    quantize(name, dtype, shape, data, params)
}

#[cfg(test)]
mod e4m3_tests {
    use super::{e4m3_from_f32, e4m3_to_f32};

    // Was this function's doctest while it was public.
    #[test]
    fn e4m3_examples() {
        assert_eq!(e4m3_from_f32(1.0), 0x38);
        assert_eq!(e4m3_from_f32(463.9), 0x7E); // 448: below 464 rounds down
        assert_eq!(e4m3_from_f32(f32::INFINITY), 0x7E);
        assert_eq!(e4m3_from_f32(-0.0), 0x80);
        assert_eq!(e4m3_from_f32(2f32.powi(-10)), 0x00); // half the smallest subnormal: to even
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert!(e4m3_to_f32(0x7F).is_nan());
    }
}
