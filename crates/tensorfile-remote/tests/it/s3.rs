//! `s3://` against a real S3 implementation: moto's server, which `.ci/run`
//! starts on 127.0.0.1 and names in `TENSORFILE_TEST_S3` (its URL). It
//! answers ranges as AWS does (416 past the end, ETags), lists with
//! `ListObjectsV2` and keeps checksums; it does not check signatures
//! (signing is rusty-s3's job). Buckets are made by the test.
//!
//! Without `TENSORFILE_TEST_S3` the test says so and passes, except in CI
//! (`CI` set), where it must run.

use crate::common;

use std::sync::Arc;

use tensorfile_core::set::Want;
use tensorfile_core::{ReadOptions, SafeTensors, ShardedTensors};
use tensorfile_remote::fetch::{fetch, FetchOptions, Outcome};
use tensorfile_remote::Client;
use tensorfile_testkit::serve::S3Bucket;

use common::changed;
use common::s3_endpoint as endpoint;

/// A new bucket of moto's, made with the credentials of [`set_env`].
fn bucket(endpoint: &str, name: &str) -> TestBucket {
    TestBucket(S3Bucket::create(endpoint, name, "testing", "testing-secret-key").unwrap())
}

struct TestBucket(S3Bucket);

impl TestBucket {
    fn put(&self, key: &str, bytes: &[u8], checksum: bool) {
        self.0.put(key, bytes, checksum).unwrap();
    }
}

fn set_env(endpoint: &str) {
    // The same values from every test of this binary.
    std::env::set_var("AWS_ENDPOINT_URL", endpoint);
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing-secret-key");
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::remove_var("AWS_NO_SIGN_REQUEST");
}

#[test]
fn s3_objects_and_sets_read_as_local_ones() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = endpoint() else { return };
    set_env(&endpoint);
    let bucket = bucket(&endpoint, "tf-read");
    let root = common::fixtures();
    let options = ReadOptions::default();
    let client = common::client();
    let mut files = Vec::new();
    for dir in ["valid", "invalid"] {
        for rel in common::files_under(&root.join(dir)) {
            if rel.extension().is_some_and(|e| e == "safetensors") {
                let key = format!("{dir}/{}", rel.display());
                bucket.put(&key, &std::fs::read(root.join(&key)).unwrap(), false);
                files.push(key);
            }
        }
    }
    for key in &files {
        let url = format!("s3://tf-read/{key}");
        let local = SafeTensors::from_source(
            tensorfile_core::FileSource::open(root.join(key)).unwrap(),
            &options,
        );
        let remote = tensorfile_remote::open_file(&url, &client, &options);
        match (local, remote) {
            (Ok(l), Ok(r)) => {
                for (a, b) in l.header().tensors().zip(r.header().tensors()) {
                    assert_eq!(a, b, "{url}");
                    assert_eq!(
                        l.read_tensor(&a).unwrap(),
                        r.read_tensor(&b).unwrap(),
                        "{url}"
                    );
                }
            }
            (Err(l), Err(r)) => {
                assert_eq!(l.rule(), r.rule(), "{url}: {l} / {r}");
                assert!(r.to_string().starts_with(&url), "{r}");
            }
            (l, r) => panic!("{url}: local {:?}, remote {:?}", l.err(), r.err()),
        }
    }

    // A set: the directory (listed), or its index.
    let set_dir = root.join("real/sharded/unet_sharded_safetensors");
    for rel in common::files_under(&set_dir) {
        let bytes = std::fs::read(set_dir.join(&rel)).unwrap();
        bucket.put(&format!("unet/{}", rel.display()), &bytes, true);
    }
    let local = ShardedTensors::open_pread(&set_dir, &options).unwrap();
    let client = common::client();
    let set = tensorfile_remote::open_set("s3://tf-read/unet/", &client, &options).unwrap();
    // The listing, the index, each of the 4 shards' headers.
    assert_eq!(client.stats().requests, 1 + 1 + 4);
    let client = common::client();
    let index = "s3://tf-read/unet/diffusion_pytorch_model.safetensors.index.json";
    let by_index = tensorfile_remote::open_set(index, &client, &options).unwrap();
    assert_eq!(client.stats().requests, 1 + 4);
    assert_eq!(by_index.len(), local.len());
    let wants: Vec<Want> = local.infos().map(|(_, t)| Want::tensor(t.name)).collect();
    for ((_, info), got) in local.infos().zip(set.load(&wants, u64::MAX).unwrap()) {
        assert!(*local.read_tensor(info.name).unwrap() == got.bytes[..]);
    }

    // Errors name the object, never a signature or the secret.
    let url = "s3://tf-read/none.safetensors";
    let e = tensorfile_remote::open_file(url, &client, &options).unwrap_err();
    assert_eq!(e.to_string(), format!("{url}: not found (HTTP 404)"));
    bucket.put("empty.safetensors", b"", false);
    let e = tensorfile_remote::open_file("s3://tf-read/empty.safetensors", &client, &options)
        .unwrap_err();
    assert_eq!(e.rule(), Some(1), "{e}");
    for text in [format!("{e}"), format!("{e:?}"), format!("{set:?}")] {
        assert!(
            !text.contains("Signature") && !text.contains("testing-secret-key"),
            "{text}"
        );
    }
}

#[test]
fn s3_objects_changed_underneath_are_errors() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = endpoint() else { return };
    set_env(&endpoint);
    let bucket = bucket(&endpoint, "tf-change");
    let path = common::fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let bytes = std::fs::read(path).unwrap();
    bucket.put("m.safetensors", &bytes, false);
    let client = common::client();
    let options = ReadOptions::default();
    let url = "s3://tf-change/m.safetensors";
    let file = tensorfile_remote::open_file(url, &client, &options).unwrap();
    let last = file.header().tensors().last().unwrap();
    // Other bytes, same length: a new ETag.
    let mut other = bytes.clone();
    *other.last_mut().unwrap() ^= 1;
    bucket.put("m.safetensors", &other, false);
    let e = file.read_tensor(&last).unwrap_err();
    assert_eq!(changed(&e), "ETag", "{e}");
    // Shorter: S3 answers 416 past the new end, which says the length changed.
    let file = tensorfile_remote::open_file(url, &client, &options).unwrap();
    bucket.put("m.safetensors", &bytes[..100], false);
    let e = file.read_tensor(&last).unwrap_err();
    assert_eq!(changed(&e), "the length", "{e}");
}

#[test]
fn s3_directories_are_fetched_and_verified_by_their_checksums() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = endpoint() else { return };
    set_env(&endpoint);
    let bucket = bucket(&endpoint, "tf-fetch");
    let src = common::fixtures().join("real/mlx_lm/llama_q4");
    let files = common::files_under(&src);
    for rel in &files {
        let bytes = std::fs::read(src.join(rel)).unwrap();
        bucket.put(&format!("llama/{}", rel.display()), &bytes, true);
    }
    let dest = tempfile::tempdir().unwrap();
    let client: Arc<Client> = common::client();
    let options = FetchOptions::default().with_sync(false);
    let got = fetch("s3://tf-fetch/llama/", dest.path(), &client, &options, &()).unwrap();
    assert_eq!(got.files.len(), files.len());
    assert!(got.set.is_some());
    for f in &got.files {
        assert_eq!(f.outcome, Outcome::Fetched);
        // moto keeps the sha256 given at upload, and S3 returns it.
        assert!(f.sha256.is_some(), "{f:?}");
        assert_eq!(
            std::fs::read(&f.path).unwrap(),
            std::fs::read(src.join(&f.name)).unwrap()
        );
    }
    let again = fetch("s3://tf-fetch/llama/", dest.path(), &client, &options, &()).unwrap();
    assert!(again.files.iter().all(|f| f.outcome == Outcome::UpToDate));
}
