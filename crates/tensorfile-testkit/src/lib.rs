//! What the workspace's tests share, so that no test file keeps its own
//! copy: where the fixtures are, running the `tensorfile` command and
//! reading what it printed (text or JSON), large sparse files, and one
//! deterministic pseudo-random generator (failures reproduce from the
//! seed).
//!
//! ```
//! use tensorfile_testkit::Rng;
//! let mut a = Rng::new(7);
//! let mut b = Rng::new(7);
//! assert_eq!(a.next_u64(), b.next_u64());
//! assert!(a.below(10) < 10);
//! ```

#![warn(missing_docs)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's `tests/fixtures` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// A fixture by its path under `tests/fixtures` (`valid/minimal_bf16.safetensors`).
pub fn fixture(rel: &str) -> PathBuf {
    fixtures().join(rel)
}

/// The JSON of a fixture directory's `manifest.json`
/// (`tests/fixtures/<rel>/manifest.json`).
pub fn manifest(rel: &str) -> serde_json::Value {
    let path = fixture(rel).join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names in `dir`, sorted: what a test expects a save to leave there
/// (no temporary file, no litter).
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Little-endian F32 bytes as values (a trailing partial word is dropped).
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Runs the program `bin` (a test's `env!("CARGO_BIN_EXE_tensorfile")`)
/// with `args`, waiting for it; stdout and stderr are captured.
pub fn run<I, S>(bin: &str, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_env(bin, &[], args)
}

/// [`run`] with these environment variables set (the rest inherited).
pub fn run_env<I, S>(bin: &str, env: &[(&str, &str)], args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(bin);
    command.args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"))
}

/// What a run printed on stdout, parsed as JSON (`--json`); a test fails
/// showing both streams when it is not JSON.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {:?} / stderr {:?}", stdout(o), stderr(o)))
}

/// Writes a valid safetensors file at `path`: the 8-byte length, `header`
/// (its JSON, padded with spaces to a multiple of 8 bytes) and `data_len`
/// zero bytes left as a hole, so that a gigabyte costs no disk or time.
pub fn sparse_file(path: &Path, header: &str, data_len: u64) {
    let mut text = header.as_bytes().to_vec();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&text);
    std::fs::write(path, &bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(bytes.len() as u64 + data_len))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// A [`sparse_file`] of one 1 GiB F32 weight, `layer.weight` of
/// [16384, 16384]: long enough to read that a test can act while a
/// command is still reading it.
pub fn sparse_gib_f32(path: &Path) {
    sparse_file(
        path,
        r#"{"layer.weight":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}}"#,
        1 << 30,
    );
}

/// What a run printed on stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a run printed on stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// xorshift64*: small, deterministic, no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced: xorshift needs a nonzero state).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// `n` values in [-1, 1).
    pub fn noise(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0)
            .collect()
    }
}
