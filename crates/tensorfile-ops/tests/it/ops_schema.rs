//! The `--json` schema of each operation: the table of keys in its page
//! `docs/commands/<command>.md` (`inspect`'s is describe_schema.rs) and the
//! keys its report prints, serialized from a fixture, must agree, and the
//! keys print in ascending byte order (as the commands always printed
//! them), so that neither can change without the other.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use tensorfile::Dtype;
use tensorfile_ops::convert::{convert, ConvertReport, ConvertRequest};
use tensorfile_ops::dequantize::{dequantize, DequantizeRequest};
use tensorfile_ops::edit::{edit, EditRequest};
use tensorfile_ops::merge::{merge, MergeRequest};
use tensorfile_ops::quantize::{quantize, QuantizeRequest};
use tensorfile_ops::rewrite::{rewrite, RewriteRequest};
use tensorfile_ops::shard::{shard, ShardRequest};
use tensorfile_ops::transform::InOut;
use tensorfile_ops::validate::{validate, ValidateRequest};
use tensorfile_testkit::fixtures;

/// The key column of the table under the `--json` heading of the
/// command's page (under its heading `### <shape>` when the report has
/// several shapes): `a.b` for an object's keys, `a[].b` for the keys of a
/// list's objects.
fn documented_shape(command: &str, shape: Option<&str>) -> BTreeSet<String> {
    let path = fixtures().join(format!("../../docs/commands/{command}.md"));
    let page = std::fs::read_to_string(&path).unwrap();
    let mut section = page
        .split("## `--json`")
        .nth(1)
        .unwrap_or_else(|| panic!("{} has no `--json` section", path.display()));
    if let Some(shape) = shape {
        section = section
            .split(&format!("### {shape}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("{} has no {shape} table", path.display()));
    }
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|line| {
            let key = line.split('|').nth(1)?.trim();
            (key != "key" && !key.starts_with("---")).then(|| key.trim_matches('`').to_string())
        })
        .collect()
}

/// The keys of a page with one table.
fn documented(command: &str) -> BTreeSet<String> {
    documented_shape(command, None)
}

/// Every key path of `value`: `a`, `a.b` for an object's keys, `a[].b`
/// for the keys of a list's objects. An empty list shows no keys of its
/// own: those `page` documents for it are taken as they are.
fn paths(value: &Value, prefix: &str, page: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(path.clone());
                // An object the page lists no keys of is a map whose keys
                // are data (tensor names, dtypes), not fields.
                let inner = format!("{path}.");
                if !v.is_object() || page.iter().any(|k| k.starts_with(&inner)) {
                    paths(v, &path, page, out);
                }
            }
        }
        Value::Array(items) if items.is_empty() => {
            let inner = format!("{prefix}[].");
            out.extend(page.iter().filter(|k| k.starts_with(&inner)).cloned());
        }
        Value::Array(items) => {
            for item in items {
                paths(item, &format!("{prefix}[]"), page, out);
            }
        }
        _ => {}
    }
}

/// The key paths of a report as it prints (what `page` documents for an
/// empty list included), checked to be in ascending byte order at every
/// level.
fn printed(report: &impl serde::Serialize, page: &BTreeSet<String>) -> BTreeSet<String> {
    let text = serde_json::to_string(report).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    // serde_json's own maps sort their keys: printing the parsed value
    // gives the same text only if the structs' fields are in that order.
    assert_eq!(value.to_string(), text, "fields out of key order");
    let mut out = BTreeSet::new();
    paths(&value, "", page, &mut out);
    out
}

/// A safetensors file of F32 tensors with metadata.
fn write_f32s(path: &Path, tensors: &[(&str, &[f32])], metadata: &[(&str, &str)]) {
    let mut header = serde_json::Map::new();
    let meta: serde_json::Map<String, Value> = metadata
        .iter()
        .map(|(k, v)| (k.to_string(), Value::from(*v)))
        .collect();
    header.insert("__metadata__".into(), Value::Object(meta));
    let mut data = Vec::new();
    for (name, values) in tensors {
        let begin = data.len();
        for v in *values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": [values.len()], "data_offsets": [begin, data.len()]}),
        );
    }
    let mut text = Value::Object(header).to_string().into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&text);
    bytes.extend_from_slice(&data);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn diff_json_has_the_keys_its_page_lists() {
    use tensorfile_ops::diff::{diff, DiffRequest};
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        dir.path().join("a.safetensors"),
        dir.path().join("b.safetensors"),
    );
    write_f32s(
        &a,
        &[
            ("w", &[1.0, 2.0, 3.0, 4.0]),
            ("old", &[5.0, 6.0]),
            ("gone", &[7.0]),
        ],
        &[("k", "1"), ("only_a", "x")],
    );
    write_f32s(
        &b,
        &[
            ("w", &[1.0, 2.0, 3.0, 5.0]),
            ("new", &[5.0, 6.0]),
            ("added", &[9.0, 9.0, 9.0]),
        ],
        &[("k", "2"), ("only_b", "y")],
    );
    let report = diff(&DiffRequest::new(&a, &b), &()).unwrap();
    assert_eq!(report.verdict, "differs");
    assert_eq!(report.a, a.to_string_lossy());
    let page = documented("diff");
    assert_eq!(printed(&report, &page), page);
}

#[test]
fn a_bad_tolerance_is_a_refused_request() {
    use tensorfile_ops::diff::{diff, DiffRequest};
    let file = fixtures().join("valid/minimal_bf16.safetensors");
    let mut request = DiffRequest::new(&file, &file);
    request.atol = Some(-1.0);
    let err = diff(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn stats_json_has_the_keys_its_page_lists() {
    use tensorfile_ops::stats::{stats, StatsRequest};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let mut spiky: Vec<f32> = (0..256).map(|i| (i % 7) as f32 - 3.0).collect();
    spiky[100] = 1000.0;
    let calm: Vec<f32> = (0..256).map(|i| (i % 5) as f32 - 2.0).collect();
    write_f32s(
        &path,
        &[
            ("model.layers.0.mlp.down_proj.weight", &spiky),
            ("model.layers.1.mlp.down_proj.weight", &calm),
            ("model.layers.2.mlp.down_proj.weight", &calm),
        ],
        &[],
    );
    let mut request = StatsRequest::new(&path);
    request.plot = Some("out.svg".into());
    request.outlier_ratio = 5.0;
    let report = stats(&request, &()).unwrap();
    assert!(!report.groups.is_empty(), "no groups");
    assert!(!report.outliers.is_empty(), "no outliers");
    assert_eq!(report.plot.as_deref(), Some("out.svg"));
    let page = documented("stats");
    assert_eq!(printed(&report, &page), page);
}

#[test]
fn stats_refuses_bins_out_of_range() {
    use tensorfile_ops::stats::{stats, StatsRequest};
    let mut request = StatsRequest::new(fixtures().join("valid/minimal_bf16.safetensors"));
    request.bins = 0;
    let err = stats(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn check_json_has_the_keys_its_page_lists() {
    use tensorfile_ops::check::{check, CheckRequest};
    // A directory with a problem: a config.json and no weights.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), br#"{"tl_arch": "mlp"}"#).unwrap();
    let mut request = CheckRequest::new(dir.path());
    request.contract = Some("v0".into());
    let report = check(&request, &()).unwrap();
    assert!(!report.ok && report.errors > 0);
    let page = documented("check");
    assert_eq!(printed(&report, &page), page);
}

#[test]
fn check_refuses_an_unknown_contract() {
    use tensorfile_ops::check::{check, CheckRequest};
    let mut request = CheckRequest::new(fixtures().join("models/llama_tiny"));
    request.contract = Some("v9".into());
    let err = check(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn fetch_json_has_the_keys_its_page_lists() {
    use tensorfile_ops::fetch::{fetch, FetchRequest};
    use tensorfile_testkit::serve::Server;
    let dir = tempfile::tempdir().unwrap();
    let shard = dir.path().join("shard.safetensors");
    write_f32s(&shard, &[("w", &[1.0, 2.0])], &[]);
    let server = Server::start().unwrap();
    server.put(
        "/m/model-00001-of-00001.safetensors",
        std::fs::read(&shard).unwrap(),
    );
    let index = serde_json::json!({
        "metadata": {"total_size": 8},
        "weight_map": {"w": "model-00001-of-00001.safetensors"},
    });
    server.put(
        "/m/model.safetensors.index.json",
        index.to_string().into_bytes(),
    );
    let source = format!("{}/m/model.safetensors.index.json", server.url());
    let dest = dir.path().join("copy");
    let report = fetch(&FetchRequest::new(&source, Some(dest.clone())), &()).unwrap();
    assert!(report.set.is_some(), "{report:?}");
    let page = documented("fetch");
    assert_eq!(printed(&report, &page), page);
}

#[test]
fn fetch_refuses_a_path_that_is_not_a_url() {
    use tensorfile_ops::fetch::{fetch, FetchRequest};
    let err = fetch(
        &FetchRequest::new("model.safetensors", Some("out".into())),
        &(),
    )
    .unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn hash_json_has_the_keys_its_page_lists() {
    use tensorfile_ops::hash::{hash, HashRequest};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    write_f32s(&model.join("model.safetensors"), &[("w", &[1.0, 2.0])], &[]);
    // An invalid `*.safetensors` file: `invalid` says why.
    std::fs::write(model.join("bad.safetensors"), b"not a safetensors file").unwrap();
    let mut request = HashRequest::new([&model]);
    request.per_tensor = true;
    request.write_manifest = Some(dir.path().join("m.json"));
    let report = hash(&request, &()).unwrap();
    assert!(report.any_invalid());
    assert!(dir.path().join("m.json").is_file());
    let page = documented("hash");
    assert_eq!(printed(&report, &page), page);
}

#[test]
fn a_manifest_of_two_inputs_is_a_refused_request() {
    use tensorfile_ops::hash::{hash, HashRequest};
    let file = fixtures().join("valid/minimal_bf16.safetensors");
    let mut request = HashRequest::new([&file, &file]);
    request.write_manifest = Some("m.json".into());
    let err = hash(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn verify_json_has_the_keys_its_page_lists() {
    use tensorfile_ops::hash::{hash, HashRequest};
    use tensorfile_ops::verify::{verify, VerifyRequest};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    write_f32s(&model.join("a.safetensors"), &[("w", &[1.0, 2.0])], &[]);
    write_f32s(&model.join("b.safetensors"), &[("w", &[3.0])], &[]);
    let manifest = dir.path().join("m.json");
    let mut request = HashRequest::new([&model]);
    request.write_manifest = Some(manifest.clone());
    hash(&request, &()).unwrap();
    // One file changed, one gone, one new.
    write_f32s(&model.join("a.safetensors"), &[("w", &[1.0, 5.0])], &[]);
    std::fs::remove_file(model.join("b.safetensors")).unwrap();
    std::fs::write(model.join("c.txt"), b"new").unwrap();
    let mut request = VerifyRequest::new(&model);
    request.manifest = Some(manifest);
    let report = verify(&request, &()).unwrap();
    assert_eq!(report.verdict, "mismatch");
    assert!(!report.passed());
    let page = documented("verify");
    assert_eq!(printed(&report, &page), page);
}

#[test]
fn verify_refuses_a_sha256_that_is_not_one() {
    use tensorfile_ops::verify::{verify, VerifyRequest};
    let mut request = VerifyRequest::new(fixtures().join("valid/minimal_bf16.safetensors"));
    request.sha256 = Some("abc".into());
    let err = verify(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn quantize_and_dequantize_reports_match_their_pages() {
    let dir = tempfile::tempdir().unwrap();
    let floats = dir.path().join("floats.safetensors");
    // An MLX model directory: its config.json gives the parameters.
    let request = DequantizeRequest {
        files: InOut::new(fixtures().join("mlx/mlx_mixed_model"), &floats),
        ..DequantizeRequest::default()
    };
    let report = dequantize(&request, &()).unwrap();
    assert!(!report.dequantized.is_empty());
    let page = documented("dequantize");
    assert_eq!(printed(&report, &page), page);

    let request = QuantizeRequest {
        files: InOut::new(&floats, dir.path().join("q.safetensors")),
        scheme: "mlx-affine".into(),
        bits: Some(4),
        group_size: Some(64),
        ..QuantizeRequest::default()
    };
    let report = quantize(&request, &()).unwrap();
    assert!(!report.quantized.is_empty());
    let page = documented("quantize");
    assert_eq!(printed(&report, &page), page);
}

/// Converts `input` to `output` with `dtype`, and checks the report's keys
/// against the page's table for `shape`.
fn converted(input: &Path, output: &Path, dtype: Option<Dtype>, shape: &str) -> ConvertReport {
    let request = ConvertRequest {
        files: InOut::new(input, output),
        dtype,
        ..ConvertRequest::default()
    };
    let report = convert(&request, &()).unwrap();
    let page = documented_shape("convert", Some(shape));
    assert_eq!(printed(&report, &page), page, "{shape}");
    report
}

#[test]
fn every_shape_of_the_convert_report_matches_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let d = |name: &str| dir.path().join(name);
    let floats = fixtures().join("valid/minimal_bf16.safetensors");
    let r = converted(
        &floats,
        &d("f32.safetensors"),
        Some(Dtype::F32),
        "safetensors",
    );
    assert!(matches!(r, ConvertReport::Safetensors(_)));
    let ckpt = fixtures().join("pytorch/zip_simple.pt");
    let r = converted(&ckpt, &d("pt.safetensors"), None, "pytorch");
    assert!(matches!(r, ConvertReport::Pytorch(_)));
    let gguf = fixtures().join("gguf/model/llama_tiny-Q8_0.gguf");
    let r = converted(&gguf, &d("raw.safetensors"), None, "gguf-raw");
    assert!(matches!(r, ConvertReport::GgufRaw(_)));
    let r = converted(&gguf, &d("hf"), None, "gguf-to-hf");
    assert!(matches!(r, ConvertReport::GgufToHf(_)));
    let r = converted(&d("hf"), &d("back.gguf"), None, "hf-to-gguf");
    assert!(matches!(r, ConvertReport::HfToGguf(_)));
    let r = converted(&floats, &d("x.npz"), None, "to-numpy");
    assert!(matches!(r, ConvertReport::ToNumpy(_)));
    // BF16 is an opaque array in numpy: the dtype says what it holds.
    let r = converted(
        &d("x.npz"),
        &d("from.safetensors"),
        Some(Dtype::BF16),
        "from-numpy",
    );
    assert!(matches!(r, ConvertReport::FromNumpy(_)));
}

#[test]
fn refused_requests_are_request_errors() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("valid/minimal_bf16.safetensors");
    let request = QuantizeRequest {
        files: InOut::new(&input, dir.path().join("q.safetensors")),
        scheme: "gptq".into(),
        ..QuantizeRequest::default()
    };
    let e = quantize(&request, &()).unwrap_err();
    assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");
    let request = DequantizeRequest {
        files: InOut::new(&input, dir.path().join("d.safetensors")),
        dtype: Some(Dtype::U8),
        ..DequantizeRequest::default()
    };
    let e = dequantize(&request, &()).unwrap_err();
    assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");
    let request = ConvertRequest {
        files: InOut::new(&input, dir.path().join("i.safetensors")),
        dtype: Some(Dtype::I8),
        ..ConvertRequest::default()
    };
    let e = convert(&request, &()).unwrap_err();
    assert!(e.to_string().contains("--allow-int"), "{e}");
    assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");
    assert!(!dir.path().join("i.safetensors").exists());
}

#[test]
fn validate_reports_match_their_page() {
    let page = documented("validate");
    let mut seen = BTreeSet::new();
    for input in [
        "valid/minimal_bf16.safetensors",
        "models/llama_tiny",
        "gguf/model/llama_tiny-Q8_0.gguf",
    ] {
        let report = validate(&ValidateRequest::new(fixtures().join(input)), &()).unwrap();
        assert!(report.valid, "{input}: {report:?}");
        let keys = printed(&report, &page);
        assert!(keys.is_subset(&page), "{input}: {keys:?}");
        seen.extend(keys);
    }
    assert_eq!(seen, page);
}

#[test]
fn rewrite_report_matches_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let request = RewriteRequest {
        files: InOut::new(fixtures().join("models/llama_tiny"), dir.path().join("out")),
        align: 64,
        ..RewriteRequest::default()
    };
    let report = rewrite(&request, &()).unwrap();
    assert_eq!(report.align, 64);
    let page = documented("rewrite");
    assert_eq!(printed(&report, &page), page);
    let bad = RewriteRequest {
        align: 16,
        ..request
    };
    let e = rewrite(&bad, &()).unwrap_err();
    assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");
}

#[test]
fn edit_reports_match_their_page() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.safetensors");
    std::fs::copy(fixtures().join("valid/worked_example.safetensors"), &file).unwrap();
    let page = documented("edit");
    let mut request = EditRequest {
        file,
        ..EditRequest::default()
    };
    request.set.insert("k".into(), "v".into());
    // 8 + 96 bytes: the padded header has no room for k=v, so a rewrite
    // (reason a string), then in place (reason null).
    for in_place in [false, true] {
        request
            .set
            .insert("k".into(), if in_place { "w" } else { "v" }.into());
        let written = std::sync::atomic::AtomicU64::new(0);
        let count = |n: u64| {
            written.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        };
        let report = edit(&request, &count).unwrap();
        assert_eq!(report.in_place, in_place, "{report:?}");
        // A rewrite tells its progress every data byte; in place, none.
        let data = if in_place {
            0
        } else {
            report.bytes - report.header_len - 8
        };
        assert_eq!(written.into_inner(), data, "{report:?}");
        assert_eq!(printed(&report, &page), page);
    }
    let bad = EditRequest {
        unset: vec!["k".into()],
        ..request
    };
    let e = edit(&bad, &()).unwrap_err();
    assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");
}

#[test]
fn many_writer_steps_report_the_keys_their_page_adds() {
    // The page's first table (a split's keys) and the many-writer table
    // after it: a step's report has both.
    let path = fixtures().join("../../docs/commands/shard.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let section = page.split("## One set, many writers").nth(1).unwrap();
    let mut keys = documented("shard");
    keys.extend(
        section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .filter_map(|line| {
                let key = line.split('|').nth(1)?.trim();
                (key != "key" && !key.starts_with("---")).then(|| key.trim_matches('`').to_string())
            }),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut request = ShardRequest {
        input: fixtures().join("models/llama_tiny"),
        out_dir: dir.path().join("set"),
        max_shard_size: 1000,
        sync: false,
        ..ShardRequest::default()
    };
    for step in [
        tensorfile::set::SetStep::Plan { writers: 1 },
        tensorfile::set::SetStep::WritePart { writer: 0 },
        tensorfile::set::SetStep::Commit,
    ] {
        request.step = Some(step);
        let report = shard(&request, &()).unwrap();
        // The commit reads no input: none is reported.
        let commit = matches!(request.step, Some(tensorfile::set::SetStep::Commit));
        assert_eq!(report.input.is_none(), commit);
        // `step` is an object for the first two steps: its inner keys are
        // the table's `step` row.
        let printed: BTreeSet<String> = printed(&report, &keys)
            .into_iter()
            .map(|k| k.split('.').next().unwrap().to_string())
            .collect();
        assert_eq!(printed, keys, "{:?}", request.step);
    }
    assert!(dir.path().join("set/model.safetensors.index.json").exists());
}

#[test]
fn a_step_runs_with_the_callers_plan_and_tensors() {
    use tensorfile::set::{SetStep, StagedPlan};
    use tensorfile::{TensorRef, TensorSpec, WriteOptions};
    let dir = tempfile::tempdir().unwrap();
    let shape = [4u64];
    let data: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 16]).collect();
    let names = ["a", "b", "c"];
    let refs: Vec<TensorRef<'_>> = names
        .iter()
        .zip(&data)
        .map(|(name, data)| TensorRef {
            name,
            dtype: Dtype::F32,
            shape: &shape,
            data,
        })
        .collect();
    // Writer 0 holds a and b, writer 1 c, writer 2 nothing.
    let spec = |n: &str| TensorSpec::new(n, Dtype::F32, shape.to_vec());
    let groups = vec![vec![spec("a"), spec("b")], vec![spec("c")], vec![]];
    let plan =
        StagedPlan::per_writer("model", &groups, 16, None, &WriteOptions::default()).unwrap();
    let step = |step| ShardRequest {
        out_dir: dir.path().join("set"),
        sync: false,
        step: Some(step),
        ..ShardRequest::default()
    };
    let none: &[TensorRef<'_>] = &[];
    // A plan for a step that takes none, none for the plan, no step.
    for (request, plan) in [
        (step(SetStep::Commit), Some(plan.clone())),
        (step(SetStep::Plan { writers: 3 }), None),
        (ShardRequest::default(), None),
    ] {
        let e = request.run_step(plan, none).unwrap_err();
        assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");
    }
    let planned = step(SetStep::Plan { writers: 3 })
        .run_step(Some(plan), none)
        .unwrap();
    assert_eq!((planned.files.len(), planned.tensors), (3, 3));
    for writer in 0..3 {
        let written = step(SetStep::WritePart { writer })
            .run_step(None, &refs)
            .unwrap();
        // The writer with no tensors has no files, and writes none.
        assert_eq!(written.files.len(), [2, 1, 0][writer]);
    }
    let committed = step(SetStep::Commit).run_step(None, none).unwrap();
    assert_eq!(committed.files, planned.files);
    let index: Value =
        serde_json::from_slice(&std::fs::read(committed.index.unwrap()).unwrap()).unwrap();
    assert_eq!(index["weight_map"].as_object().unwrap().len(), 3);
}

#[test]
fn shard_and_merge_reports_match_their_pages() {
    let dir = tempfile::tempdir().unwrap();
    let request = ShardRequest {
        input: fixtures().join("models/llama_tiny"),
        out_dir: dir.path().join("set"),
        max_shard_size: 1000,
        ..ShardRequest::default()
    };
    let report = shard(&request, &()).unwrap();
    assert!(report.files.len() > 1 && report.index.is_some());
    let page = documented("shard");
    assert_eq!(printed(&report, &page), page);
    let bad = ShardRequest {
        prefix: "a/b".into(),
        ..request
    };
    let e = shard(&bad, &()).unwrap_err();
    assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");

    let request = MergeRequest {
        input: dir.path().join("set"),
        output: dir.path().join("one.safetensors"),
        ..MergeRequest::default()
    };
    let merged = merge(&request, &()).unwrap();
    assert_eq!(merged.shards, report.files.len());
    let page = documented_shape("merge", Some("A set"));
    assert_eq!(printed(&merged, &page), page);

    // A torch DCP checkpoint, consolidated into a set.
    let request = MergeRequest {
        input: fixtures().join("dcp/two_ranks"),
        output: dir.path().join("dcp"),
        ..MergeRequest::default()
    };
    let merged = merge(&request, &()).unwrap();
    assert_eq!((merged.dcp_ranks, merged.files.len()), (Some(2), 3));
    let page = documented_shape("merge", Some("A DCP checkpoint"));
    assert_eq!(printed(&merged, &page), page);
}
