//! The `--json` schemas of the operations: each report, serialized from a
//! fixture, has exactly the keys its command's page in docs/commands/
//! lists (`inspect`'s is describe_schema.rs).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use tensorfile_testkit::fixtures;

/// The key column of the `--json` table of `docs/commands/<command>.md`.
fn documented(command: &str) -> BTreeSet<String> {
    let page = fixtures().join(format!("../../docs/commands/{command}.md"));
    let page = std::fs::read_to_string(page).unwrap();
    let section = page
        .split("## `--json`")
        .nth(1)
        .expect("the page has a `--json` section");
    section
        .lines()
        .skip_while(|l| !l.starts_with("| key |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_string()
        })
        .collect()
}

/// Every key path of `value`: `a`, `a.b` for an object's keys, `a[].b`
/// for the keys of a list's objects.
fn paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(path.clone());
                paths(v, &path, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                paths(item, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// The key paths of a report as it prints, checked to be in ascending
/// byte order at every level (as the objects the command printed were).
fn printed_paths(report: &impl serde::Serialize) -> BTreeSet<String> {
    let text = serde_json::to_string(report).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value.to_string(), text, "fields out of key order");
    let mut out = BTreeSet::new();
    paths(&value, "", &mut out);
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
    use tensorfile::ops::diff::{diff, DiffRequest};
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
    assert_eq!(documented("diff"), printed_paths(&report));
}

#[test]
fn a_bad_tolerance_is_a_refused_request() {
    use tensorfile::ops::diff::{diff, DiffRequest};
    let file = fixtures().join("valid/minimal_bf16.safetensors");
    let mut request = DiffRequest::new(&file, &file);
    request.atol = Some(-1.0);
    let err = diff(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn stats_json_has_the_keys_its_page_lists() {
    use tensorfile::ops::stats::{stats, StatsRequest};
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
    assert_eq!(documented("stats"), printed_paths(&report));
}

#[test]
fn stats_refuses_bins_out_of_range() {
    use tensorfile::ops::stats::{stats, StatsRequest};
    let mut request = StatsRequest::new(fixtures().join("valid/minimal_bf16.safetensors"));
    request.bins = 0;
    let err = stats(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn check_json_has_the_keys_its_page_lists() {
    use tensorfile::ops::check::{check, CheckRequest};
    // A directory with a problem: a config.json and no weights.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), br#"{"tl_arch": "mlp"}"#).unwrap();
    let mut request = CheckRequest::new(dir.path());
    request.contract = Some("v0".into());
    let report = check(&request, &()).unwrap();
    assert!(!report.ok && report.errors > 0);
    assert_eq!(documented("check"), printed_paths(&report));
}

#[test]
fn check_refuses_an_unknown_contract() {
    use tensorfile::ops::check::{check, CheckRequest};
    let mut request = CheckRequest::new(fixtures().join("models/llama_tiny"));
    request.contract = Some("v9".into());
    let err = check(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn fetch_json_has_the_keys_its_page_lists() {
    use tensorfile::ops::fetch::{fetch, FetchRequest};
    use tensorfile_remote::serve::Server;
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
    assert_eq!(documented("fetch"), printed_paths(&report));
}

#[test]
fn fetch_refuses_a_path_that_is_not_a_url() {
    use tensorfile::ops::fetch::{fetch, FetchRequest};
    let err = fetch(
        &FetchRequest::new("model.safetensors", Some("out".into())),
        &(),
    )
    .unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn hash_json_has_the_keys_its_page_lists() {
    use tensorfile::ops::hash::{hash, HashRequest};
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
    assert_eq!(documented("hash"), printed_paths(&report));
}

#[test]
fn a_manifest_of_two_inputs_is_a_refused_request() {
    use tensorfile::ops::hash::{hash, HashRequest};
    let file = fixtures().join("valid/minimal_bf16.safetensors");
    let mut request = HashRequest::new([&file, &file]);
    request.write_manifest = Some("m.json".into());
    let err = hash(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}

#[test]
fn verify_json_has_the_keys_its_page_lists() {
    use tensorfile::ops::hash::{hash, HashRequest};
    use tensorfile::ops::verify::{verify, VerifyRequest};
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
    assert_eq!(documented("verify"), printed_paths(&report));
}

#[test]
fn verify_refuses_a_sha256_that_is_not_one() {
    use tensorfile::ops::verify::{verify, VerifyRequest};
    let mut request = VerifyRequest::new(fixtures().join("valid/minimal_bf16.safetensors"));
    request.sha256 = Some("abc".into());
    let err = verify(&request, &()).unwrap_err();
    assert!(matches!(err, tensorfile::Error::Request { .. }), "{err}");
}
