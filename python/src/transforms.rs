//! convert, quantize and dequantize as functions, over the library's plans
//! and [`tensorfile::transform`] (a file or a set in, a file or a set out,
//! atomically), as the CLI's commands do. Each returns the summary the
//! command's `--json` prints.

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorfile::cast::{convert_plan, CastOptions};
use tensorfile::model::read_config;
use tensorfile::quant::{
    dequantize_plan, quantize_plan, DequantizeOptions, Glob, Mode, QuantConfig, QuantParams,
    QuantizeOptions, Scheme, Selection,
};
use tensorfile::transform::{TransformInput as Input, Written};
use tensorfile::InputKind as Kind;
use tensorfile::{ReadOptions, WriteOptions};

use crate::errors;
use crate::handle::parse_dtype;

/// Opens a safetensors input, naming what else it is.
fn open_input(path: &Path) -> tensorfile::Result<Input> {
    let kind = tensorfile::probe(path)?.kind();
    if !kind.is_safetensors() {
        let e = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("is {kind}, not safetensors"),
        );
        return Err(tensorfile::Error::io(path, e));
    }
    Input::open(path, kind, &ReadOptions::default())
}

/// Paths as strings for the summaries.
fn shown(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

/// Casts the float tensors of `input` (a safetensors file or set, or a
/// PyTorch checkpoint) to `dtype` and writes them to `output`; without
/// `dtype`, the canonical rewrite.
#[pyfunction]
#[pyo3(signature = (input, output, dtype = None, *, saturate = false, allow_int = false,
    strict = false, sync = true, max_shard_size = None, key = None, name = None))]
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
) -> PyResult<Bound<'py, PyDict>> {
    let dtype = dtype.map(parse_dtype).transpose()?;
    if let Some(d) = dtype.filter(|d| d.is_int() && !allow_int) {
        return Err(errors::msg(format!(
            "dtype {d} is an integer dtype: pass allow_int=True to cast to it"
        )));
    }
    let cast = CastOptions::default()
        .with_saturate(saturate)
        .with_allow_int(allow_int)
        .with_strict(strict);
    let write = WriteOptions::default().with_sync(sync);
    let d = PyDict::new(py);
    d.set_item("input", input.display().to_string())?;
    d.set_item("output", output.display().to_string())?;
    d.set_item("dtype", dtype.map(|d| d.name()))?;
    let kind = py
        .detach(|| tensorfile::probe(&input))
        .map_err(errors::error)?
        .kind();
    if matches!(kind, Kind::Pytorch | Kind::PytorchSet) {
        let (format, written, tensors, aliases, cast_count, losses) = py
            .detach(|| {
                convert_pytorch(
                    &input,
                    &output,
                    kind,
                    key,
                    name,
                    dtype,
                    cast,
                    write,
                    max_shard_size,
                )
            })
            .map_err(errors::error)?;
        d.set_item("input_format", format)?;
        d.set_item("files", shown(&written.files))?;
        d.set_item("index", written.index.map(|p| p.display().to_string()))?;
        d.set_item("tensors", tensors)?;
        d.set_item("aliases", aliases)?;
        d.set_item("cast", cast_count)?;
        d.set_item("bytes", written.bytes)?;
        d.set_item("losses", losses_dict(py, losses)?)?;
        return Ok(d);
    }
    if key.is_some() || name.is_some() {
        return Err(errors::msg(format!(
            "key and name apply only to PyTorch input; {} is not a PyTorch checkpoint",
            input.display()
        )));
    }
    let (summary, written, losses) = py
        .detach(|| -> tensorfile::Result<_> {
            let source = open_input(&input)?;
            if dtype.is_some() {
                // Only the canonical rewrite may replace its input.
                tensorfile_core::atomic::check_not_input(&output, source.files())?;
            }
            let tensors = source.tensors();
            let metadata = source.metadata()?;
            let (plan, summary) = convert_plan(&tensors, metadata.as_ref(), dtype, cast)?;
            let written = tensorfile::transform::write(
                &source,
                &tensors,
                &plan,
                &output,
                max_shard_size,
                &write,
                &(),
            )?;
            let losses = owned_losses(summary.losses());
            Ok((summary, written, losses))
        })
        .map_err(errors::error)?;
    d.set_item("files", shown(&written.files))?;
    d.set_item("index", written.index.map(|p| p.display().to_string()))?;
    d.set_item("tensors", summary.tensors)?;
    d.set_item("cast", summary.cast)?;
    d.set_item("companions", summary.companions)?;
    d.set_item("bytes", written.bytes)?;
    d.set_item("losses", losses_dict(py, losses)?)?;
    Ok(d)
}

/// Per tensor whose cast lost values: to_inf, to_nan, saturated, flushed.
type LossCounts = Vec<(String, [u64; 4])>;

/// The losses of a conversion, owned (to leave the detached section).
fn owned_losses(losses: Vec<(&str, tensorfile::cast::Losses)>) -> LossCounts {
    losses
        .into_iter()
        .map(|(n, l)| (n.to_string(), [l.to_inf, l.to_nan, l.saturated, l.flushed]))
        .collect()
}

/// The losses as `{name: {to_inf, to_nan, saturated, flushed}}`, as the
/// CLI's `--json` gives them.
fn losses_dict<'py>(py: Python<'py>, losses: LossCounts) -> PyResult<Bound<'py, PyDict>> {
    let lost = PyDict::new(py);
    for (name, [to_inf, to_nan, saturated, flushed]) in losses {
        let counts = PyDict::new(py);
        counts.set_item("to_inf", to_inf)?;
        counts.set_item("to_nan", to_nan)?;
        counts.set_item("saturated", saturated)?;
        counts.set_item("flushed", flushed)?;
        lost.set_item(name, counts)?;
    }
    Ok(lost)
}

/// What a PyTorch conversion gives the summary: the input's format, what
/// was written, tensors, aliases, casts and losses.
type PytorchConverted = (&'static str, Written, usize, usize, usize, LossCounts);

/// Converts a PyTorch checkpoint (`Kind::Pytorch`) or a sharded `.bin` set
/// (its index, or a directory holding one) to `output`: a file, or a set
/// with one output shard per input shard (or cut at `max_shard_size`).
#[allow(clippy::too_many_arguments)]
fn convert_pytorch(
    input: &Path,
    output: &Path,
    kind: Kind,
    key: Option<String>,
    name: Option<String>,
    dtype: Option<tensorfile::Dtype>,
    cast: CastOptions,
    write: WriteOptions,
    max_shard_size: Option<u64>,
) -> tensorfile::Result<PytorchConverted> {
    use tensorfile::pytorch::{
        checkpoint_plan, plan_set, Checkpoint, CheckpointSet, ConvertOptions,
    };
    use tensorfile::transform::{write_to, Layout};
    let set_index = match kind {
        Kind::PytorchSet => Some(CheckpointSet::find_index(input).ok_or_else(|| {
            let e = std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no .bin index here (a sharded set is converted from its index)",
            );
            tensorfile::Error::io(input, e)
        })?),
        _ => None,
    };
    if set_index.is_some() && (key.is_some() || name.is_some()) {
        let e = std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "key and name apply to a single checkpoint, not a sharded .bin set",
        );
        return Err(tensorfile::Error::io(input, e));
    }
    let options = ConvertOptions::default()
        .with_load(
            tensorfile::pytorch::LoadOptions::default()
                .with_key(key)
                .with_name(name),
        )
        .with_write(write)
        .with_dtype(dtype)
        .with_cast(cast);
    if let Some(index) = set_index {
        let set = CheckpointSet::open(&index, &options.load)?;
        let mut inputs: Vec<PathBuf> = set
            .shards()
            .iter()
            .map(|s| set.dir().join(s.name()))
            .collect();
        inputs.push(set.index_path().to_path_buf());
        tensorfile_core::atomic::check_not_input(output, &inputs)?;
        let planned = plan_set(&set, &options)?;
        let layout = Layout {
            is_set: true,
            shard_of: planned.shard_of.clone(),
            shards: planned.shards,
            prefix: planned.prefix.into(),
        };
        let written = write_to(
            &layout,
            &planned.plan,
            output,
            max_shard_size,
            &options.write,
            &(),
        )?;
        let r = &planned.report;
        return Ok((
            "pytorch-set",
            written,
            r.tensors,
            r.aliases,
            r.cast,
            owned_losses(r.losses()),
        ));
    }
    // Safetensors bytes must not land on the checkpoint itself.
    tensorfile_core::atomic::check_not_input(output, [input])?;
    let ckpt = Checkpoint::open_with(input, &options.load)?;
    let (plan, report) = checkpoint_plan(&ckpt, &options)?;
    let layout = Layout {
        is_set: false,
        shard_of: vec![0; plan.specs().len()],
        shards: 1,
        prefix: "model".into(),
    };
    let written = write_to(&layout, &plan, output, max_shard_size, &options.write, &())?;
    Ok((
        "pytorch",
        written,
        report.tensors,
        report.aliases,
        report.cast,
        owned_losses(report.losses()),
    ))
}

/// Quantizes the weights of `input` (a safetensors file or set) with
/// `scheme` (`int4-g32-sym`, `mlx-affine` with `bits` and `group_size`,
/// `mlx-mxfp4`, `mlx-mxfp8`, `mlx-nvfp4`) into `output`.
#[pyfunction]
#[pyo3(signature = (input, output, scheme, *, bits = None, group_size = None,
    global_scale = false, include = Vec::new(), exclude = Vec::new(), sync = true,
    max_shard_size = None))]
#[allow(clippy::too_many_arguments)]
pub fn quantize<'py>(
    py: Python<'py>,
    input: PathBuf,
    output: PathBuf,
    scheme: &str,
    bits: Option<u64>,
    group_size: Option<u64>,
    global_scale: bool,
    include: Vec<String>,
    exclude: Vec<String>,
    sync: bool,
    max_shard_size: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut scheme =
        Scheme::parse(scheme, bits, group_size).map_err(|e| errors::msg(e.to_string()))?;
    if global_scale {
        scheme = scheme
            .with_global_scale()
            .map_err(|e| errors::msg(e.to_string()))?;
    }
    let opts = QuantizeOptions::new(scheme)
        .with_selection(Selection {
            include: include.iter().map(Glob::new).collect(),
            exclude: exclude.iter().map(Glob::new).collect(),
        })
        .with_write(WriteOptions::default().with_sync(sync));
    let (summary, written) = py
        .detach(|| -> tensorfile::Result<_> {
            let source = open_input(&input)?;
            tensorfile_core::atomic::check_not_input(&output, source.files())?;
            let mut tensors = source.tensors();
            tensors.sort_unstable_by(|a, b| a.info().name.cmp(b.info().name));
            let metadata = source.metadata()?;
            let (plan, summary) = quantize_plan(&tensors, metadata.as_ref(), &opts)?;
            let written = tensorfile::transform::write(
                &source,
                &tensors,
                &plan,
                &output,
                max_shard_size,
                &opts.write,
                &(),
            )?;
            Ok((summary, written))
        })
        .map_err(errors::error)?;
    let d = PyDict::new(py);
    d.set_item("input", input.display().to_string())?;
    d.set_item("output", output.display().to_string())?;
    d.set_item("files", shown(&written.files))?;
    d.set_item("index", written.index.map(|p| p.display().to_string()))?;
    d.set_item("scheme", scheme.name())?;
    d.set_item("group_size", scheme.group_size())?;
    d.set_item("bits", scheme.bits())?;
    d.set_item("mode", scheme.mode().map(|m| m.name()))?;
    d.set_item("global_scale", scheme.global_scale())?;
    d.set_item("quantized", summary.quantized)?;
    d.set_item("tensors", summary.tensors)?;
    d.set_item("metadata", summary.metadata)?;
    d.set_item("bytes", written.bytes)?;
    Ok(d)
}

/// The MLX parameters dequantize is given: a config.json's `quantization`,
/// or uniform `bits`, `group_size` and `mode`; None leaves them to the
/// file's metadata.
fn given_params(
    config: Option<&Path>,
    bits: Option<u64>,
    group_size: Option<u64>,
    mode: Option<&str>,
) -> PyResult<Option<QuantConfig>> {
    if let Some(path) = config {
        if bits.is_some() || group_size.is_some() || mode.is_some() {
            return Err(errors::msg(
                "config and bits/group_size/mode are two ways to give the same parameters: give one",
            ));
        }
        let text = read_config(path).map_err(errors::error)?;
        return match QuantConfig::from_config(&text) {
            Ok(Some(q)) => Ok(Some(q)),
            Ok(None) => Err(errors::msg(format!(
                "{}: no quantization in this config",
                path.display()
            ))),
            Err(e) => Err(errors::msg(format!("{}: {e}", path.display()))),
        };
    }
    let mode = match mode {
        Some(m) => Some(
            m.parse::<Mode>()
                .map_err(|e| errors::msg(format!("mode {m:?}: {e}")))?,
        ),
        None => None,
    };
    let (bits, group_size) = match (bits, group_size, mode.and_then(Mode::fixed)) {
        (Some(b), Some(g), _) => (b, g),
        (None, None, Some(fixed)) => fixed,
        (None, None, None) if mode.is_none() => return Ok(None),
        _ => return Err(errors::msg("affine mode needs both bits and group_size")),
    };
    let params = QuantParams {
        bits,
        group_size,
        mode: mode.unwrap_or(Mode::Affine),
        global_scale: false,
    };
    params.validate().map_err(|e| errors::msg(e.to_string()))?;
    Ok(Some(QuantConfig::uniform(params)))
}

/// Dequantizes the quantized weights of `input` into `output` (as `dtype`,
/// default each weight's scales' dtype).
#[pyfunction]
#[pyo3(signature = (input, output, dtype = None, *, config = None, bits = None,
    group_size = None, mode = None, sync = true, max_shard_size = None))]
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
) -> PyResult<Bound<'py, PyDict>> {
    let dtype = dtype.map(parse_dtype).transpose()?;
    if let Some(d) = dtype.filter(|&d| !DequantizeOptions::accepts_dtype(d)) {
        return Err(errors::msg(format!(
            "dtype {d}: dequantized weights are written as a float dtype of whole bytes (F32, F16, BF16, F64, F8_E4M3, ...)"
        )));
    }
    let mlx = given_params(config.as_deref(), bits, group_size, mode)?;
    let opts = DequantizeOptions::default()
        .with_mlx(mlx)
        .with_dtype(dtype)
        .with_write(WriteOptions::default().with_sync(sync));
    let (summary, written) = py
        .detach(|| -> tensorfile::Result<_> {
            let source = open_input(&input)?;
            let inputs = source.files().into_iter().chain(config.as_deref());
            tensorfile_core::atomic::check_not_input(&output, inputs)?;
            let tensors = source.tensors();
            let metadata = source.metadata()?;
            let (plan, summary) = dequantize_plan(&tensors, metadata.as_ref(), &opts)?;
            let written = tensorfile::transform::write(
                &source,
                &tensors,
                &plan,
                &output,
                max_shard_size,
                &opts.write,
                &(),
            )?;
            Ok((summary, written))
        })
        .map_err(errors::error)?;
    let d = PyDict::new(py);
    d.set_item("input", input.display().to_string())?;
    d.set_item("output", output.display().to_string())?;
    d.set_item("files", shown(&written.files))?;
    d.set_item("index", written.index.map(|p| p.display().to_string()))?;
    let weights: Vec<Bound<'py, PyDict>> = summary
        .dequantized
        .iter()
        .map(|(name, scheme, dtype)| -> PyResult<_> {
            let w = PyDict::new(py);
            w.set_item("name", name)?;
            w.set_item("from", scheme.describe())?;
            w.set_item("dtype", dtype.name())?;
            Ok(w)
        })
        .collect::<PyResult<_>>()?;
    d.set_item("dequantized", weights)?;
    d.set_item("tensors", summary.tensors)?;
    d.set_item("bytes", written.bytes)?;
    Ok(d)
}
