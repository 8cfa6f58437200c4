//! # tensorfile-pytorch
//!
//! Loads PyTorch checkpoints (`.pt`, `.pth`, `pytorch_model.bin`) without
//! Python and without executing anything, and yields their tensors by name
//! with dtype, shape and C-order little-endian bytes.
//!
//! - Both containers `torch.save` writes: the zip format (ZIP64, deflated
//!   records, big-endian data; read with `tensorfile-zip`) and the legacy
//!   format of PyTorch before 1.6.
//! - Everything is read through a byte source
//!   ([`tensorfile_core::source::ByteSource`]): [`Checkpoint::open`] reads
//!   the file with positional reads, so a file truncated underneath is an
//!   error naming it, never a signal; [`Checkpoint::open_mapped`] maps it
//!   for zero-copy stored tensors.
//! - A restricted pickle interpreter that only builds values, with an
//!   allow-list of globals and limits against hostile input ([`Limits`],
//!   [`LoadOptions`]).
//! - Views are honoured: storage offsets, strides, expansions. Every
//!   tensor is a format-core [`TensorData`](tensorfile_core::TensorData),
//!   read by range or made a piece at a time.
//! - What converting writes ([`convert::conversion`]): the tensors, the
//!   names kept for tied weights ([`SharedPolicy`]), the metadata. Casting
//!   and writing are in the `tensorfile` crate (`tensorfile::pytorch`).
//!
//! ```no_run
//! use tensorfile_pytorch::Checkpoint;
//! let ckpt = Checkpoint::open("pytorch_model.bin")?;
//! for t in ckpt.tensors() {
//!     println!("{} {} {:?}", t.name(), t.dtype(), t.shape());
//! }
//! # Ok::<(), tensorfile_pytorch::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

#[cfg(target_endian = "big")]
compile_error!("tensorfile-pytorch assumes a little-endian host");

mod checkpoint;
pub mod convert;
mod dtypes;
pub mod error;
mod flatten;
mod globals;
mod legacy;
mod pickle;
mod rebuild;
mod sharing;
mod store;
mod tensor;
mod view;

pub use checkpoint::{
    file_looks_like_pytorch, looks_like_pytorch, Checkpoint, Format, LoadOptions, IN_MEMORY,
};
pub use convert::{conversion, Conversion, ConvertPolicy, ConvertTensor};
pub use error::{Error, Result};
pub use flatten::{WalkLimits, ENTRY_BYTES};
pub use pickle::{Limits, PickleError, PickleErrorKind};
pub use sharing::{select, Selection, SharedPolicy};
pub use store::InflateStats;
pub use tensor::{TensorBytes, TorchTensor, ViewKey};
pub use tensorfile_zip::ZipError;

#[doc(hidden)]
pub mod fuzzing;
