//! What a loaded checkpoint reads tensors from: its byte source, its
//! storages (where each one's bytes are) and the inflated spans of its
//! deflated storages while they are held.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tensorfile_core::source::ByteSource;
use tensorfile_core::Dtype;

use crate::dtypes::TorchDtype;
use crate::error::{Error, Result};
use tensorfile_zip::{Entry, ZipError};

/// Where a storage's bytes are.
#[derive(Debug)]
pub(crate) enum Location {
    /// In place in the input, at these byte offsets.
    Range(Range<u64>),
    /// A deflated zip record, inflated once while held.
    Deflated(Box<Deflated>),
}

/// A deflated storage record and what its tensors need of it.
#[derive(Debug)]
pub(crate) struct Deflated {
    pub entry: Entry,
    /// The byte spans of the storage that its tensors view: sorted,
    /// disjoint, not touching.
    pub spans: Vec<Range<u64>>,
    /// The inflated spans, while held.
    pub held: Mutex<Option<Arc<Inflated>>>,
}

/// The inflated spans of one deflated storage, shared by its views. Its
/// bytes are counted as held until it is dropped.
#[derive(Debug)]
pub(crate) struct Inflated {
    /// `(start, bytes)`, one per span, in order.
    pub segments: Vec<(u64, Vec<u8>)>,
    bytes: u64,
    counters: Arc<InflateCounters>,
}

impl Drop for Inflated {
    fn drop(&mut self) {
        self.counters.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl Inflated {
    /// The segment holding the byte span `span` of the storage: its index
    /// and its start.
    pub fn segment(&self, span: &Range<u64>) -> Option<(usize, u64)> {
        let i = self
            .segments
            .partition_point(|(start, _)| *start <= span.start)
            .checked_sub(1)?;
        let (start, bytes) = &self.segments[i];
        (span.end <= start.checked_add(bytes.len() as u64)?).then_some((i, *start))
    }
}

/// What deflated storages cost, for [`InflateStats`].
#[derive(Debug, Default)]
pub(crate) struct InflateCounters {
    held: AtomicU64,
    peak: AtomicU64,
    inflated: AtomicU64,
    passes: AtomicU64,
}

/// What the deflated storages of a checkpoint have cost so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflateStats {
    /// Inflation passes made: one per deflated storage read (again after
    /// each [`Checkpoint::release_storage`](crate::Checkpoint::release_storage)).
    pub passes: u64,
    /// Bytes inflated in all (each pass inflates up to the furthest byte
    /// its storage's tensors view).
    pub inflated: u64,
    /// Bytes of spans held now, counted against
    /// [`LoadOptions::max_inflated_bytes`](crate::LoadOptions::max_inflated_bytes).
    pub held: u64,
    /// The most bytes of spans held at once.
    pub peak: u64,
}

/// One storage.
#[derive(Debug)]
pub(crate) struct Storage {
    pub key: String,
    pub dtype: TorchDtype,
    pub location: Location,
}

/// One tensor name and its view.
#[derive(Debug)]
pub(crate) struct TensorInfo {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
    pub offset: u64,
    pub storage: usize,
    /// Index of the rebuilt object: names that share it are the same tensor.
    pub spec: usize,
    /// Where the name comes in the saved object's tree, walked in pickle
    /// order (a state dict's insertion order).
    pub order: usize,
}

/// The source and storages tensors are read from.
pub(crate) struct Store {
    pub source: Box<dyn ByteSource>,
    /// The file (or a label) that names the source in errors.
    pub origin: PathBuf,
    pub big_endian: bool,
    pub storages: Vec<Storage>,
    pub max_inflated: u64,
    pub counters: Arc<InflateCounters>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("origin", &self.origin)
            .field("len", &self.source.len())
            .field("storages", &self.storages.len())
            .finish_non_exhaustive()
    }
}

/// An I/O error of the source, naming it.
pub(crate) fn io_error(origin: &Path, e: std::io::Error) -> Error {
    Error::Io {
        path: origin.to_path_buf(),
        source: e,
    }
}

/// A zip error; a read error of the source becomes an I/O error naming it.
pub(crate) fn zip_error(origin: &Path, e: ZipError) -> Error {
    match e.io_error() {
        Some(io) => io_error(origin, io),
        None => Error::Zip(e),
    }
}

impl Store {
    /// Reads `buf.len()` bytes at `offset` of the source.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.source
            .read_exact_at(offset, buf)
            .map_err(|e| io_error(&self.origin, e))
    }

    /// What the deflated storages have cost so far.
    pub fn inflate_stats(&self) -> InflateStats {
        let c = &self.counters;
        InflateStats {
            passes: c.passes.load(Ordering::Relaxed),
            inflated: c.inflated.load(Ordering::Relaxed),
            held: c.held.load(Ordering::Relaxed),
            peak: c.peak.load(Ordering::Relaxed),
        }
    }

    /// Drops the held inflated spans of storage `index`, if deflated.
    pub fn release(&self, index: usize) {
        if let Some(Storage {
            location: Location::Deflated(d),
            ..
        }) = self.storages.get(index)
        {
            d.held.lock().unwrap_or_else(PoisonError::into_inner).take();
        }
    }

    /// The inflated spans of deflated storage `index`: held ones, or
    /// inflated now in one pass streamed from the source (other readers of
    /// the same storage wait for it), counted against the budget before
    /// they are allocated.
    pub fn inflated(&self, index: usize) -> Result<Arc<Inflated>> {
        let s = &self.storages[index];
        let Location::Deflated(d) = &s.location else {
            return Err(Error::Storage {
                key: s.key.clone(),
                problem: "is not deflated".into(),
            });
        };
        let mut held = d.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = &*held {
            return Ok(Arc::clone(i));
        }
        let need = d.spans.iter().map(|r| r.end - r.start).sum::<u64>();
        let c = &self.counters;
        if let Err(now) = c
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                h.checked_add(need).filter(|&n| n <= self.max_inflated)
            })
        {
            return Err(Error::Budget {
                budget: "max_inflated_bytes",
                limit: self.max_inflated,
                needed: now.saturating_add(need),
                context: format!(
                    "deflated storage {:?}: the bytes its tensors view, inflated, beside the {now} B held",
                    s.key
                ),
            });
        }
        // From here the bytes are counted as held; dropping `inflated` on
        // any error below gives them back.
        let mut inflated = Inflated {
            segments: Vec::new(),
            bytes: need,
            counters: Arc::clone(c),
        };
        c.peak
            .fetch_max(c.held.load(Ordering::Relaxed), Ordering::Relaxed);
        let no_memory = |n: u64| Error::Storage {
            key: s.key.clone(),
            problem: format!("cannot allocate {n} bytes to inflate it"),
        };
        inflated
            .segments
            .try_reserve_exact(d.spans.len())
            .map_err(|_| no_memory(need))?;
        for r in &d.spans {
            let len = r.end - r.start;
            let mut v = Vec::new();
            v.try_reserve_exact(usize::try_from(len).map_err(|_| no_memory(len))?)
                .map_err(|_| no_memory(len))?;
            inflated.segments.push((r.start, v));
        }
        let end = d.spans.last().map_or(0, |r| r.end);
        let mut next = 0usize;
        d.entry
            .inflate_prefix(&*self.source, end, |pos, piece| {
                let piece_end = pos + piece.len() as u64;
                // Spans before `next` are complete; copy into those this
                // piece reaches.
                let mut i = next;
                while let Some(r) = d.spans.get(i) {
                    if r.start >= piece_end {
                        break;
                    }
                    let from = r.start.max(pos);
                    let to = r.end.min(piece_end);
                    if from < to {
                        let bytes = &piece[(from - pos) as usize..(to - pos) as usize];
                        inflated.segments[i].1.extend_from_slice(bytes);
                    }
                    if r.end <= piece_end {
                        next = i + 1;
                    }
                    i += 1;
                }
            })
            .map_err(|e| zip_error(&self.origin, e))?;
        c.passes.fetch_add(1, Ordering::Relaxed);
        c.inflated.fetch_add(end, Ordering::Relaxed);
        let inflated = Arc::new(inflated);
        *held = Some(Arc::clone(&inflated));
        Ok(inflated)
    }
}

/// The byte span of its storage that a view reads: from its first element
/// (strides are non-negative) to the end of its last. `None` when it has
/// no elements (or on overflow, which validated views never reach).
pub(crate) fn view_span(
    offset: u64,
    shape: &[u64],
    strides: &[u64],
    elem: u64,
) -> Option<Range<u64>> {
    if tensorfile_core::dtype::numel(shape)? == 0 {
        return None;
    }
    let mut last = offset;
    for (&d, &st) in shape.iter().zip(strides) {
        last = last.checked_add((d - 1).checked_mul(st)?)?;
    }
    Some(offset.checked_mul(elem)?..last.checked_add(1)?.checked_mul(elem)?)
}
