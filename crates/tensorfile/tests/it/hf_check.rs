//! `check` on Hugging Face directories written by the real tools
//! (tests/fixtures/real/, made by scripts/make_real_fixtures.py and
//! scripts/make_mlx_arch_fixtures.py): every tensor's name and shape comes
//! from config.json; missing, unexpected and mis-shaped tensors are named;
//! what it does not know it says so.

use crate::common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};
use tensorfile::model::{check_dir, ModelReport, ProblemKind, Severity};
use tensorfile::Contract;

fn real(rel: &str) -> PathBuf {
    fixtures().join("real").join(rel)
}

fn manifest(group: &str) -> Value {
    serde_json::from_slice(&fs::read(real(group).join("manifest.json")).unwrap()).unwrap()
}

fn check(dir: &Path) -> ModelReport {
    check_dir(dir, Contract::Any)
}

fn kinds(report: &ModelReport) -> Vec<(ProblemKind, String)> {
    report
        .problems
        .iter()
        .map(|p| (p.kind, p.subject.clone()))
        .collect()
}

/// A copy of a fixture directory, to edit.
fn copy_dir(src: &Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(src).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    tmp
}

/// Rewrites model.safetensors (and mlx-lm's index beside it, if any).
fn rewrite(dir: &Path, f: impl FnOnce(&mut Vec<T>)) {
    let path = dir.join("model.safetensors");
    let mut tensors = read_tensors(&path);
    f(&mut tensors);
    write_st(&path, &tensors, &[("format", "pt")]);
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let map: serde_json::Map<String, Value> = tensors
            .iter()
            .map(|t| (t.name.clone(), json!("model.safetensors")))
            .collect();
        let text = json!({"metadata": {}, "weight_map": map});
        fs::write(index, serde_json::to_vec(&text).unwrap()).unwrap();
    }
}

/// The class a directory's config names.
fn class_of(dir: &Path) -> String {
    let config: Value =
        serde_json::from_slice(&fs::read(dir.join("config.json")).unwrap()).unwrap();
    config["architectures"][0].as_str().unwrap().to_string()
}

/// Every directory the real tools wrote that holds a whole model.
fn real_model_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for group in ["hf", "mlx_lm", "mlx_lm_arch"] {
        for entry in fs::read_dir(real(group)).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            }
        }
    }
    for arch in ["bert_mlm", "gpt2", "llama", "qwen2", "t5"] {
        dirs.push(real(&format!("tied_bin/{arch}/safetensors")));
    }
    dirs.sort();
    dirs
}

#[test]
fn every_real_directory_checks_ok_against_its_architecture() {
    let dirs = real_model_dirs();
    assert_eq!(dirs.len(), 12 + 6 + 9 + 5);
    for dir in dirs {
        let report = check(&dir);
        assert!(
            report.problems.is_empty(),
            "{}: {:?}",
            dir.display(),
            report.problems
        );
        assert!(report.architecture_checked, "{}", dir.display());
        assert_eq!(report.arch.as_deref(), Some(class_of(&dir).as_str()));
    }
}

#[test]
fn the_layout_is_the_writers() {
    let note = |rel: &str| {
        let report = check(&real(rel));
        report
            .notes
            .iter()
            .find(|n| n.starts_with("checked as"))
            .cloned()
            .unwrap()
    };
    assert!(note("hf/mixtral").ends_with("transformers layout"));
    assert!(note("mlx_lm/mixtral_q4").contains("mlx-lm (experts stacked"));
    assert!(note("mlx_lm_arch/qwen2_moe_q4").contains("mlx-lm (experts stacked"));
    assert!(note("mlx_lm_arch/gpt2_q4").contains("mlx-lm (\"model.\" prefix"));
    assert!(note("mlx_lm_arch/gpt2_unprefixed").contains("without the \"transformer.\" prefix"));
}

/// The names of a manifest's tensor list.
fn names(list: &Value) -> BTreeSet<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_str()
                .map_or_else(|| v["name"].as_str().unwrap().to_string(), str::to_string)
        })
        .collect()
}

/// For every architecture: the file holds the state_dict less the tied
/// names it omits; taking any one tensor away is that tensor missing, by
/// name and nothing else; writing an omitted tied name back (with its
/// partner's bytes) is still fine; a stray tensor is unexpected.
#[test]
fn every_manifest_tensor_is_required_by_name() {
    let m = manifest("hf");
    let models = m["models"].as_object().unwrap();
    assert_eq!(models.len(), 12);
    for (arch, model) in models {
        let dir = real(&format!("hf/{arch}"));
        let omitted = names(&model["state_dict_names_not_in_file"]);
        let expected: BTreeSet<String> = names(&model["state_dict"])
            .difference(&omitted)
            .cloned()
            .collect();
        let file: BTreeSet<String> = read_tensors(&dir.join("model.safetensors"))
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(file, expected, "{arch}");

        let tmp = copy_dir(&dir);
        let original = read_tensors(&dir.join("model.safetensors"));
        for gone in &expected {
            rewrite(tmp.path(), |ts| {
                *ts = original.clone();
                ts.retain(|t| &t.name != gone);
            });
            let report = check(tmp.path());
            assert_eq!(
                kinds(&report),
                [(ProblemKind::MissingTensor, gone.clone())],
                "{arch} without {gone}"
            );
        }
        for group in model["state_dict_tied_groups"].as_array().unwrap() {
            let group = names(group);
            let kept = group.intersection(&expected).next().unwrap().clone();
            for alias in group.intersection(&omitted) {
                rewrite(tmp.path(), |ts| {
                    *ts = original.clone();
                    let mut t = ts.iter().find(|t| t.name == kept).unwrap().clone();
                    t.name = alias.clone();
                    ts.push(t);
                });
                let report = check(tmp.path());
                assert!(
                    report.problems.is_empty(),
                    "{arch} with {alias}: {:?}",
                    report.problems
                );
            }
        }
        rewrite(tmp.path(), |ts| {
            *ts = original.clone();
            let mut t = ts[0].clone();
            t.name = "extra.weight".into();
            ts.push(t);
        });
        assert_eq!(
            kinds(&check(tmp.path())),
            [(ProblemKind::UnexpectedTensor, "extra.weight".into())],
            "{arch}"
        );
    }
}

/// A transformers 5 load report's keys of one status, braces expanded
/// (`model.layers.{0, 1}.mlp.up_proj.weight`).
fn load_report_keys(message: &str, status: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in message.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[1] != status {
            continue;
        }
        let key = cells[0];
        match (key.find('{'), key.find('}')) {
            (Some(a), Some(b)) => {
                for i in key[a + 1..b].split(',') {
                    out.insert(format!("{}{}{}", &key[..a], i.trim(), &key[b + 1..]));
                }
            }
            _ => {
                out.insert(key.to_string());
            }
        }
    }
    out
}

/// The broken directories: the tensors `check` names are the ones
/// transformers names when it refuses them (5.x's load report) or
/// initializes them at random (4.57's warning).
#[test]
fn broken_directories_fail_as_transformers_does() {
    let m = manifest("hf_broken");
    for (name, broken) in m["dirs"].as_object().unwrap() {
        let report = check(&real(&format!("hf_broken/{name}")));
        assert!(!report.is_ok(), "{name}");
        assert!(report.architecture_checked);
        let named: BTreeSet<String> = report.errors().map(|p| p.subject.clone()).collect();
        let tf5 = broken["transformers_5"]["load_messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .find(|m| m.contains("LOAD REPORT"))
            .unwrap();
        if name.ends_with("hidden_mismatch") {
            // Both versions refuse it; 4.57 names the first mismatch.
            assert_eq!(broken["transformers_4.57"]["loaded"], false);
            assert_eq!(broken["transformers_5"]["loaded"], false);
            assert!(report.errors().all(|p| p.kind == ProblemKind::WrongShape));
            assert_eq!(named, load_report_keys(tf5, "MISMATCH"), "{name}");
        } else {
            assert_eq!(broken["transformers_4.57"]["loaded"], true);
            let warned = broken["transformers_4.57"]["load_messages"].to_string();
            assert!(warned.contains("newly initialized: ['model.layers.1.mlp.down_proj.weight']"));
            assert_eq!(named, load_report_keys(tf5, "MISSING"), "{name}");
            assert_eq!(
                kinds(&report),
                [(
                    ProblemKind::MissingTensor,
                    "model.layers.1.mlp.down_proj.weight".into()
                )]
            );
        }
    }
}

#[test]
fn mlx_quantized_weights_are_checked_by_logical_shape() {
    // An expert stack taken away, with its scales and biases.
    let dir = copy_dir(&real("mlx_lm_arch/qwen3_moe_q4"));
    let module = "model.layers.1.mlp.switch_mlp.down_proj";
    rewrite(dir.path(), |ts| ts.retain(|t| !t.name.starts_with(module)));
    assert_eq!(
        kinds(&check(dir.path())),
        [(ProblemKind::MissingTensor, format!("{module}.weight"))]
    );
    // A config whose sizes no longer match the packed weights.
    let dir = copy_dir(&real("mlx_lm/mixtral_q4"));
    edit_config(dir.path(), |c| {
        c.insert("intermediate_size".into(), json!(32));
    });
    let report = check(dir.path());
    let wrong: BTreeSet<String> = report
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::WrongShape)
        .map(|p| p.subject.clone())
        .collect();
    let expected: BTreeSet<String> = (0..2)
        .flat_map(|i| {
            ["gate_proj", "up_proj", "down_proj"]
                .map(|p| format!("model.layers.{i}.block_sparse_moe.switch_mlp.{p}"))
        })
        .collect();
    assert_eq!(wrong, expected, "{:?}", report.problems);
    assert_eq!(report.problems.len(), 6);
}

#[test]
fn an_unknown_architecture_is_a_warning_not_ok() {
    type Edit = fn(&mut serde_json::Map<String, Value>);
    let cases: [(&str, Edit); 4] = [
        ("architectures", |c| {
            c.insert(
                "architectures".into(),
                json!(["LlamaForSequenceClassification"]),
            );
        }),
        ("model_type", |c| {
            c.remove("architectures");
            c.insert("model_type".into(), json!("falcon"));
        }),
        ("config.json", |c| {
            c.remove("architectures");
            c.remove("model_type");
        }),
        ("quantization_config", |c| {
            c.insert(
                "quantization_config".into(),
                json!({"quant_method": "gptq", "bits": 4}),
            );
        }),
    ];
    for (subject, edit) in cases {
        let dir = copy_dir(&real("hf/llama"));
        edit_config(dir.path(), edit);
        let report = check(dir.path());
        assert_eq!(
            kinds(&report),
            [(ProblemKind::UnknownArchitecture, subject.into())]
        );
        assert_eq!(report.problems[0].severity, Severity::Warning);
        assert!(report.is_ok());
        assert!(!report.architecture_checked);
    }
    // The class named is not one of the family's: the known ones are listed.
    let dir = copy_dir(&real("hf/llama"));
    edit_config(dir.path(), |c| {
        c.insert(
            "architectures".into(),
            json!(["LlamaForSequenceClassification"]),
        );
    });
    let message = &check(dir.path()).problems[0].message;
    assert!(
        message.contains("LlamaForCausalLM, LlamaModel"),
        "{message}"
    );

    // No architectures: the model type's usual class.
    let dir = copy_dir(&real("hf/qwen2"));
    edit_config(dir.path(), |c| {
        c.remove("architectures");
    });
    let report = check(dir.path());
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.arch.as_deref(), Some("Qwen2ForCausalLM"));
    assert!(report.notes.iter().any(|n| n.contains("no architectures")));
}

#[test]
fn base_and_head_classes_load_each_others_checkpoints() {
    // A LlamaModel config over a causal LM's file: the head is unexpected
    // (transformers drops it), the backbone matches under its prefix.
    let dir = copy_dir(&real("hf/llama"));
    edit_config(dir.path(), |c| {
        c.insert("architectures".into(), json!(["LlamaModel"]));
    });
    assert_eq!(
        kinds(&check(dir.path())),
        [(ProblemKind::UnexpectedTensor, "lm_head.weight".into())]
    );
    // A BertForMaskedLM config over a BertModel's file: the head is missing.
    let dir = copy_dir(&real("hf/bert"));
    edit_config(dir.path(), |c| {
        c.insert("architectures".into(), json!(["BertForMaskedLM"]));
    });
    let report = check(dir.path());
    let missing: Vec<&str> = report
        .problems
        .iter()
        .filter(|p| p.kind == ProblemKind::MissingTensor)
        .map(|p| p.subject.as_str())
        .collect();
    assert_eq!(
        missing,
        [
            "cls.predictions.transform.dense.bias",
            "cls.predictions.transform.dense.weight",
            "cls.predictions.transform.LayerNorm.weight",
            "cls.predictions.transform.LayerNorm.bias",
            "cls.predictions.bias"
        ]
    );
    assert!(report.has(ProblemKind::UnexpectedTensor, "pooler.dense.weight"));
}

#[test]
fn old_buffers_are_accepted() {
    let dir = copy_dir(&real("hf/gpt2"));
    rewrite(dir.path(), |ts| {
        ts.push(T::new(
            "transformer.h.0.attn.bias",
            tensorfile::Dtype::F32,
            &[1, 1, 64, 64],
        ));
        ts.push(T::new(
            "transformer.h.1.attn.masked_bias",
            tensorfile::Dtype::F32,
            &[],
        ));
    });
    assert!(check(dir.path()).problems.is_empty());
    let dir = copy_dir(&real("hf/llama"));
    rewrite(dir.path(), |ts| {
        ts.push(T::new(
            "model.layers.0.self_attn.rotary_emb.inv_freq",
            tensorfile::Dtype::F32,
            &[8],
        ));
    });
    assert!(check(dir.path()).problems.is_empty());
}

#[test]
fn diffusers_directories_are_recognized() {
    for rel in [
        "sharded/unet_safetensors",
        "sharded/unet_sharded_safetensors",
    ] {
        let report = check(&real(rel));
        assert_eq!(
            kinds(&report),
            [(ProblemKind::UnknownArchitecture, "_class_name".into())],
            "{rel}"
        );
        assert!(report.is_ok());
        assert_eq!(report.arch.as_deref(), Some("UNet2DModel"));
        assert!(report.problems[0].message.contains("diffusers UNet2DModel"));
    }
}

#[test]
fn bin_only_directories_point_to_convert() {
    let cases = [
        ("sharded/llama_tied_bin", "pytorch_model.bin.index.json"),
        ("sharded/unet_bin", "diffusion_pytorch_model.bin"),
        ("tied_bin/llama/bin", "pytorch_model.bin"),
        ("tied_bin/t5/bin", "pytorch_model.bin"),
    ];
    for (rel, file) in cases {
        let report = check(&real(rel));
        assert_eq!(
            kinds(&report),
            [(ProblemKind::PytorchWeights, file.into())],
            "{rel}"
        );
        assert!(!report.is_ok());
        assert!(report.problems[0].message.contains("`tensorfile convert`"));
    }
}

/// Hostile configs: each gives typed problems naming the field, never a
/// panic, an overflow or a huge allocation.
#[test]
fn hostile_configs_give_named_problems() {
    let big = json!(u64::MAX);
    let cases: Vec<(&str, &str, Value, ProblemKind, &str)> = vec![
        (
            "llama",
            "num_hidden_layers",
            json!(1u64 << 40),
            ProblemKind::InvalidField,
            "num_hidden_layers",
        ),
        (
            "llama",
            "num_hidden_layers",
            json!(99_999),
            ProblemKind::InvalidField,
            "num_hidden_layers",
        ),
        (
            "llama",
            "hidden_size",
            json!(-64),
            ProblemKind::InvalidField,
            "hidden_size",
        ),
        (
            "llama",
            "hidden_size",
            json!(64.5),
            ProblemKind::InvalidField,
            "hidden_size",
        ),
        (
            "llama",
            "hidden_size",
            json!("64"),
            ProblemKind::InvalidField,
            "hidden_size",
        ),
        (
            "llama",
            "num_attention_heads",
            json!(0),
            ProblemKind::InvalidField,
            "num_attention_heads",
        ),
        (
            "llama",
            "num_key_value_heads",
            json!(3),
            ProblemKind::InvalidField,
            "num_key_value_heads",
        ),
        (
            "llama",
            "head_dim",
            big.clone(),
            ProblemKind::InvalidField,
            "head_dim",
        ),
        (
            "llama",
            "tie_word_embeddings",
            json!("yes"),
            ProblemKind::InvalidField,
            "tie_word_embeddings",
        ),
        (
            "llama",
            "vocab_size",
            big.clone(),
            ProblemKind::WrongShape,
            "model.embed_tokens.weight",
        ),
        (
            "phi3",
            "intermediate_size",
            big.clone(),
            ProblemKind::InvalidField,
            "intermediate_size",
        ),
        (
            "mixtral",
            "num_local_experts",
            json!(1u64 << 33),
            ProblemKind::InvalidField,
            "num_local_experts",
        ),
        (
            "mixtral",
            "num_local_experts",
            json!(0),
            ProblemKind::InvalidField,
            "num_local_experts",
        ),
        (
            "qwen3_moe",
            "decoder_sparse_step",
            json!(0),
            ProblemKind::InvalidField,
            "decoder_sparse_step",
        ),
        (
            "qwen3_moe",
            "mlp_only_layers",
            json!("all"),
            ProblemKind::InvalidField,
            "mlp_only_layers",
        ),
        (
            "qwen3_moe",
            "mlp_only_layers",
            json!([0, -1]),
            ProblemKind::InvalidField,
            "mlp_only_layers",
        ),
        (
            "gpt2",
            "n_head",
            json!(3),
            ProblemKind::InvalidField,
            "n_head",
        ),
        (
            "gpt2",
            "n_embd",
            json!(1u64 << 63),
            ProblemKind::InvalidField,
            "n_embd",
        ),
        (
            "bert",
            "num_attention_heads",
            json!(5),
            ProblemKind::InvalidField,
            "num_attention_heads",
        ),
        ("t5", "d_kv", big.clone(), ProblemKind::InvalidField, "d_kv"),
        (
            "t5",
            "num_decoder_layers",
            json!(1u64 << 50),
            ProblemKind::InvalidField,
            "num_decoder_layers",
        ),
        (
            "t5",
            "num_layers",
            json!(1u64 << 50),
            ProblemKind::InvalidField,
            "num_layers",
        ),
    ];
    for (arch, field, value, kind, subject) in cases {
        let dir = copy_dir(&real(&format!("hf/{arch}")));
        edit_config(dir.path(), |c| {
            c.insert(field.into(), value.clone());
        });
        let report = check(dir.path());
        assert!(!report.is_ok(), "{arch} {field}={value}");
        assert!(
            report.has(kind, subject),
            "{arch} {field}={value}: {:?}",
            report.problems
        );
    }
    // Many layers and experts within the budget: checked, the problems
    // past the list's limit counted.
    let dir = copy_dir(&real("hf/mixtral"));
    edit_config(dir.path(), |c| {
        c.insert("num_hidden_layers".into(), json!(3));
        c.insert("num_local_experts".into(), json!(10_000));
    });
    let report = check(dir.path());
    assert!(report.architecture_checked);
    assert_eq!(report.problems.len(), tensorfile::model::MAX_LISTED);
    assert!(report.unlisted_errors > 80_000);
}
