//! One module per subcommand. Each exposes `Args` (its clap arguments) and
//! `run(Args) -> Result<ExitCode, Failure>`; `main` maps a `Failure` to exit
//! status 1 and prints it on one line.

use std::fmt::Display;
use std::io::{self, Write};

pub mod check;
pub mod convert;
pub mod convert_pytorch;
pub mod dequantize;
pub mod inspect;
pub mod inspect_pytorch;
pub mod merge;
pub mod quantize;
pub mod quantized;
pub mod rewrite;
pub mod set;
pub mod shard;
pub mod validate;

/// A failure that ends a command with exit status 1.
pub type Failure = Box<dyn std::error::Error + Send + Sync>;

/// The error and its causes on one line, with no backtrace.
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
    line.replace('\n', " ")
}

/// Prints a line to stdout; a closed pipe (`| head`) ends the program quietly.
pub fn out(line: impl Display) {
    let mut stdout = io::stdout().lock();
    if writeln!(stdout, "{line}").is_err() {
        std::process::exit(0);
    }
}
