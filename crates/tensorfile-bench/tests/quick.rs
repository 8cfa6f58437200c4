//! Runs the benchmark's quick mode end to end, so the harness cannot rot.
//! Asserts what it prints and that it cleans up, never any timing.

use std::process::Output;

use tensorfile_testkit::run;

const BENCH: &str = env!("CARGO_BIN_EXE_tensorfile-bench");

/// Runs the benchmark with `args` and its files in a directory of its own;
/// what it printed, once it has succeeded and left nothing behind.
fn bench_ok(args: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let out: Output = run(
        BENCH,
        args.iter()
            .map(std::ffi::OsStr::new)
            .chain([std::ffi::OsStr::new("--dir"), dir.path().as_os_str()]),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {stderr}\n{stdout}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    stdout
}

#[test]
fn quick_mode_runs_every_group_and_cleans_up() {
    let stdout = bench_ok(&["--quick", "--rounds", "1"]);
    for heading in [
        "### 1. Header parse",
        "### 2. Open, map and parse",
        "### 3. Every tensor into owned memory",
        "### 4. Touching every byte",
        "### 5. Writing a large file",
        "### 6. Serializing a header",
    ] {
        assert!(
            stdout.contains(heading),
            "missing {heading:?} in:\n{stdout}"
        );
    }
    // Every row of every table has the table's column count.
    for line in stdout.lines().filter(|l| l.starts_with('|')) {
        assert_eq!(line.matches(" |").count(), 7, "bad row: {line}");
    }
    assert!(stdout.contains("tensorfile `SafeTensors::load`"));
    assert!(stdout.contains("safetensors `SafeTensors::deserialize`"));
    // Group 8 runs the C baseline beside the plans, or says why not.
    assert!(stdout.contains("C `pread` baseline"), "{stdout}");
    // The streamed plan is not in the default run.
    assert!(!stdout.contains("### Streamed plan"));
}

#[test]
fn one_group_runs_alone() {
    let stdout = bench_ok(&["--quick", "--rounds", "1", "open"]);
    assert!(stdout.contains("### 2. Open, map and parse"));
    assert!(!stdout.contains("### 1. Header parse"));
}

#[test]
fn unknown_group_is_a_usage_error() {
    assert_eq!(run(BENCH, ["no-such-group"]).status.code(), Some(2));
}

#[test]
fn the_stream_group_reports_its_peak_and_cleans_up() {
    let stdout = bench_ok(&["--quick", "stream", "--size", "16M", "--budget", "2M"]);
    assert!(stdout.contains("### Streamed plan"), "{stdout}");
    assert!(stdout.contains("16.0 MiB in 4 shards"), "{stdout}");
    assert!(stdout.contains("under a budget of 2.0 MiB"), "{stdout}");
    assert!(stdout.contains("peak anonymous memory under twice the budget"));
    // A size that is not one is a usage error.
    let out = run(BENCH, ["stream", "--size", "4X"]);
    assert_eq!(out.status.code(), Some(2));
}
