//! What to do with tensors that share storage.
//!
//! In torch, several names can view one storage: tied weights (the same
//! tensor under two names), or different views (a row, a transpose) of one
//! buffer. safetensors has no sharing, so a converter must decide.

use std::collections::HashMap;

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::tensor::{TorchTensor, ViewKey};

/// The sharing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SharedPolicy {
    /// Merge exact aliases (same storage, offset, shape, strides, dtype):
    /// the name that comes first in the pickle keeps the bytes (the
    /// owning module's: `model.embed_tokens.weight`, not `lm_head.weight`;
    /// the name transformers keeps), the others are recorded in the
    /// metadata as `"removed": "kept"`. Other views of a shared storage get
    /// their own bytes.
    #[default]
    Alias,
    /// Every name gets its own bytes.
    Copy,
    /// Refuse any two names that share a storage.
    Error,
}

impl std::str::FromStr for SharedPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<SharedPolicy, String> {
        match s {
            "alias" => Ok(SharedPolicy::Alias),
            "copy" => Ok(SharedPolicy::Copy),
            "error" => Ok(SharedPolicy::Error),
            _ => Err(format!(
                "unknown sharing policy {s:?}; expected alias, copy or error"
            )),
        }
    }
}

/// Which tensors to write, and which names became aliases.
#[derive(Debug)]
pub struct Selection<'a> {
    /// Tensors that get their own bytes, sorted by name.
    pub write: Vec<TorchTensor<'a>>,
    /// `(removed name, kept name)` pairs, sorted by removed name.
    pub aliases: Vec<(String, String)>,
}

/// Applies `policy` to the checkpoint's tensors.
///
/// # Errors
///
/// [`Error::Shared`] with [`SharedPolicy::Error`] when two tensors share a
/// storage.
pub fn select(ckpt: &Checkpoint, policy: SharedPolicy) -> Result<Selection<'_>> {
    let mut write = Vec::with_capacity(ckpt.len());
    let mut aliases = Vec::new();
    match policy {
        SharedPolicy::Copy => write.extend(ckpt.tensors()),
        SharedPolicy::Alias => {
            // Of each group of exact aliases, the name first in pickle
            // order keeps the bytes.
            let mut owner: HashMap<ViewKey, TorchTensor<'_>> = HashMap::new();
            for t in ckpt.tensors() {
                owner
                    .entry(t.view_key())
                    .and_modify(|o| {
                        if t.pickle_order() < o.pickle_order() {
                            *o = t;
                        }
                    })
                    .or_insert(t);
            }
            for t in ckpt.tensors() {
                match owner.get(&t.view_key()) {
                    Some(o) if o.name() != t.name() => {
                        aliases.push((t.name().to_string(), o.name().to_string()));
                    }
                    _ => write.push(t),
                }
            }
        }
        SharedPolicy::Error => {
            let mut owner: HashMap<usize, &str> = HashMap::new();
            for t in ckpt.tensors() {
                if let Some(first) = owner.insert(t.storage_index(), t.name()) {
                    return Err(Error::Shared(format!(
                        "tensors {first:?} and {:?} share storage {:?}, and the sharing policy is 'error' (use 'alias' or 'copy')",
                        t.name(),
                        t.storage_key()
                    )));
                }
                write.push(t);
            }
        }
    }
    Ok(Selection { write, aliases })
}
