//! Sets of tensors spread over files: a sharded checkpoint (an index and its
//! shards), or a single file, opened through one entry point.
//!
//! A sharded checkpoint is a directory holding `model.safetensors.index.json`,
//!
//! ```json
//! {"metadata": {"total_size": 123}, "weight_map": {"tensor name": "shard file"}}
//! ```
//!
//! and the shard files it names (`model-00001-of-00003.safetensors`, ...).
//! [`ShardedTensors::open`] takes an index, a directory holding one (or
//! holding a single `model.safetensors`), or a safetensors file, validates
//! the whole set by reading every shard's header, and then maps each shard
//! only when one of its tensors is first asked for.
//!
//! ```
//! # fn main() -> tensorfile_core::Result<()> {
//! use tensorfile_core::set::ShardedTensors;
//! # let dir = tempfile::tempdir().map_err(|e| tensorfile_core::Error::io("tempdir", e))?;
//! # let dir = dir.path();
//! # let data = vec![0u8; 32 * 32 * 4];
//! # let w = tensorfile_core::TensorRef { name: "bigram.weight", dtype: tensorfile_core::Dtype::F32, shape: &[32, 32], data: &data };
//! # tensorfile_core::save(dir.join("model.safetensors"), [w], None, &tensorfile_core::WriteOptions::default())?;
//! // A directory holding one `model.safetensors` (the course's bigram model).
//! let set = ShardedTensors::open(dir)?;
//! assert_eq!(set.shards().len(), 1);
//! assert_eq!(set.tensor("bigram.weight")?.shape(), &[32, 32]);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use std::sync::Arc;

use crate::error::{Error, ParseError, Result};
use crate::file::SafeTensors;
use crate::header::{Header, ReadOptions, TensorInfo};
use crate::json_object::JsonObject;
use crate::source::{ByteSource, FileSource, MappedFile};
use crate::view::TensorView;
use crate::writer::TensorData;
use crate::Metadata;

mod dcp;
mod load;
pub(crate) mod names;
mod staged;
mod write;

pub use crate::error::ShardError;
pub use dcp::DcpCheckpoint;
pub use load::{Loaded, Want};
pub use names::{DIFFUSERS_INDEX_NAME, DIFFUSERS_SINGLE_NAME, DIR_NAMES, INDEX_NAME, SINGLE_NAME};
pub use staged::{
    LocalStage, PartHead, PlanPart, SetStage, SetStep, StageLock, StagedPlan, StagedSet,
    STAGING_PREFIX,
};
pub use write::{merge, save_set, split, Sharding, SplitOptions, SplitSummary};

/// The largest index file read, in bytes: an index lists names only, so
/// even the largest hub models stay far below this.
pub const MAX_INDEX_LEN: u64 = 100_000_000;

/// A parsed index: its metadata and which shard holds each tensor.
///
/// [`ShardIndex::parse`] checks the JSON's shape and that each tensor is
/// listed once; [`ShardedTensors::open`] checks it against the shards.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShardIndex {
    /// The index's `metadata` object (`total_size` and anything else).
    pub metadata: JsonObject,
    /// Tensor name to shard file name, in ascending byte order of names.
    pub weight_map: BTreeMap<String, String>,
}

/// The top-level shape of an index.
#[derive(Deserialize)]
struct RawIndex {
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    weight_map: WeightMap,
}

/// A `weight_map` object that refuses duplicate tensor names (JSON maps
/// would otherwise keep the last one silently).
struct WeightMap(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for WeightMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(WeightMapVisitor)
    }
}

struct WeightMapVisitor;

impl<'de> Visitor<'de> for WeightMapVisitor {
    type Value = WeightMap;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of tensor names to shard file names")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WeightMap, A::Error> {
        let mut out = BTreeMap::new();
        while let Some((tensor, shard)) = map.next_entry::<String, String>()? {
            if let Some(first) = out.get(&tensor) {
                return Err(de::Error::custom(format!(
                    "weight_map lists tensor {tensor:?} twice (shards {first:?} and {shard:?})"
                )));
            }
            out.insert(tensor, shard);
        }
        Ok(WeightMap(out))
    }
}

/// What [`ShardIndex::to_json`] serializes: field order is key order.
#[derive(Serialize)]
struct IndexOut<'a> {
    metadata: &'a BTreeMap<String, Value>,
    weight_map: &'a BTreeMap<String, String>,
}

impl ShardIndex {
    /// The tensors the index maps to each shard, by shard name, after
    /// checking that it lists some and that every shard name passes
    /// `name_problem` (which says what is wrong with a name). Names are
    /// checked before any shard is opened. `index` is the index's path,
    /// for the error.
    #[doc(hidden)]
    pub fn by_shard(
        &self,
        index: &Path,
        name_problem: impl Fn(&str) -> Option<&'static str>,
    ) -> std::result::Result<BTreeMap<&str, Vec<&str>>, ShardError> {
        if self.weight_map.is_empty() {
            return Err(ShardError::BadIndex {
                index: index.to_path_buf(),
                problem: "weight_map lists no tensors".into(),
            });
        }
        let mut by_shard: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (tensor, shard) in &self.weight_map {
            if let Some(problem) = name_problem(shard) {
                return Err(ShardError::BadShardName {
                    tensor: tensor.clone(),
                    shard: shard.clone(),
                    problem,
                });
            }
            by_shard.entry(shard).or_default().push(tensor);
        }
        Ok(by_shard)
    }

    /// An index for shards holding `total_size` data bytes.
    pub fn new(total_size: u64, weight_map: BTreeMap<String, String>) -> ShardIndex {
        let mut metadata = JsonObject::new();
        metadata.insert_u64("total_size", total_size);
        ShardIndex {
            metadata,
            weight_map,
        }
    }

    /// Parses an index's text.
    ///
    /// # Errors
    /// [`ParseError`] saying what is wrong.
    pub fn parse(text: &[u8]) -> Result<ShardIndex, ParseError> {
        let raw: RawIndex =
            serde_json::from_slice(text).map_err(|e| ParseError::new(e.to_string()))?;
        Ok(ShardIndex {
            metadata: JsonObject::from_map(raw.metadata.unwrap_or_default()),
            weight_map: raw.weight_map.0,
        })
    }

    /// Reads and parses an index file (at most [`MAX_INDEX_LEN`] bytes).
    ///
    /// # Errors
    /// The file cannot be read, is too long, or is not an index.
    pub fn read(path: impl AsRef<Path>) -> Result<ShardIndex> {
        let path = path.as_ref();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        ShardIndex::read_from(&LocalDir::new(parent_as_given(path), false), &name)
    }

    /// Reads and parses the index file `file` at `location`.
    ///
    /// # Errors
    /// As [`ShardIndex::read`].
    pub fn read_from(location: &dyn Location, file: &str) -> Result<ShardIndex> {
        let path = location.path_of(file);
        let bad = |problem: String| ShardError::BadIndex {
            index: path.clone(),
            problem,
        };
        let source = location.open(file).map_err(|e| Error::io(&path, e))?;
        let len = source.len();
        if len > MAX_INDEX_LEN {
            return Err(bad(format!("longer than {MAX_INDEX_LEN} bytes")).into());
        }
        let mut text = vec![0u8; len as usize];
        source
            .read_exact_at(0, &mut text)
            .map_err(|e| Error::io(&path, e))?;
        Ok(ShardIndex::parse(&text).map_err(|e| bad(e.message().to_string()))?)
    }

    /// `metadata.total_size`: `Ok(None)` when absent.
    ///
    /// # Errors
    ///
    /// [`ShardError::BadTotalSize`], with the value found, when it is not a
    /// non-negative integer.
    pub fn total_size(&self) -> Result<Option<u64>, ShardError> {
        match self.metadata.as_map().get("total_size") {
            None => Ok(None),
            Some(v) => match (v.as_u64(), v.as_f64()) {
                (Some(n), _) => Ok(Some(n)),
                // Some writers store it as a float; accept whole values.
                (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64 => {
                    Ok(Some(f as u64))
                }
                _ => Err(ShardError::BadTotalSize {
                    found: v.to_string(),
                }),
            },
        }
    }

    /// The index's text exactly as Python's `json.dumps(index, indent=2,
    /// sort_keys=True)` writes it (what huggingface_hub saves), plus a
    /// newline: two-space indentation, `": "` between key and value, keys
    /// in code point order, and every character outside printable ASCII
    /// escaped as `\uXXXX` (surrogate pairs above U+FFFF).
    pub fn to_json(&self) -> String {
        // BTreeMaps sort by UTF-8 bytes, which is code point order: Python's.
        let metadata: BTreeMap<String, Value> = self
            .metadata
            .as_map()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let out = IndexOut {
            metadata: &metadata,
            weight_map: &self.weight_map,
        };
        // serde_json's pretty printer matches Python's indent=2 layout and
        // escapes control characters the same way; only ensure_ascii differs.
        let pretty = serde_json::to_string_pretty(&out).unwrap_or_default();
        let mut text = ensure_ascii(&pretty);
        text.push('\n');
        text
    }
}

/// Python's `ensure_ascii`: escapes DEL and every non-ASCII character. In
/// JSON text these occur only inside strings, where an escape means the same.
fn ensure_ascii(json: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if (c as u32) < 0x7f {
            out.push(c);
            continue;
        }
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            let _ = write!(out, "\\u{unit:04x}");
        }
    }
    out
}

/// Why a shard name is refused, if it is.
fn shard_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("the name is empty")
    } else if name.starts_with('/') || name.starts_with('\\') || Path::new(name).is_absolute() {
        Some("an absolute path")
    } else if name.contains('/') || name.contains('\\') {
        Some("a path with directories (a shard must sit beside its index)")
    } else if name == "." || name == ".." {
        Some("a directory reference")
    } else if name.contains('\0') {
        Some("the name holds a NUL byte")
    } else if !name.ends_with(".safetensors") || name == ".safetensors" {
        Some("the name must end in .safetensors")
    } else {
        None
    }
}

/// Where a set's files are: a local directory here, an object store or a
/// web server in other layers. A set reads its index and its shards'
/// headers through it, and the shards' bytes on demand.
pub trait Location: Send + Sync + fmt::Debug {
    /// The full name of a file of the set, for messages and results (a
    /// path, or a URL).
    fn path_of(&self, file: &str) -> PathBuf;

    /// Opens a file of the set for positional reads.
    ///
    /// # Errors
    /// `NotFound` when there is no such file; other I/O errors as they are.
    fn open(&self, file: &str) -> std::io::Result<Box<dyn ByteSource>>;

    /// The file's bytes in memory (a memory map), for zero-copy views, when
    /// this location can lend them; `None` when it reads only.
    fn lend(&self, _file: &str) -> Option<std::io::Result<MappedFile>> {
        None
    }
}

/// A local directory. With `map`, shards are memory-mapped on first use and
/// their tensors borrowed (zero-copy, but not safe against a file truncated
/// underneath); without it, every byte is read with positional reads.
#[derive(Debug, Clone)]
pub struct LocalDir {
    dir: PathBuf,
    map: bool,
}

impl LocalDir {
    /// The directory `dir`, mapping shards (`map`) or reading them.
    pub fn new(dir: impl Into<PathBuf>, map: bool) -> LocalDir {
        LocalDir {
            dir: dir.into(),
            map,
        }
    }
}

impl Location for LocalDir {
    fn path_of(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
    fn open(&self, file: &str) -> std::io::Result<Box<dyn ByteSource>> {
        Ok(Box::new(FileSource::open(self.dir.join(file))?))
    }
    fn lend(&self, file: &str) -> Option<std::io::Result<MappedFile>> {
        self.map.then(|| MappedFile::open(self.dir.join(file)))
    }
}

/// One file of a set: its validated header and its byte source; its bytes
/// are lent (mapped) on first use where the set's location lends them.
pub struct Shard {
    name: String,
    file: SafeTensors<Box<dyn ByteSource>>,
    location: Arc<dyn Location>,
    lent: OnceLock<Option<MappedFile>>,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("name", &self.name)
            .field("path", &self.file.path())
            .field("tensors", &self.file.header().len())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

impl Shard {
    /// Opens a shard and reads and validates its header (the data is not read).
    fn read(name: &str, location: &Arc<dyn Location>, options: &ReadOptions) -> Result<Shard> {
        let path = location.path_of(name);
        let source = location.open(name).map_err(|e| Error::io(&path, e))?;
        let file = SafeTensors::from_source(source, options)
            .map_err(|e| e.at(&path))?
            .named(path);
        Ok(Shard {
            name: name.to_string(),
            file,
            location: location.clone(),
            lent: OnceLock::new(),
        })
    }

    /// The shard's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its full path (or URL).
    pub fn path(&self) -> &Path {
        self.file.path().unwrap_or(Path::new(""))
    }

    /// Its header, read when the set was opened.
    pub fn header(&self) -> &Header {
        self.file.header()
    }

    /// The shard as a file read on demand (positional reads, or the
    /// location's own requests).
    pub fn file(&self) -> &SafeTensors<Box<dyn ByteSource>> {
        &self.file
    }

    /// Whether the file has been mapped yet.
    pub fn is_mapped(&self) -> bool {
        self.lent.get().is_some_and(Option::is_some)
    }

    /// The whole file in memory, mapped on the first call; `Ok(None)` when
    /// the location does not lend.
    fn lent(&self) -> Result<Option<&[u8]>> {
        if let Some(lent) = self.lent.get() {
            return Ok(lent.as_deref());
        }
        let map = match self.location.lend(&self.name) {
            None => None,
            Some(map) => Some(map.map_err(|e| Error::io(self.path(), e))?),
        };
        let header = self.file.header();
        if let Some(m) = &map {
            if ByteSource::len(m) != header.data_start() + header.data_len() {
                let changed = std::io::Error::other("the file changed since its header was read");
                return Err(Error::io(self.path(), changed));
            }
        }
        // Another thread may have won the race; either map is the same file.
        Ok(self.lent.get_or_init(|| map).as_deref())
    }

    /// The tensor's bytes borrowed from the shard's map, when it is mapped
    /// or can be.
    fn lend(&self, info: &TensorInfo<'_>) -> Result<Option<&[u8]>> {
        let start = self.file.header().data_start();
        Ok(self.lent()?.and_then(|all| {
            all.get((start + info.data_offsets.0) as usize..(start + info.data_offsets.1) as usize)
        }))
    }
}

/// One tensor of a set, as [`TensorData`]: borrowed from its shard's map
/// when the set maps, else read on demand.
#[derive(Clone, Copy)]
pub struct SetTensor<'a> {
    shard: &'a Shard,
    info: TensorInfo<'a>,
}

impl fmt::Debug for SetTensor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetTensor")
            .field("shard", &self.shard.name)
            .field("info", &self.info)
            .finish()
    }
}

impl<'a> SetTensor<'a> {
    /// The shard holding it.
    pub fn shard(&self) -> &'a Shard {
        self.shard
    }

    /// The header's description of it.
    pub fn info(&self) -> TensorInfo<'a> {
        self.info
    }

    /// Its name (as [`TensorData::name`], which is ambiguous on a tensor
    /// that implements it for every error).
    pub fn name(&self) -> &'a str {
        self.info.name
    }

    /// Its element type.
    pub fn dtype(&self) -> crate::Dtype {
        self.info.dtype
    }

    /// Its dimensions.
    pub fn shape(&self) -> &'a [u64] {
        self.info.shape
    }
}

impl<E: From<crate::Error>> TensorData<E> for SetTensor<'_> {
    fn name(&self) -> &str {
        self.info.name
    }
    fn dtype(&self) -> crate::Dtype {
        self.info.dtype
    }
    fn shape(&self) -> &[u64] {
        self.info.shape
    }
    fn byte_len(&self) -> u64 {
        self.info.nbytes()
    }
    fn bytes(&self) -> Option<&[u8]> {
        // A map that fails is not an error here: the bytes are then read.
        self.shard.lend(&self.info).ok().flatten()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), E> {
        Ok(self.shard.file.read_at(&self.info, offset, buf)?)
    }
}

/// A validated set of tensors in one or more files.
///
/// Opened from an index (a sharded checkpoint), a directory, or a single
/// safetensors file (a set of one shard without an index). Every shard's
/// header is read and checked against the index when the set is opened;
/// a shard's data is memory-mapped when one of its tensors is first asked
/// for.
#[derive(Debug)]
pub struct ShardedTensors {
    dir: PathBuf,
    location: Arc<dyn Location>,
    index_path: Option<PathBuf>,
    index_metadata: Option<JsonObject>,
    /// In ascending byte order of file names.
    shards: Vec<Shard>,
    /// Tensor name to shard position; empty with a single shard, whose
    /// header answers lookups itself.
    lookup: BTreeMap<String, u32>,
    warnings: Vec<String>,
}

impl ShardedTensors {
    /// Opens an index, a directory (holding an index or `model.safetensors`),
    /// or a single safetensors file, and validates the whole set. Shards are
    /// memory-mapped on first use (see [`LocalDir`]).
    ///
    /// # Errors
    /// The index or a shard cannot be read or breaks the format, or they
    /// disagree ([`ShardError`]).
    pub fn open(path: impl AsRef<Path>) -> Result<ShardedTensors> {
        ShardedTensors::open_with(path, &ReadOptions::default())
    }

    /// [`ShardedTensors::open`] with options, which apply to every shard.
    ///
    /// # Errors
    /// As [`ShardedTensors::open`].
    pub fn open_with(path: impl AsRef<Path>, options: &ReadOptions) -> Result<ShardedTensors> {
        ShardedTensors::open_local(path.as_ref(), options, true)
    }

    /// [`ShardedTensors::open_with`], reading every byte with positional
    /// reads, never mapping: safe against a file truncated underneath (a
    /// read then fails with an error naming the file).
    ///
    /// # Errors
    /// As [`ShardedTensors::open`].
    pub fn open_pread(path: impl AsRef<Path>, options: &ReadOptions) -> Result<ShardedTensors> {
        ShardedTensors::open_local(path.as_ref(), options, false)
    }

    fn open_local(path: &Path, options: &ReadOptions, map: bool) -> Result<ShardedTensors> {
        if path.is_dir() {
            let location = Arc::new(LocalDir::new(path, map));
            for (index, single) in DIR_NAMES {
                let found = (path.join(index).is_file(), path.join(single).is_file());
                let file = match found {
                    (true, true) => {
                        return ShardedTensors::open_agreeing(
                            location, path, index, single, options,
                        )
                    }
                    (true, false) => index,
                    (false, true) => single,
                    (false, false) => continue,
                };
                return ShardedTensors::open_at(location, path.to_path_buf(), file, options);
            }
            return Err(ShardError::NoWeights { dir: path.into() }.into());
        }
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The files are opened (and named in errors) as given: `x`, not
        // `./x`; the set's directory is reported as `.`.
        ShardedTensors::open_at(
            Arc::new(LocalDir::new(parent_as_given(path), map)),
            parent_dir(path),
            &file,
            options,
        )
    }

    /// A directory holding both an index and the single file, as mlx-lm
    /// writes them: accepted when the index lists exactly the file's
    /// tensors, all in that file; otherwise the conflict names both (and
    /// says that transformers loads the single file).
    fn open_agreeing(
        location: Arc<dyn Location>,
        dir: &Path,
        index: &str,
        single: &str,
        options: &ReadOptions,
    ) -> Result<ShardedTensors> {
        let conflict = |problem: String| -> Error {
            ShardError::Ambiguous {
                dir: dir.into(),
                single: single.into(),
                index: index.into(),
                problem,
            }
            .into()
        };
        let set = ShardedTensors::open_at(location, dir.to_path_buf(), index, options)
            .map_err(|e| conflict(format!("the index does not open: {e}")))?;
        let names: Vec<&str> = set.shards.iter().map(|s| s.name.as_str()).collect();
        if names != [single] {
            return Err(conflict(format!(
                "the index maps tensors to {}",
                names.join(", ")
            )));
        }
        // Opening checked that the index and the file hold the same tensors.
        Ok(set)
    }

    /// Opens the set whose entry file (an index ending in `.json`, or a
    /// single safetensors file) is `file` at `location`; `dir` is how the
    /// set's directory is reported. The shards' headers are read
    /// concurrently.
    ///
    /// # Errors
    /// As [`ShardedTensors::open`].
    pub fn open_at(
        location: Arc<dyn Location>,
        dir: PathBuf,
        file: &str,
        options: &ReadOptions,
    ) -> Result<ShardedTensors> {
        if file.ends_with(".json") {
            ShardedTensors::open_index(location, dir, file, options)
        } else {
            ShardedTensors::open_single(location, dir, file, options)
        }
    }

    fn open_single(
        location: Arc<dyn Location>,
        dir: PathBuf,
        name: &str,
        options: &ReadOptions,
    ) -> Result<ShardedTensors> {
        let shard = Shard::read(name, &location, options)?;
        let warnings = shard.header().warnings().to_vec();
        Ok(ShardedTensors {
            dir,
            location,
            index_path: None,
            index_metadata: None,
            shards: vec![shard],
            lookup: BTreeMap::new(),
            warnings,
        })
    }

    fn open_index(
        location: Arc<dyn Location>,
        dir: PathBuf,
        index_name: &str,
        options: &ReadOptions,
    ) -> Result<ShardedTensors> {
        let path = location.path_of(index_name);
        let index = ShardIndex::read_from(&*location, index_name)?;
        let by_shard = index.by_shard(&path, shard_name_problem)?;
        // Every shard's header, at once (remote shards cost a request each).
        let wanted: Vec<(&str, &Vec<&str>)> = by_shard.iter().map(|(&n, t)| (n, t)).collect();
        // In the library's own pool, never rayon's global one.
        let read: Vec<Result<Shard>> = crate::parallel::install(|| {
            use rayon::prelude::*;
            wanted
                .par_iter()
                .map(|&(name, _)| Shard::read(name, &location, options))
                .collect()
        });
        let mut shards = Vec::with_capacity(by_shard.len());
        for ((name, tensors), result) in wanted.into_iter().zip(read) {
            match result {
                Ok(shard) => shards.push(shard),
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    return Err(ShardError::MissingShard {
                        shard: name.into(),
                        tensor: tensors.first().map(|t| t.to_string()).unwrap_or_default(),
                        dir,
                    }
                    .into())
                }
                // Kept as is, so that "unsupported" stays distinct from
                // "malformed" whichever way a set is opened.
                Err(e) if matches!(e.detail(), Error::UnsupportedFormat { .. }) => return Err(e),
                Err(e) => {
                    return Err(ShardError::InvalidShard {
                        shard: name.into(),
                        source: Box::new(e),
                    }
                    .into())
                }
            }
        }
        let position = |name: &str| shards.iter().position(|s| s.name == name);
        // Every tensor of the map is in its shard...
        for (tensor, shard) in &index.weight_map {
            let holds = |s: &Shard| s.header().get(tensor).is_some();
            if position(shard).is_some_and(|i| holds(&shards[i])) {
                continue;
            }
            return Err(ShardError::NotInShard {
                tensor: tensor.clone(),
                shard: shard.clone(),
                found_in: shards.iter().find(|s| holds(s)).map(|s| s.name.clone()),
            }
            .into());
        }
        // ...and every tensor of a shard is in the map, mapped to it.
        let mut data_len = 0u64;
        let mut warnings = Vec::new();
        for shard in &shards {
            for t in shard.header().tensors() {
                match index.weight_map.get(t.name) {
                    None => {
                        return Err(ShardError::NotInMap {
                            tensor: t.name.into(),
                            shard: shard.name.clone(),
                        }
                        .into())
                    }
                    Some(mapped) if *mapped != shard.name => {
                        return Err(ShardError::InTwoShards {
                            tensor: t.name.into(),
                            first: mapped.clone(),
                            second: shard.name.clone(),
                        }
                        .into())
                    }
                    Some(_) => {}
                }
            }
            data_len = data_len.saturating_add(shard.header().data_len());
            warnings.extend(
                shard
                    .header()
                    .warnings()
                    .iter()
                    .map(|w| format!("shard {:?}: {w}", shard.name)),
            );
        }
        // Hub indexes are not always exact, so a wrong total is a warning.
        match index.total_size() {
            Ok(Some(total)) if total != data_len => warnings.push(format!(
                "the index's total_size is {total}, but the shards hold {data_len} data bytes"
            )),
            Ok(_) => {}
            Err(e) => warnings.push(e.to_string()),
        }
        let lookup = index
            .weight_map
            .into_iter()
            .map(|(tensor, shard)| {
                let i = position(&shard).unwrap_or(0) as u32;
                (tensor, i)
            })
            .collect();
        Ok(ShardedTensors {
            dir,
            location,
            index_path: Some(path),
            index_metadata: Some(index.metadata),
            shards,
            lookup,
            warnings,
        })
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index file, when the set was opened from one.
    pub fn index_path(&self) -> Option<&Path> {
        self.index_path.as_deref()
    }

    /// Whether the set comes from an index (even one with a single shard).
    pub fn is_indexed(&self) -> bool {
        self.index_path.is_some()
    }

    /// The index's `metadata` object, when the set has an index.
    pub fn index_metadata(&self) -> Option<&JsonObject> {
        self.index_metadata.as_ref()
    }

    /// The shards, in ascending byte order of their file names.
    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// Things accepted with a warning: a `total_size` disagreeing with the
    /// data, and the shards' own header warnings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Number of tensors across all shards.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.header().len()).sum()
    }

    /// Whether the set holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data bytes across all shards (what an index's `total_size` counts).
    pub fn data_len(&self) -> u64 {
        self.shards
            .iter()
            .fold(0u64, |n, s| n.saturating_add(s.header().data_len()))
    }

    /// The file bytes across all shards, headers included.
    pub fn file_len(&self) -> u64 {
        self.shards.iter().fold(0u64, |n, s| {
            n.saturating_add(s.header().data_start() + s.header().data_len())
        })
    }

    /// The number of elements across all tensors.
    pub fn parameters(&self) -> u128 {
        self.infos().map(|(_, t)| u128::from(t.numel())).sum()
    }

    /// The shard holding a tensor.
    pub fn shard_of(&self, name: &str) -> Option<&Shard> {
        match self.shards.as_slice() {
            [single] => single.header().get(name).map(|_| single),
            shards => shards.get(*self.lookup.get(name)? as usize),
        }
    }

    /// A tensor's description, from its shard's header (no data mapped).
    pub fn info(&self, name: &str) -> Option<TensorInfo<'_>> {
        self.shard_of(name)?.header().get(name)
    }

    /// The tensor of that name and its shard.
    fn find(&self, name: &str) -> Result<(&Shard, TensorInfo<'_>)> {
        let shard = self
            .shard_of(name)
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        let info = shard.file.info(name)?;
        Ok((shard, info))
    }

    /// The tensor of that name, borrowed from its shard's map (mapped on
    /// first use).
    ///
    /// # Errors
    /// No such tensor; a map that fails; a set opened for reads only
    /// ([`ShardedTensors::open_pread`], remote sets), whose tensors are
    /// read with [`ShardedTensors::read_tensor`] instead.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let (shard, info) = self.find(name)?;
        match shard.lend(&info)? {
            Some(bytes) => Ok(TensorView::from_parts(info, bytes)?),
            None => Err(Error::Stream(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!(
                    "tensor {name:?}: {} is read, not mapped: use read_tensor",
                    shard.path().display()
                ),
            ))),
        }
    }

    /// The bytes of the tensor of that name: borrowed when its shard is
    /// mapped, else read.
    ///
    /// # Errors
    /// No such tensor, or a read that fails (naming the shard).
    pub fn read_tensor(&self, name: &str) -> Result<std::borrow::Cow<'_, [u8]>> {
        let (shard, info) = self.find(name)?;
        if let Some(bytes) = shard.lend(&info)? {
            return Ok(std::borrow::Cow::Borrowed(bytes));
        }
        shard.file.read_tensor(&info)
    }

    /// A slice of the tensor of that name, reading only the bytes it covers.
    ///
    /// # Errors
    /// No such tensor, arguments that do not fit its shape, or a failed read.
    pub fn read_slice(&self, name: &str, args: &[crate::SliceArg]) -> Result<Vec<u8>> {
        let (shard, info) = self.find(name)?;
        shard.file.read_slice(&crate::TensorSlice::new(info, args)?)
    }

    /// Every tensor as [`TensorData`], shard by shard, each in data order:
    /// what the writer and the transforms take.
    pub fn tensor_data(&self) -> Vec<SetTensor<'_>> {
        self.infos()
            .map(|(shard, info)| SetTensor { shard, info })
            .collect()
    }

    /// Where the set's files are.
    pub fn location(&self) -> &Arc<dyn Location> {
        &self.location
    }

    /// The one file, when the set is a single file without an index (what
    /// opening a safetensors file gives): its header and metadata whole,
    /// embedded digests ([`crate::TENSOR_SHA256_KEY`]) included, which
    /// [`ShardedTensors::metadata`] leaves out. Its bytes are read on
    /// demand (positional reads, or the location's own requests); `None`
    /// for a set of several files or with an index.
    pub fn into_file(mut self) -> Option<SafeTensors<Box<dyn ByteSource>>> {
        if self.index_path.is_some() || self.shards.len() != 1 {
            return None;
        }
        self.shards.pop().map(|shard| shard.file)
    }

    /// Every tensor's description with its shard: shard by shard, each in
    /// data order.
    pub fn infos(&self) -> impl Iterator<Item = (&Shard, TensorInfo<'_>)> + '_ {
        self.shards
            .iter()
            .flat_map(|s| s.header().tensors().map(move |t| (s, t)))
    }

    /// The union of the shards' metadata. A key with two different values
    /// is an error naming both shards. Embedded per-tensor digests
    /// ([`crate::TENSOR_SHA256_KEY`]) are each file's own, of its
    /// own bytes: they are left out (what is written from the set has
    /// other bytes, and gets its own with `--embed-hash`).
    ///
    /// # Errors
    ///
    /// [`ShardError::MetadataConflict`] when two shards give one key different
    /// values.
    pub fn metadata(&self) -> Result<Metadata, ShardError> {
        let mut union: BTreeMap<String, (String, &str)> = BTreeMap::new();
        for shard in &self.shards {
            for (key, value) in shard.header().metadata().into_iter().flatten() {
                if key == crate::TENSOR_SHA256_KEY {
                    continue;
                }
                match union.get(key) {
                    Some((first, first_shard)) if first != value => {
                        return Err(ShardError::MetadataConflict {
                            key: key.clone(),
                            first: first.clone(),
                            first_shard: first_shard.to_string(),
                            second: value.clone(),
                            second_shard: shard.name.clone(),
                        })
                    }
                    Some(_) => {}
                    None => {
                        union.insert(key.clone(), (value.clone(), &shard.name));
                    }
                }
            }
        }
        Ok(union.into_iter().map(|(k, (v, _))| (k, v)).collect())
    }
}

/// The directory a file is in (`.` for a bare file name), to report.
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The directory a file is in as it was given (empty for a bare file
/// name), to join names to: `x` stays `x`, where `.` would make it `./x`.
fn parent_as_given(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_as_given() {
        for (given, named) in [
            ("x.safetensors", "x.safetensors"),
            ("d/x.safetensors", "d/x.safetensors"),
            ("./x.safetensors", "./x.safetensors"),
        ] {
            let path = Path::new(given);
            let location = LocalDir::new(parent_as_given(path), false);
            let name = path.file_name().unwrap().to_str().unwrap();
            assert_eq!(location.path_of(name), Path::new(named));
        }
        assert_eq!(parent_dir(Path::new("x.safetensors")), Path::new("."));
    }

    #[test]
    fn shard_names() {
        assert_eq!(shard_name_problem("model-00001-of-00002.safetensors"), None);
        for bad in [
            "",
            "../x.safetensors",
            "/abs/x.safetensors",
            "sub/x.safetensors",
            "x.bin",
            ".safetensors",
            "..",
            "a\\b.safetensors",
        ] {
            assert!(shard_name_problem(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn ascii_escaping_matches_python() {
        // json.dumps("é😀\x7f", ensure_ascii=True) == '"\\u00e9\\ud83d\\ude00\\u007f"'
        assert_eq!(
            ensure_ascii("\"é😀\u{7f}\""),
            "\"\\u00e9\\ud83d\\ude00\\u007f\""
        );
    }

    #[test]
    fn index_text_matches_python_layout() {
        let map = BTreeMap::from([
            (
                "b".to_string(),
                "model-00002-of-00002.safetensors".to_string(),
            ),
            (
                "a\n".to_string(),
                "model-00001-of-00002.safetensors".to_string(),
            ),
        ]);
        let text = ShardIndex::new(24, map).to_json();
        // What json.dumps(index, indent=2, sort_keys=True) + "\n" gives.
        let python = "{\n  \"metadata\": {\n    \"total_size\": 24\n  },\n  \"weight_map\": {\n    \"a\\n\": \"model-00001-of-00002.safetensors\",\n    \"b\": \"model-00002-of-00002.safetensors\"\n  }\n}\n";
        assert_eq!(text, python);
        let back = ShardIndex::parse(text.as_bytes()).unwrap();
        assert_eq!(back.total_size().unwrap(), Some(24));
    }

    #[test]
    fn duplicate_tensor_in_weight_map_is_refused() {
        let text = br#"{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}"#;
        let err = ShardIndex::parse(text).unwrap_err();
        assert!(err.message().contains("twice"), "{err}");
    }
}
