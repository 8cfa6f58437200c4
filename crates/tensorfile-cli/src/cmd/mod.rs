//! One module per subcommand. Each exposes `Args` (its clap arguments) and
//! `run(Args) -> Result<ExitCode, Failure>`; `main` prints a `Failure` on
//! one line and exits 2 when it is a [`Usage`] error, else 1.

use std::fmt::Display;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub mod check;
pub mod convert;
pub mod convert_pytorch;
pub mod dequantize;
pub mod diff;
pub mod hash;
pub mod inout;
pub mod inspect;
pub mod inspect_pytorch;
pub mod looking;
pub mod merge;
pub mod quantize;
pub mod quantized;
pub mod rewrite;
pub mod set;
pub mod shard;
pub mod stats;
pub mod validate;
pub mod verify;

/// The arguments of every command that reads one file and writes another.
#[derive(clap::Args)]
pub struct FileArgs {
    /// The file to read.
    #[arg(value_name = "IN")]
    pub input: PathBuf,
    /// The file to write (replaced atomically; it may be IN itself only for
    /// a canonical rewrite), or the directory to write a set into when IN
    /// is a set (a directory or an index) or --max-shard-size is given.
    #[arg(value_name = "OUT")]
    pub output: PathBuf,
    /// Write OUT as a set cut into shards of at most this many data bytes
    /// (bytes, or decimal KB, MB, GB, TB, as huggingface_hub counts).
    /// Default for a set: one output shard per input shard, holding the
    /// same tensors.
    #[arg(long, value_name = "SIZE", value_parser = tensorfile::reshard::parse_size)]
    pub max_shard_size: Option<u64>,
    /// Largest header length accepted in IN and written to OUT, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = tensorfile::DEFAULT_MAX_HEADER_LEN)]
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
    /// How IN is read.
    pub fn read_options(&self) -> tensorfile::ReadOptions {
        tensorfile::ReadOptions::default().max_header_len(self.max_header_len)
    }

    /// How OUT is written (canonical padding).
    pub fn write_options(&self) -> tensorfile::WriteOptions {
        tensorfile::WriteOptions {
            max_header_len: self.max_header_len,
            sync: !self.no_sync,
            ..tensorfile::WriteOptions::default()
        }
    }
}

/// Refuses to write OUT when it is one of the inputs (the same file by
/// device and inode, whatever its name): exit 1, naming both. Commands
/// that write call it before reading; an in-place canonical rewrite of a
/// safetensors file (`rewrite F F`, `convert F F` without `--dtype`) is
/// the one case allowed.
pub fn refuse_input_as_output<P: AsRef<Path>>(
    output: &Path,
    inputs: impl IntoIterator<Item = P>,
) -> Result<(), Failure> {
    Ok(tensorfile::atomic::check_not_input(output, inputs)?)
}

/// Prints the per-dtype lines of a summary (`dtypes:`, then one line per
/// dtype, largest alignment first as in a canonical file).
pub fn print_dtypes(per_dtype: &std::collections::BTreeMap<tensorfile::Dtype, (usize, u64)>) {
    out("dtypes:");
    for (dtype, (count, bytes)) in per_dtype.iter().rev() {
        out(format_args!(
            "  {:<11}  {count} tensors, {bytes} bytes",
            dtype.name()
        ));
    }
}

/// What the input at `path` is (the library's one way in).
pub fn input_kind(path: &std::path::Path) -> Result<tensorfile::input::Kind, Failure> {
    Ok(tensorfile::input::detect(path)?)
}

/// Why a command that reads safetensors does not take an input of `kind`,
/// and what to do instead.
pub fn not_safetensors(path: &std::path::Path, kind: tensorfile::input::Kind) -> String {
    format!(
        "{}: this is {kind}, not safetensors; `tensorfile convert` turns it into safetensors",
        path.display()
    )
}

/// Refuses an input that is not a safetensors file or set (exit 1, with
/// what it is and what to do instead); returns which of the two it is.
pub fn safetensors_input(path: &std::path::Path) -> Result<tensorfile::input::Kind, Failure> {
    let kind = input_kind(path)?;
    if kind.is_safetensors() {
        Ok(kind)
    } else {
        Err(not_safetensors(path, kind).into())
    }
}

/// The sha256 of a tensor's bytes, in hex (the library's one sha256:
/// `hash --per-tensor` and embedded digests give the same).
pub fn sha256_hex(t: &impl tensorfile::TensorData) -> Result<String, tensorfile::Error> {
    Ok(tensorfile::digest::tensor_sha256(t)?.hex())
}

/// A failure that ends a command: exit status 2 for a [`Usage`] error, else 1.
pub type Failure = Box<dyn std::error::Error + Send + Sync>;

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
    /// A boxed [`Failure`] carrying `message`.
    pub fn failure(message: impl Display) -> Failure {
        Box::new(Usage(message.to_string()))
    }
}

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
    // One line whatever the messages quote: no newline, carriage return or
    // other control character survives.
    line.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Prints a line to stdout. A closed pipe (`| head`) ends the program
/// quietly with status 0; any other write error (a full disk, `>/dev/full`)
/// is reported and ends it with status 1.
pub fn out(line: impl Display) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{line}") {
        if e.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("tensorfile: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}
