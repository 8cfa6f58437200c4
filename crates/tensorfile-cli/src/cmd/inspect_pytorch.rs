//! `tensorfile inspect` for PyTorch checkpoints (`.pt`, `.pth`, `.bin`):
//! the same sections as for a safetensors file, from the
//! `tensorfile-pytorch` loader. Where a safetensors file has data offsets,
//! a checkpoint has storages: each tensor shows its storage key and offset.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};
use tensorfile::pytorch::{Checkpoint, Format, LoadOptions};
use tensorfile::Dtype;

use super::{out, Failure};

/// Describes the checkpoint at `file`, loaded with `load`; exit 1 when it
/// is refused.
pub fn run(
    file: &Path,
    as_json: bool,
    hash: bool,
    load: &LoadOptions,
) -> Result<ExitCode, Failure> {
    let ckpt = Checkpoint::open_with(file, load)?;
    let size = std::fs::metadata(file)?.len();
    let format = match ckpt.format() {
        Format::Zip { prefix } => format!("PyTorch zip checkpoint (directory {prefix:?})"),
        Format::Legacy => "PyTorch legacy checkpoint (before 1.6)".to_string(),
    };
    let byte_order = if ckpt.is_big_endian() {
        "big-endian"
    } else {
        "little-endian"
    };
    let mut digests = BTreeMap::new();
    if hash {
        // A piece at a time, read with positional reads.
        let total = ckpt.tensors().map(|t| t.nbytes()).sum();
        let bar = crate::progress::Progress::bytes(total, "hashing");
        for t in ckpt.tensors() {
            digests.insert(t.name(), super::sha256_hex(&t, &bar)?);
        }
    }
    // Names that are exact aliases of one another (tied weights) are one
    // tensor: its parameters are counted once.
    let mut seen = std::collections::HashSet::new();
    let parameters: u128 = ckpt
        .tensors()
        .filter(|t| seen.insert(t.view_key()))
        .map(|t| u128::from(t.numel()))
        .sum();
    let mut per_dtype: BTreeMap<Dtype, (usize, u64)> = BTreeMap::new();
    for t in ckpt.tensors() {
        let slot = per_dtype.entry(t.dtype()).or_default();
        slot.0 += 1;
        slot.1 += t.nbytes();
    }

    if as_json {
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
                if let Some(h) = digests.get(t.name()) {
                    v["sha256"] = Value::String(h.clone());
                }
                v
            })
            .collect();
        let values: serde_json::Map<String, Value> = ckpt
            .values()
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        out(json!({
            "file": file,
            "size": size,
            "format": format,
            "byte_order": byte_order,
            "tensors": tensors,
            "values": values,
            "parameters": parameters,
        }));
        return Ok(ExitCode::SUCCESS);
    }

    out(format_args!("file: {}", file.display()));
    out(format_args!("size: {size} bytes"));
    out(format_args!("format: {format}, {byte_order}"));
    out(format_args!(
        "values: {} (non-tensor entries)",
        ckpt.values().len()
    ));
    for (k, v) in ckpt.values() {
        out(format_args!("  {k}: {v}"));
    }
    out(format_args!("tensors: {}", ckpt.len()));
    let width = ckpt
        .tensors()
        .map(|t| t.name().len())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    out(format_args!(
        "  {:<width$}  {:<11}  {:<20}  storage",
        "name", "dtype", "shape"
    ));
    for t in ckpt.tensors() {
        let shape = format!("{:?}", t.shape());
        let line = format!(
            "  {:<width$}  {:<11}  {:<20}  {:?} + {}{}",
            t.name(),
            t.dtype().name(),
            shape,
            t.storage_key(),
            t.storage_offset(),
            if t.is_contiguous() {
                String::new()
            } else {
                format!(" strides {:?}", t.strides())
            }
        );
        match digests.get(t.name()) {
            Some(h) => out(format_args!("{line}  sha256 {h}")),
            None => out(line),
        }
    }
    super::print_dtypes(&per_dtype);
    out(format_args!("parameters: {parameters}"));
    Ok(ExitCode::SUCCESS)
}
