//! Any GGUF file to one safetensors or npz file, as it is: the GGUF
//! tensor names, row-major shapes (GGUF's dims reversed), plain types
//! kept (F32, F16, BF16, F64, I8..I64), quantized types decoded to F32
//! bit for bit as `gguf.quants.dequantize` decodes them (or, for
//! safetensors with `keep_quant`, kept as MLX affine weights), for any
//! architecture (or none). Tensors stream through the writers one piece
//! at a time; the save is atomic.
//!
//! The metadata (safetensors only; npz has none) becomes `__metadata__`:
//! each GGUF key under its own name, its value as JSON text: strings
//! quoted (`"llama"`), numbers as JSON numbers (a FLOAT32 as the shortest
//! decimal that gives the same f32: `0.00001`, not
//! `9.999999747378752e-6`; non-finite ones as the strings `"inf"`,
//! `"-inf"`, `"nan"`), booleans, and arrays of at most
//! [`MAX_ARRAY`] elements (nested ones too) as JSON arrays. Longer arrays
//! (a tokenizer's tokens, scores and merges) are dropped, and named in
//! [`RawSummary::dropped`]. The value's GGUF type is not kept.

use std::path::Path;

use serde_json::Value as Json;

use super::config::f32_decimal;
#[cfg(feature = "npz")]
use super::read::GgufTensor;
use super::read::{GgufFile, GgufHeader};
use super::to_hf::plan_tensors;
use super::value::{float_json, Value};
#[cfg(feature = "npz")]
use crate::npz::{save_npz, NpzWriteOptions};
use crate::source::ByteSource;
use crate::{Dtype, Metadata, Result, WriteOptions};

/// Arrays longer than this are not kept in `__metadata__`.
pub const MAX_ARRAY: usize = 1024;

/// What a raw conversion did.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RawSummary {
    /// Tensors written.
    pub tensors: usize,
    /// Of those, decoded from quantized blocks to F32.
    pub decoded: usize,
    /// Of those, the ones kept quantized as MLX affine weights
    /// (`keep_quant`): `.weight` holds the packed codes, beside `.scales`
    /// and `.biases`.
    pub kept: Vec<String>,
    /// Metadata keys kept in `__metadata__`.
    pub kept_keys: usize,
    /// Metadata keys not kept: arrays longer than [`MAX_ARRAY`] (every key
    /// for npz output, which has no metadata).
    pub dropped: Vec<String>,
}

/// The JSON text of a value, or `None` when it holds an array longer than
/// [`MAX_ARRAY`].
fn encode(v: &Value) -> Option<Json> {
    Some(match v {
        Value::F32(x) if x.is_finite() => float_json(f32_decimal(*x)),
        Value::Array(a) => {
            if a.len() > MAX_ARRAY {
                return None;
            }
            Json::Array(
                (0..a.len())
                    .map(|i| a.get(i).and_then(|e| encode(&e)))
                    .collect::<Option<_>>()?,
            )
        }
        other => other.to_json(MAX_ARRAY),
    })
}

/// The `__metadata__` of a GGUF header (see the module's documentation),
/// and the keys not kept.
pub fn raw_metadata(h: &GgufHeader) -> (Metadata, Vec<String>) {
    let mut kept = Metadata::new();
    let mut dropped = Vec::new();
    for kv in h.kv() {
        match encode(&kv.value) {
            Some(j) => {
                kept.insert(kv.key.clone(), j.to_string());
            }
            None => dropped.push(kv.key.clone()),
        }
    }
    (kept, dropped)
}

/// Writes the tensors of `file` and its metadata to the safetensors file
/// `out`, atomically; `dtype`, when given, is the dtype the float tensors
/// are cast to (decoded ones included). With `keep_quant`, 2-D Q4_0,
/// Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K tensors named `*.weight` are kept
/// as MLX affine weights (`.weight`, `.scales`, `.biases`, groups of 32)
/// that give the same values, as in `to_hf`, and `format` is
/// `mlx`.
///
/// # Errors
/// A type that is not decoded, a failed read or cast, or a failed write
/// (nothing is left at `out` then).
pub fn gguf_to_safetensors<S: ByteSource>(
    file: &GgufFile<S>,
    out: &Path,
    dtype: Option<Dtype>,
    keep_quant: bool,
    write: &WriteOptions,
) -> Result<RawSummary> {
    let (metadata, dropped) = raw_metadata(file.header());
    let kept_keys = metadata.len();
    let planned = plan_tensors(file, None, dtype, keep_quant, metadata)?;
    crate::atomic::save_plan(out, &planned.plan, write, &())?;
    Ok(RawSummary {
        tensors: file.header().tensors().len(),
        decoded: planned.decoded,
        kept: planned.kept.into_keys().collect(),
        kept_keys,
        dropped,
    })
}

/// Writes the tensors of `file` to the npz archive `out` (numpy's
/// `np.savez` bytes), atomically. npz has no metadata: every key is in
/// [`RawSummary::dropped`]. (With the `npz` feature.)
///
/// # Errors
/// As [`gguf_to_safetensors`].
#[cfg(feature = "npz")]
pub fn gguf_to_npz<S: ByteSource>(
    file: &GgufFile<S>,
    out: &Path,
    options: &NpzWriteOptions,
) -> Result<RawSummary> {
    let tensors: Vec<GgufTensor<'_, S>> = file.tensor_data()?;
    let decoded = tensors.iter().filter(|t| t.is_decoded()).count();
    save_npz(out, &tensors, options, &())?;
    Ok(RawSummary {
        tensors: tensors.len(),
        decoded,
        kept: Vec::new(),
        kept_keys: 0,
        dropped: file.header().kv().iter().map(|kv| kv.key.clone()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::GgufArray as Array;

    #[test]
    fn values_encode_as_json_text_and_long_arrays_are_dropped() {
        let text = |v: Value| encode(&v).map(|j| j.to_string());
        assert_eq!(text(Value::F32(1e-5)).as_deref(), Some("0.00001"));
        assert_eq!(
            text(Value::String("a\"b".into())).as_deref(),
            Some("\"a\\\"b\"")
        );
        assert_eq!(text(Value::F32(f32::NAN)).as_deref(), Some("\"nan\""));
        assert_eq!(
            text(Value::Array(Array::U8(vec![1, 2]))).as_deref(),
            Some("[1,2]")
        );
        assert_eq!(text(Value::Array(Array::U8(vec![0; MAX_ARRAY + 1]))), None);
    }
}
