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

pub mod convert;
pub mod dequantize;
pub mod merge;
pub mod quantize;
pub mod rewrite;
pub mod shard;
pub mod validate;
