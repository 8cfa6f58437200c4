//! Codes narrower than a byte, as every sub-byte layout here stores them:
//! one little-endian bit stream, code `k` in bits `k * w .. (k + 1) * w`,
//! stream byte `j` holding bits `8j .. 8j + 8`.
//!
//! That one rule is F4 (`w = 4`: code `2k` in the low nibble of byte `k`),
//! F6 (`w = 6`: four codes per three bytes, code `k` in bits `6k..6k + 6`
//! of `b0 | b1 << 8 | b2 << 16`), int4 weights (nibbles, low first) and
//! MLX's packed U32 words of 2, 3, 4, 5, 6 or 8 bits (a little-endian word
//! is four stream bytes). Fused kernels elsewhere (the int4 AVX2
//! quantizer) compute the same bytes and are tested against this module.
//!
//! Codes go in a `u8` each, in the low bits; bits above the width are
//! ignored when packing.

/// Codes and bytes of the smallest whole group of width `w` (1 to 8):
/// `(8 / w, 1)` for widths dividing 8, `(4, 3)` for 6, `(8, w)` otherwise.
pub(crate) const fn group(w: u32) -> (usize, usize) {
    match w {
        1 | 2 | 4 | 8 => (8 / w as usize, 1),
        6 => (4, 3),
        _ => (8, w as usize),
    }
}

/// Unpacks one group: `packed` holds a group's bytes, `codes` its codes.
#[inline(always)]
fn unpack_group(w: u32, packed: &[u8], codes: &mut [u8]) {
    let mut v = 0u64;
    for (i, &b) in packed.iter().enumerate() {
        v |= u64::from(b) << (8 * i);
    }
    let mask = (1u64 << w) - 1;
    for (k, c) in codes.iter_mut().enumerate() {
        *c = ((v >> (k as u32 * w)) & mask) as u8;
    }
}

/// Packs one group: the inverse of [`unpack_group`].
#[inline(always)]
fn pack_group(w: u32, codes: &[u8], packed: &mut [u8]) {
    let mask = (1u64 << w) - 1;
    let mut v = 0u64;
    for (k, &c) in codes.iter().enumerate() {
        v |= (u64::from(c) & mask) << (k as u32 * w);
    }
    for (i, b) in packed.iter_mut().enumerate() {
        *b = (v >> (8 * i)) as u8;
    }
}

/// Unpacks the codes of `packed` into `codes`, whole groups only: as many
/// as both hold (a shorter stream fills only the codes it holds).
pub(crate) fn unpack(w: u32, packed: &[u8], codes: &mut [u8]) {
    match w {
        8 => {
            let n = codes.len().min(packed.len());
            codes[..n].copy_from_slice(&packed[..n]);
        }
        // The common widths as plain shifts, which vectorize.
        4 => {
            for (c, &b) in codes.chunks_exact_mut(2).zip(packed) {
                c[0] = b & 0x0F;
                c[1] = b >> 4;
            }
        }
        _ => {
            let (n, b) = group(w);
            for (c, p) in codes.chunks_exact_mut(n).zip(packed.chunks_exact(b)) {
                unpack_group(w, p, c);
            }
        }
    }
}

/// Packs `codes` into `packed`, whole groups only: as many as both hold.
pub(crate) fn pack(w: u32, codes: &[u8], packed: &mut [u8]) {
    match w {
        8 => {
            let n = packed.len().min(codes.len());
            packed[..n].copy_from_slice(&codes[..n]);
        }
        4 => {
            for (c, b) in codes.chunks_exact(2).zip(packed.iter_mut()) {
                *b = (c[0] & 0x0F) | (c[1] << 4);
            }
        }
        _ => {
            let (n, b) = group(w);
            for (c, p) in codes.chunks_exact(n).zip(packed.chunks_exact_mut(b)) {
                pack_group(w, c, p);
            }
        }
    }
}

/// The codes of `packed` (whole groups), one per item.
pub(crate) fn codes(w: u32, packed: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let (n, b) = group(w);
    packed.chunks_exact(b).flat_map(move |p| {
        let mut c = [0u8; 8];
        unpack_group(w, p, &mut c[..n]);
        c.into_iter().take(n)
    })
}

/// Packs the codes `codes` yields into `packed` (whole groups: `packed`
/// decides how many are taken; missing codes are zeros).
pub(crate) fn pack_from(w: u32, packed: &mut [u8], codes: impl IntoIterator<Item = u8>) {
    let (n, b) = group(w);
    let mut codes = codes.into_iter();
    for p in packed.chunks_exact_mut(b) {
        let mut c = [0u8; 8];
        for slot in &mut c[..n] {
            *slot = codes.next().unwrap_or(0);
        }
        pack_group(w, &c[..n], p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f4_puts_the_first_code_in_the_low_nibble() {
        let mut p = [0u8; 2];
        pack(4, &[0x1, 0x2, 0xF, 0x0], &mut p);
        assert_eq!(p, [0x21, 0x0F]);
        assert_eq!(codes(4, &p).collect::<Vec<_>>(), [0x1, 0x2, 0xF, 0x0]);
    }

    #[test]
    fn f6_is_one_little_endian_bit_stream() {
        let c = [0b000001, 0b000010, 0b000011, 0b111111];
        let mut p = [0u8; 3];
        pack(6, &c, &mut p);
        let w: u32 = 1 | 2 << 6 | 3 << 12 | 0x3F << 18;
        assert_eq!(p, w.to_le_bytes()[..3]);
        assert_eq!(p, [0x81, 0x30, 0xFC]);
        assert_eq!(codes(6, &p).collect::<Vec<_>>(), c);
    }

    #[test]
    fn every_width_round_trips_and_the_three_forms_agree() {
        for w in 1..=8u32 {
            let (n, b) = group(w);
            assert_eq!(n * w as usize, b * 8, "width {w}");
            let count = n * 9;
            let c: Vec<u8> = (0..count).map(|i| (i * 7 % (1 << w)) as u8).collect();
            let mut p = vec![0u8; count * w as usize / 8];
            pack(w, &c, &mut p);
            let mut via_iter = vec![0u8; p.len()];
            pack_from(w, &mut via_iter, c.iter().copied());
            assert_eq!(via_iter, p, "width {w}");
            let mut back = vec![0u8; count];
            unpack(w, &p, &mut back);
            assert_eq!(back, c, "width {w}");
            assert_eq!(codes(w, &p).collect::<Vec<_>>(), c, "width {w}");
            // Code k is bits k*w.. of the stream.
            for (k, &code) in c.iter().enumerate() {
                let bit = |i: usize| (p[i / 8] >> (i % 8)) & 1;
                let got = (0..w as usize).fold(0u8, |a, i| a | bit(k * w as usize + i) << i);
                assert_eq!(got, code, "width {w}, code {k}");
            }
        }
    }
}
