//! Replays every fuzz target's corpus (`fuzz/corpus/<target>/`) and every
//! input that ever failed (`fuzz/regressions/<target>/`) through the
//! target's body, so `cargo test` (overflow checks on) catches a
//! regression without a fuzzer. A failure names the file.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz")).to_path_buf()
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut all: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    all.sort();
    all
}

/// Runs `target` on every file of `dir`; returns how many ran and the
/// files whose run panicked.
fn replay(target: fn(&[u8]), dir: &Path) -> (usize, Vec<String>) {
    let mut failed = Vec::new();
    let inputs = files(dir);
    for path in &inputs {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if std::panic::catch_unwind(|| target(&data)).is_err() {
            failed.push(path.display().to_string());
        }
    }
    (inputs.len(), failed)
}

#[test]
fn every_corpus_and_regression_input_passes() {
    let fuzz = fuzz_dir();
    let mut failed = Vec::new();
    for (name, target) in tensorfile_fuzz_targets::TARGETS {
        let (corpus, bad) = replay(target, &fuzz.join("corpus").join(name));
        assert!(corpus > 0, "fuzz/corpus/{name}/ holds no input");
        failed.extend(bad);
        let (_, bad) = replay(target, &fuzz.join("regressions").join(name));
        failed.extend(bad);
    }
    assert!(failed.is_empty(), "inputs that fail: {failed:#?}");
}

#[test]
fn every_target_has_a_fuzz_binary() {
    // fuzz/Cargo.toml declares one [[bin]] per target, each a wrapper of
    // the function of the same name.
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for (name, _) in tensorfile_fuzz_targets::TARGETS {
        let wrapper = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&wrapper)
            .unwrap_or_else(|e| panic!("{}: {e}", wrapper.display()));
        assert!(
            text.contains(&format!("tensorfile_fuzz_targets::{name}(")),
            "{} does not call tensorfile_fuzz_targets::{name}",
            wrapper.display()
        );
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no [[bin]] {name}"
        );
    }
}
