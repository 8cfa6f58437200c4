//! `inspect` and `convert` on PyTorch checkpoints, run as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn pytorch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pytorch")
        .join(name)
}

fn tensorfile(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn inspect_describes_checkpoints() {
    let p = pytorch("zip_views.pt");
    let o = tensorfile(&["inspect", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(text.contains("format: PyTorch zip checkpoint"), "{text}");
    assert!(text.contains("tensors: 5"), "{text}");
    assert!(text.contains("t     F32          [4, 3]"), "{text}");

    let p = pytorch("legacy_simple.pt");
    let o = tensorfile(&["inspect", "--json", "--hash", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["format"], "PyTorch legacy checkpoint (before 1.6)");
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 3);
    assert_eq!(tensors[0]["name"], "a");
    assert_eq!(
        tensors[0]["sha256"],
        "e2c0a71510b5394df7773b63fb5f54372b84c3564e67811bde7d665be227976d"
    );
}

#[test]
fn inspect_refuses_hostile_checkpoints_on_one_line() {
    for name in [
        "evil_posix_system.pt",
        "hostile_deep_nesting.pt",
        "reject_torchscript.pt",
        "tar_format_stub.pt",
    ] {
        let p = pytorch(name);
        let o = tensorfile(&["inspect", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{name}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("tensorfile: "), "{err}");
        assert!(o.stdout.is_empty());
    }
}
