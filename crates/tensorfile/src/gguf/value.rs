//! Metadata values: the 13 GGUF value types, scalars and (nested) arrays.

use std::fmt;

use serde_json::Value as Json;

/// A GGUF value type id (`gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueType {
    /// 0: unsigned 8-bit.
    U8,
    /// 1: signed 8-bit.
    I8,
    /// 2: unsigned 16-bit.
    U16,
    /// 3: signed 16-bit.
    I16,
    /// 4: unsigned 32-bit.
    U32,
    /// 5: signed 32-bit.
    I32,
    /// 6: IEEE single.
    F32,
    /// 7: one byte, 0 or 1.
    Bool,
    /// 8: a u64 length and UTF-8 bytes.
    String,
    /// 9: an element type, a u64 count and the elements.
    Array,
    /// 10: unsigned 64-bit.
    U64,
    /// 11: signed 64-bit.
    I64,
    /// 12: IEEE double.
    F64,
}

impl ValueType {
    /// The type with this id.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The id in files.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// gguf-py's name (`UINT32`, `FLOAT32`, `STRING`, ...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "UINT8",
            I8 => "INT8",
            U16 => "UINT16",
            I16 => "INT16",
            U32 => "UINT32",
            I32 => "INT32",
            F32 => "FLOAT32",
            Bool => "BOOL",
            String => "STRING",
            Array => "ARRAY",
            U64 => "UINT64",
            I64 => "INT64",
            F64 => "FLOAT64",
        }
    }

    /// Bytes of one element in a file: fixed for scalars; for strings and
    /// arrays, the least one can take (a length or a type and a count).
    pub fn min_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// UINT8.
    U8(u8),
    /// INT8.
    I8(i8),
    /// UINT16.
    U16(u16),
    /// INT16.
    I16(i16),
    /// UINT32.
    U32(u32),
    /// INT32.
    I32(i32),
    /// FLOAT32.
    F32(f32),
    /// BOOL.
    Bool(bool),
    /// STRING.
    String(String),
    /// ARRAY.
    Array(Array),
    /// UINT64.
    U64(u64),
    /// INT64.
    I64(i64),
    /// FLOAT64.
    F64(f64),
}

/// An array value: elements of one type, stored compactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    /// UINT8 elements.
    U8(Vec<u8>),
    /// INT8 elements.
    I8(Vec<i8>),
    /// UINT16 elements.
    U16(Vec<u16>),
    /// INT16 elements.
    I16(Vec<i16>),
    /// UINT32 elements.
    U32(Vec<u32>),
    /// INT32 elements.
    I32(Vec<i32>),
    /// FLOAT32 elements.
    F32(Vec<f32>),
    /// BOOL elements.
    Bool(Vec<bool>),
    /// STRING elements.
    String(Vec<String>),
    /// Arrays of arrays (valid GGUF; llama.cpp refuses them).
    Array(Vec<Array>),
    /// UINT64 elements.
    U64(Vec<u64>),
    /// INT64 elements.
    I64(Vec<i64>),
    /// FLOAT64 elements.
    F64(Vec<f64>),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float, if it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v as f64),
            ref other => other.as_u64().map(|v| v as f64),
        }
    }

    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The bool, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The array, if it is one.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value as JSON: numbers exact (non-finite floats as the strings
    /// `"inf"`, `"-inf"`, `"nan"`), arrays of at most `max_array` elements
    /// whole and longer ones summarized (see [`Array::to_json`]).
    pub(crate) fn to_json(&self, max_array: usize) -> Json {
        match self {
            Value::U8(v) => (*v).into(),
            Value::I8(v) => (*v).into(),
            Value::U16(v) => (*v).into(),
            Value::I16(v) => (*v).into(),
            Value::U32(v) => (*v).into(),
            Value::I32(v) => (*v).into(),
            Value::U64(v) => (*v).into(),
            Value::I64(v) => (*v).into(),
            Value::F32(v) => float_json(f64::from(*v)),
            Value::F64(v) => float_json(*v),
            Value::Bool(v) => (*v).into(),
            Value::String(s) => s.clone().into(),
            Value::Array(a) => a.to_json(max_array),
        }
    }
}

impl Value {
    /// The value as JSON, to serialize or print: numbers exact (non-finite
    /// floats as the strings `"inf"`, `"-inf"`, `"nan"`), arrays of at most
    /// `max_array` elements whole and longer ones as
    /// `{"type", "len", "first": [up to 8 elements]}`.
    ///
    /// ```
    /// use tensorfile::gguf::{GgufArray as Array, GgufValue as Value};
    /// assert_eq!(Value::F32(f32::INFINITY).json(0).to_string(), r#""inf""#);
    /// let a = Value::Array(Array::U8(vec![1, 2, 3]));
    /// assert_eq!(a.json(8).to_string(), "[1,2,3]");
    /// assert!(a.json(2).to_string().contains(r#""len":3"#));
    /// ```
    pub fn json(&self, max_array: usize) -> ValueJson<'_> {
        ValueJson {
            value: self,
            max_array,
        }
    }
}

/// A GGUF value shown as JSON ([`Value::json`]): it serializes as that
/// JSON and displays as its compact text. (A view rather than a
/// `serde_json` value, so no serde_json type is in the public API.)
#[derive(Debug, Clone, Copy)]
pub struct ValueJson<'a> {
    value: &'a Value,
    max_array: usize,
}

impl serde::Serialize for ValueJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.to_json(self.max_array).serialize(s)
    }
}

impl fmt::Display for ValueJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value.to_json(self.max_array))
    }
}

/// A float as JSON, non-finite values as strings.
pub(crate) fn float_json(v: f64) -> Json {
    if v.is_finite() {
        serde_json::Number::from_f64(v).map_or(Json::Null, Json::Number)
    } else if v.is_nan() {
        "nan".into()
    } else if v > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

impl Array {
    /// The element type.
    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// The element count.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a value.
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Array::U8(v) => Value::U8(*v.get(i)?),
            Array::I8(v) => Value::I8(*v.get(i)?),
            Array::U16(v) => Value::U16(*v.get(i)?),
            Array::I16(v) => Value::I16(*v.get(i)?),
            Array::U32(v) => Value::U32(*v.get(i)?),
            Array::I32(v) => Value::I32(*v.get(i)?),
            Array::F32(v) => Value::F32(*v.get(i)?),
            Array::Bool(v) => Value::Bool(*v.get(i)?),
            Array::String(v) => Value::String(v.get(i)?.clone()),
            Array::Array(v) => Value::Array(v.get(i)?.clone()),
            Array::U64(v) => Value::U64(*v.get(i)?),
            Array::I64(v) => Value::I64(*v.get(i)?),
            Array::F64(v) => Value::F64(*v.get(i)?),
        })
    }

    /// The strings, if it is an array of strings.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            Array::String(v) => Some(v),
            _ => None,
        }
    }

    /// The elements as JSON when there are at most `max` of them; a longer
    /// array becomes `{"type", "len", "first": [up to 8 elements]}`.
    pub(crate) fn to_json(&self, max: usize) -> Json {
        let n = self.len();
        let shown = if n <= max { n } else { n.min(8) };
        let items: Vec<Json> = (0..shown)
            .filter_map(|i| self.get(i))
            .map(|v| v.to_json(max))
            .collect();
        if n <= max {
            return Json::Array(items);
        }
        serde_json::json!({
            "type": self.element_type().name(),
            "len": n,
            "first": items,
        })
    }
}
