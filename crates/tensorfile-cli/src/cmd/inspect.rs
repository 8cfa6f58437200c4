//! `tensorfile inspect [--json] [--hash] FILE`: describe a file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile::{Dtype, FileSource, Header, ReadOptions, SafeTensors};
use tensorfile_core::read_header_from_path;

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
}

/// Largest power of two (up to 4096) dividing `offset`.
fn alignment_of(offset: u64) -> u64 {
    if offset == 0 {
        4096
    } else {
        (1u64 << offset.trailing_zeros()).min(4096)
    }
}

/// Every tensor's sha256, read a piece at a time with a progress bar.
fn hash_all<S: tensorfile::ByteSource>(
    file: &SafeTensors<S>,
) -> Result<std::collections::HashMap<String, String>, Failure> {
    let bar = crate::progress::Bar::bytes(file.header().data_len(), "hashing");
    let mut digests = std::collections::HashMap::new();
    for t in file.tensor_data() {
        digests.insert(t.info().name.to_string(), super::sha256_hex(&t, &bar)?);
    }
    Ok(digests)
}

/// Describes one file; exit 1 when it is invalid or unreadable.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    use tensorfile::InputKind as Kind;
    match super::input_kind(&args.file)? {
        // A model directory or a sharded checkpoint's index: see `set`.
        Kind::SafetensorsSet => {
            args.budgets.refuse_for(&args.file)?;
            return super::set::inspect(&args.file, args.json, args.hash);
        }
        // PyTorch checkpoints are described by their own loader.
        Kind::Pytorch => {
            let load = args
                .budgets
                .apply(tensorfile::pytorch::LoadOptions::default());
            return super::inspect_pytorch::run(&args.file, args.json, args.hash, &load);
        }
        Kind::Gguf => {
            args.budgets.refuse_for(&args.file)?;
            return super::gguf::inspect(&args.file, args.json, args.hash);
        }
        Kind::Safetensors => {}
        other => return Err(super::not_safetensors(&args.file, other).into()),
    }
    let options = ReadOptions::default();
    // Hashing needs the bytes, read with positional reads (a file truncated
    // underneath is an error, not a signal); a summary needs only the
    // header (a remote file is opened with one request for it).
    let (local, remote) = match super::remote::url(&args.file) {
        Some(url) => (None, Some(super::remote::single_file(url, &options)?)),
        None if args.hash => (
            Some(SafeTensors::from_source(
                FileSource::open(&args.file)
                    .map_err(|e| tensorfile::CoreError::io(&args.file, e))?,
                &options,
            )?),
            None,
        ),
        None => (None, None),
    };
    let header_only;
    let header: &Header = match (&local, &remote) {
        (Some(f), _) => f.header(),
        (_, Some(f)) => f.header(),
        _ => {
            header_only = read_header_from_path(&args.file, &options)?;
            &header_only
        }
    };
    // An unreadable input is that error (exit 1), not a misuse of the
    // PyTorch options.
    args.budgets.refuse_for(&args.file)?;
    let data_start = header.data_start();
    let mut per_dtype: BTreeMap<Dtype, (usize, u64)> = BTreeMap::new();
    for t in header.tensors() {
        let slot = per_dtype.entry(t.dtype).or_default();
        slot.0 += 1;
        slot.1 += t.nbytes();
    }

    let digests = match (&local, &remote) {
        (Some(f), _) if args.hash => hash_all(f)?,
        (_, Some(f)) if args.hash => hash_all(f)?,
        _ => std::collections::HashMap::new(),
    };
    let digest = |name: &str| -> Option<String> { digests.get(name).cloned() };
    // The --json description (the library's, which the Python package
    // returns too); the text below says the same from it.
    // A remote file's config.json is looked for beside it, remotely.
    let described = match super::remote::url(&args.file)
        .and_then(|u| tensorfile_remote::dir_of(u, &super::remote::client()).ok())
    {
        Some(dir) => tensorfile::describe::file_at(&args.file, header, &digest, &dir),
        None => tensorfile::describe::file(&args.file, header, &digest),
    };
    if args.json {
        out(described.to_json());
        return Ok(ExitCode::SUCCESS);
    }

    out(format_args!("file: {}", args.file.display()));
    out(format_args!(
        "size: {} bytes (header {} bytes, data {} bytes)",
        data_start + header.data_len(),
        header.header_len(),
        header.data_len()
    ));
    match header.metadata() {
        None => out("metadata: none"),
        Some(m) => {
            out(format_args!("metadata: {} keys", m.len()));
            for (k, v) in m {
                out(format_args!("  {k}: {v}"));
            }
        }
    }
    out(format_args!("tensors: {}", header.len()));
    let width = header
        .tensors()
        .map(|t| super::escape_text(t.name).chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 60);
    out(format_args!(
        "  {:<width$}  {:<11}  {:<20}  offsets",
        "name", "dtype", "shape"
    ));
    for t in header.tensors() {
        let shape = format!("{:?}", t.shape);
        let line = format!(
            "  {:<width$}  {:<11}  {:<20}  [{}, {})",
            super::escape_text(t.name),
            t.dtype.name(),
            shape,
            t.data_offsets.0,
            t.data_offsets.1
        );
        match digest(t.name) {
            Some(h) => out(format_args!("{line}  sha256 {h}")),
            None => out(line),
        }
    }
    super::print_dtypes(&per_dtype);
    out(format_args!("parameters: {}", described.parameters));
    out(format_args!(
        "alignment: data starts at byte {data_start} ({}-byte aligned); {} of {} tensors misaligned for their dtype",
        alignment_of(data_start),
        described.misaligned_tensors,
        header.len()
    ));
    super::quantized::print(&described.quantized, &described.quantized_problem);
    for warning in header.warnings() {
        out(format_args!("warning: {warning}"));
    }
    Ok(ExitCode::SUCCESS)
}
