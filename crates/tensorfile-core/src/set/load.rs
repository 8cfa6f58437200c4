//! Loading many tensors, or slices of them, from a set at once: what a
//! tensor-parallel rank does at start-up.
//!
//! The wants are read by the read-plan engine ([`crate::read`]): in the
//! wants' order, with parallel positional reads on the library's pool
//! (consecutive reads of a remote shard go to its source together, which
//! runs their requests concurrently). Nothing beyond the results is held:
//! a memory budget bounds them, checked before anything is read, and
//! [`ShardedTensors::load_each`] streams a long list through it.
//!
//! ```
//! # fn main() -> tensorfile_core::Result<()> {
//! use tensorfile_core::set::{ShardedTensors, Want};
//! use tensorfile_core::SliceArg;
//! # let dir = tempfile::tempdir().map_err(|e| tensorfile_core::Error::io("tempdir", e))?;
//! # let dir = dir.path();
//! # let data = vec![0u8; 32 * 32 * 4];
//! # let w = tensorfile_core::TensorRef { name: "bigram.weight", dtype: tensorfile_core::Dtype::F32, shape: &[32, 32], data: &data };
//! # tensorfile_core::save(dir.join("model.safetensors"), [w], None, &tensorfile_core::WriteOptions::default())?;
//! let set = ShardedTensors::open(dir)?;
//! // Rows 8..16 of a 32x32 matrix: a quarter of it.
//! let wants = [Want::slice("bigram.weight", vec![SliceArg::range(8, 16)])];
//! let loaded = set.load(&wants, 1 << 20)?;
//! assert_eq!(loaded[0].shape, [8, 32]);
//! # Ok(()) }
//! ```

use crate::error::{Error, Result};
use crate::set::ShardedTensors;
use crate::{Dtype, SliceArg};

/// What to load: a whole tensor, or a slice of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    /// The tensor's name.
    pub name: String,
    /// How to slice it (one argument per leading dimension); `None`: whole.
    pub slice: Option<Vec<SliceArg>>,
}

impl Want {
    /// The whole tensor `name`.
    pub fn tensor(name: impl Into<String>) -> Want {
        Want {
            name: name.into(),
            slice: None,
        }
    }

    /// A slice of the tensor `name`.
    pub fn slice(name: impl Into<String>, args: Vec<SliceArg>) -> Want {
        Want {
            name: name.into(),
            slice: Some(args),
        }
    }
}

/// A loaded tensor or slice: its bytes in C order, as the file stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The tensor's name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// The shape of what was loaded (the slice's, for a slice).
    pub shape: Vec<u64>,
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl ShardedTensors {
    /// Loads every want at once, in parallel positional reads (see
    /// [`crate::read`]). The results, in the wants' order, may hold at most
    /// `budget` bytes together.
    ///
    /// # Errors
    /// No such tensor, slice arguments that do not fit, results over the
    /// budget (before anything is read), or a read that fails (naming the
    /// shard).
    pub fn load(&self, wants: &[Want], budget: u64) -> Result<Vec<Loaded>> {
        let mut loaded = Vec::with_capacity(wants.len());
        let refuse = |sizes: &[(&str, u64)]| {
            let total = sizes
                .iter()
                .fold(0u64, |n, (_, len)| n.saturating_add(*len));
            match total > budget {
                true => Err(over_budget(total, budget)),
                false => Ok(()),
            }
        };
        // Checked as a whole just now: every result is held at once.
        self.load_wants(wants, u64::MAX, refuse, |l| {
            loaded.push(l);
            Ok(())
        })?;
        Ok(loaded)
    }

    /// Loads the wants with at most `budget` bytes of results read and not
    /// yet handed over, handing each result to `f` in the wants' order,
    /// while the next ones are read: a whole model streams through a fixed
    /// amount of memory (what `f` keeps aside).
    ///
    /// # Errors
    /// As [`ShardedTensors::load`] (a single result larger than the budget
    /// is refused, naming it, before anything is read), or the first error
    /// `f` returns.
    pub fn load_each(
        &self,
        wants: &[Want],
        budget: u64,
        f: impl FnMut(Loaded) -> Result<()>,
    ) -> Result<()> {
        let refuse = |sizes: &[(&str, u64)]| match sizes.iter().find(|(_, len)| *len > budget) {
            Some((name, len)) => Err(Error::Stream(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!("tensor {name:?}: {len} bytes, over the memory budget of {budget} bytes"),
            ))),
            None => Ok(()),
        };
        self.load_wants(wants, budget, refuse, f)
    }
}

fn over_budget(total: u64, budget: u64) -> Error {
    Error::Stream(std::io::Error::new(
        std::io::ErrorKind::OutOfMemory,
        format!(
            "the tensors asked for hold {total} bytes, over the memory budget of {budget} bytes"
        ),
    ))
}
