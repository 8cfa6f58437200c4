//! Every fixture of `tests/fixtures/pytorch/manifest.json`: `ok` files give
//! exactly the listed tensors; every other file is refused with an error
//! that says what its `expect` says.

use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tensorfile_pytorch::{Checkpoint, Error, LoadOptions};

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

/// Words the refusal of each non-`ok` fixture must contain (lowercased
/// comparison): the essence of its `expect`.
fn expected_words(file: &str) -> &'static [&'static str] {
    match file {
        "bad_dtype_conflict.pt" => &["torch.doubstorage", "not allowed"],
        "bad_duplicate_entry.pt" => &["duplicate entry", "zip_simple/data/0"],
        "bad_legacy_magic.pt" => &["magic number"],
        "bad_legacy_truncated.pt" => &["truncated"],
        "bad_missing_storage_key.pt" => &["\"9\"", "/data/9 record"],
        "bad_no_data_pkl.pt" => &["/data.pkl record"],
        "bad_numel_mismatch.pt" => &["9 elements", "72 b", "has 24 b"],
        "bad_short_storage.pt" => &["6 elements x 4 b = 24 b", "has 20 b"],
        "bad_truncated.pt" => &["central directory", "truncated"],
        "bad_two_prefixes.pt" => &["other/data/0", "single top-level directory"],
        "bad_view_out_of_bounds.pt" => &["\"b\"", "storage offset 200", "storage of 3 elements"],
        "evil_builtins_eval.pt" => &["__builtin__.eval", "not allowed"],
        "evil_posix_system.pt" => &["posix.system", "not allowed"],
        "hostile_deep_nesting.pt" => &["nesting depth"],
        "hostile_huge_string.pt" => &["binunicode", "4294967295", "3 are left"],
        "hostile_mark_underflow.pt" => &["tuple without a mark"],
        "hostile_missing_memo.pt" => &["memo id 2147483647", "never stored"],
        "hostile_no_stop.pt" => &["stop"],
        "hostile_unknown_opcode.pt" => &["opcode 0xff"],
        "odd_same_key_two_dtypes.pt" => &["storage \"0\"", "float32", "int64"],
        "reject_complex128.pt" => &["\"c\"", "complex128"],
        "reject_conj.pt" => &["\"c\"", "conj"],
        "reject_float4_packed.pt" => &["\"f4\"", "float4_e2m1fn_x2"],
        "reject_full_module.pt" => &["__main__.mynet", "not allowed"],
        "reject_neg.pt" => &["\"n\"", "neg"],
        "reject_partial_failed_save.pt" => &["data.pkl"],
        "reject_quantized.pt" => &["_rebuild_qtensor", "quantized"],
        "reject_sparse.pt" => &["_rebuild_sparse_tensor", "sparse"],
        "reject_torchscript.pt" => &["torchscript"],
        "tar_format_stub.pt" => &["tar archive"],
        "zip_protocol4.pt" => &["frame (0x95)", "weights_only=true"],
        other => panic!("no expectation written for fixture {other}"),
    }
}

#[test]
fn every_fixture_behaves_as_the_manifest_says() {
    let fixtures_dir = pytorch_fixtures();
    let manifest = manifest();
    assert_eq!(manifest.len(), 54, "the manifest lists 54 files");
    let mut ok = 0;
    for (file, spec) in &manifest {
        let expect = spec["expect"].as_str().unwrap();
        let result = Checkpoint::open(fixtures_dir.join(file));
        if expect.starts_with("ok") {
            ok += 1;
            let ckpt = result.unwrap_or_else(|e| panic!("{file}: {e}"));
            let want = spec["tensors"].as_object().unwrap();
            let names: Vec<&str> = ckpt.tensors().map(|t| t.name()).collect();
            let mut want_names: Vec<&str> = want.keys().map(String::as_str).collect();
            want_names.sort();
            assert_eq!(names, want_names, "{file}: names");
            for t in ckpt.tensors() {
                let w = &want[t.name()];
                assert_eq!(
                    t.dtype().name(),
                    w["dtype"].as_str().unwrap(),
                    "{file} {}",
                    t.name()
                );
                let shape: Vec<u64> = w["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .collect();
                assert_eq!(t.shape(), &shape[..], "{file} {}", t.name());
                let bytes = t.bytes().unwrap();
                assert_eq!(
                    bytes.len() as u64,
                    w["nbytes"].as_u64().unwrap(),
                    "{file} {}",
                    t.name()
                );
                assert_eq!(t.nbytes(), bytes.len() as u64);
                assert_eq!(
                    hex::encode(Sha256::digest(&bytes)),
                    w["sha256"].as_str().unwrap(),
                    "{file} {}: sha256",
                    t.name()
                );
            }
        } else {
            let err = match result {
                Ok(c) => panic!("{file}: accepted ({} tensors), expected: {expect}", c.len()),
                Err(e) => e.to_string(),
            };
            assert!(!err.contains('\n'), "{file}: one-line error: {err}");
            let lower = err.to_lowercase();
            for word in expected_words(file) {
                assert!(
                    lower.contains(word),
                    "{file}: error {err:?} lacks {word:?} (expect: {expect})"
                );
            }
        }
    }
    // 24 files torch.save wrote; zip_protocol4.pt is refused as torch refuses it.
    assert_eq!(ok, 23);
}

#[test]
fn zero_copy_where_possible() {
    let ckpt = Checkpoint::open(pytorch_fixtures().join("zip_views.pt")).unwrap();
    let zc = |n: &str| ckpt.tensor(n).unwrap().is_zero_copy();
    assert!(zc("full") && zc("row") && zc("tail"));
    assert!(!zc("col") && !zc("t"));
    // Read by range from a file opened with positional reads; borrowed
    // from a map.
    assert!(matches!(
        ckpt.tensor("tail").unwrap().bytes().unwrap(),
        std::borrow::Cow::Owned(_)
    ));
    let mapped = Checkpoint::open_mapped(
        pytorch_fixtures().join("zip_views.pt"),
        &LoadOptions::default(),
    )
    .unwrap();
    assert!(matches!(
        mapped.tensor("tail").unwrap().bytes().unwrap(),
        std::borrow::Cow::Borrowed(_)
    ));
    // Deflated and big-endian storages cannot be borrowed.
    let d = Checkpoint::open(pytorch_fixtures().join("ok_deflated.pt")).unwrap();
    assert!(!d.tensor("a").unwrap().is_zero_copy());
    let b = Checkpoint::open(pytorch_fixtures().join("ok_big_endian.pt")).unwrap();
    assert!(b.is_big_endian() && !b.tensor("a").unwrap().is_zero_copy());
}

/// Every `ok` fixture gives the same bytes read with positional reads, from
/// a map, and in pieces of a few sizes (views with gaps, transposes,
/// expansions, deflated and big-endian records included).
#[test]
fn read_mapped_and_pieces_agree() {
    use tensorfile_core::TensorData;
    let mut checked = 0;
    for (file, spec) in &manifest() {
        if !spec["expect"].as_str().unwrap().starts_with("ok") {
            continue;
        }
        let read = Checkpoint::open(pytorch_fixtures().join(file)).unwrap();
        let mapped =
            Checkpoint::open_mapped(pytorch_fixtures().join(file), &LoadOptions::default())
                .unwrap();
        for (t, m) in read.tensors().zip(mapped.tensors()) {
            let whole = t.bytes().unwrap();
            assert!(whole == m.bytes().unwrap(), "{file} {}", t.name());
            for piece in [1usize, 7, 64, 4096] {
                let mut joined = Vec::new();
                t.for_each_piece(piece, |p| -> Result<(), tensorfile_pytorch::Error> {
                    joined.extend_from_slice(p);
                    Ok(())
                })
                .unwrap();
                assert!(joined == *whole, "{file} {} in pieces of {piece}", t.name());
            }
            let mut produced = vec![0u8; whole.len()];
            t.produce(&mut |at, p| {
                produced[at as usize..at as usize + p.len()].copy_from_slice(p);
                Ok::<(), tensorfile_pytorch::Error>(())
            })
            .unwrap();
            assert!(produced == *whole, "{file} {}: produce", t.name());
            assert_eq!(
                TensorData::<tensorfile_pytorch::Error>::seekable(&t),
                t.is_zero_copy()
            );
            if whole.len() > 3 {
                let mut mid = vec![0u8; whole.len() - 3];
                TensorData::<tensorfile_pytorch::Error>::read_at(&t, 2, &mut mid).unwrap();
                assert!(
                    mid == whole[2..whole.len() - 1],
                    "{file} {}: read_at",
                    t.name()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} tensors");
}

#[test]
fn shared_objects_and_storages() {
    let ckpt = Checkpoint::open(pytorch_fixtures().join("zip_same_object.pt")).unwrap();
    let (a, b) = (ckpt.tensor("a").unwrap(), ckpt.tensor("b").unwrap());
    assert_eq!(a.object_index(), b.object_index());
    assert_eq!(a.view_key(), b.view_key());
    let ckpt = Checkpoint::open(pytorch_fixtures().join("zip_tied.pt")).unwrap();
    let (a, b) = (
        ckpt.tensor("emb.weight").unwrap(),
        ckpt.tensor("head.weight").unwrap(),
    );
    assert_eq!(a.view_key(), b.view_key());
    let ckpt = Checkpoint::open(pytorch_fixtures().join("zip_views.pt")).unwrap();
    let (f, t) = (ckpt.tensor("full").unwrap(), ckpt.tensor("tail").unwrap());
    assert_eq!(f.storage_index(), t.storage_index());
    assert_ne!(f.view_key(), t.view_key());
}

#[test]
fn key_and_name_options() {
    let path = pytorch_fixtures().join("zip_train_checkpoint.pt");
    let all = Checkpoint::open(&path).unwrap();
    let opts = LoadOptions::default().with_key(Some("model".into()));
    let model = Checkpoint::open_with(&path, &opts).unwrap();
    let model_names: Vec<String> = model.tensors().map(|t| t.name().to_string()).collect();
    let prefixed: Vec<String> = all
        .tensors()
        .filter_map(|t| t.name().strip_prefix("model.").map(str::to_string))
        .collect();
    assert_eq!(model_names, prefixed);
    assert!(!model_names.is_empty());
    assert!(all.values().iter().any(|(k, v)| k == "epoch" && v == "1"));

    // A dotted key reaches into nested dicts; a tensor key names it "".
    let opts = LoadOptions::default()
        .with_key(Some("state_dict.0.weight".into()))
        .with_name(Some("w".into()));
    let one =
        Checkpoint::open_with(pytorch_fixtures().join("zip_checkpoint_nested.pt"), &opts).unwrap();
    assert_eq!(one.tensors().map(|t| t.name()).collect::<Vec<_>>(), ["w"]);

    let missing = LoadOptions::default().with_key(Some("nope".into()));
    let e = Checkpoint::open_with(&path, &missing)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no entry named \"nope\""), "{e}");

    // A bare tensor is "" unless named.
    let bare = pytorch_fixtures().join("zip_bare_tensor.pt");
    let named = LoadOptions::default().with_name(Some("x".into()));
    assert_eq!(
        Checkpoint::open_with(&bare, &named)
            .unwrap()
            .tensor("x")
            .unwrap()
            .shape(),
        [2, 2]
    );
    let e = Checkpoint::open_with(pytorch_fixtures().join("zip_simple.pt"), &named).unwrap_err();
    // Error::Structure covers every flattening refusal: the message says which.
    assert!(matches!(e, Error::Structure(_)), "{e}");
    assert!(e.to_string().contains("not a tensor"), "{e}");
}

#[test]
fn values_are_rendered() {
    let ckpt = Checkpoint::open(pytorch_fixtures().join("zip_checkpoint_nested.pt")).unwrap();
    let v: std::collections::HashMap<&str, &str> = ckpt
        .values()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(v["epoch"], "3");
    assert_eq!(v["lr"], "0.1");
    assert_eq!(v["name"], "x");
    assert_eq!(v["list.2"], "None");
    assert_eq!(v["list.3"], "True");
    assert_eq!(v["tup.1"], "2");
    assert_eq!(v["big"], "1099511627776");
    assert_eq!(v["neg"], "-5");
}

#[test]
fn from_bytes_matches_open() {
    let path = pytorch_fixtures().join("legacy_transformer_sd.pt");
    let a = Checkpoint::open(&path).unwrap();
    let b = Checkpoint::from_bytes(std::fs::read(&path).unwrap(), &LoadOptions::default()).unwrap();
    assert_eq!(a.len(), b.len());
    for (x, y) in a.tensors().zip(b.tensors()) {
        assert_eq!(x.name(), y.name());
        assert_eq!(x.bytes().unwrap(), y.bytes().unwrap());
    }
}

#[test]
fn sharing_policies() {
    use tensorfile_pytorch::select as plan;
    use tensorfile_pytorch::SharedPolicy;
    let names = |p: &tensorfile_pytorch::Selection| {
        p.write
            .iter()
            .map(|t| t.name().to_string())
            .collect::<Vec<_>>()
    };

    let tied = Checkpoint::open(pytorch_fixtures().join("zip_tied.pt")).unwrap();
    let p = plan(&tied, SharedPolicy::Alias).unwrap();
    assert_eq!(names(&p), ["emb.weight"]);
    assert_eq!(
        p.aliases,
        [("head.weight".to_string(), "emb.weight".to_string())]
    );
    assert_eq!(
        names(&plan(&tied, SharedPolicy::Copy).unwrap()),
        ["emb.weight", "head.weight"]
    );
    let e = plan(&tied, SharedPolicy::Error).unwrap_err().to_string();
    assert!(
        e.contains("\"emb.weight\" and \"head.weight\" share storage"),
        "{e}"
    );

    // Different views of one storage each keep their bytes.
    let views = Checkpoint::open(pytorch_fixtures().join("zip_views.pt")).unwrap();
    let p = plan(&views, SharedPolicy::Alias).unwrap();
    assert_eq!(names(&p), ["col", "full", "row", "t", "tail"]);
    assert!(p.aliases.is_empty());
    assert!(plan(&views, SharedPolicy::Error).is_err());

    // The same object under two names is an exact alias.
    let same = Checkpoint::open(pytorch_fixtures().join("zip_same_object.pt")).unwrap();
    let p = plan(&same, SharedPolicy::Alias).unwrap();
    assert_eq!(p.aliases, [("b".to_string(), "a".to_string())]);

    // Separate storages with equal bytes are not sharing.
    let state = Checkpoint::open(pytorch_fixtures().join("zip_with_state.pt")).unwrap();
    assert_eq!(
        names(&plan(&state, SharedPolicy::Error).unwrap()),
        ["p", "t"]
    );
}

#[test]
fn sniffing_tells_pytorch_from_safetensors() {
    use tensorfile_pytorch::file_looks_like_pytorch;
    for (file, spec) in &manifest() {
        let path = pytorch_fixtures().join(file);
        let looks = file_looks_like_pytorch(&path).unwrap();
        // Every torch.save output and the tar stub look like PyTorch.
        if spec["expect"].as_str().unwrap().starts_with("ok") || file.starts_with("tar") {
            assert!(looks, "{file}");
        }
    }
    let valid = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/valid"
    ));
    for entry in std::fs::read_dir(valid).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            assert!(
                !file_looks_like_pytorch(&path).unwrap(),
                "{}",
                path.display()
            );
        }
    }
}
