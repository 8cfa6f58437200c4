//! Reading structured values out of the fuzzer's bytes. Past the end every
//! read gives zero (or the smallest choice), so any input decodes to
//! something and a shorter input is a simpler case.

use tensorfile::Dtype;

/// A cursor over the fuzzer's bytes.
pub(crate) struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Input<'a> {
        Input { bytes }
    }

    /// The next byte, 0 past the end.
    pub(crate) fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    /// Whether the next byte is odd.
    pub(crate) fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    /// One of `choices` (non-empty).
    pub(crate) fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len())]
    }

    /// Any dtype.
    pub(crate) fn dtype(&mut self) -> Dtype {
        self.pick(Dtype::ALL)
    }

    /// Up to `max` bytes, the count given by the next byte.
    pub(crate) fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = self.below(max + 1).min(self.bytes.len());
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        head
    }

    /// Exactly `n` bytes, or as many as are left.
    pub(crate) fn bytes_exact(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.bytes.split_at(n.min(self.bytes.len()));
        self.bytes = rest;
        head
    }

    /// A string of up to `max` bytes (lossily UTF-8).
    pub(crate) fn string(&mut self, max: usize) -> String {
        String::from_utf8_lossy(self.bytes(max)).into_owned()
    }

    /// Whatever is left.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    /// A dimension: mostly small, sometimes one of the sizes that break
    /// arithmetic (2^32, 2^40, 2^62, u64::MAX).
    pub(crate) fn dim(&mut self) -> u64 {
        const HUGE: [u64; 6] = [1 << 32, 1 << 40, 1 << 61, 1 << 62, u64::MAX, u64::MAX / 3];
        let b = self.byte();
        if b >= 0xF0 {
            HUGE[usize::from(b - 0xF0) % HUGE.len()]
        } else {
            u64::from(b % 9)
        }
    }
}

/// `count` bytes, from `seed` and the element index: a pattern every byte
/// of which differs from its neighbours, without reading more input.
pub(crate) fn pattern(seed: u8, count: usize) -> Vec<u8> {
    (0..count)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}
