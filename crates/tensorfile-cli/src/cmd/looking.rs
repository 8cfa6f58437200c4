//! What `diff`, `stats`, `hash` and `verify` share: untrusted text made
//! printable and the exit status of a comparison (2 for an input that
//! cannot be read); and the config.json beside a model `dequantize` reads.

use std::path::Path;
use std::process::ExitCode;

use super::Failure;

/// Text from a file made safe for a terminal (the command line's one
/// rule, [`super::escape_text`]).
pub fn escape(text: &str) -> String {
    super::escape_text(text).into_owned()
}

/// A path, escaped for printing.
pub fn shown(path: &Path) -> String {
    escape(&path.display().to_string())
}

/// Runs a comparison whose failures (unreadable or invalid inputs, usage
/// errors) exit with status 2, as `diff(1)` and `cmp(1)` do: the error is
/// reported on one line naming the file, or with `json` as the object
/// `{verdict: "error", error, file, rule}` on stdout.
pub fn comparison(
    input: Option<&Path>,
    json: bool,
    run: impl FnOnce() -> Result<ExitCode, Failure>,
) -> Result<ExitCode, Failure> {
    match run() {
        Ok(code) => Ok(code),
        Err(err) => {
            let usage = err.is_usage();
            let input = input.filter(|_| !usage);
            if json && !usage {
                super::out_json(&super::error_report(&err, input).as_verdict())?;
            } else {
                super::report(&err, input, false);
            }
            Ok(ExitCode::from(2))
        }
    }
}
