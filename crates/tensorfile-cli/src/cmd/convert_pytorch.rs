//! The PyTorch side of `tensorfile convert`: IN is a checkpoint (`.pt`,
//! `.pth`, `pytorch_model.bin`), loaded by `tensorfile-pytorch` without
//! executing anything. Tensors stream from the mapped checkpoint into the
//! atomic save, cast on the way with `--dtype` (the same rules as for
//! safetensors input).

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::CastOptions;
use tensorfile::{Dtype, WriteOptions};
use tensorfile_pytorch::convert::{convert_checkpoint, ConvertOptions};
use tensorfile_pytorch::{Checkpoint, LoadOptions, SharedPolicy};

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
    /// The checkpoint.
    pub input: &'a Path,
    /// The safetensors file to write.
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
}

/// Converts the checkpoint; exit 1 (and no OUT) when it is refused.
pub fn run(job: Job<'_>) -> Result<ExitCode, Failure> {
    // OUT must not be the checkpoint itself (safetensors bytes under its name).
    super::refuse_input_as_output(job.output, [job.input])?;
    let p = job.pytorch;
    let load = p.budgets.apply(LoadOptions {
        key: p.key,
        name: p.name,
        ..LoadOptions::default()
    });
    let ckpt = Checkpoint::open_with(job.input, &load)?;
    let write = WriteOptions {
        sync: job.sync,
        ..WriteOptions::default()
    };
    let options = ConvertOptions {
        load,
        shared: p.shared,
        keep_values: p.keep_values,
        write,
        dtype: job.dtype,
        cast: job.cast,
    };
    let total: u64 = ckpt.tensors().map(|t| t.nbytes()).sum();
    let bar = crate::progress::Progress::bytes(total, "converting");
    let report = convert_checkpoint(&ckpt, job.output, &options, |p| {
        bar.set(p.bytes_done, p.bytes_total)
    });
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
