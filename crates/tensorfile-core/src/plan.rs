//! What a transform produces: declared tensors whose bytes are made on
//! demand, and the ways to consume them.
//!
//! A [`Plan`] is a list of output tensors ([`TensorSpec`]s), the output's
//! metadata, and [`Job`]s: each job makes the bytes of one or more of the
//! tensors (a copy makes one; quantizing a weight makes its codes, scales
//! and biases in one pass over its rows) and hands them to a [`Sink`] in
//! pieces, at offsets, in any order, every byte exactly once. Jobs are
//! independent, so they run in parallel.
//!
//! Casts, quantization, dequantization, merges and the PyTorch converter
//! build plans; writers consume them: [`save_plan`](crate::atomic::save_plan)
//! writes the canonical safetensors file atomically, [`Plan::to_bytes`] the
//! same bytes in memory, [`Plan::into_tensors`] owned tensors, and other
//! formats' writers their own layouts.
//!
//! ```
//! use tensorfile_core::plan::Plan;
//! use tensorfile_core::{Dtype, TensorRef};
//! let data = [1u8, 2, 3];
//! let t = TensorRef { name: "t", dtype: Dtype::U8, shape: &[3], data: &data };
//! let mut plan = Plan::new(None);
//! plan.copy(&t);
//! let tensors = plan.into_tensors()?;
//! assert_eq!(tensors[0].data, [1, 2, 3]);
//! # Ok::<(), tensorfile_core::Error>(())
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::WriteError;
use crate::progress::Progress;
use crate::writer::{Layout, TensorData, TensorSpec, WriteOptions, PIECE};
use crate::{Error, Metadata, Result};

/// Where a [`Job`] puts the bytes it makes.
///
/// `E` is the error writing returns, that of the plan it serves: the
/// core's sinks (files, memory) write for a plan of any error a core error
/// converts into; a sink writing another format (GGUF) returns its layer's
/// error, which reaches the plan's caller as it is.
pub trait Sink<E = Error>: Sync {
    /// Writes `bytes` into output tensor `tensor` (its index in the plan)
    /// starting `offset` bytes into it.
    ///
    /// # Errors
    /// The range is outside the tensor or overlaps bytes already written,
    /// or the output fails.
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<(), E>;

    /// Copies `len` bytes of `source` from byte `at` into output tensor
    /// `tensor`, starting `offset` bytes into it: what [`Sink::write`] of
    /// those bytes does. A sink writing a file copies within the kernel
    /// where it can (`copy_file_range` on Linux: no copy through this
    /// process); the default reads pieces of [`PIECE`] bytes and writes
    /// them.
    ///
    /// # Errors
    /// As [`Sink::write`]; a read of `source` that fails or ends early
    /// (naming its file).
    fn copy_file(
        &self,
        tensor: usize,
        offset: u64,
        source: &crate::source::FileSource,
        at: u64,
        len: u64,
    ) -> Result<(), E>
    where
        E: From<Error>,
    {
        use crate::source::ByteSource;
        let mut buf = vec![0u8; (len as usize).min(PIECE)];
        let mut done = 0u64;
        while done < len {
            let n = ((len - done) as usize).min(buf.len());
            source
                .read_exact_at(at + done, &mut buf[..n])
                .map_err(|e| Error::io(source.path(), e))?;
            self.write(tensor, offset + done, &buf[..n])?;
            done += n as u64;
        }
        Ok(())
    }
}

/// Makes the bytes of some of a plan's tensors. `E` is the error its
/// plan's caller works with: the core's by default, a layer's own above it
/// (the job's error comes back from the plan as it is, typed).
pub trait Job<E = Error>: Send + Sync {
    /// Makes every byte of the job's tensors, once, through `sink`.
    ///
    /// # Errors
    /// Whatever stops it: a failed read of an input, a value that cannot be
    /// converted, or the sink's error.
    fn run(&self, sink: &dyn Sink<E>) -> std::result::Result<(), E>;
}

/// A closure is a job; its error may be any that converts into the plan's.
impl<F, E, R> Job<E> for F
where
    F: Fn(&dyn Sink<E>) -> std::result::Result<(), R> + Send + Sync,
    R: Into<E>,
{
    fn run(&self, sink: &dyn Sink<E>) -> std::result::Result<(), E> {
        self(sink).map_err(Into::into)
    }
}

/// A job and the output tensors it makes.
struct Planned<'a, E> {
    outputs: Vec<usize>,
    job: Box<dyn Job<E> + 'a>,
}

/// Declared output tensors and the jobs that make their bytes.
///
/// `E` is the error the jobs return, and so what running the plan
/// returns: the core's [`Error`] for [`Plan::new`], any error a core error
/// converts into for [`Plan::with_error`] (a layer above the core gets its
/// own errors back, typed, from the plan and from
/// [`save_plan`](crate::atomic::save_plan)).
pub struct Plan<'a, E = Error> {
    specs: Vec<TensorSpec>,
    /// Per declared tensor, the input it is made from (its position in the
    /// builder's input list), when the builder says.
    origins: Vec<Option<usize>>,
    metadata: Option<Metadata>,
    jobs: Vec<Planned<'a, E>>,
}

impl<E> std::fmt::Debug for Plan<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("specs", &self.specs)
            .field("metadata", &self.metadata)
            .field("jobs", &self.jobs.len())
            .finish()
    }
}

/// One tensor with its bytes, owned: what [`Plan::into_tensors`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedTensor {
    /// The declaration.
    pub spec: TensorSpec,
    /// The bytes.
    pub data: Vec<u8>,
}

impl OwnedTensor {
    /// Its name (as [`TensorData::name`], which is ambiguous on a tensor
    /// that implements it for every error).
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Its element type.
    pub fn dtype(&self) -> crate::Dtype {
        self.spec.dtype
    }

    /// Its dimensions.
    pub fn shape(&self) -> &[u64] {
        &self.spec.shape
    }
}

impl<E: From<Error>> TensorData<E> for OwnedTensor {
    fn name(&self) -> &str {
        &self.spec.name
    }
    fn dtype(&self) -> crate::Dtype {
        self.spec.dtype
    }
    fn shape(&self) -> &[u64] {
        &self.spec.shape
    }
    fn byte_len(&self) -> u64 {
        self.data.len() as u64
    }
    fn bytes(&self) -> Option<&[u8]> {
        Some(&self.data)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), E> {
        let src = crate::writer::in_memory_range(&self.spec.name, &self.data, offset, buf.len())?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl<'a> Plan<'a> {
    /// An empty plan whose output carries `metadata`, its jobs returning
    /// the core's [`Error`].
    pub fn new(metadata: Option<Metadata>) -> Plan<'a> {
        Plan::with_error(metadata)
    }
}

impl<'a, E: From<Error> + Send> Plan<'a, E> {
    /// An empty plan whose output carries `metadata`, its jobs returning
    /// `E` (a layer's own error, into which the core's converts).
    pub fn with_error(metadata: Option<Metadata>) -> Plan<'a, E> {
        Plan {
            specs: Vec::new(),
            origins: Vec::new(),
            metadata,
            jobs: Vec::new(),
        }
    }

    /// Declares an output tensor; returns its index.
    pub fn declare(&mut self, spec: TensorSpec) -> usize {
        self.specs.push(spec);
        self.origins.push(None);
        self.specs.len() - 1
    }

    /// Declares an output tensor made from input `origin` (its position in
    /// the list of inputs the plan is built from); returns its index. Set
    /// writers use origins to keep each output beside its input (one
    /// output shard per input shard).
    pub fn declare_from(&mut self, spec: TensorSpec, origin: usize) -> usize {
        let i = self.declare(spec);
        self.origins[i] = Some(origin);
        i
    }

    /// The input declared tensor `tensor` is made from, if the builder said.
    pub fn origin(&self, tensor: usize) -> Option<usize> {
        self.origins.get(tensor).copied().flatten()
    }

    /// Adds the job that makes the tensors `outputs` (indices from
    /// [`Plan::declare`]).
    pub fn push(&mut self, outputs: Vec<usize>, job: impl Job<E> + 'a) {
        self.jobs.push(Planned {
            outputs,
            job: Box::new(job),
        });
    }

    /// Declares a tensor and the job that copies `input`'s bytes into it.
    /// `input` is any handle to the tensor the job may hold: a reference
    /// (`&'a T`), or an `Arc` of a tensor the plan owns.
    pub fn copy<H>(&mut self, input: H) -> usize
    where
        H: std::ops::Deref + Send + Sync + 'a,
        H::Target: TensorData<E>,
        E: 'a,
    {
        let t: &H::Target = &input;
        let out = self.declare(TensorSpec::new(t.name(), t.dtype(), t.shape()));
        self.push(vec![out], move |sink: &dyn Sink<E>| {
            copy_into(&*input, out, sink)
        });
        out
    }

    /// [`Plan::copy`] of input `origin` (see [`Plan::declare_from`]).
    pub fn copy_from<H>(&mut self, input: H, origin: usize) -> usize
    where
        H: std::ops::Deref + Send + Sync + 'a,
        H::Target: TensorData<E>,
        E: 'a,
    {
        let out = self.copy(input);
        self.origins[out] = Some(origin);
        out
    }

    /// The declared tensors, by index.
    pub fn specs(&self) -> &[TensorSpec] {
        &self.specs
    }

    /// The output's metadata.
    pub fn metadata(&self) -> Option<&Metadata> {
        self.metadata.as_ref()
    }

    /// Replaces the output's metadata.
    pub fn set_metadata(&mut self, metadata: Option<Metadata>) {
        self.metadata = metadata;
    }

    /// The total bytes of the declared tensors.
    ///
    /// # Errors
    /// A declaration whose byte count overflows or does not fill whole bytes.
    pub fn data_len(&self) -> Result<u64> {
        self.specs.iter().try_fold(0u64, |total, spec| {
            let len = spec.byte_len()?;
            total.checked_add(len).ok_or_else(|| {
                WriteError::DataTooLarge {
                    tensor: spec.name.clone(),
                }
                .into()
            })
        })
    }

    /// Plans the canonical file of this plan's tensors and metadata.
    ///
    /// # Errors
    /// As [`Layout::new`].
    pub fn layout(&self, options: &WriteOptions) -> Result<Layout> {
        Layout::new(&self.specs, self.metadata.as_ref(), options)
    }

    /// Runs every job into `sink`, in parallel, in the order given by
    /// `rank` (lower first: writers pass file order), and reports bytes
    /// made to `progress`. Every declared tensor must be made by exactly
    /// one job; the sink checks that each byte is written once.
    ///
    /// # Errors
    /// The first error a job returns (in rank order when several fail).
    pub fn run(
        &self,
        sink: &dyn Sink<E>,
        rank: impl Fn(usize) -> u64,
        progress: &dyn Progress,
    ) -> std::result::Result<(), E> {
        self.check_coverage()?;
        let mut order: Vec<(u64, usize)> = self
            .jobs
            .iter()
            .enumerate()
            .map(|(j, p)| (p.outputs.iter().map(|&o| rank(o)).min().unwrap_or(0), j))
            .collect();
        order.sort_unstable();
        let counted = Counted { sink, progress };
        let failures: Mutex<Vec<(usize, E)>> = Mutex::new(Vec::new());
        crate::parallel::for_each_index(order.len(), |k| {
            let (_, j) = order[k];
            if let Err(e) = self.jobs[j].job.run(&counted) {
                lock(&failures).push((k, e));
                return false;
            }
            true
        });
        let mut failures = failures
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        failures.sort_unstable_by_key(|(k, _)| *k);
        match failures.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Checks that every declared tensor has a job (several jobs may share
    /// one tensor, each making its own part: the sink checks that every
    /// byte is written once, the writer that every tensor is complete).
    fn check_coverage(&self) -> Result<()> {
        let mut made = vec![false; self.specs.len()];
        for p in &self.jobs {
            for &o in &p.outputs {
                let Some(slot) = made.get_mut(o) else {
                    return Err(plan_error(format!(
                        "a job makes tensor {o}, which is not declared"
                    )));
                };
                *slot = true;
            }
        }
        match made.iter().position(|m| !m) {
            Some(i) => Err(plan_error(format!(
                "no job makes tensor {:?}",
                self.specs[i].name
            ))),
            None => Ok(()),
        }
    }

    /// Runs the plan into owned tensors, in declaration order.
    ///
    /// # Errors
    /// A declaration that does not fit memory, or a job's error.
    pub fn into_tensors(self) -> std::result::Result<Vec<OwnedTensor>, E> {
        let mut buffers = Vec::with_capacity(self.specs.len());
        for spec in &self.specs {
            buffers.push(Mutex::new(Filled::new(spec)?));
        }
        let sink = Buffers(&buffers);
        self.run(&sink, |i| i as u64, &())?;
        let mut out = Vec::with_capacity(buffers.len());
        for (spec, buffer) in self.specs.into_iter().zip(buffers) {
            let filled = buffer
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            filled.check(&spec.name)?;
            out.push(OwnedTensor {
                spec,
                data: filled.data,
            });
        }
        Ok(out)
    }

    /// Runs the plan into the canonical file's bytes, in memory.
    ///
    /// # Errors
    /// As [`Layout::new`], a file that does not fit memory, or a job's error.
    pub fn to_bytes(&self, options: &WriteOptions) -> std::result::Result<Vec<u8>, E> {
        let layout = self.layout(options)?;
        let too_large = || {
            Error::from(WriteError::DataTooLarge {
                tensor: String::new(),
            })
        };
        let len = usize::try_from(layout.file_len()).map_err(|_| too_large())?;
        let mut file = Vec::new();
        file.try_reserve_exact(len).map_err(|_| too_large())?;
        file.extend_from_slice(layout.header());
        file.resize(len, 0);
        let slots = SlotMap::new(&layout);
        let placed = Placed {
            file: Mutex::new(file),
            layout: &layout,
            slots: &slots,
            written: layout.slots().map(|_| Mutex::default()).collect(),
        };
        self.run(&placed, |i| slots.rank(i), &())?;
        for (slot, written) in layout.slots().zip(&placed.written) {
            let filled = lock(written).total();
            if filled != slot.byte_len() {
                return Err(Error::from(WriteError::TooShort {
                    tensor: slot.name().to_string(),
                    expected: slot.byte_len(),
                    received: filled,
                })
                .into());
            }
        }
        Ok(placed
            .file
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

fn plan_error(problem: String) -> Error {
    Error::Stream(std::io::Error::other(format!("invalid plan: {problem}")))
}

/// Locks a mutex whose data stays consistent even if a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Copies `input`'s bytes into output `out` in pieces.
pub(crate) fn copy_into<E: From<Error>, T: TensorData<E> + ?Sized>(
    input: &T,
    out: usize,
    sink: &dyn Sink<E>,
) -> Result<(), E> {
    if let Some(all) = input.bytes() {
        // Large borrowed tensors go in pieces so progress advances smoothly.
        for (k, piece) in all.chunks(PIECE).enumerate() {
            sink.write(out, (k * PIECE) as u64, piece)?;
        }
        return Ok(());
    }
    input.produce(&mut |offset, piece| sink.write(out, offset, piece))
}

/// A sink that reports the bytes going through it.
struct Counted<'s, E> {
    sink: &'s dyn Sink<E>,
    progress: &'s dyn Progress,
}

impl<E> Sink<E> for Counted<'_, E> {
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<(), E> {
        self.sink.write(tensor, offset, bytes)?;
        self.progress.advance(bytes.len() as u64);
        Ok(())
    }

    fn copy_file(
        &self,
        tensor: usize,
        offset: u64,
        source: &crate::source::FileSource,
        at: u64,
        len: u64,
    ) -> Result<(), E>
    where
        E: From<Error>,
    {
        self.sink.copy_file(tensor, offset, source, at, len)?;
        self.progress.advance(len);
        Ok(())
    }
}

/// Maps a plan's tensor indices (declaration order) to a layout's slots
/// (file order).
pub(crate) struct SlotMap(Vec<usize>);

impl SlotMap {
    pub(crate) fn new(layout: &Layout) -> SlotMap {
        let mut of = vec![usize::MAX; layout.len()];
        for (index, slot) in layout.slots().enumerate() {
            if let Some(o) = of.get_mut(slot.declared()) {
                *o = index;
            }
        }
        SlotMap(of)
    }

    /// The slot of declared tensor `tensor`, if there is one.
    pub(crate) fn slot(&self, tensor: usize) -> Option<usize> {
        self.0.get(tensor).copied().filter(|&s| s != usize::MAX)
    }

    /// File order of a declared tensor, for [`Plan::run`].
    pub(crate) fn rank(&self, tensor: usize) -> u64 {
        self.slot(tensor).map_or(u64::MAX, |s| s as u64)
    }
}

/// A tensor's buffer being filled, with the ranges written so far.
struct Filled {
    data: Vec<u8>,
    written: Ranges,
}

impl Filled {
    fn new(spec: &TensorSpec) -> Result<Filled> {
        let len = spec.byte_len()?;
        let too_large = || WriteError::DataTooLarge {
            tensor: spec.name.clone(),
        };
        let len = usize::try_from(len).map_err(|_| too_large())?;
        let mut data = Vec::new();
        data.try_reserve_exact(len).map_err(|_| too_large())?;
        data.resize(len, 0);
        Ok(Filled {
            data,
            written: Ranges::default(),
        })
    }

    fn put(&mut self, name: &str, offset: u64, bytes: &[u8]) -> Result<()> {
        let len = self.data.len() as u64;
        let end = offset.checked_add(bytes.len() as u64).filter(|&e| e <= len);
        let Some(end) = end else {
            return Err(WriteError::TooLong {
                tensor: name.to_string(),
                expected: len,
                received: offset.saturating_add(bytes.len() as u64),
            }
            .into());
        };
        if bytes.is_empty() {
            return Ok(());
        }
        self.written
            .insert(offset, end)
            .map_err(|written| WriteError::Overlap {
                tensor: name.to_string(),
                range: (offset, end),
                written,
            })?;
        self.data[offset as usize..end as usize].copy_from_slice(bytes);
        Ok(())
    }

    fn check(&self, name: &str) -> Result<()> {
        let filled = self.written.total();
        if filled != self.data.len() as u64 {
            return Err(WriteError::TooShort {
                tensor: name.to_string(),
                expected: self.data.len() as u64,
                received: filled,
            }
            .into());
        }
        Ok(())
    }
}

/// One buffer per tensor ([`Plan::into_tensors`]).
struct Buffers<'b>(&'b [Mutex<Filled>]);

impl<E: From<Error>> Sink<E> for Buffers<'_> {
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<(), E> {
        let buffer = self.0.get(tensor).ok_or(Error::from(WriteError::Trailing {
            extra: bytes.len() as u64,
        }))?;
        // The name only matters for errors; a placeholder avoids holding it.
        Ok(lock(buffer).put(&format!("#{tensor}"), offset, bytes)?)
    }
}

/// The whole file in one buffer ([`Plan::to_bytes`]).
struct Placed<'l> {
    file: Mutex<Vec<u8>>,
    layout: &'l Layout,
    slots: &'l SlotMap,
    written: Vec<Mutex<Ranges>>,
}

impl<E: From<Error>> Sink<E> for Placed<'_> {
    fn write(&self, tensor: usize, offset: u64, bytes: &[u8]) -> Result<(), E> {
        let index = self
            .slots
            .slot(tensor)
            .ok_or(Error::from(WriteError::Trailing {
                extra: bytes.len() as u64,
            }))?;
        let at = claim(self.layout, &self.written, index, offset, bytes.len())?;
        let Some(at) = at else { return Ok(()) };
        let at = at as usize;
        lock(&self.file)[at..at + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
}

/// Claims `len` bytes at `offset` of the tensor in slot `index` of
/// `layout`, in `written`: returns the absolute file offset to write at
/// (`None` for an empty piece), or the error when the range is outside the
/// tensor or overlaps bytes already claimed.
pub(crate) fn claim(
    layout: &Layout,
    written: &[Mutex<Ranges>],
    index: usize,
    offset: u64,
    len: usize,
) -> Result<Option<u64>> {
    let slot = layout
        .slot(index)
        .ok_or(WriteError::Trailing { extra: len as u64 })?;
    let len = len as u64;
    let end = offset
        .checked_add(len)
        .filter(|&end| end <= slot.byte_len());
    let Some(end) = end else {
        return Err(WriteError::TooLong {
            tensor: slot.name().to_string(),
            expected: slot.byte_len(),
            received: offset.saturating_add(len),
        }
        .into());
    };
    if len == 0 {
        return Ok(None);
    }
    let claimed = written
        .get(index)
        .map(|w| lock(w).insert(offset, end))
        .ok_or(WriteError::Trailing { extra: len })?;
    if let Err(written) = claimed {
        return Err(WriteError::Overlap {
            tensor: slot.name().to_string(),
            range: (offset, end),
            written,
        }
        .into());
    }
    Ok(Some(
        8 + layout.header_len() + slot.data_offsets().0 + offset,
    ))
}

/// Disjoint, sorted, non-adjacent half-open byte ranges. Pieces written in
/// order merge into one range, so this stays a few entries long.
#[derive(Debug, Default)]
pub(crate) struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    /// Adds `start..end` (not empty), or returns the range of an existing
    /// entry it overlaps.
    pub(crate) fn insert(&mut self, start: u64, end: u64) -> std::result::Result<(), (u64, u64)> {
        let ranges = &mut self.0;
        // Ranges before `at` start before `start`; the one at `at` does not.
        let at = ranges.partition_point(|&(s, _)| s < start);
        let before = at.checked_sub(1).map(|i| (i, ranges[i]));
        let next = ranges.get(at).copied();
        if let Some((_, (s, e))) = before.filter(|&(_, (_, e))| e > start) {
            return Err((s, e));
        }
        if let Some((s, e)) = next.filter(|&(s, _)| s < end) {
            return Err((s, e));
        }
        let joins_before = before.filter(|&(_, (_, e))| e == start).map(|(i, _)| i);
        let joins_next = next.is_some_and(|(s, _)| s == end);
        match (joins_before, joins_next) {
            (Some(i), true) => {
                ranges[i].1 = ranges[at].1;
                ranges.remove(at);
            }
            (Some(i), false) => ranges[i].1 = end,
            (None, true) => ranges[at].0 = start,
            (None, false) => ranges.insert(at, (start, end)),
        }
        Ok(())
    }

    /// Bytes written, the ranges being disjoint.
    pub(crate) fn total(&self) -> u64 {
        self.0.iter().map(|&(s, e)| e - s).sum()
    }
}

/// Bytes made so far, for progress callbacks shared between threads.
#[derive(Debug, Default)]
pub struct ByteCounter(AtomicU64);

impl ByteCounter {
    /// Adds `n` bytes; returns the new total.
    pub fn add(&self, n: u64) -> u64 {
        self.0.fetch_add(n, Ordering::Relaxed) + n
    }

    /// The total so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dtype, TensorRef};

    #[test]
    fn ranges_accept_disjoint_pieces_in_any_order_and_refuse_overlaps() {
        // Against a model of 64 bytes, each written or not, over many
        // pseudo-random pieces: a piece is accepted exactly when none of
        // its bytes is written, the entries stay sorted, disjoint and
        // merged, and the total is the count of written bytes.
        let mut rng = tensorfile_testkit::Rng::new(0x2545_F491_4F6C_DD1D);
        let mut next = |n: u64| rng.next_u64() % n;
        for _ in 0..2000 {
            let mut ranges = Ranges::default();
            let mut model = [false; 64];
            for _ in 0..24 {
                let start = next(64);
                let end = start + 1 + next(8.min(64 - start));
                let span = start as usize..end as usize;
                let free = model[span.clone()].iter().all(|w| !w);
                match ranges.insert(start, end) {
                    Ok(()) => {
                        assert!(free, "{start}..{end} accepted over {ranges:?}");
                        model[span].fill(true);
                    }
                    Err((s, e)) => {
                        assert!(!free, "{start}..{end} refused, {ranges:?}");
                        assert!(s < end && e > start, "{s}..{e} does not overlap");
                    }
                }
                let ends: Vec<u64> = ranges.0.iter().flat_map(|&(s, e)| [s, e]).collect();
                assert!(ends.windows(2).all(|w| w[0] < w[1]), "{ranges:?}");
                assert_eq!(ranges.total(), model.iter().filter(|&&w| w).count() as u64);
            }
        }
    }

    #[test]
    fn a_plan_gives_the_same_bytes_as_serialize_and_checks_its_jobs() {
        let a = [1u8, 2, 3, 4];
        let b: Vec<u8> = (0..64u8).collect();
        let ta = TensorRef {
            name: "a",
            dtype: Dtype::U8,
            shape: &[4],
            data: &a,
        };
        let tb = TensorRef {
            name: "b",
            dtype: Dtype::F32,
            shape: &[4, 4],
            data: &b,
        };
        let mut plan = Plan::new(None);
        plan.copy(&tb);
        plan.copy(&ta);
        let bytes = plan.to_bytes(&WriteOptions::default()).unwrap();
        assert_eq!(bytes, crate::serialize([ta, tb], None).unwrap());

        // A tensor no job makes; a job that makes an undeclared one.
        let mut plan = Plan::new(None);
        plan.declare(TensorSpec::new("x", Dtype::U8, [1]));
        assert!(plan.into_tensors().is_err());
        let mut plan = Plan::new(None);
        plan.copy(&ta);
        plan.push(vec![7], |_: &dyn Sink| Ok::<(), Error>(()));
        assert!(plan.into_tensors().is_err());

        // A job that leaves its tensor short, or writes a byte twice.
        let mut plan = Plan::new(None);
        let x = plan.declare(TensorSpec::new("x", Dtype::U8, [2]));
        plan.push(vec![x], move |s: &dyn Sink| s.write(x, 0, &[1]));
        assert!(matches!(
            plan.into_tensors(),
            Err(Error::Write(WriteError::TooShort { .. }))
        ));
        let mut plan = Plan::new(None);
        let x = plan.declare(TensorSpec::new("x", Dtype::U8, [2]));
        plan.push(vec![x], move |s: &dyn Sink| {
            s.write(x, 0, &[1, 2])?;
            s.write(x, 1, &[3])
        });
        assert!(matches!(
            plan.to_bytes(&WriteOptions::default()),
            Err(Error::Write(WriteError::Overlap { .. }))
        ));
    }

    /// The error of a layer above the core, for plans typed by it.
    #[derive(Debug)]
    enum Upper {
        Core(Error),
        Refused(&'static str),
    }

    impl From<Error> for Upper {
        fn from(e: Error) -> Upper {
            Upper::Core(e)
        }
    }

    #[test]
    fn a_typed_plan_returns_its_jobs_errors_as_they_are() {
        let data = [5u8];
        let t = TensorRef {
            name: "t",
            dtype: Dtype::U8,
            shape: &[1],
            data: &data,
        };
        let mut plan: Plan<'_, Upper> = Plan::with_error(None);
        plan.copy(&t);
        let x = plan.declare(TensorSpec::new("x", Dtype::U8, [1]));
        plan.push(vec![x], |_: &dyn Sink<Upper>| {
            Err::<(), _>(Upper::Refused("no"))
        });
        assert!(matches!(
            plan.to_bytes(&WriteOptions::default()),
            Err(Upper::Refused("no"))
        ));
        assert!(matches!(plan.into_tensors(), Err(Upper::Refused("no"))));

        // The plan's own checks and the sink's refusals are core errors,
        // converted.
        let mut plan: Plan<'_, Upper> = Plan::with_error(None);
        plan.declare(TensorSpec::new("y", Dtype::U8, [1]));
        assert!(matches!(plan.into_tensors(), Err(Upper::Core(_))));
        let mut plan: Plan<'_, Upper> = Plan::with_error(None);
        let y = plan.declare(TensorSpec::new("y", Dtype::U8, [1]));
        plan.push(vec![y], move |s: &dyn Sink<Upper>| s.write(y, 0, &[1, 2]));
        assert!(matches!(
            plan.into_tensors(),
            Err(Upper::Core(Error::Write(WriteError::TooLong { .. })))
        ));
        let mut plan: Plan<'_, Upper> = Plan::with_error(None);
        plan.copy(&t);
        assert_eq!(plan.into_tensors().unwrap()[0].data, [5]);
    }
}
