//! Parsing the header text into [`Tables`]: reader rules 2 to 4.
//!
//! The text streams through serde_json visitors straight into the tables;
//! on the path a valid header takes nothing is allocated per tensor (no
//! `String` for the dtype or field names, no `Vec` for the offsets). Error
//! paths allocate their messages.
//!
//! Rule violations found inside the header (rules 2 to 4) do not stop the
//! parse: the lowest-numbered one found wins, so a file that breaks several
//! rules is reported under the first rule in the format's order. Only
//! malformed JSON, which leaves nothing to parse, stops at once.

use std::fmt;

use hashbrown::hash_table::Entry as Probe;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{hash_name, name_at, Entry, Tables};
use crate::dtype::{numel, Dtype};
use crate::error::FormatError;
use crate::Metadata;

/// Parses header text; rule 5 is the caller's.
pub(super) fn parse(text: &[u8]) -> Result<Tables, FormatError> {
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
    match parser.deferred.take() {
        Some(deferred) => Err(deferred),
        None => Ok(parser.tables),
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
    tables: Tables,
    seen_metadata: bool,
    /// The lowest-rule violation found so far; the parse goes on.
    deferred: Option<FormatError>,
    /// An error that ended the parse (set just before returning a serde error).
    fatal: Option<FormatError>,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Self {
        // A tensor takes about 90 to 110 header bytes, a third to a half of
        // them its name. Reserving from that avoids reallocation (and the
        // moment it holds two copies) without over-committing memory.
        let n = text.len();
        let tensors = n / 90 + 1;
        let tables = Tables {
            entries: Vec::with_capacity(tensors),
            names: String::with_capacity(n / 2),
            dims: Vec::with_capacity(n / 40),
            index: hashbrown::HashTable::with_capacity(tensors),
            metadata: None,
            warnings: Vec::new(),
        };
        Parser {
            text,
            tables,
            seen_metadata: false,
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

    /// Byte position of a key's opening quote, for error messages: exact
    /// when serde_json lent us the key from the text (no escapes); else the
    /// last quoted occurrence of its escaped form.
    fn key_position(&self, key: &str, borrowed: Option<&str>) -> usize {
        match borrowed.and_then(|s| self.position_of(s)) {
            Some(p) => p.saturating_sub(1),
            None => {
                let quoted = serde_json::to_string(key).unwrap_or_default();
                self.text.rfind(&quoted).unwrap_or(0)
            }
        }
    }

    /// The name being parsed: it is the last one in the names buffer.
    fn current_name(&self, start: usize) -> &str {
        &self.tables.names[start..]
    }
}

/// Implements the listed visit methods of a visitor by calling
/// `self.other(kind)`, draining arrays and objects first so the parse can go
/// on. Each visitor lists only the kinds it does not handle itself.
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
            out: &mut p.tables.names,
        })? {
            let start = key.start;
            if p.current_name(start) == "__metadata__" {
                p.tables.names.truncate(start);
                if std::mem::replace(&mut p.seen_metadata, true) {
                    let pos = p.key_position("__metadata__", key.borrowed);
                    p.defer(FormatError::DuplicateKey {
                        key: "__metadata__".into(),
                        place: "the header".into(),
                        pos,
                    });
                }
                let metadata = map.next_value_seed(MetadataSeed(p))?;
                if p.tables.metadata.is_none() {
                    p.tables.metadata = metadata;
                }
                continue;
            }
            if !p.index_name(start) {
                let name = p.current_name(start).to_string();
                let pos = p.key_position(&name, key.borrowed);
                p.defer(FormatError::DuplicateKey {
                    key: name,
                    place: "the header".into(),
                    pos,
                });
            }
            let entry = map.next_value_seed(EntrySeed {
                p,
                name_start: start,
            })?;
            p.tables.entries.push(entry);
        }
        Ok(())
    }
}

impl Parser<'_> {
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
}

/// A key appended to a string buffer. `borrowed` is set when serde_json lent
/// it straight from the header text (no escapes), which gives its position.
struct Key<'de> {
    start: usize,
    borrowed: Option<&'de str>,
}

struct KeySeed<'a> {
    out: &'a mut String,
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
        let start = self.out.len();
        self.out.push_str(v);
        Ok(Key {
            start,
            borrowed: Some(v),
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let start = self.out.len();
        self.out.push_str(v);
        Ok(Key {
            start,
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
        use std::collections::btree_map::Entry as Slot;
        let p = self.0;
        let mut metadata = Metadata::new();
        let mut scratch = String::new();
        while let Some(key) = map.next_key_seed(KeySeed { out: &mut scratch })? {
            let name = std::mem::take(&mut scratch);
            let value = map.next_value_seed(StringValue)?;
            match metadata.entry(name) {
                Slot::Occupied(seen) => {
                    let pos = p.key_position(seen.key(), key.borrowed);
                    p.defer(FormatError::DuplicateKey {
                        key: seen.key().clone(),
                        place: "__metadata__".into(),
                        pos,
                    });
                }
                Slot::Vacant(slot) => match value {
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

/// The fields of a tensor entry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Dtype,
    Shape,
    DataOffsets,
}

impl Field {
    const ALL: [Field; 3] = [Field::Dtype, Field::Shape, Field::DataOffsets];

    fn name(self) -> &'static str {
        match self {
            Field::Dtype => "dtype",
            Field::Shape => "shape",
            Field::DataOffsets => "data_offsets",
        }
    }
}

/// A field name: known fields are matched without allocating; an unknown
/// one is kept as a string (for its warning and duplicate check).
struct FieldKey<'de> {
    field: Result<Field, String>,
    borrowed: Option<&'de str>,
}

struct FieldSeed;

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = FieldKey<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

fn field_of(name: &str) -> Result<Field, String> {
    match name {
        "dtype" => Ok(Field::Dtype),
        "shape" => Ok(Field::Shape),
        "data_offsets" => Ok(Field::DataOffsets),
        other => Err(other.to_string()),
    }
}

impl<'de> Visitor<'de> for FieldSeed {
    type Value = FieldKey<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(FieldKey {
            field: field_of(v),
            borrowed: Some(v),
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(FieldKey {
            field: field_of(v),
            borrowed: None,
        })
    }
}

/// A dtype value: a known name, or what is wrong with it.
enum DtypeValue {
    Known(Dtype),
    Unknown(String),
    NotString(&'static str),
}

struct DtypeSeed;

impl<'de> DeserializeSeed<'de> for DtypeSeed {
    type Value = DtypeValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl DtypeSeed {
    fn other<E>(self, found: &'static str) -> Result<DtypeValue, E> {
        Ok(DtypeValue::NotString(found))
    }
}

impl<'de> Visitor<'de> for DtypeSeed {
    type Value = DtypeValue;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a dtype name")
    }

    visit_others!(bool, u64, i64, f64, unit, seq, map);

    fn visit_str<E: de::Error>(self, v: &str) -> Result<DtypeValue, E> {
        Ok(match Dtype::from_name(v) {
            Some(d) => DtypeValue::Known(d),
            None => DtypeValue::Unknown(v.to_string()),
        })
    }
}

/// One tensor entry: `{"dtype": ..., "shape": [...], "data_offsets": [b, e]}`.
struct EntrySeed<'p, 't> {
    p: &'p mut Parser<'t>,
    name_start: usize,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_, '_> {
    type Value = Entry;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl EntrySeed<'_, '_> {
    /// The record for the tables as they stand (a placeholder when invalid:
    /// a deferred error then discards the tables anyway).
    fn record(&self, dtype: Dtype, offsets: [u64; 2]) -> Entry {
        Entry {
            begin: offsets[0],
            end: offsets[1],
            // Both fit: the header is under 4 GiB and names and dimensions
            // take at least as many header bytes as buffer slots.
            name_end: self.p.tables.names.len() as u32,
            dims_end: self.p.tables.dims.len() as u32,
            dtype,
        }
    }

    fn bad(&mut self, problem: String) {
        let tensor = self.p.current_name(self.name_start).to_string();
        self.p.defer(FormatError::BadEntry { tensor, problem });
    }

    fn other<E>(mut self, found: &'static str) -> Result<Entry, E> {
        self.bad(format!("the entry must be an object, found a {found}"));
        Ok(self.record(Dtype::U8, [0, 0]))
    }

    /// Rule 4: end - begin equals the shape's element count times the dtype's size.
    fn check_size(&mut self, dtype: Dtype, dims_start: usize, [begin, end]: [u64; 2]) {
        let shape = &self.p.tables.dims[dims_start..];
        let bits = numel(shape).and_then(|n| Some((n, n.checked_mul(dtype.bits() as u64)?)));
        let tensor = || self.p.current_name(self.name_start).to_string();
        let err = match bits {
            None => FormatError::ShapeOverflow {
                tensor: tensor(),
                dtype,
                shape: shape.to_vec(),
            },
            Some((numel, bits)) if bits % 8 != 0 => FormatError::NotWholeBytes {
                tensor: tensor(),
                dtype,
                numel,
            },
            Some((_, bits)) if end < begin || end - begin != bits / 8 => {
                FormatError::SizeMismatch {
                    tensor: tensor(),
                    dtype,
                    shape: shape.to_vec(),
                    begin,
                    end,
                    actual: end as i128 - begin as i128,
                    expected: bits / 8,
                }
            }
            Some(_) => return,
        };
        self.p.defer(err);
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_, '_> {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tensor entry object")
    }

    visit_others!(bool, u64, i64, f64, str, unit, seq);

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Entry, A::Error> {
        let dims_start = self.p.tables.dims.len();
        let mut dtype: Option<Dtype> = None;
        let mut offsets = [0u64; 2];
        let mut seen = [false; 3];
        let mut ok = true;
        let mut unknown: Vec<String> = Vec::new();
        while let Some(key) = map.next_key_seed(FieldSeed)? {
            let duplicate = match &key.field {
                Ok(f) => std::mem::replace(&mut seen[*f as usize], true),
                Err(name) => unknown.contains(name),
            };
            if duplicate {
                let field = match &key.field {
                    Ok(f) => f.name().to_string(),
                    Err(name) => name.clone(),
                };
                let pos = self.p.key_position(&field, key.borrowed);
                let place = format!("tensor {:?}", self.p.current_name(self.name_start));
                self.p.defer(FormatError::DuplicateKey {
                    key: field,
                    place,
                    pos,
                });
                ok = false;
            }
            match key.field {
                Err(name) => {
                    let warning = format!(
                        "tensor {:?}: unknown field {name:?} ignored",
                        self.p.current_name(self.name_start)
                    );
                    self.p.tables.warnings.push(warning);
                    unknown.push(name);
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(Field::Dtype) => match map.next_value_seed(DtypeSeed)? {
                    DtypeValue::Known(d) => dtype = Some(d),
                    DtypeValue::Unknown(name) => {
                        let tensor = self.p.current_name(self.name_start).to_string();
                        self.p.defer(FormatError::UnknownDtype {
                            tensor,
                            dtype: name,
                        });
                        ok = false;
                    }
                    DtypeValue::NotString(found) => {
                        self.bad(format!("dtype must be a string, found a {found}"));
                        ok = false;
                    }
                },
                Ok(Field::Shape) => {
                    self.p.tables.dims.truncate(dims_start);
                    let list = NumberList {
                        out: &mut self.p.tables.dims,
                        what: "shape",
                        exactly: None,
                    };
                    if let Err(problem) = map.next_value_seed(list)? {
                        self.bad(problem);
                        ok = false;
                    }
                }
                Ok(Field::DataOffsets) => {
                    let mut pair = Pair::default();
                    let list = NumberList {
                        out: &mut pair,
                        what: "data_offsets",
                        exactly: Some(2),
                    };
                    match map.next_value_seed(list)? {
                        Ok(()) => offsets = pair.values,
                        Err(problem) => {
                            self.bad(problem);
                            ok = false;
                        }
                    }
                }
            }
        }
        for f in Field::ALL {
            if !seen[f as usize] {
                self.bad(format!("missing field `{}`", f.name()));
                ok = false;
            }
        }
        match dtype {
            Some(dtype) if ok => {
                self.check_size(dtype, dims_start, offsets);
                Ok(self.record(dtype, offsets))
            }
            _ => Ok(self.record(Dtype::U8, offsets)),
        }
    }
}

/// Where a [`NumberList`] puts its numbers.
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

/// An array of non-negative integers (a shape, or the two data offsets). On
/// a bad element the rest is consumed and the problem returned, so the
/// parse can go on.
struct NumberList<'a, N> {
    out: &'a mut N,
    what: &'static str,
    exactly: Option<usize>,
}

impl<'de, N: Numbers> DeserializeSeed<'de> for NumberList<'_, N> {
    type Value = Result<(), String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<N> NumberList<'_, N> {
    fn other<E>(self, found: &'static str) -> Result<Result<(), String>, E> {
        Ok(Err(format!(
            "{} must be an array of integers, found a {found}",
            self.what
        )))
    }
}

impl<'de, N: Numbers> Visitor<'de> for NumberList<'_, N> {
    type Value = Result<(), String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of non-negative integers")
    }

    visit_others!(bool, u64, i64, f64, str, unit, map);

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut problem: Option<(usize, Number)> = None;
        let mut count = 0usize;
        while let Some(n) = seq.next_element_seed(NumberSeed)? {
            match n {
                Number::Ok(v) if problem.is_none() => self.out.push(v),
                Number::Ok(_) => {}
                bad => {
                    problem.get_or_insert((count, bad));
                }
            }
            count += 1;
        }
        if let Some((index, bad)) = problem {
            return Ok(Err(format!("{} element {index} is {bad}", self.what)));
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

/// One element of a [`NumberList`].
enum Number {
    Ok(u64),
    Negative(i64),
    Fraction(f64),
    Other(&'static str),
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Ok(v) => write!(f, "{v}"),
            Number::Negative(v) => write!(f, "{v}, which is negative"),
            Number::Fraction(v) => write!(f, "{v}, which is not an integer"),
            Number::Other(kind) => write!(f, "a {kind}"),
        }
    }
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
        Ok(Number::Other(found))
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
        Ok(Number::Negative(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Number, E> {
        Ok(Number::Fraction(v))
    }
}
