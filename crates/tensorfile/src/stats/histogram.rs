//! A histogram that merges exactly: [`BINS`] equal bins over `[-2^k, 2^k)`,
//! `k` the smallest power of two above the values' largest magnitude.
//! Merging a histogram into one of a larger `k` adds each of its bins to
//! the bin that contains it (bins of a range `2^j` times larger are `2^j`
//! of the smaller's, aligned at 0), so blocks are counted separately and
//! combined in any order with the same result, in one pass over the data.

/// Bins of the fine histogram (a power of two).
pub const BINS: usize = 1024;
const HALF: usize = BINS / 2;
const HALF_LOG2: i32 = 9;

use crate::values::Value;

/// `k` for an empty histogram or one of zeros only: below every other.
const NONE: i32 = i32::MIN;

/// Counts of finite values in [`BINS`] bins over `[-2^k, 2^k)` (the bins
/// are allocated at the first value counted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Histogram {
    k: i32,
    counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            k: NONE,
            counts: Vec::new(),
        }
    }
}

/// The exponent `k` whose range `[-2^k, 2^k)` holds `absmax` (finite).
fn exponent_for(absmax: f64) -> i32 {
    if absmax == 0.0 || !absmax.is_finite() {
        return NONE;
    }
    // 2^(e-1) <= absmax < 2^e, from the bits (subnormals included).
    let (mut m, mut e) = (absmax, 0i32);
    if m < f64::MIN_POSITIVE {
        m *= 2f64.powi(64);
        e -= 64;
    }
    let bits = m.to_bits();
    e + ((bits >> 52) & 0x7FF) as i32 - 1022
}

/// The bin of each value (`BINS` for NaN and infinities), with `one` the
/// scale (a power of two), or `s1 * s2` in two exact steps when `one` is
/// not a normal number.
#[inline(always)]
fn bins_of_portable<T: Value>(
    values: &[T],
    bins: &mut [u32],
    exact: bool,
    (one, s1, s2): (f64, f64, f64),
) {
    for (b, &x) in bins.iter_mut().zip(values) {
        let x: f64 = x.into();
        let at = if exact { x * one } else { x * s1 * s2 } + HALF as f64;
        // In (0, BINS) for a finite value below 2^k: truncating floors.
        let bin = (at as u32).min(BINS as u32 - 1);
        *b = if x.abs() < f64::INFINITY {
            bin
        } else {
            BINS as u32
        };
    }
}

/// [`bins_of_portable`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bins_of_avx2<T: Value>(
    values: &[T],
    bins: &mut [u32],
    exact: bool,
    scale: (f64, f64, f64),
) {
    bins_of_portable(values, bins, exact, scale)
}

fn bins_of<T: Value>(values: &[T], bins: &mut [u32], exact: bool, scale: (f64, f64, f64)) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        let bounds = (HALF as f64, (BINS - 1) as f64, BINS as u32);
        let done = match T::as_f32(values) {
            // SAFETY: the CPU has AVX2, checked just above.
            Some(v) => unsafe { super::avx2::bins(v, bins, exact, scale, bounds) },
            None => 0,
        };
        // SAFETY: as above.
        return unsafe { bins_of_avx2(&values[done..], &mut bins[done..], exact, scale) };
    }
    bins_of_portable(values, bins, exact, scale)
}

/// `x * 2^n`, exactly, for any `n` (in steps that cannot overflow).
fn scale(mut x: f64, mut n: i32) -> f64 {
    while n > 1000 {
        x *= 2f64.powi(1000);
        n -= 1000;
    }
    while n < -1000 {
        x *= 2f64.powi(-1000);
        n += 1000;
    }
    x * 2f64.powi(n)
}

impl Histogram {
    /// Counts the finite values of `values`, whose largest finite
    /// magnitude is `absmax`.
    pub fn add<T: Value>(&mut self, values: &[T], absmax: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BINS];
        }
        let k = exponent_for(absmax);
        if k > self.k {
            self.widen(k);
        }
        // bin = floor(x / 2^(k+1) * BINS) + HALF = floor(x * 2^(HALF_LOG2 - k) + HALF):
        // the sum is in (0, BINS) for |x| < 2^k, so truncating is flooring.
        let (n1, n2) = if self.k == NONE {
            (0, 0)
        } else {
            let n = HALF_LOG2 - self.k;
            (n / 2, n - n / 2)
        };
        let (s1, s2) = (scale(1.0, n1), scale(1.0, n2));
        let one = s1 * s2;
        // The bins of a piece of values first (a loop that vectorizes;
        // NaN and infinities go to a bin past the end), then the counts in
        // four sets of bins taken in turn, so that runs of values in the
        // same bin do not wait on each other's increments.
        const PIECE: usize = 1024;
        let mut local = vec![[0u32; BINS + 1]; 4];
        let mut bins = [0u32; PIECE];
        let exact = one.is_normal();
        for piece in values.chunks(PIECE) {
            let bins = &mut bins[..piece.len()];
            bins_of(piece, bins, exact, (one, s1, s2));
            let mut quads = bins.chunks_exact(4);
            for q in &mut quads {
                for (j, &b) in q.iter().enumerate() {
                    local[j][b as usize] += 1;
                }
            }
            for &b in quads.remainder() {
                local[0][b as usize] += 1;
            }
        }
        for (i, c) in self.counts.iter_mut().enumerate() {
            *c += local.iter().map(|l| u64::from(l[i])).sum::<u64>();
        }
    }

    /// Where bin `i` of a histogram of exponent `k` goes in one of
    /// exponent `k + shift`.
    fn rebin(i: usize, shift: u32) -> usize {
        if shift >= HALF_LOG2 as u32 {
            if i < HALF {
                HALF - 1
            } else {
                HALF
            }
        } else {
            HALF - (HALF >> shift) + (i >> shift)
        }
    }

    /// Re-bins into the range of exponent `k` (larger than the current).
    fn widen(&mut self, k: i32) {
        if self.k == NONE {
            // Only zeros (in the middle bin, at 0) so far.
            self.k = k;
            return;
        }
        let shift = (k - self.k) as u32;
        let mut counts = vec![0u64; BINS];
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 {
                counts[Histogram::rebin(i, shift)] += c;
            }
        }
        self.counts = counts;
        self.k = k;
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &Histogram) {
        if other.counts.is_empty() {
            return;
        }
        if self.counts.is_empty() {
            *self = other.clone();
            return;
        }
        if other.k > self.k {
            self.widen(other.k);
        }
        if other.k == self.k || other.k == NONE {
            // The same bins (or zeros only, in the middle bin of any range).
            for (a, b) in self.counts.iter_mut().zip(&other.counts) {
                *a += b;
            }
            return;
        }
        let shift = (self.k - other.k) as u32;
        for (i, &c) in other.counts.iter().enumerate() {
            if c > 0 {
                self.counts[Histogram::rebin(i, shift)] += c;
            }
        }
    }

    /// The fine counts and the range they cover: `(lo, hi, counts)`, bins
    /// of width `(hi - lo) / counts.len()`.
    pub fn fine(&self) -> (f64, f64, &[u64]) {
        if self.k == NONE {
            // Zeros only: the middle bins of a unit range.
            return (-1.0, 1.0, &self.counts);
        }
        // 2^1024 (F64 values near the largest) is shown as the largest f64.
        let top = scale(1.0, self.k).min(f64::MAX);
        (-top, top, &self.counts)
    }

    /// At most `bins` bins over the occupied part of the range (from the
    /// first nonzero fine bin to the last), adjacent fine bins added up:
    /// `(lo, hi, counts)`, empty when nothing was counted.
    pub fn coarse(&self, bins: usize) -> (f64, f64, Vec<u64>) {
        let (lo, hi, counts) = self.fine();
        if counts.is_empty() {
            return (0.0, 0.0, Vec::new());
        }
        let (Some(first), Some(last)) = (
            counts.iter().position(|&c| c > 0),
            counts.iter().rposition(|&c| c > 0),
        ) else {
            return (0.0, 0.0, Vec::new());
        };
        let width = (hi - lo) / BINS as f64;
        let span = last - first + 1;
        let per = span.div_ceil(bins.max(1));
        let out: Vec<u64> = counts[first..=last]
            .chunks(per)
            .map(|c| c.iter().sum())
            .collect();
        let start = lo + first as f64 * width;
        (start, start + (out.len() * per) as f64 * width, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_blocks_equals_counting_all_at_once() {
        let a: Vec<f64> = (0..1000).map(|i| (i as f64 - 300.0) / 77.0).collect();
        let b: Vec<f64> = (0..500).map(|i| i as f64 * 1e-3).collect();
        let c = vec![0.0, -0.0, f64::NAN, 1e-310];
        let max = |v: &[f64]| {
            v.iter()
                .filter(|x| x.is_finite())
                .fold(0f64, |m, x| m.max(x.abs()))
        };
        let mut all = Histogram::default();
        let joined: Vec<f64> = a.iter().chain(&b).chain(&c).copied().collect();
        all.add(&joined, max(&joined));
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let mut merged = Histogram::default();
            for i in order {
                let v = [&a, &b, &c][i];
                let mut h = Histogram::default();
                h.add(v, max(v));
                merged.merge(&h);
            }
            assert_eq!(merged, all);
        }
        assert_eq!(all.counts.iter().sum::<u64>(), 1503);
        let (lo, hi, counts) = all.coarse(16);
        assert!(lo <= -300.0 / 77.0 && hi > 699.0 / 77.0, "{lo} {hi}");
        assert!(counts.len() <= 16);
        assert_eq!(counts.iter().sum::<u64>(), 1503);
    }

    #[test]
    fn exponents_bound_the_values() {
        for x in [1.0, 1.5, 2.0, 0.3, 1e-310, 5e-324, f64::MAX] {
            let k = exponent_for(x);
            assert!(scale(1.0, k) > x && scale(1.0, k - 1) <= x, "{x} {k}");
        }
        let mut h = Histogram::default();
        h.add(&[0.0, 0.0], 0.0);
        assert_eq!(h.coarse(4).2, [2]);
    }
}
