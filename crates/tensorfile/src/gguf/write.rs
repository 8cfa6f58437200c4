//! The GGUF writer: metadata, tensor infos and data in GGUF v3's layout
//! (little-endian), made by a plan's jobs and written atomically with
//! positional writes.
//!
//! Layout as gguf-py's `GGUFWriter` and llama.cpp write it: the header,
//! the key-value pairs in the order given, the tensor infos in the order
//! declared, zeros up to the alignment, then each tensor's bytes at an
//! offset that is a multiple of the alignment, each padded with zeros to
//! it (the last one too). Every tensor's offset is the sum of the padded
//! sizes before it, as llama.cpp requires.
//!
//! The bytes come from jobs ([`Job`]): each makes part of one or more
//! tensors and hands it to the sink at an offset into the tensor, in any
//! order, from any thread; the jobs run in parallel. The sink checks that
//! every byte of every tensor is written exactly once.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;

use super::error::GgufError;
use super::read::{align_up, DEFAULT_ALIGNMENT, MAX_DIMS};
use super::types::GgmlType;
use super::value::{Array, Value};
use crate::plan::{Job, Plan, Sink};
use crate::Progress;
use crate::{AtomicFile, Dtype, Error, Result, TensorSpec};

/// The longest tensor name written, in bytes: llama.cpp refuses names of
/// 64 bytes or more (its buffer holds 63 and a NUL).
pub const MAX_WRITTEN_NAME: usize = 63;

/// One tensor to write: its name, its dimensions in GGUF order (fastest
/// first: numpy's `(4, 64)` is `[64, 4]`) and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufSpec {
    /// The name.
    pub name: String,
    /// Dimensions, fastest first.
    pub dims: Vec<u64>,
    /// The type.
    pub ggml_type: GgmlType,
}

impl GgufSpec {
    /// A tensor of logical `shape` (outermost first), stored with the
    /// dimensions reversed.
    pub fn from_shape(name: impl Into<String>, shape: &[u64], ggml_type: GgmlType) -> GgufSpec {
        GgufSpec {
            name: name.into(),
            dims: shape.iter().rev().copied().collect(),
            ggml_type,
        }
    }

    /// Its bytes, checked: at most 4 dimensions, rows of whole blocks, a
    /// byte count that fits.
    ///
    /// # Errors
    /// [`GgufError::Write`] naming the tensor.
    pub fn byte_len(&self) -> Result<u64, GgufError> {
        let bad = |p: String| GgufError::Write(format!("tensor {:?}: {p}", self.name));
        if self.dims.len() > MAX_DIMS as usize {
            return Err(bad(format!(
                "{} dimensions (at most {MAX_DIMS})",
                self.dims.len()
            )));
        }
        let row = self.dims.first().copied().unwrap_or(1);
        if row % self.ggml_type.block_size() != 0 {
            return Err(bad(format!(
                "rows of {row} are not whole {} blocks of {}",
                self.ggml_type,
                self.ggml_type.block_size()
            )));
        }
        let numel = self
            .dims
            .iter()
            .try_fold(1u64, |n, &d| {
                n.checked_mul(d).filter(|&n| n <= i64::MAX as u64)
            })
            .ok_or_else(|| bad(format!("dims {:?} hold too many elements", self.dims)))?;
        self.ggml_type
            .bytes_for(numel)
            .ok_or_else(|| bad("its byte count overflows".into()))
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend(a.element_type().id().to_le_bytes());
    out.extend((a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend(x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
    }
}

/// A value's bytes (after its type id).
fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend(x.to_le_bytes()),
        Value::U16(x) => out.extend(x.to_le_bytes()),
        Value::I16(x) => out.extend(x.to_le_bytes()),
        Value::U32(x) => out.extend(x.to_le_bytes()),
        Value::I32(x) => out.extend(x.to_le_bytes()),
        Value::F32(x) => out.extend(x.to_le_bytes()),
        Value::U64(x) => out.extend(x.to_le_bytes()),
        Value::I64(x) => out.extend(x.to_le_bytes()),
        Value::F64(x) => out.extend(x.to_le_bytes()),
        Value::Bool(b) => out.push(u8::from(*b)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
    }
}

/// A planned file: the header bytes and where each tensor goes.
#[derive(Debug, Clone)]
pub(crate) struct GgufLayout {
    header: Vec<u8>,
    starts: Vec<u64>,
    lens: Vec<u64>,
    file_len: u64,
}

impl GgufLayout {
    /// Plans the file of `kv` (in order) and `specs` (in order).
    ///
    /// # Errors
    /// An empty or repeated key, a `general.alignment` that is not a UINT32
    /// power of two, a repeated name, a name longer than
    /// `MAX_WRITTEN_NAME`, or a tensor [`GgufSpec::byte_len`] refuses.
    pub fn new(kv: &[(String, Value)], specs: &[GgufSpec]) -> Result<GgufLayout, GgufError> {
        let mut keys = HashSet::new();
        let mut alignment = DEFAULT_ALIGNMENT;
        for (k, v) in kv {
            if k.is_empty() {
                return Err(GgufError::Write("an empty key".into()));
            }
            if !keys.insert(k.as_str()) {
                return Err(GgufError::Write(format!("key {k:?} given twice")));
            }
            if k == "general.alignment" {
                alignment = match v {
                    Value::U32(a) if a.is_power_of_two() => u64::from(*a),
                    other => {
                        return Err(GgufError::Write(format!(
                            "general.alignment must be a UINT32 power of two, not {other:?}"
                        )))
                    }
                };
            }
        }
        let mut header = Vec::with_capacity(4096);
        header.extend(b"GGUF");
        header.extend(3u32.to_le_bytes());
        header.extend((specs.len() as u64).to_le_bytes());
        header.extend((kv.len() as u64).to_le_bytes());
        for (k, v) in kv {
            put_str(&mut header, k);
            header.extend(v.value_type().id().to_le_bytes());
            put_value(&mut header, v);
        }
        let mut names = HashSet::new();
        let mut lens = Vec::with_capacity(specs.len());
        let mut offset = 0u64;
        let overflow = || GgufError::Write("the file would be larger than 2^64 bytes".into());
        let mut relative = Vec::with_capacity(specs.len());
        for s in specs {
            if s.name.len() > MAX_WRITTEN_NAME {
                return Err(GgufError::Write(format!(
                    "tensor name {:?} is {} bytes; llama.cpp takes at most {MAX_WRITTEN_NAME}",
                    s.name,
                    s.name.len()
                )));
            }
            if !names.insert(s.name.as_str()) {
                return Err(GgufError::Write(format!(
                    "tensor {:?} declared twice",
                    s.name
                )));
            }
            let len = s.byte_len()?;
            put_str(&mut header, &s.name);
            header.extend((s.dims.len() as u32).to_le_bytes());
            for d in &s.dims {
                header.extend(d.to_le_bytes());
            }
            header.extend(s.ggml_type.id().to_le_bytes());
            header.extend(offset.to_le_bytes());
            relative.push(offset);
            lens.push(len);
            offset = align_up(len, alignment)
                .and_then(|p| offset.checked_add(p))
                .ok_or_else(overflow)?;
        }
        let data_offset = align_up(header.len() as u64, alignment).ok_or_else(overflow)?;
        let file_len = data_offset.checked_add(offset).ok_or_else(overflow)?;
        header.resize(data_offset as usize, 0);
        Ok(GgufLayout {
            header,
            starts: relative.iter().map(|r| data_offset + r).collect(),
            lens,
            file_len,
        })
    }

    /// The bytes before the data section (padding included).
    pub fn header(&self) -> &[u8] {
        &self.header
    }

    /// The file's length.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Absolute start and byte length of tensor `i`.
    pub fn tensor(&self, i: usize) -> Option<(u64, u64)> {
        Some((*self.starts.get(i)?, *self.lens.get(i)?))
    }
}

/// Disjoint sorted byte ranges written so far, merged as they join.
#[derive(Debug, Default)]
struct Written(Vec<(u64, u64)>);

impl Written {
    fn insert(&mut self, s: u64, e: u64) -> bool {
        let at = self.0.partition_point(|&(a, _)| a < s);
        if at > 0 && self.0[at - 1].1 > s {
            return false;
        }
        if at < self.0.len() && self.0[at].0 < e {
            return false;
        }
        let join_prev = at > 0 && self.0[at - 1].1 == s;
        let join_next = at < self.0.len() && self.0[at].0 == e;
        match (join_prev, join_next) {
            (true, true) => {
                self.0[at - 1].1 = self.0[at].1;
                self.0.remove(at);
            }
            (true, false) => self.0[at - 1].1 = e,
            (false, true) => self.0[at].0 = s,
            (false, false) => self.0.insert(at, (s, e)),
        }
        true
    }

    fn total(&self) -> u64 {
        self.0.iter().map(|&(s, e)| e - s).sum()
    }
}

/// Where jobs' bytes go: a buffer or a file, at the layout's places.
enum Target<'t> {
    File(&'t AtomicFile),
    Memory(&'t Mutex<Vec<u8>>),
}

struct GgufSink<'t> {
    layout: &'t GgufLayout,
    names: &'t [String],
    target: Target<'t>,
    written: Vec<Mutex<Written>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sink<Error> for GgufSink<'_> {
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<()> {
        let bad = |p: String| Error::from(GgufError::Write(p));
        let (start, len) = self
            .layout
            .tensor(tensor)
            .ok_or_else(|| bad(format!("no tensor {tensor}")))?;
        let name = self.names.get(tensor).map_or("", String::as_str);
        let end = offset.checked_add(bytes.len() as u64).filter(|&e| e <= len);
        let Some(end) = end else {
            return Err(bad(format!(
                "tensor {name:?}: {} bytes at {offset} reach past its {len} bytes",
                bytes.len()
            )));
        };
        if bytes.is_empty() {
            return Ok(());
        }
        if !lock(&self.written[tensor]).insert(offset, end) {
            return Err(bad(format!(
                "tensor {name:?}: bytes {offset}..{end} are written twice"
            )));
        }
        match &self.target {
            Target::File(f) => Ok(f.write_all_at(bytes, start + offset)?),
            Target::Memory(m) => {
                let at = (start + offset) as usize;
                lock(m)[at..at + bytes.len()].copy_from_slice(bytes);
                Ok(())
            }
        }
    }
}

/// A GGUF file to write: metadata, declared tensors and the jobs that
/// make their bytes.
///
/// ```
/// use tensorfile::gguf::{GgufSpec, GgufWriter};
/// use tensorfile::gguf::{GgmlType, GgufFile, GgufValue as Value, ReadLimits};
/// let mut w = GgufWriter::new(vec![("general.architecture".into(), Value::String("demo".into()))]);
/// let t = w.declare(GgufSpec::from_shape("w", &[2, 32], GgmlType::Q8_0))?;
/// let values = vec![0.5f32; 64];
/// w.push(vec![t], move |sink: &dyn tensorfile_core::plan::Sink<tensorfile::Error>| -> tensorfile::Result<()> {
///     let mut q = vec![0u8; 68];
///     tensorfile::gguf::quantize_row(GgmlType::Q8_0, &values, &mut q).unwrap();
///     Ok(sink.write(t, 0, &q)?)
/// });
/// let bytes = w.to_bytes()?;
/// let back = GgufFile::from_source(bytes, &ReadLimits::default())?;
/// assert_eq!(back.header().tensor("w").unwrap().dims, [32, 2]);
/// # Ok::<(), tensorfile::Error>(())
/// ```
pub struct GgufWriter<'a> {
    kv: Vec<(String, Value)>,
    specs: Vec<GgufSpec>,
    names: Vec<String>,
    plan: Plan<'a, Error>,
}

impl std::fmt::Debug for GgufWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("kv", &self.kv.len())
            .field("specs", &self.specs)
            .finish()
    }
}

impl<'a> GgufWriter<'a> {
    /// A file with these key-value pairs (written in this order).
    pub fn new(kv: Vec<(String, Value)>) -> GgufWriter<'a> {
        GgufWriter {
            kv,
            specs: Vec::new(),
            names: Vec::new(),
            plan: Plan::with_error(None),
        }
    }

    /// The key-value pairs.
    pub fn kv(&self) -> &[(String, Value)] {
        &self.kv
    }

    /// The declared tensors.
    pub fn specs(&self) -> &[GgufSpec] {
        &self.specs
    }

    /// Declares a tensor (file order is declaration order); returns its
    /// index for [`GgufWriter::push`] and the sink.
    ///
    /// # Errors
    /// As [`GgufSpec::byte_len`].
    pub fn declare(&mut self, spec: GgufSpec) -> Result<usize> {
        let len = spec.byte_len()?;
        let i = self
            .plan
            .declare(TensorSpec::new(spec.name.clone(), Dtype::U8, [len]));
        self.names.push(spec.name.clone());
        self.specs.push(spec);
        Ok(i)
    }

    /// Adds the job that makes (parts of) tensors `outputs`.
    pub fn push(&mut self, outputs: Vec<usize>, job: impl Job<Error> + 'a) {
        self.plan.push(outputs, job);
    }

    /// The planned layout.
    ///
    /// # Errors
    /// As [`GgufLayout::new`].
    pub(crate) fn layout(&self) -> Result<GgufLayout> {
        Ok(GgufLayout::new(&self.kv, &self.specs)?)
    }

    fn run(&self, layout: &GgufLayout, target: Target<'_>, progress: &dyn Progress) -> Result<()> {
        let sink = GgufSink {
            layout,
            names: &self.names,
            target,
            written: self.specs.iter().map(|_| Mutex::default()).collect(),
        };
        self.plan.run(&sink, |i| i as u64, progress)?;
        for (i, w) in sink.written.iter().enumerate() {
            let (_, len) = layout.tensor(i).unwrap_or_default();
            let done = lock(w).total();
            if done != len {
                return Err(GgufError::Write(format!(
                    "tensor {:?}: {done} of its {len} bytes were made",
                    self.names[i]
                ))
                .into());
            }
        }
        Ok(())
    }

    /// Writes the file at `path` atomically: the header, then every job's
    /// bytes at their places, in parallel; any error leaves `path` as it
    /// was.
    ///
    /// # Errors
    /// The layout is refused, a job fails, or writing fails (naming `path`).
    pub fn save(&self, path: impl AsRef<Path>, sync: bool, progress: &dyn Progress) -> Result<()> {
        let path = path.as_ref();
        let layout = self.layout()?;
        let out = AtomicFile::create(path)?;
        out.set_len(layout.file_len())?;
        out.reserve(layout.file_len())?;
        out.write_all_at(layout.header(), 0)?;
        self.run(&layout, Target::File(&out), progress)?;
        out.commit(sync)?;
        Ok(())
    }

    /// The file's bytes, in memory.
    ///
    /// # Errors
    /// As [`GgufWriter::save`], or a file too large for memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let layout = self.layout()?;
        let len = usize::try_from(layout.file_len())
            .map_err(|_| GgufError::Write("too large for memory".into()))?;
        let mut bytes = layout.header().to_vec();
        bytes.resize(len, 0);
        let memory = Mutex::new(bytes);
        self.run(&layout, Target::Memory(&memory), &())?;
        Ok(memory.into_inner().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufFile, ReadLimits};

    #[test]
    fn refused_layouts_name_what_is_wrong() {
        let spec = |name: &str| GgufSpec::from_shape(name, &[2, 32], GgmlType::Q8_0);
        // GgufError::Write covers every refused layout; its text says which.
        let e = GgufLayout::new(&[], &[spec(&"n".repeat(64))]).unwrap_err();
        assert!(
            matches!(&e, GgufError::Write(m) if m.contains("at most 63")),
            "{e}"
        );
        let e = GgufLayout::new(&[], &[spec("a"), spec("a")]).unwrap_err();
        assert!(
            matches!(&e, GgufError::Write(m) if m.contains("declared twice")),
            "{e}"
        );
        let kv = vec![
            ("k".to_string(), Value::U8(1)),
            ("k".to_string(), Value::U8(2)),
        ];
        assert!(GgufLayout::new(&kv, &[]).is_err());
        let kv = vec![("general.alignment".to_string(), Value::U64(64))];
        assert!(GgufLayout::new(&kv, &[]).is_err());
        let bad = GgufSpec::from_shape("q", &[2, 48], GgmlType::Q4_0);
        assert!(bad
            .byte_len()
            .unwrap_err()
            .to_string()
            .contains("whole Q4_0 blocks"));
    }

    #[test]
    fn every_value_type_and_an_alignment_read_back() {
        let kv = vec![
            (
                "general.architecture".to_string(),
                Value::String("t".into()),
            ),
            ("general.alignment".to_string(), Value::U32(64)),
            (
                "a".to_string(),
                Value::Array(Array::Array(vec![
                    Array::I64(vec![-1, 2]),
                    Array::Bool(vec![true]),
                ])),
            ),
            ("f".to_string(), Value::F64(-0.0)),
            (
                "s".to_string(),
                Value::Array(Array::String(vec!["x".into(), String::new()])),
            ),
        ];
        let mut w = GgufWriter::new(kv.clone());
        let a = w
            .declare(GgufSpec::from_shape("a", &[3], GgmlType::F32))
            .unwrap();
        let b = w
            .declare(GgufSpec::from_shape("b", &[2, 2], GgmlType::I16))
            .unwrap();
        w.push(
            vec![a, b],
            move |s: &dyn Sink<crate::Error>| -> Result<()> {
                s.write(b, 0, &[1, 0, 2, 0, 3, 0, 4, 0])?;
                s.write(a, 4, &[0; 8])?;
                s.write(a, 0, &[0; 4])
            },
        );
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::from_source(bytes, &ReadLimits::default()).unwrap();
        let h = f.header();
        assert_eq!(h.alignment(), 64);
        for ((k, v), got) in kv.iter().zip(h.kv()) {
            assert_eq!((k, v), (&got.key, &got.value));
        }
        assert_eq!(h.tensor("b").unwrap().offset, 64);
        assert_eq!(h.file_len(), h.data_offset() + 128);

        // A job that leaves a tensor short, or writes a byte twice.
        let mut w = GgufWriter::new(vec![]);
        let a = w
            .declare(GgufSpec::from_shape("a", &[3], GgmlType::F32))
            .unwrap();
        w.push(vec![a], move |s: &dyn Sink<crate::Error>| -> Result<()> {
            s.write(a, 0, &[0; 8])
        });
        assert!(w
            .to_bytes()
            .unwrap_err()
            .to_string()
            .contains("8 of its 12 bytes"));
        let mut w = GgufWriter::new(vec![]);
        let a = w
            .declare(GgufSpec::from_shape("a", &[3], GgmlType::F32))
            .unwrap();
        w.push(vec![a], move |s: &dyn Sink<crate::Error>| -> Result<()> {
            s.write(a, 0, &[0; 8])?;
            s.write(a, 4, &[0; 8])
        });
        assert!(w
            .to_bytes()
            .unwrap_err()
            .to_string()
            .contains("written twice"));
    }
}
