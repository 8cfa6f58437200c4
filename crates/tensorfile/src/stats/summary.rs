//! The figures of one tensor's values, gathered block by block and
//! combined in order: counts and extremes exactly, the mean and the sum of
//! squared deviations by Chan's pairwise rule (each block's deviations are
//! taken from its own mean, in a second pass over the block while it is
//! in cache), the largest magnitudes with their indices, and a
//! [`Histogram`].

use super::histogram::Histogram;

/// Elements of the largest magnitude kept per tensor.
pub const TOP: usize = 8;

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
    pub fn add_block(&mut self, values: &[f64], base: u64, normal: Option<f64>) {
        let mut block = Summary {
            count: values.len() as u64,
            ..Summary::default()
        };
        let (mut sum, mut min, mut max) = (0.0f64, f64::INFINITY, f64::NEG_INFINITY);
        let (mut finite, mut zeros, mut nan, mut inf, mut sub) = (0u64, 0u64, 0u64, 0u64, 0u64);
        let normal = normal.unwrap_or(0.0);
        for &x in values {
            let a = x.abs();
            if a.is_finite() {
                finite += 1;
                sum += x;
                min = min.min(x);
                max = max.max(x);
                zeros += u64::from(a == 0.0);
                sub += u64::from(a < normal && a != 0.0);
            } else if x.is_nan() {
                nan += 1;
            } else {
                inf += 1;
            }
        }
        block.finite = finite;
        block.zeros = zeros;
        block.nan = nan;
        block.inf = inf;
        block.subnormal = sub;
        if finite > 0 {
            block.min = min;
            block.max = max;
            let mean = sum / finite as f64;
            block.mean = mean;
            let absmax = max.abs().max(min.abs());
            let mut m2 = 0.0;
            // The second pass, over the block in cache: deviations and the
            // candidates for the largest magnitudes.
            let floor = self.top.get(TOP - 1).map_or(0.0, |t| t.1.abs());
            for (i, &x) in values.iter().enumerate() {
                if x.is_finite() {
                    let d = x - mean;
                    m2 += d * d;
                    if x.abs() >= floor && x.abs() > 0.0 {
                        insert_top(&mut block.top, (base + i as u64, x));
                    }
                }
            }
            block.m2 = m2;
            block.histogram.add(values, absmax);
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
mod tests {
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
