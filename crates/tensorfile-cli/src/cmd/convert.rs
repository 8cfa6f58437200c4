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

use std::collections::BTreeMap;
use std::process::ExitCode;

use tensorfile::Dtype;
use tensorfile_ops::convert::{
    convert, ConvertReport, ConvertRequest, FromNumpyConverted, GgufRawConverted,
    GgufToHfConverted, HfToGgufConverted, PytorchConverted, SafetensorsConverted, ToNumpyConverted,
};

use super::gguf::esc;
use super::words::{bytes, plural};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `convert`.
#[derive(clap::Args)]
#[command(
    mut_arg("input", |a| a.help(
        "What to convert: a safetensors file, set (a directory or an index) or \
         model directory (a URL too), a PyTorch checkpoint (.pt, .pth, .bin) or \
         sharded .bin set, a GGUF file, or a numpy .npz or .npy file"
    )),
    mut_arg("output", |a| a.help(
        "What to write, picked by its name: OUT.safetensors, OUT.npz, OUT.npy, \
         OUT.gguf, or a directory (a set, or the Hugging Face model of a GGUF \
         file); replaced atomically (IN itself only for a canonical rewrite)"
    ))
)]
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

impl Args {
    /// The operation's request.
    pub fn request(&self) -> ConvertRequest {
        ConvertRequest {
            files: self.io.in_out(),
            dtype: self.dtype,
            saturate: self.saturate,
            allow_int: self.allow_int,
            strict: self.strict,
            embed_hash: self.embed.embed_hash,
            pytorch: self.pytorch.options(),
            gguf: self.gguf.options(),
            compress: self.npz.compress,
        }
    }
}

/// Converts IN (a file or a set) into an atomic save of OUT, one piece of
/// one tensor at a time.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::bytes_when_told("convert", |message| super::warn(message));
    let report = convert(&args.request(), &bar)?;
    drop(bar);
    if args.io.json {
        super::out_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    match &report {
        ConvertReport::Safetensors(r) => safetensors(r, args.dtype),
        ConvertReport::Pytorch(r) => pytorch(r, args.dtype),
        ConvertReport::GgufRaw(r) => gguf_raw(r, args.gguf.keep_quant()),
        ConvertReport::GgufToHf(r) => gguf_to_hf(r, args.gguf.keep_quant()),
        ConvertReport::HfToGguf(r) => hf_to_gguf(r),
        ConvertReport::FromNumpy(r) => from_numpy(r, args.dtype),
        ConvertReport::ToNumpy(r) => to_numpy(r),
    }
    Ok(ExitCode::SUCCESS)
}

fn safetensors(r: &SafetensorsConverted, dtype: Option<Dtype>) {
    let what = match dtype {
        Some(d) => format!(
            "{} of {} cast to {d}, {} kept",
            r.cast,
            plural(r.tensors as u64, "tensor"),
            plural(r.companions as u64, "quantization companion")
        ),
        None => plural(r.tensors as u64, "tensor"),
    };
    out(format_args!(
        "{}: {what}, {}",
        r.output.display(),
        bytes(r.bytes)
    ));
}

fn pytorch(r: &PytorchConverted, dtype: Option<Dtype>) {
    let aliases = if r.aliases > 0 {
        format!(" (+{})", plural(r.aliases as u64, "alias"))
    } else {
        String::new()
    };
    let cast = match dtype {
        Some(d) => format!(", {} cast to {d}", r.cast),
        None => String::new(),
    };
    // A set (OUT a directory) says how many files it has.
    let files = if r.files.len() == 1 && r.files[0] == r.output {
        String::new()
    } else {
        format!("{}, ", plural(r.files.len() as u64, "file"))
    };
    out(format_args!(
        "{}: {files}{}{aliases}{cast}, {}",
        r.output.display(),
        plural(r.tensors as u64, "tensor"),
        bytes(r.bytes)
    ));
}

fn gguf_raw(r: &GgufRawConverted, keep_quant: bool) {
    out(format_args!(
        "{}: {}, {} as they are ({} decoded from quantized blocks{}), {} kept, {}",
        esc(&r.output.display().to_string()),
        r.output_format,
        plural(r.tensors as u64, "tensor"),
        r.decoded,
        if keep_quant {
            format!(", {} kept quantized as MLX affine", r.kept_quantized.len())
        } else {
            String::new()
        },
        plural(r.metadata_kept as u64, "metadata key"),
        bytes(r.bytes),
    ));
    if !r.metadata_dropped.is_empty() {
        let shown: Vec<String> = r.metadata_dropped.iter().take(4).map(|k| esc(k)).collect();
        let more = if r.metadata_dropped.len() > 4 {
            ", ..."
        } else {
            ""
        };
        let why = if r.output_format == "npz" {
            "npz has no metadata".to_string()
        } else {
            format!(
                "arrays longer than {} elements",
                tensorfile::gguf::MAX_ARRAY_SHOWN
            )
        };
        out(format_args!(
            "note: {} not kept ({why}): {}{more}",
            plural(r.metadata_dropped.len() as u64, "metadata key"),
            shown.join(", ")
        ));
    }
}

fn hf_to_gguf(s: &HfToGgufConverted) {
    let types: Vec<String> = s
        .tensor_types
        .iter()
        .map(|(t, n)| format!("{n} {t}"))
        .collect();
    out(format_args!(
        "{}: GGUF {} ({}), {}",
        esc(&s.output.display().to_string()),
        esc(&s.architecture),
        types.join(", "),
        bytes(s.bytes)
    ));
    let mut by_type: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for f in &s.fallbacks {
        by_type.entry(&f.ggml_type).or_default().push(&f.tensor);
    }
    for (t, names) in by_type {
        let shown: Vec<String> = names.iter().take(4).map(|n| esc(n)).collect();
        let more = if names.len() > 4 { ", ..." } else { "" };
        out(format_args!(
            "note: {} written as {t}, {} not being whole {} blocks: {}{more}",
            plural(names.len() as u64, "tensor"),
            if names.len() == 1 {
                "its rows"
            } else {
                "their rows"
            },
            s.ggml_type,
            shown.join(", ")
        ));
    }
    if !s.not_converted.is_empty() {
        let shown: Vec<String> = s
            .not_converted
            .iter()
            .take(8)
            .map(|n| format!("{} as {} ({})", esc(&n.tensor), n.ggml_type, n.reason))
            .collect();
        let more = if s.not_converted.len() > 8 {
            ", ..."
        } else {
            ""
        };
        out(format_args!(
            "note: {} not written as {}: {}{more}",
            plural(s.not_converted.len() as u64, "tensor"),
            s.ggml_type,
            shown.join(", ")
        ));
    }
    if let Some(reason) = &s.tokenizer_not_written {
        out(format_args!("note: no tokenizer written: {}", esc(reason)));
    }
}

fn gguf_to_hf(s: &GgufToHfConverted, keep_quant: bool) {
    let kept = if keep_quant {
        format!(
            ", {} kept quantized as MLX affine ({} with F32 scales)",
            s.kept_quantized.len(),
            s.f32_scales
        )
    } else {
        String::new()
    };
    out(format_args!(
        "{}: {} ({} decoded from quantized blocks{kept}), {}; wrote {}",
        esc(&s.output.display().to_string()),
        plural(s.tensors as u64, &format!("{} tensor", s.architecture)),
        s.decoded,
        s.dtype,
        s.files.join(", ")
    ));
    if let Some(reason) = &s.tokenizer_not_written {
        out(format_args!("note: no tokenizer.json: {}", esc(reason)));
    }
}

fn from_numpy(r: &FromNumpyConverted, dtype: Option<Dtype>) {
    let cast = match dtype {
        Some(d) if r.opaque > 0 => format!(", {} opaque arrays read as {d}", r.opaque),
        Some(d) => format!(", {} cast to {d}", r.cast),
        None => String::new(),
    };
    out(format_args!(
        "{}: {}{cast}, {}",
        r.output.display(),
        plural(r.tensors as u64, "array"),
        bytes(r.bytes)
    ));
}

fn to_numpy(r: &ToNumpyConverted) {
    let how = if r.compressed { " (deflated)" } else { "" };
    out(format_args!(
        "{}: {}{how}, {}",
        r.output.display(),
        plural(r.arrays as u64, "array"),
        bytes(r.bytes)
    ));
}
