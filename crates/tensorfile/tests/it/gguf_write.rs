//! Hugging Face directories to GGUF, against the files llama.cpp's
//! converter and quantizer made, and round trips through GGUF.

use std::fs;
use std::path::{Path, PathBuf};

use tensorfile::gguf::{
    gguf_to_hf, hf_to_gguf, FromHfOptions, GgmlType, GgufError, GgufFile, GgufValue as Value,
    ToHfOptions,
};
use tensorfile::{Dtype, SafeTensors, TensorRef, WriteOptions};
use tensorfile_testkit::fixtures;

fn gguf_dir() -> PathBuf {
    fixtures().join("gguf")
}

fn opts(t: GgmlType) -> FromHfOptions {
    FromHfOptions::default().with_ggml_type(t).with_sync(false)
}

fn raw_of(file: &GgufFile, name: &str) -> Vec<u8> {
    let info = file.header().tensor(name).unwrap();
    let mut raw = vec![0u8; info.byte_len as usize];
    file.read_raw(info, 0, &mut raw).unwrap();
    raw
}

#[test]
fn the_converters_files_come_out_byte_for_byte() {
    // convert_hf_to_gguf.py --outtype f32 | f16 | q8_0 of the same directory.
    let out = tempfile::tempdir().unwrap();
    for (t, file) in [
        (GgmlType::F32, "F32"),
        (GgmlType::F16, "F16"),
        (GgmlType::Q8_0, "Q8_0"),
    ] {
        let path = out.path().join(format!("{file}.gguf"));
        let s = hf_to_gguf(&gguf_dir().join("model/hf_llama_tiny"), &path, &opts(t)).unwrap();
        assert_eq!(s.arch, "llama");
        assert!(s.no_tokenizer.is_none());
        let ours = fs::read(&path).unwrap();
        let theirs = fs::read(gguf_dir().join(format!("model/llama_tiny-{file}.gguf"))).unwrap();
        assert!(
            ours == theirs,
            "{file}: {} vs {} bytes",
            ours.len(),
            theirs.len()
        );
    }
}

#[test]
fn k_types_give_llama_model_quantize_blocks() {
    // llama_model_quantize "pure" Q4_K of the F32 file: rows of 64 and 128
    // fall back to Q5_0, norms stay F32.
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("q4k.gguf");
    let s = hf_to_gguf(
        &gguf_dir().join("model/hf_llama_tiny"),
        &path,
        &opts(GgmlType::Q4_K),
    )
    .unwrap();
    assert_eq!(s.fallbacks.len(), 16);
    assert!(s.fallbacks.iter().all(|(_, t)| *t == GgmlType::Q5_0));
    let ours = GgufFile::open(&path).unwrap();
    let theirs = GgufFile::open(gguf_dir().join("model/llama_tiny-Q4_K_M_pure.gguf")).unwrap();
    assert_eq!(
        ours.header().tensors().len(),
        theirs.header().tensors().len()
    );
    for t in theirs.header().tensors() {
        let o = ours.header().tensor(&t.name).unwrap();
        assert_eq!((o.ggml_type, &o.dims), (t.ggml_type, &t.dims), "{}", t.name);
        assert_eq!(
            raw_of(&ours, &t.name),
            raw_of(&theirs, &t.name),
            "{}",
            t.name
        );
    }

    // Rows of 256 really use the K types: quant/input.f32 as a raw
    // container, against llama_model_quantize's carrier files.
    let input = fs::read(gguf_dir().join("quant/input.f32")).unwrap();
    let rows = input.len() as u64 / 1024;
    let reversed: Vec<u8> = input.chunks_exact(1024).rev().flatten().copied().collect();
    let src = out.path().join("carrier.safetensors");
    let shape = [rows, 256];
    let tensors = [
        TensorRef {
            name: "token_embd.weight",
            dtype: Dtype::F32,
            shape: &shape,
            data: &input,
        },
        TensorRef {
            name: "output.weight",
            dtype: Dtype::F32,
            shape: &shape,
            data: &reversed,
        },
    ];
    tensorfile::save(&src, tensors, None, &WriteOptions::default()).unwrap();
    for t in ["Q4_K", "Q6_K"] {
        let ty = GgmlType::from_name(t).unwrap();
        let path = out.path().join(format!("{t}.gguf"));
        let o = opts(ty).with_raw(Some("llama".into()));
        hf_to_gguf(&src, &path, &o).unwrap();
        let ours = GgufFile::open(&path).unwrap();
        let carrier =
            GgufFile::open(gguf_dir().join(format!("kquant/carrier_pure_{t}.gguf"))).unwrap();
        for name in ["token_embd.weight", "output.weight"] {
            assert_eq!(raw_of(&ours, name), raw_of(&carrier, name), "{t} {name}");
        }
        assert_eq!(ours.header().architecture(), Some("llama"));
        assert_eq!(
            ours.header().get("general.quantization_version"),
            Some(&Value::U32(2))
        );
    }
}

/// Every tensor of two safetensors files, bytes equal.
fn same_tensors(a: &Path, b: &Path) {
    let a = SafeTensors::open(a).unwrap();
    let b = SafeTensors::open(b).unwrap();
    assert_eq!(a.len(), b.len());
    for t in a.tensors() {
        let u = b.tensor(t.name()).unwrap();
        assert_eq!(
            (u.dtype(), u.shape()),
            (t.dtype(), t.shape()),
            "{}",
            t.name()
        );
        assert_eq!(u.data(), t.data(), "{}", t.name());
    }
}

#[test]
fn every_architecture_round_trips_through_gguf() {
    // Hugging Face BF16 -> GGUF F32 -> Hugging Face BF16: the same tensors
    // (permutation undone, Gemma's norms back, tied embeddings kept tied).
    let out = tempfile::tempdir().unwrap();
    for arch in ["llama", "mistral", "qwen2", "qwen3", "gemma", "phi3"] {
        let src = fixtures().join("real/hf").join(arch);
        let g = out.path().join(format!("{arch}.gguf"));
        let s = hf_to_gguf(&src, &g, &opts(GgmlType::F32)).unwrap();
        let expected_arch = if arch == "mistral" { "llama" } else { arch };
        assert_eq!(s.arch, expected_arch);
        let file = GgufFile::open(&g).unwrap();
        assert!(
            file.header().warnings().is_empty(),
            "{arch}: {:?}",
            file.header().warnings()
        );
        let back = out.path().join(arch);
        let to = ToHfOptions::default()
            .with_dtype(Dtype::BF16)
            .with_keep_quant(false)
            .with_write(WriteOptions::default().with_sync(false));
        gguf_to_hf(&file, &back, &to).unwrap();
        same_tensors(
            &src.join("model.safetensors"),
            &back.join("model.safetensors"),
        );
        let cfg: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(back.join("config.json")).unwrap()).unwrap();
        let orig: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
        for key in [
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        ] {
            assert_eq!(cfg[key], orig[key], "{arch} {key}");
        }
        let tied = orig["tie_word_embeddings"]
            .as_bool()
            .unwrap_or(arch == "gemma");
        assert_eq!(cfg["tie_word_embeddings"], tied, "{arch}");
    }
}

#[test]
fn values_that_cannot_be_quantized_are_refused_and_nothing_is_written() {
    let out = tempfile::tempdir().unwrap();
    let mut w = vec![0u8; 64 * 32 * 4];
    w[(5 * 64 + 7) * 4..(5 * 64 + 8) * 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
    let src = out.path().join("w.safetensors");
    let shape = [32u64, 64];
    let t = TensorRef {
        name: "w.weight",
        dtype: Dtype::F32,
        shape: &shape,
        data: &w,
    };
    tensorfile::save(&src, [t], None, &WriteOptions::default()).unwrap();
    let path = out.path().join("w.gguf");
    let o = opts(GgmlType::Q8_0).with_raw(Some("x".into()));
    let e = hf_to_gguf(&src, &path, &o).unwrap_err();
    assert!(
        e.to_string()
            .contains("tensor \"w.weight\": row 5, element 7 is inf, which Q8_0 cannot hold"),
        "{e}"
    );
    assert!(!path.exists());
    // F16 keeps it, as numpy's astype does.
    hf_to_gguf(&src, &path, &opts(GgmlType::F16).with_raw(Some("x".into()))).unwrap();

    // Unknown names: refused without --raw, by name.
    let dir = out.path().join("model");
    fs::create_dir(&dir).unwrap();
    fs::copy(
        fixtures().join("real/hf/llama/config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    tensorfile::save(
        dir.join("model.safetensors"),
        [t],
        None,
        &WriteOptions::default(),
    )
    .unwrap();
    let e = hf_to_gguf(&dir, &path, &opts(GgmlType::F16)).unwrap_err();
    assert!(
        matches!(e.gguf(), Some(GgufError::Tensor { tensor, .. }) if tensor == "w.weight"),
        "{e}"
    );
    assert!(e.to_string().contains("--raw"), "{e}");
    // Unknown architectures: the same.
    let cfg = r#"{"model_type": "bert", "num_attention_heads": 2, "vocab_size": 10}"#;
    fs::write(dir.join("config.json"), cfg).unwrap();
    let e = hf_to_gguf(&dir, &path, &opts(GgmlType::F16)).unwrap_err();
    assert!(
        matches!(e.gguf(), Some(GgufError::Architecture { .. })),
        "{e}"
    );
}

#[test]
fn odd_shapes_under_known_names_are_refused_or_written_never_panic() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("model");
    fs::create_dir(&dir).unwrap();
    fs::copy(
        fixtures().join("real/hf/llama/config.json"),
        dir.join("config.json"),
    )
    .unwrap();
    let path = out.path().join("x.gguf");
    for shape in [
        vec![],
        vec![3u64],
        vec![0, 64],
        vec![6, 64],
        vec![64, 0],
        vec![2, 2, 2, 2, 2],
    ] {
        let n: u64 = shape.iter().product();
        let data = vec![0u8; (n * 4) as usize];
        for name in [
            "model.layers.0.self_attn.q_proj.weight",
            "model.embed_tokens.weight",
            "model.norm.weight",
        ] {
            let t = TensorRef {
                name,
                dtype: Dtype::F32,
                shape: &shape,
                data: &data,
            };
            tensorfile::save(
                dir.join("model.safetensors"),
                [t],
                None,
                &WriteOptions::default(),
            )
            .unwrap();
            for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16] {
                let _ = hf_to_gguf(&dir, &path, &opts(ty));
            }
        }
    }
    // q_proj rows that do not split into heads of pairs: refused by name.
    let data = vec![0u8; 6 * 64 * 4];
    let t = TensorRef {
        name: "model.layers.0.self_attn.q_proj.weight",
        dtype: Dtype::F32,
        shape: &[6, 64],
        data: &data,
    };
    tensorfile::save(
        dir.join("model.safetensors"),
        [t],
        None,
        &WriteOptions::default(),
    )
    .unwrap();
    let e = hf_to_gguf(&dir, &path, &opts(GgmlType::F16)).unwrap_err();
    assert!(
        matches!(e.gguf(), Some(GgufError::Tensor { tensor, .. })
            if tensor == "model.layers.0.self_attn.q_proj.weight"),
        "{e}"
    );
}
