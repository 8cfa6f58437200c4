//! Outputs in object stores, from the command line: Azure (Azurite,
//! `TENSORFILE_TEST_AZURE`) as S3 is in `remote.rs`; `edit` of an object;
//! and what an upload interrupted midway leaves (a writer stopped by a
//! signal: nothing; killed: a pending upload the next run sweeps; a
//! server failing a part: nothing), with moto's S3 (`TENSORFILE_TEST_S3`),
//! Azurite and the GCS stand-in (in this process) behind
//! `tensorfile_testkit`'s [`Proxy`], which stalls or fails the requests
//! chosen. Without moto or Azurite their tests say so and pass, except in
//! CI (`CI` set).
//!
//! A test binary of its own, not a module of `it`: its uploads hold tens
//! of MiB in this process (the input, the proxy's request bodies), and a
//! child forked meanwhile by another test inherits that as its starting
//! peak RSS (`ru_maxrss`), which `it`'s memory-bounded tests measure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tensorfile_testkit::azure::create_container as azurite_container;
use tensorfile_testkit::fixtures;
use tensorfile_testkit::serve::{Proxy, ProxyFault, S3Bucket};

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tensorfile"));
    // The default signal dispositions, whatever the test run inherited (a
    // background job's SIGINT is ignored): some of these are signalled.
    tensorfile_testkit::default_signals(&mut c);
    c.args(args)
        .env_remove("HF_TOKEN")
        .env_remove("HF_ENDPOINT")
        .env_remove("TENSORFILE_TIMEOUT")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn tensorfile(args: &[&str], env: &[(&str, &str)]) -> Output {
    command(args, env).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// The server a test needs, named by `var`; `None` (the test passes
/// saying so) when unset outside CI.
fn server(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url.trim_end_matches('/').to_string()),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI must run the {what} tests: .ci/run starts it and sets {var}")
        }
        _ => {
            eprintln!("skipped: no {what} (set {var}, as .ci/run does)");
            None
        }
    }
}

/// A safetensors file of two U8 tensors of 20 MiB each (bytes that vary,
/// so that a part out of place shows): larger than one upload part
/// (16 MiB), so that it and each shard of a 25 MB set go up in parts.
fn big_input(dir: &Path) -> PathBuf {
    let n = 20 << 20;
    let header = format!(
        "{{\"a\":{{\"dtype\":\"U8\",\"shape\":[{n}],\"data_offsets\":[0,{n}]}},\"b\":{{\"dtype\":\"U8\",\"shape\":[{n}],\"data_offsets\":[{n},{}]}}}}",
        2 * n
    );
    let mut header = header.into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&header);
    let mut rng = tensorfile_testkit::Rng::new(34);
    bytes.extend((0..2 * n).map(|_| rng.next_u64() as u8));
    let path = dir.join("big.safetensors");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Waits (at most a minute) until the proxy has received, after its
/// first `seen` requests, one whose line contains `text`; the child's
/// output if it ended first.
fn wait_for_request(proxy: &Proxy, child: &mut Child, seen: usize, text: &str) {
    let start = Instant::now();
    while !proxy.requests()[seen..].iter().any(|l| l.contains(text)) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the writer ended ({status}) before the request {text:?}: {err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no request {text:?} in a minute: {:?}",
            proxy.requests()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `signal` to the child and waits for it to end by that signal.
fn kill(child: &mut Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(signal), "{status}");
}

/// `name` made unique to this run (a server may outlive one).
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{name}-{}-{nanos:x}", std::process::id())
}

struct S3 {
    endpoint: String,
    /// The bucket's name.
    name: String,
    bucket: S3Bucket,
    scratch: tempfile::TempDir,
}

impl S3 {
    fn new(bucket: &str) -> Option<S3> {
        let endpoint = server("TENSORFILE_TEST_S3", "S3 (moto_server)")?;
        let name = unique(bucket);
        let bucket = S3Bucket::create(&endpoint, &name, "cli", "cli-secret").unwrap();
        Some(S3 {
            endpoint,
            name,
            bucket,
            scratch: tempfile::tempdir().unwrap(),
        })
    }

    /// The environment of a writer talking to `endpoint` (moto or a
    /// proxy in front of it), its scratch directories in ours.
    fn env<'a>(&'a self, endpoint: &'a str) -> Vec<(&'a str, &'a str)> {
        vec![
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_ACCESS_KEY_ID", "cli"),
            ("AWS_SECRET_ACCESS_KEY", "cli-secret"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("TMPDIR", self.scratch.path().to_str().unwrap()),
        ]
    }

    /// Objects and pending multipart uploads under `prefix`.
    fn under(&self, prefix: &str) -> (Vec<String>, Vec<String>) {
        (
            self.bucket.keys(prefix).unwrap(),
            self.bucket.pending_uploads(prefix).unwrap(),
        )
    }

    fn scratch_entries(&self) -> usize {
        let entries: Vec<_> = std::fs::read_dir(self.scratch.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        if !entries.is_empty() {
            eprintln!("in TMPDIR: {entries:?}");
        }
        entries.len()
    }
}

#[test]
fn a_writer_killed_mid_upload_leaves_no_object_and_the_next_run_sweeps() {
    let Some(s3) = S3::new("tf-kill") else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let input = input.to_str().unwrap();
    let proxy = Proxy::start(&s3.endpoint).unwrap();
    // The second part never gets an answer: the writer is stuck after the
    // upload started, until it is killed.
    proxy.fault("partNumber=2", ProxyFault::Hold);
    let url = format!("s3://{}/file/big.safetensors", s3.name);
    let url = url.as_str();
    let proxy_url = proxy.url();
    let stalled = s3.env(&proxy_url);
    let direct = s3.env(&s3.endpoint);

    // SIGKILL during a file's multipart upload: no object; the upload is
    // pending (its parts invisible) and the scratch directory stays.
    let mut child = command(&["rewrite", input, url], &stalled)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_request(&proxy, &mut child, 0, "partNumber=2");
    kill(&mut child, libc::SIGKILL);
    assert_eq!(
        s3.under("file/"),
        (vec![], vec!["file/big.safetensors".to_string()])
    );
    assert_eq!(s3.scratch_entries(), 1);
    // The next run of the same output aborts the pending upload first,
    // and removes the dead run's scratch directory.
    let o = tensorfile(&["rewrite", input, url], &direct);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        s3.under("file/"),
        (vec!["file/big.safetensors".to_string()], vec![])
    );
    assert_eq!(s3.scratch_entries(), 0);

    // A writer of a staged set killed mid-part: `--abort` removes its
    // staging prefix and the upload pending there.
    let out = format!("s3://{}/staged/", s3.name);
    let out = out.as_str();
    let plan = [
        "shard",
        input,
        out,
        "--max-shard-size",
        "25MB",
        "--plan",
        "--writers",
        "1",
    ];
    let o = tensorfile(&plan, &direct);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let seen = proxy.requests().len();
    let mut child = command(
        &[
            "shard",
            input,
            out,
            "--max-shard-size",
            "25MB",
            "--write-part",
            "0",
        ],
        &stalled,
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for_request(&proxy, &mut child, seen, "partNumber=2");
    kill(&mut child, libc::SIGKILL);
    let (_, pending) = s3.under("staged/");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let o = tensorfile(&["shard", out, "--abort"], &direct);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(s3.under("staged/"), (vec![], vec![]));
}

/// Starts `args` with `env`, waits until the proxy holds a request
/// containing `held` (a part that never gets an answer), sends `signal`,
/// and checks that the writer ended by it, within the cleanup's bounds.
fn signal_mid_upload(
    proxy: &Proxy,
    args: &[&str],
    env: &[(&str, &str)],
    held: &str,
    signal: libc::c_int,
) {
    let seen = proxy.requests().len();
    let mut child = command(args, env).stderr(Stdio::piped()).spawn().unwrap();
    wait_for_request(proxy, &mut child, seen, held);
    let start = Instant::now();
    kill(&mut child, signal);
    // The held part is given up at once; the abort and removals are quick
    // here (the proxy forwards them): far less than the 30 s bound.
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    // The interruption's own error is not reported: the signal is.
    assert_eq!(err, "", "{signal}");
}

/// SIGTERM, SIGINT or SIGHUP during an upload: the multipart upload is
/// aborted, the objects this run put for a set not yet published are
/// removed, the scratch directory goes, and the command ends by the
/// signal: nothing in the bucket, nothing pending, nothing in `TMPDIR`.
#[test]
fn a_signal_mid_upload_aborts_it_and_removes_what_the_run_put() {
    let Some(s3) = S3::new("tf-signal") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let input = input.to_str().unwrap();
    let proxy = Proxy::start(&s3.endpoint).unwrap();
    // A file's second part, and the second shard's (the first shard is
    // then already put): never answered.
    proxy.fault("big.safetensors?partNumber=2", ProxyFault::Hold);
    proxy.fault("00002-of-00002.safetensors?partNumber=2", ProxyFault::Hold);
    let proxy_url = proxy.url();
    let stalled = s3.env(&proxy_url);
    for (signal, prefix) in [
        (libc::SIGTERM, "term"),
        (libc::SIGINT, "int"),
        (libc::SIGHUP, "hup"),
    ] {
        let url = format!("s3://{}/{prefix}/big.safetensors", s3.name);
        let held = "big.safetensors?partNumber=2";
        signal_mid_upload(&proxy, &["rewrite", input, &url], &stalled, held, signal);
        assert_eq!(
            s3.under(&format!("{prefix}/")),
            (vec![], vec![]),
            "{signal}"
        );
        assert_eq!(s3.scratch_entries(), 0, "{signal}");
        assert!(
            proxy.requests().iter().any(|l| l.starts_with("DELETE ")
                && l.contains(&format!("/{prefix}/big.safetensors?uploadId="))),
            "{signal}: no abort: {:?}",
            proxy.requests()
        );

        let set = format!("s3://{}/{prefix}-set/", s3.name);
        let args = ["rewrite", input, &set, "--max-shard-size", "25MB"];
        signal_mid_upload(
            &proxy,
            &args,
            &stalled,
            "00002-of-00002.safetensors?partNumber=2",
            signal,
        );
        let first = format!("/{prefix}-set/big-00001-of-00002.safetensors");
        let requests = proxy.requests();
        // The first shard was put (its upload completed); it is removed
        // again below.
        assert!(
            requests
                .iter()
                .any(|l| l.starts_with("POST ") && l.contains(&first) && l.contains("uploadId=")),
            "{signal}: {requests:?}"
        );
        assert_eq!(
            s3.under(&format!("{prefix}-set/")),
            (vec![], vec![]),
            "{signal}"
        );
        assert_eq!(s3.scratch_entries(), 0, "{signal}");
    }
}

/// The same against GCS (the testkit's stand-in, in this process): a
/// signal leaves nothing; a SIGKILL leaves the pending upload, which the
/// next run to the same object sweeps, and `shard --abort` sweeps a staged
/// set's.
#[test]
fn gcs_uploads_stopped_by_a_signal_or_killed() {
    let server = tensorfile_testkit::gcs::GcsServer::start();
    server.create_bucket("tf-gcs-signal", true);
    let dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let input = input.to_str().unwrap();
    let proxy = Proxy::start(&server.url()).unwrap();
    proxy.fault("partNumber=2", ProxyFault::Hold);
    let env = |host: &str| {
        vec![
            ("STORAGE_EMULATOR_HOST", host.to_string()),
            ("TMPDIR", scratch.path().to_str().unwrap().to_string()),
        ]
    };
    let stalled_env = env(&proxy.url());
    let direct_env = env(&server.url());
    let stalled: Vec<(&str, &str)> = stalled_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let direct: Vec<(&str, &str)> = direct_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let entries = || std::fs::read_dir(scratch.path()).unwrap().count();
    let url = "gs://tf-gcs-signal/m/big.safetensors";

    signal_mid_upload(
        &proxy,
        &["rewrite", input, url],
        &stalled,
        "partNumber=2",
        libc::SIGTERM,
    );
    assert_eq!(server.keys("tf-gcs-signal"), Vec::<String>::new());
    assert_eq!(server.pending_uploads("tf-gcs-signal"), vec![]);
    assert_eq!(entries(), 0);

    // SIGKILL: the upload stays pending until the next run's sweep.
    let seen = proxy.requests().len();
    let mut child = command(&["rewrite", input, url], &stalled)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_request(&proxy, &mut child, seen, "partNumber=2");
    kill(&mut child, libc::SIGKILL);
    let pending: Vec<String> = server
        .pending_uploads("tf-gcs-signal")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(pending, ["m/big.safetensors"]);
    let o = tensorfile(&["rewrite", input, url], &direct);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(server.keys("tf-gcs-signal"), ["m/big.safetensors"]);
    assert_eq!(server.pending_uploads("tf-gcs-signal"), vec![]);
    assert_eq!(entries(), 0);

    // A staged set's writer killed mid-part: `--abort` sweeps its upload.
    let out = "gs://tf-gcs-signal/staged/";
    let plan = [
        "shard",
        input,
        out,
        "--max-shard-size",
        "25MB",
        "--plan",
        "--writers",
        "1",
    ];
    let o = tensorfile(&plan, &direct);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let write = [
        "shard",
        input,
        out,
        "--max-shard-size",
        "25MB",
        "--write-part",
        "0",
    ];
    let seen = proxy.requests().len();
    let mut child = command(&write, &stalled)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_request(&proxy, &mut child, seen, "partNumber=2");
    kill(&mut child, libc::SIGKILL);
    assert_eq!(server.pending_uploads("tf-gcs-signal").len(), 1);
    let o = tensorfile(&["shard", out, "--abort"], &direct);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(server.pending_uploads("tf-gcs-signal"), vec![]);
    assert_eq!(server.keys("tf-gcs-signal"), ["m/big.safetensors"]);
}

#[test]
fn a_server_failing_a_part_leaves_no_object_and_no_pending_upload() {
    let Some(s3) = S3::new("tf-fail") else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = big_input(dir.path());
    let input = input.to_str().unwrap();
    let proxy = Proxy::start(&s3.endpoint).unwrap();
    proxy.fault("partNumber=2", ProxyFault::Status(500));
    let failing = proxy.url();
    let env = s3.env(&failing);
    let url = format!("s3://{}/m/big.safetensors", s3.name);
    let url = url.as_str();
    let o = tensorfile(&["rewrite", input, url], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.starts_with(&format!("tensorfile: {url}: ")), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // The part was retried, then the upload aborted.
    let requests = proxy.requests();
    assert!(
        requests
            .iter()
            .filter(|l| l.contains("partNumber=2"))
            .count()
            > 1,
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|l| l.starts_with("DELETE ") && l.contains("uploadId=")),
        "{requests:?}"
    );
    assert_eq!(s3.under("m/"), (vec![], vec![]));
    assert_eq!(s3.scratch_entries(), 0);
    // A set: the shards put before the failure are removed again, and no
    // index is put.
    let o = tensorfile(
        &[
            "rewrite",
            input,
            &format!("s3://{}/set/", s3.name),
            "--max-shard-size",
            "25MB",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(s3.under("set/"), (vec![], vec![]));
}

#[test]
fn edit_of_an_object_rewrites_it_whole() {
    let Some(s3) = S3::new("tf-edit") else { return };
    let env = s3.env(&s3.endpoint);
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let input = input.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let url = format!("s3://{}/m/model.safetensors", s3.name);
    let url = url.as_str();
    let o = tensorfile(&["rewrite", input, url], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(
        &[
            "edit",
            url,
            "--set",
            "owner=tensorfile",
            "--rename",
            "lm_head.weight=head",
            "--json",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["file"], url);
    assert_eq!(report["in_place"], false);
    assert_eq!(
        report["reason"], "an object in a store is rewritten whole",
        "{report}"
    );
    // The same bytes as the same edit of a local copy, rewritten.
    let o = tensorfile(&["rewrite", input, &at("local.safetensors")], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(
        &[
            "edit",
            &at("local.safetensors"),
            "--set",
            "owner=tensorfile",
            "--rename",
            "lm_head.weight=head",
            "--rewrite",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(&["fetch", url, &at("back.safetensors")], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(at("back.safetensors")).unwrap(),
        std::fs::read(at("local.safetensors")).unwrap()
    );
    // Nothing else was put; no scratch is left.
    assert_eq!(s3.under("m/"), (vec!["m/model.safetensors".into()], vec![]));
    assert_eq!(s3.scratch_entries(), 0);
    // An edit that fails (a tensor not there) leaves the object as it was.
    let o = tensorfile(&["edit", url, "--rename", "nope=x"], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = tensorfile(&["fetch", url, &at("again.safetensors")], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(at("again.safetensors")).unwrap(),
        std::fs::read(at("local.safetensors")).unwrap()
    );
    // An object not there: an error naming it.
    let missing = format!("s3://{}/m/none.safetensors", s3.name);
    let missing = missing.as_str();
    let o = tensorfile(&["edit", missing, "--set", "a=b"], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(missing), "{}", stderr(&o));
    assert_eq!(s3.bucket.keys("m/none").unwrap(), Vec::<String>::new());
}

#[test]
fn plain_shard_into_a_bucket_is_refused_unless_replace() {
    let Some(s3) = S3::new("tf-shard") else {
        return;
    };
    let env = s3.env(&s3.endpoint);
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let input = input.to_str().unwrap();
    let out = format!("s3://{}/set/", s3.name);
    let out = out.as_str();
    let args = ["shard", input, out, "--max-shard-size", "50KB"];
    let o = tensorfile(&[&args[..], &["--json"]].concat(), &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let index = format!("s3://{}/set/model.safetensors.index.json", s3.name);
    let index = index.as_str();
    assert_eq!(report["index"], index);
    let before = s3.bucket.keys("set/").unwrap();
    assert_eq!(before.len(), 6, "{before:?}");
    // Refused before anything is put, naming the first name taken and the
    // flag.
    let o = tensorfile(&args, &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let first = report["files"][0].as_str().unwrap();
    assert_eq!(
        stderr(&o),
        format!("tensorfile: {first}: already exists: give --replace to replace it\n")
    );
    // Replaced with it: another cut, the old shards' names reused.
    let o = tensorfile(
        &[
            "shard",
            input,
            out,
            "--max-shard-size",
            "100KB",
            "--replace",
            "--json",
        ],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["index"], index);
    let o = tensorfile(&["validate", out], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The old set's shards the new one does not name are gone.
    let mut now: Vec<String> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .chain([&report["index"]])
        .map(|u| u.as_str().unwrap().rsplit_once('/').unwrap().1)
        .map(|name| format!("set/{name}"))
        .collect();
    now.sort();
    assert!(now.len() < before.len(), "{now:?}");
    assert_eq!(s3.bucket.keys("set/").unwrap(), now);
    // One shard now: a set in one file has no index, so the old index
    // refuses it (a reader would find both)...
    let o = tensorfile(&["shard", input, out], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!("tensorfile: {index}: already exists: give --replace to replace it\n")
    );
    // ...and --replace leaves the one file alone.
    let o = tensorfile(&["shard", input, out, "--replace"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        s3.bucket.keys("set/").unwrap(),
        ["set/model.safetensors".to_string()]
    );
    // --replace is no step's: usage.
    let o = tensorfile(&["shard", out, "--commit", "--replace"], &env);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn outputs_at_azure_urls() {
    let Some(endpoint) = server("TENSORFILE_TEST_AZURE", "Azurite") else {
        return;
    };
    let container = unique("tf-cli-az");
    azurite_container(&endpoint, &container).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let env_at = |blob_endpoint: String| {
        vec![
            ("AZURE_STORAGE_USE_EMULATOR", "true".to_string()),
            ("AZURITE_BLOB_STORAGE_URL", blob_endpoint),
            // No managed identity of the machine's.
            ("AZURE_MSI_ENDPOINT", "http://127.0.0.1:9/".to_string()),
            ("TMPDIR", scratch.path().to_str().unwrap().to_string()),
        ]
    };
    let owned = env_at(endpoint.clone());
    let env: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let input = input.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let fetched = |url: &str, to: &str| {
        let o = tensorfile(&["fetch", url, &at(to)], &env);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        std::fs::read(at(to)).unwrap()
    };

    // A file, read back byte-equal to the local output; refused without
    // --replace, naming the blob and the flag; replaced with it.
    let url = format!("az://{container}/m/model.safetensors");
    let url = url.as_str();
    let o = tensorfile(&["rewrite", input, url, "--json"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["files"][0], url);
    let o = tensorfile(&["rewrite", input, &at("local.safetensors")], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        fetched(url, "back.safetensors"),
        std::fs::read(at("local.safetensors")).unwrap()
    );
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
    let o = tensorfile(
        &["convert", input, &at("f32.safetensors"), "--dtype", "F32"],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        fetched(url, "f32-back.safetensors"),
        std::fs::read(at("f32.safetensors")).unwrap()
    );

    // A set: each shard and the index byte-equal to the local set's.
    let set = format!("az://{container}/set/");
    let set = set.as_str();
    let o = tensorfile(
        &["rewrite", input, set, "--max-shard-size", "50KB", "--json"],
        &env,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
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
        assert_eq!(
            fetched(url, name),
            std::fs::read(dir.path().join("set").join(name)).unwrap(),
            "{name}"
        );
    }
    let index = report["index"].as_str().unwrap();
    assert!(index.starts_with(set), "{index}");
    let o = tensorfile(&["validate", index], &env);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // The staged steps into az://: nothing under OUTDIR's names before the
    // commit; an aborted plan leaves nothing to commit.
    let step = |args: &[&str]| {
        let mut all = vec!["shard"];
        all.extend_from_slice(args);
        let o = tensorfile(&all, &env);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    };
    let out = format!("az://{container}/multi/");
    let out = out.as_str();
    let size = ["--max-shard-size", "50KB"];
    step(&[input, out, size[0], size[1], "--plan", "--writers", "2"]);
    step(&[input, out, size[0], size[1], "--write-part", "0"]);
    step(&[input, out, size[0], size[1], "--write-part", "1"]);
    let o = tensorfile(&["validate", out], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    step(&[out, "--commit"]);
    let o = tensorfile(&["validate", out], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let aborted = format!("az://{container}/aborted/");
    let aborted = aborted.as_str();
    step(&[input, aborted, size[0], size[1], "--plan", "--writers", "2"]);
    step(&[input, aborted, size[0], size[1], "--write-part", "0"]);
    step(&[aborted, "--abort"]);
    let o = tensorfile(&["shard", aborted, "--commit"], &env);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no set is staged here"),
        "{}",
        stderr(&o)
    );

    // An upload dropped midway, by a kill or by a failing server, leaves
    // no blob: blocks never committed are not a blob.
    let big = big_input(dir.path());
    let big = big.to_str().unwrap();
    let proxy = Proxy::start(&endpoint).unwrap();
    proxy.fault("blockid=", ProxyFault::Hold);
    let owned_proxy = env_at(proxy.url());
    let stalled: Vec<(&str, &str)> = owned_proxy.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let url = format!("az://{container}/big/big.safetensors");
    let url = url.as_str();
    let mut child = command(&["rewrite", big, url], &stalled)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_request(&proxy, &mut child, 0, "blockid=");
    kill(&mut child, libc::SIGKILL);
    let not_there = |o: &Output| {
        assert_eq!(o.status.code(), Some(1), "{}", stdout(o));
        assert_eq!(
            stderr(o),
            format!("tensorfile: {url}: not found (HTTP 404)\n")
        );
    };
    not_there(&tensorfile(&["inspect", url], &env));
    let failing_proxy = Proxy::start(&endpoint).unwrap();
    failing_proxy.fault("blockid=", ProxyFault::Status(500));
    let owned_failing = env_at(failing_proxy.url());
    let failing: Vec<(&str, &str)> = owned_failing
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .collect();
    let o = tensorfile(&["rewrite", big, url], &failing);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with(&format!("tensorfile: {url}: ")),
        "{}",
        stderr(&o)
    );
    not_there(&tensorfile(&["inspect", url], &env));
    // And the next run puts it whole.
    let o = tensorfile(&["rewrite", big, url], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = tensorfile(&["rewrite", big, &at("big-local.safetensors")], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        fetched(url, "big-back.safetensors"),
        std::fs::read(at("big-local.safetensors")).unwrap()
    );
    // The killed run's scratch directory was removed by a later one.
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[test]
fn a_dcp_checkpoint_consolidates_into_a_bucket() {
    let Some(s3) = S3::new("tf-dcp") else {
        return;
    };
    let env = s3.env(&s3.endpoint);
    let input = fixtures().join("dcp/two_ranks");
    let input = input.to_str().unwrap();
    let local = tempfile::tempdir().unwrap();
    let expected = local.path().join("set");
    let o = tensorfile(&["merge", input, expected.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = format!("s3://{}/dcp/", s3.name);
    let o = tensorfile(&["merge", input, &out, "--json"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["dcp_ranks"], 2);
    // The same files as the local consolidation, byte for byte, at URLs.
    let mut names: Vec<String> = std::fs::read_dir(&expected)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let files: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files.len(), names.len(), "{files:?}");
    for f in &files {
        assert!(f.starts_with(&out), "{f}");
    }
    assert_eq!(
        s3.under("dcp/"),
        (names.iter().map(|n| format!("dcp/{n}")).collect(), vec![])
    );
    let fetched = local.path().join("fetched");
    let o = tensorfile(&["fetch", &out, fetched.to_str().unwrap()], &env);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for name in &names {
        let got = std::fs::read(fetched.join(name)).unwrap();
        assert_eq!(got, std::fs::read(expected.join(name)).unwrap(), "{name}");
    }
    // Refused without --replace, as every output at a URL.
    let o = tensorfile(&["merge", input, &out], &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("give --replace"), "{}", stderr(&o));
}

#[test]
fn inspect_convert_into_and_fetch_from_gcs() {
    // The GCS stand-in in this process, a private bucket, the service
    // account's key file as application default credentials.
    let gcs = tensorfile_testkit::gcs::GcsServer::start();
    gcs.create_bucket("tf-cli-gs", false);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key.json");
    std::fs::write(&key, gcs.service_account_key()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let (base, key) = (gcs.url(), key.to_str().unwrap().to_string());
    let env = [
        ("GOOGLE_BASE_URL", base.as_str()),
        ("GOOGLE_APPLICATION_CREDENTIALS", key.as_str()),
        // Never the machine's metadata server.
        ("GCE_METADATA_HOST", "127.0.0.1:9"),
        ("TMPDIR", scratch.path().to_str().unwrap()),
    ];
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let input = input.to_str().unwrap();
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let ok = |args: &[&str]| {
        let o = tensorfile(args, &env);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        o
    };

    // Converted into the bucket: the object is byte for byte the local
    // output; inspect and fetch read it back.
    let url = "gs://tf-cli-gs/m/model.safetensors";
    let report: Value = serde_json::from_str(&stdout(&ok(&[
        "convert", input, url, "--dtype", "F32", "--json",
    ])))
    .unwrap();
    assert_eq!(report["files"][0], url);
    ok(&["convert", input, &at("local.safetensors"), "--dtype", "F32"]);
    let local = std::fs::read(at("local.safetensors")).unwrap();
    assert_eq!(gcs.get("tf-cli-gs", "m/model.safetensors").unwrap(), local);
    let remote: Value = serde_json::from_str(&stdout(&ok(&["inspect", url, "--json"]))).unwrap();
    let here: Value = serde_json::from_str(&stdout(&ok(&[
        "inspect",
        &at("local.safetensors"),
        "--json",
    ])))
    .unwrap();
    assert_eq!(remote["tensors"], here["tensors"]);
    ok(&["fetch", url, &at("back.safetensors")]);
    assert_eq!(std::fs::read(at("back.safetensors")).unwrap(), local);

    // Refused without --replace, naming the object and the flag.
    let o = tensorfile(&["convert", input, url, "--dtype", "F16"], &env);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!("tensorfile: {url}: already exists: give --replace to replace it\n")
    );
    ok(&["convert", input, url, "--dtype", "F16", "--replace"]);

    // A set: shards first, index last; validated and fetched whole.
    let report: Value = serde_json::from_str(&stdout(&ok(&[
        "rewrite",
        input,
        "gs://tf-cli-gs/set/",
        "--max-shard-size",
        "50KB",
        "--json",
    ])))
    .unwrap();
    let index = report["index"].as_str().unwrap();
    assert_eq!(
        index,
        "gs://tf-cli-gs/set/llama_two_layers_bf16.safetensors.index.json"
    );
    ok(&["validate", index]);
    ok(&["fetch", "gs://tf-cli-gs/set/", &at("set")]);
    ok(&[
        "rewrite",
        input,
        &at("set-local"),
        "--max-shard-size",
        "50KB",
    ]);
    for f in report["files"].as_array().unwrap() {
        let name = f.as_str().unwrap().rsplit('/').next().unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("set").join(name)).unwrap(),
            std::fs::read(dir.path().join("set-local").join(name)).unwrap(),
            "{name}"
        );
    }

    // The staged steps: nothing under the set's names before the commit.
    let out = "gs://tf-cli-gs/multi/";
    let size = ["--max-shard-size", "50KB"];
    ok(&[
        "shard",
        input,
        out,
        size[0],
        size[1],
        "--plan",
        "--writers",
        "2",
    ]);
    ok(&["shard", input, out, size[0], size[1], "--write-part", "0"]);
    ok(&["shard", input, out, size[0], size[1], "--write-part", "1"]);
    let published = |k: &String| k.starts_with("multi/model");
    assert!(!gcs.keys("tf-cli-gs").iter().any(published));
    ok(&["shard", out, "--commit"]);
    ok(&["validate", out]);
    assert!(gcs.keys("tf-cli-gs").iter().any(published));
    assert!(
        !gcs.keys("tf-cli-gs")
            .iter()
            .any(|k| k.contains(".tensorfile-set-")),
        "{:?}",
        gcs.keys("tf-cli-gs")
    );
    assert!(gcs.pending_uploads("tf-cli-gs").is_empty());
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}
