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

use std::borrow::Cow;
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
use tensorfile_core::{PrivateMap, ShardedTensors, TensorSlice};
use tensorfile_remote::Client;

use crate::buffer::{Buffer, Memory};
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
enum Source {
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
    fn infos(&self) -> Vec<TensorInfo<'_>> {
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

    fn source(&self) -> PyResult<Arc<Source>> {
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

    /// Several tensors' buffers, with the interpreter released once.
    fn get_many(&self, py: Python<'_>, names: Vec<String>) -> PyResult<Vec<Buffer>> {
        let source = self.source()?;
        py.detach(|| {
            names
                .iter()
                .map(|n| source.get(n))
                .collect::<tensorfile::Result<Vec<_>>>()
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
        let args: Vec<SliceArg> = args
            .into_iter()
            .map(|a| match a {
                PySliceArg::Index(i) => SliceArg::Index(i),
                PySliceArg::Range(start, stop, step) => SliceArg::Range { start, stop, step },
            })
            .collect();
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

/// Tensors of a whole file read into memory at once (huge pages where the
/// system grants them, several threads for large files), as `(name,
/// buffer)` in ascending order of names. Every buffer views the one
/// allocation, which lives while any of them does; nothing done to the file
/// later affects them. A URL's reads end within `timeout` seconds.
#[pyfunction]
#[pyo3(signature = (path, timeout = None))]
pub fn load_file(
    py: Python<'_>,
    path: PathBuf,
    timeout: Option<f64>,
) -> PyResult<Vec<(String, Buffer)>> {
    let timeout = remote::timeout(timeout)?;
    if let Some(url) = remote::url(&path) {
        return py
            .detach(|| load_remote(url, &remote::client(timeout)))
            .map(buffers_of)
            .map_err(errors::error);
    }
    let file = py
        .detach(|| {
            SafeTensors::open_with(
                &path,
                &ReadOptions::default().backend(tensorfile::Backend::Load),
            )
        })
        .map_err(|e| errors::error(e.into()))?;
    Ok(buffers_of(file))
}

/// A remote file read whole into memory: its header first (validated
/// before anything else is asked for), then the rest with parallel range
/// requests, validated again as bytes of the process's own.
fn load_remote(url: &str, client: &Arc<Client>) -> tensorfile::Result<SafeTensors> {
    let file = remote::single_file(url, client, &ReadOptions::default())?;
    let too_big = |e: std::io::Error| remote::io_error(url, e);
    let len = usize::try_from(ByteSource::len(file.source())).map_err(|_| {
        too_big(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            "is larger than this machine's address space",
        ))
    })?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len)
        .map_err(|e| too_big(std::io::Error::new(std::io::ErrorKind::OutOfMemory, e)))?;
    bytes.resize(len, 0);
    file.source()
        .read_exact_at(0, &mut bytes)
        .map_err(|e| remote::io_error(url, e))?;
    let name = file
        .path()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| tensorfile_remote::public_name(url).into());
    SafeTensors::from_source(
        tensorfile_core::file::Backing::Owned(bytes),
        &ReadOptions::default(),
    )
    .map_err(|e| tensorfile::Error::from(e.at(name)))
}

/// Tensors of a file held in `data` (copied once into memory of their own),
/// as `(name, buffer)` in ascending order of names.
#[pyfunction]
pub fn load_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Vec<(String, Buffer)>> {
    let bytes = data.to_vec();
    let file = py
        .detach(|| {
            SafeTensors::from_source(
                tensorfile_core::file::Backing::Owned(bytes),
                &ReadOptions::default(),
            )
        })
        .map_err(|e| errors::error(e.into()))?;
    Ok(buffers_of(file))
}

/// Buffers over each tensor of a file held in memory of the process's own.
fn buffers_of(mut file: SafeTensors) -> Vec<(String, Buffer)> {
    let base: *mut u8 = match file.source_mut() {
        tensorfile_core::file::Backing::Loaded(l) => l.as_mut_slice().as_mut_ptr(),
        tensorfile_core::file::Backing::Owned(v) => v.as_mut_ptr(),
        // Not made here (load and from_bytes own their bytes); a map would
        // be read-only, so its tensors are copied.
        tensorfile_core::file::Backing::Mapped(_) => std::ptr::null_mut(),
    };
    let data_start = file.header().data_start() as usize;
    let described: Vec<(String, Dtype, Vec<u64>, usize, usize)> = file
        .header()
        .tensors_by_name()
        .into_iter()
        .map(|i| {
            (
                i.name.to_string(),
                i.dtype,
                i.shape.to_vec(),
                data_start + i.data_offsets.0 as usize,
                i.nbytes() as usize,
            )
        })
        .collect();
    let file = Arc::new(file);
    described
        .into_iter()
        .map(|(name, dtype, shape, at, len)| {
            let buffer = if base.is_null() {
                Buffer::owned(file.as_bytes()[at..at + len].to_vec(), dtype, &shape)
            } else if len == 0 {
                Buffer::owned(Vec::new(), dtype, &shape)
            } else {
                // In bounds: rule 5 checked that the tensors tile the data.
                let ptr = base.wrapping_add(at);
                Buffer::new(Memory::Loaded(file.clone()), ptr, len, dtype, &shape)
            };
            (name, buffer)
        })
        .collect()
}
