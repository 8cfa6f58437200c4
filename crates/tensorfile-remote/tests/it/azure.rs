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

/// Azurite's well-known account and key (public: its documentation's).
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

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

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(data);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().to_vec()
}

/// Makes a container (ignoring "already exists"), signed with the key.
fn create_container(endpoint: &str, name: &str) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let date = httpdate_now();
    let version = "2021-08-06";
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
    );
    let sig = b64.encode(hmac(&b64.decode(KEY).unwrap(), to_sign.as_bytes()));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let answer = agent
        .put(format!("{endpoint}/{ACCOUNT}/{name}?restype=container"))
        .header("x-ms-date", &date)
        .header("x-ms-version", version)
        .header("authorization", format!("SharedKey {ACCOUNT}:{sig}"))
        .send_empty()
        .unwrap();
    let status = answer.status().as_u16();
    assert!(
        status == 201 || status == 409,
        "create container: HTTP {status}"
    );
}

fn httpdate_now() -> String {
    // RFC 1123, as x-ms-date wants.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days.rem_euclid(7)) as usize];
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(m - 1) as usize];
    format!(
        "{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
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
