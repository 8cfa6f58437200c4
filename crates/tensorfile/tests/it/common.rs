//! Test helpers: build small safetensors files and model directories by hand.
#![allow(dead_code)]

use std::fs;
use std::path::Path;

use tensorfile::{Dtype, SafeTensors};

pub use tensorfile_testkit::fixtures;

/// One tensor to write: name, dtype, shape and bytes.
#[derive(Clone, Debug)]
pub struct T {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

impl T {
    /// A tensor filled with a pattern that depends on its name, so that
    /// misplaced bytes show.
    pub fn new(name: &str, dtype: Dtype, shape: &[u64]) -> T {
        let n: u64 = shape.iter().product();
        let len = dtype.byte_len(n).unwrap() as usize;
        let seed = name
            .bytes()
            .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(b));
        let data = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
        T {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            data,
        }
    }
}

/// A safetensors file's bytes: tensors laid out in the order given, header
/// padded to 8 (the same layout rules the reader checks).
pub fn st_bytes(tensors: &[T], metadata: &[(&str, &str)]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = metadata
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        header.insert("__metadata__".into(), m.into());
    }
    let mut offset = 0u64;
    for t in tensors {
        let end = offset + t.data.len() as u64;
        header.insert(
            t.name.clone(),
            serde_json::json!({"dtype": t.dtype.name(), "shape": t.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut text = serde_json::to_vec(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    for t in tensors {
        out.extend_from_slice(&t.data);
    }
    out
}

/// Writes a safetensors file.
pub fn write_st(path: &Path, tensors: &[T], metadata: &[(&str, &str)]) {
    fs::write(path, st_bytes(tensors, metadata)).unwrap();
}

/// A file's tensors, in data order, as owned values.
pub fn read_tensors(path: &Path) -> Vec<T> {
    let f = SafeTensors::open(path).unwrap();
    f.tensors()
        .map(|t| T {
            name: t.name().into(),
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
            data: t.data().to_vec(),
        })
        .collect()
}

/// Copies a fixture model directory into a fresh temp dir.
pub fn copy_model(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("models").join(name);
    for entry in fs::read_dir(&src).unwrap() {
        let p = entry.unwrap().path();
        let file = p.file_name().unwrap();
        // model.json describes the fixture; it is not part of the model.
        if file != "model.json" {
            fs::copy(&p, tmp.path().join(file)).unwrap();
        }
    }
    tmp
}

/// Edits a directory's config.json.
pub fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) {
    let path = dir.join("config.json");
    let mut config: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    f(&mut config);
    fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
}

/// Rewrites a directory's model.safetensors through `f`, keeping tinyllm metadata.
pub fn edit_weights(dir: &Path, f: impl FnOnce(&mut Vec<T>)) {
    let path = dir.join("model.safetensors");
    let mut tensors = read_tensors(&path);
    f(&mut tensors);
    write_st(&path, &tensors, &[("format", "tinyllm")]);
}
