//! Parsing the header text into [`Tables`]: reader rules 2 to 4.
//!
//! This is a JSON parser of our own, written for the one shape a header
//! has, instead of serde_json. We measured serde_json first: driving it with
//! allocation-free visitors still spent most of its time in per-token
//! visitor plumbing, and stayed under the target of five times the
//! reference's speed (3.9x at 100k tensors), while a scanner that knows the
//! header's structure writes names, dimensions and offsets straight into the
//! tables as it meets them.
//!
//! It accepts exactly the JSON grammar (RFC 8259): white space, every
//! string escape (surrogate pairs joined, lone surrogates refused as
//! serde_json refuses them), numbers with fractions and exponents, literals,
//! and values of any shape inside unknown fields, skipped without recursion.
//! Like serde_json it refuses more than 127 nested containers, and like the
//! reference reader (which holds every number as a 64-bit integer or float)
//! it refuses a number that rounds past the largest float, wherever it is
//! ([`FormatError::NumberOutOfRange`]). It is stricter than the reference on
//! purpose in one way: duplicate keys are refused (the reference keeps the
//! last one), in the header, in `__metadata__` and among an entry's fields,
//! unknown ones included (those without keeping their names: see `keys`).
//!
//! Rule violations found inside the header (rules 2 to 4) do not stop the
//! parse: the lowest-numbered one found wins, so a file that breaks several
//! rules is reported under the first rule in the format's order. Only
//! malformed JSON, which leaves nothing to parse, stops at once.

use std::borrow::Cow;

use hashbrown::hash_table::Entry as Probe;

use super::keys::UnknownKeys;
use super::{hash_name, name_at, Entry, Tables};
use crate::dtype::{ByteLenError, Dtype};
use crate::error::FormatError;
use crate::Metadata;

/// Most containers open at once. serde_json (and so the reference) counts
/// down from 128 and fails on reaching 0, so it too accepts 127 and refuses
/// 128 (pinned by the `nesting_limit_matches_serde_json` test).
const MAX_DEPTH: usize = 127;

/// Most warnings kept for one header; the rest are counted. A header may hold
/// millions of entries with unknown fields, and each warning quotes a name.
const MAX_WARNINGS: usize = 100;

/// `s` cut to at most `max` bytes (on a character boundary), for messages
/// that quote text from the file.
fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Parses header text; rule 5 is the caller's.
pub(super) fn parse(text: &[u8]) -> Result<Tables, FormatError> {
    // The tables and the unknown-field records hold header positions as u32.
    if u32::try_from(text.len()).is_err() {
        return Err(FormatError::HeaderTooLarge {
            header_len: text.len() as u64,
            limit: u32::MAX as u64,
            looks_like: None,
        });
    }
    let text = std::str::from_utf8(text).map_err(|e| FormatError::NotUtf8 {
        pos: e.valid_up_to(),
        looks_like: None,
    })?;
    let mut parser = Parser::new(text);
    if let Err(fatal) = parser.header() {
        // Malformed JSON ends the parse, but a violation of the same rule
        // found earlier in the text (a duplicate key, say) comes first.
        return Err(match parser.deferred.take() {
            Some(deferred) if first(&deferred, &fatal) => deferred,
            _ => fatal,
        });
    }
    if parser.dropped_warnings > 0 {
        let more = format!("{} more warnings not shown", parser.dropped_warnings);
        parser.tables.warnings.push(more);
    }
    match parser.deferred.take() {
        Some(deferred) => Err(deferred),
        None => Ok(parser.tables),
    }
}

/// Malformed JSON: ends the parse.
type Fatal = FormatError;

/// Where in the header an error is, for those that say.
fn header_pos(err: &FormatError) -> Option<usize> {
    match err {
        FormatError::NotUtf8 { pos, .. }
        | FormatError::Json { pos, .. }
        | FormatError::NumberOutOfRange { pos, .. }
        | FormatError::DuplicateKey { pos, .. }
        | FormatError::NegativeZero { pos, .. } => Some(*pos),
        _ => None,
    }
}

/// Whether `a` is reported before `b`: a lower rule first; within a rule,
/// the one earlier in the header when both have a position.
fn first(a: &FormatError, b: &FormatError) -> bool {
    a.rule() < b.rule()
        || (a.rule() == b.rule()
            && matches!((header_pos(a), header_pos(b)), (Some(x), Some(y)) if x < y))
}

/// A number as written, cut short for messages (a number may be megabytes
/// of digits). Numbers are ASCII, so any cut is a character boundary.
fn quote_number(s: &str) -> String {
    if s.len() <= 40 {
        s.to_string()
    } else {
        format!("{}… ({} characters)", &s[..24], s.len())
    }
}

/// A JSON value's kind, for messages.
fn kind_of(first: u8) -> &'static str {
    match first {
        b'{' => "object",
        b'[' => "array",
        b'"' => "string",
        b't' | b'f' => "boolean",
        b'n' => "null",
        _ => "number",
    }
}

/// A number, as far as a header cares.
enum Number {
    /// A non-negative integer that fits 64 bits.
    Unsigned(u64),
    /// `-0`, at this header position: JSON readers take it for a float.
    NegativeZero(usize),
    /// Anything else: its text, and why it is not a dimension or offset.
    Other(usize, usize, &'static str),
}

/// What is wrong with a field of an entry (rule 4).
enum Problem {
    /// Described in words.
    Text(String),
    /// Element `index` of a shape or offsets array is `-0`, at `pos`.
    NegativeZero { index: usize, pos: usize },
}

impl From<String> for Problem {
    fn from(text: String) -> Self {
        Problem::Text(text)
    }
}

/// A field name of an entry, as far as the parser cares.
enum Field {
    /// One of [`FIELDS`], by index.
    Known(usize),
    /// Another name: its hash (of the unescaped name).
    Unknown(u64),
}

/// What the value being parsed belongs to, for messages about numbers
/// anywhere in it (positions of keys, and where names start in the tables).
#[derive(Clone, Copy)]
enum Place {
    /// The top object.
    Header,
    /// The value of `__metadata__`.
    Metadata,
    /// A metadata value; its key is at this header position.
    MetadataValue(usize),
    /// A tensor entry; its name starts here in the names buffer.
    Entry(usize),
    /// A field of a tensor entry: the name's start, the key's header position.
    Field(usize, usize),
}

struct Parser<'t> {
    text: &'t str,
    b: &'t [u8],
    pos: usize,
    tables: Tables,
    seen_metadata: bool,
    /// Reused for keys and values that contain escapes.
    scratch: String,
    /// Warnings past [`MAX_WARNINGS`], counted.
    dropped_warnings: usize,
    /// The lowest-rule violation found so far; the parse goes on.
    deferred: Option<FormatError>,
    /// What the value being parsed belongs to.
    place: Place,
    /// The unknown fields of the entry being parsed.
    unknown: UnknownKeys,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Self {
        // A tensor takes about 90 to 110 header bytes, a third to a half of
        // them its name. Reserving from that avoids reallocation (and the
        // moment it holds two copies) without over-committing memory.
        let n = text.len();
        let tensors = n / 90 + 1;
        Parser {
            text,
            b: text.as_bytes(),
            pos: 0,
            tables: Tables {
                entries: Vec::with_capacity(tensors),
                names: String::with_capacity(n / 2),
                dims: Vec::with_capacity(n / 40),
                index: hashbrown::HashTable::with_capacity(tensors),
                metadata: None,
                warnings: Vec::new(),
            },
            seen_metadata: false,
            scratch: String::new(),
            dropped_warnings: 0,
            deferred: None,
            place: Place::Header,
            unknown: UnknownKeys::default(),
        }
    }

    /// Whether a violation of `rule` would be recorded: callers skip
    /// building messages (which may quote long names) that would be dropped.
    fn wants(&self, rule: u8) -> bool {
        self.deferred.as_ref().is_none_or(|d| d.rule() > rule)
    }

    /// Records a warning; past [`MAX_WARNINGS`] they are only counted.
    fn warn(&mut self, warning: String) {
        if self.tables.warnings.len() < MAX_WARNINGS {
            self.tables.warnings.push(warning);
        } else {
            self.dropped_warnings += 1;
        }
    }

    /// Whether a violation of `rule` at header position `pos` would be
    /// recorded (for checks made after the text they are about).
    fn wants_at(&self, rule: u8, pos: usize) -> bool {
        match &self.deferred {
            None => true,
            Some(d) => {
                d.rule() > rule || (d.rule() == rule && header_pos(d).is_some_and(|p| p > pos))
            }
        }
    }

    /// Records a violation unless one that comes [`first`] is already
    /// recorded. Violations are mostly found in text order, so the first
    /// found of the lowest rule stays; duplicates among unknown fields are
    /// found when their entry closes, and replace a violation of the same
    /// rule found later in the text.
    fn defer(&mut self, err: FormatError) {
        match &self.deferred {
            Some(current) if !first(&err, current) => {}
            _ => self.deferred = Some(err),
        }
    }

    fn error(&self, msg: impl Into<String>) -> Fatal {
        FormatError::Json {
            pos: self.pos.min(self.b.len()),
            msg: msg.into(),
            looks_like: None,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// The next non-space byte, not consumed.
    fn peek_value(&mut self) -> Result<u8, Fatal> {
        self.skip_ws();
        self.peek()
            .ok_or_else(|| self.error("EOF while parsing a value"))
    }

    fn expect(&mut self, byte: u8) -> Result<(), Fatal> {
        self.skip_ws();
        match self.peek() {
            Some(c) if c == byte => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(self.error(format!("expected `{}`", byte as char))),
            None => Err(self.error("EOF while parsing an object")),
        }
    }

    /// After a member of an object or array: `true` on `,`, `false` on the closer.
    fn next_member(&mut self, close: u8) -> Result<bool, Fatal> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(false)
            }
            Some(_) => Err(self.error(format!("expected `,` or `{}`", close as char))),
            None => Err(self.error("EOF while parsing a list")),
        }
    }

    /// Opens an object or array whose opener is next: `true` when it has
    /// members, `false` when it is empty (and already closed).
    fn open(&mut self, close: u8) -> Result<bool, Fatal> {
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(false);
        }
        Ok(true)
    }

    /// The whole header: one object, then only white space.
    fn header(&mut self) -> Result<(), Fatal> {
        let first = self.peek_value()?;
        if first != b'{' {
            if matches!(first, b'[' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9') {
                return Err(FormatError::NotObject {
                    found: kind_of(first),
                });
            }
            return Err(self.error("expected value"));
        }
        if self.open(b'}')? {
            loop {
                self.top_member()?;
                if !self.next_member(b'}')? {
                    break;
                }
            }
        }
        self.skip_ws();
        if self.pos < self.b.len() {
            return Err(self.error("trailing characters"));
        }
        Ok(())
    }

    /// One member of the top object: `__metadata__` or a tensor.
    fn top_member(&mut self) -> Result<(), Fatal> {
        if self.peek_value()? != b'"' {
            return Err(self.error("key must be a string"));
        }
        let key_pos = self.pos;
        let start = self.tables.names.len();
        let mut names = std::mem::take(&mut self.tables.names);
        let read = self.string_into(&mut names);
        self.tables.names = names;
        read?;
        self.expect(b':')?;
        if &self.tables.names[start..] == "__metadata__" {
            self.tables.names.truncate(start);
            if std::mem::replace(&mut self.seen_metadata, true) {
                self.defer(FormatError::DuplicateKey {
                    key: "__metadata__".into(),
                    place: "the header".into(),
                    pos: key_pos,
                });
            }
            self.place = Place::Metadata;
            let metadata = self.metadata()?;
            if self.tables.metadata.is_none() {
                self.tables.metadata = metadata;
            }
            return Ok(());
        }
        if !self.index_name(start) && self.wants(2) {
            self.defer(FormatError::DuplicateKey {
                key: self.tables.names[start..].to_string(),
                place: "the header".into(),
                pos: key_pos,
            });
        }
        let entry = self.entry(start)?;
        self.tables.entries.push(entry);
        Ok(())
    }

    /// Adds the name being parsed (the entry about to be pushed) to the
    /// index; `false` when the name is already there. One probe either way.
    fn index_name(&mut self, start: usize) -> bool {
        let Tables {
            entries,
            names,
            index,
            ..
        } = &mut self.tables;
        let (entries, names) = (&*entries, &*names);
        let name = &names[start..];
        let probe = index.entry(
            hash_name(name),
            |&i| name_at(entries, names, i as usize) == name,
            |&i| hash_name(name_at(entries, names, i as usize)),
        );
        match probe {
            Probe::Occupied(_) => false,
            Probe::Vacant(slot) => {
                slot.insert(entries.len() as u32);
                true
            }
        }
    }

    /// The name being parsed: it is the last one in the names buffer.
    fn current_name(&self, start: usize) -> &str {
        &self.tables.names[start..]
    }

    /// `__metadata__`: null, or an object of strings (rule 3).
    fn metadata(&mut self) -> Result<Option<Metadata>, Fatal> {
        use std::collections::btree_map::Entry as Slot;
        match self.peek_value()? {
            b'n' => {
                self.literal()?;
                return Ok(None);
            }
            b'{' => {}
            other => {
                self.skip_value(1)?;
                self.defer(FormatError::MetadataNotObject {
                    found: kind_of(other),
                });
                return Ok(None);
            }
        }
        let mut metadata = Metadata::new();
        if !self.open(b'}')? {
            return Ok(Some(metadata));
        }
        loop {
            if self.peek_value()? != b'"' {
                return Err(self.error("key must be a string"));
            }
            let key_pos = self.pos;
            let key = self.owned_string()?;
            self.expect(b':')?;
            self.place = Place::MetadataValue(key_pos);
            let value = match self.peek_value()? {
                b'"' => Ok(self.owned_string()?),
                other => {
                    self.skip_value(2)?;
                    Err(kind_of(other))
                }
            };
            match metadata.entry(key) {
                Slot::Occupied(seen) => self.defer(FormatError::DuplicateKey {
                    key: seen.key().clone(),
                    place: "__metadata__".into(),
                    pos: key_pos,
                }),
                Slot::Vacant(slot) => match value {
                    Ok(value) => {
                        slot.insert(value);
                    }
                    Err(found) => {
                        let key = slot.key().clone();
                        // Kept so a later duplicate of this key is still caught.
                        slot.insert(String::new());
                        self.defer(FormatError::MetadataNotString { key, found });
                    }
                },
            }
            if !self.next_member(b'}')? {
                return Ok(Some(metadata));
            }
        }
    }

    /// Records a rule 4 problem of the entry being parsed; `field` is the
    /// field it is in (for problems that name one).
    fn bad_entry(&mut self, name_start: usize, field: &'static str, problem: Problem) {
        if !self.wants(4) {
            return;
        }
        let tensor = self.current_name(name_start).to_string();
        self.defer(match problem {
            Problem::Text(problem) => FormatError::BadEntry { tensor, problem },
            Problem::NegativeZero { index, pos } => FormatError::NegativeZero {
                tensor,
                field,
                index,
                pos,
            },
        });
    }

    /// The string whose opening quote is at header position `pos` (parsed
    /// before), unescaped; `None` only if it does not parse.
    fn string_at(&mut self, pos: usize) -> Option<Cow<'t, str>> {
        let saved = std::mem::replace(&mut self.pos, pos);
        let read = match self.raw_string() {
            Ok(Some(s)) => Some(Cow::Borrowed(s)),
            Ok(None) => Some(Cow::Owned(self.scratch.clone())),
            Err(_) => None,
        };
        self.pos = saved;
        read
    }

    /// [`Parser::string_at`], cut short for a message.
    fn quote_at(&mut self, pos: usize, max: usize) -> String {
        self.string_at(pos)
            .map_or_else(String::new, |s| shorten(&s, max))
    }

    /// Words for [`Parser::place`].
    fn place_text(&mut self) -> String {
        match self.place {
            Place::Header => "the header".into(),
            Place::Metadata => "__metadata__".into(),
            Place::MetadataValue(key) => {
                format!("__metadata__ value of {:?}", self.quote_at(key, 64))
            }
            Place::Entry(name) => {
                format!(
                    "the entry of tensor {:?}",
                    shorten(self.current_name(name), 200)
                )
            }
            Place::Field(name, key) => format!(
                "field {:?} of tensor {:?}",
                self.quote_at(key, 64),
                shorten(self.current_name(name), 200)
            ),
        }
    }

    /// The record for the tables as they stand (a placeholder when invalid:
    /// a deferred error then discards the tables anyway).
    fn record(&self, dtype: Dtype, [begin, end]: [u64; 2]) -> Entry {
        Entry {
            begin,
            end,
            // Both fit: the header is under 4 GiB and names and dimensions
            // take at least as many header bytes as buffer slots.
            name_end: self.tables.names.len() as u32,
            dims_end: self.tables.dims.len() as u32,
            dtype,
        }
    }

    /// One tensor entry: `{"dtype": ..., "shape": [...], "data_offsets": [b, e]}`.
    fn entry(&mut self, name_start: usize) -> Result<Entry, Fatal> {
        self.place = Place::Entry(name_start);
        let dims_start = self.tables.dims.len();
        if let Some((dtype, offsets)) = self.compact_entry() {
            self.check_size(name_start, dtype, dims_start, offsets);
            return Ok(self.record(dtype, offsets));
        }
        self.tables.dims.truncate(dims_start);
        self.any_entry(name_start)
    }

    /// The entry as every writer lays it out, matched byte for byte:
    /// `{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}` with no white
    /// space, fields in this order, a known dtype and plain integers. On
    /// anything else it rewinds and returns `None`, and [`Parser::any_entry`]
    /// parses the entry (and reports what is wrong with it). Shape
    /// dimensions are pushed as they are read; the caller drops them on `None`.
    fn compact_entry(&mut self) -> Option<(Dtype, [u64; 2])> {
        let start = self.pos;
        let entry = self.compact_entry_at();
        if entry.is_none() {
            self.pos = start;
        }
        entry
    }

    fn compact_entry_at(&mut self) -> Option<(Dtype, [u64; 2])> {
        self.skip_ws();
        self.bytes(b"{\"dtype\":\"")?;
        let name_start = self.pos;
        let len = self
            .b
            .get(name_start..)?
            .iter()
            .take(12)
            .position(|&c| c == b'"')?;
        let dtype = Dtype::from_name(&self.text[name_start..name_start + len])?;
        self.pos += len + 1;
        self.bytes(b",\"shape\":[")?;
        if self.peek() == Some(b']') {
            self.pos += 1;
        } else {
            loop {
                let dim = self.plain_integer()?;
                self.tables.dims.push(dim);
                match self.peek()? {
                    b',' => self.pos += 1,
                    b']' => {
                        self.pos += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.bytes(b",\"data_offsets\":[")?;
        let begin = self.plain_integer()?;
        self.bytes(b",")?;
        let end = self.plain_integer()?;
        self.bytes(b"]}")?;
        Some((dtype, [begin, end]))
    }

    /// Consumes `expected` if the text continues with it.
    fn bytes(&mut self, expected: &[u8]) -> Option<()> {
        if self.b.get(self.pos..)?.starts_with(expected) {
            self.pos += expected.len();
            Some(())
        } else {
            None
        }
    }

    /// A non-negative integer of 1 to 19 digits without a leading zero, not
    /// followed by a fraction or exponent; anything else is `None`.
    fn plain_integer(&mut self) -> Option<u64> {
        let rest = self.b.get(self.pos..)?;
        let len = rest
            .iter()
            .take(20)
            .position(|c| !c.is_ascii_digit())
            .unwrap_or(rest.len().min(20));
        let digits = &rest[..len];
        let plain = match digits {
            [] => false,
            [b'0', _, ..] => false,
            _ => len <= 19 && !matches!(rest.get(len), Some(b'.' | b'e' | b'E')),
        };
        if !plain {
            return None;
        }
        self.pos += len;
        Some(
            digits
                .iter()
                .fold(0u64, |v, d| v * 10 + u64::from(d - b'0')),
        )
    }

    /// An entry in any JSON layout, with every problem reported.
    fn any_entry(&mut self, name_start: usize) -> Result<Entry, Fatal> {
        let entry_pos = self.pos;
        let first = self.peek_value()?;
        if first != b'{' {
            self.skip_value(1)?;
            let problem = format!("the entry must be an object, found a {}", kind_of(first));
            self.bad_entry(name_start, "", problem.into());
            return Ok(self.record(Dtype::U8, [0, 0]));
        }
        let dims_start = self.tables.dims.len();
        let mut dtype: Option<Dtype> = None;
        let mut offsets = [0u64; 2];
        let mut seen = [false; 3];
        let mut ok = true;
        // Unknown fields: counted, the first three remembered by position
        // (for the warning), every one recorded by hash (for duplicates).
        self.unknown.clear();
        let mut unknown = 0usize;
        let mut first_unknown = [0usize; 3];
        let mut members = self.open(b'}')?;
        while members {
            if self.peek_value()? != b'"' {
                return Err(self.error("key must be a string"));
            }
            let key_pos = self.pos;
            let field = self.field_name()?;
            self.expect(b':')?;
            self.place = Place::Field(name_start, key_pos);
            match field {
                Field::Unknown(hash) => {
                    if let Some(slot) = first_unknown.get_mut(unknown) {
                        *slot = key_pos;
                    }
                    unknown += 1;
                    // Fits: the text is under 4 GiB (checked by `parse`).
                    self.unknown.push(hash, key_pos as u32);
                    self.skip_value(2)?;
                }
                Field::Known(f) => {
                    if std::mem::replace(&mut seen[f], true) && self.wants(2) {
                        let place = format!("tensor {:?}", self.current_name(name_start));
                        self.defer(FormatError::DuplicateKey {
                            key: FIELDS[f].to_string(),
                            place,
                            pos: key_pos,
                        });
                        ok = false;
                    }
                    ok &= self.known_field(name_start, f, dims_start, &mut dtype, &mut offsets)?;
                }
            }
            members = self.next_member(b'}')?;
        }
        if unknown >= 2 && self.wants_at(2, entry_pos) {
            if let Some((pos, key)) = self.unknown_duplicate() {
                let place = format!("tensor {:?}", self.current_name(name_start));
                self.defer(FormatError::DuplicateKey { key, place, pos });
                ok = false;
            }
        }
        if unknown > 0 {
            let shown = unknown.min(first_unknown.len());
            let listed = (0..shown)
                .map(|i| format!("{:?}", self.quote_at(first_unknown[i], 64)))
                .collect::<Vec<_>>()
                .join(", ");
            let more = if unknown > shown {
                format!(" and {} more", unknown - shown)
            } else {
                String::new()
            };
            let warning = format!(
                "tensor {:?}: unknown field{} {listed}{more} ignored",
                shorten(self.current_name(name_start), 200),
                if unknown > 1 { "s" } else { "" },
            );
            self.warn(warning);
        }
        for (i, field) in FIELDS.iter().enumerate() {
            if !seen[i] {
                self.bad_entry(name_start, "", format!("missing field `{field}`").into());
                ok = false;
            }
        }
        match dtype {
            Some(dtype) if ok => {
                self.check_size(name_start, dtype, dims_start, offsets);
                Ok(self.record(dtype, offsets))
            }
            _ => {
                // The placeholder is harmless only because an error was recorded.
                debug_assert!(self.deferred.is_some());
                Ok(self.record(Dtype::U8, offsets))
            }
        }
    }

    /// The value of a known field `f` of an entry: the dtype, the shape (into
    /// the dimensions buffer) or the offsets. `false` if it is invalid (the
    /// problem is recorded).
    fn known_field(
        &mut self,
        name_start: usize,
        f: usize,
        dims_start: usize,
        dtype: &mut Option<Dtype>,
        offsets: &mut [u64; 2],
    ) -> Result<bool, Fatal> {
        match f {
            DTYPE => match self.dtype()? {
                Ok(d) => {
                    *dtype = Some(d);
                    Ok(true)
                }
                Err(_) if !self.wants(4) => Ok(false),
                Err(err) => {
                    let tensor = self.current_name(name_start).to_string();
                    let err = match err {
                        Ok(name) => FormatError::UnknownDtype {
                            tensor,
                            dtype: name,
                        },
                        Err(found) => FormatError::BadEntry {
                            tensor,
                            problem: format!("dtype must be a string, found a {found}"),
                        },
                    };
                    self.defer(err);
                    Ok(false)
                }
            },
            SHAPE => {
                self.tables.dims.truncate(dims_start);
                let mut dims = std::mem::take(&mut self.tables.dims);
                let read = self.numbers("shape", &mut dims, None);
                self.tables.dims = dims;
                match read? {
                    Ok(()) => Ok(true),
                    Err(problem) => {
                        self.bad_entry(name_start, "shape", problem);
                        Ok(false)
                    }
                }
            }
            _ => {
                let mut pair = Pair::default();
                match self.numbers("data_offsets", &mut pair, Some(2))? {
                    Ok(()) => {
                        *offsets = pair.values;
                        Ok(true)
                    }
                    Err(problem) => {
                        self.bad_entry(name_start, "data_offsets", problem);
                        Ok(false)
                    }
                }
            }
        }
    }

    /// The first unknown field of the entry (in header order) whose name an
    /// earlier unknown field has: its key's header position, and the name.
    /// Only names whose hashes collide are read back and compared.
    fn unknown_duplicate(&mut self) -> Option<(usize, String)> {
        let mut keys = std::mem::take(&mut self.unknown);
        let mut found: Option<(usize, Cow<'t, str>)> = None;
        let mut group: Vec<(Cow<'t, str>, usize)> = Vec::new();
        for run in keys.collisions().chunk_by(|a, b| a >> 32 == b >> 32) {
            group.clear();
            for &record in run {
                let pos = (record & 0xffff_ffff) as usize;
                // Always some: the key parsed a moment ago.
                if let Some(name) = self.string_at(pos) {
                    group.push((name, pos));
                }
            }
            // Equal names side by side, each run in header order: the
            // second of a run is that name's first repetition.
            group.sort_unstable();
            for pair in group.windows(2) {
                let [(a, _), (b, pos)] = pair else { continue };
                if a == b && found.as_ref().is_none_or(|(p, _)| pos < p) {
                    found = Some((*pos, b.clone()));
                }
            }
        }
        self.unknown = keys;
        found.map(|(pos, name)| (pos, name.into_owned()))
    }

    /// Rule 4: end - begin equals the shape's element count times the dtype's size.
    fn check_size(
        &mut self,
        name_start: usize,
        dtype: Dtype,
        dims_start: usize,
        [begin, end]: [u64; 2],
    ) {
        let shape = &self.tables.dims[dims_start..];
        let tensor = || self.current_name(name_start).to_string();
        let err = match dtype.tensor_bytes(shape) {
            Ok(len) if begin <= end && end - begin == len => return,
            _ if !self.wants(4) => return,
            Err(ByteLenError::Overflow) => FormatError::ShapeOverflow {
                tensor: tensor(),
                dtype,
                shape: shape.to_vec(),
            },
            Err(ByteLenError::NotWholeBytes { numel }) => FormatError::NotWholeBytes {
                tensor: tensor(),
                dtype,
                numel,
            },
            Ok(expected) => FormatError::SizeMismatch {
                tensor: tensor(),
                dtype,
                shape: shape.to_vec(),
                begin,
                end,
                actual: end as i128 - begin as i128,
                expected,
            },
        };
        self.defer(err);
    }

    /// A field name of an entry: the index of a known field, or the hash
    /// of an unknown name (unescaped, so spellings of one name hash alike).
    fn field_name(&mut self) -> Result<Field, Fatal> {
        // The usual spelling, matched as bytes: the quoted name, no escapes.
        for (i, quoted) in QUOTED_FIELDS.iter().enumerate() {
            if self.b[self.pos..].starts_with(quoted.as_bytes()) {
                self.pos += quoted.len();
                return Ok(Field::Known(i));
            }
        }
        let raw = self.raw_string()?;
        let name = match raw {
            Some(raw) => raw,
            None => self.scratch.as_str(),
        };
        Ok(match FIELDS.iter().position(|f| *f == name) {
            Some(i) => Field::Known(i),
            None => Field::Unknown(hash_name(name)),
        })
    }

    /// A dtype value: the dtype, or the unknown name, or what was found instead of a string.
    #[allow(clippy::type_complexity)]
    fn dtype(&mut self) -> Result<Result<Dtype, Result<String, &'static str>>, Fatal> {
        let first = self.peek_value()?;
        if first != b'"' {
            self.skip_value(2)?;
            return Ok(Err(Err(kind_of(first))));
        }
        let raw = self.raw_string()?;
        let name = match raw {
            Some(raw) => raw,
            None => self.scratch.as_str(),
        };
        Ok(Dtype::from_name(name).ok_or_else(|| Ok(name.to_string())))
    }

    /// An array of non-negative integers (a shape, or the two data offsets).
    /// A bad element or count is returned as a problem, with the rest of the
    /// value consumed, so the parse can go on.
    fn numbers(
        &mut self,
        what: &str,
        out: &mut impl Numbers,
        exactly: Option<usize>,
    ) -> Result<Result<(), Problem>, Fatal> {
        let first = self.peek_value()?;
        if first != b'[' {
            self.skip_value(2)?;
            return Ok(Err(format!(
                "{what} must be an array of integers, found a {}",
                kind_of(first)
            )
            .into()));
        }
        let mut problem: Option<Problem> = None;
        let mut count = 0usize;
        let mut members = self.open(b']')?;
        while members {
            let c = self.peek_value()?;
            if matches!(c, b'-' | b'0'..=b'9') {
                match self.number()? {
                    Number::Unsigned(v) if problem.is_none() => out.push(v),
                    Number::Unsigned(_) => {}
                    Number::NegativeZero(pos) => {
                        problem.get_or_insert(Problem::NegativeZero { index: count, pos });
                    }
                    Number::Other(start, end, why) => {
                        problem.get_or_insert_with(|| {
                            let number = quote_number(&self.text[start..end]);
                            format!("{what} element {count} is {number}, {why}").into()
                        });
                    }
                }
            } else {
                self.skip_value(3)?;
                problem.get_or_insert_with(|| {
                    format!("{what} element {count} is a {}", kind_of(c)).into()
                });
            }
            count += 1;
            members = self.next_member(b']')?;
        }
        if let Some(problem) = problem {
            return Ok(Err(problem));
        }
        match exactly {
            Some(n) if n != count => Ok(Err(format!(
                "{what} must have {n} numbers, found {count}"
            )
            .into())),
            _ => Ok(Ok(())),
        }
    }

    /// A JSON number (the next byte is `-` or a digit). One that rounds
    /// past the largest 64-bit float is recorded as a rule 2 violation
    /// wherever it is ([`FormatError::NumberOutOfRange`]), and the parse
    /// goes on.
    fn number(&mut self) -> Result<Number, Fatal> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let digits_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                }
            }
            _ => return Err(self.error("invalid number")),
        }
        let digits = &self.b[digits_start..self.pos];
        // Up to 19 digits cannot overflow u64: no checks on the common path.
        let value = if digits.len() <= 19 {
            Some(
                digits
                    .iter()
                    .fold(0u64, |v, d| v * 10 + u64::from(d - b'0')),
            )
        } else {
            digits.iter().try_fold(0u64, |v, d| {
                v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
        };
        if let Some(b'0'..=b'9') = self.peek() {
            return Err(self.error("invalid number: leading zero"));
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.digits()?;
            integer = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.digits()?;
            integer = false;
        }
        let end = self.pos;
        if !integer || value.is_none() {
            self.check_range(start, end);
        }
        Ok(match (integer, negative, value) {
            (true, false, Some(v)) => Number::Unsigned(v),
            (true, true, Some(0)) => Number::NegativeZero(start),
            (true, true, _) => Number::Other(start, end, "which is negative"),
            (true, false, None) => Number::Other(start, end, "which does not fit 64 bits"),
            (false, _, _) => Number::Other(start, end, "which is not an integer"),
        })
    }

    /// Rule 2: the number `text[start..end]` (its JSON syntax checked) must
    /// not round past the largest 64-bit float. Rust's parser rounds
    /// correctly, as the reference's serde_json does when built with
    /// `float_roundtrip` (as this workspace builds it), so both call the
    /// same numbers infinite: `1.7976931348623158e308` is the largest float,
    /// `1.7976931348623159e308` is out of range, and `1e-400` is zero.
    fn check_range(&mut self, start: usize, end: usize) {
        let text = &self.text[start..end];
        // The JSON number grammar is a subset of Rust's float syntax, so
        // parsing cannot fail; if it did, refusing is the safe side.
        let finite = text.parse::<f64>().is_ok_and(f64::is_finite);
        if finite || !self.wants_at(2, start) {
            return;
        }
        let number = quote_number(text);
        let place = self.place_text();
        self.defer(FormatError::NumberOutOfRange {
            pos: start,
            number,
            place,
        });
    }

    /// One or more digits (of a fraction or exponent).
    fn digits(&mut self) -> Result<(), Fatal> {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("invalid number"));
        }
        Ok(())
    }

    /// `true`, `false` or `null`.
    fn literal(&mut self) -> Result<(), Fatal> {
        for word in [&b"true"[..], b"false", b"null"] {
            if self.b[self.pos..].starts_with(word) {
                self.pos += word.len();
                return Ok(());
            }
        }
        Err(self.error("expected value"))
    }

    /// A string (the next byte is `"`) without escapes is returned borrowed
    /// from the text; one with escapes is unescaped into `self.scratch` and
    /// `None` is returned.
    fn raw_string(&mut self) -> Result<Option<&'t str>, Fatal> {
        let start = self.pos + 1;
        let end = self.plain_run(start);
        if self.b.get(end) == Some(&b'"') {
            self.pos = end + 1;
            return Ok(Some(&self.text[start..end]));
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let read = self.string_into(&mut scratch);
        self.scratch = scratch;
        read.map(|()| None)
    }

    /// A string (the next byte is `"`), unescaped into a new `String`.
    fn owned_string(&mut self) -> Result<String, Fatal> {
        let mut out = String::new();
        self.string_into(&mut out)?;
        Ok(out)
    }

    /// Where the run of bytes that need no attention in a string ends: the
    /// next quote, backslash or control character (or the end of the text).
    fn plain_run(&self, from: usize) -> usize {
        let rest = self.b.get(from..).unwrap_or_default();
        from + crate::json::plain_len(rest)
    }

    /// A string (the next byte is `"`), unescaped and appended to `out`.
    fn string_into(&mut self, out: &mut String) -> Result<(), Fatal> {
        self.pos += 1;
        loop {
            let end = self.plain_run(self.pos);
            // Runs end at ASCII bytes, so both ends are char boundaries.
            out.push_str(&self.text[self.pos..end]);
            self.pos = end;
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = self.escape()?;
                    out.push(c);
                }
                Some(_) => {
                    return Err(self
                        .error("control character (\\u0000-\\u001F) found while parsing a string"))
                }
                None => return Err(self.error("EOF while parsing a string")),
            }
        }
    }

    /// The character an escape stands for (after the backslash).
    fn escape(&mut self) -> Result<char, Fatal> {
        let c = self
            .peek()
            .ok_or_else(|| self.error("EOF while parsing a string"))?;
        self.pos += 1;
        Ok(match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                let code = match first {
                    0xD800..=0xDBFF => {
                        if !self.b[self.pos..].starts_with(b"\\u") {
                            return Err(self.error("lone leading surrogate in hex escape"));
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(self.error("lone leading surrogate in hex escape"));
                        }
                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    }
                    0xDC00..=0xDFFF => {
                        return Err(self.error("lone trailing surrogate in hex escape"))
                    }
                    other => other,
                };
                char::from_u32(code).ok_or_else(|| self.error("invalid unicode code point"))?
            }
            _ => {
                self.pos -= 1;
                return Err(self.error("invalid escape"));
            }
        })
    }

    fn hex4(&mut self) -> Result<u32, Fatal> {
        let digits = self
            .b
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("EOF while parsing a string"))?;
        let mut code = 0u32;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid escape"))?;
            code = code * 16 + v;
        }
        self.pos += 4;
        Ok(code)
    }

    /// Skips one value of any shape. `depth` is how many containers are
    /// open around it. Iterative: nesting costs one byte of stack per level.
    fn skip_value(&mut self, depth: usize) -> Result<(), Fatal> {
        let mut open: Vec<u8> = Vec::new();
        loop {
            // A value is expected here.
            match self.peek_value()? {
                c @ (b'{' | b'[') => {
                    if depth + open.len() + 1 > MAX_DEPTH {
                        return Err(self.error("recursion limit exceeded"));
                    }
                    let close = if c == b'{' { b'}' } else { b']' };
                    if self.open(close)? {
                        open.push(close);
                        if close == b'}' {
                            self.member_key()?;
                        }
                        continue;
                    }
                }
                b'"' => {
                    self.raw_string()?;
                }
                b'-' | b'0'..=b'9' => {
                    self.number()?;
                }
                b't' | b'f' | b'n' => self.literal()?,
                _ => return Err(self.error("expected value")),
            }
            // A value is complete: close what ends here, or go to the next member.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                if self.next_member(close)? {
                    if close == b'}' {
                        self.member_key()?;
                    }
                    break;
                }
                open.pop();
            }
        }
    }

    /// An object member's key and colon, skipped.
    fn member_key(&mut self) -> Result<(), Fatal> {
        if self.peek_value()? != b'"' {
            return Err(self.error("key must be a string"));
        }
        self.raw_string()?;
        self.expect(b':')
    }
}

/// The fields of a tensor entry, by index.
const FIELDS: [&str; 3] = ["dtype", "shape", "data_offsets"];
const QUOTED_FIELDS: [&str; 3] = ["\"dtype\"", "\"shape\"", "\"data_offsets\""];
const DTYPE: usize = 0;
const SHAPE: usize = 1;

/// Where a number list puts its numbers.
trait Numbers {
    fn push(&mut self, value: u64);
}

impl Numbers for Vec<u64> {
    fn push(&mut self, value: u64) {
        Vec::push(self, value);
    }
}

/// The two data offsets, without a heap allocation; extra numbers are
/// counted by the list and refused there.
#[derive(Default)]
struct Pair {
    values: [u64; 2],
    len: usize,
}

impl Numbers for Pair {
    fn push(&mut self, value: u64) {
        if let Some(slot) = self.values.get_mut(self.len) {
            *slot = value;
        }
        self.len += 1;
    }
}
