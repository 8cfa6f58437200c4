//! The legacy checkpoint layout (`torch.save` before 1.6, or with
//! `_use_new_zipfile_serialization=False`): five pickles back to back, then
//! the raw storages.
//!
//! 1. the magic number `0x1950a86a20f9469cfc6c`,
//! 2. the protocol version (1001),
//! 3. system info (`little_endian`, type sizes),
//! 4. the object itself, whose persistent ids name storages by key,
//! 5. the list of storage keys, in the order their data follows;
//!
//! then for each key: the element count (8 bytes, in the writer's byte
//! order) and the elements.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use tensorfile_core::source::ByteSource;

use crate::error::{Error, Result};
use crate::pickle::{Limits, Object, Pickle, PickleErrorKind, Value};
use crate::store::io_error;

/// The first read of each pickle; it grows four times at each retry.
const FIRST_READ: u64 = 64 << 10;

/// The magic number, as the little-endian bytes of pickle's LONG1.
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const PROTOCOL_VERSION: i64 = 1001;

/// The parsed pickles of a legacy file.
pub(crate) struct Legacy {
    /// The saved object.
    pub object: Pickle,
    /// Storage keys, in the order their data follows.
    pub keys: Vec<String>,
    /// Where the storage data begins.
    pub data_start: u64,
    /// Whether the writer was little-endian.
    pub little_endian: bool,
}

fn legacy(msg: impl Into<String>) -> Error {
    Error::Legacy(msg.into())
}

impl Legacy {
    /// Parses the five pickles, reading each into a buffer that grows
    /// (64 KiB, then four times larger) until the pickle ends in it, up to
    /// `limits.max_input` bytes.
    pub fn parse(source: &dyn ByteSource, origin: &Path, limits: &Limits) -> Result<Legacy> {
        let len = source.len();
        let mut pos = 0u64;
        let mut next = |what: &str| -> Result<Pickle> {
            let at = pos;
            let record = || format!("legacy checkpoint, {what} pickle (at byte {at})");
            let left = len - pos;
            let most = left.min(limits.max_input as u64);
            let mut window = most.min(FIRST_READ);
            loop {
                let n = usize::try_from(window).unwrap_or(usize::MAX);
                let mut buf = Vec::new();
                buf.try_reserve_exact(n).map_err(|_| Error::Pickle {
                    record: record(),
                    source: crate::pickle::PickleError {
                        offset: 0,
                        kind: PickleErrorKind::OutOfMemory(window),
                    },
                })?;
                buf.resize(n, 0);
                source
                    .read_exact_at(pos, &mut buf)
                    .map_err(|e| io_error(origin, e))?;
                match Pickle::parse(&buf, limits) {
                    Ok((p, used)) => {
                        pos += used as u64;
                        return Ok(p);
                    }
                    // The pickle goes on past the window: read more.
                    Err(e)
                        if window < most
                            && matches!(
                                e.kind,
                                PickleErrorKind::Truncated { .. } | PickleErrorKind::NoStop
                            ) =>
                    {
                        window = window.saturating_mul(4).min(most);
                    }
                    Err(source) => {
                        return Err(Error::Pickle {
                            record: record(),
                            source,
                        })
                    }
                }
            }
        };
        let magic = next("magic number")?;
        if !matches!(magic.deref(magic.root()), Some(Object::BigInt(b)) if b[..] == MAGIC) {
            return Err(legacy("wrong magic number: not a torch.save file"));
        }
        let version = next("protocol version")?;
        if version.root() != Value::Int(PROTOCOL_VERSION) {
            return Err(legacy(format!(
                "protocol version is {}, expected {PROTOCOL_VERSION}",
                version.kind(version.root())
            )));
        }
        let sys_info = next("system info")?;
        let little_endian = match sys_info.deref(sys_info.root()) {
            Some(Object::Dict(items)) => items
                .iter()
                .find(|(k, _)| sys_info.as_str(*k) == Some("little_endian"))
                .map_or(Ok(true), |(_, v)| match v {
                    Value::Bool(b) => Ok(*b),
                    _ => Err(legacy("system info's little_endian is not a bool")),
                })?,
            _ => return Err(legacy("system info is not a dict")),
        };
        let object = next("object")?;
        let keys_pickle = next("storage key list")?;
        let keys = keys_pickle
            .as_seq(keys_pickle.root())
            .ok_or_else(|| legacy("the storage key list is not a list"))?
            .iter()
            .map(|k| {
                keys_pickle.as_str(*k).map(str::to_string).ok_or_else(|| {
                    legacy(format!(
                        "storage key is {}, not a str",
                        keys_pickle.kind(*k)
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Legacy {
            object,
            keys,
            data_start: pos,
            little_endian,
        })
    }

    /// Locates each storage's bytes, reading each one's element count
    /// (8 bytes, in the writer's byte order) from the source. `element_size`
    /// gives the element size of a key, from its persistent id.
    pub fn locate(
        &self,
        source: &dyn ByteSource,
        origin: &Path,
        element_size: impl Fn(&str) -> Option<u64>,
    ) -> Result<HashMap<String, Range<u64>>> {
        let len = source.len();
        let mut pos = self.data_start;
        let mut out = HashMap::with_capacity(self.keys.len());
        for key in &self.keys {
            let elem = element_size(key).ok_or_else(|| {
                legacy(format!(
                    "storage {key:?} is in the storage key list but no persistent id names it, so its element size (and where the next storage starts) is unknown"
                ))
            })?;
            if pos.checked_add(8).is_none_or(|e| e > len) {
                return Err(legacy(format!(
                    "storage data truncated: the element count of storage {key:?} at byte {pos} is past the end of the {len}-byte file"
                )));
            }
            let mut c = [0u8; 8];
            source
                .read_exact_at(pos, &mut c)
                .map_err(|e| io_error(origin, e))?;
            let count = if self.little_endian {
                u64::from_le_bytes(c)
            } else {
                u64::from_be_bytes(c)
            };
            let start = pos + 8;
            let end = count
                .checked_mul(elem)
                .and_then(|n| start.checked_add(n))
                .filter(|&e| e <= len)
                .ok_or_else(|| {
                    legacy(format!(
                        "storage data truncated: storage {key:?} has {count} elements of {elem} B from byte {start}, past the end of the {len}-byte file"
                    ))
                })?;
            if out.insert(key.clone(), start..end).is_some() {
                return Err(legacy(format!("storage key {key:?} is listed twice")));
            }
            pos = end;
        }
        if pos != len {
            return Err(legacy(format!(
                "{} trailing bytes after the last storage (at byte {pos})",
                len - pos
            )));
        }
        Ok(out)
    }
}
