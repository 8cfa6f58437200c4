//! Writes to a bucket against moto (`TENSORFILE_TEST_S3`, as in s3.rs):
//! uploads whole or absent, never a pending multipart upload left by an
//! error or a drop, the sweep of one left by a killed writer, and a set
//! staged by several writers published by one commit.

use crate::common;

use std::io::Write;
use std::time::Duration;

use object_store::ObjectStoreExt;
use tensorfile_core::set::{SetStage, Sharding, StagedPlan, StagedSet};
use tensorfile_core::{Dtype, TensorRef, TensorSpec, WriteOptions};
use tensorfile_remote::stage::BucketStage;
use tensorfile_remote::store::{self, locate};
use tensorfile_remote::upload::{remove_pending, Upload, UploadOptions};
use tensorfile_remote::{Problem, RemoteOptions};
use tensorfile_testkit::serve::S3Bucket;

const WAIT: Duration = Duration::from_secs(60);

fn set_env(endpoint: &str) {
    std::env::set_var("AWS_ENDPOINT_URL", endpoint);
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing-secret-key");
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::remove_var("AWS_NO_SIGN_REQUEST");
}

/// The object at `url`, `None` when it is not there.
fn get(url: &str) -> Option<Vec<u8>> {
    let located = locate(url, &RemoteOptions::default()).unwrap();
    let (s, p) = (located.store.store.clone(), located.path.clone());
    let got = store::block_on(
        async move {
            match s.get(&p).await {
                Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("{e}"),
            }
        },
        None,
    );
    got.unwrap()
}

/// Every key under `url` (a prefix), recursively.
fn keys(url: &str) -> Vec<String> {
    let located = locate(url, &RemoteOptions::default()).unwrap();
    let (s, p) = (located.store.store.clone(), located.path.clone());
    let got = store::block_on(
        async move {
            let mut out = Vec::new();
            let mut prefixes = vec![p];
            while let Some(p) = prefixes.pop() {
                let listed = s.list_with_delimiter(Some(&p)).await.unwrap();
                out.extend(listed.objects.into_iter().map(|o| o.location.to_string()));
                prefixes.extend(listed.common_prefixes);
            }
            out.sort();
            out
        },
        None,
    );
    got.unwrap()
}

/// Bytes `0, 1, 2, ...` (mod 251), `len` of them.
fn bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn parts() -> UploadOptions {
    UploadOptions::default().with_part_size(5 << 20)
}

#[test]
fn uploads_are_whole_or_absent() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = common::s3_endpoint() else {
        return;
    };
    set_env(&endpoint);
    // A bucket of this run's: the server may outlive one.
    let bucket = format!("tf-writes-{}", std::process::id());
    S3Bucket::create(&endpoint, &bucket, "testing", "testing-secret-key").unwrap();
    let remote = RemoteOptions::default();

    // One put, and a multipart upload of three parts (the last short).
    for (name, len) in [("small", 1000), ("large", (12 << 20) + 7)] {
        let url = format!("s3://{bucket}/up/{name}");
        let data = bytes(len);
        let mut upload = Upload::to_url(&url, &remote, parts().with_if_absent(true)).unwrap();
        for piece in data.chunks(1 << 20) {
            upload.write_all(piece).unwrap();
        }
        assert_eq!(upload.finish().unwrap(), len as u64);
        assert_eq!(get(&url).as_deref(), Some(&data[..]), "{url}");
        // Not replaced without asking: refused before (the check) ...
        let e = Upload::to_url(&url, &remote, parts().with_if_absent(true)).unwrap_err();
        assert_eq!(e.problem, Problem::Exists, "{e}");
        // ... and replaced when asked.
        let mut upload = Upload::to_url(&url, &remote, parts()).unwrap();
        upload.write_all(&data[..len / 2]).unwrap();
        upload.finish().unwrap();
        assert_eq!(get(&url).as_deref(), Some(&data[..len / 2]), "{url}");
    }
    // The conditional put itself refuses an object that appeared after
    // the upload began.
    let url = format!("s3://{bucket}/up/raced");
    let url = url.as_str();
    let mut upload = Upload::to_url(url, &remote, parts().with_if_absent(true)).unwrap();
    upload.write_all(b"mine").unwrap();
    let mut other = Upload::to_url(url, &remote, parts()).unwrap();
    other.write_all(b"theirs").unwrap();
    other.finish().unwrap();
    let e = upload.finish().unwrap_err();
    assert_eq!(e.problem, Problem::Exists, "{e}");
    assert_eq!(get(url).as_deref(), Some(&b"theirs"[..]));

    // A body that fails midway (the writer gives up after a part was
    // sent): dropped, the upload is aborted. No object, nothing pending.
    let url = format!("s3://{bucket}/up/failed");
    let url = url.as_str();
    let mut upload = Upload::to_url(url, &remote, parts()).unwrap();
    upload.write_all(&bytes(7 << 20)).unwrap();
    drop(upload);
    assert_eq!(get(url), None);
    assert_eq!(
        remove_pending(&format!("s3://{bucket}/up/"), WAIT).unwrap(),
        0
    );

    // A writer killed midway cannot abort (forgotten here, as a killed
    // process forgets): its upload is pending until the sweep.
    let url = format!("s3://{bucket}/up/killed");
    let url = url.as_str();
    let mut upload = Upload::to_url(url, &remote, parts()).unwrap();
    upload.write_all(&bytes(6 << 20)).unwrap();
    std::mem::forget(upload);
    assert_eq!(
        remove_pending(&format!("s3://{bucket}/up/"), WAIT).unwrap(),
        1
    );
    assert_eq!(
        remove_pending(&format!("s3://{bucket}/up/"), WAIT).unwrap(),
        0
    );
    assert_eq!(get(url), None);
}

/// Four tensors of 16 bytes, each filled with its number.
fn tensors() -> (Vec<TensorSpec>, Vec<Vec<u8>>) {
    let specs = (0..4)
        .map(|i| TensorSpec::new(format!("t{i}"), Dtype::F32, [4]))
        .collect();
    (specs, (0..4).map(|i| vec![i as u8; 16]).collect())
}

fn refs<'a>(specs: &'a [TensorSpec], data: &'a [Vec<u8>]) -> Vec<TensorRef<'a>> {
    specs
        .iter()
        .zip(data)
        .map(|(s, d)| TensorRef {
            name: &s.name,
            dtype: s.dtype,
            shape: &s.shape,
            data: d,
        })
        .collect()
}

#[test]
fn sets_staged_in_a_bucket_by_several_writers() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = common::s3_endpoint() else {
        return;
    };
    set_env(&endpoint);
    // A bucket of this run's: the server may outlive one.
    let bucket = format!("tf-sets-{}", std::process::id());
    S3Bucket::create(&endpoint, &bucket, "testing", "testing-secret-key").unwrap();
    let remote = RemoteOptions::default();
    let (specs, data) = tensors();
    let options = WriteOptions::default();
    let plan = StagedPlan::new("model", &specs, None, &Sharding::MaxSize(32), 2, &options).unwrap();
    let out = format!("s3://{bucket}/out/");
    let out = out.as_str();

    // Each writer (a process of its own in real use) stages the plan and
    // writes its parts; nothing has the set's names before the commit.
    for writer in 0..2 {
        let stage = BucketStage::new(out, &plan, &remote).unwrap();
        let set = StagedSet::with_stage(stage, plan.clone()).unwrap();
        set.write_parts_of(writer, &refs(&specs, &data), false)
            .unwrap();
    }
    let staged = keys(out);
    assert!(
        staged.iter().all(|k| k.starts_with("out/.tensorfile-set-")),
        "{staged:?}"
    );
    assert_eq!(staged.len(), 3, "{staged:?}"); // the plan and two parts
    let plans = BucketStage::find(out, "model", &remote).unwrap();
    assert_eq!(plans, std::slice::from_ref(&plan));

    let stage = BucketStage::new(out, &plan, &remote).unwrap();
    let set = StagedSet::with_stage(stage, plan.clone()).unwrap();
    let summary = set.commit(false).unwrap();
    assert_eq!(
        keys(out),
        [
            "out/model-00001-of-00002.safetensors",
            "out/model-00002-of-00002.safetensors",
            "out/model.safetensors.index.json"
        ]
    );
    assert_eq!(
        summary.index.unwrap().to_str().unwrap(),
        &format!("s3://{bucket}/out/model.safetensors.index.json")
    );
    // Byte for byte what the local stage gives.
    let dir = tempfile::tempdir().unwrap();
    let local = StagedSet::prepare(dir.path(), plan.clone()).unwrap();
    for writer in 0..2 {
        local
            .write_parts_of(writer, &refs(&specs, &data), false)
            .unwrap();
    }
    local.commit(false).unwrap();
    for name in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        assert_eq!(
            get(&format!("{out}{name}")).unwrap(),
            std::fs::read(dir.path().join(name)).unwrap(),
            "{name}"
        );
    }
    // Staging again over a published set is refused.
    let e = StagedSet::with_stage(BucketStage::new(out, &plan, &remote).unwrap(), plan.clone())
        .unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");

    // Parts over the server-side copy's limit (S3's is 5 GiB) are read
    // back and uploaded under their names: the same bytes.
    let through = format!("s3://{bucket}/through/");
    let through = through.as_str();
    for writer in 0..2 {
        let stage = BucketStage::new(through, &plan, &remote).unwrap();
        let set = StagedSet::with_stage(stage, plan.clone()).unwrap();
        set.write_parts_of(writer, &refs(&specs, &data), false)
            .unwrap();
    }
    let stage = BucketStage::new(through, &plan, &remote)
        .unwrap()
        .with_copy_limit(20);
    StagedSet::with_stage(stage, plan.clone())
        .unwrap()
        .commit(false)
        .unwrap();
    for name in [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        assert_eq!(
            get(&format!("{through}{name}")).unwrap(),
            std::fs::read(dir.path().join(name)).unwrap(),
            "{name}"
        );
    }
    assert_eq!(keys(through).len(), 3, "{:?}", keys(through));

    // Abort: a part written, a multipart upload left pending in the
    // staging prefix (a writer killed midway), then the abort leaves
    // nothing at all.
    let out = format!("s3://{bucket}/aborted/");
    let out = out.as_str();
    let stage = BucketStage::new(out, &plan, &remote).unwrap();
    let staging = stage.staging();
    let set = StagedSet::with_stage(stage, plan.clone()).unwrap();
    set.write_parts_of(0, &refs(&specs, &data), false).unwrap();
    let killed = format!("{}model-00002-of-00002.safetensors", staging.display());
    let mut upload = Upload::to_url(&killed, &remote, parts()).unwrap();
    upload.write_all(&bytes(6 << 20)).unwrap();
    std::mem::forget(upload);
    // The commit refuses the missing part; the lock is not left behind.
    let e = set.commit(false).unwrap_err();
    assert!(e.to_string().contains("has not been written"), "{e}");
    set.abort().unwrap();
    assert_eq!(keys(out), Vec::<String>::new());
    assert_eq!(remove_pending(out, WAIT).unwrap(), 0);
    assert!(set.stage().plan_text().unwrap().is_none());
}
