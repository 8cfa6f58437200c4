//! `az://` against Azurite, which `.ci/azure-server.sh` starts on
//! 127.0.0.1 and names in `TENSORFILE_TEST_AZURE` (its blob endpoint,
//! account `devstoreaccount1` in the path). Azurite checks SharedKey
//! signatures, so a read with the account key proves the key was used,
//! and a wrong key is refused. Containers are made by the test (object
//! stores cannot make them: a SharedKey-signed `PUT ?restype=container`).
//!
//! Without `TENSORFILE_TEST_AZURE` the test says so and passes, except in
//! CI (`CI` set), where it must run.

use crate::common;

use std::sync::Arc;

use object_store::ObjectStoreExt;
use tensorfile_core::{ReadOptions, SafeTensors};
use tensorfile_remote::creds::Chain;
use tensorfile_remote::store::{self, Store, StoreUrl};
use tensorfile_remote::Problem;

use tensorfile_testkit::azure::{hmac_sha256 as hmac, ACCOUNT, KEY};

fn endpoint() -> Option<String> {
    match std::env::var("TENSORFILE_TEST_AZURE") {
        Ok(url) if !url.is_empty() => Some(url.trim_end_matches('/').to_string()),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI must run the Azure tests: .ci/run starts Azurite and sets TENSORFILE_TEST_AZURE")
        }
        _ => {
            eprintln!("skipped: no Azurite (set TENSORFILE_TEST_AZURE to its blob endpoint, as .ci/run does)");
            None
        }
    }
}

/// Makes a container (ignoring "already exists"), signed with the key.
fn create_container(endpoint: &str, name: &str) {
    tensorfile_testkit::azure::create_container(endpoint, name).unwrap();
}

fn set_env(endpoint: &str) {
    std::env::set_var("AZURE_STORAGE_USE_EMULATOR", "true");
    std::env::set_var("AZURITE_BLOB_STORAGE_URL", endpoint);
}

/// Puts `bytes` at `url` through the store layer (the emulator's key).
fn put(url: &str, bytes: Vec<u8>) {
    let located = store::locate(url, &common::fast()).unwrap();
    let inner = located.store.store.clone();
    store::block_on(
        async move { inner.put(&located.path, bytes.into()).await },
        None,
    )
    .unwrap()
    .unwrap();
}

#[test]
fn azure_blobs_and_sets_read_as_local_ones() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = endpoint() else { return };
    set_env(&endpoint);
    create_container(&endpoint, "tf-read");
    let root = common::fixtures();
    let options = ReadOptions::default();
    let client = common::client();
    let rel = "valid/every_dtype.safetensors";
    let bytes = std::fs::read(root.join(rel)).unwrap();
    put(&format!("az://tf-read/{rel}"), bytes.clone());
    let url = format!("az://tf-read/{rel}");
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
    // A directory: listed, its one file found.
    let dir = tensorfile_remote::dir_of("az://tf-read/valid/", &client).unwrap();
    let listed = dir.list().unwrap().unwrap();
    assert!(
        listed
            .iter()
            .any(|l| l.name == "every_dtype.safetensors" && l.size == bytes.len() as u64),
        "{listed:?}"
    );
    // A missing blob: a typed error naming the URL.
    let e = tensorfile_remote::open_file("az://tf-read/valid/none.safetensors", &client, &options)
        .unwrap_err();
    let core = common::remote_core(&e);
    assert_eq!(core.problem, Problem::NotFound, "{e}");
    assert!(
        e.to_string()
            .contains("az://tf-read/valid/none.safetensors"),
        "{e}"
    );
}

#[test]
fn a_blob_changed_mid_read_is_an_error() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = endpoint() else { return };
    set_env(&endpoint);
    create_container(&endpoint, "tf-change");
    // Longer than the first read, so that its last tensor takes another
    // request.
    let path = common::fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let bytes = std::fs::read(path).unwrap();
    let url = "az://tf-change/m.safetensors";
    put(url, bytes.clone());
    let client = common::client();
    let file = tensorfile_remote::open_file(url, &client, &ReadOptions::default()).unwrap();
    let last = file.header().tensors().last().unwrap();
    // Other bytes, same length: a new ETag.
    let mut other = bytes.clone();
    let end = other.len() - 1;
    other[end] ^= 1;
    put(url, other);
    let e = file.read_tensor(&last).unwrap_err();
    assert_eq!(common::changed(&e), "ETag", "{e}");
}

#[test]
fn the_account_key_signs_and_a_wrong_one_is_refused() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = endpoint() else { return };
    create_container(&endpoint, "tf-key");
    set_env(&endpoint);
    put("az://tf-key/k.bin", b"0123456789".to_vec());
    let read = |key: &str| {
        let vars: Vec<(&str, String)> = vec![
            ("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT.into()),
            ("AZURE_STORAGE_ACCOUNT_KEY", key.into()),
            ("AZURE_STORAGE_ENDPOINT", format!("{endpoint}/{ACCOUNT}")),
        ];
        let env =
            Chain::with_vars(move |n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()));
        let url = StoreUrl::parse("az://tf-key/k.bin").unwrap();
        // Not the emulator's settings: the key alone signs.
        std::env::remove_var("AZURE_STORAGE_USE_EMULATOR");
        let s = Store::with_env(&url, &common::fast(), &env).unwrap();
        set_env(&endpoint);
        let inner: Arc<dyn object_store::ObjectStore> = s.store.clone();
        let path = url.path().unwrap();
        store::block_on(async move { inner.get_range(&path, 2..5).await }, None)
            .unwrap()
            .map(|b| b.to_vec())
            .map_err(|e| store::error(&url.display(), &s.denied_hint, e))
    };
    assert_eq!(read(KEY).unwrap(), b"234");
    let wrong = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==";
    let e = read(wrong).unwrap_err();
    assert!(
        matches!(e.problem, Problem::Denied { status: 403, .. }),
        "{e}"
    );
    assert!(!e.to_string().contains(wrong), "{e}");
}

/// An account SAS for the blob service (`ss=b`), every resource type,
/// read and list, over HTTP or HTTPS, made with the account key as Azure
/// (and Azurite, which checks it) computes it for version 2020-12-06 on.
fn account_sas(key: &str) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let (sp, ss, srt, se, spr, sv) = (
        "rl",
        "b",
        "sco",
        "2099-01-01T00:00:00Z",
        "https,http",
        "2021-08-06",
    );
    let to_sign = format!("{ACCOUNT}\n{sp}\n{ss}\n{srt}\n\n{se}\n\n{spr}\n{sv}\n\n");
    let sig = b64.encode(hmac(&b64.decode(key).unwrap(), to_sign.as_bytes()));
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    format!(
        "sv={sv}&ss={ss}&srt={srt}&sp={sp}&se={}&spr={}&sig={}",
        enc(se),
        enc(spr),
        enc(&sig)
    )
}

#[test]
fn a_sas_token_reads_and_a_forged_one_is_refused() {
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = endpoint() else { return };
    create_container(&endpoint, "tf-sas");
    set_env(&endpoint);
    put("az://tf-sas/k.bin", b"0123456789".to_vec());
    let read = |sas: &str| {
        let vars: Vec<(&str, String)> = vec![
            ("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT.into()),
            ("AZURE_STORAGE_SAS_TOKEN", sas.into()),
            ("AZURE_STORAGE_ENDPOINT", format!("{endpoint}/{ACCOUNT}")),
        ];
        let env =
            Chain::with_vars(move |n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()));
        let url = StoreUrl::parse("az://tf-sas/k.bin").unwrap();
        // Not the emulator's settings: the SAS alone authorizes.
        std::env::remove_var("AZURE_STORAGE_USE_EMULATOR");
        let s = Store::with_env(&url, &common::fast(), &env).unwrap();
        set_env(&endpoint);
        let inner: Arc<dyn object_store::ObjectStore> = s.store.clone();
        let path = url.path().unwrap();
        store::block_on(async move { inner.get_range(&path, 3..7).await }, None)
            .unwrap()
            .map(|b| b.to_vec())
            .map_err(|e| store::error(&url.display(), &s.denied_hint, e))
    };
    assert_eq!(read(&account_sas(KEY)).unwrap(), b"3456");
    // The same token signed with another key: Azurite checks the signature.
    let forged =
        account_sas("d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ==");
    let e = read(&forged).unwrap_err();
    assert!(
        matches!(e.problem, Problem::Denied { status: 403, .. }),
        "{e}"
    );
    let sig = forged.rsplit("sig=").next().unwrap();
    assert!(!e.to_string().contains(sig), "{e}");
}

/// The HTTPS Azurite with `--oauth basic` (`TENSORFILE_TEST_AZURE_OAUTH`,
/// started by `.ci/azure-server.sh` with the testkit's certificate), or
/// `None` with a message (outside CI).
fn oauth_endpoint() -> Option<String> {
    match std::env::var("TENSORFILE_TEST_AZURE_OAUTH") {
        Ok(url) if !url.is_empty() => Some(url.trim_end_matches('/').to_string()),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI must run the Azure AD tests: .ci/run starts Azurite with --oauth basic and sets TENSORFILE_TEST_AZURE_OAUTH")
        }
        _ => {
            eprintln!("skipped: no Azurite with --oauth basic (set TENSORFILE_TEST_AZURE_OAUTH to its https:// blob endpoint, as .ci/run does)");
            None
        }
    }
}

/// Azure AD's three flows as object_store runs them, against the testkit's
/// token stand-in (`TokenServer`: the authority host behind the TLS proxy,
/// the managed identity endpoint plain) and an Azurite that takes only
/// the bearer tokens it checks (`--oauth basic`: issuer, audience,
/// times): each flow writes a blob (an upload) and reads it back, and the
/// stand-in saw that flow's token request; a wrong secret is refused with
/// an error naming the store and the credential source.
#[test]
fn azure_ad_credentials_write_and_read() {
    use std::io::Write;
    use tensorfile_testkit::azure::{
        Flow, TokenServer, CLIENT_ID, CLIENT_SECRET, FEDERATED_TOKEN, TENANT,
    };
    let _env = tensorfile_testkit::env_lock();
    let Some(endpoint) = oauth_endpoint() else {
        return;
    };
    create_container(&endpoint, "tf-aad");
    let tokens = TokenServer::start();
    let authority = tensorfile_testkit::tls::TlsProxy::in_front_of(&tokens.url());
    let dir = tempfile::tempdir().unwrap();
    let federated = dir.path().join("federated-token");
    std::fs::write(&federated, FEDERATED_TOKEN).unwrap();
    let ca = tensorfile_testkit::tls::ca_file().display().to_string();
    let store_for = |extra: &[(&'static str, String)]| {
        let mut vars: Vec<(&str, String)> = vec![
            ("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT.into()),
            ("AZURE_STORAGE_ENDPOINT", format!("{endpoint}/{ACCOUNT}")),
            ("AZURE_AUTHORITY_HOST", authority.url()),
            ("AZURE_MSI_ENDPOINT", tokens.msi_endpoint()),
            ("SSL_CERT_FILE", ca.clone()),
        ];
        vars.extend(extra.iter().cloned());
        let env =
            Chain::with_vars(move |n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone()));
        std::env::remove_var("AZURE_STORAGE_USE_EMULATOR");
        let url = StoreUrl::parse("az://tf-aad/k.bin").unwrap();
        Store::with_env(&url, &common::fast(), &env).unwrap()
    };
    type Vars = Vec<(&'static str, String)>;
    let flows: [(&str, Flow, Vars); 3] = [
        (
            "client-secret",
            Flow::ClientSecret,
            vec![
                ("AZURE_CLIENT_ID", CLIENT_ID.into()),
                ("AZURE_TENANT_ID", TENANT.into()),
                ("AZURE_CLIENT_SECRET", CLIENT_SECRET.into()),
            ],
        ),
        (
            "workload",
            Flow::Workload,
            vec![
                ("AZURE_CLIENT_ID", CLIENT_ID.into()),
                ("AZURE_TENANT_ID", TENANT.into()),
                (
                    "AZURE_FEDERATED_TOKEN_FILE",
                    federated.display().to_string(),
                ),
            ],
        ),
        ("managed-identity", Flow::ManagedIdentity, vec![]),
    ];
    for (name, flow, vars) in flows {
        let s = store_for(&vars);
        let blob = format!("az://tf-aad/{name}.bin");
        let path = object_store::path::Path::from(format!("{name}.bin"));
        let located = store::Located {
            store: s.clone(),
            path: path.clone(),
            display: blob.clone(),
        };
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut upload =
            tensorfile_remote::upload::Upload::new(located, Default::default()).unwrap();
        upload.write_all(&data).unwrap();
        assert_eq!(upload.finish().unwrap(), data.len() as u64, "{blob}");
        let inner: Arc<dyn object_store::ObjectStore> = s.store.clone();
        let got = store::block_on(async move { inner.get_range(&path, 10..20).await }, None)
            .unwrap()
            .map_err(|e| store::error(&blob, &s.denied_hint, e))
            .unwrap();
        assert_eq!(&got[..], &data[10..20], "{blob}");
        assert!(
            tokens.flows().contains(&flow),
            "{name}: {:?}",
            tokens.flows()
        );
    }
    // A bearer token given as is (`AZURE_STORAGE_TOKEN`): no token
    // request; it reads what the flows above wrote.
    let before = tokens.flows().len();
    let s = store_for(&[(
        "AZURE_STORAGE_TOKEN",
        tensorfile_testkit::azure::storage_token("bearer"),
    )]);
    let inner: Arc<dyn object_store::ObjectStore> = s.store.clone();
    let path = object_store::path::Path::from("workload.bin");
    let got = store::block_on(async move { inner.get_range(&path, 10..20).await }, None)
        .unwrap()
        .map_err(|e| store::error("az://tf-aad/workload.bin", &s.denied_hint, e))
        .unwrap();
    let expected: Vec<u8> = (10..20u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(&got[..], &expected[..]);
    assert_eq!(tokens.flows().len(), before, "{:?}", tokens.flows());
    // A wrong secret: the stand-in refuses it; the error names the store
    // and the credential source, never the secret.
    let s = store_for(&[
        ("AZURE_CLIENT_ID", CLIENT_ID.into()),
        ("AZURE_TENANT_ID", TENANT.into()),
        ("AZURE_CLIENT_SECRET", "wrong-secret-NEVER-PRINTED".into()),
    ]);
    let inner: Arc<dyn object_store::ObjectStore> = s.store.clone();
    let path = object_store::path::Path::from("client-secret.bin");
    let e = store::block_on(async move { inner.head(&path).await }, None)
        .unwrap()
        .map_err(|e| store::error("az://tf-aad/client-secret.bin", &s.denied_hint, e))
        .unwrap_err();
    let text = e.to_string();
    assert!(
        tokens.flows().contains(&Flow::Refused),
        "{:?}",
        tokens.flows()
    );
    eprintln!("{text}");
    assert!(text.contains("az://tf-aad/client-secret.bin"), "{text}");
    assert!(text.contains("AZURE_CLIENT_SECRET"), "{text}");
    assert!(!text.contains("NEVER-PRINTED"), "{text}");
}
