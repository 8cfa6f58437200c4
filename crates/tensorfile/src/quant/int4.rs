//! int4-g\<group\>-sym: symmetric 4-bit weights with one F16 scale per
//! group of a row.
//!
//! For each group: `scale = absmax / 7` computed in f32 and rounded to F16;
//! `q = clip(round_half_even(w / f32(scale)), -8, 7)`, 0 where the scale is
//! 0; the value read back is `q * f32(scale)` (exact in f32).
//!
//! ```
//! use tensorfile::quant::{int4_dequantize, int4_quantize};
//! use tensorfile::Dtype;
//! let w: Vec<f32> = (0..8).map(|i| i as f32 - 3.5).collect();
//! let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
//! let q = int4_quantize("w", Dtype::F32, &[1, 8], &bytes, 8)?;
//! assert_eq!(q.qweight.len(), 4);
//! let back = int4_dequantize("w", &q.qweight, &q.scales, &[1, 8], 8)?;
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
    NotFinite {
        col: usize,
        value: f32,
    },
    ScaleOverflow {
        group: usize,
        scale: f32,
    },
    /// MLX affine: the group's parameters dequantize to infinity or NaN.
    RangeOverflow {
        group: usize,
    },
    /// MLX mxfp4/mxfp8: the group's E8M0 exponent is below -127.
    ScaleOutOfRange {
        group: usize,
        exponent: i32,
    },
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
            RowFault::RangeOverflow { group } => QuantError::RangeOverflow {
                row,
                group: group as u64,
            },
            RowFault::ScaleOutOfRange { group, exponent } => QuantError::ScaleOutOfRange {
                row,
                group: group as u64,
                exponent,
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
/// On CPUs with AVX2 and F16C, groups of a multiple of 32 go to the
/// intrinsics kernel in [`x86`]; other groups on AVX2 CPUs to the portable
/// loop compiled for AVX2; elsewhere to the portable loop (SSE2, as in the
/// casts). All three give the same bytes.
pub(crate) fn quantize_row(
    row: &[f32],
    group: usize,
    scales: &mut [f16],
    codes: &mut [u8],
    packed: &mut [u8],
) -> Result<(), RowFault> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        if std::arch::is_x86_feature_detected!("f16c")
            && group != 0
            && group.is_multiple_of(x86::BLOCK)
            && packed.len() * 2 == row.len()
            && scales.len() * group == row.len()
        {
            // SAFETY: the CPU has AVX2 and F16C, checked just above; the
            // lengths are the kernel's, checked with the group's multiple.
            return unsafe { x86::quantize_row(row, group, scales, packed) };
        }
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { quantize_row_avx2(row, group, scales, codes, packed) };
    }
    quantize_row_portable(row, group, scales, codes, packed)
}

/// The int4 row kernel in AVX2 intrinsics, for groups of a multiple of 32.
///
/// Compiled code of the portable loop spent most of its time turning 32-bit
/// lanes into 4-bit codes one vector at a time and packing nibbles in a
/// second pass. Here 32 codes are narrowed with saturating packs, clipped
/// as bytes and paired into nibbles in registers. The arithmetic is the
/// rule's: a true division by the F16 scale and a conversion that rounds
/// half to even (the default rounding mode), so the bytes are the same.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{group_scale, RowFault};

    /// Values per step: four vectors of eight.
    pub(super) const BLOCK: usize = 32;

    /// Quantizes one row as [`super::quantize_row`] does.
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C. `group` must be a non-zero
    /// multiple of [`BLOCK`] that divides `row.len()`; `scales` must hold
    /// `row.len() / group` values and `packed` `row.len() / 2` bytes.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn quantize_row(
        row: &[f32],
        group: usize,
        scales: &mut [f16],
        packed: &mut [u8],
    ) -> Result<(), RowFault> {
        let low = _mm256_set1_epi16(0x000F);
        let high = _mm256_set1_epi16(0x00F0);
        let (min, max) = (_mm256_set1_epi8(-8), _mm256_set1_epi8(7));
        let magnitude = _mm256_set1_epi32(0x7FFF_FFFF);
        let groups = row
            .chunks_exact(group)
            .zip(packed.chunks_exact_mut(group / 2));
        for (i, ((g, p), s)) in groups.zip(scales.iter_mut()).enumerate() {
            // The absmax as in `group_scale`: an integer max of the bits
            // with the sign cleared, which also catches NaN and infinity.
            let mut top = _mm256_setzero_si256();
            for w in g.chunks_exact(8) {
                // SAFETY: `w` holds 8 values.
                let w = unsafe { _mm256_loadu_si256(w.as_ptr().cast()) };
                top = _mm256_max_epi32(top, _mm256_and_si256(w, magnitude));
            }
            let top = _mm_max_epi32(
                _mm256_castsi256_si128(top),
                _mm256_extracti128_si256(top, 1),
            );
            let top = _mm_max_epi32(top, _mm_shuffle_epi32(top, 0b01_00_11_10));
            let top = _mm_max_epi32(top, _mm_shuffle_epi32(top, 0b10_11_00_01));
            let absmax = _mm_cvtsi128_si32(top);
            // The F16C conversion rounds to nearest even as `f16::from_f32`
            // does, without a call per group.
            let half = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(
                f32::from_bits(absmax as u32) / 7.0,
            ));
            let bits = _mm_extract_epi16::<0>(half) as u16;
            if absmax >= 0x7F80_0000 || bits & 0x7FFF >= 0x7C00 {
                // Not finite, or the scale overflows: the portable code
                // finds which value, or the scale, for the error.
                group_scale(g, i * group, i)?;
            }
            *s = f16::from_bits(bits);
            let scale = _mm_cvtss_f32(_mm_cvtph_ps(half));
            if scale == 0.0 {
                p.fill(0);
                continue;
            }
            let divisor = _mm256_set1_ps(scale);
            for (w, out) in g.chunks_exact(BLOCK).zip(p.chunks_exact_mut(BLOCK / 2)) {
                let w = w.as_ptr();
                // |w / scale| is at most about 10.5 (the F16 rounding of a
                // tiny scale), so the saturating packs keep every value and
                // clipping the bytes equals clipping before rounding.
                // SAFETY: `w` holds BLOCK = 4 * 8 values and k < 4.
                let q = |k: usize| unsafe {
                    _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(w.add(8 * k)), divisor))
                };
                let words = (
                    _mm256_packs_epi32(q(0), q(1)),
                    _mm256_packs_epi32(q(2), q(3)),
                );
                // Per 128-bit half: values 0-3 of each vector, then 4-7.
                let bytes = _mm256_packs_epi16(words.0, words.1);
                let bytes = _mm256_min_epi8(_mm256_max_epi8(bytes, min), max);
                // Each 16-bit lane holds an (even, odd) pair: low nibble from
                // the even byte, high nibble from the odd one.
                let pairs = _mm256_or_si256(
                    _mm256_and_si256(bytes, low),
                    _mm256_and_si256(_mm256_srli_epi16(bytes, 4), high),
                );
                let pairs = _mm256_packus_epi16(pairs, pairs);
                // Interleave the halves' 16-bit units back into row order.
                let ordered = _mm_unpacklo_epi16(
                    _mm256_castsi256_si128(pairs),
                    _mm256_extracti128_si256(pairs, 1),
                );
                // SAFETY: `out` holds BLOCK / 2 = 16 bytes.
                unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), ordered) };
            }
        }
        Ok(())
    }
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
    crate::bits::pack(4, codes, packed);
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
    if group == 0 || !group.is_multiple_of(2) || cols % group != 0 {
        return Err(QuantError::Shape(format!(
            "has {cols} inputs (shape {shape:?}), which groups of {group} do not divide"
        )));
    }
    let rows = usize::try_from(rows).map_err(|_| QuantError::Shape("too many rows".into()))?;
    let cols = usize::try_from(cols).map_err(|_| QuantError::Shape("too many columns".into()))?;
    Ok((rows, cols))
}

/// Whether int4 takes weights of this dtype: F32, F16 and BF16.
pub(crate) fn accepts(dtype: Dtype) -> bool {
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
///
/// # Errors
///
/// [`Error::Quant`] naming `name`: [`QuantError::Dtype`] for a dtype other
/// than F32, F16 or BF16, [`QuantError::Shape`] when `shape` is not
/// `[out, in]` with `in` a multiple of `group` or `data` is not its length,
/// and [`QuantError::NotFinite`] or [`QuantError::ScaleOverflow`] for a
/// weight that does not quantize.
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
///
/// # Errors
///
/// [`Error::Quant`] naming `name`: [`QuantError::Shape`] for a bad shape or
/// group, [`QuantError::Layout`] when the qweight and scales lengths do not
/// make `shape`.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows that exercise the kernels' edge cases: every magnitude from
    /// F16-subnormal scales to overflowing ones, exact ties (multiples of
    /// half a step), all-zero groups, and a non-finite value somewhere.
    fn rows(cols: usize) -> Vec<Vec<f32>> {
        let mut rng = tensorfile_testkit::Rng::new(0x9E37_79B9_7F4A_7C15);
        let mut next = move || rng.next_u64();
        let mut rows = Vec::new();
        for exp in -40..24 {
            let mag = 2f32.powi(exp);
            let noise: Vec<f32> = (0..cols)
                .map(|_| ((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * mag)
                .collect();
            // Ties: k / 2 * scale for scale = absmax / 7 exactly in F16.
            let scale = f32::from(f16::from_f32(mag));
            let ties: Vec<f32> = (0..cols)
                .map(|i| match i % 8 {
                    0 => 7.0 * scale,
                    k => (k as f32 - 4.5) * scale,
                })
                .collect();
            // One ulp either side of each tie (zero, from a scale that
            // underflows F16, stays).
            let ulp = |t: &f32, up: bool| match (*t == 0.0, up) {
                (true, _) => *t,
                (false, true) => f32::from_bits(t.to_bits() + 1),
                (false, false) => f32::from_bits(t.to_bits() - 1),
            };
            let below: Vec<f32> = ties.iter().map(|t| ulp(t, false)).collect();
            let above: Vec<f32> = ties.iter().map(|t| ulp(t, true)).collect();
            rows.extend([noise, ties, below, above]);
        }
        let mut zeros = vec![0.0; cols];
        zeros[cols - 1] = 1e-30; // a scale that rounds to 0
        rows.push(zeros);
        for bad in [f32::NAN, f32::INFINITY, -f32::INFINITY, 7.0 * 65520.0] {
            let mut row = rows[40].clone();
            row[cols / 2 + 3] = bad;
            rows.push(row);
        }
        rows
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_x86_kernel_matches_the_portable_loop() {
        if !(std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c"))
        {
            return; // nothing to compare on this CPU
        }
        for group in [32, 64, 96, 128] {
            let cols = 384;
            for row in rows(cols) {
                let mut expected = (vec![f16::ZERO; cols / group], vec![0; cols / 2]);
                let mut codes = vec![0; cols];
                let want = quantize_row_portable(
                    &row,
                    group,
                    &mut expected.0,
                    &mut codes,
                    &mut expected.1,
                );
                let mut got = (vec![f16::ZERO; cols / group], vec![0; cols / 2]);
                // SAFETY: AVX2 and F16C were detected; the lengths are the
                // kernel's.
                let result = unsafe { x86::quantize_row(&row, group, &mut got.0, &mut got.1) };
                // Debug text: a NaN in the fault compares unequal to itself.
                assert_eq!(format!("{result:?}"), format!("{want:?}"), "group {group}");
                if want.is_ok() {
                    assert_eq!(got, expected, "group {group}, row {row:?}");
                }
            }
        }
    }
}
