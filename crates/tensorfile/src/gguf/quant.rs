//! Quantizers: rows of f32 to ggml blocks, byte for byte as the reference
//! tools make them.
//!
//! - BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: as `gguf.quants.quantize`
//!   (gguf-py 0.19; equal to llama.cpp's `ggml_quantize_chunk`).
//! - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: as llama.cpp's quantizer with no
//!   importance matrix (its reference `quantize_row_*_ref`, which
//!   `llama_model_quantize` runs): the same f32 operations in the same
//!   order, without fused multiply-adds.
//!
//! Every block depends on its own values only, so rows and blocks can be
//! quantized in any order and in parallel. Values that are not finite are
//! refused (the quantized types have no way to hold them faithfully);
//! BF16 keeps them, as gguf-py does (NaN made quiet).

// Block layouts are index arithmetic; index loops read like ggml's layout.
#![allow(clippy::needless_range_loop)]

use half::f16;

use super::types::GgmlType;

/// Why a row could not be quantized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RowFault {
    /// The type is not quantized here.
    Unsupported,
    /// The row is not whole blocks, or the output has the wrong size.
    Length,
    /// A value that is not finite, at this element of the row.
    NotFinite {
        /// Element index in the row.
        col: usize,
        /// The value.
        value: f32,
    },
}

/// Whether this library quantizes to `t` (F32 and F16 included).
pub fn quantizes(t: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        t,
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K
    )
}

#[inline(always)]
fn put_f16(out: &mut [u8], at: usize, v: f32) {
    out[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

#[inline]
fn get_f16(out: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([out[at], out[at + 1]])).to_f32()
}

/// ggml's `nearest_int`: round to nearest even through the 1.5 * 2^23
/// trick (exact for |x| <= 2^22; the same bits as ggml beyond).
#[inline]
fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// The element of largest magnitude (the first one of them), as numpy's
/// `argmax(abs(x))` picks it.
#[inline(always)]
fn signed_max(x: &[f32]) -> f32 {
    let mut best = 0usize;
    let mut amax = x[0].abs();
    for (i, v) in x.iter().enumerate().skip(1) {
        if v.abs() > amax {
            amax = v.abs();
            best = i;
        }
    }
    x[best]
}

/// `1 / d`, or 0 when `d` is zero (numpy's `where(d == 0, 0, 1 / d)`).
#[inline(always)]
fn inverse(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

#[inline(always)]
fn q4_0(x: &[f32], y: &mut [u8]) {
    let d = signed_max(x) / -8.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    for j in 0..16 {
        // Truncation of x * id + 8.5, clipped at 15: numpy's
        // trunc(...).astype(uint8).clip(0, 15).
        let q0 = trunc_clip(x[j] * id + 8.5, 15.0);
        let q1 = trunc_clip(x[j + 16] * id + 8.5, 15.0);
        y[2 + j] = q0 | (q1 << 4);
    }
}

#[inline(always)]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = (x[0], x[0]);
    for &v in &x[1..] {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    (lo, hi)
}

#[inline(always)]
fn q4_1(x: &[f32], y: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    put_f16(y, 2, min);
    for j in 0..16 {
        let q0 = trunc_clip((x[j] - min) * id + 0.5, 15.0);
        let q1 = trunc_clip((x[j + 16] - min) * id + 0.5, 15.0);
        y[4 + j] = q0 | (q1 << 4);
    }
}

/// The low nibbles and fifth bits of 32 five-bit codes.
#[inline(always)]
fn pack5(q: &[u8; 32], qh: &mut [u8], qs: &mut [u8]) {
    let mut h = 0u32;
    for (j, &c) in q.iter().enumerate() {
        h |= u32::from((c >> 4) & 1) << j;
    }
    qh.copy_from_slice(&h.to_le_bytes());
    for j in 0..16 {
        qs[j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
}

#[inline(always)]
fn q5_0(x: &[f32], y: &mut [u8]) {
    let d = signed_max(x) / -16.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    let mut q = [0u8; 32];
    for (c, &v) in q.iter_mut().zip(x) {
        *c = trunc_clip(v * id + 16.5, 31.0);
    }
    let (qh, qs) = y[2..22].split_at_mut(4);
    pack5(&q, qh, qs);
}

#[inline(always)]
fn q5_1(x: &[f32], y: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    put_f16(y, 2, min);
    let mut q = [0u8; 32];
    for (c, &v) in q.iter_mut().zip(x) {
        *c = trunc_clip((v - min) * id + 0.5, 31.0);
    }
    let (qh, qs) = y[4..24].split_at_mut(4);
    pack5(&q, qh, qs);
}

/// An integral `r` with |r| < 2^22 as an integer, through the 1.5 * 2^23
/// trick (integer operations only, so loops of it vectorize).
#[inline(always)]
fn small_int(r: f32) -> i32 {
    (r + 12_582_912.0).to_bits() as i32 - 0x4B40_0000
}

/// `v` rounded half away from zero (C's `roundf`, numpy's `np_roundf`
/// here), for |v| < 2^22.
#[inline(always)]
fn round_away(v: f32) -> i32 {
    let t = v.trunc();
    let frac = v - t; // exact
    let step = if frac >= 0.5 {
        1.0
    } else if frac <= -0.5 {
        -1.0
    } else {
        0.0
    };
    small_int(t + step)
}

/// `v` truncated and clipped to `0..=hi`: numpy's
/// `trunc(v).astype(uint8).clip(0, hi)` and C's `MIN(hi, (int8_t)v)` for
/// the values quantizers give (0 <= v < 2^22).
#[inline(always)]
fn trunc_clip(v: f32, hi: f32) -> u8 {
    let t = v.trunc();
    let t = if t > hi { hi } else { t };
    let t = if t < 0.0 { 0.0 } else { t };
    small_int(t) as u8
}

#[inline(always)]
fn q8_0(x: &[f32], y: &mut [u8]) {
    let Ok(x) = <&[f32; 32]>::try_from(x) else {
        return;
    };
    // C's MAX(amax, fabsf(v)): a compare and a select, so it vectorizes.
    let mut amax = 0f32;
    for v in x {
        let a = v.abs();
        amax = if amax > a { amax } else { a };
    }
    let d = amax / 127.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    let mut q = [0u8; 32];
    for (o, &v) in q.iter_mut().zip(x) {
        *o = round_away(v * id) as i8 as u8;
    }
    y[2..34].copy_from_slice(&q);
}

/// gguf-py's BF16: NaN made quiet (keeping its sign and top payload bits),
/// then rounded to nearest even.
fn bf16(x: &[f32], y: &mut [u8]) {
    for (o, &v) in y.chunks_exact_mut(2).zip(x) {
        let mut n = v.to_bits();
        if n & 0x7fff_ffff > 0x7f80_0000 {
            n = (n & 0xffff_0000) | (64 << 16);
        }
        let r = ((u64::from(n) + 0x7fff + u64::from((n >> 16) & 1)) >> 16) as u16;
        o.copy_from_slice(&r.to_le_bytes());
    }
}

const GROUP_MAX_EPS: f32 = 1e-15;

/// [`signed_max`], or `None` when every magnitude is below
/// [`GROUP_MAX_EPS`] (a group ggml writes as zeros).
fn signed_max_above_eps(x: &[f32]) -> Option<f32> {
    let max = signed_max(x);
    (max.abs() >= GROUP_MAX_EPS).then_some(max)
}

/// ggml's `make_qx_quants` with weights `x * x` (rmse_type 1) and no
/// importance matrix: the scale, and codes `L` offset by `nmax`.
fn make_qx_quants(x: &[f32], nmax: i32, l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let Some(max) = signed_max_above_eps(x) else {
        l_out[..n].fill(0);
        return 0.0;
    };
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = (-nmax) as f32 / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for i in 0..n {
        let l = clamp(nearest_int(iscale * x[i]));
        l_out[i] = (l + nmax) as i8;
        let w = x[i] * x[i];
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for i in 0..n {
            let l = clamp(nearest_int(iscale * x[i]));
            let w = x[i] * x[i];
            sumlx += w * x[i] * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = clamp(nearest_int(iscale * x[i]));
                l_out[i] = (nmax + l) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with `do_rmse`: the scale, codes offset by
/// `nmax`.
fn make_q3_quants(x: &[f32], nmax: i32, l_out: &mut [i8]) -> f32 {
    let n = x.len();
    let Some(max) = signed_max_above_eps(x) else {
        l_out[..n].fill(0);
        return 0.0;
    };
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = (-nmax) as f32 / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for i in 0..n {
        let l = clamp(nearest_int(iscale * x[i]));
        l_out[i] = l as i8;
        let w = x[i] * x[i];
        sumlx += w * x[i] * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for i in 0..n {
            let w = x[i] * x[i];
            let li = f32::from(l_out[i]);
            let mut slx = sumlx - w * x[i] * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = clamp(nearest_int(x[i] * sl2 / slx));
                if new_l != i32::from(l_out[i]) {
                    slx += w * x[i] * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l_out[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for l in &mut l_out[..n] {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// ggml's `make_qkx2_quants`: scale and (negated) minimum of a group with
/// weights, codes in `l_out`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    l_out: &mut [u8],
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l_out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The 6-bit scale and min `j` of a Q4_K / Q5_K block's packed scales.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs 256 2-bit codes as Q2_K and Q3_K store them.
fn pack2(l: &[u8], qs: &mut [u8]) {
    for j in (0..256).step_by(128) {
        for k in 0..32 {
            qs[j / 4 + k] =
                l[j + k] | (l[j + k + 32] << 2) | (l[j + k + 64] << 4) | (l[j + k + 96] << 6);
        }
    }
}

fn q2_k(x: &[f32], y: &mut [u8]) {
    let mut l = [0u8; 256];
    let mut laux = [0u8; 16];
    let mut weights = [0f32; 16];
    let (mut mins, mut scales) = ([0f32; 16], [0f32; 16]);
    let q4scale = 15f32;
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..16 {
        let g = &x[16 * j..16 * j + 16];
        for (w, v) in weights.iter_mut().zip(g) {
            *w = v.abs();
        }
        let (s, m) = make_qkx2_quants(
            g,
            &weights,
            3,
            &mut l[16 * j..16 * j + 16],
            &mut laux,
            -0.5,
            0.1,
            15,
            true,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let (sc, rest) = y.split_at_mut(16);
    if max_scale > 0.0 {
        let iscale = q4scale / max_scale;
        for j in 0..16 {
            sc[j] = nearest_int(iscale * scales[j]) as u8;
        }
        put_f16(rest, 64, max_scale / q4scale);
    } else {
        sc.fill(0);
        put_f16(rest, 64, 0.0);
    }
    if max_min > 0.0 {
        let iscale = q4scale / max_min;
        for j in 0..16 {
            let m = nearest_int(iscale * mins[j]);
            sc[j] |= (m << 4) as u8;
        }
        put_f16(rest, 66, max_min / q4scale);
    } else {
        put_f16(rest, 66, 0.0);
    }
    let (d_all, dmin_all) = (get_f16(rest, 64), get_f16(rest, 66));
    for j in 0..16 {
        let d = d_all * f32::from(sc[j] & 0x0F);
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(sc[j] >> 4);
        for ii in 0..16 {
            l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
        }
    }
    pack2(&l, &mut rest[..64]);
}

fn q3_k(x: &[f32], y: &mut [u8]) {
    let mut l = [0i8; 256];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for j in 0..16 {
        scales[j] = make_q3_quants(&x[16 * j..16 * j + 16], 4, &mut l[16 * j..16 * j + 16]);
        let s = scales[j].abs();
        if s > amax {
            amax = s;
            max_scale = scales[j];
        }
    }
    let (hmask, rest) = y.split_at_mut(32);
    let (qs, rest) = rest.split_at_mut(64);
    let (sc, d_bytes) = rest.split_at_mut(12);
    sc.fill(0);
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for j in 0..16 {
            let v = (nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) + 32;
            let v = v as u8;
            if j < 8 {
                sc[j] = v & 0x0F;
            } else {
                sc[j - 8] |= (v & 0x0F) << 4;
            }
            sc[j % 4 + 8] |= (v >> 4) << (2 * (j / 4));
        }
        put_f16(d_bytes, 0, 1.0 / iscale);
    } else {
        put_f16(d_bytes, 0, 0.0);
    }
    let d_all = get_f16(d_bytes, 0);
    for j in 0..16 {
        let low = if j < 8 { sc[j] & 0x0F } else { sc[j - 8] >> 4 };
        let s = ((low | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i8).wrapping_sub(32);
        let d = d_all * f32::from(s);
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as i8;
        }
    }
    hmask.fill(0);
    let (mut m, mut hm) = (0usize, 1u8);
    for v in l.iter_mut() {
        if *v > 3 {
            hmask[m] |= hm;
            *v -= 4;
        }
        m += 1;
        if m == 32 {
            m = 0;
            hm = hm.wrapping_shl(1);
        }
    }
    let codes: Vec<u8> = l.iter().map(|&v| v as u8).collect();
    pack2(&codes, qs);
}

/// Q4_K and Q5_K: 8 groups of 32 with 6-bit scales and mins.
fn qk_scales_mins(x: &[f32], nmax: i32, rmin: f32, nstep: i32, l: &mut [u8; 256], y: &mut [u8]) {
    let mut laux = [0u8; 32];
    let mut weights = [0f32; 32];
    let (mut mins, mut scales) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..8 {
        let g = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for &v in g {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(g) {
            *w = av_x + v.abs();
        }
        let (s, m) = make_qkx2_quants(
            g,
            &weights,
            nmax,
            &mut l[32 * j..32 * j + 32],
            &mut laux,
            rmin,
            0.1,
            nstep,
            false,
        );
        scales[j] = s;
        mins[j] = m;
        if s > max_scale {
            max_scale = s;
        }
        if m > max_min {
            max_min = m;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut y[4..16];
    sc.fill(0);
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    put_f16(y, 0, max_scale / 63.0);
    put_f16(y, 2, max_min / 63.0);
    let (d_all, dmin_all) = (get_f16(y, 0), get_f16(y, 2));
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &y[4..16]);
        let d = d_all * f32::from(s);
        if d == 0.0 {
            continue;
        }
        let dm = dmin_all * f32::from(m);
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

fn q4_k(x: &[f32], y: &mut [u8]) {
    let mut l = [0u8; 256];
    qk_scales_mins(x, 15, -1.0, 20, &mut l, y);
    let qs = &mut y[16..144];
    for (c, j) in (0..256).step_by(64).enumerate() {
        for k in 0..32 {
            qs[c * 32 + k] = l[j + k] | (l[j + k + 32] << 4);
        }
    }
}

fn q5_k(x: &[f32], y: &mut [u8]) {
    let mut l = [0u8; 256];
    qk_scales_mins(x, 31, -0.5, 15, &mut l, y);
    let (qh, ql) = y[16..176].split_at_mut(32);
    qh.fill(0);
    let (mut m1, mut m2) = (1u8, 2u8);
    for (c, n) in (0..256).step_by(64).enumerate() {
        for j in 0..32 {
            let mut l1 = l[n + j];
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            let mut l2 = l[n + j + 32];
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            ql[c * 32 + j] = l1 | (l2 << 4);
        }
        m1 = m1.wrapping_shl(2);
        m2 = m2.wrapping_shl(2);
    }
}

fn q6_k(x: &[f32], y: &mut [u8]) {
    let mut l = [0i8; 256];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs) = (0f32, 0f32);
    for ib in 0..16 {
        let s = make_qx_quants(&x[16 * ib..16 * ib + 16], 32, &mut l[16 * ib..16 * ib + 16]);
        scales[ib] = s;
        if s.abs() > max_abs {
            max_abs = s.abs();
            max_scale = s;
        }
    }
    if max_abs < GROUP_MAX_EPS {
        y[..210].fill(0);
        put_f16(y, 208, 0.0);
        return;
    }
    let iscale = -128.0 / max_scale;
    put_f16(y, 208, 1.0 / iscale);
    for ib in 0..16 {
        y[192 + ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
    }
    let d_all = get_f16(y, 208);
    for j in 0..16 {
        let d = d_all * f32::from(y[192 + j] as i8);
        if d == 0.0 {
            continue;
        }
        for ii in 0..16 {
            l[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    let (ql, rest) = y.split_at_mut(128);
    let qh = &mut rest[..64];
    for (c, j) in (0..256).step_by(128).enumerate() {
        for k in 0..32 {
            let v = |o: usize| l[j + k + o] as u8;
            ql[c * 64 + k] = (v(0) & 0x0F) | ((v(64) & 0x0F) << 4);
            ql[c * 64 + k + 32] = (v(32) & 0x0F) | ((v(96) & 0x0F) << 4);
            qh[c * 32 + k] =
                (v(0) >> 4) | ((v(32) >> 4) << 2) | ((v(64) >> 4) << 4) | ((v(96) >> 4) << 6);
        }
    }
}

/// Quantizes the blocks of `x` into `y` (lengths checked by the caller):
/// `Err(())` when a value is not finite. Every kernel is inlined here, and
/// this is compiled twice: for baseline x86-64 and with AVX2 (the same
/// operations, IEEE arithmetic in either; chosen at run time).
#[inline(always)]
fn each_block(t: GgmlType, x: &[f32], y: &mut [u8]) -> Result<(), ()> {
    let (bs, ts) = (t.block_size() as usize, t.type_size() as usize);
    let mut bad = 0u32;
    macro_rules! go {
        ($f:ident) => {
            for (xb, yb) in x.chunks_exact(bs).zip(y.chunks_exact_mut(ts)) {
                // An exponent of all ones is infinity or NaN; the test is
                // branch-free (it vectorizes) and runs on the block while it
                // is in L1. A block that has one is not quantized.
                let mut b = 0u32;
                for v in xb {
                    b |= u32::from(v.to_bits() & 0x7f80_0000 == 0x7f80_0000);
                }
                bad |= b;
                if b == 0 {
                    $f(xb, yb);
                }
            }
        };
    }
    use GgmlType::*;
    match t {
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
        _ => {}
    }
    if bad != 0 {
        return Err(());
    }
    Ok(())
}

/// [`each_block`] compiled with AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn each_block_avx2(t: GgmlType, x: &[f32], y: &mut [u8]) -> Result<(), ()> {
    each_block(t, x, y)
}

fn quantize_blocks(t: GgmlType, x: &[f32], y: &mut [u8]) -> Result<(), ()> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { each_block_avx2(t, x, y) };
    }
    each_block(t, x, y)
}

/// Quantizes `x` (whole blocks of `t`) into `y` (exactly their bytes):
/// F32 and F16 as numpy's `astype`, BF16 and the quantized types as the
/// reference tools do.
///
/// ```
/// use tensorfile::gguf::{quantize_row as quantize_into, GgmlType};
/// let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
/// let mut y = [0u8; 34];
/// quantize_into(GgmlType::Q8_0, &x, &mut y).unwrap();
/// assert_eq!(y[2], (-127i8) as u8); // -16 is the largest magnitude
/// ```
///
/// # Errors
/// A type not quantized here, lengths that are not whole blocks, or (for
/// the quantized types) a value that is not finite.
pub fn quantize_into(t: GgmlType, x: &[f32], y: &mut [u8]) -> Result<(), RowFault> {
    use GgmlType::*;
    let (bs, ts) = (t.block_size() as usize, t.type_size() as usize);
    if !x.len().is_multiple_of(bs) || y.len() != x.len() / bs * ts {
        return Err(RowFault::Length);
    }
    match t {
        GgmlType::F32 => {
            y.copy_from_slice(bytemuck::cast_slice(x));
            return Ok(());
        }
        GgmlType::F16 => {
            // half's slice conversion (F16C where the CPU has it) rounds to
            // nearest even, as numpy's astype does.
            use half::slice::HalfFloatSliceExt;
            match bytemuck::try_cast_slice_mut::<u8, f16>(y) {
                Ok(h) => h.convert_from_f32_slice(x),
                Err(_) => {
                    for (o, v) in y.chunks_exact_mut(2).zip(x) {
                        o.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
                    }
                }
            }
            return Ok(());
        }
        GgmlType::BF16 => {
            bf16(x, y);
            return Ok(());
        }
        _ => {}
    }
    if !matches!(
        t,
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K
    ) {
        return Err(RowFault::Unsupported);
    }
    quantize_blocks(t, x, y).map_err(|()| {
        let col = x.iter().position(|v| !v.is_finite()).unwrap_or(0);
        RowFault::NotFinite { col, value: x[col] }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The portable build and the AVX2 build of the kernels give the same
    /// bytes (the fixture tests run whichever the machine picks).
    #[test]
    fn portable_and_avx2_kernels_agree() {
        let mut rng = tensorfile_testkit::Rng::new(0x2545_F491_4F6C_DD1D);
        let mut next = move || rng.next_u64();
        let x: Vec<f32> = (0..256 * 64)
            .map(|i| {
                let r = next();
                let mag = 2f32.powi((r % 40) as i32 - 30);
                let v = ((r >> 20) as f32 / (1u64 << 44) as f32 - 0.5) * mag;
                if i % 97 == 0 {
                    0.0
                } else {
                    v
                }
            })
            .collect();
        use GgmlType::*;
        for t in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K] {
            let n = x.len() / t.block_size() as usize * t.type_size() as usize;
            let (mut a, mut b) = (vec![0u8; n], vec![0u8; n]);
            each_block(t, &x, &mut a).unwrap();
            quantize_blocks(t, &x, &mut b).unwrap();
            assert_eq!(a, b, "{t}");
            let (mut da, mut db) = (vec![0f32; x.len()], vec![0f32; x.len()]);
            crate::gguf::dequant::dequantize_portable(t, &a, &mut da);
            crate::gguf::dequant::dequantize(t, &a, &mut db);
            assert!(
                da.iter().zip(&db).all(|(p, q)| p.to_bits() == q.to_bits()),
                "{t}"
            );
        }
    }
}
