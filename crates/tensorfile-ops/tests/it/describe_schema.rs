//! The `inspect --json` schema: the table of keys in
//! docs/commands/inspect.md, the report structs of
//! `tensorfile_ops::inspect`, and what they print must agree, so that none
//! of the three can change without the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use tensorfile_ops::inspect::{
    inspect, CheckpointDescription, FileDescription, GgufDescription, InspectReport,
    InspectRequest, SetDescription,
};
use tensorfile_testkit::fixtures;

/// The docs page's `inspect --json` table: object name to its keys.
fn documented_keys() -> BTreeMap<String, BTreeSet<String>> {
    let page = std::fs::read_to_string(fixtures().join("../../docs/commands/inspect.md")).unwrap();
    let section = page
        .split("## `--json`")
        .nth(1)
        .expect("the page has a `--json` section");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (object, key) = (cells[1], cells[2]);
        if object == "object" || object.starts_with("---") {
            continue;
        }
        let key = key.trim_matches('`').to_string();
        out.entry(object.to_string()).or_default().insert(key);
    }
    out
}

/// The keys of a JSON object.
fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

/// A report's JSON text, checked to be keys in ascending byte order
/// (what it printed when it was built as a `serde_json::Value`), parsed.
fn printed(text: String) -> Value {
    let value: Value = serde_json::from_str(&text).unwrap();
    // serde_json's own maps sort their keys: printing the parsed value
    // gives the same text only if the structs' fields are in that order.
    assert_eq!(value.to_string(), text, "fields out of key order");
    value
}

/// The op's report on a fixture, with hashes (so that `sha256` is there).
fn inspected(name: &str) -> InspectReport {
    inspect(
        &InspectRequest::new(fixtures().join(name)).with_hash(true),
        &(),
    )
    .unwrap()
}

fn described_file(name: &str) -> FileDescription {
    match inspected(name) {
        InspectReport::File(d) => d,
        other => panic!("not a file: {other:?}"),
    }
}

fn described_set(name: &str) -> SetDescription {
    match inspected(name) {
        InspectReport::Set { description, .. } => description,
        other => panic!("not a set: {other:?}"),
    }
}

/// A GGUF description's text is what `to_json` prints, with hashes of
/// the stored bytes.
#[test]
fn a_gguf_file_is_described() {
    let d = described_gguf("gguf/files/tensors_v3.gguf");
    assert_eq!(d.format, "gguf");
    assert_eq!(d.version, 3);
    assert!(!d.tensors.is_empty());
    let bytes = std::fs::read(fixtures().join("gguf/files/tensors_v3.gguf")).unwrap();
    for t in &d.tensors {
        use sha2::Digest;
        let stored = &bytes[t.start as usize..(t.start + t.bytes) as usize];
        let expected = hex::encode(sha2::Sha256::digest(stored));
        assert_eq!(t.sha256.as_deref(), Some(expected.as_str()), "{}", t.name);
    }
    let per_type: u64 = d.types.values().map(|t| t.tensors).sum();
    assert_eq!(per_type, d.tensors.len() as u64);
    assert_eq!(d.data_bytes, d.tensors.iter().map(|t| t.bytes).sum::<u64>());
}

fn described_gguf(name: &str) -> GgufDescription {
    match inspected(name) {
        InspectReport::Gguf { description, .. } => description,
        other => panic!("not GGUF: {other:?}"),
    }
}

fn described_checkpoint(name: &str) -> CheckpointDescription {
    match inspected(name) {
        InspectReport::Checkpoint { description, .. } => description,
        other => panic!("not a checkpoint: {other:?}"),
    }
}

#[test]
fn the_docs_list_every_key_of_every_object() {
    let file = described_file("mlx/mlx_mixed_model/model.safetensors");
    assert!(file.quantized.as_ref().is_some_and(|q| !q.is_empty()));
    let file = printed(file.to_json());
    // A model directory (model, no index) and an index (with metadata).
    let dir = printed(described_set("models/llama_tiny").to_json());
    let index = described_set("real/mlx_lm/mixtral_q4/model.safetensors.index.json");
    assert!(index.index_metadata.is_some());
    let index = printed(index.to_json());
    let ckpt = printed(described_checkpoint("pytorch/legacy_simple.pt").to_json());
    // Every value type, arrays among them.
    let gguf = printed(inspected("gguf/files/all_kv_types_align64_v3.gguf").to_json());
    let tensors = printed(inspected("gguf/files/tensors_v3.gguf").to_json());

    let mut found: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    found.insert("file", keys(&file));
    found.insert("tensor", keys(&file["tensors"][0]));
    found.insert("quantized weight", keys(&file["quantized"][0]));
    found.insert("set", keys(&dir));
    assert_eq!(keys(&dir), keys(&index));
    // A set's tensors have `shard` as well: the table lists both.
    let mut tensor = keys(&file["tensors"][0]);
    tensor.extend(keys(&dir["tensors"][0]));
    found.insert("tensor", tensor);
    found.insert("model", keys(&dir["model"]));
    found.insert("shard", keys(&dir["shards"][0]));
    found.insert("totals", keys(&dir["totals"]));
    found.insert("checkpoint", keys(&ckpt));
    found.insert("checkpoint tensor", keys(&ckpt["tensors"][0]));
    found.insert("gguf", keys(&gguf));
    // A scalar's keys and an array's (`element_type`, `len`) together.
    let values = gguf["metadata"].as_array().unwrap();
    found.insert("gguf value", values.iter().flat_map(keys).collect());
    assert!(values.iter().any(|v| v.get("len").is_some()));
    found.insert("gguf tensor", keys(&tensors["tensors"][0]));
    found.insert(
        "gguf type",
        keys(
            tensors["types"]
                .as_object()
                .unwrap()
                .values()
                .next()
                .unwrap(),
        ),
    );

    let documented = documented_keys();
    let found: BTreeMap<String, BTreeSet<String>> =
        found.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(
        documented, found,
        "docs/commands/inspect.md's table vs the structs"
    );
}

#[test]
fn a_report_prints_as_its_description() {
    let report = inspected("models/llama_tiny");
    let InspectReport::Set { description, .. } = &report else {
        panic!("not a set: {report:?}");
    };
    assert_eq!(report.to_json(), description.to_json());
}

#[test]
fn optional_keys_are_left_out_without_hash_or_shard() {
    let path = fixtures().join("valid/minimal_bf16.safetensors");
    let report = inspect(&InspectRequest::new(path), &()).unwrap();
    let value = printed(report.to_json());
    let tensor = keys(&value["tensors"][0]);
    assert!(!tensor.contains("sha256") && !tensor.contains("shard"));
}

#[test]
fn descriptions_read_back_as_they_were() {
    let file = described_file("quant/int4_g32_sym.safetensors");
    let back: FileDescription = serde_json::from_str(&file.to_json()).unwrap();
    assert_eq!(back, file);
    let set = described_set("real/mlx_lm/mixtral_q4/model.safetensors.index.json");
    let back: SetDescription = serde_json::from_str(&set.to_json()).unwrap();
    assert_eq!(back, set);
    let ckpt = described_checkpoint("pytorch/legacy_simple.pt");
    let back: CheckpointDescription = serde_json::from_str(&ckpt.to_json()).unwrap();
    assert_eq!(back, ckpt);
}

#[test]
fn a_description_names_the_path_as_given() {
    // A relative path, from wherever the test runs (the working directory
    // is the process's: it is read, never changed), printed as given, no
    // `./` added.
    let target = std::fs::canonicalize(fixtures().join("valid/minimal_bf16.safetensors")).unwrap();
    let relative = relative_to(&std::env::current_dir().unwrap(), &target);
    assert!(relative.is_relative());
    let report = inspect(&InspectRequest::new(&relative), &());
    let InspectReport::File(described) = report.unwrap() else {
        panic!("not a file");
    };
    assert_eq!(described.file, relative.to_str().unwrap());
}

/// `target` as a path relative to `from` (both absolute, no symbolic links
/// in `from`: `current_dir` gives the physical path).
fn relative_to(from: &Path, target: &Path) -> std::path::PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = target.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out
}
