//! `tensorfile convert IN OUT [--dtype D] [--saturate] [--allow-int]`: cast
//! the float tensors of a file to one dtype, or (without `--dtype`) write
//! the canonical file.
//!
//! A PyTorch checkpoint as IN (`.pt`, `.pth`, `.bin`) goes through
//! [`super::convert_pytorch`] instead: loaded without executing anything,
//! then streamed (or cast) the same way.
//!
//! The input side is [`open_input`] alone: it turns a path into named
//! tensors with their bytes. Everything after it (casting, companions of
//! quantized weights, the streaming atomic save) only sees those tensors.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::{save_converted, CastOptions};
use tensorfile::source::FileSource;
use tensorfile::{Dtype, FileTensor, Metadata, ReadOptions, SafeTensors};

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
    #[command(flatten)]
    pytorch: super::convert_pytorch::PytorchArgs,
    #[command(flatten)]
    embed: super::hash::EmbedArgs,
}

/// An opened input: what `convert` reads.
pub struct Input {
    file: SafeTensors<FileSource>,
}

impl Input {
    /// Every tensor: name, dtype, shape, and bytes read on demand.
    pub fn tensors(&self) -> Vec<FileTensor<'_, FileSource>> {
        self.file.tensor_data().collect()
    }

    /// The input's metadata, kept as it is.
    pub fn metadata(&self) -> Option<&Metadata> {
        self.file.metadata()
    }
}

/// Opens IN: a safetensors file, checked against the format's reader rules
/// and read with positional reads (a file truncated underneath is an
/// error naming it, never a signal).
pub fn open_input(path: &Path, max_header_len: u64) -> Result<Input, Failure> {
    let read = ReadOptions::default().max_header_len(max_header_len);
    Ok(Input {
        file: SafeTensors::open_pread_with(path, &read)?,
    })
}

/// Converts IN into an atomic save of OUT, one tensor at a time.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let kind = super::input_kind(&args.io.input)?;
    if kind == tensorfile::input::Kind::Pytorch {
        let written = super::convert_pytorch::run(super::convert_pytorch::Job {
            input: &args.io.input,
            output: &args.io.output,
            dtype: args.dtype,
            cast: CastOptions {
                saturate: args.saturate,
                allow_int: args.allow_int,
            },
            sync: !args.io.no_sync,
            json: args.io.json,
            pytorch: args.pytorch,
        })?;
        args.embed
            .apply(&args.io.output, &args.io.write_options())?;
        return Ok(written);
    }
    if kind != tensorfile::input::Kind::Safetensors {
        return Err(format!(
            "{}: this is {kind}; convert takes a safetensors file or a PyTorch checkpoint",
            args.io.input.display()
        )
        .into());
    }
    // An input that cannot be read is that error (exit 1), not a misuse of
    // the PyTorch options.
    let input = open_input(&args.io.input, args.io.max_header_len)?;
    args.pytorch.refuse_for(&args.io.input)?;
    if args.dtype.is_some() {
        // Only the canonical rewrite may replace IN.
        super::refuse_input_as_output(&args.io.output, [&args.io.input])?;
    }
    let tensors = input.tensors();
    let cast = CastOptions {
        saturate: args.saturate,
        allow_int: args.allow_int,
    };
    let write = args.io.write_options();
    // OUT may be IN (a canonical rewrite): the save renames a new inode
    // over the name, and IN's open file keeps reading the old one.
    let summary = save_converted(
        &args.io.output,
        &tensors,
        input.metadata(),
        args.dtype,
        cast,
        &write,
    )?;
    args.embed.apply(&args.io.output, &write)?;
    let bytes = args.io.output_size()?;
    if args.io.json {
        out(json!({
            "input": args.io.input,
            "output": args.io.output,
            "dtype": args.dtype.map(|d| d.name()),
            "tensors": summary.tensors,
            "cast": summary.cast,
            "companions": summary.companions,
            "bytes": bytes,
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
            "{}: {what}, {bytes} bytes",
            args.io.output.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}
