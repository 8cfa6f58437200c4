//! How far two tensors' values are apart, block by block, combined in
//! order: the largest absolute and relative differences with their
//! element indices, sums for the mean absolute difference, the RMS and the
//! cosine similarity, and the elements beyond a tolerance by numpy's
//! `isclose` rule with A as the reference.

use crate::values::Value;

use super::lanes::{finite_pair, Lanes, Tolerance};

/// The pass, on AVX2 when the CPU has it (f32 pairs through
/// [`super::avx2::pass`], the same figures).
fn run_lanes<T: Value>(a: &[T], b: &[T], tol: Tolerance) -> Lanes {
    let mut acc = Lanes::default();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        let done = match (T::as_f32(a), T::as_f32(b)) {
            // SAFETY: the CPU has AVX2, checked just above.
            (Some(x), Some(y)) => unsafe { super::avx2::pass(x, y, tol, &mut acc) },
            _ => 0,
        };
        // SAFETY: as above.
        unsafe { acc.pass_avx2(&a[done..], &b[done..], tol) };
        return acc;
    }
    acc.pass(a, b, tol);
    acc
}

/// The running figures of a pair of tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    /// Values compared.
    pub count: u64,
    /// Pairs where both values are finite (the differences below are theirs).
    pub finite: u64,
    /// The largest |a - b|, and the first element where it is.
    pub max_abs: (f64, u64),
    /// The largest |a - b| / |a| over elements where a is not 0, and the
    /// first element where it is.
    pub max_rel: (f64, u64),
    /// Sum of |a - b|.
    pub sum_abs: f64,
    /// Sum of (a - b)^2.
    pub sum_sq: f64,
    /// Sum of a * b.
    pub dot: f64,
    /// Sum of a^2.
    pub norm_a: f64,
    /// Sum of b^2.
    pub norm_b: f64,
    /// Elements beyond the tolerance (NaN and infinity differences included).
    pub beyond: u64,
    /// Elements NaN in A only.
    pub nan_a: u64,
    /// Elements NaN in B only.
    pub nan_b: u64,
    /// Elements where one side is infinite and the other is not the same
    /// infinity (nor NaN).
    pub inf: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            count: 0,
            finite: 0,
            max_abs: (0.0, 0),
            max_rel: (0.0, 0),
            sum_abs: 0.0,
            sum_sq: 0.0,
            dot: 0.0,
            norm_a: 0.0,
            norm_b: 0.0,
            beyond: 0,
            nan_a: 0,
            nan_b: 0,
            inf: 0,
        }
    }
}

impl Metrics {
    /// Adds the pairs `a[i], b[i]`, element `base + i`.
    pub fn add_block<T: Value>(&mut self, a: &[T], b: &[T], base: u64, tol: Tolerance) {
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut m = Metrics {
            count: n as u64,
            ..Metrics::default()
        };
        // Branch-free over finite pairs, in LANES independent lanes (so
        // that it vectorizes; the lanes' order is fixed, and so is the
        // result). A pair with a NaN or an infinity adds 0 here.
        let acc = run_lanes(a, b, tol);
        m.finite = acc.finite.iter().sum();
        m.sum_abs = acc.sum_abs.iter().sum();
        m.sum_sq = acc.sum_sq.iter().sum();
        m.dot = acc.dot.iter().sum();
        m.norm_a = acc.norm_a.iter().sum();
        m.norm_b = acc.norm_b.iter().sum();
        m.beyond = acc.beyond.iter().sum();
        // The first element of the largest differences (found again: a
        // second pass only over this block, in cache), only when it beats
        // the figures so far (which [`Metrics::merge`] keeps on a tie).
        let pair = |i: usize| -> (f64, f64) { (a[i].into(), b[i].into()) };
        let max_abs = acc.max_abs.iter().copied().fold(0.0, f64::max);
        if max_abs > self.max_abs.0 {
            if let Some(i) = (0..n).find(|&i| {
                let (x, y) = pair(i);
                finite_pair(x, y) && (x - y).abs() == max_abs
            }) {
                m.max_abs = (max_abs, base + i as u64);
            }
        }
        let max_rel = acc.max_rel.iter().copied().fold(0.0, f64::max);
        if max_rel > self.max_rel.0 {
            if let Some(i) = (0..n).find(|&i| {
                let (x, y) = pair(i);
                finite_pair(x, y) && x != 0.0 && (x - y).abs() / x.abs() == max_rel
            }) {
                m.max_rel = (max_rel, base + i as u64);
            }
        }
        if m.finite < n as u64 {
            // NaN and infinities: few, counted one by one.
            for (&x, &y) in a.iter().zip(b) {
                let (x, y): (f64, f64) = (x.into(), y.into());
                if finite_pair(x, y) {
                    continue;
                }
                if x.is_nan() || y.is_nan() {
                    if x.is_nan() != y.is_nan() {
                        m.beyond += 1;
                        if x.is_nan() {
                            m.nan_a += 1;
                        } else {
                            m.nan_b += 1;
                        }
                    }
                } else if x != y {
                    m.beyond += 1;
                    m.inf += 1;
                }
            }
        }
        self.merge(&m);
    }

    /// Adds `other` (elements after this one's).
    pub fn merge(&mut self, other: &Metrics) {
        self.count += other.count;
        self.finite += other.finite;
        // Ties keep the first element (this one's come before).
        if other.max_abs.0 > self.max_abs.0 {
            self.max_abs = other.max_abs;
        }
        if other.max_rel.0 > self.max_rel.0 {
            self.max_rel = other.max_rel;
        }
        self.sum_abs += other.sum_abs;
        self.sum_sq += other.sum_sq;
        self.dot += other.dot;
        self.norm_a += other.norm_a;
        self.norm_b += other.norm_b;
        self.beyond += other.beyond;
        self.nan_a += other.nan_a;
        self.nan_b += other.nan_b;
        self.inf += other.inf;
    }

    /// The mean |a - b| over finite pairs (0 when none).
    pub fn mean_abs(&self) -> f64 {
        if self.finite == 0 {
            0.0
        } else {
            self.sum_abs / self.finite as f64
        }
    }

    /// The root mean square of a - b over finite pairs (0 when none).
    pub fn rms(&self) -> f64 {
        if self.finite == 0 {
            0.0
        } else {
            (self.sum_sq / self.finite as f64).sqrt()
        }
    }

    /// The cosine similarity of A and B (finite pairs): 1 when both are
    /// all zeros, `None` when only one is.
    pub fn cosine(&self) -> Option<f64> {
        match (self.norm_a > 0.0, self.norm_b > 0.0) {
            (false, false) => Some(1.0),
            (true, true) => Some(self.dot / (self.norm_a.sqrt() * self.norm_b.sqrt())),
            _ => None,
        }
    }

    /// The share of elements beyond the tolerance.
    pub fn beyond_share(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.beyond as f64 / self.count as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_pairs_give_the_figures_of_their_f64_values_bit_for_bit() {
        // The f32 pass (AVX2 where the CPU has it) against the portable
        // f64 one, on lengths around the groups of eight.
        let mixed = crate::stats::tests_support::mixed_f32;
        let tol = Tolerance {
            atol: 1e-6,
            rtol: 1e-3,
        };
        let bits = |m: &Metrics| {
            let f = [
                m.sum_abs,
                m.sum_sq,
                m.dot,
                m.norm_a,
                m.norm_b,
                m.max_abs.0,
                m.max_rel.0,
            ];
            let n = [m.count, m.finite, m.beyond, m.nan_a, m.nan_b, m.inf];
            (f.map(f64::to_bits), n, m.max_abs.1, m.max_rel.1)
        };
        for (k, n) in [0, 1, 7, 8, 9, 16, 17, 1000, 16_389]
            .into_iter()
            .enumerate()
        {
            let a = mixed(n, 2 * k as u64 + 1);
            let b: Vec<f32> = mixed(n, 2 * k as u64 + 2)
                .iter()
                .zip(&a)
                .map(|(&y, &x)| {
                    if y.to_bits() % 3 == 0 {
                        x + y * 1e-3
                    } else {
                        x
                    }
                })
                .collect();
            let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
            let (wa, wb) = (wide(&a), wide(&b));
            let (mut m32, mut m64) = (Metrics::default(), Metrics::default());
            m32.add_block(&a, &b, 0, tol);
            m64.add_block(&wa, &wb, 0, tol);
            assert_eq!(bits(&m32), bits(&m64), "{n}");
        }
    }

    #[test]
    fn figures_of_a_pair() {
        let tol = Tolerance {
            atol: 0.0,
            rtol: 0.01,
        };
        let a = [1.0, 2.0, 0.0, f64::NAN, f64::INFINITY, 4.0, f64::NAN];
        let b = [1.0, 2.1, 0.5, 1.0, f64::INFINITY, 4.0, f64::NAN];
        let mut m = Metrics::default();
        m.add_block(&a, &b, 10, tol);
        assert_eq!(
            (m.count, m.finite, m.beyond, m.nan_a, m.inf),
            (7, 4, 3, 1, 0)
        );
        assert_eq!(m.max_abs, (0.5, 12));
        assert!((m.max_rel.0 - 0.05).abs() < 1e-12 && m.max_rel.1 == 11);
        let mut split = Metrics::default();
        split.add_block(&a[..3], &b[..3], 10, tol);
        split.add_block(&a[3..], &b[3..], 13, tol);
        assert_eq!(split, m);
        assert!((m.rms() - ((0.01 + 0.25) / 4f64).sqrt()).abs() < 1e-12);
        assert!(m.cosine().unwrap() < 1.0);
    }
}
