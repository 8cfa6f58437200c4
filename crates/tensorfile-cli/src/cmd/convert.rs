//! `tensorfile convert IN OUT [--dtype D] [--saturate] [--allow-int]`: cast
//! the float tensors of a file to one dtype, or (without `--dtype`) write
//! the canonical file.
//!
//! A PyTorch checkpoint as IN (`.pt`, `.pth`, `.bin`), or a sharded `.bin`
//! set (`pytorch_model.bin.index.json`, diffusers' own, or the directory
//! holding one), goes through [`super::convert_pytorch`] instead: loaded
//! without executing anything, then streamed (or cast) the same way.
//!
//! A GGUF file as IN (to a Hugging Face directory, or as it is to one
//! `.safetensors` or `.npz` file), or OUT named `*.gguf`, goes through
//! [`super::gguf`];
//! numpy files (`.npz`, `.npy`) in or out through [`super::npz`].
//!
//! IN may be a set (a directory or an index): OUT is then a directory
//! holding the converted set, one output shard per input shard (or cut by
//! `--max-shard-size`), for safetensors and `.bin` sets alike.

use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::{convert_plan, CastOptions};
use tensorfile::Dtype;
use tensorfile::InputKind as Kind;

use super::inout;
use super::{out, Failure};

/// Arguments of `convert`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    io: super::FileArgs,
    /// Cast the float tensors to this dtype (`bf16`, `F32`, `f8_e4m3`, ...,
    /// either case). Quantized weights and their scales/biases keep theirs.
    /// Without it, OUT is the canonical rewrite of IN.
    #[arg(long, value_name = "DTYPE")]
    dtype: Option<Dtype>,
    /// Clamp values beyond the F8 target's range to its largest finite value
    /// instead of NaN or infinity.
    #[arg(long)]
    saturate: bool,
    /// Allow integer targets and cast integer tensors too; a value that does
    /// not fit refuses the conversion.
    #[arg(long)]
    allow_int: bool,
    /// Refuse the conversion (exit 1, nothing written) when a value would
    /// overflow to infinity, become NaN, saturate or flush to zero; without
    /// it, each tensor that lost values is reported on a warning line.
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    pytorch: super::convert_pytorch::PytorchArgs,
    #[command(flatten)]
    gguf: super::gguf::GgufArgs,
    #[command(flatten)]
    npz: super::npz::NpzArgs,
    #[command(flatten)]
    embed: super::hash::EmbedArgs,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        self.io.report_to()
    }
}

/// Converts IN (a file or a set) into an atomic save of OUT, one piece of
/// one tensor at a time.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    if let Some(d) = args.dtype.filter(|d| d.is_int() && !args.allow_int) {
        return Err(super::Usage::failure(format_args!(
            "--dtype {d} is an integer dtype: add --allow-int to cast to it"
        )));
    }
    let kind = super::input_kind(&args.io.input)?;
    let cast = CastOptions::default()
        .with_saturate(args.saturate)
        .with_allow_int(args.allow_int)
        .with_strict(args.strict);
    let pytorch_in = matches!(kind, Kind::Pytorch | Kind::PytorchSet);
    if super::gguf::handles(kind, &args.io.output) {
        if !pytorch_in {
            args.pytorch.refuse_for(&args.io.input)?;
        }
        args.embed.refuse_for("GGUF conversions")?;
        return super::gguf::convert(kind, &args.io, args.dtype, &args.gguf, &args.npz);
    }
    args.gguf.refuse_for(&args.io.input)?;
    if super::npz::handles(kind, &args.io.output) {
        if !pytorch_in {
            args.pytorch.refuse_for(&args.io.input)?;
        }
        args.embed.refuse_for("numpy conversions")?;
        return super::npz::convert(kind, &args.io, args.dtype, cast, &args.npz);
    }
    args.npz.refuse_for(&args.io.output)?;
    if pytorch_in {
        return super::convert_pytorch::run(super::convert_pytorch::Job {
            input: &args.io.input,
            set: kind.is_set(),
            output: &args.io.output,
            dtype: args.dtype,
            cast,
            sync: !args.io.no_sync,
            json: args.io.json,
            pytorch: args.pytorch,
            max_shard_size: args.io.max_shard_size,
            embed_hash: args.embed.embed_hash,
        });
    }
    // An input that cannot be read is that error (exit 1), not a misuse of
    // the PyTorch options.
    let input = inout::open(&args.io.input, &args.io.read_options())?;
    args.pytorch.refuse_for(&args.io.input)?;
    if args.dtype.is_some() {
        // Only the canonical rewrite may replace IN.
        super::refuse_input_as_output(&args.io.output, input.files())?;
    }
    let tensors = input.tensors();
    let metadata = input.metadata()?;
    // OUT may be IN (a canonical rewrite): the save renames a new inode
    // over the name, and IN's open file keeps reading the old one.
    let (plan, summary) = convert_plan(&tensors, metadata.as_ref(), args.dtype, cast)?;
    let mut written = inout::write(
        &input,
        &tensors,
        &plan,
        &args.io.output,
        args.io.max_shard_size,
        &args.io.write_options(),
        "convert",
    )?;
    let losses = summary.losses();
    super::losses::report(&args.io.output, &losses);
    args.embed.apply(&mut written, &args.io.write_options())?;
    if args.io.json {
        out(json!({
            "input": args.io.input,
            "output": args.io.output,
            "files": written.files,
            "index": written.index,
            "dtype": args.dtype.map(|d| d.name()),
            "tensors": summary.tensors,
            "cast": summary.cast,
            "companions": summary.companions,
            "bytes": written.bytes,
            "losses": super::losses::json(&losses),
        }));
    } else {
        let what = match args.dtype {
            Some(d) => format!(
                "{} of {} tensors cast to {d}, {} quantization companions kept",
                summary.cast, summary.tensors, summary.companions
            ),
            None => format!("{} tensors", summary.tensors),
        };
        out(format_args!(
            "{}: {what}, {} bytes",
            args.io.output.display(),
            written.bytes
        ));
    }
    Ok(ExitCode::SUCCESS)
}
