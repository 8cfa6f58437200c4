//! `merge`: a sharded set (an index, or a directory holding one) joined
//! into one canonical file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tensorfile::set::ShardedTensors;
use tensorfile::{Progress, ReadOptions, Result, WriteOptions};

/// What to merge, and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MergeRequest {
    /// The index, or a directory holding one, local or at a URL.
    pub input: PathBuf,
    /// The file to write (replaced atomically).
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
    /// The input, as given.
    pub input: PathBuf,
    /// The output, as given.
    pub output: PathBuf,
    /// Shards read.
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
/// the output. `progress` counts the data bytes written.
///
/// # Errors
/// An input that is not safetensors or cannot be read, an output that is
/// one of its files, a failed write (nothing is left behind).
pub fn merge(request: &MergeRequest, progress: &dyn Progress) -> Result<MergeReport> {
    let source = open_source(&request.input, request.timeout)?;
    let options = WriteOptions::default().with_sync(request.sync);
    progress.total(source.data_len());
    crate::bucket::via_local(
        &request.output,
        request.replace,
        |out| {
            Ok(tensorfile_core::set::merge(
                &source, out, &options, progress,
            )?)
        },
        |_, _| {},
    )?;
    Ok(MergeReport {
        data_bytes: source.data_len(),
        input: request.input.clone(),
        output: request.output.clone(),
        shards: source.shards().len(),
        tensors: source.len(),
    })
}
