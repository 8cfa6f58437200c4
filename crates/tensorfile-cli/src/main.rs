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
    /// safetensors file, optionally casting float tensors to one dtype.
    Convert(cmd::convert::Args),
    /// Quantize weights: int4-g<group>-sym or MLX affine.
    Quantize(cmd::quantize::Args),
    /// Turn quantized weights (int4, MLX) back into floats.
    Dequantize(cmd::dequantize::Args),
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
        };
        (file.map(|f| f.to_path_buf()), json)
    }
}

fn main() -> ExitCode {
    // SIGINT, SIGTERM, SIGHUP during a save whose temporary has a name (no
    // O_TMPFILE here): remove it, then end by the signal.
    if let Err(e) = tensorfile::atomic::remove_temporaries_on_signal() {
        eprintln!("tensorfile: warning: cannot install signal handlers: {e}");
    }
    let cli = Cli::parse();
    if let Some(n) = cli.threads {
        if let Err(e) = tensorfile::parallel::set_threads(n) {
            eprintln!("tensorfile: --threads {n}: {e}");
            return ExitCode::from(2);
        }
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
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            let usage = err.downcast_ref::<cmd::Usage>().is_some();
            // A usage error is about the arguments, not a file: plain text.
            let input = input.as_deref().filter(|_| !usage);
            cmd::report(err.as_ref(), input, json && !usage);
            ExitCode::from(if usage { 2 } else { 1 })
        }
    }
}
