//! `inspect` and `convert` on PyTorch checkpoints, run as a user runs them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use tensorfile::Decode;

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

#[test]
fn convert_writes_a_canonical_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tied.safetensors");
    let p = pytorch("zip_tied.pt");
    let o = tensorfile(&[
        "convert",
        "--no-sync",
        p.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout(&o).contains("1 tensors (+1 aliases)"));
    assert!(o.stderr.is_empty(), "no progress bar off a terminal");
    let file = tensorfile::SafeTensors::open(&out).unwrap();
    assert_eq!(
        file.metadata()
            .unwrap()
            .get("head.weight")
            .map(String::as_str),
        Some("emb.weight")
    );
    let again = tensorfile::writer::serialize(file.tensors(), file.metadata()).unwrap();
    assert!(again == file.as_bytes(), "canonical");

    // A safetensors input is a canonical rewrite: the same bytes again.
    let out2 = dir.path().join("again.safetensors");
    let o = tensorfile(&["convert", out.to_str().unwrap(), out2.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&out2).unwrap());

    // --shared copy keeps both names.
    let o = tensorfile(&[
        "convert",
        "--shared",
        "copy",
        "--json",
        p.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (v["tensors"].as_u64(), v["aliases"].as_u64()),
        (Some(2), Some(0))
    );
}

#[test]
fn refused_conversion_exits_1_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("reject_conj.pt", None),
        ("evil_builtins_eval.pt", None),
        ("zip_views.pt", Some("--shared=error")),
        ("zip_simple.pt", Some("--key=nope")),
    ] {
        let out = dir.path().join("out.safetensors");
        let p = pytorch(name);
        let mut args = vec!["convert", p.to_str().unwrap(), out.to_str().unwrap()];
        args.extend(extra);
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(1), "{name}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(!out.exists(), "{name}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{name}: no temporary file left"
        );
    }
}

#[test]
fn convert_casts_checkpoints_with_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("views.safetensors");
    let p = pytorch("zip_views.pt");
    let o = tensorfile(&[
        "convert",
        "--dtype",
        "bf16",
        p.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let file = tensorfile::SafeTensors::open(&out).unwrap();
    let col = file.get("col").unwrap();
    assert_eq!(col.dtype(), tensorfile::Dtype::BF16);
    assert_eq!(col.to_f32_vec().unwrap(), [1.0, 5.0, 9.0]);
    let t = file.get("t").unwrap();
    assert_eq!(t.shape(), [4, 3]);
    assert_eq!(t.to_f32_vec().unwrap()[..4], [0.0, 4.0, 8.0, 1.0]);
    assert_eq!(
        file.metadata().unwrap().get("format").map(String::as_str),
        Some("pt")
    );
}
