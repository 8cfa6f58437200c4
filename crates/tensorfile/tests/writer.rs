//! The canonical writer against the fixtures and the reference library.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use tensorfile::writer::{serialize_with, Align, TensorRef};
use tensorfile::{serialize, Dtype, Metadata, WriteOptions};

fn fixtures() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures")).to_path_buf()
}

/// A tensor as a fixture's description gives it, with its bytes cut from the file.
struct Described {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    begin: usize,
    end: usize,
}

/// Every valid fixture: its bytes, its metadata and its tensors, from the `.json`
/// beside it (independent of this library's reader).
fn valid_fixtures() -> Vec<(PathBuf, Vec<u8>, serde_json::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(fixtures().join("valid")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("safetensors") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let desc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path.with_extension("json")).unwrap()).unwrap();
        out.push((path, bytes, desc));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 10, "fixtures missing");
    out
}

fn described(desc: &serde_json::Value) -> (Option<Metadata>, Vec<Described>) {
    let metadata = desc["metadata"].as_object().map(|m| {
        m.iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect::<Metadata>()
    });
    let header_len = desc["header_len"].as_u64().unwrap() as usize;
    let tensors = desc["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Described {
            name: t["name"].as_str().unwrap().to_string(),
            dtype: Dtype::from_name(t["dtype"].as_str().unwrap()).unwrap(),
            shape: t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect(),
            begin: 8 + header_len + t["data_offsets"][0].as_u64().unwrap() as usize,
            end: 8 + header_len + t["data_offsets"][1].as_u64().unwrap() as usize,
        })
        .collect();
    (metadata, tensors)
}

#[test]
fn every_valid_fixture_is_rewritten_byte_for_byte() {
    for (path, bytes, desc) in valid_fixtures() {
        let (metadata, tensors) = described(&desc);
        // Declare in reverse file order: the writer must find the order itself.
        let refs: Vec<TensorRef> = tensors
            .iter()
            .rev()
            .map(|t| TensorRef {
                name: &t.name,
                dtype: t.dtype,
                shape: &t.shape,
                data: &bytes[t.begin..t.end],
            })
            .collect();
        let written = serialize(&refs, metadata.as_ref()).unwrap();
        assert!(written == bytes, "{}: rewrite differs", path.display());
        assert_eq!(
            hex::encode(Sha256::digest(&written)),
            desc["sha256"].as_str().unwrap(),
            "{}",
            path.display()
        );

        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.safetensors");
        tensorfile::save(&out, &refs, metadata.as_ref(), &WriteOptions::default()).unwrap();
        assert!(
            std::fs::read(&out).unwrap() == bytes,
            "{}: saved file differs",
            path.display()
        );
    }
}

#[test]
fn aligned_files_are_read_by_the_reference() {
    for (path, bytes, desc) in valid_fixtures() {
        let (metadata, tensors) = described(&desc);
        let refs: Vec<TensorRef> = tensors
            .iter()
            .map(|t| TensorRef {
                name: &t.name,
                dtype: t.dtype,
                shape: &t.shape,
                data: &bytes[t.begin..t.end],
            })
            .collect();
        for align in [Align::Bytes64, Align::Bytes4096] {
            let options = WriteOptions {
                align,
                ..Default::default()
            };
            let written = serialize_with(&refs, metadata.as_ref(), &options).unwrap();
            let n = u64::from_le_bytes(written[..8].try_into().unwrap());
            assert_eq!((8 + n) % align.bytes(), 0, "{}", path.display());
            // Same header text and data, more padding.
            let canonical_n = desc["header_len"].as_u64().unwrap() as usize;
            let text = std::str::from_utf8(&bytes[8..8 + canonical_n])
                .unwrap()
                .trim_end();
            let aligned = std::str::from_utf8(&written[8..8 + n as usize]).unwrap();
            assert_eq!(aligned.trim_end(), text);
            assert_eq!(&written[8 + n as usize..], &bytes[8 + canonical_n..]);
            let st = safetensors::SafeTensors::deserialize(&written)
                .unwrap_or_else(|e| panic!("{}: reference refuses: {e}", path.display()));
            for t in &tensors {
                assert_eq!(st.tensor(&t.name).unwrap().data(), &bytes[t.begin..t.end]);
            }
        }
    }
}

fn reference_dtype(dtype: Dtype) -> safetensors::Dtype {
    serde_json::from_value(serde_json::Value::String(dtype.name().to_string())).unwrap()
}

/// Dtypes the reference library can write (it cannot write the F6 types).
fn writable_dtype() -> impl Strategy<Value = Dtype> {
    prop::sample::select(
        Dtype::ALL
            .iter()
            .copied()
            .filter(|d| !matches!(d, Dtype::F6_E2M3 | Dtype::F6_E3M2))
            .collect::<Vec<_>>(),
    )
}

/// Names with ASCII, escapes (quotes, backslashes, control characters),
/// non-ASCII and astral characters.
fn name() -> impl Strategy<Value = String> {
    "[a-c_.0-9\"\\\\\n\t\u{1}\u{1f}\u{7f}\u{e9}\u{2028}\u{20ac}\u{1d11e}]{0,6}"
        .prop_filter("reserved", |n| n != "__metadata__")
}

fn shape() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0u64..4, 0..4)
}

/// A random tensor set: unique names, each with a dtype, a shape and bytes.
fn tensor_set() -> impl Strategy<Value = BTreeMap<String, (Dtype, Vec<u64>, Vec<u8>)>> {
    prop::collection::btree_map(name(), (writable_dtype(), shape(), any::<u8>()), 0..6).prop_map(
        |map| {
            map.into_iter()
                .map(|(name, (dtype, mut shape, seed))| {
                    let numel: u64 = shape.iter().product();
                    if dtype.is_sub_byte() && numel % 2 == 1 {
                        shape.push(2); // F4: an even element count fills whole bytes
                    }
                    let numel: u64 = shape.iter().product();
                    let len = dtype.byte_len(numel).unwrap() as usize;
                    let data = (0..len)
                        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(31)))
                        .collect();
                    (name, (dtype, shape, data))
                })
                .collect()
        },
    )
}

fn metadata() -> impl Strategy<Value = Option<(String, String)>> {
    prop::option::of((name(), name()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn same_bytes_as_the_reference(tensors in tensor_set(), meta in metadata()) {
        let ours = serialize(
            tensors.iter().map(|(name, (dtype, shape, data))| TensorRef {
                name,
                dtype: *dtype,
                shape,
                data,
            }),
            meta.clone().map(|(k, v)| Metadata::from([(k, v)])).as_ref(),
        )
        .unwrap();

        let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
            .iter()
            .map(|(name, (dtype, shape, data))| {
                let shape = shape.iter().map(|&d| d as usize).collect();
                let view = safetensors::tensor::TensorView::new(reference_dtype(*dtype), shape, data)
                    .unwrap();
                (name.clone(), view)
            })
            .collect();
        let theirs = safetensors::serialize(views, meta.map(|(k, v)| HashMap::from([(k, v)]))).unwrap();
        prop_assert_eq!(ours, theirs);
    }
}

// ---- With this library's reader ----

use tensorfile::{FormatError, SafeTensors};

#[test]
fn read_then_write_gives_the_same_bytes() {
    for (path, bytes, _) in valid_fixtures() {
        let file = SafeTensors::from_bytes(bytes.clone()).unwrap();
        // The reader's views go straight to the writer.
        let written = serialize(file.tensors(), file.metadata()).unwrap();
        assert!(written == bytes, "{}: rewrite differs", path.display());

        for align in [Align::Bytes64, Align::Bytes4096] {
            let options = WriteOptions {
                align,
                ..Default::default()
            };
            let aligned = serialize_with(file.tensors(), file.metadata(), &options).unwrap();
            let again = SafeTensors::from_bytes(aligned.clone())
                .unwrap_or_else(|e| panic!("{}: our reader refuses: {e}", path.display()));
            let n = u64::from_le_bytes(aligned[..8].try_into().unwrap());
            assert_eq!((8 + n) % align.bytes(), 0);
            assert_eq!(again.metadata(), file.metadata());
            assert!(again
                .tensors()
                .map(|t| (t.name(), t.data()))
                .eq(file.tensors().map(|t| (t.name(), t.data()))));
            // And back to canonical.
            assert!(serialize(again.tensors(), again.metadata()).unwrap() == bytes);
        }
    }
}

/// A way to damage a valid file.
#[derive(Debug, Clone)]
enum Mutation {
    /// Set the byte at this position (modulo the length) to this value.
    Set(usize, u8),
    /// Set a header byte to a character that matters to JSON.
    HeaderChar(usize, u8),
    /// Cut the file to this length (modulo the length).
    Truncate(usize),
    /// Append bytes.
    Append(Vec<u8>),
    /// Add this to the header length field.
    Length(i64),
    /// Replace the header's last byte (padding or the closing brace).
    LastHeaderByte(u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        (
            any::<usize>(),
            prop::sample::select(b"\"\\,:{}[]0123456789-. eE\tnul".to_vec())
        )
            .prop_map(|(i, b)| Mutation::HeaderChar(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        prop::collection::vec(any::<u8>(), 1..9).prop_map(Mutation::Append),
        (-16i64..16).prop_map(Mutation::Length),
        prop::sample::select(b"\t\n\r\x0c\0 }x".to_vec()).prop_map(Mutation::LastHeaderByte),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    match mutation {
        Mutation::Set(i, b) => {
            let len = bytes.len();
            bytes[i % len] = *b;
        }
        Mutation::HeaderChar(i, b) => bytes[8 + i % n as usize] = *b,
        Mutation::Truncate(len) => bytes.truncate(len % bytes.len()),
        Mutation::Append(extra) => bytes.extend_from_slice(extra),
        Mutation::Length(delta) => {
            bytes[..8].copy_from_slice(&n.wrapping_add_signed(*delta).to_le_bytes())
        }
        Mutation::LastHeaderByte(b) => bytes[8 + n as usize - 1] = *b,
    }
}

/// The small valid fixtures (the two large ones would only slow the search),
/// read once.
fn small_fixtures() -> &'static [Vec<u8>] {
    static SMALL: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    SMALL.get_or_init(|| {
        valid_fixtures()
            .into_iter()
            .map(|(_, bytes, _)| bytes)
            .filter(|b| b.len() < 4096)
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn same_verdict_as_the_reference_on_damaged_files(
        index in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..3),
    ) {
        let fixtures = small_fixtures();
        let mut bytes = index.get(fixtures).clone();
        for m in &mutations {
            // Header edits need a header: stop once the length field is broken.
            let n = bytes.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
            if n.is_some_and(|n| n > 0 && n.saturating_add(8) <= bytes.len() as u64) {
                apply(&mut bytes, m);
            }
        }
        let ours = SafeTensors::from_bytes(bytes.clone());
        let theirs = safetensors::SafeTensors::deserialize(&bytes);
        // Where we are stricter on purpose: the format forbids duplicate keys
        // (reader rule 2); the reference keeps the last one.
        let stricter = matches!(
            &ours,
            Err(tensorfile_core::Error::Format(FormatError::DuplicateKey { .. }))
        );
        if !stricter {
            prop_assert_eq!(
                ours.is_ok(),
                theirs.is_ok(),
                "ours: {:?}\ntheirs: {:?}\nheader: {:?}",
                ours.as_ref().err(),
                theirs.as_ref().err(),
                String::from_utf8_lossy(&bytes[8.min(bytes.len())..bytes.len().min(400)])
            );
        }
    }
}
