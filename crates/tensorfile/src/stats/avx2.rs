//! The passes of [`super::summary`] and [`super::histogram`] over f32
//! values, written with AVX2 intrinsics: the compiler left the portable
//! passes mostly scalar (branches and spilled lanes), and most tensors are
//! F32, F16 or BF16, which read exactly as f32.
//!
//! Each value is widened to f64 in a register and every figure that the
//! portable code takes in f64 is taken with the same f64 operations, in
//! the same order, in the same lane (element `i` in lane `i % 4`), so the
//! figures are bit for bit the portable code's (the tests check it). Only
//! the counts, exact in any order, are taken on the f32 bits, eight at a
//! time.

use std::arch::x86_64::*;

use super::lanes::{Lanes, LANES};

/// The f32 bits of infinity: finite magnitudes are below, NaN above.
const INF_BITS: i32 = 0x7F80_0000;

/// [`Lanes::pass`] over the first whole groups of eight values, continuing
/// `acc`; returns how many values it took (a multiple of eight, so that
/// the portable pass continues over the rest in the right lanes).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pass(values: &[f32], normal: f32, shift: f64, acc: &mut Lanes) -> usize {
    let n8 = values.len() / 8 * 8;
    let abs_pd = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
    let inf = _mm256_set1_pd(f64::INFINITY);
    let neg_inf = _mm256_set1_pd(f64::NEG_INFINITY);
    let shift = _mm256_set1_pd(shift);
    let abs_ps = _mm256_set1_epi32(i32::MAX);
    let inf_bits = _mm256_set1_epi32(INF_BITS);
    let normal_bits = _mm256_set1_epi32(normal.to_bits() as i32);
    let zero = _mm256_setzero_si256();
    // SAFETY (every load and store below): in bounds of arrays of LANES
    // f64 and of whole chunks of eight f32.
    let mut sum = unsafe { _mm256_loadu_pd(acc.sum.as_ptr()) };
    let mut sq = unsafe { _mm256_loadu_pd(acc.sq.as_ptr()) };
    let mut min = unsafe { _mm256_loadu_pd(acc.min.as_ptr()) };
    let mut max = unsafe { _mm256_loadu_pd(acc.max.as_ptr()) };
    let mut counts = [0u64; 4];
    // Counts in 32-bit lanes, added up before they could overflow.
    for part in values[..n8].chunks(1 << 30) {
        let (mut finite, mut nan, mut zeros, mut sub) = (zero, zero, zero, zero);
        for c in part.chunks_exact(8) {
            let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
            let bits = _mm256_and_si256(_mm256_castps_si256(v), abs_ps);
            // Masks are -1 where true: subtracting counts.
            finite = _mm256_sub_epi32(finite, _mm256_cmpgt_epi32(inf_bits, bits));
            nan = _mm256_sub_epi32(nan, _mm256_cmpgt_epi32(bits, inf_bits));
            let is_zero = _mm256_cmpeq_epi32(bits, zero);
            zeros = _mm256_sub_epi32(zeros, is_zero);
            let below = _mm256_cmpgt_epi32(normal_bits, bits);
            sub = _mm256_sub_epi32(sub, _mm256_andnot_si256(is_zero, below));
            for half in [_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)] {
                let x = _mm256_cvtps_pd(half);
                let f = _mm256_cmp_pd::<_CMP_LT_OQ>(_mm256_and_pd(x, abs_pd), inf);
                let d = _mm256_and_pd(f, _mm256_sub_pd(x, shift));
                sum = _mm256_add_pd(sum, d);
                sq = _mm256_add_pd(sq, _mm256_mul_pd(d, d));
                // min_pd(a, b) is `a < b ? a : b`, the portable update.
                min = _mm256_min_pd(_mm256_blendv_pd(inf, x, f), min);
                max = _mm256_max_pd(_mm256_blendv_pd(neg_inf, x, f), max);
            }
        }
        for (total, lanes) in counts.iter_mut().zip([finite, nan, zeros, sub]) {
            let mut l = [0u32; 8];
            unsafe { _mm256_storeu_si256(l.as_mut_ptr().cast(), lanes) };
            *total += l.iter().map(|&c| u64::from(c)).sum::<u64>();
        }
    }
    unsafe { _mm256_storeu_pd(acc.sum.as_mut_ptr(), sum) };
    unsafe { _mm256_storeu_pd(acc.sq.as_mut_ptr(), sq) };
    unsafe { _mm256_storeu_pd(acc.min.as_mut_ptr(), min) };
    unsafe { _mm256_storeu_pd(acc.max.as_mut_ptr(), max) };
    // Counts are exact as f64 far beyond a slice's values.
    let [finite, nan, zeros, sub] = counts;
    acc.finite[0] += finite as f64;
    acc.nan[0] += nan as f64;
    acc.zeros[0] += zeros as f64;
    acc.sub[0] += sub as f64;
    const _: () = assert!(LANES == 4);
    n8
}

/// The histogram's bins of the first whole groups of eight values, as the
/// portable `bins_of` takes them (the same f64 operations); returns how
/// many it took.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn bins(
    values: &[f32],
    bins: &mut [u32],
    exact: bool,
    (one, s1, s2): (f64, f64, f64),
    (half, last, past): (f64, f64, u32),
) -> usize {
    let n8 = values.len().min(bins.len()) / 8 * 8;
    let abs_ps = _mm256_set1_epi32(i32::MAX);
    let inf_bits = _mm256_set1_epi32(INF_BITS);
    let (one, s1, s2) = (_mm256_set1_pd(one), _mm256_set1_pd(s1), _mm256_set1_pd(s2));
    let (half, last) = (_mm256_set1_pd(half), _mm256_set1_pd(last));
    let zero = _mm256_setzero_pd();
    let past = _mm256_set1_epi32(past as i32);
    for (c, out) in values[..n8]
        .chunks_exact(8)
        .zip(bins[..n8].chunks_exact_mut(8))
    {
        // SAFETY: whole chunks of eight.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        let bits = _mm256_and_si256(_mm256_castps_si256(v), abs_ps);
        let finite = _mm256_cmpgt_epi32(inf_bits, bits);
        // Non-finite values as 0 (their bin is set apart below), so that
        // every conversion is in range.
        let v = _mm256_and_ps(v, _mm256_castsi256_ps(finite));
        let mut b = [_mm_setzero_si128(); 2];
        for (o, h) in b
            .iter_mut()
            .zip([_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)])
        {
            let x = _mm256_cvtps_pd(h);
            let scaled = if exact {
                _mm256_mul_pd(x, one)
            } else {
                _mm256_mul_pd(_mm256_mul_pd(x, s1), s2)
            };
            let at = _mm256_add_pd(scaled, half);
            // Clamped to [0, last] as the portable saturating cast and
            // `min` do; truncating then floors.
            let at = _mm256_min_pd(_mm256_max_pd(at, zero), last);
            *o = _mm256_cvttpd_epi32(at);
        }
        let b = _mm256_set_m128i(b[1], b[0]);
        let b = _mm256_blendv_epi8(past, b, finite);
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), b) };
    }
    n8
}

/// The first group of eight values from `at` (a multiple of eight) with a
/// magnitude of at least `bar` (compared in f64, as the portable code
/// does), or where fewer than eight are left.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn skip_below(values: &[f32], mut at: usize, bar: f64) -> usize {
    let abs_pd = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
    let bar = _mm256_set1_pd(bar);
    while let Some(c) = values.get(at..at + 8) {
        // SAFETY: a whole chunk of eight.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        let reach = |h: __m128| {
            let a = _mm256_and_pd(_mm256_cvtps_pd(h), abs_pd);
            _mm256_cmp_pd::<_CMP_GE_OQ>(a, bar)
        };
        let lo = reach(_mm256_castps256_ps128(v));
        let hi = reach(_mm256_extractf128_ps::<1>(v));
        if _mm256_movemask_pd(_mm256_or_pd(lo, hi)) != 0 {
            return at;
        }
        at += 8;
    }
    at
}
