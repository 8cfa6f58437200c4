//! GGUF to and from Hugging Face directories, against the files llama.cpp's
//! converter and quantizer made (tests/fixtures/gguf/model).

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use tensorfile::gguf::{gguf_to_hf as convert, GgufFile, ToHfOptions};
use tensorfile::gguf::{hf_tensor_name as gguf_to_hf, Arch, QkPermutation};
use tensorfile::quant::{dequantize_weight, quantized_weights, QuantConfig};
use tensorfile::{Dtype, SafeTensors, TensorData, WriteOptions};
use tensorfile_testkit::f32s;

fn dir() -> PathBuf {
    tensorfile_testkit::fixture("gguf")
}

fn manifest() -> Json {
    tensorfile_testkit::manifest("gguf")
}

fn quick() -> WriteOptions {
    WriteOptions::default().with_sync(false)
}

fn to_hf(gguf: &Path, out: &Path, dtype: Dtype, keep_quant: bool) -> tensorfile::gguf::ToHfSummary {
    let file = GgufFile::open(gguf).unwrap();
    let opts = ToHfOptions::default()
        .with_dtype(dtype)
        .with_keep_quant(keep_quant)
        .with_write(quick());
    convert(&file, out, &opts).unwrap()
}

#[test]
fn the_f32_gguf_gives_back_the_original_model_bit_for_bit() {
    let out = tempfile::tempdir().unwrap();
    let s = to_hf(
        &dir().join("model/llama_tiny-F32.gguf"),
        out.path(),
        Dtype::F32,
        false,
    );
    assert_eq!(s.arch, Arch::Llama);
    assert_eq!((s.tensors, s.decoded), (21, 0));
    let ours = SafeTensors::open(out.path().join("model.safetensors")).unwrap();
    let orig = SafeTensors::open(dir().join("model/hf_llama_tiny/model.safetensors")).unwrap();
    assert_eq!(ours.len(), orig.len());
    for t in orig.tensors() {
        let o = ours.tensor(t.name()).unwrap();
        assert_eq!(o.dtype(), Dtype::F32);
        assert_eq!(o.shape(), t.shape(), "{}", t.name());
        assert_eq!(o.data(), t.data(), "{}", t.name());
    }
    assert_eq!(ours.metadata().unwrap()["format"], "pt");

    // config.json: the original's sizes and ids.
    let cfg: Json =
        serde_json::from_str(&fs::read_to_string(out.path().join("config.json")).unwrap()).unwrap();
    let original = &manifest()["model"]["hf"]["config"];
    for key in [
        "architectures",
        "model_type",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "rope_theta",
        "vocab_size",
        "tie_word_embeddings",
        "bos_token_id",
        "eos_token_id",
        "hidden_act",
        "attention_bias",
        "rope_scaling",
    ] {
        assert_eq!(cfg[key], original[key], "{key}");
    }

    // tokenizer.json: the original's vocabulary, merges and added tokens.
    let read =
        |p: PathBuf| -> Json { serde_json::from_str(&fs::read_to_string(p).unwrap()).unwrap() };
    let tok = read(out.path().join("tokenizer.json"));
    let orig_tok = read(dir().join("model/hf_llama_tiny/tokenizer.json"));
    assert_eq!(tok["model"]["vocab"], orig_tok["model"]["vocab"]);
    assert_eq!(tok["model"]["merges"], orig_tok["model"]["merges"]);
    assert_eq!(tok["added_tokens"], orig_tok["added_tokens"]);
    assert_eq!(tok["pre_tokenizer"], orig_tok["pre_tokenizer"]);
    let tc = read(out.path().join("tokenizer_config.json"));
    assert_eq!(
        (tc["bos_token"].as_str(), tc["eos_token"].as_str()),
        (Some("<s>"), Some("</s>"))
    );
}

#[test]
fn quantized_ggufs_decode_to_what_gguf_py_decodes() {
    // manifest: sha256 of gguf-py's dequantized f32, per GGUF tensor (GGUF
    // row order); q/k rows are put back in GGUF order to compare.
    let m = manifest();
    for which in ["Q8_0", "Q4_K_M"] {
        let out = tempfile::tempdir().unwrap();
        let path = dir().join(format!("model/llama_tiny-{which}.gguf"));
        let s = to_hf(&path, out.path(), Dtype::F32, false);
        assert!(s.decoded > 0);
        let ours = SafeTensors::open(out.path().join("model.safetensors")).unwrap();
        for t in m["model"]["gguf"][which]["tensors"].as_array().unwrap() {
            let gname = t["name"].as_str().unwrap();
            let hf = gguf_to_hf(Arch::Llama, gname).unwrap();
            let o = ours.tensor(&hf).unwrap();
            let mut data = o.data().to_vec();
            let heads = if hf.contains("q_proj") {
                Some(4)
            } else if hf.contains("k_proj") {
                Some(2)
            } else {
                None
            };
            if let Some(h) = heads {
                let rows = o.shape()[0];
                let rb = data.len() / rows as usize;
                let p = QkPermutation::new(rows, h).unwrap();
                data = (0..rows)
                    .map(|g| p.hf_row_of_gguf(g) as usize)
                    .flat_map(|r| o.data()[r * rb..(r + 1) * rb].to_vec())
                    .collect();
            }
            let sha = hex::encode(Sha256::digest(&data));
            assert_eq!(
                sha,
                t["dequantized_f32_sha256"].as_str().unwrap(),
                "{which} {gname}"
            );
        }
    }
}

#[test]
fn bf16_by_default_rounds_the_decoded_values() {
    let out = tempfile::tempdir().unwrap();
    let out32 = tempfile::tempdir().unwrap();
    let path = dir().join("model/llama_wide256-Q4_K_M.gguf");
    to_hf(&path, out.path(), Dtype::BF16, false);
    to_hf(&path, out32.path(), Dtype::F32, false);
    let b = SafeTensors::open(out.path().join("model.safetensors")).unwrap();
    let f = SafeTensors::open(out32.path().join("model.safetensors")).unwrap();
    for t in f.tensors() {
        let bt = b.tensor(t.name()).unwrap();
        assert_eq!(bt.dtype(), Dtype::BF16);
        let expected =
            tensorfile::cast::encode_f32_vec(&f32s(t.data()), Dtype::BF16, Default::default())
                .unwrap();
        assert_eq!(bt.data(), expected.as_slice(), "{}", t.name());
    }
}

#[test]
fn kept_quantized_weights_dequantize_to_the_same_values() {
    for (file, kept_expected) in [
        ("llama_wide256-Q4_K_M.gguf", 6),
        ("llama_tiny-Q8_0.gguf", 16),
        ("llama_tiny-Q4_K_M.gguf", 16),
    ] {
        let path = dir().join("model").join(file);
        let out = tempfile::tempdir().unwrap();
        let out32 = tempfile::tempdir().unwrap();
        let s = to_hf(&path, out.path(), Dtype::F32, true);
        assert_eq!(s.kept.len(), kept_expected, "{file}");
        to_hf(&path, out32.path(), Dtype::F32, false);
        let q = SafeTensors::open(out.path().join("model.safetensors")).unwrap();
        let f = SafeTensors::open(out32.path().join("model.safetensors")).unwrap();
        assert_eq!(q.metadata().unwrap()["format"], "mlx");
        let cfg: Json =
            serde_json::from_str(&fs::read_to_string(out.path().join("config.json")).unwrap())
                .unwrap();
        let cfg = tensorfile::JsonObject::parse(&cfg.to_string()).unwrap();
        let qc = QuantConfig::from_config(&cfg).unwrap().unwrap();
        let header = q.header();
        let weights = quantized_weights(
            header.tensors().map(|t| t.name),
            |n| header.get(n),
            None,
            Some(&qc),
        )
        .unwrap();
        assert_eq!(weights.len(), kept_expected);
        let tensors = q.tensors_by_name();
        for w in &weights {
            let values = dequantize_weight(w, &tensors).unwrap();
            let expected = f32s(f.tensor(&w.name).unwrap().data());
            assert_eq!(values.len(), expected.len());
            for (i, (a, b)) in values.iter().zip(&expected).enumerate() {
                // Equal as numbers: d * (q - 8) = -0.0 where q is 8 and d is
                // negative, which scale * q + bias gives as +0.0.
                assert!(a == b, "{file} {} element {i}: {a} vs {b}", w.name);
            }
        }
        // Everything else is as decoded.
        for t in f.tensors() {
            if s.kept.contains_key(t.name()) {
                continue;
            }
            assert_eq!(
                q.tensor(t.name()).unwrap().data(),
                t.data(),
                "{file} {}",
                t.name()
            );
        }
    }
}

#[test]
fn unknown_architectures_and_tensors_are_refused_by_name() {
    let out = tempfile::tempdir().unwrap();
    let file = GgufFile::open(dir().join("files/tensors_v3.gguf")).unwrap();
    let e = convert(&file, out.path(), &ToHfOptions::default()).unwrap_err();
    assert!(
        matches!(e.gguf(), Some(tensorfile::gguf::GgufError::Architecture { arch, .. }) if arch == "tensorfile_test"),
        "{e}"
    );
    // A GGUF tensor of a type not decoded: refused by name.
    let data = GgufFile::open(dir().join("kquant/carrier_f32.gguf")).unwrap();
    assert!(data.tensor("token_embd.weight").unwrap().byte_len() > 0);
}

#[test]
fn hostile_but_valid_files_convert_or_are_refused_never_panic() {
    // The Q8_0 model with header bytes flipped: whatever still reads as
    // GGUF (odd shapes, head counts, types, names, values) converts or is
    // refused with an error.
    let bytes = fs::read(dir().join("model/llama_tiny-Q8_0.gguf")).unwrap();
    let header_end = GgufFile::open(dir().join("model/llama_tiny-Q8_0.gguf"))
        .unwrap()
        .header()
        .info_end() as usize;
    let out = tempfile::tempdir().unwrap();
    let (mut read, mut converted) = (0, 0);
    for (k, i) in (8..header_end).step_by(41).enumerate() {
        let mut b = bytes.clone();
        b[i] ^= if k % 2 == 0 { 0x01 } else { 0x40 };
        let Ok(file) = GgufFile::from_source(b, &tensorfile::gguf::ReadLimits::default()) else {
            continue;
        };
        read += 1;
        let opts = ToHfOptions::default()
            .with_dtype(Dtype::BF16)
            .with_keep_quant(k % 3 == 0)
            .with_write(quick());
        if convert(&file, &out.path().join("m"), &opts).is_ok() {
            converted += 1;
        }
    }
    assert!(
        read > 50 && converted > 20,
        "{read} read, {converted} converted"
    );
}
