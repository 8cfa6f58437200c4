//! What `inspect --json` says about a PyTorch checkpoint, as JSON: the one
//! schema the CLI prints and the Python package's `inspect` returns. Where a
//! safetensors file has data offsets, a checkpoint has storages: each
//! tensor shows its storage key, offset and strides.

use std::path::Path;

use serde_json::{json, Value};

use crate::checkpoint::{Checkpoint, Format};

/// A tensor's sha256 in hex, when hashes are asked for (`None` otherwise).
pub type Digest<'a> = &'a dyn Fn(&str) -> Option<String>;

/// How the checkpoint is stored, in words.
pub fn format(ckpt: &Checkpoint) -> String {
    match ckpt.format() {
        Format::Zip { prefix } => format!("PyTorch zip checkpoint (directory {prefix:?})"),
        Format::Legacy => "PyTorch legacy checkpoint (before 1.6)".to_string(),
    }
}

/// The checkpoint `ckpt` opened from `file` (of `size` bytes): format, byte
/// order, every tensor (with its sha256 when `digest` gives one), the
/// non-tensor values, parameters.
pub fn checkpoint(file: &Path, size: u64, ckpt: &Checkpoint, digest: Digest<'_>) -> Value {
    let byte_order = if ckpt.is_big_endian() {
        "big-endian"
    } else {
        "little-endian"
    };
    let parameters: u128 = ckpt
        .tensors()
        .map(|t| u128::from(tensorfile::dtype::numel(t.shape()).unwrap_or(0)))
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
        "format": format(ckpt),
        "byte_order": byte_order,
        "tensors": tensors,
        "values": values,
        "parameters": parameters,
    })
}
