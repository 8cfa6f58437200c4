//! `inspect` of a GGUF file: [`GgufDescription`], what `inspect --json
//! FILE.gguf` prints and the Python package's `inspect` returns.
//!
//! As in the parent module, each struct's fields are declared in ascending
//! byte order of their serialized names, the order the keys are printed in.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use tensorfile::gguf::{Endian, GgmlType, GgufFile, GgufHeader, GgufTensorInfo, GgufValue};
use tensorfile::{Progress, Result};

/// Arrays longer than this are summarized in the JSON (a vocabulary, the
/// merges): their first values and their length.
const ARRAY_SHOWN: usize = 16;

/// One GGUF file: what `inspect --json FILE.gguf` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GgufDescription {
    /// The data section's alignment (`general.alignment`, else 32).
    pub alignment: u64,
    /// `general.architecture`, when the file names one.
    pub architecture: Option<String>,
    /// Bytes of tensor data, all tensors together (as stored).
    pub data_bytes: u64,
    /// Where the data section starts in the file.
    pub data_offset: u64,
    /// `"little"` or `"big"`.
    pub endianness: String,
    /// The path, as given (lossy where it is not UTF-8).
    pub file: String,
    /// Always `"gguf"`.
    pub format: String,
    /// The key-value pairs, in file order.
    pub metadata: Vec<GgufMetadataEntry>,
    /// The element count of all tensors together.
    pub parameters: u128,
    /// The file's length in bytes.
    pub size: u64,
    /// Where the tensor infos end (before the alignment padding).
    pub tensor_info_end: u64,
    /// The tensors, in the order of their infos.
    pub tensors: Vec<GgufTensorEntry>,
    /// Per ggml type: tensors, parameters, bytes and bits per weight.
    pub types: BTreeMap<String, GgufTypeTotals>,
    /// The GGUF version (2 or 3).
    pub version: u32,
    /// What is valid GGUF but llama.cpp refuses or looks wrong.
    pub warnings: Vec<String>,
}

/// One key-value pair of a GGUF file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GgufMetadataEntry {
    /// An array's element type (arrays only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub element_type: Option<String>,
    /// The key.
    pub key: String,
    /// An array's length (arrays only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub len: Option<u64>,
    /// The value's GGUF type name (`string`, `uint32`, `array`, ...).
    #[serde(rename = "type")]
    pub value_type: String,
    /// The value; an array of more than 16 values is shown as its first 8
    /// values, its length and its element type.
    pub value: serde_json::Value,
}

/// One tensor of a GGUF file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GgufTensorEntry {
    /// Bytes of its data, as stored.
    pub bytes: u64,
    /// Dimensions as stored, fastest first.
    pub dims: Vec<u64>,
    /// Its ggml type's name (`F32`, `Q4_K`, ...).
    pub ggml_type: String,
    /// The name.
    pub name: String,
    /// Its data's offset from the start of the data section.
    pub offset: u64,
    /// The sha256 of its bytes as stored (with `--hash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The logical shape, outermost first (the dims reversed).
    pub shape: Vec<u64>,
    /// Its data's absolute offset in the file.
    pub start: u64,
}

/// The tensors of one ggml type, together.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GgufTypeTotals {
    /// The type's bits per weight.
    pub bits_per_weight: f64,
    /// Bytes of their data.
    pub bytes: u64,
    /// Their element count.
    pub parameters: u128,
    /// How many tensors.
    pub tensors: u64,
}

/// Describes the GGUF file at `path`; with `hash`, each tensor's sha256 of
/// its stored bytes (every byte read and counted on `progress`, its total
/// told first). The header comes back too, for a front end's text.
pub(super) fn describe(
    path: &Path,
    hash: bool,
    progress: &dyn Progress,
) -> Result<(GgufDescription, GgufHeader)> {
    let file = GgufFile::open(path)?;
    let h = file.header();
    let hashes: Vec<Option<String>> = if hash {
        progress.total(h.tensors().iter().map(|t| t.byte_len).sum());
        h.tensors()
            .iter()
            .map(|t| stored_sha256(&file, t, progress).map(Some))
            .collect::<Result<_>>()?
    } else {
        vec![None; h.tensors().len()]
    };
    let metadata = h
        .kv()
        .iter()
        .map(|kv| {
            let array = match &kv.value {
                GgufValue::Array(a) => Some((a.element_type().name().to_string(), a.len() as u64)),
                _ => None,
            };
            GgufMetadataEntry {
                element_type: array.as_ref().map(|(t, _)| t.clone()),
                key: kv.key.clone(),
                len: array.map(|(_, n)| n),
                value_type: kv.value.value_type().name().to_string(),
                value: serde_json::to_value(kv.value.json(ARRAY_SHOWN))
                    .unwrap_or(serde_json::Value::Null),
            }
        })
        .collect();
    let tensors = h
        .tensors()
        .iter()
        .zip(hashes)
        .map(|(t, sha256)| GgufTensorEntry {
            bytes: t.byte_len,
            dims: t.dims.clone(),
            ggml_type: t.ggml_type.name().to_string(),
            name: t.name.clone(),
            offset: t.offset,
            sha256,
            shape: t.shape(),
            start: t.start,
        })
        .collect();
    let mut types: BTreeMap<GgmlType, GgufTypeTotals> = BTreeMap::new();
    for t in h.tensors() {
        let totals = types.entry(t.ggml_type).or_insert(GgufTypeTotals {
            bits_per_weight: t.ggml_type.bits_per_weight(),
            bytes: 0,
            parameters: 0,
            tensors: 0,
        });
        totals.bytes += t.byte_len;
        totals.parameters += u128::from(t.numel());
        totals.tensors += 1;
    }
    let description = GgufDescription {
        alignment: h.alignment(),
        architecture: h.architecture().map(str::to_string),
        data_bytes: h.tensors().iter().map(|t| t.byte_len).sum(),
        data_offset: h.data_offset(),
        endianness: match h.endian() {
            Endian::Little => "little",
            Endian::Big => "big",
        }
        .to_string(),
        file: path.to_string_lossy().into_owned(),
        format: "gguf".to_string(),
        metadata,
        parameters: h.tensors().iter().map(|t| u128::from(t.numel())).sum(),
        size: h.file_len(),
        tensor_info_end: h.info_end(),
        tensors,
        types: types
            .into_iter()
            .map(|(t, totals)| (t.name().to_string(), totals))
            .collect(),
        version: h.version(),
        warnings: h.warnings().to_vec(),
    };
    Ok((description, h.clone()))
}

/// The sha256 of a tensor's bytes as stored, read 4 MiB at a time.
#[cfg(feature = "digest")]
fn stored_sha256(file: &GgufFile, t: &GgufTensorInfo, progress: &dyn Progress) -> Result<String> {
    const PIECE: u64 = 4 << 20;
    let mut hasher = tensorfile::digest::Hasher::new();
    let mut buf = vec![0u8; PIECE.min(t.byte_len) as usize];
    let mut at = 0u64;
    while at < t.byte_len {
        let n = (t.byte_len - at).min(PIECE) as usize;
        file.read_raw(t, at, &mut buf[..n])?;
        hasher.update(&buf[..n]);
        progress.advance(n as u64);
        at += n as u64;
    }
    Ok(hasher.finish().hex())
}

/// Without the `digest` feature, hashes cannot be asked for.
#[cfg(not(feature = "digest"))]
fn stored_sha256(
    _file: &GgufFile,
    _t: &GgufTensorInfo,
    _progress: &dyn Progress,
) -> Result<String> {
    Err(tensorfile::Error::request(
        "tensor hashes need tensorfile's digest feature",
    ))
}
