//! The `--json` schema of each operation: the table of keys in its page
//! `docs/commands/<command>.md` and the keys its report struct prints must
//! agree, and the keys print in ascending order (as the command always
//! printed them), so that neither can change without the other.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use tensorfile::ops::convert::{convert, ConvertReport, ConvertRequest};
use tensorfile::ops::dequantize::{dequantize, DequantizeRequest};
use tensorfile::ops::merge::{merge, MergeRequest};
use tensorfile::ops::quantize::{quantize, QuantizeRequest};
use tensorfile::ops::rewrite::{rewrite, RewriteRequest};
use tensorfile::ops::shard::{shard, ShardRequest};
use tensorfile::ops::validate::{validate, ValidateRequest};
use tensorfile::transform::InOut;
use tensorfile::Dtype;
use tensorfile_testkit::fixtures;

/// The keys of the table under "`--json` keys" in the command's page
/// (under its heading `### <shape>` when the report has several shapes):
/// a key of the objects in an array is written `array[].key`.
fn documented(command: &str, shape: Option<&str>) -> BTreeSet<String> {
    let path = fixtures().join(format!("../../docs/commands/{command}.md"));
    let page = std::fs::read_to_string(&path).unwrap();
    let mut section = page
        .split("## `--json` keys")
        .nth(1)
        .unwrap_or_else(|| panic!("{} has no `--json` keys section", path.display()));
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

/// The keys a report printed, arrays of objects as `array[].key`, checked
/// to be in ascending order. An empty array of objects shows no keys of
/// its own: those the page documents for it are taken as they are.
fn printed(report: &impl serde::Serialize, page: &BTreeSet<String>) -> BTreeSet<String> {
    let text = serde_json::to_string(report).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    // serde_json's own maps sort their keys: printing the parsed value
    // gives the same text only if the structs' fields are in that order.
    assert_eq!(value.to_string(), text, "fields out of key order");
    let mut keys = BTreeSet::new();
    for (key, v) in value.as_object().unwrap() {
        keys.insert(key.clone());
        match v.as_array().map(|a| a.first()) {
            Some(Some(Value::Object(inner))) => {
                keys.extend(inner.keys().map(|k| format!("{key}[].{k}")));
            }
            Some(None) => {
                let prefix = format!("{key}[].");
                keys.extend(page.iter().filter(|k| k.starts_with(&prefix)).cloned());
            }
            _ => {}
        }
    }
    keys
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
    let page = documented("dequantize", None);
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
    let page = documented("quantize", None);
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
    let page = documented("convert", Some(shape));
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
    let page = documented("validate", None);
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
    let page = documented("rewrite", None);
    assert_eq!(printed(&report, &page), page);
    let bad = RewriteRequest {
        align: 16,
        ..request
    };
    let e = rewrite(&bad, &()).unwrap_err();
    assert!(matches!(e, tensorfile::Error::Request { .. }), "{e}");
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
    let page = documented("shard", None);
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
    let page = documented("merge", None);
    assert_eq!(printed(&merged, &page), page);
}
