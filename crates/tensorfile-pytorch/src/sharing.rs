//! What to do with tensors that share storage.
//!
//! In torch, several names can view one storage: tied weights (the same
//! tensor under two names), or different views (a row, a transpose) of one
//! buffer. safetensors has no sharing, so a converter must decide.

use std::collections::HashMap;

use crate::checkpoint::{Checkpoint, TorchTensor, ViewKey};
use crate::error::{Error, Result};

/// The sharing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SharedPolicy {
    /// Merge exact aliases (same storage, offset, shape, strides, dtype):
    /// the first name in byte order keeps the bytes, the others are
    /// recorded in the metadata as `"removed": "kept"`. Other views of a
    /// shared storage get their own bytes.
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
pub struct Plan<'a> {
    /// Tensors that get their own bytes, sorted by name.
    pub write: Vec<TorchTensor<'a>>,
    /// `(removed name, kept name)` pairs, sorted by removed name.
    pub aliases: Vec<(String, String)>,
}

/// Applies `policy` to the checkpoint's tensors.
pub fn plan(ckpt: &Checkpoint, policy: SharedPolicy) -> Result<Plan<'_>> {
    let mut write = Vec::with_capacity(ckpt.len());
    let mut aliases = Vec::new();
    match policy {
        SharedPolicy::Copy => write.extend(ckpt.tensors()),
        SharedPolicy::Alias => {
            // Tensors come sorted by name, so the first seen keeps the bytes.
            let mut kept: HashMap<ViewKey, &str> = HashMap::new();
            for t in ckpt.tensors() {
                match kept.get(&t.view_key()) {
                    Some(&first) => aliases.push((t.name().to_string(), first.to_string())),
                    None => {
                        kept.insert(t.view_key(), t.name());
                        write.push(t);
                    }
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
    Ok(Plan { write, aliases })
}
