//! numpy files in `convert`, run as a user runs them, against the files
//! numpy and the reference safetensors wrote for the same arrays
//! (`tests/fixtures/npz/convert`, `scripts/make_npz_convert_fixtures.py`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tensorfile_testkit::{run, stderr};

/// `tests/fixtures/npz`.
fn npz_fixtures() -> PathBuf {
    tensorfile_testkit::fixture("npz")
}

fn convert_dir() -> PathBuf {
    npz_fixtures().join("convert")
}

fn tensorfile(args: &[&str]) -> Output {
    run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn safetensors_to_npz_and_npy_is_numpys_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("model.npz");
    let src = convert_dir().join("model.safetensors");
    let o = tensorfile(&["convert", "--no-sync", p(&src), p(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        fs::read(&out).unwrap(),
        fs::read(convert_dir().join("model.npz")).unwrap(),
        "not np.savez's bytes"
    );
    let out = tmp.path().join("weight.npy");
    let src = convert_dir().join("weight.safetensors");
    let o = tensorfile(&["convert", p(&src), p(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        fs::read(&out).unwrap(),
        fs::read(convert_dir().join("weight.npy")).unwrap()
    );
    // Deflated: np.savez_compressed's bytes; back to safetensors through
    // the reader they are the same file.
    let z = tmp.path().join("z.npz");
    let src = convert_dir().join("model.safetensors");
    let o = tensorfile(&["convert", "--compress", p(&src), p(&z)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_same_bytes(&z, &convert_dir().join("model_compressed.npz"));
    let back = tmp.path().join("back.safetensors");
    let o = tensorfile(&["convert", "--dtype", "bf16", p(&z), p(&back)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(&back).unwrap(), fs::read(&src).unwrap());
}

/// Asserts that the files at `got` and `want` are the same bytes, naming
/// the first offset where they differ (not printing both files).
fn assert_same_bytes(got: &Path, want: &Path) {
    let (g, w) = (fs::read(got).unwrap(), fs::read(want).unwrap());
    let first = g.iter().zip(&w).position(|(a, b)| a != b);
    assert!(
        g == w,
        "{} is not {}: {} bytes against {}, first difference at {first:?}",
        got.display(),
        want.display(),
        g.len(),
        w.len()
    );
}

#[test]
fn compress_is_np_savez_compresseds_bytes() {
    // Members past one deflate block, zeros, a ramp, small and empty ones
    // (scripts/make_npz_convert_fixtures.py): zlib's deflate at level 6,
    // as Python's zipfile calls it.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("deflate.npz");
    let src = convert_dir().join("deflate.safetensors");
    let o = tensorfile(&["convert", "--compress", "--no-sync", p(&src), p(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_same_bytes(&out, &convert_dir().join("deflate.npz"));
}

#[test]
fn numpy_to_safetensors_is_the_references_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let want = fs::read(convert_dir().join("model.safetensors")).unwrap();
    for npz in ["model.npz", "model_compressed.npz"] {
        let out = tmp.path().join(format!("{npz}.safetensors"));
        let src = convert_dir().join(npz);
        // lm_head.weight is bfloat16, which numpy saves as '<V2'.
        let o = tensorfile(&["convert", p(&src), p(&out)]);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(
            err.contains("lm_head.weight") && err.contains("<V2") && err.contains("--dtype"),
            "{err}"
        );
        assert!(!out.exists());
        let o = tensorfile(&["convert", "--json", "--dtype", "bf16", p(&src), p(&out)]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let j: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            (
                j["tensors"].as_u64(),
                j["cast"].as_u64(),
                j["opaque"].as_u64()
            ),
            (Some(10), Some(0), Some(1))
        );
        assert_eq!(fs::read(&out).unwrap(), want, "{npz}");
    }
    let out = tmp.path().join("weight.safetensors");
    let o = tensorfile(&["convert", p(&convert_dir().join("weight.npy")), p(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        fs::read(&out).unwrap(),
        fs::read(convert_dir().join("weight.safetensors")).unwrap()
    );
    // Without opaque arrays, --dtype casts.
    let out = tmp.path().join("f16.safetensors");
    let o = tensorfile(&[
        "convert",
        "--dtype",
        "f16",
        p(&convert_dir().join("weight.npy")),
        p(&out),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(&["inspect", "--json", p(&out)]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["tensors"][0]["dtype"], "F16", "{j}");
}

#[test]
fn refusals_and_misuse() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x.safetensors");
    // Structured and object arrays: exit 1, named, nothing written.
    for name in [
        "refuse_structured.npy",
        "refuse_object_pickle.npy",
        "refuse_savez_object.npz",
    ] {
        let o = tensorfile(&["convert", p(&npz_fixtures().join(name)), p(&out)]);
        assert_eq!(o.status.code(), Some(1), "{name}");
        let err = stderr(&o);
        assert!(err.contains(name) && err.lines().count() == 1, "{err}");
        assert!(!out.exists());
    }
    let model = convert_dir().join("model.safetensors");
    let npz = convert_dir().join("model.npz");
    for (args, what) in [
        (
            vec!["convert", p(&npz), p(&tmp.path().join("y.npz"))],
            "numpy and so is OUT",
        ),
        (
            vec!["convert", "--compress", p(&npz), p(&out)],
            "--compress",
        ),
        (
            vec![
                "convert",
                "--compress",
                p(&model),
                p(&tmp.path().join("w.npy")),
            ],
            "--compress",
        ),
        (
            vec![
                "convert",
                "--dtype",
                "f32",
                p(&model),
                p(&tmp.path().join("y.npz")),
            ],
            "--dtype",
        ),
        (
            vec![
                "convert",
                "--max-shard-size",
                "1KB",
                p(&model),
                p(&tmp.path().join("y.npz")),
            ],
            "--max-shard-size",
        ),
        (vec!["convert", "--key", "model", p(&npz), p(&out)], "--key"),
        (
            vec!["convert", "--type", "q8_0", p(&npz), p(&out)],
            "--type",
        ),
    ] {
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(what), "{args:?}: {}", stderr(&o));
    }
    // Several tensors into one .npy: refused, nothing written.
    let one = tmp.path().join("one.npy");
    let o = tensorfile(&["convert", p(&model), p(&one)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("holds one array"), "{}", stderr(&o));
    assert!(!one.exists());
    // OUT may not be IN.
    let copy = tmp.path().join("w.npy");
    fs::copy(convert_dir().join("weight.npy"), &copy).unwrap();
    let o = tensorfile(&["convert", p(&copy), p(&copy)]);
    assert_ne!(o.status.code(), Some(0));
    assert_eq!(
        fs::read(&copy).unwrap(),
        fs::read(convert_dir().join("weight.npy")).unwrap()
    );
}

#[test]
fn a_safetensors_set_becomes_one_npz_and_an_npz_a_set() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    let model = convert_dir().join("model.safetensors");
    let o = tensorfile(&["shard", "--max-shard-size", "200", p(&model), p(&set)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let npz = tmp.path().join("all.npz");
    let o = tensorfile(&["convert", p(&set), p(&npz)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let back = tmp.path().join("back");
    let o = tensorfile(&[
        "convert",
        "--dtype",
        "bf16",
        "--max-shard-size",
        "200",
        p(&npz),
        p(&back),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(back.join("model.safetensors.index.json").is_file());
    let merged = tmp.path().join("merged.safetensors");
    let o = tensorfile(&["merge", p(&back), p(&merged)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(&merged).unwrap(), fs::read(&model).unwrap());
}
