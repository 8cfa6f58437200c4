//! Remote inputs: `s3://`, `hf://`, `http(s)://` URLs wherever a command
//! reads a safetensors file or set, through `tensorfile-remote` (only
//! headers are read until tensors are asked for).

use std::path::Path;
use std::sync::Arc;

use tensorfile::input::Kind;
use tensorfile::{ReadOptions, SafeTensors, ShardedTensors};
use tensorfile_remote::{Client, RemoteFile, RemoteOptions};

/// The URL a path argument holds, if it holds one.
pub fn url(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| tensorfile_remote::is_url(s))
}

/// The client every remote read of a command goes through (one pool of
/// connections, one bound on requests in flight).
pub fn client() -> Arc<Client> {
    Client::new(RemoteOptions::default())
}

/// What a URL names: one file, or a set (an index, or a directory whose
/// index or `model.safetensors` is looked for).
pub fn kind(url: &str) -> Kind {
    let last = url.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if url.ends_with('/') || last.ends_with(".json") || !last.contains('.') {
        Kind::SafetensorsSet
    } else {
        Kind::Safetensors
    }
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
