//! What `inspect` says about quantized weights: logical shapes and bits per
//! weight. Kept apart from `inspect` so its single-file branch only calls
//! [`describe`].

use std::path::Path;

use serde_json::{json, Value};
use tensorfile::quant::{int4_group, quantized_weights, QuantConfig, Storage};
use tensorfile::Header;

/// MLX parameters for a file: its own metadata, else the `quantization` of
/// a config.json beside it (MLX keeps them there).
fn mlx_config(path: &Path, header: &Header) -> Result<Option<QuantConfig>, String> {
    if let Some(own) = QuantConfig::from_metadata(header.metadata())? {
        return Ok(Some(own));
    }
    let config = path.with_file_name(tensorfile::model::CONFIG_NAME);
    if !config.is_file() {
        return Ok(None);
    }
    let map = tensorfile::model::read_config(&config).map_err(|e| e.to_string())?;
    QuantConfig::from_config(&map).map_err(|e| format!("{}: {e}", config.display()))
}

/// The quantized weights of a file as JSON values, or the problem that
/// stops them being read (a packed MLX weight without parameters, a
/// `.qweight` without scales, ...).
pub fn describe(path: &Path, header: &Header) -> Result<Vec<Value>, String> {
    let mlx = mlx_config(path, header)?;
    let names = header.tensors().map(|t| t.name);
    let weights = quantized_weights(
        names,
        |n| header.get(n),
        int4_group(header.metadata()),
        mlx.as_ref(),
    )
    .map_err(|e| e.to_string())?;
    Ok(weights
        .iter()
        .map(|w| {
            let (scheme, bits, group, mode) = match w.storage {
                Storage::Int4 { group_size } => ("int4-sym", 4, group_size, None),
                Storage::Mlx(p) => ("mlx", p.bits, p.group_size, Some(p.mode.name())),
                Storage::Plain => ("plain", u64::from(w.dtype.bits()), 0, None),
            };
            json!({
                "name": w.name,
                "scheme": scheme,
                "mode": mode,
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

/// One text line per quantized weight.
pub fn lines(weights: &[Value]) -> Vec<String> {
    weights
        .iter()
        .map(|w| {
            let mode = w["mode"]
                .as_str()
                .map(|m| format!(" {m}"))
                .unwrap_or_default();
            format!(
                "  {}  {}{mode} {}-bit, groups of {}  logical shape {}  {:.3} bits/weight",
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
