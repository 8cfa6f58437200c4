//! One module per subcommand. Each exposes `Args` (its clap arguments) and
//! `run(Args) -> Result<ExitCode, Failure>`; `main` prints a `Failure` on
//! one line and exits 2 when it is a [`Usage`] error, else 1.

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub mod check;
pub mod convert;
pub mod convert_pytorch;
pub mod dequantize;
pub mod diff;
pub mod edit;
pub mod fetch;
pub mod generate;
pub mod gguf;
pub mod hash;
pub mod inspect;
pub mod looking;
pub mod merge;
pub mod npz;
pub mod quantize;
pub mod quantized;
pub mod remote;
pub mod rewrite;
pub mod shard;
pub mod size;
pub mod stats;
pub mod validate;
pub mod verify;
pub mod words;

/// The arguments of every command that reads one file and writes another.
#[derive(clap::Args)]
pub struct FileArgs {
    /// The file to read.
    #[arg(value_name = "IN")]
    pub input: PathBuf,
    /// The file to write (replaced atomically; it may be IN itself only for
    /// a canonical rewrite), or the directory to write a set into when IN
    /// is a set (a directory or an index) or --max-shard-size is given.
    /// OUT may be an object store URL (s3://BUCKET/KEY, gs://, az://): the
    /// output is made in a temporary directory (TMPDIR, its size free
    /// there) and uploaded, a set's shards first and its index last.
    #[arg(value_name = "OUT")]
    pub output: PathBuf,
    /// With OUT at a store URL: replace the object (or a set's index and
    /// shards) already there, which is otherwise refused. Not atomic for
    /// concurrent readers: during the replacement a set has no index.
    #[arg(long)]
    pub replace: bool,
    /// Write OUT as a set cut into shards of at most this many data bytes
    /// (bytes, or decimal KB, MB, GB, TB, as huggingface_hub counts).
    /// Default for a set: one output shard per input shard, holding the
    /// same tensors.
    #[arg(long, value_name = "SIZE", value_parser = size::parse_size)]
    pub max_shard_size: Option<u64>,
    /// Largest header length accepted in IN and written to OUT, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = tensorfile_core::DEFAULT_MAX_HEADER_LEN)]
    pub max_header_len: u64,
    /// Do not sync OUT and its directory to disk (faster; the replacement
    /// stays atomic, but may be lost on a power failure).
    #[arg(long)]
    pub no_sync: bool,
    /// Print the result as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

impl FileArgs {
    /// IN, which errors naming no file are reported against, and whether
    /// as JSON.
    pub fn report_to(&self) -> (Option<&Path>, bool) {
        (Some(&self.input), self.json)
    }

    /// IN, OUT and how, as an operation's request takes them (remote
    /// reads within the command's `--timeout`).
    pub fn in_out(&self) -> tensorfile_ops::transform::InOut {
        tensorfile_ops::transform::InOut {
            input: self.input.clone(),
            output: self.output.clone(),
            max_shard_size: self.max_shard_size,
            max_header_len: self.max_header_len,
            sync: !self.no_sync,
            timeout: remote::timeout_seconds(),
            replace: self.replace,
        }
    }
}

/// Prints the per-dtype lines of a summary (`dtypes:`, then one line per
/// dtype, largest alignment first as in a canonical file).
pub fn print_dtypes(per_dtype: &std::collections::BTreeMap<tensorfile::Dtype, (usize, u64)>) {
    out("dtypes:");
    let rows: Vec<Vec<String>> = per_dtype
        .iter()
        .rev()
        .map(|(dtype, (count, bytes))| {
            vec![
                dtype.name().to_string(),
                words::plural(*count as u64, "tensor"),
                words::bytes(*bytes),
            ]
        })
        .collect();
    for line in words::table(&rows, &[words::Align::Left, words::Align::Right]) {
        out(format_args!("  {line}"));
    }
}

/// What the input at `path` is (the library's one way in).
pub fn input_kind(path: &std::path::Path) -> Result<tensorfile::InputKind, Failure> {
    Ok(tensorfile::probe(path)?.kind())
}

/// Why a command that reads safetensors does not take an input of `kind`,
/// and what to do instead.
pub fn not_safetensors(path: &std::path::Path, kind: tensorfile::InputKind) -> String {
    format!(
        "{}: this is {kind}, not safetensors; `tensorfile convert` turns it into safetensors",
        path.display()
    )
}

/// A failure that ends a command: exit status 2 for a [`Usage`] error, else 1.
///
/// The library's errors are kept as [`tensorfile::Error`] (a core or
/// loader error is converted into it where it arises), so the report reads
/// the file and the rule from its accessors; anything else (a usage error,
/// a remote or terminal failure, a message) is boxed as it is.
#[derive(Debug)]
pub enum Failure {
    /// An error of the library.
    Library(tensorfile::Error),
    /// Any other error.
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl Failure {
    /// The error, for its message and causes.
    pub fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Failure::Library(e) => e,
            Failure::Other(e) => e.as_ref(),
        }
    }

    /// Whether this is a [`Usage`] error (exit status 2).
    pub fn is_usage(&self) -> bool {
        match self {
            Failure::Other(e) => e.is::<Usage>(),
            Failure::Library(e) => matches!(e.detail(), tensorfile::Error::Request { .. }),
        }
    }
}

impl Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Display::fmt(self.as_error(), f)
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.as_error().source()
    }
}

/// The library's errors, and those that convert into it, as
/// [`Failure::Library`].
macro_rules! library_failure {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure {
                Failure::Library(tensorfile::Error::from(e))
            }
        }
    )*};
}
library_failure!(
    tensorfile::Error,
    tensorfile::CoreError,
    tensorfile::PytorchError,
    tensorfile_core::ShardError,
    tensorfile::WriteError,
    tensorfile::FormatError,
    tensorfile::gguf::GgufError,
    tensorfile::npz::NpzError
);

/// A digest error: the library's error it carries, or itself.
impl From<tensorfile::digest::DigestError> for Failure {
    fn from(e: tensorfile::digest::DigestError) -> Failure {
        match e {
            tensorfile::digest::DigestError::Read(e) => Failure::Library(e),
            other => Failure::Other(other.into()),
        }
    }
}

/// Other errors, boxed as they are, as [`Failure::Other`].
macro_rules! other_failure {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure {
                Failure::Other(e.into())
            }
        }
    )*};
}
other_failure!(
    Usage,
    String,
    &str,
    io::Error,
    Box<dyn std::error::Error + Send + Sync>
);

/// Arguments that clap accepts one by one but that do not make a command
/// together, or a value only the command can check (an unknown scheme, a
/// mode without its bits): a usage error, exit status 2, like clap's own.
#[derive(Debug)]
pub struct Usage(pub String);

impl Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

impl Usage {
    /// A [`Failure`] carrying `message`.
    pub fn failure(message: impl Display) -> Failure {
        Usage(message.to_string()).into()
    }
}

/// How `main` reports a failure: on one line on stderr naming the file
/// (the command's input when the error names none), or with `--json` as
/// the object `{"error": text, "file": path, "rule": n}` on stdout, where
/// the command's JSON goes (`rule` is null unless a reader rule failed).
pub fn report(err: &Failure, input: Option<&Path>, json: bool) {
    let report = error_report(err, input);
    if json {
        // An ErrorReport holds strings and small integers: it prints.
        let _ = out_json(&report);
    } else {
        eprintln!("tensorfile: {}", report.error);
    }
}

/// The error as [`report`] gives it in JSON (the library's
/// [`ErrorReport`](tensorfile_ops::ErrorReport)).
pub fn error_report(err: &Failure, input: Option<&Path>) -> tensorfile_ops::ErrorReport {
    let (named, rule) = match err {
        Failure::Library(e) => (e.path().map(Path::to_path_buf), e.rule()),
        Failure::Other(_) => (None, None),
    };
    let file = named.clone().or_else(|| input.map(Path::to_path_buf));
    let mut text = one_line(err.as_error());
    if named.is_none() {
        if let Some(input) = input {
            // Messages made here often start with the path already.
            let shown = input.display().to_string();
            if !text.starts_with(&shown) {
                text = format!("{shown}: {text}");
            }
        }
    }
    tensorfile_ops::ErrorReport::new(text, file.as_deref(), rule)
}

/// The error and its causes on one line, with no backtrace.
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    // One line whatever the messages quote: no newline, carriage return or
    // other control character survives.
    escape_text(&tensorfile_ops::one_line(err)).into_owned()
}

/// Text that came from a file (tensor names, metadata) made safe for a
/// terminal: control characters (C0, DEL, C1) and the bidirectional
/// controls that reorder what follows become `\uXXXX`. That is a JSON
/// escape too, so one rule serves text and JSON lines (serde_json leaves
/// DEL and C1 raw): `a ESC [2J` prints as `a\u001b[2J`.
pub fn escape_text(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            escaped.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// Prints a report as one line of JSON (the command's `--json`).
pub fn out_json(report: &impl serde::Serialize) -> Result<(), Failure> {
    let text =
        serde_json::to_string(report).map_err(|e| format!("cannot print the report: {e}"))?;
    out(text);
    Ok(())
}

/// Prints a warning line on stderr (`tensorfile: warning: ...`), escaped.
pub fn warn(message: impl Display) {
    eprintln!("tensorfile: warning: {}", escape_text(&message.to_string()));
}

/// Whether stdout was found closed (`| head`): later lines are dropped and
/// the command ends with its own status.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Prints a line to stdout, escaped ([`escape_text`]). A closed pipe
/// (`| head`) drops this and later lines quietly: the command goes on and
/// exits with its own status (`validate bad* | head -1` still says the
/// files are invalid). Any other write error (a full disk, `>/dev/full`)
/// is reported and ends the program with status 1.
pub fn out(line: impl Display) {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let text = line.to_string();
    let mut stdout = io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{}", escape_text(&text)).and_then(|_| stdout.flush()) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            return;
        }
        eprintln!("tensorfile: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::escape_text;

    #[test]
    fn control_and_bidi_characters_are_escaped_as_json_does() {
        assert_eq!(escape_text("plain.weight"), "plain.weight");
        assert_eq!(escape_text("a\u{1b}[2Jb\n"), "a\\u001b[2Jb\\u000a");
        assert_eq!(escape_text("\u{9b}x\u{202e}"), "\\u009bx\\u202e");
        let json = format!("\"{}\"", escape_text("\u{7f}\u{85}"));
        let back: String = serde_json::from_str(&json).unwrap();
        assert_eq!(back, "\u{7f}\u{85}");
    }
}
