//! The credential chain end to end against moto (`TENSORFILE_TEST_S3`):
//! its STS exchanges a web identity token (`AWS_WEB_IDENTITY_TOKEN_FILE`,
//! IRSA's way) and assumes a profile's role (`role_arn` +
//! `source_profile`), and a private bucket then reads with the
//! credentials it gave. moto refuses unsigned requests to a private
//! bucket, so a read shows the requests were signed; which source signed
//! is pinned by `S3Store::credential_source` here and by access key id in
//! tests/it/creds.rs (moto does not check signatures).
//!
//! A test binary of its own: it changes the process's environment.

use crate::common;

use tensorfile_core::{FileSource, ReadOptions, SafeTensors};
use tensorfile_remote::creds::Source;
use tensorfile_remote::s3::S3Store;
use tensorfile_testkit::serve::S3Bucket;

const CHAIN: [&str; 12] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_NO_SIGN_REQUEST",
    "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL_S3",
];

#[test]
fn web_identity_and_assumed_roles_read_a_private_bucket() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = common::s3_endpoint() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for v in CHAIN {
        std::env::remove_var(v);
    }
    // STS and S3 both at moto, through AWS_ENDPOINT_URL.
    std::env::set_var("AWS_ENDPOINT_URL", &endpoint);
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    std::env::set_var("AWS_CONFIG_FILE", dir.path().join("none-config"));
    std::env::set_var(
        "AWS_SHARED_CREDENTIALS_FILE",
        dir.path().join("none-credentials"),
    );

    let bucket = S3Bucket::create(&endpoint, "tf-creds", "maker", "maker-secret").unwrap();
    let path = common::fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    bucket.put("m/model.safetensors", &bytes, false).unwrap();
    let local = SafeTensors::from_source(FileSource::open(&path).unwrap(), &ReadOptions::default())
        .unwrap();
    let read = |case: &str| {
        let client = common::client();
        let file = tensorfile_remote::open_file(
            "s3://tf-creds/m/model.safetensors",
            &client,
            &ReadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{case}: {e}"));
        for (a, b) in local.header().tensors().zip(file.header().tensors()) {
            assert_eq!(
                local.read_tensor(&a).unwrap(),
                file.read_tensor(&b).unwrap(),
                "{case}"
            );
        }
    };

    // Nothing: anonymous, refused.
    assert_eq!(
        S3Store::from_env("tf-creds").unwrap().credential_source(),
        None
    );
    let e = tensorfile_remote::open_file(
        "s3://tf-creds/m/model.safetensors",
        &common::client(),
        &ReadOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");

    // Web identity.
    let token = dir.path().join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln").unwrap();
    std::env::set_var("AWS_WEB_IDENTITY_TOKEN_FILE", &token);
    std::env::set_var("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/irsa");
    assert_eq!(
        S3Store::from_env("tf-creds").unwrap().credential_source(),
        Some(Source::WebIdentity)
    );
    read("web identity");
    std::env::remove_var("AWS_WEB_IDENTITY_TOKEN_FILE");
    std::env::remove_var("AWS_ROLE_ARN");

    // A profile's role, assumed with its source profile's keys.
    let config = dir.path().join("config");
    std::fs::write(
        &config,
        "[profile reader]\nrole_arn = arn:aws:iam::123456789012:role/reader\nsource_profile = base\n",
    )
    .unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::write(
        &credentials,
        "[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = base-secret\n",
    )
    .unwrap();
    std::env::set_var("AWS_CONFIG_FILE", &config);
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", &credentials);
    std::env::set_var("AWS_PROFILE", "reader");
    assert_eq!(
        S3Store::from_env("tf-creds").unwrap().credential_source(),
        Some(Source::AssumeRole("reader".into()))
    );
    read("assumed role");
    // The source profile's own keys.
    std::env::set_var("AWS_PROFILE", "base");
    assert_eq!(
        S3Store::from_env("tf-creds").unwrap().credential_source(),
        Some(Source::Profile("base".into()))
    );
    read("profile keys");
}
