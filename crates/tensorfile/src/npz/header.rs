//! The `.npy` header: read strictly, and written byte for byte as numpy's
//! `np.save` writes it.
//!
//! A `.npy` array is the magic `\x93NUMPY`, two version bytes, the header
//! length (2 bytes little-endian in version 1.0, 4 in 2.0 and 3.0), then
//! the header: the repr of a Python dict with exactly the keys `descr`,
//! `fortran_order` and `shape`, Latin-1 (1.0, 2.0) or UTF-8 (3.0), padded
//! with spaces and a newline so that the data starts at a multiple of 64.
//!
//! numpy reads the header with `ast.literal_eval`; this reads the subset
//! numpy writes (strings, `True`/`False`, integers, tuples, lists for
//! structured dtypes) with a depth limit, and refuses anything else by
//! position.

use super::error::NpzError;

/// The magic string every `.npy` array starts with.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// numpy's `ARRAY_ALIGN`: the data starts at a multiple of it.
const ARRAY_ALIGN: usize = 64;

/// numpy's `GROWTH_AXIS_MAX_DIGITS`: spaces left in the header so that the
/// growing axis can be rewritten in place.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// Nesting allowed in a header (structured dtypes nest lists and tuples;
/// numpy's own are a few deep).
const MAX_DEPTH: usize = 32;

/// What a `.npy` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Format version: (1, 0), (2, 0) or (3, 0).
    pub version: (u8, u8),
    /// The `descr` entry: a dtype string such as `'<f4'`, or for a
    /// structured dtype the repr of its field list (kept to name it).
    pub descr: Descr,
    /// Whether the data is stored in Fortran (column-major) order.
    pub fortran_order: bool,
    /// The shape, slowest dimension first (numpy's order).
    pub shape: Vec<u64>,
    /// Where the data starts, from the array's first byte.
    pub data_offset: u64,
}

/// A header's `descr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Descr {
    /// A dtype string (`'<f4'`, `'|b1'`, `'<V2'`, `'|O'`).
    Simple(String),
    /// A list of fields: a structured dtype (kept as text to name it).
    Structured(String),
}

impl std::fmt::Display for Descr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Descr::Simple(s) => write!(f, "'{s}'"),
            Descr::Structured(s) => write!(f, "{s} (a structured dtype)"),
        }
    }
}

/// The length of the fixed part before the header: magic, version and
/// the length field (2 bytes in 1.0, 4 after).
pub fn prefix_len(major: u8) -> u64 {
    if major == 1 {
        10
    } else {
        12
    }
}

/// Reads the fixed part of a header from its first 12 (or more) bytes:
/// the version and the header's length. `array` names the array in errors.
///
/// # Errors
/// No magic, an unknown version, or fewer bytes than the fixed part.
pub fn read_prefix(array: &str, head: &[u8]) -> Result<((u8, u8), u64), NpzError> {
    let truncated = |needed: u64| NpzError::Truncated {
        array: array.to_string(),
        what: "the .npy header's start".into(),
        needed,
        available: head.len() as u64,
    };
    if head.len() < 8 {
        if !MAGIC.starts_with(&head[..head.len().min(6)]) {
            return Err(magic(array, head));
        }
        return Err(truncated(10));
    }
    if &head[..6] != MAGIC {
        return Err(magic(array, head));
    }
    let (major, minor) = (head[6], head[7]);
    if !matches!((major, minor), (1, 0) | (2, 0) | (3, 0)) {
        return Err(NpzError::Version {
            array: array.to_string(),
            major,
            minor,
        });
    }
    let len = if major == 1 {
        let b = head.get(8..10).ok_or_else(|| truncated(10))?;
        u64::from(u16::from_le_bytes([b[0], b[1]]))
    } else {
        let b = head.get(8..12).ok_or_else(|| truncated(12))?;
        u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    Ok(((major, minor), len))
}

fn magic(array: &str, head: &[u8]) -> NpzError {
    NpzError::Magic {
        array: array.to_string(),
        found: head[..head.len().min(6)].to_vec(),
    }
}

/// Parses a whole header: `bytes` holds the fixed part and the header
/// text (exactly [`prefix_len`] + the length field's bytes).
///
/// # Errors
/// As [`read_prefix`]; a header that is not the dictionary numpy writes
/// (named by byte offset); missing or extra keys; a shape that is not a
/// tuple of non-negative integers.
pub fn parse(array: &str, bytes: &[u8]) -> Result<NpyHeader, NpzError> {
    let ((major, minor), len) = read_prefix(array, bytes)?;
    let start = prefix_len(major) as usize;
    let text_bytes = usize::try_from(len)
        .ok()
        .and_then(|len| bytes.get(start..start.checked_add(len)?))
        .ok_or_else(|| NpzError::Truncated {
            array: array.to_string(),
            what: format!("the {len}-byte .npy header"),
            needed: start as u64 + len,
            available: bytes.len() as u64,
        })?;
    // 1.0 and 2.0 are Latin-1 (every byte a char); 3.0 is UTF-8.
    let text: String = if major == 3 {
        std::str::from_utf8(text_bytes)
            .map_err(|e| NpzError::Header {
                array: array.to_string(),
                offset: start as u64 + e.valid_up_to() as u64,
                problem: "a version 3.0 header that is not UTF-8".into(),
            })?
            .to_string()
    } else {
        text_bytes.iter().map(|&b| char::from(b)).collect()
    };
    let mut p = Parser {
        array,
        chars: text.char_indices().collect(),
        pos: 0,
        base: start as u64,
        text: &text,
    };
    let dict = p.dict()?;
    p.skip_ws();
    if p.pos < p.chars.len() {
        return Err(p.error("text after the header's closing brace"));
    }
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    for (key, value, at) in dict {
        let slot_taken = || NpzError::Header {
            array: array.to_string(),
            offset: at,
            problem: format!("key {key:?} given twice"),
        };
        match key.as_str() {
            "descr" => {
                if descr.is_some() {
                    return Err(slot_taken());
                }
                descr = Some(match value {
                    Lit::Str(s) => Descr::Simple(s),
                    Lit::List(text) => Descr::Structured(text),
                    _ => {
                        return Err(NpzError::Header {
                            array: array.to_string(),
                            offset: at,
                            problem: "'descr' is neither a dtype string nor a list of fields"
                                .into(),
                        })
                    }
                });
            }
            "fortran_order" => {
                if fortran.is_some() {
                    return Err(slot_taken());
                }
                fortran = Some(match value {
                    Lit::Bool(b) => b,
                    _ => {
                        return Err(NpzError::Header {
                            array: array.to_string(),
                            offset: at,
                            problem: "'fortran_order' is not True or False".into(),
                        })
                    }
                });
            }
            "shape" => {
                if shape.is_some() {
                    return Err(slot_taken());
                }
                shape = Some(match value {
                    Lit::Ints(v) => v,
                    _ => {
                        return Err(NpzError::Header {
                            array: array.to_string(),
                            offset: at,
                            problem: "'shape' is not a tuple of non-negative integers".into(),
                        })
                    }
                });
            }
            other => {
                return Err(NpzError::Header {
                    array: array.to_string(),
                    offset: at,
                    problem: format!(
                    "key {other:?}: a .npy header has exactly 'descr', 'fortran_order' and 'shape'"
                ),
                })
            }
        }
    }
    let missing = |key: &str| NpzError::Header {
        array: array.to_string(),
        offset: start as u64,
        problem: format!("no {key:?} key"),
    };
    Ok(NpyHeader {
        version: (major, minor),
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran_order: fortran.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
        data_offset: start as u64 + len,
    })
}

/// A literal value of a header.
enum Lit {
    Str(String),
    Bool(bool),
    /// A non-negative integer.
    Int(u64),
    /// A tuple of non-negative integers (a shape).
    Ints(Vec<u64>),
    /// A list (a structured dtype's fields), as its text.
    List(String),
    /// Anything else the subset reads (nested tuples, negative integers):
    /// valid text, but no value a header key takes.
    Other,
}

/// A recursive-descent reader of the literal subset, depth-limited.
struct Parser<'t> {
    array: &'t str,
    chars: Vec<(usize, char)>,
    pos: usize,
    /// Offset of the text in the array's bytes (for errors).
    base: u64,
    text: &'t str,
}

impl Parser<'_> {
    fn offset(&self) -> u64 {
        let byte = self
            .chars
            .get(self.pos)
            .map_or(self.text.len(), |&(b, _)| b);
        self.base + byte as u64
    }

    fn error(&self, problem: &str) -> NpzError {
        NpzError::Header {
            array: self.array.to_string(),
            offset: self.offset(),
            problem: problem.to_string(),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).map(|&(_, c)| c)
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: char) -> Result<(), NpzError> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected {c:?}")))
        }
    }

    /// `{ 'key': value, ... }`: the entries with the offset of each key.
    fn dict(&mut self) -> Result<Vec<(String, Lit, u64)>, NpzError> {
        self.expect('{')?;
        let mut entries = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some('}') {
                self.pos += 1;
                return Ok(entries);
            }
            let at = self.offset();
            let key = match self.peek() {
                Some('\'' | '"') => self.string()?,
                _ => return Err(self.error("expected a string key or '}'")),
            };
            self.expect(':')?;
            let value = self.value(1)?;
            entries.push((key, value, at));
            self.skip_ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some('}') => {}
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Lit, NpzError> {
        if depth > MAX_DEPTH {
            return Err(self.error(&format!("nested more than {MAX_DEPTH} deep")));
        }
        self.skip_ws();
        match self.peek() {
            Some('\'' | '"') => Ok(Lit::Str(self.string()?)),
            Some('(') => self.sequence(')', depth),
            Some('[') => {
                let start = self.pos;
                self.sequence(']', depth)?;
                let text: String = self.chars[start..self.pos]
                    .iter()
                    .map(|&(_, c)| c)
                    .collect();
                Ok(Lit::List(text))
            }
            Some('-' | '0'..='9') => {
                let negative = self.peek() == Some('-');
                let n = self.integer()?;
                Ok(if negative { Lit::Other } else { Lit::Int(n) })
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    self.pos += 1;
                }
                let word: String = self.chars[start..self.pos]
                    .iter()
                    .map(|&(_, c)| c)
                    .collect();
                match word.as_str() {
                    "True" => Ok(Lit::Bool(true)),
                    "False" => Ok(Lit::Bool(false)),
                    _ => {
                        self.pos = start;
                        Err(self.error(&format!("{word:?} is not a literal a .npy header holds")))
                    }
                }
            }
            _ => Err(self.error("expected a value")),
        }
    }

    /// A tuple or list; a tuple of non-negative integers is a shape.
    fn sequence(&mut self, close: char, depth: usize) -> Result<Lit, NpzError> {
        self.pos += 1;
        let mut ints = Some(Vec::new());
        let mut count = 0usize;
        let mut trailing_comma = false;
        loop {
            self.skip_ws();
            if self.peek() == Some(close) {
                self.pos += 1;
                break;
            }
            let item = self.value(depth + 1)?;
            count += 1;
            trailing_comma = false;
            match (item, &mut ints) {
                (Lit::Int(n), Some(all)) => all.push(n),
                _ => ints = None,
            }
            self.skip_ws();
            match self.peek() {
                Some(',') => {
                    self.pos += 1;
                    trailing_comma = true;
                }
                Some(c) if c == close => {}
                _ => return Err(self.error(&format!("expected ',' or {close:?}"))),
            }
        }
        if close == ']' {
            return Ok(Lit::Other);
        }
        // `(5)` is the integer 5 in Python, not a tuple: only `(5,)` is.
        match ints {
            Some(v) if count != 1 || trailing_comma => Ok(Lit::Ints(v)),
            _ => Ok(Lit::Other),
        }
    }

    /// A decimal integer (an optional `L`, as Python 2's numpy wrote).
    fn integer(&mut self) -> Result<u64, NpzError> {
        if self.peek() == Some('-') {
            self.pos += 1;
        }
        let start = self.pos;
        let mut n: u64 = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(d)))
                .ok_or_else(|| self.error("an integer larger than 2^64 - 1"))?;
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expected digits"));
        }
        if matches!(self.peek(), Some('L' | 'l')) {
            self.pos += 1;
        }
        Ok(n)
    }

    /// A quoted string with Python's simple escapes.
    fn string(&mut self) -> Result<String, NpzError> {
        let quote = self.peek().unwrap_or('\'');
        self.pos += 1;
        let mut s = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error("a string that does not end"));
            };
            self.pos += 1;
            if c == quote {
                return Ok(s);
            }
            if c != '\\' {
                s.push(c);
                continue;
            }
            let Some(e) = self.peek() else {
                return Err(self.error("a string that does not end"));
            };
            self.pos += 1;
            match e {
                '\\' | '\'' | '"' => s.push(e),
                'n' => s.push('\n'),
                't' => s.push('\t'),
                'r' => s.push('\r'),
                '0' => s.push('\0'),
                'x' | 'u' | 'U' => {
                    let digits = match e {
                        'x' => 2,
                        'u' => 4,
                        _ => 8,
                    };
                    let mut v = 0u32;
                    for _ in 0..digits {
                        let d = self
                            .peek()
                            .and_then(|c| c.to_digit(16))
                            .ok_or_else(|| self.error("a bad escape in a string"))?;
                        v = v * 16 + d;
                        self.pos += 1;
                    }
                    s.push(
                        char::from_u32(v).ok_or_else(|| self.error("a bad escape in a string"))?,
                    );
                }
                _ => return Err(self.error("an escape a .npy header does not use")),
            }
        }
    }
}

/// Python's `repr` of a shape tuple: `()`, `(5,)`, `(3, 4)`.
fn shape_repr(shape: &[u64]) -> String {
    match shape {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(u64::to_string).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// The header numpy's `np.save` writes for a C-order array of `descr`
/// (an ASCII dtype string such as `<f4`) and `shape`: version 1.0 unless
/// the header does not fit its 2-byte length (then 2.0), as numpy chooses.
/// The data follows it directly.
pub fn write(descr: &str, shape: &[u64]) -> Vec<u8> {
    let mut dict = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': {}, }}",
        shape_repr(shape)
    );
    // Room for the first axis to grow in place, as numpy leaves.
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    wrap(&dict, 1).unwrap_or_else(|| wrap(&dict, 2).unwrap_or_default())
}

/// numpy's `_wrap_header`: the prefix, the text, spaces and a newline up
/// to a multiple of 64; `None` when the length does not fit the version's
/// length field.
fn wrap(text: &str, major: u8) -> Option<Vec<u8>> {
    let prefix = prefix_len(major) as usize;
    let hlen = text.len() + 1;
    let pad = ARRAY_ALIGN - (prefix + hlen) % ARRAY_ALIGN;
    let total = hlen + pad;
    let mut out = Vec::with_capacity(prefix + total);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[major, 0]);
    if major == 1 {
        out.extend_from_slice(&u16::try_from(total).ok()?.to_le_bytes());
    } else {
        out.extend_from_slice(&u32::try_from(total).ok()?.to_le_bytes());
    }
    out.extend_from_slice(text.as_bytes());
    out.resize(out.len() + pad, b' ');
    out.push(b'\n');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(text: &str) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&(text.len() as u16).to_le_bytes());
        b.extend_from_slice(text.as_bytes());
        b
    }

    #[test]
    fn numpys_header_reads_and_is_written_back() {
        let bytes = write("<f4", &[3, 4]);
        assert_eq!(bytes.len(), 128);
        let h = parse("a", &bytes).unwrap();
        assert_eq!(h.descr, Descr::Simple("<f4".into()));
        assert_eq!(h.shape, vec![3, 4]);
        assert!(!h.fortran_order);
        assert_eq!(h.data_offset, 128);
        assert_eq!(
            parse("a", &write("|b1", &[])).unwrap().shape,
            Vec::<u64>::new()
        );
        assert_eq!(parse("a", &write("<i8", &[7])).unwrap().shape, vec![7]);
    }

    #[test]
    fn odd_but_valid_literals() {
        let h = parse(
            "a",
            &header("{\"shape\": (2L, 3,), \"fortran_order\": True, \"descr\": '>f8'}"),
        )
        .unwrap();
        assert_eq!(h.shape, vec![2, 3]);
        assert!(h.fortran_order);
        let h = parse(
            "a",
            &header(
                "{'descr': [('a', '<f4'), ('b', '<i2')], 'fortran_order': False, 'shape': (3,), }",
            ),
        )
        .unwrap();
        assert!(matches!(h.descr, Descr::Structured(_)));
    }

    #[test]
    fn headers_numpy_would_not_write_are_refused_by_position() {
        for (text, problem) in [
            ("{'descr': '<f4', 'fortran_order': False}", "no \"shape\""),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}",
                "exactly",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",
                "non-negative",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
                "non-negative",
            ),
            (
                "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",
                "True or False",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
                "2^64",
            ),
            (
                "{'descr': __import__('os'), 'fortran_order': False, 'shape': ()}",
                "not a literal",
            ),
            (
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}",
                "twice",
            ),
            (
                "{'descr': '<f4\\q', 'fortran_order': False, 'shape': ()}",
                "escape",
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': ()} x",
                "after",
            ),
            ("{'descr': '<f4'", "expected"),
        ] {
            let err = parse("a", &header(text)).unwrap_err().to_string();
            assert!(err.contains(problem), "{text}: {err}");
        }
        let deep = format!(
            "{{'descr': {}{}, 'fortran_order': False, 'shape': ()}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let err = parse("a", &header(&deep)).unwrap_err().to_string();
        assert!(err.contains("nested"), "{err}");
    }

    #[test]
    fn prefixes() {
        assert!(matches!(
            read_prefix("a", b"\x93NUMPY\x04\x00\x00\x00"),
            Err(NpzError::Version { major: 4, .. })
        ));
        assert!(matches!(
            read_prefix("a", b"PK\x03\x04"),
            Err(NpzError::Magic { .. })
        ));
        assert!(matches!(
            read_prefix("a", b"\x93NUM"),
            Err(NpzError::Truncated { .. })
        ));
        let mut long = MAGIC.to_vec();
        long.extend_from_slice(&[2, 0]);
        long.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            read_prefix("a", &long).unwrap(),
            ((2, 0), u64::from(u32::MAX))
        );
        assert!(matches!(parse("a", &long), Err(NpzError::Truncated { .. })));
    }
}
