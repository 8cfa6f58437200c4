//! `tensorfile inspect` for PyTorch checkpoints (`.pt`, `.pth`, `.bin`):
//! the same sections as for a safetensors file, from the
//! `tensorfile-pytorch` loader. Where a safetensors file has data offsets,
//! a checkpoint has storages: each tensor shows its storage key and offset.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use tensorfile::pytorch::{Checkpoint, LoadOptions};
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
    let mut digests = BTreeMap::new();
    if hash {
        // A piece at a time, read with positional reads.
        let total = ckpt.tensors().map(|t| t.nbytes()).sum();
        let bar = crate::progress::Bar::bytes(total, "hashing");
        for t in ckpt.tensors() {
            digests.insert(t.name(), super::sha256_hex(&t, &bar)?);
        }
    }
    let mut per_dtype: BTreeMap<Dtype, (usize, u64)> = BTreeMap::new();
    for t in ckpt.tensors() {
        let slot = per_dtype.entry(t.dtype()).or_default();
        slot.0 += 1;
        slot.1 += t.nbytes();
    }

    let digest = |name: &str| -> Option<String> { digests.get(name).cloned() };
    // The --json description (the library's, which the Python package
    // returns too); the text below says the same from it.
    let described = tensorfile::describe::checkpoint(file, size, &ckpt, &digest);
    if as_json {
        out(described.to_json());
        return Ok(ExitCode::SUCCESS);
    }

    out(format_args!("file: {}", file.display()));
    out(format_args!("size: {size} bytes"));
    out(format_args!(
        "format: {}, {}",
        described.format, described.byte_order
    ));
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
    out(format_args!("parameters: {}", described.parameters));
    Ok(ExitCode::SUCCESS)
}
