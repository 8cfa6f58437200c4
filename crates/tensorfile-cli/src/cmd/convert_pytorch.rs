//! The PyTorch side of `tensorfile convert`: IN is a checkpoint (`.pt`,
//! `.pth`, `pytorch_model.bin`), loaded by `tensorfile-pytorch` without
//! executing anything, or a sharded `.bin` set (its
//! `pytorch_model.bin.index.json` or `diffusion_pytorch_model.bin.index.json`,
//! or a directory holding one) converted into a sharded safetensors set in
//! OUT. Tensors are read from the checkpoint with positional reads (a file
//! truncated underneath is an error naming it), cast on the way with
//! `--dtype` (the same rules as for safetensors input), and written by the
//! same writer as every set transform ([`inout::write_to`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;
use tensorfile::cast::CastOptions;
use tensorfile::pytorch::{
    checkpoint_plan as convert_plan, plan_set, Checkpoint, CheckpointSet, ConvertOptions,
    LoadOptions, SharedPolicy, BIN_INDEX_NAMES,
};
use tensorfile::{Dtype, WriteOptions};

use super::inout::{self, Layout, Written};
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

/// One conversion of a checkpoint or a `.bin` set.
pub struct Job<'a> {
    /// The checkpoint, or a `.bin` set's index or directory.
    pub input: &'a Path,
    /// Whether `input` is a set (an index, or a directory).
    pub set: bool,
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
    /// Write OUT as a set cut into shards of at most this many bytes.
    pub max_shard_size: Option<u64>,
    /// Record each tensor's sha256 in OUT's metadata (`--embed-hash`).
    pub embed_hash: bool,
}

impl Job<'_> {
    fn options(&mut self) -> ConvertOptions {
        let p = &mut self.pytorch;
        let load = p.budgets.apply(
            LoadOptions::default()
                .with_key(p.key.take())
                .with_name(p.name.take()),
        );
        ConvertOptions::default()
            .with_load(load)
            .with_shared(p.shared)
            .with_keep_values(p.keep_values)
            .with_write(WriteOptions::default().with_sync(self.sync))
            .with_dtype(self.dtype)
            .with_cast(self.cast)
    }
}

/// What a conversion planned and what its casts lost, for the summary.
struct Counts<'r> {
    tensors: usize,
    aliases: usize,
    cast: usize,
    losses: Vec<(&'r str, tensorfile::cast::Losses)>,
}

/// Converts the checkpoint or the set; exit 1 (and no OUT) when it is
/// refused. A set's index (or a directory holding one) is opened as a
/// [`CheckpointSet`]; a directory holding a single checkpoint and no index
/// is that checkpoint. Either way the plan is written by
/// [`inout::write_to`], as the safetensors transforms are: a file, or a set
/// with one output shard per input shard (or cut by `--max-shard-size`).
pub fn run(job: Job<'_>) -> Result<ExitCode, Failure> {
    if !job.set {
        let input = job.input;
        return run_checkpoint(job, input);
    }
    if let Some(index) = CheckpointSet::find_index(job.input) {
        return run_set(job, &index);
    }
    // A directory of one checkpoint, without an index.
    let single = BIN_INDEX_NAMES
        .iter()
        .map(|(index, _)| job.input.join(index.trim_end_matches(".index.json")))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Failure::from(format!(
                "{}: no .bin checkpoint or index here",
                job.input.display()
            ))
        })?;
    run_checkpoint(job, &single)
}

/// Converts one checkpoint.
fn run_checkpoint(mut job: Job<'_>, input: &Path) -> Result<ExitCode, Failure> {
    // OUT must not be the checkpoint itself (safetensors bytes under its name).
    super::refuse_input_as_output(job.output, [input])?;
    let options = job.options();
    let ckpt = Checkpoint::open_with(input, &options.load)?;
    let (plan, report) = convert_plan(&ckpt, &options)?;
    let layout = Layout {
        is_set: false,
        shard_of: vec![0; plan.specs().len()],
        shards: 1,
        prefix: "model".into(),
    };
    let mut written = inout::write_to(
        &layout,
        &plan,
        job.output,
        job.max_shard_size,
        &options.write,
        "converting",
    )?;
    if job.embed_hash {
        super::hash::embed_into(&mut written, &options.write)?;
    }
    let counts = Counts {
        tensors: report.tensors,
        aliases: report.aliases,
        cast: report.cast,
        losses: report.losses(),
    };
    print(&job, input, "pytorch", &counts, &written);
    Ok(ExitCode::SUCCESS)
}

/// Converts a sharded `.bin` set whose index is `index` into a safetensors
/// set in the directory `job.output`.
fn run_set(mut job: Job<'_>, index: &Path) -> Result<ExitCode, Failure> {
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
    let set = CheckpointSet::open(index, &options.load)?;
    // No output file may be one of the set's files.
    let mut inputs: Vec<PathBuf> = set
        .shards()
        .iter()
        .map(|s| set.dir().join(s.name()))
        .collect();
    inputs.push(set.index_path().to_path_buf());
    super::refuse_input_as_output(job.output, &inputs)?;
    let planned = plan_set(&set, &options)?;
    let layout = Layout {
        is_set: true,
        shard_of: planned.shard_of.clone(),
        shards: planned.shards,
        prefix: planned.prefix.into(),
    };
    let mut written = inout::write_to(
        &layout,
        &planned.plan,
        job.output,
        job.max_shard_size,
        &options.write,
        "converting",
    )?;
    if job.embed_hash {
        super::hash::embed_into(&mut written, &options.write)?;
    }
    let r = &planned.report;
    let counts = Counts {
        tensors: r.tensors,
        aliases: r.aliases,
        cast: r.cast,
        losses: r.losses(),
    };
    print(&job, set.index_path(), "pytorch-set", &counts, &written);
    Ok(ExitCode::SUCCESS)
}

/// Prints what was written: one line, or one JSON object, after a warning
/// line per tensor whose cast lost values.
fn print(job: &Job<'_>, input: &Path, format: &str, c: &Counts<'_>, written: &Written) {
    super::losses::report(job.output, &c.losses);
    if job.json {
        out(json!({
            "input": input,
            "input_format": format,
            "output": job.output,
            "files": written.files,
            "index": written.index,
            "dtype": job.dtype.map(|d| d.name()),
            "tensors": c.tensors,
            "aliases": c.aliases,
            "cast": c.cast,
            "bytes": written.bytes,
            "losses": super::losses::json(&c.losses),
        }));
        return;
    }
    let aliases = if c.aliases > 0 {
        format!(" (+{} aliases)", c.aliases)
    } else {
        String::new()
    };
    let cast = match job.dtype {
        Some(d) => format!(", {} cast to {d}", c.cast),
        None => String::new(),
    };
    // A set (OUT a directory) says how many files it has.
    let files = if written.files.len() == 1 && written.files[0] == job.output {
        String::new()
    } else {
        format!("{} files, ", written.files.len())
    };
    out(format_args!(
        "{}: {files}{} tensors{aliases}{cast}, {} bytes",
        job.output.display(),
        c.tensors,
        written.bytes
    ));
}
