//! BF16 <-> F32, hand-written.
//!
//! `half` converts BF16 one value at a time through `bf16::from_f32`, which
//! keeps NaN payloads (ml_dtypes does not) and whose per-value branch on NaN
//! keeps loops from vectorizing. BF16 is the top half of an f32, so both
//! directions are a shift plus, for F32 -> BF16, one rounding add: written
//! here as branch-free loops over fixed-size byte chunks, which the compiler
//! turns into SIMD (and which work on unaligned bytes straight from a map).

/// The BF16 bits of `x`, rounded to nearest even; NaN becomes the quiet NaN
/// 0x7FC0 with `x`'s sign (ml_dtypes).
#[inline(always)]
pub(crate) fn from_f32_bits(b: u32) -> u16 {
    let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
    let nan = ((b >> 16) as u16 & 0x8000) | 0x7FC0;
    if b & 0x7FFF_FFFF > 0x7F80_0000 {
        nan
    } else {
        rounded
    }
}

/// Little-endian BF16 bytes to little-endian F32 bytes (`dst` twice as long).
pub(crate) fn bytes_to_f32_bytes(src: &[u8], dst: &mut [u8]) {
    for (o, i) in dst.chunks_exact_mut(4).zip(src.chunks_exact(2)) {
        o.copy_from_slice(&[0, 0, i[0], i[1]]);
    }
}

/// Little-endian BF16 bytes to f32 values.
pub(crate) fn bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    for (o, i) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = f32::from_bits(u32::from(u16::from_le_bytes([i[0], i[1]])) << 16);
    }
}

/// Little-endian F32 bytes to little-endian BF16 bytes (`dst` half as long).
pub(crate) fn f32_bytes_to_bytes(src: &[u8], dst: &mut [u8]) {
    for (o, i) in dst.chunks_exact_mut(2).zip(src.chunks_exact(4)) {
        let b = u32::from_le_bytes([i[0], i[1], i[2], i[3]]);
        o.copy_from_slice(&from_f32_bits(b).to_le_bytes());
    }
}

/// f32 values to little-endian BF16 bytes.
pub(crate) fn f32_to_bytes(src: &[f32], dst: &mut [u8]) {
    for (o, x) in dst.chunks_exact_mut(2).zip(src) {
        o.copy_from_slice(&from_f32_bits(x.to_bits()).to_le_bytes());
    }
}
