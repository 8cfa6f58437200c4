//! GGUF in the `inspect`, `validate` and `convert` commands, run as a user
//! runs them.

use std::fs;
use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;
use tensorfile_testkit::{run, stderr, stdout};

/// `tests/fixtures/gguf`.
fn gguf_fixtures() -> PathBuf {
    tensorfile_testkit::fixture("gguf")
}

fn tensorfile(args: &[&str]) -> Output {
    run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn manifest() -> Value {
    serde_json::from_str(&fs::read_to_string(gguf_fixtures().join("manifest.json")).unwrap())
        .unwrap()
}

#[test]
fn inspect_json_gives_what_gguf_py_reads() {
    let m = manifest();
    let f = &m["model"]["gguf"]["Q4_K_M"];
    let path = gguf_fixtures().join("model/llama_tiny-Q4_K_M.gguf");
    let o = tensorfile(&["inspect", "--json", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["format"], "gguf");
    assert_eq!(j["version"], f["version"]);
    assert_eq!(j["alignment"], f["alignment"]);
    assert_eq!(j["data_offset"], f["data_offset"]);
    assert_eq!(j["architecture"], "llama");
    let tensors = j["tensors"].as_array().unwrap();
    let expected = f["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), expected.len());
    for (t, e) in tensors.iter().zip(expected) {
        assert_eq!(t["name"], e["name"]);
        assert_eq!(t["ggml_type"], e["ggml_type"]);
        assert_eq!(t["dims"], e["dims"]);
        assert_eq!(t["shape"], e["numpy_shape"]);
        assert_eq!(t["bytes"], e["nbytes"]);
    }
    // The vocabulary is summarized: its length and first elements.
    let vocab = j["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kv| kv["key"] == "tokenizer.ggml.tokens")
        .unwrap();
    assert_eq!(vocab["len"], 300);
    assert_eq!(vocab["value"]["first"][0], "<s>");
    let q5 = &j["types"]["Q5_0"];
    assert_eq!(q5["bits_per_weight"], 5.5);
    let total: u64 = expected
        .iter()
        .map(|e| {
            e["dims"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .product::<u64>()
        })
        .sum();
    assert_eq!(j["parameters"], total);

    // --hash: the sha256 of each tensor's stored bytes, as the manifest has.
    let o = tensorfile(&["inspect", "--json", "--hash", path.to_str().unwrap()]);
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    for (t, e) in j["tensors"].as_array().unwrap().iter().zip(expected) {
        assert_eq!(t["sha256"], e["sha256"], "{}", e["name"]);
    }
}

#[test]
fn inspect_text_shows_both_shapes_and_bits_per_weight() {
    let path = gguf_fixtures().join("model/llama_wide256-Q4_K_M.gguf");
    let o = tensorfile(&["inspect", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(
        text.contains("format: GGUF v3, little-endian, alignment 32"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("blk.0.attn_k.weight"))
        .unwrap();
    assert!(
        line.contains("Q4_K") && line.contains("[256, 128]") && line.contains("[128, 256]"),
        "{line}"
    );
    assert!(
        text.contains(
            "Q6_K  3 tensors  175104 (175.1K) parameters  143640 bytes (140.3 KiB)  6.5625 bits per weight"
        ),
        "{text}"
    );
    assert!(text.contains("(300 x STRING)"), "{text}");
}

/// A GGUF file with one F32 tensor named `name` and one string KV.
fn tiny_gguf(name: &str, value: &str) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    let s = |b: &mut Vec<u8>, s: &str| {
        b.extend((s.len() as u64).to_le_bytes());
        b.extend(s.as_bytes());
    };
    s(&mut b, "general.name");
    b.extend(8u32.to_le_bytes());
    s(&mut b, value);
    s(&mut b, name);
    b.extend(1u32.to_le_bytes());
    b.extend(4u64.to_le_bytes());
    b.extend(0u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    b.extend([0u8; 16]);
    b
}

#[test]
fn untrusted_text_is_escaped_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evil.gguf");
    fs::write(&path, tiny_gguf("w\u{1b}[31mred\u{202e}", "a\"b\u{7}\nc")).unwrap();
    let o = tensorfile(&["inspect", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(!text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'));
    assert!(text.contains(r"w\u001b[31mred\u202e"), "{text}");
    assert!(
        text.contains(r#"general.name: STRING = "a\"b\u0007\u000ac""#),
        "{text}"
    );
    // JSON keeps the text as it is (escaped by JSON itself).
    let o = tensorfile(&["inspect", "--json", path.to_str().unwrap()]);
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["tensors"][0]["name"], "w\u{1b}[31mred\u{202e}");
}

#[test]
fn validate_accepts_the_real_files_and_refuses_broken_ones() {
    for entry in fs::read_dir(gguf_fixtures().join("files")).unwrap() {
        let p = entry.unwrap().path();
        let o = tensorfile(&["validate", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
        assert!(stdout(&o).starts_with(&format!("{}: ok\n", p.display())));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.gguf");
    let mut bytes = tiny_gguf("w", "x");
    bytes.truncate(bytes.len() - 4);
    fs::write(&path, &bytes).unwrap();
    let p = path.to_str().unwrap();
    let o = tensorfile(&["validate", p]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        format!("{p}: invalid: tensor \"w\": its bytes 96..112 reach past the end of the file at byte 108\n")
    );
    let o = tensorfile(&["validate", "--json", p]);
    assert_eq!(o.status.code(), Some(1));
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["valid"], false);
    assert_eq!(j["format"], "gguf");
    // inspect: one line on stderr naming the file, exit 1.
    let o = tensorfile(&["inspect", p]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("tensorfile: {p}: tensor \"w\"")),
        "{err}"
    );
}

#[test]
fn convert_gguf_writes_a_hugging_face_directory() {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("model");
    let input = gguf_fixtures().join("model/llama_tiny-Q8_0.gguf");
    let o = tensorfile(&[
        "convert",
        input.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--json",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["direction"], "gguf-to-hf");
    assert_eq!(j["dtype"], "BF16");
    assert_eq!(j["decoded"], 16);
    for f in [
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(dest.join(f).is_file(), "{f}");
    }
    let o = tensorfile(&["validate", dest.join("model.safetensors").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));

    // --keep-quant: MLX affine weights.
    let dest2 = out.path().join("mlx");
    let o = tensorfile(&[
        "convert",
        input.to_str().unwrap(),
        dest2.to_str().unwrap(),
        "--keep-quant",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("16 kept quantized as MLX affine"),
        "{}",
        stdout(&o)
    );

    // Misuse: a file as OUT, flags of the other direction, GGUF flags
    // without GGUF: exit 2.
    // (A `.safetensors` or `.npz` name is the raw direction, tests/it/gguf_raw.rs.)
    let file_out = out.path().join("x.out");
    fs::write(&file_out, b"").unwrap();
    let o = tensorfile(&[
        "convert",
        input.to_str().unwrap(),
        file_out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = tensorfile(&[
        "convert",
        input.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--type",
        "q8_0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let st = gguf_fixtures().join("model/hf_llama_tiny/model.safetensors");
    let o = tensorfile(&[
        "convert",
        st.to_str().unwrap(),
        out.path().join("y.safetensors").to_str().unwrap(),
        "--keep-quant",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--keep-quant applies only to GGUF"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn convert_to_gguf_gives_the_converters_bytes_and_checks_its_flags() {
    let out = tempfile::tempdir().unwrap();
    let dir = gguf_fixtures().join("model/hf_llama_tiny");
    let dest = out.path().join("x.gguf");
    let o = tensorfile(&[
        "convert",
        dir.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--type",
        "q8_0",
        "--json",
        "--no-sync",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["direction"], "hf-to-gguf");
    assert_eq!(j["tensor_types"]["Q8_0"], 16);
    assert_eq!(
        fs::read(&dest).unwrap(),
        fs::read(gguf_fixtures().join("model/llama_tiny-Q8_0.gguf")).unwrap()
    );
    for bad in [
        vec!["--type", "q3_k"],
        vec!["--type", "nonsense"],
        vec!["--raw"],
        vec!["--arch", "llama"],
        vec!["--dtype", "bf16"],
        vec!["--keep-quant"],
    ] {
        let mut args = vec!["convert", dir.to_str().unwrap(), dest.to_str().unwrap()];
        args.extend(bad.iter().copied());
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1);
    }
    // A directory of an unknown architecture: exit 1, one line naming it.
    let o = tensorfile(&[
        "convert",
        gguf_fixtures().join("../real/hf/bert").to_str().unwrap(),
        dest.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("architecture \"bert\""),
        "{}",
        stderr(&o)
    );
}
