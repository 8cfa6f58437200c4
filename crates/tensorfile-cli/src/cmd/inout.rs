//! What the commands that transform safetensors (rewrite, convert,
//! quantize, dequantize) read and write: the library's
//! [`tensorfile::transform`] with a progress bar, inputs that are not
//! safetensors refused in the CLI's words.

use std::path::Path;

use tensorfile::plan::Plan;
use tensorfile::shard::SetTensor;
use tensorfile::transform::{Input, Written};
use tensorfile::{ReadOptions, WriteOptions};

use super::Failure;
use crate::progress::Progress;

/// Opens IN, refusing what is not safetensors (saying what it is).
pub fn open(path: &Path, read: &ReadOptions) -> Result<Input, Failure> {
    let kind = super::safetensors_input(path)?;
    Ok(Input::open(path, kind, read)?)
}

/// [`tensorfile::transform::write`] with a progress bar called `what`.
pub fn write(
    input: &Input,
    tensors: &[SetTensor<'_>],
    plan: &Plan<'_>,
    out: &Path,
    max_shard_size: Option<u64>,
    options: &WriteOptions,
    what: &str,
) -> Result<Written, Failure> {
    let bar = Progress::bytes(plan.data_len()?, what);
    let progress = |n: u64| bar.inc(n);
    let written = tensorfile::transform::write(
        input,
        tensors,
        plan,
        out,
        max_shard_size,
        options,
        &progress,
    )?;
    drop(bar);
    Ok(written)
}
