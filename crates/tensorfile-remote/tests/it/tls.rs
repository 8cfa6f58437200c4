//! Every store over HTTPS, end to end: the stand-ins behind the testkit's
//! TLS proxy ([`TlsProxy`], a certificate of a private CA), trusted
//! through `SSL_CERT_FILE`. Reads of S3 go through ureq, writes and
//! every GCS and Azure request through object_store's reqwest client:
//! both clients' roots, the CA added to them, and ring installed as
//! rustls's provider are what is tested. The GCS stand-in runs in-process;
//! S3 needs moto (`TENSORFILE_TEST_S3`) and Azure Azurite
//! (`TENSORFILE_TEST_AZURE`), each skipped with a message without it
//! (outside CI).

use crate::common;

use std::io::Write;

use tensorfile_core::ReadOptions;
use tensorfile_remote::upload::{Upload, UploadOptions};
use tensorfile_remote::{Problem, RemoteError};
use tensorfile_testkit::tls::TlsProxy;

/// Sets `SSL_CERT_FILE` to the test CA (and unsets the variables of other
/// tools, which are not read); `false`: unsets it.
fn trust_test_ca(on: bool) {
    if on {
        std::env::set_var("SSL_CERT_FILE", tensorfile_testkit::tls::ca_file());
    } else {
        std::env::remove_var("SSL_CERT_FILE");
    }
    std::env::remove_var("AWS_CA_BUNDLE");
    std::env::remove_var("REQUESTS_CA_BUNDLE");
}

/// Uploads `bytes` to `url` (object_store: one put, or a multipart upload
/// past 5 MiB), then reads the file back through the readers (`open_file`:
/// ureq for S3, object_store for GCS and Azure) and checks every tensor.
fn write_then_read(url: &str, fixture: &str) {
    let bytes = std::fs::read(common::fixtures().join(fixture)).unwrap();
    let options = UploadOptions::default().with_part_size(5 << 20);
    let mut upload = Upload::to_url(url, &common::fast(), options).unwrap();
    upload.write_all(&bytes).unwrap();
    assert_eq!(upload.finish().unwrap(), bytes.len() as u64, "{url}");
    let read = ReadOptions::default();
    let local = tensorfile_core::SafeTensors::from_source(
        tensorfile_core::FileSource::open(common::fixtures().join(fixture)).unwrap(),
        &read,
    )
    .unwrap();
    let remote = tensorfile_remote::open_file(url, &common::client(), &read).unwrap();
    for (a, b) in local.header().tensors().zip(remote.header().tensors()) {
        assert_eq!(a, b, "{url}");
        assert_eq!(
            local.read_tensor(&a).unwrap(),
            remote.read_tensor(&b).unwrap(),
            "{url}"
        );
    }
}

/// The certificate error of `e` (a library error around a remote one).
fn refused(e: &RemoteError) {
    assert!(
        matches!(&e.problem, Problem::Certificate { why, set: false, unread: None } if why == "UnknownIssuer"),
        "{e}"
    );
    assert!(e.to_string().contains("set SSL_CERT_FILE"), "{e}");
}

#[cfg(feature = "gcs")]
#[test]
fn gcs_over_https_with_a_private_ca() {
    let _env = tensorfile_testkit::env_lock();
    let server = tensorfile_testkit::gcs::GcsServer::start();
    server.create_bucket("tf-tls", false);
    let proxy = TlsProxy::in_front_of(&server.url());
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, server.service_account_key()).unwrap();
    std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &key);
    std::env::set_var("GOOGLE_BASE_URL", proxy.url());
    // Without the CA: the store's client refuses the certificate.
    trust_test_ca(false);
    let e = tensorfile_remote::open_file(
        "gs://tf-tls/none.safetensors",
        &common::client(),
        &ReadOptions::default(),
    )
    .unwrap_err();
    refused(&common::remote_core(&e));
    trust_test_ca(true);
    // A multipart upload (two parts) and a read.
    write_then_read(
        "gs://tf-tls/m/llama.safetensors",
        "valid/llama_two_layers_bf16.safetensors",
    );
    assert!(server.get("tf-tls", "m/llama.safetensors").is_some());
    for v in [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_BASE_URL",
        "SSL_CERT_FILE",
    ] {
        std::env::remove_var(v);
    }
}

#[cfg(feature = "s3-store")]
#[test]
fn s3_over_https_with_a_private_ca() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = common::s3_endpoint() else {
        return;
    };
    let bucket = format!("tf-tls-{}", std::process::id());
    tensorfile_testkit::serve::S3Bucket::create(&endpoint, &bucket, "testing", "testing-secret")
        .unwrap();
    let proxy = TlsProxy::in_front_of(&endpoint);
    std::env::set_var("AWS_ENDPOINT_URL", proxy.url());
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing-secret");
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::remove_var("AWS_NO_SIGN_REQUEST");
    // Without the CA: ureq (reads) refuses the certificate, at once.
    trust_test_ca(false);
    let url = format!("s3://{bucket}/m/llama.safetensors");
    let e =
        tensorfile_remote::open_file(&url, &common::client(), &ReadOptions::default()).unwrap_err();
    refused(&common::remote_core(&e));
    trust_test_ca(true);
    write_then_read(&url, "valid/llama_two_layers_bf16.safetensors");
    for v in ["AWS_ENDPOINT_URL", "SSL_CERT_FILE"] {
        std::env::remove_var(v);
    }
}

#[cfg(feature = "azure")]
#[test]
fn azure_over_https_with_a_private_ca() {
    let _env = tensorfile_testkit::env_lock();
    let endpoint = match std::env::var("TENSORFILE_TEST_AZURE") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_string(),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI must run the Azure tests: .ci/run starts Azurite and sets TENSORFILE_TEST_AZURE")
        }
        _ => {
            eprintln!("skipped: no Azurite (set TENSORFILE_TEST_AZURE to its blob endpoint, as .ci/run does)");
            return;
        }
    };
    tensorfile_testkit::azure::create_container(&endpoint, "tf-tls").unwrap();
    let proxy = TlsProxy::in_front_of(&endpoint);
    std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
    std::env::set_var("AZURITE_BLOB_STORAGE_URL", proxy.url());
    trust_test_ca(true);
    write_then_read(
        "az://tf-tls/m/llama.safetensors",
        "valid/llama_two_layers_bf16.safetensors",
    );
    // Without the CA: refused (a store made anew: the CA is part of what
    // a store is made with).
    trust_test_ca(false);
    let e = tensorfile_remote::upload::exists(
        "az://tf-tls/m/llama.safetensors",
        &common::fast(),
        std::time::Duration::from_secs(30),
    )
    .unwrap_err();
    refused(&e);
    for v in ["AZURE_STORAGE_USE_EMULATOR", "AZURITE_BLOB_STORAGE_URL"] {
        std::env::remove_var(v);
    }
}
