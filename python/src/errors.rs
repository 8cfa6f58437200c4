//! The library's errors as Python exceptions.
//!
//! Everything becomes a `SafetensorError` (the reference's one exception
//! class, here a `ValueError` as the format page says a reader's rejection
//! is, so `except ValueError` catches it too) carrying the library's
//! message, which names the rule and the place, with the rule's number in its `rule` attribute (`None` for errors
//! that break no reader rule) and the file in `path`; except a missing
//! file, which is a `FileNotFoundError` worded as the reference words it,
//! and a `BaseException` that is not an `Exception` raised by a Python
//! callback (a file object's `read()` raising `KeyboardInterrupt` or
//! `SystemExit`), which comes back as itself: it asks the program to stop,
//! and must not be caught by `except Exception` as a failed read.

use std::io;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;

use crate::pyfile::CallbackError;

create_exception!(
    tensorfile,
    SafetensorError,
    PyValueError,
    "An error of tensorfile: a file that breaks a reader rule (the message names the rule and \
     the place; `rule` holds its number), a failed read or write, a tensor that is not there, \
     a refused request. A ValueError, as the format page says a reader rejects a bad file."
);

/// The error of a path that does not exist, as the reference says it.
fn not_found(path: &std::path::Path) -> PyErr {
    PyFileNotFoundError::new_err(format!("No such file or directory: {}", path.display()))
}

/// A `SafetensorError` with `message`, `rule` and `path` attributes.
pub fn safetensor_error(
    message: String,
    rule: Option<u8>,
    path: Option<&std::path::Path>,
) -> PyErr {
    Python::attach(|py| {
        let err = SafetensorError::new_err(message);
        let value = err.value(py);
        // Attributes on a fresh exception object cannot fail but for memory.
        let _ = value.setattr("rule", rule);
        let _ = value.setattr("path", path.map(|p| p.display().to_string()));
        err
    })
}

/// The exception a Python callback raised somewhere in `e`'s chain of
/// causes, if it is a `BaseException` but not an `Exception`: the one
/// place where callbacks' errors are sorted, for every conversion below.
fn stop_request(e: &(dyn std::error::Error + 'static)) -> Option<PyErr> {
    let mut cause = Some(e);
    while let Some(err) = cause {
        // An io::Error's source() skips the error it wraps: look inside.
        let inner = err
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .map_or(err, |inner| inner as &(dyn std::error::Error + 'static));
        if let Some(cb) = inner.downcast_ref::<CallbackError>() {
            return Python::attach(|py| {
                let stops = !cb.raised.is_instance_of::<PyException>(py);
                stops.then(|| cb.raised.clone_ref(py))
            });
        }
        cause = err.source();
    }
    None
}

/// The library's error as the Python exception the reference raises: the
/// one mapping of this package (a core error is converted into
/// `tensorfile::Error` with `From` where it arises).
pub fn error(e: tensorfile::Error) -> PyErr {
    if let Some(raised) = stop_request(&e) {
        return raised;
    }
    if e.is_not_found_file() {
        if let Some(path) = e.path() {
            return not_found(path);
        }
    }
    if let tensorfile::Error::Request { message } = e.detail() {
        return safetensor_error(keywords(message), None, e.path());
    }
    if let Some(tensorfile_core::Error::Output {
        path,
        problem: tensorfile_core::OutputError::Exists,
    }) = e.core()
    {
        // The command line's wording names its flag: this is the keyword.
        let message = format!(
            "{}: already exists: give replace=True to replace it",
            path.display()
        );
        return safetensor_error(message, None, Some(path));
    }
    safetensor_error(e.to_string(), e.rule(), e.path())
}

/// A refused request's message with the command line's flags named as
/// this package's keywords (`--allow-int` as `allow_int`): the operations
/// word their refusals for the command line.
fn keywords(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("--") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let flag = &tail[2..];
        let len = flag
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(flag.len());
        // A flag starts a word (`models--org--name` in a path is no flag).
        let starts_word = head
            .chars()
            .next_back()
            .is_none_or(|c| c.is_whitespace() || "`'\"(,".contains(c));
        if len == 0 || !starts_word || !flag.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push_str("--");
            rest = flag;
        } else {
            out.push_str(&flag[..len].replace('-', "_"));
            rest = &flag[len..];
        }
    }
    out.push_str(rest);
    out
}

/// A plain message.
pub fn msg(message: impl Into<String>) -> PyErr {
    safetensor_error(message.into(), None, None)
}

#[cfg(test)]
mod tests {
    use super::keywords;

    #[test]
    fn flags_become_keywords_and_paths_stay_as_they_are() {
        assert_eq!(
            keywords("--allow-int needs --dtype (`--group-size` too)"),
            "allow_int needs dtype (`group_size` too)"
        );
        let path = "/c/models--org--name/blobs/x: --no-sync and -- and --9";
        assert_eq!(
            keywords(path),
            "/c/models--org--name/blobs/x: no_sync and -- and --9"
        );
    }
}
