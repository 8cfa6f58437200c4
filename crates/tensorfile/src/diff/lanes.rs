//! The independent accumulators of the pass over a block of pairs of
//! values (pair `i` in lane `i % LANES`), and the tolerance they count
//! against: what the portable pass and the AVX2 pass ([`super::avx2`])
//! share, below both.

use crate::values::Value;

/// A tolerance: element `i` is within when `|a - b| <= atol + rtol * |a|`
/// (numpy's `isclose(b, a, rtol, atol)`: A, the first input, is the
/// reference). NaN against NaN and an infinity against the same infinity
/// are within (numpy's `equal_nan=True`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Absolute.
    pub atol: f64,
    /// Relative to |a|.
    pub rtol: f64,
}

/// Whether both values are finite (a comparison of magnitudes: it
/// vectorizes).
#[inline(always)]
pub(super) fn finite_pair(x: f64, y: f64) -> bool {
    // `&`, not `&&`: no branch, so that the lanes vectorize.
    (x.abs() < f64::INFINITY) & (y.abs() < f64::INFINITY)
}

/// Independent accumulators of [`super::Metrics::add_block`].
pub(super) const LANES: usize = 8;

/// The accumulators of the pass over a block: pair `i` goes to lane
/// `i % LANES`.
#[derive(Default)]
pub(super) struct Lanes {
    pub(super) finite: [u64; LANES],
    pub(super) sum_abs: [f64; LANES],
    pub(super) sum_sq: [f64; LANES],
    pub(super) dot: [f64; LANES],
    pub(super) norm_a: [f64; LANES],
    pub(super) norm_b: [f64; LANES],
    pub(super) beyond: [u64; LANES],
    pub(super) max_abs: [f64; LANES],
    pub(super) max_rel: [f64; LANES],
}

impl Lanes {
    #[inline(always)]
    pub(super) fn step(&mut self, l: usize, x: f64, y: f64, tol: Tolerance) {
        let f = finite_pair(x, y);
        let (x, y) = if f { (x, y) } else { (0.0, 0.0) };
        let d = (x - y).abs();
        self.finite[l] += u64::from(f);
        self.sum_abs[l] += d;
        self.sum_sq[l] += d * d;
        self.dot[l] += x * y;
        self.norm_a[l] += x * x;
        self.norm_b[l] += y * y;
        self.beyond[l] += u64::from(d > tol.atol + tol.rtol * x.abs());
        self.max_abs[l] = if d > self.max_abs[l] {
            d
        } else {
            self.max_abs[l]
        };
        let rel = if x != 0.0 { d / x.abs() } else { 0.0 };
        self.max_rel[l] = if rel > self.max_rel[l] {
            rel
        } else {
            self.max_rel[l]
        };
    }

    /// The pass over a block of pairs (continuing from pairs whose number
    /// is a multiple of [`LANES`]).
    #[inline(always)]
    pub(super) fn pass<T: Value>(&mut self, a: &[T], b: &[T], tol: Tolerance) {
        let acc = self;
        let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        for (x8, y8) in (&mut ca).zip(&mut cb) {
            for l in 0..LANES {
                acc.step(l, x8[l].into(), y8[l].into(), tol);
            }
        }
        for (l, (&x, &y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
            acc.step(l, x.into(), y.into(), tol);
        }
    }

    /// [`Lanes::pass`] compiled with AVX2 enabled (the same operations in
    /// the same order: the same result).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pass_avx2<T: Value>(&mut self, a: &[T], b: &[T], tol: Tolerance) {
        self.pass(a, b, tol)
    }
}
