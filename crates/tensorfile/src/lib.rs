//! # tensorfile
//!
//! A strict, fast reader and a canonical writer for the
//! [safetensors](https://huggingface.co/docs/safetensors) tensor file format.
//!
//! - Reading enforces the format's five reader rules exactly, with typed
//!   errors that name the rule and the place, and never panics on input.
//! - Files are memory-mapped read-only and tensors are borrowed from the map:
//!   no copy unless you ask for one.
//! - Writing produces the canonical bytes (what the reference library writes)
//!   and saves atomically.
//!
//! ```no_run
//! use tensorfile::SafeTensors;
//! let file = SafeTensors::open("model.safetensors")?;
//! for t in file.tensors() {
//!     println!("{} {} {:?}", t.name(), t.dtype(), t.shape());
//! }
//! # Ok::<(), tensorfile::Error>(())
//! ```
//!
//! Whole commands (validate, inspect, convert, quantize, diff, ...) as
//! functions from a request to a report are the `tensorfile-ops` crate's,
//! over this one.

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

// The format core's types a user of this crate meets first; the rest of
// the core is `tensorfile_core`'s, under its own paths.
/// The one progress trait every long operation here takes (`&()` for none).
pub use tensorfile_core::Progress;
pub use tensorfile_core::{
    read_header, save, save_plan, serialize, serialize_with, Backend, ByteSource, Dtype, ErrorKind,
    FileSource, FormatError, Header, Metadata, OutputError, Plan, ReadOptions, SafeTensors,
    SliceArg, TensorData, TensorInfo, TensorRef, TensorSpec, TensorView, WriteError, WriteOptions,
};

// The rest of the core, under the paths this crate's modules use.
use tensorfile_core::{
    dtype, header, parallel, plan, source, writer, Accept, DtypeSet, ShardedTensors,
};
// Atomic saves of the GGUF and npz writers.
#[cfg(any(feature = "gguf", feature = "npz"))]
use tensorfile_core::AtomicFile;
#[cfg(feature = "gguf")]
use tensorfile_core::{atomic, AtomicSet};

mod bits;
pub mod cast;
pub mod diff;
pub mod digest;
mod error;
#[cfg(feature = "gguf")]
pub mod gguf;
mod input;
pub mod model;
#[cfg(feature = "npz")]
pub mod npz;
#[cfg(feature = "pytorch")]
pub mod pytorch;
pub mod quant;
pub mod stats;
pub mod values;

pub use cast::Decode;
pub use error::{Error, Result};
pub use input::{dir_weights, ensure_built, open, open_set, probe, Input, OpenOptions, Probed};
pub use model::Contract;
pub use tensorfile_core::InputKind;
pub use tensorfile_core::JsonObject;

/// The format core's error: the source of [`Error::Core`].
pub use tensorfile_core::Error as CoreError;
/// The PyTorch loader's error: the source of [`Error::Pytorch`].
#[cfg(feature = "pytorch")]
pub use tensorfile_pytorch::Error as PytorchError;

/// Sharded sets: an index and its shards, read at any
/// [`Location`](set::Location), and split into shards (the format core's
/// [`tensorfile_core::set`]; the `tensorfile-ops` crate's `merge` joins a
/// set into one file).
pub mod set {
    pub use tensorfile_core::set::{
        save_set, split, DcpCheckpoint, LocalStage, Location, PartHead, PlanPart, SetStage,
        SetStep, SetTensor, ShardError, ShardIndex, ShardedTensors, Sharding, SplitOptions,
        SplitSummary, StageLock, StagedPlan, StagedSet, Want, INDEX_NAME, SINGLE_NAME,
        STAGING_PREFIX,
    };
}

/// The repository's README, whose Rust examples `cargo test` compiles as
/// doctests (`no_run`: they name files that are not there) so that they
/// cannot rot. It lives in the umbrella crate because that is the one whose
/// doctests see both `tensorfile` and `tensorfile_pytorch`; the C example is
/// compiled and run by tensorfile-ffi's C tests.
#[cfg(all(doctest, feature = "pytorch", feature = "gguf", feature = "npz"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;

/// The library's page, `docs/library.md`, which holds the Rust examples
/// the README leaves out (writing, sets, casts): compiled as the README's
/// are, for the same reason.
#[cfg(all(doctest, feature = "pytorch", feature = "gguf", feature = "npz"))]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryPageExamples;
