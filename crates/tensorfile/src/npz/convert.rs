//! `.npz` / `.npy` to safetensors: the arrays planned as any other
//! conversion ([`crate::cast::convert_plan`], cast to a dtype if asked)
//! and written by the atomic save, stored C-order arrays read by range in
//! parallel jobs.

use std::path::{Path, PathBuf};

use super::read::NpzFile;
use crate::cast::{convert_plan, CastOptions, ConvertSummary};
use crate::source::ByteSource;
use crate::Progress;
use crate::{save_plan, Dtype, Result, WriteOptions};
use tensorfile_core::set::{save_set, Sharding};

/// How to convert.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct FromNpzOptions {
    /// What opaque arrays (ml_dtypes types saved by numpy: `<V2`, `<V1`,
    /// `<f1`) hold.
    pub opaque: Option<Dtype>,
    /// Cast the float arrays to this dtype (as `convert --dtype` does).
    pub dtype: Option<Dtype>,
    /// How to cast.
    pub cast: CastOptions,
    /// How to write.
    pub write: WriteOptions,
    /// Write a set of shards of at most this many data bytes into the
    /// output directory (`model-0000K-of-0000N.safetensors` and an index),
    /// instead of one file.
    pub max_shard_size: Option<u64>,
}

tensorfile_core::with_fields!(FromNpzOptions {
    with_opaque => opaque: Option<Dtype>,
    with_dtype => dtype: Option<Dtype>,
    with_cast => cast: CastOptions,
    with_write => write: WriteOptions,
    with_max_shard_size => max_shard_size: Option<u64>,
});

/// What a conversion wrote.
#[derive(Debug)]
pub struct FromNpzSummary {
    /// The plan's summary: tensors, casts, and losses of the casts.
    pub convert: ConvertSummary,
    /// The files written (one without `max_shard_size`).
    pub files: Vec<PathBuf>,
    /// The index of a set of several shards.
    pub index: Option<PathBuf>,
}

/// Converts the arrays of `file` into safetensors at `out` (a file, or
/// with `max_shard_size` a directory), with no metadata: every array
/// under its name, in C order, little-endian. `progress` gets the bytes
/// made as they are written.
///
/// # Errors
/// An array that cannot be read as a tensor (an opaque one without
/// `opaque`), a cast that is refused, a read or write error; nothing is
/// written then.
pub fn npz_to_safetensors<S: ByteSource>(
    file: &NpzFile<S>,
    out: &Path,
    options: &FromNpzOptions,
    progress: &dyn Progress,
) -> Result<FromNpzSummary> {
    let tensors = file.tensors(options.opaque)?;
    let (plan, convert) = convert_plan(&tensors, None, options.dtype, options.cast)?;
    let (files, index) = match options.max_shard_size {
        None => {
            save_plan(out, &plan, &options.write, progress)?;
            (vec![out.to_path_buf()], None)
        }
        Some(max) => {
            let s = save_set(
                out,
                "model",
                &plan,
                &Sharding::MaxSize(max),
                &options.write,
                progress,
            )?;
            (s.files, s.index)
        }
    };
    Ok(FromNpzSummary {
        convert,
        files,
        index,
    })
}
