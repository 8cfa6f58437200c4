//! Splitting a set of tensors into shards, and merging shards into one file.
//!
//! Both stream through the canonical writer one tensor at a time, copying
//! from the memory-mapped source: memory stays bounded by the headers and
//! one piece of one tensor, whatever the model's size.
//!
//! Splitting follows huggingface_hub (`split_state_dict_into_shards_factory`):
//! tensors are taken in the source's data order and fill the current shard
//! until the next one would take it past the limit; a tensor larger than the
//! limit gets a shard of its own, placed when it is met, while the current
//! shard stays open. One shard is written as `<prefix>.safetensors` with no
//! index; several as `<prefix>-00001-of-0000N.safetensors` and
//! `<prefix>.safetensors.index.json`.
//!
//! A split is all or nothing: every file is written as a temporary
//! ([`AtomicSet`]), then all are put in place, the index last; a failure
//! (a full disk, an interruption) leaves none of them, so running it again
//! works.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::atomic::{check_not_input, write_plan_parts, AtomicSet, NewDirs};
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::progress::Progress;
use crate::save_plan;
use crate::set::{SetTensor, ShardIndex, ShardedTensors};
use crate::writer::{TensorSpec, WriteOptions};

/// Groups tensor sizes (in source order) into shards the way huggingface_hub
/// does; each shard lists positions into `sizes` (`[3, 3, 9, 4, 2]` within
/// 8: `[[2], [0, 1], [3, 4]]`, a tensor over the limit alone, a small one
/// joining the open shard). [`split`] and the converters use it.
pub(crate) fn plan_shards(sizes: &[u64], max_shard_size: u64) -> Vec<Vec<usize>> {
    let mut shards = Vec::new();
    let mut current = Vec::new();
    let mut current_size = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        if size > max_shard_size {
            shards.push(vec![i]);
            continue;
        }
        // current_size <= max and size <= max: no overflow in practice, but
        // saturate rather than trust it.
        if current_size.saturating_add(size) > max_shard_size {
            shards.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current.push(i);
        current_size += size;
    }
    if !current.is_empty() {
        shards.push(current);
    }
    shards
}

/// How to split.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SplitOptions {
    /// The most data bytes a shard holds (a larger tensor is alone).
    pub max_shard_size: u64,
    /// The file name prefix: `model` gives `model-00001-of-00002.safetensors`.
    pub prefix: String,
    /// How each file is written.
    pub write: WriteOptions,
}

impl SplitOptions {
    /// Options with these `max_shard_size`, `prefix`; the other fields at their defaults.
    pub fn new(max_shard_size: u64, prefix: String) -> SplitOptions {
        SplitOptions {
            max_shard_size,
            prefix,
            write: Default::default(),
        }
    }
}

crate::with_fields!(SplitOptions {
    with_max_shard_size => max_shard_size: u64,
    with_prefix => prefix: String,
    with_write => write: WriteOptions,
});

/// What a split wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitSummary {
    /// The files written, in shard order (one file when everything fits).
    pub files: Vec<PathBuf>,
    /// The index, when there are several shards.
    pub index: Option<PathBuf>,
    /// The data bytes across all shards.
    pub total_size: u64,
}

/// The index of a set: each tensor's file (`(spec, k)`: file `k` of
/// `count`), `total_size` and `total_parameters` (as transformers writes
/// it).
pub(crate) fn set_index<'s>(
    tensors: impl Iterator<Item = (&'s TensorSpec, &'s usize)>,
    prefix: &str,
    count: usize,
) -> Result<ShardIndex> {
    let mut weight_map = BTreeMap::new();
    let (mut total_size, mut total_parameters) = (0u64, 0u128);
    for (spec, &k) in tensors {
        total_size = total_size.saturating_add(spec.byte_len().map_err(Error::from)?);
        total_parameters += u128::from(crate::dtype::numel(&spec.shape).unwrap_or(0));
        weight_map.insert(spec.name.clone(), shard_name(prefix, k, count));
    }
    let mut index = ShardIndex::new(total_size, weight_map);
    index.metadata.insert_u64(
        "total_parameters",
        u64::try_from(total_parameters).unwrap_or(u64::MAX),
    );
    Ok(index)
}

/// The index's file name for `prefix`.
pub(crate) fn index_name(prefix: &str) -> String {
    format!("{prefix}.safetensors.index.json")
}

/// The file names a split into `count` shards uses.
pub(crate) fn shard_name(prefix: &str, i: usize, count: usize) -> String {
    if count == 1 {
        format!("{prefix}.safetensors")
    } else {
        format!("{prefix}-{:05}-of-{count:05}.safetensors", i + 1)
    }
}

/// Refuses an output directory already holding weights under this prefix:
/// leftovers would make the result ambiguous or mix two models.
pub(crate) fn check_out_dir(dir: &Path, prefix: &str) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let taken = rest == ".safetensors"
            || rest == ".safetensors.index.json"
            || (rest.starts_with('-') && rest.contains("-of-") && rest.ends_with(".safetensors"));
        if taken {
            return Err(Error::io(
                dir.join(&*name),
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "the output directory already holds weights with this prefix; choose an empty directory",
                ),
            ));
        }
    }
    Ok(())
}

/// The files a set was read from: its shards and its index.
fn inputs(source: &ShardedTensors) -> impl Iterator<Item = &Path> + '_ {
    let shards = source.shards().iter().map(|s| s.path());
    shards.chain(source.index_path())
}

/// How a plan's tensors are spread over the files of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharding {
    /// Tensor `i` goes to file `parts[i]`, of `count` files.
    Given {
        /// The file of each tensor of the plan.
        parts: Vec<usize>,
        /// How many files.
        count: usize,
    },
    /// huggingface_hub's greedy rule over the tensors' sizes, in plan
    /// order (`plan_shards`).
    MaxSize(u64),
}

impl Sharding {
    /// One output file per input file: tensor `i` of `plan` goes where its
    /// input (its [`Plan::origin`]) came from, `shard_of_input[origin]`;
    /// tensors without an origin go to the first file.
    pub fn like_inputs<E: From<Error> + Send>(
        plan: &Plan<'_, E>,
        shard_of_input: &[usize],
        count: usize,
    ) -> Sharding {
        let parts = (0..plan.specs().len())
            .map(|i| {
                plan.origin(i)
                    .and_then(|o| shard_of_input.get(o).copied())
                    .unwrap_or(0)
            })
            .collect();
        Sharding::Given { parts, count }
    }

    /// How a transform of a set writes its output: cut by
    /// `max_shard_size` when given ([`Sharding::MaxSize`]), else one output
    /// file per input file ([`Sharding::like_inputs`]).
    pub fn new<E: From<Error> + Send>(
        max_shard_size: Option<u64>,
        plan: &Plan<'_, E>,
        shard_of_input: &[usize],
        count: usize,
    ) -> Sharding {
        match max_shard_size {
            Some(max) => Sharding::MaxSize(max),
            None => Sharding::like_inputs(plan, shard_of_input, count),
        }
    }

    /// The file of each tensor and the number of files.
    fn resolve<E: From<Error> + Send>(&self, plan: &Plan<'_, E>) -> Result<(Vec<usize>, usize)> {
        self.resolve_specs(plan.specs())
    }

    /// The file of each of `specs` and the number of files.
    pub(crate) fn resolve_specs(&self, specs: &[TensorSpec]) -> Result<(Vec<usize>, usize)> {
        match self {
            Sharding::Given { parts, count } => Ok((parts.clone(), (*count).max(1))),
            Sharding::MaxSize(max) => {
                let sizes = specs
                    .iter()
                    .map(|s| s.byte_len())
                    .collect::<Result<Vec<u64>, _>>()?;
                let groups = plan_shards(&sizes, *max);
                let mut parts = vec![0; sizes.len()];
                for (k, group) in groups.iter().enumerate() {
                    for &i in group {
                        parts[i] = k;
                    }
                }
                Ok((parts, groups.len().max(1)))
            }
        }
    }
}

/// Writes what `plan` produces as a set in `out_dir`: `sharding` says which
/// file each tensor goes to, files are named as [`split`] names them
/// (`<prefix>-00001-of-0000N.safetensors`, or `<prefix>.safetensors` alone),
/// each keeps the plan's metadata, and several get an index (with
/// `total_size` and `total_parameters`, as transformers writes it). The
/// plan's jobs run once, in parallel; all the files appear at the end, the
/// index last, or none does.
///
/// # Errors
/// `out_dir` already holds weights with this prefix; a job, a read or a
/// write fails (naming the file); or the commit fails.
pub fn save_set<E: From<Error> + Send>(
    out_dir: &Path,
    prefix: &str,
    plan: &Plan<'_, E>,
    sharding: &Sharding,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<SplitSummary, E> {
    check_out_dir(out_dir, prefix)?;
    let (parts, count) = sharding.resolve(plan)?;
    // Declared before the set, so dropped after it: a failure removes the
    // set's temporaries first, then the directories made for them.
    let made = NewDirs::create(out_dir)?;
    let mut set = AtomicSet::new();
    let mut files = Vec::with_capacity(count);
    let mut temps = Vec::with_capacity(count);
    for k in 0..count {
        let path = out_dir.join(shard_name(prefix, k, count));
        temps.push(set.create(&path)?);
        files.push(path);
    }
    write_plan_parts(&temps, plan, &parts, plan.metadata(), options, progress)?;
    for file in temps {
        set.add(file)?;
    }
    let index = set_index(plan.specs().iter().zip(&parts), prefix, count)?;
    let total_size = index.total_size().ok().flatten().unwrap_or(0);
    let index = if count > 1 {
        let path = out_dir.join(index_name(prefix));
        let file = set.create(&path)?;
        file.write_all_at(index.to_json().as_bytes(), 0)?;
        set.add(file)?;
        Some(path)
    } else {
        None
    };
    set.commit(options.sync)?;
    made.keep();
    Ok(SplitSummary {
        files,
        index,
        total_size,
    })
}

/// A plan copying every tensor of `source`, in its data order, with the
/// shards' metadata (their union).
fn copy_plan<'a>(source: &ShardedTensors, tensors: &'a [SetTensor<'a>]) -> Result<Plan<'a>> {
    let metadata = source.metadata()?;
    let mut plan = Plan::new((!metadata.is_empty()).then_some(metadata));
    for (i, t) in tensors.iter().enumerate() {
        plan.copy_from(t, i);
    }
    Ok(plan)
}

/// Splits a set (a file, or any set [`ShardedTensors::open`] takes) into
/// shards in `out_dir`, each keeping the source's metadata. `progress` is
/// told each time more data bytes are written. All the files appear at the
/// end, the index last, or none does (every file is written as a
/// temporary first, as [`save_set`] writes).
///
/// # Errors
/// `out_dir` already holds weights with this prefix; reading or writing
/// fails (naming the file); or the commit fails ([`crate::Error::Set`]).
pub fn split(
    source: &ShardedTensors,
    out_dir: &Path,
    options: &SplitOptions,
    progress: &dyn Progress,
) -> Result<SplitSummary> {
    let tensors = source.tensor_data();
    let plan = copy_plan(source, &tensors)?;
    save_set(
        out_dir,
        &options.prefix,
        &plan,
        &Sharding::MaxSize(options.max_shard_size),
        &options.write,
        progress,
    )
}

/// Merges a set into one canonical file at `out`, whose metadata is the
/// union of the shards' (a key with two values is an error, and nothing is
/// written).
///
/// # Errors
/// `out` is one of the set's files, a shard or the index
/// ([`crate::OutputError::IsInput`]); the shards' metadata
/// disagree; reading or writing fails.
pub fn merge(
    source: &ShardedTensors,
    out: &Path,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<()> {
    check_not_input(out, inputs(source))?;
    let tensors = source.tensor_data();
    let plan = copy_plan(source, &tensors)?;
    save_plan(out, &plan, options, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_plan_matches_huggingface_hub() {
        assert_eq!(plan_shards(&[], 10), Vec::<Vec<usize>>::new());
        assert_eq!(plan_shards(&[5, 5, 5], 10), vec![vec![0, 1], vec![2]]);
        assert_eq!(plan_shards(&[5, 5, 5], 15), vec![vec![0, 1, 2]]);
        assert_eq!(plan_shards(&[11, 1], 10), vec![vec![0], vec![1]]);
        assert_eq!(plan_shards(&[1, 11, 1], 10), vec![vec![1], vec![0, 2]]);
        assert_eq!(plan_shards(&[0, 0], 0), vec![vec![0, 1]]);
    }

    #[test]
    fn names() {
        assert_eq!(shard_name("model", 0, 1), "model.safetensors");
        assert_eq!(
            shard_name("model", 1, 3),
            "model-00002-of-00003.safetensors"
        );
    }
}
