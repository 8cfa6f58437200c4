//! Sharded sets: opening, lookup, and every broken index rejected by name.

use crate::common;

use std::fs;
use std::path::Path;

use common::*;
use serde_json::{json, Value};
use tensorfile::set::{ShardError, ShardIndex};
use tensorfile::{Dtype, Error};
use tensorfile_core::ShardedTensors;

const A: &str = "model-00001-of-00002.safetensors";
const B: &str = "model-00002-of-00002.safetensors";

/// Two shards: a = {x, y}, b = {z}, and an exact index.
fn two_shards(dir: &Path) -> Value {
    write_st(
        &dir.join(A),
        &[
            T::new("x", Dtype::F32, &[2, 3]),
            T::new("y", Dtype::I8, &[5]),
        ],
        &[("format", "tinyllm")],
    );
    write_st(
        &dir.join(B),
        &[T::new("z", Dtype::F16, &[4])],
        &[("format", "tinyllm")],
    );
    json!({"metadata": {"total_size": 24 + 5 + 8}, "weight_map": {"x": A, "y": A, "z": B}})
}

fn write_index(dir: &Path, index: &Value) -> std::path::PathBuf {
    let path = dir.join("model.safetensors.index.json");
    fs::write(&path, serde_json::to_vec(index).unwrap()).unwrap();
    path
}

fn shard_error(err: impl Into<Error>) -> ShardError {
    match err.into() {
        Error::Core(tensorfile_core::Error::Shard(e)) => *e,
        other => panic!("not a shard error: {other}"),
    }
}

#[test]
fn opens_from_index_dir_or_file() {
    let tmp = tempfile::tempdir().unwrap();
    let index = write_index(tmp.path(), &two_shards(tmp.path()));
    for set in [
        ShardedTensors::open(&index).unwrap(),
        ShardedTensors::open(tmp.path()).unwrap(),
    ] {
        assert!(set.is_indexed());
        assert_eq!(set.len(), 3);
        assert_eq!(set.data_len(), 37);
        assert_eq!(set.parameters(), 6 + 5 + 4);
        assert!(set.warnings().is_empty(), "{:?}", set.warnings());
        let names: Vec<&str> = set.shards().iter().map(|s| s.name()).collect();
        assert_eq!(names, [A, B]);
        // Lazy: nothing mapped until a tensor is asked for, then only its shard.
        assert!(set.shards().iter().all(|s| !s.is_mapped()));
        let z = set.tensor("z").unwrap();
        assert_eq!((z.dtype(), z.shape()), (Dtype::F16, &[4u64][..]));
        assert_eq!(z.data(), &T::new("z", Dtype::F16, &[4]).data[..]);
        assert!(!set.shards()[0].is_mapped() && set.shards()[1].is_mapped());
        assert_eq!(set.shard_of("x").unwrap().name(), A);
        assert_eq!(set.info("y").unwrap().shape, &[5]);
        assert!(matches!(
            set.tensor("nope").map_err(Error::from).map_err(|e| e
                .core()
                .map(|c| matches!(c, tensorfile_core::Error::NotFound(_)))),
            Err(Some(true))
        ));
        let order: Vec<&str> = set.infos().map(|(_, t)| t.name).collect();
        assert_eq!(order, ["x", "y", "z"]);
        assert_eq!(set.metadata().unwrap()["format"], "tinyllm");
        assert_eq!(
            set.index_metadata().unwrap().get_u64("total_size"),
            Some(37)
        );
    }
    // A single file is a set of one shard, without an index.
    let set = ShardedTensors::open(tmp.path().join(A)).unwrap();
    assert!(!set.is_indexed());
    assert_eq!(set.len(), 2);
    assert_eq!(set.tensor("y").unwrap().shape(), &[5]);
    assert!(set.tensor("z").is_err());
}

#[test]
fn directory_resolution() {
    let tmp = tempfile::tempdir().unwrap();
    let err = shard_error(ShardedTensors::open(tmp.path()).unwrap_err());
    assert!(matches!(err, ShardError::NoWeights { .. }), "{err}");
    write_index(tmp.path(), &two_shards(tmp.path()));
    fs::copy(tmp.path().join(A), tmp.path().join("model.safetensors")).unwrap();
    let err = shard_error(ShardedTensors::open(tmp.path()).unwrap_err());
    assert!(matches!(err, ShardError::Ambiguous { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("model.safetensors and model.safetensors.index.json disagree")
            && text.contains("transformers loads model.safetensors"),
        "{text}"
    );
}

#[test]
fn mlx_lm_directories_with_an_index_of_their_single_file_open() {
    // mlx-lm's save_model writes model.safetensors and an index pointing
    // only to it, in every directory.
    for name in ["llama_bf16", "llama_q4", "mixtral_q4", "mixtral_nvfp4"] {
        let dir = fixtures().join("real/mlx_lm").join(name);
        assert!(dir.join("model.safetensors.index.json").is_file());
        let set = ShardedTensors::open(&dir).unwrap();
        assert_eq!(set.shards().len(), 1, "{name}");
        assert_eq!(set.shards()[0].name(), "model.safetensors");
        assert!(set.is_indexed());
    }
    // The same with an index naming a tensor the file lacks: a conflict.
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("real/mlx_lm/llama_bf16");
    fs::copy(
        src.join("model.safetensors"),
        tmp.path().join("model.safetensors"),
    )
    .unwrap();
    let text = fs::read_to_string(src.join("model.safetensors.index.json")).unwrap();
    let text = text.replacen(
        "\"weight_map\": {",
        "\"weight_map\": {\"ghost.weight\": \"model.safetensors\",",
        1,
    );
    fs::write(tmp.path().join("model.safetensors.index.json"), text).unwrap();
    let err = shard_error(ShardedTensors::open(tmp.path()).unwrap_err());
    assert!(matches!(err, ShardError::Ambiguous { .. }), "{err}");
    assert!(err.to_string().contains("ghost.weight"), "{err}");
}

/// Opens the two-shard set after `edit` changed it; returns the error.
fn broken(edit: impl FnOnce(&Path, &mut Value)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let mut index = two_shards(tmp.path());
    edit(tmp.path(), &mut index);
    let path = write_index(tmp.path(), &index);
    let err = ShardedTensors::open(&path).unwrap_err();
    assert_eq!(err.rule(), None);
    err.to_string()
}

#[test]
fn missing_shard() {
    let msg = broken(|dir, _| fs::remove_file(dir.join(B)).unwrap());
    assert!(
        msg.contains(&format!(
            "shard \"{B}\" (holding tensor \"z\") does not exist"
        )),
        "{msg}"
    );
}

#[test]
fn invalid_shard() {
    let msg = broken(|dir, _| fs::write(dir.join(B), b"\xff\xff\xff\xff\xff\xff\xff\xff").unwrap());
    assert!(msg.contains(&format!("/{B}: rule 1")), "{msg}");
}

#[test]
fn traversal_and_absolute_shard_names() {
    for (name, why) in [
        ("../x.safetensors", "a path with directories"),
        ("/tmp/x.safetensors", "an absolute path"),
        ("sub/x.safetensors", "a path with directories"),
        ("x.bin", "must end in .safetensors"),
    ] {
        let msg = broken(|_, index| index["weight_map"]["z"] = json!(name));
        assert!(
            msg.contains(&format!(
                "tensor \"z\" is mapped to shard {name:?}, which is not a plain file name"
            )) && msg.contains(why),
            "{msg}"
        );
    }
}

#[test]
fn tensor_in_two_shards() {
    let msg = broken(|dir, _| {
        write_st(
            &dir.join(B),
            &[
                T::new("x", Dtype::F32, &[2, 3]),
                T::new("z", Dtype::F16, &[4]),
            ],
            &[],
        )
    });
    assert_eq!(
        msg,
        format!("tensor \"x\" is in two shards: \"{A}\" and \"{B}\"")
    );
}

#[test]
fn tensor_missing_from_its_shard() {
    let msg = broken(|_, index| index["weight_map"]["w"] = json!(B));
    assert_eq!(
        msg,
        format!("tensor \"w\" is mapped to shard \"{B}\", which does not hold it")
    );
    // Mapped to the wrong shard: the message says which one holds it.
    let msg = broken(|_, index| index["weight_map"]["x"] = json!(B));
    assert_eq!(
        msg,
        format!(
            "tensor \"x\" is mapped to shard \"{B}\", which does not hold it (shard \"{A}\" does)"
        )
    );
}

#[test]
fn shard_tensor_not_in_map() {
    let msg = broken(|_, index| {
        index["weight_map"].as_object_mut().unwrap().remove("y");
    });
    assert_eq!(
        msg,
        format!("shard \"{A}\" holds tensor \"y\", which the index's weight_map does not list")
    );
}

#[test]
fn bad_index_text() {
    for (text, needle) in [
        (&b"not json"[..], "not a valid index"),
        (b"{\"metadata\": {}}", "missing field `weight_map`"),
        (b"{\"weight_map\": {\"x\": 3}}", "expected a string"),
        (b"{\"weight_map\": {}}", "lists no tensors"),
        (
            b"{\"weight_map\": {\"x\": \"a.safetensors\", \"x\": \"b.safetensors\"}}",
            "twice",
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("model.safetensors.index.json");
        fs::write(&path, text).unwrap();
        let msg = ShardedTensors::open(&path).unwrap_err().to_string();
        assert!(msg.contains(needle), "{msg}");
    }
}

#[test]
fn wrong_total_size_is_only_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let mut index = two_shards(tmp.path());
    index["metadata"]["total_size"] = json!(1000);
    let set = ShardedTensors::open(write_index(tmp.path(), &index)).unwrap();
    assert_eq!(
        set.warnings(),
        ["the index's total_size is 1000, but the shards hold 37 data bytes"]
    );
    index["metadata"]["total_size"] = json!("big");
    let set = ShardedTensors::open(write_index(tmp.path(), &index)).unwrap();
    assert_eq!(
        set.warnings(),
        ["the index's total_size is \"big\", not a byte count"]
    );
    // Absent: nothing to compare.
    index.as_object_mut().unwrap().remove("metadata");
    let set = ShardedTensors::open(write_index(tmp.path(), &index)).unwrap();
    assert!(set.warnings().is_empty());
}

#[test]
fn metadata_union_refuses_conflicts() {
    let tmp = tempfile::tempdir().unwrap();
    let index = two_shards(tmp.path());
    write_st(
        &tmp.path().join(B),
        &[T::new("z", Dtype::F16, &[4])],
        &[("format", "other"), ("k", "v")],
    );
    let set = ShardedTensors::open(write_index(tmp.path(), &index)).unwrap();
    let err = set.metadata().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("metadata key \"format\" is \"tinyllm\" in shard \"{A}\" but \"other\" in shard \"{B}\"")
    );
}

#[test]
fn index_round_trips_through_python_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let index = two_shards(tmp.path());
    let parsed = ShardIndex::parse(&serde_json::to_vec(&index).unwrap()).unwrap();
    assert_eq!(parsed.total_size().unwrap(), Some(37));
    let text = parsed.to_json();
    assert_eq!(ShardIndex::parse(text.as_bytes()).unwrap(), parsed);
    assert!(text.starts_with(
        "{\n  \"metadata\": {\n    \"total_size\": 37\n  },\n  \"weight_map\": {\n    \"x\": "
    ));
}

#[test]
fn a_shard_changed_after_opening_is_refused_when_mapped() {
    let tmp = tempfile::tempdir().unwrap();
    let index = write_index(tmp.path(), &two_shards(tmp.path()));
    let set = ShardedTensors::open(&index).unwrap();
    // Mapped lazily with the header read at open: still the same file.
    assert_eq!(set.tensor("x").unwrap().shape(), &[2, 3]);
    // B grows by a byte before its first use: its header no longer describes it.
    let mut bytes = fs::read(tmp.path().join(B)).unwrap();
    bytes.push(0);
    fs::write(tmp.path().join(B), bytes).unwrap();
    let err = set.tensor("z").unwrap_err();
    assert!(
        err.to_string()
            .contains("changed since its header was read"),
        "{err}"
    );
}
