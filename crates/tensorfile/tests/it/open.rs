//! `tensorfile::open`, the one way in: every kind of input, local and at a
//! URL, opened as what it is.

use crate::common;

use std::fs;
use std::path::Path;

use tensorfile::set::{split, SplitOptions};
use tensorfile::{open, serialize, Dtype, Input, OpenOptions, TensorRef};
use tensorfile::{open_set, probe, InputKind as Kind};

use common::fixtures;

/// A safetensors file of three small tensors.
fn three_tensors() -> Vec<u8> {
    let data = [[1u8; 8], [2u8; 8], [3u8; 8]];
    let tensors = ["a", "b", "c"]
        .iter()
        .zip(&data)
        .map(|(name, d)| TensorRef {
            name,
            dtype: Dtype::F32,
            shape: &[2],
            data: d,
        });
    serialize(tensors, None).unwrap()
}

/// The set a kind of input opens to, or a panic naming what it opened.
fn set_of(input: Input, want: Kind) -> tensorfile_core::ShardedTensors {
    assert_eq!(input.kind(), want);
    match input {
        Input::Safetensors(set) if want == Kind::Safetensors => set,
        Input::SafetensorsSet(set) if want == Kind::SafetensorsSet => set,
        other => panic!("opened {}", other.kind()),
    }
}

#[test]
fn a_safetensors_file_is_a_set_of_one_mapped_or_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weights.safetensors");
    fs::write(&path, three_tensors()).unwrap();

    let set = set_of(
        open(&path, &OpenOptions::default()).unwrap(),
        Kind::Safetensors,
    );
    assert_eq!((set.shards().len(), set.len()), (1, 3));
    assert!(!set.is_indexed());
    // Mapped by default: views borrow the file.
    assert_eq!(set.tensor("b").unwrap().data(), &[2u8; 8]);

    // Read, not mapped: no views, the bytes are read.
    let read = OpenOptions::default().with_map(false);
    let set = set_of(open(&path, &read).unwrap(), Kind::Safetensors);
    assert!(set.tensor("b").is_err());
    assert_eq!(&*set.read_tensor("c").unwrap(), &[3u8; 8]);
    assert!(!set.shards()[0].is_mapped());
}

#[test]
fn a_model_directory_an_index_and_a_split_are_sets() {
    let bigram = fixtures().join("models").join("bigram");
    let set = set_of(
        open(&bigram, &OpenOptions::default()).unwrap(),
        Kind::SafetensorsSet,
    );
    assert_eq!(set.shards().len(), 1);

    // Split into shards of at most 8 bytes: an index and three shards.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("one.safetensors");
    fs::write(&file, three_tensors()).unwrap();
    let source = open_set(&file, &OpenOptions::default()).unwrap();
    let out = dir.path().join("split");
    let summary = split(&source, &out, &SplitOptions::new(8, "model".into()), &()).unwrap();
    let index = summary.index.unwrap();
    for input in [out.as_path(), index.as_path()] {
        let set = set_of(
            open(input, &OpenOptions::default()).unwrap(),
            Kind::SafetensorsSet,
        );
        assert_eq!(
            (set.shards().len(), set.len()),
            (3, 3),
            "{}",
            input.display()
        );
        assert_eq!(set.index_path(), Some(index.as_path()));
        assert_eq!(&*set.read_tensor("a").unwrap(), &[1u8; 8]);
    }
}

#[test]
fn pytorch_checkpoints_and_sets() {
    let pt = fixtures().join("pytorch").join("zip_module_state_dict.pt");
    let opened = open(&pt, &OpenOptions::default()).unwrap();
    assert_eq!(opened.kind(), Kind::Pytorch);
    let Input::Pytorch(ckpt) = opened else {
        unreachable!()
    };
    let names: Vec<String> = ckpt.tensors().map(|t| t.name().to_string()).collect();
    assert!(!names.is_empty());

    // A directory holding one pytorch_model.bin and no index: that file.
    let dir = tempfile::tempdir().unwrap();
    fs::copy(&pt, dir.path().join("pytorch_model.bin")).unwrap();
    assert_eq!(probe(dir.path()).unwrap().kind(), Kind::PytorchSet);
    let opened = open(dir.path(), &OpenOptions::default()).unwrap();
    assert!(matches!(&opened, Input::Pytorch(c) if c.len() == names.len()));

    // With an index mapping every tensor to it: a set.
    let map: serde_json::Map<String, serde_json::Value> = names
        .iter()
        .map(|n| (n.clone(), "pytorch_model.bin".into()))
        .collect();
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    let index_path = dir.path().join("pytorch_model.bin.index.json");
    fs::write(&index_path, index.to_string()).unwrap();
    for input in [dir.path(), index_path.as_path()] {
        let opened = open(input, &OpenOptions::default()).unwrap();
        assert_eq!(opened.kind(), Kind::PytorchSet, "{}", input.display());
        let Input::PytorchSet(set) = opened else {
            unreachable!()
        };
        assert_eq!(set.index_path(), index_path.as_path());
        assert_eq!(set.shards().len(), 1);
    }
}

#[test]
fn gguf_npz_and_npy() {
    let gguf = fixtures()
        .join("gguf")
        .join("files")
        .join("tensors_v3.gguf");
    let opened = open(&gguf, &OpenOptions::default()).unwrap();
    assert!(matches!(&opened, Input::Gguf(f) if !f.header().tensors().is_empty()));

    let npz = fixtures().join("npz").join("savez_mixed.npz");
    let opened = open(&npz, &OpenOptions::default()).unwrap();
    assert!(matches!(&opened, Input::Npz(f) if !f.arrays().is_empty()));

    let npy = fixtures().join("npz").join("dtype_f32.npy");
    let opened = open(&npy, &OpenOptions::default()).unwrap();
    assert!(matches!(&opened, Input::Npy(f) if f.arrays().len() == 1));
}

#[test]
fn probing_names_the_kind_without_opening() {
    // A checkpoint the loader refuses is still named a checkpoint: a front
    // end that takes only safetensors refuses it by what it is.
    let bad = fixtures().join("pytorch").join("hostile_unknown_opcode.pt");
    let probed = probe(&bad).unwrap();
    assert_eq!((probed.kind(), probed.url()), (Kind::Pytorch, None));
    assert!(probed.open(&OpenOptions::default()).is_err());

    let missing = Path::new("/nonexistent/model.safetensors");
    let err = open(missing, &OpenOptions::default()).unwrap_err();
    assert!(err.is_not_found_file(), "{err}");
    assert_eq!(err.path(), Some(missing));
}

#[test]
fn urls_open_through_the_given_client() {
    use tensorfile_remote::{Client, RemoteOptions};
    use tensorfile_testkit::serve::Server;

    let server = Server::start().unwrap();
    server.put("/one/weights.safetensors", three_tensors());
    server.put(
        "/model/model.safetensors",
        fs::read(fixtures().join("models/bigram/model.safetensors")).unwrap(),
    );
    let client = Client::new(RemoteOptions::default());
    let options = OpenOptions::default().with_client(client.clone());

    let file = format!("{}/one/weights.safetensors", server.url());
    let probed = probe(&file).unwrap();
    assert_eq!(
        (probed.kind(), probed.url()),
        (Kind::Safetensors, Some(file.as_str()))
    );
    let set = set_of(open(&file, &options).unwrap(), Kind::Safetensors);
    assert_eq!(&*set.read_tensor("b").unwrap(), &[2u8; 8]);

    let dir = format!("{}/model/", server.url());
    let set = set_of(open(&dir, &options).unwrap(), Kind::SafetensorsSet);
    assert_eq!(set.shards()[0].name(), "model.safetensors");
    // Every request went through the client given.
    assert!(client.stats().requests > 0);

    let gone = format!("{}/one/missing.safetensors", server.url());
    let err = open(&gone, &options).unwrap_err();
    assert!(err.is_not_found_file(), "{err}");
    assert!(err.to_string().starts_with(&gone), "{err}");
}

#[test]
fn a_single_file_keeps_its_digest_metadata_local_and_remote() {
    use tensorfile::digest::{embed_hashes, TENSOR_SHA256_KEY};
    use tensorfile_remote::{Client, RemoteOptions};
    use tensorfile_testkit::serve::Server;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hashed.safetensors");
    fs::write(&path, three_tensors()).unwrap();
    embed_hashes(&path, &tensorfile::WriteOptions::default()).unwrap();
    let digests = tensorfile::SafeTensors::open(&path)
        .unwrap()
        .metadata()
        .and_then(|m| m.get(TENSOR_SHA256_KEY).cloned())
        .expect("embedded digests");

    let server = Server::start().unwrap();
    server.put("/m/hashed.safetensors", fs::read(&path).unwrap());
    let url = format!("{}/m/hashed.safetensors", server.url());
    let options = OpenOptions::default().with_client(Client::new(RemoteOptions::default()));

    for input in [path.to_string_lossy().into_owned(), url.clone()] {
        // The set of one leaves a file's own digests out of its union...
        let set = set_of(open(&input, &options).unwrap(), Kind::Safetensors);
        assert!(!set.metadata().unwrap().contains_key(TENSOR_SHA256_KEY));
        // ...and the file itself keeps its header and metadata whole.
        let file = open(&input, &options).unwrap().into_file().unwrap();
        assert_eq!(file.path(), Some(Path::new(&input)));
        let meta = file.metadata().unwrap();
        assert_eq!(meta.get(TENSOR_SHA256_KEY), Some(&digests), "{input}");
        assert_eq!(file.header().len(), 3);
        let info = file.info("c").unwrap();
        assert_eq!(&*file.read_tensor(&info).unwrap(), &[3u8; 8]);
    }
    // A set is not a file.
    let bigram = fixtures().join("models").join("bigram");
    let opened = open(&bigram, &OpenOptions::default()).unwrap();
    assert!(opened.into_file().is_none());
}

#[test]
fn every_safetensors_constructor_names_a_bad_file() {
    use tensorfile::{Backend, FileSource, ReadOptions, SafeTensors};
    use tensorfile_core::file::Backing;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.safetensors");
    // Rule 1: a header length past the end of the file.
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    fs::write(&path, &bytes).unwrap();
    let rule = SafeTensors::from_slice(&bytes).unwrap_err().rule();
    assert!(rule.is_some());

    let load = ReadOptions::default().backend(Backend::Load);
    let named = [
        ("open", SafeTensors::open(&path).map(|_| ())),
        (
            "open_with map",
            SafeTensors::open_with(&path, &ReadOptions::default()).map(|_| ()),
        ),
        (
            "open_with load",
            SafeTensors::open_with(&path, &load).map(|_| ()),
        ),
        (
            "from_source FileSource",
            SafeTensors::from_source(FileSource::open(&path).unwrap(), &load).map(|_| ()),
        ),
    ];
    for (way, result) in named {
        let err = tensorfile::Error::from(result.unwrap_err());
        assert_eq!(err.path(), Some(path.as_path()), "{way}: {err}");
        assert_eq!(err.rule(), rule, "{way}: {err}");
        assert!(
            err.to_string().starts_with(&*path.to_string_lossy()),
            "{way}: {err}"
        );
    }
    // Bytes in memory have no file to name.
    let unnamed = [
        (
            "from_source Vec",
            SafeTensors::from_source(bytes.clone(), &ReadOptions::default()).map(|_| ()),
        ),
        (
            "from_source Backing",
            SafeTensors::from_source(Backing::Owned(bytes.clone()), &ReadOptions::default())
                .map(|_| ()),
        ),
        ("from_slice", SafeTensors::from_slice(&bytes).map(|_| ())),
    ];
    for (way, result) in unnamed {
        let err = tensorfile::Error::from(result.unwrap_err());
        assert_eq!(err.path(), None, "{way}: {err}");
        assert_eq!(err.rule(), rule, "{way}: {err}");
    }
    // A remote file names its URL.
    let server = tensorfile_testkit::serve::Server::start().unwrap();
    server.put("/bad.safetensors", bytes.clone());
    let url = format!("{}/bad.safetensors", server.url());
    let client = tensorfile_remote::Client::new(Default::default());
    let remote = tensorfile_remote::open_file(&url, &client, &ReadOptions::default());
    let err = tensorfile::Error::from(remote.unwrap_err());
    assert_eq!(err.path(), Some(Path::new(&url)), "{err}");
    assert_eq!(err.rule(), rule, "{err}");
    let err = open(&url, &OpenOptions::default().with_client(client)).unwrap_err();
    assert_eq!(err.path(), Some(Path::new(&url)), "{err}");
    assert_eq!(err.rule(), rule, "{err}");
}
