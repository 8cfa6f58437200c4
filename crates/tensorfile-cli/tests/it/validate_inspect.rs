//! The `validate` and `inspect` commands, run as a user runs them.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};
use tensorfile_testkit::{fixtures, stdout};

use serde_json::Value;

fn tensorfile(args: &[&str]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn files_in(dir: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(fixtures().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    v.sort();
    v
}

#[test]
fn validate_says_ok_for_valid_files() {
    for path in files_in("valid") {
        let o = tensorfile(&["validate", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", path.display());
        assert_eq!(stdout(&o), format!("{}: ok\n", path.display()));
    }
}

#[test]
fn validate_names_the_rule_for_invalid_files() {
    for path in files_in("invalid") {
        let json: Value =
            serde_json::from_str(&fs::read_to_string(path.with_extension("json")).unwrap())
                .unwrap();
        let rule = json["rule"].as_u64().unwrap();
        let p = path.to_str().unwrap();
        let o = tensorfile(&["validate", p]);
        assert_eq!(o.status.code(), Some(1), "{p}");
        let text = stdout(&o);
        assert!(
            text.starts_with(&format!("{p}: invalid: rule {rule}: ")),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1);

        let o = tensorfile(&["validate", "--json", p]);
        assert_eq!(o.status.code(), Some(1));
        let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["file"], p);
        assert_eq!(v["valid"], false);
        assert_eq!(v["rule"], rule);
        assert!(v["error"]
            .as_str()
            .unwrap()
            .starts_with(&format!("rule {rule}")));
        assert_eq!(v["warnings"], Value::Array(vec![]));
    }
}

#[test]
fn validate_reports_every_file_and_fails_if_any_is_bad() {
    let good = fixtures().join("valid/worked_example.safetensors");
    let bad = fixtures().join("invalid/overlap.safetensors");
    let o = tensorfile(&[
        "validate",
        "--json",
        good.to_str().unwrap(),
        bad.to_str().unwrap(),
        "/no/such/file",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["valid"], true);
    assert_eq!(lines[0]["rule"], Value::Null);
    assert_eq!(lines[0]["error"], Value::Null);
    assert_eq!(lines[1]["rule"], 5);
    assert_eq!(lines[2]["rule"], Value::Null);
    // The verdict names the file once, as its "file".
    assert!(lines[2]["file"].as_str().unwrap().contains("/no/such/file"));
    assert!(!lines[2]["error"]
        .as_str()
        .unwrap()
        .contains("/no/such/file"));
}

#[test]
fn validate_prints_warnings_after_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("extra.safetensors");
    let header = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"note":"x"}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.push(7);
    fs::write(&path, bytes).unwrap();
    let p = path.to_str().unwrap();
    let o = tensorfile(&["validate", p]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("{p}: ok"));
    assert!(lines[1].starts_with(&format!("{p}: warning: ")) && lines[1].contains("note"));
}

#[test]
fn inspect_json_matches_the_fixture_descriptions() {
    for path in files_in("valid") {
        let expected: Value =
            serde_json::from_str(&fs::read_to_string(path.with_extension("json")).unwrap())
                .unwrap();
        let o = tensorfile(&["inspect", "--json", "--hash", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0));
        let got: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(got["header_len"], expected["header_len"]);
        assert_eq!(got["metadata"], expected["metadata"]);
        assert_eq!(got["size"], expected["size"]);
        let (g, e) = (
            got["tensors"].as_array().unwrap(),
            expected["tensors"].as_array().unwrap(),
        );
        assert_eq!(g.len(), e.len());
        for (g, e) in g.iter().zip(e) {
            for key in ["name", "dtype", "shape", "data_offsets", "sha256"] {
                assert_eq!(g[key], e[key], "{}: {key}", path.display());
            }
        }
    }
}

#[test]
fn inspect_text_summarizes() {
    let path = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let o = tensorfile(&["inspect", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    for needle in [
        "tensors:",
        "dtypes:",
        "BF16",
        "parameters:",
        "alignment:",
        "model.norm.weight",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn errors_are_one_line_on_stderr_with_status_1_and_usage_errors_2() {
    let bad = fixtures().join("invalid/not_json.safetensors");
    let o = tensorfile(&["inspect", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("rule 2"));
    assert_eq!(tensorfile(&["validate"]).status.code(), Some(2));
    assert_eq!(tensorfile(&["no-such-command"]).status.code(), Some(2));
    assert_eq!(
        tensorfile(&["inspect", "--bogus", "x"]).status.code(),
        Some(2)
    );
}

#[cfg(target_os = "linux")]
#[test]
fn a_failed_write_to_stdout_is_status_1_and_a_closed_pipe_keeps_the_status() {
    let file = fixtures().join("valid/thousand_tensors.safetensors");
    let full = fs::File::create("/dev/full").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(["inspect", file.to_str().unwrap()])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8(o.stderr)
        .unwrap()
        .contains("standard output"));
    // A reader that stops early: the writer ends quietly, with the
    // command's own status (0 here: the file is valid).
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(["inspect", file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `validate bad* | head -1`: the reader leaves after the first line, and
/// the status still says that files are invalid.
#[test]
fn a_closed_pipe_does_not_turn_invalid_files_into_success() {
    use std::io::{BufRead, BufReader};
    let mut args = vec!["validate".to_string()];
    // Many files, so that the pipe is closed while lines are still coming.
    for _ in 0..100 {
        for f in files_in("invalid") {
            args.push(f.to_str().unwrap().to_string());
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("invalid"), "{first}");
    // The reader is gone (dropped above): later lines meet a closed pipe.
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
