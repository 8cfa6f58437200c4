//! `tensorfile inspect [--json] [--hash] FILE`: describe a file (the
//! library's [`tensorfile::ops::inspect`]; GGUF files' text is
//! [`super::gguf::print`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile::ops::inspect::{
    inspect, CheckpointDescription, FileDescription, InspectReport, InspectRequest, SetDescription,
};
use tensorfile::{Dtype, Metadata};

use super::{out, Failure};

/// Arguments of `inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// Print JSON: header_len, metadata, tensors (in data order) and totals.
    #[arg(long)]
    json: bool,
    /// Add each tensor's sha256 (reads every byte).
    #[arg(long)]
    hash: bool,
    /// The file to describe, or a model directory or sharded index; an
    /// s3://, hf:// or http(s):// URL is read with range requests (the
    /// header only, unless --hash).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    budgets: super::convert_pytorch::BudgetArgs,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(&self.file), self.json)
    }

    /// The request: the file, whether to hash, and how it is opened (the
    /// command's remote client, the PyTorch budgets).
    fn request(&self) -> InspectRequest {
        let load = self
            .budgets
            .apply(tensorfile::pytorch::LoadOptions::default());
        InspectRequest::new(&self.file)
            .with_hash(self.hash)
            .with_open(
                super::remote::open_options(&tensorfile::ReadOptions::default()).with_pytorch(load),
            )
    }
}

/// Describes one file; exit 1 when it is invalid or unreadable.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    use tensorfile::InputKind as Kind;
    match super::input_kind(&args.file)? {
        // The PyTorch budgets are refused for a set before it is read, for
        // a file after (an unreadable file is that error, exit 1).
        Kind::SafetensorsSet => args.budgets.refuse_for(&args.file)?,
        Kind::Safetensors | Kind::Pytorch => {}
        Kind::Gguf => args.budgets.refuse_for(&args.file)?,
        other => return Err(super::not_safetensors(&args.file, other).into()),
    }
    let bar = crate::progress::Bar::bytes_when_told("hashing", |m| super::warn(m));
    let report = inspect(&args.request(), &bar)?;
    drop(bar);
    if let InspectReport::File(_) = report {
        args.budgets.refuse_for(&args.file)?;
    }
    if args.json {
        out(report.to_json());
        return Ok(ExitCode::SUCCESS);
    }
    match &report {
        InspectReport::File(d) => print_file(d),
        InspectReport::Set {
            description,
            metadata,
        } => print_set(description, metadata),
        InspectReport::Checkpoint {
            description,
            values,
            contiguous,
        } => print_checkpoint(description, values, contiguous),
        InspectReport::Gguf {
            description,
            header,
        } => super::gguf::print(description, header),
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Largest power of two (up to 4096) dividing `offset`.
fn alignment_of(offset: u64) -> u64 {
    if offset == 0 {
        4096
    } else {
        (1u64 << offset.trailing_zeros()).min(4096)
    }
}

/// Tensors and bytes per dtype, from the dtype names and sizes of a
/// description's tensors.
fn per_dtype<'a>(tensors: impl Iterator<Item = (&'a str, u64)>) -> BTreeMap<Dtype, (usize, u64)> {
    let mut per_dtype: BTreeMap<Dtype, (usize, u64)> = BTreeMap::new();
    for (name, bytes) in tensors {
        if let Some(dtype) = Dtype::from_name(name) {
            let slot = per_dtype.entry(dtype).or_default();
            slot.0 += 1;
            slot.1 += bytes;
        }
    }
    per_dtype
}

/// The `metadata:` lines.
fn print_metadata(metadata: Option<&Metadata>) {
    match metadata {
        Some(m) if !m.is_empty() => {
            out(format_args!("metadata: {} keys", m.len()));
            for (k, v) in m {
                out(format_args!("  {k}: {v}"));
            }
        }
        _ => out("metadata: none"),
    }
}

/// A safetensors file, as text.
fn print_file(d: &FileDescription) {
    let data_len = d.size - d.data_start;
    out(format_args!("file: {}", d.file));
    out(format_args!(
        "size: {} bytes (header {} bytes, data {} bytes)",
        d.size, d.header_len, data_len
    ));
    // A file's metadata is printed as it is, even when empty.
    match &d.metadata {
        None => out("metadata: none"),
        Some(m) => {
            out(format_args!("metadata: {} keys", m.len()));
            for (k, v) in m {
                out(format_args!("  {k}: {v}"));
            }
        }
    }
    out(format_args!("tensors: {}", d.tensors.len()));
    let width = d
        .tensors
        .iter()
        .map(|t| super::escape_text(&t.name).chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    out(format_args!(
        "  {:<width$}  {:<11}  {:<20}  offsets",
        "name", "dtype", "shape"
    ));
    for t in &d.tensors {
        let shape = format!("{:?}", t.shape);
        let line = format!(
            "  {:<width$}  {:<11}  {:<20}  [{}, {})",
            super::escape_text(&t.name),
            t.dtype,
            shape,
            t.data_offsets[0],
            t.data_offsets[1]
        );
        match &t.sha256 {
            Some(h) => out(format_args!("{line}  sha256 {h}")),
            None => out(line),
        }
    }
    super::print_dtypes(&per_dtype(
        d.tensors
            .iter()
            .map(|t| (t.dtype.as_str(), t.data_offsets[1] - t.data_offsets[0])),
    ));
    out(format_args!("parameters: {}", d.parameters));
    out(format_args!(
        "alignment: data starts at byte {} ({}-byte aligned); {} of {} tensors misaligned for their dtype",
        d.data_start,
        alignment_of(d.data_start),
        d.misaligned_tensors,
        d.tensors.len()
    ));
    super::quantized::print(&d.quantized, &d.quantized_problem);
    for warning in &d.warnings {
        out(format_args!("warning: {warning}"));
    }
}

/// A set (a model directory or an index), as text: the model's config,
/// each shard, the shards' metadata, every tensor with its shard, totals.
fn print_set(d: &SetDescription, metadata: &Result<Metadata, String>) {
    out(format_args!("path: {}", d.path));
    if let Some(model) = &d.model {
        out(format_args!(
            "model: tl_arch {}, tokenizer.json {}",
            model.tl_arch.as_deref().unwrap_or("none"),
            if model.tokenizer { "present" } else { "absent" }
        ));
    }
    match &d.index {
        Some(index) => out(format_args!("index: {index}")),
        None => out("index: none (a single file)"),
    }
    out(format_args!("shards: {}", d.shards.len()));
    for s in &d.shards {
        out(format_args!(
            "  {}  {} tensors, {} data bytes, {} bytes",
            s.name, s.tensors, s.data_bytes, s.size
        ));
    }
    match metadata {
        Ok(m) => print_metadata(Some(m)),
        Err(e) => out(format_args!("metadata: {e}")),
    }
    out(format_args!("tensors: {}", d.tensors.len()));
    let width = d
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    out(format_args!(
        "  {:<width$}  {:<11}  {:<20}  shard",
        "name", "dtype", "shape"
    ));
    for t in &d.tensors {
        let line = format!(
            "  {:<width$}  {:<11}  {:<20}  {}",
            t.name,
            t.dtype,
            format!("{:?}", t.shape),
            t.shard.as_deref().unwrap_or_default()
        );
        match &t.sha256 {
            Some(h) => out(format_args!("{line}  sha256 {h}")),
            None => out(line),
        }
    }
    super::print_dtypes(&per_dtype(
        d.tensors
            .iter()
            .map(|t| (t.dtype.as_str(), t.data_offsets[1] - t.data_offsets[0])),
    ));
    let totals = &d.totals;
    out(format_args!(
        "totals: {} shards, {} tensors, {} parameters, {} data bytes, {} bytes",
        totals.shards, totals.tensors, totals.parameters, totals.data_bytes, totals.size
    ));
    super::quantized::print(&d.quantized, &d.quantized_problem);
    for warning in &d.warnings {
        out(format_args!("warning: {warning}"));
    }
}

/// A PyTorch checkpoint, as text: the same sections as for a safetensors
/// file, with each tensor's storage key and offset where a file has data
/// offsets.
fn print_checkpoint(d: &CheckpointDescription, values: &[(String, String)], contiguous: &[bool]) {
    out(format_args!("file: {}", d.file));
    out(format_args!("size: {} bytes", d.size));
    out(format_args!("format: {}, {}", d.format, d.byte_order));
    out(format_args!(
        "values: {} (non-tensor entries)",
        values.len()
    ));
    for (k, v) in values {
        out(format_args!("  {k}: {v}"));
    }
    out(format_args!("tensors: {}", d.tensors.len()));
    let width = d
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    out(format_args!(
        "  {:<width$}  {:<11}  {:<20}  storage",
        "name", "dtype", "shape"
    ));
    for (i, t) in d.tensors.iter().enumerate() {
        let strides = if contiguous.get(i).copied().unwrap_or(true) {
            String::new()
        } else {
            format!(" strides {:?}", t.strides)
        };
        let line = format!(
            "  {:<width$}  {:<11}  {:<20}  {:?} + {}{strides}",
            t.name,
            t.dtype,
            format!("{:?}", t.shape),
            t.storage,
            t.storage_offset,
        );
        match &t.sha256 {
            Some(h) => out(format_args!("{line}  sha256 {h}")),
            None => out(line),
        }
    }
    super::print_dtypes(&per_dtype(
        d.tensors.iter().map(|t| (t.dtype.as_str(), t.nbytes)),
    ));
    out(format_args!("parameters: {}", d.parameters));
}
