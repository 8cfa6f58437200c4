//! The plan of a canonical file: tensor order, offsets and header bytes.

use super::{TensorSpec, WriteOptions};
use crate::error::WriteError;
use crate::{Dtype, Metadata, Result};

/// One tensor of a [`Layout`]: its declaration and where its bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot<'a> {
    name: &'a str,
    dtype: Dtype,
    shape: &'a [u64],
    begin: u64,
    end: u64,
    declared: usize,
}

impl<'a> Slot<'a> {
    /// The tensor's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its dtype.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Its shape.
    pub fn shape(&self) -> &'a [u64] {
        self.shape
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

    /// Its declaration, as an owned value.
    pub fn to_spec(&self) -> TensorSpec {
        TensorSpec::new(self.name, self.dtype, self.shape)
    }
}

/// A slot as stored: names and shapes live in two shared buffers, so a
/// layout of many tensors costs a handful of allocations, not two per tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    name_end: usize,
    dims_end: usize,
    dtype: Dtype,
    begin: u64,
    end: u64,
    declared: usize,
}

/// A declaration being planned, borrowed from the caller.
pub(crate) struct Decl<'a> {
    pub(crate) name: &'a str,
    pub(crate) dtype: Dtype,
    pub(crate) shape: &'a [u64],
    /// Byte length, checked against dtype x shape.
    pub(crate) len: u64,
}

/// A planned canonical file: the tensors in file order with their offsets,
/// and the header bytes (length field, JSON text and padding).
///
/// Planning refuses what would make an invalid file: duplicate names, the
/// reserved name `__metadata__`, a shape whose byte count overflows or does
/// not fill whole bytes, and a header over the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    entries: Vec<Entry>,
    names: String,
    dims: Vec<u64>,
    header: Vec<u8>,
    data_len: u64,
    file_len: u64,
}

impl Layout {
    /// Plans the file holding the declared tensors and `metadata` (omitted
    /// when `None` or empty). The declarations may come in any order.
    ///
    /// # Errors
    ///
    /// [`Error::Write`](crate::Error::Write) on a duplicate or reserved name, a shape whose byte
    /// count overflows or leaves a partial byte, or a header or data buffer
    /// over the limits in `options`.
    pub fn new(
        specs: &[TensorSpec],
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<Layout> {
        let mut decls = Vec::with_capacity(specs.len());
        for spec in specs {
            decls.push(Decl {
                name: &spec.name,
                dtype: spec.dtype,
                shape: &spec.shape,
                len: spec.byte_len()?,
            });
        }
        Layout::plan(decls, metadata, options)
    }

    /// Plans declarations whose byte lengths are already checked.
    pub(crate) fn plan(
        decls: Vec<Decl<'_>>,
        metadata: Option<&Metadata>,
        options: &WriteOptions,
    ) -> Result<Layout> {
        let order = canonical_order(&decls)?;
        let mut layout = Layout {
            entries: Vec::with_capacity(decls.len()),
            names: String::with_capacity(decls.iter().map(|d| d.name.len()).sum()),
            dims: Vec::with_capacity(decls.iter().map(|d| d.shape.len()).sum()),
            header: Vec::new(),
            data_len: 0,
            file_len: 0,
        };
        let mut offset = 0u64;
        for &declared in &order {
            let Some(decl) = decls.get(declared) else {
                continue;
            };
            let end = offset
                .checked_add(decl.len)
                .ok_or_else(|| WriteError::DataTooLarge {
                    tensor: decl.name.to_string(),
                })?;
            layout.names.push_str(decl.name);
            layout.dims.extend_from_slice(decl.shape);
            layout.entries.push(Entry {
                name_end: layout.names.len(),
                dims_end: layout.dims.len(),
                dtype: decl.dtype,
                begin: offset,
                end,
                declared,
            });
            offset = end;
        }
        layout.data_len = offset;
        layout.header = header_bytes(&layout, metadata, options)?;
        layout.file_len = (layout.header.len() as u64)
            .checked_add(offset)
            .ok_or_else(|| WriteError::DataTooLarge {
                tensor: layout
                    .slots()
                    .last()
                    .map(|s| s.name.to_string())
                    .unwrap_or_default(),
            })?;
        Ok(layout)
    }

    /// The tensors in file order (the order their bytes must be written in).
    pub fn slots(&self) -> Slots<'_> {
        Slots {
            layout: self,
            index: 0,
        }
    }

    /// The `index`-th tensor in file order.
    pub fn slot(&self, index: usize) -> Option<Slot<'_>> {
        let entry = self.entries.get(index)?;
        let (name_begin, dims_begin) = match index.checked_sub(1).and_then(|i| self.entries.get(i))
        {
            Some(prev) => (prev.name_end, prev.dims_end),
            None => (0, 0),
        };
        Some(Slot {
            name: self.names.get(name_begin..entry.name_end)?,
            dtype: entry.dtype,
            shape: self.dims.get(dims_begin..entry.dims_end)?,
            begin: entry.begin,
            end: entry.end,
            declared: entry.declared,
        })
    }

    /// Where the `index`-th tensor in file order begins in the data buffer.
    pub(crate) fn slot_begin(&self, index: usize) -> Option<u64> {
        self.entries.get(index).map(|e| e.begin)
    }

    /// The byte length of the `index`-th tensor in file order.
    pub(crate) fn slot_len(&self, index: usize) -> Option<u64> {
        self.entries.get(index).map(|e| e.end - e.begin)
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The first 8 + N bytes of the file: length field, header, padding.
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    /// N, the header length (padding included).
    pub fn header_len(&self) -> u64 {
        self.file_len - self.data_len - 8
    }

    /// Moves the header bytes out, for a writer that makes them the start
    /// of its output buffer. [`Layout::header`] is empty afterwards.
    pub(crate) fn take_header(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.header)
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

/// The tensors of a [`Layout`] in file order.
#[derive(Debug, Clone)]
pub struct Slots<'a> {
    layout: &'a Layout,
    index: usize,
}

impl<'a> Iterator for Slots<'a> {
    type Item = Slot<'a>;

    fn next(&mut self) -> Option<Slot<'a>> {
        let slot = self.layout.slot(self.index)?;
        self.index += 1;
        Some(slot)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.layout.len().saturating_sub(self.index);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Slots<'_> {}

/// The canonical file order (by dtype rank, then name bytes) as indices
/// into `decls`, refusing duplicate and reserved names.
///
/// One comparison sort by name puts duplicates side by side (whatever their
/// dtypes) and leaves each dtype's names in order; a stable counting pass
/// then groups them by dtype. This is cheaper than sorting by (dtype, name)
/// and checking names in a hash set.
fn canonical_order(decls: &[Decl<'_>]) -> Result<Vec<usize>, WriteError> {
    // Most comparisons are settled by the names' first 16 bytes, compared
    // as one big-endian integer (zero-padded: a shorter name sorts first,
    // as in a byte comparison); only ties compare the whole names.
    let prefix = |name: &str| {
        let mut key = [0u8; 16];
        let n = name.len().min(16);
        key[..n].copy_from_slice(&name.as_bytes()[..n]);
        u128::from_be_bytes(key)
    };
    let mut keyed: Vec<(u128, usize)> = decls
        .iter()
        .enumerate()
        .map(|(i, d)| (prefix(d.name), i))
        .collect();
    keyed.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| decls[a.1].name.as_bytes().cmp(decls[b.1].name.as_bytes()))
    });
    let by_name: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    for pair in by_name.windows(2) {
        if decls[pair[0]].name == decls[pair[1]].name {
            return Err(WriteError::DuplicateName {
                name: decls[pair[0]].name.to_string(),
            });
        }
    }
    if by_name
        .binary_search_by(|&i| decls[i].name.cmp("__metadata__"))
        .is_ok()
    {
        return Err(WriteError::ReservedName);
    }
    let mut starts = [0usize; Dtype::ALL.len() + 1];
    for d in decls {
        starts[d.dtype.canonical_rank() as usize + 1] += 1;
    }
    for r in 1..starts.len() {
        starts[r] += starts[r - 1];
    }
    let mut order = vec![0usize; decls.len()];
    for &i in &by_name {
        let slot = &mut starts[decls[i].dtype.canonical_rank() as usize];
        order[*slot] = i;
        *slot += 1;
    }
    Ok(order)
}

/// Appends `s` as a JSON string with serde_json's escaping (the reference's):
/// `"` `\` and control characters escaped, everything else raw UTF-8.
fn push_json_str(buf: &mut Vec<u8>, s: &str) -> Result<(), WriteError> {
    // A string with nothing to escape is written as it is; serde_json would
    // write the same bytes, and going through it costs a third of the time
    // of a header of many small tensors. Everything else goes through it.
    if crate::json::plain_len(s.as_bytes()) == s.len() {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
        return Ok(());
    }
    // Writing to a Vec cannot fail; the error path exists only for the type.
    serde_json::to_writer(&mut *buf, s).map_err(|e| WriteError::Output(e.into()))
}

fn push_u64(buf: &mut Vec<u8>, n: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// The length field, the compact JSON header in canonical order, and the padding.
fn header_bytes(
    layout: &Layout,
    metadata: Option<&Metadata>,
    options: &WriteOptions,
) -> Result<Vec<u8>, WriteError> {
    let metadata = metadata.filter(|m| !m.is_empty());
    // One reservation that fits the usual header (escapes aside): fixed text
    // plus the names, at most 20 digits per number.
    let estimate =
        16 + metadata.map_or(0, |m| {
            16 + m.iter().map(|(k, v)| k.len() + v.len() + 6).sum::<usize>()
        }) + layout.names.len()
            + 21 * layout.dims.len()
            + (64 + 42) * layout.entries.len();
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
    for slot in layout.slots() {
        if !first {
            buf.push(b',');
        }
        first = false;
        push_json_str(&mut buf, slot.name)?;
        buf.extend_from_slice(b":{\"dtype\":\"");
        buf.extend_from_slice(slot.dtype.name().as_bytes());
        buf.extend_from_slice(b"\",\"shape\":[");
        for (i, &dim) in slot.shape.iter().enumerate() {
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
