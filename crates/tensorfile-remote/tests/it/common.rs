//! What the remote tests share: the fixtures, a client with fast retries,
//! and the test server.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tensorfile_remote::{Client, Problem, RemoteError, RemoteOptions};

pub use tensorfile_testkit::fixtures;

/// Every file under `dir`, relative to it, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// Options for loopback: short backoff, so that retried faults are quick.
pub fn fast() -> RemoteOptions {
    RemoteOptions::default()
        .with_backoff(Duration::from_millis(5))
        .with_max_backoff(Duration::from_millis(50))
        .with_connect_timeout(Duration::from_secs(5))
        .with_read_timeout(Duration::from_secs(5))
}

/// A client with [`fast`] options.
pub fn client() -> Arc<Client> {
    Client::new(fast())
}

/// The URL of moto's S3 server (`TENSORFILE_TEST_S3`, set by
/// `.ci/s3-server.sh`), or `None` (with a message) when the S3 tests cannot
/// run here; in CI (`CI` set) they must.
pub fn s3_endpoint() -> Option<String> {
    match std::env::var("TENSORFILE_TEST_S3") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!(
                "CI must run the S3 tests: .ci/run starts moto_server and sets TENSORFILE_TEST_S3"
            )
        }
        _ => {
            eprintln!(
                "skipped: no S3 server (set TENSORFILE_TEST_S3 to a moto_server URL, as .ci/run does)"
            );
            None
        }
    }
}

/// The remote error inside a library error (an I/O error whose inner
/// error is a [`RemoteError`]): what the tests match on.
pub fn remote(e: &tensorfile_core::Error) -> RemoteError {
    remote_core(e)
}

/// [`remote`] of a core error (a tensor's read).
pub fn remote_core(e: &tensorfile_core::Error) -> RemoteError {
    match e.detail() {
        tensorfile_core::Error::Io { source, .. } | tensorfile_core::Error::Stream(source) => {
            RemoteError::of_io(source)
                .cloned()
                .unwrap_or_else(|| panic!("not a remote error: {e}"))
        }
        _ => panic!("not an I/O error: {e}"),
    }
}

/// What changed (`ETag`, `Last-Modified`, `the length`) for a read refused
/// because the object changed under it.
pub fn changed(e: &tensorfile_core::Error) -> &'static str {
    match remote_core(e).problem {
        Problem::Changed { what, .. } => what,
        other => panic!("not a change: {other:?}: {e}"),
    }
}
