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

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

// The format core, under the same paths: `tensorfile::header`,
// `tensorfile::SafeTensors`, ...
/// The one progress trait every long operation here takes (`&()` for none).
pub use tensorfile_core::Progress;
pub use tensorfile_core::{
    accept, atomic, dtype, file, header, parallel, plan, slice, source, view, writer,
};
pub use tensorfile_core::{
    read_header, read_header_from, read_header_from_path, save, save_plan, save_positional,
    save_streaming, serialize, serialize_with, Accept, Align, AtomicFile, AtomicSet, ByteSource,
    Dtype, DtypeSet, Element, ErrorKind, FileSource, FileTensor, FormatError, Header, InMemory,
    MappedFile, Metadata, OutputError, Plan, PositionalWriter, PrivateMap, ReadOptions,
    SafeTensors, SliceArg, SlicedView, StreamWriter, TensorData, TensorInfo, TensorRef,
    TensorSlice, TensorSpec, TensorView, WriteError, WriteOptions, DEFAULT_MAX_HEADER_LEN,
};

mod bits;
pub mod cast;
pub mod describe;
pub mod diff;
pub mod digest;
pub mod error;
#[cfg(feature = "gguf")]
pub mod gguf;
pub mod input;
pub mod model;
#[cfg(feature = "npz")]
pub mod npz;
#[cfg(feature = "pytorch")]
pub mod pytorch;
pub mod quant;
pub mod stats;
pub mod transform;
pub mod values;

pub use cast::Decode;
pub use error::{Error, Result};
pub use input::{open, Input, OpenOptions};
pub use model::Contract;
pub use tensorfile_core::{JsonObject, ParseError, ShardError, ShardedTensors};

/// The format core's error: the source of [`Error::Core`].
pub use tensorfile_core::Error as CoreError;
/// The PyTorch loader's error: the source of [`Error::Pytorch`].
#[cfg(feature = "pytorch")]
pub use tensorfile_pytorch::Error as PytorchError;

/// Sharded sets: an index and its shards, read at any
/// [`Location`](shard::Location) (the format core's [`tensorfile_core::set`],
/// under the path this crate has always given it).
pub mod shard {
    pub use tensorfile_core::set::{
        Loaded, LocalDir, Location, SetTensor, Shard, ShardError, ShardIndex, ShardedTensors, Want,
        DIFFUSERS_INDEX_NAME, DIFFUSERS_SINGLE_NAME, DIR_NAMES, INDEX_NAME, MAX_INDEX_LEN,
        SINGLE_NAME,
    };
}

/// Splitting a set into shards and merging shards into one file (the
/// format core's set writer, [`tensorfile_core::set::save_set`]).
pub mod reshard {
    pub use tensorfile_core::set::{merge, save_set, split, Sharding, SplitOptions, SplitSummary};
}

/// The repository's README, whose Rust examples `cargo test` compiles as
/// doctests (`no_run`: they name files that are not there) so that they
/// cannot rot. It lives in the umbrella crate because that is the one whose
/// doctests see both `tensorfile` and `tensorfile_pytorch`; the C example is
/// compiled and run by tensorfile-ffi's C tests.
#[cfg(all(doctest, feature = "pytorch", feature = "gguf", feature = "npz"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;
