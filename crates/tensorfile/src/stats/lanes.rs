//! The independent accumulators of the pass over a block of values
//! (element `i` in lane `i % LANES`): what the portable pass and the AVX2
//! pass ([`super::avx2`]) share, below both.

use crate::values::Value;

/// Independent accumulators of the pass over a block (four: one AVX2
/// register each, eight accumulators in registers).
pub(super) const LANES: usize = 4;

/// The accumulators of the pass over a block: element `i` goes to lane
/// `i % LANES`.
pub(super) struct Lanes {
    /// Sums of `x - shift` and of its square (the shifted-data rule: the
    /// shift is a value of the block, so the sums stay small).
    pub(super) sum: [f64; LANES],
    pub(super) sq: [f64; LANES],
    pub(super) min: [f64; LANES],
    pub(super) max: [f64; LANES],
    /// Counts, as f64 (exact far beyond a block's values) so that every
    /// lane operation has the same width and the loop vectorizes.
    pub(super) finite: [f64; LANES],
    pub(super) nan: [f64; LANES],
    pub(super) zeros: [f64; LANES],
    pub(super) sub: [f64; LANES],
}

impl Lanes {
    pub(super) fn new() -> Lanes {
        Lanes {
            sum: [0.0; LANES],
            sq: [0.0; LANES],
            min: [f64::INFINITY; LANES],
            max: [f64::NEG_INFINITY; LANES],
            finite: [0.0; LANES],
            nan: [0.0; LANES],
            zeros: [0.0; LANES],
            sub: [0.0; LANES],
        }
    }

    /// The pass over a block (continuing from values whose number is a
    /// multiple of [`LANES`]), branch-free in independent lanes on local
    /// arrays (what the vectorizer takes).
    #[inline(always)]
    pub(super) fn pass<T: Value>(&mut self, values: &[T], normal: f64, shift: f64) {
        let (mut sum, mut sq, mut min, mut max) = (self.sum, self.sq, self.min, self.max);
        let (mut finite, mut nan) = (self.finite, self.nan);
        let (mut zeros, mut sub) = (self.zeros, self.sub);
        let mut step = |l: usize, x: f64| {
            // A comparison of magnitudes (false for NaN): it vectorizes.
            let a = x.abs();
            let f = a < f64::INFINITY;
            let d = if f { x - shift } else { 0.0 };
            sum[l] += d;
            sq[l] += d * d;
            // `&`, not `&&`: no branch, so that the lanes vectorize.
            min[l] = if f & (x < min[l]) { x } else { min[l] };
            max[l] = if f & (x > max[l]) { x } else { max[l] };
            finite[l] += if f { 1.0 } else { 0.0 };
            nan[l] += if a.is_nan() { 1.0 } else { 0.0 };
            zeros[l] += if a == 0.0 { 1.0 } else { 0.0 };
            sub[l] += if (a < normal) & (a != 0.0) { 1.0 } else { 0.0 };
        };
        let mut chunks = values.chunks_exact(LANES);
        for c in &mut chunks {
            for (l, &x) in c.iter().enumerate() {
                step(l, x.into());
            }
        }
        for (l, &x) in chunks.remainder().iter().enumerate() {
            step(l, x.into());
        }
        *self = Lanes {
            sum,
            sq,
            min,
            max,
            finite,
            nan,
            zeros,
            sub,
        };
    }

    /// [`Lanes::pass`] compiled with AVX2 enabled (the same operations in
    /// the same order: the same result).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pass_avx2<T: Value>(&mut self, values: &[T], normal: f64, shift: f64) {
        self.pass(values, normal, shift)
    }
}
