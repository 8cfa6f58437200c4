//! Remote inputs (`s3://`, `http(s)://`, `hf://`) through
//! `tensorfile-remote`, the sources the CLI reads: headers with one range
//! request each, tensors with range requests of exactly their bytes, into
//! memory of their own.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use tensorfile_remote::{Client, RemoteOptions};

pub use tensorfile_remote::{kind, open_file, open_set, url_of};

/// The client every remote read of the process goes through: one pool of
/// connections and one bound on requests in flight, shared by every handle
/// and thread (stores and credentials are still read from the environment
/// per URL, when it is opened).
pub fn client() -> &'static Arc<Client> {
    static CLIENT: OnceLock<Arc<Client>> = OnceLock::new();
    CLIENT.get_or_init(|| Client::new(RemoteOptions::default()))
}

/// The URL `path` holds, if it is one.
pub fn url(path: &Path) -> Option<&str> {
    url_of(path)
}

/// An I/O error of reading `url` as a library error naming the object once:
/// by the name a remote error carries (public: never a signature or a
/// token), else by the URL's public name.
pub fn io_error(url: &str, e: std::io::Error) -> tensorfile::Error {
    match tensorfile_remote::RemoteError::of_io(&e) {
        Some(r) => tensorfile::Error::io(r.url.clone(), r.clone().into_io_unnamed()),
        None => tensorfile::Error::io(tensorfile_remote::public_name(url), e),
    }
}
