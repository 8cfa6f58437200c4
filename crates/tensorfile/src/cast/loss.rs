//! What a float cast changes beyond rounding: values that overflow to
//! infinity, become NaN, saturate to the largest finite value, or flush to
//! zero. Counted from the source values against the target's limits with
//! branch-free integer compares, so a conversion can report them per
//! tensor and [`CastOptions::strict`] can refuse them before anything is
//! written. Without `strict` the count rides along with the conversion:
//! inside its loop for the hot pairs (F32 to BF16 and F8), on each block's
//! decoded values for the others, after a cheaper check (least and
//! greatest magnitude) that usually finds nothing to count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytemuck::Pod;

use super::{decode, encode, int, lanes, CastError, CastOptions, BLOCK};
use crate::Dtype;

/// How many values of a cast were changed beyond rounding.
///
/// ```
/// use tensorfile::cast::{cast_tensor, CastOptions, Losses, TensorCast};
/// use tensorfile::Dtype;
/// let src: Vec<u8> = [1e6f32, 1e-9, 1.0].iter().flat_map(|x| x.to_le_bytes()).collect();
/// let mut cast = TensorCast::new("w", Dtype::F32, &[3], Dtype::F16, CastOptions::default())?;
/// let mut out = Vec::new();
/// cast.push(&src, &mut out)?;
/// assert_eq!(cast.losses(), Losses { to_inf: 1, flushed: 1, ..Losses::default() });
/// let strict = CastOptions::default().with_strict(true);
/// assert!(cast_tensor("w", Dtype::F32, &[3], &src, Dtype::F16, strict).is_err());
/// # Ok::<(), tensorfile::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Losses {
    /// Finite values beyond the target's range that became infinity.
    pub to_inf: u64,
    /// Values (finite, or infinite where the target has no infinity) that
    /// became NaN; for F8_E8M0 also zeros and negatives, which it cannot hold.
    pub to_nan: u64,
    /// Values beyond the range (infinities included) clamped to the largest
    /// finite value: always for F4/F6, for the F8 types with `saturate`.
    pub saturated: u64,
    /// Nonzero values that became zero.
    pub flushed: u64,
}

impl Losses {
    /// Whether nothing was lost beyond rounding.
    pub fn is_empty(&self) -> bool {
        *self == Losses::default()
    }

    pub(crate) fn add(&mut self, other: Losses) {
        self.to_inf += other.to_inf;
        self.to_nan += other.to_nan;
        self.saturated += other.saturated;
        self.flushed += other.flushed;
    }
}

impl std::fmt::Display for Losses {
    /// `3 overflowed to inf, 1 flushed to zero` (the nonzero counts).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts = [
            (self.to_inf, "overflowed to inf"),
            (self.to_nan, "became NaN"),
            (self.saturated, "saturated"),
            (self.flushed, "flushed to zero"),
        ];
        let mut first = true;
        for (n, what) in parts.into_iter().filter(|(n, _)| *n > 0) {
            if !first {
                f.write_str(", ")?;
            }
            write!(f, "{n} {what}")?;
            first = false;
        }
        if first {
            f.write_str("nothing lost")?;
        }
        Ok(())
    }
}

/// [`Losses`] added up by the jobs of a conversion as they run (shared:
/// clones count into the same totals).
#[derive(Debug, Clone, Default)]
pub struct LossTally(Arc<[AtomicU64; 4]>);

impl LossTally {
    pub(crate) fn add(&self, l: Losses) {
        if l.is_empty() {
            return;
        }
        for (slot, n) in self
            .0
            .iter()
            .zip([l.to_inf, l.to_nan, l.saturated, l.flushed])
        {
            slot.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The totals so far.
    pub fn get(&self) -> Losses {
        let [to_inf, to_nan, saturated, flushed] =
            [0, 1, 2, 3].map(|i| self.0[i].load(Ordering::Relaxed));
        Losses {
            to_inf,
            to_nan,
            saturated,
            flushed,
        }
    }
}

impl PartialEq for LossTally {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for LossTally {}

/// What an out-of-range value becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Inf,
    Nan,
    Saturated,
}

/// The limits of a target, as bit patterns of the source values' float
/// type (f32 for every float source but F64, else f64), so the count is
/// integer comparisons.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Whether source values are read as f64 (F64 and integer sources).
    wide: bool,
    /// Magnitudes (bits of |x|) from this one up, below infinity, are
    /// out of range.
    over: u64,
    /// Nonzero magnitudes up to this one become zero (0: none do).
    flush: u64,
    overflow: Fate,
    /// What an infinity becomes, when not infinity.
    infinity: Option<Fate>,
    /// F8_E8M0: zeros and negatives become NaN too.
    e8m0: bool,
}

impl Bounds {
    /// The limits of casting `from` to `to`, or `None` when the target
    /// holds every source value up to rounding (or is not a float).
    pub(crate) fn new(from: Dtype, to: Dtype, opts: CastOptions) -> Option<Bounds> {
        if from == to || !to.is_float() || to == Dtype::C64 || to == Dtype::F64 {
            return None;
        }
        let wide = from == Dtype::F64 || !from.is_float();
        let (max, prev, min_sub, strict, overflow, infinity, e8m0) = if to == Dtype::F32 {
            if !wide {
                return None;
            }
            let max = f64::from(f32::MAX);
            let prev = f64::from(f32::from_bits(f32::MAX.to_bits() - 1));
            let min_sub = f64::from(f32::from_bits(1));
            (max, prev, min_sub, false, Fate::Inf, None, false)
        } else {
            let fmt = encode::format(to)?;
            use super::minifloat::Overflow;
            // As the encoder decides it (see `OverflowTo`).
            let (overflow, infinity) = match (opts.saturate && fmt.saturable, fmt.overflow) {
                (true, _) | (false, Overflow::Saturate) => (Fate::Saturated, Some(Fate::Saturated)),
                (false, Overflow::Nan) => (Fate::Nan, Some(Fate::Nan)),
                (false, Overflow::Inf(_)) => (Fate::Inf, None),
            };
            let value = |code: u32| code_value(to, code);
            // Ties go to even: a largest finite code with an even mantissa
            // (F8_E4M3's 448) keeps the tie itself; E8M0 rounds ties up.
            let strict = !fmt.e8m0 && fmt.max_finite & 1 == 0;
            let min_sub = if fmt.e8m0 { 0.0 } else { value(1) };
            let max = value(fmt.max_finite);
            let prev = value(fmt.max_finite - 1);
            (max, prev, min_sub, strict, overflow, infinity, fmt.e8m0)
        };
        // The first magnitude that rounds past the largest finite value
        // (E8M0 rounds between powers of two: half up from 1.5 times).
        let tie = if e8m0 {
            max * 1.5
        } else {
            max + (max - prev) / 2.0
        };
        let half_sub = min_sub / 2.0;
        let bits = |x: f64| {
            if wide {
                x.to_bits()
            } else {
                // Exact: every limit here has few significant bits.
                u64::from((x as f32).to_bits())
            }
        };
        Some(Bounds {
            wide,
            over: bits(tie) + u64::from(strict),
            flush: if half_sub > 0.0 { bits(half_sub) } else { 0 },
            overflow,
            infinity,
            e8m0,
        })
    }

    /// Counts the losses of `bits`: little-endian source values as f64 bits
    /// when [`Bounds::wide`], else as f32 bits (a whole number of them).
    /// `check_first`: try the cheap check that nothing is lost before
    /// counting (worth it unless the values before had losses too).
    pub(crate) fn count(&self, bits: &[u8], check_first: bool) -> Losses {
        let [over, infs, signed, flushed] = if self.wide {
            let l = Limits::<u64>::of(self, f64::INFINITY.to_bits());
            if check_first && l.none_lost(bits) {
                return Losses::default();
            }
            l.tally(bits)
        } else {
            let l = Limits::<u32>::of(self, f32::INFINITY.to_bits());
            if check_first && l.none_lost(bits) {
                return Losses::default();
            }
            l.tally(bits)
        };
        self.losses([over, infs, signed, flushed])
    }

    /// [`Bounds::count`] of integer values (as f64, as they convert).
    pub(crate) fn count_ints(&self, ints: &[i128]) -> Losses {
        let mut wide = [0f64; BLOCK];
        let mut total = Losses::default();
        for part in ints.chunks(BLOCK) {
            let wide = &mut wide[..part.len()];
            ints_as_f64(part, wide);
            total.add(self.count(bytemuck::cast_slice(wide), true));
        }
        total
    }

    /// Converts F32 `src` (this is for F32 sources only) into `dst` with
    /// `f` on each value's bits, counting the losses in the same pass.
    pub(crate) fn map_counting<D: Pod>(
        &self,
        src: &[u8],
        dst: &mut [u8],
        f: impl Fn(u32) -> D,
    ) -> Losses {
        debug_assert!(!self.wide, "an F32 source");
        let l = Limits::<u32>::of(self, f32::INFINITY.to_bits());
        self.losses(match l.form {
            WITH_INFINITY => lanes::map_tally(src, dst, f, |b| l.flags::<WITH_INFINITY>(b)),
            FINITE_ONLY => lanes::map_tally(src, dst, f, |b| l.flags::<FINITE_ONLY>(b)),
            E8M0_TERMS => lanes::map_tally(src, dst, f, |b| l.flags::<E8M0_TERMS>(b)),
            _ => lanes::map_tally(src, dst, f, |b| l.flags::<EVERY_TERM>(b)),
        })
    }

    /// [`Losses`] from the counts of [`Limits::flags`].
    fn losses(&self, [over, infs, signed, flushed]: [u64; 4]) -> Losses {
        let mut l = Losses::default();
        self.credit(&mut l, self.overflow, over);
        if let Some(fate) = self.infinity {
            self.credit(&mut l, fate, infs);
        }
        l.to_nan += signed;
        l.flushed += flushed;
        l
    }

    fn credit(&self, l: &mut Losses, fate: Fate, n: u64) {
        match fate {
            Fate::Inf => l.to_inf += n,
            Fate::Nan => l.to_nan += n,
            Fate::Saturated => l.saturated += n,
        }
    }

    /// Counts the losses of casting `src` (whole elements of `from`). With
    /// `strict`, the first loss is an error naming its element (`base`
    /// counts from the tensor's start).
    pub(crate) fn scan(
        &self,
        from: Dtype,
        to: Dtype,
        src: &[u8],
        base: u64,
        strict: bool,
    ) -> Result<Losses, CastError> {
        let mut total = Losses::default();
        let sb = from.bits() as usize;
        // F32 and F64 sources are counted where they lie; others through
        // one set of stack buffers for every block.
        let mut wide = [0f64; BLOCK];
        let mut narrow = [0f32; BLOCK];
        let mut lossy = false;
        for (k, s) in src.chunks(BLOCK * sb / 8).enumerate() {
            let n = s.len() * 8 / sb;
            let bits: &[u8] = match (self.wide, from) {
                (true, Dtype::F64) | (false, Dtype::F32) => s,
                (true, _) if from.is_float() => {
                    decode::to_f64(from, s, &mut wide[..n]);
                    bytemuck::cast_slice(&wide[..n])
                }
                (true, _) => {
                    let mut ints = [0i128; BLOCK];
                    int::read(from, s, &mut ints[..n], 0)?;
                    ints_as_f64(&ints[..n], &mut wide[..n]);
                    bytemuck::cast_slice(&wide[..n])
                }
                (false, _) => {
                    decode::to_f32(from, s, &mut narrow[..n]);
                    bytemuck::cast_slice(&narrow[..n])
                }
            };
            let l = self.count(bits, !lossy);
            lossy = !l.is_empty();
            if strict && lossy {
                let block_base = base + (k * BLOCK) as u64;
                return Err(self.first_loss(bits, block_base, from, to));
            }
            total.add(l);
        }
        Ok(total)
    }

    /// The error for the first value of `bits` (as in [`Bounds::count`])
    /// that a cast changes beyond rounding.
    fn first_loss(&self, bits: &[u8], base: u64, from: Dtype, to: Dtype) -> CastError {
        let width = if self.wide { 8 } else { 4 };
        for (i, one) in bits.chunks_exact(width).enumerate() {
            let l = self.count(one, false);
            if l.is_empty() {
                continue;
            }
            let what = if l.to_inf > 0 {
                "overflows to inf"
            } else if l.to_nan > 0 {
                "becomes NaN"
            } else if l.saturated > 0 {
                "saturates"
            } else {
                "flushes to zero"
            };
            let value = match *one {
                [a, b, c, d] => f32::from_le_bytes([a, b, c, d]).to_string(),
                _ => f64::from_le_bytes(one.try_into().unwrap_or_default()).to_string(),
            };
            return CastError::Lossy {
                index: base + i as u64,
                value,
                from,
                to,
                what,
            };
        }
        // Unreachable in practice: only called when some value is a loss.
        CastError::Lossy {
            index: base,
            value: String::new(),
            from,
            to,
            what: "loses its value",
        }
    }
}

/// Integer values as the f64 values a cast rounds them to first.
fn ints_as_f64(ints: &[i128], wide: &mut [f64]) {
    for (w, &i) in wide.iter_mut().zip(ints) {
        *w = i as f64;
    }
}

/// [`Bounds`] as bit patterns of one width (`u32` for f32 values, `u64`
/// for f64), for the counting loop.
#[derive(Clone, Copy)]
struct Limits<T> {
    /// All bits but the sign.
    abs: T,
    over: T,
    inf: T,
    flush: T,
    e8m0: bool,
    /// Which of [`Limits::flags`]'s forms counts for this target.
    form: u8,
}

/// The forms of [`Limits::flags`]: every term (F8_E8M0, or a target whose
/// infinities and overflows meet different fates), or the two terms most
/// targets need, out of range and flushed, with infinities counted as out
/// of range (they meet the overflows' fate: NaN or saturation) or not at
/// all (they stay infinite).
const EVERY_TERM: u8 = 0;
const E8M0_TERMS: u8 = 1;
const WITH_INFINITY: u8 = 2;
const FINITE_ONLY: u8 = 3;

macro_rules! limits {
    ($t:ty, $s:ty) => {
        impl Limits<$t> {
            fn of(b: &Bounds, inf: $t) -> Self {
                // Both limits lie below `inf`, so they fit the width.
                Limits {
                    abs: <$t>::MAX >> 1,
                    over: b.over as $t,
                    inf,
                    flush: b.flush as $t,
                    e8m0: b.e8m0,
                    form: match (b.e8m0, b.infinity) {
                        (true, _) => E8M0_TERMS,
                        (false, None) => FINITE_ONLY,
                        (false, Some(f)) if f == b.overflow => WITH_INFINITY,
                        (false, Some(_)) => EVERY_TERM,
                    },
                }
            }

            /// Whether no value of `bits` can be a loss, from the least
            /// nonzero magnitude and the greatest (NaN included, so that
            /// any NaN sends the values to the full count). Most tensors
            /// pass, at a fraction of the full count's cost.
            fn none_lost(&self, bits: &[u8]) -> bool {
                if self.e8m0 {
                    return false;
                }
                let abs = self.abs;
                // `a - 1` wraps zero to the top: zeros are never lost.
                let span = lanes::range(bits, |b: $t| {
                    let a = b & abs;
                    (a.wrapping_sub(1), a)
                });
                span.is_none_or(|(lo, hi)| lo >= self.flush && hi < self.over)
            }

            /// 1 where bits `b` are, else 0: finite and out of range (with
            /// [`WITH_INFINITY`], infinite too), an infinity, a value E8M0
            /// cannot hold (zero or negative), flushed to zero. `&` rather
            /// than `&&`, so there are no branches; magnitudes compared as
            /// signed integers (they are below the sign bit), which SIMD
            /// compares in one instruction; `FORM` a constant, so a target
            /// pays only for its own terms (the zero ones compile away).
            #[inline(always)]
            fn flags<const FORM: u8>(&self, b: $t) -> [u32; 4] {
                let s = |x: $t| x as $s;
                let a = s(b & self.abs);
                let (over, inf, flush) = (s(self.over), s(self.inf), s(self.flush));
                let flushed = (a != 0) & (a <= flush);
                match FORM {
                    WITH_INFINITY => [(a >= over) & (a <= inf), false, false, flushed],
                    FINITE_ONLY => [(a >= over) & (a < inf), false, false, flushed],
                    _ => {
                        let e8m0 = FORM == E8M0_TERMS;
                        let neg = e8m0 & (b > self.abs);
                        [
                            (a >= over) & (a < inf) & !neg,
                            (a == inf) & !neg,
                            (neg | (e8m0 & (a == 0))) & (a <= inf),
                            flushed,
                        ]
                    }
                }
                .map(u32::from)
            }

            /// [`Self::flags`] counted over `bits`.
            fn tally(&self, bits: &[u8]) -> [u64; 4] {
                match self.form {
                    WITH_INFINITY => lanes::tally(bits, |b: $t| self.flags::<WITH_INFINITY>(b)),
                    FINITE_ONLY => lanes::tally(bits, |b: $t| self.flags::<FINITE_ONLY>(b)),
                    E8M0_TERMS => lanes::tally(bits, |b: $t| self.flags::<E8M0_TERMS>(b)),
                    _ => lanes::tally(bits, |b: $t| self.flags::<EVERY_TERM>(b)),
                }
            }
        }
    };
}
limits!(u32, i32);
limits!(u64, i64);

/// The value of magnitude code `code` of `to` (a 16-bit or smaller float).
fn code_value(to: Dtype, code: u32) -> f64 {
    match to {
        Dtype::F16 => half::f16::from_bits(code as u16).to_f64(),
        Dtype::BF16 => f64::from(f32::from_bits(code << 16)),
        _ => decode::table(to)
            .and_then(|t| t.get(code as usize))
            .map_or(f64::NAN, |&b| f64::from(f32::from_bits(b))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cast::{cast_slice, decode_f64_vec};

    /// What the encoder did to `x`, read from its output: the oracle.
    fn observed(x: f64, to: Dtype, opts: CastOptions) -> Losses {
        let mut l = Losses::default();
        if x.is_nan() {
            return l;
        }
        // Pairs of four values fill whole bytes for F4 and F6.
        let src: Vec<u8> = [x; 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut dst = vec![0u8; 4 * to.bits() as usize / 8];
        cast_slice(Dtype::F64, &src, to, &mut dst, opts).unwrap();
        let y = decode_f64_vec(to, &dst).unwrap()[0];
        let plain = CastOptions {
            saturate: false,
            ..opts
        };
        let mut unsat = vec![0u8; dst.len()];
        cast_slice(Dtype::F64, &src, to, &mut unsat, plain).unwrap();
        let y_plain = decode_f64_vec(to, &unsat).unwrap()[0];
        if y.is_nan() {
            l.to_nan = 1;
        } else if y.is_infinite() && x.is_finite() {
            l.to_inf = 1;
        } else if y == 0.0 && x != 0.0 {
            l.flushed = 1;
        } else if opts.saturate && !y_plain.is_finite() && y.is_finite() {
            l.saturated = 1;
        }
        l
    }

    #[test]
    fn counts_agree_with_what_the_encoder_does() {
        let targets = [
            Dtype::F16,
            Dtype::BF16,
            Dtype::F8_E5M2,
            Dtype::F8_E4M3,
            Dtype::F8_E4M3FNUZ,
            Dtype::F8_E5M2FNUZ,
            Dtype::F8_E8M0,
            Dtype::F32,
        ];
        for to in targets {
            for saturate in [false, true] {
                let opts = CastOptions {
                    saturate,
                    ..CastOptions::default()
                };
                let bounds = Bounds::new(Dtype::F64, to, opts).unwrap();
                let f32_bounds = Bounds::new(Dtype::F32, to, opts);
                // Values on and around every limit, and a sweep of scales.
                let mut xs = vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];
                let tie = f64::from_bits(bounds.over);
                let half = f64::from_bits(bounds.flush);
                for base in [tie, half, 1.0] {
                    for ulps in -3i64..=3 {
                        let v = f64::from_bits((base.to_bits() as i64 + ulps).max(0) as u64);
                        xs.extend([v, -v]);
                    }
                }
                for e in -160..140 {
                    for m in [1.0, 1.37, 1.5, 1.99] {
                        xs.extend([m * 2f64.powi(e), -m * 2f64.powi(e)]);
                    }
                }
                for &x in &xs {
                    let src = x.to_le_bytes();
                    let got = bounds.scan(Dtype::F64, to, &src, 0, false).unwrap();
                    assert_eq!(
                        got,
                        observed(x, to, opts),
                        "{x} to {to} saturate={saturate}"
                    );
                    // From F32 the same limits hold, where x is an f32.
                    if let (Some(b), true) = (&f32_bounds, (x as f32) as f64 == x || x.is_nan()) {
                        let src = (x as f32).to_le_bytes();
                        let got32 = b.scan(Dtype::F32, to, &src, 0, false).unwrap();
                        assert_eq!(got32, got, "{x} (f32) to {to}");
                    }
                }
            }
        }
    }

    /// The counts made inside the conversion's loop (F32 -> BF16, F8), on
    /// each block's decoded values (other pairs), or in parallel pieces equal the scan's, value
    /// by value, for bits of every kind (NaN, infinities, subnormals), on
    /// aligned and unaligned bytes; and the bytes written equal a strict
    /// conversion's path (the one that counts nothing).
    #[test]
    fn counts_in_every_path_agree_with_the_scan() {
        use crate::cast::{convert, encode_serial, SPLIT_FROM};
        let mut rng = tensorfile_testkit::Rng::new(11);
        let mut pairs = 0;
        let specials = [
            0u32,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0001,
            1,
            0x8000_0001,
        ];
        for n in [4096usize, 2 * SPLIT_FROM + 4096] {
            let words: Vec<u32> = (0..n)
                .map(|i| match i % 97 {
                    0 => specials[(i / 97) % specials.len()],
                    _ => rng.next_u64() as u32,
                })
                .collect();
            let mut bytes = vec![0u8; 4 * n + 1];
            for (c, w) in bytes[1..].chunks_exact_mut(4).zip(&words) {
                c.copy_from_slice(&w.to_le_bytes());
            }
            let aligned: Vec<u8> = bytes[1..].to_vec();
            for to in [
                Dtype::BF16,
                Dtype::F8_E4M3,
                Dtype::F8_E5M2,
                Dtype::F16,
                Dtype::F8_E8M0,
            ] {
                for saturate in [false, true] {
                    let opts = CastOptions::default().with_saturate(saturate);
                    pairs += 1;
                    let b = Bounds::new(Dtype::F32, to, opts).unwrap();
                    let want = b.scan(Dtype::F32, to, &aligned, 0, false).unwrap();
                    if n == 4096 {
                        let one_by_one = words.iter().fold(Losses::default(), |mut l, w| {
                            l.add(b.scan(Dtype::F32, to, &w.to_le_bytes(), 0, false).unwrap());
                            l
                        });
                        assert_eq!(want, one_by_one, "{to}");
                    }
                    assert!(!want.is_empty(), "{to}: the values include losses");
                    let mut outs = Vec::new();
                    for src in [&aligned[..], &bytes[1..]] {
                        let mut dst = vec![0u8; n * to.bits() as usize / 8 + 1];
                        let got = convert(Dtype::F32, src, to, &mut dst[1..], opts, 0).unwrap();
                        assert_eq!(got, want, "{to} saturate={saturate} n={n}");
                        outs.push(dst);
                    }
                    assert_eq!(outs[0], outs[1], "{to}: aligned and unaligned bytes");
                    let mut plain = vec![0u8; outs[0].len() - 1];
                    encode_serial(Dtype::F32, &aligned, to, &mut plain, opts, 0, None).unwrap();
                    assert_eq!(&outs[0][1..], &plain[..], "{to}: the counting paths' bytes");
                }
            }
        }
        assert_eq!(pairs, 2 * 10, "pairs checked, for both lengths");
    }

    /// Sources other than F32 are counted on each block's decoded values:
    /// the same counts as the scan, for bits of every kind.
    #[test]
    fn block_counts_of_every_source_agree_with_the_scan() {
        use crate::cast::convert;
        let mut rng = tensorfile_testkit::Rng::new(5);
        for from in [Dtype::F64, Dtype::F16, Dtype::BF16, Dtype::I64, Dtype::I32] {
            let n = 3000usize;
            let bytes: Vec<u8> = (0..n * from.bits() as usize / 8)
                .map(|_| rng.next_u64() as u8)
                .collect();
            let targets = [Dtype::F8_E4M3, Dtype::F8_E8M0, Dtype::F16];
            for to in targets.into_iter().filter(|&to| to != from) {
                let opts = CastOptions::default();
                let b = Bounds::new(from, to, opts).unwrap();
                let want = b.scan(from, to, &bytes, 0, false).unwrap();
                let mut dst = vec![0u8; n * to.bits() as usize / 8];
                let got = convert(from, &bytes, to, &mut dst, opts, 0).unwrap();
                assert!(
                    !want.is_empty(),
                    "{from} -> {to}: the values include losses"
                );
                assert_eq!(got, want, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn formats_without_nan_or_infinity_saturate() {
        let b = Bounds::new(Dtype::F32, Dtype::F4, CastOptions::default()).unwrap();
        let xs = [6.0f32, 6.9, 7.0, -7.5, f32::INFINITY, 0.2, 0.25, 0.26];
        let src: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let l = b.scan(Dtype::F32, Dtype::F4, &src, 0, false).unwrap();
        // F4 (E2M1): largest 6, so 7 and up saturate; smallest 0.5, so up
        // to 0.25 flushes.
        let want = Losses {
            saturated: 3,
            flushed: 2,
            ..Losses::default()
        };
        assert_eq!(l, want);
    }

    #[test]
    fn strict_names_the_first_loss() {
        let b = Bounds::new(Dtype::F32, Dtype::F16, CastOptions::default()).unwrap();
        let src: Vec<u8> = [1.0f32, 2.0, 1e-30, 1e6]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let err = b.scan(Dtype::F32, Dtype::F16, &src, 10, true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "element 12: F32 value 0.000000000000000000000000000001 flushes to zero in F16 (a strict cast)"
        );
        assert!(Bounds::new(Dtype::F16, Dtype::F32, CastOptions::default()).is_none());
        assert!(Bounds::new(Dtype::I64, Dtype::F16, CastOptions::default()).is_some());
    }
}
