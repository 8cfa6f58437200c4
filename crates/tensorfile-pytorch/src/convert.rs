//! What converting a checkpoint to safetensors writes, as data: which
//! tensors under which names ([`SharedPolicy`] decides what becomes of
//! names that share storage), the output's metadata (`"format": "pt"`, a
//! `"removed": "kept"` entry per alias, and with `keep_values` every
//! non-tensor value), and tensors that release a deflated storage's
//! inflated bytes once its last one is written.
//!
//! Casting and writing are the umbrella crate's (`tensorfile::pytorch`),
//! which plans [`Conversion::tensors`] like any other tensors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tensorfile_core::writer::TensorData;
use tensorfile_core::{Dtype, Metadata};

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::sharing::{select, SharedPolicy};
use crate::tensor::TorchTensor;

/// The metadata key and value every converted file carries, like the
/// reference converter's output.
pub const FORMAT_KEY: &str = "format";
/// See [`FORMAT_KEY`].
pub const FORMAT_VALUE: &str = "pt";

/// What to write of a checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConvertPolicy {
    /// What to do with tensors that share storage.
    pub shared: SharedPolicy,
    /// Keep non-tensor values (numbers, strings) as string metadata.
    pub keep_values: bool,
}

/// What converting a checkpoint writes.
#[derive(Debug)]
pub struct Conversion<'a> {
    /// The tensors to write, under their names, sorted by name.
    pub tensors: Vec<ConvertTensor<'a>>,
    /// `(removed name, kept name)` for each alias, sorted by removed name.
    pub aliases: Vec<(String, String)>,
    /// Non-tensor values kept in the metadata.
    pub values: usize,
    /// The output's metadata.
    pub metadata: Metadata,
}

impl Conversion<'_> {
    /// The tensor bytes to write.
    pub fn bytes(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |n, t| n.saturating_add(t.tensor.nbytes()))
    }

    /// The parameters written (a tied tensor counted once).
    pub fn parameters(&self) -> u128 {
        self.tensors
            .iter()
            .map(|t| u128::from(t.tensor.numel()))
            .sum()
    }
}

/// Applies `policy` to the checkpoint.
///
/// # Errors
///
/// [`Error::Shared`] when `policy.shared` refuses tensors that share
/// storage, and [`Error::Structure`] when two metadata entries (aliases,
/// kept values) have one key.
pub fn conversion<'a>(ckpt: &'a Checkpoint, policy: &ConvertPolicy) -> Result<Conversion<'a>> {
    let selection = select(ckpt, policy.shared)?;
    let metadata = metadata(ckpt, &selection.aliases, policy.keep_values)?;
    // Tensors left to write per storage: a deflated storage's inflated
    // bytes are released after its last one.
    let left: Arc<[AtomicUsize]> = (0..ckpt.storage_count())
        .map(|_| AtomicUsize::new(0))
        .collect();
    for t in &selection.write {
        if let Some(n) = left.get(t.storage_index()) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }
    let tensors = selection
        .write
        .into_iter()
        .map(|tensor| ConvertTensor {
            tensor,
            ckpt,
            left: Arc::clone(&left),
        })
        .collect();
    Ok(Conversion {
        tensors,
        aliases: selection.aliases,
        values: if policy.keep_values {
            ckpt.values().len()
        } else {
            0
        },
        metadata,
    })
}

/// A tensor to write: a [`TorchTensor`] that, once its bytes are made
/// ([`TensorData::produce`]), releases its storage's inflated bytes if no
/// other tensor of the conversion still needs them.
#[derive(Debug, Clone)]
pub struct ConvertTensor<'a> {
    tensor: TorchTensor<'a>,
    ckpt: &'a Checkpoint,
    left: Arc<[AtomicUsize]>,
}

impl<'a> ConvertTensor<'a> {
    /// The checkpoint's tensor.
    pub fn tensor(&self) -> TorchTensor<'a> {
        self.tensor
    }

    /// Its name (as [`TensorData::name`], which is ambiguous on a tensor
    /// that implements it for every error).
    pub fn name(&self) -> &'a str {
        self.tensor.name()
    }

    /// Its element type.
    pub fn dtype(&self) -> Dtype {
        self.tensor.dtype()
    }

    /// Its dimensions.
    pub fn shape(&self) -> &'a [u64] {
        self.tensor.shape()
    }
}

impl<E> TensorData<E> for ConvertTensor<'_>
where
    E: From<Error> + From<tensorfile_core::Error>,
{
    fn name(&self) -> &str {
        self.tensor.name()
    }
    fn dtype(&self) -> Dtype {
        self.tensor.dtype()
    }
    fn shape(&self) -> &[u64] {
        self.tensor.shape()
    }
    fn byte_len(&self) -> u64 {
        self.tensor.nbytes()
    }
    fn bytes(&self) -> Option<&[u8]> {
        TensorData::<E>::bytes(&self.tensor)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::result::Result<(), E> {
        TensorData::<E>::read_at(&self.tensor, offset, buf)
    }
    fn seekable(&self) -> bool {
        TensorData::<E>::seekable(&self.tensor)
    }
    fn produce(
        &self,
        each: &mut dyn FnMut(u64, &[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let made = TensorData::<E>::produce(&self.tensor, each);
        let storage = self.tensor.storage_index();
        if self.left.get(storage).is_some_and(|n| {
            n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1)) == Ok(1)
        }) {
            self.ckpt.release_storage(storage);
        }
        made
    }
}

/// The output's metadata: `"format": "pt"`, one `"removed": "kept"` entry
/// per alias, and with `keep_values` every non-tensor value. Refuses two
/// entries with one key.
///
/// # Errors
///
/// [`Error::Structure`] when two entries (an alias, a kept value, or
/// `format`) have one key.
pub fn metadata(
    ckpt: &Checkpoint,
    aliases: &[(String, String)],
    keep_values: bool,
) -> Result<Metadata> {
    let mut m = Metadata::new();
    m.insert(FORMAT_KEY.to_string(), FORMAT_VALUE.to_string());
    let values = if keep_values { ckpt.values() } else { &[] };
    let entries = aliases
        .iter()
        .map(|(k, v)| (k, v, "an alias"))
        .chain(values.iter().map(|(k, v)| (k, v, "a kept value")));
    for (k, v, what) in entries {
        if m.insert(k.clone(), v.clone()).is_some() {
            return Err(Error::Structure(format!(
                "metadata key {k:?} ({what}) collides with another entry (\"format\", an alias or a kept value)"
            )));
        }
    }
    Ok(m)
}
