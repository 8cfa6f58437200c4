//! Loading many tensors, or slices of them, from a set at once: what a
//! tensor-parallel rank does at start-up.
//!
//! Each shard is asked for all the byte ranges it holds in one
//! [`ByteSource::read_ranges`] call, so that a remote shard coalesces
//! neighbouring ranges and runs its requests concurrently; the shards are
//! read at once too. Nothing beyond the results is held: a memory budget
//! bounds them, checked before anything is read, and
//! [`ShardedTensors::load_each`] goes through a long list in batches that
//! fit it.
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
use crate::set::{Shard, ShardedTensors};
use crate::source::ByteSource;
use crate::{Dtype, SliceArg, TensorSlice};

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

/// One want, planned: its shard, the result's shape and size, and the byte
/// ranges of the shard (absolute offsets) whose concatenation it is.
struct Planned<'a> {
    shard: &'a Shard,
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    nbytes: u64,
    ranges: Vec<std::ops::Range<u64>>,
}

/// The most shards read at once (each runs its own requests concurrently).
const SHARDS_AT_ONCE: usize = 16;

impl ShardedTensors {
    fn plan_want(&self, want: &Want) -> Result<Planned<'_>> {
        let shard = self
            .shard_of(&want.name)
            .ok_or_else(|| Error::NotFound(want.name.clone()))?;
        let info = shard.file.info(&want.name)?;
        let start = shard.header().data_start() + info.data_offsets.0;
        let (shape, nbytes, ranges) = match &want.slice {
            None => (
                info.shape.to_vec(),
                info.nbytes(),
                std::iter::once(start..start + info.nbytes()).collect(),
            ),
            Some(args) => {
                let slice = TensorSlice::new(info, args)?;
                let ranges = slice
                    .merged_byte_ranges()
                    .map(|r| start + r.start..start + r.end)
                    .collect();
                (slice.shape().to_vec(), slice.nbytes(), ranges)
            }
        };
        Ok(Planned {
            shard,
            name: want.name.clone(),
            dtype: info.dtype,
            shape,
            nbytes,
            ranges,
        })
    }

    /// Loads every want at once: each shard's ranges in one
    /// [`ByteSource::read_ranges`] call (coalesced and concurrent on a
    /// remote source), the shards at once. The results, in the wants'
    /// order, may hold at most `budget` bytes together.
    ///
    /// # Errors
    /// No such tensor, slice arguments that do not fit, results over the
    /// budget (before anything is read), or a read that fails (naming the
    /// shard).
    pub fn load(&self, wants: &[Want], budget: u64) -> Result<Vec<Loaded>> {
        let planned = wants
            .iter()
            .map(|w| self.plan_want(w))
            .collect::<Result<Vec<_>>>()?;
        let total = planned.iter().fold(0u64, |n, p| n.saturating_add(p.nbytes));
        if total > budget {
            return Err(over_budget(total, budget));
        }
        read_batch(planned)
    }

    /// Loads the wants in batches of at most `budget` bytes of results,
    /// handing each result to `f` in the wants' order and dropping it
    /// before the next batch is read: a whole model goes through a fixed
    /// amount of memory.
    ///
    /// # Errors
    /// As [`ShardedTensors::load`] (a single result larger than the budget
    /// is refused, naming it), or the first error `f` returns.
    pub fn load_each(
        &self,
        wants: &[Want],
        budget: u64,
        mut f: impl FnMut(Loaded) -> Result<()>,
    ) -> Result<()> {
        let planned = wants
            .iter()
            .map(|w| self.plan_want(w))
            .collect::<Result<Vec<_>>>()?;
        if let Some(big) = planned.iter().find(|p| p.nbytes > budget) {
            return Err(Error::Stream(std::io::Error::new(
                std::io::ErrorKind::OutOfMemory,
                format!(
                    "tensor {:?}: {} bytes, over the memory budget of {budget} bytes",
                    big.name, big.nbytes
                ),
            )));
        }
        let mut batch = Vec::new();
        let mut held = 0u64;
        for p in planned {
            if held + p.nbytes > budget {
                read_batch(std::mem::take(&mut batch))?
                    .into_iter()
                    .try_for_each(&mut f)?;
                held = 0;
            }
            held += p.nbytes;
            batch.push(p);
        }
        read_batch(batch)?.into_iter().try_for_each(&mut f)
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

/// Byte ranges of a shard (absolute offsets) and the buffers they fill.
type Requests<'a> = Vec<(u64, &'a mut [u8])>;

/// Reads a batch: buffers for every result, then each shard's ranges in
/// one call, shards at once.
fn read_batch(planned: Vec<Planned<'_>>) -> Result<Vec<Loaded>> {
    let mut outs: Vec<Vec<u8>> = Vec::with_capacity(planned.len());
    for p in &planned {
        outs.push(crate::file::zeroed_buffer(&p.name, p.nbytes)?);
    }
    // Shard -> its requests, pointing into the result buffers.
    let mut by_shard: Vec<(&Shard, Requests<'_>)> = Vec::new();
    for (p, out) in planned.iter().zip(outs.iter_mut()) {
        let at = match by_shard.iter().position(|(s, _)| std::ptr::eq(*s, p.shard)) {
            Some(i) => i,
            None => {
                by_shard.push((p.shard, Vec::new()));
                by_shard.len() - 1
            }
        };
        let mut rest: &mut [u8] = out;
        for r in &p.ranges {
            let (piece, tail) = rest.split_at_mut((r.end - r.start) as usize);
            rest = tail;
            by_shard[at].1.push((r.start, piece));
        }
    }
    let read = |(shard, mut requests): (&Shard, Requests<'_>)| -> Result<()> {
        // A mapped shard lends its bytes: copies, no reads.
        if let Some(all) = shard.lent()? {
            for (offset, buf) in requests.iter_mut() {
                let start = *offset as usize;
                buf.copy_from_slice(&all[start..start + buf.len()]);
            }
            return Ok(());
        }
        shard
            .file
            .source()
            .read_ranges(&mut requests)
            .map_err(|e| Error::io(shard.path(), e))
    };
    if by_shard.len() <= 1 {
        by_shard.into_iter().try_for_each(read)?;
    } else {
        let workers = by_shard.len().min(SHARDS_AT_ONCE);
        let queue = std::sync::Mutex::new(by_shard.into_iter());
        let first_error = std::sync::Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some(job) = next else { return };
                    if let Err(e) = read(job) {
                        first_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                });
            }
        });
        if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(e);
        }
    }
    Ok(planned
        .into_iter()
        .zip(outs)
        .map(|(p, bytes)| Loaded {
            name: p.name,
            dtype: p.dtype,
            shape: p.shape,
            bytes,
        })
        .collect())
}
