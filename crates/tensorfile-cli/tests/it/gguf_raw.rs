//! Any GGUF file to one safetensors or npz file, as it is (issue 36 item
//! 3), checked against gguf-py's decoding of a `GGUFWriter` file of an
//! architecture not mapped here (`raw` in the fixture manifest, made by
//! `scripts/make_gguf_fixtures.py raw`).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tensorfile_testkit::{entries, fixture, json, manifest, run, stderr};

fn tensorfile(args: &[&str]) -> std::process::Output {
    run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn unmapped() -> std::path::PathBuf {
    fixture("gguf").join("files/unmapped_arch_v3.gguf")
}

/// A safetensors file's header and, per tensor, (dtype, shape, sha256 of
/// its bytes).
fn read_safetensors(path: &Path) -> (Value, BTreeMap<String, (String, Value, String)>) {
    let bytes = fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut tensors = BTreeMap::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let [a, b] = [0, 1].map(|i| t["data_offsets"][i].as_u64().unwrap() as usize);
        tensors.insert(
            name.clone(),
            (
                t["dtype"].as_str().unwrap().to_string(),
                t["shape"].clone(),
                hex::encode(Sha256::digest(&data[a..b])),
            ),
        );
    }
    (header, tensors)
}

/// The tensors of `path` against gguf-py's decoded values (all F32).
fn assert_gguf_pys_values(path: &Path) {
    let m = manifest("gguf");
    let want = m["raw"]["decoded_by_gguf_py"].as_object().unwrap();
    let (_, got) = read_safetensors(path);
    assert_eq!(got.len(), want.len());
    for (name, w) in want {
        let (dtype, shape, sha) = &got[name];
        assert_eq!(dtype, "F32", "{name}");
        assert_eq!(shape, &w["shape"], "{name}");
        assert_eq!(
            sha,
            w["f32_sha256"].as_str().unwrap(),
            "{name}: not gguf-py's values"
        );
    }
}

#[test]
fn an_unmapped_gguf_becomes_a_safetensors_file_with_gguf_pys_values() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("u.safetensors");
    let o = tensorfile(&[
        "convert",
        unmapped().to_str().unwrap(),
        dest.to_str().unwrap(),
        "--json",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(dest.is_file());
    let j = json(&o);
    assert_eq!(j["direction"], "gguf-raw");
    assert_eq!(j["decoded"], 2);
    assert_eq!(
        j["metadata_dropped"],
        serde_json::json!(["tokenizer.ggml.tokens"])
    );
    // Plain types kept (F16 stays F16), quantized ones decoded to F32,
    // GGUF names and row-major shapes.
    let (header, tensors) = read_safetensors(&dest);
    let m = manifest("gguf");
    for (name, w) in m["raw"]["decoded_by_gguf_py"].as_object().unwrap() {
        let want_dtype = if w["ggml_type"] == "F16" {
            "F16"
        } else {
            "F32"
        };
        assert_eq!(tensors[name].0, want_dtype, "{name}");
        assert_eq!(tensors[name].1, w["shape"], "{name}");
    }
    // The metadata: each key's value as JSON text; long arrays dropped.
    let meta = &header["__metadata__"];
    assert_eq!(meta["general.architecture"], "\"mamba9\"");
    assert_eq!(meta["mamba9.block_count"], "2");
    assert_eq!(meta["mamba9.rope.freq_base"], "12345.5");
    assert_eq!(meta["mamba9.use_thing"], "true");
    assert_eq!(meta["mamba9.big"], "-1099511627776");
    assert_eq!(meta["mamba9.small_list"], "[1,2,3]");
    assert!(meta.get("tokenizer.ggml.tokens").is_none());

    // As F32 throughout: every value is gguf-py's, bit for bit.
    let f32_dest = out.path().join("f32.safetensors");
    let o = tensorfile(&[
        "convert",
        unmapped().to_str().unwrap(),
        f32_dest.to_str().unwrap(),
        "--dtype",
        "f32",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_gguf_pys_values(&f32_dest);
}

#[test]
fn an_unmapped_gguf_becomes_an_npz_file_with_gguf_pys_values() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("u.npz");
    let o = tensorfile(&[
        "convert",
        unmapped().to_str().unwrap(),
        dest.to_str().unwrap(),
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A file, not a directory of that name.
    assert!(dest.is_file(), "{dest:?} is not a file");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("npz has no metadata"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // Read back (as F32) through the npz reader.
    let back = out.path().join("back.safetensors");
    let o = tensorfile(&[
        "convert",
        dest.to_str().unwrap(),
        back.to_str().unwrap(),
        "--dtype",
        "f32",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_gguf_pys_values(&back);
    // --compress applies here too.
    let z = out.path().join("z.npz");
    let o = tensorfile(&[
        "convert",
        unmapped().to_str().unwrap(),
        z.to_str().unwrap(),
        "--compress",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_mapped_gguf_to_a_safetensors_name_is_a_file_too() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("m.safetensors");
    let input = fixture("gguf").join("model/llama_tiny-Q8_0.gguf");
    let o = tensorfile(&[
        "convert",
        input.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(dest.is_file());
    let (_, tensors) = read_safetensors(&dest);
    // GGUF names, not Hugging Face ones.
    assert!(tensors.contains_key("blk.0.attn_q.weight"));
}

#[test]
fn an_unmapped_gguf_to_a_directory_is_refused_naming_the_raw_direction() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("model");
    let o = tensorfile(&[
        "convert",
        unmapped().to_str().unwrap(),
        dest.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("\"mamba9\"") && e.contains(".safetensors or .npz"),
        "{e}"
    );
    assert!(entries(out.path()).is_empty(), "{:?}", entries(out.path()));
    // Options of other directions are misuse.
    let input = unmapped();
    for bad in [
        vec!["x.npz", "--keep-quant"],
        vec!["x.npz", "--compress", "--dtype", "f32"],
        vec!["x.npz", "--dtype", "f16"],
        vec!["x.npy"],
        vec!["x.safetensors", "--type", "q8_0"],
    ] {
        let dest = out.path().join(bad[0]);
        let mut args = vec!["convert", input.to_str().unwrap(), dest.to_str().unwrap()];
        args.extend(&bad[1..]);
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
    }
    assert!(entries(out.path()).is_empty(), "{:?}", entries(out.path()));
}

/// A safetensors file of `(name, dtype, shape)` tensors, zero-filled but
/// for a ramp, built here.
fn safetensors_of(path: &Path, tensors: &[(&str, &str, &[u64])]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape) in tensors {
        let size = match *dtype {
            "F32" | "I32" => 4,
            _ => 2,
        };
        let n: u64 = shape.iter().product();
        let start = data.len();
        for i in 0..n {
            match *dtype {
                "F32" => data.extend_from_slice(&(i as f32 * 0.01).to_le_bytes()),
                "I32" => data.extend_from_slice(&(i as i32).to_le_bytes()),
                // F16 ramp: small integers' halves are exact in F16 too.
                _ => data.extend_from_slice(&[0, 0x3c][..size]),
            }
        }
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let h = Value::Object(header).to_string();
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(h.as_bytes());
    bytes.extend_from_slice(&data);
    fs::write(path, bytes).unwrap();
}

#[test]
fn raw_q8_0_quantizes_every_tensor_it_can_hold_and_reports_the_rest() {
    let out = tempfile::tempdir().unwrap();
    let input = out.path().join("in.safetensors");
    safetensors_of(
        &input,
        &[
            ("a.proj", "F32", &[4, 64]),
            ("b", "F16", &[2, 32]),
            ("c.weight", "F32", &[2, 2, 32]),
            ("bias", "F32", &[64]),
            ("odd", "F32", &[3, 40]),
            ("ids", "I32", &[4, 32]),
        ],
    );
    let dest = out.path().join("x.gguf");
    let o = tensorfile(&[
        "convert",
        input.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--raw",
        "--arch",
        "thing",
        "--type",
        "q8_0",
        "--json",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j = json(&o);
    let not: BTreeMap<String, (String, String)> = j["not_converted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["tensor"].as_str().unwrap().to_string(),
                (
                    e["type"].as_str().unwrap().to_string(),
                    e["reason"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect();
    assert_eq!(not.len(), 3, "{not:?}");
    assert_eq!(not["bias"], ("F32".into(), "1-D".into()));
    assert_eq!(
        not["odd"],
        ("F32".into(), "rows of 40 are not whole blocks of 32".into())
    );
    assert_eq!(not["ids"].0, "I32");
    let o = tensorfile(&["inspect", dest.to_str().unwrap(), "--json"]);
    let g = json(&o);
    let types: BTreeMap<String, String> = g["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["ggml_type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for name in ["a.proj", "b", "c.weight"] {
        assert_eq!(types[name], "Q8_0", "{name}");
    }
    assert_eq!(types["bias"], "F32");
    assert_eq!(types["odd"], "F32");
    assert_eq!(types["ids"], "I32");
    // The text output says the same.
    let o = tensorfile(&[
        "convert",
        input.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--raw",
        "--arch",
        "thing",
        "--type",
        "q8_0",
        "--no-sync",
    ]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("3 tensors not written as Q8_0") && text.contains("bias as F32 (1-D)"),
        "{text}"
    );
}

/// `--keep-quant` with a `.safetensors` OUT: the Q8_0 and Q4_K tensors as
/// MLX affine weights, which `dequantize` turns into gguf-py's values.
#[test]
fn kept_quantized_raw_weights_dequantize_to_gguf_pys_values() {
    let out = tempfile::tempdir().unwrap();
    let kept = out.path().join("k.safetensors");
    let o = tensorfile(&[
        "convert",
        unmapped().to_str().unwrap(),
        kept.to_str().unwrap(),
        "--keep-quant",
        "--json",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        json(&o)["kept_quantized"],
        serde_json::json!(["blk.0.out.weight", "blk.1.out.weight"])
    );
    let (header, tensors) = read_safetensors(&kept);
    assert_eq!(header["__metadata__"]["format"], "mlx");
    assert_eq!(tensors["blk.0.out.weight"].0, "U32");
    assert_eq!(tensors["blk.1.out.scales"].1, serde_json::json!([2, 8]));
    // Q8_0 is 8 bits, Q4_K 4 (as config.json says for a directory).
    let config = out.path().join("config.json");
    fs::write(
        &config,
        r#"{"quantization": {"group_size": 32, "bits": 8, "mode": "affine",
            "blk.1.out": {"group_size": 32, "bits": 4}}}"#,
    )
    .unwrap();
    let back = out.path().join("d.safetensors");
    let o = tensorfile(&[
        "dequantize",
        kept.to_str().unwrap(),
        back.to_str().unwrap(),
        "--dtype",
        "f32",
        "--config",
        config.to_str().unwrap(),
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m = manifest("gguf");
    let want = &m["raw"]["decoded_by_gguf_py"];
    let (_, got) = read_safetensors(&back);
    for name in ["blk.0.out.weight", "blk.1.out.weight"] {
        assert_eq!(
            got[name].2,
            want[name]["f32_sha256"].as_str().unwrap(),
            "{name}"
        );
    }
}
