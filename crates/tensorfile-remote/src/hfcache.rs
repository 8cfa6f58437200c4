//! The Hugging Face cache that transformers, vLLM and mlx-lm share, in
//! huggingface_hub's own layout, so that a model fetched by one tool is
//! not downloaded again by another:
//!
//! ```text
//! $HF_HUB_CACHE (else $HF_HOME/hub, else ~/.cache/huggingface/hub)
//! ├── .locks/models--ORG--NAME/HASH.lock      flock(2), as huggingface_hub's filelock
//! ├── blobs/                                 the shared store (huggingface_hub 2.4, Xet files)
//! │   ├── .huggingface-shared-blobs          its marker: a regular file holding "1\n"
//! │   └── XX/XETHASH                         a payload (XX: XETHASH's first two digits),
//! │       XETHASH.refs, XETHASH.lock         with its manifest of references and its lock
//! └── models--ORG--NAME/                     (datasets--ORG--NAME/ for datasets)
//!     ├── blobs/HASH                         a file's bytes, named by its LFS sha256 or git oid,
//!     │                                      or a link ../../blobs/XX/XETHASH into the store
//!     ├── refs/main                          the commit a branch or tag was at
//!     └── snapshots/COMMIT/PATH -> ../../blobs/HASH
//! ```
//!
//! Links are trusted only as far as checked: a snapshot entry is followed
//! only when it is a relative link that resolves, without leaving the
//! repository's folder, to `blobs/HASH` (HASH 40 or 64 hex digits), a
//! regular file; every directory on the way must be a directory, not a
//! link. A repository's blob may itself be a link of a second kind, into
//! the shared store: followed only when the store's marker is valid and
//! the link is relative and resolves by name to `<cache>/blobs/XX/XETHASH`,
//! a regular file (see [`HfCache::blob`]). Anything else is refused with
//! the link's path in the message.
//! `HF_HUB_OFFLINE=1` (or `TRANSFORMERS_OFFLINE=1`): reads come from the
//! cache only.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use crate::error::{Problem, RemoteError};
use crate::hub::{Repo, RepoKind};
use crate::s3::Listed;

/// The Hugging Face hub cache.
#[derive(Debug, Clone)]
pub struct HfCache {
    root: PathBuf,
}

/// A file found in the cache.
#[derive(Debug)]
pub struct Cached {
    /// The blob (or, in a cache made without links, the snapshot's copy).
    pub path: PathBuf,
    /// Its length.
    pub len: u64,
    /// Its blob's name: the LFS sha256 or the git oid (`None`: a copy).
    pub hash: Option<String>,
    /// The file, opened without following a link.
    pub file: File,
}

/// Whether the variable `n` is on, as huggingface_hub reads its flags
/// (`1`, `ON`, `YES`, `TRUE`).
fn env_on(n: &str) -> bool {
    std::env::var(n).ok().is_some_and(|v| {
        matches!(
            v.trim().to_ascii_uppercase().as_str(),
            "1" | "ON" | "YES" | "TRUE"
        )
    })
}

/// Whether `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) is on, as
/// huggingface_hub reads it (`1`, `ON`, `YES`, `TRUE`).
pub fn offline() -> bool {
    env_on("HF_HUB_OFFLINE") || env_on("TRANSFORMERS_OFFLINE")
}

/// Whether huggingface_hub would link a repository's blob into the shared
/// store: none of `HF_HUB_DISABLE_SHARED_BLOBS`, `HF_HUB_DISABLE_XET` and
/// `HF_HUB_DISABLE_SYMLINKS` is on (its `shared_blobs_enabled` and
/// `are_symlinks_supported`). Reading a store that is there does not
/// depend on it, as in huggingface_hub.
pub fn shared_blobs_enabled() -> bool {
    !env_on("HF_HUB_DISABLE_SHARED_BLOBS")
        && !env_on("HF_HUB_DISABLE_XET")
        && !env_on("HF_HUB_DISABLE_SYMLINKS")
}

/// Whether `s` names a payload of the shared store: a Xet file hash, 64
/// lowercase hex digits (huggingface_hub accepts no other form).
pub fn is_xet_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The shared store's folder in the cache root, the marker file in it and
/// the marker's only accepted content (layout version 1).
const STORE_DIR: &str = "blobs";
const STORE_MARKER: &str = ".huggingface-shared-blobs";
const STORE_MARKER_CONTENT: &[u8] = b"1\n";

/// The error of a file asked for while offline that the cache lacks
/// (`where_`: where it was looked for).
pub fn offline_missing(url: &str, where_: &Path) -> RemoteError {
    RemoteError::new(
        url,
        Problem::Offline(format!(
            "not in the Hugging Face cache ({}), and HF_HUB_OFFLINE is set: no request was made",
            where_.display()
        )),
    )
}

/// Whether `s` names a blob: 40 hex digits (a git oid) or 64 (a sha256).
pub fn is_hash(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `s` is a full commit hash.
fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An ETag as huggingface_hub makes a file name of it: without `W/` and
/// quotes.
pub fn normalize_etag(etag: &str) -> String {
    etag.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

impl HfCache {
    /// The cache the environment names: `HF_HUB_CACHE`, else
    /// `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub` (`HF_HOME` defaulting
    /// to `$XDG_CACHE_HOME/huggingface`, then `~/.cache/huggingface`).
    /// `None`: no home to put it in.
    pub fn from_env() -> Option<HfCache> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        let expand = |p: String| -> PathBuf {
            match (p.strip_prefix("~/"), var("HOME")) {
                (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
                _ => PathBuf::from(p),
            }
        };
        if let Some(p) = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
            return Some(HfCache { root: expand(p) });
        }
        let home = match var("HF_HOME") {
            Some(h) => expand(h),
            None => var("XDG_CACHE_HOME")
                .map(expand)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))?
                .join("huggingface"),
        };
        Some(HfCache {
            root: home.join("hub"),
        })
    }

    /// The cache at `root`.
    pub fn at(root: impl Into<PathBuf>) -> HfCache {
        HfCache { root: root.into() }
    }

    /// Its root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `models--ORG--NAME` (or `datasets--`).
    pub fn folder_name(repo: &Repo) -> String {
        let kind = match repo.kind {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        };
        format!("{kind}--{}", repo.id.replace('/', "--"))
    }

    /// The repository's folder.
    pub fn repo_dir(&self, repo: &Repo) -> PathBuf {
        self.root.join(HfCache::folder_name(repo))
    }

    /// The lock file huggingface_hub takes while it writes a blob.
    pub fn lock_path(&self, repo: &Repo, hash: &str) -> PathBuf {
        self.root
            .join(".locks")
            .join(HfCache::folder_name(repo))
            .join(format!("{hash}.lock"))
    }

    /// The commit the repository's revision names: the revision itself
    /// when it is a commit hash, else what `refs/REVISION` says (a regular
    /// file holding a commit hash).
    pub fn commit_of(&self, repo: &Repo) -> Option<String> {
        if is_commit(&repo.revision) {
            return Some(repo.revision.to_ascii_lowercase());
        }
        let rel = safe_relative(&repo.revision)?;
        let path = self.repo_dir(repo).join("refs").join(rel);
        if !self.dirs_are_dirs(&path) {
            return None;
        }
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > 1024 {
            return None;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let commit = text.trim();
        is_commit(commit).then(|| commit.to_ascii_lowercase())
    }

    /// Whether every directory from the repository folders' parent down to
    /// `path`'s parent is a directory (no link on the way).
    fn dirs_are_dirs(&self, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return false;
        };
        let mut at = self.root.clone();
        let parts: Vec<_> = rel.components().collect();
        for c in &parts[..parts.len().saturating_sub(1)] {
            at.push(c);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                _ => return false,
            }
        }
        true
    }

    /// The file `path` of the repository's revision, if the cache has it:
    /// `Ok(None)` when it has not; an error naming the entry when the
    /// snapshot's entry is a link that breaks the rules (see the module).
    ///
    /// # Errors
    /// A snapshot entry that is refused, or a blob that cannot be opened.
    pub fn lookup(&self, repo: &Repo, path: &str) -> Result<Option<Cached>, RemoteError> {
        let Some(commit) = self.commit_of(repo) else {
            return Ok(None);
        };
        self.lookup_at(repo, &commit, path)
    }

    /// [`HfCache::lookup`] at a commit.
    ///
    /// # Errors
    /// As [`HfCache::lookup`].
    pub fn lookup_at(
        &self,
        repo: &Repo,
        commit: &str,
        path: &str,
    ) -> Result<Option<Cached>, RemoteError> {
        let Some(rel) = safe_relative(path) else {
            return Ok(None);
        };
        let repo_dir = self.repo_dir(repo);
        let entry = repo_dir.join("snapshots").join(commit).join(&rel);
        let shown = entry.display().to_string();
        let refuse = |what: String| RemoteError::new(&shown, Problem::Cache(what));
        // Every directory from the repository's folder down is a directory.
        let mut at = repo_dir.clone();
        let mut inner: Vec<String> = vec!["snapshots".into(), commit.into()];
        inner.extend(
            rel.parent()
                .into_iter()
                .flat_map(|p| p.components())
                .map(|c| c.as_os_str().to_string_lossy().into_owned()),
        );
        for (i, part) in inner.iter().enumerate() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) if i >= 1 => {
                    return Err(RemoteError::new(
                        at.display().to_string(),
                        Problem::Cache(
                            "a snapshot's directory that is not a directory (a link?): refused"
                                .into(),
                        ),
                    ))
                }
                _ => return Ok(None),
            }
        }
        if !matches!(std::fs::symlink_metadata(&repo_dir), Ok(m) if m.is_dir()) {
            return Ok(None);
        }
        let meta = match std::fs::symlink_metadata(&entry) {
            Ok(m) => m,
            Err(_) => return Ok(None),
        };
        if meta.is_file() {
            // A cache made where links cannot be: the copy itself.
            let file = open_no_follow(&entry).map_err(|e| refuse(format!("cannot open: {e}")))?;
            return Ok(Some(Cached {
                path: entry,
                len: meta.len(),
                hash: None,
                file,
            }));
        }
        if !meta.file_type().is_symlink() {
            return Err(refuse("neither a file nor a link: refused".into()));
        }
        let target =
            std::fs::read_link(&entry).map_err(|e| refuse(format!("cannot read the link: {e}")))?;
        let shown_target = target.display().to_string();
        if target.is_absolute() {
            return Err(refuse(format!(
                "a snapshot link to the absolute path {shown_target}: refused (only relative links into the repository's blobs/ are followed)"
            )));
        }
        // The link's target, resolved by name from the entry's directory
        // (inside the repository's folder).
        let mut stack = inner.clone();
        for c in target.components() {
            match c {
                Component::Normal(n) => stack.push(n.to_string_lossy().into_owned()),
                Component::CurDir => {}
                Component::ParentDir => {
                    if stack.pop().is_none() {
                        return Err(refuse(format!(
                            "a snapshot link to {shown_target}, outside the repository's folder: refused"
                        )));
                    }
                }
                _ => {
                    return Err(refuse(format!(
                        "a snapshot link to {shown_target}: refused"
                    )))
                }
            }
        }
        let [blobs, hash] = &stack[..] else {
            return Err(refuse(format!(
                "a snapshot link to {shown_target}, not a file of the repository's blobs/: refused"
            )));
        };
        if blobs != "blobs" || !is_hash(hash) {
            return Err(refuse(format!(
                "a snapshot link to {shown_target}, not a blob named by its hash: refused"
            )));
        }
        let blob = self
            .blob(repo, hash)
            .map_err(|e| refuse(format!("its blob {}: {}", e.url, e.problem)))?;
        match blob {
            Some((path, len, file)) => Ok(Some(Cached {
                path,
                len,
                hash: Some(hash.to_ascii_lowercase()),
                file,
            })),
            // A link whose blob is gone: not cached.
            None => Ok(None),
        }
    }

    /// The blob `hash` of the repository, if it is there: a regular file
    /// (not a link) in a `blobs/` that is a directory, opened; or
    /// huggingface_hub's link from there into the shared store, checked
    /// (see the module), and the store's payload opened.
    ///
    /// # Errors
    /// The blob is there but is not a regular file, or cannot be opened.
    pub fn blob(
        &self,
        repo: &Repo,
        hash: &str,
    ) -> Result<Option<(PathBuf, u64, File)>, RemoteError> {
        if !is_hash(hash) {
            return Ok(None);
        }
        let blobs = self.repo_dir(repo).join("blobs");
        if !matches!(std::fs::symlink_metadata(&blobs), Ok(m) if m.is_dir())
            || !self.dirs_are_dirs(&blobs.join(hash))
        {
            return Ok(None);
        }
        let path = blobs.join(hash);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(_) => return Ok(None),
        };
        let shown = path.display().to_string();
        if meta.file_type().is_symlink() {
            return self.shared_payload(repo, &path);
        }
        if !meta.is_file() {
            return Err(RemoteError::new(
                shown,
                Problem::Cache("a blob that is not a regular file (a link?): refused".into()),
            ));
        }
        let file = open_no_follow(&path)
            .map_err(|e| RemoteError::new(&shown, Problem::Cache(format!("cannot open: {e}"))))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(meta.len());
        Ok(Some((path, len, file)))
    }

    /// The shared blob store's folder, `<cache>/blobs`.
    pub fn store_dir(&self) -> PathBuf {
        self.root.join(STORE_DIR)
    }

    /// The store's payload of the Xet file hash `xet`:
    /// `<cache>/blobs/XX/HASH`, XX its first two digits.
    pub fn store_path(&self, xet: &str) -> PathBuf {
        self.store_dir().join(&xet[..2.min(xet.len())]).join(xet)
    }

    /// Whether the cache has a shared blob store huggingface_hub would use:
    /// `<cache>/blobs` a directory (not a link) holding the marker
    /// `.huggingface-shared-blobs`, a regular file holding exactly `1\n`.
    pub fn shared_store_marked(&self) -> bool {
        let dir = self.store_dir();
        if !matches!(std::fs::symlink_metadata(&dir), Ok(m) if m.is_dir()) {
            return false;
        }
        let marker = dir.join(STORE_MARKER);
        if !matches!(std::fs::symlink_metadata(&marker), Ok(m) if m.is_file()) {
            return false;
        }
        let Ok(file) = open_no_follow(&marker) else {
            return false;
        };
        let mut text = Vec::new();
        // One byte more than the marker: a longer file is not the marker.
        let limit = STORE_MARKER_CONTENT.len() as u64 + 1;
        std::io::Read::read_to_end(&mut std::io::Read::take(&file, limit), &mut text).is_ok()
            && text == STORE_MARKER_CONTENT
    }

    /// Where a repository blob that is a link (`link`, checked by the
    /// caller to lie in the repository's real `blobs/` folder) leads, when
    /// it is huggingface_hub's link into the shared store: relative, going
    /// up and then down only, resolving by name to `<cache>/blobs/XX/HASH`
    /// (HASH a Xet hash, XX its first two digits) in a store with a valid
    /// marker, through directories that are not links, to a regular file.
    /// `Ok(None)`: such a link whose payload is gone (not cached).
    fn shared_payload(
        &self,
        repo: &Repo,
        link: &Path,
    ) -> Result<Option<(PathBuf, u64, File)>, RemoteError> {
        let shown = link.display().to_string();
        let refuse = |what: String| Err(RemoteError::new(&shown, Problem::Cache(what)));
        let target = std::fs::read_link(link).map_err(|e| {
            RemoteError::new(&shown, Problem::Cache(format!("cannot read the link: {e}")))
        })?;
        let shown_target = target.display().to_string();
        if target.is_absolute() {
            return refuse(format!(
                "a blob linked to the absolute path {shown_target}: refused (only relative links into the shared store {}/ are followed)",
                self.store_dir().display()
            ));
        }
        // Resolved by name from the link's folder, `<cache>/FOLDER/blobs`:
        // up first, then down, so that every folder passed is one checked.
        let mut stack = vec![HfCache::folder_name(repo), "blobs".to_string()];
        let mut down = false;
        for c in target.components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir if !down => {
                    if stack.pop().is_none() {
                        return refuse(format!(
                            "a blob linked to {shown_target}, outside the cache: refused"
                        ));
                    }
                }
                Component::Normal(n) => {
                    down = true;
                    stack.push(n.to_string_lossy().into_owned());
                }
                _ => return refuse(format!("a blob linked to {shown_target}: refused")),
            }
        }
        let xet = match &stack[..] {
            [store, prefix, xet]
                if store == STORE_DIR && is_xet_hash(xet) && xet.starts_with(prefix.as_str()) && prefix.len() == 2 =>
            {
                xet.clone()
            }
            _ => {
                return refuse(format!(
                    "a blob linked to {shown_target}, not a payload of the shared store (blobs/XX/HASH of the cache): refused"
                ))
            }
        };
        if !self.shared_store_marked() {
            return refuse(format!(
                "a blob linked to {shown_target}, into a shared store without a valid {STORE_MARKER} marker: refused"
            ));
        }
        let payload = self.store_path(&xet);
        let prefix = payload.parent().unwrap_or(&self.root);
        match std::fs::symlink_metadata(prefix) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return refuse(format!(
                    "a blob linked to {shown_target}, whose folder {} is not a directory (a link?): refused",
                    prefix.display()
                ))
            }
            Err(_) => return Ok(None),
        }
        let meta = match std::fs::symlink_metadata(&payload) {
            Ok(m) => m,
            Err(_) => return Ok(None),
        };
        if !meta.is_file() {
            return refuse(format!(
                "a blob linked to {shown_target}, a shared payload that is not a regular file (a link or a directory?): refused"
            ));
        }
        let file = open_no_follow(&payload).map_err(|e| {
            RemoteError::new(
                payload.display().to_string(),
                Problem::Cache(format!("cannot open: {e}")),
            )
        })?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(meta.len());
        Ok(Some((payload, len, file)))
    }

    /// Makes the repository's blob `blob` a link to the shared store's
    /// payload of the Xet hash `xet`, as huggingface_hub's
    /// `try_link_from_shared_store` does when a download finds the payload
    /// there: only when [`shared_blobs_enabled`], the store is marked, and
    /// the payload is a regular, readable file of `len` bytes. Under the
    /// payload's lock (`blobs/XX/HASH.lock`, `flock`), the link is made
    /// under a temporary name, the reference (`FOLDER/blobs/BLOB`) appended
    /// to the payload's manifest (`blobs/XX/HASH.refs`, flushed first, so
    /// that huggingface_hub's garbage collection sees it), and the link
    /// renamed into place. The caller holds the repository blob's own lock.
    ///
    /// huggingface_hub creates the store and its marker only when it
    /// publishes a download made through Xet (never one over plain HTTP, as
    /// tensorfile's are): so tensorfile never creates the store or the
    /// marker and never moves a payload into it; it only links to what is
    /// there. `false`: nothing was done (a miss), the blob is fetched.
    pub fn link_from_shared_store(&self, repo: &Repo, blob: &str, xet: &str, len: u64) -> bool {
        if !shared_blobs_enabled()
            || !is_hash(blob)
            || !is_xet_hash(xet)
            || !self.shared_store_marked()
        {
            return false;
        }
        let payload = self.store_path(xet);
        let prefix = self.store_dir().join(&xet[..2]);
        if !matches!(std::fs::symlink_metadata(&prefix), Ok(m) if m.is_dir()) {
            return false;
        }
        let folder = HfCache::folder_name(repo);
        let blobs = self.root.join(&folder).join("blobs");
        if !matches!(std::fs::symlink_metadata(&blobs), Ok(m) if m.is_dir())
            || !self.dirs_are_dirs(&blobs.join(blob))
        {
            return false;
        }
        let Ok(lock) = open_shared_rw(&payload.with_file_name(format!("{xet}.lock")), false) else {
            return false;
        };
        if lock.lock().is_err() {
            return false;
        }
        let usable = matches!(std::fs::symlink_metadata(&payload), Ok(m) if m.is_file() && m.len() == len)
            && open_no_follow(&payload).is_ok();
        if !usable {
            return false;
        }
        let tmp = blobs.join(format!(".{blob}.{}.shared", random_hex8()));
        let target = Path::new("..")
            .join("..")
            .join(STORE_DIR)
            .join(&xet[..2])
            .join(xet);
        let done = make_symlink(&target, &tmp).is_ok()
            && append_reference(
                &payload.with_file_name(format!("{xet}.refs")),
                &format!("{folder}/blobs/{blob}"),
            )
            .is_ok()
            && std::fs::rename(&tmp, blobs.join(blob)).is_ok();
        if !done {
            let _ = std::fs::remove_file(&tmp);
        }
        drop(lock);
        done
    }

    /// The files directly in `dir` (`""` or ending in `/`) of the cached
    /// revision, each checked as [`HfCache::lookup`] checks it (`None`:
    /// the revision is not cached). A blob named by a sha256 gives it.
    ///
    /// # Errors
    /// An entry is refused.
    pub fn list(&self, repo: &Repo, dir: &str) -> Result<Option<Vec<Listed>>, RemoteError> {
        let Some(commit) = self.commit_of(repo) else {
            return Ok(None);
        };
        let base = self.repo_dir(repo).join("snapshots").join(&commit);
        let Some(rel) = safe_relative(dir.trim_end_matches('/')) else {
            if !dir.is_empty() {
                return Ok(None);
            }
            return self.list_in(repo, &commit, &base, "");
        };
        self.list_in(repo, &commit, &base.join(rel), dir)
    }

    fn list_in(
        &self,
        repo: &Repo,
        commit: &str,
        at: &Path,
        dir: &str,
    ) -> Result<Option<Vec<Listed>>, RemoteError> {
        if !matches!(std::fs::symlink_metadata(at), Ok(m) if m.is_dir()) {
            return Ok(None);
        }
        let mut names: Vec<String> = std::fs::read_dir(at)
            .map_err(|e| RemoteError::new(at.display().to_string(), Problem::Cache(e.to_string())))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut out = Vec::new();
        for name in names {
            if let Some(c) = self.lookup_at(repo, commit, &format!("{dir}{name}"))? {
                out.push(Listed {
                    name,
                    size: c.len,
                    sha256: c.hash.filter(|h| h.len() == 64),
                });
            }
        }
        Ok(Some(out))
    }
}

/// A path of plain names (no `..`, no root), as a relative path.
pub(crate) fn safe_relative(path: &str) -> Option<PathBuf> {
    if path.is_empty() || path.starts_with('/') || path.contains('\\') || path.contains('\0') {
        return None;
    }
    let mut out = PathBuf::new();
    for part in path.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return None;
        }
        out.push(part);
    }
    Some(out)
}

/// Opens (creating, mode 0666 as huggingface_hub makes them for every user
/// of a shared cache) a lock or manifest of the shared store for writing,
/// refusing a link in its last component and anything not a regular file.
fn open_shared_rw(path: &Path, append: bool) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true);
    if append {
        options.append(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o666).custom_flags(libc::O_NOFOLLOW);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // The umask narrowed the mode; other users must take the lock too
        // (best effort, as huggingface_hub's fchmod).
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
    }
    Ok(file)
}

/// Appends `reference` and a newline to a payload's manifest, flushed to
/// disk before the link it names is made visible.
fn append_reference(manifest: &Path, reference: &str) -> std::io::Result<()> {
    let file = open_shared_rw(manifest, true)?;
    std::io::Write::write_all(&mut &file, format!("{reference}\n").as_bytes())?;
    file.sync_all()
}

/// Eight hex digits that differ between calls and processes, for a
/// temporary name.
fn random_hex8() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:08x}", h.finish() as u32)
}

#[cfg(unix)]
fn make_symlink(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

#[cfg(windows)]
fn make_symlink(target: &Path, at: &Path) -> std::io::Result<()> {
    std::os::windows::fs::symlink_file(target, at)
}

/// Opens a file, refusing a link in its last component.
pub(crate) fn open_no_follow(path: &Path) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(file)
}
