//! # tensorfile-ops
//!
//! Whole commands as functions: the layer every front end of
//! [tensorfile] calls (the `tensorfile` command, the Python
//! package), above the format library.
//!
//! One module per operation (`validate`, `inspect`, `convert`, `rewrite`, `edit`,
//! `quantize`, `dequantize`, `shard`, `merge`, `diff`, `stats`, `hash`,
//! `verify`, `check`, `fetch`), each holding a request, a report and a
//! function from the one to the other:
//!
//! - `<Op>Request`: what to do, as plain data (serde). Its fields are the
//!   command's options, documented once here; the CLI builds it from its
//!   flags, the Python package from its keywords.
//! - `<Op>Report`: what was done (serde). It *is* the `--json` schema and
//!   the dict Python returns; `docs/commands/<command>.md` lists its keys,
//!   and a test holds the page and the struct together.
//! - `fn <op>(&<Op>Request, &dyn Progress) -> Result<<Op>Report>`: opens
//!   the inputs (through [`tensorfile::open`]), refuses an input as its own
//!   output, picks defaults, writes atomically. Errors are the library's
//!   one [`tensorfile::Error`]; a request it cannot run is
//!   [`Error::Request`](tensorfile::Error::Request).
//!
//! Front ends do no work of their own: they parse, call an operation, and
//! print its report (as text, JSON or a dict).
//!
//! ```no_run
//! use tensorfile_ops::validate::{validate, ValidateRequest};
//! let report = validate(&ValidateRequest::new("model.safetensors"), &())?;
//! println!("{}", serde_json::to_string(&report).unwrap());
//! # Ok::<(), tensorfile::Error>(())
//! ```
//!
//! The library's formats and extras are this crate's Cargo features too
//! (`pytorch`, `gguf`, `npz`, `digest`, `remote`; all on by default): each
//! turns on the library's feature of the same name and the operations
//! that need it.

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

use std::path::Path;

mod bucket;
pub mod check;
pub mod convert;
pub mod dequantize;
pub mod diff;
pub mod edit;
#[cfg(feature = "remote")]
pub mod fetch;
#[cfg(feature = "digest")]
pub mod hash;
pub mod inspect;
mod looking;
pub mod merge;
pub mod quantize;
pub mod rewrite;
pub mod shard;
pub mod stats;
pub mod transform;
pub mod validate;
#[cfg(feature = "digest")]
pub mod verify;

/// An error and its causes on one line (each cause once), as verdicts and
/// the commands' messages say them; a front end makes it safe to print.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// A failed command as `--json` reports it: `{"error", "file", "rule"}`,
/// and `"verdict": "error"` from a comparison (`diff`, `stats`, `hash`,
/// `verify`), whose errors exit 2. Keys in ascending byte order, as the
/// reports'.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ErrorReport {
    /// The error and its causes on one line, starting with the file.
    pub error: String,
    /// The file the error is about (lossy where it is not UTF-8), or
    /// `None` when it is about no file.
    pub file: Option<String>,
    /// The reader rule that failed (`docs/model-safetensors.md`), or
    /// `None` when no rule did.
    pub rule: Option<u8>,
    /// `Some("error")` from a comparison; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
}

impl ErrorReport {
    /// The report of an error whose text is `error`, about `file`, where
    /// `rule` failed.
    pub fn new(error: impl Into<String>, file: Option<&Path>, rule: Option<u8>) -> ErrorReport {
        ErrorReport {
            error: error.into(),
            file: file.map(|p| p.to_string_lossy().into_owned()),
            rule,
            verdict: None,
        }
    }

    /// The same report with `"verdict": "error"`, as a comparison gives it.
    #[must_use]
    pub fn as_verdict(mut self) -> ErrorReport {
        self.verdict = Some("error".to_string());
        self
    }
}
