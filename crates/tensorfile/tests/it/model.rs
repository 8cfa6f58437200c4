//! Model directories: the fixtures pass, broken variants fail by name.

use crate::common;

use std::fs;

use common::*;
use serde_json::json;
use tensorfile::model::{check_dir, logical_weight, ModelDir, ProblemKind, QuantConfig, Severity};
use tensorfile::quant::Scheme;
use tensorfile::{Contract, Dtype, Error, ReadOptions, SafeTensors};
use tensorfile_core::ShardedTensors;

fn kinds(report: &tensorfile::model::ModelReport) -> Vec<(ProblemKind, String)> {
    report
        .problems
        .iter()
        .map(|p| (p.kind, p.subject.clone()))
        .collect()
}

#[test]
fn fixtures_pass_under_both_contracts() {
    for name in ["bigram", "llama_tiny"] {
        let dir = fixtures().join("models").join(name);
        for contract in [Contract::Any, Contract::V0] {
            let report = check_dir(&dir, contract);
            assert!(report.is_ok(), "{name}: {:?}", report.problems);
            assert!(report.problems.is_empty(), "{name}: {:?}", report.problems);
            assert!(report.architecture_checked);
        }
        let model = ModelDir::open(&dir).unwrap();
        assert_eq!(
            model.arch(),
            Some(if name == "bigram" { "bigram" } else { "llama" })
        );
        assert!(model.check(Contract::V0).is_ok());
    }
    let model = ModelDir::open(fixtures().join("models/llama_tiny")).unwrap();
    assert!(model.needs_tokenizer());
    assert_eq!(model.weights().len(), 20);
    assert_eq!(
        model.weights().tensor("model.norm.weight").unwrap().shape(),
        &[32]
    );
}

#[test]
fn missing_tensor() {
    let dir = copy_model("llama_tiny");
    edit_weights(dir.path(), |ts| {
        ts.retain(|t| t.name != "model.layers.1.mlp.up_proj.weight")
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert!(!report.is_ok());
    assert_eq!(
        kinds(&report),
        [(
            ProblemKind::MissingTensor,
            "model.layers.1.mlp.up_proj.weight".into()
        )]
    );
}

#[test]
fn unexpected_tensor() {
    let dir = copy_model("bigram");
    edit_weights(dir.path(), |ts| {
        ts.push(T::new("extra.bias", Dtype::F32, &[3]))
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::UnexpectedTensor, "extra.bias".into())]
    );
    assert!(!report.is_ok());
}

#[test]
fn wrong_shape() {
    let dir = copy_model("llama_tiny");
    edit_weights(dir.path(), |ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name == "model.layers.0.self_attn.k_proj.weight")
            .unwrap();
        // [16, 32] has the right byte count as [32, 16], so only the shape is wrong.
        t.shape = vec![32, 16];
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(
            ProblemKind::WrongShape,
            "model.layers.0.self_attn.k_proj.weight".into()
        )]
    );
    assert!(
        report.problems[0].message.contains("[16, 32]"),
        "{}",
        report.problems[0].message
    );
}

#[test]
fn wrong_dtype() {
    let dir = copy_model("bigram");
    edit_weights(dir.path(), |ts| {
        *ts = vec![T::new("bigram.weight", Dtype::F16, &[32, 32])]
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::WrongDtype, "bigram.weight".into())]
    );

    // Llama weights may be any float type, but not integers.
    let dir = copy_model("llama_tiny");
    edit_weights(dir.path(), |ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name == "model.norm.weight")
            .unwrap();
        *t = T::new("model.norm.weight", Dtype::I32, &[32]);
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::WrongDtype, "model.norm.weight".into())]
    );
}

#[test]
fn missing_and_invalid_config_fields() {
    let dir = copy_model("llama_tiny");
    edit_config(dir.path(), |c| {
        c.remove("hidden_size");
        c.insert("num_attention_heads".into(), json!("four"));
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [
            (ProblemKind::MissingField, "hidden_size".into()),
            (ProblemKind::InvalidField, "num_attention_heads".into())
        ]
    );
    assert!(!report.architecture_checked);

    let dir = copy_model("bigram");
    edit_config(dir.path(), |c| {
        c.remove("vocab_size");
    });
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(ProblemKind::MissingField, "vocab_size".into())]
    );

    let dir = copy_model("bigram");
    edit_config(dir.path(), |c| {
        c.insert("tl_arch".into(), json!("gpt9"));
    });
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(ProblemKind::InvalidField, "tl_arch".into())]
    );

    // A hostile layer count is refused, not looped over.
    let dir = copy_model("llama_tiny");
    edit_config(dir.path(), |c| {
        c.insert("num_hidden_layers".into(), json!(1u64 << 60));
    });
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(ProblemKind::InvalidField, "num_hidden_layers".into())]
    );
}

#[test]
fn missing_or_broken_files() {
    let dir = copy_model("bigram");
    fs::remove_file(dir.path().join("config.json")).unwrap();
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(ProblemKind::MissingFile, "config.json".into())]
    );
    assert!(matches!(
        ModelDir::open(dir.path()).map_err(|e| e
            .core()
            .map(|c| matches!(c, tensorfile_core::Error::Io { .. }))),
        Err(Some(true))
    ));

    let dir = copy_model("bigram");
    fs::write(dir.path().join("config.json"), "[1, 2]").unwrap();
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(ProblemKind::InvalidConfig, "config.json".into())]
    );
    let err = ModelDir::open(dir.path()).unwrap_err();
    assert!(
        matches!(err.detail(), Error::Config { path, .. } if path.ends_with("config.json")),
        "{err}"
    );

    let dir = copy_model("bigram");
    fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(ProblemKind::MissingFile, "model.safetensors".into())]
    );

    let dir = copy_model("bigram");
    fs::write(
        dir.path().join("model.safetensors"),
        b"\x10\0\0\0\0\0\0\0{}",
    )
    .unwrap();
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::InvalidWeights, "model.safetensors".into())]
    );
    assert!(
        report.problems[0].message.contains("rule 1"),
        "{}",
        report.problems[0].message
    );
}

#[test]
fn tokenizer_rule() {
    let dir = copy_model("llama_tiny");
    fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::MissingFile, "tokenizer.json".into())]
    );
    assert!(!report.is_ok());

    // Not called for: a warning only.
    let dir = copy_model("bigram");
    fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::UnexpectedFile, "tokenizer.json".into())]
    );
    assert_eq!(report.problems[0].severity, Severity::Warning);
    assert!(report.is_ok());
}

#[test]
fn lm_head_follows_tie_word_embeddings() {
    let dir = copy_model("llama_tiny");
    edit_weights(dir.path(), |ts| {
        ts.push(T::new("lm_head.weight", Dtype::F32, &[64, 32]))
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::UnexpectedTensor, "lm_head.weight".into())]
    );
    assert!(report.problems[0].message.contains("tie_word_embeddings"));

    // Untied: now it is required, and present.
    edit_config(dir.path(), |c| {
        c.insert("tie_word_embeddings".into(), json!(false));
    });
    assert!(check_dir(dir.path(), Contract::Any).problems.is_empty());

    let dir = copy_model("llama_tiny");
    edit_config(dir.path(), |c| {
        c.remove("tie_word_embeddings");
    });
    // HF's default is untied, so lm_head.weight is needed.
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(ProblemKind::MissingTensor, "lm_head.weight".into())]
    );
}

#[test]
fn contract_v0_refuses_bf16() {
    let dir = copy_model("llama_tiny");
    edit_weights(dir.path(), |ts| {
        for t in ts.iter_mut() {
            *t = T::new(&t.name, Dtype::BF16, &t.shape);
        }
    });
    let any = check_dir(dir.path(), Contract::Any);
    assert!(any.problems.is_empty(), "{:?}", any.problems);
    let v0 = check_dir(dir.path(), Contract::V0);
    assert_eq!(v0.problems.len(), 20);
    assert!(v0
        .problems
        .iter()
        .all(|p| p.kind == ProblemKind::UnsupportedFormat));
    assert!(!v0.is_ok());

    // The reader option: a distinct error, not a format (rule) error.
    let path = dir.path().join("model.safetensors");
    let options = ReadOptions::default().accept(Contract::V0);
    for err in [
        Error::from(SafeTensors::open_with(&path, &options).unwrap_err()),
        Error::from(tensorfile_core::read_header_from_path(&path, &options).unwrap_err()),
        Error::from(ShardedTensors::open_with(dir.path(), &options).unwrap_err()),
    ] {
        assert!(
            matches!(
                err.core(),
                Some(tensorfile_core::Error::UnsupportedFormat {
                    dtype: Dtype::BF16,
                    ..
                })
            ),
            "{err}"
        );
        assert_eq!(err.rule(), None);
        assert!(
            err.core()
                .unwrap()
                .to_string()
                .starts_with("unsupported format"),
            "{err}"
        );
        assert!(
            err.path().is_some_and(|f| f.ends_with("model.safetensors")),
            "{err}"
        );
    }
    assert!(
        SafeTensors::open_with(fixtures().join("models/bigram/model.safetensors"), &options)
            .is_ok()
    );
}

#[test]
fn missing_format_metadata_is_a_warning() {
    let dir = copy_model("bigram");
    let path = dir.path().join("model.safetensors");
    let ts = read_tensors(&path);
    write_st(&path, &ts, &[]);
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(
            ProblemKind::MissingFormatMetadata,
            "model.safetensors".into()
        )]
    );
    assert!(report.is_ok());
}

/// Replaces a plain F32 weight [out, in] by its int4 form.
fn to_int4(ts: &mut Vec<T>, module: &str, group: u64) {
    let i = ts
        .iter()
        .position(|t| t.name == format!("{module}.weight"))
        .unwrap();
    let (out, input) = (ts[i].shape[0], ts[i].shape[1]);
    ts.remove(i);
    ts.push(T::new(
        &format!("{module}.weight.qweight"),
        Dtype::U8,
        &[out, input / 2],
    ));
    ts.push(T::new(
        &format!("{module}.weight.scales"),
        Dtype::F16,
        &[out, input / group],
    ));
}

#[test]
fn int4_weights_count_as_their_logical_shape() {
    let dir = copy_model("llama_tiny");
    let path = dir.path().join("model.safetensors");
    let mut ts = read_tensors(&path);
    for m in [
        "model.layers.0.self_attn.q_proj",
        "model.layers.1.mlp.down_proj",
        "model.embed_tokens",
    ] {
        to_int4(&mut ts, m, 16);
    }
    write_st(
        &path,
        &ts,
        &[("format", "tinyllm"), ("quant", "int4-g16-sym")],
    );
    let report = check_dir(dir.path(), Contract::Any);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // Contract v0 is F32 only: the int4 parts are unsupported there.
    assert!(!check_dir(dir.path(), Contract::V0).is_ok());

    // The metadata's group disagrees with the scales.
    write_st(
        &path,
        &ts,
        &[("format", "tinyllm"), ("quant", "int4-g32-sym")],
    );
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(report.problems.len(), 3, "{:?}", report.problems);
    assert!(report.has(
        ProblemKind::WrongShape,
        "model.layers.0.self_attn.q_proj.weight.scales"
    ));

    // A qweight whose logical shape is wrong for the config.
    let mut bad = ts.clone();
    let q = bad
        .iter_mut()
        .find(|t| t.name == "model.layers.0.self_attn.q_proj.weight.qweight")
        .unwrap();
    *q = T::new(&q.name, Dtype::U8, &[32, 8]);
    let s = bad
        .iter_mut()
        .find(|t| t.name == "model.layers.0.self_attn.q_proj.weight.scales")
        .unwrap();
    *s = T::new(&s.name, Dtype::F16, &[32, 1]);
    write_st(
        &path,
        &bad,
        &[("format", "tinyllm"), ("quant", "int4-g16-sym")],
    );
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(
            ProblemKind::WrongShape,
            "model.layers.0.self_attn.q_proj".into()
        )]
    );
    assert!(
        report.problems[0]
            .message
            .contains("logical shape [32, 16]"),
        "{}",
        report.problems[0].message
    );

    // Scales of the wrong dtype.
    let mut bad = ts.clone();
    let s = bad
        .iter_mut()
        .find(|t| t.name == "model.embed_tokens.weight.scales")
        .unwrap();
    *s = T::new(&s.name, Dtype::F32, &s.shape.clone());
    write_st(
        &path,
        &bad,
        &[("format", "tinyllm"), ("quant", "int4-g16-sym")],
    );
    assert_eq!(
        kinds(&check_dir(dir.path(), Contract::Any)),
        [(
            ProblemKind::WrongDtype,
            "model.embed_tokens.weight.scales".into()
        )]
    );
}

/// Replaces a plain F32 weight by its MLX packed form.
fn to_mlx(ts: &mut Vec<T>, module: &str, bits: u64, group: u64) {
    let i = ts
        .iter()
        .position(|t| t.name == format!("{module}.weight"))
        .unwrap();
    let (out, input) = (ts[i].shape[0], ts[i].shape[1]);
    ts[i] = T::new(
        &format!("{module}.weight"),
        Dtype::U32,
        &[out, input * bits / 32],
    );
    ts.push(T::new(
        &format!("{module}.scales"),
        Dtype::BF16,
        &[out, input / group],
    ));
    ts.push(T::new(
        &format!("{module}.biases"),
        Dtype::BF16,
        &[out, input / group],
    ));
}

#[test]
fn mlx_weights_count_as_their_logical_shape() {
    let dir = copy_model("llama_tiny");
    let path = dir.path().join("model.safetensors");
    let mut ts = read_tensors(&path);
    to_mlx(&mut ts, "model.layers.0.self_attn.q_proj", 4, 16);
    to_mlx(&mut ts, "model.layers.0.mlp.down_proj", 8, 32);
    write_st(&path, &ts, &[("format", "tinyllm")]);
    edit_config(dir.path(), |c| {
        c.insert(
            "quantization".into(),
            json!({"bits": 4, "group_size": 16, "model.layers.0.mlp.down_proj": {"bits": 8, "group_size": 32}}),
        );
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // Without the override, down_proj's packing reads as 4-bit: twice as wide.
    edit_config(dir.path(), |c| {
        c.insert("quantization".into(), json!({"bits": 4, "group_size": 16}));
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(
            ProblemKind::WrongShape,
            "model.layers.0.mlp.down_proj.scales".into()
        )]
    );

    // Without any quantization config, packed weights cannot be read.
    edit_config(dir.path(), |c| {
        c.remove("quantization");
    });
    let report = check_dir(dir.path(), Contract::Any);
    assert!(
        report.has(
            ProblemKind::WrongShape,
            "model.layers.0.self_attn.q_proj.weight"
        ),
        "{:?}",
        report.problems
    );
}

#[test]
fn mlx_mixed_model_is_a_non_course_model() {
    let dir = fixtures().join("mlx/mlx_mixed_model");
    // Its config says "model_type": "llama" but gives only hidden_size:
    // the Llama check names the fields it lacks.
    let report = check_dir(&dir, Contract::Any);
    assert_eq!(
        kinds(&report),
        [
            "vocab_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads"
        ]
        .map(|f| (ProblemKind::MissingField, f.to_string()))
    );
    assert!(!report.architecture_checked);
    // Without a model type, the architecture is unknown: a warning, and
    // only the files are checked.
    let tmp = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors"] {
        fs::copy(dir.join(file), tmp.path().join(file)).unwrap();
    }
    edit_config(tmp.path(), |c| {
        c.remove("model_type");
    });
    let report = check_dir(tmp.path(), Contract::Any);
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::UnknownArchitecture, "config.json".into())]
    );
    assert!(!report.architecture_checked);
    // Contract v0 still applies to the weights.
    assert!(!check_dir(tmp.path(), Contract::V0).is_ok());

    // Its per-module overrides give each packed weight its logical shape.
    let model = ModelDir::open(&dir).unwrap();
    let q = QuantConfig::from_config(model.config()).unwrap().unwrap();
    let weights = model.weights();
    let shape = |module: &str| {
        let w = logical_weight(module, |n| weights.info(n), None, Some(&q))
            .unwrap()
            .unwrap();
        (w.storage, w.shape)
    };
    let mlx = |bits, group_size| {
        Some(Scheme::Mlx(tensorfile::model::QuantParams::affine(
            bits, group_size,
        )))
    };
    assert_eq!(shape("model.embed_tokens"), (mlx(8, 32), vec![48, 64]));
    assert_eq!(
        shape("model.layers.0.mlp.down_proj"),
        (mlx(6, 32), vec![16, 128])
    );
    assert_eq!(
        shape("model.layers.0.mlp.up_proj"),
        (mlx(3, 64), vec![32, 192])
    );
    assert_eq!(
        shape("model.layers.0.self_attn.q_proj"),
        (mlx(4, 64), vec![32, 128])
    );
    assert_eq!(shape("model.norm"), (None, vec![128]));
    assert_eq!(
        logical_weight("absent", |n| weights.info(n), None, Some(&q)),
        Ok(None)
    );
}

#[test]
fn sharded_model_directory() {
    let dir = copy_model("llama_tiny");
    let ts = read_tensors(&dir.path().join("model.safetensors"));
    fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let (a, b) = ts.split_at(7);
    let names = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    write_st(&dir.path().join(names[0]), a, &[("format", "tinyllm")]);
    write_st(&dir.path().join(names[1]), b, &[("format", "tinyllm")]);
    let mut map = serde_json::Map::new();
    for (part, name) in [(a, names[0]), (b, names[1])] {
        for t in part {
            map.insert(t.name.clone(), json!(name));
        }
    }
    let total: usize = ts.iter().map(|t| t.data.len()).sum();
    let index = json!({"metadata": {"total_size": total}, "weight_map": map});
    fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let report = check_dir(dir.path(), Contract::V0);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let model = ModelDir::open(dir.path()).unwrap();
    // Contract v0 through a sharded set: the same distinct error.
    write_st(
        &dir.path().join(names[1]),
        &[T::new("model.norm.weight", Dtype::BF16, &[32])],
        &[],
    );
    let v0 = ReadOptions::default().accept(Contract::V0);
    let err = Error::from(ShardedTensors::open_with(dir.path(), &v0).unwrap_err());
    assert!(
        matches!(
            err.core(),
            Some(tensorfile_core::Error::UnsupportedFormat { .. })
        ),
        "{err}"
    );
    assert_eq!(model.weights().shards().len(), 2);
    assert_eq!(model.weights().len(), 20);

    // A broken shard is reported under its name.
    fs::write(dir.path().join(names[1]), b"short").unwrap();
    let report = check_dir(dir.path(), Contract::Any);
    assert_eq!(
        kinds(&report),
        [(ProblemKind::InvalidWeights, names[1].into())]
    );
}
