//! Remote directories ([`RemoteDir`], a [`Location`] for sets) and the way
//! in from a URL: [`open_file`], [`open_set`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tensorfile_core::set::{Location, ShardIndex, DIR_NAMES, MAX_INDEX_LEN};
use tensorfile_core::{ByteSource, ReadOptions, SafeTensors, ShardError, ShardedTensors};
use url::Url;

use crate::error::{Problem, RemoteError};
use crate::hfcache::HfCache;
use crate::http::{Client, Endpoint};
use crate::hub::{parse_hf, Hub, Repo};
use crate::object::RemoteFile;
use crate::s3::{Listed, S3Store};

pub use tensorfile_core::{is_url, url_of};

/// What a URL names, judged from the URL alone (a remote file cannot be
/// sniffed without a request): a set when it ends in `/`, names a `.json`
/// index, or its last part has no extension (a directory or a Hub
/// repository); otherwise one safetensors file.
pub fn kind(url: &str) -> tensorfile_core::InputKind {
    use tensorfile_core::InputKind as Kind;
    let last = url.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if url.ends_with('/') || last.ends_with(".json") || !last.contains('.') {
        Kind::SafetensorsSet
    } else {
        Kind::Safetensors
    }
}

/// Where a remote directory's files are.
#[derive(Debug, Clone)]
enum Base {
    /// An S3 prefix (`""` or ending in `/`).
    S3 { store: Arc<S3Store>, prefix: String },
    /// An HTTP(S) directory URL (ending in `/`).
    Http { url: Url },
    /// A prefix of an object store (`gs://`, `az://`), read through
    /// object_store: its URL (the key `""` or ending in `/`).
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    Store {
        store: crate::store::Store,
        url: crate::store::StoreUrl,
    },
    /// A directory of a Hub repository (`""` or ending in `/`), and the
    /// shared Hugging Face cache.
    Hub {
        hub: Arc<Hub>,
        repo: Repo,
        dir: String,
        cache: HubCache,
    },
}

/// A remote directory: an S3 prefix, a directory URL or a directory of a
/// Hub repository. It is a [`Location`], so a [`ShardedTensors`] reads its
/// index and shards through it; files already opened (see [`open_set`])
/// are handed over without another request.
pub struct RemoteDir {
    client: Arc<Client>,
    base: Base,
    display: String,
    max_header_len: u64,
    opened: Mutex<HashMap<String, Box<dyn ByteSource>>>,
    /// Files requested at their own URL rather than the directory's.
    overrides: HashMap<String, Url>,
}

impl std::fmt::Debug for RemoteDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteDir")
            .field("display", &self.display)
            .finish_non_exhaustive()
    }
}

/// What a URL names: a file in a directory, or a directory.
#[derive(Debug)]
pub struct Resolved {
    /// The directory.
    pub dir: RemoteDir,
    /// The file in it, when the URL names one (`.safetensors`, `.json`, or
    /// any name with an extension); `None` for a directory.
    pub file: Option<String>,
}

/// Splits a URL's path into its directory (ending in `/`, or empty) and
/// the file it names, if its last part looks like a file (has a `.`).
fn split_path(path: &str) -> (String, Option<String>) {
    if path.is_empty() || path.ends_with('/') {
        return (path.to_string(), None);
    }
    let (dir, last) = match path.rfind('/') {
        Some(i) => (&path[..=i], &path[i + 1..]),
        None => ("", path),
    };
    if last.contains('.') {
        (dir.to_string(), Some(last.to_string()))
    } else {
        (format!("{path}/"), None)
    }
}

/// Parses a URL and configures its store from the environment.
///
/// # Errors
/// Not a URL of a known scheme, or a configuration that is not usable.
pub fn resolve(input: &str, client: &Arc<Client>) -> Result<Resolved, RemoteError> {
    let bad =
        |what: &str| RemoteError::new(crate::public_name(input), Problem::BadUrl(what.into()));
    let lower = input.to_ascii_lowercase();
    let (base, display, file) = if lower.starts_with("s3://") {
        let rest = &input[5..];
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("expected s3://BUCKET/KEY"));
        }
        let (prefix, file) = split_path(key);
        let store = Arc::new(S3Store::from_env(bucket)?);
        let display = format!("s3://{bucket}/{prefix}");
        (Base::S3 { store, prefix }, display, file)
    } else if ["gs://", "az://", "abfs://", "abfss://"]
        .iter()
        .any(|p| lower.starts_with(p))
    {
        store_dir(input, client)?
    } else if lower.starts_with("hf://") {
        let (repo, path) = parse_hf(input)?;
        let (dir, file) = split_path(&path);
        let hub = Arc::new(Hub::from_env()?);
        let display = format!("{}{dir}", repo.display());
        let cache = HubCache {
            cache: HfCache::from_env(),
            offline: crate::hfcache::offline(),
        };
        (
            Base::Hub {
                hub,
                repo,
                dir,
                cache,
            },
            display,
            file,
        )
    } else if lower.starts_with("http://") || lower.starts_with("https://") {
        let url: Url = input.parse().map_err(|e| bad(&format!("not a URL: {e}")))?;
        let (dir, file) = split_path(url.path());
        let mut dir_url = url.clone();
        dir_url.set_path(&dir);
        dir_url.set_query(None);
        dir_url.set_fragment(None);
        let display = crate::public_name(dir_url.as_str());
        // A query (a presigned URL's signature) belongs to the file.
        if let (Some(name), Some(_)) = (&file, url.query()) {
            let dir = RemoteDir::new(client, Base::Http { url: dir_url }, display);
            return Ok(Resolved {
                dir: dir.with_file_url(name, url),
                file,
            });
        }
        (Base::Http { url: dir_url }, display, file)
    } else {
        return Err(bad(
            "not an s3://, gs://, az://, abfss://, hf://, http:// or https:// URL",
        ));
    };
    Ok(Resolved {
        dir: RemoteDir::new(client, base, display),
        file,
    })
}

/// A store URL's directory and file: `gs://` and `az://` (`abfss://`)
/// through object_store (S3 is read by our own client, above).
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
fn store_dir(
    input: &str,
    client: &Arc<Client>,
) -> Result<(Base, String, Option<String>), RemoteError> {
    let url = crate::store::StoreUrl::parse(input)?;
    let (prefix, file) = split_path(&url.key);
    let url = url.with_key(&prefix);
    let store = crate::store::Store::for_url(&url, client.options())?;
    let display = url.display();
    Ok((Base::Store { store, url }, display, file))
}

/// Without an object store, a `gs://` or `az://` URL is refused by name.
#[cfg(not(any(feature = "gcs", feature = "azure", feature = "s3-store")))]
fn store_dir(
    input: &str,
    _client: &Arc<Client>,
) -> Result<(Base, String, Option<String>), RemoteError> {
    Err(RemoteError::new(
        crate::public_name(input),
        Problem::BadUrl(
            "this build has no object stores (features gcs, azure of tensorfile-remote)".into(),
        ),
    ))
}

impl RemoteDir {
    fn new(client: &Arc<Client>, base: Base, display: String) -> RemoteDir {
        RemoteDir {
            client: client.clone(),
            base,
            display,
            max_header_len: tensorfile_core::DEFAULT_MAX_HEADER_LEN,
            opened: Mutex::new(HashMap::new()),
            overrides: HashMap::new(),
        }
    }

    /// A file whose URL is not the directory's URL plus its name (it has a
    /// query, say a presigned URL's signature): requested at that URL.
    fn with_file_url(mut self, name: &str, url: Url) -> RemoteDir {
        self.overrides.insert(name.to_string(), url);
        self
    }

    /// The directory's public name (ending in `/` unless empty).
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The client its requests go through.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The public name of a file in it.
    pub fn name_of(&self, file: &str) -> String {
        format!("{}{file}", self.display)
    }

    /// The endpoint of a file in it.
    fn endpoint(&self, file: &str) -> Endpoint {
        if let Some(url) = self.overrides.get(file) {
            return Endpoint::Http {
                url: url.clone(),
                token: None,
                denied_hint: HTTP_DENIED,
            };
        }
        match &self.base {
            Base::S3 { store, prefix } => Endpoint::S3 {
                store: store.clone(),
                key: format!("{prefix}{file}"),
            },
            Base::Http { url } => Endpoint::Http {
                url: url
                    .join(&crate::hub::quote(file, false))
                    .unwrap_or_else(|_| url.clone()),
                token: None,
                denied_hint: HTTP_DENIED,
            },
            Base::Hub { hub, repo, dir, .. } => hub.file(repo, &format!("{dir}{file}")),
            #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
            Base::Store { store, url } => {
                let key = format!("{}{file}", url.key);
                Endpoint::Store {
                    object: Arc::new(crate::store::StoreObject {
                        store: store.clone(),
                        path: object_store::path::Path::parse(&key)
                            .unwrap_or_else(|_| object_store::path::Path::from(key.as_str())),
                    }),
                }
            }
        }
    }

    /// Opens a file in it: one request for its first 64 KiB, and a second
    /// when a safetensors header is longer.
    ///
    /// # Errors
    /// The request fails (`NotFound` when there is no such file).
    pub fn open_file(&self, file: &str) -> Result<RemoteFile, RemoteError> {
        if let Some(cached) = self.cached_file(file)? {
            return Ok(cached);
        }
        let mut opened = RemoteFile::open_with_header(
            self.client.clone(),
            self.endpoint(file),
            self.name_of(file),
            self.max_header_len,
        )?;
        self.read_cached_blob(&mut opened);
        Ok(opened)
    }

    /// A Hub file read from the Hugging Face cache without a request: when
    /// offline (`HF_HUB_OFFLINE`; a file the cache lacks is then an error
    /// naming the variable), or when the revision is a commit the cache
    /// has. `Ok(None)`: not a Hub directory, or ask the Hub.
    ///
    /// # Errors
    /// Offline and not cached, or a snapshot entry that is refused.
    fn cached_file(&self, file: &str) -> Result<Option<RemoteFile>, RemoteError> {
        let Base::Hub {
            repo,
            dir,
            cache: hub,
            ..
        } = &self.base
        else {
            return Ok(None);
        };
        let pinned =
            repo.revision.len() == 40 && repo.revision.bytes().all(|b| b.is_ascii_hexdigit());
        if !hub.offline() && !pinned {
            return Ok(None);
        }
        let path = format!("{dir}{file}");
        let found = match hub.cache() {
            Some(cache) => cache.lookup(repo, &path)?,
            None => None,
        };
        match found {
            Some(c) => RemoteFile::cached(
                self.client.clone(),
                self.endpoint(file),
                self.name_of(file),
                c.file,
                c.len,
                c.hash,
                self.max_header_len,
            )
            .map(Some),
            None if hub.offline() => {
                let at = hub
                    .cache()
                    .map(|c| c.repo_dir(repo))
                    .unwrap_or_else(|| PathBuf::from("(no cache: HOME is not set)"));
                Err(crate::hfcache::offline_missing(&self.name_of(file), &at))
            }
            None => Ok(None),
        }
    }

    /// Once a Hub file is opened (one request, which names its blob: the
    /// `X-Linked-Etag` of an LFS file, the `ETag` of another), its other
    /// bytes are read from the Hugging Face cache when the blob is there
    /// with the same length. The cache is never filled here.
    fn read_cached_blob(&self, opened: &mut RemoteFile) {
        let Base::Hub {
            repo, cache: hub, ..
        } = &self.base
        else {
            return;
        };
        let Some(cache) = hub.cache() else { return };
        let etag = opened
            .kept_header("x-linked-etag")
            .or(opened.validator().etag.as_deref())
            .map(crate::hfcache::normalize_etag);
        let Some(etag) = etag.filter(|e| crate::hfcache::is_hash(e)) else {
            return;
        };
        if let Ok(Some((_, len, file))) = cache.blob(repo, &etag) {
            if len == opened.len() {
                opened.read_from(file);
            }
        }
    }

    /// The Hub directory's cache, repository and directory, if it is one.
    pub(crate) fn hub(&self) -> Option<(&HubCache, &Repo, &str)> {
        match &self.base {
            Base::Hub {
                repo, dir, cache, ..
            } => Some((cache, repo, dir)),
            _ => None,
        }
    }

    /// A `HEAD` of a file in it: its length and validator, no body.
    pub(crate) fn head(&self, file: &str) -> Result<crate::http::Meta, RemoteError> {
        self.client.head(&self.name_of(file), &self.endpoint(file))
    }

    /// Whether its listing gives each file's sha256 (the Hub's does).
    pub(crate) fn lists_digests(&self) -> bool {
        matches!(self.base, Base::Hub { .. })
    }

    /// Opens a file in it with one request for its first 64 KiB, whatever
    /// it holds.
    ///
    /// # Errors
    /// The request fails (`NotFound` when there is no such file).
    pub fn open_plain(&self, file: &str) -> Result<RemoteFile, RemoteError> {
        if let Some(cached) = self.cached_file(file)? {
            return Ok(cached);
        }
        let mut opened =
            RemoteFile::open(self.client.clone(), self.endpoint(file), self.name_of(file))?;
        self.read_cached_blob(&mut opened);
        Ok(opened)
    }

    /// The files directly in it, with their sizes (and sha256 where the
    /// listing gives one); `None` for an HTTP directory, which cannot be
    /// listed.
    ///
    /// # Errors
    /// The listing fails.
    pub fn list(&self) -> Result<Option<Vec<Listed>>, RemoteError> {
        match &self.base {
            Base::S3 { store, prefix } => store
                .list(prefix, |url| {
                    let endpoint = Endpoint::Http {
                        url,
                        token: None,
                        denied_hint: store.denied_hint(),
                    };
                    let (body, _) =
                        self.client
                            .get_document(&self.display, &endpoint, LISTING_LIMIT)?;
                    Ok(body)
                })
                .map(Some),
            Base::Hub {
                repo,
                dir,
                cache: hub,
                ..
            } if hub.offline() => {
                let listed = match hub.cache() {
                    Some(cache) => cache.list(repo, dir)?,
                    None => None,
                };
                match listed {
                    Some(l) => Ok(Some(l)),
                    None => Err(crate::hfcache::offline_missing(
                        &self.display,
                        &hub.cache()
                            .map(|c| c.repo_dir(repo))
                            .unwrap_or_else(|| PathBuf::from("(no cache: HOME is not set)")),
                    )),
                }
            }
            Base::Hub { hub, repo, dir, .. } => hub.list(&self.client, repo, dir).map(Some),
            Base::Http { .. } => Ok(None),
            #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
            Base::Store { store, url } => {
                crate::store::list(&self.client, &self.display, store, &url.path()?).map(Some)
            }
        }
    }

    /// Keeps an opened file, handed over by the next [`Location::open`].
    fn keep(&self, file: &str, source: Box<dyn ByteSource>) {
        self.opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(file.to_string(), source);
    }

    /// Opens `files` at once (up to the client's concurrency), keeping each
    /// that opens; failures are left for [`Location::open`] to report.
    fn open_all(&self, files: &[String]) {
        let opened = crate::concurrently(files, self.client.options().concurrency, |f| {
            self.open_file(f).ok()
        });
        for (f, o) in files.iter().zip(opened) {
            if let Some(o) = o {
                self.keep(f, Box::new(o));
            }
        }
    }

    /// The set's entry file in this directory: an index or a single file
    /// (as a local directory is searched), and whether both are there.
    fn entry(&self) -> Result<(String, Option<String>), RemoteError> {
        if let Some(listed) = self.list()? {
            let has = |n: &str| listed.iter().any(|l| l.name == n);
            for (index, single) in DIR_NAMES {
                match (has(index), has(single)) {
                    (true, true) => return Ok((index.into(), Some(single.into()))),
                    (true, false) => return Ok((index.into(), None)),
                    (false, true) => return Ok((single.into(), None)),
                    (false, false) => {}
                }
            }
        } else {
            // Not listable: ask for each name in turn.
            for (index, single) in DIR_NAMES {
                for name in [index, single] {
                    match self.open_file(name) {
                        Ok(f) => {
                            self.keep(name, Box::new(f));
                            return Ok((name.into(), None));
                        }
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(RemoteError::new(&self.display, Problem::NotFound))
    }
}

/// The shared Hugging Face cache as a Hub directory sees it.
#[derive(Debug, Clone)]
pub(crate) struct HubCache {
    /// The cache (`None`: no home to find it in).
    cache: Option<HfCache>,
    /// `HF_HUB_OFFLINE`: the cache only, no request.
    offline: bool,
}

impl HubCache {
    /// The cache read from (and that a fetch without a destination fills).
    pub(crate) fn cache(&self) -> Option<&HfCache> {
        self.cache.as_ref()
    }

    /// Whether `HF_HUB_OFFLINE` is set.
    pub(crate) fn offline(&self) -> bool {
        self.offline
    }
}

/// The longest page of a listing read, in bytes.
const LISTING_LIMIT: u64 = 64 << 20;

/// What a 401 or 403 from a plain web server means.
const HTTP_DENIED: &str = "the server wants credentials this URL does not carry";

impl Location for RemoteDir {
    fn path_of(&self, file: &str) -> PathBuf {
        PathBuf::from(self.name_of(file))
    }

    fn open(&self, file: &str) -> std::io::Result<Box<dyn ByteSource>> {
        let kept = self
            .opened
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(file);
        match kept {
            Some(source) => Ok(source),
            None => Ok(Box::new(
                self.open_file(file).map_err(RemoteError::into_io_unnamed)?,
            )),
        }
    }
}

/// Opens one remote safetensors file and validates its header: one
/// request when the header fits in the first 64 KiB, two otherwise.
///
/// # Errors
/// The URL names no file, a request fails, or the file breaks a reader rule
/// (the error names the URL).
pub fn open_file(
    url: &str,
    client: &Arc<Client>,
    options: &ReadOptions,
) -> tensorfile_core::Result<SafeTensors<RemoteFile>> {
    let name_err = |e: RemoteError| tensorfile_core::Error::io(e.url.clone(), e.into_io_unnamed());
    let resolved = resolve(url, client).map_err(name_err)?;
    let Some(file) = resolved.file else {
        return Err(name_err(RemoteError::new(
            resolved.dir.display(),
            Problem::BadUrl("a directory, not a file".into()),
        )));
    };
    let mut dir = resolved.dir;
    dir.max_header_len = options.max_header_len;
    let name = dir.name_of(&file);
    let source = dir.open_file(&file).map_err(name_err)?;
    SafeTensors::from_source(source, options)
        .map(|f| f.named(&name))
        .map_err(|e| e.at(&name))
}

/// The directory a file's URL is in (where a config.json beside the file
/// is looked for), configured from the environment as [`resolve`] does.
///
/// # Errors
/// As [`resolve`].
pub fn dir_of(url: &str, client: &Arc<Client>) -> Result<RemoteDir, RemoteError> {
    resolve(url, client).map(|r| r.dir)
}

/// Opens a remote set: a directory (`s3://bucket/model/`, `hf://org/repo`,
/// `https://host/model/`), an index, or a single file, and validates it as
/// [`ShardedTensors::open`] does. Only headers are read: the index (one
/// request when it fits in 64 KiB), then every shard's header at once (one
/// request each when it fits in 64 KiB), plus a listing for an S3 or Hub
/// directory. Tensors are then read on demand with range requests.
///
/// # Errors
/// As [`ShardedTensors::open`]; failures of requests name the URL.
pub fn open_set(
    url: &str,
    client: &Arc<Client>,
    options: &ReadOptions,
) -> tensorfile_core::Result<ShardedTensors> {
    let name_err = |e: RemoteError| tensorfile_core::Error::io(e.url.clone(), e.into_io_unnamed());
    let resolved = resolve(url, client).map_err(name_err)?;
    let mut dir = resolved.dir;
    dir.max_header_len = options.max_header_len;
    let (entry, single) = match resolved.file {
        Some(f) => (f, None),
        None => dir.entry().map_err(|e| {
            if e.is_not_found() {
                tensorfile_core::Error::from(ShardError::NoWeights {
                    dir: PathBuf::from(dir.display()),
                })
            } else {
                name_err(e)
            }
        })?,
    };
    if entry.ends_with(".json") {
        // The index, whole, then every shard it names at once.
        let index_name = dir.name_of(&entry);
        let index = {
            let kept = dir
                .opened
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&entry);
            let source = match kept {
                Some(s) => s,
                None => Box::new(dir.open_file(&entry).map_err(name_err)?),
            };
            let len = source.len();
            if len > MAX_INDEX_LEN {
                return Err(ShardError::BadIndex {
                    index: PathBuf::from(&index_name),
                    problem: format!("longer than {MAX_INDEX_LEN} bytes"),
                }
                .into());
            }
            let mut text = vec![0u8; len as usize];
            source
                .read_exact_at(0, &mut text)
                .map_err(|e| tensorfile_core::Error::io(&index_name, e))?;
            text
        };
        if let Ok(parsed) = ShardIndex::parse(&index) {
            let mut shards: Vec<String> = parsed.weight_map.into_values().collect();
            shards.sort();
            shards.dedup();
            shards.retain(|s| !s.contains('/') && !s.contains('\\') && s.ends_with(".safetensors"));
            dir.open_all(&shards);
        }
        dir.keep(&entry, Box::new(index));
    }
    let location: Arc<dyn Location> = Arc::new(dir);
    let display = location.path_of("");
    let set = ShardedTensors::open_at(location, display.clone(), &entry, options);
    let Some(single) = single else { return set };
    // Both an index and the single file, as mlx-lm writes them: the index
    // must map every tensor to that file.
    let conflict = |problem: String| -> tensorfile_core::Error {
        ShardError::Ambiguous {
            dir: display.clone(),
            single: single.clone(),
            index: entry.clone(),
            problem,
        }
        .into()
    };
    let set = set.map_err(|e| conflict(format!("the index does not open: {e}")))?;
    let names: Vec<&str> = set.shards().iter().map(|s| s.name()).collect();
    if names != [single.as_str()] {
        return Err(conflict(format!(
            "the index maps tensors to {}",
            names.join(", ")
        )));
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_directory_and_file() {
        assert_eq!(split_path(""), ("".into(), None));
        assert_eq!(split_path("model/"), ("model/".into(), None));
        assert_eq!(split_path("model"), ("model/".into(), None));
        assert_eq!(
            split_path("a/b/model.safetensors"),
            ("a/b/".into(), Some("model.safetensors".into()))
        );
        assert_eq!(split_path("x.json"), ("".into(), Some("x.json".into())));
    }

    #[test]
    fn urls_are_recognized() {
        assert!(is_url("s3://b/k") && is_url("HTTPS://h/x") && is_url("hf://o/r"));
        assert!(!is_url("s3://") && !is_url("model.safetensors") && !is_url("/tmp/s3:/x"));
    }
}
