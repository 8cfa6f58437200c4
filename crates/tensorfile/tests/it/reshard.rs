//! Splitting and merging: huggingface_hub's plan, Python's index text, and
//! shard-then-merge giving back the canonical file byte for byte.

use crate::common;

use std::fs;
use std::path::Path;

use common::*;
use tensorfile::set::{split, SplitOptions};
use tensorfile::{Dtype, Error, WriteOptions};
use tensorfile_core::set::merge;
use tensorfile_core::ShardedTensors;

fn options(max: u64) -> SplitOptions {
    SplitOptions::new(max, "model".into()).with_write(WriteOptions::default().with_sync(false))
}

fn no_progress() -> impl Fn(u64) + Sync {
    |_| {}
}

/// Splits `file` with `max`, merges back, and compares with the original.
fn round_trip(file: &Path, max: u64) -> usize {
    let tmp = tempfile::tempdir().unwrap();
    let source = ShardedTensors::open(file).unwrap();
    let written = std::sync::atomic::AtomicU64::new(0);
    let count = |n| {
        written.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    };
    let summary = split(&source, &tmp.path().join("out"), &options(max), &count).unwrap();
    assert_eq!(written.into_inner(), source.data_len());
    assert_eq!(summary.total_size, source.data_len());
    assert_eq!(summary.index.is_some(), summary.files.len() > 1);
    let set = ShardedTensors::open(tmp.path().join("out")).unwrap();
    assert!(set.warnings().is_empty(), "{:?}", set.warnings());
    assert_eq!(set.len(), source.len());
    for shard in set.shards() {
        // Every shard keeps the source's metadata.
        assert_eq!(
            shard.header().metadata(),
            source.shards()[0].header().metadata()
        );
        // A shard over the limit holds a single tensor.
        assert!(shard.header().data_len() <= max || shard.header().len() == 1);
    }
    let merged = tmp.path().join("merged.safetensors");
    merge(&set, &merged, &WriteOptions::default(), &no_progress()).unwrap();
    assert_eq!(
        fs::read(&merged).unwrap(),
        fs::read(file).unwrap(),
        "{} at {max}",
        file.display()
    );
    summary.files.len()
}

#[test]
fn shard_then_merge_gives_back_the_canonical_file() {
    let llama = fixtures().join("models/llama_tiny/model.safetensors");
    // 1 byte: every tensor alone; 30KB: three shards; 1GB: one file, no index.
    assert_eq!(round_trip(&llama, 1), 20);
    assert_eq!(round_trip(&llama, 30_000), 3);
    assert_eq!(round_trip(&llama, 9000), 11);
    assert_eq!(round_trip(&llama, 1_000_000_000), 1);
    // Every valid fixture is canonical, many dtypes and metadata included.
    for entry in fs::read_dir(fixtures().join("valid")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            for max in [1, 64, 1 << 40] {
                round_trip(&path, max);
            }
        }
    }
}

#[test]
fn single_file_when_everything_fits() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("models/bigram/model.safetensors");
    let source = ShardedTensors::open(&src).unwrap();
    let summary = split(&source, tmp.path(), &options(4096), &no_progress()).unwrap();
    assert_eq!(summary.files, [tmp.path().join("model.safetensors")]);
    assert_eq!(summary.index, None);
    let names: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["model.safetensors"]);
    assert_eq!(
        fs::read(tmp.path().join("model.safetensors")).unwrap(),
        fs::read(&src).unwrap()
    );
}

#[test]
fn greedy_fill_in_data_order_like_huggingface_hub() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.safetensors");
    // Data order z, y, x, w (not name order); y is over the limit.
    write_st(
        &src,
        &[
            T::new("z", Dtype::F32, &[2]),
            T::new("y", Dtype::F32, &[10]),
            T::new("x", Dtype::U8, &[8]),
            T::new("w", Dtype::I16, &[4]),
        ],
        &[("format", "tinyllm")],
    );
    let source = ShardedTensors::open(&src).unwrap();
    let out = tmp.path().join("out");
    let opts = options(20).with_prefix("m".into());
    let summary = split(&source, &out, &opts, &no_progress()).unwrap();
    // z (8) opens a shard; y (40) goes alone at once; x (8) joins z (16);
    // w (8) would make 24 > 20, so it starts the next shard.
    let expected = "{\n  \"metadata\": {\n    \"total_parameters\": 24,\n    \"total_size\": 64\n  },\n  \"weight_map\": {\n    \"w\": \"m-00003-of-00003.safetensors\",\n    \"x\": \"m-00002-of-00003.safetensors\",\n    \"y\": \"m-00001-of-00003.safetensors\",\n    \"z\": \"m-00002-of-00003.safetensors\"\n  }\n}\n";
    assert_eq!(summary.index, Some(out.join("m.safetensors.index.json")));
    assert_eq!(
        fs::read_to_string(out.join("m.safetensors.index.json")).unwrap(),
        expected
    );
    let names = |f: &str| -> Vec<String> {
        read_tensors(&out.join(f))
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    assert_eq!(names("m-00001-of-00003.safetensors"), ["y"]);
    // Each shard is canonical: F32 before U8.
    assert_eq!(names("m-00002-of-00003.safetensors"), ["z", "x"]);
    assert_eq!(names("m-00003-of-00003.safetensors"), ["w"]);
}

#[test]
fn index_escapes_like_python_ensure_ascii() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.safetensors");
    write_st(
        &src,
        &[
            T::new("é", Dtype::U8, &[4]),
            T::new("😀\u{7f}", Dtype::U8, &[4]),
        ],
        &[],
    );
    let out = tmp.path().join("out");
    split(
        &ShardedTensors::open(&src).unwrap(),
        &out,
        &options(4),
        &no_progress(),
    )
    .unwrap();
    // json.dumps({...}, indent=2, sort_keys=True): code point order, \u escapes.
    let expected = "{\n  \"metadata\": {\n    \"total_parameters\": 8,\n    \"total_size\": 8\n  },\n  \"weight_map\": {\n    \"\\u00e9\": \"model-00001-of-00002.safetensors\",\n    \"\\ud83d\\ude00\\u007f\": \"model-00002-of-00002.safetensors\"\n  }\n}\n";
    assert_eq!(
        fs::read_to_string(out.join("model.safetensors.index.json")).unwrap(),
        expected
    );
    assert!(ShardedTensors::open(&out)
        .unwrap()
        .tensor("😀\u{7f}")
        .is_ok());
}

#[test]
fn refuses_an_output_directory_holding_weights() {
    let tmp = tempfile::tempdir().unwrap();
    let source = ShardedTensors::open(fixtures().join("models/bigram/model.safetensors")).unwrap();
    fs::write(tmp.path().join("model-00001-of-00002.safetensors"), b"old").unwrap();
    let err = Error::from(split(&source, tmp.path(), &options(1), &no_progress()).unwrap_err());
    assert!(
        matches!(err.core(), Some(tensorfile_core::Error::Io { path, source })
            if source.kind() == std::io::ErrorKind::AlreadyExists
                && path.ends_with("model-00001-of-00002.safetensors")),
        "{err}"
    );
    // Another prefix is fine.
    let opts = options(1).with_prefix("other".into());
    split(&source, tmp.path(), &opts, &no_progress()).unwrap();
    assert!(tmp.path().join("other.safetensors").exists());
}

#[test]
fn merge_refuses_conflicting_metadata_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    );
    write_st(
        &tmp.path().join(a),
        &[T::new("x", Dtype::U8, &[1])],
        &[("format", "tinyllm"), ("k", "1")],
    );
    write_st(
        &tmp.path().join(b),
        &[T::new("y", Dtype::U8, &[1])],
        &[("format", "tinyllm"), ("k", "2")],
    );
    let index = serde_json::json!({"metadata": {"total_size": 2}, "weight_map": {"x": a, "y": b}});
    fs::write(
        tmp.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let set = ShardedTensors::open(tmp.path()).unwrap();
    let out = tmp.path().join("merged.safetensors");
    let err = merge(&set, &out, &WriteOptions::default(), &no_progress()).unwrap_err();
    assert!(
        matches!(&err, tensorfile_core::Error::Shard(s)
            if matches!(&**s, tensorfile::set::ShardError::MetadataConflict { key, .. } if key == "k")),
        "{err}"
    );
    assert!(!out.exists());

    // Agreeing and disjoint keys make a union.
    write_st(
        &tmp.path().join(b),
        &[T::new("y", Dtype::U8, &[1])],
        &[("format", "tinyllm"), ("j", "3")],
    );
    let set = ShardedTensors::open(tmp.path()).unwrap();
    merge(&set, &out, &WriteOptions::default(), &no_progress()).unwrap();
    let merged = tensorfile::SafeTensors::open(&out).unwrap();
    let keys: Vec<&String> = merged.metadata().unwrap().keys().collect();
    assert_eq!(keys, ["format", "j", "k"]);
}

#[test]
fn every_file_of_a_split_gets_the_mode_of_a_plain_create() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    // What open(2) with 0666 gives under the current umask.
    let plain = tmp.path().join("plain");
    fs::File::create(&plain).unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let expected = mode(&plain);
    let source =
        ShardedTensors::open(fixtures().join("models/llama_tiny/model.safetensors")).unwrap();
    let out = tmp.path().join("out");
    let summary = split(&source, &out, &options(30_000), &no_progress()).unwrap();
    let index = summary.index.unwrap();
    for file in summary.files.iter().chain([&index]) {
        assert_eq!(mode(file), expected, "{}", file.display());
    }
}

#[test]
fn merge_refuses_to_write_over_a_file_of_its_set() {
    let tmp = tempfile::tempdir().unwrap();
    let source =
        ShardedTensors::open(fixtures().join("models/llama_tiny/model.safetensors")).unwrap();
    let out = tmp.path().join("out");
    let summary = split(&source, &out, &options(30_000), &no_progress()).unwrap();
    let set = ShardedTensors::open(&out).unwrap();
    let index = summary.index.unwrap();
    for target in [&summary.files[1], &index] {
        let before = fs::read(target).unwrap();
        let err =
            Error::from(merge(&set, target, &WriteOptions::default(), &no_progress()).unwrap_err());
        assert!(
            matches!(
                err.core(),
                Some(tensorfile_core::Error::Output {
                    problem: tensorfile::OutputError::IsInput { .. },
                    ..
                })
            ),
            "{err:?}"
        );
        assert_eq!(fs::read(target).unwrap(), before);
    }
}
