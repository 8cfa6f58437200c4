//! What the remote tests share: the fixtures, a client with fast retries,
//! and the test server.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tensorfile_remote::{Client, RemoteOptions};

/// The repository's fixtures directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

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
