//! `check`: a model directory verified: its files, and every tensor
//! against the architecture its config.json names (a course `tl_arch` or
//! a Hugging Face class); the checks are [`tensorfile::model::check_dir`]'s
//! (`docs/commands/check.md`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use tensorfile::model::{check_dir, ModelReport};
use tensorfile::{Contract, Progress, Result};

/// What `check` is asked.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CheckRequest {
    /// The model directory (config.json and its weights): a course model,
    /// a transformers, mlx-lm or diffusers directory.
    pub dir: PathBuf,
    /// Also hold the tensors to a course contract: `v0` (F32 only); none:
    /// any dtype.
    pub contract: Option<String>,
}

impl CheckRequest {
    /// A check of `dir` under no contract.
    pub fn new(dir: impl Into<PathBuf>) -> CheckRequest {
        CheckRequest {
            dir: dir.into(),
            contract: None,
        }
    }
}

/// The contract named `name` (`v0`).
///
/// # Errors
///
/// An unknown name.
pub fn contract(name: &str) -> std::result::Result<Contract, String> {
    match name {
        "v0" => Ok(Contract::V0),
        _ => Err(format!("`{name}` is not a contract; expected v0")),
    }
}

/// What `check` found: what `check --json` prints (keys in ascending byte
/// order).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct CheckReport {
    /// The contract held to, in words, or `null`.
    pub contract: Option<String>,
    /// The directory, as given.
    pub dir: String,
    /// Errors found (listed or not).
    pub errors: usize,
    /// Whether there is no error (warnings do not count).
    pub ok: bool,
    /// The checks' own report: architecture, problems, notes (each
    /// object's keys in ascending byte order, as the command printed them).
    #[serde(serialize_with = "sorted")]
    pub report: ModelReport,
    /// Warnings found (listed or not).
    pub warnings: usize,
}

/// Serializes `value` with every object's keys in ascending byte order
/// (through `serde_json`'s sorted maps).
fn sorted<T: Serialize, S: serde::Serializer>(
    value: &T,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// Checks the model directory `request.dir`. Its problems are the
/// report's, not errors.
///
/// # Errors
///
/// An unknown contract ([`Error::Request`](tensorfile::Error::Request)); a path
/// that is not a directory.
pub fn check(request: &CheckRequest, _progress: &dyn Progress) -> Result<CheckReport> {
    let chosen = match &request.contract {
        Some(name) => Some(contract(name).map_err(tensorfile::Error::request)?),
        None => None,
    };
    let dir = &request.dir;
    if !dir.is_dir() {
        return Err(tensorfile::Error::io(
            dir,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory"),
        ));
    }
    let report = check_dir(dir, chosen.unwrap_or(Contract::Any));
    Ok(CheckReport {
        contract: chosen.map(|c| c.to_string()),
        dir: dir.to_string_lossy().into_owned(),
        errors: report.errors().count() + report.unlisted_errors,
        ok: report.is_ok(),
        warnings: report.warnings().count() + report.unlisted_warnings,
        report,
    })
}
