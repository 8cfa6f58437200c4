//! What the commands that transform safetensors (rewrite, convert,
//! quantize, dequantize) read and write: the library's
//! [`tensorfile::transform`] with a progress bar, inputs that are not
//! safetensors refused in the CLI's words. PyTorch checkpoints and `.bin`
//! sets (`convert`) come in through their own loader and go out through the
//! same [`write_to`].

use std::path::Path;

use tensorfile::set::SetTensor;
use tensorfile::{ReadOptions, WriteOptions};
use tensorfile_core::plan::Plan;

pub use tensorfile::transform::{Layout, TransformInput as Input, Written};

use super::Failure;
use crate::progress::Bar;

/// Opens IN, refusing what is not safetensors (saying what it is).
pub fn open(path: &Path, read: &ReadOptions) -> Result<Input, Failure> {
    let kind = super::safetensors_input(path)?;
    Ok(Input::new(kind, super::remote::open_set(path, read)?))
}

/// Writes what `plan` (built over `tensors` of `input`) produces to `out`,
/// as [`write_to`] does.
pub fn write(
    input: &Input,
    tensors: &[SetTensor<'_>],
    plan: &Plan<'_, tensorfile::Error>,
    out: &Path,
    max_shard_size: Option<u64>,
    options: &WriteOptions,
    what: &str,
) -> Result<Written, Failure> {
    write_to(
        &input.layout(tensors),
        plan,
        out,
        max_shard_size,
        options,
        what,
    )
}

/// [`tensorfile::transform::write_to`] with a progress bar called `what`.
pub fn write_to(
    layout: &Layout,
    plan: &Plan<'_, tensorfile::Error>,
    out: &Path,
    max_shard_size: Option<u64>,
    options: &WriteOptions,
    what: &str,
) -> Result<Written, Failure> {
    let bar = Bar::bytes(plan.data_len()?, what);
    let written =
        tensorfile::transform::write_to(layout, plan, out, max_shard_size, options, &bar)?;
    drop(bar);
    Ok(written)
}
