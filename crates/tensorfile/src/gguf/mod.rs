//! GGUF, the file format of llama.cpp and ggml: a strict reader of GGUF v2
//! and v3 through any byte source, decoders for every quantized ggml type
//! gguf-py can decode, quantizers, a writer, and conversions both ways
//! between GGUF and Hugging Face directories.
//!
//! - Reading: the container ([`GgufFile`]):
//!   metadata ([`GgufValue`]), tensor infos, layout, every field checked
//!   with budgets ([`ReadLimits`]); tensors as
//!   [`TensorData`](crate::TensorData) ([`GgufTensor`]), quantized ones
//!   decoded to F32 on demand by the block decoders
//!   ([`dequantize_blocks`], bit for bit `gguf.quants.dequantize`), over
//!   the ggml type table ([`GgmlType`]).
//! - To Hugging Face: a GGUF model to a directory ([`gguf_to_hf`]), with
//!   tensor names and llama.cpp's q/k permutation ([`hf_tensor_name`],
//!   [`QkPermutation`]), config.json and the tokenizer.
//! - Raw: any GGUF file to one safetensors or npz file, its tensors and
//!   metadata as they are ([`gguf_to_safetensors`], `gguf_to_npz`).
//! - From Hugging Face: a directory to GGUF ([`hf_to_gguf`]), quantized
//!   byte for byte as gguf-py and llama.cpp ([`quantize_row`]) and written
//!   by [`GgufWriter`] (GGUF's layout from parallel jobs, atomically).
//!
//! Dimensions: GGUF stores them fastest first, so numpy's `(4, 64)` is
//! GGUF's `[64, 4]`; [`GgufTensorInfo::dims`] is the stored order and
//! [`GgufTensorInfo::shape`] the logical one.

mod config;
mod dequant;
mod error;
mod from_hf;
mod names;
mod quant;
mod raw;
mod read;
mod scratch;
mod to_hf;
mod tokenizer;
mod types;
mod value;
mod write;

pub use dequant::dequantize_blocks;
pub use error::GgufError;
pub use from_hf::{hf_to_gguf, FromHfOptions, FromHfSummary, TYPES as HF_TO_GGUF_TYPES};
pub use names::{gguf_to_hf as hf_tensor_name, Arch, QkPermutation};
pub use quant::{quantize_into as quantize_row, quantizes, RowFault};
#[cfg(feature = "npz")]
pub use raw::gguf_to_npz;
pub use raw::{gguf_to_safetensors, RawSummary, MAX_ARRAY as MAX_ARRAY_SHOWN};
pub use read::{
    Endian, GgufFile, GgufHeader, GgufTensor, Kv, ReadLimits, TensorInfo as GgufTensorInfo,
};
pub use to_hf::{convert_file as gguf_file_to_hf, gguf_to_hf, ToHfOptions, ToHfSummary};
pub use types::GgmlType;
pub use value::{Array as GgufArray, Value as GgufValue, ValueJson, ValueType as GgufValueType};
pub use write::{GgufSpec, GgufWriter};
