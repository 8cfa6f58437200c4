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

/// Read, check and write safetensors files.
#[derive(Parser)]
#[command(name = "tensorfile", version, about, long_about = None)]
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
    Validate(cmd::validate::Args),
    /// Describe a file: tensors, dtypes, metadata, alignment.
    Inspect(cmd::inspect::Args),
    /// Write the canonical file with the same tensors and metadata.
    Rewrite(cmd::rewrite::Args),
    /// Verify a model directory: files, tensors against the config, contract.
    Check(cmd::check::Args),
    /// Split a file into shards with an index, as huggingface_hub does.
    Shard(cmd::shard::Args),
    /// Join a sharded checkpoint into one canonical file.
    Merge(cmd::merge::Args),
    /// Convert a PyTorch checkpoint or a safetensors file to a canonical
    /// safetensors file, optionally casting float tensors to one dtype; a
    /// GGUF file to a Hugging Face directory (or, as it is, to one
    /// .safetensors or .npz file), a directory to OUT.gguf; numpy files
    /// both ways.
    Convert(cmd::convert::Args),
    /// Quantize weights: int4-g<group>-sym or MLX affine.
    Quantize(cmd::quantize::Args),
    /// Turn quantized weights (int4, MLX) back into floats.
    Dequantize(cmd::dequantize::Args),
    /// sha256 of files (the Hub's LFS object id), of safetensors data
    /// sections (ModelSpec's hash_sha256) and of tensors; write a
    /// model-signing manifest of a directory.
    Hash(cmd::hash::Args),
    /// Check a directory against a manifest or model-signing bundle, a file
    /// against a sha256, or a file against its embedded per-tensor digests.
    /// Exit 0 when all match, 1 on any mismatch, 2 when an input cannot be
    /// read.
    Verify(cmd::verify::Args),
    /// What changed between two models (files, sets, checkpoints), and by
    /// how much. Exit 0 within tolerance, 1 not, 2 on an error.
    Diff(cmd::diff::Args),
    /// Per-tensor and per-layer figures of the values: min, max, mean,
    /// std, absmax, zeros, NaN, inf, subnormals, histograms, outliers.
    Stats(cmd::stats::Args),
    /// Copy a remote file, set or model directory (s3://, hf://, https://)
    /// to local disk: parallel range requests, resumable, verified.
    Fetch(cmd::fetch::Args),
}

impl Command {
    /// The input errors naming no file are reported against, and whether
    /// as JSON (`--json`).
    fn report_to(&self) -> (Option<std::path::PathBuf>, bool) {
        let (file, json) = match self {
            Command::Validate(a) => a.report_to(),
            Command::Inspect(a) => a.report_to(),
            Command::Rewrite(a) => a.report_to(),
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
        };
        (file.map(|f| f.to_path_buf()), json)
    }
}

fn main() -> ExitCode {
    // SIGINT, SIGTERM, SIGHUP during a save whose temporary has a name (no
    // O_TMPFILE here): remove it, then end by the signal.
    if let Err(e) = tensorfile_core::atomic::remove_temporaries_on_signal() {
        eprintln!("tensorfile: warning: cannot install signal handlers: {e}");
    }
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
    };
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
