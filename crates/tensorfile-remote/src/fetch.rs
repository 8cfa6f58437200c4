//! Downloads: a remote file, a sharded set or a model directory copied to
//! local disk with parallel range requests, atomically per file, resuming
//! a partial copy, and verified.
//!
//! - **What is copied.** A file URL: that file. An index: the index and
//!   every shard it names. A directory (`s3://bucket/model/`,
//!   `hf://org/repo`): every file directly in it (config, tokenizer,
//!   weights; hidden files and sub-directories are left out), as its
//!   listing gives them; an HTTP directory, which cannot be listed: its
//!   index or `model.safetensors`, the shards, and the usual side files
//!   ([`SIDE_FILES`]) where the server has them.
//! - **How.** Every file is split into chunks of
//!   [`RemoteOptions::chunk_size`](crate::RemoteOptions::chunk_size);
//!   chunks of all the files share one queue worked by
//!   [`RemoteOptions::concurrency`](crate::RemoteOptions::concurrency)
//!   threads, each streaming its answer to disk (64 KiB in memory per
//!   request in flight). A file is written under a hidden partial name
//!   beside its target ([`PartialFile`]) and renamed into place only once
//!   complete and verified: the target is the old file or the new one,
//!   never a part.
//! - **Resuming.** Beside the partial file, a note records the object's
//!   length and `ETag` (or `Last-Modified`) and which chunks are on disk
//!   (written after the data is synced). A later fetch of the same object
//!   skips them; an object that changed since, or one without a validator,
//!   starts over.
//! - **Verification.** Every file against the sha256 the source gives
//!   (the Hub's LFS oid, an S3 full-object `x-amz-checksum-sha256`); every
//!   safetensors file against the reader rules of its header; an index
//!   must parse; a fetched set must open as a whole. A file that fails is
//!   removed, partial and all, and the error names its URL.
//! - **Left alone.** A target already holding the right sha256 (the Hub's
//!   LFS oid, S3's full-object checksum) is not fetched again. A file the
//!   source gives no sha256 for (plain HTTP, S3 without a checksum, the
//!   Hub's small files) is recorded when fetched: what the server said of
//!   it (`ETag`, `Last-Modified`, length) and the local file's length and
//!   modification time ([`FETCHED_NOTE`]). The next fetch asks with a
//!   `HEAD` (no body) and leaves the file alone when the server says the
//!   same and the file is as it was left.
//! - **The Hugging Face cache.** From `hf://`, a file whose blob the
//!   shared cache holds ([`crate::hfcache`]) is hard-linked from it (a
//!   copy across filesystems; its header checked), not fetched;
//!   [`fetch_to_cache`] fills the cache itself, as `huggingface-cli
//!   download` does. With `HF_HUB_OFFLINE`, only the cache is read.
//! - **Servers that do not take ranges** (`python3 -m http.server`): a
//!   file is copied with one sequential request (no parallel chunks) and
//!   cannot be resumed: a partial copy starts over from zero, which the
//!   progress is told ([`Progress::note`]).

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tensorfile_core::atomic::PartialFile;
use tensorfile_core::set::{ShardIndex, DIR_NAMES, MAX_INDEX_LEN};
use tensorfile_core::{ByteSource, FileSource, ReadOptions, SafeTensors, ShardedTensors};

use crate::error::{Problem, RemoteError};
use crate::hfcache::{is_hash, normalize_etag, Cached, HfCache};
use crate::http::Client;
use crate::location::{resolve, RemoteDir};
use crate::object::RemoteFile;

/// Files fetched beside the weights from a directory that cannot be
/// listed (a plain web server), where the server has them.
pub const SIDE_FILES: [&str; 12] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "README.md",
];

/// How a fetch writes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FetchOptions {
    /// Sync each file and its directory before and after the rename.
    pub sync: bool,
    /// Go on from a partial copy left by an earlier fetch.
    pub resume: bool,
    /// How the fetched headers are read when verified.
    pub read: ReadOptions,
}

tensorfile_core::with_fields!(FetchOptions {
    with_sync => sync: bool,
    with_resume => resume: bool,
    with_read => read: ReadOptions,
});

impl Default for FetchOptions {
    fn default() -> FetchOptions {
        FetchOptions {
            sync: true,
            resume: true,
            read: ReadOptions::default(),
        }
    }
}

/// Told how a fetch goes (a progress bar), from any thread: the format
/// core's one progress trait. A fetch tells [`Progress::total`] the bytes
/// still to fetch once known, [`Progress::advance`] the bytes written, and
/// [`Progress::note`] a copy that starts over instead of resuming.
pub use tensorfile_core::progress::Progress;

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Copied whole.
    Fetched,
    /// Copied from where an earlier fetch stopped: `from` bytes were on disk.
    Resumed {
        /// Bytes already there.
        from: u64,
    },
    /// The target already held it (its sha256 matched the source's).
    UpToDate,
    /// Taken from the Hugging Face cache, where the blob was: a hard link
    /// to it (`linked`), or a copy where the filesystem cannot link.
    FromCache {
        /// A hard link (else a copy).
        linked: bool,
    },
}

/// One file of a fetch.
#[derive(Debug, Clone)]
pub struct FetchedFile {
    /// Its name in the directory.
    pub name: String,
    /// Its source's public name.
    pub url: String,
    /// Where it is now.
    pub path: PathBuf,
    /// Its length in bytes.
    pub len: u64,
    /// What was done.
    pub outcome: Outcome,
    /// The sha256 it was verified against, if the source gave one.
    pub sha256: Option<String>,
    /// Whether its safetensors header was checked against the reader rules.
    pub header_checked: bool,
}

/// What a fetch did.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// Every file, in name order.
    pub files: Vec<FetchedFile>,
    /// The destination: the file, or the directory of a set.
    pub dest: PathBuf,
    /// Shards and tensors of the set fetched, when one was (it opened).
    pub set: Option<(usize, usize)>,
}

/// A file to fetch, as the listing (if any) describes it.
#[derive(Debug, Clone)]
struct Wanted {
    name: String,
    size: Option<u64>,
    sha256: Option<String>,
    /// Skipped when the server does not have it.
    optional: bool,
}

impl Wanted {
    /// Refuses `remote` when the listing gave a length it no longer has.
    fn check_listed_len(&self, remote: &RemoteFile) -> tensorfile_core::Result<()> {
        match self.size {
            Some(size) if size != remote.len() => Err(named(RemoteError::new(
                remote.name(),
                Problem::Changed {
                    what: "the length",
                    before: format!("{size} (listed)"),
                    now: remote.len().to_string(),
                },
            ))),
            _ => Ok(()),
        }
    }
}

/// What a partial copy's note says.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Note {
    source: String,
    len: u64,
    etag: Option<String>,
    last_modified: Option<String>,
    chunk_size: u64,
    /// Chunks on disk, as `[first, last]` runs of chunk numbers.
    done: Vec<[u64; 2]>,
}

/// One file being fetched.
struct Job {
    wanted: Wanted,
    remote: RemoteFile,
    target: PathBuf,
    partial: PartialFile,
    file: File,
    chunk: u64,
    chunks: u64,
    done: Mutex<BTreeSet<u64>>,
    /// Chunks finished since the note was last written, and when it was.
    since_note: Mutex<(u64, Instant)>,
    resumed_from: u64,
    /// Whether a note may be written (the object has a validator).
    resumable: bool,
    /// Whether a [`FETCHED_NOTE`] is written once it is in place (not in
    /// the Hugging Face cache, whose blobs are named by their hash).
    note_when_done: bool,
}

/// The companion of a fetched file's [`PartialFile`] recording what the
/// server said of it (its ETag, Last-Modified and length): `.NAME.tensorfile-partial.fetched`
/// beside it. A hidden file that fetch owns rather than an extended
/// attribute, which not every filesystem keeps (and a failure to set one
/// would be silent); it is opened as the partial file's companions are
/// (in the directory opened once, never through a link, only a regular
/// file of this user) and written atomically (a new file renamed over it).
pub const FETCHED_NOTE: &str = "fetched";

/// What the server said of a file when it was fetched, and the local file
/// it became: the next fetch leaves the file alone when both still hold.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct FetchedNote {
    source: String,
    len: u64,
    etag: Option<String>,
    last_modified: Option<String>,
    /// The local file's modification time, in nanoseconds since the epoch.
    mtime_ns: i128,
}

/// The longest note read back (one run per chunk of a file of millions
/// of chunks fits).
const MAX_NOTE_LEN: u64 = 64 << 20;

/// How often a file's note is brought up to date while it is fetched.
const NOTE_EVERY: Duration = Duration::from_secs(2);

/// An error about `url` as a library error naming it.
fn named(e: RemoteError) -> tensorfile_core::Error {
    tensorfile_core::Error::io(e.url.clone(), e.into_io_unnamed())
}

/// Copies `source` (a file, an index or a directory URL) to `dest`: a file
/// path (or a directory to put the file in) for a file, a directory for a
/// set or a model directory.
///
/// # Errors
/// A request fails, a local write fails, or a file fails verification (it
/// is then removed; the error names its URL). Files committed before a
/// failure stay; the others keep their partial copies for the next fetch.
pub fn fetch(
    source: &str,
    dest: &Path,
    client: &Arc<Client>,
    options: &FetchOptions,
    progress: &dyn Progress,
) -> tensorfile_core::Result<Fetched> {
    let resolved = resolve(source, client).map_err(named)?;
    let dir = resolved.dir;
    let (wanted, single_target) = match resolved.file {
        Some(name) => match index_shards(&dir, &name)? {
            Some(shards) => {
                let mut w = vec![plain(&name, false)];
                w.extend(shards.iter().map(|s| plain(s, false)));
                (w, None)
            }
            None => {
                let target = if dest.is_dir() || dest.as_os_str().to_string_lossy().ends_with('/') {
                    dest.join(&name)
                } else {
                    dest.to_path_buf()
                };
                let described = describe(&dir, &name)?;
                (vec![described], Some(target))
            }
        },
        None => (directory_files(&dir)?, None),
    };
    let dest_dir = match &single_target {
        Some(t) => t
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from(".")),
        None => dest.to_path_buf(),
    };
    std::fs::create_dir_all(&dest_dir).map_err(|e| tensorfile_core::Error::io(&dest_dir, e))?;
    let mut jobs = open_jobs(
        &dir,
        wanted,
        &dest_dir,
        single_target.as_deref(),
        options,
        progress,
    )?;
    let mut up_to_date = Vec::new();
    jobs.retain(|j| match j {
        Prepared::Skip(f) => {
            up_to_date.push(f.clone());
            false
        }
        Prepared::Job(_) => true,
    });
    let jobs: Vec<Job> = jobs
        .into_iter()
        .filter_map(|j| match j {
            Prepared::Job(j) => Some(*j),
            Prepared::Skip(_) => None,
        })
        .collect();
    let left: u64 = jobs.iter().map(|j| j.remote.len() - j.resumed_from).sum();
    progress.total(left);
    copy_chunks(&jobs, client, progress)?;
    let mut files = crate::concurrently(&jobs, verify_workers(), |job| finish(job, options))
        .into_iter()
        .collect::<tensorfile_core::Result<Vec<_>>>()?;
    // The jobs own the files; `finish` committed through copies of them.
    drop(jobs);
    files.extend(up_to_date);
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let set = if single_target.is_none() {
        set_counts(&files, &dest_dir, options)?
    } else {
        None
    };
    Ok(Fetched {
        files,
        dest: single_target.unwrap_or(dest_dir),
        set,
    })
}

fn plain(name: &str, optional: bool) -> Wanted {
    Wanted {
        name: name.to_string(),
        size: None,
        sha256: None,
        optional,
    }
}

/// Threads verifying files at once (hashing is CPU work).
fn verify_workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// The shards an index names, when `name` is an index; `None` for any
/// other file.
fn index_shards(dir: &RemoteDir, name: &str) -> tensorfile_core::Result<Option<Vec<String>>> {
    if !name.ends_with(".json") {
        return Ok(None);
    }
    let file = dir.open_plain(name).map_err(named)?;
    if file.len() > MAX_INDEX_LEN {
        return Ok(None);
    }
    let mut text = vec![0u8; file.len() as usize];
    file.read_exact_at(0, &mut text)
        .map_err(|e| tensorfile_core::Error::io(dir.name_of(name), e))?;
    let Ok(index) = ShardIndex::parse(&text) else {
        return Ok(None);
    };
    let mut shards: Vec<String> = index.weight_map.into_values().collect();
    shards.sort();
    shards.dedup();
    for s in &shards {
        if let Some(problem) = bad_name(s) {
            return Err(named(RemoteError::new(
                dir.name_of(name),
                Problem::Listing(format!("the index names shard {s:?}: {problem}")),
            )));
        }
    }
    Ok(Some(shards))
}

/// Why a name from a listing or an index is not fetched into a directory.
fn bad_name(name: &str) -> Option<&'static str> {
    if name.is_empty() || name == "." || name == ".." {
        Some("not a file name")
    } else if name.contains('/') || name.contains('\\') || name.contains('\0') {
        Some("a path, not a file name")
    } else {
        None
    }
}

/// An error about the partial file made an error about the URL it is a
/// copy of.
fn renamed(e: tensorfile_core::Error, url: &str) -> tensorfile_core::Error {
    use tensorfile_core::Error as E;
    match e {
        E::File { source, .. } => E::File {
            path: url.into(),
            source,
        },
        E::Io { source, .. } => E::Io {
            path: url.into(),
            source,
        },
        other => other.at(url),
    }
}

/// A single file, with what its directory's listing says of it (the Hub's
/// gives its sha256; other listings are not worth the requests).
fn describe(dir: &RemoteDir, name: &str) -> tensorfile_core::Result<Wanted> {
    if !dir.lists_digests() {
        return Ok(plain(name, false));
    }
    let listed = dir.list().map_err(named)?.unwrap_or_default();
    Ok(match listed.into_iter().find(|l| l.name == name) {
        Some(l) => Wanted {
            name: l.name,
            size: Some(l.size),
            sha256: l.sha256,
            optional: false,
        },
        None => plain(name, false),
    })
}

/// The files of a directory: its listing, or for a directory that cannot
/// be listed, its set and the usual side files.
fn directory_files(dir: &RemoteDir) -> tensorfile_core::Result<Vec<Wanted>> {
    if let Some(listed) = dir.list().map_err(named)? {
        let files: Vec<Wanted> = listed
            .into_iter()
            .filter(|l| !l.name.starts_with('.') && bad_name(&l.name).is_none())
            .map(|l| Wanted {
                name: l.name,
                size: Some(l.size),
                sha256: l.sha256,
                optional: false,
            })
            .collect();
        if files.is_empty() {
            return Err(named(RemoteError::new(dir.display(), Problem::NotFound)));
        }
        return Ok(files);
    }
    let mut files = Vec::new();
    for (index, single) in DIR_NAMES {
        if let Some(shards) = match index_shards(dir, index) {
            Ok(s) => s,
            Err(e) if e.is_not_found_file() => None,
            Err(e) => return Err(e),
        } {
            files.push(plain(index, false));
            files.extend(shards.iter().map(|s| plain(s, false)));
            break;
        }
        match dir.open_plain(single) {
            Ok(_) => {
                files.push(plain(single, false));
                break;
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(named(e)),
        }
    }
    if files.is_empty() {
        return Err(tensorfile_core::ShardError::NoWeights {
            dir: PathBuf::from(dir.display()),
        }
        .into());
    }
    files.extend(SIDE_FILES.iter().map(|n| plain(n, true)));
    Ok(files)
}

enum Prepared {
    Job(Box<Job>),
    Skip(FetchedFile),
}

/// Opens every wanted file (one request each, at once) and prepares its
/// partial copy; optional files the server does not have are dropped. A
/// file without a sha256 that was fetched before and is unchanged (see
/// [`FETCHED_NOTE`]) costs a `HEAD` and is left alone.
fn open_jobs(
    dir: &RemoteDir,
    wanted: Vec<Wanted>,
    dest_dir: &Path,
    single_target: Option<&Path>,
    options: &FetchOptions,
    progress: &dyn Progress,
) -> tensorfile_core::Result<Vec<Prepared>> {
    let workers = dir.client().options().concurrency;
    let target_of = |w: &Wanted| match single_target {
        Some(t) => t.to_path_buf(),
        None => dest_dir.join(&w.name),
    };
    let mut out = Vec::new();
    // Files whose blobs the Hugging Face cache holds are linked from it.
    let mut left = Vec::new();
    for w in wanted {
        match cached_for(dir, &w)? {
            Some(c) => out.push(Prepared::Skip(link_from_cache(
                dir,
                &w.name,
                c,
                &target_of(&w),
                options,
            )?)),
            None => left.push(w),
        }
    }
    let wanted = left;
    let unchanged = crate::concurrently(&wanted, workers, |w| {
        w.sha256
            .is_none()
            .then(|| unchanged_since_fetched(dir, &w.name, &target_of(w)))
            .flatten()
    });
    let mut to_open = Vec::new();
    for (w, same) in wanted.into_iter().zip(unchanged) {
        match same {
            Some(f) => out.push(Prepared::Skip(f)),
            None => to_open.push(w),
        }
    }
    let wanted = to_open;
    let opened = crate::concurrently(&wanted, workers, |w| dir.open_plain(&w.name));
    for (mut w, remote) in wanted.into_iter().zip(opened) {
        let remote = match remote {
            Ok(r) => r,
            Err(e) if w.optional && e.is_not_found() => continue,
            Err(e) => return Err(named(e)),
        };
        // A Hub file's answer names its blob: linked when the cache has it.
        if let Some(c) = cached_after_open(dir, &remote)? {
            out.push(Prepared::Skip(link_from_cache(
                dir,
                &w.name,
                c,
                &target_of(&w),
                options,
            )?));
            continue;
        }
        w.check_listed_len(&remote)?;
        if w.sha256.is_none() {
            w.sha256 = s3_sha256(&remote)?;
        }
        let target = target_of(&w);
        if let Some(sha) = &w.sha256 {
            if target.is_file() && hash_file(&target)? == *sha {
                out.push(Prepared::Skip(FetchedFile {
                    name: w.name.clone(),
                    url: remote.name().to_string(),
                    path: target,
                    len: remote.len(),
                    outcome: Outcome::UpToDate,
                    sha256: Some(sha.clone()),
                    header_checked: false,
                }));
                continue;
            }
        }
        out.push(Prepared::Job(Box::new(prepare(
            w, remote, target, options, progress,
        )?)));
    }
    Ok(out)
}

/// The target as a fetched file left alone, when its [`FETCHED_NOTE`]
/// says it came from this source, it is the file that was left (a regular
/// file, not a link, of the same length and modification time), and a
/// `HEAD` of the source now gives the same length and validator (its
/// `ETag`, else its `Last-Modified`). Anything else (no note, a `HEAD`
/// that fails) is `None`: the file is fetched as usual.
fn unchanged_since_fetched(dir: &RemoteDir, name: &str, target: &Path) -> Option<FetchedFile> {
    // Offline, nothing is asked of the Hub.
    if dir.hub().is_some_and(|(hub, _, _)| hub.offline()) {
        return None;
    }
    let partial = PartialFile::for_target(target).ok()?;
    let text = partial.read_companion(FETCHED_NOTE, 64 << 10).ok()??;
    let note: FetchedNote = serde_json::from_slice(&text).ok()?;
    let local = std::fs::symlink_metadata(target).ok()?;
    if note.source != dir.name_of(name)
        || !local.is_file()
        || local.len() != note.len
        || mtime_ns(&local) != Some(note.mtime_ns)
        || (note.etag.is_none() && note.last_modified.is_none())
    {
        return None;
    }
    let now = dir.head(name).ok()?;
    let same_validator = match &note.etag {
        Some(etag) => now.validator.etag.as_ref() == Some(etag),
        None => now.validator.etag.is_none() && now.validator.last_modified == note.last_modified,
    };
    (now.len == note.len && same_validator).then(|| FetchedFile {
        name: name.to_string(),
        url: note.source,
        path: target.to_path_buf(),
        len: note.len,
        outcome: Outcome::UpToDate,
        sha256: None,
        header_checked: false,
    })
}

/// A file's modification time in nanoseconds since the epoch.
fn mtime_ns(meta: &std::fs::Metadata) -> Option<i128> {
    let t = meta.modified().ok()?;
    Some(match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    })
}

/// S3's full-object sha256 of an S3 object, asked for with a `HEAD`
/// (composite checksums of multipart uploads are not a file's sha256).
fn s3_sha256(remote: &RemoteFile) -> tensorfile_core::Result<Option<String>> {
    if !remote.name().starts_with("s3://") {
        return Ok(None);
    }
    let kept = remote.head_now().map_err(named)?;
    let get = |n: &str| kept.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let Some(value) = get("x-amz-checksum-sha256") else {
        return Ok(None);
    };
    if get("x-amz-checksum-type").is_some_and(|t| t.eq_ignore_ascii_case("COMPOSITE"))
        || value.contains('-')
    {
        return Ok(None);
    }
    use base64::Engine;
    Ok(base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .ok()
        .filter(|d| d.len() == 32)
        .map(hex::encode))
}

/// The sha256 of a local file, in hex.
fn hash_file(path: &Path) -> tensorfile_core::Result<String> {
    let mut file = File::open(path).map_err(|e| tensorfile_core::Error::io(path, e))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| tensorfile_core::Error::io(path, e))?;
    Ok(hex::encode(hasher.finalize()))
}

/// The partial copy of a file: resumed from its note when the note is of
/// this object (same length, same validator, same chunks), else new.
fn prepare(
    wanted: Wanted,
    remote: RemoteFile,
    target: PathBuf,
    options: &FetchOptions,
    progress: &dyn Progress,
) -> tensorfile_core::Result<Job> {
    let partial = PartialFile::for_target(&target)?;
    let len = remote.len();
    // A server that does not take ranges gives the file as one stream.
    let chunk = if remote.ranges_ignored() {
        len.max(1)
    } else {
        remote.client().options().chunk_size.max(1)
    };
    let chunks = len.div_ceil(chunk).max(1);
    let validator = remote.validator().clone();
    let resumable =
        !remote.ranges_ignored() && (validator.etag.is_some() || validator.last_modified.is_some());
    let mut done = BTreeSet::new();
    let file = partial.open()?;
    let on_disk = file.metadata().map(|m| m.len()).unwrap_or(0);
    // A note that cannot be read (or is not ours) is replaced below.
    let note: Option<Note> = partial
        .read_companion("json", MAX_NOTE_LEN)
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_slice(&t).ok());
    let same = |n: &Note| {
        n.source == remote.name()
            && n.len == len
            && n.chunk_size == chunk
            && n.etag == validator.etag
            && n.last_modified == validator.last_modified
    };
    match note {
        Some(n) if options.resume && resumable && same(&n) && on_disk == len => {
            for [a, b] in n.done {
                if a <= b {
                    done.extend(a..=b.min(chunks - 1));
                }
            }
        }
        note => {
            if remote.ranges_ignored() && options.resume && (note.is_some() || on_disk > 0) {
                progress.note(&format!(
                    "{}: the server does not take ranges: its partial copy starts over from zero",
                    remote.name()
                ));
            }
            file.set_len(0)
                .and_then(|_| file.set_len(len))
                .map_err(|e| tensorfile_core::Error::io(partial.path(), e))?;
            partial.remove_companion("json")?;
        }
    }
    let resumed_from = done
        .iter()
        .map(|&c| (c * chunk + chunk).min(len) - c * chunk)
        .sum();
    // The first bytes came with the request that opened the object.
    if !done.contains(&0) {
        write_at(&file, remote.head_bytes(), 0)
            .map_err(|e| tensorfile_core::Error::io(partial.path(), e))?;
    }
    Ok(Job {
        wanted,
        remote,
        target,
        partial,
        file,
        chunk,
        chunks,
        done: Mutex::new(done),
        since_note: Mutex::new((0, Instant::now())),
        resumed_from,
        resumable,
        note_when_done: true,
    })
}

#[cfg(unix)]
fn write_at(file: &File, bytes: &[u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, at)
}

#[cfg(windows)]
fn write_at(file: &File, mut bytes: &[u8], mut at: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !bytes.is_empty() {
        let n = file.seek_write(bytes, at)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
        at += n as u64;
    }
    Ok(())
}

impl Job {
    /// The chunks still to copy, as `(chunk, start, end)`.
    fn todo(&self) -> Vec<(u64, u64, u64)> {
        let done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        let len = self.remote.len();
        let head = self.remote.head_bytes().len() as u64;
        (0..self.chunks)
            .filter(|c| !done.contains(c))
            .map(|c| {
                let start = c * self.chunk;
                let end = (start + self.chunk).min(len);
                // Chunk 0 begins where the opening request's bytes end.
                let start = if c == 0 { head.min(end) } else { start };
                (c, start, end)
            })
            .collect()
    }

    /// Records a chunk as on disk, and writes the note now and then.
    fn finished(&self, chunk: u64) -> tensorfile_core::Result<()> {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(chunk);
        let due = {
            let mut since = self.since_note.lock().unwrap_or_else(|e| e.into_inner());
            since.0 += 1;
            let due = since.1.elapsed() >= NOTE_EVERY;
            if due {
                *since = (0, Instant::now());
            }
            due
        };
        if due {
            self.write_note()?;
        }
        Ok(())
    }

    /// Syncs the data, then records which chunks are on disk (a note never
    /// claims bytes that a crash could lose).
    fn write_note(&self) -> tensorfile_core::Result<()> {
        if !self.resumable {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(|e| tensorfile_core::Error::io(self.partial.path(), e))?;
        let done: Vec<u64> = self
            .done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect();
        let mut runs: Vec<[u64; 2]> = Vec::new();
        for c in done {
            match runs.last_mut() {
                Some(r) if r[1] + 1 == c => r[1] = c,
                _ => runs.push([c, c]),
            }
        }
        let validator = self.remote.validator();
        let note = Note {
            source: self.remote.name().to_string(),
            len: self.remote.len(),
            etag: validator.etag.clone(),
            last_modified: validator.last_modified.clone(),
            chunk_size: self.chunk,
            done: runs,
        };
        let text = serde_json::to_vec(&note).unwrap_or_default();
        self.partial.write_companion("json", &text)
    }
}

/// Writes the [`FETCHED_NOTE`] of a file just put in place (`committed`,
/// its open file) when the source gave it no sha256 but a validator; any
/// old note goes first, so that a note never describes another file. Best
/// effort: without a note, the next fetch fetches the file again.
fn record_fetched(job: &Job, committed: Option<File>) {
    if !job.note_when_done {
        return;
    }
    let _ = job.partial.remove_companion(FETCHED_NOTE);
    let validator = job.remote.validator();
    if job.wanted.sha256.is_some()
        || (validator.etag.is_none() && validator.last_modified.is_none())
    {
        return;
    }
    let Some(mtime) = committed
        .and_then(|f| f.metadata().ok())
        .and_then(|m| mtime_ns(&m))
    else {
        return;
    };
    let note = FetchedNote {
        source: job.remote.name().to_string(),
        len: job.remote.len(),
        etag: validator.etag.clone(),
        last_modified: validator.last_modified.clone(),
        mtime_ns: mtime,
    };
    if let Ok(text) = serde_json::to_vec(&note) {
        let _ = job.partial.write_companion(FETCHED_NOTE, &text);
    }
}

/// Works every file's chunks off one queue with the client's concurrency;
/// on a failure, the others stop and every file's note is brought up to
/// date for the next fetch.
fn copy_chunks(
    jobs: &[Job],
    client: &Client,
    progress: &dyn Progress,
) -> tensorfile_core::Result<()> {
    let mut queue: Vec<(usize, u64, u64, u64)> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        queue.extend(job.todo().into_iter().map(|(c, a, b)| (i, c, a, b)));
    }
    // Chunk 0 of every file first: its head was written already.
    let queue = Mutex::new(queue.into_iter());
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<tensorfile_core::Error>> = Mutex::new(None);
    let workers = client.options().concurrency.max(1);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                if failed.load(Ordering::Relaxed) {
                    return;
                }
                let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                let Some((i, chunk, start, end)) = next else {
                    return;
                };
                let job = &jobs[i];
                let mut write_error = None;
                let streamed = job.remote.stream(start, end, &mut |at, piece| {
                    if write_error.is_none() {
                        match write_at(&job.file, piece, at) {
                            Ok(()) => progress.advance(piece.len() as u64),
                            Err(e) => write_error = Some(e),
                        }
                    }
                });
                let result = match (streamed, write_error) {
                    (_, Some(e)) => Err(tensorfile_core::Error::io(job.partial.path(), e)),
                    (Err(e), None) => Err(named(e)),
                    (Ok(()), None) => job.finished(chunk),
                };
                if let Err(e) = result {
                    failed.store(true, Ordering::Relaxed);
                    first_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                    return;
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => {
            for job in jobs {
                // Best effort: the error that stopped the fetch is the news.
                let _ = job.write_note();
            }
            Err(e)
        }
        None => Ok(()),
    }
}

/// Verifies a complete file and puts it in place; a file that fails is
/// removed with its note.
fn finish(job: &Job, options: &FetchOptions) -> tensorfile_core::Result<FetchedFile> {
    let path = job.partial.path();
    let url = job.remote.name().to_string();
    let fail = |e: tensorfile_core::Error| -> tensorfile_core::Error {
        let _ = job.partial.discard();
        let _ = job.partial.remove_companion("json");
        e
    };
    if let Some(expected) = &job.wanted.sha256 {
        let got = hash_file(&path)?;
        if got != *expected {
            return Err(fail(named(RemoteError::new(
                &url,
                Problem::Checksum {
                    what: "sha256".into(),
                    expected: expected.clone(),
                    got,
                },
            ))));
        }
    }
    let name = &job.wanted.name;
    let header_checked = name.ends_with(".safetensors");
    if header_checked {
        FileSource::open(&path)
            .map_err(|e| tensorfile_core::Error::io(&path, e))
            .and_then(|source| SafeTensors::from_source(source, &options.read))
            .map_err(|e| fail(renamed(e, &url)))?;
    }
    if name.ends_with(".index.json") {
        let text = std::fs::read(&path).map_err(|e| tensorfile_core::Error::io(&path, e))?;
        if let Err(problem) = ShardIndex::parse(&text) {
            return Err(fail(
                tensorfile_core::ShardError::BadIndex {
                    index: PathBuf::from(&url),
                    problem: problem.to_string(),
                }
                .into(),
            ));
        }
    }
    let file = job
        .file
        .try_clone()
        .map_err(|e| tensorfile_core::Error::io(&path, e))?;
    let committed = file.try_clone().ok();
    // The directory opened when the fetch began, not the path again.
    job.partial.commit(file, options.sync)?;
    let _ = job.partial.remove_companion("json");
    record_fetched(job, committed);
    Ok(FetchedFile {
        name: name.clone(),
        url,
        path: job.target.clone(),
        len: job.remote.len(),
        outcome: if job.resumed_from > 0 {
            Outcome::Resumed {
                from: job.resumed_from,
            }
        } else {
            Outcome::Fetched
        },
        sha256: job.wanted.sha256.clone(),
        header_checked,
    })
}

/// The Hugging Face cache's copy of a wanted Hub file, found without a
/// request: offline, the revision's snapshot entry (checked); online, the
/// blob named by the listing's sha256, of the listed length.
fn cached_for(dir: &RemoteDir, w: &Wanted) -> tensorfile_core::Result<Option<Cached>> {
    let Some((hub, repo, sub)) = dir.hub() else {
        return Ok(None);
    };
    let Some(cache) = hub.cache() else {
        return Ok(None);
    };
    if hub.offline() {
        return cache
            .lookup(repo, &format!("{sub}{}", w.name))
            .map_err(named);
    }
    let Some(sha) = &w.sha256 else {
        return Ok(None);
    };
    // Online, a blob that is refused (not a regular file) is fetched.
    Ok(match cache.blob(repo, sha).ok().flatten() {
        Some((path, len, file)) if w.size.is_none_or(|s| s == len) => Some(Cached {
            path,
            len,
            hash: Some(sha.clone()),
            file,
        }),
        _ => None,
    })
}

/// The blob an opened Hub file's answer names (`X-Linked-Etag`, else
/// `ETag`), when the cache has it with the same length (a blob that is
/// refused is fetched instead).
fn cached_after_open(
    dir: &RemoteDir,
    remote: &RemoteFile,
) -> tensorfile_core::Result<Option<Cached>> {
    let Some((hub, repo, _)) = dir.hub() else {
        return Ok(None);
    };
    let Some(cache) = hub.cache() else {
        return Ok(None);
    };
    let Some(etag) = blob_name(remote) else {
        return Ok(None);
    };
    Ok(match cache.blob(repo, &etag).ok().flatten() {
        Some((path, len, file)) if len == remote.len() => Some(Cached {
            path,
            len,
            hash: Some(etag),
            file,
        }),
        _ => None,
    })
}

/// The Xet hash a Hub answer gives a file stored with Xet, when
/// huggingface_hub would take it as one: `X-Xet-Hash`, with a token route
/// (a `Link` of `rel="xet-auth"`, or `X-Xet-Refresh-Route`) beside it.
fn xet_hash(remote: &RemoteFile) -> Option<String> {
    let hash = remote.kept_header("x-xet-hash")?.trim();
    let routed = remote.kept_header("x-xet-refresh-route").is_some()
        || remote.kept_header("link").is_some_and(|l| {
            l.split(',').any(|link| {
                link.split(';').skip(1).any(|p| {
                    p.split_once('=').is_some_and(|(k, v)| {
                        k.trim().eq_ignore_ascii_case("rel")
                            && v.trim().trim_matches('"') == "xet-auth"
                    })
                })
            })
        });
    (routed && crate::hfcache::is_xet_hash(hash)).then(|| hash.to_string())
}

/// The blob name a Hub answer gives a file, as huggingface_hub makes it.
fn blob_name(remote: &RemoteFile) -> Option<String> {
    remote
        .kept_header("x-linked-etag")
        .or(remote.validator().etag.as_deref())
        .map(normalize_etag)
        .filter(|e| is_hash(e))
        .map(|e| e.to_ascii_lowercase())
}

/// Puts a cached file at `target`: a hard link to the blob (a new name
/// beside the target, renamed over it), else a copy; a safetensors file's
/// header is checked first. A target that is the blob already is left.
fn link_from_cache(
    dir: &RemoteDir,
    name: &str,
    cached: Cached,
    target: &Path,
    options: &FetchOptions,
) -> tensorfile_core::Result<FetchedFile> {
    let url = dir.name_of(name);
    let done = |outcome| FetchedFile {
        name: name.to_string(),
        url: url.clone(),
        path: target.to_path_buf(),
        len: cached.len,
        outcome,
        sha256: cached.hash.clone().filter(|h| h.len() == 64),
        header_checked: name.ends_with(".safetensors"),
    };
    if name.ends_with(".safetensors") {
        SafeTensors::from_source(PreadFile(&cached.file, cached.len), &options.read)
            .map_err(|e| renamed(e, &url))?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(there), Ok(blob)) = (std::fs::symlink_metadata(target), cached.file.metadata()) {
            if there.is_file() && there.dev() == blob.dev() && there.ino() == blob.ino() {
                return Ok(done(Outcome::UpToDate));
            }
        }
    }
    let partial = PartialFile::for_target(target)?;
    partial.discard()?;
    let linked = std::fs::hard_link(&cached.path, partial.path()).is_ok();
    if linked {
        std::fs::rename(partial.path(), target).map_err(|e| {
            let _ = partial.discard();
            tensorfile_core::Error::io(target, e)
        })?;
        if options.sync {
            if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
                let _ = File::open(parent).and_then(|d| d.sync_all());
            }
        }
    } else {
        let file = partial.open()?;
        let mut from = &cached.file;
        let copied = std::io::copy(&mut from, &mut &file);
        if let Err(e) = copied {
            let _ = partial.discard();
            return Err(tensorfile_core::Error::io(partial.path(), e));
        }
        partial.commit(file, options.sync)?;
    }
    Ok(done(Outcome::FromCache { linked }))
}

/// A cached blob as a byte source for the header check.
struct PreadFile<'a>(&'a File, u64);

impl ByteSource for PreadFile<'_> {
    fn len(&self) -> u64 {
        self.1
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_exact_at(self.0, buf, offset)
        }
        #[cfg(windows)]
        {
            use std::os::windows::fs::FileExt;
            let mut done = 0;
            while done < buf.len() {
                let n = self.0.seek_read(&mut buf[done..], offset + done as u64)?;
                if n == 0 {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                done += n;
            }
            Ok(())
        }
    }
}

/// Fills the Hugging Face cache with an `hf://` file, index or repository
/// directory, as `huggingface-cli download` does: each file's blob
/// (`blobs/HASH`, written under huggingface_hub's lock for it,
/// `.locks/models--ORG--NAME/HASH.lock`), the snapshot's relative links
/// (`snapshots/COMMIT/NAME -> ../../blobs/HASH`) and the revision's ref
/// (`refs/REVISION`). Blobs already there (of the right length) are not
/// fetched again. Verified as [`fetch`] verifies; the result's files are
/// the snapshot's paths, its destination the snapshot's directory.
///
/// # Errors
/// Not an `hf://` URL, no cache (no home directory), an answer that names
/// no commit or blob, the revision moving while fetched, or what [`fetch`]
/// fails on. Offline (`HF_HUB_OFFLINE`), a file the cache lacks.
pub fn fetch_to_cache(
    source: &str,
    client: &Arc<Client>,
    options: &FetchOptions,
    progress: &dyn Progress,
) -> tensorfile_core::Result<Fetched> {
    let resolved = resolve(source, client).map_err(named)?;
    let dir = resolved.dir;
    let bad = |what: &str| {
        named(RemoteError::new(
            crate::public_name(source),
            Problem::BadUrl(what.into()),
        ))
    };
    let Some((hub, repo, sub)) = dir.hub() else {
        return Err(bad(
            "without a destination, fetch fills the Hugging Face cache: hf:// URLs only",
        ));
    };
    let Some(cache) = hub.cache().cloned() else {
        return Err(bad(
            "no Hugging Face cache: set HF_HUB_CACHE or HF_HOME (HOME is not set)",
        ));
    };
    let (repo, sub) = (repo.clone(), sub.to_string());
    let mut single = false;
    let wanted = match resolved.file {
        Some(name) => match index_shards(&dir, &name)? {
            Some(shards) => {
                let mut w = vec![plain(&name, false)];
                w.extend(shards.iter().map(|s| plain(s, false)));
                w
            }
            None => {
                single = true;
                vec![describe(&dir, &name)?]
            }
        },
        None => directory_files(&dir)?,
    };
    let repo_dir = cache.repo_dir(&repo);
    let mut files = Vec::new();
    let mut commit: Option<String> = None;
    // (file name, blob name) of every file, for the snapshot's links.
    let mut placed: Vec<(String, String)> = Vec::new();
    let mut jobs = Vec::new();
    let mut locks = Vec::new();
    let mut claimed = std::collections::BTreeSet::new();
    if hub.offline() {
        // Offline, the cache has every file or the fetch fails.
        for w in &wanted {
            match cache
                .lookup(&repo, &format!("{sub}{}", w.name))
                .map_err(named)?
            {
                Some(c) => files.push(FetchedFile {
                    name: w.name.clone(),
                    url: dir.name_of(&w.name),
                    path: repo_dir
                        .join("snapshots")
                        .join(cache.commit_of(&repo).unwrap_or_default())
                        .join(&sub)
                        .join(&w.name),
                    len: c.len,
                    outcome: Outcome::UpToDate,
                    sha256: c.hash.filter(|h| h.len() == 64),
                    header_checked: false,
                }),
                None if w.optional => {}
                None => {
                    return Err(named(crate::hfcache::offline_missing(
                        &dir.name_of(&w.name),
                        &repo_dir,
                    )))
                }
            }
        }
        commit = cache.commit_of(&repo);
    } else {
        let opened = crate::concurrently(&wanted, client.options().concurrency, |w| {
            dir.open_plain(&w.name)
        });
        for (mut w, remote) in wanted.into_iter().zip(opened) {
            let remote = match remote {
                Ok(r) => r,
                Err(e) if w.optional && e.is_not_found() => continue,
                Err(e) => return Err(named(e)),
            };
            let this = remote
                .kept_header("x-repo-commit")
                .map(str::to_ascii_lowercase)
                .filter(|c| c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()));
            let (Some(this), Some(blob)) = (this, blob_name(&remote)) else {
                return Err(named(RemoteError::new(
                    remote.name(),
                    Problem::Cache(
                        "the Hub's answer names no commit (X-Repo-Commit) or no blob (ETag): not cached".into(),
                    ),
                )));
            };
            match &commit {
                Some(c) if *c != this => {
                    return Err(named(RemoteError::new(
                        remote.name(),
                        Problem::Changed {
                            what: "the commit",
                            before: c.clone(),
                            now: this,
                        },
                    )))
                }
                _ => commit = Some(this),
            }
            w.check_listed_len(&remote)?;
            if w.sha256.is_none() && blob.len() == 64 {
                // The blob's name is its sha256 (an LFS file's oid).
                w.sha256 = Some(blob.clone());
            }
            placed.push((w.name.clone(), blob.clone()));
            let path = snapshot_path(
                &repo_dir,
                commit.as_deref().unwrap_or_default(),
                &sub,
                &w.name,
            );
            // Two files with one content share a blob: fetched once.
            if !claimed.insert(blob.clone()) {
                files.push(FetchedFile {
                    name: w.name.clone(),
                    url: remote.name().to_string(),
                    path,
                    len: remote.len(),
                    outcome: Outcome::UpToDate,
                    sha256: w.sha256.clone(),
                    header_checked: false,
                });
                continue;
            }
            let lock = lock_blob(&cache, &repo, &blob)?;
            let blob_path = repo_dir.join("blobs").join(&blob);
            match cache.blob(&repo, &blob).map_err(named)? {
                Some((_, len, _)) if len == remote.len() => {
                    files.push(FetchedFile {
                        name: w.name.clone(),
                        url: remote.name().to_string(),
                        path,
                        len,
                        outcome: Outcome::UpToDate,
                        sha256: w.sha256.clone(),
                        header_checked: false,
                    });
                    locks.push(lock);
                    continue;
                }
                _ => {}
            }
            let blobs = repo_dir.join("blobs");
            std::fs::create_dir_all(&blobs).map_err(|e| tensorfile_core::Error::io(&blobs, e))?;
            // A Xet file whose payload the shared store holds is linked
            // to it, not fetched (as huggingface_hub does when no blob is
            // there, a dangling link counting as none).
            if let Some(xet) = xet_hash(&remote) {
                if std::fs::metadata(&blob_path).is_err()
                    && cache.link_from_shared_store(&repo, &blob, &xet, remote.len())
                {
                    files.push(FetchedFile {
                        name: w.name.clone(),
                        url: remote.name().to_string(),
                        path,
                        len: remote.len(),
                        outcome: Outcome::UpToDate,
                        sha256: w.sha256.clone(),
                        header_checked: false,
                    });
                    locks.push(lock);
                    continue;
                }
            }
            let mut job = prepare(w, remote, blob_path, options, progress)?;
            job.note_when_done = false;
            jobs.push(job);
            locks.push(lock);
        }
    }
    let Some(commit) = commit else {
        return Err(named(RemoteError::new(dir.display(), Problem::NotFound)));
    };
    let left: u64 = jobs.iter().map(|j| j.remote.len() - j.resumed_from).sum();
    progress.total(left);
    copy_chunks(&jobs, client, progress)?;
    let done = crate::concurrently(&jobs, verify_workers(), |job| finish(job, options))
        .into_iter()
        .collect::<tensorfile_core::Result<Vec<_>>>()?;
    drop(jobs);
    for mut f in done {
        f.path = snapshot_path(&repo_dir, &commit, &sub, &f.name);
        files.push(f);
    }
    // The snapshot's links and the revision's ref, as huggingface_hub
    // makes them.
    for (name, blob) in &placed {
        link_snapshot(&repo_dir, &commit, &sub, name, blob)?;
    }
    if !hub.offline() {
        write_ref(&repo_dir, &repo.revision, &commit)?;
    }
    drop(locks);
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let snapshot = repo_dir.join("snapshots").join(&commit).join(&sub);
    let set = if single {
        None
    } else {
        set_counts(&files, &snapshot, options)?
    };
    Ok(Fetched {
        files,
        dest: snapshot,
        set,
    })
}

/// `snapshots/COMMIT/SUB/NAME` of the repository's folder.
fn snapshot_path(repo_dir: &Path, commit: &str, sub: &str, name: &str) -> PathBuf {
    let mut p = repo_dir.join("snapshots").join(commit);
    for part in sub.split('/').filter(|s| !s.is_empty()) {
        p.push(part);
    }
    p.join(name)
}

/// Takes huggingface_hub's lock of a blob (`flock`, waiting as it waits).
fn lock_blob(
    cache: &HfCache,
    repo: &crate::hub::Repo,
    blob: &str,
) -> tensorfile_core::Result<File> {
    let path = cache.lock_path(repo, blob);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| tensorfile_core::Error::io(parent, e))?;
    }
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o664).custom_flags(libc::O_NOFOLLOW);
    }
    let file = o
        .open(&path)
        .map_err(|e| tensorfile_core::Error::io(&path, e))?;
    file.lock()
        .map_err(|e| tensorfile_core::Error::io(&path, e))?;
    Ok(file)
}

/// `snapshots/COMMIT/SUB/NAME -> ../../[../]blobs/BLOB`: made when missing,
/// replaced when it is a link elsewhere (as huggingface_hub replaces it);
/// a directory there is an error.
fn link_snapshot(
    repo_dir: &Path,
    commit: &str,
    sub: &str,
    name: &str,
    blob: &str,
) -> tensorfile_core::Result<()> {
    let path = snapshot_path(repo_dir, commit, sub, name);
    let parent = path.parent().unwrap_or(repo_dir).to_path_buf();
    std::fs::create_dir_all(&parent).map_err(|e| tensorfile_core::Error::io(&parent, e))?;
    let depth = 2 + sub.split('/').filter(|s| !s.is_empty()).count();
    let mut target = PathBuf::new();
    for _ in 0..depth {
        target.push("..");
    }
    let target = target.join("blobs").join(blob);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            if std::fs::read_link(&path).ok().as_deref() == Some(target.as_path()) {
                return Ok(());
            }
            std::fs::remove_file(&path).map_err(|e| tensorfile_core::Error::io(&path, e))?;
        }
        Ok(m) if m.is_file() => {
            std::fs::remove_file(&path).map_err(|e| tensorfile_core::Error::io(&path, e))?;
        }
        Ok(_) => {
            return Err(named(RemoteError::new(
                path.display().to_string(),
                Problem::Cache("a directory where a snapshot's file goes".into()),
            )))
        }
        Err(_) => {}
    }
    make_link(&target, &path).map_err(|e| tensorfile_core::Error::io(&path, e))
}

#[cfg(unix)]
fn make_link(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

#[cfg(windows)]
fn make_link(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_file(target, at)
}

/// `refs/REVISION` holding the commit (a new file renamed over it), unless
/// the revision is the commit.
fn write_ref(repo_dir: &Path, revision: &str, commit: &str) -> tensorfile_core::Result<()> {
    if revision.eq_ignore_ascii_case(commit) {
        return Ok(());
    }
    let Some(rel) = crate::hfcache::safe_relative(revision) else {
        return Ok(());
    };
    let path = repo_dir.join("refs").join(rel);
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
        && std::fs::read_to_string(&path).is_ok_and(|t| t == commit)
    {
        return Ok(());
    }
    let parent = path.parent().unwrap_or(repo_dir);
    std::fs::create_dir_all(parent).map_err(|e| tensorfile_core::Error::io(parent, e))?;
    let partial = PartialFile::for_target(&path)?;
    let file = partial.open()?;
    std::io::Write::write_all(&mut &file, commit.as_bytes())
        .map_err(|e| tensorfile_core::Error::io(partial.path(), e))?;
    partial.commit(file, false)
}

/// The shard and tensor counts of the set among fetched `files` (in
/// `dir`), if they hold one: its index, or a single-file model's weights.
fn set_counts(
    files: &[FetchedFile],
    dir: &Path,
    options: &FetchOptions,
) -> tensorfile_core::Result<Option<(usize, usize)>> {
    let is_entry = |n: &str| {
        DIR_NAMES
            .iter()
            .any(|(index, single)| n == *index || n == *single)
            || n.ends_with(".safetensors.index.json")
    };
    if !files.iter().any(|f| is_entry(&f.name)) {
        return Ok(None);
    }
    let entry = files
        .iter()
        .find(|f| f.name.ends_with(".index.json"))
        .map_or_else(|| dir.to_path_buf(), |f| f.path.clone());
    let set = ShardedTensors::open_pread(&entry, &options.read)?;
    Ok(Some((set.shards().len(), set.len())))
}
