//! What `inspect --json` says about a safetensors file or set, or a PyTorch
//! checkpoint, as JSON: the one schema the CLI prints and the Python
//! package's `inspect` returns.

use std::path::Path;

use serde_json::{json, Value};

use crate::model::{read_config_from, read_config_source, CONFIG_NAME, TOKENIZER_NAME};
use crate::pytorch::{Checkpoint, Format};
use crate::quant::{int4_group, quantized_weights, QuantConfig, Storage};
use crate::shard::{LocalDir, Location};
use crate::{Dtype, Header, Metadata, ShardedTensors, TensorInfo};

/// A tensor's sha256 in hex, when hashes are asked for (`None` otherwise).
pub type Digest<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The alignment an element type wants in memory.
pub fn natural_alignment(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::C64 => 4,
        d => (u64::from(d.bits()) / 8).max(1),
    }
}

/// MLX parameters: the file's own metadata, else the `quantization` of the
/// config.json at `location` (MLX keeps them there; a location without one
/// gives none).
fn mlx_config(
    location: &dyn Location,
    metadata: Option<&Metadata>,
) -> Result<Option<QuantConfig>, String> {
    if let Some(own) = QuantConfig::from_metadata(metadata).map_err(|e| e.to_string())? {
        return Ok(Some(own));
    }
    let config = location.path_of(CONFIG_NAME);
    let source = match location.open(CONFIG_NAME) {
        Ok(source) => source,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", config.display())),
    };
    let map = read_config_source(&*source, &config).map_err(|e| e.to_string())?;
    QuantConfig::from_config(&map).map_err(|e| format!("{}: {e}", config.display()))
}

/// The quantized weights among `names` (a file's or a model directory's
/// tensors, found with `lookup`) as JSON values, or the problem that stops
/// them being read (a packed MLX weight without parameters, a `.qweight`
/// without scales, ...). `dir` is where a config.json would be; `metadata`
/// the file's, or the shards' together.
///
/// # Errors
/// The problem, in words.
pub fn quantized<'a>(
    dir: &Path,
    metadata: Option<&Metadata>,
    names: impl IntoIterator<Item = &'a str>,
    lookup: impl Fn(&str) -> Option<TensorInfo<'a>>,
) -> Result<Vec<Value>, String> {
    quantized_at(&LocalDir::new(dir, false), metadata, names, lookup)
}

/// [`quantized`], with the config.json read at `location` (a remote
/// directory, say).
///
/// # Errors
/// The problem, in words.
pub fn quantized_at<'a>(
    location: &dyn Location,
    metadata: Option<&Metadata>,
    names: impl IntoIterator<Item = &'a str>,
    lookup: impl Fn(&str) -> Option<TensorInfo<'a>>,
) -> Result<Vec<Value>, String> {
    let mlx = mlx_config(location, metadata)?;
    let weights = quantized_weights(names, lookup, int4_group(metadata), mlx.as_ref())
        .map_err(|e| e.to_string())?;
    Ok(weights
        .iter()
        .map(|w| {
            let (scheme, bits, group, mode) = match w.storage {
                Storage::Int4 { group_size } => ("int4-sym", 4, group_size, None),
                Storage::Mlx(p) => ("mlx", p.bits, p.group_size, Some(p.mode.name())),
                Storage::Plain => ("plain", u64::from(w.dtype.bits()), 0, None),
            };
            let global_scale = matches!(w.storage, Storage::Mlx(p) if p.global_scale);
            json!({
                "name": w.name,
                "scheme": scheme,
                "mode": mode,
                "global_scale": global_scale,
                "bits": bits,
                "group_size": group,
                "logical_shape": w.shape,
                "scales_dtype": w.dtype.name(),
                "bits_per_weight": w.storage.bits_per_weight(w.dtype),
                "parts": w.parts,
            })
        })
        .collect())
}

/// One safetensors file at `path` whose header is `header`: sizes,
/// metadata, every tensor in data order (with its sha256 when `digest`
/// gives one), parameters, alignment, warnings, quantized weights.
pub fn file(path: &Path, header: &Header, digest: Digest<'_>) -> Value {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    file_at(path, header, digest, &LocalDir::new(dir, false))
}

/// [`file`] for a file in `location` (a remote directory, say), where a
/// config.json beside it is looked for.
pub fn file_at(path: &Path, header: &Header, digest: Digest<'_>, location: &dyn Location) -> Value {
    let data_start = header.data_start();
    let misaligned = header
        .tensors()
        .filter(|t| !(data_start + t.data_offsets.0).is_multiple_of(natural_alignment(t.dtype)))
        .count();
    let parameters: u128 = header.tensors().map(|t| u128::from(t.numel())).sum();
    let names = header.tensors().map(|t| t.name);
    let quantized = quantized_at(location, header.metadata(), names, |n| header.get(n));
    let tensors: Vec<Value> = header
        .tensors()
        .map(|t| {
            let mut v = json!({
                "name": t.name,
                "dtype": t.dtype.name(),
                "shape": t.shape,
                "data_offsets": [t.data_offsets.0, t.data_offsets.1],
            });
            if let Some(h) = digest(t.name) {
                v["sha256"] = Value::String(h);
            }
            v
        })
        .collect();
    json!({
        "file": path,
        "size": data_start + header.data_len(),
        "header_len": header.header_len(),
        "metadata": header.metadata(),
        "tensors": tensors,
        "parameters": parameters,
        "data_start": data_start,
        "misaligned_tensors": misaligned,
        "warnings": header.warnings(),
        "quantized": quantized.as_ref().ok(),
        "quantized_problem": quantized.as_ref().err(),
    })
}

/// For a directory with config.json: its tl_arch and whether tokenizer.json
/// is there (`check` verifies them; this only describes).
fn model_summary(path: &Path, set: &ShardedTensors) -> Option<Value> {
    // A set opened from a directory, local or remote (a URL names no file
    // here): its config and tokenizer are read where its shards are.
    let name = path.file_name()?.to_string_lossy();
    if name.ends_with(".json") || name.ends_with(".safetensors") {
        return None;
    }
    let config = read_config_from(&**set.location(), CONFIG_NAME).ok()?;
    Some(json!({
        "tl_arch": config.get("tl_arch"),
        "tokenizer": set.location().open(TOKENIZER_NAME).is_ok(),
    }))
}

/// A set opened from `path` (a directory or an index): the model's config
/// (for a directory), each shard, every tensor with its shard (and sha256
/// when `digest` gives one), totals, quantized weights, warnings.
pub fn set(path: &Path, set: &ShardedTensors, digest: Digest<'_>) -> Value {
    let names = set.infos().map(|(_, t)| t.name);
    // Without the shards' metadata (say, two shards disagree) the int4
    // group and MLX parameters are unknown: say why instead of guessing.
    let quantized = match set.metadata() {
        Ok(metadata) => quantized_at(&**set.location(), Some(&metadata), names, |n| set.info(n)),
        Err(e) => Err(e.to_string()),
    };
    let shards: Vec<Value> = set
        .shards()
        .iter()
        .map(|s| {
            let h = s.header();
            json!({
                "name": s.name(),
                "tensors": h.len(),
                "header_len": h.header_len(),
                "data_bytes": h.data_len(),
                "size": h.data_start() + h.data_len(),
                "metadata": h.metadata(),
            })
        })
        .collect();
    let tensors: Vec<Value> = set
        .infos()
        .map(|(shard, t)| {
            let mut v = json!({
                "name": t.name,
                "dtype": t.dtype.name(),
                "shape": t.shape,
                "shard": shard.name(),
                "data_offsets": [t.data_offsets.0, t.data_offsets.1],
            });
            if let Some(h) = digest(t.name) {
                v["sha256"] = Value::String(h);
            }
            v
        })
        .collect();
    json!({
        "path": path,
        "index": set.index_path(),
        "index_metadata": set.index_metadata(),
        "model": model_summary(path, set),
        "shards": shards,
        "tensors": tensors,
        "totals": {
            "shards": set.shards().len(),
            "tensors": set.len(),
            "parameters": set.parameters(),
            "data_bytes": set.data_len(),
            "size": set.file_len(),
        },
        "quantized": quantized.as_ref().ok(),
        "quantized_problem": quantized.as_ref().err(),
        "warnings": set.warnings(),
    })
}

/// How a PyTorch checkpoint is stored, in words.
pub fn checkpoint_format(ckpt: &Checkpoint) -> String {
    match ckpt.format() {
        Format::Zip { prefix } => format!("PyTorch zip checkpoint (directory {prefix:?})"),
        Format::Legacy => "PyTorch legacy checkpoint (before 1.6)".to_string(),
    }
}

/// A PyTorch checkpoint `ckpt` opened from `file` (of `size` bytes): format,
/// byte order, every tensor (with its storage key, offset and strides where
/// a safetensors file has data offsets, and its sha256 when `digest` gives
/// one), the non-tensor values, parameters (names that are exact aliases of
/// one another, tied weights, counted once).
pub fn checkpoint(file: &Path, size: u64, ckpt: &Checkpoint, digest: Digest<'_>) -> Value {
    let byte_order = if ckpt.is_big_endian() {
        "big-endian"
    } else {
        "little-endian"
    };
    let mut seen = std::collections::HashSet::new();
    let parameters: u128 = ckpt
        .tensors()
        .filter(|t| seen.insert(t.view_key()))
        .map(|t| u128::from(t.numel()))
        .sum();
    let tensors: Vec<Value> = ckpt
        .tensors()
        .map(|t| {
            let mut v = json!({
                "name": t.name(),
                "dtype": t.dtype().name(),
                "shape": t.shape(),
                "nbytes": t.nbytes(),
                "storage": t.storage_key(),
                "storage_offset": t.storage_offset(),
                "strides": t.strides(),
            });
            if let Some(h) = digest(t.name()) {
                v["sha256"] = Value::String(h);
            }
            v
        })
        .collect();
    let values: serde_json::Map<String, Value> = ckpt
        .values()
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({
        "file": file,
        "size": size,
        "format": checkpoint_format(ckpt),
        "byte_order": byte_order,
        "tensors": tensors,
        "values": values,
        "parameters": parameters,
    })
}
