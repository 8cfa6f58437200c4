//! Every fixture, hostile or not, through the commands that read files
//! (`inspect`, `convert`): each run ends within the hostile-input limits
//! (10 s, 1 GiB peak RSS, under a 2 GiB address-space limit) with exit 0,
//! 1 or 2, and a failed conversion leaves nothing in its output
//! directory.

use std::path::{Path, PathBuf};

use tensorfile_testkit::{entries, fixtures, run_limited, Limits};

const BIN: &str = env!("CARGO_BIN_EXE_tensorfile");

/// The fixtures the command reads, by their extension.
fn inputs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("safetensors" | "pt" | "pth" | "bin" | "npz" | "npy" | "gguf")
            ) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&fixtures(), &mut out);
    out.sort();
    out
}

/// Runs one fixture through `inspect` and `convert`; returns the failures.
fn check(input: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let shown = input.strip_prefix(fixtures()).unwrap_or(input).display();
    let inspect = run_limited(BIN, [Path::new("inspect"), input], Limits::HOSTILE);
    failures.extend(
        inspect
            .within(Limits::HOSTILE, &format!("inspect {shown}"))
            .err(),
    );
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("out.safetensors");
    let convert = run_limited(BIN, [Path::new("convert"), input, &target], Limits::HOSTILE);
    failures.extend(
        convert
            .within(Limits::HOSTILE, &format!("convert {shown}"))
            .err(),
    );
    if convert.code != Some(0) && !entries(out.path()).is_empty() {
        failures.push(format!(
            "convert {shown} failed ({}) and left {:?}",
            convert.stderr.trim(),
            entries(out.path())
        ));
    }
    failures
}

#[test]
fn every_fixture_is_read_and_converted_within_the_limits() {
    let inputs = inputs();
    // Every kind of input is there: the sweep checks something.
    for ext in ["safetensors", "pt", "bin", "npz", "npy", "gguf"] {
        assert!(
            inputs
                .iter()
                .any(|p| p.extension().is_some_and(|e| e == ext)),
            "no .{ext} fixture"
        );
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(input) = inputs.get(i) else { break };
                let found = check(input);
                failures.lock().unwrap().extend(found);
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} fixtures:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
}
