//! Hostile and edge-case inputs of the GGUF <-> Hugging Face conversions,
//! run through the CLI under the hostile-input limits (10 s, 1 GiB peak
//! RSS, 2 GiB address space): tensors with a zero dimension beside a huge
//! one (valid, empty, and converted both ways), conversions that fail
//! after the first file could have been written (all or nothing), and
//! `--raw` with an empty tensor. Every input is built here.

use std::fs;
use std::path::Path;

use tensorfile::gguf::GgufFile;
use tensorfile::TensorData;
use tensorfile_testkit::{
    entries, gguf_file as gguf, run_limited, Bounded, GgufValue as V, Limits,
};

const F32: u32 = 0;
const Q8_0: u32 = 8;

fn tensorfile(args: &[&str]) -> Bounded {
    run_limited(env!("CARGO_BIN_EXE_tensorfile"), args, Limits::HOSTILE)
}

/// The metadata of a tiny Llama (2 heads, hidden 4), without `skip`.
fn llama_kv(skip: &str) -> Vec<(&'static str, V<'static>)> {
    [
        ("general.architecture", V::Str("llama")),
        ("llama.attention.head_count", V::U32(2)),
        ("llama.embedding_length", V::U32(4)),
        ("llama.feed_forward_length", V::U32(8)),
        ("llama.block_count", V::U32(1)),
        ("llama.context_length", V::U32(16)),
    ]
    .into_iter()
    .filter(|(k, _)| *k != skip)
    .collect()
}

/// `token_embd.weight`, 4 x 4 F32 (config.json's vocabulary size).
fn embedding() -> (&'static str, Vec<u64>, u32, Vec<u8>) {
    ("token_embd.weight", vec![4, 4], F32, vec![0; 64])
}

/// A safetensors file of `tensors` (name, dtype, shape, data).
fn safetensors(tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            (*name).to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    let mut text = serde_json::Value::Object(header).to_string();
    text.push_str(&" ".repeat(text.len().next_multiple_of(8) - text.len()));
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// A tiny Llama Hugging Face directory in `dir` holding `tensors`.
fn hf_dir(dir: &Path, tensors: &[(&str, &str, Vec<u64>, Vec<u8>)]) {
    fs::create_dir_all(dir).unwrap();
    let config = serde_json::json!({
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "hidden_size": 4,
        "intermediate_size": 8,
        "num_hidden_layers": 1,
        "max_position_embeddings": 16,
        "rms_norm_eps": 1e-5,
        "vocab_size": 4,
    });
    fs::write(dir.join("config.json"), config.to_string()).unwrap();
    fs::write(dir.join("model.safetensors"), safetensors(tensors)).unwrap();
}

/// The shape of `name` in the safetensors file at `path`.
fn safetensors_shape(path: &Path, name: &str) -> Vec<u64> {
    let file = tensorfile::SafeTensors::open(path).unwrap();
    file.tensor(name).unwrap().shape().to_vec()
}

/// The logical (numpy) shape of `name` in the GGUF file at `path`.
fn gguf_shape(path: &Path, name: &str) -> Vec<u64> {
    let file = GgufFile::open(path).unwrap();
    file.tensor(name).unwrap().shape().to_vec()
}

#[test]
fn gguf_with_a_zero_dimension_beside_a_huge_one_converts_to_hugging_face() {
    let tmp = tempfile::tempdir().unwrap();
    // (what, GGUF dims, ggml type, flags): q/k are permuted, ffn_down is
    // not; Q8_0 is decoded by the plan's own jobs, or kept as MLX weights.
    let cases: [(&str, [u64; 2], u32, &[&str]); 7] = [
        ("f32 2^40 rows", [0, 1 << 40], F32, &[]),
        ("f32 2^28 rows", [0, 1 << 28], F32, &[]),
        ("q8_0 2^40 rows", [0, 1 << 40], Q8_0, &[]),
        ("q8_0 2^40 rows kept", [0, 1 << 40], Q8_0, &["--keep-quant"]),
        ("f32 2^62 rows", [0, 1 << 62], F32, &["--dtype", "f32"]),
        ("q8_0 rows of 2^62", [1 << 62, 0], Q8_0, &[]),
        (
            "q8_0 rows of 2^62 kept",
            [1 << 62, 0],
            Q8_0,
            &["--keep-quant"],
        ),
    ];
    for (i, (what, dims, ty, flags)) in cases.into_iter().enumerate() {
        let input = tmp.path().join(format!("{i}.gguf"));
        let tensors = vec![
            embedding(),
            ("blk.0.attn_q.weight", dims.to_vec(), ty, vec![]),
            ("blk.0.attn_k.weight", dims.to_vec(), ty, vec![]),
            ("blk.0.ffn_down.weight", dims.to_vec(), ty, vec![]),
        ];
        fs::write(&input, gguf(&llama_kv(""), &tensors)).unwrap();
        let out = tmp.path().join(format!("out{i}"));
        let mut args = vec!["convert", input.to_str().unwrap(), out.to_str().unwrap()];
        args.push("--no-sync");
        args.extend_from_slice(flags);
        let run = tensorfile(&args);
        run.assert_within(Limits::HOSTILE, what);
        assert_eq!(run.code, Some(0), "{what}: {}", run.stderr);
        let model = out.join("model.safetensors");
        let (rows, row) = (dims[1], dims[0]);
        let kept = flags.contains(&"--keep-quant");
        for name in ["self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj"] {
            let name = format!("model.layers.0.{name}.weight");
            // Kept: U32 words of packed 8-bit codes, four a word.
            let width = if kept { row / 4 } else { row };
            assert_eq!(safetensors_shape(&model, &name), [rows, width], "{what}");
        }
    }
}

#[test]
fn hugging_face_with_a_zero_dimension_beside_a_huge_one_converts_to_gguf() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, (shape, flags)) in [
        ([1u64 << 40, 0], &[][..]),
        ([1 << 28, 0], &["--type", "q8_0"][..]),
        ([1 << 62, 0], &["--type", "f32"][..]),
        ([0, 1 << 62], &["--type", "f32"][..]),
        ([0, 1 << 62], &["--type", "q4_k"][..]),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = tmp.path().join(format!("hf{i}"));
        hf_dir(
            &dir,
            &[
                ("model.embed_tokens.weight", "F32", vec![4, 4], vec![0; 64]),
                (
                    "model.layers.0.self_attn.q_proj.weight",
                    "F16",
                    shape.to_vec(),
                    vec![],
                ),
                (
                    "model.layers.0.self_attn.k_proj.weight",
                    "F32",
                    shape.to_vec(),
                    vec![],
                ),
                (
                    "model.layers.0.mlp.down_proj.weight",
                    "BF16",
                    shape.to_vec(),
                    vec![],
                ),
            ],
        );
        let out = tmp.path().join(format!("out{i}.gguf"));
        let mut args = vec!["convert", dir.to_str().unwrap(), out.to_str().unwrap()];
        args.push("--no-sync");
        args.extend_from_slice(flags);
        let run = tensorfile(&args);
        run.assert_within(Limits::HOSTILE, &format!("{shape:?}"));
        assert_eq!(run.code, Some(0), "{shape:?}: {}", run.stderr);
        for name in ["attn_q", "attn_k", "ffn_down"] {
            let name = format!("blk.0.{name}.weight");
            assert_eq!(gguf_shape(&out, &name), shape, "{shape:?}");
        }
    }
}

#[test]
fn rows_that_split_into_no_heads_are_refused_whatever_their_size() {
    // 2^40 + 2 rows of nothing do not split into 2 heads of pairs.
    let tmp = tempfile::tempdir().unwrap();
    let rows = (1u64 << 40) + 2;
    let input = tmp.path().join("x.gguf");
    let tensors = vec![
        embedding(),
        ("blk.0.attn_q.weight", vec![0, rows], F32, vec![]),
    ];
    fs::write(&input, gguf(&llama_kv(""), &tensors)).unwrap();
    let out = tmp.path().join("out");
    let run = tensorfile(&["convert", input.to_str().unwrap(), out.to_str().unwrap()]);
    run.assert_within(Limits::HOSTILE, "gguf");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("heads of pairs"), "{}", run.stderr);
    assert!(!out.exists());

    let dir = tmp.path().join("hf");
    hf_dir(
        &dir,
        &[(
            "model.layers.0.self_attn.q_proj.weight",
            "F32",
            vec![rows, 0],
            vec![],
        )],
    );
    let out = tmp.path().join("out.gguf");
    let run = tensorfile(&["convert", dir.to_str().unwrap(), out.to_str().unwrap()]);
    run.assert_within(Limits::HOSTILE, "hf");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("heads of pairs"), "{}", run.stderr);
    assert_eq!(entries(tmp.path()), ["hf", "x.gguf"].map(String::from));
}

/// Every file of `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    entries(dir)
        .into_iter()
        .map(|name| {
            let bytes = fs::read(dir.join(&name)).unwrap();
            (name, bytes)
        })
        .collect()
}

#[test]
fn a_failed_conversion_to_hugging_face_leaves_the_directory_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    // Valid tensors, and a key config.json needs missing: found only
    // after the weights could have been written.
    let input = tmp.path().join("x.gguf");
    let tensors = vec![
        embedding(),
        ("blk.0.attn_q.weight", vec![4, 4], F32, vec![0; 64]),
    ];
    fs::write(
        &input,
        gguf(&llama_kv("llama.feed_forward_length"), &tensors),
    )
    .unwrap();

    // Into a directory holding an older model.
    let old = tmp.path().join("old");
    fs::create_dir(&old).unwrap();
    fs::write(old.join("model.safetensors"), b"old weights").unwrap();
    fs::write(old.join("config.json"), b"{\"old\": true}").unwrap();
    let before = snapshot(&old);
    let run = tensorfile(&["convert", input.to_str().unwrap(), old.to_str().unwrap()]);
    run.assert_within(Limits::HOSTILE, "into an old directory");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("feed_forward_length"), "{}", run.stderr);
    assert_eq!(snapshot(&old), before);

    // Into a new directory: it is not left behind.
    let new = tmp.path().join("new");
    let run = tensorfile(&["convert", input.to_str().unwrap(), new.to_str().unwrap()]);
    run.assert_within(Limits::HOSTILE, "into a new directory");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(entries(tmp.path()), ["old", "x.gguf"].map(String::from));
}

#[test]
fn a_complete_conversion_replaces_the_files_together() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("x.gguf");
    let tensors = vec![
        embedding(),
        ("blk.0.attn_q.weight", vec![4, 4], F32, vec![0; 64]),
    ];
    fs::write(&input, gguf(&llama_kv(""), &tensors)).unwrap();
    let old = tmp.path().join("old");
    fs::create_dir(&old).unwrap();
    fs::write(old.join("model.safetensors"), b"old weights").unwrap();
    fs::write(old.join("notes.txt"), b"mine").unwrap();
    let run = tensorfile(&["convert", input.to_str().unwrap(), old.to_str().unwrap()]);
    run.assert_within(Limits::HOSTILE, "convert");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        entries(&old),
        ["config.json", "model.safetensors", "notes.txt"].map(String::from)
    );
    assert_eq!(
        safetensors_shape(
            &old.join("model.safetensors"),
            "model.layers.0.self_attn.q_proj.weight"
        ),
        [4, 4]
    );
    assert_eq!(fs::read(old.join("notes.txt")).unwrap(), b"mine");
}

#[test]
fn raw_conversion_keeps_an_empty_tensor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dir");
    fs::create_dir(&dir).unwrap();
    let file = dir.join("model.safetensors");
    fs::write(
        &file,
        safetensors(&[
            ("empty", "F32", vec![4, 0], vec![]),
            ("wide", "F16", vec![0, 1 << 40], vec![]),
            ("full", "F32", vec![2, 2], vec![0; 16]),
        ]),
    )
    .unwrap();
    for (what, input) in [("file", &file), ("directory", &dir)] {
        let out = tmp.path().join(format!("{what}.gguf"));
        let run = tensorfile(&[
            "convert",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
            "--raw",
            "--arch",
            "tensors",
            "--no-sync",
        ]);
        run.assert_within(Limits::HOSTILE, what);
        assert_eq!(run.code, Some(0), "{what}: {}", run.stderr);
        assert_eq!(gguf_shape(&out, "empty"), [4, 0], "{what}");
        assert_eq!(gguf_shape(&out, "wide"), [0, 1 << 40], "{what}");
        assert_eq!(gguf_shape(&out, "full"), [2, 2], "{what}");
    }
}

#[test]
fn a_tiny_tokenizer_cannot_pad_millions_of_tokens() {
    // config.json's vocab_size 2^24 beside a one-token tokenizer.json used
    // to write 16 million "[PAD<id>]" tokens: 1.4 GiB held, 408 MB written.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("hf");
    hf_dir(
        &dir,
        &[("model.embed_tokens.weight", "F32", vec![1, 4], vec![0; 16])],
    );
    let mut config: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("config.json")).unwrap()).unwrap();
    config["vocab_size"] = (1u64 << 24).into();
    fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tokenizer = serde_json::json!({
        "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
        "pre_tokenizer": {"type": "ByteLevel"},
        "added_tokens": [],
    });
    fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let out = tmp.path().join("out.gguf");
    let run = tensorfile(&["convert", dir.to_str().unwrap(), out.to_str().unwrap()]);
    run.assert_within(Limits::HOSTILE, "padding");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("would pad"), "{}", run.stderr);
    assert_eq!(entries(tmp.path()), ["hf"].map(String::from));

    // A few hundred ids of padding, as real models have, are kept.
    config["vocab_size"] = 300.into();
    fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let run = tensorfile(&[
        "convert",
        dir.to_str().unwrap(),
        out.to_str().unwrap(),
        "--no-sync",
    ]);
    run.assert_within(Limits::HOSTILE, "padding");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// The raw direction (any GGUF to one .safetensors or .npz file) with
/// empty tensors beside huge dimensions, of an unmapped architecture:
/// valid, converted within the limits; and a file whose tensor data is
/// cut short: refused, nothing left behind.
#[test]
fn raw_outputs_take_empty_huge_tensors_and_refuse_cut_files() {
    let tmp = tempfile::tempdir().unwrap();
    let kv = [("general.architecture", V::Str("mamba9"))];
    let cases: [(&str, [u64; 2], u32); 4] = [
        ("f32 2^40 rows", [0, 1 << 40], F32),
        ("q8_0 2^40 rows", [0, 1 << 40], Q8_0),
        ("f32 rows of 2^62", [1 << 62, 0], F32),
        ("q8_0 rows of 2^62", [1 << 62, 0], Q8_0),
    ];
    for (i, (what, dims, ty)) in cases.into_iter().enumerate() {
        let input = tmp.path().join(format!("{i}.gguf"));
        let tensors = vec![("x", dims.to_vec(), ty, vec![])];
        fs::write(&input, gguf(&kv, &tensors)).unwrap();
        for ext in ["safetensors", "npz"] {
            let out = tmp.path().join(format!("out{i}.{ext}"));
            let run = tensorfile(&[
                "convert",
                input.to_str().unwrap(),
                out.to_str().unwrap(),
                "--no-sync",
            ]);
            run.assert_within(Limits::HOSTILE, what);
            assert_eq!(run.code, Some(0), "{what} {ext}: {}", run.stderr);
            assert!(out.is_file(), "{what} {ext}");
        }
        assert_eq!(
            safetensors_shape(&tmp.path().join(format!("out{i}.safetensors")), "x"),
            [dims[1], dims[0]],
            "{what}"
        );
    }
    // Data cut short: the reader refuses it; no output appears.
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = gguf(&kv, &[("y", vec![32, 4], Q8_0, vec![7; 4 * 34])]);
    bytes.truncate(bytes.len() - 40);
    let input = dir.path().join("cut.gguf");
    fs::write(&input, bytes).unwrap();
    for ext in ["safetensors", "npz"] {
        let out = dir.path().join(format!("o.{ext}"));
        let run = tensorfile(&["convert", input.to_str().unwrap(), out.to_str().unwrap()]);
        run.assert_within(Limits::HOSTILE, "cut");
        assert_eq!(run.code, Some(1), "{ext}: {}", run.stderr);
    }
    assert_eq!(entries(dir.path()), ["cut.gguf"]);
}
