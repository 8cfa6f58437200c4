//! # tensorfile-core
//!
//! The format core of [tensorfile](https://docs.rs/tensorfile): everything
//! a loader of [safetensors](https://huggingface.co/docs/safetensors) files
//! needs, and nothing above it (casts, quantization, model directories
//! and the other formats live in the `tensorfile` crate).
//!
//! - [`source`]: byte sources (slices, buffers, memory maps, files read with
//!   positional reads, and any source other crates add).
//! - [`header`] and [`file`](mod@file): the strict reader. Every way in checks the
//!   format's five reader rules, with typed errors naming the rule, the
//!   place and the file, and never panics on input.
//! - [`view`] and [`slice`](mod@slice): zero-copy views and NumPy-style slices planned
//!   from the header alone.
//! - [`writer`] and [`atomic`]: the canonical writer (the reference
//!   library's bytes) and atomic saves.
//! - [`plan`]: tensors whose bytes are made on demand by jobs, which
//!   transforms produce and writers consume.
//! - [`read`]: read plans: tensors and slices read at once with parallel
//!   positional reads under a memory budget, into new or the caller's memory.
//! - [`ranks`]: loading across processes: each rank's share of tensor-parallel
//!   layouts, and cooperative loads where each rank reads a disjoint part.
//! - [`progress`]: the one trait long work reports its progress through.
//! - [`set`]: sharded sets (an index and its shards, local or at any
//!   [`Location`](set::Location)), read and written.
//!
//! ```
//! use tensorfile_core::{serialize, Dtype, SafeTensors, TensorRef};
//! let data: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let bytes = serialize([TensorRef { name: "w", dtype: Dtype::F32, shape: &[2, 2], data: &data }], None)?;
//! let file = SafeTensors::from_slice(&bytes)?;
//! for t in file.tensors() {
//!     println!("{} {} {:?}", t.name(), t.dtype(), t.shape());
//! }
//! # Ok::<(), tensorfile_core::Error>(())
//! ```

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

#[cfg(target_endian = "big")]
compile_error!("tensorfile assumes a little-endian host: safetensors data is little-endian and views are zero-copy");

pub mod accept;
pub mod atomic;
pub mod dtype;
pub mod edit;
pub mod error;
pub mod file;
pub mod header;
mod json;
mod json_object;
mod kind;
pub mod parallel;
pub mod plan;
pub mod progress;
pub mod ranks;
pub mod read;
pub mod set;
pub mod slice;
pub mod source;
pub mod view;
pub mod writer;

pub use accept::{Accept, DtypeSet};
pub use atomic::{
    save, save_plan, save_positional, save_streaming, AtomicFile, AtomicSet, PositionalWriter,
};
pub use dtype::Dtype;
pub use error::{Error, ErrorKind, FormatError, OutputError, ParseError, Result, WriteError};
pub use file::{read_header, read_header_from, read_header_from_path, FileTensor, SafeTensors};
pub use header::{Backend, Header, ReadOptions, TensorInfo};
pub use json_object::JsonObject;
pub use kind::{is_url, url_of, Kind as InputKind, LooksLike};
pub use plan::Plan;
pub use progress::Progress;
pub use set::{ShardError, ShardedTensors};
pub use slice::{SliceArg, SlicedView, TensorSlice};
pub use source::{ByteSource, FileSource, InMemory, MappedFile, PrivateMap};
pub use view::{Element, TensorView};
pub use writer::{
    serialize, serialize_with, Align, StreamWriter, TensorData, TensorRef, TensorSpec, WriteOptions,
};

/// A file's metadata: string keys to string values, kept in ascending byte
/// order of the keys (the order the canonical writer uses).
pub type Metadata = std::collections::BTreeMap<String, String>;

/// The metadata key holding a file's per-tensor sha256 (`--embed-hash`):
/// the JSON text of an object from tensor name to 64 hex digits. A set's
/// merged metadata leaves it out (each file's own digests).
pub const TENSOR_SHA256_KEY: &str = "tensorfile.sha256";

/// The default cap on the header length N: 100,000,000 bytes (reader rule 1).
pub const DEFAULT_MAX_HEADER_LEN: u64 = 100_000_000;

/// `with_<field>` builder methods for the public fields of a
/// `#[non_exhaustive]` options struct, which other crates (the CLI, the C
/// and Python bindings, tests) cannot build with a struct literal:
/// `with_fields!(WriteOptions { with_sync => sync: bool })`. One macro for
/// every options struct of the workspace's libraries, so that the setters
/// are written once; not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! with_fields {
    ($ty:ident { $($with:ident => $field:ident: $fty:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($ty), "::", stringify!($field), "`].")]
                #[must_use]
                pub fn $with(mut self, $field: $fty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}
