//! The plan of a canonical file: tensor order, offsets and header bytes.

use hashbrown::HashSet;

use super::{TensorSpec, WriteOptions};
use crate::error::WriteError;
use crate::{Dtype, Metadata, Result};

/// One tensor of a [`Layout`]: its declaration and where its bytes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    spec: TensorSpec,
    begin: u64,
    end: u64,
    declared: usize,
}

impl Slot {
    /// The declaration.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its dtype.
    pub fn dtype(&self) -> Dtype {
        self.spec.dtype
    }

    /// Its shape.
    pub fn shape(&self) -> &[u64] {
        &self.spec.shape
    }

    /// `[begin, end)` of its bytes, relative to the start of the data buffer.
    pub fn data_offsets(&self) -> (u64, u64) {
        (self.begin, self.end)
    }

    /// How many bytes it holds.
    pub fn byte_len(&self) -> u64 {
        self.end - self.begin
    }

    /// Its position in the list of declarations the layout was planned from.
    pub fn declared(&self) -> usize {
        self.declared
    }
}

/// A planned canonical file: the tensors in file order with their offsets,
/// and the header bytes (length field, JSON text and padding).
///
/// Planning refuses what would make an invalid file: duplicate names, the
/// reserved name `__metadata__`, a shape whose byte count overflows or does
/// not fill whole bytes, and a header over the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    slots: Vec<Slot>,
    header: Vec<u8>,
    data_len: u64,
    file_len: u64,
}

impl Layout {
    /// Plans the file holding the declared tensors and `metadata` (omitted
    /// when `None` or empty). The declarations may come in any order.
    pub fn new(
        specs: Vec<TensorSpec>,
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<Layout> {
        check_names(&specs)?;
        let mut slots = Vec::with_capacity(specs.len());
        for (declared, spec) in specs.into_iter().enumerate() {
            let len = spec.byte_len()?;
            // Offsets are set once the order is known; `end` holds the length till then.
            slots.push(Slot {
                spec,
                begin: 0,
                end: len,
                declared,
            });
        }
        // Names are unique, so the order is total and an unstable sort is deterministic.
        slots.sort_unstable_by(|a, b| {
            (a.spec.dtype.canonical_rank(), a.spec.name.as_bytes())
                .cmp(&(b.spec.dtype.canonical_rank(), b.spec.name.as_bytes()))
        });
        let mut offset = 0u64;
        for slot in &mut slots {
            let end = offset
                .checked_add(slot.end)
                .ok_or_else(|| WriteError::DataTooLarge {
                    tensor: slot.spec.name.clone(),
                })?;
            slot.begin = offset;
            slot.end = end;
            offset = end;
        }
        let header = header_bytes(&slots, metadata, options)?;
        let file_len =
            (header.len() as u64)
                .checked_add(offset)
                .ok_or_else(|| WriteError::DataTooLarge {
                    tensor: slots
                        .last()
                        .map(|s| s.spec.name.clone())
                        .unwrap_or_default(),
                })?;
        Ok(Layout {
            slots,
            header,
            data_len: offset,
            file_len,
        })
    }

    /// The tensors in file order (the order their bytes must be written in).
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The first 8 + N bytes of the file: length field, header, padding.
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    /// N, the header length (padding included).
    pub fn header_len(&self) -> u64 {
        self.header.len() as u64 - 8
    }

    /// The length of the data buffer.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// The length of the whole file: 8 + N + data.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }
}

fn check_names(specs: &[TensorSpec]) -> Result<(), WriteError> {
    let mut seen: HashSet<&str, foldhash::fast::RandomState> =
        HashSet::with_capacity_and_hasher(specs.len(), Default::default());
    for spec in specs {
        if spec.name == "__metadata__" {
            return Err(WriteError::ReservedName);
        }
        if !seen.insert(&spec.name) {
            return Err(WriteError::DuplicateName {
                name: spec.name.clone(),
            });
        }
    }
    Ok(())
}

/// Appends `s` as a JSON string with serde_json's escaping (the reference's):
/// `"` `\` and control characters escaped, everything else raw UTF-8.
fn push_json_str(buf: &mut Vec<u8>, s: &str) -> Result<(), WriteError> {
    // Writing to a Vec cannot fail; the error path exists only for the type.
    serde_json::to_writer(&mut *buf, s).map_err(|e| WriteError::Output(e.into()))
}

fn push_u64(buf: &mut Vec<u8>, n: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// The length field, the compact JSON header in canonical order, and the padding.
fn header_bytes(
    slots: &[Slot],
    metadata: Option<&Metadata>,
    options: &WriteOptions,
) -> Result<Vec<u8>, WriteError> {
    let metadata = metadata.filter(|m| !m.is_empty());
    // One reservation that fits the usual header (escapes aside): fixed text
    // plus the names, at most 20 digits per number.
    let estimate =
        16 + metadata.map_or(0, |m| {
            16 + m.iter().map(|(k, v)| k.len() + v.len() + 6).sum::<usize>()
        }) + slots
            .iter()
            .map(|s| s.spec.name.len() + 64 + 21 * (s.spec.shape.len() + 2))
            .sum::<usize>();
    let mut buf = Vec::with_capacity(estimate + options.align.bytes() as usize);
    buf.extend_from_slice(&[0; 8]);
    buf.push(b'{');
    let mut first = true;
    if let Some(metadata) = metadata {
        buf.extend_from_slice(b"\"__metadata__\":{");
        // A BTreeMap iterates in ascending byte order of the keys.
        for (i, (key, value)) in metadata.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            push_json_str(&mut buf, key)?;
            buf.push(b':');
            push_json_str(&mut buf, value)?;
        }
        buf.push(b'}');
        first = false;
    }
    for slot in slots {
        if !first {
            buf.push(b',');
        }
        first = false;
        push_json_str(&mut buf, &slot.spec.name)?;
        buf.extend_from_slice(b":{\"dtype\":\"");
        buf.extend_from_slice(slot.spec.dtype.name().as_bytes());
        buf.extend_from_slice(b"\",\"shape\":[");
        for (i, &dim) in slot.spec.shape.iter().enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            push_u64(&mut buf, dim);
        }
        buf.extend_from_slice(b"],\"data_offsets\":[");
        push_u64(&mut buf, slot.begin);
        buf.push(b',');
        push_u64(&mut buf, slot.end);
        buf.extend_from_slice(b"]}");
    }
    buf.push(b'}');

    // Pad so that 8 + N is a multiple of the alignment (8 + N ≡ N mod 8).
    let align = options.align.bytes();
    let unpadded = buf.len() as u64;
    let padded = unpadded.div_ceil(align) * align;
    let header_len = padded - 8;
    if header_len > options.max_header_len {
        return Err(WriteError::HeaderTooLarge {
            header_len,
            limit: options.max_header_len,
        });
    }
    buf.resize(padded as usize, b' ');
    buf[..8].copy_from_slice(&header_len.to_le_bytes());
    Ok(buf)
}
