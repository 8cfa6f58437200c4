//! GGUF, the file format of llama.cpp and ggml: a strict reader of GGUF v2
//! and v3 through any byte source, decoders for every quantized ggml type
//! gguf-py can decode, quantizers, a writer, and conversions both ways
//! between GGUF and Hugging Face directories.
//!
//! - [`read`]: the container ([`GgufFile`], [`read_header`]): metadata,
//!   tensor infos, layout, every field checked with budgets
//!   ([`ReadLimits`]); tensors as [`TensorData`](crate::TensorData)
//!   ([`GgufTensor`]), quantized ones decoded to F32 on demand.
//! - [`value`]: metadata values, the 13 GGUF value types.
//! - [`types`]: the ggml type table ([`GgmlType`]).
//! - [`dequant`]: block decoders ([`dequantize_blocks`]), bit for bit
//!   `gguf.quants.dequantize`.
//! - [`to_hf`]: a GGUF model to a Hugging Face directory
//!   ([`gguf_to_hf`]), with [`names`] (tensor names and llama.cpp's q/k
//!   permutation), [`config`] (config.json and metadata) and
//!   [`tokenizer`] (tokenizer.json and `tokenizer.ggml.*`).
//! - [`raw`]: any GGUF file to one safetensors or npz file, its tensors
//!   and metadata as they are ([`gguf_to_safetensors`], [`gguf_to_npz`]).
//! - [`from_hf`]: a Hugging Face directory to GGUF ([`hf_to_gguf`]),
//!   quantized by [`quant`] (byte for byte as gguf-py and llama.cpp) and
//!   written by [`write`](mod@write) (GGUF's layout from parallel jobs, atomically).
//!
//! Dimensions: GGUF stores them fastest first, so numpy's `(4, 64)` is
//! GGUF's `[64, 4]`; [`TensorInfo::dims`] is the stored order and
//! [`TensorInfo::shape`] the logical one.

pub mod config;
pub mod dequant;
mod error;
pub mod from_hf;
pub mod names;
pub mod quant;
pub mod raw;
pub mod read;
mod scratch;
pub mod to_hf;
pub mod tokenizer;
pub mod types;
pub mod value;
pub mod write;

pub use dequant::dequantize_blocks;
pub use error::GgufError;
pub use from_hf::{hf_to_gguf, FromHfOptions, FromHfSummary};
pub use names::Arch;
#[cfg(feature = "npz")]
pub use raw::gguf_to_npz;
pub use raw::{gguf_to_safetensors, RawSummary};
pub use read::{
    is_gguf, read_header, Endian, GgufFile, GgufHeader, GgufTensor, Kv, ReadLimits, TensorInfo,
    DEFAULT_ALIGNMENT,
};
pub use to_hf::{gguf_to_hf, ToHfOptions, ToHfSummary};
pub use types::GgmlType;
pub use value::{Array, Value, ValueJson, ValueType};
