//! Anonymous `s3://` access for public buckets, against moto's server
//! (`TENSORFILE_TEST_S3`), which enforces ACLs on unsigned requests as AWS
//! does: with no credentials in the environment, or with
//! `AWS_NO_SIGN_REQUEST=true` whatever credentials are there, requests go
//! unsigned, so a public object and a public bucket's listing read, and a
//! private object is refused with a 403 that says credentials are needed
//! (moto does not refuse anonymous listings of private buckets, so that is
//! not checked).
//! With credentials, the same private object reads (the requests were
//! signed).
//!
//! A test binary of its own: it changes the process's environment, which
//! the tests of another binary (s3.rs) set differently.

use crate::common;

use tensorfile_core::{ReadOptions, SafeTensors};
use tensorfile_testkit::serve::S3Bucket;

const KEY: &str = "testing";
const SECRET: &str = "testing-secret-key";

fn credentials(on: bool) {
    if on {
        std::env::set_var("AWS_ACCESS_KEY_ID", KEY);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET);
    } else {
        std::env::remove_var("AWS_ACCESS_KEY_ID");
        std::env::remove_var("AWS_SECRET_ACCESS_KEY");
    }
    std::env::remove_var("AWS_SESSION_TOKEN");
}

#[test]
fn public_buckets_are_read_without_credentials() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = common::s3_endpoint() else {
        return;
    };
    std::env::set_var("AWS_ENDPOINT_URL", &endpoint);
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::remove_var("AWS_NO_SIGN_REQUEST");
    // No other source of the credential chain: no shared files, no web
    // identity or container, the metadata service off.
    let none = tempfile::tempdir().unwrap();
    std::env::set_var("AWS_CONFIG_FILE", none.path().join("config"));
    std::env::set_var(
        "AWS_SHARED_CREDENTIALS_FILE",
        none.path().join("credentials"),
    );
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    for v in [
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        std::env::remove_var(v);
    }
    let bucket = S3Bucket::create_public(&endpoint, "tf-public", KEY, SECRET).unwrap();
    let path = common::fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    bucket.put_public("m/model.safetensors", &bytes).unwrap();
    // moto lets anyone read any object of a public-read bucket: the private
    // object is in a private bucket.
    let private = S3Bucket::create(&endpoint, "tf-private", KEY, SECRET).unwrap();
    private.put("private.safetensors", &bytes, false).unwrap();
    let local = SafeTensors::from_source(
        tensorfile_core::FileSource::open(&path).unwrap(),
        &Default::default(),
    )
    .unwrap();
    let options = ReadOptions::default();

    // Unsigned: no credentials at all, then credentials with
    // AWS_NO_SIGN_REQUEST=true.
    for (creds, no_sign) in [(false, None), (true, Some("true")), (false, Some("TRUE"))] {
        credentials(creds);
        match no_sign {
            Some(v) => std::env::set_var("AWS_NO_SIGN_REQUEST", v),
            None => std::env::remove_var("AWS_NO_SIGN_REQUEST"),
        }
        let case = format!("credentials {creds}, AWS_NO_SIGN_REQUEST {no_sign:?}");
        let client = common::client();
        let file =
            tensorfile_remote::open_file("s3://tf-public/m/model.safetensors", &client, &options)
                .unwrap_or_else(|e| panic!("{case}: {e}"));
        for (a, b) in local.header().tensors().zip(file.header().tensors()) {
            assert_eq!(a, b, "{case}");
            assert_eq!(
                local.read_tensor(&a).unwrap(),
                file.read_tensor(&b).unwrap(),
                "{case}"
            );
        }
        // A public bucket's listing: the directory opens as a set.
        let set = tensorfile_remote::open_set("s3://tf-public/m/", &client, &options)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(set.len(), local.header().len(), "{case}");
        // A private object is refused, and the error says why.
        let e =
            tensorfile_remote::open_file("s3://tf-private/private.safetensors", &client, &options)
                .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("s3://tf-private/private.safetensors: ") && text.contains("403"),
            "{case}: {text}"
        );
        assert!(!text.contains(SECRET), "{text}");
    }

    // Signed: the private object reads.
    credentials(true);
    std::env::remove_var("AWS_NO_SIGN_REQUEST");
    let client = common::client();
    let file =
        tensorfile_remote::open_file("s3://tf-private/private.safetensors", &client, &options)
            .unwrap();
    assert_eq!(file.header().len(), local.header().len());
}
