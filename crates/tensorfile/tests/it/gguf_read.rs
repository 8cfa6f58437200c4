//! The GGUF reader and decoders against files and blocks made by the real
//! tools (tests/fixtures/gguf, see its README), and against hostile files
//! built here.

use std::fs;
use std::path::PathBuf;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use tensorfile::gguf::{
    dequantize_blocks, Endian, GgmlType, GgufArray as Array, GgufError, GgufFile,
    GgufValue as Value, ReadLimits,
};
use tensorfile::TensorData;

fn dir() -> PathBuf {
    tensorfile_testkit::fixture("gguf")
}

fn manifest() -> Json {
    tensorfile_testkit::manifest("gguf")
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A manifest value (gguf-py's reading of the file) against ours.
fn same_value(ours: &Value, expected: &Json, elem: Option<&str>) -> bool {
    let float = |v: f64| match expected {
        Json::String(s) => match s.as_str() {
            "inf" => v == f64::INFINITY,
            "-inf" => v == f64::NEG_INFINITY,
            "nan" => v.is_nan(),
            _ => false,
        },
        e => e.as_f64().is_some_and(|e| e.to_bits() == v.to_bits()),
    };
    match ours {
        Value::F32(v) => float(f64::from(*v)),
        Value::F64(v) => float(*v),
        Value::Bool(b) => expected.as_bool() == Some(*b),
        Value::String(s) => expected.as_str() == Some(s),
        Value::Array(a) => {
            let Some(items) = expected.as_array() else {
                return false;
            };
            if elem.is_some_and(|e| e != a.element_type().name()) && elem != Some("ARRAY") {
                return false;
            }
            items.len() == a.len()
                && items
                    .iter()
                    .enumerate()
                    .all(|(i, e)| same_value(&a.get(i).unwrap(), e, None))
        }
        Value::I8(v) => expected.as_i64() == Some(i64::from(*v)),
        Value::I16(v) => expected.as_i64() == Some(i64::from(*v)),
        Value::I32(v) => expected.as_i64() == Some(i64::from(*v)),
        Value::I64(v) => expected.as_i64() == Some(*v),
        other => expected.as_u64() == other.as_u64(),
    }
}

#[test]
fn files_written_by_gguf_py_read_as_gguf_py_reads_them() {
    let m = manifest();
    let files = m["files"].as_object().unwrap();
    assert_eq!(files.len(), 5);
    for (name, f) in files {
        let path = dir().join(f["file"].as_str().unwrap());
        let bytes = fs::read(&path).unwrap();
        assert_eq!(sha(&bytes), f["sha256"].as_str().unwrap(), "{name}");
        let file = GgufFile::open(&path).unwrap();
        let h = file.header();
        assert_eq!(
            u64::from(h.version()),
            f["version"].as_u64().unwrap(),
            "{name}"
        );
        let big = f["endianness"] == "big";
        assert_eq!(h.endian() == Endian::Big, big, "{name}");
        assert_eq!(h.alignment(), f["alignment"].as_u64().unwrap(), "{name}");
        assert_eq!(
            h.info_end(),
            f["tensor_info_end"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            h.data_offset(),
            f["data_offset"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(h.file_len(), f["size"].as_u64().unwrap());

        let kvs = f["kv"].as_array().unwrap();
        assert_eq!(h.kv().len(), kvs.len(), "{name}");
        for (ours, theirs) in h.kv().iter().zip(kvs) {
            assert_eq!(ours.key, theirs["key"].as_str().unwrap(), "{name}");
            assert_eq!(
                ours.value.value_type().name(),
                theirs["type"].as_str().unwrap()
            );
            assert!(
                same_value(&ours.value, &theirs["value"], theirs["elem_type"].as_str()),
                "{name} {}: {:?} vs {}",
                ours.key,
                ours.value,
                theirs["value"]
            );
        }

        let tensors = f["tensors"].as_array().unwrap();
        assert_eq!(h.tensors().len(), tensors.len(), "{name}");
        for (info, t) in h.tensors().iter().zip(tensors) {
            let tname = &info.name;
            assert_eq!(tname, t["name"].as_str().unwrap());
            assert_eq!(info.ggml_type.name(), t["ggml_type"].as_str().unwrap());
            assert_eq!(
                u64::from(info.ggml_type.id()),
                t["ggml_type_id"].as_u64().unwrap()
            );
            let dims: Vec<u64> = serde_json::from_value(t["dims"].clone()).unwrap();
            let shape: Vec<u64> = serde_json::from_value(t["numpy_shape"].clone()).unwrap();
            assert_eq!(info.dims, dims, "{tname}");
            assert_eq!(info.shape(), shape, "{tname}");
            assert_eq!(info.offset, t["offset"].as_u64().unwrap());
            assert_eq!(info.start, t["absolute_offset"].as_u64().unwrap());
            assert_eq!(info.byte_len, t["nbytes"].as_u64().unwrap());
            let mut raw = vec![0u8; info.byte_len as usize];
            file.read_raw(info, 0, &mut raw).unwrap();
            assert_eq!(sha(&raw), t["sha256"].as_str().unwrap(), "{name} {tname}");

            // As TensorData: plain types little-endian, others decoded.
            let data = file.tensor(tname).unwrap();
            assert_eq!(data.shape(), shape.as_slice());
            let mut bytes = vec![0u8; data.byte_len() as usize];
            data.read_at(0, &mut bytes).unwrap();
            let f32_bytes: Option<Vec<u8>> = match data.dtype() {
                tensorfile::Dtype::F32 => Some(bytes.clone()),
                d if d.is_float() => Some(
                    tensorfile::cast::decode_f32_vec(d, &bytes)
                        .unwrap()
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                ),
                _ => None,
            };
            match t["dequantized_f32_sha256"].as_str() {
                Some(expected) => {
                    assert_eq!(sha(&f32_bytes.unwrap()), expected, "{name} {tname}")
                }
                // gguf-py gives no f32 for integers, nor for quantized
                // blocks of a big-endian file.
                None if big && !info.ggml_type.is_plain() => {}
                None => assert!(f32_bytes.is_none(), "{name} {tname}"),
            }
            // Any sub-range reads the same bytes.
            if bytes.len() > 7 {
                let mut part = vec![0u8; bytes.len() - 7];
                data.read_at(5, &mut part[..bytes.len() - 9]).unwrap();
                assert_eq!(&part[..bytes.len() - 9], &bytes[5..bytes.len() - 4]);
            }
        }
        let warned = |w: &str| h.warnings().iter().any(|x| x.contains(w));
        assert_eq!(
            warned("arrays of arrays"),
            name == "all_kv_types_align64_v3",
            "{name}"
        );
        assert_eq!(warned("big-endian"), big, "{name}");
    }
}

#[test]
fn every_decoded_type_equals_gguf_py_bit_for_bit() {
    let m = manifest();
    let types = m["dequant"].as_object().unwrap();
    assert_eq!(types.len(), 24);
    for (name, d) in types {
        let t = GgmlType::from_name(name).unwrap();
        assert_eq!(u64::from(t.id()), d["ggml_type"].as_u64().unwrap());
        assert_eq!(t.block_size(), d["block_size"].as_u64().unwrap());
        assert_eq!(t.type_size(), d["type_size"].as_u64().unwrap());
        let blocks = fs::read(dir().join(d["blocks_file"].as_str().unwrap())).unwrap();
        assert_eq!(sha(&blocks), d["blocks_sha256"].as_str().unwrap());
        let expected = fs::read(dir().join(d["f32_file"].as_str().unwrap())).unwrap();
        let ours = dequantize_blocks(t, &blocks).unwrap();
        assert_eq!(ours.len() * 4, expected.len(), "{name}");
        for (i, (v, e)) in ours.iter().zip(expected.chunks_exact(4)).enumerate() {
            let e = u32::from_le_bytes(e.try_into().unwrap());
            assert_eq!(
                v.to_bits(),
                e,
                "{name} element {i}: {v} vs {}",
                f32::from_bits(e)
            );
        }
    }
    for t in [
        GgmlType::Q8_K,
        GgmlType::Q8_1,
        GgmlType::Q1_0,
        GgmlType::Q2_0,
    ] {
        assert!(matches!(
            dequantize_blocks(t, &[]),
            Err(GgufError::Unsupported { .. })
        ));
    }
}

#[test]
fn quantized_files_of_llama_cpp_decode_as_their_fixture_blocks() {
    // kquant/carrier_pure_TYPE.gguf holds the blocks of quant/TYPE.llama_cpp.q.
    for t in ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"] {
        let file = GgufFile::open(dir().join(format!("kquant/carrier_pure_{t}.gguf"))).unwrap();
        let info = file.header().tensor("token_embd.weight").unwrap();
        assert_eq!(info.ggml_type.name(), t);
        let mut raw = vec![0u8; info.byte_len as usize];
        file.read_raw(info, 0, &mut raw).unwrap();
        let q = fs::read(dir().join(format!("quant/{t}.llama_cpp.q"))).unwrap();
        assert_eq!(raw, q, "{t}");
        let deq = fs::read(dir().join(format!("quant/{t}.llama_cpp.deq.f32"))).unwrap();
        let data = file.tensor("token_embd.weight").unwrap();
        let mut bytes = vec![0u8; data.byte_len() as usize];
        data.read_at(0, &mut bytes).unwrap();
        assert_eq!(bytes, deq, "{t}");
    }
}

// ---- hostile files, built here ----

/// Builds GGUF bytes field by field.
#[derive(Default)]
struct B(Vec<u8>);

impl B {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> B {
        let mut b = B(b"GGUF".to_vec());
        b.u32(version).u64(n_tensors).u64(n_kv);
        b
    }
    fn u32(&mut self, v: u32) -> &mut B {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut B {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut B {
        self.u64(s.len() as u64);
        self.0.extend(s.as_bytes());
        self
    }
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut B {
        self.str(key).u32(4).u32(v)
    }
    fn info(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut B {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad(&mut self, align: usize) -> &mut B {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
    fn zeros(&mut self, n: usize) -> &mut B {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}

fn read(bytes: &[u8]) -> Result<GgufFile<Vec<u8>>, GgufError> {
    read_with(bytes, &ReadLimits::default())
}

fn read_with(bytes: &[u8], limits: &ReadLimits) -> Result<GgufFile<Vec<u8>>, GgufError> {
    GgufFile::from_source(bytes.to_vec(), limits).map_err(|e| match e {
        tensorfile::Error::Gguf(g) => g,
        other => panic!("not a GGUF error: {other}"),
    })
}

/// A valid little file: one KV, two F32 tensors.
fn valid() -> B {
    let mut b = B::header(3, 2, 1);
    b.kv_u32("general.alignment", 32)
        .info("a", &[4, 2], 0, 0)
        .info("b", &[3], 0, 32);
    b.pad(32).zeros(32 + 12);
    b
}

#[test]
fn a_valid_hand_built_file_reads() {
    let f = read(&valid().0).unwrap();
    assert_eq!(f.header().tensors().len(), 2);
    assert_eq!(f.header().tensor("b").unwrap().shape(), [3]);
    assert!(
        f.header().warnings().is_empty(),
        "{:?}",
        f.header().warnings()
    );
}

#[test]
fn hostile_headers_are_refused_with_the_field_and_offset() {
    // Magic, versions (v1, v4, zero).
    assert!(matches!(
        read(b"GGUG\x03\0\0\0"),
        Err(GgufError::Magic { .. })
    ));
    for v in [0u32, 1, 4, 0x0100_0000] {
        let b = B::header(v, 0, 0);
        assert_eq!(read(&b.0).unwrap_err(), GgufError::Version { version: v });
    }
    // Truncated inside the counts.
    let e = read(&B::header(3, 0, 0).0[..20]).unwrap_err();
    assert!(
        matches!(e, GgufError::Truncated { ref field, offset: 16, len: 20 } if field == "key-value count"),
        "{e}"
    );

    // Counts that overflow or cannot fit the file: refused before any
    // allocation, whatever their size.
    let e = read(&B::header(3, u64::MAX, 0).0).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::Limit {
                offset: 8,
                value: u64::MAX,
                ..
            }
        ),
        "{e}"
    );
    let e = read(&B::header(3, 1000, 0).0).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::Count {
                offset: 8,
                value: 1000,
                ..
            }
        ),
        "{e}"
    );
    let e = read(&B::header(3, 0, 1 << 40).0).unwrap_err();
    assert!(matches!(e, GgufError::Limit { offset: 16, .. }), "{e}");

    // A string length past the end; an array count that cannot fit.
    let mut b = B::header(3, 0, 1);
    b.u64(u64::MAX - 3).zeros(16);
    let e = read(&b.0).unwrap_err();
    assert!(matches!(e, GgufError::Limit { offset: 24, .. }), "{e}");
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(9).u32(10).u64(1 << 20);
    let e = read(&b.0).unwrap_err();
    assert!(
        matches!(e, GgufError::Count { ref field, offset: 41, value: 1048576, needed: 8388608, .. } if field.contains("element count")),
        "{e}"
    );
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(9).u32(8).u64(u64::MAX);
    assert!(matches!(read(&b.0).unwrap_err(), GgufError::Limit { .. }));

    // Arrays nested deeper than the limit: refused at the first too-deep one.
    let mut b = B::header(3, 0, 1);
    b.str("deep").u32(9);
    for _ in 0..100 {
        b.u32(9).u64(1);
    }
    b.u32(0).u64(0);
    let e = read(&b.0).unwrap_err();
    assert!(matches!(e, GgufError::Nesting { limit: 8, .. }), "{e}");
    let shallow = ReadLimits {
        max_depth: 200,
        ..ReadLimits::default()
    };
    let f = read_with(&b.0, &shallow).unwrap();
    assert!(matches!(
        f.header().get("deep"),
        Some(Value::Array(Array::Array(_)))
    ));

    // Memory: many long strings against a small budget, counted as they grow.
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(9).u32(8).u64(100);
    for _ in 0..100 {
        b.str(&"x".repeat(1000));
    }
    let small = ReadLimits {
        max_memory: 50_000,
        ..ReadLimits::default()
    };
    assert!(matches!(
        read_with(&b.0, &small).unwrap_err(),
        GgufError::Memory { .. }
    ));
    assert!(read(&b.0).is_ok());

    // Unknown value type, bad bool, bad UTF-8, empty and duplicate keys.
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(13).zeros(8);
    let e = read(&b.0).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::ValueType {
                type_id: 13,
                offset: 33,
                ..
            }
        ),
        "{e}"
    );
    let mut b = B::header(3, 0, 1);
    b.str("k").u32(7).0.extend([2, 0, 0, 0]);
    assert!(matches!(
        read(&b.0).unwrap_err(),
        GgufError::Bool {
            byte: 2,
            offset: 37,
            ..
        }
    ));
    let mut b = B::header(3, 0, 1);
    b.u64(2).0.extend([0xC3, 0x28]);
    b.u32(4).u32(0);
    assert!(matches!(
        read(&b.0).unwrap_err(),
        GgufError::Utf8 { offset: 24, .. }
    ));
    let mut b = B::header(3, 0, 1);
    b.str("").u32(4).u32(0);
    assert!(matches!(
        read(&b.0).unwrap_err(),
        GgufError::EmptyKey {
            index: 0,
            offset: 24
        }
    ));
    let mut b = B::header(3, 0, 2);
    b.kv_u32("k", 1).kv_u32("k", 2);
    let e = read(&b.0).unwrap_err();
    assert_eq!(
        e,
        GgufError::DuplicateKey {
            key: "k".into(),
            offset: 41
        }
    );

    // Alignment: not a power of two, zero, not UINT32.
    for a in [0u32, 48] {
        let mut b = B::header(3, 0, 1);
        b.kv_u32("general.alignment", a);
        assert!(matches!(
            read(&b.0).unwrap_err(),
            GgufError::Alignment { offset: 53, .. }
        ));
    }
    let mut b = B::header(3, 0, 1);
    b.str("general.alignment").u32(10).u64(32);
    assert!(matches!(
        read(&b.0).unwrap_err(),
        GgufError::Alignment { .. }
    ));
}

#[test]
fn hostile_tensor_infos_are_refused() {
    let one = |name: &str, dims: &[u64], ty: u32, offset: u64, data: usize| {
        let mut b = B::header(3, 1, 0);
        b.info(name, dims, ty, offset).pad(32).zeros(data);
        read(&b.0)
    };
    assert!(one("t", &[8], 0, 0, 32).is_ok());
    // Unknown and removed types.
    let e = one("t", &[8], 99, 0, 32).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::UnknownType {
                type_id: 99,
                removed: None,
                offset: 45,
                ..
            }
        ),
        "{e}"
    );
    let e = one("t", &[32], 31, 0, 32).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::UnknownType {
                type_id: 31,
                removed: Some("Q4_0_4_4"),
                ..
            }
        ),
        "{e}"
    );
    // Too many dims, dims whose product overflows, rows not whole blocks.
    assert!(matches!(
        one("t", &[1, 1, 1, 1, 1], 0, 0, 32),
        Err(GgufError::Shape { .. })
    ));
    // GgufError::Shape covers several refusals; its problem says which.
    let shape_problem = |e: &GgufError| match e {
        GgufError::Shape {
            tensor, problem, ..
        } if tensor == "t" => problem.clone(),
        other => panic!("not a shape error of \"t\": {other}"),
    };
    let e = one("t", &[1 << 32, 1 << 32], 0, 0, 32).unwrap_err();
    assert!(
        shape_problem(&e).contains("more than 2^63 - 1 elements"),
        "{e}"
    );
    let e = one("t", &[u64::MAX], 0, 0, 32).unwrap_err();
    assert!(matches!(e, GgufError::Shape { .. }), "{e}");
    let e = one("t", &[48], 2, 0, 32).unwrap_err();
    assert!(
        shape_problem(&e).contains("not whole Q4_0 blocks of 32"),
        "{e}"
    );
    // A byte count that overflows: (2^62 elements of F64).
    let e = one("t", &[1 << 31, 1 << 31], 28, 0, 32).unwrap_err();
    assert!(shape_problem(&e).contains("2^64 bytes"), "{e}");
    // Offsets: misaligned, past the end, overflowing.
    let e = one("t", &[8], 0, 4, 64).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::Misaligned {
                offset: 4,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
    let e = one("t", &[8], 0, 0, 31).unwrap_err();
    assert!(matches!(e, GgufError::OutOfRange { .. }), "{e}");
    let e = one("t", &[8], 0, u64::MAX - 31, 32).unwrap_err();
    assert!(
        matches!(e, GgufError::OutOfRange { end: u64::MAX, .. }),
        "{e}"
    );
    // A name longer than 64 bytes.
    let e = one(&"n".repeat(65), &[8], 0, 0, 32).unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::NameTooLong {
                len: 65,
                offset: 24
            }
        ),
        "{e}"
    );

    // Duplicate names; overlapping tensors.
    let mut b = B::header(3, 2, 0);
    b.info("t", &[8], 0, 0)
        .info("t", &[8], 0, 32)
        .pad(32)
        .zeros(64);
    assert!(matches!(read(&b.0), Err(GgufError::DuplicateTensor { .. })));
    let mut b = B::header(3, 2, 0);
    b.info("a", &[16], 0, 0)
        .info("b", &[8], 0, 32)
        .pad(32)
        .zeros(64);
    assert!(matches!(read(&b.0), Err(GgufError::Overlap { .. })));
    // Out of order: valid, but llama.cpp refuses it (a warning).
    let mut b = B::header(3, 2, 0);
    b.info("a", &[8], 0, 32)
        .info("b", &[8], 0, 0)
        .pad(32)
        .zeros(64);
    let f = read(&b.0).unwrap();
    assert!(
        f.header().warnings()[0].contains("llama.cpp wants"),
        "{:?}",
        f.header().warnings()
    );
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error_not_a_panic() {
    let m = manifest();
    let path = dir().join(m["files"]["tensors_v3"]["file"].as_str().unwrap());
    let bytes = fs::read(path).unwrap();
    let data_offset = m["files"]["tensors_v3"]["data_offset"].as_u64().unwrap() as usize;
    let info_end = m["files"]["tensors_v3"]["tensor_info_end"]
        .as_u64()
        .unwrap() as usize;
    for n in 0..bytes.len() {
        let r = GgufFile::from_source(bytes[..n].to_vec(), &ReadLimits::default());
        // The last tensor's padding is not needed: only its bytes.
        if n >= bytes.len() - 32 && r.is_ok() {
            continue;
        }
        let e = r.unwrap_err();
        if n < info_end {
            assert!(
                matches!(
                    e.gguf(),
                    Some(GgufError::Truncated { .. } | GgufError::Count { .. })
                ),
                "{n}: {e}"
            );
        } else {
            assert!(
                matches!(e.gguf(), Some(GgufError::OutOfRange { .. })),
                "{n}: {e}"
            );
        }
    }
    // Every byte flipped: an error or a file, never a panic. Counted, so
    // that the reads of the files that still open are not skipped.
    let (mut opened, mut decoded) = (0, 0);
    for i in 0..data_offset {
        for x in [0x01u8, 0x80, 0xFF] {
            let mut b = bytes.clone();
            b[i] ^= x;
            if let Ok(f) = GgufFile::from_source(b, &ReadLimits::default()) {
                opened += 1;
                for t in f.header().tensors() {
                    if let Ok(d) = f.tensor(&t.name) {
                        let mut buf = vec![0u8; d.byte_len().min(4096) as usize];
                        let _ = d.read_at(0, &mut buf);
                        decoded += 1;
                    }
                }
            }
        }
    }
    assert!(
        opened > 0 && decoded > 0,
        "{opened} opened, {decoded} decoded"
    );
}

#[test]
fn large_decoded_reads_split_in_two_and_agree_with_small_ones() {
    // 1.1M values of Q8_0: one read decodes them on two threads; reads of
    // odd sizes at odd offsets give the same bytes.
    let n_rows = 1100u64;
    let mut b = B::header(3, 1, 0);
    b.info("q", &[1024, n_rows], 8, 0).pad(32);
    let start = b.0.len();
    let blocks = (1024 * n_rows / 32) as usize;
    for k in 0..blocks {
        b.0.extend([0x00, 0x3C]); // d = 1.0
        b.0.extend((0..32).map(|j| ((k * 7 + j) % 255) as u8));
    }
    b.pad(32);
    assert!(b.0.len() > start);
    let f = read(&b.0).unwrap();
    let t = f.tensor("q").unwrap();
    let mut all = vec![0u8; t.byte_len() as usize];
    t.read_at(0, &mut all).unwrap();
    let values: Vec<f32> = all
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    for (k, v) in values.iter().enumerate().step_by(4099) {
        let q = ((k / 32 * 7 + k % 32) % 255) as u8 as i8;
        assert_eq!(*v, f32::from(q), "{k}");
    }
    for (off, len) in [
        (3u64, 17usize),
        (4 * 1000, 4 * 70_000),
        (4 * 1_126_300 + 1, 31),
    ] {
        let mut part = vec![0u8; len];
        t.read_at(off, &mut part).unwrap();
        assert_eq!(part, all[off as usize..off as usize + len]);
    }
}
