//! Remote inputs on the command line: `validate`, `inspect` and the
//! transforms take http(s)://, hf:// (and s3://, see tensorfile-remote's
//! tests) URLs and say what they say of local files; `fetch` copies them.
//! The servers are tensorfile-remote's test server on 127.0.0.1.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use tensorfile_testkit::fixtures;
use tensorfile_testkit::serve::Server;

fn tensorfile(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tensorfile"));
    // No Hugging Face cache of the machine's, online.
    let no_cache =
        std::env::temp_dir().join(format!("tensorfile-no-hf-cache-{}", std::process::id()));
    c.args(args)
        .env_remove("HF_TOKEN")
        .env_remove("HF_ENDPOINT")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("TRANSFORMERS_OFFLINE")
        .env("HF_HUB_CACHE", no_cache);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// Serves `dir` (a fixtures directory) under `/fx/`.
fn serve(rel: &str) -> Server {
    let server = Server::start().unwrap();
    let root = fixtures().join(rel);
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            server.put(&format!("/fx/{name}"), std::fs::read(&p).unwrap());
        }
    }
    server
}

/// A JSON document with the fields naming a file left out.
fn without(mut v: Value, keys: &[&str]) -> Value {
    for k in keys {
        v.as_object_mut().unwrap().remove(*k);
    }
    v
}

#[test]
fn validate_and_inspect_urls_as_local_files() {
    let server = serve("valid");
    for name in ["minimal_bf16.safetensors", "every_dtype.safetensors"] {
        let url = format!("{}/fx/{name}", server.url());
        let local = fixtures().join("valid").join(name);
        let o = tensorfile(&["validate", &url], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), format!("{url}: ok\n"));
        for hash in [false, true] {
            let mut args = vec!["inspect", "--json"];
            if hash {
                args.push("--hash");
            }
            let r = tensorfile(&[args.clone(), vec![&url]].concat(), &[]);
            let l = tensorfile(&[args, vec![local.to_str().unwrap()]].concat(), &[]);
            assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
            let r: Value = serde_json::from_str(&stdout(&r)).unwrap();
            let l: Value = serde_json::from_str(&stdout(&l)).unwrap();
            assert_eq!(r["file"], url.as_str());
            assert_eq!(without(r, &["file"]), without(l, &["file"]));
        }
    }
    let server = serve("invalid");
    let url = format!("{}/fx/overlap.safetensors", server.url());
    let o = tensorfile(&["validate", "--json", &url], &[]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(v["rule"], 5);
    let url = format!("{}/fx/missing.safetensors", server.url());
    let o = tensorfile(&["inspect", &url], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("tensorfile: {url}: not found (HTTP 404)\n")
    );
}

#[test]
fn sets_by_url_and_on_the_hub() {
    let rel = "real/sharded/unet_sharded_safetensors";
    let server = serve(rel);
    let local = fixtures().join(rel);
    let url = format!("{}/fx/", server.url());
    let o = tensorfile(&["validate", &url], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!("{url}: ok (4 shards, ")),
        "{}",
        stdout(&o)
    );
    let r = tensorfile(&["inspect", "--json", &url], &[]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let l = tensorfile(&["inspect", "--json", local.to_str().unwrap()], &[]);
    let keys = ["path", "index"];
    let r: Value = serde_json::from_str(&stdout(&r)).unwrap();
    let l: Value = serde_json::from_str(&stdout(&l)).unwrap();
    assert_eq!(without(r, &keys), without(l, &keys));
    // The same files as a Hub repository.
    let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&local)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    server.hub_repo("org/unet", "main", &refs, None);
    let env = [("HF_ENDPOINT", server.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let o = tensorfile(&["validate", "--json", "hf://org/unet"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["shards"], 4);

    // A transform reads a remote set: rewrite writes the canonical set.
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("copy");
    let o = tensorfile(&["rewrite", &url, dest.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(&["validate", dest.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn fetch_copies_and_says_what_it_did() {
    let rel = "real/mlx_lm/llama_q4";
    let server = serve(rel);
    let local = fixtures().join(rel);
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("model");
    let url = format!("{}/fx/", server.url());
    let o = tensorfile(
        &[
            "fetch",
            "--json",
            "--concurrency",
            "4",
            "--chunk-size",
            "64KB",
            &url,
            dest.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["set"]["shards"].as_u64().unwrap() >= 1, "{v}");
    for f in v["files"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        assert_eq!(f["outcome"], "fetched");
        assert_eq!(
            std::fs::read(dest.join(name)).unwrap(),
            std::fs::read(local.join(name)).unwrap(),
            "{name}"
        );
    }
    // Text: a line per file, the set, the totals.
    let one = format!("{}/fx/model.safetensors", server.url());
    let o = tensorfile(&["fetch", &one, out.path().to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("model.safetensors: fetched "), "{text}");
    assert!(text.contains("header valid"), "{text}");
    // Errors: one line naming the URL (exit 1); a usage error (exit 2).
    let missing = format!("{}/fx/missing.safetensors", server.url());
    let o = tensorfile(&["fetch", &missing, out.path().to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("tensorfile: {missing}: not found (HTTP 404)\n")
    );
    let o = tensorfile(&["fetch", "/not/a/url", out.path().to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn s3_urls_on_the_command_line() {
    // moto's server, started by .ci/run (see tensorfile-remote's tests/s3.rs).
    let endpoint = match std::env::var("TENSORFILE_TEST_S3") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "CI must run the S3 tests: .ci/run starts moto_server and sets TENSORFILE_TEST_S3"
            )
        }
        _ => {
            eprintln!("skipped: no S3 server (set TENSORFILE_TEST_S3 to a moto_server URL)");
            return;
        }
    };
    let bucket =
        tensorfile_testkit::serve::S3Bucket::create(&endpoint, "tf-cli", "cli", "cli-secret")
            .unwrap();
    let rel = "real/sharded/unet_sharded_safetensors";
    let local = fixtures().join(rel);
    for e in std::fs::read_dir(&local).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        bucket
            .put(&format!("unet/{name}"), &std::fs::read(&p).unwrap(), true)
            .unwrap();
    }
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "cli"),
        ("AWS_SECRET_ACCESS_KEY", "cli-secret"),
        ("AWS_REGION", "us-east-1"),
    ];
    let o = tensorfile(&["validate", "s3://tf-cli/unet/"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("s3://tf-cli/unet/: ok (4 shards, "),
        "{}",
        stdout(&o)
    );
    let shard = "s3://tf-cli/unet/diffusion_pytorch_model-00001-of-00004.safetensors";
    let o = tensorfile(&["inspect", "--json", shard], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = tempfile::tempdir().unwrap();
    let o = tensorfile(
        &["fetch", "s3://tf-cli/unet/", out.path().to_str().unwrap()],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("sha256 verified, header valid"),
        "{}",
        stdout(&o)
    );
    let o = tensorfile(&["inspect", "s3://tf-cli/unet/none.safetensors"], &env);
    assert_eq!(o.status.code(), Some(1));
    let text = stderr(&o);
    assert_eq!(
        text,
        "tensorfile: s3://tf-cli/unet/none.safetensors: not found (HTTP 404)\n"
    );
    assert!(!text.contains("cli-secret") && !text.contains("Signature"));
}

/// A server that never answers, or drips a byte a second: run within
/// hostile-input limits but 30 s of wall time.
const HANGING: tensorfile_testkit::Limits = tensorfile_testkit::Limits {
    seconds: 30.0,
    ..tensorfile_testkit::Limits::HOSTILE
};

/// A server whose answers to `/h/x.safetensors` hang with `fault`.
fn hanging(fault: tensorfile_testkit::serve::Fault) -> (Server, String) {
    let server = serve("valid");
    server.put(
        "/h/x.safetensors",
        std::fs::read(fixtures().join("valid/minimal_bf16.safetensors")).unwrap(),
    );
    server.inject("/h/x", fault, 1000);
    let url = format!("{}/h/x.safetensors", server.url());
    (server, url)
}

#[test]
fn inspect_timeout_stops_a_server_that_never_answers() {
    use tensorfile_testkit::serve::Fault;
    let (_server, url) = hanging(Fault::Silent(std::time::Duration::from_secs(60)));
    let run = tensorfile_testkit::run_limited(
        env!("CARGO_BIN_EXE_tensorfile"),
        ["inspect", "--timeout", "10", &url],
        HANGING,
    );
    run.assert_within(HANGING, "a silent server");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.seconds < 20.0, "{}", run.seconds);
    assert!(run.stderr.contains(&url), "{}", run.stderr);
    assert!(
        run.stderr.contains("timed out") && run.stderr.contains("10s"),
        "{}",
        run.stderr
    );
}

#[test]
fn inspect_timeout_stops_a_server_that_drips_a_byte_a_second() {
    use tensorfile_testkit::serve::Fault;
    let (_server, url) = hanging(Fault::Drip(std::time::Duration::from_secs(1)));
    let run = tensorfile_testkit::run_limited(
        env!("CARGO_BIN_EXE_tensorfile"),
        ["inspect", &url, "--timeout", "10"],
        HANGING,
    );
    run.assert_within(HANGING, "a dripping server");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.seconds < 20.0, "{}", run.seconds);
    assert!(
        run.stderr.contains("timed out") && run.stderr.contains("10s"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_timeout_comes_from_the_environment_too_and_is_checked() {
    use tensorfile_testkit::serve::Fault;
    let (_server, url) = hanging(Fault::Silent(std::time::Duration::from_secs(60)));
    let started = std::time::Instant::now();
    let o = tensorfile(&["validate", &url], &[("TENSORFILE_TIMEOUT", "1.5")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(started.elapsed().as_secs_f64() < 10.0);
    // validate reports on stdout, one line per input.
    let said = stdout(&o) + &stderr(&o);
    assert!(
        said.contains("timed out") && said.contains("1.5s"),
        "{said}"
    );
    for bad in ["0", "-1", "soon", "inf"] {
        let o = tensorfile(&["inspect", &format!("--timeout={bad}"), &url], &[]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--timeout"), "{}", stderr(&o));
    }
}

/// `fetch` never follows a link planted at its partial file's name: the
/// file it points to is untouched, exit 1, DEST/NAME not created.
#[cfg(unix)]
#[test]
fn fetch_refuses_a_link_planted_at_its_partial_file() {
    let server = serve("valid");
    let url = format!("{}/fx/minimal_bf16.safetensors", server.url());
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let planted = dest
        .path()
        .join(".minimal_bf16.safetensors.tensorfile-partial");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let o = tensorfile(&["fetch", &url, dest.path().to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("tensorfile-partial"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!dest.path().join("minimal_bf16.safetensors").exists());
    assert_eq!(
        tensorfile_testkit::entries(dest.path()),
        [".minimal_bf16.safetensors.tensorfile-partial"]
    );
}

/// `validate`, `inspect` and `fetch` (twice) of a set served by `base`
/// from fixtures/real/sharded/unet_sharded_safetensors: all work, and the
/// second fetch leaves every file alone.
fn plain_server_round(base: &str) {
    let src = fixtures().join("real/sharded/unet_sharded_safetensors");
    let index = format!("{base}/diffusion_pytorch_model.safetensors.index.json");
    let shard = format!("{base}/diffusion_pytorch_model-00001-of-00004.safetensors");
    for args in [
        vec!["validate", index.as_str()],
        vec!["validate", shard.as_str()],
        vec!["inspect", "--json", index.as_str()],
        vec!["inspect", shard.as_str()],
    ] {
        let o = tensorfile(&args, &[]);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    let dest = tempfile::tempdir().unwrap();
    let out = dest.path().join("unet");
    let out_text = out.to_str().unwrap();
    let o = tensorfile(&["fetch", "--no-sync", &index, out_text], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    for name in [
        "diffusion_pytorch_model.safetensors.index.json",
        "diffusion_pytorch_model-00004-of-00004.safetensors",
    ] {
        assert_eq!(
            std::fs::read(out.join(name)).unwrap(),
            std::fs::read(src.join(name)).unwrap(),
            "{name}"
        );
    }
    let o = tensorfile(&["fetch", "--no-sync", "--json", &index, out_text], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let outcomes: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["up to date"; 5], "{v}");
}

#[test]
fn a_server_that_ignores_ranges_is_read_and_fetched() {
    let server = serve("real/sharded/unet_sharded_safetensors");
    server.inject(
        "/",
        tensorfile_testkit::serve::Fault::IgnoreRange,
        1_000_000,
    );
    plain_server_round(&format!("{}/fx", server.url()));
}

#[test]
fn python_http_server_is_read_and_fetched() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = fixtures().join("real/sharded/unet_sharded_safetensors");
    let child = Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: no python3");
            return;
        }
        Err(e) => panic!("python3: {e}"),
    };
    // Killed however the test ends.
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut child);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < until,
            "python3 -m http.server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    plain_server_round(&format!("http://127.0.0.1:{port}"));
}

/// `fetch hf://ORG/REPO` without a destination fills the Hugging Face
/// cache; a fetch to a destination then hard-links from it; with
/// `HF_HUB_OFFLINE=1`, `inspect` reads the cache (its missing config.json
/// counts as absent) and a file it lacks fails naming the variable.
#[test]
fn fetch_without_a_destination_fills_the_hugging_face_cache() {
    let server = Server::start().unwrap();
    let bytes = std::fs::read(fixtures().join("valid/llama_two_layers_bf16.safetensors")).unwrap();
    server.hub_repo(
        "org/tiny",
        "main",
        &[("model.safetensors", bytes.clone())],
        None,
    );
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    let url = server.url();
    let online = [
        ("HF_ENDPOINT", url.as_str()),
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
    ];
    let o = tensorfile(&["fetch", "--no-sync", "hf://org/tiny"], &online);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("models--org--tiny/snapshots/"), "{text}");
    assert!(text.contains("model.safetensors: fetched "), "{text}");
    let link = std::fs::read_dir(cache.join("models--org--tiny/snapshots"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("model.safetensors");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&link).unwrap(), bytes);

    let dest = tmp.path().join("dest");
    let o = tensorfile(
        &[
            "fetch",
            "--no-sync",
            "hf://org/tiny",
            dest.to_str().unwrap(),
        ],
        &online,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("hard-linked from the Hugging Face cache"),
        "{}",
        stdout(&o)
    );

    let offline = [
        ("HF_ENDPOINT", url.as_str()),
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
        ("HF_HUB_OFFLINE", "1"),
    ];
    server.reset();
    let o = tensorfile(
        &["inspect", "--json", "hf://org/tiny/model.safetensors"],
        &offline,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(&["validate", "hf://org/tiny"], &offline);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    let o = tensorfile(&["inspect", "hf://org/tiny/other.safetensors"], &offline);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("HF_HUB_OFFLINE"), "{}", stderr(&o));
    assert!(server.log().is_empty(), "{:?}", server.log());

    // Only an hf:// source goes to the cache without a destination.
    let o = tensorfile(&["fetch", &format!("{url}/x.safetensors")], &[]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("a destination is needed"),
        "{}",
        stderr(&o)
    );
}

/// Copies `from` into `to`, links as links.
#[cfg(unix)]
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let t = e.file_type().unwrap();
        if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if t.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// A cache whose weights huggingface_hub put in its shared blob store
/// (tests/fixtures/hf_shared_cache) reads offline through the store's
/// links; without the store's marker, they are refused by name.
#[cfg(unix)]
#[test]
fn the_shared_blob_store_reads_offline_and_needs_its_marker() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("hub");
    copy_tree(&fixtures().join("hf_shared_cache"), &cache);
    let offline = [
        ("HF_ENDPOINT", "http://127.0.0.1:9"),
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
        ("HF_HUB_OFFLINE", "1"),
    ];
    for repo in ["org/tiny", "org/tiny2"] {
        let o = tensorfile(&["validate", &format!("hf://{repo}")], &offline);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        let o = tensorfile(
            &[
                "inspect",
                "--json",
                &format!("hf://{repo}/model.safetensors"),
            ],
            &offline,
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    std::fs::remove_file(cache.join("blobs/.huggingface-shared-blobs")).unwrap();
    let o = tensorfile(&["inspect", "hf://org/tiny2/model.safetensors"], &offline);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(e.contains("refused"), "{e}");
    assert!(e.contains(".huggingface-shared-blobs"), "{e}");
    assert!(e.contains("model.safetensors"), "{e}");
}

#[test]
fn outputs_at_s3_urls() {
    // moto's server, as in s3_urls_on_the_command_line.
    let endpoint = match std::env::var("TENSORFILE_TEST_S3") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "CI must run the S3 tests: .ci/run starts moto_server and sets TENSORFILE_TEST_S3"
            )
        }
        _ => {
            eprintln!("skipped: no S3 server (set TENSORFILE_TEST_S3 to a moto_server URL)");
            return;
        }
    };
    // A bucket of this run's: the server may outlive one.
    let bucket = format!("tf-cli-out-{}", std::process::id());
    tensorfile_testkit::serve::S3Bucket::create(&endpoint, &bucket, "cli", "cli-secret").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", "cli"),
        ("AWS_SECRET_ACCESS_KEY", "cli-secret"),
        ("AWS_REGION", "us-east-1"),
        ("TMPDIR", scratch.path().to_str().unwrap()),
    ];
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let input = input.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let fetched = |url: &str, to: &str| {
        let o = tensorfile(&["fetch", url, &at(to)], &env);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    };

    // A file: the same bytes as the local output.
    let url = format!("s3://{bucket}/m/model.safetensors");
    let url = url.as_str();
    let o = tensorfile(&["rewrite", input, url, "--json"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["files"][0], url);
    let o = tensorfile(&["rewrite", input, &at("local.safetensors")], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    fetched(url, "back.safetensors");
    assert_eq!(
        std::fs::read(at("back.safetensors")).unwrap(),
        std::fs::read(at("local.safetensors")).unwrap()
    );
    // Refused without --replace, in one line naming the object; replaced
    // with it.
    let o = tensorfile(&["convert", input, url, "--dtype", "F32"], &env);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("tensorfile: {url}: already exists: give --replace to replace it\n")
    );
    let o = tensorfile(
        &["convert", input, url, "--dtype", "F32", "--replace"],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A set: shards, then the index; read back equal to the local set.
    let o = tensorfile(
        &[
            "rewrite",
            input,
            &format!("s3://{bucket}/set/"),
            "--max-shard-size",
            "50KB",
            "--json",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        report["index"],
        format!("s3://{bucket}/set/llama_two_layers_bf16.safetensors.index.json")
    );
    let o = tensorfile(
        &["rewrite", input, &at("set"), "--max-shard-size", "50KB"],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 5);
    for f in files {
        let url = f.as_str().unwrap();
        let name = url.rsplit('/').next().unwrap();
        fetched(url, name);
        assert_eq!(
            std::fs::read(at(name)).unwrap(),
            std::fs::read(dir.path().join("set").join(name)).unwrap(),
            "{name}"
        );
    }
    let o = tensorfile(
        &[
            "rewrite",
            input,
            &format!("s3://{bucket}/set/"),
            "--max-shard-size",
            "50KB",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));

    // Several writers into a bucket: nothing under OUTDIR's names before
    // the commit (the listing shows the staging prefix alone).
    let out = format!("s3://{bucket}/multi/");
    let out = out.as_str();
    let step = |args: &[&str]| {
        let mut all = vec!["shard"];
        all.extend_from_slice(args);
        let o = tensorfile(&all, &env);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()
    };
    step(&[
        input,
        out,
        "--max-shard-size",
        "50KB",
        "--plan",
        "--writers",
        "2",
        "--json",
    ]);
    for k in ["0", "1"] {
        step(&[
            input,
            out,
            "--max-shard-size",
            "50KB",
            "--write-part",
            k,
            "--json",
        ]);
    }
    let o = tensorfile(&["validate", out], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let done = step(&[out, "--commit", "--json"]);
    assert_eq!(
        done["index"],
        format!("s3://{bucket}/multi/model.safetensors.index.json")
    );
    let o = tensorfile(&["validate", out], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Planned and aborted: nothing is left to commit.
    let out = format!("s3://{bucket}/aborted/");
    let out = out.as_str();
    step(&[
        input,
        out,
        "--max-shard-size",
        "50KB",
        "--plan",
        "--writers",
        "2",
        "--json",
    ]);
    step(&[
        input,
        out,
        "--max-shard-size",
        "50KB",
        "--write-part",
        "0",
        "--json",
    ]);
    step(&[out, "--abort", "--json"]);
    let o = tensorfile(&["shard", out, "--commit"], &env);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no set is staged here"),
        "{}",
        stderr(&o)
    );
    // The scratch directories are gone.
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[test]
fn https_urls_with_a_private_ca() {
    // The test server behind the testkit's TLS proxy, whose certificate a
    // private CA signed: trusted with SSL_CERT_FILE only.
    let server = serve("valid");
    let proxy = tensorfile_testkit::tls::TlsProxy::in_front_of(&server.url());
    let url = format!("{}/fx/minimal_bf16.safetensors", proxy.url());
    let ca = tensorfile_testkit::tls::ca_file();
    let ca = ca.to_str().unwrap();
    let local = fixtures().join("valid/minimal_bf16.safetensors");
    let o = tensorfile(&["inspect", "--json", &url], &[("SSL_CERT_FILE", ca)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let l: Value = serde_json::from_str(&stdout(&tensorfile(
        &["inspect", "--json", local.to_str().unwrap()],
        &[],
    )))
    .unwrap();
    assert_eq!(without(r, &["file"]), without(l, &["file"]));
    let out = tempfile::tempdir().unwrap();
    let o = tensorfile(
        &["fetch", &url, out.path().to_str().unwrap()],
        &[("SSL_CERT_FILE", ca)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(out.path().join("minimal_bf16.safetensors")).unwrap(),
        std::fs::read(&local).unwrap()
    );
    // Without the CA: refused at once (no retries), in one line that says
    // what to set.
    let unset = [
        ("SSL_CERT_FILE", ""),
        ("AWS_CA_BUNDLE", ""),
        ("REQUESTS_CA_BUNDLE", ""),
    ];
    let o = tensorfile(&["inspect", &url], &unset);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let refused = format!("tensorfile: {url}: the server's TLS certificate was refused (UnknownIssuer): for a private certificate authority, set SSL_CERT_FILE to a PEM file holding its certificate");
    assert_eq!(stderr(&o), format!("{refused}\n"));
    // Another tool's variable is not read, and the error says so.
    let o = tensorfile(&["inspect", &url], &[unset[0], ("AWS_CA_BUNDLE", ca)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!("{refused} (AWS_CA_BUNDLE is not read: use SSL_CERT_FILE)\n")
    );
    // A CA file that is not there: named, with the variable.
    let missing = out.path().join("no-such-ca.pem");
    let missing = missing.to_str().unwrap();
    let o = tensorfile(&["inspect", &url], &[("SSL_CERT_FILE", missing)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stderr(&o);
    assert!(
        text.starts_with(&format!(
            "tensorfile: {url}: SSL_CERT_FILE={missing}: cannot read it: "
        )),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn azure_ad_client_secret_on_the_command_line() {
    // The HTTPS Azurite that takes Azure AD tokens (`--oauth basic`,
    // started by .ci/azure-server.sh) and the testkit's token stand-in
    // behind the TLS proxy as the authority host.
    use tensorfile_testkit::azure::{TokenServer, ACCOUNT, CLIENT_ID, CLIENT_SECRET, TENANT};
    let endpoint = match std::env::var("TENSORFILE_TEST_AZURE_OAUTH") {
        Ok(url) if !url.is_empty() => url.trim_end_matches('/').to_string(),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI must run the Azure AD tests: .ci/run starts Azurite with --oauth basic and sets TENSORFILE_TEST_AZURE_OAUTH")
        }
        _ => {
            eprintln!("skipped: no Azurite with --oauth basic (set TENSORFILE_TEST_AZURE_OAUTH, as .ci/run does)");
            return;
        }
    };
    let container = format!("tf-cli-aad-{}", std::process::id());
    tensorfile_testkit::azure::create_container(&endpoint, &container).unwrap();
    let tokens = TokenServer::start();
    let authority = tensorfile_testkit::tls::TlsProxy::in_front_of(&tokens.url());
    let ca = tensorfile_testkit::tls::ca_file();
    let with_secret = |secret: &str| {
        vec![
            ("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT.to_string()),
            ("AZURE_STORAGE_ENDPOINT", format!("{endpoint}/{ACCOUNT}")),
            ("AZURE_STORAGE_USE_EMULATOR", String::new()),
            ("AZURE_AUTHORITY_HOST", authority.url()),
            ("AZURE_CLIENT_ID", CLIENT_ID.to_string()),
            ("AZURE_TENANT_ID", TENANT.to_string()),
            ("AZURE_CLIENT_SECRET", secret.to_string()),
            ("AZURE_MSI_ENDPOINT", "http://127.0.0.1:9/".to_string()),
            ("SSL_CERT_FILE", ca.to_str().unwrap().to_string()),
        ]
    };
    let run = |args: &[&str], vars: Vec<(&'static str, String)>| {
        let env: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        tensorfile(args, &env)
    };
    let input = fixtures().join("valid/minimal_bf16.safetensors");
    let url = format!("az://{container}/m.safetensors");
    // Written as the application, then refused with a wrong secret.
    let o = run(
        &["rewrite", input.to_str().unwrap(), &url],
        with_secret(CLIENT_SECRET),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(
        &["inspect", &url],
        with_secret("wrong-secret-NEVER-PRINTED"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!("tensorfile: {url}: access denied (HTTP 401): the credential's token request was refused (invalid_client): the client secret (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CLIENT_SECRET) is wrong, has expired or lacks access to it\n")
    );
}
