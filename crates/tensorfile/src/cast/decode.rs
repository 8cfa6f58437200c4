//! Float bytes to f32 / f64. Callers have checked the dtype is a real float
//! (not C64) and that `src` holds exactly `dst.len()` elements.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::{bf16, minifloat as mf};
use crate::Dtype;

// f32 bits of every code, computed at compile time from the format descriptions.
static F8_E5M2: [u32; 256] = mf::table(&mf::F8_E5M2);
static F8_E4M3: [u32; 256] = mf::table(&mf::F8_E4M3);
static F8_E8M0: [u32; 256] = mf::table(&mf::F8_E8M0);
static F8_E4M3FNUZ: [u32; 256] = mf::table(&mf::F8_E4M3FNUZ);
static F8_E5M2FNUZ: [u32; 256] = mf::table(&mf::F8_E5M2FNUZ);
static F4: [u32; 16] = mf::table(&mf::F4);
static F6_E2M3: [u32; 64] = mf::table(&mf::F6_E2M3);
static F6_E3M2: [u32; 64] = mf::table(&mf::F6_E3M2);

/// Elements converted per step through a stack buffer.
const BLOCK: usize = 1024;

/// The decode table of an 8-bit float format.
fn table8(dtype: Dtype) -> Option<&'static [u32; 256]> {
    Some(match dtype {
        Dtype::F8_E5M2 => &F8_E5M2,
        Dtype::F8_E4M3 => &F8_E4M3,
        Dtype::F8_E8M0 => &F8_E8M0,
        Dtype::F8_E4M3FNUZ => &F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ => &F8_E5M2FNUZ,
        _ => return None,
    })
}

/// The decode table (f32 bits by code) of a format of 8 bits or fewer.
pub(crate) fn table(dtype: Dtype) -> Option<&'static [u32]> {
    match dtype {
        Dtype::F4 => Some(&F4),
        Dtype::F6_E2M3 => Some(&F6_E2M3),
        Dtype::F6_E3M2 => Some(&F6_E3M2),
        _ => table8(dtype).map(|t| t.as_slice()),
    }
}

/// Decodes into f32 (F64 rounds to nearest even; every other format is exact).
pub(crate) fn to_f32(dtype: Dtype, src: &[u8], dst: &mut [f32]) {
    match dtype {
        Dtype::F32 => {
            for (o, i) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([i[0], i[1], i[2], i[3]]);
            }
        }
        Dtype::F64 => {
            for (o, i) in dst.iter_mut().zip(src.chunks_exact(8)) {
                *o = f64::from_le_bytes([i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7]]) as f32;
            }
        }
        Dtype::BF16 => bf16::bytes_to_f32(src, dst),
        Dtype::F16 => {
            // half's slice conversion uses F16C when the CPU has it; it
            // needs typed, aligned input, hence the stack buffer.
            let mut buf = [f16::ZERO; BLOCK];
            for (o, i) in dst.chunks_mut(BLOCK).zip(src.chunks(2 * BLOCK)) {
                let buf = &mut buf[..o.len()];
                for (h, b) in buf.iter_mut().zip(i.chunks_exact(2)) {
                    *h = f16::from_le_bytes([b[0], b[1]]);
                }
                buf.convert_to_f32_slice(o);
            }
        }
        Dtype::F4 | Dtype::F6_E2M3 | Dtype::F6_E3M2 => {
            if let Some(t) = table(dtype) {
                let mask = t.len() - 1;
                for (o, c) in dst.iter_mut().zip(crate::bits::codes(dtype.bits(), src)) {
                    *o = f32::from_bits(t[c as usize & mask]);
                }
            }
        }
        _ => {
            if let Some(t) = table8(dtype) {
                for (o, &c) in dst.iter_mut().zip(src) {
                    *o = f32::from_bits(t[c as usize]);
                }
            }
        }
    }
}

/// Decodes into f64 (exact for every format).
pub(crate) fn to_f64(dtype: Dtype, src: &[u8], dst: &mut [f64]) {
    match dtype {
        Dtype::F64 => {
            for (o, i) in dst.iter_mut().zip(src.chunks_exact(8)) {
                *o = f64::from_le_bytes([i[0], i[1], i[2], i[3], i[4], i[5], i[6], i[7]]);
            }
        }
        _ => {
            let mut buf = [0f32; BLOCK];
            // Bytes per block: every non-F64 float fills whole bytes per BLOCK
            // elements (BLOCK is a multiple of 4).
            let step = BLOCK * dtype.bits() as usize / 8;
            for (o, i) in dst.chunks_mut(BLOCK).zip(src.chunks(step)) {
                let buf = &mut buf[..o.len()];
                to_f32(dtype, i, buf);
                for (d, &s) in o.iter_mut().zip(buf.iter()) {
                    *d = f64::from(s);
                }
            }
        }
    }
}
