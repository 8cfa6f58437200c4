//! `tensorfile convert IN OUT`: write IN as a canonical safetensors file.
//!
//! IN may be a PyTorch checkpoint (`.pt`, `.pth`, `.bin`; loaded without
//! executing anything, see `tensorfile-pytorch`) or a safetensors file
//! (then it is a canonical rewrite). A refused conversion exits 1 and leaves
//! no OUT behind: the save is atomic.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tensorfile::{save, SafeTensors, WriteOptions};
use tensorfile_pytorch::convert::{convert, ConvertOptions, Progress};
use tensorfile_pytorch::{file_looks_like_pytorch, LoadOptions, SharedPolicy};

use super::{out, Failure};

/// Arguments of `convert`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to read: a PyTorch checkpoint or a safetensors file.
    #[arg(value_name = "IN")]
    input: PathBuf,
    /// The safetensors file to write (replaced atomically).
    #[arg(value_name = "OUT")]
    output: PathBuf,
    #[command(flatten)]
    pytorch: PytorchArgs,
    /// Do not sync OUT and its directory to disk (faster; the replacement
    /// stays atomic, but may be lost on a power failure).
    #[arg(long)]
    no_sync: bool,
    /// Print the result as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Options that apply to PyTorch input only.
#[derive(clap::Args)]
pub struct PytorchArgs {
    /// Convert only this subtree of the checkpoint (`model`, or a dotted
    /// path such as `model.encoder`); names are relative to it.
    #[arg(long, value_name = "K")]
    key: Option<String>,
    /// Name for a bare top-level tensor (otherwise it is named "").
    #[arg(long, value_name = "N")]
    name: Option<String>,
    /// Keep non-tensor values (epoch, learning rate, ...) as string metadata.
    #[arg(long)]
    keep_values: bool,
    /// Tensors sharing storage: `alias` writes exact aliases once and records
    /// each other name in the metadata as "removed": "kept"; `copy` gives
    /// every name its own bytes; `error` refuses any sharing.
    #[arg(long, value_name = "POLICY", default_value = "alias")]
    shared: SharedPolicy,
}

impl PytorchArgs {
    /// The flags given explicitly, for refusing them on safetensors input.
    fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.key.is_some() {
            v.push("--key");
        }
        if self.name.is_some() {
            v.push("--name");
        }
        if self.keep_values {
            v.push("--keep-values");
        }
        if self.shared != SharedPolicy::Alias {
            v.push("--shared");
        }
        v
    }
}

/// A bar on stderr when it is a terminal; hidden otherwise.
fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Converts IN to OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let write = WriteOptions {
        sync: !args.no_sync,
        ..WriteOptions::default()
    };
    let is_pytorch =
        file_looks_like_pytorch(&args.input).map_err(|e| tensorfile::Error::io(&args.input, e))?;
    let (tensors, aliases, kind) = if is_pytorch {
        let p = args.pytorch;
        let options = ConvertOptions {
            load: LoadOptions {
                key: p.key,
                name: p.name,
                ..LoadOptions::default()
            },
            shared: p.shared,
            keep_values: p.keep_values,
            write,
        };
        let bar = progress_bar();
        let report = convert(&args.input, &args.output, &options, |p: Progress<'_>| {
            bar.set_length(p.bytes_total);
            bar.set_position(p.bytes_done);
            bar.set_message(p.name.to_string());
        });
        bar.finish_and_clear();
        let report = report?;
        (report.tensors, report.aliases, "pytorch")
    } else {
        if let Some(flag) = args.pytorch.given().first() {
            return Err(format!(
                "{flag} applies only to PyTorch input; {} is not a PyTorch checkpoint",
                args.input.display()
            )
            .into());
        }
        let input = SafeTensors::open(&args.input)?;
        save(&args.output, input.tensors(), input.metadata(), &write)?;
        (input.len(), 0, "safetensors")
    };
    let bytes = std::fs::metadata(&args.output)
        .map_err(|e| tensorfile::Error::io(&args.output, e))?
        .len();
    if args.json {
        out(json!({
            "input": args.input,
            "input_format": kind,
            "output": args.output,
            "tensors": tensors,
            "aliases": aliases,
            "bytes": bytes,
        }));
    } else {
        out(format_args!(
            "{}: {tensors} tensors{}, {bytes} bytes",
            args.output.display(),
            if aliases > 0 {
                format!(" (+{aliases} aliases)")
            } else {
                String::new()
            }
        ));
    }
    Ok(ExitCode::SUCCESS)
}
