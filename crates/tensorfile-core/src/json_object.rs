//! A JSON object read from a file the library does not model field by field
//! (a model's config.json, a sharded index's `metadata`): kept whole, read
//! through typed accessors, so that no `serde_json` type appears in the
//! library's public signatures (a serde_json upgrade stays an internal
//! matter).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object, keys in ascending byte order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JsonObject(Map<String, Value>);

impl JsonObject {
    /// An empty object.
    pub fn new() -> JsonObject {
        JsonObject::default()
    }

    /// Parses `text` as a JSON object.
    ///
    /// # Errors
    /// The text is not JSON, or not an object: the problem in words (say,
    /// "a JSON array, not an object").
    pub fn parse(text: &str) -> Result<JsonObject, crate::ParseError> {
        Self::from_slice(text.as_bytes()).map_err(crate::ParseError::new)
    }

    /// Parses JSON bytes as an object; the error is the problem in words.
    #[doc(hidden)]
    pub fn from_slice(text: &[u8]) -> Result<JsonObject, String> {
        match serde_json::from_slice::<Value>(text) {
            Ok(Value::Object(map)) => Ok(JsonObject(map)),
            Ok(other) => Err(format!("a JSON {}, not an object", json_kind(&other))),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `key` is there (whatever its value, `null` included).
    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// The keys, in ascending byte order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// `key`'s value when it is a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    /// `key`'s value when it is a non-negative integer that fits a `u64`.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.0.get(key).and_then(Value::as_u64)
    }

    /// `key`'s value when it is an integer that fits an `i64`.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.0.get(key).and_then(Value::as_i64)
    }

    /// `key`'s value when it is a number.
    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(Value::as_f64)
    }

    /// `key`'s value when it is a boolean.
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.0.get(key).and_then(Value::as_bool)
    }

    /// `key`'s value when it is an object.
    pub fn get_object(&self, key: &str) -> Option<JsonObject> {
        self.0
            .get(key)
            .and_then(Value::as_object)
            .map(|m| JsonObject(m.clone()))
    }

    /// `key`'s value, whatever it is, as compact JSON text.
    pub fn get_json(&self, key: &str) -> Option<String> {
        self.0.get(key).map(Value::to_string)
    }

    /// Sets `key` to a string.
    pub fn insert_str(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), Value::String(value.into()));
    }

    /// Sets `key` to an integer.
    pub fn insert_u64(&mut self, key: impl Into<String>, value: u64) {
        self.0.insert(key.into(), Value::from(value));
    }

    /// The object as serde_json's map, for the workspace's own parsers
    /// (hidden: serde_json stays out of the public API).
    #[doc(hidden)]
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// Wraps serde_json's map (hidden, as [`JsonObject::as_map`]).
    #[doc(hidden)]
    pub fn from_map(map: Map<String, Value>) -> JsonObject {
        JsonObject(map)
    }
}

impl fmt::Display for JsonObject {
    /// Compact JSON text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Writing a map of strings to JSON values cannot fail.
        f.write_str(&serde_json::to_string(&self.0).unwrap_or_default())
    }
}

/// What kind of JSON value `v` is, in words.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
