//! The pass of [`super::metrics`] over pairs of f32 values, written with
//! AVX2 intrinsics (the compiler left the portable pass's eight lanes of
//! nine accumulators partly scalar, spilled to the stack).
//!
//! Each value is widened to f64 in a register and the sums are taken with
//! the portable pass's f64 operations, in the same order and the same
//! lanes (element `i` in lane `i % 8`), so every figure is bit for bit the
//! portable one (the tests check it). The counts and the largest
//! differences do not depend on the order: they are taken four lanes at a
//! time.

use std::arch::x86_64::*;

use super::lanes::{Lanes, Tolerance, LANES};

/// [`Lanes::pass`] over the first whole groups of eight pairs, continuing
/// `acc`; returns how many pairs it took (a multiple of eight, so that the
/// portable pass continues over the rest in the right lanes).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn pass(a: &[f32], b: &[f32], tol: Tolerance, acc: &mut Lanes) -> usize {
    const _: () = assert!(LANES == 8);
    let n8 = a.len().min(b.len()) / 8 * 8;
    let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
    let inf = _mm256_set1_pd(f64::INFINITY);
    let (atol, rtol) = (_mm256_set1_pd(tol.atol), _mm256_set1_pd(tol.rtol));
    let zero = _mm256_setzero_pd();
    // SAFETY (every load and store below): in bounds of arrays of LANES
    // f64 and of whole chunks of eight f32.
    let load = |v: &[f64; LANES]| unsafe {
        [
            _mm256_loadu_pd(v.as_ptr()),
            _mm256_loadu_pd(v.as_ptr().add(4)),
        ]
    };
    let mut sum_abs = load(&acc.sum_abs);
    let mut sum_sq = load(&acc.sum_sq);
    let mut dot = load(&acc.dot);
    let mut norm_a = load(&acc.norm_a);
    let mut norm_b = load(&acc.norm_b);
    let (mut finite, mut beyond) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let (mut max_abs, mut max_rel) = (zero, zero);
    for (ca, cb) in a[..n8].chunks_exact(8).zip(b[..n8].chunks_exact(8)) {
        let va = unsafe { _mm256_loadu_ps(ca.as_ptr()) };
        let vb = unsafe { _mm256_loadu_ps(cb.as_ptr()) };
        let halves = [
            (_mm256_castps256_ps128(va), _mm256_castps256_ps128(vb)),
            (
                _mm256_extractf128_ps::<1>(va),
                _mm256_extractf128_ps::<1>(vb),
            ),
        ];
        for (h, (xa, xb)) in halves.into_iter().enumerate() {
            let (x, y) = (_mm256_cvtps_pd(xa), _mm256_cvtps_pd(xb));
            let fx = _mm256_cmp_pd::<_CMP_LT_OQ>(_mm256_and_pd(x, abs), inf);
            let fy = _mm256_cmp_pd::<_CMP_LT_OQ>(_mm256_and_pd(y, abs), inf);
            let f = _mm256_and_pd(fx, fy);
            // A pair with a NaN or an infinity counts as (0, 0).
            let (x, y) = (_mm256_and_pd(f, x), _mm256_and_pd(f, y));
            let d = _mm256_and_pd(_mm256_sub_pd(x, y), abs);
            let ax = _mm256_and_pd(x, abs);
            finite = _mm256_sub_epi64(finite, _mm256_castpd_si256(f));
            sum_abs[h] = _mm256_add_pd(sum_abs[h], d);
            sum_sq[h] = _mm256_add_pd(sum_sq[h], _mm256_mul_pd(d, d));
            dot[h] = _mm256_add_pd(dot[h], _mm256_mul_pd(x, y));
            norm_a[h] = _mm256_add_pd(norm_a[h], _mm256_mul_pd(x, x));
            norm_b[h] = _mm256_add_pd(norm_b[h], _mm256_mul_pd(y, y));
            let bound = _mm256_add_pd(atol, _mm256_mul_pd(rtol, ax));
            let out = _mm256_cmp_pd::<_CMP_GT_OQ>(d, bound);
            beyond = _mm256_sub_epi64(beyond, _mm256_castpd_si256(out));
            // max_pd(a, b) is `a > b ? a : b`, the portable update.
            max_abs = _mm256_max_pd(d, max_abs);
            let nonzero = _mm256_cmp_pd::<_CMP_NEQ_OQ>(ax, zero);
            let rel = _mm256_and_pd(nonzero, _mm256_div_pd(d, ax));
            max_rel = _mm256_max_pd(rel, max_rel);
        }
    }
    let store = |v: &mut [f64; LANES], r: [__m256d; 2]| unsafe {
        _mm256_storeu_pd(v.as_mut_ptr(), r[0]);
        _mm256_storeu_pd(v.as_mut_ptr().add(4), r[1]);
    };
    store(&mut acc.sum_abs, sum_abs);
    store(&mut acc.sum_sq, sum_sq);
    store(&mut acc.dot, dot);
    store(&mut acc.norm_a, norm_a);
    store(&mut acc.norm_b, norm_b);
    let mut lanes = [0u64; 4];
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), finite) };
    acc.finite[0] += lanes.iter().sum::<u64>();
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), beyond) };
    acc.beyond[0] += lanes.iter().sum::<u64>();
    let mut m = [0f64; 4];
    unsafe { _mm256_storeu_pd(m.as_mut_ptr(), max_abs) };
    for (l, x) in acc.max_abs.iter_mut().zip(m) {
        *l = l.max(x);
    }
    unsafe { _mm256_storeu_pd(m.as_mut_ptr(), max_rel) };
    for (l, x) in acc.max_rel.iter_mut().zip(m) {
        *l = l.max(x);
    }
    n8
}
