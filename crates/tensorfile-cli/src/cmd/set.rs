//! `inspect` for a set of tensors given as a directory or an index (not a
//! subcommand: the command dispatches here).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use tensorfile::{Dtype, ReadOptions};

use super::{out, Failure};

/// Describes a set: the model's config (for a directory), each shard, totals
/// across shards, and every tensor with its shard.
pub fn inspect(path: &Path, json: bool, hash: bool) -> Result<ExitCode, Failure> {
    // Read, not mapped: hashing reads every byte, and a file truncated
    // underneath must be an error, not a signal.
    let set = super::remote::open_set(path, &ReadOptions::default())?;
    let mut digests = std::collections::HashMap::new();
    if hash {
        let total = set.shards().iter().map(|s| s.header().data_len()).sum();
        let bar = crate::progress::Bar::bytes(total, "hashing");
        for t in set.tensor_data() {
            digests.insert(t.info().name, super::sha256_hex(&t, &bar)?);
        }
    }
    let digest = |name: &str| -> Option<String> { digests.get(name).cloned() };
    // The --json description (the library's, which the Python package
    // returns too); the text below says the same.
    let described = tensorfile::describe::set(path, &set, &digest);
    if json {
        out(described.to_json());
        return Ok(ExitCode::SUCCESS);
    }
    let mut per_dtype: BTreeMap<Dtype, (usize, u64)> = BTreeMap::new();
    for (_, t) in set.infos() {
        let slot = per_dtype.entry(t.dtype).or_default();
        slot.0 += 1;
        slot.1 += t.nbytes();
    }

    out(format_args!("path: {}", path.display()));
    if let Some(model) = &described.model {
        out(format_args!(
            "model: tl_arch {}, tokenizer.json {}",
            model.tl_arch.as_deref().unwrap_or("none"),
            if model.tokenizer { "present" } else { "absent" }
        ));
    }
    match set.index_path() {
        Some(index) => out(format_args!("index: {}", index.display())),
        None => out("index: none (a single file)"),
    }
    out(format_args!("shards: {}", set.shards().len()));
    for s in set.shards() {
        let h = s.header();
        out(format_args!(
            "  {}  {} tensors, {} data bytes, {} bytes",
            s.name(),
            h.len(),
            h.data_len(),
            h.data_start() + h.data_len()
        ));
    }
    match set.metadata() {
        Ok(m) if m.is_empty() => out("metadata: none"),
        Ok(m) => {
            out(format_args!("metadata: {} keys", m.len()));
            for (k, v) in &m {
                out(format_args!("  {k}: {v}"));
            }
        }
        Err(e) => out(format_args!("metadata: {e}")),
    }
    out(format_args!("tensors: {}", set.len()));
    let width = set
        .infos()
        .map(|(_, t)| t.name.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    out(format_args!(
        "  {:<width$}  {:<11}  {:<20}  shard",
        "name", "dtype", "shape"
    ));
    for (shard, t) in set.infos() {
        let line = format!(
            "  {:<width$}  {:<11}  {:<20}  {}",
            t.name,
            t.dtype.name(),
            format!("{:?}", t.shape),
            shard.name()
        );
        match digest(t.name) {
            Some(h) => out(format_args!("{line}  sha256 {h}")),
            None => out(line),
        }
    }
    super::print_dtypes(&per_dtype);
    out(format_args!(
        "totals: {} shards, {} tensors, {} parameters, {} data bytes, {} bytes",
        set.shards().len(),
        set.len(),
        set.parameters(),
        set.data_len(),
        set.file_len()
    ));
    super::quantized::print(&described.quantized, &described.quantized_problem);
    for warning in set.warnings() {
        out(format_args!("warning: {warning}"));
    }
    Ok(ExitCode::SUCCESS)
}
