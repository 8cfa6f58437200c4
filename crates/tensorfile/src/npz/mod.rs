//! numpy's `.npy` arrays and `.npz` archives, both ways.
//!
//! - **Read** ([`NpzFile`]): `.npy` format versions 1.0, 2.0 and 3.0, C
//!   and Fortran order, either byte order, every numpy dtype that has a
//!   safetensors dtype (bool, integers, f2/f4/f8, c8); `.npz` archives as
//!   `np.savez` and `np.savez_compressed` write them (ZIP64 local headers,
//!   stored or deflated members, inflated as they are read), through the
//!   zip reader of `tensorfile-zip` on any [`ByteSource`](crate::ByteSource).
//!   Every header is read and checked when the file is opened (lengths
//!   against the file, the shape against the data, members that overlap);
//!   structured and object dtypes (which need pickle) and dtypes with no
//!   safetensors dtype are refused by name. Arrays numpy saved from
//!   ml_dtypes (`<V2` for bfloat16, `<V1`, `<f1`) are opaque: the caller
//!   says what they hold.
//! - **Write** ([`save_npz`], [`save_npy`]): the bytes numpy writes for
//!   the same arrays (`np.savez`, `np.save`), or deflated members
//!   (`np.savez_compressed`'s layout), atomically.
//! - **Convert** ([`npz_to_safetensors`]): a plan like any other, cast on
//!   the way if asked.
//!
//! ```
//! use tensorfile::npz::{save_npz, NpzFile, NpzWriteOptions};
//! use tensorfile::{Dtype, TensorData, TensorRef};
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("arrays.npz");
//! let data: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let w = TensorRef { name: "w", dtype: Dtype::F32, shape: &[2, 2], data: &data };
//! save_npz(&path, &[w], &NpzWriteOptions::default(), &())?;
//! let file = NpzFile::open(&path)?;
//! for t in file.tensors(None)? {
//!     println!("{} {} {:?}", t.name(), t.dtype(), t.shape());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod array;
mod convert;
mod descr;
mod error;
mod header;
mod read;
mod write;

pub use array::NpyArray;
pub use convert::{npz_to_safetensors, FromNpzOptions, FromNpzSummary};
pub use descr::{Element as NpyElement, Opaque as NpyOpaque};
pub use error::NpzError;
pub use read::{Container, NpyInfo, NpzFile, NpzLimits};
pub use write::{save_npy, save_npz, NpzWriteOptions, NpzWritten};
