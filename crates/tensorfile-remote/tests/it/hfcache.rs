//! The shared Hugging Face cache, against the Hub-shaped test server:
//! `fetch_to_cache` fills it in huggingface_hub's layout (blobs by hash,
//! relative snapshot links, refs, lock files); ranged reads use a blob
//! that is there and never fill it; `fetch` to a destination hard-links
//! from it; `HF_HUB_OFFLINE=1` reads it without a request and names the
//! variable for what it lacks; snapshot links that leave the repository's
//! blobs are refused by name; huggingface_hub's shared blob store
//! (`<cache>/blobs/XX/XETHASH`, repository blobs linking into it) is read
//! through checked links and linked to by fetches, never created.
//!
//! A test binary of its own: it sets the process's environment (the cache,
//! the endpoint, offline), so its tests take turns.

use crate::common;

use std::path::{Path, PathBuf};

use tensorfile_core::{ByteSource, ReadOptions};
use tensorfile_remote::fetch::{fetch, fetch_to_cache, FetchOptions, Outcome};
use tensorfile_testkit::serve::Server;

/// A safetensors file of one U8 tensor of `n` bytes (`seed` varies them).
fn safetensors(n: usize, seed: u8) -> Vec<u8> {
    let mut header = format!(r#"{{"w":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend((0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
    out
}

/// The environment of one case: the Hub at `server`, the cache at `cache`.
fn env(server: &Server, cache: &Path, offline: bool) {
    std::env::set_var("HF_ENDPOINT", server.url());
    std::env::set_var("HF_HUB_CACHE", cache);
    std::env::remove_var("HF_TOKEN");
    std::env::remove_var("HF_HOME");
    std::env::remove_var("TRANSFORMERS_OFFLINE");
    for flag in [
        "HF_HUB_DISABLE_SHARED_BLOBS",
        "HF_HUB_DISABLE_XET",
        "HF_HUB_DISABLE_SYMLINKS",
    ] {
        std::env::remove_var(flag);
    }
    if offline {
        std::env::set_var("HF_HUB_OFFLINE", "1");
    } else {
        std::env::remove_var("HF_HUB_OFFLINE");
    }
}

fn options() -> FetchOptions {
    FetchOptions::default().with_sync(false)
}

const BIG: usize = 1 << 20;

fn repo(server: &Server) -> (Vec<u8>, Vec<u8>) {
    let weights = safetensors(BIG, 7);
    let config = br#"{"model_type": "llama"}"#.to_vec();
    server.hub_repo(
        "org/model",
        "main",
        &[
            ("model.safetensors", weights.clone()),
            ("config.json", config.clone()),
        ],
        None,
    );
    (weights, config)
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn fetch_fills_the_cache_and_reads_use_it() {
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let (weights, config) = repo(&server);
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    env(&server, &cache, false);
    let client = common::client();

    // A ranged read of a file the cache lacks does not fill it.
    let file = tensorfile_remote::open_file(
        "hf://org/model/model.safetensors",
        &client,
        &ReadOptions::default(),
    )
    .unwrap();
    assert!(!file.source().is_cached());
    assert!(!cache.join("models--org--model").exists());

    // A fetch without a destination fills it as huggingface_hub does.
    let fetched = fetch_to_cache("hf://org/model", &client, &options(), &()).unwrap();
    let repo_dir = cache.join("models--org--model");
    let commit = std::fs::read_to_string(repo_dir.join("refs/main")).unwrap();
    assert!(
        commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
        "{commit}"
    );
    let snapshot = repo_dir.join("snapshots").join(&commit);
    assert_eq!(fetched.dest, snapshot);
    for (name, bytes) in [("model.safetensors", &weights), ("config.json", &config)] {
        let link = snapshot.join(name);
        let target = std::fs::read_link(&link).unwrap();
        assert_eq!(target, PathBuf::from("../../blobs").join(sha256(bytes)));
        let blob = repo_dir.join("blobs").join(sha256(bytes));
        assert!(std::fs::symlink_metadata(&blob).unwrap().is_file());
        assert_eq!(&std::fs::read(&link).unwrap(), bytes);
        assert!(cache
            .join(".locks/models--org--model")
            .join(format!("{}.lock", sha256(bytes)))
            .is_file());
    }
    assert!(fetched.files.iter().all(|f| f.outcome == Outcome::Fetched));
    assert_eq!(fetched.set, Some((1, 1)));
    // Nothing but blobs and their locks: no partial file or note left.
    let mut blobs: Vec<_> = std::fs::read_dir(repo_dir.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    blobs.sort();
    let mut want = vec![sha256(&weights), sha256(&config)];
    want.sort();
    assert_eq!(blobs, want);

    // Again: every blob is there, nothing is fetched.
    let again = fetch_to_cache("hf://org/model", &client, &options(), &()).unwrap();
    assert!(again.files.iter().all(|f| f.outcome == Outcome::UpToDate));

    // A ranged read now takes its bytes from the blob: one request (the
    // first 64 KiB, which names the blob), then none.
    server.reset();
    let file = tensorfile_remote::open_file(
        "hf://org/model/model.safetensors",
        &client,
        &ReadOptions::default(),
    )
    .unwrap();
    assert!(file.source().is_cached());
    let mut all = vec![0u8; weights.len()];
    file.source().read_exact_at(0, &mut all).unwrap();
    assert_eq!(all, weights);
    let body: u64 = server.log().iter().map(|s| s.body_bytes).sum();
    assert!(body <= 64 << 10, "{body} bytes came from the server");

    // A fetch to a destination hard-links the cached blobs.
    let dest = tmp.path().join("dest");
    let out = fetch("hf://org/model", &dest, &client, &options(), &()).unwrap();
    for f in &out.files {
        assert_eq!(f.outcome, Outcome::FromCache { linked: true }, "{}", f.name);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let a = std::fs::metadata(dest.join("model.safetensors")).unwrap();
        let b = std::fs::metadata(repo_dir.join("blobs").join(sha256(&weights))).unwrap();
        assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()));
    }
    assert_eq!(std::fs::read(dest.join("config.json")).unwrap(), config);

    // Offline: no request at all, for reads, sets and fetches.
    env(&server, &cache, true);
    server.reset();
    let file = tensorfile_remote::open_file(
        "hf://org/model/model.safetensors",
        &client,
        &ReadOptions::default(),
    )
    .unwrap();
    file.source().read_exact_at(0, &mut all).unwrap();
    assert_eq!(all, weights);
    let set =
        tensorfile_remote::open_set("hf://org/model", &client, &ReadOptions::default()).unwrap();
    assert_eq!(set.len(), 1);
    let dest2 = tmp.path().join("dest2");
    let out = fetch("hf://org/model", &dest2, &client, &options(), &()).unwrap();
    assert_eq!(out.files.len(), 2);
    assert_eq!(
        std::fs::read(dest2.join("model.safetensors")).unwrap(),
        weights
    );
    let again = fetch_to_cache("hf://org/model", &client, &options(), &()).unwrap();
    assert!(again.files.iter().all(|f| f.outcome == Outcome::UpToDate));
    assert!(server.log().is_empty(), "{:?}", server.log());
    // What the cache lacks fails at once, naming the variable.
    for url in [
        "hf://org/model/missing.safetensors",
        "hf://org/other/model.safetensors",
    ] {
        let e = tensorfile_remote::open_file(url, &client, &ReadOptions::default()).unwrap_err();
        assert!(e.to_string().contains("HF_HUB_OFFLINE"), "{e}");
    }
    let e = fetch_to_cache("hf://org/other", &client, &options(), &()).unwrap_err();
    assert!(e.to_string().contains("HF_HUB_OFFLINE"), "{e}");
    assert!(server.log().is_empty());
    env(&server, &cache, false);
}

/// A cached repository `name` with no files: `refs/main` naming a
/// commit, its empty snapshot folder and blobs folder; returns the
/// repository's folder and the snapshot's.
fn empty_repo(cache: &Path, name: &str) -> (PathBuf, PathBuf) {
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let repo_dir = cache.join(name);
    let snapshot = repo_dir.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::create_dir_all(repo_dir.join("blobs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), commit).unwrap();
    (repo_dir, snapshot)
}

#[test]
fn snapshot_links_out_of_the_blobs_are_refused() {
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    env(&server, &cache, true);
    let client = common::client();
    let (repo_dir, snapshot) = empty_repo(&cache, "models--org--evil");
    // A secret outside the cache, and a good blob beside the bad links.
    let outside = tmp.path().join("outside.safetensors");
    let secret = safetensors(16, 1);
    std::fs::write(&outside, &secret).unwrap();
    let good = safetensors(16, 2);
    let hash = sha256(&good);
    std::fs::write(repo_dir.join("blobs").join(&hash), &good).unwrap();
    let other_repo = cache.join("models--org--victim/blobs");
    std::fs::create_dir_all(&other_repo).unwrap();
    std::fs::write(other_repo.join(&hash), &secret).unwrap();
    std::fs::write(repo_dir.join("blobs").join("not-a-hash"), &secret).unwrap();
    let linked_blob = "f".repeat(64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::symlink;
        symlink(&outside, repo_dir.join("blobs").join(&linked_blob)).unwrap();
        symlink(
            format!("../../blobs/{hash}"),
            snapshot.join("good.safetensors"),
        )
        .unwrap();
        symlink(&outside, snapshot.join("absolute.safetensors")).unwrap();
        symlink(
            "../../../../outside.safetensors",
            snapshot.join("escape.safetensors"),
        )
        .unwrap();
        symlink(
            format!("../../../models--org--victim/blobs/{hash}"),
            snapshot.join("other.safetensors"),
        )
        .unwrap();
        symlink(
            "../../blobs/not-a-hash",
            snapshot.join("unnamed.safetensors"),
        )
        .unwrap();
        symlink(
            format!("../../blobs/{linked_blob}"),
            snapshot.join("linked.safetensors"),
        )
        .unwrap();
        std::fs::create_dir_all(tmp.path().join("elsewhere")).unwrap();
        std::fs::write(tmp.path().join("elsewhere/x.safetensors"), &secret).unwrap();
        symlink(tmp.path().join("elsewhere"), snapshot.join("sub")).unwrap();
    }
    let open = |name: &str| {
        tensorfile_remote::open_file(
            &format!("hf://org/evil/{name}"),
            &client,
            &ReadOptions::default(),
        )
    };
    let file = open("good.safetensors").unwrap();
    let mut bytes = vec![0u8; good.len()];
    file.source().read_exact_at(0, &mut bytes).unwrap();
    assert_eq!(bytes, good);
    for name in [
        "absolute.safetensors",
        "escape.safetensors",
        "other.safetensors",
        "unnamed.safetensors",
        "linked.safetensors",
        "sub/x.safetensors",
    ] {
        let e = open(name).unwrap_err().to_string();
        assert!(e.contains("refused"), "{name}: {e}");
        let shown = name.split('/').next().unwrap();
        assert!(e.contains(shown), "{name}: {e}");
    }
    // The listing of the snapshot refuses too; a fetch stops there.
    assert!(
        tensorfile_remote::open_set("hf://org/evil", &client, &ReadOptions::default()).is_err()
    );
    let dest = tmp.path().join("dest");
    let e = fetch(
        "hf://org/evil/escape.safetensors",
        &dest,
        &client,
        &options(),
        &(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
    assert!(!dest.join("escape.safetensors").exists());
    assert!(server.log().is_empty());
    env(&server, &cache, false);
}

/// Copies `from` into `to`, links as links.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            #[cfg(unix)]
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if t.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// The small repository the check with huggingface_hub and the committed
/// fixture hold.
fn tiny(server: &Server) -> Vec<(&'static str, Vec<u8>)> {
    let files = vec![
        ("model.safetensors", safetensors(256, 3)),
        ("config.json", br#"{"model_type": "llama"}"#.to_vec()),
    ];
    server.hub_repo("org/tiny", "main", &files, None);
    files
}

/// The check with huggingface_hub itself, where a Python with it is named
/// by `TENSORFILE_TEST_HF_PYTHON` (a venv with `pip install
/// huggingface_hub`; skipped without): its `scan_cache_dir` and
/// `hf_hub_download(local_files_only=True)` find what `fetch_to_cache`
/// put in a cache, and tensorfile reads offline what `hf_hub_download`
/// fetched from the test server. With `TENSORFILE_HF_FIXTURE_OUT`, the
/// cache huggingface_hub made is written there with a manifest (how
/// tests/fixtures/hf_cache is made: see its generate.sh).
#[test]
fn huggingface_hub_agrees_with_the_layout() {
    let Ok(python) = std::env::var("TENSORFILE_TEST_HF_PYTHON") else {
        eprintln!(
            "TENSORFILE_TEST_HF_PYTHON is not set: the check with huggingface_hub is skipped"
        );
        return;
    };
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let files = tiny(&server);
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    let tmp = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hf/check_cache.py");
    let run = |mode: &str, cache: &Path, offline: bool| -> serde_json::Value {
        let mut c = std::process::Command::new(&python);
        c.arg(&script)
            .arg(mode)
            .arg(cache)
            .arg("org/tiny")
            .args(&names);
        c.env("HF_ENDPOINT", server.url())
            .env("HF_HOME", tmp.path().join("hf-home"))
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_CACHE");
        if offline {
            c.env("HF_HUB_OFFLINE", "1");
        } else {
            c.env_remove("HF_HUB_OFFLINE");
        }
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        eprintln!(
            "huggingface_hub {mode}: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{mode} failed");
        serde_json::from_str(&out).unwrap()
    };

    // What tensorfile fetched, as huggingface_hub sees it.
    let a = tmp.path().join("a");
    env(&server, &a, false);
    let client = common::client();
    fetch_to_cache("hf://org/tiny", &client, &options(), &()).unwrap();
    let commit = std::fs::read_to_string(a.join("models--org--tiny/refs/main")).unwrap();
    let seen = run("scan", &a, true);
    assert_eq!(seen["warnings"], serde_json::json!([]));
    let repo = &seen["repos"][0];
    assert_eq!(repo["repo_id"], "org/tiny");
    assert_eq!(repo["refs"], serde_json::json!(["main"]));
    assert_eq!(repo["revisions"][0]["commit_hash"], commit.as_str());
    assert_eq!(repo["nb_files"], files.len());
    for (name, bytes) in &files {
        let found = &seen["files"][name];
        assert_eq!(found[1], sha256(bytes).as_str(), "{name}");
        assert!(found[0].as_str().unwrap().contains(&commit), "{found}");
    }

    // What huggingface_hub fetched from the test server, read offline.
    let b = tmp.path().join("b");
    let got = run("download", &b, false);
    for (name, bytes) in &files {
        let path = got[name].as_str().unwrap();
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{name}");
    }
    env(&server, &b, true);
    server.reset();
    let file = tensorfile_remote::open_file(
        "hf://org/tiny/model.safetensors",
        &client,
        &ReadOptions::default(),
    )
    .unwrap();
    assert!(file.source().is_cached());
    let mut all = vec![0u8; files[0].1.len()];
    file.source().read_exact_at(0, &mut all).unwrap();
    assert_eq!(all, files[0].1);
    tensorfile_remote::open_set("hf://org/tiny", &client, &ReadOptions::default()).unwrap();
    let dest = tmp.path().join("dest");
    let out = fetch("hf://org/tiny", &dest, &client, &options(), &()).unwrap();
    assert!(out
        .files
        .iter()
        .all(|f| f.outcome == Outcome::FromCache { linked: true }));
    assert!(server.log().is_empty());
    // And the other way round, online: tensorfile's fetch finds every blob
    // huggingface_hub put there.
    env(&server, &b, false);
    let again = fetch_to_cache("hf://org/tiny", &client, &options(), &()).unwrap();
    assert!(again.files.iter().all(|f| f.outcome == Outcome::UpToDate));
    env(&server, &a, false);

    if let Ok(out) = std::env::var("TENSORFILE_HF_FIXTURE_OUT") {
        let out = PathBuf::from(out);
        let _ = std::fs::remove_dir_all(&out);
        copy_tree(&b, &out);
        let commit_b = std::fs::read_to_string(b.join("models--org--tiny/refs/main")).unwrap();
        let manifest = serde_json::json!({
            "made_by": format!("huggingface_hub {} hf_hub_download from tensorfile_testkit::serve (tests/it/hfcache.rs, huggingface_hub_agrees_with_the_layout)", seen["version"].as_str().unwrap_or("?")),
            "repo": "org/tiny",
            "revision": "main",
            "commit": commit_b,
            "files": files.iter().map(|(n, bytes)| (n.to_string(), serde_json::json!({
                "size": bytes.len(),
                "sha256": sha256(bytes),
            }))).collect::<serde_json::Map<_, _>>(),
        });
        std::fs::write(
            out.join("manifest.json"),
            serde_json::to_string_pretty(&manifest).unwrap() + "\n",
        )
        .unwrap();
    }
}

/// The committed cache huggingface_hub made (tests/fixtures/hf_cache, see
/// its generate.sh), read offline: files and the set from its snapshot,
/// a fetch hard-linking its blobs.
#[test]
fn the_committed_huggingface_hub_cache_reads_offline() {
    let _env = tensorfile_testkit::env_lock();
    let fixture = common::fixtures().join("hf_cache");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("manifest.json")).unwrap())
            .unwrap();
    let server = Server::start().unwrap();
    env(&server, &fixture, true);
    let client = common::client();
    let files = manifest["files"].as_object().unwrap();
    for (name, want) in files {
        let file = tensorfile_remote::open_file(
            &format!("hf://org/tiny/{name}"),
            &client,
            &ReadOptions::default(),
        );
        // config.json is not safetensors: read it through a fetch below.
        if name.ends_with(".safetensors") {
            let file = file.unwrap();
            let mut all = vec![0u8; want["size"].as_u64().unwrap() as usize];
            file.source().read_exact_at(0, &mut all).unwrap();
            assert_eq!(sha256(&all), want["sha256"].as_str().unwrap(), "{name}");
        }
    }
    let set =
        tensorfile_remote::open_set("hf://org/tiny", &client, &ReadOptions::default()).unwrap();
    assert_eq!(set.len(), 1);
    let tmp = tempfile::tempdir().unwrap();
    let out = fetch("hf://org/tiny", tmp.path(), &client, &options(), &()).unwrap();
    assert_eq!(out.files.len(), files.len());
    for f in &out.files {
        assert!(matches!(f.outcome, Outcome::FromCache { .. }), "{f:?}");
        let bytes = std::fs::read(&f.path).unwrap();
        assert_eq!(sha256(&bytes), files[&f.name]["sha256"].as_str().unwrap());
    }
    assert!(server.log().is_empty());
    env(&server, &fixture, false);
}

/// A stand-in Xet hash of `bytes` (tensorfile never computes one: it takes
/// the Hub's `X-Xet-Hash` and checks the payload's length, as
/// huggingface_hub does).
fn stand_in_xet(bytes: &[u8]) -> String {
    sha256(&[b"xet:".as_slice(), bytes].concat())
}

/// Marks `cache`'s shared store as huggingface_hub does (`blobs/` holding
/// `.huggingface-shared-blobs` with `1\n`).
fn mark_store(cache: &Path) {
    std::fs::create_dir_all(cache.join("blobs")).unwrap();
    std::fs::write(cache.join("blobs/.huggingface-shared-blobs"), "1\n").unwrap();
}

/// Puts `bytes` in the shared store as the payload of `xet`.
fn put_payload(cache: &Path, xet: &str, bytes: &[u8]) -> PathBuf {
    let dir = cache.join("blobs").join(&xet[..2]);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(xet), bytes).unwrap();
    dir.join(xet)
}

/// `../../blobs/XX/XET`: a repository blob's link to a payload.
fn store_link(xet: &str) -> PathBuf {
    PathBuf::from(format!("../../blobs/{}/{xet}", &xet[..2]))
}

#[cfg(unix)]
fn inode(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    (m.dev(), m.ino())
}

/// Offline reads through huggingface_hub's links into the shared store:
/// the good one is followed (and a fetch hard-links its payload); a link
/// with no valid marker, an absolute one, one leaving the store or the
/// cache, one to a misnamed payload, to a link, to a directory, or through
/// a linked folder, is refused by name.
#[cfg(unix)]
#[test]
fn shared_store_links_are_checked() {
    use std::os::unix::fs::symlink;
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    env(&server, &cache, true);
    let client = common::client();
    let (repo_dir, snapshot) = empty_repo(&cache, "models--org--shared");
    mark_store(&cache);
    let secret = safetensors(16, 1);
    let outside = tmp.path().join("outside.safetensors");
    std::fs::write(&outside, &secret).unwrap();
    let good = safetensors(16, 2);
    let good_xet = stand_in_xet(&good);
    let payload = put_payload(&cache, &good_xet, &good);
    // Each snapshot entry links to a blob of its own, which links on.
    let mut n = 0u8;
    let mut entry = |name: &str, target: &Path| {
        n += 1;
        let blob = format!("{n:02x}").repeat(32);
        symlink(target, repo_dir.join("blobs").join(&blob)).unwrap();
        symlink(format!("../../blobs/{blob}"), snapshot.join(name)).unwrap();
    };
    entry("good.safetensors", &store_link(&good_xet));
    // A fetch to a destination hard-links the payload itself (before the
    // bad entries: a fetch looks at its neighbours too).
    let dest = tmp.path().join("dest");
    let out = fetch(
        "hf://org/shared/good.safetensors",
        &dest,
        &client,
        &options(),
        &(),
    )
    .unwrap();
    assert_eq!(out.files[0].outcome, Outcome::FromCache { linked: true });
    assert_eq!(inode(&out.files[0].path), inode(&payload));
    entry("absolute.safetensors", &payload);
    entry(
        "escape.safetensors",
        Path::new("../../../outside.safetensors"),
    );
    entry(
        "updown.safetensors",
        &Path::new("../../blobs")
            .join(&good_xet[..2])
            .join("../../../outside.safetensors"),
    );
    entry(
        "misnamed.safetensors",
        &PathBuf::from(format!("../../blobs/zz/{good_xet}")),
    );
    entry(
        "upper.safetensors",
        &PathBuf::from(format!(
            "../../blobs/{}/{}",
            good_xet[..2].to_ascii_uppercase(),
            good_xet.to_ascii_uppercase()
        )),
    );
    std::fs::create_dir_all(cache.join("models--org--victim/blobs")).unwrap();
    std::fs::write(
        cache.join("models--org--victim/blobs").join(&good_xet),
        &secret,
    )
    .unwrap();
    entry(
        "other.safetensors",
        &PathBuf::from(format!("../../models--org--victim/blobs/{good_xet}")),
    );
    // A payload that is a link, one that is a directory, one whose
    // folder is a link.
    let linked_xet = "a".repeat(64);
    std::fs::create_dir_all(cache.join("blobs/aa")).unwrap();
    symlink(&outside, cache.join("blobs/aa").join(&linked_xet)).unwrap();
    entry("linked.safetensors", &store_link(&linked_xet));
    let dir_xet = "b".repeat(64);
    std::fs::create_dir_all(cache.join("blobs/bb").join(&dir_xet)).unwrap();
    entry("dir.safetensors", &store_link(&dir_xet));
    let folder_xet = "c".repeat(64);
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join(&folder_xet), &secret).unwrap();
    symlink(&elsewhere, cache.join("blobs/cc")).unwrap();
    entry("folder.safetensors", &store_link(&folder_xet));

    let open = |name: &str| {
        tensorfile_remote::open_file(
            &format!("hf://org/shared/{name}"),
            &client,
            &ReadOptions::default(),
        )
    };
    let read_good = || {
        let file = open("good.safetensors").unwrap();
        assert!(file.source().is_cached());
        let mut bytes = vec![0u8; good.len()];
        file.source().read_exact_at(0, &mut bytes).unwrap();
        assert_eq!(bytes, good);
    };
    read_good();
    let refused = |name: &str| {
        let e = open(name).unwrap_err().to_string();
        assert!(e.contains("refused"), "{name}: {e}");
        assert!(e.contains(name), "{name}: {e}");
        e
    };
    for name in [
        "absolute.safetensors",
        "escape.safetensors",
        "updown.safetensors",
        "misnamed.safetensors",
        "upper.safetensors",
        "other.safetensors",
        "linked.safetensors",
        "dir.safetensors",
        "folder.safetensors",
    ] {
        refused(name);
    }

    // Without a valid marker, the store's links are refused.
    let marker = cache.join("blobs/.huggingface-shared-blobs");
    for bad in ["2\n", "1", "1\n\n", ""] {
        std::fs::write(&marker, bad).unwrap();
        let e = refused("good.safetensors");
        assert!(e.contains(".huggingface-shared-blobs"), "{e}");
    }
    std::fs::remove_file(&marker).unwrap();
    refused("good.safetensors");
    let elsewhere_marker = tmp.path().join("marker");
    std::fs::write(&elsewhere_marker, "1\n").unwrap();
    symlink(&elsewhere_marker, &marker).unwrap();
    refused("good.safetensors");
    std::fs::remove_file(&marker).unwrap();
    std::fs::write(&marker, "1\n").unwrap();
    read_good();
    assert!(server.log().is_empty());
    env(&server, &cache, false);
}

/// A fetch that fills the cache links a Xet file's blob to the shared
/// store's payload when huggingface_hub would (marked store, a payload of
/// the right length, HF_HUB_DISABLE_SHARED_BLOBS unset), recording the
/// reference in the payload's manifest under its lock, and downloads
/// nothing for it; otherwise it writes the repository's own blob, and it
/// never creates the store, its marker or a payload.
#[cfg(unix)]
#[test]
fn fetch_links_blobs_from_the_shared_store() {
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let weights = safetensors(BIG, 9);
    let config = br#"{"model_type": "llama"}"#.to_vec();
    server.hub_repo(
        "org/xet",
        "main",
        &[
            ("model.safetensors", weights.clone()),
            ("config.json", config.clone()),
        ],
        None,
    );
    let xet = stand_in_xet(&weights);
    server.hub_xet("org/xet", "main", "model.safetensors", &xet);
    let tmp = tempfile::tempdir().unwrap();
    let client = common::client();
    let blob_of = |cache: &Path| cache.join("models--org--xet/blobs").join(sha256(&weights));
    let refs_of = |cache: &Path| {
        cache
            .join("blobs")
            .join(&xet[..2])
            .join(format!("{xet}.refs"))
    };

    // A marked store with the payload: linked, not downloaded.
    let cache = tmp.path().join("a");
    mark_store(&cache);
    let payload = put_payload(&cache, &xet, &weights);
    env(&server, &cache, false);
    server.reset();
    let fetched = fetch_to_cache("hf://org/xet", &client, &options(), &()).unwrap();
    let body: u64 = server.log().iter().map(|s| s.body_bytes).sum();
    assert!(
        body < weights.len() as u64,
        "{body} bytes came from the server"
    );
    for f in &fetched.files {
        let want = match f.name.as_str() {
            "model.safetensors" => Outcome::UpToDate,
            _ => Outcome::Fetched,
        };
        assert_eq!(f.outcome, want, "{}", f.name);
    }
    assert_eq!(
        std::fs::read_link(blob_of(&cache)).unwrap(),
        store_link(&xet)
    );
    assert_eq!(
        std::fs::read(fetched.dest.join("model.safetensors")).unwrap(),
        weights
    );
    assert_eq!(
        std::fs::read_to_string(refs_of(&cache)).unwrap(),
        format!("models--org--xet/blobs/{}\n", sha256(&weights))
    );
    assert!(cache
        .join("blobs")
        .join(&xet[..2])
        .join(format!("{xet}.lock"))
        .is_file());
    let left: Vec<_> = std::fs::read_dir(cache.join("models--org--xet/blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Again: up to date, no second reference; read offline through it.
    let again = fetch_to_cache("hf://org/xet", &client, &options(), &()).unwrap();
    assert!(again.files.iter().all(|f| f.outcome == Outcome::UpToDate));
    assert_eq!(
        std::fs::read_to_string(refs_of(&cache))
            .unwrap()
            .lines()
            .count(),
        1
    );
    env(&server, &cache, true);
    let file = tensorfile_remote::open_file(
        "hf://org/xet/model.safetensors",
        &client,
        &ReadOptions::default(),
    )
    .unwrap();
    assert!(file.source().is_cached());
    let dest = tmp.path().join("dest");
    fetch("hf://org/xet", &dest, &client, &options(), &()).unwrap();
    assert_eq!(inode(&dest.join("model.safetensors")), inode(&payload));

    // Where huggingface_hub would not link, the repository's own blob.
    let own_blob = |cache: &Path, disabled: bool| {
        env(&server, cache, false);
        if disabled {
            std::env::set_var("HF_HUB_DISABLE_SHARED_BLOBS", "1");
        }
        fetch_to_cache("hf://org/xet", &client, &options(), &()).unwrap();
        let m = std::fs::symlink_metadata(blob_of(cache)).unwrap();
        assert!(m.is_file(), "{}", cache.display());
        assert_eq!(std::fs::read(blob_of(cache)).unwrap(), weights);
        assert!(!refs_of(cache).exists());
    };
    // Shared blobs disabled.
    let cache = tmp.path().join("disabled");
    mark_store(&cache);
    put_payload(&cache, &xet, &weights);
    own_blob(&cache, true);
    // No marker (a payload there is not used; no marker is made).
    let cache = tmp.path().join("unmarked");
    put_payload(&cache, &xet, &weights);
    own_blob(&cache, false);
    assert!(!cache.join("blobs/.huggingface-shared-blobs").exists());
    // A marked store without the payload: nothing is put in it.
    let cache = tmp.path().join("empty");
    mark_store(&cache);
    own_blob(&cache, false);
    let names: Vec<_> = std::fs::read_dir(cache.join("blobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, [".huggingface-shared-blobs"]);
    // A payload of another length.
    let cache = tmp.path().join("short");
    mark_store(&cache);
    put_payload(&cache, &xet, &weights[..100]);
    own_blob(&cache, false);
    env(&server, &cache, false);
}

/// Every file under `root`, `path -> link target` for links, as text.
fn layout(root: &Path) -> String {
    fn walk(root: &Path, at: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(at).unwrap().map(|e| e.unwrap()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                out.push(format!(
                    "{rel} -> {}",
                    std::fs::read_link(&p).unwrap().display()
                ));
            } else if t.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.join("\n")
}

/// The shared store checked with huggingface_hub itself (the Python named
/// by `TENSORFILE_TEST_HF_PYTHON`, with hf_xet; skipped without): it
/// downloads org/tiny and publishes its weights to the store with its own
/// `publish_blob_to_shared_store` (what it does after a download through
/// Xet, which the test server cannot serve), then downloads org/tiny2,
/// whose weights the Hub marks as the same Xet file: linked from the
/// store. tensorfile reads both offline; a fetch of org/tiny3 links to the
/// store, and huggingface_hub's `scan_cache_dir` and
/// `hf_hub_download(local_files_only=True)` find it. With
/// `TENSORFILE_HF_SHARED_FIXTURE_OUT`, huggingface_hub's cache is written
/// there with a manifest (tests/fixtures/hf_shared_cache, its generate.sh).
#[cfg(unix)]
#[test]
fn huggingface_hub_agrees_with_the_shared_store() {
    let Ok(python) = std::env::var("TENSORFILE_TEST_HF_PYTHON") else {
        eprintln!(
            "TENSORFILE_TEST_HF_PYTHON is not set: the check with huggingface_hub is skipped"
        );
        return;
    };
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let files = tiny(&server);
    let names: Vec<String> = files.iter().map(|(n, _)| n.to_string()).collect();
    let weights = files[0].1.clone();
    for repo in ["org/tiny2", "org/tiny3"] {
        server.hub_repo(repo, "main", &files, None);
    }
    let tmp = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hf/check_cache.py");
    let run = |args: &[String], offline: bool| -> serde_json::Value {
        let mut c = std::process::Command::new(&python);
        c.arg(&script).args(args);
        c.env("HF_ENDPOINT", server.url())
            .env("HF_HOME", tmp.path().join("hf-home"))
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_HUB_DISABLE_SHARED_BLOBS")
            .env_remove("HF_HUB_DISABLE_XET");
        if offline {
            c.env("HF_HUB_OFFLINE", "1");
        } else {
            c.env_remove("HF_HUB_OFFLINE");
        }
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        eprintln!(
            "huggingface_hub {}: {out}{}",
            args[0],
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{} failed", args[0]);
        serde_json::from_str(&out).unwrap()
    };
    let args = |mode: &str, cache: &Path, repo: &str, rest: &[String]| -> Vec<String> {
        let mut v = vec![
            mode.to_string(),
            cache.display().to_string(),
            repo.to_string(),
        ];
        v.extend(rest.iter().cloned());
        v
    };
    // The weights' real Xet hash, by hf_xet.
    let w = tmp.path().join("w.safetensors");
    std::fs::write(&w, &weights).unwrap();
    let hashed = run(&["xethash".into(), w.display().to_string()], true);
    let xet = hashed[w.display().to_string()]
        .as_str()
        .unwrap()
        .to_string();
    assert!(tensorfile_remote::hfcache::is_xet_hash(&xet), "{xet}");
    for repo in ["org/tiny2", "org/tiny3"] {
        server.hub_xet(repo, "main", "model.safetensors", &xet);
    }

    // huggingface_hub fills a cache: a published blob, then a linked one.
    let b = tmp.path().join("b");
    let published = run(
        &args(
            "publish",
            &b,
            "org/tiny",
            &[format!("model.safetensors={xet}")],
        ),
        false,
    );
    assert_eq!(published["model.safetensors"][1], true);
    run(&args("download", &b, "org/tiny", &names[1..]), false);
    server.reset();
    run(&args("download", &b, "org/tiny2", &names), false);
    let body: u64 = server.log().iter().map(|s| s.body_bytes).sum();
    assert!(
        body < weights.len() as u64,
        "huggingface_hub downloaded {body} bytes"
    );
    eprintln!("the cache huggingface_hub made:\n{}", layout(&b));
    let payload_in = |cache: &Path| cache.join("blobs").join(&xet[..2]).join(&xet);
    let payload = payload_in(&b);
    assert_eq!(
        std::fs::read(b.join("blobs/.huggingface-shared-blobs")).unwrap(),
        b"1\n"
    );
    assert!(std::fs::symlink_metadata(&payload).unwrap().is_file());
    let mut refs: Vec<String> =
        std::fs::read_to_string(payload.with_file_name(format!("{xet}.refs")))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
    refs.sort();
    let blob = sha256(&weights);
    assert_eq!(
        refs,
        [
            format!("models--org--tiny/blobs/{blob}"),
            format!("models--org--tiny2/blobs/{blob}")
        ]
    );
    for repo in ["tiny", "tiny2"] {
        let link = b.join(format!("models--org--{repo}/blobs/{blob}"));
        assert_eq!(std::fs::read_link(&link).unwrap(), store_link(&xet));
    }

    // tensorfile reads it offline, through the store.
    let client = common::client();
    env(&server, &b, true);
    server.reset();
    for repo in ["org/tiny", "org/tiny2"] {
        let file = tensorfile_remote::open_file(
            &format!("hf://{repo}/model.safetensors"),
            &client,
            &ReadOptions::default(),
        )
        .unwrap();
        assert!(file.source().is_cached());
        let mut all = vec![0u8; weights.len()];
        file.source().read_exact_at(0, &mut all).unwrap();
        assert_eq!(all, weights);
        let dest = tmp.path().join("dest").join(repo);
        let out = fetch(&format!("hf://{repo}"), &dest, &client, &options(), &()).unwrap();
        assert!(out
            .files
            .iter()
            .all(|f| f.outcome == Outcome::FromCache { linked: true }));
        assert_eq!(inode(&dest.join("model.safetensors")), inode(&payload));
    }
    assert!(server.log().is_empty());

    // tensorfile fills a copy of it; huggingface_hub finds what it put.
    let c = tmp.path().join("c");
    copy_tree(&b, &c);
    env(&server, &c, false);
    fetch_to_cache("hf://org/tiny3", &client, &options(), &()).unwrap();
    let link = c.join(format!("models--org--tiny3/blobs/{blob}"));
    assert_eq!(std::fs::read_link(&link).unwrap(), store_link(&xet));
    eprintln!(
        "the cache after tensorfile's fetch of org/tiny3:\n{}",
        layout(&c)
    );
    let refs =
        std::fs::read_to_string(payload_in(&c).with_file_name(format!("{xet}.refs"))).unwrap();
    assert_eq!(
        refs.lines().last(),
        Some(format!("models--org--tiny3/blobs/{blob}").as_str()),
        "{refs}"
    );
    let seen = run(&args("scan", &c, "org/tiny3", &names), true);
    assert_eq!(seen["warnings"], serde_json::json!([]));
    let repos = seen["repos"].as_array().unwrap();
    let ids: Vec<_> = repos
        .iter()
        .map(|r| r["repo_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["org/tiny", "org/tiny2", "org/tiny3"]);
    let tiny3 = &repos[2];
    assert_eq!(tiny3["nb_files"], files.len());
    let commit = std::fs::read_to_string(c.join("models--org--tiny3/refs/main")).unwrap();
    assert_eq!(tiny3["revisions"][0]["commit_hash"], commit.as_str());
    for (name, bytes) in &files {
        let found = &seen["files"][name];
        assert_eq!(found[1], sha256(bytes).as_str(), "{name}");
        assert!(found[0].as_str().unwrap().contains(&commit), "{found}");
    }
    // The payload is counted once in the cache's size.
    let config_len = files[1].1.len();
    assert_eq!(
        seen["size_on_disk"],
        weights.len() + 3 * config_len,
        "{seen}"
    );
    env(&server, &b, false);

    if let Ok(out) = std::env::var("TENSORFILE_HF_SHARED_FIXTURE_OUT") {
        let out = PathBuf::from(out);
        let _ = std::fs::remove_dir_all(&out);
        copy_tree(&b, &out);
        let commits: serde_json::Map<_, _> = ["org/tiny", "org/tiny2"]
            .iter()
            .map(|r| {
                let folder = format!("models--{}", r.replace('/', "--"));
                let commit = std::fs::read_to_string(b.join(folder).join("refs/main")).unwrap();
                (r.to_string(), serde_json::json!(commit))
            })
            .collect();
        let manifest = serde_json::json!({
            "made_by": format!("huggingface_hub {} from tensorfile_testkit::serve: hf_hub_download of org/tiny, its weights put in the shared store by publish_blob_to_shared_store, then hf_hub_download of org/tiny2, whose weights are the same Xet file (tests/it/hfcache.rs, huggingface_hub_agrees_with_the_shared_store)", seen["version"].as_str().unwrap_or("?")),
            "revision": "main",
            "commits": commits,
            "shared": {"model.safetensors": xet},
            "files": files.iter().map(|(n, bytes)| (n.to_string(), serde_json::json!({
                "size": bytes.len(),
                "sha256": sha256(bytes),
            }))).collect::<serde_json::Map<_, _>>(),
        });
        std::fs::write(
            out.join("manifest.json"),
            serde_json::to_string_pretty(&manifest).unwrap() + "\n",
        )
        .unwrap();
    }
}

/// The committed cache with a shared store that huggingface_hub made
/// (tests/fixtures/hf_shared_cache, see its generate.sh), read offline:
/// the layout as huggingface_hub left it, both repositories' weights
/// through the store, a fetch hard-linking the payload.
#[cfg(unix)]
#[test]
fn the_committed_shared_store_cache_reads_offline() {
    let _env = tensorfile_testkit::env_lock();
    let fixture = common::fixtures().join("hf_shared_cache");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("manifest.json")).unwrap())
            .unwrap();
    let xet = manifest["shared"]["model.safetensors"].as_str().unwrap();
    let want = &manifest["files"]["model.safetensors"];
    let blob = want["sha256"].as_str().unwrap();
    let payload = fixture.join("blobs").join(&xet[..2]).join(xet);
    assert_eq!(
        std::fs::read(fixture.join("blobs/.huggingface-shared-blobs")).unwrap(),
        b"1\n"
    );
    let server = Server::start().unwrap();
    env(&server, &fixture, true);
    let client = common::client();
    let tmp = tempfile::tempdir().unwrap();
    let commits = manifest["commits"].as_object().unwrap();
    assert_eq!(commits.len(), 2);
    for (repo, commit) in commits {
        let folder = format!("models--{}", repo.replace('/', "--"));
        assert_eq!(
            std::fs::read_link(fixture.join(&folder).join("blobs").join(blob)).unwrap(),
            store_link(xet)
        );
        let file = tensorfile_remote::open_file(
            &format!("hf://{repo}/model.safetensors"),
            &client,
            &ReadOptions::default(),
        )
        .unwrap();
        assert!(file.source().is_cached());
        let mut all = vec![0u8; want["size"].as_u64().unwrap() as usize];
        file.source().read_exact_at(0, &mut all).unwrap();
        assert_eq!(sha256(&all), blob, "{repo}");
        let dest = tmp.path().join(repo);
        let out = fetch(&format!("hf://{repo}"), &dest, &client, &options(), &()).unwrap();
        assert_eq!(out.files.len(), 2);
        for f in &out.files {
            assert!(matches!(f.outcome, Outcome::FromCache { .. }), "{f:?}");
            let bytes = std::fs::read(&f.path).unwrap();
            let name = &manifest["files"][&f.name];
            assert_eq!(sha256(&bytes), name["sha256"].as_str().unwrap());
        }
        assert!(std::fs::symlink_metadata(&payload).unwrap().is_file());
        assert!(fixture
            .join(&folder)
            .join("snapshots")
            .join(commit.as_str().unwrap())
            .is_dir());
    }
    assert!(server.log().is_empty());
    env(&server, &fixture, false);
}
