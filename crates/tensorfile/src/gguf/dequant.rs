//! Block decoders: every quantized ggml type gguf-py 0.19 can decode, to
//! f32, bit for bit as `gguf.quants.dequantize` (which equals llama.cpp's
//! `to_float`): the same operations in the same order, in f32, NaN
//! payloads included.
//!
//! Each decoder takes one block (`type_size` bytes) and writes its
//! `block_size` values. Block layouts are ggml's (`ggml-common.h`); the
//! IQ types' lattice grids are data files made from gguf-py's tables
//! (`scripts/make_gguf_grids.py`).

// Block layouts are index arithmetic; index loops read like ggml's layout.
#![allow(clippy::needless_range_loop)]

use half::f16;

use super::error::GgufError;
use super::types::GgmlType;

/// The f32 value of the little-endian f16 at `b[at..at + 2]`.
#[inline]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

#[inline]
fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// E2M1 values doubled (MXFP4 and NVFP4 codes).
const KVALUES_FP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// IQ4_NL and IQ4_XS code values.
pub(crate) const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// ggml's sign table for the IQ2/IQ3 types: entry `i` is `i` with bit 7 set
/// when `i` has an odd number of bits set (every group of 8 signs has an
/// even number of minus signs).
const fn ksigns() -> [u8; 128] {
    let mut t = [0u8; 128];
    let mut i = 0;
    while i < 128 {
        t[i] = i as u8 | (((i as u8).count_ones() as u8 & 1) << 7);
        i += 1;
    }
    t
}
const KSIGNS: [u8; 128] = ksigns();

static GRID_IQ2_XXS: &[u8; 2048] = include_bytes!("grids/IQ2_XXS.bin");
static GRID_IQ2_XS: &[u8; 4096] = include_bytes!("grids/IQ2_XS.bin");
static GRID_IQ2_S: &[u8; 8192] = include_bytes!("grids/IQ2_S.bin");
static GRID_IQ3_XXS: &[u8; 1024] = include_bytes!("grids/IQ3_XXS.bin");
static GRID_IQ3_S: &[u8; 2048] = include_bytes!("grids/IQ3_S.bin");
static GRID_IQ1_S: &[u8; 16384] = include_bytes!("grids/IQ1_S.bin");

/// Row `i` (`N` values) of a grid, as f32.
#[inline]
fn grid_row<const N: usize>(grid: &[u8], i: usize) -> [f32; N] {
    let mut out = [0f32; N];
    for (o, &g) in out.iter_mut().zip(&grid[i * N..i * N + N]) {
        *o = f32::from(g as i8);
    }
    out
}

/// `v`, negated when `negative`: what multiplying by -1.0 gives.
#[inline]
fn signed(v: f32, negative: bool) -> f32 {
    if negative {
        -v
    } else {
        v
    }
}

#[inline(always)]
fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        y[j] = d * f32::from((q & 0x0F) as i8 - 8);
        y[j + 16] = d * f32::from((q >> 4) as i8 - 8);
    }
}

#[inline(always)]
fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        y[j] = d * f32::from(q & 0x0F) + m;
        y[j + 16] = d * f32::from(q >> 4) + m;
    }
}

#[inline(always)]
fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32_at(b, 2);
    for (j, &q) in b[6..22].iter().enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        y[j] = d * f32::from(((q & 0x0F) | (h0 << 4)) as i8 - 16);
        y[j + 16] = d * f32::from(((q >> 4) | (h1 << 4)) as i8 - 16);
    }
}

#[inline(always)]
fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32_at(b, 4);
    for (j, &q) in b[8..24].iter().enumerate() {
        let h0 = ((qh >> j) & 1) as u8;
        let h1 = ((qh >> (j + 16)) & 1) as u8;
        y[j] = d * f32::from((q & 0x0F) | (h0 << 4)) + m;
        y[j + 16] = d * f32::from((q >> 4) | (h1 << 4)) + m;
    }
}

#[inline(always)]
fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in y.iter_mut().zip(&b[2..34]) {
        *o = f32::from(q as i8) * d;
    }
}

#[inline(always)]
fn q2_k(b: &[u8], y: &mut [f32]) {
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for e in 0..256 {
        let (half, shift, l) = (e / 128, (e % 128) / 32, e % 32);
        let q = (qs[half * 32 + l] >> (2 * shift)) & 3;
        let sc = scales[e / 16];
        let dl = d * f32::from(sc & 0x0F);
        let ml = dmin * f32::from(sc >> 4);
        y[e] = dl * f32::from(q) - ml;
    }
}

#[inline(always)]
fn q3_k(b: &[u8], y: &mut [f32]) {
    let (hmask, qs, s) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    let mut dl = [0f32; 16];
    for (k, v) in dl.iter_mut().enumerate() {
        let low = (s[k % 8] >> (4 * (k / 8))) & 0x0F;
        let high = (s[8 + k % 4] >> (2 * (k / 4))) & 0x03;
        *v = d * f32::from(((low | (high << 4)) as i8).wrapping_sub(32));
    }
    for e in 0..256 {
        let (half, shift, l) = (e / 128, (e % 128) / 32, e % 32);
        let ql = ((qs[half * 32 + l] >> (2 * shift)) & 3) as i8;
        let qh = ((hmask[e % 32] >> (e / 32)) & 1) ^ 1;
        y[e] = dl[e / 16] * f32::from(ql - ((qh << 2) as i8));
    }
}

/// The 6-bit scales and mins of Q4_K and Q5_K.
#[inline(always)]
fn scale_min_k4(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = s[j] & 0x3F;
        mn[j] = s[4 + j] & 0x3F;
        sc[4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30);
        mn[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
    }
    (sc, mn)
}

#[inline(always)]
fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, mn) = scale_min_k4(&b[4..16]);
    let qs = &b[16..144];
    for g in 0..8 {
        let dg = d * f32::from(sc[g]);
        let mg = dmin * f32::from(mn[g]);
        let (chunk, nib) = (g / 2, g % 2);
        for l in 0..32 {
            let q = (qs[chunk * 32 + l] >> (4 * nib)) & 0x0F;
            y[g * 32 + l] = dg * f32::from(q) - mg;
        }
    }
}

#[inline(always)]
fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (sc, mn) = scale_min_k4(&b[4..16]);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for g in 0..8 {
        let dg = d * f32::from(sc[g]);
        let mg = dmin * f32::from(mn[g]);
        let (chunk, nib) = (g / 2, g % 2);
        for l in 0..32 {
            let low = (qs[chunk * 32 + l] >> (4 * nib)) & 0x0F;
            let high = (qh[l] >> g) & 1;
            y[g * 32 + l] = dg * f32::from(low | (high << 4)) - mg;
        }
    }
}

#[inline(always)]
fn q6_k(b: &[u8], y: &mut [f32]) {
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    let mut ds = [0f32; 16];
    for (v, &s) in ds.iter_mut().zip(scales) {
        *v = d * f32::from(s as i8);
    }
    for e in 0..256 {
        let (half, r) = (e / 128, e % 128);
        let low = (ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0x0F;
        let high = (qh[half * 32 + r % 32] >> (2 * (r / 32))) & 0x03;
        let q = ((low | (high << 4)) as i8).wrapping_sub(32);
        y[e] = ds[e / 16] * f32::from(q);
    }
}

#[inline(always)]
fn tq1_0(b: &[u8], y: &mut [f32]) {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let (qs, qh) = (&b[0..48], &b[48..52]);
    let d = f16_at(b, 52);
    let trit = |v: u8| f32::from(((u16::from(v) * 3) >> 8) as i8 - 1);
    for (p, &m) in POW3.iter().enumerate() {
        for l in 0..32 {
            y[p * 32 + l] = d * trit(qs[l].wrapping_mul(m));
        }
        for l in 0..16 {
            y[160 + p * 16 + l] = d * trit(qs[32 + l].wrapping_mul(m));
        }
    }
    for (p, &m) in POW3[..4].iter().enumerate() {
        for l in 0..4 {
            y[240 + p * 4 + l] = d * trit(qh[l].wrapping_mul(m));
        }
    }
}

#[inline(always)]
fn tq2_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 64);
    for e in 0..256 {
        let (half, shift, l) = (e / 128, (e % 128) / 32, e % 32);
        let q = ((b[half * 32 + l] >> (2 * shift)) & 3) as i8 - 1;
        y[e] = d * f32::from(q);
    }
}

/// ggml's E8M0 scale halved (`ggml_e8m0_to_fp32_half`).
#[inline(always)]
fn e8m0_half(x: u8) -> f32 {
    let bits = if x < 2 {
        0x0020_0000u32 << x
    } else {
        u32::from(x - 1) << 23
    };
    f32::from_bits(bits)
}

#[inline(always)]
fn mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    for (l, &q) in b[1..17].iter().enumerate() {
        y[l] = d * f32::from(KVALUES_FP4[(q & 0x0F) as usize]);
        y[l + 16] = d * f32::from(KVALUES_FP4[(q >> 4) as usize]);
    }
}

/// gguf-py's unsigned E4M3 scale, halved (the sign bit is ignored; 0x7F
/// and 0 give 0).
#[inline(always)]
fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = i32::from((x >> 3) & 0x0F);
    let man = f32::from(x & 7);
    let raw = if exp == 0 {
        man * (1.0 / 512.0)
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    };
    raw * 0.5
}

#[inline(always)]
fn nvfp4(b: &[u8], y: &mut [f32]) {
    for s in 0..4 {
        let d = ue4m3_half(b[s]);
        for k in 0..8 {
            let q = b[4 + s * 8 + k];
            y[s * 16 + k] = d * f32::from(KVALUES_FP4[(q & 0x0F) as usize]);
            y[s * 16 + 8 + k] = d * f32::from(KVALUES_FP4[(q >> 4) as usize]);
        }
    }
}

#[inline(always)]
fn iq2_xxs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let aux0 = u32_at(b, 2 + 8 * ib);
        let aux1 = u32_at(b, 6 + 8 * ib);
        let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
        for l in 0..4 {
            let grid: [f32; 8] = grid_row(GRID_IQ2_XXS, ((aux0 >> (8 * l)) & 0xFF) as usize);
            let signs = KSIGNS[((aux1 >> (7 * l)) & 0x7F) as usize];
            for j in 0..8 {
                y[ib * 32 + l * 8 + j] = signed(db * grid[j], signs >> j & 1 != 0);
            }
        }
    }
}

#[inline(always)]
fn iq2_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let scales = &b[66..74];
    for k in 0..32 {
        let q = u16_at(b, 2 + 2 * k);
        let s = (scales[k / 4] >> (4 * ((k / 2) % 2))) & 0x0F;
        let db = d * (0.5 + f32::from(s)) * 0.25;
        let grid: [f32; 8] = grid_row(GRID_IQ2_XS, usize::from(q & 511));
        let signs = KSIGNS[usize::from(q >> 9)];
        for j in 0..8 {
            y[k * 8 + j] = signed(db * grid[j], signs >> j & 1 != 0);
        }
    }
}

#[inline(always)]
fn iq2_s(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let (qs, signs, qh, scales) = (&b[2..34], &b[34..66], &b[66..74], &b[74..82]);
    for k in 0..32 {
        let high = u16::from((qh[k / 4] >> (2 * (k % 4))) & 3);
        let index = u16::from(qs[k]) | (high << 8);
        let s = (scales[k / 4] >> (4 * ((k / 2) % 2))) & 0x0F;
        let db = d * (0.5 + f32::from(s)) * 0.25;
        let grid: [f32; 8] = grid_row(GRID_IQ2_S, usize::from(index));
        for j in 0..8 {
            y[k * 8 + j] = signed(db * grid[j], signs[k] >> j & 1 != 0);
        }
    }
}

#[inline(always)]
fn iq3_xxs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..66];
    for ib in 0..8 {
        let aux = u32_at(b, 66 + 4 * ib);
        let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
        for l in 0..4 {
            let signs = KSIGNS[((aux >> (7 * l)) & 0x7F) as usize];
            for half in 0..2 {
                let grid: [f32; 4] = grid_row(GRID_IQ3_XXS, usize::from(qs[ib * 8 + l * 2 + half]));
                for j in 0..4 {
                    let bit = half * 4 + j;
                    y[ib * 32 + l * 8 + bit] = signed(db * grid[j], signs >> bit & 1 != 0);
                }
            }
        }
    }
}

#[inline(always)]
fn iq3_s(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let (qs, qh, signs, scales) = (&b[2..66], &b[66..74], &b[74..106], &b[106..110]);
    for k in 0..64 {
        let high = u16::from((qh[k / 8] >> (k % 8)) & 1);
        let index = u16::from(qs[k]) | (high << 8);
        let e0 = k * 4;
        let sb = e0 / 32;
        let s = (scales[sb / 2] >> (4 * (sb % 2))) & 0x0F;
        let db = d * f32::from(1 + 2 * s);
        let grid: [f32; 4] = grid_row(GRID_IQ3_S, usize::from(index));
        for j in 0..4 {
            let e = e0 + j;
            y[e] = signed(db * grid[j], signs[e / 8] >> (e % 8) & 1 != 0);
        }
    }
}

#[inline(always)]
fn iq1_s(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..34];
    for ib in 0..8 {
        let qh = u16_at(b, 34 + 2 * ib);
        let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
        let delta = if qh & 0x8000 == 0 { 0.125f32 } else { -0.125 };
        for l in 0..4 {
            let index = u16::from(qs[ib * 4 + l]) | (((qh >> (3 * l)) & 7) << 8);
            let grid: [f32; 8] = grid_row(GRID_IQ1_S, usize::from(index));
            for j in 0..8 {
                y[ib * 32 + l * 8 + j] = dl * (grid[j] + delta);
            }
        }
    }
}

#[inline(always)]
fn iq1_m(b: &[u8], y: &mut [f32]) {
    let (qs, qh) = (&b[0..32], &b[32..48]);
    let sc = [u16_at(b, 48), u16_at(b, 50), u16_at(b, 52), u16_at(b, 54)];
    let bits = ((sc[0] & 0xF000) >> 12)
        | ((sc[1] & 0xF000) >> 8)
        | ((sc[2] & 0xF000) >> 4)
        | (sc[3] & 0xF000);
    let d = f16::from_bits(bits).to_f32();
    for k in 0..32 {
        let v = (qh[k / 2] >> (4 * (k % 2))) & 0x0F;
        let index = u16::from(qs[k]) | (u16::from(v & 7) << 8);
        let delta = if v & 0x08 == 0 { 0.125f32 } else { -0.125 };
        let s = k / 2; // 16 scales, one per 16 values
        let scale = (sc[s / 4] >> (3 * (s % 4))) & 7;
        let dl = d * f32::from(2 * scale + 1);
        let grid: [f32; 8] = grid_row(GRID_IQ1_S, usize::from(index));
        for j in 0..8 {
            y[k * 8 + j] = dl * (grid[j] + delta);
        }
    }
}

#[inline(always)]
fn iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (l, &q) in b[2..18].iter().enumerate() {
        y[l] = d * f32::from(KVALUES_IQ4NL[(q & 0x0F) as usize]);
        y[l + 16] = d * f32::from(KVALUES_IQ4NL[(q >> 4) as usize]);
    }
}

#[inline(always)]
fn iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let sh = u16_at(b, 2);
    let (sl, qs) = (&b[4..8], &b[8..136]);
    for k in 0..8 {
        let low = (sl[k / 2] >> (4 * (k % 2))) & 0x0F;
        let high = ((sh >> (2 * k)) & 3) as u8;
        let dl = d * f32::from(((low | (high << 4)) as i8).wrapping_sub(32));
        for l in 0..16 {
            let q = qs[k * 16 + l];
            y[k * 32 + l] = dl * f32::from(KVALUES_IQ4NL[(q & 0x0F) as usize]);
            y[k * 32 + 16 + l] = dl * f32::from(KVALUES_IQ4NL[(q >> 4) as usize]);
        }
    }
}

#[inline(always)]
fn bf16(b: &[u8], y: &mut [f32]) {
    y[0] = f32::from_bits(u32::from(u16_at(b, 0)) << 16);
}

#[inline(always)]
fn f16_plain(b: &[u8], y: &mut [f32]) {
    y[0] = f16_at(b, 0);
}

#[inline(always)]
fn f32_plain(b: &[u8], y: &mut [f32]) {
    y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
}

/// The block decoder of a type, if it has one.
/// Decodes one block into its values.
type Decoder = fn(&[u8], &mut [f32]);

fn decoder(t: GgmlType) -> Option<Decoder> {
    use GgmlType::*;
    Some(match t {
        F32 => f32_plain,
        F16 => f16_plain,
        BF16 => bf16,
        Q4_0 => q4_0,
        Q4_1 => q4_1,
        Q5_0 => q5_0,
        Q5_1 => q5_1,
        Q8_0 => q8_0,
        Q2_K => q2_k,
        Q3_K => q3_k,
        Q4_K => q4_k,
        Q5_K => q5_k,
        Q6_K => q6_k,
        TQ1_0 => tq1_0,
        TQ2_0 => tq2_0,
        MXFP4 => mxfp4,
        NVFP4 => nvfp4,
        IQ2_XXS => iq2_xxs,
        IQ2_XS => iq2_xs,
        IQ2_S => iq2_s,
        IQ3_XXS => iq3_xxs,
        IQ3_S => iq3_s,
        IQ1_S => iq1_s,
        IQ1_M => iq1_m,
        IQ4_NL => iq4_nl,
        IQ4_XS => iq4_xs,
        _ => return None,
    })
}

/// Decodes whole blocks `raw` of type `t` into `out` (one value per
/// element). The lengths are the caller's to match; extra input or output
/// is left alone. Every decoder is inlined here, and this is compiled
/// twice: for baseline x86-64 and with AVX2 (the same IEEE operations),
/// chosen at run time.
pub(crate) fn dequantize(t: GgmlType, raw: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { each_block_avx2(t, raw, out) };
        return;
    }
    each_block(t, raw, out);
}

/// [`each_block`] compiled with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn each_block_avx2(t: GgmlType, raw: &[u8], out: &mut [f32]) {
    each_block(t, raw, out);
}

/// [`dequantize`] without AVX2, for tests that compare the two builds.
#[cfg(test)]
pub(crate) fn dequantize_portable(t: GgmlType, raw: &[u8], out: &mut [f32]) {
    each_block(t, raw, out);
}

#[inline(always)]
fn each_block(t: GgmlType, raw: &[u8], out: &mut [f32]) {
    let (bs, ts) = (t.block_size() as usize, t.type_size() as usize);
    macro_rules! go {
        ($f:ident) => {
            for (block, y) in raw.chunks_exact(ts).zip(out.chunks_exact_mut(bs)) {
                $f(block, y);
            }
        };
    }
    use GgmlType::*;
    match t {
        F32 => go!(f32_plain),
        F16 => go!(f16_plain),
        BF16 => go!(bf16),
        Q4_0 => go!(q4_0),
        Q4_1 => go!(q4_1),
        Q5_0 => go!(q5_0),
        Q5_1 => go!(q5_1),
        Q8_0 => go!(q8_0),
        Q2_K => go!(q2_k),
        Q3_K => go!(q3_k),
        Q4_K => go!(q4_k),
        Q5_K => go!(q5_k),
        Q6_K => go!(q6_k),
        TQ1_0 => go!(tq1_0),
        TQ2_0 => go!(tq2_0),
        MXFP4 => go!(mxfp4),
        NVFP4 => go!(nvfp4),
        IQ2_XXS => go!(iq2_xxs),
        IQ2_XS => go!(iq2_xs),
        IQ2_S => go!(iq2_s),
        IQ3_XXS => go!(iq3_xxs),
        IQ3_S => go!(iq3_s),
        IQ1_S => go!(iq1_s),
        IQ1_M => go!(iq1_m),
        IQ4_NL => go!(iq4_nl),
        IQ4_XS => go!(iq4_xs),
        _ => {}
    }
}

/// Decodes whole blocks of type `t` to f32, as `gguf.quants.dequantize`
/// does (F32, F16 and BF16 included).
///
/// ```
/// use tensorfile::gguf::{dequantize_blocks, GgmlType};
/// let mut block = vec![0x00, 0x3C]; // d = 1.0 (f16)
/// block.extend([0x98; 16]); // codes 8 (low nibbles) and 9 (high)
/// let values = dequantize_blocks(GgmlType::Q4_0, &block)?;
/// assert_eq!(values[0], 0.0); // 1.0 * (8 - 8)
/// assert_eq!(values[16], 1.0); // 1.0 * (9 - 8)
/// # Ok::<(), tensorfile::gguf::GgufError>(())
/// ```
///
/// # Errors
/// A type this library does not decode (Q8_1, Q8_K, Q1_0, Q2_0, the
/// integers), or bytes that are not whole blocks.
pub fn dequantize_blocks(t: GgmlType, raw: &[u8]) -> Result<Vec<f32>, GgufError> {
    if decoder(t).is_none() {
        return Err(GgufError::Unsupported {
            tensor: String::new(),
            ggml_type: t.name().to_string(),
        });
    }
    let ts = t.type_size() as usize;
    if !raw.len().is_multiple_of(ts) {
        return Err(GgufError::Tensor {
            tensor: String::new(),
            problem: format!("{} bytes are not whole {t} blocks of {ts}", raw.len()),
        });
    }
    let mut out = vec![0f32; raw.len() / ts * t.block_size() as usize];
    dequantize(t, raw, &mut out);
    Ok(out)
}

/// The bits of the MLX affine layout (groups of 32) that holds a type
/// exactly: `scale * code + bias` in f32, with `scale` and `bias` the
/// block's own f32 products, gives the decoded values bit for bit.
pub(crate) fn affine_bits(t: GgmlType) -> Option<u32> {
    use GgmlType::*;
    match t {
        Q4_0 | Q4_1 | Q4_K => Some(4),
        Q5_0 | Q5_1 | Q5_K => Some(5),
        Q8_0 => Some(8),
        _ => None,
    }
}

/// One block as affine groups of 32: unsigned codes (one per element),
/// and per group the f32 scale and bias such that `scale * code + bias`
/// (each step rounded to f32) is the decoded value. For types of
/// [`affine_bits`] only; others are left alone.
pub(crate) fn affine_block(
    t: GgmlType,
    b: &[u8],
    codes: &mut [u8],
    scales: &mut [f32],
    biases: &mut [f32],
) {
    use GgmlType::*;
    match t {
        Q4_0 | Q4_1 => {
            let (d, qs) = (f16_at(b, 0), if t == Q4_0 { &b[2..18] } else { &b[4..20] });
            for (j, &q) in qs.iter().enumerate() {
                codes[j] = q & 0x0F;
                codes[j + 16] = q >> 4;
            }
            scales[0] = d;
            // d * (q - 8) = d * q + (-8 d), exactly in f32.
            biases[0] = if t == Q4_0 { -8.0 * d } else { f16_at(b, 2) };
        }
        Q5_0 | Q5_1 => {
            let d = f16_at(b, 0);
            let (qh, qs) = if t == Q5_0 {
                (u32_at(b, 2), &b[6..22])
            } else {
                (u32_at(b, 4), &b[8..24])
            };
            for (j, &q) in qs.iter().enumerate() {
                codes[j] = (q & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
                codes[j + 16] = (q >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            }
            scales[0] = d;
            biases[0] = if t == Q5_0 { -16.0 * d } else { f16_at(b, 2) };
        }
        Q8_0 => {
            let d = f16_at(b, 0);
            for (c, &q) in codes.iter_mut().zip(&b[2..34]) {
                *c = (q as i8 as i16 + 128) as u8;
            }
            scales[0] = d;
            biases[0] = -128.0 * d;
        }
        Q4_K | Q5_K => {
            let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let (sc, mn) = scale_min_k4(&b[4..16]);
            let (qh, qs) = if t == Q4_K {
                (&b[0..0], &b[16..144])
            } else {
                (&b[16..48], &b[48..176])
            };
            for g in 0..8 {
                scales[g] = d * f32::from(sc[g]);
                biases[g] = -(dmin * f32::from(mn[g]));
                let (chunk, nib) = (g / 2, g % 2);
                for l in 0..32 {
                    let low = (qs[chunk * 32 + l] >> (4 * nib)) & 0x0F;
                    let high = if t == Q5_K { (qh[l] >> g) & 1 } else { 0 };
                    codes[g * 32 + l] = low | (high << 4);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random blocks of every type decode to the same bits with and without
    /// AVX2 (NaN payloads included).
    #[test]
    fn portable_and_avx2_decoders_agree() {
        let mut rng = tensorfile_testkit::Rng::new(0x9E37_79B9_7F4A_7C15);
        for t in GgmlType::all().filter(|&t| decoder(t).is_some()) {
            let n = 64usize;
            let raw: Vec<u8> = (0..n * t.type_size() as usize)
                .map(|_| rng.next_u64() as u8)
                .collect();
            let len = n * t.block_size() as usize;
            let (mut a, mut b) = (vec![0f32; len], vec![0f32; len]);
            dequantize_portable(t, &raw, &mut a);
            dequantize(t, &raw, &mut b);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{t}"
            );
        }
    }
}
