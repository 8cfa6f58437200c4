//! `validate`: a file checked against the format's reader rules, reading
//! only headers: a safetensors file (rule 5 checked against its length), a
//! set (an index or a model directory: every shard's header and the
//! index), or a GGUF file; local or at a URL.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::one_line;
use tensorfile::InputKind as Kind;
use tensorfile::{Error, Progress, ReadOptions, Result};

/// What to validate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ValidateRequest {
    /// The file, index or model directory; `s3://`, `hf://` and
    /// `http(s)://` URLs read only the headers.
    pub path: PathBuf,
    /// Largest header length accepted, in bytes.
    pub max_header_len: u64,
    /// One deadline, in seconds, for all of the remote reads, retries and
    /// waits included; `None`: none.
    pub timeout: Option<f64>,
}

impl Default for ValidateRequest {
    fn default() -> ValidateRequest {
        ValidateRequest {
            path: PathBuf::new(),
            max_header_len: tensorfile_core::DEFAULT_MAX_HEADER_LEN,
            timeout: None,
        }
    }
}

impl ValidateRequest {
    /// `path` checked with the default options.
    pub fn new(path: impl Into<PathBuf>) -> ValidateRequest {
        ValidateRequest {
            path: path.into(),
            ..ValidateRequest::default()
        }
    }
}

/// The verdict on one input: `tensorfile validate --json` (one line per
/// input). Fields are in the order of their names: the order the command
/// has always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidateReport {
    /// A valid set: the bytes of its tensors' data.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub data_bytes: Option<u64>,
    /// What is wrong and where (one line), or `None` when valid.
    pub error: Option<String>,
    /// The input, as given.
    pub file: PathBuf,
    /// `gguf` for a GGUF file; absent for safetensors.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub format: Option<String>,
    /// The number of the reader rule broken, if one was; absent for GGUF.
    #[serde(
        skip_serializing_if = "Option::is_none",
        default,
        with = "rule_or_null"
    )]
    pub rule: Option<Option<u8>>,
    /// A valid set: how many shards.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub shards: Option<usize>,
    /// A valid set: how many tensors.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tensors: Option<usize>,
    /// Whether the input is valid.
    pub valid: bool,
    /// What is allowed but worth knowing.
    pub warnings: Vec<String>,
}

/// `rule` is printed (as a number or null) for safetensors, and left out
/// for GGUF, whose rules are not numbered.
mod rule_or_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(rule: &Option<Option<u8>>, s: S) -> Result<S::Ok, S::Error> {
        rule.flatten().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u8>>, D::Error> {
        Option::<u8>::deserialize(d).map(Some)
    }
}

/// The header of a safetensors file, local or remote (one request when it
/// fits in 64 KiB): only the header is read; rule 5 is checked against the
/// file's length.
fn header_of(path: &Path, options: &tensorfile::OpenOptions) -> Result<tensorfile::Header> {
    if tensorfile_core::url_of(path).is_none() {
        return Ok(tensorfile_core::read_header_from_path(path, &options.read)?);
    }
    let not_a_file = || {
        Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a directory, not a file"),
        )
    };
    let probed = tensorfile::probe(path)?;
    if probed.kind() != Kind::Safetensors {
        return Err(not_a_file());
    }
    let file = probed.open(options)?.into_file().ok_or_else(not_a_file)?;
    Ok(file.header().clone())
}

/// An error as a verdict on `input` says it: on one line, without the
/// input's own name in front (the verdict names it already: `x: invalid:
/// x: not found` would say it twice, a URL's long name included). An error
/// about another file (a shard of a set) keeps its name.
fn verdict(err: &(dyn std::error::Error + 'static), input: &Path) -> String {
    let text = one_line(err);
    let named = format!("{}: ", input.display());
    match text.strip_prefix(&named) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// Checks the input against the reader rules. An invalid or unreadable
/// input is a verdict, not an error. `progress` is not told anything (one
/// input is one step; a set's headers are read concurrently).
///
/// # Errors
/// Only a bad request ([`Error::Request`]: a timeout that is not a
/// positive number of seconds).
pub fn validate(request: &ValidateRequest, _progress: &dyn Progress) -> Result<ValidateReport> {
    let path = &request.path;
    let read = ReadOptions::default().max_header_len(request.max_header_len);
    let options = crate::transform::open_options(&read, request.timeout)?;
    let mut report = ValidateReport {
        data_bytes: None,
        error: None,
        file: path.clone(),
        format: None,
        rule: Some(None),
        shards: None,
        tensors: None,
        valid: false,
        warnings: Vec::new(),
    };
    match tensorfile::probe(path).map(|p| p.kind()) {
        Ok(Kind::SafetensorsSet) => match tensorfile::open_set(path, &options) {
            Ok(set) => {
                report.data_bytes = Some(set.data_len());
                report.shards = Some(set.shards().len());
                report.tensors = Some(set.len());
                report.warnings = set.warnings().to_vec();
            }
            Err(e) => {
                report.error = Some(verdict(e.detail(), path));
                report.rule = Some(e.rule());
            }
        },
        Ok(Kind::Safetensors) => match header_of(path, &options) {
            Ok(header) => report.warnings = header.warnings().to_vec(),
            Err(e) => {
                let detail: &(dyn std::error::Error + 'static) = match e.core() {
                    Some(core) => core,
                    None => e.detail(),
                };
                report.error = Some(verdict(detail, path));
                report.rule = Some(e.rule());
            }
        },
        #[cfg(feature = "gguf")]
        Ok(Kind::Gguf) => {
            report.format = Some("gguf".into());
            report.rule = None;
            match tensorfile::gguf::GgufFile::open(path) {
                Ok(f) => report.warnings = f.header().warnings().to_vec(),
                Err(e) => report.error = Some(verdict(e.detail(), path)),
            }
        }
        Ok(other) => {
            report.error = Some(verdict(
                &crate::transform::not_safetensors(path, other),
                path,
            ))
        }
        Err(e) => report.error = Some(verdict(&e, path)),
    }
    report.valid = report.error.is_none();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_names_its_input_once() {
        let missing = Path::new("no/such/dir/x.safetensors");
        let report = validate(&ValidateRequest::new(missing), &()).unwrap();
        let error = report.error.unwrap();
        assert!(!error.contains("x.safetensors"), "{error}");
        assert_eq!(report.file, missing);
        // A file of a set is named: it is not the input.
        let shard = tensorfile::Error::io(
            "d/model-00001-of-00002.safetensors",
            std::io::ErrorKind::NotFound.into(),
        );
        assert!(verdict(&shard, Path::new("d")).starts_with("d/model-00001-of-00002.safetensors: "));
    }
}
