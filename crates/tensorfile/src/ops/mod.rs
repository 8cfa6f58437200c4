//! Whole commands as functions: the layer every front end calls.
//!
//! Each operation is one module holding a request, a report and a function
//! from the one to the other:
//!
//! - `<Op>Request`: what to do, as plain data (serde). Its fields are the
//!   command's options, documented once here; the CLI builds it from its
//!   flags, the Python package from its keywords.
//! - `<Op>Report`: what was done (serde). It *is* the `--json` schema and
//!   the dict Python returns; `docs/commands/<command>.md` lists its keys,
//!   and a test holds the page and the struct together.
//! - `fn <op>(&<Op>Request, &dyn Progress) -> Result<<Op>Report>`: opens
//!   the inputs (through [`open`](crate::open)), refuses an input as its own
//!   output, picks defaults, writes atomically. A request it cannot run is
//!   [`Error::Request`](crate::Error::Request).
//!
//! Front ends do no work of their own: they parse, call an operation, and
//! print its report (as text, JSON or a dict).

pub mod check;
pub mod convert;
pub mod dequantize;
pub mod diff;
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
