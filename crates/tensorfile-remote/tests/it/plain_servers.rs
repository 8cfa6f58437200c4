//! Plain HTTP servers: one that does not take ranges (`python3 -m
//! http.server`, and the test server's `IgnoreRange` fault) serves reads
//! from the start of its whole body, never reading past what is needed,
//! and whole-file fetches; and a file fetched from a server that gives no
//! sha256 is left alone while the server says it is unchanged.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tensorfile_core::{ByteSource, ReadOptions};
use tensorfile_remote::fetch::{fetch, FetchOptions, Outcome, Progress};
use tensorfile_remote::Client;
use tensorfile_testkit::serve::{Fault, Server};

fn options() -> FetchOptions {
    FetchOptions::default().with_sync(false)
}

fn small_chunks() -> Arc<Client> {
    Client::new(common::fast().with_chunk_size(16 << 10).with_concurrency(4))
}

/// A safetensors file of one U8 tensor of `n` bytes that count up.
fn file_of(n: u64) -> Vec<u8> {
    let header = format!(r#"{{"t":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend((0..n).map(|i| (i % 251) as u8));
    file
}

/// A sharded set (two shards and their index) as `(name, bytes)`.
fn set_files() -> Vec<(String, Vec<u8>)> {
    let shard = |name: &str, n: u64| {
        let header =
            format!(r#"{{"{name}":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        file.extend((0..n).map(|i| (i % 13) as u8));
        file
    };
    let index = r#"{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#;
    vec![
        (
            "model.safetensors.index.json".into(),
            index.as_bytes().to_vec(),
        ),
        (
            "model-00001-of-00002.safetensors".into(),
            shard("a", 200_000),
        ),
        (
            "model-00002-of-00002.safetensors".into(),
            shard("b", 90_000),
        ),
    ]
}

/// Progress that keeps the notes it is told.
#[derive(Default)]
struct Notes(Mutex<Vec<String>>);

impl Progress for Notes {
    fn note(&self, message: &str) {
        self.0.lock().unwrap().push(message.to_string());
    }
}

#[test]
fn a_header_from_a_big_body_reads_only_what_it_needs() {
    let server = Server::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // 1 GiB, sparse: a valid header, then zeros that are never written.
    let path = dir.path().join("big.safetensors");
    let n = 1u64 << 30;
    let header = format!(r#"{{"t":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let mut head = (header.len() as u64).to_le_bytes().to_vec();
    head.extend_from_slice(header.as_bytes());
    std::fs::write(&path, &head).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(head.len() as u64 + n)
        .unwrap();
    server.put_file("/m/big.safetensors", &path).unwrap();
    server.inject("big", Fault::IgnoreRange, 1000);
    let url = format!("{}/m/big.safetensors", server.url());
    let client = common::client();
    let file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    assert_eq!(file.info("t").unwrap().shape, [n]);
    // A few bytes of the tensor: taken from the start of one more body.
    let mut some = [1u8; 16];
    file.source().read_exact_at(100_000, &mut some).unwrap();
    assert_eq!(some, [0u8; 16]);
    let counts = client.stats();
    assert_eq!(counts.requests, 2);
    assert!(counts.body_bytes <= (64 << 10) + 100_016, "{counts:?}");
    // The server sent no more than socket buffers hold past that.
    let (_, sent) = server.counts();
    assert!(sent < 64 << 20, "the server sent {sent} bytes of {n}");
}

#[test]
fn reads_and_fetches_work_against_a_server_ignoring_ranges() {
    let server = Server::start().unwrap();
    let single = file_of(300_000);
    server.put("/m/one.safetensors", single.clone());
    for (name, bytes) in set_files() {
        server.put(&format!("/s/{name}"), bytes);
    }
    server.inject("/", Fault::IgnoreRange, 100_000);
    let client = small_chunks();

    // inspect and validate: headers, and a tensor's bytes.
    let url = format!("{}/m/one.safetensors", server.url());
    let file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    let info = file.info("t").unwrap();
    assert_eq!(
        &*file.read_tensor(&info).unwrap(),
        &single[single.len() - 300_000..]
    );
    let index = format!("{}/s/model.safetensors.index.json", server.url());
    let set = tensorfile_remote::open_set(&index, &client, &ReadOptions::default()).unwrap();
    assert_eq!(set.len(), 2);

    // fetch: a file, one sequential request, and an index with its shards.
    let dest = tempfile::tempdir().unwrap();
    server.reset();
    let got = fetch(
        &url,
        &dest.path().join("one.safetensors"),
        &client,
        &options(),
        &(),
    )
    .unwrap();
    assert_eq!(got.files[0].outcome, Outcome::Fetched);
    assert_eq!(
        std::fs::read(dest.path().join("one.safetensors")).unwrap(),
        single
    );
    let gets = server.log().iter().filter(|s| s.method == "GET").count();
    assert_eq!(
        gets,
        2,
        "the first 64 KiB, then the file: {:?}",
        server.log()
    );
    let out = dest.path().join("set");
    let got = fetch(&index, &out, &client, &options(), &()).unwrap();
    assert_eq!(got.set, Some((2, 2)));
    for (name, bytes) in set_files() {
        assert_eq!(std::fs::read(out.join(&name)).unwrap(), bytes, "{name}");
    }
}

#[test]
fn a_resume_against_a_server_ignoring_ranges_starts_over_and_says_so() {
    let server = Server::start().unwrap();
    let file = file_of(3 << 20);
    server.put("/m/big.safetensors", file.clone());
    let url = format!("{}/m/big.safetensors", server.url());
    let dest = tempfile::tempdir().unwrap();
    let target = dest.path().join("big.safetensors");
    // Part way with ranges, then the server stops taking them.
    let stopping = Client::new(
        common::fast()
            .with_chunk_size(16 << 10)
            .with_concurrency(2)
            .with_max_requests(Some(20)),
    );
    fetch(&url, &target, &stopping, &options(), &()).unwrap_err();
    assert!(dest
        .path()
        .join(".big.safetensors.tensorfile-partial.json")
        .exists());
    server.inject("big", Fault::IgnoreRange, 1000);
    let notes = Notes::default();
    let got = fetch(&url, &target, &small_chunks(), &options(), &notes).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::Fetched);
    assert_eq!(std::fs::read(&target).unwrap(), file);
    let notes = notes.0.into_inner().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("starts over from zero"), "{notes:?}");
}

#[test]
fn an_unchanged_file_is_left_alone_and_a_changed_one_fetched_again() {
    let server = Server::start().unwrap();
    let first = file_of(100_000);
    server.put("/m/one.safetensors", first.clone());
    server.put("/m/config.json", b"{\"a\": 1}".to_vec());
    let url = format!("{}/m/one.safetensors", server.url());
    let dest = tempfile::tempdir().unwrap();
    let target = dest.path().join("one.safetensors");
    let got = fetch(&url, &target, &small_chunks(), &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::Fetched);

    // Again: one HEAD, no body.
    server.reset();
    let got = fetch(&url, &target, &small_chunks(), &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::UpToDate);
    let log = server.log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].method, "HEAD");
    assert_eq!(server.counts().1, 0);

    // A new ETag: fetched again.
    let mut second = first.clone();
    *second.last_mut().unwrap() ^= 1;
    server.put("/m/one.safetensors", second.clone());
    let got = fetch(&url, &target, &small_chunks(), &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::Fetched);
    assert_eq!(std::fs::read(&target).unwrap(), second);

    // A local file changed since is not taken for the fetched one.
    std::fs::write(&target, &first).unwrap();
    let got = fetch(&url, &target, &small_chunks(), &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::Fetched);
    assert_eq!(std::fs::read(&target).unwrap(), second);
}

#[test]
fn a_link_planted_at_the_fetched_note_is_not_followed() {
    let server = Server::start().unwrap();
    let bytes = file_of(1000);
    server.put("/m/one.safetensors", bytes.clone());
    let url = format!("{}/m/one.safetensors", server.url());
    let dest = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("victim");
    std::fs::write(&outside, b"keep").unwrap();
    let note = dest
        .path()
        .join(".one.safetensors.tensorfile-partial.fetched");
    std::os::unix::fs::symlink(&outside, &note).unwrap();
    let target = dest.path().join("one.safetensors");
    fetch(&url, &target, &small_chunks(), &options(), &()).unwrap();
    assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
    assert!(!note.symlink_metadata().unwrap().file_type().is_symlink());
    // And the note written in its place works.
    server.reset();
    let got = fetch(&url, &target, &small_chunks(), &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::UpToDate);
}

/// `python3 -m http.server` serving `dir` on a free port of 127.0.0.1,
/// its request log lines collected; killed when dropped.
struct PythonServer {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl PythonServer {
    /// `None` when there is no python3 here.
    fn start(dir: &Path) -> Option<PythonServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = match Command::new("python3")
            .args([
                "-u",
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => panic!("python3: {e}"),
        };
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let until = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "python3 -m http.server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(PythonServer { child, port, log })
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    /// The requests logged so far with `method` (`"GET /x HTTP/1.1" 200`).
    fn requests(&self, method: &str) -> usize {
        // The log line comes after the answer: give it a moment.
        std::thread::sleep(Duration::from_millis(200));
        let needle = format!("\"{method} ");
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&needle))
            .count()
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn served_dir() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let single = file_of(216_000);
    std::fs::write(dir.path().join("one.safetensors"), &single).unwrap();
    let set: PathBuf = dir.path().join("set");
    std::fs::create_dir(&set).unwrap();
    for (name, bytes) in set_files() {
        std::fs::write(set.join(name), bytes).unwrap();
    }
    (dir, single)
}

#[test]
fn python_http_server_is_read_and_fetched_and_unchanged_files_left_alone() {
    let (served, single) = served_dir();
    let Some(server) = PythonServer::start(served.path()) else {
        eprintln!("skipped: no python3");
        return;
    };
    let client = small_chunks();
    let url = server.url("one.safetensors");
    let file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    let info = file.info("t").unwrap();
    assert_eq!(file.read_tensor(&info).unwrap().len(), 216_000);
    let index = server.url("set/model.safetensors.index.json");
    let set = tensorfile_remote::open_set(&index, &client, &ReadOptions::default()).unwrap();
    assert_eq!(set.len(), 2);

    let dest = tempfile::tempdir().unwrap();
    let target = dest.path().join("one.safetensors");
    let got = fetch(&url, &target, &client, &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::Fetched);
    assert_eq!(std::fs::read(&target).unwrap(), single);
    let out = dest.path().join("set");
    let got = fetch(&server.url("set/"), &out, &client, &options(), &()).unwrap();
    assert_eq!(got.set, Some((2, 2)));
    for (name, bytes) in set_files() {
        assert_eq!(std::fs::read(out.join(&name)).unwrap(), bytes, "{name}");
    }

    // Again: HEADs only (python's server sends Last-Modified, no ETag).
    let gets = server.requests("GET");
    let got = fetch(&url, &target, &client, &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::UpToDate);
    assert_eq!(server.requests("GET"), gets, "no body was asked for");
    // A set: its index is read to know the shards; nothing else.
    let got = fetch(&index, &out, &client, &options(), &()).unwrap();
    assert!(
        got.files.iter().all(|f| f.outcome == Outcome::UpToDate),
        "{:?}",
        got.files
    );
    assert_eq!(server.requests("GET"), gets + 1, "only the index");
    assert_eq!(server.requests("HEAD"), 4);
}
