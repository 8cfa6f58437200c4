//! `tensorfile quantize IN OUT --scheme int4-g32-sym | --scheme mlx-affine
//! --bits B --group-size G | --scheme mlx-mxfp4 | mlx-mxfp8 | mlx-nvfp4
//! [--global-scale] [--include GLOB]... [--exclude GLOB]...`: quantize the
//! weights of a file.

use std::process::ExitCode;

use serde_json::json;
use tensorfile::quant::{quantize_plan, Glob, QuantizeOptions, Scheme, Selection};

use super::inout;
use super::{out, Failure, Usage};

/// Arguments of `quantize`.
#[derive(clap::Args)]
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

/// Quantizes IN into an atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let mut scheme =
        Scheme::parse(&args.scheme, args.bits, args.group_size).map_err(Usage::failure)?;
    if args.global_scale {
        scheme = scheme.with_global_scale().map_err(Usage::failure)?;
    }
    let input = inout::open(&args.io.input, &args.io.read_options())?;
    super::refuse_input_as_output(&args.io.output, input.files())?;
    let opts = QuantizeOptions::new(scheme)
        .with_selection(Selection {
            include: args.include.iter().map(Glob::new).collect(),
            exclude: args.exclude.iter().map(Glob::new).collect(),
        })
        .with_write(args.io.write_options());
    let mut tensors = input.tensors();
    tensors.sort_unstable_by(|a, b| a.info().name.cmp(b.info().name));
    let metadata = input.metadata()?;
    let (plan, summary) = quantize_plan(&tensors, metadata.as_ref(), &opts)?;
    let mut written = inout::write(
        &input,
        &tensors,
        &plan,
        &args.io.output,
        args.io.max_shard_size,
        &opts.write,
        "quantize",
    )?;
    args.embed.apply(&mut written, &opts.write)?;
    let bytes = written.bytes;
    if args.io.json {
        out(json!({
            "input": args.io.input,
            "output": args.io.output,
            "files": written.files,
            "index": written.index,
            "scheme": scheme.name(),
            "group_size": scheme.group_size(),
            "bits": scheme.bits(),
            "mode": scheme.mode().map(|m| m.name()),
            "global_scale": scheme.global_scale(),
            "quantized": summary.quantized,
            "tensors": summary.tensors,
            "metadata": summary.metadata,
            "bytes": bytes,
        }));
    } else {
        out(format_args!(
            "{}: {} weights quantized ({}), {} tensors, {bytes} bytes",
            args.io.output.display(),
            summary.quantized.len(),
            scheme.summary(),
            summary.tensors
        ));
        for name in &summary.quantized {
            out(format_args!("  {name}"));
        }
    }
    Ok(ExitCode::SUCCESS)
}
