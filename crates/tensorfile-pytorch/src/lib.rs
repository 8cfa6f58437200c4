//! # tensorfile-pytorch
//!
//! Loads PyTorch checkpoints (`.pt`, `.pth`, `pytorch_model.bin`) without
//! Python and without executing anything, and yields their tensors by name
//! with dtype, shape and C-order little-endian bytes.
//!
//! - Both containers `torch.save` writes: the zip format (read in place from
//!   a memory map; ZIP64, deflated records, big-endian data) and the legacy
//!   format of PyTorch before 1.6.
//! - A restricted pickle interpreter ([`pickle`]) that only builds values,
//!   with an allow-list of globals ([`globals`]) and limits against hostile
//!   input.
//! - Views are honoured: storage offsets, strides, expansions.
//!
//! ```no_run
//! use tensorfile_pytorch::Checkpoint;
//! let ckpt = Checkpoint::open("pytorch_model.bin")?;
//! for t in ckpt.tensors() {
//!     println!("{} {} {:?}", t.name(), t.dtype(), t.shape());
//! }
//! # Ok::<(), tensorfile_pytorch::Error>(())
//! ```

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(target_endian = "big")]
compile_error!("tensorfile-pytorch assumes a little-endian host");

pub mod checkpoint;
pub mod convert;
pub mod describe;
pub mod dtypes;
pub mod error;
mod flatten;
pub mod globals;
mod legacy;
pub mod pickle;
mod rebuild;
pub mod sharing;
pub mod view;
pub mod zip;

pub use checkpoint::{
    file_looks_like_pytorch, looks_like_pytorch, Checkpoint, Format, InflateStats, LoadOptions,
    StoredReader, TensorData, TorchTensor, ViewKey,
};
pub use convert::{convert, ConvertOptions};
pub use error::{Error, Result};
pub use flatten::{WalkLimits, ENTRY_BYTES};
pub use sharing::SharedPolicy;
