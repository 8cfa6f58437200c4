//! Runs the benchmark's quick mode end to end, so the harness cannot rot.
//! Asserts what it prints and that it cleans up, never any timing.

use std::process::Command;

#[test]
fn quick_mode_runs_every_group_and_cleans_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfile-bench"))
        .arg("--quick")
        .arg("--rounds")
        .arg("1")
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run tensorfile-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {stderr}\n{stdout}");
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
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
}

#[test]
fn one_group_runs_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfile-bench"))
        .args(["--quick", "--rounds", "1", "open", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run tensorfile-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("### 2. Open, map and parse"));
    assert!(!stdout.contains("### 1. Header parse"));
}

#[test]
fn unknown_group_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfile-bench"))
        .arg("no-such-group")
        .output()
        .expect("run tensorfile-bench");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_stream_group_reports_its_peak_and_cleans_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfile-bench"))
        .args([
            "--quick", "stream", "--size", "16M", "--budget", "2M", "--dir",
        ])
        .arg(dir.path())
        .output()
        .expect("run tensorfile-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("### Streamed plan"), "{stdout}");
    assert!(stdout.contains("16.0 MiB in 4 shards"), "{stdout}");
    assert!(stdout.contains("under a budget of 2.0 MiB"), "{stdout}");
    assert!(stdout.contains("peak anonymous memory under twice the budget"));
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
    assert!(left.is_empty(), "files left behind: {left:?}");
    // A size that is not one is a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfile-bench"))
        .args(["stream", "--size", "4X"])
        .output()
        .expect("run tensorfile-bench");
    assert_eq!(out.status.code(), Some(2));
}
