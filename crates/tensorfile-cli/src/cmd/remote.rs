//! Remote inputs: `s3://`, `hf://`, `http(s)://` URLs wherever a command
//! reads a safetensors file or set, through `tensorfile-remote` (only
//! headers are read until tensors are asked for).

use std::path::Path;
use std::sync::Arc;

use tensorfile::{ReadOptions, SafeTensors, ShardedTensors};
use tensorfile_remote::{Client, RemoteFile, RemoteOptions};

pub use tensorfile_remote::{kind, url_of as url};

/// The client every remote read of a command goes through (one pool of
/// connections, one bound on requests in flight).
pub fn client() -> Arc<Client> {
    Client::new(RemoteOptions::default())
}

/// Opens a set, local (read with positional reads: a file truncated
/// underneath is an error, not a signal) or remote (headers only).
pub fn open_set(path: &Path, read: &ReadOptions) -> tensorfile::Result<ShardedTensors> {
    match url(path) {
        Some(u) => tensorfile_remote::open_set(u, &client(), read),
        None => ShardedTensors::open_pread(path, read),
    }
}

/// Opens one remote safetensors file: its header, one request when it fits
/// in 64 KiB.
pub fn open_file(url: &str, read: &ReadOptions) -> tensorfile::Result<SafeTensors<RemoteFile>> {
    tensorfile_remote::open_file(url, &client(), read)
}
