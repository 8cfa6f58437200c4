//! Remote inputs (`s3://`, `http(s)://`, `hf://`) through
//! `tensorfile-remote`, the sources the CLI reads: headers with one range
//! request each, tensors with range requests of exactly their bytes, into
//! memory of their own.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;
use tensorfile::{ByteSource, ReadOptions, SafeTensors};
use tensorfile_remote::{Client, RemoteOptions};

pub use tensorfile_remote::url_of;

/// Opens one remote safetensors file through the library's way in, read
/// through `client`: its header (one request when it fits in 64 KiB) and
/// metadata whole.
pub fn single_file(
    url: &str,
    client: &Arc<Client>,
    options: &ReadOptions,
) -> tensorfile::Result<SafeTensors<Box<dyn ByteSource>>> {
    let options = tensorfile::OpenOptions::default()
        .with_read(options.clone())
        .with_client(client.clone());
    tensorfile::probe(url)?.open_file(&options)
}

/// The client of one call's remote reads. Without a timeout, the client
/// every such call of the process shares: one pool of connections and one
/// bound on requests in flight for every handle and thread (stores and
/// credentials are still read from the environment per URL, when it is
/// opened). With one, a client of the call's own whose time budget starts
/// now: the deadline covers that call's reads, and every later read through
/// a handle it opens (the handle keeps the client).
pub fn client(timeout: Option<Duration>) -> Arc<Client> {
    static SHARED: OnceLock<Arc<Client>> = OnceLock::new();
    match timeout {
        None => SHARED
            .get_or_init(|| Client::new(RemoteOptions::default()))
            .clone(),
        Some(t) => Client::new(RemoteOptions::default().with_time_budget(Some(t))),
    }
}

/// A Python `timeout=` argument (seconds) as a deadline: `None` is none; a
/// value that is not a positive, finite number of seconds is a `ValueError`
/// (as `--timeout` is a usage error in the CLI).
pub fn timeout(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    let Some(s) = seconds else { return Ok(None) };
    s.is_finite()
        .then_some(s)
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .map(Some)
        .ok_or_else(|| {
            PyValueError::new_err(format!("timeout={s}: not a positive number of seconds"))
        })
}

/// The URL `path` holds, if it is one.
pub fn url(path: &Path) -> Option<&str> {
    url_of(path)
}
