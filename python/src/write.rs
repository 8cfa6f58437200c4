//! Writing: `TensorSpec`, `serialize`, `serialize_file`, and `deserialize`
//! (the reference's low-level API), over the library's canonical writer.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};
use tensorfile::{Dtype, Metadata, SafeTensors, TensorRef, WriteOptions};

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
struct Specs {
    items: Vec<(String, Dtype, Vec<u64>, usize, usize)>,
}

impl Specs {
    fn from(tensor_dict: HashMap<String, PyRef<'_, TensorSpec>>) -> PyResult<Specs> {
        let mut items = Vec::with_capacity(tensor_dict.len());
        for (name, spec) in tensor_dict {
            if spec.data_len > 0 && spec.data_ptr == 0 {
                return Err(errors::msg(format!(
                    "tensor {name:?}: data_ptr is null but data_len is {}",
                    spec.data_len
                )));
            }
            items.push((
                name,
                spec.dtype,
                spec.shape.clone(),
                spec.data_ptr,
                spec.data_len,
            ));
        }
        Ok(Specs { items })
    }

    fn refs(&self) -> Vec<TensorRef<'_>> {
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
    py.detach(|| tensorfile::save(&filename, specs.refs(), metadata.as_ref(), &options))
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
