//! Golden tests: every fixture in `valid/` is read exactly as its `.json`
//! says, through every way in; every fixture in `invalid/` is rejected under
//! its rule.

use std::fs;
use std::path::{Path, PathBuf};
use tensorfile::Decode;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tensorfile::{Dtype, ReadOptions, SafeTensors, TensorView};
use tensorfile_core::Error;

fn fixtures(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(dir)
}

/// `(path of the .safetensors, its parsed .json)` for every fixture in `dir`.
fn cases(dir: &str) -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(fixtures(dir)).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            let json = fs::read_to_string(path.with_extension("json")).unwrap();
            out.push((path, serde_json::from_str(&json).unwrap()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no fixtures in {dir}");
    out
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn as_u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// Compares decoded values to the fixture's: numbers, "nan", "inf", "-inf",
/// booleans, and [re, im] pairs for C64.
fn check_values(t: &TensorView<'_>, expected: &[Value]) {
    let name = t.name();
    let float = |v: &Value| -> f64 {
        match v {
            Value::String(s) if s == "nan" => f64::NAN,
            Value::String(s) if s == "inf" => f64::INFINITY,
            Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
            other => other.as_f64().unwrap(),
        }
    };
    let same = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a == b;
    let data = t.data();
    let n = expected.len();
    assert_eq!(t.numel() as usize, n, "{name}: value count");
    match t.dtype() {
        Dtype::F32 | Dtype::F64 | Dtype::F16 | Dtype::BF16 => {
            // Fixtures print F32/F16/BF16 values at f32 precision or better.
            let exact = t.dtype() == Dtype::F64;
            let got = t.to_f64_vec().unwrap();
            for (g, e) in got.iter().zip(expected) {
                let e = if exact {
                    float(e)
                } else {
                    float(e) as f32 as f64
                };
                assert!(same(*g, e), "{name}: {g} != {e}");
            }
            let got32 = t.to_f32_vec().unwrap();
            for (g, e) in got32.iter().zip(expected) {
                assert!(
                    same(*g as f64, float(e) as f32 as f64),
                    "{name}: f32 {g} != {e}"
                );
            }
        }
        Dtype::C64 => {
            let got = t.as_slice::<[f32; 2]>().unwrap();
            for (g, e) in got.iter().zip(expected) {
                let e = e.as_array().unwrap();
                assert!(
                    same(g[0] as f64, float(&e[0])) && same(g[1] as f64, float(&e[1])),
                    "{name}"
                );
            }
        }
        Dtype::BOOL => {
            for (g, e) in data.iter().zip(expected) {
                assert_eq!(*g != 0, e.as_bool().unwrap(), "{name}");
            }
        }
        Dtype::U8 => check_ints(name, &t.as_slice::<u8>().unwrap(), expected),
        Dtype::I8 => check_ints(name, &t.as_slice::<i8>().unwrap(), expected),
        Dtype::U16 => check_ints(name, &t.as_slice::<u16>().unwrap(), expected),
        Dtype::I16 => check_ints(name, &t.as_slice::<i16>().unwrap(), expected),
        Dtype::U32 => check_ints(name, &t.as_slice::<u32>().unwrap(), expected),
        Dtype::I32 => check_ints(name, &t.as_slice::<i32>().unwrap(), expected),
        Dtype::U64 => check_ints(name, &t.as_slice::<u64>().unwrap(), expected),
        Dtype::I64 => check_ints(name, &t.as_slice::<i64>().unwrap(), expected),
        // The 8-bit float formats decode through the casts module; their
        // bytes are already pinned by sha256 here.
        _ => {}
    }
}

fn check_ints<T: Copy + Into<i128>>(name: &str, got: &[T], expected: &[Value]) {
    for (g, e) in got.iter().zip(expected) {
        let e = e
            .as_i64()
            .map(i128::from)
            .or(e.as_u64().map(i128::from))
            .unwrap();
        assert_eq!((*g).into(), e, "{name}");
    }
}

fn check_file(file: &SafeTensors, json: &Value, label: &str) {
    let header = file.header();
    assert_eq!(
        header.header_len(),
        json["header_len"].as_u64().unwrap(),
        "{label}"
    );
    let metadata = serde_json::to_value(file.metadata()).unwrap();
    assert_eq!(metadata, json["metadata"], "{label}: metadata");
    let expected = json["tensors"].as_array().unwrap();
    assert_eq!(file.len(), expected.len(), "{label}: tensor count");
    for (t, e) in file.tensors().zip(expected) {
        let name = e["name"].as_str().unwrap();
        assert_eq!(t.name(), name, "{label}: data order");
        assert_eq!(
            t.dtype().name(),
            e["dtype"].as_str().unwrap(),
            "{label}: {name}"
        );
        assert_eq!(t.shape(), as_u64s(&e["shape"]), "{label}: {name}");
        let offsets = as_u64s(&e["data_offsets"]);
        assert_eq!(
            t.data_offsets(),
            (offsets[0], offsets[1]),
            "{label}: {name}"
        );
        assert_eq!(
            sha256(t.data()),
            e["sha256"].as_str().unwrap(),
            "{label}: {name}"
        );
        // Lookup by name finds the same tensor.
        assert_eq!(file.tensor(name).unwrap(), t);
        if let Some(values) = e.get("values") {
            check_values(&t, values.as_array().unwrap());
        }
    }
    let by_name: Vec<&str> = file.tensors_by_name().iter().map(|t| t.name()).collect();
    let mut sorted = by_name.clone();
    sorted.sort();
    assert_eq!(by_name, sorted);
    assert!(matches!(
        file.tensor("no such tensor"),
        Err(Error::NotFound(_))
    ));
}

#[test]
fn valid_fixtures_read_exactly_through_every_way_in() {
    for (path, json) in cases("valid") {
        let label = path.file_name().unwrap().to_string_lossy().to_string();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(sha256(&bytes), json["sha256"].as_str().unwrap(), "{label}");
        assert_eq!(bytes.len() as u64, json["size"].as_u64().unwrap());
        check_file(&SafeTensors::open(&path).unwrap(), &json, &label);
        check_file(
            &SafeTensors::open_with(
                &path,
                &tensorfile::ReadOptions::default().backend(tensorfile::Backend::Load),
            )
            .unwrap(),
            &json,
            &label,
        );
        check_file(
            &SafeTensors::from_source(
                tensorfile_core::file::Backing::Owned(bytes.clone()),
                &Default::default(),
            )
            .unwrap(),
            &json,
            &label,
        );
        let header =
            tensorfile::read_header(std::io::Cursor::new(&bytes), &ReadOptions::default()).unwrap();
        assert_eq!(header.len(), json["tensors"].as_array().unwrap().len());
        assert_eq!(header.header_len(), json["header_len"].as_u64().unwrap());
    }
}

#[test]
fn model_and_quant_fixtures_read_exactly() {
    for (dir, file) in [
        ("models/bigram", "model"),
        ("models/llama_tiny", "model"),
        ("quant", "int4_g32_sym"),
    ] {
        let path = fixtures(dir).join(format!("{file}.safetensors"));
        let json: Value =
            serde_json::from_str(&fs::read_to_string(path.with_extension("json")).unwrap())
                .unwrap();
        check_file(&SafeTensors::open(&path).unwrap(), &json, dir);
    }
}

#[test]
fn invalid_fixtures_rejected_under_their_rule() {
    for (path, json) in cases("invalid") {
        let label = path.file_name().unwrap().to_string_lossy().to_string();
        let rule = json["rule"].as_u64().unwrap() as u8;
        let bytes = fs::read(&path).unwrap();
        // Ways in from a path name the file in their errors; the others
        // have no file to name.
        let results = [
            (SafeTensors::open(&path).map(|_| ()), true),
            (
                SafeTensors::open_with(
                    &path,
                    &tensorfile::ReadOptions::default().backend(tensorfile::Backend::Load),
                )
                .map(|_| ()),
                true,
            ),
            (
                SafeTensors::from_source(
                    tensorfile::FileSource::open(&path).unwrap(),
                    &Default::default(),
                )
                .map(|_| ()),
                true,
            ),
            (
                tensorfile_core::read_header_from_path(&path, &ReadOptions::default()).map(|_| ()),
                true,
            ),
            (
                SafeTensors::from_source(bytes.clone(), &Default::default()).map(|_| ()),
                false,
            ),
            (SafeTensors::from_slice(&bytes).map(|_| ()), false),
            (
                tensorfile::read_header(std::io::Cursor::new(&bytes), &ReadOptions::default())
                    .map(|_| ()),
                false,
            ),
        ];
        for (result, named) in results {
            let err = result.expect_err(&label);
            assert_eq!(err.rule(), Some(rule), "{label}: {err}");
            let message = err.detail().to_string();
            assert!(
                message.starts_with(&format!("rule {rule}: ")),
                "{label}: {message}"
            );
            assert_eq!(
                err.file(),
                named.then_some(path.as_path()),
                "{label}: {err}"
            );
            if named {
                assert_eq!(err.to_string(), format!("{}: {message}", path.display()));
            }
        }
    }
}

#[test]
fn mlx_files_with_null_metadata_and_no_padding_are_read() {
    let dir = fixtures("mlx");
    let mut seen = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            let file = SafeTensors::open(&path).unwrap();
            assert!(file.metadata().is_none(), "{}", path.display());
            for t in file.tensors() {
                // Unaligned data still gives a typed view (an owned copy).
                if t.dtype() == Dtype::U32 {
                    assert_eq!(t.as_slice::<u32>().unwrap().len() as u64, t.numel());
                }
            }
            seen += 1;
        }
    }
    assert!(seen > 10);
}
