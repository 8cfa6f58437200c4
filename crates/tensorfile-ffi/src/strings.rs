//! Strings handed to C: built once, then only read.

use std::ffi::c_char;

/// Many strings, each NUL-terminated, in one buffer, with a NULL-terminated
/// array of pointers to them (the `const char**` C receives).
///
/// A string holding a NUL character reads as cut short through the
/// pointer; [`StringTable::get`] gives its full length.
pub(crate) struct StringTable {
    /// The strings, each followed by a NUL. Never touched after `new`, so
    /// the pointers into it stay valid as long as the table.
    bytes: Box<[u8]>,
    /// Start and length of each string in `bytes`.
    spans: Vec<(usize, usize)>,
    /// A pointer to each string, then NULL.
    ptrs: Vec<*const c_char>,
}

impl StringTable {
    /// A table of `strings`, in order.
    pub(crate) fn new<'a>(strings: impl IntoIterator<Item = &'a [u8]> + Clone) -> StringTable {
        let total: usize = strings.clone().into_iter().map(|s| s.len() + 1).sum();
        let mut bytes = Vec::with_capacity(total);
        let mut spans = Vec::new();
        for s in strings {
            spans.push((bytes.len(), s.len()));
            bytes.extend_from_slice(s);
            bytes.push(0);
        }
        let bytes = bytes.into_boxed_slice();
        let base = bytes.as_ptr();
        let mut ptrs: Vec<*const c_char> = spans
            .iter()
            // `start` is in bounds: it indexes a string written above.
            .map(|&(start, _)| base.wrapping_add(start).cast())
            .collect();
        ptrs.push(std::ptr::null());
        StringTable { bytes, spans, ptrs }
    }

    /// Number of strings.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The NULL-terminated pointer array.
    pub(crate) fn ptrs(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }

    /// String `i`: its pointer and its length in bytes (without the NUL).
    pub(crate) fn get(&self, i: usize) -> Option<(*const c_char, usize)> {
        let &(_, len) = self.spans.get(i)?;
        Some((*self.ptrs.get(i)?, len))
    }

    /// String `i`'s bytes (without the NUL).
    pub(crate) fn bytes(&self, i: usize) -> Option<&[u8]> {
        let &(start, len) = self.spans.get(i)?;
        self.bytes.get(start..start + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn pointers_and_lengths() {
        let strings: [&[u8]; 3] = [b"a.weight", b"", b"x\0y"];
        let t = StringTable::new(strings.iter().copied());
        assert_eq!(t.len(), 3);
        for (i, s) in strings.iter().enumerate() {
            let (p, len) = t.get(i).unwrap();
            assert_eq!(len, s.len());
            assert_eq!(t.bytes(i).unwrap(), *s);
            // SAFETY: the table's pointers are NUL-terminated strings it owns.
            let c = unsafe { CStr::from_ptr(p) }.to_bytes();
            assert!(s.starts_with(c));
        }
        // SAFETY: the array has len() + 1 entries.
        assert!(unsafe { *t.ptrs().add(3) }.is_null());
        assert!(t.get(3).is_none());
    }
}
