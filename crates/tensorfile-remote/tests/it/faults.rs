//! Faults of servers and networks, injected by the test server: retried
//! where retrying helps (5xx, 429 with `Retry-After`, dropped connections,
//! short bodies, connections reset mid-body: resumed where the body
//! stopped), errors naming the URL and what went wrong otherwise (a wrong
//! `Content-Range`, an object changed
//! between two requests, a 416), never wrong bytes; budgets stop requests.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorfile_core::{ByteSource, ReadOptions};
use tensorfile_remote::{Client, Problem};
use tensorfile_testkit::serve::{Fault, Server};

use common::{changed, remote, remote_core};

/// A 1 MiB safetensors file of one U8 tensor whose bytes count up.
fn big_file() -> Vec<u8> {
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    let header = br#"{"t":{"dtype":"U8","shape":[1048576],"data_offsets":[0,1048576]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&data);
    file
}

fn serve_big() -> (Server, String, Vec<u8>) {
    let server = Server::start().unwrap();
    let file = big_file();
    server.put("/m/big.safetensors", file.clone());
    let url = format!("{}/m/big.safetensors", server.url());
    (server, url, file)
}

/// Reads the whole tensor of the big file.
fn read_all(url: &str, client: &Arc<Client>) -> tensorfile_core::Result<Vec<u8>> {
    let file = tensorfile_remote::open_file(url, client, &ReadOptions::default())?;
    let info = file.info("t")?;
    Ok(file.read_tensor(&info)?.into_owned())
}

#[test]
fn server_errors_and_drops_are_retried() {
    let (server, url, file) = serve_big();
    let tail = &file[file.len() - (1 << 20)..];
    for fault in [
        Fault::Status(500, None),
        Fault::Status(503, None),
        Fault::Drop,
        Fault::Short,
        Fault::Reset,
    ] {
        let client = common::client();
        // The first request (the header) and the next (the data) both fail
        // twice before they succeed.
        server.inject("big", fault.clone(), 2);
        let got = read_all(&url, &client).unwrap_or_else(|e| panic!("{fault:?}: {e}"));
        assert!(got == tail, "{fault:?}: wrong bytes");
        assert!(
            client.stats().retries >= 2,
            "{fault:?}: {:?}",
            client.stats()
        );
    }
}

#[test]
fn a_short_body_resumes_where_it_stopped() {
    resumes_after(Fault::Short);
}

#[test]
fn a_connection_reset_mid_body_resumes_where_it_stopped() {
    resumes_after(Fault::Reset);
}

/// A body cut by `fault` half way: the next request asks for exactly what
/// did not come, and every byte is sent once.
fn resumes_after(fault: Fault) {
    let (server, url, whole) = serve_big();
    let client = Client::new(common::fast().with_chunk_size(64 << 20));
    let file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    server.reset();
    server.inject("big", fault.clone(), 1);
    let info = file.info("t").unwrap();
    let got = file.read_tensor(&info).unwrap();
    assert!(
        *got == whole[whole.len() - (1 << 20)..],
        "{fault:?}: wrong bytes"
    );
    assert_eq!(client.stats().retries, 1, "{fault:?}");
    let log = server.log();
    assert_eq!(log.len(), 2, "{fault:?}: {log:?}");
    // The second request asks for what the first did not deliver.
    let first_end = whole.len() - 1;
    let sent = log[0].body_bytes;
    assert!(sent > 0 && sent < 1 << 20, "{fault:?}: {log:?}");
    let start = |r: &str| -> u64 {
        r.trim_start_matches("bytes=")
            .split('-')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let a0 = start(log[0].range.as_deref().unwrap());
    assert_eq!(
        log[1].range.as_deref(),
        Some(format!("bytes={}-{first_end}", a0 + sent).as_str()),
        "{fault:?}"
    );
    // Every byte was sent once.
    assert_eq!(log[0].body_bytes + log[1].body_bytes, 1 << 20, "{fault:?}");
}

#[test]
fn too_many_requests_waits_as_asked() {
    let (server, url, _) = serve_big();
    let client = Client::new(common::fast().with_max_backoff(Duration::from_secs(5)));
    server.inject("big", Fault::Status(429, Some(1)), 1);
    let t = Instant::now();
    read_all(&url, &client).unwrap();
    assert!(t.elapsed() >= Duration::from_secs(1));
    assert_eq!(client.stats().retries, 1);
}

#[test]
fn retries_run_out_with_the_last_status() {
    let (server, url, _) = serve_big();
    let client = Client::new(common::fast().with_retries(2));
    server.inject("big", Fault::Status(500, None), 10);
    let e = read_all(&url, &client).unwrap_err();
    assert!(e.to_string().starts_with(&url), "{e}");
    assert!(
        matches!(
            remote(&e).problem,
            Problem::Status {
                status: 500,
                attempts: 3,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_server_ignoring_range_gives_the_bytes_from_the_start_of_its_body() {
    let (server, url, file) = serve_big();
    server.inject("big", Fault::IgnoreRange, 100);
    let client = common::client();
    let got = read_all(&url, &client).unwrap();
    assert_eq!(got, file[file.len() - (1 << 20)..]);
    // The first 64 KiB, then the tensor: two requests, neither read past
    // the object's end.
    let counts = client.stats();
    assert_eq!(counts.requests, 2);
    assert!(
        counts.body_bytes <= (64 << 10) + file.len() as u64,
        "{counts:?}"
    );
}

#[test]
fn a_wrong_content_range_is_an_error() {
    let (server, url, _) = serve_big();
    let client = common::client();
    let file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    server.inject("big", Fault::WrongRange, 1);
    let info = file.info("t").unwrap();
    let e = file.read_tensor(&info).unwrap_err();
    assert!(e.to_string().starts_with(&url), "{e}");
    assert!(
        matches!(
            remote_core(&e).problem,
            Problem::BadContentRange { got: Some(_), .. }
        ),
        "{e}"
    );
}

#[test]
fn an_object_changed_between_requests_is_an_error() {
    let (server, url, file) = serve_big();
    let client = common::client();
    let remote_file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    // Same length, other bytes: a new ETag.
    let mut other = file.clone();
    *other.last_mut().unwrap() ^= 1;
    server.put("/m/big.safetensors", other);
    let info = remote_file.info("t").unwrap();
    let e = remote_file.read_tensor(&info).unwrap_err();
    assert!(e.to_string().starts_with(&url), "{e}");
    assert_eq!(changed(&e), "ETag", "{e}");
    // Shorter: the range is past the new end (416), which says so.
    let remote_file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    server.put("/m/big.safetensors", file[..1000].to_vec());
    let e = remote_file.read_tensor(&info).unwrap_err();
    assert_eq!(changed(&e), "the length", "{e}");
}

#[test]
fn range_not_satisfiable_names_the_range() {
    let (_server, url, _) = serve_big();
    let client = common::client();
    let file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    // Past the end, as the caller asked: refused before any request.
    let mut buf = [0u8; 4];
    let e = file
        .source()
        .read_exact_at(file.source().len(), &mut buf)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(client.stats().requests, 1);
}

#[test]
fn empty_and_missing_objects() {
    let server = Server::start().unwrap();
    server.put("/e.safetensors", Vec::new());
    let client = common::client();
    let e = tensorfile_remote::open_file(
        &format!("{}/e.safetensors", server.url()),
        &client,
        &ReadOptions::default(),
    )
    .unwrap_err();
    // The same verdict as an empty local file: too short for a header.
    assert_eq!(e.rule(), Some(1), "{e}");
    let url = format!("{}/none.safetensors", server.url());
    let e = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap_err();
    assert!(e.is_not_found_file(), "{e}");
    assert_eq!(e.to_string(), format!("{url}: not found (HTTP 404)"));
}

#[test]
fn budgets_stop_requests() {
    let (_server, url, _) = serve_big();
    let client = Client::new(common::fast().with_max_requests(Some(1)));
    let e = read_all(&url, &client).unwrap_err();
    assert!(
        matches!(
            remote(&e).problem,
            Problem::Budget {
                what: "requests",
                ..
            }
        ),
        "{e}"
    );
    let client = Client::new(common::fast().with_max_bytes(Some(100_000)));
    let e = read_all(&url, &client).unwrap_err();
    assert!(
        matches!(
            remote(&e).problem,
            Problem::Budget {
                what: "bytes received",
                ..
            }
        ),
        "{e}"
    );
    assert!(client.stats().body_bytes <= 100_000);
    // Time: a server failing for ever, a budget shorter than the retries.
    let (server, url, _) = serve_big();
    server.inject("big", Fault::Status(503, None), 1000);
    let client = Client::new(
        common::fast()
            .with_time_budget(Some(Duration::from_millis(300)))
            .with_retries(1000),
    );
    let e = read_all(&url, &client).unwrap_err();
    // The budget names why the attempt before it was retried.
    match remote(&e).problem {
        Problem::Budget {
            what: "time",
            last: Some(last),
            ..
        } => assert!(matches!(*last, Problem::Status { status: 503, .. }), "{e}"),
        other => panic!("{other:?}: {e}"),
    }
}

#[test]
fn concurrent_ranges_are_coalesced_and_bounded() {
    let (server, url, file) = serve_big();
    let client = Client::new(
        common::fast()
            .with_concurrency(4)
            .with_chunk_size(128 << 10)
            .with_coalesce_gap(1 << 10),
    );
    let remote_file = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap();
    server.reset();
    // 100 small ranges 500 bytes apart (coalesced), and one of 512 KiB
    // (split into 4 requests).
    let source = remote_file.source();
    let mut smalls = vec![[0u8; 10]; 100];
    let mut big = vec![0u8; 512 << 10];
    let mut ranges: Vec<(u64, &mut [u8])> = smalls
        .iter_mut()
        .enumerate()
        .map(|(i, b)| (100_000 + i as u64 * 500, &mut b[..]))
        .collect();
    ranges.push((500_000, &mut big));
    source.read_ranges(&mut ranges).unwrap();
    for (i, b) in smalls.iter().enumerate() {
        let at = 100_000 + i * 500;
        assert_eq!(b[..], file[at..at + 10]);
    }
    assert!(big[..] == file[500_000..500_000 + (512 << 10)]);
    let (requests, sent) = server.counts();
    assert_eq!(requests, 1 + 4, "{:?}", server.log());
    assert!(sent <= 50_000 + (512 << 10), "{sent}");
}

/// A small safetensors file (80 bytes, as in the issue's report).
fn small_file() -> Vec<u8> {
    let header = br#"{"t":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&[7; 8]);
    file
}

/// A server that accepts and never answers hits the first-byte limit,
/// named, on each attempt: seconds, not minutes.
#[test]
fn a_silent_server_hits_the_first_byte_limit() {
    let server = Server::start().unwrap();
    server.put("/s.safetensors", small_file());
    server.inject("/s.", Fault::Silent(Duration::from_secs(20)), 100);
    let url = format!("{}/s.safetensors", server.url());
    let client = Client::new(
        common::fast()
            .with_read_timeout(Duration::from_millis(300))
            .with_retries(1),
    );
    let started = Instant::now();
    let e = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        remote(&e).problem,
        Problem::Timeout {
            what: "first byte",
            limit: Duration::from_millis(300),
            attempts: 2,
        },
        "{e}"
    );
    assert_eq!(client.stats().requests, 2);
    assert!(e.to_string().contains("first-byte limit of 300ms"), "{e}");
}

/// A body that drips a byte at a time fails the rate floor: each byte does
/// not reset it, as a per-read timeout would be.
#[test]
fn a_dripping_body_fails_the_rate_floor() {
    let server = Server::start().unwrap();
    server.put("/d.safetensors", small_file());
    server.inject("/d.", Fault::Drip(Duration::from_millis(20)), 100);
    let url = format!("{}/d.safetensors", server.url());
    // 50 bytes/s arrive; the floor is 200 bytes/s over 400 ms.
    let client = Client::new(
        common::fast()
            .with_min_rate(200)
            .with_rate_window(Duration::from_millis(400))
            .with_retries(0),
    );
    let started = Instant::now();
    let e = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    match remote(&e).problem {
        Problem::TooSlow {
            min_rate: 200, got, ..
        } => assert!(got < 80, "{got}"),
        other => panic!("{other:?}: {e}"),
    }
    assert!(e.to_string().contains("rate floor"), "{e}");
}

/// The time budget cuts off a request in progress (a silent server with a
/// first-byte limit longer than the budget), and no retry waits past it.
#[test]
fn the_time_budget_cuts_off_a_request_in_progress() {
    let server = Server::start().unwrap();
    server.put("/s.safetensors", small_file());
    server.inject("/s.", Fault::Silent(Duration::from_secs(20)), 100);
    let url = format!("{}/s.safetensors", server.url());
    let client = Client::new(
        common::fast()
            .with_read_timeout(Duration::from_secs(30))
            .with_time_budget(Some(Duration::from_millis(500))),
    );
    let started = Instant::now();
    let e = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(remote(&e).problem, Problem::Budget { what: "time", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("timed out"), "{e}");
}

/// What no retry can fix is refused at once: a redirect to a `file://`
/// URL (or any scheme but http and https) is one request, not seven.
#[test]
fn a_redirect_to_a_file_url_is_refused_at_once() {
    let server = Server::start().unwrap();
    server.put("/r.safetensors", small_file());
    server.inject("/r.", Fault::Redirect("file:///etc/passwd".into()), 100);
    let url = format!("{}/r.safetensors", server.url());
    let client = common::client();
    let e = tensorfile_remote::open_file(&url, &client, &ReadOptions::default()).unwrap_err();
    assert!(matches!(remote(&e).problem, Problem::Redirect(_)), "{e}");
    assert!(e.to_string().contains("file:"), "{e}");
    assert_eq!(client.stats().requests, 1, "{e}");
}
