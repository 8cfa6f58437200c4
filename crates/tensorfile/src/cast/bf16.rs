//! BF16 <-> F32, hand-written.
//!
//! `half` converts BF16 one value at a time through `bf16::from_f32`, which
//! keeps NaN payloads (ml_dtypes does not) and whose per-value branch on NaN
//! keeps loops from vectorizing. BF16 is the top half of an f32, so both
//! directions are a shift plus, for F32 -> BF16, one rounding add: written
//! here as branch-free element maps, which the compiler
//! turns into SIMD (see [`super::lanes`]).
use super::lanes;

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
    lanes::map(src, dst, |h: u16| u32::from(h) << 16);
}

/// Little-endian BF16 bytes to f32 values.
pub(crate) fn bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    lanes::map(src, bytemuck::cast_slice_mut(dst), |h: u16| {
        u32::from(h) << 16
    });
}

/// Little-endian F32 bytes to little-endian BF16 bytes (`dst` half as long).
pub(crate) fn f32_bytes_to_bytes(src: &[u8], dst: &mut [u8]) {
    lanes::map(src, dst, from_f32_bits);
}

/// f32 values to little-endian BF16 bytes.
pub(crate) fn f32_to_bytes(src: &[f32], dst: &mut [u8]) {
    lanes::map(bytemuck::cast_slice(src), dst, from_f32_bits);
}
