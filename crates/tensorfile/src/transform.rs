//! What the transforms of safetensors (rewrite, convert, quantize,
//! dequantize: the CLI's commands and the Python package's functions) read
//! and write: a file or a set in, a file or a set out, through the
//! library's plans. PyTorch checkpoints and `.bin` sets come in through
//! their own loader and go out through the same [`write_to`].

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::input::Kind;
use crate::Progress;
use crate::ShardedTensors;
use tensorfile_core::plan::Plan;
use tensorfile_core::set::SetTensor;
use tensorfile_core::set::{save_set, Sharding};
use tensorfile_core::{save_plan, Metadata, ReadOptions, WriteOptions};

/// A safetensors input, file or set, read with positional reads (a file
/// truncated underneath is an error naming it, never a signal).
pub struct TransformInput {
    kind: Kind,
    set: ShardedTensors,
}

impl TransformInput {
    /// Opens `path`, which [`crate::probe`] found to be `kind` (a
    /// safetensors file or set: the caller refuses other kinds in its own
    /// words).
    ///
    /// # Errors
    /// The file or a shard cannot be read or breaks the format, or the set
    /// is inconsistent.
    pub fn open(path: &Path, kind: Kind, read: &ReadOptions) -> Result<TransformInput> {
        let set = ShardedTensors::open_pread(path, read)?;
        Ok(TransformInput::new(kind, set))
    }

    /// The input `set`, opened as `kind` by the caller (from a remote
    /// location, say).
    pub fn new(kind: Kind, set: ShardedTensors) -> TransformInput {
        TransformInput { kind, set }
    }

    /// Whether the input is a set of files (an index, or a directory
    /// holding one): the output is then a directory. A directory holding a
    /// single `model.safetensors` is read as that file.
    pub fn is_set(&self) -> bool {
        self.kind.is_set() && (self.set.is_indexed() || self.set.shards().len() > 1)
    }

    /// Every tensor, shard by shard, read on demand.
    pub fn tensors(&self) -> Vec<SetTensor<'_>> {
        self.set.tensor_data()
    }

    /// The metadata: the file's, or the union of the shards' (a key with
    /// two values is an error naming both shards).
    ///
    /// # Errors
    /// Shards whose metadata disagree.
    pub fn metadata(&self) -> Result<Option<Metadata>> {
        let m = self.set.metadata()?;
        Ok((!m.is_empty()).then_some(m))
    }

    /// The files the input is made of (shards and index), which no output
    /// may be.
    pub fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.set.shards().iter().map(|s| s.path()).collect();
        files.extend(self.set.index_path());
        files
    }

    /// Where `tensors` (from [`TransformInput::tensors`]) lie: what [`write_to`]
    /// needs.
    pub fn layout(&self, tensors: &[SetTensor<'_>]) -> Layout {
        let shards = self.set.shards();
        Layout {
            is_set: self.is_set(),
            shard_of: tensors
                .iter()
                .map(|t| {
                    shards
                        .iter()
                        .position(|s| std::ptr::eq(s, t.shard()))
                        .unwrap_or(0)
                })
                .collect(),
            shards: shards.len(),
            prefix: self.prefix(),
        }
    }

    /// The file name prefix of the set's shards (`model` for
    /// `model-00001-of-00002.safetensors`, diffusers' own name for theirs).
    fn prefix(&self) -> String {
        let name = self
            .set
            .index_path()
            .or_else(|| self.set.shards().first().map(|s| s.path()))
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name
            .strip_suffix(".safetensors.index.json")
            .or_else(|| name.strip_suffix(".safetensors"))
            .unwrap_or(&name);
        // A shard's own name: model-00001-of-00002.
        match stem
            .rsplit_once("-of-")
            .and_then(|(head, _)| head.rsplit_once('-'))
        {
            Some((prefix, _)) if self.set.shards().len() > 1 => prefix.to_string(),
            _ if stem.is_empty() => "model".to_string(),
            _ => stem.to_string(),
        }
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Written {
    /// The files, in order (one for a single output).
    pub files: Vec<PathBuf>,
    /// The index of a set of several files.
    pub index: Option<PathBuf>,
    /// Bytes in all the files written.
    pub bytes: u64,
}

/// Where a plan's inputs lie, whatever they were read from (safetensors
/// files, PyTorch checkpoints): what it takes to write the output as a
/// file, or as a set with one output shard per input shard.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Whether the input is a set of files: the output is then a directory.
    pub is_set: bool,
    /// Per input of the plan (its [`Plan::origin`]), the input shard it
    /// comes from.
    pub shard_of: Vec<usize>,
    /// How many input shards.
    pub shards: usize,
    /// The file name prefix of the output set's shards.
    pub prefix: String,
}

/// Writes what `plan` (built over `tensors` of `input`) produces to `out`,
/// as [`write_to`] does.
///
/// # Errors
/// As [`write_to`].
pub fn write(
    input: &TransformInput,
    tensors: &[SetTensor<'_>],
    plan: &Plan<'_, Error>,
    out: &Path,
    max_shard_size: Option<u64>,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<Written> {
    write_to(
        &input.layout(tensors),
        plan,
        out,
        max_shard_size,
        options,
        progress,
    )
}

/// Writes what `plan` produces to `out`: one file for a file, a set in the
/// directory `out` for a set (one output shard per input shard, or cut by
/// `max_shard_size`, which also makes a set of a file's output), all or
/// nothing. `progress` is told the data bytes written as they go.
///
/// # Errors
/// A tensor that cannot be read or produced, or a failed write (nothing
/// is left behind).
pub fn write_to(
    layout: &Layout,
    plan: &Plan<'_, Error>,
    out: &Path,
    max_shard_size: Option<u64>,
    options: &WriteOptions,
    progress: &dyn Progress,
) -> Result<Written> {
    if !layout.is_set && max_shard_size.is_none() {
        save_plan(out, plan, options, progress)?;
        let bytes = file_size(out)?;
        return Ok(Written {
            files: vec![out.to_path_buf()],
            index: None,
            bytes,
        });
    }
    let sharding = Sharding::new(max_shard_size, plan, &layout.shard_of, layout.shards);
    let summary = save_set(out, &layout.prefix, plan, &sharding, options, progress)?;
    let mut bytes = 0;
    for f in summary.files.iter().chain(&summary.index) {
        bytes += file_size(f)?;
    }
    Ok(Written {
        files: summary.files,
        index: summary.index,
        bytes,
    })
}

fn file_size(path: &Path) -> Result<u64> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    Ok(meta.len())
}
