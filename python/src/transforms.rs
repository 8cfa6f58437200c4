//! convert, quantize and dequantize as functions: keywords into the
//! library's requests, its reports into dicts (the keys of the command's
//! `--json`).

use std::path::PathBuf;

use pyo3::prelude::*;
use tensorfile::quant::Mode;
use tensorfile_ops::convert::{ConvertRequest, PytorchOptions};
use tensorfile_ops::transform::InOut;
use tensorfile_ops::{dequantize::DequantizeRequest, quantize::QuantizeRequest};

use crate::errors;
use crate::handle::parse_dtype;

/// Converts `input` into `output` as `tensorfile convert` does: casts the
/// float tensors of a safetensors file or set, or of a PyTorch checkpoint,
/// to `dtype` (without it, the canonical rewrite), and the other
/// conversions the library's `convert` operation makes (GGUF, numpy).
#[pyfunction]
#[pyo3(signature = (input, output, dtype = None, *, saturate = false, allow_int = false,
    strict = false, sync = true, max_shard_size = None, key = None, name = None,
    replace = false))]
#[allow(clippy::too_many_arguments)]
pub fn convert<'py>(
    py: Python<'py>,
    input: PathBuf,
    output: PathBuf,
    dtype: Option<&str>,
    saturate: bool,
    allow_int: bool,
    strict: bool,
    sync: bool,
    max_shard_size: Option<u64>,
    key: Option<String>,
    name: Option<String>,
    replace: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let request = ConvertRequest {
        files: in_out(input, output, sync, max_shard_size, replace),
        dtype: dtype.map(parse_dtype).transpose()?,
        saturate,
        allow_int,
        strict,
        pytorch: PytorchOptions {
            key,
            name,
            ..PytorchOptions::default()
        },
        ..ConvertRequest::default()
    };
    let report = py
        .detach(|| tensorfile_ops::convert::convert(&request, &()))
        .map_err(errors::error)?;
    Ok(pythonize::pythonize(py, &report)?)
}

/// Quantizes the weights of `input` (a safetensors file or set) with
/// `scheme` (`int4-g32-sym`, `mlx-affine` with `bits` and `group_size`,
/// `mlx-mxfp4`, `mlx-mxfp8`, `mlx-nvfp4`) into `output`: the library's
/// `quantize` operation.
#[pyfunction]
#[pyo3(signature = (input, output, scheme, *, bits = None, group_size = None,
    global_scale = false, include = Vec::new(), exclude = Vec::new(), sync = true,
    max_shard_size = None, replace = false))]
#[allow(clippy::too_many_arguments)]
pub fn quantize<'py>(
    py: Python<'py>,
    input: PathBuf,
    output: PathBuf,
    scheme: String,
    bits: Option<u64>,
    group_size: Option<u64>,
    global_scale: bool,
    include: Vec<String>,
    exclude: Vec<String>,
    sync: bool,
    max_shard_size: Option<u64>,
    replace: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let request = QuantizeRequest {
        files: in_out(input, output, sync, max_shard_size, replace),
        scheme,
        bits,
        group_size,
        global_scale,
        include,
        exclude,
        embed_hash: false,
    };
    let report = py
        .detach(|| tensorfile_ops::quantize::quantize(&request, &()))
        .map_err(errors::error)?;
    Ok(pythonize::pythonize(py, &report)?)
}

/// Edits the metadata and tensor names of the safetensors file at `path`
/// as `tensorfile edit` does: in place when only the header changes and
/// it fits, else an atomic rewrite; the report says which.
#[pyfunction]
#[pyo3(signature = (path, *, set = std::collections::BTreeMap::new(), unset = Vec::new(),
    rename = std::collections::BTreeMap::new(), rewrite = false, sync = true))]
pub fn edit_metadata<'py>(
    py: Python<'py>,
    path: PathBuf,
    set: std::collections::BTreeMap<String, String>,
    unset: Vec<String>,
    rename: std::collections::BTreeMap<String, String>,
    rewrite: bool,
    sync: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let request = tensorfile_ops::edit::EditRequest {
        file: path,
        set,
        unset,
        rename,
        rewrite,
        sync,
        ..tensorfile_ops::edit::EditRequest::default()
    };
    let report = py
        .detach(|| tensorfile_ops::edit::edit(&request, &()))
        .map_err(errors::error)?;
    Ok(pythonize::pythonize(py, &report)?)
}

/// Consolidates the torch distributed checkpoint (DCP, Hugging Face
/// storage) in the directory `input` as `tensorfile merge` does: into one
/// file when `output` ends in `.safetensors`, else into the set torch's
/// `fqn_to_index_mapping` says, in the directory `output`. Refuses an
/// input that is not such a checkpoint.
#[pyfunction]
#[pyo3(signature = (input, output, *, sync = true))]
pub fn consolidate_dcp<'py>(
    py: Python<'py>,
    input: PathBuf,
    output: PathBuf,
    sync: bool,
) -> PyResult<Bound<'py, PyAny>> {
    if !(input.is_dir() && tensorfile::set::DcpCheckpoint::is_checkpoint(&input)) {
        return Err(errors::error(tensorfile::Error::request(format!(
            "{}: not a directory holding a torch DCP checkpoint's shard-R-model-K-of-N.safetensors files",
            input.display()
        ))));
    }
    let request = tensorfile_ops::merge::MergeRequest {
        input,
        output,
        sync,
        ..tensorfile_ops::merge::MergeRequest::default()
    };
    let report = py
        .detach(|| tensorfile_ops::merge::merge(&request, &()))
        .map_err(errors::error)?;
    Ok(pythonize::pythonize(py, &report)?)
}

/// The files of a transform, and how they are written (`replace`: an
/// output in a store replaces what is there).
fn in_out(
    input: PathBuf,
    output: PathBuf,
    sync: bool,
    max_shard_size: Option<u64>,
    replace: bool,
) -> InOut {
    InOut {
        sync,
        max_shard_size,
        replace,
        ..InOut::new(input, output)
    }
}

/// Dequantizes the quantized weights of `input` into `output` (as `dtype`,
/// default each weight's scales' dtype): the library's `dequantize`
/// operation.
#[pyfunction]
#[pyo3(signature = (input, output, dtype = None, *, config = None, bits = None,
    group_size = None, mode = None, sync = true, max_shard_size = None, replace = false))]
#[allow(clippy::too_many_arguments)]
pub fn dequantize<'py>(
    py: Python<'py>,
    input: PathBuf,
    output: PathBuf,
    dtype: Option<&str>,
    config: Option<PathBuf>,
    bits: Option<u64>,
    group_size: Option<u64>,
    mode: Option<&str>,
    sync: bool,
    max_shard_size: Option<u64>,
    replace: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let mode = mode
        .map(|m| {
            m.parse::<Mode>()
                .map_err(|e| errors::msg(format!("mode {m:?}: {e}")))
        })
        .transpose()?;
    let request = DequantizeRequest {
        files: in_out(input, output, sync, max_shard_size, replace),
        dtype: dtype.map(parse_dtype).transpose()?,
        config,
        bits,
        group_size,
        mode,
    };
    let report = py
        .detach(|| tensorfile_ops::dequantize::dequantize(&request, &()))
        .map_err(errors::error)?;
    Ok(pythonize::pythonize(py, &report)?)
}
