//! What a model check found: a list of named problems, errors and warnings.

use serde::Serialize;

/// How serious a problem is. Errors make a directory fail its check;
/// warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The directory breaks a rule.
    Error,
    /// Accepted, but not what a careful writer does.
    Warning,
}

/// What kind of problem it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProblemKind {
    /// A file the directory needs is not there.
    MissingFile,
    /// A file the rules do not call for is there.
    UnexpectedFile,
    /// `config.json` is not a JSON object.
    InvalidConfig,
    /// A config field the architecture needs is absent.
    MissingField,
    /// A config field has an unusable value.
    InvalidField,
    /// The weights (a file, an index or a shard) are not valid.
    InvalidWeights,
    /// The weights were accepted with a warning (such as a wrong `total_size`).
    WeightsWarning,
    /// A tensor the architecture needs is absent.
    MissingTensor,
    /// A tensor the architecture does not name is present.
    UnexpectedTensor,
    /// A tensor's (logical) shape disagrees with the config.
    WrongShape,
    /// A tensor's dtype is not one the architecture allows.
    WrongDtype,
    /// A dtype outside the requested contract (such as BF16 under v0).
    UnsupportedFormat,
    /// A course model's file lacks `"format": "tinyllm"` metadata.
    MissingFormatMetadata,
    /// config.json names an architecture (or a diffusers model, or a
    /// quantization scheme) whose tensors are not derived: only the files
    /// were checked.
    UnknownArchitecture,
    /// The weights are PyTorch checkpoints (`pytorch_model.bin`, its
    /// index, or diffusers' `.bin`), not safetensors.
    PytorchWeights,
}

/// One problem, named: what kind, which tensor, field or file, and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Error or warning.
    pub severity: Severity,
    /// What kind of problem.
    pub kind: ProblemKind,
    /// The tensor, config field, or file concerned.
    pub subject: String,
    /// A sentence saying what is wrong.
    pub message: String,
}

impl Problem {
    /// An error.
    pub fn error(
        kind: ProblemKind,
        subject: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Problem {
            severity: Severity::Error,
            kind,
            subject: subject.into(),
            message: message.into(),
        }
    }

    /// A warning.
    pub fn warning(
        kind: ProblemKind,
        subject: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Problem {
            severity: Severity::Warning,
            ..Problem::error(kind, subject, message)
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{severity}: {}: {}", self.subject, self.message)
    }
}

/// At most this many problems are listed; the rest are counted. A hostile
/// config (a million layers) cannot make a report unbounded.
pub const MAX_LISTED: usize = 1000;

/// The result of checking a model directory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelReport {
    /// The architecture config.json names: its `tl_arch`, else its class
    /// (`architectures[0]`, or the usual class of its `model_type`), or a
    /// diffusers model's `_class_name`.
    pub arch: Option<String>,
    /// Whether the tensors were checked against the architecture.
    pub architecture_checked: bool,
    /// What was skipped or assumed, for the reader of the report.
    pub notes: Vec<String>,
    /// Every problem found, errors and warnings, in the order found.
    pub problems: Vec<Problem>,
    /// Errors found past [`MAX_LISTED`], counted but not listed.
    pub unlisted_errors: usize,
    /// Warnings found past [`MAX_LISTED`], counted but not listed.
    pub unlisted_warnings: usize,
}

impl ModelReport {
    /// Adds a problem (counted only, past [`MAX_LISTED`]).
    pub fn push(&mut self, problem: Problem) {
        if self.problems.len() < MAX_LISTED {
            self.problems.push(problem);
        } else if problem.severity == Severity::Error {
            self.unlisted_errors += 1;
        } else {
            self.unlisted_warnings += 1;
        }
    }

    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .filter(|p| p.severity == Severity::Warning)
    }

    /// Whether the directory passed: no errors (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.errors().next().is_none() && self.unlisted_errors == 0
    }

    /// Whether some problem of this kind is listed (handy in tests).
    pub fn has(&self, kind: ProblemKind, subject: &str) -> bool {
        self.problems
            .iter()
            .any(|p| p.kind == kind && p.subject == subject)
    }
}
