//! An open file, set, file object or buffer: what `safe_open` wraps.
//!
//! Headers are read and validated with plain reads (never through a map).
//! With the `mmap` backend each tensor asked for is a private copy-on-write
//! map of its own byte range ([`PrivateMap`]): zero-copy, writeable, and
//! independent of every other tensor handed out (as the reference's copies
//! are), freed when its last array goes. Tensors smaller than
//! [`MAP_AT_LEAST`] are read instead: a copy that small costs less than a
//! map, and files of many small tensors stay under the system's limit on
//! maps. With `pread` every tensor is read into memory of its own, so
//! nothing done to the file later can hurt it. A remote file or set
//! (`s3://`, `http(s)://`, `hf://`) is read as `pread` reads: each tensor
//! with range requests of exactly its bytes, into memory of its own.
//!
//! Whole loads (`load_file`, `load`, `get_tensors` where nothing is mapped)
//! and prefetches go through the library's read plans
//! ([`tensorfile_core::read`]): parallel positional reads (range requests
//! for a URL) on the library's pool, each tensor into memory allocated for
//! it alone, so that dropping every tensor but one frees the others.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tensorfile::cast::{cast_tensor, CastOptions};
use tensorfile::InputKind as Kind;
use tensorfile::{
    ByteSource, Dtype, FileSource, Metadata, ReadOptions, SafeTensors, SliceArg, TensorInfo,
};
use tensorfile_core::read::{ReadPlan, ReadStats, TensorBytes};
use tensorfile_core::set::Want;
use tensorfile_core::{PrivateMap, ShardedTensors, TensorSlice};
use tensorfile_remote::Client;

use crate::buffer::Buffer;
use crate::errors;
use crate::pyfile::PyFile;
use crate::remote;

/// Tensors of fewer bytes are read rather than mapped (see the module
/// documentation).
const MAP_AT_LEAST: u64 = 64 * 1024;

/// How tensor bytes are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// Private copy-on-write maps of each tensor's range.
    Mmap,
    /// Positional reads into memory of each tensor's own.
    Pread,
}

impl Backend {
    fn parse(name: &str) -> PyResult<Backend> {
        match name {
            "mmap" => Ok(Backend::Mmap),
            "pread" => Ok(Backend::Pread),
            other => Err(errors::msg(format!(
                "backend {other:?} is not supported: use \"mmap\" (the default) or \"pread\""
            ))),
        }
    }
}

/// What is open.
pub(crate) enum Source {
    /// One safetensors file, its header read with positional reads; with
    /// `map`, large tensors are mapped from it.
    File {
        file: SafeTensors<FileSource>,
        map: bool,
    },
    /// A Python file object without a descriptor, read through its methods.
    Stream(SafeTensors<PyFile>),
    /// A file's bytes held in memory.
    Bytes(SafeTensors),
    /// One remote safetensors file (its header read with one range request
    /// when it fits in 64 KiB).
    Remote(Box<SafeTensors<Box<dyn ByteSource>>>),
    /// A sharded set or a model directory, local or remote; with `map`, each
    /// local shard's file is kept open (in `files`, in the order of the
    /// shards) to map from (none for a remote set: its tensors are read).
    Set {
        set: ShardedTensors,
        files: Vec<File>,
    },
}

/// Rank plans and cooperative loads read any source.
impl tensorfile_core::ranks::ReadTensor for Source {
    fn read_tensor_into(
        &self,
        name: &str,
        slice: Option<&[SliceArg]>,
        out: &mut [u8],
    ) -> tensorfile_core::Result<()> {
        match self {
            Source::File { file, .. } => file.read_tensor_into(name, slice, out),
            Source::Stream(s) => s.read_tensor_into(name, slice, out),
            Source::Bytes(s) => s.read_tensor_into(name, slice, out),
            Source::Remote(s) => s.read_tensor_into(name, slice, out),
            Source::Set { set, .. } => set.read_tensor_into(name, slice, out),
        }
    }

    fn read_data_at(&self, name: &str, start: u64, out: &mut [u8]) -> tensorfile_core::Result<()> {
        match self {
            Source::File { file, .. } => file.read_data_at(name, start, out),
            Source::Stream(s) => s.read_data_at(name, start, out),
            Source::Bytes(s) => s.read_data_at(name, start, out),
            Source::Remote(s) => s.read_data_at(name, start, out),
            Source::Set { set, .. } => set.read_data_at(name, start, out),
        }
    }

    fn read_data_ranges(
        &self,
        name: &str,
        ranges: &mut [(u64, &mut [u8])],
    ) -> tensorfile_core::Result<()> {
        match self {
            Source::File { file, .. } => file.read_data_ranges(name, ranges),
            Source::Stream(s) => s.read_data_ranges(name, ranges),
            Source::Bytes(s) => s.read_data_ranges(name, ranges),
            Source::Remote(s) => s.read_data_ranges(name, ranges),
            Source::Set { set, .. } => set.read_data_ranges(name, ranges),
        }
    }
}

/// A tensor's bytes in a buffer of their own: a private map of `file`'s
/// range when one is given and the tensor is large enough, else (or when
/// the system refuses the map, as past its limit on the number of maps)
/// read with `read`.
fn map_or_read(
    file: Option<&File>,
    at: u64,
    info: &TensorInfo<'_>,
    read: impl FnOnce() -> tensorfile::Result<Vec<u8>>,
) -> tensorfile::Result<Buffer> {
    let len = info.nbytes();
    if let (Some(file), true) = (file, len >= MAP_AT_LEAST) {
        match PrivateMap::map(file, at, len as usize) {
            Ok(map) => return Ok(Buffer::mapped(map, info.dtype, info.shape)),
            // A file that became shorter: say so rather than read.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(tensorfile::Error::from(e))
            }
            Err(_) => {}
        }
    }
    Ok(Buffer::owned(read()?, info.dtype, info.shape))
}

/// A single file's tensor bytes (borrowed when held in memory, else read).
fn read_single<S: ByteSource>(
    file: &SafeTensors<S>,
    name: &str,
) -> tensorfile::Result<Cow<'static, [u8]>> {
    let info = file.info(name)?;
    Ok(Cow::Owned(file.read_tensor(&info)?.into_owned()))
}

/// A tensor of one file read into memory of its own, as a buffer.
fn owned_buffer<S: ByteSource>(file: &SafeTensors<S>, name: &str) -> tensorfile::Result<Buffer> {
    let info = file.info(name)?;
    let bytes = file.read_tensor(&info)?.into_owned();
    Ok(Buffer::owned(bytes, info.dtype, info.shape))
}

impl Source {
    /// Opens `path`; a URL's reads get `timeout` (see [`remote::client`]).
    fn open(
        path: &Path,
        backend: Backend,
        timeout: Option<Duration>,
    ) -> tensorfile::Result<Source> {
        if let Some(url) = remote::url(path) {
            return Source::open_remote(url, &remote::client(timeout));
        }
        let meta = std::fs::metadata(path).map_err(|e| tensorfile::Error::io(path, e))?;
        let is_json = path.extension().is_some_and(|e| e == "json");
        if meta.is_dir() || is_json {
            return Source::open_set(path, backend);
        }
        let opened = FileSource::open(path)
            .map_err(|e| tensorfile_core::Error::io(path, e))
            .and_then(|source| SafeTensors::from_source(source, &ReadOptions::default()));
        match opened {
            Ok(file) => Ok(Source::File {
                file,
                map: backend == Backend::Mmap,
            }),
            Err(err) => {
                // A file of another kind is named as such, not as a broken rule.
                if err.rule().is_some() {
                    if let Ok(kind) = tensorfile::probe(path).map(|p| p.kind()) {
                        if !kind.is_safetensors() {
                            return Err(not_safetensors(path, kind));
                        }
                    }
                }
                Err(err.into())
            }
        }
    }

    /// A remote file or set (only headers are read now), whichever the URL
    /// names (see `tensorfile::probe`), read through `client`.
    fn open_remote(url: &str, client: &Arc<Client>) -> tensorfile::Result<Source> {
        let read = ReadOptions::default();
        match tensorfile::probe(url)?.kind() {
            Kind::SafetensorsSet => Ok(Source::Set {
                set: tensorfile::open_set(
                    url,
                    &tensorfile::OpenOptions::default()
                        .with_read(read)
                        .with_client(client.clone()),
                )?,
                files: Vec::new(),
            }),
            _ => Ok(Source::Remote(Box::new(remote::single_file(
                url, client, &read,
            )?))),
        }
    }

    fn open_set(path: &Path, backend: Backend) -> tensorfile::Result<Source> {
        let kind = tensorfile::probe(path)?.kind();
        if !kind.is_safetensors() {
            return Err(not_safetensors(path, kind));
        }
        let set = ShardedTensors::open_pread(path, &Default::default())?;
        let mut files = Vec::new();
        if backend == Backend::Mmap {
            for shard in set.shards() {
                let file =
                    File::open(shard.path()).map_err(|e| tensorfile::Error::io(shard.path(), e))?;
                files.push(file);
            }
        }
        Ok(Source::Set { set, files })
    }

    /// Every tensor's description, in data order (shard by shard for a set).
    pub(crate) fn infos(&self) -> Vec<TensorInfo<'_>> {
        match self {
            Source::File { file, .. } => file.header().tensors().collect(),
            Source::Stream(f) => f.header().tensors().collect(),
            Source::Bytes(f) => f.header().tensors().collect(),
            Source::Remote(f) => f.header().tensors().collect(),
            Source::Set { set, .. } => set.infos().map(|(_, info)| info).collect(),
        }
    }

    fn info(&self, name: &str) -> tensorfile::Result<TensorInfo<'_>> {
        let found = match self {
            Source::File { file, .. } => file.header().get(name),
            Source::Stream(f) => f.header().get(name),
            Source::Bytes(f) => f.header().get(name),
            Source::Remote(f) => f.header().get(name),
            Source::Set { set, .. } => set.info(name),
        };
        found.ok_or_else(|| tensorfile::Error::not_found(name))
    }

    fn metadata(&self) -> tensorfile::Result<Option<Metadata>> {
        Ok(match self {
            Source::File { file, .. } => file.metadata().cloned(),
            Source::Stream(f) => f.metadata().cloned(),
            Source::Bytes(f) => f.metadata().cloned(),
            Source::Remote(f) => f.metadata().cloned(),
            Source::Set { set, .. } => {
                let union = set.metadata().map_err(tensorfile::Error::from)?;
                let any = set.shards().iter().any(|s| s.header().metadata().is_some());
                any.then_some(union)
            }
        })
    }

    /// The tensor's bytes as a buffer (see the module documentation).
    fn get(&self, name: &str) -> tensorfile::Result<Buffer> {
        match self {
            Source::File { file, map } => {
                let info = file.info(name)?;
                let at = file.header().data_start() + info.data_offsets.0;
                let fd = map.then(|| file.source().file());
                map_or_read(fd, at, &info, || Ok(file.read_tensor(&info)?.into_owned()))
            }
            Source::Stream(f) => owned_buffer(f, name),
            Source::Bytes(f) => owned_buffer(f, name),
            Source::Remote(f) => owned_buffer(f.as_ref(), name),
            Source::Set { set, files } => {
                let info = self.info(name)?;
                let shard = set
                    .shard_of(name)
                    .ok_or_else(|| tensorfile::Error::not_found(name))?;
                let at = shard.header().data_start() + info.data_offsets.0;
                let fd = set
                    .shards()
                    .iter()
                    .position(|s| std::ptr::eq(s, shard))
                    .and_then(|i| files.get(i));
                map_or_read(fd, at, &info, || Ok(set.read_tensor(name)?.into_owned()))
            }
        }
    }

    /// The tensor's bytes, whatever the source lends or reads.
    fn bytes(&self, name: &str) -> tensorfile::Result<Cow<'_, [u8]>> {
        match self {
            Source::File { file, .. } => read_single(file, name),
            Source::Stream(f) => read_single(f, name),
            Source::Bytes(f) => Ok(f.read_tensor(&f.info(name)?)?),
            Source::Remote(f) => read_single(f.as_ref(), name),
            Source::Set { set, .. } => Ok(set.read_tensor(name)?),
        }
    }

    /// A slice, reading only the bytes it covers.
    fn slice(&self, name: &str, args: &[SliceArg]) -> tensorfile::Result<Buffer> {
        let info = self.info(name)?;
        let plan = TensorSlice::new(info, args)?;
        let bytes = match self {
            Source::File { file, .. } => file.read_slice(&plan)?,
            Source::Stream(f) => f.read_slice(&plan)?,
            Source::Bytes(f) => f.read_slice(&plan)?,
            Source::Remote(f) => f.read_slice(&plan)?,
            Source::Set { set, .. } => set.read_slice(name, args)?,
        };
        Ok(Buffer::owned(bytes, info.dtype, plan.shape()))
    }

    /// Reads `plan` (see [`tensorfile_core::read`]), handing each tensor
    /// to `f` as it completes, in read order.
    fn read_plan(
        &self,
        plan: &ReadPlan,
        f: impl FnMut(TensorBytes) -> tensorfile_core::Result<()>,
    ) -> tensorfile::Result<ReadStats> {
        Ok(match self {
            Source::File { file, .. } => file.read_plan(plan, f)?,
            Source::Stream(s) => s.read_plan(plan, f)?,
            Source::Bytes(s) => s.read_plan(plan, f)?,
            Source::Remote(s) => s.read_plan(plan, f)?,
            Source::Set { set, .. } => set.read_plan(plan, f)?,
        })
    }

    /// Reads a tensor, or a slice of it, into `out` (exactly its bytes),
    /// split across the library's pool.
    fn read_into(
        &self,
        name: &str,
        slice: Option<&[SliceArg]>,
        out: &mut [u8],
    ) -> tensorfile::Result<()> {
        match self {
            Source::File { file, .. } => file.read_into(name, slice, out)?,
            Source::Stream(s) => s.read_into(name, slice, out)?,
            Source::Bytes(s) => s.read_into(name, slice, out)?,
            Source::Remote(s) => s.read_into(name, slice, out)?,
            Source::Set { set, .. } => set.read_into(name, slice, out)?,
        }
        Ok(())
    }

    /// Whether tensors are handed out as private maps of the file (the
    /// `mmap` backend, local): then nothing needs reading up front.
    fn maps(&self) -> bool {
        match self {
            Source::File { map, .. } => *map,
            Source::Set { files, .. } => !files.is_empty(),
            _ => false,
        }
    }

    /// The length in bytes of what is open (the sum of the shards' for a set).
    fn len(&self) -> u64 {
        match self {
            Source::File { file, .. } => ByteSource::len(file.source()),
            Source::Stream(f) => ByteSource::len(f.source()),
            Source::Bytes(f) => f.as_bytes().len() as u64,
            Source::Remote(f) => ByteSource::len(f.source()),
            Source::Set { set, .. } => set.file_len(),
        }
    }
}

/// The error for an input that is not safetensors.
fn not_safetensors(path: &Path, kind: Kind) -> tensorfile::Error {
    let hint = match kind {
        Kind::Pytorch | Kind::PytorchSet => {
            ": read its tensors with tensorfile.load_pytorch, or convert it with tensorfile.convert"
        }
        _ => "",
    };
    let e = std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("is {kind}, not safetensors{hint}"),
    );
    tensorfile::Error::io(path, e)
}

/// A dtype named as the header names it or in either case (`"bf16"`).
pub fn parse_dtype(name: &str) -> PyResult<Dtype> {
    Dtype::from_name_ignore_case(name).ok_or_else(|| errors::msg(format!("unknown dtype {name:?}")))
}

/// An open safetensors file, sharded set, file object or buffer, usable
/// from several threads at once. `close()` ends it; any array handed out
/// lives on.
#[pyclass(frozen, module = "tensorfile._native")]
pub struct Handle {
    source: RwLock<Option<Arc<Source>>>,
    path: Option<PathBuf>,
}

impl Handle {
    fn new_open(source: Source, path: Option<PathBuf>) -> Handle {
        Handle {
            source: RwLock::new(Some(Arc::new(source))),
            path,
        }
    }

    /// The path (or URL) opened, when there is one: errors name it.
    pub(crate) fn opened(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub(crate) fn source(&self) -> PyResult<Arc<Source>> {
        let guard = self
            .source
            .read()
            .map_err(|_| errors::msg("the handle's lock was poisoned"))?;
        guard.clone().ok_or_else(|| errors::msg("File is closed"))
    }
}

/// One slice argument from Python: an index, or `(start, stop, step)`,
/// already checked against the shape by the Python layer (which words the
/// errors as the reference does).
#[derive(FromPyObject)]
pub enum PySliceArg {
    /// One position.
    Index(i64),
    /// A range.
    Range(Option<i64>, Option<i64>, u64),
}

/// Slice arguments from Python as the library takes them.
fn slice_args(args: Vec<PySliceArg>) -> Vec<SliceArg> {
    args.into_iter()
        .map(|a| match a {
            PySliceArg::Index(i) => SliceArg::Index(i),
            PySliceArg::Range(start, stop, step) => SliceArg::Range { start, stop, step },
        })
        .collect()
}

/// Reads `plan` from `source`: `(name, buffer)` in read order, and what the
/// reads did.
fn read_by_name(
    source: &Source,
    plan: &ReadPlan,
) -> tensorfile::Result<(Vec<(String, Buffer)>, ReadStats)> {
    let mut read = Vec::new();
    let stats = source.read_plan(plan, |t| {
        read.push((t.name.clone(), Buffer::read(t)));
        Ok(())
    })?;
    Ok((read, stats))
}

#[pymethods]
impl Handle {
    /// Opens a safetensors file, an index or a model directory (its header
    /// or headers read and validated, nothing else) with the `mmap` or
    /// `pread` backend. A URL's reads, on opening and through the handle
    /// later, end within `timeout` seconds of opening.
    #[new]
    #[pyo3(signature = (path, backend = "mmap", timeout = None))]
    fn new(py: Python<'_>, path: PathBuf, backend: &str, timeout: Option<f64>) -> PyResult<Handle> {
        let backend = Backend::parse(backend)?;
        let timeout = remote::timeout(timeout)?;
        let source = py
            .detach(|| Source::open(&path, backend, timeout))
            .map_err(errors::error)?;
        Ok(Handle::new_open(source, Some(path)))
    }

    /// Opens a file held in memory (the bytes are copied once).
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Handle> {
        let bytes = data.to_vec();
        let file = py
            .detach(|| {
                SafeTensors::from_source(
                    tensorfile_core::file::Backing::Owned(bytes),
                    &ReadOptions::default(),
                )
            })
            .map_err(|e| errors::error(e.into()))?;
        Ok(Handle::new_open(Source::Bytes(file), None))
    }

    /// Opens the file behind an open file descriptor (duplicated: the
    /// caller's descriptor stays the caller's), named `name` in errors.
    #[cfg(unix)]
    #[staticmethod]
    #[pyo3(signature = (fd, name, backend = "mmap"))]
    fn from_fd(py: Python<'_>, fd: i32, name: PathBuf, backend: &str) -> PyResult<Handle> {
        use std::os::fd::BorrowedFd;
        let backend = Backend::parse(backend)?;
        if fd < 0 {
            return Err(errors::msg(format!("invalid file descriptor {fd}")));
        }
        // SAFETY: the descriptor is the caller's open file object's, alive
        // for this call; it is only duplicated here.
        let owned = unsafe { BorrowedFd::borrow_raw(fd) }
            .try_clone_to_owned()
            .map_err(|e| errors::error(tensorfile::Error::io(&name, e)))?;
        let file = py
            .detach(|| {
                let source = FileSource::from_file(File::from(owned), &name)
                    .map_err(|e| tensorfile_core::Error::io(&name, e))?;
                SafeTensors::from_source(source, &ReadOptions::default())
            })
            .map_err(|e| errors::error(e.into()))?;
        let source = Source::File {
            file,
            map: backend == Backend::Mmap,
        };
        Ok(Handle::new_open(source, Some(name)))
    }

    /// Opens a binary Python file object through its `seek` and `read`
    /// methods, fetching only the header now and each tensor when asked.
    #[staticmethod]
    fn from_file_object(py: Python<'_>, file: Py<PyAny>, name: PathBuf) -> PyResult<Handle> {
        let source = PyFile::new(py, file)?;
        let file = py
            .detach(|| {
                SafeTensors::from_source(source, &ReadOptions::default())
                    .map(|f| f.named(&name))
                    .map_err(|e| e.at(&name))
            })
            .map_err(|e| errors::error(e.into()))?;
        Ok(Handle::new_open(Source::Stream(file), Some(name)))
    }

    /// Ends the handle: later calls raise `SafetensorError`.
    fn close(&self) -> PyResult<()> {
        let mut guard = self
            .source
            .write()
            .map_err(|_| errors::msg("the handle's lock was poisoned"))?;
        *guard = None;
        Ok(())
    }

    /// Whether the handle is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.source.read().map(|g| g.is_none()).unwrap_or(true)
    }

    /// The path opened, if any.
    #[getter]
    fn path(&self) -> Option<String> {
        self.path.as_ref().map(|p| p.display().to_string())
    }

    /// Whether a set (an index or a directory) is open.
    #[getter]
    fn is_set(&self) -> PyResult<bool> {
        Ok(matches!(*self.source()?, Source::Set { .. }))
    }

    /// The tensor names in ascending order.
    fn keys(&self) -> PyResult<Vec<String>> {
        let source = self.source()?;
        let mut names: Vec<&str> = source.infos().into_iter().map(|i| i.name).collect();
        names.sort_unstable();
        Ok(names.into_iter().map(str::to_string).collect())
    }

    /// The tensor names in the order of their bytes (shard by shard).
    fn offset_keys(&self) -> PyResult<Vec<String>> {
        let source = self.source()?;
        let mut infos = source.infos();
        if !matches!(*source, Source::Set { .. }) {
            infos.sort_by_key(|i| i.data_offsets);
        }
        Ok(infos.into_iter().map(|i| i.name.to_string()).collect())
    }

    /// The metadata, or `None` when the file has none.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let source = self.source()?;
        let Some(map) = source.metadata().map_err(errors::error)? else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        for (k, v) in map {
            d.set_item(k, v)?;
        }
        Ok(Some(d))
    }

    /// The tensor's dtype (as the header names it) and shape.
    fn info(&self, name: &str) -> PyResult<(&'static str, Vec<u64>)> {
        let source = self.source()?;
        let info = source.info(name).map_err(errors::error)?;
        Ok((info.dtype.name(), info.shape.to_vec()))
    }

    /// Every tensor's name, dtype and shape, in data order.
    fn infos(&self) -> PyResult<Vec<(String, &'static str, Vec<u64>)>> {
        let source = self.source()?;
        Ok(source
            .infos()
            .into_iter()
            .map(|i| (i.name.to_string(), i.dtype.name(), i.shape.to_vec()))
            .collect())
    }

    /// The tensor's bytes as a buffer: a private map with `mmap` (for
    /// tensors of 64 KiB or more), memory of its own otherwise.
    fn get(&self, py: Python<'_>, name: &str) -> PyResult<Buffer> {
        let source = self.source()?;
        py.detach(|| source.get(name)).map_err(errors::error)
    }

    /// Several tensors' buffers, with the interpreter released once: maps
    /// where `get` maps (the `mmap` backend), else read with one read plan
    /// (parallel reads, each tensor into memory of its own).
    fn get_many(&self, py: Python<'_>, names: Vec<String>) -> PyResult<Vec<Buffer>> {
        let source = self.source()?;
        py.detach(|| -> tensorfile::Result<Vec<Buffer>> {
            if source.maps() {
                return names.iter().map(|n| source.get(n)).collect();
            }
            let unique: HashSet<&str> = names.iter().map(String::as_str).collect();
            let plan = ReadPlan::of(unique.into_iter().map(Want::tensor));
            let (read, _) = read_by_name(&source, &plan)?;
            let mut read: HashMap<String, Buffer> = read.into_iter().collect();
            // A name asked for twice is read again for the second (each
            // buffer is handed out once).
            names
                .iter()
                .map(|n| read.remove(n).map_or_else(|| source.get(n), Ok))
                .collect()
        })
        .map_err(errors::error)
    }

    /// Reads tensors, or one slice of each (`wants`: `(name, args)`, the
    /// arguments as `slice` takes them, or `None` for the whole tensor;
    /// every tensor whole without `wants`), with one read plan: parallel
    /// positional reads (range requests for a URL) on the library's pool,
    /// the interpreter released, each tensor into memory allocated for it
    /// alone. Returns `(name, buffer)` in read order (shard by shard, each
    /// in offset order) and what the reads did (`tensors`, `reads`,
    /// `bytes_read`, `peak_held`). A name given twice is an error (a
    /// caller wanting two slices of one tensor makes two plans).
    #[pyo3(signature = (wants = None))]
    #[allow(clippy::type_complexity)]
    fn read_plan<'py>(
        &self,
        py: Python<'py>,
        wants: Option<Vec<(String, Option<Vec<PySliceArg>>)>>,
    ) -> PyResult<(Vec<(String, Buffer)>, Bound<'py, PyDict>)> {
        let plan = match wants {
            None => ReadPlan::all(),
            Some(wants) => {
                let mut seen = HashSet::new();
                let mut list = Vec::with_capacity(wants.len());
                for (name, args) in wants {
                    if !seen.insert(name.clone()) {
                        return Err(errors::msg(format!(
                            "read_plan: tensor {name:?} is asked for twice; read its slices with one plan each"
                        )));
                    }
                    list.push(Want {
                        name,
                        slice: args.map(slice_args),
                    });
                }
                ReadPlan::of(list)
            }
        };
        let source = self.source()?;
        let (read, stats) = py
            .detach(|| read_by_name(&source, &plan))
            .map_err(errors::error)?;
        let counts = PyDict::new(py);
        counts.set_item("tensors", stats.tensors)?;
        counts.set_item("reads", stats.reads)?;
        counts.set_item("bytes_read", stats.bytes_read)?;
        counts.set_item("peak_held", stats.peak_held)?;
        Ok((read, counts))
    }

    /// Reads the tensor `name`, or a slice of it (`args` as `slice` takes
    /// them), into the `length` bytes at `address`, which must be exactly
    /// its bytes (C order); one read split across the library's pool, the
    /// interpreter released.
    ///
    /// The caller (tensorfile's Python layer, never users) keeps `length`
    /// writable bytes at `address` alive, and touches them not, until this
    /// returns: the address of an array it holds, checked writable and
    /// C-contiguous.
    #[pyo3(signature = (name, args, address, length))]
    fn read_into(
        &self,
        py: Python<'_>,
        name: &str,
        args: Option<Vec<PySliceArg>>,
        address: usize,
        length: usize,
    ) -> PyResult<()> {
        if address == 0 && length > 0 {
            return Err(errors::msg(format!(
                "read_into: tensor {name:?}: no memory at address 0 for {length} bytes"
            )));
        }
        let args = args.map(slice_args);
        let source = self.source()?;
        py.detach(|| {
            let ptr = if length == 0 {
                std::ptr::NonNull::<u8>::dangling().as_ptr()
            } else {
                address as *mut u8
            };
            // SAFETY: `length` writable bytes at `address`, alive and
            // untouched by anyone else during this call (see above); a
            // dangling, aligned pointer for no bytes.
            let out = unsafe { std::slice::from_raw_parts_mut(ptr, length) };
            source.read_into(name, args.as_deref(), out)
        })
        .map_err(errors::error)
    }

    /// The tensor cast to `dtype` (a float dtype; integers with
    /// `allow_int`), in memory of its own; a tensor already of that dtype
    /// comes as `get` gives it. With `strict`, a value the cast changes
    /// beyond rounding (overflow, NaN, saturation, flush to zero) is an error.
    #[pyo3(signature = (name, dtype, saturate = false, allow_int = false, strict = false))]
    fn get_cast(
        &self,
        py: Python<'_>,
        name: &str,
        dtype: &str,
        saturate: bool,
        allow_int: bool,
        strict: bool,
    ) -> PyResult<Buffer> {
        let to = parse_dtype(dtype)?;
        let source = self.source()?;
        let opts = CastOptions::default()
            .with_saturate(saturate)
            .with_allow_int(allow_int)
            .with_strict(strict);
        py.detach(|| -> tensorfile::Result<Buffer> {
            let info = source.info(name)?;
            if info.dtype == to {
                return source.get(name);
            }
            let bytes = source.bytes(name)?;
            let out = cast_tensor(name, info.dtype, info.shape, &bytes, to, opts)?;
            Ok(Buffer::owned(out, to, info.shape))
        })
        .map_err(errors::error)
    }

    /// A slice of the tensor (one argument per leading dimension, each an
    /// index or `(start, stop, step)` within bounds), reading only the
    /// bytes it covers, into memory of its own.
    fn slice(&self, py: Python<'_>, name: &str, args: Vec<PySliceArg>) -> PyResult<Buffer> {
        let args = slice_args(args);
        let source = self.source()?;
        py.detach(|| source.slice(name, &args))
            .map_err(errors::error)
    }

    /// The number of tensors.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.source()?.infos().len())
    }

    /// Whether a tensor of that name is there.
    fn __contains__(&self, name: &str) -> PyResult<bool> {
        Ok(self.source()?.info(name).is_ok())
    }

    /// The length in bytes of what is open (the sum of the shards' for a set).
    #[getter]
    fn nbytes(&self) -> PyResult<u64> {
        Ok(self.source()?.len())
    }
}

/// Tensors of a whole file, each read into memory allocated for it alone
/// with a read plan (parallel positional reads on the library's pool, or
/// parallel range requests for a URL; huge pages from 2 MiB where they help), as `(name,
/// buffer)` in ascending order of names. Per tensor, not one allocation for
/// the file: dropping every tensor but one frees the others. Nothing done
/// to the file later affects them. A URL's reads end within `timeout`
/// seconds.
#[pyfunction]
#[pyo3(signature = (path, timeout = None))]
pub fn load_file(
    py: Python<'_>,
    path: PathBuf,
    timeout: Option<f64>,
) -> PyResult<Vec<(String, Buffer)>> {
    let timeout = remote::timeout(timeout)?;
    py.detach(|| -> tensorfile::Result<Vec<(String, Buffer)>> {
        let source = match remote::url(&path) {
            Some(url) => Source::Remote(Box::new(remote::single_file(
                url,
                &remote::client(timeout),
                &ReadOptions::default(),
            )?)),
            None => Source::File {
                file: FileSource::open(&path)
                    .map_err(|e| tensorfile_core::Error::io(&path, e))
                    .and_then(|s| SafeTensors::from_source(s, &ReadOptions::default()))?,
                map: false,
            },
        };
        load_all(&source)
    })
    .map_err(errors::error)
}

/// Every tensor of `source`, read with one plan, in ascending order of names.
fn load_all(source: &Source) -> tensorfile::Result<Vec<(String, Buffer)>> {
    let (mut read, _) = read_by_name(source, &ReadPlan::all())?;
    read.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(read)
}

/// Tensors of a file held in `data`, as `(name, buffer)` in ascending order
/// of names: each copied once, straight from `data`, into memory allocated
/// for it alone (as `load_file` reads them).
#[pyfunction]
pub fn load_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Vec<(String, Buffer)>> {
    py.detach(|| -> tensorfile::Result<Vec<(String, Buffer)>> {
        let file = SafeTensors::from_source(data, &ReadOptions::default())?;
        let mut read = Vec::new();
        file.read_plan(&ReadPlan::all(), |t| {
            read.push((t.name.clone(), Buffer::read(t)));
            Ok(())
        })?;
        read.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(read)
    })
    .map_err(errors::error)
}
