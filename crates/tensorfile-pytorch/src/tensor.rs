//! One tensor of a checkpoint: its view over a storage, and its C-order
//! little-endian bytes, read from the checkpoint's byte source by range,
//! gathered a piece at a time, or taken from an inflated record.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use tensorfile_core::writer::{TensorData, PIECE};
use tensorfile_core::Dtype;

use crate::error::{Error, Result};
use crate::store::{view_span, Inflated, Location, Store, TensorInfo};
use crate::view::{byteswap, View};

/// One tensor of a [`Checkpoint`](crate::Checkpoint).
///
/// It is a [`TensorData`] of the format core, so it can be written, cast
/// or planned like any other tensor: tensors stored as they are (a
/// contiguous view of a stored, little-endian record) are read by range
/// and are [`TensorData::seekable`]; the others (views with gaps,
/// transposes, expansions, deflated records, big-endian data) are not,
/// and [`TensorData::produce`] makes their bytes about 4 MiB at a time.
#[derive(Clone, Copy)]
pub struct TorchTensor<'a> {
    pub(crate) store: &'a Store,
    pub(crate) info: &'a TensorInfo,
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

/// A piece's storage span may be this many times its bytes (plus
/// [`SPAN_SLACK`]) and still be read whole for it.
const SPAN_FACTOR: u64 = 2;
/// See [`SPAN_FACTOR`]; also the most a window of a sparse view reads.
const SPAN_SLACK: u64 = 1 << 20;

fn span_limit(bytes: u64) -> u64 {
    bytes.saturating_mul(SPAN_FACTOR).saturating_add(SPAN_SLACK)
}

/// Whether the view walks its storage forward, outer dimensions by larger
/// steps (strides non-increasing, ignoring dimensions of size 1 and
/// stride 0): then splitting its outer dimension gives parts with spans of
/// their own. A permutation (a transpose) does not: each part spans most
/// of the storage.
fn ordered(shape: &[u64], strides: &[u64]) -> bool {
    let mut last = u64::MAX;
    for (&d, &s) in shape.iter().zip(strides) {
        if d <= 1 || s == 0 {
            continue;
        }
        if s > last {
            return false;
        }
        last = s;
    }
    true
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
        &self.store.storages[self.info.storage].key
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

    /// Where this name comes in the saved object, walked in pickle order
    /// (for a state dict, the order of its keys, which is the modules'
    /// registration order): of several names of one storage, the one that
    /// comes first is the owner's (`model.embed_tokens.weight` before
    /// `lm_head.weight`).
    pub fn pickle_order(&self) -> usize {
        self.info.order
    }

    /// Byte length of the C-order bytes.
    pub fn nbytes(&self) -> u64 {
        // Checked when the view was validated.
        let numel = tensorfile_core::dtype::numel(&self.info.shape).unwrap_or(0);
        self.info.dtype.byte_len(numel).unwrap_or(0)
    }

    /// The number of elements.
    pub fn numel(&self) -> u64 {
        tensorfile_core::dtype::numel(&self.info.shape).unwrap_or(0)
    }

    /// Whether the view is a dense C-order block of its storage.
    pub fn is_contiguous(&self) -> bool {
        self.view().is_contiguous()
    }

    /// Whether the tensor's bytes lie in the input as they are (a
    /// contiguous view of a stored, little-endian storage): read by range,
    /// and borrowed by [`TorchTensor::bytes`] when the checkpoint's source
    /// is in memory (a map, a buffer).
    pub fn is_zero_copy(&self) -> bool {
        let s = &self.store.storages[self.info.storage];
        self.view().is_contiguous()
            && matches!(s.location, Location::Range(_))
            && (!self.store.big_endian || s.dtype.swap_unit() == 1)
    }

    fn view(&self) -> View<'a> {
        View {
            offset: self.info.offset,
            shape: &self.info.shape,
            strides: &self.info.strides,
            elem: self.elem(),
        }
    }

    fn elem(&self) -> u64 {
        self.store.storages[self.info.storage].dtype.element_size()
    }

    fn swap_unit(&self) -> usize {
        let s = &self.store.storages[self.info.storage];
        if self.store.big_endian {
            s.dtype.swap_unit() as usize
        } else {
            1
        }
    }

    /// Where the tensor's bytes lie, as they are, in the input: `(offset,
    /// length)` when [`TorchTensor::is_zero_copy`].
    pub fn file_range(&self) -> Option<(u64, u64)> {
        let s = &self.store.storages[self.info.storage];
        match &s.location {
            Location::Range(r) if self.is_zero_copy() => {
                let start = r
                    .start
                    .checked_add(self.info.offset.checked_mul(self.elem())?)?;
                Some((start, self.nbytes()))
            }
            _ => None,
        }
    }

    /// The tensor's bytes in C order, little-endian: borrowed from the
    /// source when it is in memory and they lie there as they are,
    /// otherwise read, gathered (views with gaps, transposes, expansions),
    /// inflated or byte-swapped into a buffer.
    ///
    /// A deflated storage is inflated once for all its views and held (see
    /// [`LoadOptions::max_inflated_bytes`](crate::LoadOptions::max_inflated_bytes));
    /// this copies the view out of it. [`TorchTensor::data`] shares it
    /// instead.
    ///
    /// # Errors
    ///
    /// As [`TorchTensor::data`].
    pub fn bytes(&self) -> Result<Cow<'a, [u8]>> {
        Ok(self.data()?.into_cow())
    }

    /// The tensor's bytes like [`TorchTensor::bytes`], but a contiguous
    /// view of a deflated storage shares the storage's inflated bytes
    /// (which stay allocated while this value lives) instead of copying.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the source cannot be read, [`Error::Storage`] when
    /// the storage lies outside it, [`Error::Zip`] when a deflated storage does
    /// not inflate, [`Error::Budget`] past
    /// [`LoadOptions::max_inflated_bytes`](crate::LoadOptions::max_inflated_bytes),
    /// and [`Error::Tensor`] when the view does not fit its storage.
    pub fn data(&self) -> Result<TensorBytes<'a>> {
        let view = self.view();
        let mut access = self.access()?;
        let mut data = match access {
            Access::Empty => TensorBytes(Repr::Owned(Vec::new())),
            Access::Memory { bytes, base } => match self.gather_in(bytes, base, &view)? {
                Cow::Borrowed(b) => TensorBytes(Repr::Borrowed(b)),
                Cow::Owned(v) => TensorBytes(Repr::Owned(v)),
            },
            Access::Inflated {
                ref inflated,
                segment,
                base,
            } => {
                let bytes = &inflated.segments[segment].1;
                match self.gather_in(bytes, base, &view)? {
                    Cow::Borrowed(b) => {
                        let from = b.as_ptr() as usize - bytes.as_ptr() as usize;
                        let range = from..from + b.len();
                        TensorBytes(Repr::Inflated {
                            inflated: Arc::clone(inflated),
                            segment,
                            range,
                        })
                    }
                    Cow::Owned(v) => TensorBytes(Repr::Owned(v)),
                }
            }
            Access::Source { .. } => {
                TensorBytes(Repr::Owned(access.gather(self, &view)?.into_owned()))
            }
        };
        let unit = self.swap_unit();
        if unit > 1 {
            let mut owned =
                std::mem::replace(&mut data, TensorBytes(Repr::Owned(Vec::new()))).into_vec();
            byteswap(&mut owned, unit);
            data = TensorBytes(Repr::Owned(owned));
        }
        Ok(data)
    }

    /// `view` gathered from `bytes`, a window of the storage starting at
    /// element `base`.
    fn gather_in<'s>(&self, bytes: &'s [u8], base: u64, view: &View<'_>) -> Result<Cow<'s, [u8]>> {
        let view = View {
            offset: view
                .offset
                .checked_sub(base)
                .ok_or_else(|| self.bad("its view starts before its window".into()))?,
            ..*view
        };
        view.gather(bytes).map_err(|reason| self.bad(reason))
    }

    fn bad(&self, reason: String) -> Error {
        Error::Tensor {
            name: self.info.name.clone(),
            reason,
        }
    }

    /// The tensor's bytes, as [`TorchTensor::bytes`] gives them, passed to
    /// `f` in order in pieces of about `piece` bytes (larger when one step
    /// of the view's innermost split is; at least one element), each
    /// gathered from the storage on its own: a view that must be
    /// re-ordered or expanded never takes more memory than a piece and
    /// the storage bytes it spans. (A view whose pieces each span most of
    /// a large storage, such as a transpose, reads the storage bytes it
    /// views once and gathers every piece from them.) Stops at the first
    /// error of `f`.
    ///
    /// # Errors
    ///
    /// The errors of [`TorchTensor::data`] (converted to `E`), and the first
    /// error `f` returns.
    pub fn for_each_piece<E: From<Error>>(
        &self,
        piece: usize,
        mut f: impl FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut access = self.access()?;
        if matches!(access, Access::Empty) {
            return Ok(());
        }
        let elem = self.elem();
        let unit = self.swap_unit();
        let (shape, strides) = (&self.info.shape[..], &self.info.strides[..]);
        let piece = (piece as u64).max(elem);
        // Split at the outermost dimension whose inner block fits a piece;
        // a piece is `k` steps of that dimension at one index of the
        // dimensions outside it.
        let inner = |j: usize| {
            tensorfile_core::dtype::numel(&shape[j + 1..])
                .and_then(|n| n.checked_mul(elem))
                .unwrap_or(u64::MAX)
        };
        let total = self.nbytes();
        let split = (0..shape.len()).find(|&j| inner(j) <= piece);
        let Some(j) = split.filter(|_| total > piece) else {
            // Small enough, or a scalar: at once.
            let mut bytes = access.gather(self, &self.view())?;
            if unit > 1 {
                byteswap(bytes.to_mut(), unit);
            }
            return f(&bytes);
        };
        let k = (piece / inner(j).max(1)).max(1);
        let mut index = vec![0u64; j];
        let mut sub_shape = shape[j..].to_vec();
        loop {
            // The offset of this index of the outer dimensions (checked
            // when the view was validated: within the storage).
            let mut base = self.info.offset;
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
                let mut bytes = access.gather(self, &view)?;
                if unit > 1 {
                    byteswap(bytes.to_mut(), unit);
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

    /// How the view's storage bytes are reached.
    fn access(&self) -> Result<Access<'a>> {
        let s = &self.store.storages[self.info.storage];
        match &s.location {
            Location::Range(r) => match self.store.source.as_slice() {
                Some(all) => {
                    let window = usize::try_from(r.start)
                        .ok()
                        .zip(usize::try_from(r.end).ok())
                        .and_then(|(a, b)| all.get(a..b))
                        .ok_or_else(|| Error::Storage {
                            key: s.key.clone(),
                            problem: "outside the file".into(),
                        })?;
                    Ok(Access::Memory {
                        bytes: window,
                        base: 0,
                    })
                }
                None => Ok(Access::Source {
                    start: r.start,
                    ordered: ordered(&self.info.shape, &self.info.strides),
                    buf: Vec::new(),
                    whole: None,
                }),
            },
            Location::Deflated(_) => {
                let Some(span) = self.span() else {
                    return Ok(Access::Empty);
                };
                let inflated = self.store.inflated(self.info.storage)?;
                let (segment, start) = inflated.segment(&span).ok_or_else(|| {
                    self.bad(format!(
                        "its bytes {span:?} are not among its storage's inflated spans"
                    ))
                })?;
                // Spans start at a view's first element: a whole number of
                // elements into the storage.
                Ok(Access::Inflated {
                    inflated,
                    segment,
                    base: start / s.dtype.element_size(),
                })
            }
        }
    }

    /// The byte span of the storage the view reads (`None` when it has no
    /// elements). The view was checked to fit in its storage.
    fn span(&self) -> Option<Range<u64>> {
        view_span(
            self.info.offset,
            &self.info.shape,
            &self.info.strides,
            self.elem(),
        )
    }

    /// Reads stored bytes `offset..offset + buf.len()` of a zero-copy
    /// tensor from the source.
    fn read_stored(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (start, len) = self
            .file_range()
            .ok_or_else(|| self.bad("its bytes are not stored as they are".into()))?;
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > len) {
            return Err(self.bad(format!(
                "{} bytes at offset {offset} reach past its {len} bytes",
                buf.len()
            )));
        }
        self.store.read(start + offset, buf)
    }
}

/// How a view's storage bytes are reached.
enum Access<'a> {
    /// The storage (or a window of it starting at element `base`) in
    /// memory: the source's own bytes.
    Memory { bytes: &'a [u8], base: u64 },
    /// The inflated segment of a deflated storage that holds the view's
    /// span, starting at element `base`.
    Inflated {
        inflated: Arc<Inflated>,
        segment: usize,
        base: u64,
    },
    /// Read from the source by range: the storage starts at byte `start`
    /// of the source. `ordered` as [`ordered`] says; `whole` holds the
    /// view's whole span (from element `.0`) once a piece of a view that
    /// is not ordered (a transpose) needed much more than its bytes.
    Source {
        start: u64,
        ordered: bool,
        buf: Vec<u8>,
        whole: Option<(u64, Vec<u8>)>,
    },
    /// A view of a deflated storage without elements.
    Empty,
}

impl Access<'_> {
    /// The bytes of `view` (a part of `t`'s view) in C order, before any
    /// byte swap.
    fn gather<'s>(&'s mut self, t: &TorchTensor<'_>, view: &View<'_>) -> Result<Cow<'s, [u8]>> {
        match self {
            Access::Memory { bytes, base } => t.gather_in(bytes, *base, view),
            Access::Inflated {
                inflated,
                segment,
                base,
            } => t.gather_in(&inflated.segments[*segment].1, *base, view),
            Access::Empty => Ok(Cow::Borrowed(&[])),
            Access::Source {
                start,
                ordered,
                buf,
                whole,
            } => {
                if whole.is_some() {
                    let Some((base, bytes)) = whole else {
                        return Err(t.bad("no storage bytes".into()));
                    };
                    return t.gather_in(bytes, *base, view);
                }
                let Some(span) = view_span(view.offset, view.shape, view.strides, view.elem) else {
                    return Ok(Cow::Borrowed(&[]));
                };
                let bytes = view.nbytes().unwrap_or(0);
                // An ordered view's piece may read twice its bytes; a
                // re-ordering's piece only its bytes (and the slack), else
                // its pieces would read the storage again and again.
                let fits = if *ordered {
                    span_limit(bytes)
                } else {
                    bytes.saturating_add(SPAN_SLACK)
                };
                if span.end - span.start <= fits {
                    read_span(t, *start, &span, buf)?;
                    return t.gather_in(buf, span.start / view.elem, view);
                }
                if !*ordered {
                    // A re-ordering (a transpose): every piece spans most
                    // of what the view reads, so read that once.
                    let all = t.span().unwrap_or(span);
                    let mut held = Vec::new();
                    read_span(t, *start, &all, &mut held)?;
                    let base = all.start / view.elem;
                    *whole = Some((base, held));
                    let Some((base, bytes)) = whole else {
                        return Err(t.bad("no storage bytes".into()));
                    };
                    return t.gather_in(bytes, *base, view);
                }
                // A view with gaps (a column of a wide matrix, a strided
                // slice): its parts are read one bounded window at a time,
                // each window once.
                let mut out = Vec::new();
                out.try_reserve_exact(usize::try_from(bytes).unwrap_or(usize::MAX))
                    .map_err(|_| t.bad(format!("cannot allocate {bytes} bytes")))?;
                gather_split(t, *start, view, buf, &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }
}

/// Reads the storage bytes `span` (the storage starts at `start` in the
/// source) into `buf`.
fn read_span(t: &TorchTensor<'_>, start: u64, span: &Range<u64>, buf: &mut Vec<u8>) -> Result<()> {
    let len = usize::try_from(span.end - span.start)
        .map_err(|_| t.bad("its storage span does not fit in memory".into()))?;
    buf.clear();
    buf.try_reserve_exact(len)
        .map_err(|_| t.bad(format!("cannot allocate {len} bytes to read its storage")))?;
    buf.resize(len, 0);
    let at = start
        .checked_add(span.start)
        .ok_or_else(|| t.bad("its storage span is past 2^64".into()))?;
    t.store.read(at, buf)
}

/// Appends `view`'s bytes to `out`, splitting it along its outermost
/// dimension until each part's storage span is within [`span_limit`] of
/// its bytes, and reading each part's span on its own.
fn gather_split(
    t: &TorchTensor<'_>,
    start: u64,
    view: &View<'_>,
    buf: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let Some(span) = view_span(view.offset, view.shape, view.strides, view.elem) else {
        return Ok(());
    };
    let bytes = view.nbytes().unwrap_or(0);
    let Some(d) = view.shape.iter().position(|&n| n > 1) else {
        read_span(t, start, &span, buf)?;
        out.extend_from_slice(&t.gather_in(buf, span.start / view.elem, view)?);
        return Ok(());
    };
    if span.end - span.start <= span_limit(bytes) {
        read_span(t, start, &span, buf)?;
        out.extend_from_slice(&t.gather_in(buf, span.start / view.elem, view)?);
        return Ok(());
    }
    // Steps of dimension `d` per part: as many as a part's slack allows.
    let step_bytes = view.strides[d].saturating_mul(view.elem).max(1);
    let per = (SPAN_SLACK / step_bytes).max(1);
    let mut shape = view.shape.to_vec();
    let mut i = 0;
    while i < view.shape[d] {
        let c = per.min(view.shape[d] - i);
        shape[d] = c;
        let part = View {
            offset: view
                .offset
                .saturating_add(i.saturating_mul(view.strides[d])),
            shape: &shape,
            ..*view
        };
        if c == 1 {
            // Split the inner dimensions instead.
            let inner = View {
                shape: &shape[d + 1..],
                strides: &view.strides[d + 1..],
                ..part
            };
            gather_split(t, start, &inner, buf, out)?;
        } else {
            gather_split(t, start, &part, buf, out)?;
        }
        i += c;
    }
    Ok(())
}

/// For every error this crate's converts into (the umbrella's, or this
/// crate's own): a failed read comes back as this crate's error, typed.
impl<E> TensorData<E> for TorchTensor<'_>
where
    E: From<Error> + From<tensorfile_core::Error>,
{
    fn name(&self) -> &str {
        &self.info.name
    }
    fn dtype(&self) -> Dtype {
        self.info.dtype
    }
    fn shape(&self) -> &[u64] {
        &self.info.shape
    }
    fn byte_len(&self) -> u64 {
        self.nbytes()
    }
    fn bytes(&self) -> Option<&[u8]> {
        let (start, len) = self.file_range()?;
        let all = self.store.source.as_slice()?;
        let start = usize::try_from(start).ok()?;
        all.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::result::Result<(), E> {
        if self.is_zero_copy() {
            return Ok(self.read_stored(offset, buf)?);
        }
        // Bytes that are made, not stored: made in pieces, the asked range
        // copied out (seekable() says this is not the way to read them).
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.nbytes()) {
            return Err(self
                .bad(format!(
                    "{} bytes at offset {offset} reach past its {} bytes",
                    buf.len(),
                    self.nbytes()
                ))
                .into());
        }
        let end = end.unwrap_or(offset);
        let mut at = 0u64;
        self.for_each_piece(PIECE, |piece| -> Result<()> {
            let piece_end = at + piece.len() as u64;
            let from = offset.max(at);
            let to = end.min(piece_end);
            if from < to {
                buf[(from - offset) as usize..(to - offset) as usize]
                    .copy_from_slice(&piece[(from - at) as usize..(to - at) as usize]);
            }
            at = piece_end;
            Ok(())
        })
        .map_err(E::from)
    }
    fn seekable(&self) -> bool {
        self.is_zero_copy()
    }
    fn produce(
        &self,
        each: &mut dyn FnMut(u64, &[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        if let Some(all) = TensorData::<E>::bytes(self) {
            return each(0, all);
        }
        let len = self.nbytes();
        if self.is_zero_copy() {
            // Stored: plain reads into one buffer, reused.
            let mut buf = vec![0u8; len.min(PIECE as u64) as usize];
            let mut at = 0u64;
            while at < len {
                let n = (len - at).min(PIECE as u64) as usize;
                self.read_stored(at, &mut buf[..n])?;
                each(at, &buf[..n])?;
                at += n as u64;
            }
            return Ok(());
        }
        let mut at = 0u64;
        self.for_each_piece(PIECE, |piece| -> std::result::Result<(), Produce<E>> {
            each(at, piece).map_err(Produce::Sink)?;
            at += piece.len() as u64;
            Ok(())
        })
        .map_err(|e| match e {
            Produce::Load(e) => e.into(),
            Produce::Sink(e) => e,
        })
    }
}

/// Why producing a tensor's pieces stopped.
enum Produce<E> {
    Load(Error),
    Sink(E),
}

impl<E> From<Error> for Produce<E> {
    fn from(e: Error) -> Produce<E> {
        Produce::Load(e)
    }
}

/// A tensor's bytes in C order, little-endian ([`TorchTensor::data`]):
/// borrowed from the input, in a buffer of their own, or shared with the
/// other views of an inflated storage. Dereferences to the bytes.
pub struct TensorBytes<'a>(Repr<'a>);

enum Repr<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
    Inflated {
        inflated: Arc<Inflated>,
        segment: usize,
        range: Range<usize>,
    },
}

impl std::fmt::Debug for TensorBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.0 {
            Repr::Borrowed(_) => "borrowed",
            Repr::Owned(_) => "owned",
            Repr::Inflated { .. } => "inflated",
        };
        f.debug_struct("TensorBytes")
            .field("kind", &kind)
            .field("len", &self.len())
            .finish()
    }
}

impl std::ops::Deref for TensorBytes<'_> {
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

impl<'a> TensorBytes<'a> {
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
    ///
    /// # Errors
    ///
    /// The borrowed bytes themselves when they are borrowed from the input (the
    /// caller copies them if it needs them to outlive the checkpoint).
    pub fn detach(self) -> Result<TensorBytes<'static>, &'a [u8]> {
        match self.0 {
            Repr::Borrowed(b) => Err(b),
            Repr::Owned(v) => Ok(TensorBytes(Repr::Owned(v))),
            Repr::Inflated {
                inflated,
                segment,
                range,
            } => Ok(TensorBytes(Repr::Inflated {
                inflated,
                segment,
                range,
            })),
        }
    }
}
