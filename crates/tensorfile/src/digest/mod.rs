//! Digests: sha256 of files, of safetensors data sections and of tensors;
//! manifests of a model directory in OpenSSF model signing's payload
//! format; per-tensor digests embedded in a file's metadata.
//!
//! One sha256 implementation serves all of them ([`tensor_sha256`],
//! [`Hasher`]: the `sha2` crate, which picks the CPU's SHA extensions at
//! run time). Files are read with positional reads in 8 MiB pieces (a file
//! truncated underneath is an error, not a signal); [`file_digests`] hashes
//! several files at once on the pool.
//!
//! Everything but [`TENSOR_SHA256_KEY`] comes with the `digest` feature
//! (sha2 and base64); the key is there without it, so that sets can leave
//! each file's embedded digests out of their metadata.

#[cfg(feature = "digest")]
mod embedded;
#[cfg(feature = "digest")]
mod error;
#[cfg(feature = "digest")]
mod files;
#[cfg(feature = "digest")]
mod manifest;
#[cfg(feature = "digest")]
mod sha;

/// The metadata key holding a file's per-tensor sha256 (defined in the
/// core, whose sets leave it out of their merged metadata).
pub use tensorfile_core::TENSOR_SHA256_KEY;

#[cfg(feature = "digest")]
pub use embedded::{check_embedded, embed_hashes, embedded_hashes, tensor_digests, TensorCheck};
#[cfg(feature = "digest")]
pub use error::DigestError;
#[cfg(feature = "digest")]
pub use files::{data_start, dir_files, file_digest, file_digests, DirFile, FileDigest, GIT_PATHS};
#[cfg(feature = "digest")]
pub use manifest::{Check, Manifest, ManifestSource};
#[cfg(feature = "digest")]
pub use sha::{tensor_sha256, tensor_sha256_counted, Hasher, Sha256Digest};
