//! Sharded `.bin` sets: `pytorch_model.bin.index.json` (or diffusers'
//! `diffusion_pytorch_model.bin.index.json`) and the checkpoints it names,
//! validated like safetensors sets, converted to a sharded safetensors set
//! with its index.
//!
//! The conversion is one plan over every shard's tensors, written by
//! [`save_set`] like any transform of a safetensors set: by default each
//! input shard becomes one output shard holding the same tensors
//! (`model-0000K-of-0000N.safetensors`); with a maximum shard size the
//! tensors, in the input's order (shard by shard, each in pickle order),
//! are cut again with huggingface_hub's greedy rule
//! (huggingface_hub's greedy rule, as `split` cuts). Tied weights are
//! resolved within each shard (torch storages are per file, and
//! transformers keeps the names of a tied storage in one shard): the name
//! that comes first in the pickle is written, the others are recorded as
//! `"removed": "kept"` in the metadata (every output shard carries the
//! union of the shards' metadata, as set transforms do) and left out of
//! the index.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tensorfile_pytorch::{conversion, Checkpoint, ConvertTensor, LoadOptions, TorchTensor};

use super::ConvertOptions;
use crate::cast::file::plan_targets;
use crate::cast::{self};
use crate::error::{Error, Result};
use crate::Progress;
use crate::{Metadata, Plan};
use tensorfile_core::set::{save_set, Sharding, SplitSummary};
use tensorfile_core::set::{ShardError, ShardIndex};

/// The index names of sharded `.bin` sets, each with the prefix of the
/// safetensors files its conversion writes.
pub const BIN_INDEX_NAMES: [(&str, &str); 2] = [
    ("pytorch_model.bin.index.json", "model"),
    (
        "diffusion_pytorch_model.bin.index.json",
        "diffusion_pytorch_model",
    ),
];

/// One shard of a [`CheckpointSet`]: its file name and its checkpoint.
#[derive(Debug)]
pub struct SetShard {
    name: String,
    checkpoint: Checkpoint,
}

impl SetShard {
    /// The shard's file name, as the index names it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The loaded checkpoint.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }
}

/// A sharded `.bin` set: its index and its shards, each loaded (pickles
/// interpreted, storages located; no tensor bytes read) and checked
/// against the index: every tensor of the index is in the shard it names,
/// and every tensor of a shard is listed, mapped to that shard.
#[derive(Debug)]
pub struct CheckpointSet {
    dir: PathBuf,
    index_path: PathBuf,
    index: ShardIndex,
    prefix: &'static str,
    shards: Vec<SetShard>,
}

/// Why a shard name is refused, if it is: it must be a plain file name
/// beside the index.
fn bin_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("the name is empty")
    } else if name.contains('/') || name.contains('\\') || Path::new(name).is_absolute() {
        Some("a path, not a file name beside the index")
    } else if name == "." || name == ".." {
        Some("a directory reference")
    } else if name.contains('\0') {
        Some("the name holds a NUL byte")
    } else {
        None
    }
}

impl CheckpointSet {
    /// The index of a `.bin` set that `path` is or holds: `path` itself
    /// when it is a file named like one of [`BIN_INDEX_NAMES`] (or any
    /// `*.bin.index.json`), the index inside `path` when it is a directory
    /// holding one. `None` otherwise.
    pub fn find_index(path: &Path) -> Option<PathBuf> {
        if path.is_dir() {
            return BIN_INDEX_NAMES
                .iter()
                .map(|(name, _)| path.join(name))
                .find(|p| p.is_file());
        }
        let name = path.file_name()?.to_str()?;
        name.ends_with(".bin.index.json")
            .then(|| path.to_path_buf())
    }

    /// Opens the set whose index is `path` (or that the directory `path`
    /// holds), loading every shard with `load`.
    ///
    /// # Errors
    /// No index found, an index that is not valid (or over
    /// [`MAX_INDEX_LEN`](tensorfile_core::set::MAX_INDEX_LEN) bytes), a shard missing or refused, or shards
    /// that do not agree with the index.
    pub fn open(path: impl AsRef<Path>, load: &LoadOptions) -> Result<CheckpointSet> {
        let path = path.as_ref();
        let index_path = CheckpointSet::find_index(path).ok_or_else(|| {
            Error::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no pytorch_model.bin.index.json or diffusion_pytorch_model.bin.index.json here",
                ),
            )
        })?;
        let dir = match index_path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name = index_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prefix = if file_name.starts_with("diffusion_pytorch_model") {
            "diffusion_pytorch_model"
        } else {
            "model"
        };
        let index = ShardIndex::read(&index_path)?;
        let by_shard = index.by_shard(&index_path, bin_name_problem)?;
        let mut shards = Vec::with_capacity(by_shard.len());
        // Shards are named as the index was given: `x.bin`, not `./x.bin`.
        let beside_index = index_path.parent().unwrap_or(Path::new(""));
        for (name, tensors) in &by_shard {
            let shard_path = beside_index.join(name);
            if !shard_path.exists() {
                return Err(ShardError::MissingShard {
                    shard: (*name).to_string(),
                    tensor: tensors.first().map(|t| t.to_string()).unwrap_or_default(),
                    dir: dir.clone(),
                }
                .into());
            }
            let checkpoint = Checkpoint::open_with(&shard_path, load)?;
            shards.push(SetShard {
                name: (*name).to_string(),
                checkpoint,
            });
        }
        // Shards in their names' order: 00001-of-N first.
        let position: HashMap<&str, usize> = shards
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        for (tensor, shard) in &index.weight_map {
            let holds = |s: &SetShard| s.checkpoint.tensor(tensor).is_some();
            if position
                .get(shard.as_str())
                .is_some_and(|&i| holds(&shards[i]))
            {
                continue;
            }
            return Err(ShardError::NotInShard {
                tensor: tensor.clone(),
                shard: shard.clone(),
                found_in: shards.iter().find(|s| holds(s)).map(|s| s.name.clone()),
            }
            .into());
        }
        for shard in &shards {
            for t in shard.checkpoint.tensors() {
                match index.weight_map.get(t.name()) {
                    None => {
                        return Err(ShardError::NotInMap {
                            tensor: t.name().into(),
                            shard: shard.name.clone(),
                        }
                        .into())
                    }
                    Some(mapped) if *mapped != shard.name => {
                        return Err(ShardError::InTwoShards {
                            tensor: t.name().into(),
                            first: mapped.clone(),
                            second: shard.name.clone(),
                        }
                        .into())
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(CheckpointSet {
            dir,
            index_path,
            index,
            prefix,
            shards,
        })
    }

    /// The directory of the set.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index file.
    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// The parsed index.
    pub fn index(&self) -> &ShardIndex {
        &self.index
    }

    /// The prefix of the safetensors files a conversion writes: `model`,
    /// or `diffusion_pytorch_model` for a diffusers set.
    pub fn output_prefix(&self) -> &'static str {
        self.prefix
    }

    /// The shards, in their names' order.
    pub fn shards(&self) -> &[SetShard] {
        &self.shards
    }

    /// Every tensor with its shard's position, shard by shard (each in name
    /// order).
    pub fn tensors(&self) -> impl Iterator<Item = (usize, TorchTensor<'_>)> + '_ {
        self.shards
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.checkpoint.tensors().map(move |t| (i, t)))
    }

    /// The tensor with this name, and its shard's position.
    pub fn tensor(&self, name: &str) -> Option<(usize, TorchTensor<'_>)> {
        let shard = self.index.weight_map.get(name)?;
        let i = self.shards.iter().position(|s| s.name == *shard)?;
        Some((i, self.shards[i].checkpoint.tensor(name)?))
    }
}

/// The conversion of a set: one plan over every shard's tensors (written
/// by [`save_set`] as any set transform is), with what it takes to keep one
/// output shard per input shard.
#[derive(Debug)]
pub struct SetPlan<'a> {
    /// Every tensor to write, shard by shard (each in pickle order), with
    /// its position in that list as its [`Plan::origin`]; the metadata is
    /// the union of the shards' (the format, every alias, kept values).
    pub plan: Plan<'a, Error>,
    /// Per planned input (origin), the input shard it comes from.
    pub shard_of: Vec<usize>,
    /// How many input shards.
    pub shards: usize,
    /// The prefix of the output files: `model`, or
    /// `diffusion_pytorch_model` for a diffusers set.
    pub prefix: &'static str,
    /// What the files will hold.
    pub report: SetReport,
}

impl SetPlan<'_> {
    /// One output shard per input shard, or, with `max_shard_size`, the
    /// tensors re-cut as `reshard::plan_shards` does.
    pub fn sharding(&self, max_shard_size: Option<u64>) -> Sharding {
        Sharding::new(max_shard_size, &self.plan, &self.shard_of, self.shards)
    }
}

/// What a set's conversion writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetReport {
    /// Tensors written with their own bytes.
    pub tensors: usize,
    /// Names recorded as aliases of a written tensor.
    pub aliases: usize,
    /// Tensors cast to `dtype`.
    pub cast: usize,
    /// The running loss count of each cast tensor, filled in as the plan
    /// runs: read [`SetReport::losses`] after writing.
    pub tallies: Vec<(String, cast::LossTally)>,
    /// Output tensor bytes (`total_size`).
    pub total_size: u64,
    /// Parameters written (a tied tensor counted once: `total_parameters`).
    pub total_parameters: u128,
}

impl SetReport {
    /// The tensors whose cast changed values beyond rounding, with how
    /// many (see [`cast::ConvertSummary::losses`]).
    pub fn losses(&self) -> Vec<(&str, cast::Losses)> {
        cast::file::losses_of(&self.tallies)
    }
}

/// A tensor to write, with where it comes from.
struct Item<'a> {
    shard: usize,
    order: usize,
    tensor: ConvertTensor<'a>,
}

/// Plans the conversion of `set` (`options.load` is not used: the set is
/// loaded). Tied weights are resolved within each shard (torch storages
/// are per file, and transformers keeps the names of a tied storage in one
/// shard), as [`conversion`] does for one checkpoint. Every cast is checked
/// here, over the whole set, so that a quantized weight's companions are
/// known whichever shard holds them.
///
/// # Errors
/// The sharing policy refuses a shard, two shards give one metadata key
/// different values, or a cast is not allowed.
pub fn plan_set<'a>(set: &'a CheckpointSet, options: &ConvertOptions) -> Result<SetPlan<'a>> {
    let policy = options.policy();
    let mut items: Vec<Item<'a>> = Vec::new();
    let mut metadata = Metadata::new();
    let mut aliases = 0;
    for (i, shard) in set.shards.iter().enumerate() {
        let conv = conversion(&shard.checkpoint, &policy)?;
        aliases += conv.aliases.len();
        for (k, v) in conv.metadata {
            match metadata.get(&k) {
                Some(old) if *old != v => {
                    return Err(Error::from(tensorfile_pytorch::Error::Structure(format!(
                        "metadata key {k:?} is {v:?} in shard {} and {old:?} in another shard",
                        shard.name
                    ))))
                }
                _ => {
                    metadata.insert(k, v);
                }
            }
        }
        let mut these: Vec<Item<'a>> = conv
            .tensors
            .into_iter()
            .map(|tensor| Item {
                shard: i,
                order: tensor.tensor().pickle_order(),
                tensor,
            })
            .collect();
        these.sort_by_key(|t| t.order);
        items.extend(these);
    }
    let described: Vec<(&str, crate::Dtype, &[u64])> = items
        .iter()
        .map(|t| (t.tensor.name(), t.tensor.dtype(), t.tensor.shape()))
        .collect();
    let targets = plan_targets(&described, options.dtype, options.cast)?;
    drop(described);
    let shard_of: Vec<usize> = items.iter().map(|t| t.shard).collect();
    let total_parameters = items
        .iter()
        .map(|t| u128::from(t.tensor.tensor().numel()))
        .sum();
    let tensors = items.len();
    let (plan, summary) = cast::file::convert_plan_targeted(
        items.into_iter().map(|t| t.tensor).zip(targets).collect(),
        Some(&metadata),
        options.cast,
    )?;
    let report = SetReport {
        tensors,
        aliases,
        cast: summary.cast,
        tallies: summary.tallies,
        total_size: plan.data_len()?,
        total_parameters,
    };
    Ok(SetPlan {
        plan,
        shard_of,
        shards: set.shards.len(),
        prefix: set.prefix,
        report,
    })
}

/// Opens the `.bin` set at `input` (an index, or a directory holding one)
/// and converts it into a safetensors set in `out_dir` ([`plan_set`], then
/// [`save_set`]: all the files appear at the end, the index last, or none
/// does; a directory already holding weights with the set's prefix is
/// refused). `progress` is told each time more tensor bytes are written.
///
/// # Errors
/// As [`CheckpointSet::open`], [`plan_set`] and [`save_set`].
pub fn convert_set(
    input: impl AsRef<Path>,
    out_dir: impl AsRef<Path>,
    options: &ConvertOptions,
    max_shard_size: Option<u64>,
    progress: &dyn Progress,
) -> Result<(SetReport, SplitSummary)> {
    let set = CheckpointSet::open(input, &options.load)?;
    let planned = plan_set(&set, options)?;
    let written = save_set(
        out_dir.as_ref(),
        planned.prefix,
        &planned.plan,
        &planned.sharding(max_shard_size),
        &options.write,
        progress,
    )?;
    Ok((planned.report, written))
}
