//! The GGUF container, read strictly through any [`ByteSource`].
//!
//! Layout (ggml `docs/gguf.md`): the magic `GGUF`, a u32 version (2 or 3;
//! v3 only added big-endian files), u64 tensor and key-value counts, the
//! key-value table (each key a u64-length UTF-8 string, a u32 value type,
//! the value), the tensor infos (name, u32 dimension count, u64 dimensions
//! fastest first, u32 ggml type, u64 offset into the data section), then
//! the data section, which starts at the end of the infos rounded up to
//! `general.alignment` (default 32). Every tensor's offset is a multiple of
//! the alignment.
//!
//! Everything is checked as it is read, before anything is allocated for
//! it: each length and count against the bytes left in the file and
//! against [`ReadLimits`] (the metadata's memory is counted as it grows),
//! nesting depth, UTF-8, bools, value and tensor types, dimensions and
//! their products, alignment, and every tensor's bytes against the file and
//! the other tensors. An error names the field and the byte where it
//! starts. Nothing in a file can make the reader panic, loop or allocate
//! more than the limits allow.
//!
//! Big-endian files (as gguf-py writes them) are read too: the header,
//! metadata and plain tensor data (F32, F16, F64, integers) are
//! big-endian; quantized blocks and BF16 data are stored as given, little
//! endian, which is what gguf-py writes and reads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::error::GgufError;
use super::types::GgmlType;
use super::value::{Array, Value, ValueType};
use crate::source::ByteSource;
use crate::{Dtype, Error, FileSource, Result, TensorData};

/// The alignment of the data section and of every tensor when the file has
/// no `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The longest tensor name GGUF allows, in bytes.
pub const MAX_NAME_LEN: u64 = 64;

/// The most dimensions a tensor has in GGUF (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// Limits on what a file may make the reader hold. The defaults take every
/// real model (vocabularies of a few hundred thousand tokens, chat
/// templates of a few hundred KiB, tens of thousands of tensors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLimits {
    /// Most key-value pairs.
    pub max_kv: u64,
    /// Most tensors.
    pub max_tensors: u64,
    /// Most elements in one array.
    pub max_array_len: u64,
    /// Longest string (key, value or tensor name), in bytes.
    pub max_string_len: u64,
    /// Deepest nesting of arrays in arrays (1: arrays of arrays of scalars).
    pub max_depth: u32,
    /// Most memory the metadata and tensor infos may take, counted as they
    /// are read (strings and array elements at their in-memory size).
    pub max_memory: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_kv: 1 << 16,
            max_tensors: 1 << 20,
            max_array_len: 1 << 24,
            max_string_len: 1 << 24,
            max_depth: 8,
            max_memory: 1 << 30,
        }
    }
}

/// Byte order of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian: every file llama.cpp writes and reads.
    Little,
    /// Big-endian (gguf-py writes and reads these; llama.cpp on a
    /// little-endian host refuses them).
    Big,
}

/// One key-value pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Kv {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
    /// Where the pair starts in the file.
    pub offset: u64,
}

/// One tensor info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The name.
    pub name: String,
    /// Dimensions as stored, fastest first (numpy's `(4, 64)` is `[64, 4]`).
    pub dims: Vec<u64>,
    /// The ggml type.
    pub ggml_type: GgmlType,
    /// Offset of its data from the start of the data section.
    pub offset: u64,
    /// Absolute offset of its data in the file.
    pub start: u64,
    /// Bytes of its data.
    pub byte_len: u64,
    /// Where its info starts in the file.
    pub info_offset: u64,
}

impl TensorInfo {
    /// The logical shape, outermost first (the dimensions reversed): what
    /// numpy, PyTorch and safetensors call the shape.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// The element count.
    pub fn numel(&self) -> u64 {
        // Checked when read: the product fits.
        self.dims.iter().product()
    }

    /// Elements per row (the first dimension; 1 for a scalar).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// The end of its data in the file.
    pub fn end(&self) -> u64 {
        self.start + self.byte_len
    }
}

/// The parsed header: version, metadata, tensor infos and layout.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    version: u32,
    endian: Endian,
    alignment: u64,
    kv: Vec<Kv>,
    keys: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    names: HashMap<String, usize>,
    info_end: u64,
    data_offset: u64,
    file_len: u64,
    warnings: Vec<String>,
}

impl GgufHeader {
    /// The version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The byte order.
    pub fn endian(&self) -> Endian {
        self.endian
    }

    /// The alignment of the data section and tensors.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The key-value pairs, in file order.
    pub fn kv(&self) -> &[Kv] {
        &self.kv
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.keys.get(key).map(|&i| &self.kv[i].value)
    }

    /// `general.architecture`, when it is a string.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(Value::as_str)
    }

    /// The tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of the tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.names.get(name).map(|&i| &self.tensors[i])
    }

    /// Where the tensor infos end.
    pub fn info_end(&self) -> u64 {
        self.info_end
    }

    /// Where the data section starts (the infos' end rounded up to the
    /// alignment; llama.cpp's value, the infos' end, when there are no
    /// tensors).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The file's length.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Things that are valid GGUF but that llama.cpp refuses or that look
    /// wrong (arrays of arrays, big-endian data, tensors not laid out in
    /// order, bytes after the data).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// The bytes read ahead of the parser: metadata is parsed from a buffer
/// refilled with one positional read at a time.
const READ_AHEAD: usize = 64 << 10;

/// Reads fields from a source at increasing offsets, checking each against
/// the file's end.
struct Cursor<'s, S: ?Sized> {
    source: &'s S,
    len: u64,
    pos: u64,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_start: u64,
    big: bool,
}

/// What is being read, made only when an error needs it.
type Field<'a> = &'a dyn Fn() -> String;

impl<'s, S: ByteSource + ?Sized> Cursor<'s, S> {
    fn left(&self) -> u64 {
        self.len - self.pos
    }

    /// The next `n` bytes.
    fn take(&mut self, n: usize, field: Field<'_>) -> Result<&[u8]> {
        if (n as u64) > self.left() {
            return Err(GgufError::Truncated {
                field: field(),
                offset: self.pos,
                len: self.len,
            }
            .into());
        }
        let have = self.buf_start + self.buf.len() as u64;
        if self.pos < self.buf_start || self.pos + n as u64 > have {
            // Refill from `pos`: at least `n`, read ahead up to the file's end.
            let want = (n.max(READ_AHEAD) as u64).min(self.left()) as usize;
            self.buf.clear();
            self.buf.resize(want, 0);
            self.source.read_exact_at(self.pos, &mut self.buf)?;
            self.buf_start = self.pos;
        }
        let at = (self.pos - self.buf_start) as usize;
        self.pos += n as u64;
        Ok(&self.buf[at..at + n])
    }

    fn array<const N: usize>(&mut self, field: Field<'_>) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, field)?);
        if self.big {
            out.reverse();
        }
        Ok(out)
    }

    fn u32(&mut self, field: Field<'_>) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: Field<'_>) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
}

/// Counts memory as the metadata grows.
struct Budget {
    used: u64,
    limit: u64,
}

impl Budget {
    fn add(&mut self, bytes: u64, field: Field<'_>, offset: u64) -> Result<()> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            return Err(GgufError::Memory {
                field: field(),
                offset,
                limit: self.limit,
            }
            .into());
        }
        Ok(())
    }
}

/// Overhead counted for each string and array besides its elements.
const OVERHEAD: u64 = 24;

struct Parser<'s, S: ?Sized> {
    cur: Cursor<'s, S>,
    limits: &'s ReadLimits,
    budget: Budget,
    nested_arrays: bool,
}

impl<S: ByteSource + ?Sized> Parser<'_, S> {
    /// A count or length at `offset` that must not exceed `limit` nor need
    /// more than the bytes left (`min_each` per unit).
    fn check_count(
        &self,
        value: u64,
        limit: u64,
        min_each: u64,
        offset: u64,
        field: Field<'_>,
    ) -> Result<()> {
        if value > limit {
            return Err(GgufError::Limit {
                field: field(),
                offset,
                value,
                limit,
            }
            .into());
        }
        let needed = value.saturating_mul(min_each);
        if needed > self.cur.left() {
            return Err(GgufError::Count {
                field: field(),
                offset,
                value,
                needed,
                available: self.cur.left(),
            }
            .into());
        }
        Ok(())
    }

    fn string(&mut self, max: u64, field: Field<'_>) -> Result<String> {
        let offset = self.cur.pos;
        let len = self.cur.u64(&|| format!("{}'s length", field()))?;
        self.check_count(len, max, 1, offset, &|| format!("{}'s length", field()))?;
        self.budget.add(len + OVERHEAD, field, offset)?;
        let bytes = self.cur.take(len as usize, field)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::Utf8 {
                field: field(),
                offset,
            }
            .into()),
        }
    }

    fn value_type(&mut self, field: Field<'_>) -> Result<ValueType> {
        let offset = self.cur.pos;
        let id = self.cur.u32(field)?;
        ValueType::from_id(id).ok_or_else(|| {
            GgufError::ValueType {
                field: field(),
                offset,
                type_id: id,
            }
            .into()
        })
    }

    fn bool(&mut self, field: Field<'_>) -> Result<bool> {
        let offset = self.cur.pos;
        match self.cur.take(1, field)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(GgufError::Bool {
                field: field(),
                offset,
                byte,
            }
            .into()),
        }
    }

    fn scalar(&mut self, t: ValueType, field: Field<'_>) -> Result<Value> {
        Ok(match t {
            ValueType::U8 => Value::U8(self.cur.take(1, field)?[0]),
            ValueType::I8 => Value::I8(self.cur.take(1, field)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.cur.array(field)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.cur.array(field)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.cur.array(field)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.cur.array(field)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.cur.array(field)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.cur.array(field)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.cur.array(field)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.cur.array(field)?)),
            ValueType::Bool => Value::Bool(self.bool(field)?),
            ValueType::String => Value::String(self.string(self.limits.max_string_len, field)?),
            ValueType::Array => Value::Array(self.array(0, field)?),
        })
    }

    /// An array (type, count, elements) at nesting `depth` (0 for a
    /// key's value).
    fn array(&mut self, depth: u32, field: Field<'_>) -> Result<Array> {
        let offset = self.cur.pos;
        let elem = self.value_type(&|| format!("{}'s element type", field()))?;
        let count_field = || format!("{}'s element count", field());
        let count = self.cur.u64(&count_field)?;
        self.check_count(
            count,
            self.limits.max_array_len,
            elem.min_size(),
            offset + 4,
            &count_field,
        )?;
        let mem_each = match elem {
            ValueType::String => OVERHEAD,
            ValueType::Array => OVERHEAD + 8,
            ValueType::Bool => 1,
            t => t.min_size(),
        };
        self.budget
            .add(OVERHEAD + count * mem_each, field, offset)?;
        let n = count as usize;
        macro_rules! numbers {
            ($variant:ident, $t:ty) => {{
                let mut v: Vec<$t> = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(<$t>::from_le_bytes(self.cur.array(field)?));
                }
                Array::$variant(v)
            }};
        }
        Ok(match elem {
            ValueType::U8 => Array::U8(self.cur.take(n, field)?.to_vec()),
            ValueType::I8 => Array::I8(self.cur.take(n, field)?.iter().map(|&b| b as i8).collect()),
            ValueType::U16 => numbers!(U16, u16),
            ValueType::I16 => numbers!(I16, i16),
            ValueType::U32 => numbers!(U32, u32),
            ValueType::I32 => numbers!(I32, i32),
            ValueType::F32 => numbers!(F32, f32),
            ValueType::U64 => numbers!(U64, u64),
            ValueType::I64 => numbers!(I64, i64),
            ValueType::F64 => numbers!(F64, f64),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(self.bool(&|| format!("{} element {i}", field()))?);
                }
                Array::Bool(v)
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    let s = self.string(self.limits.max_string_len, &|| {
                        format!("{} element {i}", field())
                    })?;
                    v.push(s);
                }
                Array::String(v)
            }
            ValueType::Array => {
                self.nested_arrays = true;
                if depth + 1 > self.limits.max_depth {
                    return Err(GgufError::Nesting {
                        field: field(),
                        offset,
                        limit: self.limits.max_depth,
                    }
                    .into());
                }
                let mut v = Vec::with_capacity(n);
                for i in 0..n {
                    v.push(self.array(depth + 1, &|| format!("{} element {i}", field()))?);
                }
                Array::Array(v)
            }
        })
    }
}

/// Parses the header of a GGUF file held by `source`.
///
/// # Errors
/// [`GgufError`] for anything that breaks the format or the limits (inside
/// [`Error::Gguf`]); the source's I/O errors.
pub fn read_header(source: &(impl ByteSource + ?Sized), limits: &ReadLimits) -> Result<GgufHeader> {
    let len = source.len();
    let mut p = Parser {
        cur: Cursor {
            source,
            len,
            pos: 0,
            buf: Vec::new(),
            buf_start: 0,
            big: false,
        },
        limits,
        budget: Budget {
            used: 0,
            limit: limits.max_memory,
        },
        nested_arrays: false,
    };
    let magic = p.cur.take(4, &|| "magic".into())?;
    if magic != b"GGUF" {
        return Err(GgufError::Magic {
            found: magic.to_vec(),
        }
        .into());
    }
    let raw = p.cur.u32(&|| "version".into())?;
    let endian = match raw {
        2 | 3 => Endian::Little,
        v if matches!(v.swap_bytes(), 2 | 3) => Endian::Big,
        version => return Err(GgufError::Version { version }.into()),
    };
    let version = if endian == Endian::Big {
        raw.swap_bytes()
    } else {
        raw
    };
    p.cur.big = endian == Endian::Big;

    // The least a tensor info takes: name length, n_dims, type, offset.
    const MIN_INFO: u64 = 8 + 4 + 4 + 8;
    let n_tensors = p.cur.u64(&|| "tensor count".into())?;
    p.check_count(n_tensors, limits.max_tensors, MIN_INFO, 8, &|| {
        "tensor count".into()
    })?;
    let n_kv = p.cur.u64(&|| "key-value count".into())?;
    // The least a pair takes: key length, value type, a one-byte value.
    p.check_count(n_kv, limits.max_kv, 8 + 4 + 1, 16, &|| {
        "key-value count".into()
    })?;

    let mut kv: Vec<Kv> = Vec::with_capacity(n_kv as usize);
    let mut keys: HashMap<String, usize> = HashMap::with_capacity(n_kv as usize);
    let mut alignment = DEFAULT_ALIGNMENT;
    for i in 0..n_kv {
        let offset = p.cur.pos;
        let key = p.string(limits.max_string_len, &|| format!("key {i}"))?;
        if key.is_empty() {
            return Err(GgufError::EmptyKey { index: i, offset }.into());
        }
        if keys.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key, offset }.into());
        }
        let field = || format!("value of key {key:?}");
        let t = p.value_type(&|| format!("type of key {key:?}"))?;
        let value_offset = p.cur.pos;
        let value = p.scalar(t, &field)?;
        if key == "general.alignment" {
            alignment = match value {
                Value::U32(a) if a.is_power_of_two() => u64::from(a),
                Value::U32(a) => {
                    return Err(GgufError::Alignment {
                        offset: value_offset,
                        problem: format!("{a} is not a power of two"),
                    }
                    .into())
                }
                ref other => {
                    return Err(GgufError::Alignment {
                        offset: value_offset,
                        problem: format!("must be UINT32, not {}", other.value_type()),
                    }
                    .into())
                }
            };
        }
        keys.insert(key.clone(), kv.len());
        kv.push(Kv { key, value, offset });
    }

    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors as usize);
    let mut names: HashMap<String, usize> = HashMap::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let info_offset = p.cur.pos;
        let name_len = p.cur.u64(&|| format!("tensor {i}'s name length"))?;
        p.cur.pos = info_offset; // re-read through `string`, which checks it again
        if name_len > MAX_NAME_LEN {
            return Err(GgufError::NameTooLong {
                offset: info_offset,
                len: name_len,
            }
            .into());
        }
        let name = p.string(MAX_NAME_LEN, &|| format!("tensor {i}'s name"))?;
        if names.contains_key(&name) {
            return Err(GgufError::DuplicateTensor {
                tensor: name,
                offset: info_offset,
            }
            .into());
        }
        let shape_error = |problem: String| -> Error {
            GgufError::Shape {
                tensor: name.clone(),
                offset: info_offset,
                problem,
            }
            .into()
        };
        let n_dims = p
            .cur
            .u32(&|| format!("tensor {name:?}'s dimension count"))?;
        if n_dims > MAX_DIMS {
            return Err(shape_error(format!(
                "{n_dims} dimensions (at most {MAX_DIMS})"
            )));
        }
        p.budget.add(
            OVERHEAD + 8 * u64::from(n_dims) + 64,
            &|| format!("tensor {name:?}"),
            info_offset,
        )?;
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(p.cur.u64(&|| format!("tensor {name:?}'s dimension {d}"))?);
        }
        if let Some(d) = dims.iter().position(|&d| d > i64::MAX as u64) {
            return Err(shape_error(format!(
                "dimension {d} is {} (more than 2^63 - 1)",
                dims[d]
            )));
        }
        let numel = dims.iter().try_fold(1u64, |n, &d| {
            n.checked_mul(d).filter(|&n| n <= i64::MAX as u64)
        });
        let Some(numel) = numel else {
            return Err(shape_error(format!(
                "dims {dims:?} hold more than 2^63 - 1 elements"
            )));
        };
        let type_offset = p.cur.pos;
        let type_id = p.cur.u32(&|| format!("tensor {name:?}'s type"))?;
        let Some(ggml_type) = GgmlType::from_id(type_id) else {
            return Err(GgufError::UnknownType {
                tensor: name,
                offset: type_offset,
                type_id,
                removed: GgmlType::removed_name(type_id),
            }
            .into());
        };
        let row = dims.first().copied().unwrap_or(1);
        if row % ggml_type.block_size() != 0 {
            return Err(shape_error(format!(
                "rows of {row} elements are not whole {ggml_type} blocks of {}",
                ggml_type.block_size()
            )));
        }
        let Some(byte_len) = ggml_type.bytes_for(numel) else {
            return Err(shape_error(format!(
                "dims {dims:?} of {ggml_type} need more than 2^64 bytes"
            )));
        };
        let offset = p.cur.u64(&|| format!("tensor {name:?}'s data offset"))?;
        names.insert(name.clone(), tensors.len());
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            start: 0,
            byte_len,
            info_offset,
        });
    }
    let info_end = p.cur.pos;
    let data_offset = if tensors.is_empty() {
        info_end
    } else {
        align_up(info_end, alignment).ok_or(GgufError::Alignment {
            offset: info_end,
            problem: "the data section would start past 2^64".into(),
        })?
    };

    let mut warnings = Vec::new();
    if p.nested_arrays {
        warnings.push(
            "arrays of arrays: valid GGUF, but llama.cpp refuses any array whose elements are arrays"
                .to_string(),
        );
    }
    if endian == Endian::Big {
        warnings
            .push("big-endian: llama.cpp on a little-endian machine refuses the file".to_string());
    }
    if !alignment.is_multiple_of(8) {
        warnings.push(format!(
            "general.alignment {alignment} is not a multiple of 8, as the GGUF spec asks"
        ));
    }
    check_data(&mut tensors, data_offset, alignment, len, &mut warnings)?;

    Ok(GgufHeader {
        version,
        endian,
        alignment,
        kv,
        keys,
        tensors,
        names,
        info_end,
        data_offset,
        file_len: len,
        warnings,
    })
}

/// `x` rounded up to a multiple of `align` (a power of two).
pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Places every tensor in the file and checks alignment, bounds and
/// overlaps; notes where llama.cpp would refuse the layout.
fn check_data(
    tensors: &mut [TensorInfo],
    data_offset: u64,
    alignment: u64,
    len: u64,
    warnings: &mut Vec<String>,
) -> Result<()> {
    for t in tensors.iter_mut() {
        if t.offset % alignment != 0 {
            return Err(GgufError::Misaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            }
            .into());
        }
        let start = data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.byte_len));
        match (start, end) {
            (Some(start), Some(end)) if end <= len => t.start = start,
            _ => {
                return Err(GgufError::OutOfRange {
                    tensor: t.name.clone(),
                    start: start.unwrap_or(u64::MAX),
                    end: end.unwrap_or(u64::MAX),
                    len,
                }
                .into())
            }
        }
    }
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| (tensors[i].start, tensors[i].byte_len));
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        if a.end() > b.start && a.byte_len > 0 && b.byte_len > 0 {
            return Err(GgufError::Overlap {
                tensor: a.name.clone(),
                other: b.name.clone(),
            }
            .into());
        }
    }
    // llama.cpp wants tensor i at the sum of the padded sizes before it.
    let mut expected = 0u64;
    for t in tensors.iter() {
        if t.offset != expected {
            warnings.push(format!(
                "tensor {:?} is at data offset {}, not {expected}: llama.cpp wants the tensors in file order, each padded to the alignment",
                t.name, t.offset
            ));
            break;
        }
        expected = align_up(t.byte_len, alignment)
            .and_then(|n| expected.checked_add(n))
            .unwrap_or(u64::MAX);
    }
    let data_end = tensors
        .iter()
        .map(TensorInfo::end)
        .max()
        .unwrap_or(data_offset);
    let padded_end = align_up(data_end, alignment).unwrap_or(u64::MAX);
    if len > padded_end.max(data_offset) {
        warnings.push(format!(
            "{} bytes after the data section (it ends at byte {padded_end})",
            len - padded_end.max(data_offset)
        ));
    }
    Ok(())
}

/// A GGUF file: its header and the source holding its bytes.
///
/// ```
/// use tensorfile::gguf::{GgufFile, ReadLimits};
/// // A GGUF v3 file of one F32 tensor of 3 rows of 64, no metadata.
/// let mut bytes = b"GGUF".to_vec();
/// bytes.extend(3u32.to_le_bytes()); // version
/// bytes.extend(1u64.to_le_bytes()); // tensors
/// bytes.extend(0u64.to_le_bytes()); // metadata keys
/// bytes.extend(6u64.to_le_bytes()); // the name's length, then the name
/// bytes.extend(b"f32_2d");
/// bytes.extend(2u32.to_le_bytes()); // dimensions
/// bytes.extend(64u64.to_le_bytes());
/// bytes.extend(3u64.to_le_bytes());
/// bytes.extend(0u32.to_le_bytes()); // type: F32
/// bytes.extend(0u64.to_le_bytes()); // offset in the data section
/// bytes.resize(bytes.len().next_multiple_of(32), 0); // the default alignment
/// bytes.resize(bytes.len() + 64 * 3 * 4, 0);
/// let file = GgufFile::from_source(bytes, &ReadLimits::default())?;
/// let t = file.header().tensor("f32_2d").unwrap();
/// assert_eq!(t.dims, [64, 3]); // GGUF order: fastest first
/// assert_eq!(t.shape(), [3, 64]); // numpy order
/// # Ok::<(), tensorfile::Error>(())
/// ```
#[derive(Debug)]
pub struct GgufFile<S = FileSource> {
    source: S,
    header: GgufHeader,
    path: Option<PathBuf>,
}

impl GgufFile<FileSource> {
    /// Opens and checks the file at `path`, reading it with positional
    /// reads (never mapped).
    ///
    /// # Errors
    /// [`GgufError`] for anything that breaks the format or the limits
    /// (inside [`Error::Gguf`]), naming the file; the file's I/O errors.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile<FileSource>> {
        GgufFile::open_with(path, &ReadLimits::default())
    }

    /// [`GgufFile::open`] with limits.
    ///
    /// # Errors
    /// [`GgufError`] for anything that breaks the format or the limits
    /// (inside [`Error::Gguf`]), naming the file; the file's I/O errors.
    pub fn open_with(path: impl AsRef<Path>, limits: &ReadLimits) -> Result<GgufFile<FileSource>> {
        let path = path.as_ref();
        let source = FileSource::open(path).map_err(|e| Error::io(path, e))?;
        let file = GgufFile::from_source(source, limits).map_err(|e| e.at(path))?;
        Ok(file.named(path))
    }
}

impl<S: ByteSource> GgufFile<S> {
    /// Reads and checks the header held by `source`.
    ///
    /// # Errors
    /// [`GgufError`] for anything that breaks the format or the limits
    /// (inside [`Error::Gguf`]); the source's I/O errors.
    pub fn from_source(source: S, limits: &ReadLimits) -> Result<GgufFile<S>> {
        let header = read_header(&source, limits)?;
        Ok(GgufFile {
            source,
            header,
            path: None,
        })
    }

    /// Names the file (for errors).
    pub fn named(mut self, path: impl Into<PathBuf>) -> GgufFile<S> {
        self.path = Some(path.into());
        self
    }

    /// The path, if the file has one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    fn name_error(&self, e: Error) -> Error {
        match &self.path {
            Some(p) => e.at(p),
            None => e,
        }
    }

    /// Reads raw bytes of a tensor (as stored: blocks, or elements in the
    /// file's byte order) at `offset` into it.
    ///
    /// # Errors
    /// The range is outside the tensor, or the read fails.
    pub fn read_raw(&self, info: &TensorInfo, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if !matches!(end, Some(e) if e <= info.byte_len) {
            return Err(self.name_error(Error::Core(tensorfile_core::Error::Slice {
                tensor: info.name.clone(),
                problem: format!(
                    "{} bytes at offset {offset} reach past its {} bytes",
                    buf.len(),
                    info.byte_len
                ),
            })));
        }
        self.source
            .read_exact_at(info.start + offset, buf)
            .map_err(|e| self.name_error(e.into()))
    }

    /// Every tensor as [`TensorData`] under its GGUF name and logical
    /// shape: plain types as they are (little-endian), quantized types
    /// decoded to F32 on demand.
    ///
    /// # Errors
    /// A tensor of a type that is not decoded ([`GgufError::Unsupported`]).
    pub fn tensor_data(&self) -> Result<Vec<GgufTensor<'_, S>>> {
        self.header
            .tensors
            .iter()
            .map(|info| GgufTensor::new(self, info).map_err(|e| self.name_error(e)))
            .collect()
    }

    /// The tensor named `name` as [`TensorData`] (see
    /// [`GgufFile::tensor_data`]).
    ///
    /// # Errors
    /// No such tensor, or a type that is not decoded.
    pub fn tensor(&self, name: &str) -> Result<GgufTensor<'_, S>> {
        let info = self
            .header
            .tensor(name)
            .ok_or_else(|| self.name_error(Error::not_found(name)))?;
        GgufTensor::new(self, info).map_err(|e| self.name_error(e))
    }
}

/// One tensor of a [`GgufFile`] as [`TensorData`]: its GGUF name, its
/// logical shape (dims reversed), and its bytes: plain types as they are
/// (F32, F16, BF16, F64, I8..I64, made little-endian), quantized types as
/// F32 values decoded block by block on demand (bit for bit
/// `gguf.quants.dequantize`), for any byte range (large ranges on two
/// threads).
pub struct GgufTensor<'f, S> {
    file: &'f GgufFile<S>,
    info: &'f TensorInfo,
    shape: Vec<u64>,
    dtype: Dtype,
}

impl<S> std::fmt::Debug for GgufTensor<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufTensor")
            .field("info", self.info)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl<'f, S: ByteSource> GgufTensor<'f, S> {
    fn new(file: &'f GgufFile<S>, info: &'f TensorInfo) -> Result<GgufTensor<'f, S>> {
        let dtype = match info.ggml_type.plain_dtype() {
            Some(d) => d,
            None if info.ggml_type.dequantizes() => Dtype::F32,
            None => {
                return Err(GgufError::Unsupported {
                    tensor: info.name.clone(),
                    ggml_type: info.ggml_type.name().to_string(),
                }
                .into())
            }
        };
        Ok(GgufTensor {
            file,
            info,
            shape: info.shape(),
            dtype,
        })
    }

    /// The tensor info.
    pub fn info(&self) -> &'f TensorInfo {
        self.info
    }

    /// Whether the bytes are decoded from quantized blocks.
    pub fn is_decoded(&self) -> bool {
        !self.info.ggml_type.is_plain()
    }

    /// Decodes elements `first..first + out.len()` (whole blocks or not);
    /// a large range is decoded in two halves at once.
    fn decode_range(&self, first: u64, out: &mut [f32]) -> Result<()> {
        let t = self.info.ggml_type;
        let bs = t.block_size();
        /// Below this many values, a second thread costs more than it saves.
        const SPLIT_FROM: usize = 1 << 20;
        if out.len() >= SPLIT_FROM {
            // Split on a block boundary.
            let mid = ((first + out.len() as u64 / 2) / bs * bs).max(first + 1) - first;
            let (a, b) = out.split_at_mut(mid as usize);
            let (rb, ra) = crate::parallel::both(
                || self.decode_serial(first + mid, b),
                || self.decode_serial(first, a),
            );
            return ra.and(rb);
        }
        self.decode_serial(first, out)
    }

    fn decode_serial(&self, first: u64, out: &mut [f32]) -> Result<()> {
        let t = self.info.ggml_type;
        let (bs, ts) = (t.block_size(), t.type_size());
        let last = first + out.len() as u64;
        let b0 = first / bs;
        let b1 = last.div_ceil(bs);
        let mut raw = vec![0u8; ((b1 - b0) * ts) as usize];
        self.file.read_raw(self.info, b0 * ts, &mut raw)?;
        let skip = (first - b0 * bs) as usize;
        if skip == 0 && out.len() as u64 == (b1 - b0) * bs {
            super::dequant::dequantize(t, &raw, out);
        } else {
            let mut all = vec![0f32; ((b1 - b0) * bs) as usize];
            super::dequant::dequantize(t, &raw, &mut all);
            out.copy_from_slice(&all[skip..skip + out.len()]);
        }
        Ok(())
    }
}

impl<S: ByteSource> TensorData<Error> for GgufTensor<'_, S> {
    fn name(&self) -> &str {
        &self.info.name
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[u64] {
        &self.shape
    }

    fn byte_len(&self) -> u64 {
        if self.is_decoded() {
            self.info.numel() * 4
        } else {
            self.info.byte_len
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if !matches!(end, Some(e) if e <= self.byte_len()) {
            return Err(tensorfile_core::Error::Slice {
                tensor: self.info.name.clone(),
                problem: format!(
                    "{} bytes at offset {offset} reach past its {} bytes",
                    buf.len(),
                    self.byte_len()
                ),
            }
            .into());
        }
        if !self.is_decoded() {
            let big = self.file.header.endian == Endian::Big;
            let size = (self.dtype.bits() / 8) as u64;
            if !big || size == 1 || self.info.ggml_type == GgmlType::BF16 {
                return self.file.read_raw(self.info, offset, buf);
            }
            // Big-endian elements: read the whole elements around the
            // range, swap each, keep the bytes asked for.
            let first = offset / size * size;
            let last = (offset + buf.len() as u64).div_ceil(size) * size;
            let mut raw = vec![0u8; (last - first) as usize];
            self.file.read_raw(self.info, first, &mut raw)?;
            for e in raw.chunks_exact_mut(size as usize) {
                e.reverse();
            }
            let skip = (offset - first) as usize;
            buf.copy_from_slice(&raw[skip..skip + buf.len()]);
            return Ok(());
        }
        // Decoded: whole f32 values around the range, then the bytes.
        let first = offset / 4;
        let last = (offset + buf.len() as u64).div_ceil(4);
        let mut values = vec![0f32; (last - first) as usize];
        self.decode_range(first, &mut values)?;
        let bytes: &[u8] = bytemuck::cast_slice(&values);
        let skip = (offset - first * 4) as usize;
        buf.copy_from_slice(&bytes[skip..skip + buf.len()]);
        Ok(())
    }
}
