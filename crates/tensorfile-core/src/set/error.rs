//! A problem with a sharded set (a leaf: [`crate::Error::Shard`] wraps it).

use std::path::PathBuf;

use super::names::{INDEX_NAME, SINGLE_NAME};

/// A problem with a sharded set: the index, a shard, or how they agree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The index is not the expected JSON.
    #[error("{}: not a valid index: {problem}", index.display())]
    BadIndex {
        /// The index file.
        index: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A shard name is not a plain `.safetensors` file name.
    #[error("tensor {tensor:?} is mapped to shard {shard:?}, which is not a plain file name in the index's directory: {problem}")]
    BadShardName {
        /// The first tensor mapped to it.
        tensor: String,
        /// The shard name as written in the index.
        shard: String,
        /// Why it is refused.
        problem: &'static str,
    },
    /// A shard named by the index does not exist.
    #[error("shard {shard:?} (holding tensor {tensor:?}) does not exist in {}", dir.display())]
    MissingShard {
        /// The shard's file name.
        shard: String,
        /// The first tensor mapped to it.
        tensor: String,
        /// The directory it should be in.
        dir: PathBuf,
    },
    /// A shard is not a valid safetensors file (or cannot be read). The
    /// source error names the shard's path.
    #[error("{source}")]
    InvalidShard {
        /// The shard's file name.
        shard: String,
        /// Why it was refused.
        #[source]
        source: Box<crate::Error>,
    },
    /// The index maps a tensor to a shard that does not hold it.
    #[error("tensor {tensor:?} is mapped to shard {shard:?}, which does not hold it{}", match found_in {
        Some(other) => format!(" (shard {other:?} does)"),
        None => String::new(),
    })]
    NotInShard {
        /// The tensor.
        tensor: String,
        /// The shard the index names.
        shard: String,
        /// A shard that does hold it, if any.
        found_in: Option<String>,
    },
    /// A tensor is held by two shards.
    #[error("tensor {tensor:?} is in two shards: {first:?} and {second:?}")]
    InTwoShards {
        /// The tensor.
        tensor: String,
        /// The shard the index maps it to.
        first: String,
        /// Another shard holding it.
        second: String,
    },
    /// A shard holds a tensor that the index does not list.
    #[error("shard {shard:?} holds tensor {tensor:?}, which the index's weight_map does not list")]
    NotInMap {
        /// The tensor.
        tensor: String,
        /// The shard holding it.
        shard: String,
    },
    /// A directory holds both a single file and an index that do not
    /// agree (mlx-lm writes both, agreeing: that is accepted).
    #[error("{}: {single} and {index} disagree ({problem}); transformers loads {single}", dir.display())]
    Ambiguous {
        /// The directory.
        dir: PathBuf,
        /// The single file's name.
        single: String,
        /// The index's name.
        index: String,
        /// How they disagree.
        problem: String,
    },
    /// A directory holds neither a single file nor an index.
    #[error("{}: holds neither {SINGLE_NAME} nor {INDEX_NAME}", dir.display())]
    NoWeights {
        /// The directory.
        dir: PathBuf,
    },
    /// Two shards give one metadata key different values.
    #[error("metadata key {key:?} is {first:?} in shard {first_shard:?} but {second:?} in shard {second_shard:?}")]
    MetadataConflict {
        /// The key.
        key: String,
        /// Its first value.
        first: String,
        /// The shard giving the first value.
        first_shard: String,
        /// Its other value.
        second: String,
        /// The shard giving the other value.
        second_shard: String,
    },
    /// The index's `metadata.total_size` is not a non-negative integer
    /// ([`ShardIndex::total_size`](super::ShardIndex::total_size); opening
    /// a set only warns of it, since Hub indexes are not always exact).
    #[error("the index's total_size is {found}, not a byte count")]
    BadTotalSize {
        /// The value found, as JSON text.
        found: String,
    },
}

impl ShardError {
    /// This error's kind: a shard's own error's for
    /// [`ShardError::InvalidShard`];
    /// [`Format`](crate::ErrorKind::Format) for the rest (an index,
    /// shard names or shards that are not what the set needs).
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind;
        match self {
            ShardError::InvalidShard { source, .. } => source.kind(),
            ShardError::BadIndex { .. }
            | ShardError::BadShardName { .. }
            | ShardError::MissingShard { .. }
            | ShardError::NotInShard { .. }
            | ShardError::InTwoShards { .. }
            | ShardError::NotInMap { .. }
            | ShardError::Ambiguous { .. }
            | ShardError::NoWeights { .. }
            | ShardError::MetadataConflict { .. }
            | ShardError::BadTotalSize { .. } => ErrorKind::Format,
        }
    }
}
