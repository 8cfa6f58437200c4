//! A loaded checkpoint: container detection, storages, and tensors by name.
//!
//! Everything is read through a [`ByteSource`]: the zip directory and
//! records with positional reads, the pickles into buffers of bounded size,
//! the storages by range when a tensor is read. [`Checkpoint::open`] reads
//! the file with `pread` and never maps it, so a file truncated or changed
//! underneath is an error naming it, never a signal.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tensorfile_core::source::{ByteSource, FileSource, MappedFile};
use tensorfile_zip::{Method, ZipIndex};

use crate::error::{Error, Result};
use crate::flatten::{flatten, WalkLimits};
use crate::legacy::Legacy;
use crate::pickle::{Limits, Pickle};
use crate::rebuild::Rebuilder;
use crate::store::{
    io_error, view_span, zip_error, Deflated, InflateStats, Location, Storage, Store, TensorInfo,
};
use crate::tensor::TorchTensor;

/// Options for loading a checkpoint.
#[derive(Debug, Clone)]
#[non_exhaustive]
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

tensorfile_core::with_fields!(LoadOptions {
    with_key => key: Option<String>,
    with_name => name: Option<String>,
    with_limits => limits: Limits,
    with_walk => walk: WalkLimits,
    with_max_expanded_bytes => max_expanded_bytes: u64,
    with_max_expanded_total_bytes => max_expanded_total_bytes: u64,
    with_max_inflated_bytes => max_inflated_bytes: u64,
});

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

/// A PyTorch checkpoint, with its tensors indexed by name.
///
/// Nothing in the file is executed: the pickles are interpreted by a
/// restricted machine that only builds values. Tensor bytes are read from
/// the checkpoint's [`ByteSource`] when asked for.
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
    store: Store,
    format: Format,
    tensors: Vec<TensorInfo>,
    values: Vec<(String, String)>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("origin", &self.store.origin)
            .field("format", &self.format)
            .field("big_endian", &self.store.big_endian)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

/// The label that names a checkpoint held in memory in errors.
pub const IN_MEMORY: &str = "<checkpoint in memory>";

impl Checkpoint {
    /// Loads the checkpoint at `path` with default options, reading it with
    /// positional reads (see [`Checkpoint::open_with`]).
    ///
    /// # Errors
    ///
    /// As [`Checkpoint::open_with`].
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        Checkpoint::open_with(path, &LoadOptions::default())
    }

    /// Loads the checkpoint at `path`, reading it with positional reads
    /// ([`FileSource`]): the file is never mapped, so a file truncated or
    /// changed while it is read is an I/O error naming it, not a signal.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] naming `path` when it cannot be opened or read, and
    /// otherwise the errors of [`Checkpoint::from_source`].
    pub fn open_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Checkpoint> {
        let path = path.as_ref();
        let source = FileSource::open(path).map_err(|e| io_error(path, e))?;
        Checkpoint::from_source(source, path, options)
    }

    /// Loads the checkpoint at `path` from a read-only memory map
    /// ([`MappedFile`]): tensors stored as they are borrow from the map
    /// ([`TorchTensor::bytes`] gives `Cow::Borrowed`) instead of being
    /// read. **Not safe against the file being truncated by another
    /// process while mapped**: touching a page past the new end kills the
    /// process with `SIGBUS` (see [`tensorfile_core::source`]). Use
    /// [`Checkpoint::open_with`] for long reads of files others may change.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] naming `path` when it cannot be opened or mapped, and
    /// otherwise the errors of [`Checkpoint::from_source`].
    pub fn open_mapped(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Checkpoint> {
        let path = path.as_ref();
        let source = MappedFile::open(path).map_err(|e| io_error(path, e))?;
        Checkpoint::from_source(source, path, options)
    }

    /// Loads a checkpoint held in memory (errors name it [`IN_MEMORY`]).
    ///
    /// # Errors
    ///
    /// The errors of [`Checkpoint::from_source`].
    pub fn from_bytes(bytes: Vec<u8>, options: &LoadOptions) -> Result<Checkpoint> {
        Checkpoint::from_source(bytes, IN_MEMORY, options)
    }

    /// Loads a checkpoint from any byte source; `origin` (a path, or a
    /// label) names it in errors.
    ///
    /// # Errors
    ///
    /// [`Error::NotACheckpoint`] when the bytes are neither container,
    /// [`Error::Zip`], [`Error::Archive`] or [`Error::Legacy`] for a malformed
    /// container, [`Error::Pickle`] for a pickle it refuses,
    /// [`Error::Storage`], [`Error::Tensor`] or [`Error::Refused`] for a
    /// storage or tensor it cannot take, [`Error::Structure`] when the object
    /// tree cannot be named, [`Error::Budget`] past a limit in `options`, and
    /// [`Error::Io`] when a read fails.
    pub fn from_source(
        source: impl ByteSource + 'static,
        origin: impl Into<PathBuf>,
        options: &LoadOptions,
    ) -> Result<Checkpoint> {
        let origin = origin.into();
        let source: Box<dyn ByteSource> = Box::new(source);
        let head_len = source.len().min(512) as usize;
        let mut head = vec![0u8; head_len];
        source
            .read_exact_at(0, &mut head)
            .map_err(|e| io_error(&origin, e))?;
        let parts = match detect(&head)? {
            Kind::Zip => load_zip(&*source, &origin, options)?,
            Kind::Legacy => load_legacy(&*source, &origin, options)?,
        };
        Ok(Checkpoint {
            store: Store {
                source,
                origin,
                big_endian: parts.big_endian,
                storages: parts.storages,
                max_inflated: options.max_inflated_bytes,
                counters: Arc::default(),
            },
            format: parts.format,
            tensors: parts.tensors,
            values: parts.values,
        })
    }

    /// The file (or label) the checkpoint was loaded from.
    pub fn origin(&self) -> &Path {
        &self.store.origin
    }

    /// The container format.
    pub fn format(&self) -> &Format {
        &self.format
    }

    /// Whether the storages were written big-endian (they are byte-swapped
    /// on read).
    pub fn is_big_endian(&self) -> bool {
        self.store.big_endian
    }

    /// The tensors, sorted by name (byte order).
    pub fn tensors(&self) -> impl ExactSizeIterator<Item = TorchTensor<'_>> + '_ {
        self.tensors.iter().map(move |info| TorchTensor {
            store: &self.store,
            info,
        })
    }

    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<TorchTensor<'_>> {
        self.tensors
            .binary_search_by(|t| t.name.as_bytes().cmp(name.as_bytes()))
            .ok()
            .map(|i| TorchTensor {
                store: &self.store,
                info: &self.tensors[i],
            })
    }

    /// The tensor at `index` in [`Checkpoint::tensors`] order.
    pub fn tensor_at(&self, index: usize) -> Option<TorchTensor<'_>> {
        self.tensors.get(index).map(|info| TorchTensor {
            store: &self.store,
            info,
        })
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The number of storages the tensors view.
    pub fn storage_count(&self) -> usize {
        self.store.storages.len()
    }

    /// Non-tensor leaves (numbers, strings, `None`, ...) rendered as text,
    /// with their flattened names, in tree order.
    pub fn values(&self) -> &[(String, String)] {
        &self.values
    }

    /// What the deflated storages have cost so far: passes, bytes
    /// inflated, bytes held.
    pub fn inflate_stats(&self) -> InflateStats {
        self.store.inflate_stats()
    }

    /// Stops holding the inflated bytes of the storage with this
    /// [`TorchTensor::storage_index`] (a deflated record): they are freed
    /// once no [`TensorBytes`](crate::TensorBytes) uses them, and a later
    /// read inflates the record again. Does nothing for other storages.
    pub fn release_storage(&self, storage: usize) {
        self.store.release(storage);
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
///
/// # Errors
///
/// Any I/O error opening or reading the file's first bytes.
pub fn file_looks_like_pytorch(path: impl AsRef<Path>) -> std::io::Result<bool> {
    let source = FileSource::open(path)?;
    let mut head = vec![0u8; source.len().min(512) as usize];
    source.read_exact_at(0, &mut head)?;
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

/// A small record (`byteorder`) read whole.
const SMALL_RECORD: u64 = 64;

fn load_zip(source: &dyn ByteSource, origin: &Path, options: &LoadOptions) -> Result<Parts> {
    let zip = ZipIndex::read(source).map_err(|e| zip_error(origin, e))?;
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
        Some(e) if e.size > SMALL_RECORD => {
            return Err(Error::Archive(format!(
                "the byteorder record has {} bytes, expected \"little\" or \"big\"",
                e.size
            )))
        }
        Some(e) => match &*e
            .read(source, SMALL_RECORD)
            .map_err(|e| zip_error(origin, e))?
        {
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
    // The pickle is read into a buffer of its own, refused before it is
    // allocated when it is longer than the interpreter may read.
    let max_input = options.limits.max_input as u64;
    if pkl_entry.size > max_input {
        return Err(Error::Pickle {
            record: pkl_name,
            source: crate::pickle::PickleError {
                offset: 0,
                kind: crate::pickle::PickleErrorKind::Limit {
                    what: "the pickle's length",
                    limit: max_input,
                },
            },
        });
    }
    let pkl = pkl_entry
        .read(source, max_input)
        .map_err(|e| zip_error(origin, e))?;
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
    drop(pkl);
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
        let location = match entry.stored_range() {
            Some(range) => Location::Range(range),
            None => {
                debug_assert_eq!(entry.method, Method::Deflated);
                Location::Deflated(Box::new(Deflated {
                    entry: entry.clone(),
                    spans: Vec::new(),
                    held: Mutex::new(None),
                }))
            }
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
            if let Some(r) = view_span(t.offset, &t.shape, &t.strides, s.dtype.element_size()) {
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

fn load_legacy(source: &dyn ByteSource, origin: &Path, options: &LoadOptions) -> Result<Parts> {
    let legacy = Legacy::parse(source, origin, &options.limits)?;
    let (refs, tensors, values) = walk(&legacy.object, options)?;
    // Every storage's element size, from its persistent id, whether the
    // tensors kept use it or not (with --key, a subtree leaves some
    // unused): the raw data of each key must be skipped to find the next.
    let mut sizes = crate::rebuild::legacy_element_sizes(&legacy.object)?;
    for s in &refs {
        sizes.insert(s.key.clone(), s.dtype.element_size());
    }
    let ranges = legacy.locate(source, origin, |k| sizes.get(k).copied())?;
    let mut storages = Vec::with_capacity(refs.len());
    for s in refs {
        let range: Range<u64> = ranges.get(&s.key).cloned().ok_or_else(|| Error::Storage {
            key: s.key.clone(),
            problem: "the persistent id names it but it is not in the storage key list".into(),
        })?;
        if range.end - range.start != s.nbytes {
            return Err(Error::Storage {
                key: s.key.clone(),
                problem: format!(
                    "the persistent id says {} but the file holds {} B",
                    s.declared,
                    range.end - range.start
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
    let has_bare = flat.tensors.iter().any(|(n, _, _)| n.is_empty());
    let mut tensors = Vec::with_capacity(flat.tensors.len());
    let mut expanded = 0u64;
    for (mut name, spec_index, order) in flat.tensors {
        let spec = &rebuilder.specs[spec_index];
        // Views larger than their storage are materialized by whoever reads
        // them: count every name's, against the total budget.
        let elem = spec.dtype.element_size();
        let nbytes = tensorfile_core::dtype::numel(&spec.shape).and_then(|n| n.checked_mul(elem));
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
            order,
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
