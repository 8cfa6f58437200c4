//! transformers 5 directories to GGUF (issue 36 items 1-2): the bytes
//! llama.cpp's `convert_hf_to_gguf.py` gives for them, whose sha256 the
//! fixture manifest records (`tf5` section, made by
//! `scripts/make_gguf_fixtures.py tf5`).

use std::fs;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tensorfile_testkit::{fixture, manifest, run, stderr};

fn tensorfile(args: &[&str]) -> std::process::Output {
    run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

/// Converts the fixture directory of `variant` to `outtype` and compares
/// the file with the converter's digest.
fn same_bytes_as_the_converter(variant: &str) {
    let m = manifest("gguf");
    let e = &m["tf5"][variant];
    let dir = fixture("gguf").join(e["dir"].as_str().unwrap());
    let out = tempfile::tempdir().unwrap();
    for outtype in ["f32", "f16", "bf16", "q8_0"] {
        let c = &e["convert"][outtype];
        let pre = c["pre_tokenizer"]["substituted_pre"]
            .as_str()
            .unwrap_or("gpt-2");
        let dest = out.path().join(format!("{outtype}.gguf"));
        let o = tensorfile(&[
            "convert",
            dir.to_str().unwrap(),
            dest.to_str().unwrap(),
            "--type",
            outtype,
            "--tokenizer-pre",
            pre,
            "--no-sync",
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{variant} {outtype}: {}",
            stderr(&o)
        );
        let bytes = fs::read(&dest).unwrap();
        assert_eq!(
            (bytes.len() as u64, hex::encode(Sha256::digest(&bytes))),
            (
                c["size"].as_u64().unwrap(),
                c["sha256"].as_str().unwrap().to_string()
            ),
            "{variant} {outtype}: not the converter's bytes"
        );
    }
}

#[test]
fn a_transformers_5_llama3_directory_gives_the_converters_bytes() {
    same_bytes_as_the_converter("tf5-llama3");
}

#[test]
fn a_transformers_5_qwen2_directory_gives_the_converters_bytes() {
    same_bytes_as_the_converter("tf5-qwen2");
}

/// The GGUF metadata of a converted directory, as `inspect --json` lists it.
fn keys_of(dir: &std::path::Path, extra: &[&str]) -> Vec<(String, Value)> {
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("x.gguf");
    let mut args = vec![
        "convert",
        dir.to_str().unwrap(),
        dest.to_str().unwrap(),
        "--no-sync",
    ];
    args.extend_from_slice(extra);
    let o = tensorfile(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(&["inspect", dest.to_str().unwrap(), "--json"]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    j["metadata"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| (kv["key"].as_str().unwrap().to_string(), kv["value"].clone()))
        .collect()
}

/// A copy of the tf5 llama directory with `config` edited by `edit`.
fn edited_llama(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> tempfile::TempDir {
    edited(&fixture("gguf").join("tf5/hf_llama3_tf5"), edit)
}

/// A copy of the model directory `src` with `config` edited by `edit`.
fn edited(
    src: &std::path::Path,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for f in fs::read_dir(src).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), d.path().join(f.file_name())).unwrap();
    }
    let mut c: Value =
        serde_json::from_slice(&fs::read(d.path().join("config.json")).unwrap()).unwrap();
    edit(c.as_object_mut().unwrap());
    fs::write(d.path().join("config.json"), c.to_string()).unwrap();
    d
}

fn get<'a>(keys: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    keys.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The keys transformers 5 moved from the top level of config.json into
/// `rope_parameters` (its configuration_llama.py, configuration_qwen2.py,
/// configuration_qwen3.py, configuration_gemma.py, configuration_phi3.py,
/// configuration_mistral.py of 5.24.0): `rope_theta` and `rope_scaling`'s
/// fields for all six; `partial_rotary_factor` (and, when given there,
/// `original_max_position_embeddings`) for Phi-3. Each is read from either
/// place; `rope_parameters` wins, as in the converter.
#[test]
fn rope_keys_moved_by_transformers_5_are_read_from_either_place() {
    // MOVED: rope_theta, rope_scaling (as rope_parameters),
    // partial_rotary_factor and original_max_position_embeddings (Phi-3).
    // Phi-3: each moved key given in rope_parameters (transformers 5) or at
    // the top level (transformers 4) gives the same keys.
    let phi3 = fixture("real/hf/phi3");
    let moved = json!({"rope_theta": 250000.0, "partial_rotary_factor": 0.5,
                       "original_max_position_embeddings": 2048});
    let mut seen = Vec::new();
    for in_rope_parameters in [true, false] {
        let d = edited(&phi3, |c| {
            for k in moved.as_object().unwrap().keys() {
                c.remove(k);
            }
            c.remove("rope_scaling");
            if in_rope_parameters {
                let mut r = moved.clone();
                r["rope_type"] = json!("default");
                c.insert("rope_parameters".into(), r);
            } else {
                for (k, v) in moved.as_object().unwrap() {
                    c.insert(k.clone(), v.clone());
                }
            }
        });
        let keys = keys_of(d.path(), &["--type", "f32"]);
        let got: Vec<Value> = [
            "phi3.rope.freq_base",
            "phi3.rope.dimension_count",
            "phi3.rope.scaling.original_context_length",
        ]
        .iter()
        .map(|k| get(&keys, k).cloned().unwrap_or(Value::Null))
        .collect();
        // hidden 64, 4 heads: half of each head's 16 dimensions rotate.
        assert_eq!(
            got,
            [json!(250000.0), json!(8), json!(2048)],
            "{in_rope_parameters}"
        );
        seen.push(got);
    }
    assert_eq!(seen[0], seen[1]);
    // transformers 5 (rope_parameters only) and 4 (top-level keys) give the
    // same freq_base; yarn's and linear's fields from either place.
    let cases: Vec<(Value, Vec<(&str, Value)>)> = vec![
        (
            json!({"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}),
            vec![("llama.rope.freq_base", json!(500000.0))],
        ),
        (
            json!({"rope_theta": 250000.0}),
            vec![("llama.rope.freq_base", json!(250000.0))],
        ),
        (
            json!({"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 1e4}),
            vec![
                ("llama.rope.scaling.type", json!("linear")),
                ("llama.rope.scaling.factor", json!(2.0)),
                ("llama.rope.freq_base", json!(10000.0)),
            ],
        ),
        (
            json!({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                   "original_max_position_embeddings": 32768, "beta_fast": 32.0,
                   "beta_slow": 1.0, "attention_factor": 1.5}}),
            vec![
                ("llama.rope.scaling.type", json!("yarn")),
                ("llama.rope.scaling.factor", json!(4.0)),
                ("llama.rope.scaling.original_context_length", json!(32768)),
                ("llama.rope.scaling.yarn_attn_factor", json!(1.5)),
                ("llama.rope.scaling.yarn_beta_fast", json!(32.0)),
                ("llama.rope.scaling.yarn_beta_slow", json!(1.0)),
                ("llama.rope.freq_base", json!(1000000.0)),
            ],
        ),
    ];
    for (config, want) in cases {
        let d = edited_llama(|c| {
            c.remove("rope_parameters");
            for (k, v) in config.as_object().unwrap() {
                c.insert(k.clone(), v.clone());
            }
        });
        let keys = keys_of(d.path(), &[]);
        for (k, v) in &want {
            let got = get(&keys, k).unwrap_or_else(|| panic!("{config}: no {k}"));
            assert_eq!(
                got.as_f64().map(Value::from).unwrap_or(got.clone()),
                v.as_f64().map(Value::from).unwrap_or(v.clone()),
                "{config}: {k}"
            );
        }
        // The scaling keys are the wanted ones and no others.
        let scaling: Vec<&str> = keys
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| k.contains("rope.scaling"))
            .collect();
        let wanted: Vec<&str> = want
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| k.contains("rope.scaling"))
            .collect();
        assert_eq!(scaling, wanted, "{config}");
    }
    // A rope type that would need more than the converter writes is refused.
    let d = edited_llama(|c| {
        c.insert(
            "rope_parameters".into(),
            json!({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}),
        );
    });
    let out = tempfile::tempdir().unwrap();
    let o = tensorfile(&[
        "convert",
        d.path().to_str().unwrap(),
        out.path().join("x.gguf").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("\"dynamic\""), "{}", stderr(&o));
    assert!(!out.path().join("x.gguf").exists());
}

/// Only Llama's converter writes `<arch>.vocab_size`.
#[test]
fn only_llama_files_carry_a_vocab_size_key() {
    let m = manifest("gguf");
    for (variant, arch) in [("tf5-llama3", "llama"), ("tf5-qwen2", "qwen2")] {
        let dir = fixture("gguf").join(m["tf5"][variant]["dir"].as_str().unwrap());
        let keys = keys_of(&dir, &["--type", "f32"]);
        let converter: Vec<&str> = m["tf5"][variant]["convert"]["f32"]["kv_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        let ours: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(ours, converter, "{variant}");
        assert_eq!(
            get(&keys, &format!("{arch}.vocab_size")).is_some(),
            arch == "llama"
        );
    }
}
