//! `tensorfile rewrite`: canonical output, alignment, refusals.

use std::fs;
use std::path::PathBuf;
use std::process::Output;
use tensorfile_testkit::fixtures;

fn tensorfile(args: &[&std::ffi::OsStr]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn valid_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(fixtures().join("valid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    files
}

#[test]
fn rewrites_every_valid_fixture_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    for input in valid_files() {
        let o = tensorfile(&["rewrite".as_ref(), input.as_os_str(), out.as_os_str()]);
        assert!(
            o.status.success(),
            "{}: {}",
            input.display(),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            fs::read(&out).unwrap() == fs::read(&input).unwrap(),
            "{}",
            input.display()
        );
    }
}

#[test]
fn aligns_the_data_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    for input in valid_files() {
        for align in ["64", "4096"] {
            let o = tensorfile(&[
                "rewrite".as_ref(),
                "--align".as_ref(),
                align.as_ref(),
                "--json".as_ref(),
                input.as_os_str(),
                out.as_os_str(),
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(report["align"].as_u64(), Some(align.parse().unwrap()));
            let bytes = fs::read(&out).unwrap();
            let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            assert_eq!((8 + n) % align.parse::<u64>().unwrap(), 0);
            let v = tensorfile(&["validate".as_ref(), out.as_os_str()]);
            assert!(v.status.success());
            // Rewriting without --align gives the canonical file back.
            let back = dir.path().join("back.safetensors");
            let o = tensorfile(&["rewrite".as_ref(), out.as_os_str(), back.as_os_str()]);
            assert!(o.status.success());
            assert!(fs::read(&back).unwrap() == fs::read(&input).unwrap());
        }
    }
}

#[test]
fn rewrites_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    fs::copy(&input, &path).unwrap();
    let o = tensorfile(&[
        "rewrite".as_ref(),
        "--align".as_ref(),
        "4096".as_ref(),
        path.as_os_str(),
        path.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = tensorfile(&["rewrite".as_ref(), path.as_os_str(), path.as_os_str()]);
    assert!(o.status.success());
    assert!(fs::read(&path).unwrap() == fs::read(&input).unwrap());
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn refuses_invalid_input_and_leaves_the_output_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    fs::write(&out, b"keep me").unwrap();
    let input = fixtures().join("invalid/overlap.safetensors");
    let o = tensorfile(&["rewrite".as_ref(), input.as_os_str(), out.as_os_str()]);
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8(o.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("rule 5"), "{stderr}");
    assert_eq!(fs::read(&out).unwrap(), b"keep me");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

    let o = tensorfile(&[
        "rewrite".as_ref(),
        "--align".as_ref(),
        "32".as_ref(),
        input.as_os_str(),
        out.as_os_str(),
    ]);
    assert_eq!(o.status.code(), Some(2));
}
