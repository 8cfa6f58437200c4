//! The figures of one tensor's values, gathered block by block and
//! combined in order: counts and extremes exactly, the mean and the sum of
//! squared deviations by Chan's pairwise rule (each block's deviations are
//! taken from its own mean, in a second pass over the block while it is
//! in cache), the largest magnitudes with their indices, and a
//! [`Histogram`].

use super::histogram::Histogram;
use super::lanes::{Lanes, LANES};
use crate::values::Value;

/// Elements of the largest magnitude kept per tensor.
pub(crate) const TOP: usize = 8;

/// The running figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Values seen (every one, NaN and infinities included).
    pub count: u64,
    /// Finite values.
    pub finite: u64,
    /// The smallest finite value (+inf when none).
    pub min: f64,
    /// The largest finite value (-inf when none).
    pub max: f64,
    /// The mean of the finite values.
    pub mean: f64,
    /// The sum of squared deviations from the mean (finite values).
    pub m2: f64,
    /// Values equal to zero (either sign).
    pub zeros: u64,
    /// NaN values.
    pub nan: u64,
    /// Positive and negative infinities.
    pub inf: u64,
    /// Nonzero finite values smaller in magnitude than the dtype's
    /// smallest normal value.
    pub subnormal: u64,
    /// The largest magnitudes, `(index, value)`, largest first (ties: the
    /// lower index first).
    pub top: Vec<(u64, f64)>,
    /// The distribution of finite values.
    pub histogram: Histogram,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            count: 0,
            finite: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            mean: 0.0,
            m2: 0.0,
            zeros: 0,
            nan: 0,
            inf: 0,
            subnormal: 0,
            top: Vec::new(),
            histogram: Histogram::default(),
        }
    }
}

/// The pass, on AVX2 when the CPU has it (f32 values through
/// [`super::avx2::pass`], the same figures); `normal` is 0 or a
/// dtype's smallest normal value (exact in f32 for f32 values).
fn run_lanes<T: Value>(values: &[T], normal: f64, shift: f64) -> Lanes {
    let mut acc = Lanes::new();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        let done = match T::as_f32(values) {
            // SAFETY: the CPU has AVX2, checked just above.
            Some(v) => unsafe { super::avx2::pass(v, normal as f32, shift, &mut acc) },
            None => 0,
        };
        // SAFETY: as above.
        unsafe { acc.pass_avx2(&values[done..], normal, shift) };
        return acc;
    }
    acc.pass(values, normal, shift);
    acc
}

/// The first group of eight values from `at` (a multiple of eight) that
/// may hold a magnitude of at least `bar`: `at` itself but for f32 values
/// on AVX2, which are checked eight at a time.
fn skip_below<T: Value>(values: &[T], at: usize, bar: f64) -> usize {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = T::as_f32(values) {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { super::avx2::skip_below(v, at, bar) };
        }
    }
    let _ = bar;
    at
}

/// Whether `(i, x)` ranks before `(j, y)`: larger magnitude, then lower index.
fn ranks_before(a: (u64, f64), b: (u64, f64)) -> bool {
    let (x, y) = (a.1.abs(), b.1.abs());
    x > y || (x == y && a.0 < b.0)
}

fn insert_top(top: &mut Vec<(u64, f64)>, item: (u64, f64)) {
    if top.len() == TOP && !ranks_before(item, top[TOP - 1]) {
        return;
    }
    let at = top
        .iter()
        .position(|&t| ranks_before(item, t))
        .unwrap_or(top.len());
    top.insert(at, item);
    top.truncate(TOP);
}

impl Summary {
    /// Adds a block of values whose first is element `base`; `normal` is
    /// the smallest normal value of their dtype, if it has subnormals.
    pub fn add_block<T: Value>(&mut self, values: &[T], base: u64, normal: Option<f64>) {
        let mut block = Summary {
            count: values.len() as u64,
            ..Summary::default()
        };
        let normal = normal.unwrap_or(0.0);
        // One pass for the counts, extremes and moments (about a value of
        // the block, so that the sum of squares keeps its precision).
        let shift = values
            .iter()
            .map(|&x| x.into())
            .find(|x: &f64| x.is_finite())
            .unwrap_or(0.0);
        let acc = run_lanes(values, normal, shift);
        let count = |c: &[f64; LANES]| c.iter().sum::<f64>() as u64;
        let (finite, nan) = (count(&acc.finite), count(&acc.nan));
        block.finite = finite;
        block.zeros = count(&acc.zeros);
        block.nan = nan;
        block.inf = values.len() as u64 - finite - nan;
        block.subnormal = count(&acc.sub);
        if finite > 0 {
            let min = acc.min.iter().copied().fold(f64::INFINITY, f64::min);
            let max = acc.max.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            block.min = min;
            block.max = max;
            let n = finite as f64;
            let (sum, sq) = (acc.sum.iter().sum::<f64>(), acc.sq.iter().sum::<f64>());
            block.mean = shift + sum / n;
            block.m2 = (sq - sum * sum / n).max(0.0);
            // The largest magnitudes: only a block that reaches the ones
            // kept so far has candidates.
            let absmax = max.abs().max(min.abs());
            let floor = self.top.get(TOP - 1).map_or(0.0, |t| t.1.abs());
            if absmax >= floor && absmax > 0.0 {
                let mut bar = floor;
                let mut at = 0;
                while at < values.len() {
                    // Groups of eight below the bar are passed over at once
                    // (the bar only rises: none of them would be taken).
                    let from = skip_below(values, at, bar);
                    let to = (from + 8).min(values.len());
                    for (i, &x) in values.iter().enumerate().take(to).skip(from) {
                        let x: f64 = x.into();
                        let a = x.abs();
                        if a >= bar && a > 0.0 && a.is_finite() {
                            insert_top(&mut block.top, (base + i as u64, x));
                            if block.top.len() == TOP {
                                bar = bar.max(block.top[TOP - 1].1.abs());
                            }
                        }
                    }
                    at = to;
                }
            }
            // Counted straight into this one's bins (exact, in any order).
            self.merge(&block);
            self.histogram.add(values, absmax);
            return;
        }
        self.merge(&block);
    }

    /// Adds `other` (values that come after this one's).
    pub fn merge(&mut self, other: &Summary) {
        if other.finite > 0 {
            let (n1, n2) = (self.finite as f64, other.finite as f64);
            let n = n1 + n2;
            let delta = other.mean - self.mean;
            self.mean += delta * n2 / n;
            self.m2 += other.m2 + delta * delta * n1 * n2 / n;
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        self.count += other.count;
        self.finite += other.finite;
        self.zeros += other.zeros;
        self.nan += other.nan;
        self.inf += other.inf;
        self.subnormal += other.subnormal;
        for &t in &other.top {
            insert_top(&mut self.top, t);
        }
        self.histogram.merge(&other.histogram);
    }

    /// The (population) standard deviation of the finite values.
    pub fn std(&self) -> f64 {
        if self.finite == 0 {
            return f64::NAN;
        }
        (self.m2 / self.finite as f64).sqrt()
    }

    /// The largest finite magnitude (0 when none).
    pub fn absmax(&self) -> f64 {
        if self.finite == 0 {
            return 0.0;
        }
        self.max.abs().max(self.min.abs())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn blocks_combine_to_the_figures_of_the_whole() {
        let values: Vec<f64> = (0..10_000)
            .map(|i| ((i * 7919) % 1000) as f64 / 100.0 - 3.0)
            .collect();
        let mut whole = Summary::default();
        whole.add_block(&values, 0, None);
        let mut parts = Summary::default();
        for (k, c) in values.chunks(999).enumerate() {
            parts.add_block(c, (k * 999) as u64, None);
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        for s in [&whole, &parts] {
            assert!((s.mean - mean).abs() < 1e-12);
            assert!((s.std() - var.sqrt()).abs() < 1e-12);
            assert_eq!((s.min, s.max, s.finite), (-3.0, 6.99, 10_000));
        }
        assert_eq!(whole.top, parts.top);
        assert_eq!(whole.histogram, parts.histogram);
        // 6.99 appears 10 times; the lowest indices come first.
        assert_eq!(whole.top[0].1, 6.99);
        assert!(whole.top.windows(2).all(|w| w[0].0 < w[1].0));
    }

    /// Values of every kind (NaN, infinities, zeros of both signs,
    /// subnormals, magnitudes near the extremes) in a fixed mix.
    pub(crate) fn mixed_f32(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = tensorfile_testkit::Rng::new(seed);
        (0..n)
            .map(|_| {
                let x = rng.next_u64();
                let r = (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                match x % 97 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    3 => 0.0,
                    4 => -0.0,
                    5 => 1e-40 * r,
                    6 => 3e38 * r,
                    _ => r * 0.05,
                }
            })
            .collect()
    }

    #[test]
    fn f32_values_give_the_figures_of_their_f64_values_bit_for_bit() {
        // The f32 passes (AVX2 where the CPU has it) against the portable
        // f64 ones, on lengths around the groups of eight and a block.
        let bits = |s: &Summary| {
            let top: Vec<(u64, u64)> = s.top.iter().map(|&(i, x)| (i, x.to_bits())).collect();
            let f = [s.min, s.max, s.mean, s.m2].map(f64::to_bits);
            let n = [s.count, s.finite, s.zeros, s.nan, s.inf, s.subnormal];
            (f, n, top, s.histogram.clone())
        };
        let normal = Some(f64::from(f32::MIN_POSITIVE));
        for (k, n) in [0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 1000, 16_389]
            .into_iter()
            .enumerate()
        {
            let v = mixed_f32(n, k as u64 + 1);
            let mut only_positive = v.clone();
            only_positive.iter_mut().for_each(|x| *x = x.abs());
            for v in [v, only_positive] {
                let wide: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
                let (mut a, mut b) = (Summary::default(), Summary::default());
                for (c, (p, q)) in v.chunks(5000).zip(wide.chunks(5000)).enumerate() {
                    a.add_block(p, c as u64 * 5000, normal);
                    b.add_block(q, c as u64 * 5000, normal);
                }
                assert_eq!(bits(&a), bits(&b), "{n}");
            }
        }
    }

    #[test]
    fn specials_are_counted_apart() {
        let mut s = Summary::default();
        let v = [
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            1e-40,
            1.0,
        ];
        s.add_block(&v, 0, Some(f64::from(f32::MIN_POSITIVE)));
        assert_eq!(
            (s.count, s.finite, s.zeros, s.nan, s.inf, s.subnormal),
            (7, 4, 2, 1, 2, 1)
        );
        assert_eq!(s.absmax(), 1.0);
        assert_eq!(s.top[0], (6, 1.0));
    }
}
