//! Remote byte sources for tensorfile: S3 (and S3-compatible stores),
//! HTTP(S) servers that honour `Range`, and the Hugging Face Hub.
//!
//! Each remote object is a [`RemoteFile`], a
//! [`ByteSource`](tensorfile_core::source::ByteSource), so every reader
//! feature works on it: headers are read with one range request (two when
//! longer than 64 KiB), tensors and slices with range requests of exactly
//! their bytes, coalesced and run concurrently ([`RemoteOptions`]). A
//! remote directory is a [`RemoteDir`], a
//! [`Location`](tensorfile_core::set::Location), so a sharded set opens with
//! its index and every shard's header read at once ([`open_set`]).
//!
//! | URL | what it is |
//! | --- | --- |
//! | `s3://BUCKET/KEY` | an S3 object; `AWS_ENDPOINT_URL` for other stores, credentials from the AWS chain ([`creds`]: environment, web identity, shared files, container, instance metadata; anonymous without) |
//! | `s3://BUCKET/PREFIX/` | a directory, listed with `ListObjectsV2` |
//! | `http(s)://HOST/PATH` | a file on a server that honours `Range`; a path ending in `/` is a directory (not listable: the index or `model.safetensors` is asked for) |
//! | `hf://ORG/REPO[@REV]/PATH` | a file of a Hub repository (`HF_ENDPOINT`, `HF_TOKEN` or huggingface_hub's token file), read from the shared Hugging Face cache where its blob is there ([`hfcache`]; `HF_HUB_OFFLINE`) |
//! | `hf://ORG/REPO[@REV]` | the repository, listed with the Hub's tree API |
//!
//! ```no_run
//! use tensorfile_core::set::Want;
//! use tensorfile_core::{ReadOptions, SliceArg};
//! use tensorfile_remote::{open_set, Client, RemoteOptions};
//! let client = Client::new(RemoteOptions::default());
//! // The index, then every shard's header at once (one request each).
//! let set = open_set("hf://org/model", &client, &ReadOptions::default())?;
//! // Rank 1 of 4: a quarter of the rows of one matrix, and a whole bias:
//! // range requests of exactly those bytes, coalesced, 16 in flight.
//! let wants = [
//!     Want::slice("model.layers.0.mlp.up_proj.weight", vec![SliceArg::range(2816, 5632)]),
//!     Want::tensor("model.norm.weight"),
//! ];
//! let loaded = set.load(&wants, 1 << 30)?; // at most 1 GiB of results
//! # Ok::<(), tensorfile_core::Error>(())
//! ```
//!
//! Downloads are [`fetch::fetch`]. Requests go through a [`Client`]: a bounded number in flight,
//! retries with exponential backoff and jitter on 5xx, 429 (honouring
//! `Retry-After`), timeouts, resets and short bodies; every answer checked
//! (206 with exactly the `Content-Range` asked for, a body of exactly that
//! length, the same `ETag` or `Last-Modified` and length as when opened),
//! so that a server that ignores `Range`, a wrong range, a short body or an
//! object changed underneath is an error naming the URL, never wrong bytes.
//! Tokens and signatures never appear in messages: objects are named by
//! their public URL.

#![warn(missing_docs)]
#![warn(clippy::missing_errors_doc)]

pub mod creds;
pub mod error;
pub mod fetch;
pub mod hfcache;
mod http;
pub mod hub;
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
pub mod interrupt;
mod location;
mod object;
mod profile;
pub mod s3;
pub mod scratch;
mod secret;
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
pub mod stage;
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
pub mod store;
mod tls;
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
pub mod upload;

pub use error::{Problem, RemoteError};
pub use http::{Client, Counts, RemoteOptions, Validator};
pub use location::{
    dir_of, is_url, kind, open_file, open_set, resolve, url_of, RemoteDir, Resolved,
};
pub use object::RemoteFile;
pub use secret::Secret;

/// A URL as it may be shown: no user name or password, no query (which may
/// hold a signature or a token).
pub fn public_name(input: &str) -> String {
    match url::Url::parse(input) {
        Ok(mut url) if matches!(url.scheme(), "http" | "https") => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            if url.query().is_some() {
                url.set_query(Some("<redacted>"));
            }
            url.to_string()
        }
        _ => http::scrub(input),
    }
}

/// `f` over every item, on up to `workers` threads at once; the results in
/// the items' order.
pub(crate) fn concurrently<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let workers = workers.max(1).min(items.len());
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                let r = f(item);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect()
}
