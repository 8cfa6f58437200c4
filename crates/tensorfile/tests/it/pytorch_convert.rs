//! PyTorch conversion round trips (`tensorfile::pytorch`): convert every
//! `ok` fixture, read the output back with the core reader, compare with
//! the manifest, and check that the output is canonical and that refused
//! conversions leave no file.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tensorfile::pytorch::{
    convert_file as convert, Checkpoint, ConvertOptions, LoadOptions, SharedPolicy,
};
use tensorfile::SafeTensors;
use tensorfile_core::writer::serialize;
use tensorfile_zip::ZipIndex;

/// `tests/fixtures/pytorch`.
fn pytorch_fixtures() -> PathBuf {
    tensorfile_testkit::fixture("pytorch")
}

fn manifest() -> serde_json::Map<String, serde_json::Value> {
    tensorfile_testkit::manifest("pytorch")["fixtures"]
        .as_object()
        .unwrap()
        .clone()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn no_sync() -> ConvertOptions {
    let mut o = ConvertOptions::default();
    o.write.sync = false;
    o
}

/// Rewriting the file's own tensors and metadata gives the same bytes.
fn assert_canonical(path: &Path) {
    let file = SafeTensors::open(path).unwrap();
    let again = serialize(file.tensors(), file.metadata()).unwrap();
    assert!(
        again == file.as_bytes(),
        "{}: not canonical",
        path.display()
    );
}

#[test]
fn ok_fixtures_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for (file, spec) in &manifest() {
        if !spec["expect"].as_str().unwrap().starts_with("ok") {
            continue;
        }
        let want = spec["tensors"].as_object().unwrap();
        for policy in [SharedPolicy::Alias, SharedPolicy::Copy] {
            let out = dir.path().join(format!("{file}.{policy:?}.safetensors"));
            let options = no_sync().with_shared(policy);
            let report = convert(pytorch_fixtures().join(file), &out, &options, &())
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            let st = SafeTensors::open(&out).unwrap();
            let meta = st.metadata().unwrap();
            assert_eq!(meta.get("format").map(String::as_str), Some("pt"));
            assert_eq!(report.tensors + report.aliases, want.len(), "{file}");
            for (name, w) in want {
                // A removed alias reads as the tensor it names.
                let stored = match st.get(name) {
                    Some(t) => t,
                    None => {
                        assert_eq!(policy, SharedPolicy::Alias, "{file}: {name} missing");
                        let kept = meta
                            .get(name)
                            .unwrap_or_else(|| panic!("{file}: {name} neither stored nor aliased"));
                        let ckpt = Checkpoint::open(pytorch_fixtures().join(file)).unwrap();
                        let order = |n: &str| ckpt.tensor(n).unwrap().pickle_order();
                        assert!(
                            order(kept) < order(name),
                            "{file}: the first name in pickle order keeps the bytes"
                        );
                        st.get(kept).unwrap()
                    }
                };
                assert_eq!(
                    stored.dtype().name(),
                    w["dtype"].as_str().unwrap(),
                    "{file} {name}"
                );
                assert_eq!(
                    sha(stored.data()),
                    w["sha256"].as_str().unwrap(),
                    "{file} {name}"
                );
            }
            if policy == SharedPolicy::Copy {
                assert_eq!(st.len(), want.len(), "{file}");
                assert_eq!(meta.len(), 1);
            }
            assert_canonical(&out);
        }
    }
}

#[test]
fn aliases_are_recorded_only_for_exact_views() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tied.safetensors");
    let report = convert(
        pytorch_fixtures().join("zip_tied.pt"),
        &out,
        &no_sync(),
        &(),
    )
    .unwrap();
    assert_eq!((report.tensors, report.aliases), (1, 1));
    let st = SafeTensors::open(&out).unwrap();
    assert_eq!(
        st.metadata()
            .unwrap()
            .get("head.weight")
            .map(String::as_str),
        Some("emb.weight")
    );

    let out = dir.path().join("views.safetensors");
    let report = convert(
        pytorch_fixtures().join("zip_views.pt"),
        &out,
        &no_sync(),
        &(),
    )
    .unwrap();
    assert_eq!((report.tensors, report.aliases), (5, 0));
}

#[test]
fn refused_conversions_leave_no_file() {
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "reject_complex128.pt",
        "evil_posix_system.pt",
        "bad_short_storage.pt",
    ] {
        let out = dir.path().join(format!("{file}.safetensors"));
        assert!(convert(pytorch_fixtures().join(file), &out, &no_sync(), &()).is_err());
        assert!(!out.exists(), "{file}");
    }
    // Sharing refused by policy.
    let out = dir.path().join("tied.safetensors");
    let options = no_sync().with_shared(SharedPolicy::Error);
    let e = convert(pytorch_fixtures().join("zip_tied.pt"), &out, &options, &()).unwrap_err();
    assert!(
        matches!(e.detail(), tensorfile::Error::Pytorch(p)
            if matches!(**p, tensorfile_pytorch::Error::Shared(_))),
        "{e}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temporary files left"
    );
}

#[test]
fn a_failure_mid_stream_leaves_no_file() {
    // A deflated storage whose data is garbage: the checkpoint opens (records
    // are inflated when read), then fails while the output is being written.
    let mut bytes = std::fs::read(pytorch_fixtures().join("ok_deflated.pt")).unwrap();
    let index = ZipIndex::parse(&bytes).unwrap();
    let e = index.get("zip_simple/data/0").unwrap().clone();
    let start = e.data_offset as usize;
    bytes[start..start + e.compressed_size as usize].fill(0xff);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("broken.pt");
    std::fs::write(&input, &bytes).unwrap();
    let out = dir.path().join("broken.safetensors");
    let err = convert(&input, &out, &no_sync(), &()).unwrap_err();
    assert!(err.to_string().contains("zip_simple/data/0"), "{err}");
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the input is left"
    );
}

#[test]
fn key_and_keep_values() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let options = no_sync().with_load(LoadOptions::default().with_key(Some("model".into())));
    convert(
        pytorch_fixtures().join("zip_train_checkpoint.pt"),
        &out,
        &options,
        &(),
    )
    .unwrap();
    let st = SafeTensors::open(&out).unwrap();
    assert!(!st.is_empty());
    assert!(st
        .names()
        .all(|n| !n.starts_with("model.") && !n.starts_with("optimizer.")));

    let out = dir.path().join("nested.safetensors");
    let options = no_sync().with_keep_values(true);
    let report = convert(
        pytorch_fixtures().join("zip_checkpoint_nested.pt"),
        &out,
        &options,
        &(),
    )
    .unwrap();
    assert_eq!(report.values, 11);
    let st = SafeTensors::open(&out).unwrap();
    let m = st.metadata().unwrap();
    assert_eq!(m.get("epoch").map(String::as_str), Some("3"));
    assert_eq!(m.get("list.2").map(String::as_str), Some("None"));
    assert_eq!(m.get("format").map(String::as_str), Some("pt"));
    assert_canonical(&out);
}

#[test]
fn progress_counts_every_byte() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.safetensors");
    let done = AtomicU64::new(0);
    let report = convert(
        pytorch_fixtures().join("legacy_transformer_sd.pt"),
        &out,
        &no_sync(),
        &|n| {
            done.fetch_add(n, Ordering::Relaxed);
        },
    )
    .unwrap();
    assert_eq!(report.tensors, 36);
    assert_eq!(done.load(Ordering::Relaxed), report.bytes);
    assert!(std::fs::metadata(&out).unwrap().len() > report.bytes);
}

#[test]
fn conversions_cast_float_tensors_on_the_way() {
    use tensorfile::cast::cast_tensor;
    use tensorfile::Dtype;
    let dir = tempfile::tempdir().unwrap();
    for (file, entry) in manifest() {
        if entry["expect"] != "ok" {
            continue;
        }
        let input = pytorch_fixtures().join(&file);
        let plain = dir.path().join("plain.safetensors");
        let cast = dir.path().join("cast.safetensors");
        convert(&input, &plain, &no_sync(), &()).unwrap();
        let options = no_sync().with_dtype(Some(Dtype::BF16));
        let report = convert(&input, &cast, &options, &()).unwrap();
        let (plain, cast) = (
            SafeTensors::open(&plain).unwrap(),
            SafeTensors::open(&cast).unwrap(),
        );
        assert_eq!(plain.metadata(), cast.metadata(), "{file}");
        let mut casts = 0;
        for p in plain.tensors() {
            let c = cast.tensor(p.name()).unwrap();
            assert_eq!(c.shape(), p.shape(), "{file}: {}", p.name());
            let floats = p.dtype().is_float() && p.dtype() != Dtype::C64;
            if floats && p.dtype() != Dtype::BF16 {
                casts += 1;
                assert_eq!(c.dtype(), Dtype::BF16, "{file}: {}", p.name());
                let expected = cast_tensor(
                    p.name(),
                    p.dtype(),
                    p.shape(),
                    p.data(),
                    Dtype::BF16,
                    Default::default(),
                )
                .unwrap();
                assert_eq!(c.data(), &expected[..], "{file}: {}", p.name());
            } else {
                assert_eq!(
                    (c.dtype(), c.data()),
                    (p.dtype(), p.data()),
                    "{file}: {}",
                    p.name()
                );
            }
        }
        assert_eq!(report.cast, casts, "{file}");
    }
}
