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

#[cfg(target_endian = "big")]
compile_error!("tensorfile assumes a little-endian host: safetensors data is little-endian and views are zero-copy");

pub mod atomic;
pub mod cast;
pub mod dtype;
pub mod error;
pub mod file;
pub mod header;
mod json;
pub mod model;
mod parallel;
pub mod plan;
pub mod quant;
pub mod reshard;
pub mod shard;
pub mod slice;
pub mod source;
pub mod view;
pub mod writer;

pub use atomic::{save, save_plan, save_positional, save_streaming, AtomicFile, PositionalWriter};
pub use dtype::Dtype;
pub use error::{Error, FormatError, Result, WriteError};
pub use file::{read_header, read_header_from, read_header_from_path, FileTensor, SafeTensors};
pub use header::{Contract, Header, ReadOptions, TensorInfo};
pub use plan::Plan;
pub use shard::{ShardError, ShardedTensors};
pub use slice::{SliceArg, SlicedView, TensorSlice};
pub use source::{ByteSource, FileSource, InMemory, MappedFile};
pub use view::{Element, TensorView};
pub use writer::{
    serialize, serialize_with, Align, StreamWriter, TensorData, TensorRef, TensorSpec, WriteOptions,
};

/// A file's metadata: string keys to string values, kept in ascending byte
/// order of the keys (the order the canonical writer uses).
pub type Metadata = std::collections::BTreeMap<String, String>;

/// The default cap on the header length N: 100,000,000 bytes (reader rule 1).
pub const DEFAULT_MAX_HEADER_LEN: u64 = 100_000_000;
