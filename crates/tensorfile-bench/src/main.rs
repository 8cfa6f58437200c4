//! `tensorfile-bench`: this library and the reference `safetensors` crate
//! side by side in one process, interleaved, warm page cache; prints
//! medians and ratios as Markdown.
//!
//! ```text
//! cargo run --release -p tensorfile-bench -- [--quick] [--rounds N] [GROUP...]
//! cargo run --release -p tensorfile-bench -- stream --size 4G --budget 256M
//! ```

mod alloc;
mod fixture;
mod measure;
mod plans;
mod reader;
mod report;
mod stream;
mod writer;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// Benchmarks tensorfile against the reference safetensors crate.
#[derive(Parser, Debug)]
#[command(name = "tensorfile-bench")]
struct Cli {
    /// Groups to run (default: all but stream).
    #[arg(value_enum)]
    groups: Vec<Group>,
    /// Small sizes and few rounds: finishes in seconds, for CI.
    #[arg(long)]
    quick: bool,
    /// Timed rounds per case (default 7, or 3 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Where to put the generated files (a fresh temporary directory inside
    /// it, removed at the end). Default: the system's temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Tensor counts for the parse group, comma-separated (default
    /// 10000,100000,1000000, or 1000,10000 with --quick).
    #[arg(long, value_delimiter = ',')]
    tensors: Vec<usize>,
    /// Unknown fields in the one entry of the unknown-fields group
    /// (default 7500000, a 96 MB header, or 100000 with --quick).
    #[arg(long)]
    fields: Option<usize>,
    /// Bytes of data in the stream group's set, as 4G, 256M, 64K or bytes
    /// (default 4G, or 64M with --quick).
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// The stream group's plan budget, written as --size is (default 256M,
    /// or 8M with --quick).
    #[arg(long, value_parser = parse_size)]
    budget: Option<u64>,
}

/// `4G`, `256M`, `64K` (powers of 1024, `iB` or `B` after them allowed)
/// or a plain number of bytes.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{text:?} is not a size (4G, 256M, 64K or bytes)"))
}

/// A benchmark group.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Group {
    /// 1. Header parse + full validation, 10k/100k/1M tensors.
    Parse,
    /// 2. Open, map and parse a 1 GiB file with a 200-tensor header.
    Open,
    /// 3. Every tensor of a 1 GiB file into owned memory.
    Load,
    /// 4. Touch every byte of a 1 GiB file through the map.
    Touch,
    /// 5. Write 1 GiB of tensors to a path (atomic save), sync off and on.
    Write,
    /// 6. Serialize a file of 100k tiny tensors (the header dominates).
    Serialize,
    /// 7. Header parse of one entry with millions of unknown fields, against
    ///    the known-field path on a header of the same size.
    Unknown,
    /// 8. Read plans: every tensor against half of every tensor's rows, 1
    ///    and 2 threads, fresh and caller-touched memory, beside the C
    ///    `pread` baseline.
    Plans,
    /// A set of --size bytes streamed through a plan's --budget: peak
    /// anonymous memory. Not in the default run (it writes --size bytes).
    Stream,
}

/// What every group needs to know.
pub struct Config {
    /// Small sizes for CI.
    pub quick: bool,
    /// Timed rounds per case.
    pub rounds: usize,
    /// The temporary directory for generated files.
    pub dir: PathBuf,
    /// Tensor counts for the parse group, if not the default.
    pub tensors: Vec<usize>,
    /// Unknown fields for the unknown-fields group, if not the default.
    pub fields: Option<usize>,
    /// The stream group's set size, if not the default.
    pub size: Option<u64>,
    /// The stream group's budget, if not the default.
    pub budget: Option<u64>,
}

impl Config {
    /// Tensor counts for the header-parse group.
    pub fn parse_sizes(&self) -> Vec<usize> {
        if !self.tensors.is_empty() {
            self.tensors.clone()
        } else if self.quick {
            vec![1_000, 10_000]
        } else {
            vec![10_000, 100_000, 1_000_000]
        }
    }

    /// Unknown fields in the unknown-fields group's entry.
    pub fn unknown_fields(&self) -> usize {
        self.fields
            .unwrap_or(if self.quick { 100_000 } else { 7_500_000 })
    }

    /// Bytes of data in the stream group's set.
    pub fn stream_size(&self) -> u64 {
        self.size
            .unwrap_or(if self.quick { 64 << 20 } else { 4 << 30 })
    }

    /// The stream group's plan budget.
    pub fn stream_budget(&self) -> u64 {
        self.budget
            .unwrap_or(if self.quick { 8 << 20 } else { 256 << 20 })
    }

    /// Size of the large file.
    pub fn big_size(&self) -> u64 {
        if self.quick {
            16 << 20
        } else {
            1 << 30
        }
    }
}

/// A failure that stops the benchmark.
#[derive(Debug)]
pub struct BenchError(pub String);

impl From<std::io::Error> for BenchError {
    fn from(e: std::io::Error) -> Self {
        BenchError(format!("I/O error: {e}"))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(BenchError(msg)) => {
            eprintln!("tensorfile-bench: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), BenchError> {
    let groups = if cli.groups.is_empty() {
        let mut all = Group::value_variants().to_vec();
        all.retain(|g| *g != Group::Stream);
        all
    } else {
        cli.groups
    };
    let base = cli.dir.unwrap_or_else(std::env::temp_dir);
    let temp = tempfile::Builder::new()
        .prefix("tensorfile-bench-")
        .tempdir_in(&base)?;
    let cfg = Config {
        quick: cli.quick,
        rounds: cli.rounds.unwrap_or(if cli.quick { 3 } else { 7 }),
        dir: temp.path().to_path_buf(),
        tensors: cli.tensors,
        fields: cli.fields,
        size: cli.size,
        budget: cli.budget,
    };
    println!(
        "## tensorfile-bench{}: {} timed rounds per case, interleaved, warm page cache\n",
        if cfg.quick { " --quick" } else { "" },
        cfg.rounds
    );
    let mut big: Option<PathBuf> = None;
    for group in groups {
        let section = match group {
            Group::Parse => reader::parse(&cfg)?,
            Group::Open => reader::open(&cfg, big_file(&cfg, &mut big)?)?,
            Group::Load => reader::load(&cfg, big_file(&cfg, &mut big)?)?,
            Group::Touch => reader::touch(&cfg, big_file(&cfg, &mut big)?)?,
            Group::Write => writer::write(&cfg, big_file(&cfg, &mut big)?)?,
            Group::Serialize => writer::serialize_header(&cfg)?,
            Group::Unknown => reader::unknown_fields(&cfg)?,
            Group::Plans => plans::plans(&cfg, big_file(&cfg, &mut big)?)?,
            Group::Stream => stream::stream(&cfg)?,
        };
        println!("{section}");
    }
    temp.close()?;
    Ok(())
}

/// The large file with a 200-tensor header, written on first use.
fn big_file<'a>(cfg: &Config, big: &'a mut Option<PathBuf>) -> Result<&'a PathBuf, BenchError> {
    if big.is_none() {
        let path = cfg.dir.join("large.safetensors");
        fixture::write_file(&path, &fixture::few_large(200, cfg.big_size()))?;
        *big = Some(path);
    }
    big.as_ref()
        .ok_or_else(|| BenchError("large file missing".into()))
}
