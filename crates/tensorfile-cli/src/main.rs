//! The `tensorfile` command: a thin layer over the `tensorfile` library.
//!
//! Exit status: 0 on success, 1 when an input is invalid, refused or
//! unreadable, 2 on a usage error. Results go to stdout; errors go to stderr
//! as one line each.

// Doc comments here are clap's help text, printed as written: `<group>` in
// `int4-g<group>-sym` is literal, not HTML.
#![allow(rustdoc::invalid_html_tags)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
#[cfg(feature = "plot")]
mod plot;
mod progress;
mod signals;

/// The top of the help: what the tool does, in lines of 80 columns (as
/// each command's summary, the first paragraph of its doc comment, fits
/// one line of the listing; its detail follows in the command's --help).
const ABOUT: &str = "\
Safetensors models on the command line: validate, inspect, convert (PyTorch,
GGUF, numpy), quantize, shard and merge, diff, stats, hash and verify, fetch";

#[derive(Parser)]
#[command(name = "tensorfile", version, about = ABOUT, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Threads for parallel work (casts, loads, quantization, conversion
    /// writes). Default: the TENSORFILE_THREADS environment variable, else
    /// one per core.
    #[arg(long, global = true, value_name = "N")]
    threads: Option<usize>,
    #[command(flatten)]
    remote: cmd::remote::Args,
}

#[derive(Subcommand)]
enum Command {
    /// Check files against the format's reader rules.
    ///
    /// A safetensors file, a set (a directory or an index: every shard's
    /// header and the index) or a GGUF file; local or at a URL, only the
    /// headers are read. Exit 0 when every file is valid, 1 when any is not.
    Validate(cmd::validate::Args),
    /// Describe a file: tensors, dtypes, metadata, alignment.
    ///
    /// A safetensors file, a set (a model directory or an index), a PyTorch
    /// checkpoint or a GGUF file: its tensors, dtypes, parameters,
    /// metadata, alignment and quantized weights; for a set, each shard and
    /// the totals.
    Inspect(cmd::inspect::Args),
    /// Write the canonical file with the same tensors and metadata.
    Rewrite(cmd::rewrite::Args),
    /// Set or remove metadata and rename tensors, in place when it fits.
    ///
    /// The result is the file `rewrite --align A` gives for the edited
    /// metadata and names (A: the file's alignment, 8, 64 or 4096). When
    /// FILE is already that canonical file, the new header pads to the old
    /// one's length within the first 4096 bytes and no tensor moves (a
    /// rename keeping the order), only the header is written: one write at
    /// offset 0, then synced. Otherwise, or with --rewrite, FILE is
    /// rewritten atomically; --json says which and why.
    ///
    /// An in-place edit is the one exception to "readers keep the old
    /// file's bytes": a process that has FILE open or mapped sees the new
    /// header from then on (never changed data), and one reading the header
    /// at the very instant of the write may see a mix of old and new. A
    /// symbolic link is never edited in place: its file is rewritten.
    Edit(cmd::edit::Args),
    /// Check a model directory's files and tensors against its config.
    ///
    /// The files a model directory needs, and every tensor against the
    /// architecture config.json names (a course `tl_arch` or a Hugging
    /// Face class); with --contract, a course contract too.
    Check(cmd::check::Args),
    /// Split a file into shards with an index, as huggingface_hub does.
    Shard(cmd::shard::Args),
    /// Join a sharded checkpoint into one file; consolidate torch DCP
    ///
    /// A directory holding the rank files of a torch distributed checkpoint
    /// (torch.distributed.checkpoint's HuggingFaceStorageWriter with
    /// save_distributed=True: shard-R-model-K-of-N.safetensors, pieces of
    /// tensors with their offsets in DCP_SHARDING_INFO) is recognised and
    /// consolidated: checked whole first (pieces agree on dtype, do not
    /// overlap, cover every tensor), then each tensor is assembled from its
    /// pieces with positional reads and writes, never held whole. The
    /// tensors are those torch's own consolidation writes, byte for byte.
    Merge(cmd::merge::Args),
    /// Convert between safetensors, PyTorch, GGUF and numpy files
    ///
    /// What IN is comes from its first bytes (a directory from the weights
    /// it holds); what is written from IN and OUT's name:
    ///
    ///   safetensors IN (a file, an index or a model directory): OUT.safetensors,
    ///     its float tensors cast to --dtype, or without it the canonical
    ///     rewrite; OUT.npz or OUT.npy: numpy arrays; a Hugging Face model
    ///     directory as IN and OUT.gguf: a GGUF file (--type, --raw).
    ///   PyTorch IN (.pt, .pth, .bin, or a sharded .bin set): OUT.safetensors,
    ///     read without executing anything.
    ///   GGUF IN: OUT a directory: a Hugging Face model directory; or, as it
    ///     is, OUT.safetensors or OUT.npz.
    ///   numpy IN (.npz, .npy): OUT.safetensors.
    ///
    /// A set in gives a set out: OUT is a directory with one shard per input
    /// shard (or cut at --max-shard-size).
    #[command(verbatim_doc_comment)]
    Convert(cmd::convert::Args),
    /// Quantize weights: int4-g<group>-sym or an MLX scheme.
    ///
    /// Quantizes the 2-D weight matrices of a safetensors file or set (and
    /// with an MLX scheme the expert stacks) into int4 (the format page's
    /// int4-g<group>-sym) or MLX's formats (affine, mxfp4, mxfp8, nvfp4),
    /// as MLX's mx.quantize does, byte for byte. Norms, embeddings and the
    /// other tensors are copied as they are.
    Quantize(cmd::quantize::Args),
    /// Turn quantized weights (int4, MLX) back into floats.
    ///
    /// int4 files say their group in their metadata. MLX parameters come
    /// from --config (a config.json's `quantization`), from --bits,
    /// --group-size and --mode, from IN's config.json when IN is a model
    /// directory or a file in one, or from the metadata of a file this tool
    /// quantized; they are never guessed from the shapes.
    Dequantize(cmd::dequantize::Args),
    /// sha256 of files, data sections and tensors; write a manifest.
    ///
    /// The sha256 of each file (the Hub's LFS object id), of each
    /// safetensors data section (ModelSpec's hash_sha256) and with
    /// --per-tensor of every tensor; with --write-manifest, the
    /// model-signing manifest of a directory.
    Hash(cmd::hash::Args),
    /// Check files against a manifest, a sha256 or embedded digests.
    ///
    /// A directory against a manifest or model-signing bundle (--manifest),
    /// a file against a sha256 (--sha256), or a file or model against the
    /// per-tensor digests in its metadata (--embed-hash wrote them). Exit 0
    /// when all match, 1 on any mismatch, 2 when an input cannot be read or
    /// the arguments make no check.
    Verify(cmd::verify::Args),
    /// What changed between two models, and by how much.
    ///
    /// Files, sets or checkpoints: names only in one, moved tensors,
    /// metadata, and each pair's differences. Exit 0 within tolerance, 1
    /// not, 2 on an error.
    Diff(cmd::diff::Args),
    /// Figures of the values per tensor and per layer, with outliers.
    ///
    /// Min, max, mean, std, absmax, zeros, NaN, inf, subnormals and
    /// histograms of every tensor, the same per layer group, and the
    /// tensors whose largest magnitude is an outlier.
    Stats(cmd::stats::Args),
    /// Copy a remote file, set or model directory to local disk.
    ///
    /// From s3://, gs://, az://, hf:// or https:// URLs: parallel range requests,
    /// resumable, each file verified.
    Fetch(cmd::fetch::Args),
    /// Write the shell completions or the manual pages into a directory.
    ///
    /// For packagers (scripts/release.sh runs it); hidden from --help.
    #[command(hide = true)]
    Generate(cmd::generate::Args),
}

impl Command {
    /// The input errors naming no file are reported against, and whether
    /// as JSON (`--json`).
    fn report_to(&self) -> (Option<std::path::PathBuf>, bool) {
        let (file, json) = match self {
            Command::Validate(a) => a.report_to(),
            Command::Inspect(a) => a.report_to(),
            Command::Rewrite(a) => a.report_to(),
            Command::Edit(a) => a.report_to(),
            Command::Check(a) => a.report_to(),
            Command::Shard(a) => a.report_to(),
            Command::Merge(a) => a.report_to(),
            Command::Convert(a) => a.report_to(),
            Command::Quantize(a) => a.report_to(),
            Command::Dequantize(a) => a.report_to(),
            Command::Hash(a) => a.report_to(),
            Command::Verify(a) => a.report_to(),
            Command::Diff(a) => a.report_to(),
            Command::Stats(a) => a.report_to(),
            Command::Fetch(a) => a.report_to(),
            Command::Generate(a) => a.report_to(),
        };
        (file.map(|f| f.to_path_buf()), json)
    }
}

fn main() -> ExitCode {
    // SIGINT, SIGTERM, SIGHUP: uploads aborted, temporaries removed, then
    // the end by the signal (signals.rs). First: before any thread.
    signals::install();
    let cli = Cli::parse();
    if let Some(n) = cli.threads {
        if let Err(e) = tensorfile_core::parallel::set_threads(n) {
            eprintln!("tensorfile: --threads {n}: {e}");
            return ExitCode::from(2);
        }
    }
    if let Err(e) = cmd::remote::configure(&cli.remote) {
        eprintln!("tensorfile: {e}");
        return ExitCode::from(2);
    }
    let (input, json) = cli.command.report_to();
    let result = match cli.command {
        Command::Validate(args) => cmd::validate::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Rewrite(args) => cmd::rewrite::run(args),
        Command::Edit(args) => cmd::edit::run(args),
        Command::Check(args) => cmd::check::run(args),
        Command::Shard(args) => cmd::shard::run(args),
        Command::Merge(args) => cmd::merge::run(args),
        Command::Convert(args) => cmd::convert::run(args),
        Command::Quantize(args) => cmd::quantize::run(args),
        Command::Dequantize(args) => cmd::dequantize::run(args),
        Command::Hash(args) => cmd::hash::run(args),
        Command::Verify(args) => cmd::verify::run(args),
        Command::Diff(args) => cmd::diff::run(args),
        Command::Stats(args) => cmd::stats::run(args),
        Command::Fetch(args) => cmd::fetch::run(args),
        Command::Generate(args) => cmd::generate::run(args),
    };
    signals::settle();
    match result {
        Ok(code) => code,
        Err(err) => {
            let usage = err.is_usage();
            // A usage error is about the arguments, not a file: plain text.
            let input = input.as_deref().filter(|_| !usage);
            cmd::report(&err, input, json && !usage);
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}
