//! Element-wise maps from bytes to bytes that the compiler can vectorize.
//!
//! A loop over `chunks_exact(4)` of a byte slice compiles to scalar byte
//! gathers; the same loop over `&[u32]` compiles to SIMD. Tensor bytes come
//! from a map or a `Vec<u8>` and are usually, but not always, aligned: when
//! both sides are, the map runs over typed slices in place; otherwise it
//! copies blocks through aligned stack buffers (in L1, cheap next to memory
//! traffic). The host is little-endian (checked in lib.rs), so typed reads
//! are the file's little-endian values.
//!
//! The portable build targets baseline x86-64 (SSE2: 4 lanes). On x86-64
//! CPUs with AVX2 the same loop is also compiled for 8 lanes and chosen at
//! run time, which is what brings F32 -> F8 close to memory speed.

use bytemuck::Pod;

/// Elements per block of the unaligned path.
const BLOCK: usize = 1024;

/// `dst[k] = f(src[k])` over the elements of two byte slices holding the
/// same number of `S` and `D` elements.
#[inline(always)]
pub(crate) fn map<S: Pod, D: Pod>(src: &[u8], dst: &mut [u8], f: impl Fn(S) -> D) {
    // The constant zero counts compile away.
    map_tally(src, dst, f, |_| [0; 4]);
}

/// [`map`] and [`tally`] in one loop: `dst[k] = f(src[k])`, and for each
/// of four predicates (`g` gives 1 where one holds, else 0) how many
/// elements it holds for. One pass, so the source is read from memory once.
#[inline(always)]
pub(crate) fn map_tally<S: Pod, D: Pod>(
    src: &[u8],
    dst: &mut [u8],
    f: impl Fn(S) -> D,
    g: impl Fn(S) -> [u32; 4],
) -> [u64; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { map_tally_avx2(src, dst, f, g) };
    }
    map_tally_portable(src, dst, f, g)
}

/// [`map_tally_portable`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_tally_avx2<S: Pod, D: Pod>(
    src: &[u8],
    dst: &mut [u8],
    f: impl Fn(S) -> D,
    g: impl Fn(S) -> [u32; 4],
) -> [u64; 4] {
    map_tally_portable(src, dst, f, g)
}

#[inline(always)]
fn map_tally_portable<S: Pod, D: Pod>(
    src: &[u8],
    dst: &mut [u8],
    f: impl Fn(S) -> D,
    g: impl Fn(S) -> [u32; 4],
) -> [u64; 4] {
    let mut total = [0u64; 4];
    if let (Ok(s), Ok(d)) = (
        bytemuck::try_cast_slice::<u8, S>(src),
        bytemuck::try_cast_slice_mut::<u8, D>(dst),
    ) {
        map_tally_run(s, d, &f, &g, &mut total);
        return total;
    }
    let (ss, ds) = (size_of::<S>(), size_of::<D>());
    let mut sb = [S::zeroed(); BLOCK];
    let mut db = [D::zeroed(); BLOCK];
    for (sc, dc) in src.chunks(BLOCK * ss).zip(dst.chunks_mut(BLOCK * ds)) {
        let k = (sc.len() / ss).min(dc.len() / ds);
        let (sb, db) = (&mut sb[..k], &mut db[..k]);
        bytemuck::cast_slice_mut::<S, u8>(sb).copy_from_slice(&sc[..k * ss]);
        map_tally_run(sb, db, &f, &g, &mut total);
        dc[..k * ds].copy_from_slice(bytemuck::cast_slice::<D, u8>(db));
    }
    total
}

/// [`map_tally_portable`] over typed slices: a function, not a closure,
/// so that it inlines into the AVX2 copy (a closure called from two places
/// was compiled once, without AVX2).
#[inline(always)]
fn map_tally_run<S: Pod, D: Pod>(
    s: &[S],
    d: &mut [D],
    f: &impl Fn(S) -> D,
    g: &impl Fn(S) -> [u32; 4],
    total: &mut [u64; 4],
) {
    // Counts in 32-bit lanes, over runs short enough not to overflow them.
    for (s, d) in s.chunks(1 << 16).zip(d.chunks_mut(1 << 16)) {
        let mut acc = [0u32; 4];
        for (o, &i) in d.iter_mut().zip(s) {
            *o = f(i);
            for (a, h) in acc.iter_mut().zip(g(i)) {
                *a += h;
            }
        }
        for (t, a) in total.iter_mut().zip(acc) {
            *t += u64::from(a);
        }
    }
}

/// For each of four predicates (`f` gives 1 where one holds, else 0), how
/// many elements of `src` it holds for:
/// [`map`]'s counterpart for passes that only look (the loss tally).
/// Counts run in 32-bit lanes over runs short enough not to overflow them.
#[inline(always)]
pub(crate) fn tally<S: Pod>(src: &[u8], f: impl Fn(S) -> [u32; 4]) -> [u64; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { tally_avx2(src, f) };
    }
    tally_portable(src, f)
}

/// [`tally_portable`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tally_avx2<S: Pod>(src: &[u8], f: impl Fn(S) -> [u32; 4]) -> [u64; 4] {
    tally_portable(src, f)
}

#[inline(always)]
fn tally_portable<S: Pod>(src: &[u8], f: impl Fn(S) -> [u32; 4]) -> [u64; 4] {
    let mut total = [0u64; 4];
    if let Ok(s) = bytemuck::try_cast_slice::<u8, S>(src) {
        tally_run(s, &f, &mut total);
        return total;
    }
    let ss = size_of::<S>();
    let mut sb = [S::zeroed(); BLOCK];
    for sc in src.chunks(BLOCK * ss) {
        let k = sc.len() / ss;
        let sb = &mut sb[..k];
        bytemuck::cast_slice_mut::<S, u8>(sb).copy_from_slice(&sc[..k * ss]);
        tally_run(sb, &f, &mut total);
    }
    total
}

/// [`tally_portable`] over a typed slice (a function: see [`map_tally_run`]).
#[inline(always)]
fn tally_run<S: Pod>(xs: &[S], f: &impl Fn(S) -> [u32; 4], total: &mut [u64; 4]) {
    for run in xs.chunks(1 << 16) {
        let mut acc = [0u32; 4];
        for &x in run {
            for (a, h) in acc.iter_mut().zip(f(x)) {
                *a += h;
            }
        }
        for (t, a) in total.iter_mut().zip(acc) {
            *t += u64::from(a);
        }
    }
}

/// The least of `f(x).0` and the greatest of `f(x).1` over the elements of
/// `src` (`None` when it has none): a check cheaper than [`tally`] that
/// tells when there is nothing to count.
#[inline(always)]
pub(crate) fn range<S: Pod + Ord>(src: &[u8], f: impl Fn(S) -> (S, S)) -> Option<(S, S)> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { range_avx2(src, f) };
    }
    range_portable(src, f)
}

/// [`range_portable`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn range_avx2<S: Pod + Ord>(src: &[u8], f: impl Fn(S) -> (S, S)) -> Option<(S, S)> {
    range_portable(src, f)
}

#[inline(always)]
fn range_portable<S: Pod + Ord>(src: &[u8], f: impl Fn(S) -> (S, S)) -> Option<(S, S)> {
    let mut acc = None;
    if let Ok(s) = bytemuck::try_cast_slice::<u8, S>(src) {
        return range_run(s, &f, acc);
    }
    let ss = size_of::<S>();
    let mut sb = [S::zeroed(); BLOCK];
    for sc in src.chunks(BLOCK * ss) {
        let k = sc.len() / ss;
        let sb = &mut sb[..k];
        bytemuck::cast_slice_mut::<S, u8>(sb).copy_from_slice(&sc[..k * ss]);
        acc = range_run(sb, &f, acc);
    }
    acc
}

/// [`range_portable`] over a typed slice, from the range so far (a
/// function: see [`map_tally_run`]).
#[inline(always)]
fn range_run<S: Pod + Ord>(
    xs: &[S],
    f: &impl Fn(S) -> (S, S),
    acc: Option<(S, S)>,
) -> Option<(S, S)> {
    let Some(&first) = xs.first() else {
        return acc;
    };
    let (mut lo, mut hi) = acc.unwrap_or(f(first));
    for &x in xs {
        let (l, h) = f(x);
        lo = lo.min(l);
        hi = hi.max(h);
    }
    Some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cast::minifloat::{self as mf, OverflowTo};

    /// Every path (typed in place, blocked through the stack, AVX2 or not)
    /// gives the same bytes, aligned or not.
    #[test]
    fn aligned_unaligned_and_portable_paths_agree() {
        let xs: Vec<u32> = (0..5000u32).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
        let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let ovf = OverflowTo::new(&mf::F8_E4M3, false);
        let f = |x: f32| mf::encode_f32_fast(&mf::F8_E4M3, x, ovf) as u8;
        let want: Vec<u8> = xs.iter().map(|&x| f(f32::from_bits(x))).collect();
        // Shift by one byte to break alignment on both sides.
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(&bytes);
        for src in [&bytes[..], &shifted[1..]] {
            for offset in [0, 1] {
                let mut out = vec![0u8; want.len() + 1];
                map(src, &mut out[offset..offset + want.len()], f);
                assert_eq!(&out[offset..offset + want.len()], &want[..]);
                let mut out = vec![0u8; want.len() + 1];
                map_tally_portable(src, &mut out[offset..offset + want.len()], f, |_| [0; 4]);
                assert_eq!(&out[offset..offset + want.len()], &want[..]);
            }
        }
        // Widening, with an odd element count.
        let mut out = vec![0u8; 4 * 4999 + 1];
        map(&bytes[2..2 + 2 * 4999], &mut out[1..], |h: u16| {
            u32::from(h) << 16
        });
        for (k, w) in out[1..].chunks(4).enumerate() {
            let h = u16::from_le_bytes([bytes[2 + 2 * k], bytes[3 + 2 * k]]);
            assert_eq!(w, (u32::from(h) << 16).to_le_bytes());
        }
    }
}
