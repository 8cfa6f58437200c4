//! f32, f64 and integer values to the bytes of any dtype. Callers have
//! checked the cast is allowed and that `dst` holds exactly `src.len()`
//! elements of the target.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::minifloat::{self as mf, Exact, Format};
use super::{bf16, int, lanes, CastError, CastOptions};
use crate::Dtype;

const BLOCK: usize = 1024;

/// The format description of a float dtype other than F32, F64 and C64.
pub(crate) fn format(dtype: Dtype) -> Option<&'static Format> {
    Some(match dtype {
        Dtype::F16 => &mf::F16,
        Dtype::BF16 => &mf::BF16,
        Dtype::F8_E5M2 => &mf::F8_E5M2,
        Dtype::F8_E4M3 => &mf::F8_E4M3,
        Dtype::F8_E8M0 => &mf::F8_E8M0,
        Dtype::F8_E4M3FNUZ => &mf::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ => &mf::F8_E5M2FNUZ,
        Dtype::F4 => &mf::F4,
        Dtype::F6_E2M3 => &mf::F6_E2M3,
        Dtype::F6_E3M2 => &mf::F6_E3M2,
        _ => return None,
    })
}

/// Stores codes of a format of 16 bits or fewer (packing sub-byte ones).
fn write_codes(to: Dtype, dst: &mut [u8], codes: impl IntoIterator<Item = u32>) {
    match to.bits() {
        16 => {
            for (o, c) in dst.chunks_exact_mut(2).zip(codes) {
                o.copy_from_slice(&(c as u16).to_le_bytes());
            }
        }
        8 => {
            for (o, c) in dst.iter_mut().zip(codes) {
                *o = c as u8;
            }
        }
        bits => crate::bits::pack_from(bits, dst, codes.into_iter().map(|c| c as u8)),
    }
}

/// Encodes f32 values.
pub(crate) fn from_f32(
    src: &[f32],
    from: Dtype,
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
    base: u64,
) -> Result<(), CastError> {
    let sat = opts.saturate;
    match to {
        Dtype::F32 => {
            for (o, x) in dst.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
        Dtype::F64 => {
            for (o, &x) in dst.chunks_exact_mut(8).zip(src) {
                o.copy_from_slice(&f64::from(x).to_le_bytes());
            }
        }
        Dtype::BF16 => bf16::f32_to_bytes(src, dst),
        Dtype::F16 => f32_to_f16(src, dst),
        Dtype::F8_E8M0 => {
            for (o, &x) in dst.iter_mut().zip(src) {
                *o = mf::encode_f32_e8m0(x, sat) as u8;
            }
        }
        // One arm per format so each loop is compiled with its constants.
        Dtype::F8_E4M3 => fast8(&mf::F8_E4M3, src, dst, sat),
        Dtype::F8_E5M2 => fast8(&mf::F8_E5M2, src, dst, sat),
        Dtype::F8_E4M3FNUZ => fast8(&mf::F8_E4M3FNUZ, src, dst, sat),
        Dtype::F8_E5M2FNUZ => fast8(&mf::F8_E5M2FNUZ, src, dst, sat),
        Dtype::F4 => {
            let ovf = mf::OverflowTo::new(&mf::F4, sat);
            let codes = src.iter().map(|&x| mf::encode_f32_fast(&mf::F4, x, ovf));
            write_codes(to, dst, codes);
        }
        Dtype::F6_E2M3 => {
            let ovf = mf::OverflowTo::new(&mf::F6_E2M3, sat);
            let codes = src
                .iter()
                .map(|&x| mf::encode_f32_fast(&mf::F6_E2M3, x, ovf));
            write_codes(to, dst, codes);
        }
        Dtype::F6_E3M2 => {
            let ovf = mf::OverflowTo::new(&mf::F6_E3M2, sat);
            let codes = src
                .iter()
                .map(|&x| mf::encode_f32_fast(&mf::F6_E3M2, x, ovf));
            write_codes(to, dst, codes);
        }
        _ => {
            let values = src.iter().map(|&x| int::from_float(f64::from(x)));
            int::write(values, from, to, dst, base)?;
        }
    }
    Ok(())
}

#[inline(always)]
fn fast8(fmt: &Format, src: &[f32], dst: &mut [u8], saturate: bool) {
    f32_bytes_to_f8(fmt, bytemuck::cast_slice(src), dst, saturate);
}

/// Little-endian F32 bytes straight to an 8-bit format with subnormals
/// (no intermediate buffer: this is the hot path of F32 -> F8 conversion).
#[inline(always)]
pub(crate) fn f32_bytes_to_f8(fmt: &Format, src: &[u8], dst: &mut [u8], saturate: bool) {
    lanes::map(src, dst, f8_encoder(fmt, saturate));
}

/// The F32 -> 8-bit encoder of [`f32_bytes_to_f8`], on an f32's bits.
#[inline(always)]
pub(crate) fn f8_encoder(fmt: &Format, saturate: bool) -> impl Fn(u32) -> u8 + '_ {
    let ovf = mf::OverflowTo::new(fmt, saturate);
    move |b| mf::encode_f32_fast(fmt, f32::from_bits(b), ovf) as u8
}

/// F32 -> F16 through `half` (F16C when the CPU has it), then NaNs patched
/// to numpy's encoding: half sets the quiet bit, numpy keeps the payload.
fn f32_to_f16(src: &[f32], dst: &mut [u8]) {
    let mut buf = [f16::ZERO; BLOCK];
    for (o, i) in dst.chunks_mut(2 * BLOCK).zip(src.chunks(BLOCK)) {
        let buf = &mut buf[..i.len()];
        buf.convert_from_f32_slice(i);
        if i.iter().any(|x| x.is_nan()) {
            for (h, &x) in buf.iter_mut().zip(i) {
                if x.is_nan() {
                    *h = f16::from_bits(mf::encode(&mf::F16, Exact::from_f32(x), false) as u16);
                }
            }
        }
        for (b, h) in o.chunks_exact_mut(2).zip(buf.iter()) {
            b.copy_from_slice(&h.to_le_bytes());
        }
    }
}

/// Encodes f64 values with one rounding.
pub(crate) fn from_f64(
    src: &[f64],
    from: Dtype,
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
    base: u64,
) -> Result<(), CastError> {
    match to {
        Dtype::F64 => {
            for (o, x) in dst.chunks_exact_mut(8).zip(src) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
        Dtype::F32 => {
            for (o, &x) in dst.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&(x as f32).to_le_bytes());
            }
        }
        _ => match format(to) {
            Some(fmt) => {
                let codes = src
                    .iter()
                    .map(|&x| mf::encode(fmt, Exact::from_f64(x), opts.saturate));
                write_codes(to, dst, codes);
            }
            None => {
                let values = src.iter().map(|&x| int::from_float(x));
                int::write(values, from, to, dst, base)?;
            }
        },
    }
    Ok(())
}

/// Encodes integer values (read from `from`) into `to`.
pub(crate) fn from_ints(
    src: &[i128],
    from: Dtype,
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
    base: u64,
) -> Result<(), CastError> {
    match to {
        // `as` from integers rounds to nearest even: one rounding.
        Dtype::F64 => {
            for (o, &v) in dst.chunks_exact_mut(8).zip(src) {
                o.copy_from_slice(&(v as f64).to_le_bytes());
            }
        }
        Dtype::F32 => {
            for (o, &v) in dst.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&(v as f32).to_le_bytes());
            }
        }
        _ => match format(to) {
            Some(fmt) => {
                let codes = src
                    .iter()
                    .map(|&v| mf::encode(fmt, Exact::from_i128(v), opts.saturate));
                write_codes(to, dst, codes);
            }
            None => int::write(src.iter().map(|&v| Ok(v)), from, to, dst, base)?,
        },
    }
    Ok(())
}
