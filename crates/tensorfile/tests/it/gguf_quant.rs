//! The quantizers against blocks made by gguf-py (`gguf.quants.quantize`)
//! and by llama.cpp's quantizer with no importance matrix
//! (tests/fixtures/gguf/quant): byte for byte, on every edge row.

use std::fs;
use std::path::PathBuf;

use serde_json::Value as Json;
use tensorfile::gguf::GgmlType;
use tensorfile::gguf::{quantize_row as quantize_into, quantizes, RowFault};
use tensorfile_testkit::f32s;

fn dir() -> PathBuf {
    tensorfile_testkit::fixture("gguf")
}

#[test]
fn every_quantized_type_here_gives_the_reference_bytes_on_every_row() {
    let m: Json =
        serde_json::from_str(&fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap();
    let q = &m["quant"];
    let row_len = q["row_len"].as_u64().unwrap() as usize;
    let mut checked = Vec::new();
    for side in ["gguf_py", "llama_cpp"] {
        for (name, entry) in q[side].as_object().unwrap() {
            let t = GgmlType::from_name(name).unwrap();
            if !quantizes(t) {
                continue;
            }
            let input = entry["input"].as_str().unwrap();
            let rows_names = q[format!("{input}_rows")].as_array().unwrap();
            let x = f32s(&fs::read(dir().join(format!("quant/{input}.f32"))).unwrap());
            let expected = fs::read(dir().join(entry["file"].as_str().unwrap())).unwrap();
            let row_bytes = (row_len as u64 / t.block_size() * t.type_size()) as usize;
            assert_eq!(expected.len(), row_bytes * rows_names.len(), "{name}");
            for (r, row_name) in rows_names.iter().enumerate() {
                let mut y = vec![0u8; row_bytes];
                quantize_into(t, &x[r * row_len..(r + 1) * row_len], &mut y).unwrap();
                let e = &expected[r * row_bytes..(r + 1) * row_bytes];
                if y != e {
                    let at = y.iter().zip(e).position(|(a, b)| a != b).unwrap();
                    panic!(
                        "{name} row {r} ({row_name}): first difference at byte {at}: {} vs {}",
                        y[at], e[at]
                    );
                }
            }
            checked.push(name.clone());
        }
    }
    checked.sort();
    assert_eq!(
        checked,
        ["BF16", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0"]
    );
}

#[test]
fn values_that_are_not_finite_are_refused_by_position() {
    let mut x = vec![0.5f32; 256];
    x[77] = f32::NAN;
    let mut y = vec![0u8; 144];
    let e = quantize_into(GgmlType::Q4_K, &x, &mut y).unwrap_err();
    assert!(matches!(e, RowFault::NotFinite { col: 77, .. }));
    assert_eq!(
        quantize_into(GgmlType::Q4_K, &x[..255], &mut y),
        Err(RowFault::Length)
    );
    assert_eq!(
        quantize_into(GgmlType::IQ2_S, &x, &mut [0u8; 82]),
        Err(RowFault::Unsupported)
    );
}
