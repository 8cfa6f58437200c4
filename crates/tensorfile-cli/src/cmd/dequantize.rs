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

use serde_json::json;
use tensorfile::model::read_config;
use tensorfile::quant::{dequantize_plan, DequantizeOptions, Mode, QuantConfig, QuantParams};
use tensorfile::Dtype;

use super::inout;
use super::{out, Failure, Usage};

/// Arguments of `dequantize`.
#[derive(clap::Args)]
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

/// The MLX parameters given from outside the file, if any.
fn given_params(args: &Args) -> Result<Option<QuantConfig>, Failure> {
    if let Some(path) = &args.config {
        let config = read_config(path)?;
        return match QuantConfig::from_config(&config) {
            Ok(Some(q)) => Ok(Some(q)),
            Ok(None) => Err(format!("{}: no quantization in this config", path.display()).into()),
            Err(e) => Err(format!("{}: {e}", path.display()).into()),
        };
    }
    let mode = args.mode.unwrap_or(Mode::Affine);
    let (bits, group_size) = match (args.bits, args.group_size, mode.fixed()) {
        (Some(b), Some(g), _) => (b, g),
        (None, None, Some(fixed)) if args.mode.is_some() => fixed,
        // The config.json of IN's model: in IN when it is a directory,
        // beside it when it is a file or an index (as inspect does).
        (None, None, _) if args.mode.is_none() => {
            return super::looking::beside_config(&args.io.input)
        }
        _ => return Err(Usage::failure("affine mode needs --bits and --group-size")),
    };
    // A global scale (nvfp4) is found beside each weight that has one.
    let params = QuantParams {
        bits,
        group_size,
        mode,
        global_scale: false,
    };
    params.validate().map_err(Usage::failure)?;
    Ok(Some(QuantConfig::uniform(params)))
}

/// Dequantizes IN into an atomic save of OUT.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    if let Some(dtype) = args.dtype.filter(|&d| !DequantizeOptions::accepts_dtype(d)) {
        return Err(Usage::failure(format_args!(
            "--dtype {dtype}: dequantized weights are written as a float dtype of whole bytes (F32, F16, BF16, F64, F8_E4M3, ...)"
        )));
    }
    let mlx = given_params(&args)?;
    let input = inout::open(&args.io.input, &args.io.read_options())?;
    let inputs = input.files().into_iter().chain(args.config.as_deref());
    super::refuse_input_as_output(&args.io.output, inputs)?;
    let tensors = input.tensors();
    let metadata = input.metadata()?;
    let opts = DequantizeOptions::default()
        .with_mlx(mlx)
        .with_dtype(args.dtype)
        .with_write(args.io.write_options());
    let (plan, summary) = dequantize_plan(&tensors, metadata.as_ref(), &opts)?;
    let written = inout::write(
        &input,
        &tensors,
        &plan,
        &args.io.output,
        args.io.max_shard_size,
        &opts.write,
        "dequantize",
    )?;
    let bytes = written.bytes;
    if args.io.json {
        let weights: Vec<_> = summary
            .dequantized
            .iter()
            .map(|(name, scheme, dtype)| {
                json!({"name": name, "from": scheme.describe(), "dtype": dtype.name()})
            })
            .collect();
        out(json!({
            "input": args.io.input,
            "output": args.io.output,
            "dequantized": weights,
            "tensors": summary.tensors,
            "bytes": bytes,
        }));
    } else {
        out(format_args!(
            "{}: {} weights dequantized, {} tensors, {bytes} bytes",
            args.io.output.display(),
            summary.dequantized.len(),
            summary.tensors
        ));
        for (name, scheme, dtype) in &summary.dequantized {
            out(format_args!("  {name}: {} -> {dtype}", scheme.describe()));
        }
    }
    Ok(ExitCode::SUCCESS)
}
