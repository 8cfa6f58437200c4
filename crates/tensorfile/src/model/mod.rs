//! Model directories: `config.json`, the weights (`model.safetensors` or a
//! sharded set with its index) and, when the config says `"tl_tokenizer":
//! "file"`, `tokenizer.json`. Other files are ignored.
//!
//! [`ModelDir::open`] opens the config and the weights in one call;
//! [`check_dir`] (or [`ModelDir::check`]) verifies the directory against the
//! rules and the architecture its config names, and reports every problem
//! by name: a course model's `tl_arch` ([`ARCHITECTURES`]), or a Hugging
//! Face class (`architectures`, `model_type`; [`HF_ARCHITECTURES`]), whose
//! every tensor's name and shape come from the config, plain or
//! MLX-quantized, as transformers and mlx-lm write them.
//!
//! ```
//! use tensorfile::model::check_dir;
//! use tensorfile::{save, Contract, Dtype, Metadata, TensorRef, WriteOptions};
//! // The course's bigram model: a config and one [vocab, vocab] weight.
//! let dir = tempfile::tempdir()?;
//! let config = r#"{"tl_arch": "bigram", "vocab_size": 32, "tl_tokenizer": "byte"}"#;
//! std::fs::write(dir.path().join("config.json"), config)?;
//! let data = vec![0u8; 32 * 32 * 4];
//! let w = TensorRef { name: "bigram.weight", dtype: Dtype::F32, shape: &[32, 32], data: &data };
//! let format = Metadata::from([("format".to_string(), "tinyllm".to_string())]);
//! save(dir.path().join("model.safetensors"), [w], Some(&format), &WriteOptions::default())?;
//! let report = check_dir(dir.path(), Contract::V0);
//! assert!(report.is_ok(), "{:?}", report.problems);
//! assert!(report.architecture_checked);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod arch;
mod contract;
mod hf;
mod report;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ReadOptions;
use tensorfile_core::set::{ShardError, ShardedTensors};
use tensorfile_core::JsonObject;

use crate::quant::Scheme;
pub use crate::quant::{logical_weight, LogicalWeight, QuantConfig, QuantParams};
pub use arch::ARCHITECTURES;
pub use contract::Contract;
#[cfg(feature = "gguf")]
pub(crate) use hf::classes as hf_classes;
pub use hf::KNOWN as HF_ARCHITECTURES;
pub use report::{ModelReport, Problem, ProblemKind, Severity, MAX_LISTED};

use arch::{DtypeRule, Expected, Need, Plan};

/// The config's file name.
pub const CONFIG_NAME: &str = "config.json";

/// The tokenizer's file name.
pub const TOKENIZER_NAME: &str = "tokenizer.json";

/// The largest config.json read, in bytes.
const MAX_CONFIG_LEN: u64 = 10_000_000;

/// A model directory, opened: its config and its weights.
#[derive(Debug)]
pub struct ModelDir {
    dir: PathBuf,
    config: Config,
    weights: ShardedTensors,
}

/// A model's config.json: a JSON object read through typed accessors
/// (the library's own checks read it field by field).
pub type Config = JsonObject;

/// Reads a config.json as a JSON object (at most 10 MB).
///
/// # Errors
/// The file cannot be read ([`Error::File`] with the I/O error), is longer
/// than 10 MB or is not a JSON object ([`Error::Config`]).
pub fn read_config(path: &Path) -> Result<Config> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut text = Vec::new();
    file.take(MAX_CONFIG_LEN + 1)
        .read_to_end(&mut text)
        .map_err(|e| Error::io(path, e))?;
    parse_config(&text, path)
}

/// Reads the config `file` at a set's location (a remote directory, say)
/// as [`read_config`] does.
///
/// # Errors
/// The file cannot be read, is longer than 10 MB, or is not a JSON object.
pub fn read_config_from(
    location: &dyn tensorfile_core::set::Location,
    file: &str,
) -> Result<Config> {
    let path = location.path_of(file);
    let source = location.open(file).map_err(|e| Error::io(&path, e))?;
    read_config_source(&*source, &path)
}

/// Reads an opened config named `path` as [`read_config`] does.
pub(crate) fn read_config_source(source: &dyn crate::ByteSource, path: &Path) -> Result<Config> {
    let len = source.len().min(MAX_CONFIG_LEN + 1);
    let mut text = vec![0u8; len as usize];
    source
        .read_exact_at(0, &mut text)
        .map_err(|e| Error::io(path, e))?;
    parse_config(&text, path)
}

/// A config's text (at most [`MAX_CONFIG_LEN`] bytes) as a JSON object.
fn parse_config(text: &[u8], path: &Path) -> Result<Config> {
    let bad = |problem: String| Error::Config {
        path: path.to_path_buf(),
        problem,
    };
    if text.len() as u64 > MAX_CONFIG_LEN {
        return Err(bad(format!("longer than {MAX_CONFIG_LEN} bytes")));
    }
    JsonObject::from_slice(text).map_err(bad)
}

impl ModelDir {
    /// Opens `dir/config.json` and the directory's weights (validated; see
    /// [`ShardedTensors::open`]).
    ///
    /// # Errors
    ///
    /// As [`ModelDir::open_with`].
    pub fn open(dir: impl AsRef<Path>) -> Result<ModelDir> {
        ModelDir::open_with(dir, &ReadOptions::default())
    }

    /// [`ModelDir::open`] with options for reading the weights.
    ///
    /// # Errors
    ///
    /// An I/O error naming config.json ([`Error::Core`]) when it cannot be
    /// read, [`Error::Config`] when it is too long or not a JSON object, and
    /// the errors of
    /// [`ShardedTensors::open_with`] for the weights.
    pub fn open_with(dir: impl AsRef<Path>, options: &ReadOptions) -> Result<ModelDir> {
        let dir = dir.as_ref();
        let config = read_config(&dir.join(CONFIG_NAME))?;
        let weights = ShardedTensors::open_with(dir, options)?;
        Ok(ModelDir {
            dir: dir.to_path_buf(),
            config,
            weights,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// config.json.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &ShardedTensors {
        &self.weights
    }

    /// The config's `tl_arch`, when it is a string.
    pub fn arch(&self) -> Option<&str> {
        self.config.get_str("tl_arch")
    }

    /// Whether the config calls for `tokenizer.json` (`"tl_tokenizer": "file"`).
    pub fn needs_tokenizer(&self) -> bool {
        needs_tokenizer(self.config.as_map())
    }

    /// Checks the directory: files, architecture, contract. Never fails;
    /// every problem is in the report.
    pub fn check(&self, contract: Contract) -> ModelReport {
        let mut report = ModelReport::default();
        check_parts(
            &self.dir,
            Some(self.config.as_map()),
            Some(&self.weights),
            contract,
            &mut report,
        );
        report
    }
}

fn needs_tokenizer(config: &Map<String, Value>) -> bool {
    config.get("tl_tokenizer").and_then(Value::as_str) == Some("file")
}

/// Checks a model directory, reporting every problem by name: missing or
/// invalid files as well as tensors that do not match the architecture.
pub fn check_dir(dir: impl AsRef<Path>, contract: Contract) -> ModelReport {
    let dir = dir.as_ref();
    let mut report = ModelReport::default();
    let config_path = dir.join(CONFIG_NAME);
    let config = match read_config(&config_path) {
        Ok(config) => Some(config),
        Err(e) if e.is_not_found_file() => {
            report.push(Problem::error(
                ProblemKind::MissingFile,
                CONFIG_NAME,
                "a model directory needs config.json",
            ));
            None
        }
        Err(e) => {
            report.push(Problem::error(
                ProblemKind::InvalidConfig,
                CONFIG_NAME,
                e.to_string(),
            ));
            None
        }
    };
    let weights = match ShardedTensors::open(dir) {
        Ok(w) => Some(w),
        Err(tensorfile_core::Error::Shard(e)) if matches!(*e, ShardError::NoWeights { .. }) => {
            report.push(match crate::input::dir_weights(dir) {
                Some((name, crate::input::Kind::PytorchSet)) => Problem::error(
                    ProblemKind::PytorchWeights,
                    name,
                    "the weights are PyTorch checkpoints, not safetensors: \
                     `tensorfile convert` turns them into safetensors",
                ),
                _ => Problem::error(
                    ProblemKind::MissingFile,
                    tensorfile_core::set::SINGLE_NAME,
                    e.to_string(),
                ),
            });
            None
        }
        Err(e) => {
            report.push(Problem::error(
                ProblemKind::InvalidWeights,
                weights_subject(&e),
                e.to_string(),
            ));
            None
        }
    };
    check_parts(
        dir,
        config.as_ref().map(JsonObject::as_map),
        weights.as_ref(),
        contract,
        &mut report,
    );
    report
}

/// The file a weights error is about, for the report's subject.
fn weights_subject(e: &tensorfile_core::Error) -> String {
    match e {
        tensorfile_core::Error::Shard(e) => match &**e {
            ShardError::InvalidShard { shard, .. } | ShardError::MissingShard { shard, .. } => {
                shard.clone()
            }
            _ => tensorfile_core::set::INDEX_NAME.into(),
        },
        _ => tensorfile_core::set::SINGLE_NAME.into(),
    }
}

/// The checks on whatever could be opened.
fn check_parts(
    dir: &Path,
    config: Option<&Map<String, Value>>,
    weights: Option<&ShardedTensors>,
    contract: Contract,
    report: &mut ModelReport,
) {
    let course =
        config.is_some_and(|c| c.contains_key("tl_arch") || c.contains_key("tl_tokenizer"));
    if let Some(config) = config {
        let tokenizer_present = dir.join(TOKENIZER_NAME).is_file();
        match (needs_tokenizer(config), tokenizer_present) {
            (true, false) => report.push(Problem::error(
                ProblemKind::MissingFile,
                TOKENIZER_NAME,
                "config.json says \"tl_tokenizer\": \"file\", but there is no tokenizer.json",
            )),
            (false, true) if course => report.push(Problem::warning(
                ProblemKind::UnexpectedFile,
                TOKENIZER_NAME,
                "present, but config.json does not say \"tl_tokenizer\": \"file\", so it is ignored",
            )),
            _ => {}
        }
        if !course {
            report
                .notes
                .push("config.json has no tl_tokenizer: the tokenizer rule was not applied".into());
        }
    }
    let Some(weights) = weights else {
        if config.is_some() {
            report
                .notes
                .push("the weights could not be opened: the architecture check was skipped".into());
        }
        return;
    };
    for warning in weights.warnings() {
        report.push(Problem::warning(
            ProblemKind::WeightsWarning,
            weights
                .index_path()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| tensorfile_core::set::SINGLE_NAME.into()),
            warning.clone(),
        ));
    }
    if contract != Contract::Any {
        for (_, t) in weights.infos().filter(|(_, t)| !contract.allows(t.dtype)) {
            report.push(Problem::error(
                ProblemKind::UnsupportedFormat,
                t.name,
                format!(
                    "unsupported format: {} is outside contract {contract}",
                    t.dtype
                ),
            ));
        }
    }
    let Some(config) = config else {
        return;
    };
    if course {
        for shard in weights.shards() {
            let format = shard.header().metadata().and_then(|m| m.get("format"));
            if format.map(String::as_str) != Some("tinyllm") {
                report.push(Problem::warning(
                    ProblemKind::MissingFormatMetadata,
                    shard.name(),
                    "course writers set \"format\": \"tinyllm\" metadata; this file does not",
                ));
            }
        }
    }
    match config.get("tl_arch") {
        None => {
            if let Some(plan) = hf::plan(config, &|n| weights.info(n).is_some(), report) {
                check_plan(&plan, config, weights, report);
                report.architecture_checked = true;
            }
        }
        Some(Value::String(arch)) => {
            report.arch = Some(arch.clone());
            if let Some(plan) = arch::plan(arch, config, report) {
                check_plan(&plan, config, weights, report);
                report.architecture_checked = true;
            }
        }
        Some(other) => report.push(Problem::error(
            ProblemKind::InvalidField,
            "tl_arch",
            format!("must be a string, found {other}"),
        )),
    }
}

/// Matches the weights against an architecture's plan.
fn check_plan(
    plan: &Plan,
    config: &Map<String, Value>,
    weights: &ShardedTensors,
    report: &mut ModelReport,
) {
    let mlx = match QuantConfig::from_config_map(config) {
        Ok(q) => q,
        Err(message) => {
            report.push(Problem::error(
                ProblemKind::InvalidField,
                "quantization",
                message.to_string(),
            ));
            None
        }
    };
    let mut accounted: HashSet<&str> = HashSet::new();
    plan.for_each(|expected| {
        check_expected(expected, weights, mlx.as_ref(), &mut accounted, report)
    });
    for (_, t) in weights.infos() {
        if accounted.contains(t.name) {
            continue;
        }
        let reason = plan
            .forbidden
            .iter()
            .find(|(name, _)| name == t.name)
            .map(|(_, why)| why.clone())
            .unwrap_or_else(|| "the architecture does not name this tensor".into());
        report.push(Problem::error(
            ProblemKind::UnexpectedTensor,
            t.name,
            reason,
        ));
    }
}

/// Matches one tensor of a plan against the weights, recording what it
/// finds and the stored tensors it accounts for.
fn check_expected<'w>(
    expected: &Expected,
    weights: &'w ShardedTensors,
    mlx: Option<&QuantConfig>,
    accounted: &mut HashSet<&'w str>,
    report: &mut ModelReport,
) {
    if expected.need == Need::Buffer {
        if let Some(t) = weights.info(&expected.name) {
            accounted.insert(t.name);
        }
        return;
    }
    let found = if expected.linear {
        let qweight = format!("{}.weight.qweight", expected.name);
        let group = weights
            .shard_of(&qweight)
            .and_then(|s| crate::quant::int4_group(s.header().metadata()));
        match logical_weight(&expected.name, |n| weights.info(n), group, mlx) {
            Ok(found) => found,
            Err(e) => {
                let kind = if e.dtype {
                    ProblemKind::WrongDtype
                } else {
                    ProblemKind::WrongShape
                };
                report.push(Problem::error(kind, e.tensor, e.message));
                // Its parts are accounted for: the problem is already named.
                for suffix in [
                    "weight",
                    "weight.qweight",
                    "weight.scales",
                    "scales",
                    "biases",
                ] {
                    if let Some(t) = weights.info(&format!("{}.{suffix}", expected.name)) {
                        accounted.insert(t.name);
                    }
                }
                return;
            }
        }
    } else {
        weights.info(&expected.name).map(|t| LogicalWeight {
            name: t.name.to_string(),
            storage: None,
            dtype: t.dtype,
            shape: t.shape.to_vec(),
            parts: vec![t.name],
        })
    };
    let name = expected.tensor_name();
    let Some(found) = found else {
        if expected.need == Need::Optional {
            return;
        }
        report.push(Problem::error(
            ProblemKind::MissingTensor,
            &name,
            format!("missing (expected shape {:?})", expected.shape),
        ));
        return;
    };
    accounted.extend(found.parts.iter().copied());
    let quantized = found.storage.is_some();
    let subject = if quantized {
        expected.name.as_str()
    } else {
        name.as_str()
    };
    if found.shape != expected.shape {
        report.push(Problem::error(
            ProblemKind::WrongShape,
            subject,
            format!(
                "{}shape {:?}, but the config gives {:?}",
                if quantized { "logical " } else { "" },
                found.shape,
                expected.shape
            ),
        ));
    }
    // A floating-point MLX mode's scales are U8 codes: its parts' dtypes
    // were checked with its layout, and its values are floats by design.
    let float_codes =
        matches!(found.storage, Some(Scheme::Mlx(p)) if p.mode != crate::quant::Mode::Affine);
    let dtype_ok = match expected.dtype {
        DtypeRule::F32 => found.dtype == crate::Dtype::F32,
        DtypeRule::Float => float_codes || found.dtype.is_float(),
    };
    if !dtype_ok {
        let wanted = match expected.dtype {
            DtypeRule::F32 => "F32",
            DtypeRule::Float => "a floating-point type",
        };
        report.push(Problem::error(
            ProblemKind::WrongDtype,
            subject,
            format!("is {}, but must be {wanted}", found.dtype),
        ));
    }
}
