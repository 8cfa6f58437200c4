//! Writing: `TensorSpec`, `serialize`, `serialize_file`, and `deserialize`
//! (the reference's low-level API), over the library's canonical writer;
//! `Writer` and `Spool`, the streaming saves.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};
use tensorfile::{Dtype, Metadata, SafeTensors, TensorRef, WriteOptions};
use tensorfile_core::writer::{Align, PlacedWriter, Spool as CoreSpool};
use tensorfile_core::TensorSpec as CoreSpec;

use crate::errors;

/// The dtypes numpy's and torch's constructor-style names may denote
/// (`"float32"`, `"bfloat16"`: torch's names, from the core's dtype table,
/// which numpy shares where it has the type), in the order the error for
/// an unknown name lists them. torch's `float4_e2m1fn_x2` holds two F4
/// values per element (handled by the caller).
const NAMED: [Dtype; 20] = [
    Dtype::BOOL,
    Dtype::I8,
    Dtype::U8,
    Dtype::I16,
    Dtype::U16,
    Dtype::I32,
    Dtype::U32,
    Dtype::I64,
    Dtype::U64,
    Dtype::F16,
    Dtype::F32,
    Dtype::F64,
    Dtype::BF16,
    Dtype::F8_E4M3,
    Dtype::F8_E4M3FNUZ,
    Dtype::F8_E5M2,
    Dtype::F8_E5M2FNUZ,
    Dtype::F8_E8M0,
    Dtype::F4,
    Dtype::C64,
];

/// The dtype a Python name denotes: torch's name of one of [`NAMED`] or
/// the format's own code (`"F32"`, `"BF16"`), and whether the name is
/// torch's packed `float4_e2m1fn_x2`.
fn dtype_of(name: &str) -> Option<(Dtype, bool)> {
    if let Some(dtype) = Dtype::from_torch_name(name).filter(|d| NAMED.contains(d)) {
        return Some((dtype, dtype == Dtype::F4));
    }
    Some((Dtype::from_name(name)?, false))
}

/// The error for a dtype name nothing denotes, listing those that work (as
/// the reference words it).
fn unknown_dtype(name: &str) -> PyErr {
    let names: Vec<&str> = NAMED.iter().filter_map(|d| d.torch_name()).collect();
    errors::msg(format!(
        "Unknown dtype {name:?}. Supported dtypes: {}",
        names.join(", ")
    ))
}

/// Describes one tensor passed to `serialize` / `serialize_file`: its dtype
/// (a numpy/torch name such as `"float32"`, or a format code such as
/// `"F32"`; an unknown one raises `SafetensorError` here), its shape, and
/// the address and length of its contiguous little-endian bytes.
///
/// For torch's packed `float4_e2m1fn_x2` the storage shape may be given:
/// the last dimension is doubled, so `shape` is the header's element count.
///
/// The caller must keep the memory at `data_ptr` alive and unchanged for
/// every `serialize` call that uses the spec.
#[pyclass(frozen, module = "tensorfile")]
pub struct TensorSpec {
    dtype: Dtype,
    shape: Vec<u64>,
    data_ptr: usize,
    data_len: usize,
}

#[pymethods]
impl TensorSpec {
    #[new]
    #[pyo3(signature = (*, dtype, shape, data_ptr, data_len))]
    fn new(dtype: &str, shape: Vec<u64>, data_ptr: usize, data_len: usize) -> PyResult<Self> {
        let (dtype_code, packed) = dtype_of(dtype).ok_or_else(|| unknown_dtype(dtype))?;
        let mut shape = shape;
        if packed {
            if let Some(last) = shape.last_mut() {
                *last = last
                    .checked_mul(2)
                    .ok_or_else(|| errors::msg("the shape's last dimension overflows"))?;
            }
        }
        Ok(TensorSpec {
            dtype: dtype_code,
            shape,
            data_ptr,
            data_len,
        })
    }

    /// The format code of the dtype (`"F32"`, `"BF16"`, ...).
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    /// The header's shape (element counts).
    #[getter]
    fn shape(&self) -> Vec<u64> {
        self.shape.clone()
    }

    /// The address of the bytes.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.data_ptr
    }

    /// Their length.
    #[getter]
    fn data_len(&self) -> usize {
        self.data_len
    }

    fn __repr__(&self) -> String {
        format!(
            "TensorSpec(dtype={:?}, shape={:?}, data_ptr={:#x}, data_len={})",
            self.dtype.name(),
            self.shape,
            self.data_ptr,
            self.data_len
        )
    }
}

/// The specs, owned so that the GIL can be released while writing.
pub(crate) struct Specs {
    items: Vec<(String, Dtype, Vec<u64>, usize, usize)>,
}

impl Specs {
    fn from(tensor_dict: HashMap<String, PyRef<'_, TensorSpec>>) -> PyResult<Specs> {
        let items = tensor_dict.into_iter().map(|(name, spec)| {
            Ok((
                name,
                spec.dtype,
                spec.shape.clone(),
                spec.data_ptr,
                spec.data_len,
            ))
        });
        Specs::checked(items)
    }

    /// From `(name, dtype code, shape, data address, data length)` tuples.
    pub(crate) fn from_tuples(
        tensors: Vec<(String, String, Vec<u64>, usize, usize)>,
    ) -> PyResult<Specs> {
        Specs::checked(tensors.into_iter().map(|(name, dtype, shape, ptr, len)| {
            let dtype = Dtype::from_name(&dtype)
                .ok_or_else(|| errors::msg(format!("tensor {name:?}: unknown dtype {dtype:?}")))?;
            Ok((name, dtype, shape, ptr, len))
        }))
    }

    /// The items, a null address with data refused.
    fn checked(
        items: impl Iterator<Item = PyResult<(String, Dtype, Vec<u64>, usize, usize)>>,
    ) -> PyResult<Specs> {
        let mut out = Vec::new();
        for item in items {
            let (name, dtype, shape, ptr, len) = item?;
            if len > 0 && ptr == 0 {
                return Err(errors::msg(format!(
                    "tensor {name:?}: data_ptr is null but data_len is {len}"
                )));
            }
            out.push((name, dtype, shape, ptr, len));
        }
        Ok(Specs { items: out })
    }

    pub(crate) fn refs(&self) -> Vec<TensorRef<'_>> {
        self.items
            .iter()
            .map(|(name, dtype, shape, ptr, len)| TensorRef {
                name,
                dtype: *dtype,
                shape,
                data: if *len == 0 {
                    &[]
                } else {
                    // SAFETY: the caller vouches, as TensorSpec's contract
                    // says, that `len` bytes at `ptr` are alive and unchanged
                    // for this call; the null address was refused above.
                    unsafe { std::slice::from_raw_parts(*ptr as *const u8, *len) }
                },
            })
            .collect()
    }
}

/// The canonical bytes of a safetensors file holding `tensor_dict`'s
/// tensors (a dict of names to `TensorSpec`) and `metadata`.
#[pyfunction]
#[pyo3(signature = (tensor_dict, metadata = None))]
pub fn serialize<'py>(
    py: Python<'py>,
    tensor_dict: HashMap<String, PyRef<'py, TensorSpec>>,
    metadata: Option<BTreeMap<String, String>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let specs = Specs::from(tensor_dict)?;
    let metadata: Option<Metadata> = metadata;
    let bytes = py
        .detach(|| tensorfile::serialize(specs.refs(), metadata.as_ref()))
        .map_err(|e| errors::error(e.into()))?;
    Ok(PyBytes::new(py, &bytes))
}

/// Writes the canonical file for `tensor_dict` and `metadata` to
/// `filename`, atomically: the old file or the new one, never a mix (a
/// temporary beside it renamed over it). With `sync`, the file and its
/// directory are synced before returning (the reference never syncs, so it
/// is off by default).
#[pyfunction]
#[pyo3(signature = (tensor_dict, filename, metadata = None, *, sync = false))]
pub fn serialize_file(
    py: Python<'_>,
    tensor_dict: HashMap<String, PyRef<'_, TensorSpec>>,
    filename: PathBuf,
    metadata: Option<BTreeMap<String, String>>,
    sync: bool,
) -> PyResult<()> {
    let specs = Specs::from(tensor_dict)?;
    let options = WriteOptions::default().with_sync(sync);
    // Through the streaming writer (`Writer`'s): declared from the dict,
    // then every tensor at its place, small neighbours in one write.
    py.detach(|| {
        let refs = specs.refs();
        let mut writer = PlacedWriter::declaring(&filename, &refs, metadata.as_ref(), &options)?;
        writer.write_all(&refs)?;
        writer.commit()
    })
    .map_err(|e| errors::error(e.into()))
}

/// The tensors of a file held in `data`, as `[(name, {"dtype": code,
/// "shape": [...], "data": bytearray}), ...]` in ascending order of names
/// (a bytearray, as the reference gives: writeable, so frameworks can
/// view it without a warning).
#[pyfunction]
pub fn deserialize<'py>(
    py: Python<'py>,
    data: &[u8],
) -> PyResult<Vec<(String, Bound<'py, PyDict>)>> {
    let file = py
        .detach(|| SafeTensors::from_slice(data).map(|f| f.header().clone()))
        .map_err(|e| errors::error(e.into()))?;
    let data_start = file.data_start() as usize;
    let mut out = Vec::with_capacity(file.len());
    for info in file.tensors_by_name() {
        let d = PyDict::new(py);
        d.set_item("dtype", info.dtype.name())?;
        d.set_item("shape", info.shape.to_vec())?;
        let (begin, end) = info.data_offsets;
        // In bounds: the header was validated against these bytes.
        let bytes = &data[data_start + begin as usize..data_start + end as usize];
        d.set_item("data", PyByteArray::new(py, bytes))?;
        out.push((info.name.to_string(), d));
    }
    Ok(out)
}

/// The bytes a spec points at (see [`TensorSpec`]'s contract).
fn spec_bytes<'a>(name: &str, spec: &'a TensorSpec) -> PyResult<&'a [u8]> {
    if spec.data_len == 0 {
        return Ok(&[]);
    }
    if spec.data_ptr == 0 {
        return Err(errors::msg(format!(
            "tensor {name:?}: data_ptr is null but data_len is {}",
            spec.data_len
        )));
    }
    // SAFETY: the caller vouches, as TensorSpec's contract says, that
    // `data_len` bytes at `data_ptr` are alive and unchanged for this call
    // (the slice is used only within it); the null address is refused above.
    Ok(unsafe { std::slice::from_raw_parts(spec.data_ptr as *const u8, spec.data_len) })
}

/// The write options of a streaming save.
fn write_options(sync: bool, align: u64) -> PyResult<WriteOptions> {
    let align = Align::from_bytes(align).ok_or_else(|| {
        errors::msg(format!(
            "`{align}` is not an alignment; expected 8, 64 or 4096"
        ))
    })?;
    Ok(WriteOptions::default().with_sync(sync).with_align(align))
}

/// A file declared first (names, dtypes, shapes) and then written tensor
/// by tensor in any order, each at its place as it comes (the library's
/// `PlacedWriter`): memory one tensor, the file atomic at `commit`.
#[pyclass(module = "tensorfile")]
pub struct Writer {
    inner: Option<PlacedWriter>,
}

#[pymethods]
impl Writer {
    #[new]
    #[pyo3(signature = (filename, declaration, metadata = None, *, sync = false, align = 8))]
    fn new(
        py: Python<'_>,
        filename: PathBuf,
        declaration: Vec<(String, String, Vec<u64>)>,
        metadata: Option<BTreeMap<String, String>>,
        sync: bool,
        align: u64,
    ) -> PyResult<Writer> {
        let mut specs = Vec::with_capacity(declaration.len());
        for (name, dtype, shape) in declaration {
            let spec = TensorSpec::new(&dtype, shape, 0, 0)?;
            specs.push(CoreSpec::new(name, spec.dtype, spec.shape));
        }
        let options = write_options(sync, align)?;
        let inner = py
            .detach(|| PlacedWriter::create(&filename, &specs, metadata.as_ref(), &options))
            .map_err(|e| errors::error(e.into()))?;
        Ok(Writer { inner: Some(inner) })
    }

    /// Writes the tensor `name` (its bytes described by `spec`) at its
    /// place; refuses one not declared, of another dtype or shape, or
    /// written before.
    fn write(&mut self, py: Python<'_>, name: &str, spec: PyRef<'_, TensorSpec>) -> PyResult<()> {
        let bytes = spec_bytes(name, &spec)?;
        let (dtype, shape) = (spec.dtype, spec.shape.clone());
        let inner = self.open()?;
        py.detach(|| inner.write(name, dtype, &shape, bytes))
            .map_err(|e| errors::error(e.into()))
    }

    /// Checks every declared tensor was written and puts the file in place.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        let inner = self.inner.take().ok_or_else(closed)?;
        py.detach(|| inner.commit())
            .map_err(|e| errors::error(e.into()))
    }

    /// Drops the file being written: nothing is left of it.
    fn abort(&mut self) {
        self.inner = None;
    }

    /// The declared tensors not written yet, in file order.
    #[getter]
    fn missing(&self) -> Vec<String> {
        self.inner
            .as_ref()
            .map(|w| w.missing().map(str::to_string).collect())
            .unwrap_or_default()
    }
}

impl Writer {
    fn open(&mut self) -> PyResult<&mut PlacedWriter> {
        self.inner.as_mut().ok_or_else(closed)
    }
}

fn closed() -> PyErr {
    errors::msg("the writer is closed (committed or aborted)")
}

/// Tensors that come without a declaration, kept in an unnamed spool file
/// beside the target until `save` lays them out (the library's `Spool`).
#[pyclass(module = "tensorfile")]
pub struct Spool {
    inner: Option<CoreSpool>,
}

#[pymethods]
impl Spool {
    #[new]
    fn new(py: Python<'_>, filename: PathBuf) -> PyResult<Spool> {
        let inner = py
            .detach(|| CoreSpool::create(&filename))
            .map_err(|e| errors::error(e.into()))?;
        Ok(Spool { inner: Some(inner) })
    }

    /// Adds the tensor `name`, its bytes described by `spec`, to the spool.
    fn add(&mut self, py: Python<'_>, name: &str, spec: PyRef<'_, TensorSpec>) -> PyResult<()> {
        let bytes = spec_bytes(name, &spec)?;
        let (dtype, shape) = (spec.dtype, spec.shape.clone());
        let inner = self.inner.as_mut().ok_or_else(closed)?;
        py.detach(|| inner.add(name, dtype, &shape, bytes))
            .map_err(|e| errors::error(e.into()))
    }

    /// Saves the spooled tensors and `metadata` atomically; the spool is
    /// gone afterwards.
    #[pyo3(signature = (metadata = None, *, sync = false, align = 8))]
    fn save(
        &mut self,
        py: Python<'_>,
        metadata: Option<BTreeMap<String, String>>,
        sync: bool,
        align: u64,
    ) -> PyResult<()> {
        let options = write_options(sync, align)?;
        let inner = self.inner.take().ok_or_else(closed)?;
        py.detach(|| inner.save(metadata.as_ref(), &options))
            .map_err(|e| errors::error(e.into()))
    }

    /// Drops the spool: nothing is left of it.
    fn abort(&mut self) {
        self.inner = None;
    }
}
