//! # libtensorfile
//!
//! The C library over the `tensorfile` crate: the `fs_*` functions of
//! `include/tensorfile.h` (generated from this crate by cbindgen; a test
//! checks that the checked-in header matches a fresh run).
//!
//! Every exported function:
//! - checks its arguments (NULL, UTF-8, lengths) and reports failures as a
//!   negative `TL_E*` code or NULL, with a per-thread error
//!   ([`fs_last_error`], [`fs_last_error_message`]);
//! - runs inside [`error::guard`], so a panic never unwinds into C.
//!
//! Handles (`fs_file`, `fs_writer`) are boxed Rust values passed to C as
//! opaque pointers; threads may read one `fs_file` at once (what it hands
//! out never changes once made; the PyTorch tensors that must be gathered
//! are made on first access, once, behind a `OnceLock` each).

#![warn(missing_docs)]
// The C names (fs_file, tm_tensor, TL_F32) are the API.
#![allow(non_camel_case_types)]

mod aligned;
mod args;
mod dtype_abi;
pub mod error;
#[cfg(test)]
use tensorfile_testkit::hostile;
pub mod pytorch;
pub mod reader;
mod strings;
pub mod types;
pub mod writer;

pub use error::{
    fs_last_error, fs_last_error_message, TL_EFORMAT, TL_EINTERNAL, TL_EINVAL, TL_EIO, TL_ENOMEM,
    TL_ENOTFOUND, TL_EUNSUPPORTED, TL_OK,
};
pub use reader::fs_file;
pub use types::{tl_dtype, tm_tensor};
pub use writer::fs_writer;
