//! numpy files in `convert`: `.npz` / `.npy` input to safetensors, and
//! safetensors (a file or a set) to an `.npz` archive or one `.npy` array.
//!
//! `--dtype D` with numpy input that holds opaque arrays (numpy saves
//! ml_dtypes arrays as `<V2`, `<V1` or `<f1`) says what they hold, and
//! nothing is cast: the file cannot say it, and a user who names it does
//! not ask for the other arrays to change. With no opaque array, `--dtype`
//! casts the float arrays, as every conversion's `--dtype` does.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::CastOptions;
use tensorfile::npz::{self, FromNpzOptions, NpzFile, NpzWriteOptions};
use tensorfile::InputKind as Kind;
use tensorfile::{Dtype, TensorData};

use super::{out, Failure, Usage};
use crate::progress::Bar;

/// Options of `convert` that apply to numpy output only.
#[derive(clap::Args)]
pub struct NpzArgs {
    /// .npz output: deflate the members, as np.savez_compressed does
    /// (without it, stored as np.savez stores them).
    #[arg(long)]
    pub(super) compress: bool,
}

impl NpzArgs {
    /// Refuses these options for a conversion that writes no `.npz`.
    pub fn refuse_for(&self, output: &Path) -> Result<(), Failure> {
        if self.compress {
            return Err(Usage::failure(format_args!(
                "--compress applies to .npz output; {} does not end in .npz",
                output.display()
            )));
        }
        Ok(())
    }
}

/// The numpy format `path` names by its extension, if any.
fn numpy_ext(path: &Path) -> Option<Kind> {
    let ext = path.extension()?.to_string_lossy().to_ascii_lowercase();
    match ext.as_str() {
        "npz" => Some(Kind::Npz),
        "npy" => Some(Kind::Npy),
        _ => None,
    }
}

/// Whether a conversion from an input of `kind` to `output` is a numpy
/// one: numpy in, or an output named `*.npz` / `*.npy`.
pub fn handles(kind: Kind, output: &Path) -> bool {
    matches!(kind, Kind::Npz | Kind::Npy) || numpy_ext(output).is_some()
}

/// `tensorfile convert IN OUT` when IN is `.npz` / `.npy` (to
/// safetensors) or OUT ends in `.npz` / `.npy` (from safetensors).
pub fn convert(
    kind: Kind,
    io: &super::FileArgs,
    dtype: Option<Dtype>,
    cast: CastOptions,
    args: &NpzArgs,
) -> Result<ExitCode, Failure> {
    match (matches!(kind, Kind::Npz | Kind::Npy), numpy_ext(&io.output)) {
        (true, Some(_)) => Err(Usage::failure(format_args!(
            "{} is numpy and so is OUT: convert numpy files to safetensors, or safetensors to .npz / .npy",
            io.input.display()
        ))),
        (true, None) => {
            args.refuse_for(&io.output)?;
            from_numpy(io, dtype, cast)
        }
        (false, Some(out_kind)) => to_numpy(io, out_kind, dtype, args),
        (false, None) => Err(Usage::failure("not a numpy conversion")),
    }
}

fn from_numpy(
    io: &super::FileArgs,
    dtype: Option<Dtype>,
    cast: CastOptions,
) -> Result<ExitCode, Failure> {
    super::refuse_input_as_output(&io.output, [&io.input])?;
    let file = NpzFile::open(&io.input)?;
    let opaque = file
        .arrays()
        .iter()
        .filter(|a| matches!(a.element, npz::NpyElement::Opaque { .. }))
        .count();
    let opts = FromNpzOptions::default()
        .with_opaque(dtype)
        .with_dtype(dtype.filter(|_| opaque == 0))
        .with_cast(cast)
        .with_write(io.write_options())
        .with_max_shard_size(io.max_shard_size);
    let total: u64 = file.arrays().iter().map(|a| a.data_len()).sum();
    let bar = Bar::bytes(total, "convert");
    let summary = npz::npz_to_safetensors(&file, &io.output, &opts, &bar);
    drop(bar);
    let summary = summary?;
    let losses = summary.convert.losses();
    super::losses::report(&io.output, &losses);
    let mut bytes = 0;
    for f in summary.files.iter().chain(&summary.index) {
        bytes += std::fs::metadata(f)
            .map_err(|e| tensorfile::Error::io(f, e))?
            .len();
    }
    let c = &summary.convert;
    if io.json {
        out(json!({
            "input": io.input,
            "input_format": if file.container() == npz::Container::Npy { "npy" } else { "npz" },
            "output": io.output,
            "files": summary.files,
            "index": summary.index,
            "dtype": dtype.map(|d| d.name()),
            "opaque": opaque,
            "tensors": c.tensors,
            "cast": c.cast,
            "bytes": bytes,
            "losses": super::losses::json(&losses),
        }));
    } else {
        let cast = match dtype {
            Some(d) if opaque > 0 => format!(", {opaque} opaque arrays read as {d}"),
            Some(d) => format!(", {} cast to {d}", c.cast),
            None => String::new(),
        };
        out(format_args!(
            "{}: {} arrays{cast}, {bytes} bytes",
            io.output.display(),
            c.tensors
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn to_numpy(
    io: &super::FileArgs,
    out_kind: Kind,
    dtype: Option<Dtype>,
    args: &NpzArgs,
) -> Result<ExitCode, Failure> {
    if dtype.is_some() {
        return Err(Usage::failure(
            "--dtype applies to numpy input; to write other dtypes to numpy, cast the safetensors first (`tensorfile convert IN TMP.safetensors --dtype D`)",
        ));
    }
    if io.max_shard_size.is_some() {
        return Err(Usage::failure(
            "--max-shard-size applies to safetensors output; a numpy file is one file",
        ));
    }
    if out_kind == Kind::Npy {
        args.refuse_for(&io.output)?;
    }
    let input = super::inout::open(&io.input, &io.read_options())?;
    super::refuse_input_as_output(&io.output, input.files())?;
    let tensors = input.tensors();
    if let Some(m) = input.metadata()? {
        super::warn(format_args!(
            "{}: {} metadata keys not written: numpy files have no metadata",
            io.output.display(),
            m.len()
        ));
    }
    let total: u64 = tensors
        .iter()
        .map(TensorData::<tensorfile::Error>::byte_len)
        .sum();
    let bar = Bar::bytes(total, "convert");
    let written = if out_kind == Kind::Npy {
        let [one] = &tensors[..] else {
            drop(bar);
            return Err(format!(
                "{}: a .npy file holds one array, and {} holds {} tensors: write an .npz",
                io.output.display(),
                io.input.display(),
                tensors.len()
            )
            .into());
        };
        npz::save_npy(&io.output, one, !io.no_sync, &bar)
    } else {
        let opts = NpzWriteOptions::default()
            .with_compress(args.compress)
            .with_sync(!io.no_sync);
        npz::save_npz(&io.output, &tensors, &opts, &bar)
    };
    drop(bar);
    let written = written?;
    if io.json {
        out(json!({
            "input": io.input,
            "output": io.output,
            "output_format": if out_kind == Kind::Npy { "npy" } else { "npz" },
            "compressed": args.compress,
            "arrays": written.arrays,
            "bytes": written.file_bytes,
        }));
    } else {
        let how = if args.compress { " (deflated)" } else { "" };
        out(format_args!(
            "{}: {} arrays{how}, {} bytes",
            io.output.display(),
            written.arrays,
            written.file_bytes
        ));
    }
    Ok(ExitCode::SUCCESS)
}
