//! The `inspect --json` schema: the README's table of keys, the structs of
//! `tensorfile::describe`, and what they print must agree, so that none of
//! the three can change without the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;
use tensorfile::describe::{self, CheckpointDescription, FileDescription, SetDescription};
use tensorfile::pytorch::Checkpoint;
use tensorfile::{ReadOptions, SafeTensors};
use tensorfile_core::ShardedTensors;
use tensorfile_testkit::fixtures;

/// Every tensor's digest: a fixed text, so that `sha256` is present.
fn digest(_: &str) -> Option<String> {
    Some("00".repeat(32))
}

/// The README's `inspect --json` table: object name to its keys.
fn readme_keys() -> BTreeMap<String, BTreeSet<String>> {
    let readme = std::fs::read_to_string(fixtures().join("../../README.md")).unwrap();
    let section = readme
        .split("### `inspect --json`")
        .nth(1)
        .expect("README has an `inspect --json` section");
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

/// A description's JSON text, checked to be keys in ascending byte order
/// (what it printed when it was built as a `serde_json::Value`), parsed.
fn printed(text: String) -> Value {
    let value: Value = serde_json::from_str(&text).unwrap();
    // serde_json's own maps sort their keys: printing the parsed value
    // gives the same text only if the structs' fields are in that order.
    assert_eq!(value.to_string(), text, "fields out of key order");
    value
}

fn described_file(name: &str) -> FileDescription {
    let path = fixtures().join(name);
    let file = SafeTensors::open(&path).unwrap();
    describe::file(&path, file.header(), &digest)
}

fn described_set(name: &str) -> SetDescription {
    let path = fixtures().join(name);
    let set = ShardedTensors::open_pread(&path, &ReadOptions::default()).unwrap();
    describe::set(&path, &set, &digest)
}

fn described_checkpoint(name: &str) -> CheckpointDescription {
    let path = fixtures().join(name);
    let ckpt = Checkpoint::open(&path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    describe::checkpoint(&path, size, &ckpt, &digest)
}

#[test]
fn readme_lists_every_key_of_every_object() {
    let file = described_file("mlx/mlx_mixed_model/model.safetensors");
    assert!(file.quantized.as_ref().is_some_and(|q| !q.is_empty()));
    let file = printed(file.to_json());
    // A model directory (model, no index) and an index (with metadata).
    let dir = printed(described_set("models/llama_tiny").to_json());
    let index = described_set("real/mlx_lm/mixtral_q4/model.safetensors.index.json");
    assert!(index.index_metadata.is_some());
    let index = printed(index.to_json());
    let ckpt = printed(described_checkpoint("pytorch/legacy_simple.pt").to_json());

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

    let readme = readme_keys();
    let found: BTreeMap<String, BTreeSet<String>> =
        found.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(
        readme, found,
        "README's inspect --json table vs the structs"
    );
}

#[test]
fn optional_keys_are_left_out_without_hash_or_shard() {
    let path = fixtures().join("valid/minimal_bf16.safetensors");
    let file = SafeTensors::open(&path).unwrap();
    let described = describe::file(&path, file.header(), &|_| None);
    let value = printed(described.to_json());
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
    let path = Path::new("valid/minimal_bf16.safetensors");
    let file = SafeTensors::open(fixtures().join(path)).unwrap();
    let described = describe::file(path, file.header(), &|_| None);
    assert_eq!(described.file, "valid/minimal_bf16.safetensors");
}
