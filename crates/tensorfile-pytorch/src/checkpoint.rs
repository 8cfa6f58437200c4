//! A loaded checkpoint: container detection, storages, and tensors by name.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use memmap2::Mmap;
use tensorfile::Dtype;

use crate::dtypes::TorchDtype;
use crate::error::{Error, Result};
use crate::flatten::{flatten, WalkLimits};
use crate::legacy::Legacy;
use crate::pickle::{Limits, Pickle};
use crate::rebuild::Rebuilder;
use crate::view::{byteswap, View};
use crate::zip::{Entry, ZipIndex};

/// Options for loading a checkpoint.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Keep only the subtree at this path (`model`, `model.encoder`), with
    /// names relative to it.
    pub key: Option<String>,
    /// The name of a bare top-level tensor (otherwise `""`).
    pub name: Option<String>,
    /// Limits on the pickle interpreter.
    pub limits: Limits,
    /// Limits on flattening the object tree into names.
    pub walk: WalkLimits,
    /// Largest tensor, in bytes, that a view may materialize beyond the
    /// size of its storage (stride-0 expansions): 1 GiB by default, so a
    /// tiny hostile file cannot demand a huge buffer. Exceeding it is
    /// [`Error::Budget`] naming `max_expanded_bytes`.
    pub max_expanded_bytes: u64,
    /// Most bytes of expanded tensors in all: the sum, over every tensor
    /// name, of the byte length of each view that is larger than its
    /// storage (the bytes converting or `fs_load_pytorch` would make that
    /// the file does not hold). Checked at load with checked arithmetic, so
    /// that `convert` refuses before writing anything; exceeding it is
    /// [`Error::Budget`] naming `max_expanded_total_bytes`. 1 GiB by
    /// default (what one expanded tensor may reach); a total exactly at the
    /// budget is accepted.
    pub max_expanded_total_bytes: u64,
    /// Most bytes of deflated storage records held inflated at once.
    ///
    /// A deflated record is inflated at most once while it is held: the
    /// first read of any tensor of it inflates, in one pass, the byte spans
    /// that all the checkpoint's tensors of that storage view (merged;
    /// nothing past the furthest byte any of them needs is inflated, and
    /// bytes between spans are inflated but not kept). Every view of the
    /// storage then reads from those spans, until
    /// [`Checkpoint::release_storage`] or the checkpoint is dropped
    /// (converting releases each storage after its last tensor is
    /// written). The spans are counted before they are allocated; going
    /// over is [`Error::Budget`] naming `max_inflated_bytes`. 4 GiB by
    /// default.
    pub max_inflated_bytes: u64,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions {
            key: None,
            name: None,
            limits: Limits::default(),
            walk: WalkLimits::default(),
            max_expanded_bytes: 1 << 30,
            max_expanded_total_bytes: 1 << 30,
            max_inflated_bytes: 4 << 30,
        }
    }
}

/// Which container the checkpoint came in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// The zip format (`torch.save` since 1.6), with its top-level directory.
    Zip {
        /// The single top-level directory, such as `archive`.
        prefix: String,
    },
    /// The legacy format (five pickles, then raw storages).
    Legacy,
}

/// The input bytes: a read-only memory map, or an owned buffer.
enum Source {
    Mmap(Mmap),
    Owned(Vec<u8>),
}

impl Source {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Mmap(m) => m,
            Source::Owned(v) => v,
        }
    }
}

/// Where a storage's bytes are.
#[derive(Debug)]
enum Location {
    /// In place in the input.
    Range(std::ops::Range<usize>),
    /// A deflated zip entry, inflated once while held.
    Deflated(Box<Deflated>),
}

/// A deflated storage record and what its tensors need of it.
#[derive(Debug)]
struct Deflated {
    entry: Entry,
    /// The byte spans of the storage that its tensors view: sorted,
    /// disjoint, not touching.
    spans: Vec<Range<u64>>,
    /// The inflated spans, while held.
    held: Mutex<Option<Arc<Inflated>>>,
}

/// The inflated spans of one deflated storage, shared by its views. Its
/// bytes are counted as held until it is dropped.
#[derive(Debug)]
pub(crate) struct Inflated {
    /// `(start, bytes)`, one per span, in order.
    segments: Vec<(u64, Vec<u8>)>,
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
    fn segment(&self, span: &Range<u64>) -> Option<(usize, u64)> {
        let i = self
            .segments
            .partition_point(|(start, _)| *start <= span.start)
            .checked_sub(1)?;
        let (start, bytes) = &self.segments[i];
        (span.end <= start.checked_add(bytes.len() as u64)?).then_some((i, *start))
    }
}

/// What deflated storages cost, for [`Checkpoint::inflate_stats`].
#[derive(Debug, Default)]
struct InflateCounters {
    held: AtomicU64,
    peak: AtomicU64,
    inflated: AtomicU64,
    passes: AtomicU64,
}

/// What the deflated storages of a checkpoint have cost so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflateStats {
    /// Inflation passes made: one per deflated storage read (again after
    /// each [`Checkpoint::release_storage`]).
    pub passes: u64,
    /// Bytes inflated in all (each pass inflates up to the furthest byte
    /// its storage's tensors view).
    pub inflated: u64,
    /// Bytes of spans held now, counted against
    /// [`LoadOptions::max_inflated_bytes`].
    pub held: u64,
    /// The most bytes of spans held at once.
    pub peak: u64,
}

#[derive(Debug)]
struct Storage {
    key: String,
    dtype: TorchDtype,
    location: Location,
}

#[derive(Debug)]
struct TensorInfo {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    strides: Vec<u64>,
    offset: u64,
    storage: usize,
    /// Index of the rebuilt object: names that share it are the same tensor.
    spec: usize,
}

/// A PyTorch checkpoint, memory-mapped, with its tensors indexed by name.
///
/// Nothing in the file is executed: the pickles are interpreted by a
/// restricted machine that only builds values ([`crate::pickle`]).
///
/// ```no_run
/// use tensorfile_pytorch::Checkpoint;
/// let ckpt = Checkpoint::open("model.pth")?;
/// for t in ckpt.tensors() {
///     println!("{} {} {:?} {} bytes", t.name(), t.dtype(), t.shape(), t.bytes()?.len());
/// }
/// # Ok::<(), tensorfile_pytorch::Error>(())
/// ```
pub struct Checkpoint {
    source: Source,
    /// The file behind the map, for streaming stored bytes with plain reads.
    file: Option<File>,
    format: Format,
    big_endian: bool,
    storages: Vec<Storage>,
    tensors: Vec<TensorInfo>,
    values: Vec<(String, String)>,
    max_inflated: u64,
    counters: Arc<InflateCounters>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("format", &self.format)
            .field("big_endian", &self.big_endian)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

impl Checkpoint {
    /// Memory-maps and loads a checkpoint with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        Checkpoint::open_with(path, &LoadOptions::default())
    }

    /// Memory-maps and loads a checkpoint.
    pub fn open_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Checkpoint> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the map is read-only and private to this struct. Like every
        // reader of memory-mapped files, we rely on the file not being
        // truncated or modified by another process while it is mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        let mut ckpt = Checkpoint::load(Source::Mmap(map), options)?;
        ckpt.file = Some(file);
        Ok(ckpt)
    }

    /// Loads a checkpoint held in memory.
    pub fn from_bytes(bytes: Vec<u8>, options: &LoadOptions) -> Result<Checkpoint> {
        Checkpoint::load(Source::Owned(bytes), options)
    }

    fn load(source: Source, options: &LoadOptions) -> Result<Checkpoint> {
        let data = source.bytes();
        let parts = match detect(data)? {
            Kind::Zip => load_zip(data, options)?,
            Kind::Legacy => load_legacy(data, options)?,
        };
        Ok(Checkpoint {
            source,
            file: None,
            format: parts.format,
            big_endian: parts.big_endian,
            storages: parts.storages,
            tensors: parts.tensors,
            values: parts.values,
            max_inflated: options.max_inflated_bytes,
            counters: Arc::default(),
        })
    }

    /// The container format.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// Whether the storages were written big-endian (they are byte-swapped
    /// on read).
    pub fn is_big_endian(&self) -> bool {
        self.big_endian
    }

    /// The tensors, sorted by name (byte order).
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TorchTensor<'_>> + '_ {
        self.tensors
            .iter()
            .map(move |info| TorchTensor { ckpt: self, info })
    }

    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<TorchTensor<'_>> {
        self.tensors
            .binary_search_by(|t| t.name.as_bytes().cmp(name.as_bytes()))
            .ok()
            .map(|i| TorchTensor {
                ckpt: self,
                info: &self.tensors[i],
            })
    }

    /// The tensor at `index` in [`Checkpoint::tensors`] order.
    pub fn tensor_at(&self, index: usize) -> Option<TorchTensor<'_>> {
        self.tensors
            .get(index)
            .map(|info| TorchTensor { ckpt: self, info })
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Non-tensor leaves (numbers, strings, `None`, ...) rendered as text,
    /// with their flattened names, in tree order.
    pub fn values(&self) -> &[(String, String)] {
        &self.values
    }

    /// What the deflated storages have cost so far: passes, bytes
    /// inflated, bytes held.
    pub fn inflate_stats(&self) -> InflateStats {
        let c = &self.counters;
        InflateStats {
            passes: c.passes.load(Ordering::Relaxed),
            inflated: c.inflated.load(Ordering::Relaxed),
            held: c.held.load(Ordering::Relaxed),
            peak: c.peak.load(Ordering::Relaxed),
        }
    }

    /// Stops holding the inflated bytes of the storage with this
    /// [`TorchTensor::storage_index`] (a deflated record): they are freed
    /// once no [`TensorData`] uses them, and a later read inflates the
    /// record again. Does nothing for other storages.
    pub fn release_storage(&self, storage: usize) {
        if let Some(Storage {
            location: Location::Deflated(d),
            ..
        }) = self.storages.get(storage)
        {
            d.held.lock().unwrap_or_else(PoisonError::into_inner).take();
        }
    }

    /// The inflated spans of deflated storage `index`: held ones, or
    /// inflated now in one pass (other readers of the same storage wait
    /// for it), counted against the budget before they are allocated.
    fn inflated(&self, index: usize) -> Result<Arc<Inflated>> {
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
            .inflate_prefix(self.source.bytes(), end, |pos, piece| {
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
            })?;
        c.passes.fetch_add(1, Ordering::Relaxed);
        c.inflated.fetch_add(end, Ordering::Relaxed);
        let inflated = Arc::new(inflated);
        *held = Some(Arc::clone(&inflated));
        Ok(inflated)
    }
}

/// One tensor of a [`Checkpoint`].
#[derive(Clone, Copy)]
pub struct TorchTensor<'a> {
    ckpt: &'a Checkpoint,
    info: &'a TensorInfo,
}

impl std::fmt::Debug for TorchTensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchTensor")
            .field("name", &self.info.name)
            .field("dtype", &self.info.dtype)
            .field("shape", &self.info.shape)
            .field("strides", &self.info.strides)
            .field("offset", &self.info.offset)
            .field("storage", &self.storage_key())
            .finish()
    }
}

/// What makes two names exact aliases: same storage, offset, shape,
/// strides and dtype.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ViewKey {
    /// Storage index.
    pub storage: usize,
    /// Storage offset, in elements.
    pub offset: u64,
    /// Shape.
    pub shape: Vec<u64>,
    /// Strides, in elements.
    pub strides: Vec<u64>,
    /// Element type.
    pub dtype: Dtype,
}

impl<'a> TorchTensor<'a> {
    /// The flattened name (`model.layers.0.weight`; `""` for a bare tensor).
    pub fn name(&self) -> &'a str {
        &self.info.name
    }

    /// The safetensors dtype.
    pub fn dtype(&self) -> Dtype {
        self.info.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &'a [u64] {
        &self.info.shape
    }

    /// The strides in the checkpoint, in elements.
    pub fn strides(&self) -> &'a [u64] {
        &self.info.strides
    }

    /// The storage offset in the checkpoint, in elements.
    pub fn storage_offset(&self) -> u64 {
        self.info.offset
    }

    /// The key of the storage the tensor views.
    pub fn storage_key(&self) -> &'a str {
        &self.ckpt.storages[self.info.storage].key
    }

    /// An index identifying the storage within this checkpoint: tensors
    /// with the same index share memory in torch.
    pub fn storage_index(&self) -> usize {
        self.info.storage
    }

    /// The identity of the view, for finding exact aliases.
    pub fn view_key(&self) -> ViewKey {
        ViewKey {
            storage: self.info.storage,
            offset: self.info.offset,
            shape: self.info.shape.clone(),
            strides: self.info.strides.clone(),
            dtype: self.info.dtype,
        }
    }

    /// Whether this name refers to the very same object as another name
    /// (the pickle stored it once and referenced it twice).
    pub fn object_index(&self) -> usize {
        self.info.spec
    }

    /// Byte length of the C-order bytes.
    pub fn nbytes(&self) -> u64 {
        // Checked when the view was validated.
        let numel = tensorfile::dtype::numel(&self.info.shape).unwrap_or(0);
        self.info.dtype.byte_len(numel).unwrap_or(0)
    }

    /// Whether the view is a dense C-order block of its storage.
    pub fn is_contiguous(&self) -> bool {
        self.view().is_contiguous()
    }

    /// Whether [`TorchTensor::bytes`] can borrow from the file (a contiguous
    /// view of a stored, little-endian storage).
    pub fn is_zero_copy(&self) -> bool {
        let s = &self.ckpt.storages[self.info.storage];
        self.view().is_contiguous()
            && matches!(s.location, Location::Range(_))
            && (!self.ckpt.big_endian || s.dtype.swap_unit() == 1)
    }

    fn view(&self) -> View<'a> {
        View {
            offset: self.info.offset,
            shape: &self.info.shape,
            strides: &self.info.strides,
            elem: self.ckpt.storages[self.info.storage].dtype.element_size(),
        }
    }

    /// Where the tensor's bytes lie, as they are, in the input: `(offset,
    /// length)` when [`TorchTensor::is_zero_copy`].
    pub fn file_range(&self) -> Option<(u64, u64)> {
        let s = &self.ckpt.storages[self.info.storage];
        match &s.location {
            Location::Range(r) if self.is_zero_copy() => {
                let start = (r.start as u64)
                    .checked_add(self.info.offset.checked_mul(s.dtype.element_size())?)?;
                Some((start, self.nbytes()))
            }
            _ => None,
        }
    }

    /// A reader of the tensor's bytes straight from the input file, when
    /// they lie there as they are and the checkpoint was opened from a path.
    /// Copying large tensors with plain reads is faster than faulting in the
    /// memory map page by page. The reader uses positional reads on the
    /// checkpoint's file, so several may be used at once from several threads.
    pub fn reader(&self) -> Result<Option<StoredReader<'a>>> {
        let (Some(file), Some((offset, len))) = (&self.ckpt.file, self.file_range()) else {
            return Ok(None);
        };
        let end = offset.checked_add(len).ok_or_else(|| Error::Tensor {
            name: self.info.name.clone(),
            reason: "its bytes end past 2^64".into(),
        })?;
        Ok(Some(StoredReader {
            file,
            pos: offset,
            end,
        }))
    }

    /// The byte span of the storage the view reads (`None` when it has no
    /// elements). The view was checked to fit in its storage.
    fn span(&self) -> Option<Range<u64>> {
        view_span(
            self.info,
            self.ckpt.storages[self.info.storage].dtype.element_size(),
        )
    }

    /// The tensor's bytes in C order, little-endian: borrowed from the
    /// memory map when possible, otherwise gathered (views with gaps,
    /// transposes, expansions), inflated or byte-swapped into a buffer.
    ///
    /// A deflated storage is inflated once for all its views and held (see
    /// [`LoadOptions::max_inflated_bytes`]); this copies the view out of
    /// it. [`TorchTensor::data`] shares it instead.
    pub fn bytes(&self) -> Result<Cow<'a, [u8]>> {
        Ok(self.data()?.into_cow())
    }

    /// The tensor's bytes like [`TorchTensor::bytes`], but a contiguous
    /// view of a deflated storage shares the storage's inflated bytes
    /// (which stay allocated while this value lives) instead of copying.
    pub fn data(&self) -> Result<TensorData<'a>> {
        let s = &self.ckpt.storages[self.info.storage];
        let bad = |reason: String| Error::Tensor {
            name: self.info.name.clone(),
            reason,
        };
        let mut data = match self.window()? {
            Window::Input(storage) => match self.view().gather(storage).map_err(bad)? {
                Cow::Borrowed(b) => TensorData(Repr::Borrowed(b)),
                Cow::Owned(v) => TensorData(Repr::Owned(v)),
            },
            Window::Empty => TensorData(Repr::Owned(Vec::new())),
            Window::Inflated {
                inflated,
                segment,
                offset,
            } => {
                let view = View {
                    offset,
                    ..self.view()
                };
                let bytes = &inflated.segments[segment].1;
                match view.gather(bytes).map_err(bad)? {
                    Cow::Borrowed(b) => {
                        let from = b.as_ptr() as usize - bytes.as_ptr() as usize;
                        let range = from..from + b.len();
                        TensorData(Repr::Inflated {
                            inflated: Arc::clone(&inflated),
                            segment,
                            range,
                        })
                    }
                    Cow::Owned(v) => TensorData(Repr::Owned(v)),
                }
            }
        };
        if self.ckpt.big_endian && s.dtype.swap_unit() > 1 {
            let unit = s.dtype.swap_unit() as usize;
            let mut owned =
                std::mem::replace(&mut data, TensorData(Repr::Owned(Vec::new()))).into_vec();
            byteswap(&mut owned, unit);
            data = TensorData(Repr::Owned(owned));
        }
        Ok(data)
    }

    /// The tensor's bytes, as [`TorchTensor::bytes`] gives them, passed to
    /// `f` in order in pieces of about `piece` bytes (larger when one step
    /// of the view's innermost split is; at least one element), each
    /// gathered from the storage on its own: a view that must be
    /// re-ordered or expanded never takes more memory than a piece. Stops
    /// at the first error of `f`.
    pub fn for_each_piece<E: From<Error>>(
        &self,
        piece: usize,
        mut f: impl FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let s = &self.ckpt.storages[self.info.storage];
        let bad = |reason: String| Error::Tensor {
            name: self.info.name.clone(),
            reason,
        };
        let window = self.window()?;
        let (storage, offset): (&[u8], u64) = match &window {
            Window::Input(b) => (b, self.info.offset),
            Window::Inflated {
                inflated,
                segment,
                offset,
            } => (&inflated.segments[*segment].1, *offset),
            Window::Empty => return Ok(()),
        };
        let elem = s.dtype.element_size();
        let swap = self.ckpt.big_endian && s.dtype.swap_unit() > 1;
        let (shape, strides) = (&self.info.shape[..], &self.info.strides[..]);
        let piece = (piece as u64).max(elem);
        // Split at the outermost dimension whose inner block fits a piece;
        // a piece is `k` steps of that dimension at one index of the
        // dimensions outside it.
        let inner = |j: usize| {
            tensorfile::dtype::numel(&shape[j + 1..])
                .and_then(|n| n.checked_mul(elem))
                .unwrap_or(u64::MAX)
        };
        let total = self.nbytes();
        let split = (0..shape.len()).find(|&j| inner(j) <= piece);
        let Some(j) = split.filter(|_| total > piece) else {
            // Small enough, or a scalar: at once.
            let view = View {
                offset,
                ..self.view()
            };
            let mut bytes = view.gather(storage).map_err(bad)?;
            if swap {
                byteswap(bytes.to_mut(), s.dtype.swap_unit() as usize);
            }
            return f(&bytes);
        };
        let k = (piece / inner(j).max(1)).max(1);
        let mut index = vec![0u64; j];
        let mut sub_shape = shape[j..].to_vec();
        loop {
            // The offset of this index of the outer dimensions (checked
            // when the view was validated: within the storage).
            let mut base = offset;
            for (d, &i) in index.iter().enumerate() {
                base = base.saturating_add(i.saturating_mul(strides[d]));
            }
            let mut i = 0;
            while i < shape[j] {
                let c = k.min(shape[j] - i);
                sub_shape[0] = c;
                let view = View {
                    offset: base.saturating_add(i.saturating_mul(strides[j])),
                    shape: &sub_shape,
                    strides: &strides[j..],
                    elem,
                };
                let mut bytes = view.gather(storage).map_err(bad)?;
                if swap {
                    byteswap(bytes.to_mut(), s.dtype.swap_unit() as usize);
                }
                f(&bytes)?;
                i += c;
            }
            // The next index of the outer dimensions, innermost first.
            let mut d = j;
            loop {
                if d == 0 {
                    return Ok(());
                }
                d -= 1;
                index[d] += 1;
                if index[d] < shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
    }

    /// Where the view's bytes are read from.
    fn window(&self) -> Result<Window<'a>> {
        let s = &self.ckpt.storages[self.info.storage];
        match &s.location {
            Location::Range(r) => self
                .ckpt
                .source
                .bytes()
                .get(r.clone())
                .map(Window::Input)
                .ok_or_else(|| Error::Storage {
                    key: s.key.clone(),
                    problem: "outside the file".into(),
                }),
            Location::Deflated(_) => {
                let Some(span) = self.span() else {
                    return Ok(Window::Empty);
                };
                let inflated = self.ckpt.inflated(self.info.storage)?;
                let (segment, start) = inflated.segment(&span).ok_or_else(|| Error::Tensor {
                    name: self.info.name.clone(),
                    reason: format!(
                        "its bytes {span:?} are not among its storage's inflated spans"
                    ),
                })?;
                // Spans start at a view's first element: a whole number of
                // elements into the storage.
                let offset = self.info.offset - start / s.dtype.element_size();
                Ok(Window::Inflated {
                    inflated,
                    segment,
                    offset,
                })
            }
        }
    }
}

/// What a view's bytes are read from: its storage in the input, the
/// inflated segment of a deflated storage that holds its span (with the
/// view's offset in that segment, in elements), or nothing (a view of a
/// deflated storage without elements).
enum Window<'a> {
    Input(&'a [u8]),
    Inflated {
        inflated: Arc<Inflated>,
        segment: usize,
        offset: u64,
    },
    Empty,
}

/// The byte span of its storage that a view reads: from its first element
/// (strides are non-negative) to the end of its last. `None` when it has
/// no elements.
fn view_span(info: &TensorInfo, elem: u64) -> Option<Range<u64>> {
    if tensorfile::dtype::numel(&info.shape)? == 0 {
        return None;
    }
    let mut last = info.offset;
    for (&d, &st) in info.shape.iter().zip(&info.strides) {
        last = last.checked_add((d - 1).checked_mul(st)?)?;
    }
    Some(info.offset.checked_mul(elem)?..last.checked_add(1)?.checked_mul(elem)?)
}

/// A tensor's bytes in C order, little-endian ([`TorchTensor::data`]):
/// borrowed from the input, in a buffer of their own, or shared with the
/// other views of an inflated storage. Dereferences to the bytes.
pub struct TensorData<'a>(Repr<'a>);

enum Repr<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    Inflated {
        inflated: Arc<Inflated>,
        segment: usize,
        range: Range<usize>,
    },
}

impl std::fmt::Debug for TensorData<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.0 {
            Repr::Borrowed(_) => "borrowed",
            Repr::Owned(_) => "owned",
            Repr::Inflated { .. } => "inflated",
        };
        f.debug_struct("TensorData")
            .field("kind", &kind)
            .field("len", &self.len())
            .finish()
    }
}

impl std::ops::Deref for TensorData<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Borrowed(b) => b,
            Repr::Owned(v) => v,
            Repr::Inflated {
                inflated,
                segment,
                range,
            } => inflated
                .segments
                .get(*segment)
                .and_then(|(_, b)| b.get(range.clone()))
                .unwrap_or_default(),
        }
    }
}

impl<'a> TensorData<'a> {
    /// Whether the bytes are borrowed from the checkpoint's input.
    pub fn is_borrowed(&self) -> bool {
        matches!(self.0, Repr::Borrowed(_))
    }

    /// Whether the bytes are shared with an inflated storage.
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Repr::Inflated { .. })
    }

    /// The bytes as a `Cow`: shared bytes are copied out.
    pub fn into_cow(self) -> Cow<'a, [u8]> {
        match self.0 {
            Repr::Borrowed(b) => Cow::Borrowed(b),
            Repr::Owned(v) => Cow::Owned(v),
            Repr::Inflated { .. } => Cow::Owned(self.to_vec()),
        }
    }

    /// The bytes in a vector of their own (copied unless already owned).
    pub fn into_vec(self) -> Vec<u8> {
        self.into_cow().into_owned()
    }

    /// Bytes borrowed from the input as `Err`, else the same data without
    /// the borrow (owned, or shared with an inflated storage), which may
    /// outlive the checkpoint: its bytes never move while it lives.
    pub fn detach(self) -> Result<TensorData<'static>, &'a [u8]> {
        match self.0 {
            Repr::Borrowed(b) => Err(b),
            Repr::Owned(v) => Ok(TensorData(Repr::Owned(v))),
            Repr::Inflated {
                inflated,
                segment,
                range,
            } => Ok(TensorData(Repr::Inflated {
                inflated,
                segment,
                range,
            })),
        }
    }
}

enum Kind {
    Zip,
    Legacy,
}

/// Whether `head` (the first bytes of a file; 512 are enough) looks like a
/// PyTorch checkpoint: a zip archive, a legacy magic-number pickle, or the
/// old tar layout. A safetensors file never does, so tools can pick a
/// loader from this.
pub fn looks_like_pytorch(head: &[u8]) -> bool {
    // A safetensors header length is followed by the JSON header.
    if head.get(8) == Some(&b'{') {
        return false;
    }
    let zip = head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06");
    // PROTO 2..5, then LONG1 (the magic number).
    let legacy =
        head.len() >= 3 && head[0] == 0x80 && (2..=5).contains(&head[1]) && head[2] == 0x8a;
    let tar = head.get(257..262) == Some(b"ustar");
    zip || legacy || tar
}

/// [`looks_like_pytorch`] on the first bytes of the file at `path`.
pub fn file_looks_like_pytorch(path: impl AsRef<Path>) -> std::io::Result<bool> {
    use std::io::Read;
    let mut head = Vec::with_capacity(512);
    File::open(path)?.take(512).read_to_end(&mut head)?;
    Ok(looks_like_pytorch(&head))
}

/// Tells the container from the first bytes, refusing what we do not load.
fn detect(data: &[u8]) -> Result<Kind> {
    if data.starts_with(b"PK\x03\x04") || data.starts_with(b"PK\x05\x06") {
        return Ok(Kind::Zip);
    }
    if data.get(257..262) == Some(b"ustar") {
        return Err(Error::NotACheckpoint(
            "this is a tar archive: the PyTorch 0.1.x checkpoint format, which is not supported (load and re-save it with torch.save)".into(),
        ));
    }
    if data.first() == Some(&0x80) {
        return Ok(Kind::Legacy);
    }
    if data.len() >= 9 && data[8] == b'{' {
        return Err(Error::NotACheckpoint(
            "this looks like a safetensors file, not a PyTorch checkpoint".into(),
        ));
    }
    let head: String = data.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Err(Error::NotACheckpoint(format!(
        "not a PyTorch checkpoint: neither a zip archive nor a legacy pickle (starts with {})",
        if head.is_empty() {
            "nothing: the file is empty".to_string()
        } else {
            format!("0x{head}")
        }
    )))
}

/// What the container-specific loaders produce.
struct Parts {
    format: Format,
    big_endian: bool,
    storages: Vec<Storage>,
    tensors: Vec<TensorInfo>,
    values: Vec<(String, String)>,
}

fn load_zip(data: &[u8], options: &LoadOptions) -> Result<Parts> {
    let zip = ZipIndex::parse(data)?;
    let first = zip.entries().first().ok_or_else(|| {
        Error::Archive("the zip archive is empty: not a torch.save checkpoint".into())
    })?;
    let prefix = match first.name.split_once('/') {
        Some((p, _)) if !p.is_empty() => p.to_string(),
        _ => {
            return Err(Error::Archive(format!(
                "zip entry {:?} is not inside a top-level directory: not a torch.save checkpoint",
                first.name
            )))
        }
    };
    let dir = format!("{prefix}/");
    if let Some(e) = zip.entries().iter().find(|e| !e.name.starts_with(&dir)) {
        return Err(Error::Archive(format!(
            "zip entry {:?} is outside the archive's single top-level directory {dir:?}",
            e.name
        )));
    }
    let code = format!("{dir}code/");
    if zip.get(&format!("{dir}constants.pkl")).is_some()
        || zip.entries().iter().any(|e| e.name.starts_with(&code))
    {
        return Err(Error::NotACheckpoint(
            "this is a TorchScript archive (torch.jit.save: constants.pkl, code/), not a torch.save checkpoint; load it with torch.jit.load and torch.save its state_dict()".into(),
        ));
    }
    let pkl_name = format!("{dir}data.pkl");
    let pkl_entry = zip.get(&pkl_name).ok_or_else(|| {
        Error::Archive(format!(
            "no {pkl_name} record: not a complete torch.save checkpoint (a torch.save that failed leaves such a file behind)"
        ))
    })?;
    let big_endian = match zip.get(&format!("{dir}byteorder")) {
        None => false,
        Some(e) => match &*e.read(data)? {
            b"little" => false,
            b"big" => true,
            other => {
                return Err(Error::Archive(format!(
                    "the byteorder record says {:?}, expected \"little\" or \"big\"",
                    String::from_utf8_lossy(&other[..other.len().min(40)])
                )))
            }
        },
    };
    let pkl = pkl_entry.read(data)?;
    let (pickle, used) = Pickle::parse(&pkl, &options.limits).map_err(|source| Error::Pickle {
        record: pkl_name.clone(),
        source,
    })?;
    if used != pkl.len() {
        return Err(Error::Archive(format!(
            "{pkl_name}: {} bytes after the pickle's STOP",
            pkl.len() - used
        )));
    }
    let (rebuilder_storages, tensors, values) = walk(&pickle, options)?;
    let mut storages = Vec::with_capacity(rebuilder_storages.len());
    for s in rebuilder_storages {
        let record = format!("{dir}data/{}", s.key);
        let entry = zip.get(&record).ok_or_else(|| Error::Storage {
            key: s.key.clone(),
            problem: format!(
                "the persistent id names key {:?} but there is no {record} record",
                s.key
            ),
        })?;
        if entry.size != s.nbytes {
            return Err(Error::Storage {
                key: s.key.clone(),
                problem: format!(
                    "the persistent id says {} but record {record} has {} B",
                    s.declared, entry.size
                ),
            });
        }
        let location = match entry.method {
            crate::zip::Method::Stored => {
                let start = usize::try_from(entry.data_offset)
                    .map_err(|_| Error::Archive("offset too large".into()))?;
                Location::Range(start..start + entry.size as usize)
            }
            crate::zip::Method::Deflated => Location::Deflated(Box::new(Deflated {
                entry: entry.clone(),
                spans: Vec::new(),
                held: Mutex::new(None),
            })),
        };
        storages.push(Storage {
            key: s.key,
            dtype: s.dtype,
            location,
        });
    }
    deflated_spans(&mut storages, &tensors);
    Ok(Parts {
        format: Format::Zip { prefix },
        big_endian,
        storages,
        tensors,
        values,
    })
}

/// Records, for each deflated storage, the merged byte spans its tensors
/// view.
fn deflated_spans(storages: &mut [Storage], tensors: &[TensorInfo]) {
    let mut spans: Vec<Vec<Range<u64>>> = vec![Vec::new(); storages.len()];
    for t in tensors {
        let s = &storages[t.storage];
        if matches!(s.location, Location::Deflated(_)) {
            // Views were checked to fit their storage: a span exists for
            // every view with elements.
            if let Some(r) = view_span(t, s.dtype.element_size()) {
                spans[t.storage].push(r);
            }
        }
    }
    for (s, mut spans) in storages.iter_mut().zip(spans) {
        let Location::Deflated(d) = &mut s.location else {
            continue;
        };
        spans.sort_unstable_by_key(|r| (r.start, r.end));
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(spans.len());
        for r in spans {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged.shrink_to_fit();
        d.spans = merged;
    }
}

fn load_legacy(data: &[u8], options: &LoadOptions) -> Result<Parts> {
    let legacy = Legacy::parse(data, &options.limits)?;
    let (refs, tensors, values) = walk(&legacy.object, options)?;
    let sizes: HashMap<&str, u64> = refs
        .iter()
        .map(|s| (s.key.as_str(), s.dtype.element_size()))
        .collect();
    let ranges = legacy.locate(data, |k| sizes.get(k).copied())?;
    let mut storages = Vec::with_capacity(refs.len());
    for s in refs {
        let range = ranges.get(&s.key).cloned().ok_or_else(|| Error::Storage {
            key: s.key.clone(),
            problem: "the persistent id names it but it is not in the storage key list".into(),
        })?;
        if range.len() as u64 != s.nbytes {
            return Err(Error::Storage {
                key: s.key.clone(),
                problem: format!(
                    "the persistent id says {} but the file holds {} B",
                    s.declared,
                    range.len()
                ),
            });
        }
        storages.push(Storage {
            key: s.key,
            dtype: s.dtype,
            location: Location::Range(range),
        });
    }
    Ok(Parts {
        format: Format::Legacy,
        big_endian: !legacy.little_endian,
        storages,
        tensors,
        values,
    })
}

type Walked = (
    Vec<crate::rebuild::StorageRef>,
    Vec<TensorInfo>,
    Vec<(String, String)>,
);

/// Flattens the object and rebuilds its tensors.
fn walk(pickle: &Pickle, options: &LoadOptions) -> Result<Walked> {
    let mut rebuilder = Rebuilder::new(pickle, options.max_expanded_bytes);
    let flat = flatten(
        pickle,
        &mut rebuilder,
        options.key.as_deref(),
        &options.walk,
    )?;
    let has_bare = flat.tensors.iter().any(|(n, _)| n.is_empty());
    let mut tensors = Vec::with_capacity(flat.tensors.len());
    let mut expanded = 0u64;
    for (mut name, spec_index) in flat.tensors {
        let spec = &rebuilder.specs[spec_index];
        // Views larger than their storage are materialized by whoever reads
        // them: count every name's, against the total budget.
        let elem = spec.dtype.element_size();
        let nbytes = tensorfile::dtype::numel(&spec.shape).and_then(|n| n.checked_mul(elem));
        let storage_nbytes = rebuilder.storages[spec.storage].nbytes;
        if let Some(nbytes) = nbytes.filter(|&n| n > storage_nbytes) {
            let total = expanded.checked_add(nbytes);
            match total {
                Some(t) if t <= options.max_expanded_total_bytes => expanded = t,
                _ => {
                    return Err(Error::Budget {
                        budget: "max_expanded_total_bytes",
                        limit: options.max_expanded_total_bytes,
                        needed: total.unwrap_or(u64::MAX),
                        context: format!(
                            "expanded views (larger than their storage) in all, at tensor {name:?}"
                        ),
                    })
                }
            }
        }
        if name.is_empty() {
            if let Some(n) = &options.name {
                name = n.clone();
            }
        }
        let dtype = spec.dtype.to_safetensors().map_err(|why| Error::Refused {
            name: name.clone(),
            reason: why.to_string(),
        })?;
        tensors.push(TensorInfo {
            name,
            dtype,
            shape: spec.shape.clone(),
            strides: spec.strides.clone(),
            offset: spec.offset,
            storage: spec.storage,
            spec: spec_index,
        });
    }
    if let Some(n) = &options.name {
        if !has_bare {
            return Err(Error::Structure(format!(
                "a name ({n:?}) was given for a bare top-level tensor, but the checkpoint's root is not a tensor"
            )));
        }
    }
    // Renaming "" may have broken the order.
    tensors.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    if let Some(w) = tensors.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::Structure(format!(
            "two tensors are named {:?}",
            w[0].name
        )));
    }
    Ok((rebuilder.storages, tensors, flat.values))
}

/// Reads one stored tensor's bytes from the checkpoint's file with
/// positional reads (see [`TorchTensor::reader`]).
#[derive(Debug)]
pub struct StoredReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl std::io::Read for StoredReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = usize::try_from(self.end - self.pos).unwrap_or(usize::MAX);
        let want = buf.len().min(left);
        if want == 0 {
            return Ok(0);
        }
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(self.file, &mut buf[..want], self.pos)?;
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_read(self.file, &mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the input file is shorter than its zip directory says",
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}
