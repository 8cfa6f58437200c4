//! `inspect`: what a safetensors file or set, a PyTorch checkpoint or a
//! GGUF file holds. The report is one of four descriptions
//! ([`FileDescription`], [`SetDescription`], [`CheckpointDescription`],
//! `GgufDescription` with the `gguf` feature, and the entries they hold):
//! the one schema `inspect --json` prints and the Python package's
//! `inspect` returns. `docs/commands/inspect.md` lists every key.
//!
//! Each struct's fields are declared in ascending byte order of their names,
//! the order the keys are printed in (the order a JSON object's keys had
//! when these descriptions were built as `serde_json` values, which the
//! CLI's and Python's tests compare against); `to_json` writes them so.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tensorfile::model::{read_config_from, CONFIG_NAME, TOKENIZER_NAME};
#[cfg(feature = "pytorch")]
use tensorfile::pytorch::{Checkpoint, Format};
use tensorfile::quant::{int4_group, quantized_weights, QuantConfig};
use tensorfile::set::ShardedTensors;
use tensorfile::{
    Dtype, FileSource, Header, InputKind, JsonObject, Metadata, OpenOptions, Progress, Result,
    SafeTensors, TensorInfo,
};
use tensorfile_core::set::{LocalDir, Location};

#[cfg(feature = "gguf")]
mod gguf;
#[cfg(feature = "gguf")]
pub use gguf::{GgufDescription, GgufMetadataEntry, GgufTensorEntry, GgufTypeTotals};

/// What `inspect` is asked: the input and whether to hash its tensors.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct InspectRequest {
    /// A safetensors file, a set (a model directory or an index), or a
    /// PyTorch checkpoint; a safetensors file or set may be an `s3://`,
    /// `hf://` or `http(s)://` URL, read with range requests (the headers
    /// only, unless hashing).
    pub path: PathBuf,
    /// Add each tensor's sha256 (reads every byte).
    pub hash: bool,
    /// How the input is opened: the PyTorch loader's budgets
    /// ([`OpenOptions::pytorch`]), the client URLs are read through, the
    /// header limits. Local files are always read with positional reads
    /// (a file truncated underneath is an error, not a signal).
    #[serde(skip)]
    pub open: OpenOptions,
}

impl InspectRequest {
    /// A request to describe `path`, without hashes, opened the default way.
    pub fn new(path: impl Into<PathBuf>) -> InspectRequest {
        InspectRequest {
            path: path.into(),
            ..InspectRequest::default()
        }
    }

    /// Sets [`InspectRequest::hash`].
    #[must_use]
    pub fn with_hash(mut self, hash: bool) -> Self {
        self.hash = hash;
        self
    }

    /// Sets [`InspectRequest::open`].
    #[must_use]
    pub fn with_open(mut self, open: OpenOptions) -> Self {
        self.open = open;
        self
    }
}

/// What `inspect` found: one of four descriptions, as the input is. It
/// serializes as the description alone (what `inspect --json` prints);
/// the rest is for a front end's text.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum InspectReport {
    /// A safetensors file.
    File(FileDescription),
    /// A safetensors set (a model directory or an index).
    Set {
        /// What `--json` prints.
        description: SetDescription,
        /// The union of the shards' metadata, or why there is none (two
        /// shards disagree).
        metadata: std::result::Result<Metadata, String>,
    },
    /// A PyTorch checkpoint.
    Checkpoint {
        /// What `--json` prints.
        description: CheckpointDescription,
        /// The non-tensor values in the checkpoint's order (the
        /// description's map holds the last of a repeated name).
        values: Vec<(String, String)>,
        /// Whether each tensor (in the description's order) is a
        /// contiguous view of its storage (its strides are then not worth
        /// showing).
        contiguous: Vec<bool>,
    },
    /// A GGUF file.
    #[cfg(feature = "gguf")]
    Gguf {
        /// What `--json` prints.
        description: GgufDescription,
        /// The parsed header, for a front end's text (values shown its
        /// own way).
        header: tensorfile::gguf::GgufHeader,
    },
}

impl Serialize for InspectReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            InspectReport::File(d) => d.serialize(s),
            InspectReport::Set { description, .. } => description.serialize(s),
            InspectReport::Checkpoint { description, .. } => description.serialize(s),
            #[cfg(feature = "gguf")]
            InspectReport::Gguf { description, .. } => description.serialize(s),
        }
    }
}

impl InspectReport {
    /// Compact JSON text, as `inspect --json` prints it.
    pub fn to_json(&self) -> String {
        to_json(self)
    }
}

/// Describes the input of `request`: a safetensors file or set, a
/// PyTorch checkpoint or a GGUF file. With `request.hash`, every tensor's bytes are read
/// and counted on `progress` (its total told first).
///
/// # Errors
///
/// An input that cannot be read or is invalid, one of another kind (GGUF,
/// npz, ...: named for what it is), or a failed read while hashing.
pub fn inspect(request: &InspectRequest, progress: &dyn Progress) -> Result<InspectReport> {
    let path = request.path.as_path();
    let probed = tensorfile::probe(path)?;
    // Read, not mapped: hashing reads every byte, and a file truncated
    // underneath must be an error, not a signal.
    let options = request.open.clone().with_map(false);
    match probed.kind() {
        InputKind::Safetensors => inspect_file(request, &probed, &options, progress),
        InputKind::SafetensorsSet => {
            let set = tensorfile::open_set(path, &options)?;
            let digests = if request.hash {
                progress.total(set.data_len());
                hashes(set.tensor_data().into_iter().map(|t| (t.info().name, t)), progress)?
            } else {
                HashMap::new()
            };
            let digest = |name: &str| digests.get(name).cloned();
            Ok(InspectReport::Set {
                description: self::set(path, &set, &digest),
                metadata: set.metadata().map_err(|e| e.to_string()),
            })
        }
        #[cfg(feature = "pytorch")]
        InputKind::Pytorch => {
            let ckpt = Checkpoint::open_with(path, &options.pytorch)?;
            let size = std::fs::metadata(path)
                .map_err(|e| tensorfile::Error::io(path, e))?
                .len();
            let digests = if request.hash {
                progress.total(ckpt.tensors().map(|t| t.nbytes()).sum());
                hashes(ckpt.tensors().map(|t| (t.name(), t)), progress)?
            } else {
                HashMap::new()
            };
            let digest = |name: &str| digests.get(name).cloned();
            Ok(InspectReport::Checkpoint {
                description: checkpoint(path, size, &ckpt, &digest),
                values: ckpt.values().to_vec(),
                contiguous: ckpt.tensors().map(|t| t.is_contiguous()).collect(),
            })
        }
        #[cfg(feature = "gguf")]
        InputKind::Gguf => {
            let (description, header) = gguf::describe(path, request.hash, progress)?;
            Ok(InspectReport::Gguf {
                description,
                header,
            })
        }
        other => Err(tensorfile::Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("this is {other}, not safetensors; `tensorfile convert` turns it into safetensors"),
            ),
        )),
    }
}

/// A single safetensors file, local or remote: its header alone, unless
/// hashing.
fn inspect_file(
    request: &InspectRequest,
    probed: &tensorfile::Probed,
    options: &OpenOptions,
    progress: &dyn Progress,
) -> Result<InspectReport> {
    let path = request.path.as_path();
    #[cfg(feature = "remote")]
    if let Some(url) = probed.url() {
        // A remote file: its header (one request), its tensors' bytes only
        // when hashing, and a config.json beside it looked for remotely.
        let not_a_file = || {
            let e =
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "a directory, not a file");
            tensorfile::Error::io(tensorfile_remote::public_name(url), e)
        };
        let file = probed.open(options)?.into_file().ok_or_else(not_a_file)?;
        let digests = file_hashes(&file, request.hash, progress)?;
        let digest = |name: &str| digests.get(name).cloned();
        let description = match tensorfile_remote::dir_of(url, &options.remote_client()) {
            Ok(dir) => file_at(path, file.header(), &digest, &dir),
            Err(_) => self::file(path, file.header(), &digest),
        };
        return Ok(InspectReport::File(description));
    }
    let _ = probed;
    if request.hash {
        let source = FileSource::open(path).map_err(|e| tensorfile_core::Error::io(path, e))?;
        let file = SafeTensors::from_source(source, &options.read)?;
        let digests = file_hashes(&file, true, progress)?;
        let digest = |name: &str| digests.get(name).cloned();
        return Ok(InspectReport::File(self::file(
            path,
            file.header(),
            &digest,
        )));
    }
    let header = tensorfile_core::read_header_from_path(path, &options.read)?;
    Ok(InspectReport::File(self::file(path, &header, &|_| None)))
}

/// Each tensor's sha256 when `hash` (its data bytes told to `progress`
/// first), else none.
fn file_hashes<S: tensorfile::ByteSource>(
    file: &SafeTensors<S>,
    hash: bool,
    progress: &dyn Progress,
) -> Result<HashMap<String, String>> {
    if !hash {
        return Ok(HashMap::new());
    }
    progress.total(file.header().data_len());
    hashes(file.tensor_data().map(|t| (t.info().name, t)), progress)
}

/// The sha256 of every named tensor, in hex, read a piece at a time (the
/// bytes counted on `progress`).
#[cfg(feature = "digest")]
fn hashes<'t, T: tensorfile::TensorData<tensorfile::Error> + 't>(
    tensors: impl Iterator<Item = (&'t str, T)>,
    progress: &dyn Progress,
) -> Result<HashMap<String, String>> {
    let mut digests = HashMap::new();
    for (name, t) in tensors {
        let sum = tensorfile::digest::tensor_sha256_counted(&t, progress)?.hex();
        digests.insert(name.to_string(), sum);
    }
    Ok(digests)
}

/// Without the `digest` feature, hashes cannot be asked for.
#[cfg(not(feature = "digest"))]
fn hashes<'t, T: tensorfile::TensorData<tensorfile::Error> + 't>(
    _tensors: impl Iterator<Item = (&'t str, T)>,
    _progress: &dyn Progress,
) -> Result<HashMap<String, String>> {
    Err(tensorfile::Error::request(
        "tensor hashes need tensorfile's digest feature",
    ))
}

/// A tensor's sha256 in hex, when hashes are asked for (`None` otherwise).
type Digest<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Compact JSON text of a description (keys in field order, which is
/// ascending byte order).
fn to_json(value: &impl Serialize) -> String {
    // Strings, numbers, sequences and string-keyed maps: writing them
    // cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

/// One safetensors file: what `inspect --json FILE` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FileDescription {
    /// Where the data section starts: 8 + the header length.
    pub data_start: u64,
    /// The path, as given (lossy where it is not UTF-8).
    pub file: String,
    /// The header length N, padding included.
    pub header_len: u64,
    /// The header's `__metadata__`, or `None` when it has none.
    pub metadata: Option<Metadata>,
    /// How many tensors start at an offset that is not a multiple of their
    /// element size (C64: 4), counted from the start of the file.
    pub misaligned_tensors: usize,
    /// Elements in all tensors (sub-byte elements count one each).
    pub parameters: u128,
    /// The quantized weights (int4, MLX), or `None` when
    /// `quantized_problem` says why they cannot be read.
    pub quantized: Option<Vec<QuantizedWeight>>,
    /// Why the quantized weights cannot be read (a packed MLX weight
    /// without parameters, a `.qweight` without scales, ...).
    pub quantized_problem: Option<String>,
    /// The file's length in bytes (header and data).
    pub size: u64,
    /// Every tensor, in data order.
    pub tensors: Vec<TensorEntry>,
    /// What the reader accepted but noted (see the format contract).
    pub warnings: Vec<String>,
}

impl FileDescription {
    /// Compact JSON text, as `inspect --json` prints it.
    pub fn to_json(&self) -> String {
        to_json(self)
    }
}

/// One tensor of a safetensors file or set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TensorEntry {
    /// Begin and end of its bytes, relative to its file's data section.
    pub data_offsets: [u64; 2],
    /// The dtype, as the header names it (`BF16`, `F8_E4M3`, ...).
    pub dtype: String,
    /// The tensor's name.
    pub name: String,
    /// The sha256 of its bytes in hex, with `--hash` only (the key is
    /// absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The dimensions.
    pub shape: Vec<u64>,
    /// The shard (file name) holding it, in a set only (the key is absent
    /// for a single file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
}

/// A quantized weight: its scheme and parameters, and the tensors that
/// store it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QuantizedWeight {
    /// Bits per stored value (the dtype's bits for `plain`).
    pub bits: u64,
    /// Storage bits per logical weight, scales and biases included.
    pub bits_per_weight: f64,
    /// Whether an MLX weight has a global scale (nvfp4); `false` otherwise.
    pub global_scale: bool,
    /// Weights per scale (0 for `plain`).
    pub group_size: u64,
    /// The shape of the dequantized weight.
    pub logical_shape: Vec<u64>,
    /// The MLX mode (`affine`, `mxfp4`, `nvfp4`, ...); `None` for int4 and
    /// plain.
    pub mode: Option<String>,
    /// The logical weight's name.
    pub name: String,
    /// The stored tensors that make it up (weight, scales, biases, ...).
    pub parts: Vec<String>,
    /// The scales' dtype.
    pub scales_dtype: String,
    /// `int4-sym`, `mlx` or `plain`.
    pub scheme: String,
}

/// A set of safetensors files (a model directory, an index, or a directory
/// holding one file): what `inspect --json DIR` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SetDescription {
    /// The index file, or `None` for a directory of one file.
    pub index: Option<String>,
    /// The index's `metadata` object (`total_size`, ...), when there is an
    /// index with one.
    pub index_metadata: Option<JsonObject>,
    /// The model's config, for a directory with a config.json.
    pub model: Option<ModelSummary>,
    /// The path, as given (a directory, an index or a URL).
    pub path: String,
    /// The quantized weights across the shards, or `None` when
    /// `quantized_problem` says why they cannot be read.
    pub quantized: Option<Vec<QuantizedWeight>>,
    /// Why the quantized weights cannot be read (say, two shards'
    /// metadata disagree).
    pub quantized_problem: Option<String>,
    /// Every shard, in the order the set lists them.
    pub shards: Vec<ShardEntry>,
    /// Every tensor, with its shard.
    pub tensors: Vec<TensorEntry>,
    /// Counts across shards.
    pub totals: Totals,
    /// What the reader accepted but noted, across shards and the index.
    pub warnings: Vec<String>,
}

impl SetDescription {
    /// Compact JSON text, as `inspect --json` prints it.
    pub fn to_json(&self) -> String {
        to_json(self)
    }
}

/// A model directory's config, as described (`check` verifies it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelSummary {
    /// The config's `tl_arch`, when it is a string.
    pub tl_arch: Option<String>,
    /// Whether tokenizer.json is there.
    pub tokenizer: bool,
}

/// One shard of a set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ShardEntry {
    /// Bytes of its data section.
    pub data_bytes: u64,
    /// Its header length N.
    pub header_len: u64,
    /// Its `__metadata__`, or `None`.
    pub metadata: Option<Metadata>,
    /// Its file name.
    pub name: String,
    /// Its length in bytes.
    pub size: u64,
    /// How many tensors it holds.
    pub tensors: usize,
}

/// Counts across a set's shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Totals {
    /// Bytes of every data section.
    pub data_bytes: u64,
    /// Elements in all tensors.
    pub parameters: u128,
    /// How many shards.
    pub shards: usize,
    /// Bytes of every file.
    pub size: u64,
    /// How many tensors.
    pub tensors: usize,
}

/// A PyTorch checkpoint: what `inspect --json FILE.pt` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CheckpointDescription {
    /// `big-endian` or `little-endian`.
    pub byte_order: String,
    /// The path, as given (lossy where it is not UTF-8).
    pub file: String,
    /// How it is stored, in words (zip with its directory, or legacy).
    pub format: String,
    /// Elements in all tensors, names that are exact aliases of one another
    /// (tied weights) counted once.
    pub parameters: u128,
    /// The file's length in bytes.
    pub size: u64,
    /// Every tensor.
    pub tensors: Vec<CheckpointTensor>,
    /// The non-tensor values (numbers, strings, ...) by name, as text.
    pub values: BTreeMap<String, String>,
}

impl CheckpointDescription {
    /// Compact JSON text, as `inspect --json` prints it.
    pub fn to_json(&self) -> String {
        to_json(self)
    }
}

/// One tensor of a PyTorch checkpoint: where a safetensors file has data
/// offsets, a storage and a view of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CheckpointTensor {
    /// The dtype, as safetensors names it.
    pub dtype: String,
    /// The tensor's name.
    pub name: String,
    /// Bytes of the tensor (its view, not its storage).
    pub nbytes: u64,
    /// The sha256 of its bytes in hex, with `--hash` only (the key is
    /// absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The dimensions.
    pub shape: Vec<u64>,
    /// The key of the storage it views.
    pub storage: String,
    /// Its first element's offset in the storage, in elements.
    pub storage_offset: u64,
    /// Its strides, in elements.
    pub strides: Vec<u64>,
}

/// The alignment an element type wants in memory.
fn natural_alignment(dtype: Dtype) -> u64 {
    match dtype {
        Dtype::C64 => 4,
        d => (u64::from(d.bits()) / 8).max(1),
    }
}

/// MLX parameters: the file's own metadata, else the `quantization` of the
/// config.json at `location` (MLX keeps them there; a location without one
/// gives none). A remote location is asked remotely.
fn mlx_config(
    location: &dyn Location,
    metadata: Option<&Metadata>,
) -> Result<Option<QuantConfig>, String> {
    if let Some(own) = QuantConfig::from_metadata(metadata).map_err(|e| e.to_string())? {
        return Ok(Some(own));
    }
    let map = match read_config_from(location, CONFIG_NAME) {
        Ok(map) => map,
        Err(e) if e.is_not_found_file() => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    QuantConfig::from_config(&map)
        .map_err(|e| format!("{}: {e}", location.path_of(CONFIG_NAME).display()))
}

/// The quantized weights among `names` (a file's or a model directory's
/// tensors, found with `lookup`), or the problem that stops them being read
/// (what the description's `quantized_problem` says). `location` is where a
/// config.json would be; `metadata` the file's, or the shards' together.
fn quantized<'a>(
    location: &dyn Location,
    metadata: Option<&Metadata>,
    names: impl IntoIterator<Item = &'a str>,
    lookup: impl Fn(&str) -> Option<TensorInfo<'a>>,
) -> Result<Vec<QuantizedWeight>, String> {
    let mlx = mlx_config(location, metadata)?;
    let weights = quantized_weights(names, lookup, int4_group(metadata), mlx.as_ref())
        .map_err(|e| e.to_string())?;
    Ok(weights
        .iter()
        .map(|w| {
            let (scheme, bits, group_size, mode) = match w.storage {
                Some(s) => (s.family(), s.bits(), s.group_size(), s.mode()),
                None => ("plain", u64::from(w.dtype.bits()), 0, None),
            };
            QuantizedWeight {
                bits,
                bits_per_weight: w.bits_per_weight(),
                global_scale: w.storage.is_some_and(|s| s.global_scale()),
                group_size,
                logical_shape: w.shape.clone(),
                mode: mode.map(|m| m.name().to_string()),
                name: w.name.clone(),
                parts: w.parts.iter().map(|p| p.to_string()).collect(),
                scales_dtype: w.dtype.name().to_string(),
                scheme: scheme.to_string(),
            }
        })
        .collect())
}

/// Splits what [`quantized`] found into the two keys that say it.
fn split(
    found: Result<Vec<QuantizedWeight>, String>,
) -> (Option<Vec<QuantizedWeight>>, Option<String>) {
    match found {
        Ok(weights) => (Some(weights), None),
        Err(problem) => (None, Some(problem)),
    }
}

/// A safetensors tensor's entry; `shard` for a set's.
fn tensor_entry(t: &TensorInfo<'_>, shard: Option<&str>, digest: Digest<'_>) -> TensorEntry {
    TensorEntry {
        data_offsets: [t.data_offsets.0, t.data_offsets.1],
        dtype: t.dtype.name().to_string(),
        name: t.name.to_string(),
        sha256: digest(t.name),
        shape: t.shape.to_vec(),
        shard: shard.map(str::to_string),
    }
}

/// One safetensors file at `path` whose header is `header`: sizes,
/// metadata, every tensor in data order (with its sha256 when `digest`
/// gives one), parameters, alignment, warnings, quantized weights.
fn file(path: &Path, header: &Header, digest: Digest<'_>) -> FileDescription {
    // Names joined to it stay as given (`config.json`, not `./config.json`).
    let dir = path.parent().unwrap_or(Path::new(""));
    file_at(path, header, digest, &LocalDir::new(dir, false))
}

/// [`file()`] for a file in `location` (a remote directory, say), where a
/// config.json beside it is looked for.
fn file_at(
    path: &Path,
    header: &Header,
    digest: Digest<'_>,
    location: &dyn Location,
) -> FileDescription {
    let data_start = header.data_start();
    let misaligned = header
        .tensors()
        .filter(|t| !(data_start + t.data_offsets.0).is_multiple_of(natural_alignment(t.dtype)))
        .count();
    let names = header.tensors().map(|t| t.name);
    let (quantized, quantized_problem) =
        split(quantized(location, header.metadata(), names, |n| {
            header.get(n)
        }));
    FileDescription {
        data_start,
        file: path.to_string_lossy().into_owned(),
        header_len: header.header_len(),
        metadata: header.metadata().cloned(),
        misaligned_tensors: misaligned,
        parameters: header.tensors().map(|t| u128::from(t.numel())).sum(),
        quantized,
        quantized_problem,
        size: data_start + header.data_len(),
        tensors: header
            .tensors()
            .map(|t| tensor_entry(&t, None, digest))
            .collect(),
        warnings: header.warnings().to_vec(),
    }
}

/// For a directory with config.json: its tl_arch and whether tokenizer.json
/// is there (`check` verifies them; this only describes).
fn model_summary(path: &Path, set: &ShardedTensors) -> Option<ModelSummary> {
    // A set opened from a directory, local or remote (a URL names no file
    // here): its config and tokenizer are read where its shards are.
    let name = path.file_name()?.to_string_lossy();
    if name.ends_with(".json") || name.ends_with(".safetensors") {
        return None;
    }
    let config = read_config_from(&**set.location(), CONFIG_NAME).ok()?;
    Some(ModelSummary {
        tl_arch: config.get_str("tl_arch").map(str::to_string),
        tokenizer: set.location().open(TOKENIZER_NAME).is_ok(),
    })
}

/// A set opened from `path` (a directory or an index): the model's config
/// (for a directory), each shard, every tensor with its shard (and sha256
/// when `digest` gives one), totals, quantized weights, warnings.
fn set(path: &Path, set: &ShardedTensors, digest: Digest<'_>) -> SetDescription {
    let names = set.infos().map(|(_, t)| t.name);
    // Without the shards' metadata (say, two shards disagree) the int4
    // group and MLX parameters are unknown: say why instead of guessing.
    let found = match set.metadata() {
        Ok(metadata) => quantized(&**set.location(), Some(&metadata), names, |n| set.info(n)),
        Err(e) => Err(e.to_string()),
    };
    let (quantized, quantized_problem) = split(found);
    let shards = set
        .shards()
        .iter()
        .map(|s| {
            let h = s.header();
            ShardEntry {
                data_bytes: h.data_len(),
                header_len: h.header_len(),
                metadata: h.metadata().cloned(),
                name: s.name().to_string(),
                size: h.data_start() + h.data_len(),
                tensors: h.len(),
            }
        })
        .collect();
    SetDescription {
        index: set.index_path().map(|p| p.to_string_lossy().into_owned()),
        index_metadata: set.index_metadata().cloned(),
        model: model_summary(path, set),
        path: path.to_string_lossy().into_owned(),
        quantized,
        quantized_problem,
        shards,
        tensors: set
            .infos()
            .map(|(shard, t)| tensor_entry(&t, Some(shard.name()), digest))
            .collect(),
        totals: Totals {
            data_bytes: set.data_len(),
            parameters: set.parameters(),
            shards: set.shards().len(),
            size: set.file_len(),
            tensors: set.len(),
        },
        warnings: set.warnings().to_vec(),
    }
}

/// How a PyTorch checkpoint is stored, in words.
#[cfg(feature = "pytorch")]
fn checkpoint_format(ckpt: &Checkpoint) -> String {
    match ckpt.format() {
        Format::Zip { prefix } => format!("PyTorch zip checkpoint (directory {prefix:?})"),
        Format::Legacy => "PyTorch legacy checkpoint (before 1.6)".to_string(),
    }
}

/// A PyTorch checkpoint `ckpt` opened from `file` (of `size` bytes): format,
/// byte order, every tensor (with its storage key, offset and strides where
/// a safetensors file has data offsets, and its sha256 when `digest` gives
/// one), the non-tensor values, parameters (names that are exact aliases of
/// one another, tied weights, counted once). (With the `pytorch` feature.)
#[cfg(feature = "pytorch")]
fn checkpoint(
    file: &Path,
    size: u64,
    ckpt: &Checkpoint,
    digest: Digest<'_>,
) -> CheckpointDescription {
    let byte_order = if ckpt.is_big_endian() {
        "big-endian"
    } else {
        "little-endian"
    };
    let mut seen = std::collections::HashSet::new();
    let parameters: u128 = ckpt
        .tensors()
        .filter(|t| seen.insert(t.view_key()))
        .map(|t| u128::from(t.numel()))
        .sum();
    let tensors = ckpt
        .tensors()
        .map(|t| CheckpointTensor {
            dtype: t.dtype().name().to_string(),
            name: t.name().to_string(),
            nbytes: t.nbytes(),
            sha256: digest(t.name()),
            shape: t.shape().to_vec(),
            storage: t.storage_key().to_string(),
            storage_offset: t.storage_offset(),
            strides: t.strides().to_vec(),
        })
        .collect();
    CheckpointDescription {
        byte_order: byte_order.to_string(),
        file: file.to_string_lossy().into_owned(),
        format: checkpoint_format(ckpt),
        parameters,
        size,
        tensors,
        // Collected as a JSON object was: a repeated name keeps its last
        // value.
        values: ckpt.values().iter().cloned().collect(),
    }
}
