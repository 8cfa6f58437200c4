//! Inputs of the wrong kind are named for what they are, with what to do.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn tensorfile(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn safetensors_commands_given_a_pytorch_checkpoint_point_to_convert() {
    let pt = fixtures().join("pytorch/zip_simple.pt");
    let pt = pt.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    let out = out.to_str().unwrap();
    let outdir = dir.path().join("shards");
    for args in [
        vec!["rewrite", pt, out],
        vec!["shard", pt, outdir.to_str().unwrap()],
        vec!["quantize", "--scheme", "int4-g32-sym", pt, out],
        vec!["dequantize", pt, out],
    ] {
        let o = tensorfile(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("zip_simple.pt: this is a PyTorch checkpoint, not safetensors")
                && err.contains("tensorfile convert"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("rule 1"), "{args:?}: {err}");
    }
    // validate reports it as an invalid safetensors file, on its line.
    let o = tensorfile(&["validate", pt]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with(&format!("{pt}: invalid: "))
            && text.contains("PyTorch checkpoint")
            && text.contains("tensorfile convert"),
        "{text}"
    );
}

#[test]
fn a_directory_without_weights_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = dir.path().join("o.safetensors");
    for args in [
        vec!["convert", d, out.to_str().unwrap()],
        vec!["inspect", d],
    ] {
        let o = tensorfile(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("holding no model weights"), "{args:?}: {err}");
        assert!(!err.contains("os error 21"), "{args:?}: {err}");
    }
}
