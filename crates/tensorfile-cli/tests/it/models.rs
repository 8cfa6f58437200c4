//! `check`, `shard`, `merge`, and `inspect`/`validate` on directories and
//! indexes, run as a user runs them.

use std::fs;
use std::process::Output;
use tensorfile_testkit::{fixtures, stdout};

use serde_json::Value;

fn tensorfile(args: &[&str]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn model(name: &str) -> String {
    fixtures()
        .join("models")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// A copy of a fixture model directory.
fn copy_model(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(fixtures().join("models").join(name)).unwrap() {
        let p = entry.unwrap().path();
        fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    tmp
}

#[test]
fn check_passes_the_fixtures() {
    for name in ["bigram", "llama_tiny"] {
        let dir = model(name);
        let o = tensorfile(&["check", "--contract", "v0", &dir]);
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
        assert!(
            stdout(&o).starts_with(&format!("{dir}: ok (")),
            "{}",
            stdout(&o)
        );
        let o = tensorfile(&["check", "--json", &dir]);
        assert_eq!(o.status.code(), Some(0));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["errors"], 0);
        assert_eq!(v["report"]["architecture_checked"], true);
    }
}

#[test]
fn check_names_each_problem_and_fails() {
    let tmp = copy_model("llama_tiny");
    fs::remove_file(tmp.path().join("tokenizer.json")).unwrap();
    let dir = tmp.path().to_str().unwrap();
    let o = tensorfile(&["check", dir]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.starts_with(&format!(
            "{dir}: failed (llama, architecture checked; 1 error, 0 warnings)"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("{dir}: error: tokenizer.json: ")),
        "{text}"
    );

    let o = tensorfile(&["check", "--json", dir]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], false);
    let p = &v["report"]["problems"][0];
    assert_eq!(p["severity"], "error");
    assert_eq!(p["kind"], "missing_file");
    assert_eq!(p["subject"], "tokenizer.json");
}

#[test]
fn check_warnings_do_not_fail() {
    let tmp = copy_model("bigram");
    fs::write(tmp.path().join("tokenizer.json"), "{}").unwrap();
    let o = tensorfile(&["check", "--json", tmp.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["warnings"], 1);
    assert_eq!(v["report"]["problems"][0]["kind"], "unexpected_file");
}

#[test]
fn check_a_non_course_model_and_the_v0_contract() {
    let dir = fixtures().join("real/hf/llama");
    let dir = dir.to_str().unwrap();
    let o = tensorfile(&["check", dir]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains(": ok (LlamaForCausalLM, architecture checked; 0 errors, 0 warnings)"),
        "{}",
        stdout(&o)
    );
    let o = tensorfile(&["check", "--json", "--contract", "v0", dir]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["contract"], "v0 (F32 only)");
    assert!(v["report"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["kind"] == "unsupported_format"));
}

#[test]
fn check_hugging_face_directories() {
    let real = |rel: &str| {
        fixtures()
            .join("real")
            .join(rel)
            .to_str()
            .unwrap()
            .to_string()
    };
    // A config whose hidden_size no longer matches the weights.
    let dir = real("hf_broken/llama_hidden_mismatch");
    let o = tensorfile(&["check", &dir]);
    assert_eq!(o.status.code(), Some(1));
    let text = stdout(&o);
    assert!(
        text.contains(": failed (LlamaForCausalLM, architecture checked; 21 errors"),
        "{text}"
    );
    assert!(
        text.contains("error: lm_head.weight: shape [256, 64], but the config gives [256, 48]"),
        "{text}"
    );
    // A layer's down_proj missing.
    let o = tensorfile(&[
        "check",
        "--json",
        &real("hf_broken/qwen2_missing_down_proj"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["errors"], 1);
    let p = &v["report"]["problems"][0];
    assert_eq!(p["kind"], "missing_tensor");
    assert_eq!(p["subject"], "model.layers.1.mlp.down_proj.weight");
    assert_eq!(v["report"]["arch"], "Qwen2ForCausalLM");
    // mlx-lm's quantized experts.
    let o = tensorfile(&["check", &real("mlx_lm_arch/qwen3_moe_q4")]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // A diffusers directory: a warning, not ok-and-silent.
    let o = tensorfile(&["check", "--json", &real("sharded/unet_safetensors")]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["warnings"], 1);
    assert_eq!(v["report"]["problems"][0]["kind"], "unknown_architecture");
    // PyTorch weights only: convert says how.
    let o = tensorfile(&["check", &real("sharded/llama_tied_bin")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("error: pytorch_model.bin.index.json: the weights are PyTorch checkpoints, not safetensors: `tensorfile convert` turns them into safetensors"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn check_usage_and_bad_paths() {
    assert_eq!(
        tensorfile(&["check", "--contract", "v9", &model("bigram")])
            .status
            .code(),
        Some(2)
    );
    let o = tensorfile(&["check", "/no/such/dir"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(o.stderr).unwrap(),
        "tensorfile: /no/such/dir: not a directory\n"
    );
}

#[test]
fn shard_merge_round_trip_and_set_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("models/llama_tiny/model.safetensors");
    let out = tmp.path().join("shards");
    let o = tensorfile(&[
        "shard",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--max-shard-size",
        "30KB",
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stderr.is_empty(), "no progress bar off a terminal");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 3);
    assert_eq!(v["total_size"], 82560);
    let index = out.join("model.safetensors.index.json");
    assert_eq!(v["index"], index.to_str().unwrap());

    // validate and inspect take the directory or the index, with totals.
    for target in [&out, &index] {
        let t = target.to_str().unwrap();
        let o = tensorfile(&["validate", t]);
        assert_eq!(o.status.code(), Some(0));
        assert_eq!(
            stdout(&o),
            format!("{t}: ok (3 shards, 20 tensors, 82560 bytes (80.6 KiB) of data)\n")
        );
        let o = tensorfile(&["inspect", "--json", t]);
        assert_eq!(o.status.code(), Some(0));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["totals"]["shards"], 3);
        assert_eq!(v["totals"]["tensors"], 20);
        assert_eq!(v["totals"]["data_bytes"], 82560);
        assert_eq!(v["tensors"].as_array().unwrap().len(), 20);
        assert_eq!(v["tensors"][0]["shard"], "model-00001-of-00003.safetensors");
    }
    let o = tensorfile(&["inspect", out.to_str().unwrap()]);
    assert!(
        stdout(&o).contains(
            "totals: 3 shards, 20 tensors, 20640 (20.6K) parameters, 82560 bytes (80.6 KiB) of data"
        ),
        "{}",
        stdout(&o)
    );

    // Merge gives back the canonical file.
    let merged = tmp.path().join("merged.safetensors");
    let o = tensorfile(&["merge", out.to_str().unwrap(), merged.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(fs::read(&merged).unwrap(), fs::read(&src).unwrap());

    // A second shard into the same directory is refused; a bad size is a usage error.
    let o = tensorfile(&[
        "shard",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--max-shard-size",
        "30KB",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8(o.stderr).unwrap().lines().count(), 1);
    let o = tensorfile(&[
        "shard",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--max-shard-size",
        "5GiB",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn set_commands_reject_broken_indexes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("models/llama_tiny/model.safetensors");
    let out = tmp.path().join("shards");
    assert!(tensorfile(&[
        "shard",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--max-shard-size",
        "30KB"
    ])
    .status
    .success());
    let index = out.join("model.safetensors.index.json");
    let text = fs::read_to_string(&index).unwrap();
    fs::write(
        &index,
        text.replace("model-00003-of-00003", "../model-00003-of-00003"),
    )
    .unwrap();
    let t = out.to_str().unwrap();
    let o = tensorfile(&["validate", "--json", t]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["valid"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("not a plain file name"),
        "{v}"
    );
    for cmd in ["inspect", "merge", "check"] {
        let mut args = vec![cmd, t];
        let merged = tmp.path().join("m.safetensors");
        if cmd == "merge" {
            args.push(merged.to_str().unwrap());
        }
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(1), "{cmd}");
        assert!(!merged.exists());
    }

    // A wrong total_size is only a warning.
    fs::write(
        &index,
        text.replace("\"total_size\": 82560", "\"total_size\": 5"),
    )
    .unwrap();
    let o = tensorfile(&["validate", t]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("warning: the index's total_size is 5"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn inspect_describes_a_model_directory() {
    let o = tensorfile(&["inspect", "--json", "--hash", &model("llama_tiny")]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["model"]["tl_arch"], "llama");
    assert_eq!(v["model"]["tokenizer"], true);
    assert_eq!(v["index"], Value::Null);
    let expected: Value = serde_json::from_str(
        &fs::read_to_string(fixtures().join("models/llama_tiny/model.json")).unwrap(),
    )
    .unwrap();
    for (got, want) in v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .zip(expected["tensors"].as_array().unwrap())
    {
        assert_eq!(got["name"], want["name"]);
        assert_eq!(got["sha256"], want["sha256"]);
    }
}
