//! PyTorch checkpoints: the `tensorfile-pytorch` loader (re-exported here
//! whole), and their conversion to safetensors, single files
//! ([`convert_file`]) and sharded `.bin` sets ([`CheckpointSet`],
//! [`convert_set`]).
//!
//! A conversion is a [`Plan`] like any other: the loader says which tensors
//! to write under which names and with what metadata
//! ([`conversion`]), [`cast::convert_plan`]
//! plans them (cast to `dtype` if asked), and [`save_plan`] writes the
//! canonical file atomically. Stored tensors are read by range a piece at
//! a time; gathered, expanded and inflated ones are made about 4 MiB at a
//! time; so memory stays at a few pieces per worker whatever the model.
//!
//! ```no_run
//! use tensorfile::pytorch::{convert_file, ConvertOptions};
//! let report = convert_file("pytorch_model.bin", "model.safetensors", &ConvertOptions::default(), &())?;
//! println!("{} tensors, {} aliases", report.tensors, report.aliases);
//! # Ok::<(), tensorfile::Error>(())
//! ```

use std::path::Path;

// The loader, whole but for its `Error`, `Result` and `error` module: its
// error is `crate::PytorchError`, so the library shows one `Error`.
#[doc(hidden)]
pub use tensorfile_pytorch::fuzzing;
use tensorfile_pytorch::{conversion, Conversion, ConvertPolicy};
pub use tensorfile_pytorch::{
    Checkpoint, Format, Limits, LoadOptions, SharedPolicy, TensorBytes, WalkLimits, ZipError,
};

use crate::cast::{self, CastOptions};
use crate::Progress;
use crate::{save_plan, Dtype, Error, Metadata, Plan, WriteOptions};

mod set;

pub use set::{
    convert_set, plan_set, CheckpointSet, SetPlan, SetReport, SetShard, BIN_INDEX_NAMES,
};

/// How to convert.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConvertOptions {
    /// How to load the checkpoint (`key`, `name`, limits and budgets).
    pub load: LoadOptions,
    /// What to do with tensors that share storage.
    pub shared: SharedPolicy,
    /// Keep non-tensor values (numbers, strings) as string metadata.
    pub keep_values: bool,
    /// How to write (alignment, syncing).
    pub write: WriteOptions,
    /// Cast the float tensors to this dtype on the way (the companions of
    /// quantized weights keep theirs, as in [`crate::cast`]).
    pub dtype: Option<Dtype>,
    /// How to cast (saturation, integers), with `dtype`.
    pub cast: CastOptions,
}

tensorfile_core::with_fields!(ConvertOptions {
    with_load => load: LoadOptions,
    with_shared => shared: SharedPolicy,
    with_keep_values => keep_values: bool,
    with_write => write: WriteOptions,
    with_dtype => dtype: Option<Dtype>,
    with_cast => cast: CastOptions,
});

impl ConvertOptions {
    /// The loader's policy part of these options.
    pub(crate) fn policy(&self) -> ConvertPolicy {
        ConvertPolicy {
            shared: self.shared,
            keep_values: self.keep_values,
        }
    }
}

/// What a conversion writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointReport {
    /// Tensors written with their own bytes.
    pub tensors: usize,
    /// Names recorded as aliases of a written tensor.
    pub aliases: usize,
    /// Non-tensor values kept as metadata.
    pub values: usize,
    /// Tensors cast to `dtype`.
    pub cast: usize,
    /// The running loss count of each cast tensor, filled in as the plan
    /// runs: read [`CheckpointReport::losses`] after writing.
    pub tallies: Vec<(String, cast::LossTally)>,
    /// Tensor bytes read from the checkpoint (before any cast).
    pub bytes: u64,
    /// Parameters written (a tied tensor counted once).
    pub parameters: u128,
    /// The output's metadata.
    pub metadata: Metadata,
}

impl CheckpointReport {
    /// The tensors whose cast changed values beyond rounding, with how
    /// many (see [`cast::ConvertSummary::losses`]).
    pub fn losses(&self) -> Vec<(&str, cast::Losses)> {
        cast::file::losses_of(&self.tallies)
    }
}

/// The plan of converting `ckpt` (`options.load` is not used: the
/// checkpoint is loaded), and what it will write. Every cast is checked
/// here, before a byte is made.
///
/// # Errors
/// The sharing policy refuses the checkpoint, metadata keys collide, or a
/// cast is not allowed.
pub fn checkpoint_plan<'a>(
    ckpt: &'a Checkpoint,
    options: &ConvertOptions,
) -> crate::Result<(Plan<'a, Error>, CheckpointReport)> {
    let conv = conversion(ckpt, &options.policy())?;
    plan_conversion(conv, options)
}

/// Plans a conversion made by the loader.
fn plan_conversion<'a>(
    conv: Conversion<'a>,
    options: &ConvertOptions,
) -> crate::Result<(Plan<'a, Error>, CheckpointReport)> {
    let report = CheckpointReport {
        tensors: conv.tensors.len(),
        aliases: conv.aliases.len(),
        values: conv.values,
        cast: 0,
        tallies: Vec::new(),
        bytes: conv.bytes(),
        parameters: conv.parameters(),
        metadata: conv.metadata.clone(),
    };
    let (plan, summary) = cast::file::convert_plan_owned(
        conv.tensors,
        Some(&conv.metadata),
        options.dtype,
        options.cast,
    )?;
    Ok((
        plan,
        CheckpointReport {
            cast: summary.cast,
            tallies: summary.tallies,
            ..report
        },
    ))
}

/// Loads `input` (with positional reads: a file truncated underneath is an
/// error naming it) and converts it to `output`, atomically: a refused or
/// failed conversion leaves `output` as it was. `progress` is told each
/// time more tensor bytes are written.
///
/// # Errors
/// The checkpoint is refused, a tensor cannot be read or cast, or writing
/// fails.
pub fn convert_file(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    options: &ConvertOptions,
    progress: &dyn Progress,
) -> crate::Result<CheckpointReport> {
    let ckpt = Checkpoint::open_with(input, &options.load)?;
    convert_checkpoint(&ckpt, output, options, progress)
}

/// Converts a loaded checkpoint to `output` (`options.load` is not used).
///
/// # Errors
/// As [`convert_file`].
pub fn convert_checkpoint(
    ckpt: &Checkpoint,
    output: impl AsRef<Path>,
    options: &ConvertOptions,
    progress: &dyn Progress,
) -> crate::Result<CheckpointReport> {
    let (plan, report) = checkpoint_plan(ckpt, options)?;
    save_plan(output, &plan, &options.write, progress)?;
    Ok(report)
}
