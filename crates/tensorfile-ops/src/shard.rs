//! `shard`: a safetensors file (or set) split into shards the way
//! huggingface_hub does, with its index.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use tensorfile::set::{split, SplitOptions};
use tensorfile::{Error, Progress, Result, WriteOptions};

/// What to split, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardRequest {
    /// The file to split (or a directory or an index, to re-shard a set),
    /// local or at a URL.
    pub input: PathBuf,
    /// The directory to write the shards and index to (created if needed;
    /// it must not already hold weights with this prefix).
    pub out_dir: PathBuf,
    /// Largest data size of a shard, in bytes (default 5 GB); a larger
    /// tensor gets a shard alone.
    pub max_shard_size: u64,
    /// File name prefix: `PREFIX-00001-of-00003.safetensors`,
    /// `PREFIX.safetensors.index.json`.
    pub prefix: String,
    /// Sync the files to disk (each is atomic either way).
    pub sync: bool,
    /// One deadline, in seconds, for all of the input's remote reads.
    pub timeout: Option<f64>,
}

impl Default for ShardRequest {
    fn default() -> ShardRequest {
        ShardRequest {
            input: PathBuf::new(),
            out_dir: PathBuf::new(),
            max_shard_size: 5_000_000_000,
            prefix: "model".into(),
            sync: true,
            timeout: None,
        }
    }
}

/// What was written: `tensorfile shard --json`. Fields are in the order of
/// their names: the order the command has always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardReport {
    /// The shards written, in order (one file when everything fits).
    pub files: Vec<PathBuf>,
    /// The index, when there are several shards.
    pub index: Option<PathBuf>,
    /// The input, as given.
    pub input: PathBuf,
    /// Tensors written (the text's count; not a `--json` key).
    #[serde(skip)]
    pub tensors: usize,
    /// The data bytes across all shards.
    pub total_size: u64,
}

/// Whether `prefix` can begin a file name in the output directory.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.contains(['/', '\\', '\0']) || prefix == "." || prefix == ".." {
        return Err(Error::request(format!(
            "`{prefix}` is not a file name prefix"
        )));
    }
    Ok(())
}

/// Splits the input into shards in `out_dir`, each written atomically.
/// `progress` counts the data bytes written.
///
/// # Errors
/// A prefix that is not a file name's ([`Error::Request`]), an input that
/// is not safetensors or cannot be read, a failed write.
pub fn shard(request: &ShardRequest, progress: &dyn Progress) -> Result<ShardReport> {
    check_prefix(&request.prefix)?;
    let source = super::merge::open_source(&request.input, request.timeout)?;
    let options = SplitOptions::new(request.max_shard_size, request.prefix.clone())
        .with_write(WriteOptions::default().with_sync(request.sync));
    progress.total(source.data_len());
    let summary = split(&source, &request.out_dir, &options, progress)?;
    Ok(ShardReport {
        files: summary.files,
        index: summary.index,
        input: request.input.clone(),
        tensors: source.len(),
        total_size: summary.total_size,
    })
}
