//! What the reference cannot do: strict validation with the rule and the
//! place, and the tensors of PyTorch checkpoints without running pickle.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use tensorfile::Dtype;

use crate::buffer::Buffer;
use crate::errors;
use crate::remote;
use tensorfile_ops::validate::ValidateRequest;

/// Checks a file (or, for a directory or an index, a whole sharded set)
/// against the format's reader rules, reading only headers: the library's
/// `validate` operation. Returns the keys of `tensorfile validate --json`:
/// `file`, `valid`, `rule` (the number of the rule broken, or `None`),
/// `error` (what is wrong and where, or `None`) and `warnings`; a valid set
/// adds `shards`, `tensors` and `data_bytes`, a GGUF file `format`. Never
/// raises for an invalid file; a path that cannot be read is reported the
/// same way, with `rule` `None`. A URL's reads end within `timeout`
/// seconds.
#[pyfunction]
#[pyo3(signature = (path, timeout = None))]
pub fn validate<'py>(
    py: Python<'py>,
    path: PathBuf,
    timeout: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    // A bad timeout is a usage error (ValueError), not a file's.
    remote::timeout(timeout)?;
    let request = ValidateRequest {
        path,
        timeout,
        ..ValidateRequest::default()
    };
    let report = py
        .detach(|| tensorfile_ops::validate::validate(&request, &()))
        .map_err(errors::error)?;
    Ok(pythonize::pythonize(py, &report)?)
}

/// The tensors of a `torch.save` checkpoint (zip, legacy or tar), read
/// without executing anything: the pickle is interpreted by a restricted
/// machine that only rebuilds tensors and containers. Each tensor comes in
/// memory of its own (C order, little-endian), as `(name, buffer)` in the
/// checkpoint's order; `key` keeps the subtree at that path (`"model"`,
/// `"state_dict"`), `name` names a bare top-level tensor.
#[pyfunction]
#[pyo3(signature = (path, key = None, name = None))]
pub fn load_pytorch(
    py: Python<'_>,
    path: PathBuf,
    key: Option<String>,
    name: Option<String>,
) -> PyResult<Vec<(String, Buffer)>> {
    py.detach(|| -> tensorfile::Result<Vec<(String, Buffer)>> {
        let options = tensorfile::pytorch::LoadOptions::default()
            .with_key(key)
            .with_name(name);
        let ckpt = tensorfile::pytorch::Checkpoint::open_with(&path, &options)?;
        let mut out = Vec::with_capacity(ckpt.len());
        for t in ckpt.tensors() {
            let bytes = t.data()?.into_vec();
            out.push((
                t.name().to_string(),
                Buffer::owned(bytes, t.dtype(), t.shape()),
            ));
        }
        Ok(out)
    })
    .map_err(|e| {
        if path.exists() {
            errors::error(e)
        } else {
            pyo3::exceptions::PyFileNotFoundError::new_err(format!(
                "No such file or directory: {}",
                path.display()
            ))
        }
    })
}

/// Every dtype the format has, as the header names them.
#[pyfunction]
pub fn dtype_names() -> Vec<&'static str> {
    Dtype::ALL.iter().map(|d| d.name()).collect()
}

/// The names frameworks give the format's dtypes, from the core's dtype
/// table: `{framework: {code: name}}` for `"torch"` (torch's dtype names,
/// `float4_e2m1fn_x2` for F4), `"numpy"` (numpy's type strings, `"<f4"`,
/// for the types numpy has) and `"ml_dtypes"` (its type names, for BF16
/// and the float8 types); a dtype a framework lacks is absent from its dict.
#[pyfunction]
pub fn framework_dtype_names() -> BTreeMap<&'static str, BTreeMap<&'static str, &'static str>> {
    let column = |name: fn(Dtype) -> Option<&'static str>| {
        Dtype::ALL
            .iter()
            .filter_map(|&d| Some((d.name(), name(d)?)))
            .collect()
    };
    BTreeMap::from([
        ("torch", column(Dtype::torch_name)),
        ("numpy", column(Dtype::numpy_typestr)),
        ("ml_dtypes", column(Dtype::ml_dtypes_name)),
    ])
}

/// Whether the format's dtype `code` holds floats (what casts on load
/// apply to); an unknown code is not a float.
#[pyfunction]
pub fn is_float(code: &str) -> bool {
    Dtype::from_name(code).is_some_and(Dtype::is_float)
}

/// The bits of one value of the format's dtype `code` (4 for F4, 16 for
/// BF16); SafetensorError for an unknown code.
#[pyfunction]
pub fn dtype_bits(code: &str) -> PyResult<u32> {
    Ok(crate::handle::parse_dtype(code)?.bits())
}

/// The numpy carrier of a tensor of dtype `code` and `shape`, as buffers
/// describe their bytes: `(typestr, shape)` (F4's last dimension halved,
/// the F6 types as flat bytes; see `buffer::carrier`).
#[pyfunction]
pub fn carrier(code: &str, shape: Vec<u64>) -> PyResult<(&'static str, Vec<u64>)> {
    let dtype = crate::handle::parse_dtype(code)?;
    let len = dtype
        .tensor_bytes(&shape)
        .map_err(|e| errors::msg(format!("{code} {shape:?}: no byte length ({e:?})")))?;
    let len = usize::try_from(len)
        .map_err(|_| errors::msg(format!("{code} {shape:?}: too large for this machine")))?;
    Ok(crate::buffer::carrier(dtype, &shape, len))
}

/// What `tensorfile inspect --json` says about `path` (a safetensors file,
/// a set, or a PyTorch checkpoint), as a JSON text (the library's
/// `tensorfile_ops::inspect`; text, not a dict, because `parameters` may exceed 64
/// bits); with `hash`, each tensor's sha256 too (reads every byte). A URL's
/// reads end within `timeout` seconds.
#[pyfunction]
#[pyo3(signature = (path, hash = false, timeout = None))]
pub fn inspect_json(
    py: Python<'_>,
    path: PathBuf,
    hash: bool,
    timeout: Option<f64>,
) -> PyResult<String> {
    use tensorfile_ops::inspect::{inspect, InspectRequest};
    let client = remote::client(remote::timeout(timeout)?);
    let request = InspectRequest::new(path)
        .with_hash(hash)
        .with_open(tensorfile::OpenOptions::default().with_client(client));
    py.detach(|| inspect(&request, &()))
        .map(|report| report.to_json())
        .map_err(errors::error)
}
