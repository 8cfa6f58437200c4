//! # tensorfile-zip
//!
//! A minimal, strict ZIP reader and writer for the archives tensor files
//! come in: `torch.save` checkpoints and numpy's `.npz`.
//!
//! - [`ZipIndex`] reads an archive through a
//!   [`ByteSource`](tensorfile_core::source::ByteSource) with positional
//!   reads only (the end record, the ZIP64 records, the central directory
//!   and each local header, every one bounds-checked against the source's
//!   length before it is read), so a file truncated underneath is a read
//!   error, never a signal. Members are stored or deflated; ZIP64 sizes
//!   and offsets are honoured. A member's bytes are read by range
//!   ([`Entry::stored_range`]), into a buffer of bounded size
//!   ([`Entry::read`]), or inflated from the source a piece at a time
//!   ([`Entry::inflate_prefix`]).
//! - [`ZipWriter`] writes stored and deflated members the way numpy's
//!   `np.savez` does (ZIP64 local headers, see [`mod@write`]).
//!
//! Hand-written rather than using the `zip` crate: some of its versions
//! fail to open ordinary `torch.save` files and reject records whose CRC is
//! 0, which torch itself loads. CRCs are not verified by the reader itself,
//! as torch does not verify them either; a caller that reads a member whole
//! and in order checks it with a [`CrcCheck`], as numpy's `np.load` does.
//!
//! ```
//! use tensorfile_zip::ZipIndex;
//! assert!(ZipIndex::parse(b"not a zip").is_err());
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod error;
mod format;
pub mod read;
pub mod write;

pub use error::{Result, ZipError};
pub use read::{CrcCheck, Entry, Method, ReadLimits, ZipIndex};
pub use write::{Member, ZipWriter};
