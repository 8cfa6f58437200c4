//! What `inspect` says about quantized weights: logical shapes and bits per
//! weight, for a single file and for a model directory or sharded set
//! alike ([`describe`], then [`print()`]).

use std::path::Path;

use serde_json::{json, Value};
use tensorfile::quant::{int4_group, quantized_weights, QuantConfig, Storage};
use tensorfile::{Metadata, TensorInfo};

/// MLX parameters: the file's own metadata, else the `quantization` of the
/// config.json in `dir` (MLX keeps them there).
fn mlx_config(dir: &Path, metadata: Option<&Metadata>) -> Result<Option<QuantConfig>, String> {
    if let Some(own) = QuantConfig::from_metadata(metadata).map_err(|e| e.to_string())? {
        return Ok(Some(own));
    }
    let config = dir.join(tensorfile::model::CONFIG_NAME);
    if !config.is_file() {
        return Ok(None);
    }
    let map = tensorfile::model::read_config(&config).map_err(|e| e.to_string())?;
    QuantConfig::from_config(&map).map_err(|e| format!("{}: {e}", config.display()))
}

/// The quantized weights among `names` (a file's or a model directory's
/// tensors, found with `lookup`) as JSON values, or the problem that stops
/// them being read (a packed MLX weight without parameters, a `.qweight`
/// without scales, ...). `dir` is where a config.json would be; `metadata`
/// the file's, or the shards' together.
pub fn describe<'a>(
    dir: &Path,
    metadata: Option<&Metadata>,
    names: impl IntoIterator<Item = &'a str>,
    lookup: impl Fn(&str) -> Option<TensorInfo<'a>>,
) -> Result<Vec<Value>, String> {
    let mlx = mlx_config(dir, metadata)?;
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

/// Prints what [`describe`] found, under a "quantized weights" heading.
pub fn print(found: &Result<Vec<Value>, String>) {
    match found {
        Ok(q) if q.is_empty() => {}
        Ok(q) => {
            super::out(format_args!("quantized weights: {}", q.len()));
            lines(q).into_iter().for_each(super::out);
        }
        Err(problem) => super::out(format_args!("quantized weights: cannot be read: {problem}")),
    }
}

/// One text line per quantized weight.
fn lines(weights: &[Value]) -> Vec<String> {
    let width = weights
        .iter()
        .filter_map(|w| w["name"].as_str().map(str::len))
        .max()
        .unwrap_or(0)
        .min(60);
    weights
        .iter()
        .map(|w| {
            let mode = w["mode"]
                .as_str()
                .map(|m| format!(" {m}"))
                .unwrap_or_default();
            let global = if w["global_scale"] == true {
                ", global scale"
            } else {
                ""
            };
            format!(
                "  {:<width$}  {}{mode} {}-bit, groups of {}{global}  logical shape {}  {:.3} bits/weight",
                w["name"].as_str().unwrap_or(""),
                w["scheme"].as_str().unwrap_or(""),
                w["bits"],
                w["group_size"],
                w["logical_shape"],
                w["bits_per_weight"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}
