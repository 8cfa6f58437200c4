//! `merge`: a sharded set (an index, or a directory holding one) joined
//! into one canonical file; or a torch distributed checkpoint (DCP, saved
//! with its Hugging Face storage writer) consolidated into one file or
//! into the set its `fqn_to_index_mapping` says.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tensorfile::set::{DcpCheckpoint, ShardedTensors};
use tensorfile::{Progress, ReadOptions, Result, WriteOptions};

/// What to merge, and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MergeRequest {
    /// The index, or a directory holding one, local or at a URL; or a
    /// local directory holding the rank files of a torch DCP checkpoint
    /// (`shard-R-model-K-of-N.safetensors`).
    pub input: PathBuf,
    /// The file to write (replaced atomically). For a DCP checkpoint, a
    /// path not ending in `.safetensors` is a directory to write the set
    /// into (`model-0000K-of-0000N.safetensors` as torch's mapping says,
    /// and `model.safetensors.index.json`; all or nothing).
    pub output: PathBuf,
    /// Sync the output to disk (it is atomic either way).
    pub sync: bool,
    /// One deadline, in seconds, for all of the input's remote reads.
    pub timeout: Option<f64>,
    /// For an output at a store URL: replace an object already there
    /// (else refused). Not atomic for concurrent readers.
    pub replace: bool,
}

impl Default for MergeRequest {
    fn default() -> MergeRequest {
        MergeRequest {
            input: PathBuf::new(),
            output: PathBuf::new(),
            sync: true,
            timeout: None,
            replace: false,
        }
    }
}

/// What was written: `tensorfile merge --json`. Fields are in the order of
/// their names: the order the command has always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeReport {
    /// The data bytes of all the tensors.
    pub data_bytes: u64,
    /// For a torch DCP checkpoint consolidated: its number of ranks.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dcp_ranks: Option<usize>,
    /// For a DCP checkpoint written as a set: the files written, the index
    /// last.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub files: Vec<PathBuf>,
    /// The input, as given.
    pub input: PathBuf,
    /// The output, as given.
    pub output: PathBuf,
    /// Shards read (rank files, for a DCP checkpoint).
    pub shards: usize,
    /// Tensors written.
    pub tensors: usize,
}

/// Opens a safetensors set or file for `shard` and `merge`: read, not
/// mapped (a file truncated underneath is an error, not a signal),
/// refusing an input that is not safetensors in words that say what it is.
pub(crate) fn open_source(input: &Path, timeout: Option<f64>) -> Result<ShardedTensors> {
    let options = crate::transform::open_options(&ReadOptions::default(), timeout)?;
    let kind = tensorfile::probe(input)?.kind();
    if !kind.is_safetensors() {
        return Err(crate::transform::not_safetensors(input, kind));
    }
    tensorfile::open_set(input, &options)
}

/// Validates the set, then streams every tensor into an atomic save of
/// the output. A local directory holding a torch DCP checkpoint is
/// consolidated instead ([`DcpCheckpoint`]): checked whole first, then
/// each tensor assembled from its pieces with positional reads and writes.
/// `progress` counts the data bytes written.
///
/// # Errors
/// An input that is not safetensors or cannot be read, a DCP checkpoint
/// whose pieces do not make whole tensors, an output that is one of its
/// files, a failed write (nothing is left behind).
pub fn merge(request: &MergeRequest, progress: &dyn Progress) -> Result<MergeReport> {
    if request.input.is_dir() && DcpCheckpoint::is_checkpoint(&request.input) {
        return consolidate(request, progress);
    }
    let source = open_source(&request.input, request.timeout)?;
    let options = WriteOptions::default().with_sync(request.sync);
    progress.total(source.data_len());
    crate::bucket::via_local(
        &request.output,
        request.replace,
        progress,
        |out| {
            Ok(tensorfile_core::set::merge(
                &source, out, &options, progress,
            )?)
        },
        |_, _| {},
    )?;
    Ok(MergeReport {
        data_bytes: source.data_len(),
        dcp_ranks: None,
        files: Vec::new(),
        input: request.input.clone(),
        output: request.output.clone(),
        shards: source.shards().len(),
        tensors: source.len(),
    })
}

/// Consolidates the DCP checkpoint in `request.input`: one file when the
/// output ends in `.safetensors`, else the set torch's mapping says.
fn consolidate(request: &MergeRequest, progress: &dyn Progress) -> Result<MergeReport> {
    let checkpoint = DcpCheckpoint::open(&request.input, &ReadOptions::default())?;
    let options = WriteOptions::default().with_sync(request.sync);
    let plan = checkpoint.plan();
    progress.total(checkpoint.data_len());
    let one_file = request
        .output
        .extension()
        .is_some_and(|e| e == "safetensors");
    // A store URL: made locally, then uploaded (crate::bucket).
    let files = crate::bucket::via_local(
        &request.output,
        request.replace,
        progress,
        |out| {
            if one_file {
                tensorfile_core::atomic::check_not_input(out, checkpoint.files())?;
                tensorfile_core::save_plan(out, &plan, &options, progress)?;
                return Ok(Vec::new());
            }
            if same_dir(out, &request.input) {
                return Err(tensorfile_core::Error::Output {
                    path: out.to_path_buf(),
                    problem: tensorfile_core::OutputError::IsInput {
                        input: request.input.clone(),
                    },
                }
                .into());
            }
            let summary = tensorfile_core::set::save_set(
                out,
                "model",
                &plan,
                &checkpoint.sharding(),
                &options,
                progress,
            )?;
            let mut files = summary.files;
            files.extend(summary.index);
            Ok(files)
        },
        |files, map| {
            for f in files.iter_mut() {
                *f = map(f);
            }
        },
    )?;
    let tensors = checkpoint.specs().len();
    Ok(MergeReport {
        data_bytes: checkpoint.data_len(),
        dcp_ranks: Some(checkpoint.ranks()),
        files,
        input: request.input.clone(),
        output: request.output.clone(),
        shards: checkpoint.files().count(),
        tensors,
    })
}

/// Whether two paths name one existing directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
