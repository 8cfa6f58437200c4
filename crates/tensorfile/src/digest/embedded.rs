//! Per-tensor sha256 recorded in a file's own metadata, under one key
//! ([`TENSOR_SHA256_KEY`]), so that the file alone says when a byte of a
//! tensor changed, and which tensor.
//!
//! The value is the JSON text of an object from tensor name to the sha256
//! (64 lowercase hex digits) of its bytes, every tensor of the file listed,
//! names sorted: `{"lm_head.weight":"3f1c...","model.norm.weight":"9a0e..."}`.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::DigestError;
use super::sha::{tensor_sha256, Sha256Digest};
use crate::writer::TensorData;
use crate::{parallel, FileSource, Metadata, ReadOptions, Result, SafeTensors, WriteOptions};

use super::TENSOR_SHA256_KEY;

/// The per-tensor digests recorded in `metadata`; `Ok(None)` without the key.
///
/// # Errors
/// The value is not a JSON object of tensor names to sha256 hex digests.
pub fn embedded_hashes(
    metadata: Option<&Metadata>,
) -> std::result::Result<Option<BTreeMap<String, Sha256Digest>>, DigestError> {
    let Some(text) = metadata.and_then(|m| m.get(TENSOR_SHA256_KEY)) else {
        return Ok(None);
    };
    let bad = |problem: String| DigestError::Embedded {
        key: TENSOR_SHA256_KEY,
        problem,
    };
    let map: BTreeMap<String, String> = serde_json::from_str(text)
        .map_err(|e| bad(format!("not a JSON object of tensor names to sha256: {e}")))?;
    map.into_iter()
        .map(|(name, hex)| {
            let d = hex
                .parse()
                .map_err(|e| bad(format!("tensor {name:?}: {e}")))?;
            Ok((name, d))
        })
        .collect::<std::result::Result<_, _>>()
        .map(Some)
}

/// The per-tensor sha256 of `tensors`, in their order, computed on the
/// pool (several tensors at once).
///
/// # Errors
/// A failed read.
pub fn tensor_digests<T: TensorData<crate::Error>>(tensors: &[T]) -> Result<Vec<Sha256Digest>> {
    let slots: Vec<std::sync::Mutex<Option<Result<Sha256Digest>>>> =
        tensors.iter().map(|_| Default::default()).collect();
    parallel::for_each_index(tensors.len(), |i| {
        let got = tensor_sha256(&tensors[i]);
        let ok = got.is_ok();
        if let Ok(mut slot) = slots[i].lock() {
            *slot = Some(got);
        }
        ok
    });
    let mut out = Vec::with_capacity(tensors.len());
    for (slot, t) in slots.into_iter().zip(tensors) {
        match slot.into_inner().ok().flatten() {
            Some(d) => out.push(d?),
            None => {
                return Err(crate::Error::not_found(format!(
                    "{}: not hashed (an earlier tensor failed)",
                    t.name()
                )))
            }
        }
    }
    Ok(out)
}

/// The metadata value recording `digests` (name, digest).
pub fn embedded_value<'a>(digests: impl IntoIterator<Item = (&'a str, Sha256Digest)>) -> String {
    let map: BTreeMap<&str, String> = digests.into_iter().map(|(n, d)| (n, d.hex())).collect();
    serde_json::to_string(&map).unwrap_or_default()
}

/// Rewrites the safetensors file at `path` (atomically, as every save)
/// with the same tensors and metadata plus [`TENSOR_SHA256_KEY`] holding
/// each tensor's sha256. Reads the file once to hash it and once to
/// write it; returns the number of tensors.
///
/// # Errors
/// The file cannot be read or written.
pub fn embed_hashes(path: &Path, options: &WriteOptions) -> Result<usize> {
    let read = ReadOptions::default().max_header_len(options.max_header_len);
    let source = FileSource::open(path).map_err(|e| crate::CoreError::io(path, e))?;
    let file = SafeTensors::from_source(source, &read)?;
    let tensors: Vec<_> = file.tensor_data().collect();
    let digests = tensor_digests(&tensors)?;
    let mut metadata = file.metadata().cloned().unwrap_or_default();
    let value = embedded_value(tensors.iter().map(|t| t.name()).zip(digests));
    metadata.insert(TENSOR_SHA256_KEY.to_string(), value);
    crate::save(path, &tensors, Some(&metadata), options)?;
    Ok(tensors.len())
}

/// What [`check_embedded`] found for one tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorCheck {
    /// The digest matches.
    Same(String),
    /// The bytes changed: name, recorded, found.
    Differs(String, Sha256Digest, Sha256Digest),
    /// A tensor of the file with no recorded digest.
    Unrecorded(String),
    /// A recorded digest whose tensor is not in the file.
    Missing(String),
}

/// Checks `tensors` against the recorded `expected` digests, in the
/// tensors' order then the missing ones.
///
/// # Errors
/// A failed read.
pub fn check_embedded<T: TensorData<crate::Error>>(
    tensors: &[T],
    expected: &BTreeMap<String, Sha256Digest>,
) -> Result<Vec<TensorCheck>> {
    let digests = tensor_digests(tensors)?;
    let mut out: Vec<TensorCheck> = tensors
        .iter()
        .zip(digests)
        .map(|(t, got)| {
            let name = t.name().to_string();
            match expected.get(&name) {
                None => TensorCheck::Unrecorded(name),
                Some(want) if *want != got => TensorCheck::Differs(name, *want, got),
                Some(_) => TensorCheck::Same(name),
            }
        })
        .collect();
    let present: std::collections::HashSet<&str> = tensors.iter().map(|t| t.name()).collect();
    out.extend(
        expected
            .keys()
            .filter(|n| !present.contains(n.as_str()))
            .map(|n| TensorCheck::Missing(n.clone())),
    );
    Ok(out)
}
