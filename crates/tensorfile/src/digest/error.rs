//! What can go wrong reading a manifest or a set of embedded hashes.

use std::path::PathBuf;

/// A manifest, a signature bundle or embedded hashes that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The file is not a manifest this library reads, or is inconsistent.
    #[error("{}: {problem}", path.display())]
    Manifest {
        /// The manifest or bundle.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The embedded hashes of a file's metadata are not what they must be.
    #[error("metadata {key:?}: {problem}")]
    Embedded {
        /// The metadata key.
        key: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A file or tensor cannot be read.
    #[error(transparent)]
    Read(#[from] crate::Error),
}
