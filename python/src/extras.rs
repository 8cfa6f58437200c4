//! What the reference cannot do: strict validation with the rule and the
//! place, and the tensors of PyTorch checkpoints without running pickle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorfile::InputKind as Kind;
use tensorfile::{Dtype, Header, ReadOptions};
use tensorfile_core::{read_header_from_path, ShardedTensors};
use tensorfile_remote::Client;

use crate::buffer::Buffer;
use crate::errors;
use crate::remote;

/// Checks a file (or, for a directory or an index, a whole sharded set)
/// against the format's reader rules, reading only headers. Returns the
/// keys of `tensorfile validate --json`: `file`, `valid`, `rule` (the
/// number of the rule broken, or `None`), `error` (what is wrong and where,
/// or `None`) and `warnings`. Never raises for an invalid file; a path that
/// cannot be read is reported the same way, with `rule` `None`. A URL's
/// reads end within `timeout` seconds.
#[pyfunction]
#[pyo3(signature = (path, timeout = None))]
pub fn validate<'py>(
    py: Python<'py>,
    path: PathBuf,
    timeout: Option<f64>,
) -> PyResult<Bound<'py, PyDict>> {
    let client = remote::client(remote::timeout(timeout)?);
    let (error, rule, warnings) = py.detach(|| {
        let options = ReadOptions::default();
        let one_line = |e: &dyn std::error::Error| {
            let mut text = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                let more = s.to_string();
                if !text.contains(&more) {
                    text.push_str(": ");
                    text.push_str(&more);
                }
                source = s.source();
            }
            text
        };
        match tensorfile::probe(&path).map(|p| p.kind()) {
            Ok(Kind::SafetensorsSet) => match open_set(&path, &options, &client) {
                Ok(set) => (None, None, set.warnings().to_vec()),
                Err(e) => (Some(one_line(&e)), e.rule(), Vec::new()),
            },
            Ok(Kind::Safetensors) => match header_of(&path, &options, &client) {
                Ok(header) => (None, None, header.warnings().to_vec()),
                Err(e) => {
                    let detail: &(dyn std::error::Error + 'static) = match e.core() {
                        Some(core) => core,
                        None => e.detail(),
                    };
                    (Some(one_line(detail)), e.rule(), Vec::new())
                }
            },
            Ok(kind) => (
                Some(format!("is {kind}, not safetensors")),
                None,
                Vec::new(),
            ),
            Err(e) => (Some(one_line(&e)), None, Vec::new()),
        }
    });
    let d = PyDict::new(py);
    d.set_item("file", path.display().to_string())?;
    d.set_item("valid", error.is_none())?;
    d.set_item("rule", rule)?;
    d.set_item("error", error)?;
    d.set_item("warnings", warnings)?;
    Ok(d)
}

/// A set, local (read with positional reads) or remote (headers only,
/// through `client`).
fn open_set(
    path: &Path,
    options: &ReadOptions,
    client: &Arc<Client>,
) -> tensorfile::Result<ShardedTensors> {
    let options = tensorfile::OpenOptions::default()
        .with_read(options.clone())
        .with_map(false)
        .with_client(client.clone());
    tensorfile::open_set(path, &options)
}

/// A file's header, local or remote (one request when it fits in 64 KiB);
/// rule 5 is checked against the file's length.
fn header_of(
    path: &Path,
    options: &ReadOptions,
    client: &Arc<Client>,
) -> tensorfile::Result<Header> {
    match remote::url(path) {
        Some(u) => Ok(remote::single_file(u, client, options)?.header().clone()),
        None => Ok(read_header_from_path(path, options)?),
    }
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

/// What `tensorfile inspect --json` says about `path` (a safetensors file,
/// a set, or a PyTorch checkpoint), as a JSON text (the library's
/// `ops::inspect`; text, not a dict, because `parameters` may exceed 64
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
    use tensorfile::ops::inspect::{inspect, InspectRequest};
    let client = remote::client(remote::timeout(timeout)?);
    let request = InspectRequest::new(path)
        .with_hash(hash)
        .with_open(tensorfile::OpenOptions::default().with_client(client));
    py.detach(|| inspect(&request, &()))
        .map(|report| report.to_json())
        .map_err(errors::error)
}
