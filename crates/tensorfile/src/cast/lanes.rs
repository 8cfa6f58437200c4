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
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { map_avx2(src, dst, f) };
        return;
    }
    map_portable(src, dst, f);
}

/// [`map_portable`] compiled with AVX2 enabled.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn map_avx2<S: Pod, D: Pod>(src: &[u8], dst: &mut [u8], f: impl Fn(S) -> D) {
    map_portable(src, dst, f);
}

#[inline(always)]
fn map_portable<S: Pod, D: Pod>(src: &[u8], dst: &mut [u8], f: impl Fn(S) -> D) {
    if let (Ok(s), Ok(d)) = (
        bytemuck::try_cast_slice::<u8, S>(src),
        bytemuck::try_cast_slice_mut::<u8, D>(dst),
    ) {
        for (o, &i) in d.iter_mut().zip(s) {
            *o = f(i);
        }
        return;
    }
    let (ss, ds) = (size_of::<S>(), size_of::<D>());
    let mut sb = [S::zeroed(); BLOCK];
    let mut db = [D::zeroed(); BLOCK];
    for (sc, dc) in src.chunks(BLOCK * ss).zip(dst.chunks_mut(BLOCK * ds)) {
        let k = (sc.len() / ss).min(dc.len() / ds);
        let (sb, db) = (&mut sb[..k], &mut db[..k]);
        bytemuck::cast_slice_mut::<S, u8>(sb).copy_from_slice(&sc[..k * ss]);
        for (o, &i) in db.iter_mut().zip(sb.iter()) {
            *o = f(i);
        }
        dc[..k * ds].copy_from_slice(bytemuck::cast_slice::<D, u8>(db));
    }
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
                map_portable(src, &mut out[offset..offset + want.len()], f);
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
