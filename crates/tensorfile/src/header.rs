//! Parsing and validating the JSON header (reader rules 2 to 5).
//!
//! The parser streams the header through serde_json visitors straight into
//! compact tables: one string buffer for all names, one vector for all
//! dimensions, one fixed-size record per tensor and a hash index of names.
//! Nothing is built per tensor on the heap, which keeps parsing fast and the
//! memory well under twice the header's size.
//!
//! Rule violations found inside the header (rules 2 to 4) do not stop the
//! parse: the lowest-numbered one found wins, so a file that breaks several
//! rules is reported under the first rule in the format's order. Only
//! malformed JSON, which leaves nothing to parse, stops at once.

use std::fmt;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::dtype::{numel, Dtype};
use crate::error::FormatError;
use crate::{Metadata, DEFAULT_MAX_HEADER_LEN};

/// Options for reading a file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReadOptions {
    /// The largest header length N accepted (reader rule 1).
    /// Default: [`DEFAULT_MAX_HEADER_LEN`] (100,000,000 bytes).
    pub max_header_len: u64,
    /// The dtypes the caller accepts, checked after a successful parse.
    /// Default: [`Contract::Any`].
    pub contract: Contract,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            max_header_len: DEFAULT_MAX_HEADER_LEN,
            contract: Contract::Any,
        }
    }
}

impl ReadOptions {
    /// Sets the header cap.
    pub fn max_header_len(mut self, limit: u64) -> Self {
        self.max_header_len = limit;
        self
    }

    /// Sets the contract.
    pub fn contract(mut self, contract: Contract) -> Self {
        self.contract = contract;
        self
    }
}

/// Which dtypes a reader accepts. A well-formed file with a dtype outside
/// the contract is refused with [`crate::Error::UnsupportedFormat`], which is
/// distinct from a malformed file ([`crate::Error::Format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Contract {
    /// Every dtype of the format.
    #[default]
    Any,
    /// The course's contract v0 (its first lessons and its tracer engine):
    /// F32 only.
    V0,
}

impl Contract {
    /// Whether the contract allows tensors of this dtype.
    pub fn allows(self, dtype: Dtype) -> bool {
        match self {
            Contract::Any => true,
            Contract::V0 => dtype == Dtype::F32,
        }
    }

    /// Checks every tensor of a parsed header, in data order; the first
    /// one outside the contract is the error.
    pub fn check(self, header: &Header) -> Result<(), crate::Error> {
        match header.tensors().find(|t| !self.allows(t.dtype)) {
            None => Ok(()),
            Some(t) => Err(crate::Error::UnsupportedFormat {
                tensor: t.name.to_string(),
                dtype: t.dtype,
                contract: self,
            }),
        }
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Contract::Any => "any (every dtype)",
            Contract::V0 => "v0 (F32 only)",
        })
    }
}

/// One tensor's entry, as stored: indices into the header's shared buffers.
#[derive(Debug, Clone, Copy)]
struct Entry {
    name: (usize, usize),
    dims: (usize, usize),
    dtype: Dtype,
    begin: u64,
    end: u64,
}

/// A tensor's description in the header: name, dtype, shape and where its
/// bytes are in the data buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    /// The tensor's name (unescaped).
    pub name: &'a str,
    /// Its element type.
    pub dtype: Dtype,
    /// Its dimensions, outermost first; empty for a scalar.
    pub shape: &'a [u64],
    /// `[begin, end)` in bytes, relative to the start of the data buffer.
    pub data_offsets: (u64, u64),
}

impl TensorInfo<'_> {
    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        // Validated at parse time: the product fits, since its byte length does.
        numel(self.shape).unwrap_or(0)
    }

    /// Number of bytes.
    pub fn nbytes(&self) -> u64 {
        self.data_offsets.1 - self.data_offsets.0
    }
}

/// A validated header: every tensor's description and the metadata.
///
/// Lookup by name is O(1); iteration is in data order (by begin offset, then
/// end) or in name order.
#[derive(Clone)]
pub struct Header {
    header_len: u64,
    data_len: u64,
    entries: Vec<Entry>,
    /// Entry indices sorted by (begin, end): data order.
    order: Vec<u32>,
    names: String,
    dims: Vec<u64>,
    index: HashTable<u32>,
    metadata: Option<Metadata>,
    warnings: Vec<String>,
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Header")
            .field("header_len", &self.header_len)
            .field("data_len", &self.data_len)
            .field("tensors", &self.len())
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

/// The hasher for the name index. Fixed seeds: lookups need no randomness
/// for safety here (inputs are bounded by the header cap) and fixed seeds
/// keep behaviour reproducible.
fn hash_name(name: &str) -> u64 {
    foldhash::fast::FixedState::with_seed(0x7e45_0f11e).hash_one(name)
}

impl Header {
    /// Validates the 8-byte prefix of a file of `file_len` bytes against rule
    /// 1 and returns N, the header length.
    pub fn check_prefix(
        prefix: &[u8],
        file_len: u64,
        options: &ReadOptions,
    ) -> Result<u64, FormatError> {
        let Some(bytes) = prefix.get(..8) else {
            return Err(FormatError::TooShort { len: file_len });
        };
        let mut n = [0u8; 8];
        n.copy_from_slice(bytes);
        let header_len = u64::from_le_bytes(n);
        if header_len > options.max_header_len {
            return Err(FormatError::HeaderTooLarge {
                header_len,
                limit: options.max_header_len,
            });
        }
        let end = header_len.checked_add(8);
        match end {
            Some(end) if end <= file_len => Ok(header_len),
            _ => Err(FormatError::HeaderPastEof {
                header_len,
                end: end.unwrap_or(u64::MAX),
                len: file_len,
            }),
        }
    }

    /// Parses and validates a whole file held in memory (rules 1 to 5).
    pub fn from_file_bytes(bytes: &[u8], options: &ReadOptions) -> Result<Header, FormatError> {
        let file_len = bytes.len() as u64;
        let header_len = Header::check_prefix(bytes, file_len, options)?;
        // Both fit: check_prefix verified 8 + N <= len.
        let text = &bytes[8..8 + header_len as usize];
        Header::parse(text, file_len - 8 - header_len)
    }

    /// Parses the header text (the N bytes after the length) of a file whose
    /// data buffer is `data_len` bytes long, and checks rules 2 to 5.
    pub fn parse(text: &[u8], data_len: u64) -> Result<Header, FormatError> {
        let text = std::str::from_utf8(text).map_err(|e| FormatError::NotUtf8 {
            pos: e.valid_up_to(),
        })?;
        let mut parser = Parser::new(text);
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = (&mut de)
            .deserialize_any(TopVisitor(&mut parser))
            .and_then(|()| de.end());
        if let Some(fatal) = parser.fatal.take() {
            return Err(fatal);
        }
        if let Err(e) = parsed {
            return Err(FormatError::Json {
                pos: json_error_position(text, &e),
                msg: json_error_message(&e),
            });
        }
        if let Some(deferred) = parser.deferred.take() {
            return Err(deferred);
        }
        let Parser {
            entries,
            names,
            dims,
            index,
            metadata,
            warnings,
            ..
        } = parser;
        let mut header = Header {
            header_len: text.len() as u64,
            data_len,
            order: Vec::new(),
            entries,
            names,
            dims,
            index,
            metadata,
            warnings,
        };
        header.check_tiling()?;
        Ok(header)
    }

    /// Rule 5: sorted by (begin, end), the tensors tile the data buffer.
    fn check_tiling(&mut self) -> Result<(), FormatError> {
        let entries = &self.entries;
        let mut order: Vec<u32> = (0..entries.len() as u32).collect();
        // Canonical files list tensors in data order already; pdqsort makes
        // that case linear.
        order.sort_unstable_by_key(|&i| {
            let e = &entries[i as usize];
            (e.begin, e.end)
        });
        let mut expected = 0u64;
        let mut previous: Option<u32> = None;
        for &i in &order {
            let e = &entries[i as usize];
            if e.begin != expected {
                return Err(FormatError::NotContiguous {
                    tensor: self.name_of(e).to_string(),
                    begin: e.begin,
                    expected,
                    previous: previous.map(|p| self.name_of(&entries[p as usize]).to_string()),
                });
            }
            expected = e.end;
            previous = Some(i);
        }
        if expected != self.data_len {
            return Err(FormatError::NotCovered {
                end: expected,
                data_len: self.data_len,
            });
        }
        self.order = order;
        Ok(())
    }

    fn name_of(&self, e: &Entry) -> &str {
        &self.names[e.name.0..e.name.0 + e.name.1]
    }

    fn info(&self, e: &Entry) -> TensorInfo<'_> {
        TensorInfo {
            name: self.name_of(e),
            dtype: e.dtype,
            shape: &self.dims[e.dims.0..e.dims.0 + e.dims.1],
            data_offsets: (e.begin, e.end),
        }
    }

    /// N: the header's length in bytes, padding included.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Where the data buffer starts in the file: 8 + N.
    pub fn data_start(&self) -> u64 {
        8 + self.header_len
    }

    /// The data buffer's length in bytes.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The metadata; `None` when the header has no `__metadata__` or it is `null`.
    pub fn metadata(&self) -> Option<&Metadata> {
        self.metadata.as_ref()
    }

    /// Things a reader accepts but a careful writer would not have written,
    /// such as unknown fields in a tensor entry.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The tensor of that name, in O(1).
    pub fn get(&self, name: &str) -> Option<TensorInfo<'_>> {
        let i = self.position(name)?;
        Some(self.info(&self.entries[i]))
    }

    /// Index of a name among the entries (header order).
    fn position(&self, name: &str) -> Option<usize> {
        self.index
            .find(hash_name(name), |&i| {
                self.name_of(&self.entries[i as usize]) == name
            })
            .map(|&i| i as usize)
    }

    /// The tensors in data order (by begin offset, then end offset).
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TensorInfo<'_>> + '_ {
        self.order
            .iter()
            .map(move |&i| self.info(&self.entries[i as usize]))
    }

    /// The tensors in ascending byte order of their names.
    pub fn tensors_by_name(&self) -> Vec<TensorInfo<'_>> {
        let mut all: Vec<TensorInfo<'_>> = self.tensors().collect();
        all.sort_unstable_by(|a, b| a.name.cmp(b.name));
        all
    }

    /// The tensor at position `i` in data order.
    pub fn tensor_at(&self, i: usize) -> Option<TensorInfo<'_>> {
        let &e = self.order.get(i)?;
        Some(self.info(&self.entries[e as usize]))
    }
}

/// serde_json reports line and column; headers are usually one line, but
/// nothing stops a writer from adding newlines, so convert properly.
fn json_error_position(text: &str, e: &serde_json::Error) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(e.line().saturating_sub(1))
        .map(str::len)
        .sum();
    (line_start + e.column().saturating_sub(1)).min(text.len())
}

/// serde_json's message without its " at line L column C" suffix (we give
/// the byte position instead).
fn json_error_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(i) => full[..i].to_string(),
        None => full,
    }
}

/// Parse state shared by the visitors.
struct Parser<'t> {
    text: &'t str,
    entries: Vec<Entry>,
    names: String,
    dims: Vec<u64>,
    index: HashTable<u32>,
    metadata: Option<Metadata>,
    seen_metadata: bool,
    warnings: Vec<String>,
    /// The lowest-rule violation found so far; the parse goes on.
    deferred: Option<FormatError>,
    /// An error that ended the parse (set just before returning a serde error).
    fatal: Option<FormatError>,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Self {
        // Each tensor takes at least ~50 header bytes; reserving from that
        // estimate avoids most reallocation without over-committing memory.
        let estimate = text.len() / 64;
        Parser {
            text,
            entries: Vec::with_capacity(estimate),
            names: String::with_capacity(text.len() / 4),
            dims: Vec::with_capacity(estimate * 2),
            index: HashTable::with_capacity(estimate),
            metadata: None,
            seen_metadata: false,
            warnings: Vec::new(),
            deferred: None,
            fatal: None,
        }
    }

    /// Records a violation unless one of a lower (earlier) rule is already recorded.
    fn defer(&mut self, err: FormatError) {
        match &self.deferred {
            Some(current) if current.rule() <= err.rule() => {}
            _ => self.deferred = Some(err),
        }
    }

    /// Byte position of a string borrowed from the header text, if it is one.
    fn position_of(&self, s: &str) -> Option<usize> {
        let start = self.text.as_ptr() as usize;
        let p = s.as_ptr() as usize;
        (p >= start && p <= start + self.text.len()).then(|| p - start)
    }

    /// Byte position of a key, for error messages: exact when serde_json
    /// lent us the key from the text; else the first quoted match after `from`.
    fn key_position(&self, key: &str, borrowed_at: Option<usize>) -> usize {
        borrowed_at.map(|p| p.saturating_sub(1)).unwrap_or_else(|| {
            let quoted = serde_json::to_string(key).unwrap_or_default();
            self.text.rfind(&quoted).unwrap_or(0)
        })
    }

    fn name(&self, range: (usize, usize)) -> &str {
        &self.names[range.0..range.0 + range.1]
    }
}

/// Implements the listed visit methods of a visitor by calling
/// `self.other(kind)`, draining arrays first so the parse can go on. Each
/// visitor lists only the kinds it does not handle itself.
macro_rules! visit_others {
    ($($kind:ident),*) => { $( visit_others!(@one $kind); )* };
    (@one bool) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            self.other("boolean")
        }
    };
    (@one u64) => {
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            self.other("number")
        }
    };
    (@one i64) => {
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            self.other("number")
        }
    };
    (@one f64) => {
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            self.other("number")
        }
    };
    (@one str) => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            self.other("string")
        }
    };
    (@one unit) => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            self.other("null")
        }
    };
    (@one seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            self.other("array")
        }
    };
    (@one map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            self.other("object")
        }
    };
}

/// The top-level value: must be an object.
struct TopVisitor<'p, 't>(&'p mut Parser<'t>);

impl TopVisitor<'_, '_> {
    fn other<E: de::Error>(self, found: &'static str) -> Result<(), E> {
        self.0.fatal = Some(FormatError::NotObject { found });
        Err(E::custom("not an object"))
    }
}

impl<'de> Visitor<'de> for TopVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    visit_others!(bool, u64, i64, f64, str, unit, seq);

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let p = self.0;
        while let Some(key) = map.next_key_seed(KeySeed {
            names: &mut p.names,
        })? {
            let borrowed_at = key.borrowed.and_then(|s| p.position_of(s));
            let range = key.range;
            if p.name(range) == "__metadata__" {
                p.names.truncate(range.0);
                if p.seen_metadata {
                    let pos = p.key_position("__metadata__", borrowed_at);
                    p.defer(FormatError::DuplicateKey {
                        key: "__metadata__".into(),
                        place: "the header".into(),
                        pos,
                    });
                }
                p.seen_metadata = true;
                let metadata = map.next_value_seed(MetadataSeed(p))?;
                if p.metadata.is_none() {
                    p.metadata = metadata;
                }
                continue;
            }
            let index = p.entries.len() as u32;
            let hash = hash_name(p.name(range));
            let (entries, names) = (&p.entries, &p.names);
            let duplicate = p
                .index
                .find(hash, |&i| {
                    let e = entries[i as usize].name;
                    names[e.0..e.0 + e.1] == names[range.0..range.0 + range.1]
                })
                .is_some();
            if duplicate {
                let name = p.name(range).to_string();
                let pos = p.key_position(&name, borrowed_at);
                p.defer(FormatError::DuplicateKey {
                    key: name,
                    place: "the header".into(),
                    pos,
                });
            } else {
                p.index.insert_unique(hash, index, |&i| {
                    let e = entries[i as usize].name;
                    hash_name(&names[e.0..e.0 + e.1])
                });
            }
            let entry = map.next_value_seed(EntrySeed { p, name: range })?;
            p.entries.push(entry);
        }
        Ok(())
    }
}

/// A key appended to the names buffer; `borrowed` is set when serde_json
/// lent it straight from the header text (no escapes), which gives its position.
struct Key<'de> {
    range: (usize, usize),
    borrowed: Option<&'de str>,
}

struct KeySeed<'a> {
    names: &'a mut String,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        let start = self.names.len();
        self.names.push_str(v);
        Ok(Key {
            range: (start, v.len()),
            borrowed: Some(v),
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let start = self.names.len();
        self.names.push_str(v);
        Ok(Key {
            range: (start, v.len()),
            borrowed: None,
        })
    }
}

/// `__metadata__`: null, or an object of strings (rule 3).
struct MetadataSeed<'p, 't>(&'p mut Parser<'t>);

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_, '_> {
    type Value = Option<Metadata>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl MetadataSeed<'_, '_> {
    fn other<E: de::Error>(self, found: &'static str) -> Result<Option<Metadata>, E> {
        self.0.defer(FormatError::MetadataNotObject { found });
        Ok(None)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_, '_> {
    type Value = Option<Metadata>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of strings or null")
    }

    visit_others!(bool, u64, i64, f64, str, seq);

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let p = self.0;
        let mut metadata = Metadata::new();
        let mut scratch = String::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            names: &mut scratch,
        })? {
            let borrowed_at = key.borrowed.and_then(|s| p.position_of(s));
            let name = std::mem::take(&mut scratch);
            let value = map.next_value_seed(StringValue)?;
            match metadata.entry(name) {
                std::collections::btree_map::Entry::Occupied(seen) => {
                    let pos = p.key_position(seen.key(), borrowed_at);
                    p.defer(FormatError::DuplicateKey {
                        key: seen.key().clone(),
                        place: "__metadata__".into(),
                        pos,
                    });
                }
                std::collections::btree_map::Entry::Vacant(slot) => match value {
                    Ok(value) => {
                        slot.insert(value);
                    }
                    Err(found) => {
                        let key = slot.key().clone();
                        // Kept so a later duplicate of this key is still caught.
                        slot.insert(String::new());
                        p.defer(FormatError::MetadataNotString { key, found });
                    }
                },
            }
        }
        Ok(Some(metadata))
    }
}

/// A string value, or the kind of what was found instead (consumed).
struct StringValue;

impl<'de> DeserializeSeed<'de> for StringValue {
    type Value = Result<String, &'static str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl StringValue {
    fn other<E>(self, found: &'static str) -> Result<Result<String, &'static str>, E> {
        Ok(Err(found))
    }
}

impl<'de> Visitor<'de> for StringValue {
    type Value = Result<String, &'static str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    visit_others!(bool, u64, i64, f64, unit, seq, map);

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Ok(v.to_string()))
    }
}

/// One tensor entry: `{"dtype": ..., "shape": [...], "data_offsets": [b, e]}`.
struct EntrySeed<'p, 't> {
    p: &'p mut Parser<'t>,
    name: (usize, usize),
}

impl EntrySeed<'_, '_> {
    fn placeholder(&self) -> Entry {
        Entry {
            name: self.name,
            dims: (self.p.dims.len(), 0),
            dtype: Dtype::U8,
            begin: 0,
            end: 0,
        }
    }

    fn bad(&mut self, problem: impl Into<String>) {
        let tensor = self.p.name(self.name).to_string();
        self.p.defer(FormatError::BadEntry {
            tensor,
            problem: problem.into(),
        });
    }

    fn other<E>(mut self, found: &'static str) -> Result<Entry, E> {
        self.bad(format!("the entry must be an object, found a {found}"));
        Ok(self.placeholder())
    }
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_, '_> {
    type Value = Entry;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Dtype,
    Shape,
    DataOffsets,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Dtype => "dtype",
            Field::Shape => "shape",
            Field::DataOffsets => "data_offsets",
        }
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_, '_> {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tensor entry object")
    }

    visit_others!(bool, u64, i64, f64, str, unit, seq);

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Entry, A::Error> {
        let mut entry = self.placeholder();
        let dims_start = self.p.dims.len();
        let mut dtype: Option<Dtype> = None;
        let mut have = [false; 3];
        let mut ok = true;
        let mut unknown: Vec<String> = Vec::new();
        let mut scratch = String::new();
        while let Some(key) = map.next_key_seed(KeySeed {
            names: &mut scratch,
        })? {
            let borrowed_at = key.borrowed.and_then(|s| self.p.position_of(s));
            let field = match scratch.as_str() {
                "dtype" => Some(Field::Dtype),
                "shape" => Some(Field::Shape),
                "data_offsets" => Some(Field::DataOffsets),
                _ => None,
            };
            let duplicate = match field {
                Some(f) => std::mem::replace(&mut have[f as usize], true),
                None => unknown.contains(&scratch),
            };
            if duplicate {
                let pos = self.p.key_position(&scratch, borrowed_at);
                let tensor = self.p.name(self.name);
                self.p.defer(FormatError::DuplicateKey {
                    key: scratch.clone(),
                    place: format!("tensor {tensor:?}"),
                    pos,
                });
                ok = false;
            }
            match field {
                None => {
                    let warning = format!(
                        "tensor {:?}: unknown field {scratch:?} ignored",
                        self.p.name(self.name)
                    );
                    self.p.warnings.push(warning);
                    unknown.push(std::mem::take(&mut scratch));
                    map.next_value::<IgnoredAny>()?;
                }
                Some(Field::Dtype) => match map.next_value_seed(StringValue)? {
                    Ok(name) => match Dtype::from_name(&name) {
                        Some(d) => dtype = Some(d),
                        None => {
                            let tensor = self.p.name(self.name).to_string();
                            self.p.defer(FormatError::UnknownDtype {
                                tensor,
                                dtype: name,
                            });
                            ok = false;
                        }
                    },
                    Err(found) => {
                        self.bad(format!("dtype must be a string, found a {found}"));
                        ok = false;
                    }
                },
                Some(Field::Shape) => {
                    self.p.dims.truncate(dims_start);
                    if let Err(problem) = map.next_value_seed(NumberList {
                        out: &mut self.p.dims,
                        what: "shape",
                        exactly: None,
                    })? {
                        self.bad(problem);
                        ok = false;
                    }
                    entry.dims = (dims_start, self.p.dims.len() - dims_start);
                }
                Some(Field::DataOffsets) => {
                    let mut pair = Vec::with_capacity(2);
                    match map.next_value_seed(NumberList {
                        out: &mut pair,
                        what: "data_offsets",
                        exactly: Some(2),
                    })? {
                        Ok(()) => {
                            entry.begin = pair[0];
                            entry.end = pair[1];
                        }
                        Err(problem) => {
                            self.bad(problem);
                            ok = false;
                        }
                    }
                }
            }
            scratch.clear();
        }
        for f in [Field::Dtype, Field::Shape, Field::DataOffsets] {
            if !have[f as usize] {
                self.bad(format!("missing field `{}`", f.name()));
                ok = false;
            }
        }
        if let (true, Some(dtype)) = (ok, dtype) {
            entry.dtype = dtype;
            self.check_size(&entry);
        }
        Ok(entry)
    }
}

impl EntrySeed<'_, '_> {
    /// Rule 4: end - begin equals the shape's element count times the dtype's size.
    fn check_size(&mut self, e: &Entry) {
        let shape = &self.p.dims[e.dims.0..e.dims.0 + e.dims.1];
        let bits = numel(shape).and_then(|n| Some((n, n.checked_mul(e.dtype.bits() as u64)?)));
        let err = match bits {
            None => FormatError::ShapeOverflow {
                tensor: self.p.name(self.name).to_string(),
                dtype: e.dtype,
                shape: shape.to_vec(),
            },
            Some((numel, bits)) if bits % 8 != 0 => FormatError::NotWholeBytes {
                tensor: self.p.name(self.name).to_string(),
                dtype: e.dtype,
                numel,
            },
            Some((_, bits)) if e.end < e.begin || e.end - e.begin != bits / 8 => {
                FormatError::SizeMismatch {
                    tensor: self.p.name(self.name).to_string(),
                    dtype: e.dtype,
                    shape: shape.to_vec(),
                    begin: e.begin,
                    end: e.end,
                    actual: e.end as i128 - e.begin as i128,
                    expected: bits / 8,
                }
            }
            Some(_) => return,
        };
        self.p.defer(err);
    }
}

/// An array of non-negative integers appended to `out` (a shape, or the
/// two data offsets). On a bad element the rest is consumed and the problem
/// returned, so the parse can go on.
struct NumberList<'a> {
    out: &'a mut Vec<u64>,
    what: &'static str,
    exactly: Option<usize>,
}

impl<'de> DeserializeSeed<'de> for NumberList<'_> {
    type Value = Result<(), String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl NumberList<'_> {
    fn other<E>(self, found: &'static str) -> Result<Result<(), String>, E> {
        Ok(Err(format!(
            "{} must be an array of integers, found a {found}",
            self.what
        )))
    }
}

/// One element of a [`NumberList`].
enum Number {
    Ok(u64),
    Bad(String),
}

struct NumberSeed;

impl<'de> DeserializeSeed<'de> for NumberSeed {
    type Value = Number;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl NumberSeed {
    fn other<E>(self, found: &'static str) -> Result<Number, E> {
        Ok(Number::Bad(format!("a {found}")))
    }
}

impl<'de> Visitor<'de> for NumberSeed {
    type Value = Number;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative integer")
    }

    visit_others!(bool, str, unit, seq, map);

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Number, E> {
        Ok(Number::Ok(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Number, E> {
        Ok(Number::Bad(format!("{v}, which is negative")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
        Ok(Number::Bad(format!("{v}, which is not an integer")))
    }
}

impl<'de> Visitor<'de> for NumberList<'_> {
    type Value = Result<(), String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of non-negative integers")
    }

    visit_others!(bool, u64, i64, f64, str, unit, map);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut problem: Option<String> = None;
        let mut count = 0usize;
        while let Some(n) = seq.next_element_seed(NumberSeed)? {
            count += 1;
            match n {
                Number::Ok(v) if problem.is_none() => self.out.push(v),
                Number::Ok(_) => {}
                Number::Bad(what) => {
                    problem.get_or_insert_with(|| {
                        format!("{} element {} is {what}", self.what, count - 1)
                    });
                }
            }
        }
        if let Some(problem) = problem {
            return Ok(Err(problem));
        }
        match self.exactly {
            Some(n) if n != count => Ok(Err(format!(
                "{} must have {n} numbers, found {count}",
                self.what
            ))),
            _ => Ok(Ok(())),
        }
    }
}
