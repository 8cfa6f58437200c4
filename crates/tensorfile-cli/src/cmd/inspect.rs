//! `tensorfile inspect [--json] [--hash] FILE`: describe a file (the
//! library's [`tensorfile_ops::inspect`]; GGUF files' text is
//! [`super::gguf::print`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile::{Dtype, Metadata};
use tensorfile_ops::inspect::{
    inspect, CheckpointDescription, FileDescription, InspectReport, InspectRequest, SetDescription,
};

use super::words::{bytes, count, counted, plural, table, Align};
use super::{escape_text, out, Failure};

/// Arguments of `inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of text (docs/commands/inspect.md).
    ///
    /// A file's keys: data_start, file, header_len, metadata,
    /// misaligned_tensors, parameters, quantized, quantized_problem, size,
    /// tensors (in data order), warnings. A set's keys: index,
    /// index_metadata, model, path, quantized, quantized_problem, shards,
    /// tensors, totals, warnings. A PyTorch checkpoint's keys: byte_order,
    /// file, format, parameters, size, tensors, values.
    #[arg(long)]
    json: bool,
    /// Add each tensor's sha256 (reads every byte).
    #[arg(long)]
    hash: bool,
    /// The file to describe, or a model directory or sharded index; an
    /// s3://, gs://, az://, hf:// or http(s):// URL is read with range requests (the
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

/// The `metadata:` lines: how many keys, then each key and value.
fn print_metadata(m: &Metadata) {
    out(format_args!("metadata: {}", plural(m.len() as u64, "key")));
    for (k, v) in m {
        out(format_args!("  {k}: {v}"));
    }
}

/// A table of tensors under a `tensors:` line: a heading row (name,
/// dtype, shape, `last`), then one row per tensor whose cells are its
/// name, dtype, shape and `last`, its sha256 after them when hashed.
fn print_tensors<'a>(
    last: &str,
    tensors: impl ExactSizeIterator<Item = (&'a str, &'a str, &'a [u64], String, Option<&'a str>)>,
) {
    out(format_args!("tensors: {}", tensors.len()));
    let mut rows = vec![vec![
        "name".to_string(),
        "dtype".into(),
        "shape".into(),
        last.to_string(),
    ]];
    for (name, dtype, shape, end, sha256) in tensors {
        let mut row = vec![
            escape_text(name).into_owned(),
            escape_text(dtype).into_owned(),
            format!("{shape:?}"),
            end,
        ];
        if let Some(h) = sha256 {
            row.push(format!("sha256 {h}"));
        }
        rows.push(row);
    }
    for line in table(&rows, &[]) {
        out(format_args!("  {line}"));
    }
}

/// A safetensors file, as text.
fn print_file(d: &FileDescription) {
    let data_len = d.size - d.data_start;
    out(format_args!("file: {}", d.file));
    out(format_args!(
        "size: {}; header {}, data {}",
        bytes(d.size),
        bytes(d.header_len),
        bytes(data_len)
    ));
    // A file's metadata is printed as it is, even when empty.
    match &d.metadata {
        None => out("metadata: none"),
        Some(m) => print_metadata(m),
    }
    print_tensors(
        "offsets",
        d.tensors.iter().map(|t| {
            let [begin, end] = t.data_offsets;
            let at = format!("[{begin}, {end})");
            (&*t.name, &*t.dtype, &t.shape[..], at, t.sha256.as_deref())
        }),
    );
    super::print_dtypes(&per_dtype(
        d.tensors
            .iter()
            .map(|t| (t.dtype.as_str(), t.data_offsets[1] - t.data_offsets[0])),
    ));
    out(format_args!("parameters: {}", count(d.parameters)));
    let total = d.tensors.len() as u64;
    out(format_args!(
        "alignment: data starts at byte {} ({}-byte aligned); {} of {} misaligned for {} dtype",
        d.data_start,
        alignment_of(d.data_start),
        d.misaligned_tensors,
        plural(total, "tensor"),
        if total == 1 { "its" } else { "their" }
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
    let rows: Vec<Vec<String>> = d
        .shards
        .iter()
        .map(|s| {
            vec![
                escape_text(&s.name).into_owned(),
                plural(s.tensors as u64, "tensor"),
                format!("data {}", bytes(s.data_bytes)),
                format!("file {}", bytes(s.size)),
            ]
        })
        .collect();
    for line in table(&rows, &[Align::Left, Align::Right]) {
        out(format_args!("  {line}"));
    }
    match metadata {
        Ok(m) if !m.is_empty() => print_metadata(m),
        Ok(_) => out("metadata: none"),
        Err(e) => out(format_args!("metadata: {e}")),
    }
    print_tensors(
        "shard",
        d.tensors.iter().map(|t| {
            let shard = escape_text(t.shard.as_deref().unwrap_or_default()).into_owned();
            (
                &*t.name,
                &*t.dtype,
                &t.shape[..],
                shard,
                t.sha256.as_deref(),
            )
        }),
    );
    super::print_dtypes(&per_dtype(
        d.tensors
            .iter()
            .map(|t| (t.dtype.as_str(), t.data_offsets[1] - t.data_offsets[0])),
    ));
    let totals = &d.totals;
    out(format_args!(
        "totals: {}, {}, {}, {} of data, {} in all",
        plural(totals.shards as u64, "shard"),
        plural(totals.tensors as u64, "tensor"),
        counted(totals.parameters, "parameter"),
        bytes(totals.data_bytes),
        bytes(totals.size)
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
    out(format_args!("size: {}", bytes(d.size)));
    out(format_args!("format: {}, {}", d.format, d.byte_order));
    out(format_args!(
        "values: {} (non-tensor entries)",
        values.len()
    ));
    for (k, v) in values {
        out(format_args!("  {k}: {v}"));
    }
    print_tensors(
        "storage",
        d.tensors.iter().enumerate().map(|(i, t)| {
            let strides = if contiguous.get(i).copied().unwrap_or(true) {
                String::new()
            } else {
                format!(" strides {:?}", t.strides)
            };
            let at = format!("{:?} + {}{strides}", t.storage, t.storage_offset);
            (&*t.name, &*t.dtype, &t.shape[..], at, t.sha256.as_deref())
        }),
    );
    super::print_dtypes(&per_dtype(
        d.tensors.iter().map(|t| (t.dtype.as_str(), t.nbytes)),
    ));
    out(format_args!("parameters: {}", count(d.parameters)));
}
