//! Sub-byte storage: how F4 and F6 codes sit in a tensor's bytes.
//!
//! - **F4**: two values per byte; value `2k` in the low nibble of byte `k`,
//!   value `2k + 1` in the high nibble.
//! - **F6** (`F6_E2M3`, `F6_E3M2`): four values per three bytes, read as
//!   one little-endian bit stream: value `k` occupies bits `6k..6k + 6` of
//!   the 24-bit little-endian integer `b0 | b1 << 8 | b2 << 16`.
//!
//! Codes are one per `u8` when unpacked (the value in the low bits).

/// Values per packing group and bytes per group for a sub-byte width.
pub(crate) const fn group(bits: u32) -> (usize, usize) {
    match bits {
        4 => (2, 1),
        _ => (4, 3),
    }
}

/// The codes of `src` (whole groups), one per item. `bits` is 4 or 6.
pub(crate) fn unpack(bits: u32, src: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let (_, b) = group(bits);
    src.chunks_exact(b).flat_map(move |g| {
        if bits == 4 {
            [g[0] & 0xF, g[0] >> 4, 0, 0].into_iter().take(2)
        } else {
            let w = u32::from(g[0]) | u32::from(g[1]) << 8 | u32::from(g[2]) << 16;
            [0, 6, 12, 18]
                .map(|s| (w >> s) as u8 & 0x3F)
                .into_iter()
                .take(4)
        }
    })
}

/// Packs `codes` into `out` (whole groups: `out` decides how many codes are
/// taken). `bits` is 4 or 6; bits of a code above `bits` are ignored.
pub(crate) fn pack(bits: u32, out: &mut [u8], codes: impl IntoIterator<Item = u8>) {
    let mut codes = codes.into_iter();
    if bits == 4 {
        for o in out.iter_mut() {
            let lo = codes.next().unwrap_or(0) & 0xF;
            let hi = codes.next().unwrap_or(0) & 0xF;
            *o = lo | hi << 4;
        }
    } else {
        for o in out.chunks_exact_mut(3) {
            let mut w = 0u32;
            for k in 0..4 {
                w |= u32::from(codes.next().unwrap_or(0) & 0x3F) << (6 * k);
            }
            o.copy_from_slice(&w.to_le_bytes()[..3]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(bits: u32, codes: &[u8]) -> Vec<u8> {
        let mut out = vec![0; codes.len() * bits as usize / 8];
        pack(bits, &mut out, codes.iter().copied());
        out
    }

    #[test]
    fn f4_first_value_in_low_nibble() {
        let p = packed(4, &[0x1, 0x2, 0xF, 0x0]);
        assert_eq!(p, [0x21, 0x0F]);
        assert_eq!(unpack(4, &p).collect::<Vec<_>>(), [0x1, 0x2, 0xF, 0x0]);
    }

    #[test]
    fn f6_is_one_little_endian_bit_stream() {
        // value k in bits 6k..6k+6 of b0 | b1 << 8 | b2 << 16
        let codes = [0b000001, 0b000010, 0b000011, 0b111111];
        let p = packed(6, &codes);
        let w: u32 = 1 | 2 << 6 | 3 << 12 | 0x3F << 18;
        assert_eq!(p, w.to_le_bytes()[..3]);
        assert_eq!(p, [0x81, 0x30, 0xFC]);
        assert_eq!(unpack(6, &p).collect::<Vec<_>>(), codes);
    }

    #[test]
    fn every_code_round_trips_through_packing() {
        for bits in [4u32, 6] {
            let codes: Vec<u8> = (0..(1u32 << bits) * 4)
                .map(|i| (i * 7 % (1 << bits)) as u8)
                .collect();
            let p = packed(bits, &codes);
            assert_eq!(p.len(), codes.len() * bits as usize / 8);
            assert_eq!(unpack(bits, &p).collect::<Vec<_>>(), codes);
        }
    }
}
