//! `tensorfile quantize`, `dequantize` and `inspect` on quantized files, run
//! as a user runs them.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};
use tensorfile::Decode;
use tensorfile_testkit::{fixture, stderr};

use serde_json::Value;
use tensorfile::{Dtype, Metadata, SafeTensors, TensorRef, WriteOptions};

fn run(args: &[&OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(args)
        .output()
        .unwrap()
}

fn cmd(sub: &str, input: &Path, output: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&OsStr> = vec![
        sub.as_ref(),
        input.as_os_str(),
        output.as_os_str(),
        "--no-sync".as_ref(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    run(&args)
}

fn refused(o: &Output, code: i32, needle: &str) {
    assert_eq!(o.status.code(), Some(code), "{}", stderr(o));
    let err = stderr(o);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
}

fn fixture_json(rel: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(rel)).unwrap()).unwrap()
}

/// The int4 fixture's float input, written as a file.
fn int4_input(path: &Path) {
    let spec = fixture_json("quant/int4_g32_sym.json");
    let f = |v: &Value| -> Vec<u8> {
        v.as_array()
            .unwrap()
            .iter()
            .flat_map(|x| (x.as_f64().unwrap() as f32).to_le_bytes())
            .collect()
    };
    let bias = spec["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "layer.bias")
        .unwrap();
    let (b, w) = (
        f(&bias["values"]),
        f(&spec["quantized_from"]["layer.weight"]["values"]),
    );
    let tensors = [
        TensorRef {
            name: "layer.bias",
            dtype: Dtype::F32,
            shape: &[8],
            data: &b,
        },
        TensorRef {
            name: "layer.weight",
            dtype: Dtype::F32,
            shape: &[8, 64],
            data: &w,
        },
    ];
    let metadata = Metadata::from([("format".into(), "tinyllm".into())]);
    tensorfile::save(path, tensors, Some(&metadata), &WriteOptions::default()).unwrap();
}

#[test]
fn int4_quantize_reproduces_the_fixture_and_dequantize_its_values() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    int4_input(&input);
    let q = dir.path().join("q.safetensors");
    let o = cmd(
        "quantize",
        &input,
        &q,
        &["--scheme", "int4-g32-sym", "--json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["quantized"], serde_json::json!(["layer.weight"]));
    assert_eq!(
        std::fs::read(&q).unwrap(),
        std::fs::read(fixture("quant/int4_g32_sym.safetensors")).unwrap()
    );

    let d = dir.path().join("d.safetensors");
    let o = cmd("dequantize", &q, &d, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("layer.weight: int4-g32-sym -> F32"));
    let want: Vec<f32> = fixture_json("quant/int4_g32_sym.json")["dequantized"]["layer.weight"]
        ["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    let back = SafeTensors::open(&d).unwrap();
    assert_eq!(
        back.tensor("layer.weight").unwrap().to_f32_vec().unwrap(),
        want
    );
    // --dtype picks the output dtype.
    let o = cmd("dequantize", &q, &d, &["--dtype", "bf16"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        SafeTensors::open(&d)
            .unwrap()
            .tensor("layer.weight")
            .unwrap()
            .dtype(),
        Dtype::BF16
    );
}

#[test]
fn mlx_model_directory_and_config() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture("mlx/mlx_mixed_model");
    let d = dir.path().join("d.safetensors");
    let o = cmd("dequantize", &model, &d, &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["dequantized"].as_array().unwrap().len(), 4);
    let first = std::fs::read(&d).unwrap();
    // The same through --config on the file itself.
    let config = model.join("config.json");
    let o = cmd(
        "dequantize",
        &model.join("model.safetensors"),
        &d,
        &["--config", config.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&d).unwrap(), first);
    // The file inside its model directory takes the config.json beside it.
    let d2 = dir.path().join("d2.safetensors");
    let o = cmd("dequantize", &model.join("model.safetensors"), &d2, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&d2).unwrap(), first);
    // Without any parameters, the file alone is refused, naming a weight.
    let alone = dir.path().join("alone.safetensors");
    std::fs::copy(model.join("model.safetensors"), &alone).unwrap();
    let d3 = dir.path().join("d3.safetensors");
    let o = cmd("dequantize", &alone, &d3, &[]);
    refused(&o, 1, ".weight");
    assert!(!d3.exists());
}

#[test]
fn mlx_parameters_from_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d.safetensors");
    let o = cmd(
        "dequantize",
        &fixture("mlx/affine_b4_g64.safetensors"),
        &d,
        &["--bits", "4", "--group-size", "64"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cmd(
        "dequantize",
        &fixture("mlx/nvfp4_g16.safetensors"),
        &d,
        &["--mode", "nvfp4", "--dtype", "f32"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // Parameters the shapes refute.
    let d2 = dir.path().join("d2.safetensors");
    let o = cmd(
        "dequantize",
        &fixture("mlx/affine_b4_g64.safetensors"),
        &d2,
        &["--bits", "2", "--group-size", "64"],
    );
    refused(&o, 1, "w.scales");
    let o = cmd(
        "dequantize",
        &fixture("mlx/affine_b4_g64.safetensors"),
        &d2,
        &["--bits", "4"],
    );
    assert_eq!(o.status.code(), Some(2), "usage: {}", stderr(&o));
    let o = cmd(
        "dequantize",
        &fixture("mlx/affine_b4_g64.safetensors"),
        &d2,
        &["--mode", "affine"],
    );
    refused(&o, 2, "--bits");
    // A dtype dequantized weights cannot be written as, whatever the file.
    for input in [
        "quant/int4_g32_sym.safetensors",
        "valid/minimal_bf16.safetensors",
    ] {
        let o = cmd("dequantize", &fixture(input), &d2, &["--dtype", "U8"]);
        refused(&o, 2, "--dtype U8");
    }
    assert!(!d2.exists());
}

#[test]
fn mlx_quantize_then_dequantize_without_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    int4_input(&input);
    let q = dir.path().join("q.safetensors");
    let o = cmd(
        "quantize",
        &input,
        &q,
        &[
            "--scheme",
            "mlx-affine",
            "--bits",
            "3",
            "--group-size",
            "32",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let qf = SafeTensors::open(&q).unwrap();
    assert_eq!(qf.tensor("layer.weight").unwrap().dtype(), Dtype::U32);
    assert_eq!(
        qf.metadata().unwrap()["quantization"],
        r#"{"bits":3,"group_size":32,"mode":"affine"}"#
    );
    // inspect reads the file's own parameters.
    let o = run(&["inspect".as_ref(), "--json".as_ref(), q.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let info: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        info["quantized"][0]["logical_shape"],
        serde_json::json!([8, 64])
    );
    assert_eq!(info["quantized"][0]["bits"], 3);
    assert_eq!(info["quantized"][0]["bits_per_weight"], 5.0);
    let d = dir.path().join("d.safetensors");
    let o = cmd("dequantize", &q, &d, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        SafeTensors::open(&d)
            .unwrap()
            .tensor("layer.weight")
            .unwrap()
            .shape(),
        [8, 64]
    );
}

#[test]
fn quantize_refusals_leave_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    int4_input(&input);
    let q = dir.path().join("q.safetensors");
    refused(
        &cmd(
            "quantize",
            &input,
            &q,
            &["--scheme", "mlx-affine", "--bits", "4"],
        ),
        2,
        "--group-size",
    );
    refused(
        &cmd("quantize", &input, &q, &["--scheme", "int4-g48-sym"]),
        1,
        "*",
    );
    refused(
        &cmd(
            "quantize",
            &input,
            &q,
            &["--scheme", "int4-g32-sym", "--include", "layer.bias"],
        ),
        1,
        "layer.bias",
    );
    refused(
        &cmd("quantize", &input, &q, &["--scheme", "gptq"]),
        2,
        "unknown scheme",
    );
    // A NaN weight names the tensor.
    let mut w = vec![0u8; 8 * 64 * 4];
    w[4..8].copy_from_slice(&f32::NAN.to_le_bytes());
    let t = TensorRef {
        name: "x.weight",
        dtype: Dtype::F32,
        shape: &[8, 64],
        data: &w,
    };
    tensorfile::save(&input, [t], None, &WriteOptions::default()).unwrap();
    refused(
        &cmd("quantize", &input, &q, &["--scheme", "int4-g32-sym"]),
        1,
        "\"x.weight\"",
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the input"
    );
}

#[test]
fn inspect_shows_logical_shapes_of_files_and_model_directories() {
    // A file beside its config.json, and the model directory itself.
    for target in [
        "mlx/mlx_mixed_model/model.safetensors",
        "mlx/mlx_mixed_model",
    ] {
        let o = run(&["inspect".as_ref(), fixture(target).as_os_str()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("quantized weights: 4"), "{text}");
        let line = "model.layers.0.mlp.up_proj.weight       mlx affine  3-bit  groups of 64  logical shape [32,192]   3.500 bits/weight";
        assert!(text.contains(line), "{target}: {text}");
        let o = run(&[
            "inspect".as_ref(),
            "--json".as_ref(),
            fixture(target).as_os_str(),
        ]);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let q = v["quantized"].as_array().unwrap();
        assert_eq!(q.len(), 4, "{target}");
        assert!(q.iter().any(|w| w["name"] == "model.embed_tokens.weight"
            && w["bits"] == 8
            && w["logical_shape"] == serde_json::json!([48, 64])));
    }
    // Unknown parameters are said, not guessed; the rest of inspect works.
    let o = run(&[
        "inspect".as_ref(),
        fixture("mlx/affine_b4_g64.safetensors").as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("quantized weights: cannot be read"));
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn mlx_modes_quantize_moe_models_as_mlx_lm_does() {
    // mlx-lm's float Mixtral (3-D expert stacks) quantized by the CLI gives
    // the tensors mlx-lm wrote, byte for byte, in affine, nvfp4 and nvfp4
    // with per-expert global scales.
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("real/mlx_lm/mixtral_bf16/model.safetensors");
    let cases: [(&str, &[&str]); 3] = [
        (
            "mixtral_q4",
            &[
                "--scheme",
                "mlx-affine",
                "--bits",
                "4",
                "--group-size",
                "64",
            ],
        ),
        ("mixtral_nvfp4", &["--scheme", "mlx-nvfp4"]),
        (
            "mixtral_nvfp4_global_scale",
            &["--scheme", "mlx-nvfp4", "--global-scale"],
        ),
    ];
    for (theirs, flags) in cases {
        let out = dir.path().join(format!("{theirs}.safetensors"));
        let mut args = flags.to_vec();
        args.extend(["--include", "model.embed_tokens.weight", "--json"]);
        let o = cmd("quantize", &input, &out, &args);
        assert!(o.status.success(), "{theirs}: {}", stderr(&o));
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            report["quantized"].as_array().unwrap().len(),
            18,
            "{theirs}"
        );
        assert_eq!(report["global_scale"], theirs.ends_with("global_scale"));
        let ours = SafeTensors::open(&out).unwrap();
        let reference =
            SafeTensors::open(fixture(&format!("real/mlx_lm/{theirs}/model.safetensors"))).unwrap();
        assert_eq!(ours.len(), reference.len(), "{theirs}");
        for t in reference.tensors() {
            let mine = ours.tensor(t.name()).unwrap();
            assert_eq!(
                (mine.dtype(), mine.shape()),
                (t.dtype(), t.shape()),
                "{}",
                t.name()
            );
            assert!(mine.data() == t.data(), "{theirs}: {}", t.name());
        }
    }
    // Flags that do not fit the scheme are usage errors.
    let out = dir.path().join("x.safetensors");
    refused(
        &cmd(
            "quantize",
            &input,
            &out,
            &[
                "--scheme",
                "mlx-affine",
                "--bits",
                "4",
                "--group-size",
                "64",
                "--global-scale",
            ],
        ),
        2,
        "global scale",
    );
    refused(
        &cmd(
            "quantize",
            &input,
            &out,
            &["--scheme", "mlx-mxfp8", "--bits", "4"],
        ),
        2,
        "mxfp8",
    );
    assert!(!out.exists());
}

#[test]
fn moe_expert_stacks_inspect_and_dequantize() {
    // mlx-lm's expert stacks are listed with their logical 3-D shapes (the
    // whole listing, not dropped for them) and dequantize bit for bit as
    // mx.dequantize, per-expert global scales included.
    let manifest = fixture_json("real/mlx_lm/manifest.json");
    let dir = tempfile::tempdir().unwrap();
    for name in ["mixtral_q4", "mixtral_nvfp4", "mixtral_nvfp4_global_scale"] {
        let model = fixture(&format!("real/mlx_lm/{name}"));
        let file = model.join("model.safetensors");
        let o = run(&["inspect".as_ref(), file.as_os_str()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("quantized weights: 18"), "{name}: {text}");
        let stack = text
            .lines()
            .skip_while(|l| !l.starts_with("quantized weights"))
            .find(|l| l.contains("switch_mlp.down_proj.weight"))
            .unwrap();
        assert!(stack.contains("logical shape [4,64,64]"), "{stack}");
        assert_eq!(
            stack.contains("global scale"),
            name.ends_with("global_scale"),
            "{stack}"
        );
        let o = run(&["inspect".as_ref(), "--json".as_ref(), file.as_os_str()]);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let q = v["quantized"].as_array().unwrap();
        let stacks: Vec<&Value> = q
            .iter()
            .filter(|w| w["logical_shape"] == serde_json::json!([4, 64, 64]))
            .collect();
        assert_eq!(stacks.len(), 6, "{name}");
        assert!(stacks.iter().all(|w| w["bits_per_weight"] == 4.5));
        assert!(stacks
            .iter()
            .all(|w| w["global_scale"] == name.ends_with("global_scale")));

        let out = dir.path().join(format!("{name}.safetensors"));
        let config = model.join("config.json");
        let o = cmd(
            "dequantize",
            &file,
            &out,
            &["--config", config.to_str().unwrap()],
        );
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let back = SafeTensors::open(&out).unwrap();
        for layer in manifest["dirs"][name]["quantized_layers"]
            .as_array()
            .unwrap()
        {
            let t = back
                .tensor(&format!("{}.weight", layer["layer"].as_str().unwrap()))
                .unwrap();
            assert_eq!(
                sha256_hex(t.data()),
                layer["dequantized"]["sha256"],
                "{name} {}",
                layer["layer"]
            );
        }
    }
}
