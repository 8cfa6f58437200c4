//! Sharded `.bin` sets: `pytorch_model.bin.index.json` (or diffusers'
//! `diffusion_pytorch_model.bin.index.json`) and the checkpoints it names,
//! validated like safetensors sets, converted to a sharded safetensors set
//! with its index.
//!
//! By default each input shard becomes one output shard holding the same
//! tensors (`model-0000K-of-0000N.safetensors`); with a maximum shard size
//! the tensors, in the input's order (shard by shard, each in pickle
//! order), are cut again with huggingface_hub's greedy rule
//! ([`plan_shards`]). Tied weights are resolved within each shard (torch
//! storages are per file, and transformers keeps the names of a tied
//! storage in one shard): the name that comes first in the pickle is
//! written, the others are recorded as `"removed": "kept"` in the metadata
//! of the output shard holding the kept tensor, and left out of the index.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tensorfile_pytorch::{conversion, Checkpoint, ConvertTensor, LoadOptions, TorchTensor};

use tensorfile_pytorch::convert::{FORMAT_KEY, FORMAT_VALUE};

use super::ConvertOptions;
use crate::cast::{self, plan_targets};
use crate::error::{Error, Result};
use crate::reshard::plan_shards;
use crate::shard::{ShardError, ShardIndex};
use crate::{save_plan, Metadata, Plan, TensorData};

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
    /// [`MAX_INDEX_LEN`](crate::shard::MAX_INDEX_LEN) bytes), a shard missing or refused, or shards
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
        let bad = |problem: String| ShardError::BadIndex {
            index: index_path.clone(),
            problem,
        };
        if index.weight_map.is_empty() {
            return Err(bad("weight_map lists no tensors".into()).into());
        }
        // Shard name -> the tensors the index maps to it, names checked
        // before any file is opened.
        let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (tensor, shard) in &index.weight_map {
            if let Some(problem) = bin_name_problem(shard) {
                return Err(ShardError::BadShardName {
                    tensor: tensor.clone(),
                    shard: shard.clone(),
                    problem,
                }
                .into());
            }
            by_shard.entry(shard).or_default().push(tensor);
        }
        let mut shards = Vec::with_capacity(by_shard.len());
        for (name, tensors) in &by_shard {
            let shard_path = dir.join(name);
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

/// One output file of a set's conversion.
#[derive(Debug)]
pub struct SetFile<'a> {
    /// Its file name (`model-00001-of-00004.safetensors`).
    pub name: String,
    /// What it holds.
    pub plan: Plan<'a>,
}

/// The conversion of a set: one plan per output file, and the index (none
/// when everything fits one file, written as `<prefix>.safetensors`).
#[derive(Debug)]
pub struct SetPlan<'a> {
    /// The output files, in order.
    pub files: Vec<SetFile<'a>>,
    /// The index, as huggingface_hub writes it, with `total_size` and
    /// `total_parameters` (as transformers writes them).
    pub index: Option<ShardIndex>,
    /// The index's file name (`model.safetensors.index.json`).
    pub index_name: String,
    /// What the files will hold.
    pub report: SetReport,
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
    /// Output tensor bytes (`total_size`).
    pub total_size: u64,
    /// Parameters written (a tied tensor counted once: `total_parameters`).
    pub total_parameters: u128,
    /// The output files, in order.
    pub files: Vec<String>,
}

/// A tensor to write, with where it comes from.
struct Item<'a> {
    shard: usize,
    order: usize,
    tensor: ConvertTensor<'a>,
}

/// Plans the conversion of `set` (`options.load` is not used: the set is
/// loaded). Without `max_shard_size`, one output file per input shard,
/// holding the same tensors; with it, the tensors re-cut as
/// [`plan_shards`] does. Every cast is checked here, over the whole set.
///
/// # Errors
/// The sharing policy refuses a shard, metadata keys collide, or a cast is
/// not allowed.
pub fn plan_set<'a>(
    set: &'a CheckpointSet,
    options: &ConvertOptions,
    max_shard_size: Option<u64>,
) -> Result<SetPlan<'a>> {
    let policy = options.policy();
    let mut items: Vec<Item<'a>> = Vec::new();
    // Per input shard: its aliases (removed, kept) and kept values.
    let mut aliases: Vec<Vec<(String, String)>> = Vec::new();
    let mut values: Vec<Vec<(String, String)>> = Vec::new();
    for (i, shard) in set.shards.iter().enumerate() {
        let conv = conversion(&shard.checkpoint, &policy)?;
        aliases.push(conv.aliases);
        values.push(if options.keep_values {
            shard.checkpoint.values().to_vec()
        } else {
            Vec::new()
        });
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
    let sizes: Vec<u64> = items
        .iter()
        .zip(&targets)
        .map(|(t, target)| {
            let numel = crate::dtype::numel(t.tensor.shape()).unwrap_or(0);
            target.dtype.byte_len(numel).unwrap_or(0)
        })
        .collect();
    // Output files as lists of positions into `items`.
    let groups: Vec<Vec<usize>> = match max_shard_size {
        Some(max) => plan_shards(&sizes, max),
        None => (0..set.shards.len())
            .map(|s| (0..items.len()).filter(|&k| items[k].shard == s).collect())
            .collect(),
    };
    let groups = if groups.is_empty() {
        vec![Vec::new()]
    } else {
        groups
    };
    let count = groups.len();
    let name_of = |g: usize| {
        if count == 1 {
            format!("{}.safetensors", set.prefix)
        } else {
            format!("{}-{:05}-of-{count:05}.safetensors", set.prefix, g + 1)
        }
    };
    let mut group_of = vec![0usize; items.len()];
    for (g, members) in groups.iter().enumerate() {
        for &k in members {
            group_of[k] = g;
        }
    }
    // Each output file's metadata: the format, the aliases of the tensors
    // it keeps, the values of the input shards whose tensors it holds.
    let kept_in: HashMap<(usize, &str), usize> = items
        .iter()
        .enumerate()
        .map(|(k, t)| ((t.shard, t.tensor.name()), group_of[k]))
        .collect();
    let mut metadata: Vec<Metadata> = (0..count)
        .map(|_| Metadata::from([(FORMAT_KEY.to_string(), FORMAT_VALUE.to_string())]))
        .collect();
    let mut insert = |g: usize, k: &str, v: &str, what: &str| -> Result<()> {
        match metadata[g].insert(k.to_string(), v.to_string()) {
            Some(old) if old != v => {
                Err(Error::from(tensorfile_pytorch::Error::Structure(format!(
                    "metadata key {k:?} ({what}) of output file {} collides with another entry",
                    name_of(g)
                ))))
            }
            _ => Ok(()),
        }
    };
    for (s, list) in aliases.iter().enumerate() {
        for (removed, kept) in list {
            let g = kept_in.get(&(s, kept.as_str())).copied().unwrap_or(0);
            insert(g, removed, kept, "an alias")?;
        }
    }
    for (s, list) in values.iter().enumerate() {
        let mut holding: Vec<usize> = (0..items.len())
            .filter(|&k| items[k].shard == s)
            .map(|k| group_of[k])
            .collect();
        holding.sort_unstable();
        holding.dedup();
        for g in holding {
            for (k, v) in list {
                insert(g, k, v, "a kept value")?;
            }
        }
    }
    let mut report = SetReport {
        tensors: items.len(),
        aliases: aliases.iter().map(Vec::len).sum(),
        cast: 0,
        total_size: sizes.iter().fold(0u64, |a, &b| a.saturating_add(b)),
        total_parameters: items
            .iter()
            .map(|t| u128::from(t.tensor.tensor().numel()))
            .sum(),
        files: (0..count).map(name_of).collect(),
    };
    let mut weight_map = BTreeMap::new();
    let mut slots: Vec<Option<(ConvertTensor<'a>, cast::Target)>> = items
        .into_iter()
        .zip(targets)
        .map(|(t, target)| Some((t.tensor, target)))
        .collect();
    let mut files = Vec::with_capacity(count);
    for (g, members) in groups.iter().enumerate() {
        let name = name_of(g);
        let mut tensors = Vec::with_capacity(members.len());
        for &k in members {
            if let Some((t, target)) = slots.get_mut(k).and_then(Option::take) {
                weight_map.insert(t.name().to_string(), name.clone());
                tensors.push((t, target));
            }
        }
        let (plan, summary) =
            cast::convert_plan_targeted(tensors, Some(&metadata[g]), options.cast)?;
        report.cast += summary.cast;
        files.push(SetFile { name, plan });
    }
    let index = (count > 1).then(|| {
        let mut index = ShardIndex::new(report.total_size, weight_map);
        // As transformers and mlx-lm write it, beside huggingface_hub's
        // total_size.
        index.metadata.insert(
            "total_parameters".into(),
            Value::from(u64::try_from(report.total_parameters).unwrap_or(u64::MAX)),
        );
        index
    });
    Ok(SetPlan {
        files,
        index,
        index_name: format!("{}.safetensors.index.json", set.prefix),
        report,
    })
}

/// Refuses an output directory that already holds safetensors weights
/// under `prefix`: leftovers would mix two models.
fn check_out_dir(dir: &Path, prefix: &str) -> Result<()> {
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
        if rest == ".safetensors"
            || rest == ".safetensors.index.json"
            || (rest.starts_with('-') && rest.ends_with(".safetensors"))
        {
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

/// Writes a planned set into `out_dir` (created if missing; refused if it
/// already holds weights with the set's prefix): each file with
/// [`save_plan`], then the index. On a failure, the files already written
/// are removed, so that no partial set is left. `progress` is told each
/// time more tensor bytes are written. Returns the paths written.
///
/// # Errors
/// A file fails to be written (naming it).
pub fn write_set(
    out_dir: &Path,
    set: &SetPlan<'_>,
    write: &crate::WriteOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<PathBuf>> {
    let prefix = set
        .index_name
        .strip_suffix(".safetensors.index.json")
        .unwrap_or(&set.index_name);
    check_out_dir(out_dir, prefix)?;
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    let mut written: Vec<PathBuf> = Vec::with_capacity(set.files.len() + 1);
    let result = (|| -> Result<()> {
        for file in &set.files {
            let path = out_dir.join(&file.name);
            save_plan(&path, &file.plan, write, progress)?;
            written.push(path);
        }
        if let Some(index) = &set.index {
            let path = out_dir.join(&set.index_name);
            let text = index.to_json();
            let out = crate::AtomicFile::create(&path)?;
            out.write_all_at(text.as_bytes(), 0)?;
            out.commit(write.sync)?;
            written.push(path);
        }
        Ok(())
    })();
    if let Err(e) = result {
        for path in &written {
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    Ok(written)
}

/// Opens the `.bin` set at `input` (an index, or a directory holding one),
/// converts it into a safetensors set in `out_dir` ([`plan_set`], then
/// [`write_set`]), and reports what was written.
///
/// # Errors
/// As [`CheckpointSet::open`], [`plan_set`] and [`write_set`].
pub fn convert_set(
    input: impl AsRef<Path>,
    out_dir: impl AsRef<Path>,
    options: &ConvertOptions,
    max_shard_size: Option<u64>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<SetReport> {
    let set = CheckpointSet::open(input, &options.load)?;
    let plan = plan_set(&set, options, max_shard_size)?;
    write_set(out_dir.as_ref(), &plan, &options.write, progress)?;
    Ok(plan.report)
}
