//! What reading and writing the header's JSON share: finding the bytes a
//! JSON string cannot hold as they are.

/// The length of the leading run of `bytes` that a JSON string holds as it
/// is: up to the first quote, backslash or control character (below 0x20),
/// or all of `bytes`.
///
/// Eight bytes at a time: names are tens of bytes long, and this scan is
/// most of a name's cost when parsing and writing headers. (memchr finds
/// given bytes, not "any byte below 0x20" as well.)
#[inline]
pub(crate) fn plain_len(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut chunks = bytes.chunks_exact(8);
    let mut done = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        let zero_at = |y: u64| y.wrapping_sub(ONES) & !y & HIGH;
        let quote = zero_at(x ^ (ONES * b'"' as u64));
        let backslash = zero_at(x ^ (ONES * b'\\' as u64));
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let hits = quote | backslash | control;
        if hits != 0 {
            // The lowest flagged byte is always a true hit.
            return done + (hits.trailing_zeros() / 8) as usize;
        }
        done += 8;
    }
    let tail = chunks.remainder();
    done + tail
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .unwrap_or(tail.len())
}

#[cfg(test)]
mod tests {
    use super::plain_len;

    #[test]
    fn plain_run_finds_the_first_quote_backslash_or_control_byte() {
        let mut rng = tensorfile_testkit::Rng::new(0x0123_4567_89ab_cdef);
        for _ in 0..20_000 {
            let state = rng.next_u64();
            let len = (state % 40) as usize;
            // Mostly plain ASCII, sometimes a special byte.
            let bytes: Vec<u8> = (0..len)
                .map(|i| match (state >> (i % 56)) % 23 {
                    0 => b'"',
                    1 => b'\\',
                    2 => (state >> 3) as u8 % 0x20,
                    _ => b'a' + (i % 26) as u8,
                })
                .collect();
            for from in 0..=len {
                let naive = bytes[from..]
                    .iter()
                    .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                    .map_or(len, |p| from + p);
                assert_eq!(
                    from + plain_len(&bytes[from..]),
                    naive,
                    "{bytes:?} from {from}"
                );
            }
        }
    }
}
