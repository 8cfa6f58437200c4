//! `tensorfile dequantize IN OUT [--dtype D] [--config config.json] [--bits
//! B --group-size G --mode M]`: turn quantized weights back into floats.
//!
//! int4 files say their group in their metadata. MLX parameters come from
//! `--config` (a config.json's `quantization`), from `--bits`,
//! `--group-size` and `--mode`, from IN's config.json when IN is a model
//! directory, or from the metadata of a file this tool quantized; they are
//! never guessed from the shapes.

use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile::quant::Mode;
use tensorfile::Dtype;
use tensorfile_ops::dequantize::{dequantize, DequantizeReport, DequantizeRequest};

use super::words::{bytes, plural};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `dequantize`.
#[derive(clap::Args)]
#[command(
    mut_arg("input", |a| a.help(
        "The safetensors file, set (a directory or an index) or model \
         directory holding quantized weights (int4, MLX; a URL too)"
    )),
    mut_arg("output", |a| a.help(
        "The safetensors file of floats to write (replaced atomically), or \
         the directory of the set when IN is a set or --max-shard-size is \
         given"
    ))
)]
pub struct Args {
    #[command(flatten)]
    io: super::FileArgs,
    /// The dtype of the dequantized weights. Default: F32 for int4, the
    /// scales' dtype for MLX affine, BF16 for mxfp4/mxfp8/nvfp4, F32 for
    /// nvfp4 with global scales (MLX's defaults).
    #[arg(long, value_name = "DTYPE")]
    dtype: Option<Dtype>,
    /// A config.json whose `quantization` gives MLX's bits and group sizes.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["bits", "group_size", "mode"])]
    config: Option<PathBuf>,
    /// Bits of every MLX weight.
    #[arg(long, value_name = "B", requires = "group_size")]
    bits: Option<u64>,
    /// Group size of every MLX weight.
    #[arg(long, value_name = "G", requires = "bits")]
    group_size: Option<u64>,
    /// MLX mode: affine (default), mxfp4, mxfp8 or nvfp4.
    #[arg(long, value_name = "MODE")]
    mode: Option<Mode>,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        self.io.report_to()
    }
}

impl Args {
    /// The operation's request.
    pub fn request(&self) -> DequantizeRequest {
        DequantizeRequest {
            files: self.io.in_out(),
            dtype: self.dtype,
            config: self.config.clone(),
            bits: self.bits,
            group_size: self.group_size,
            mode: self.mode,
        }
    }
}

/// Dequantizes IN into an atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::bytes_when_told("dequantize", |message| super::warn(message));
    let report = dequantize(&args.request(), &bar)?;
    drop(bar);
    if args.io.json {
        super::out_json(&report)?;
    } else {
        text(&report);
    }
    Ok(ExitCode::SUCCESS)
}

/// The report as text: a line, then each weight dequantized.
fn text(r: &DequantizeReport) {
    out(format_args!(
        "{}: {} dequantized, {}, {}",
        r.output.display(),
        plural(r.dequantized.len() as u64, "weight"),
        plural(r.tensors as u64, "tensor"),
        bytes(r.bytes),
    ));
    for w in &r.dequantized {
        out(format_args!("  {}: {} -> {}", w.name, w.from, w.dtype));
    }
}
