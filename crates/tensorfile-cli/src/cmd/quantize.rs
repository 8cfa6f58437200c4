//! `tensorfile quantize IN OUT --scheme int4-g32-sym | --scheme mlx-affine
//! --bits B --group-size G | --scheme mlx-mxfp4 | mlx-mxfp8 | mlx-nvfp4
//! [--global-scale] [--include GLOB]... [--exclude GLOB]...`: quantize the
//! weights of a file.

use std::process::ExitCode;

use tensorfile::quant::Scheme;
use tensorfile_ops::quantize::{quantize, QuantizeReport, QuantizeRequest};

use super::words::{bytes, plural};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `quantize`.
#[derive(clap::Args)]
#[command(
    mut_arg("input", |a| a.help(
        "The safetensors file, set (a directory or an index) or model \
         directory whose weights to quantize (a URL too)"
    )),
    mut_arg("output", |a| a.help(
        "The quantized safetensors file to write (replaced atomically), or \
         the directory of the quantized set when IN is a set or \
         --max-shard-size is given"
    ))
)]
pub struct Args {
    #[command(flatten)]
    io: super::FileArgs,
    /// `int4-g<group>-sym` (e.g. int4-g32-sym: the format page's int4),
    /// `mlx-affine` (MLX's packed format; needs --bits and --group-size), or
    /// MLX's floating-point modes `mlx-mxfp4` (E2M1 codes, E8M0 scales,
    /// groups of 32), `mlx-mxfp8` (E4M3 codes, groups of 32), `mlx-nvfp4`
    /// (E2M1 codes, E4M3 scales, groups of 16). MLX schemes quantize as
    /// MLX's mx.quantize does, byte for byte.
    #[arg(long, value_name = "SCHEME")]
    scheme: String,
    /// Bits per weight for mlx-affine: 2, 3, 4, 5, 6 or 8 (the
    /// floating-point modes fix theirs).
    #[arg(long, value_name = "B")]
    bits: Option<u64>,
    /// Weights per scale for mlx-affine.
    #[arg(long, value_name = "G")]
    group_size: Option<u64>,
    /// mlx-nvfp4: give each expert of a 3-D expert stack its own F32 scale
    /// (`<m>.global_scale`, its largest magnitude), as mlx-lm's
    /// quantize_model(..., global_scale=True) does; 2-D weights get none.
    #[arg(long)]
    global_scale: bool,
    /// Also quantize tensors whose names match (`*` is any run of
    /// characters); repeatable. By default the 2-D .weight matrices whose
    /// input dimension the group divides are taken, not norms or
    /// embeddings, and with an MLX scheme the 3-D expert stacks of mlx-lm's
    /// switch layers (under `experts` or `switch_*`).
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// Never quantize tensors whose names match; repeatable; wins over --include.
    #[arg(long, value_name = "GLOB")]
    exclude: Vec<String>,
    #[command(flatten)]
    embed: super::hash::EmbedArgs,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        self.io.report_to()
    }
}

impl Args {
    /// The operation's request.
    pub fn request(&self) -> QuantizeRequest {
        QuantizeRequest {
            files: self.io.in_out(),
            scheme: self.scheme.clone(),
            bits: self.bits,
            group_size: self.group_size,
            global_scale: self.global_scale,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            embed_hash: self.embed.embed_hash,
        }
    }
}

/// Quantizes IN into an atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let request = args.request();
    let bar = Bar::bytes_when_told("quantize", |message| super::warn(message));
    let report = quantize(&request, &bar)?;
    drop(bar);
    if args.io.json {
        super::out_json(&report)?;
    } else {
        text(&report, &request.scheme()?);
    }
    Ok(ExitCode::SUCCESS)
}

/// The report as text: a line, then the weights quantized.
fn text(r: &QuantizeReport, scheme: &Scheme) {
    out(format_args!(
        "{}: {} quantized ({}), {}, {}",
        r.output.display(),
        plural(r.quantized.len() as u64, "weight"),
        scheme.summary(),
        plural(r.tensors as u64, "tensor"),
        bytes(r.bytes),
    ));
    for name in &r.quantized {
        out(format_args!("  {name}"));
    }
}
