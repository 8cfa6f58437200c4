//! `gs://` against the GCS stand-in of the testkit
//! ([`tensorfile_testkit::gcs`]), started in-process by each test on
//! 127.0.0.1: reads equal the local fixtures, listings (paged), a missing
//! object, an object changed mid-read, and the credentials: a
//! service-account key file (its self-signed JWT checked by the
//! stand-in), the metadata server, and anonymous requests.

use crate::common;

use std::sync::Arc;

use object_store::ObjectStoreExt;
use tensorfile_core::{ReadOptions, SafeTensors};
use tensorfile_remote::creds::Chain;
use tensorfile_remote::store::{self, Store, StoreUrl};
use tensorfile_remote::{Problem, RemoteError};
use tensorfile_testkit::gcs::{Auth, GcsServer};

/// The process's environment points `gs://` at `server` (as Google's
/// client libraries are pointed at an emulator: anonymous requests).
fn set_env(server: &GcsServer) {
    std::env::set_var("STORAGE_EMULATOR_HOST", server.host());
}

fn unset_env() {
    std::env::remove_var("STORAGE_EMULATOR_HOST");
}

/// Reads `range` of `url` through a store configured by `vars` alone.
fn read_with(
    url: &str,
    vars: Vec<(&'static str, String)>,
    range: std::ops::Range<u64>,
) -> Result<Vec<u8>, RemoteError> {
    let env = Chain::with_vars(move |n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()));
    let url = StoreUrl::parse(url).unwrap();
    let s = Store::with_env(&url, &common::fast(), &env)?;
    let inner: Arc<dyn object_store::ObjectStore> = s.store.clone();
    let path = url.path().unwrap();
    store::block_on(async move { inner.get_range(&path, range).await }, None)
        .unwrap()
        .map(|b| b.to_vec())
        .map_err(|e| store::error(&url.display(), &s.denied_hint, e))
}

fn auths(server: &GcsServer, method: &str) -> Vec<Auth> {
    server
        .seen()
        .into_iter()
        .filter(|s| s.method == method && !s.target.starts_with("/computeMetadata/"))
        .map(|s| s.auth)
        .collect()
}

#[test]
fn gcs_objects_and_sets_read_as_local_ones() {
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-read", true);
    set_env(&server);
    let root = common::fixtures();
    let options = ReadOptions::default();
    let client = common::client();
    let names = [
        "every_dtype.safetensors",
        "llama_two_layers_bf16.safetensors",
        "minimal_bf16.safetensors",
    ];
    for name in names {
        let bytes = std::fs::read(root.join("valid").join(name)).unwrap();
        server.put("tf-read", &format!("valid/{name}"), &bytes);
    }
    let rel = "valid/every_dtype.safetensors";
    let url = format!("gs://tf-read/{rel}");
    let local = SafeTensors::from_source(
        tensorfile_core::FileSource::open(root.join(rel)).unwrap(),
        &options,
    )
    .unwrap();
    let remote = tensorfile_remote::open_file(&url, &client, &options).unwrap();
    assert_eq!(
        local.header().tensors().count(),
        remote.header().tensors().count()
    );
    for (a, b) in local.header().tensors().zip(remote.header().tensors()) {
        assert_eq!(a, b, "{url}");
        assert_eq!(
            local.read_tensor(&a).unwrap(),
            remote.read_tensor(&b).unwrap()
        );
    }
    // A directory, listed in pages of two: every file, with its size.
    server.set_page_size(2);
    let dir = tensorfile_remote::dir_of("gs://tf-read/valid/", &client).unwrap();
    let mut listed: Vec<(String, u64)> = dir
        .list()
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|l| (l.name, l.size))
        .collect();
    listed.sort();
    let mut want: Vec<(String, u64)> = names
        .iter()
        .map(|n| {
            let len = std::fs::metadata(root.join("valid").join(n)).unwrap().len();
            (n.to_string(), len)
        })
        .collect();
    want.sort();
    assert_eq!(listed, want);
    assert!(
        server
            .seen()
            .iter()
            .any(|s| s.target.contains("continuation-token")),
        "the listing took more than one page"
    );
    // A missing object: a typed error naming the URL.
    let e = tensorfile_remote::open_file("gs://tf-read/valid/none.safetensors", &client, &options)
        .unwrap_err();
    let core = common::remote_core(&e);
    assert_eq!(core.problem, Problem::NotFound, "{e}");
    assert!(
        e.to_string()
            .contains("gs://tf-read/valid/none.safetensors"),
        "{e}"
    );
    // The emulator's variable: every request anonymous.
    assert!(auths(&server, "GET").iter().all(|a| *a == Auth::Anonymous));
    unset_env();
}

#[test]
fn a_gcs_object_changed_mid_read_is_an_error() {
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-change", true);
    set_env(&server);
    // Longer than the first read, so that its last tensor takes another
    // request.
    let path = common::fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let bytes = std::fs::read(path).unwrap();
    server.put("tf-change", "m.safetensors", &bytes);
    let client = common::client();
    let url = "gs://tf-change/m.safetensors";
    let file = tensorfile_remote::open_file(url, &client, &ReadOptions::default()).unwrap();
    let last = file.header().tensors().last().unwrap();
    // Other bytes, same length: a new ETag and generation.
    let mut other = bytes.clone();
    let end = other.len() - 1;
    other[end] ^= 1;
    server.put("tf-change", "m.safetensors", &other);
    let e = file.read_tensor(&last).unwrap_err();
    assert_eq!(common::changed(&e), "ETag", "{e}");
    unset_env();
}

#[test]
fn a_service_account_key_file_signs_its_requests() {
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-private", false);
    server.put("tf-private", "k.bin", b"0123456789");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, server.service_account_key()).unwrap();
    let got = read_with(
        "gs://tf-private/k.bin",
        vec![
            ("GOOGLE_APPLICATION_CREDENTIALS", key.display().to_string()),
            ("GOOGLE_BASE_URL", server.url()),
        ],
        2..5,
    )
    .unwrap();
    assert_eq!(got, b"234");
    assert_eq!(auths(&server, "GET"), vec![Auth::SelfSignedJwt]);
    // The same bucket without credentials (and no metadata server):
    // refused, and the error says the request was anonymous.
    server.set_metadata(false);
    let e = read_with(
        "gs://tf-private/k.bin",
        vec![
            ("GOOGLE_BASE_URL", server.url()),
            ("GCE_METADATA_HOST", server.host()),
        ],
        2..5,
    )
    .unwrap_err();
    assert!(
        matches!(e.problem, Problem::Denied { status: 401, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("anonymous"), "{e}");
    assert!(e.to_string().contains("gs://tf-private/k.bin"), "{e}");
}

#[test]
fn gclouds_well_known_file_and_an_inline_key_sign_too() {
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-adc", false);
    server.put("tf-adc", "k.bin", b"0123456789");
    server.set_metadata(false);
    // `gcloud auth application-default login`'s place: CLOUDSDK_CONFIG,
    // else ~/.config/gcloud (HOME).
    let home = tempfile::tempdir().unwrap();
    let gcloud = home.path().join(".config/gcloud");
    std::fs::create_dir_all(&gcloud).unwrap();
    std::fs::write(
        gcloud.join("application_default_credentials.json"),
        server.service_account_key(),
    )
    .unwrap();
    let base = ("GOOGLE_BASE_URL", server.url());
    let metadata = ("GCE_METADATA_HOST", server.host());
    for place in [
        ("CLOUDSDK_CONFIG", gcloud.display().to_string()),
        ("HOME", home.path().display().to_string()),
        // The key itself in a variable.
        ("GOOGLE_SERVICE_ACCOUNT_KEY", server.service_account_key()),
    ] {
        server.clear_seen();
        let name = place.0;
        let got = read_with(
            "gs://tf-adc/k.bin",
            vec![place, base.clone(), metadata.clone()],
            0..4,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, b"0123", "{name}");
        assert_eq!(auths(&server, "GET"), vec![Auth::SelfSignedJwt], "{name}");
    }
    // An empty CLOUDSDK_CONFIG directory: no credentials, refused.
    let empty = tempfile::tempdir().unwrap();
    let e = read_with(
        "gs://tf-adc/k.bin",
        vec![
            ("CLOUDSDK_CONFIG", empty.path().display().to_string()),
            base,
            metadata,
        ],
        0..4,
    )
    .unwrap_err();
    assert!(e.to_string().contains("anonymous"), "{e}");
}

#[test]
fn the_metadata_server_gives_the_token() {
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-gce", false);
    server.put("tf-gce", "k.bin", b"0123456789");
    // object_store asks the metadata server named in the process's
    // environment; our probe, the one in the chain's.
    std::env::set_var("GCE_METADATA_HOST", server.host());
    let got = read_with(
        "gs://tf-gce/k.bin",
        vec![
            ("GOOGLE_BASE_URL", server.url()),
            ("GCE_METADATA_HOST", server.host()),
        ],
        0..4,
    );
    std::env::remove_var("GCE_METADATA_HOST");
    assert_eq!(got.unwrap(), b"0123");
    assert_eq!(auths(&server, "GET"), vec![Auth::MetadataToken]);
    let seen = server.seen();
    assert!(
        seen.iter()
            .any(|s| s.target == "/computeMetadata/v1/" && s.status == 200),
        "{seen:?}"
    );
}

#[test]
fn a_public_bucket_reads_anonymously_without_a_metadata_server() {
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.set_metadata(false);
    server.create_bucket("tf-public", true);
    server.put("tf-public", "k.bin", b"0123456789");
    let got = read_with(
        "gs://tf-public/k.bin",
        vec![
            ("GOOGLE_BASE_URL", server.url()),
            ("GCE_METADATA_HOST", server.host()),
        ],
        5..10,
    )
    .unwrap();
    assert_eq!(got, b"56789");
    assert_eq!(auths(&server, "GET"), vec![Auth::Anonymous]);
}

/// What writes to GCS will ask of the stand-in, through object_store's
/// client as our store layer makes it: a put, a multipart upload
/// completed and one aborted (no pending upload left), a copy, a
/// conditional put refused, a delete.
#[test]
fn object_store_writes_land_in_the_stand_in() {
    use object_store::{MultipartUpload, PutMode, PutOptions};
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-write", false);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, server.service_account_key()).unwrap();
    let vars = [
        ("GOOGLE_APPLICATION_CREDENTIALS", key.display().to_string()),
        ("GOOGLE_BASE_URL", server.url()),
    ];
    let env = Chain::with_vars(move |n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()));
    let url = StoreUrl::parse("gs://tf-write/").unwrap();
    let s = Store::with_env(&url, &common::fast(), &env).unwrap();
    let os: Arc<dyn object_store::ObjectStore> = s.store.clone();
    let run = |f: std::pin::Pin<
        Box<dyn std::future::Future<Output = object_store::Result<()>> + Send>,
    >| { store::block_on(f, None).unwrap() };
    let p = |k: &str| object_store::path::Path::from(k);
    // A put.
    let o = os.clone();
    run(Box::pin(async move {
        o.put(&p("a.bin"), b"hello".to_vec().into())
            .await
            .map(|_| ())
    }))
    .unwrap();
    assert_eq!(server.get("tf-write", "a.bin").unwrap(), b"hello");
    // A multipart upload: two parts, in order.
    let o = os.clone();
    let (one, two) = (vec![1u8; 5 << 20], vec![2u8; 1000]);
    let whole: Vec<u8> = one.iter().chain(two.iter()).copied().collect();
    run(Box::pin(async move {
        let mut up = o.put_multipart(&p("m.bin")).await?;
        up.put_part(one.into()).await?;
        up.put_part(two.into()).await?;
        up.complete().await.map(|_| ())
    }))
    .unwrap();
    assert_eq!(server.get("tf-write", "m.bin").unwrap(), whole);
    // One aborted: no object, no pending upload.
    let o = os.clone();
    run(Box::pin(async move {
        let mut up = o.put_multipart(&p("gone.bin")).await?;
        up.put_part(vec![3u8; 10].into()).await?;
        up.abort().await
    }))
    .unwrap();
    assert!(server.get("tf-write", "gone.bin").is_none());
    assert!(server.pending_uploads("tf-write").is_empty());
    // A copy, a put that must create refused, a delete.
    let o = os.clone();
    run(Box::pin(
        async move { o.copy(&p("a.bin"), &p("b.bin")).await },
    ))
    .unwrap();
    assert_eq!(server.get("tf-write", "b.bin").unwrap(), b"hello");
    let o = os.clone();
    let e = run(Box::pin(async move {
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        o.put_opts(&p("b.bin"), b"x".to_vec().into(), create)
            .await
            .map(|_| ())
    }))
    .unwrap_err();
    assert!(
        matches!(e, object_store::Error::AlreadyExists { .. }),
        "{e}"
    );
    let o = os.clone();
    run(Box::pin(async move { o.delete(&p("a.bin")).await })).unwrap();
    assert_eq!(server.keys("tf-write"), vec!["b.bin", "m.bin"]);
    // Every request carried the service account's JWT.
    assert!(server.seen().iter().all(|s| s.auth == Auth::SelfSignedJwt));
}

/// A multipart upload neither completed nor aborted is listed as pending,
/// by the stand-in and by the XML API's `GET /BUCKET?uploads`.
#[test]
fn a_pending_upload_is_listed() {
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-pending", true);
    set_env(&server);
    let located = store::locate("gs://tf-pending/left.bin", &common::fast()).unwrap();
    let os = located.store.store.clone();
    store::block_on(
        async move {
            use object_store::MultipartUpload;
            let mut up = os.put_multipart(&located.path).await?;
            up.put_part(object_store::PutPayload::from(vec![1u8; 10]))
                .await?;
            // Dropped unfinished.
            Ok::<(), object_store::Error>(())
        },
        None,
    )
    .unwrap()
    .unwrap();
    unset_env();
    let pending = server.pending_uploads("tf-pending");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].0, "left.bin");
    let mut answer = ureq::get(format!("{}/tf-pending?uploads", server.url()))
        .call()
        .unwrap();
    let xml = answer.body_mut().read_to_string().unwrap();
    assert!(
        xml.contains("<Key>left.bin</Key>") && xml.contains(&pending[0].1),
        "{xml}"
    );
    assert!(server.get("tf-pending", "left.bin").is_none());
}

/// Uploads left pending by writers that could not abort (forgotten here,
/// as a killed process forgets) are listed and aborted by
/// `remove_pending`, with the store's own token, page by page; one outside
/// the prefix stays.
#[test]
fn pending_uploads_are_swept_under_the_prefix() {
    use std::io::Write;
    use tensorfile_remote::upload::{remove_pending, Upload, UploadOptions};
    let _env = tensorfile_testkit::env_lock();
    let server = GcsServer::start();
    server.create_bucket("tf-sweep", false);
    server.set_page_size(1);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, server.service_account_key()).unwrap();
    std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &key);
    std::env::set_var("GOOGLE_BASE_URL", server.url());
    let remote = tensorfile_remote::RemoteOptions::default();
    let options = UploadOptions::default().with_part_size(5 << 20);
    for name in [
        "m/a b+c.safetensors",
        "m/sub/d.safetensors",
        "mx/e",
        "other/f",
    ] {
        let mut upload =
            Upload::to_url(&format!("gs://tf-sweep/{name}"), &remote, options.clone()).unwrap();
        upload.write_all(&vec![7u8; (5 << 20) + 1]).unwrap();
        std::mem::forget(upload);
    }
    let keys = |server: &GcsServer| {
        let mut k: Vec<String> = server
            .pending_uploads("tf-sweep")
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys(&server).len(), 4);
    server.clear_seen();
    let wait = std::time::Duration::from_secs(30);
    assert_eq!(remove_pending("gs://tf-sweep/m/", wait).unwrap(), 2);
    assert_eq!(keys(&server), ["mx/e", "other/f"]);
    // Signed with the key file's token, the listing paged by its markers.
    let seen = server.seen();
    assert!(
        seen.iter().all(|s| s.auth == Auth::SelfSignedJwt),
        "{seen:?}"
    );
    let listings = seen.iter().filter(|s| s.target.contains("uploads")).count();
    assert!(listings >= 2, "{seen:?}");
    assert_eq!(remove_pending("gs://tf-sweep/m/", wait).unwrap(), 0);
    // A prefix that is not a directory takes every key beginning with it.
    assert_eq!(remove_pending("gs://tf-sweep/m", wait).unwrap(), 1);
    assert_eq!(keys(&server), ["other/f"]);
    assert!(server.keys("tf-sweep").is_empty());
    // Refused without credentials: an error naming the prefix.
    std::env::remove_var("GOOGLE_APPLICATION_CREDENTIALS");
    server.set_metadata(false);
    std::env::set_var("GCE_METADATA_HOST", server.host());
    let e = remove_pending("gs://tf-sweep/other/", wait).unwrap_err();
    assert!(
        matches!(e.problem, Problem::Denied { status: 401, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("gs://tf-sweep/other/"), "{e}");
    std::env::remove_var("GCE_METADATA_HOST");
    std::env::remove_var("GOOGLE_BASE_URL");
    assert_eq!(keys(&server), ["other/f"]);
}
