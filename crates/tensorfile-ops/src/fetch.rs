//! `fetch`: a remote file, set or model directory copied to local disk,
//! with parallel range requests, each file atomically, resumed and
//! verified (the copying is `tensorfile_remote::fetch`'s;
//! `docs/commands/fetch.md`). An `hf://` source with no destination fills
//! the shared Hugging Face cache, as `huggingface-cli download` does.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tensorfile_remote::fetch::{FetchOptions, Outcome};
use tensorfile_remote::{Client, RemoteOptions};

use tensorfile::{Progress, Result};

/// What `fetch` is asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FetchRequest {
    /// What to copy: a file, an index, or a directory (`s3://BUCKET/PREFIX/`,
    /// `hf://ORG/REPO[@REVISION][/PATH]`, `https://HOST/PATH`).
    pub source: String,
    /// Where: a file path (or a directory to put it in) for a file, a
    /// directory for a set or a model directory. `None` (for an `hf://`
    /// source only) puts it in the Hugging Face cache (`HF_HUB_CACHE`,
    /// else `HF_HOME/hub`, else `~/.cache/huggingface/hub`).
    pub dest: Option<PathBuf>,
    /// Range requests in flight at once (at least 1).
    pub concurrency: usize,
    /// Bytes per range request (at least 1).
    pub chunk_size: u64,
    /// Go on from a partial copy (else start over).
    pub resume: bool,
    /// Sync files and directories to disk.
    pub sync: bool,
    /// The rest of the client's options (the deadline, retries); its
    /// concurrency and chunk size are the request's.
    #[serde(skip)]
    pub remote: RemoteOptions,
}

impl FetchRequest {
    /// A copy of `source` to `dest` (or, with `None`, into the Hugging Face
    /// cache): 16 requests in flight of 8 MB each, resumed, synced.
    pub fn new(source: impl Into<String>, dest: Option<PathBuf>) -> FetchRequest {
        FetchRequest {
            source: source.into(),
            dest,
            concurrency: 16,
            chunk_size: 8_000_000,
            resume: true,
            sync: true,
            remote: RemoteOptions::default(),
        }
    }
}

/// What `fetch` did: what `fetch --json` prints (keys in ascending byte
/// order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FetchReport {
    /// Bytes of the answers' bodies.
    pub bytes_received: u64,
    /// Where the copy is.
    pub dest: String,
    /// Every file, fetched, resumed or found up to date.
    pub files: Vec<FetchedEntry>,
    /// Requests made.
    pub requests: u64,
    /// Requests retried.
    pub retries: u64,
    /// For a set, its shards and tensors once validated whole; `null`
    /// otherwise.
    pub set: Option<SetCount>,
    /// The source, as given.
    pub source: String,
}

/// One file copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FetchedEntry {
    /// Its length in bytes.
    pub bytes: u64,
    /// Whether its safetensors header was checked against the reader rules.
    pub header_checked: bool,
    /// Its name in the source.
    pub name: String,
    /// `fetched`, `resumed`, `up to date`, `linked from cache` or `copied
    /// from cache`.
    pub outcome: String,
    /// Where it is.
    pub path: String,
    /// For `resumed`, the bytes that were on disk; 0 otherwise.
    pub resumed_from: u64,
    /// The sha256 it was verified against, or `null`.
    pub sha256: Option<String>,
    /// Its URL.
    pub source: String,
}

/// A set's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetCount {
    /// Its shards.
    pub shards: usize,
    /// Its tensors.
    pub tensors: usize,
}

/// Copies `request.source` to `request.dest`, the bytes counted on
/// `progress` (its total told once the server has said it; notes, such as
/// a copy that starts over, go to `progress` too).
///
/// # Errors
///
/// A source that is not a URL, no destination for a source other than
/// `hf://`, a concurrency or chunk size of 0
/// ([`Error::Request`](tensorfile::Error::Request)); a failed request, write
/// or verification.
pub fn fetch(request: &FetchRequest, progress: &dyn Progress) -> Result<FetchReport> {
    if !tensorfile_remote::is_url(&request.source) {
        return Err(tensorfile::Error::request(format!(
            "{}: not a URL (s3://, gs://, az://, abfss://, hf://, http:// or https://)",
            request.source
        )));
    }
    if request.dest.is_none() && !request.source.to_ascii_lowercase().starts_with("hf://") {
        return Err(tensorfile::Error::request(format!(
            "{}: a destination is needed (only an hf:// source goes to the Hugging Face cache without one)",
            request.source
        )));
    }
    if request.concurrency == 0 || request.chunk_size == 0 {
        return Err(tensorfile::Error::request(
            "--concurrency and --chunk-size must be at least 1",
        ));
    }
    let client = Client::new(
        request
            .remote
            .clone()
            .with_concurrency(request.concurrency)
            .with_chunk_size(request.chunk_size),
    );
    let options = FetchOptions::default()
        .with_sync(request.sync)
        .with_resume(request.resume);
    let fetched = match &request.dest {
        Some(dest) => {
            tensorfile_remote::fetch::fetch(&request.source, dest, &client, &options, progress)?
        }
        None => {
            tensorfile_remote::fetch::fetch_to_cache(&request.source, &client, &options, progress)?
        }
    };
    let counts = client.stats();
    let files = fetched
        .files
        .iter()
        .map(|f| {
            let (outcome, from) = match f.outcome {
                Outcome::Fetched => ("fetched", 0),
                Outcome::Resumed { from } => ("resumed", from),
                Outcome::UpToDate => ("up to date", 0),
                Outcome::FromCache { linked: true } => ("linked from cache", 0),
                Outcome::FromCache { linked: false } => ("copied from cache", 0),
            };
            FetchedEntry {
                bytes: f.len,
                header_checked: f.header_checked,
                name: f.name.clone(),
                outcome: outcome.to_string(),
                path: f.path.to_string_lossy().into_owned(),
                resumed_from: from,
                sha256: f.sha256.clone(),
                source: f.url.clone(),
            }
        })
        .collect();
    Ok(FetchReport {
        bytes_received: counts.body_bytes,
        dest: fetched.dest.to_string_lossy().into_owned(),
        files,
        requests: counts.requests,
        retries: counts.retries,
        set: fetched
            .set
            .map(|(shards, tensors)| SetCount { shards, tensors }),
        source: request.source.clone(),
    })
}
