//! The PyTorch options of `tensorfile convert` (IN a checkpoint or a
//! sharded `.bin` set, converted by the library's `convert` operation) and
//! the loader's budgets, which `inspect` takes too.

use std::path::Path;

use tensorfile::pytorch::{LoadOptions, SharedPolicy};
use tensorfile_ops::convert::PytorchOptions;

use super::{Failure, Usage};

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
    /// These budgets as the library's options take them.
    fn options(&self) -> PytorchOptions {
        PytorchOptions {
            max_pickle_bytes: self.max_pickle_bytes,
            max_expanded_bytes: self.max_expanded_bytes,
            max_expanded_total_bytes: self.max_expanded_total_bytes,
            max_inflated_bytes: self.max_inflated_bytes,
            ..PytorchOptions::default()
        }
    }

    /// The load options with these budgets (the library's rule).
    pub fn apply(&self, load: LoadOptions) -> LoadOptions {
        self.options().budgets(load)
    }

    /// The first budget flag given, if any.
    pub fn given(&self) -> Option<&'static str> {
        self.options().given()
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
    /// These options as the operation's request takes them.
    pub fn options(&self) -> PytorchOptions {
        let shared = match self.shared {
            SharedPolicy::Alias => "alias",
            SharedPolicy::Copy => "copy",
            SharedPolicy::Error => "error",
        };
        PytorchOptions {
            key: self.key.clone(),
            name: self.name.clone(),
            keep_values: self.keep_values,
            shared: Some(shared.to_string()),
            ..self.budgets.options()
        }
    }
}
