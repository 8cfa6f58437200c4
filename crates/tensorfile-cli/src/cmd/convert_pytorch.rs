//! The PyTorch side of `tensorfile convert`: IN is a checkpoint (`.pt`,
//! `.pth`, `pytorch_model.bin`), loaded by `tensorfile-pytorch` without
//! executing anything, or a sharded `.bin` set (its
//! `pytorch_model.bin.index.json` or `diffusion_pytorch_model.bin.index.json`,
//! or a directory holding one) converted into a sharded safetensors set in
//! OUT. Tensors are read from the checkpoint with positional reads (a file
//! truncated underneath is an error naming it) and written by the atomic
//! save, cast on the way with `--dtype` (the same rules as for safetensors
//! input).

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::CastOptions;
use tensorfile::pytorch::{
    convert_checkpoint, plan_set, write_set, Checkpoint, CheckpointSet, ConvertOptions,
    LoadOptions, SharedPolicy,
};
use tensorfile::{Dtype, WriteOptions};

use super::{out, Failure, Usage};

/// Options of `convert` that apply to PyTorch input only.
#[derive(clap::Args)]
pub struct PytorchArgs {
    /// PyTorch input: convert only this subtree (`model`, or a dotted path
    /// such as `model.encoder`); names are relative to it.
    #[arg(long, value_name = "K")]
    key: Option<String>,
    /// PyTorch input: name for a bare top-level tensor (otherwise "").
    #[arg(long, value_name = "N")]
    name: Option<String>,
    /// PyTorch input: keep non-tensor values (epoch, learning rate, ...) as
    /// string metadata.
    #[arg(long)]
    keep_values: bool,
    /// PyTorch input, tensors sharing storage: `alias` writes exact aliases
    /// once and records each other name in the metadata as "removed":
    /// "kept"; `copy` gives every name its own bytes; `error` refuses any
    /// sharing.
    #[arg(long, value_name = "POLICY", default_value = "alias")]
    shared: SharedPolicy,
    #[command(flatten)]
    budgets: BudgetArgs,
}

/// The loader's budgets, for PyTorch input (`convert` and `inspect`):
/// each replaces its `LoadOptions` default.
#[derive(clap::Args, Default)]
pub struct BudgetArgs {
    /// PyTorch input: most bytes the pickle interpreter may hold
    /// (default 268435456, 256 MiB).
    #[arg(long, value_name = "BYTES")]
    max_pickle_bytes: Option<usize>,
    /// PyTorch input: largest expanded tensor (a view larger than its
    /// storage), in bytes (default 1073741824, 1 GiB).
    #[arg(long, value_name = "BYTES")]
    max_expanded_bytes: Option<u64>,
    /// PyTorch input: most bytes of expanded tensors in all, every name
    /// counted (default 1073741824, 1 GiB).
    #[arg(long, value_name = "BYTES")]
    max_expanded_total_bytes: Option<u64>,
    /// PyTorch input: most bytes of deflated records held inflated at once
    /// (default 4294967296, 4 GiB).
    #[arg(long, value_name = "BYTES")]
    max_inflated_bytes: Option<u64>,
}

impl BudgetArgs {
    /// The load options with these budgets.
    pub fn apply(&self, mut load: LoadOptions) -> LoadOptions {
        if let Some(n) = self.max_pickle_bytes {
            load.limits.max_bytes = n;
        }
        if let Some(n) = self.max_expanded_bytes {
            load.max_expanded_bytes = n;
        }
        if let Some(n) = self.max_expanded_total_bytes {
            load.max_expanded_total_bytes = n;
        }
        if let Some(n) = self.max_inflated_bytes {
            load.max_inflated_bytes = n;
        }
        load
    }

    /// The first budget flag given, if any.
    pub fn given(&self) -> Option<&'static str> {
        [
            (self.max_pickle_bytes.is_some(), "--max-pickle-bytes"),
            (self.max_expanded_bytes.is_some(), "--max-expanded-bytes"),
            (
                self.max_expanded_total_bytes.is_some(),
                "--max-expanded-total-bytes",
            ),
            (self.max_inflated_bytes.is_some(), "--max-inflated-bytes"),
        ]
        .into_iter()
        .find_map(|(on, flag)| on.then_some(flag))
    }

    /// Refuses these options for an input that is not a checkpoint.
    pub fn refuse_for(&self, input: &Path) -> Result<(), Failure> {
        match self.given() {
            Some(flag) => Err(Usage::failure(format_args!(
                "{flag} applies only to PyTorch input; {} is not a PyTorch checkpoint",
                input.display()
            ))),
            None => Ok(()),
        }
    }
}

impl PytorchArgs {
    /// Refuses these options for an input that is not a checkpoint.
    pub fn refuse_for(&self, input: &Path) -> Result<(), Failure> {
        let given = [
            (self.key.is_some(), "--key"),
            (self.name.is_some(), "--name"),
            (self.keep_values, "--keep-values"),
            (self.shared != SharedPolicy::Alias, "--shared"),
        ];
        match given
            .iter()
            .find_map(|(on, flag)| on.then_some(*flag))
            .or(self.budgets.given())
        {
            Some(flag) => Err(Usage::failure(format_args!(
                "{flag} applies only to PyTorch input; {} is not a PyTorch checkpoint",
                input.display()
            ))),
            None => Ok(()),
        }
    }
}

/// One conversion of a checkpoint.
pub struct Job<'a> {
    /// The checkpoint, or a `.bin` set's index or directory.
    pub input: &'a Path,
    /// The safetensors file to write, or for a set the directory.
    pub output: &'a Path,
    /// Cast float tensors to this dtype.
    pub dtype: Option<Dtype>,
    /// How to cast.
    pub cast: CastOptions,
    /// Sync OUT and its directory.
    pub sync: bool,
    /// Print JSON.
    pub json: bool,
    /// The PyTorch options.
    pub pytorch: PytorchArgs,
    /// For a set: re-cut the output into shards of at most this many bytes.
    pub max_shard_size: Option<u64>,
}

impl Job<'_> {
    fn options(&mut self) -> ConvertOptions {
        let p = &mut self.pytorch;
        let load = p.budgets.apply(LoadOptions {
            key: p.key.take(),
            name: p.name.take(),
            ..LoadOptions::default()
        });
        ConvertOptions {
            load,
            shared: p.shared,
            keep_values: p.keep_values,
            write: WriteOptions {
                sync: self.sync,
                ..WriteOptions::default()
            },
            dtype: self.dtype,
            cast: self.cast,
        }
    }
}

/// Converts the checkpoint; exit 1 (and no OUT) when it is refused.
pub fn run(mut job: Job<'_>) -> Result<ExitCode, Failure> {
    if job.max_shard_size.is_some() {
        return Err(Usage::failure(format_args!(
            "--max-shard-size applies to sharded sets; {} is a single checkpoint (use `tensorfile shard` on the converted file)",
            job.input.display()
        )));
    }
    // OUT must not be the checkpoint itself (safetensors bytes under its name).
    super::refuse_input_as_output(job.output, [job.input])?;
    let options = job.options();
    let ckpt = Checkpoint::open_with(job.input, &options.load)?;
    let total: u64 = ckpt.tensors().map(|t| t.nbytes()).sum();
    let bar = crate::progress::Progress::bytes(total, "converting");
    let report = convert_checkpoint(&ckpt, job.output, &options, &|n| bar.inc(n));
    drop(bar);
    let report = report?;
    let (tensors, aliases, cast) = (report.tensors, report.aliases, report.cast);
    let bytes = std::fs::metadata(job.output)
        .map_err(|e| tensorfile::Error::io(job.output, e))?
        .len();
    if job.json {
        out(json!({
            "input": job.input,
            "input_format": "pytorch",
            "output": job.output,
            "dtype": job.dtype.map(|d| d.name()),
            "tensors": tensors,
            "aliases": aliases,
            "cast": cast,
            "bytes": bytes,
        }));
    } else {
        let aliases = if aliases > 0 {
            format!(" (+{aliases} aliases)")
        } else {
            String::new()
        };
        let cast = match job.dtype {
            Some(d) => format!(", {cast} cast to {d}"),
            None => String::new(),
        };
        out(format_args!(
            "{}: {tensors} tensors{aliases}{cast}, {bytes} bytes",
            job.output.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Converts a sharded `.bin` set (`job.input` is its index or a directory
/// holding one) into a safetensors set in the directory `job.output`: one
/// output shard per input shard, or re-cut with `--max-shard-size`; the
/// index last. Exit 1 (and no output files) when it is refused.
pub fn run_set(mut job: Job<'_>) -> Result<ExitCode, Failure> {
    for (given, flag) in [
        (job.pytorch.key.is_some(), "--key"),
        (job.pytorch.name.is_some(), "--name"),
    ] {
        if given {
            return Err(Usage::failure(format_args!(
                "{flag} applies to a single checkpoint; {} is a sharded .bin set",
                job.input.display()
            )));
        }
    }
    let options = job.options();
    let set = CheckpointSet::open(job.input, &options.load)?;
    let plan = plan_set(&set, &options, job.max_shard_size)?;
    let bar = crate::progress::Progress::bytes(plan.report.total_size, "converting");
    let written = write_set(job.output, &plan, &options.write, &|n| bar.inc(n));
    drop(bar);
    let written = written?;
    let r = &plan.report;
    if job.json {
        out(json!({
            "input": set.index_path(),
            "input_format": "pytorch-set",
            "output": job.output,
            "dtype": job.dtype.map(|d| d.name()),
            "files": written,
            "tensors": r.tensors,
            "aliases": r.aliases,
            "cast": r.cast,
            "total_size": r.total_size,
            "total_parameters": r.total_parameters.to_string(),
        }));
    } else {
        let aliases = if r.aliases > 0 {
            format!(" (+{} aliases)", r.aliases)
        } else {
            String::new()
        };
        let cast = match job.dtype {
            Some(d) => format!(", {} cast to {d}", r.cast),
            None => String::new(),
        };
        out(format_args!(
            "{}: {} files, {} tensors{aliases}{cast}, {} bytes of tensors",
            job.output.display(),
            written.len(),
            r.tensors,
            r.total_size
        ));
    }
    Ok(ExitCode::SUCCESS)
}
