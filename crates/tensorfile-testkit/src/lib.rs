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

pub mod aws;
pub mod azure;
pub mod gcs;
pub mod hostile;
mod http1;
pub mod serve;
pub mod tls;

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

/// This process's anonymous resident memory in bytes (`RssAnon` of
/// `/proc/self/status`: the resident set less file-backed and shared
/// pages), or `None` where the kernel does not say (not Linux).
pub fn rss_anon() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kib * 1024)
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

/// [`run`] in the directory `dir` (a test of relative paths: `x`, not
/// `/tmp/.../x`).
pub fn run_in<I, S>(bin: &str, dir: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin} in {}: {e}", dir.display()))
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

/// The limits a hostile input must stay within: wall time, peak resident
/// memory, and the address space the process may reserve (`ulimit -v`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Killed (and the test failed) past this many seconds.
    pub seconds: f64,
    /// The largest peak resident set allowed, in bytes.
    pub max_rss: u64,
    /// `RLIMIT_AS` for the process, in bytes.
    pub address_space: u64,
}

impl Limits {
    /// The hostile-input rule: 10 s, 1 GiB peak RSS, under a 2 GiB
    /// address-space limit.
    pub const HOSTILE: Limits = Limits {
        seconds: 10.0,
        max_rss: 1 << 30,
        address_space: 2 << 30,
    };
}

/// How a [`run_limited`] run ended.
#[derive(Debug)]
pub struct Bounded {
    /// The exit code, or `None` when a signal ended it (or the deadline).
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Wall time, in seconds.
    pub seconds: f64,
    /// Peak resident set, in bytes (the kernel's `ru_maxrss`).
    pub max_rss: u64,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

impl Bounded {
    /// `Err` describing the run unless it exited 0, 1 or 2 within the
    /// limits' time and memory.
    pub fn within(&self, limits: Limits, what: &str) -> Result<(), String> {
        let ok = matches!(self.code, Some(0..=2))
            && self.seconds <= limits.seconds
            && self.max_rss <= limits.max_rss;
        if ok {
            return Ok(());
        }
        Err(format!(
            "{what}: exit {:?} signal {:?} in {:.1} s, peak RSS {} MiB (limits {} s, {} MiB)\nstdout: {}\nstderr: {}",
            self.code,
            self.signal,
            self.seconds,
            self.max_rss >> 20,
            limits.seconds,
            limits.max_rss >> 20,
            self.stdout,
            self.stderr
        ))
    }

    /// Panics, showing the run, unless it exited 0, 1 or 2 within the
    /// limits' time and memory.
    pub fn assert_within(&self, limits: Limits, what: &str) {
        if let Err(e) = self.within(limits, what) {
            panic!("{e}");
        }
    }
}

/// Gives the process `command` starts the default disposition of SIGINT,
/// SIGTERM, SIGHUP and SIGPIPE, whatever the test run inherited: a shell
/// starts a background job (`cmd &`, `( trap '' INT; ... )`) with SIGINT
/// ignored, and an ignored signal stays ignored across `exec`, so a test
/// that signals its child would otherwise see it carry on. No signal is
/// blocked in it either (a signal mask is inherited across `exec` too).
/// Unix only.
pub fn default_signals(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal(2), sigemptyset(3) and sigprocmask(2) are
    // async-signal-safe, the only calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
                if libc::signal(sig, libc::SIG_DFL) == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Nor blocked: a mask is inherited across exec too.
            let mut none = std::mem::zeroed::<libc::sigset_t>();
            libc::sigemptyset(&mut none);
            if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Runs `bin` with `args` as a hostile input's test needs it: no standard
/// input, default signal dispositions (whatever the test run inherited),
/// `RLIMIT_AS` set to `limits.address_space`, killed at twice
/// `limits.seconds`, and its peak RSS read from the kernel when it is
/// reaped. Unix only.
pub fn run_limited<I, S>(bin: &str, args: I, limits: Limits) -> Bounded
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let address_space = limits.address_space;
    let mut command = Command::new(bin);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    default_signals(&mut command);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: address_space as libc::rlim_t,
                rlim_max: address_space as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    // Reaped below by wait4, which std's Child does not know of.
    #[allow(clippy::zombie_processes)]
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let pid = child.id() as libc::pid_t;
    let kill_at = start + Duration::from_secs_f64(limits.seconds * 2.0);
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child; reaping it here means std's
        // Child is never waited on (dropping it does not wait).
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if Instant::now() >= kill_at {
            // SAFETY: signals our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let seconds = start.elapsed().as_secs_f64();
    let exited = libc::WIFEXITED(status);
    Bounded {
        code: exited.then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        seconds,
        max_rss: usage.ru_maxrss as u64 * 1024,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// What a run printed on stdout, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a run printed on stderr, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A metadata value of a [`gguf_file`].
#[derive(Clone, Copy, Debug)]
pub enum GgufValue<'a> {
    /// A `UINT32` (type 4).
    U32(u32),
    /// A `STRING` (type 8).
    Str(&'a str),
}

/// One tensor of a [`gguf_file`]: name, dims (fastest first, as GGUF
/// stores them), ggml type id, and its bytes (written as given, whatever
/// the dims say: a hostile file's bytes need not match its shape).
pub type GgufTensor<'a> = (&'a str, Vec<u64>, u32, Vec<u8>);

/// The bytes of a GGUF v3 file holding `kv` and `tensors`, each tensor's
/// data at a 32-aligned offset: what tests and fuzz bodies build hostile
/// GGUF files with, shapes the library's writer would refuse included.
pub fn gguf_file(kv: &[(&str, GgufValue<'_>)], tensors: &[GgufTensor<'_>]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (key, value) in kv {
        string(&mut out, key);
        match value {
            GgufValue::U32(v) => {
                out.extend_from_slice(&4u32.to_le_bytes());
                out.extend_from_slice(&v.to_le_bytes());
            }
            GgufValue::Str(s) => {
                out.extend_from_slice(&8u32.to_le_bytes());
                string(&mut out, s);
            }
        }
    }
    let mut data = Vec::new();
    for (name, dims, ty, bytes) in tensors {
        string(&mut out, name);
        out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        data.extend_from_slice(bytes);
        data.resize(data.len().next_multiple_of(32), 0);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    out.extend_from_slice(&data);
    out
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

/// Holds the process's environment for one test: a test that sets or
/// removes variables (`HF_*`, `AWS_*`) holds this for its whole run, so
/// that no other such test of the same binary runs meanwhile (the tests of
/// a crate are one binary; the environment is the process's). A test that
/// panicked while holding it does not poison it for the others.
pub fn env_lock() -> std::sync::MutexGuard<'static, ()> {
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ENV.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_signals_undo_an_inherited_ignore() {
        use std::os::unix::process::ExitStatusExt;
        // This process ignores SIGINT, as a background job does; a shell
        // that sends itself SIGINT carries on unless default_signals
        // restored the default.
        let shell = || {
            let mut c = Command::new("sh");
            c.args(["-c", "kill -INT $$; exit 3"]);
            c
        };
        // SAFETY: plain signal(2) calls; the old disposition comes back.
        let old = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
        let inherited = shell().output();
        let restored = default_signals(&mut shell()).output();
        unsafe { libc::signal(libc::SIGINT, old) };
        assert_eq!(inherited.unwrap().status.code(), Some(3));
        assert_eq!(restored.unwrap().status.signal(), Some(libc::SIGINT));
    }

    #[test]
    fn run_limited_reports_exit_time_and_memory() {
        let ok = run_limited("sh", ["-c", "echo hi; exit 1"], Limits::HOSTILE);
        assert_eq!(ok.code, Some(1));
        assert_eq!(ok.stdout, "hi\n");
        assert!(ok.max_rss > 0 && ok.max_rss < Limits::HOSTILE.max_rss);
        ok.assert_within(Limits::HOSTILE, "sh");
        let slow = Limits {
            seconds: 0.2,
            ..Limits::HOSTILE
        };
        let killed = run_limited("sleep", ["5"], slow);
        assert_eq!(killed.signal, Some(libc::SIGKILL));
        assert!(killed.seconds < 2.0);
        // The address-space limit holds: a shell asked to reserve more
        // than it allows fails.
        let tight = Limits {
            address_space: 64 << 20,
            ..Limits::HOSTILE
        };
        let big = run_limited("python3", ["-c", "b = bytearray(256 << 20)"], tight);
        assert_ne!(big.code, Some(0), "{big:?}");
    }
}
