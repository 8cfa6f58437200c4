//! One set, many writers, into a bucket: [`BucketStage`], the core's
//! [`SetStage`] over an object store.
//!
//! The protocol is the core's ([`tensorfile_core::set::StagedSet`]); only
//! where things are kept differs. For the set `PREFIX` in `s3://b/out/`:
//!
//! - the plan is `s3://b/out/.tensorfile-set-<id>/plan.json`, put if
//!   absent (every process staging the same plan puts the same text);
//! - each part is put under the staging prefix by an [`Upload`]: complete
//!   or absent (a part written again replaces the old one whole);
//! - the commit checks every part (its length and header, read with one
//!   ranged request), publishes each by a server-side copy to its final
//!   name followed by the staged part's removal, puts the index last, and
//!   removes everything under the staging prefix, sweeping pending
//!   multipart uploads there too ([`crate::upload::remove_pending`]).
//!
//! Until the commit no object has one of the set's own names; after it
//! the index names only shards already there.
//!
//! **The lock.** A bucket has no shared lock. A commit or an abort puts
//! `.tensorfile-set-<id>/lock` if absent and removes it when done: two of
//! them never run at once, and a writer refuses to start while it is
//! there. A writer cannot be seen by the commit, so the protocol's order
//! is kept by the caller: commit only after every writer has finished (as
//! on a file system without locks). A writer whose part lands after an
//! abort or a commit removed the staging prefix removes that part again.
//! A lock left by a killed commit is named in the refusal: remove it once
//! no commit runs.
//!
//! A server-side copy of S3 is one `CopyObject`, at most 5 GiB (object_store
//! has no multipart copy): a larger part (a tensor over 5 GiB has a shard
//! of its own) is published by reading it back in ranges into an
//! [`Upload`] of its final name, the data passing through this process.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::{ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tensorfile_core::set::{PartHead, SetStage, StagedPlan, STAGING_PREFIX};
use tensorfile_core::writer::{Layout, StreamWriter};
use tensorfile_core::{Error, OutputError, Result};

use crate::error::{Problem, RemoteError};
use crate::http::RemoteOptions;
use crate::store::{self, Store, StoreUrl};
use crate::upload::{get_small, Small, Upload, UploadOptions};

/// The staged plan's name inside the staging prefix.
const PLAN_FILE: &str = "plan.json";
/// The commit's (or abort's) lock's name inside the staging prefix.
const LOCK_FILE: &str = "lock";
/// The largest plan read.
const MAX_PLAN_LEN: u64 = 256 << 20;

/// A set staged under a bucket's prefix: see the module's documentation.
#[derive(Debug, Clone)]
pub struct BucketStage {
    store: Store,
    /// The output "directory".
    out: StoreUrl,
    /// Its key, without a trailing `/` (empty: the bucket's root).
    base: String,
    /// The staging prefix's key, ending in `/`.
    staging: String,
    prefix: String,
    upload: UploadOptions,
    /// The largest part published by a server-side copy; larger ones are
    /// read back and uploaded (S3's `CopyObject` limit; none elsewhere).
    copy_limit: u64,
}

/// S3's largest `CopyObject`.
const S3_COPY_LIMIT: u64 = 5 << 30;
/// The bytes of one ranged read of a part published by reading it back.
const COPY_CHUNK: u64 = 16 << 20;

/// The objects (names and sizes) and sub-prefixes (names) under a prefix.
type Listing = (Vec<(String, u64)>, Vec<String>);

/// A held commit lock (removed when dropped), or a writer's check.
#[derive(Debug)]
pub struct BucketLock {
    /// The lock's store, key and wait; a write under way while held (a
    /// signal lets the commit or abort fail and the lock go first).
    held: Option<(Store, Path, Duration, crate::interrupt::Busy)>,
}

impl Drop for BucketLock {
    fn drop(&mut self) {
        if let Some((s, p, wait, _busy)) = self.held.take() {
            let _ = store::cleanup(
                async move { s.store.delete(&p).await },
                Some(Instant::now() + wait),
            );
        }
    }
}

/// A core error about `url` (an I/O one, its kind the problem's).
fn core(e: RemoteError) -> Error {
    let url = e.url.clone();
    Error::io(PathBuf::from(url), e.into_io_unnamed())
}

/// A staging error naming `url`.
fn staging_at(url: &str, problem: String) -> Error {
    Error::Output {
        path: PathBuf::from(url),
        problem: OutputError::Staging { problem },
    }
}

impl BucketStage {
    /// The staging prefix of `plan` under the output `out_dir` (an
    /// `s3://`, `gs://` or `az://` URL), with the store made from the
    /// environment and `remote`.
    ///
    /// # Errors
    /// `out_dir` is not a store URL, or its store cannot be made.
    pub fn new(out_dir: &str, plan: &StagedPlan, remote: &RemoteOptions) -> Result<BucketStage> {
        BucketStage::for_id(out_dir, &plan.id(), plan.prefix(), remote)
    }

    fn for_id(
        out_dir: &str,
        id: &str,
        prefix: &str,
        remote: &RemoteOptions,
    ) -> Result<BucketStage> {
        let out = StoreUrl::parse(out_dir).map_err(core)?;
        let store = Store::for_url(&out, remote).map_err(core)?;
        let base = out.key.trim_end_matches('/').to_string();
        let staging = join(&base, &format!("{STAGING_PREFIX}{id}/"));
        let copy_limit = match out.scheme {
            store::Scheme::S3 => S3_COPY_LIMIT,
            _ => u64::MAX,
        };
        Ok(BucketStage {
            store,
            out,
            base,
            staging,
            prefix: prefix.to_string(),
            upload: UploadOptions::default(),
            copy_limit,
        })
    }

    /// This stage with parts larger than `bytes` published by reading
    /// them back instead of a server-side copy (for tests: S3's limit,
    /// 5 GiB, is too large to reach in one).
    #[doc(hidden)]
    pub fn with_copy_limit(mut self, bytes: u64) -> BucketStage {
        self.copy_limit = bytes;
        self
    }

    /// Publishes the staged `from` as `to` by reading it back in ranges
    /// into an upload: complete or absent, as every upload.
    fn copy_through(&self, from: &str, to: &str, len: u64) -> Result<()> {
        let located = store::Located {
            store: self.store.clone(),
            path: self.path(to)?,
            display: self.url(to),
        };
        let mut upload = Upload::new(located, self.upload.clone()).map_err(core)?;
        let mut at = 0;
        while at < len {
            let end = len.min(at + COPY_CHUNK);
            let (s, p) = (self.store.store.clone(), self.path(from)?);
            let bytes = self.wait(from, async move { s.get_range(&p, at..end).await })?;
            if bytes.len() as u64 != end - at {
                return Err(staging_at(
                    &self.url(from),
                    format!(
                        "changed while published: {} bytes at {at}, not {}",
                        bytes.len(),
                        end - at
                    ),
                ));
            }
            std::io::Write::write_all(&mut upload, &bytes)
                .map_err(|e| Error::io(self.url(to), e))?;
            at = end;
        }
        upload.finish().map_err(core)?;
        Ok(())
    }

    /// The staging prefix, as a URL.
    pub fn staging(&self) -> PathBuf {
        PathBuf::from(self.url(&self.staging))
    }

    /// The sets staged under `out_dir` for files named with `prefix`:
    /// each one's plan.
    ///
    /// # Errors
    /// The listing fails, or a staged plan cannot be read.
    pub fn find(out_dir: &str, prefix: &str, remote: &RemoteOptions) -> Result<Vec<StagedPlan>> {
        let probe = BucketStage::for_id(out_dir, "", prefix, remote)?;
        let (_, dirs) = probe.list(&probe.base)?;
        let mut found = Vec::new();
        for dir in dirs {
            let Some(id) = dir.strip_prefix(STAGING_PREFIX) else {
                continue;
            };
            let key = join(&probe.base, &format!("{STAGING_PREFIX}{id}/{PLAN_FILE}"));
            let Some(text) = probe.get(&key)? else {
                continue; // being made, or being removed
            };
            let plan = StagedPlan::from_json(&text)
                .map_err(|e| staging_at(&probe.url(&key), e.to_string()))?;
            if plan.prefix() == prefix {
                found.push(plan);
            }
        }
        Ok(found)
    }

    /// The public name of `key`.
    fn url(&self, key: &str) -> String {
        self.out.with_key(key).display()
    }

    fn wait<T, F>(&self, key: &str, future: F) -> Result<T>
    where
        F: std::future::Future<Output = object_store::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let wait = self.upload.wait;
        match store::block_on(future, Some(Instant::now() + wait)) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(core(store::error(
                &self.url(key),
                &self.store.denied_hint,
                e,
            ))),
            Err(why) => Err(core(RemoteError::new(
                self.url(key),
                why.problem("a request", wait),
            ))),
        }
    }

    fn path(&self, key: &str) -> Result<Path> {
        self.out.with_key(key).path().map_err(core)
    }

    /// The objects (names and sizes) and sub-prefixes (names) directly
    /// under `key`.
    fn list(&self, key: &str) -> Result<Listing> {
        let s = self.store.store.clone();
        let prefix = if key.is_empty() {
            None
        } else {
            Some(self.path(key)?)
        };
        let listed = self.wait(
            key,
            async move { s.list_with_delimiter(prefix.as_ref()).await },
        )?;
        let objects = listed
            .objects
            .into_iter()
            .filter_map(|o| o.location.filename().map(|n| (n.to_string(), o.size)))
            .collect();
        let dirs = listed
            .common_prefixes
            .into_iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        Ok((objects, dirs))
    }

    /// The object `key`'s bytes (at most [`MAX_PLAN_LEN`]), `None` when it
    /// is not there.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let (s, p) = (self.store.store.clone(), self.path(key)?);
        // One request: the length is checked before the body is read.
        match self.wait(key, get_small(s, p, MAX_PLAN_LEN))? {
            Small::Missing => Ok(None),
            Small::Bytes(bytes) => Ok(Some(bytes)),
            Small::TooLarge(len) => Err(staging_at(
                &self.url(key),
                format!("is {len} bytes, longer than {MAX_PLAN_LEN}: not a plan"),
            )),
        }
    }

    /// Puts `bytes` at `key`; with `if_absent`, `false` when it was there.
    fn put(&self, key: &str, bytes: Vec<u8>, if_absent: bool) -> Result<bool> {
        let (s, p) = (self.store.store.clone(), self.path(key)?);
        let mode = if if_absent {
            PutMode::Create
        } else {
            PutMode::Overwrite
        };
        let put = self.wait(key, async move {
            match s
                .put_opts(&p, PutPayload::from(bytes), PutOptions::from(mode))
                .await
            {
                Ok(_) => Ok(true),
                Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        })?;
        Ok(put)
    }

    /// Removes `key`; one that is not there is not an error.
    fn delete(&self, key: &str) -> Result<()> {
        let (s, p) = (self.store.store.clone(), self.path(key)?);
        self.wait(key, async move {
            match s.delete(&p).await {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                other => other,
            }
        })
    }

    fn staged(&self, name: &str) -> String {
        format!("{}{name}", self.staging)
    }

    fn published(&self, name: &str) -> String {
        join(&self.base, name)
    }

    fn nothing_staged(&self) -> Error {
        staging_at(
            &self.url(&self.base),
            format!(
                "no set is staged here for files named {:?} (never planned, or already committed or aborted)",
                self.prefix
            ),
        )
    }
}

/// This machine's name, for the lock's text (who holds it).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `base/name` (`name` alone at the bucket's root).
fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_string()
    } else {
        format!("{base}/{name}")
    }
}

/// Whether `name` is one of the set's own names (its single file, its
/// index, or a shard), as the local check of an output directory says.
fn taken(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix).is_some_and(|rest| {
        rest == ".safetensors"
            || rest == ".safetensors.index.json"
            || (rest.starts_with('-') && rest.contains("-of-") && rest.ends_with(".safetensors"))
    })
}

impl SetStage for BucketStage {
    type Sink = Upload;
    type Lock = BucketLock;

    fn put_plan(&self, plan: &StagedPlan) -> Result<()> {
        let text = plan.to_json();
        let plan_key = self.staged(PLAN_FILE);
        let staged = self.get(&plan_key)?;
        if staged.is_none() {
            let (objects, dirs) = self.list(&self.base)?;
            let ours = self
                .staging
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string();
            for dir in dirs.iter().filter(|d| d.starts_with(STAGING_PREFIX)) {
                if *dir == ours {
                    continue;
                }
                let key = join(&self.base, &format!("{dir}/{PLAN_FILE}"));
                let Some(other) = self.get(&key)? else {
                    continue;
                };
                let other = StagedPlan::from_json(&other)
                    .map_err(|e| staging_at(&self.url(&key), e.to_string()))?;
                if other.prefix() == self.prefix {
                    return Err(staging_at(
                        &self.url(&join(&self.base, dir)),
                        format!(
                            "another plan (id {}) is staged for files named {:?}: commit or abort it first",
                            other.id(),
                            self.prefix
                        ),
                    ));
                }
            }
            if let Some((name, _)) = objects.iter().find(|(n, _)| taken(n, &self.prefix)) {
                return Err(core(RemoteError::new(
                    self.url(&self.published(name)),
                    Problem::Exists,
                )));
            }
            // Every process staging the same plan puts the same text.
            if self.put(&plan_key, text.clone().into_bytes(), true)? {
                return Ok(());
            }
        }
        match staged.or(self.get(&plan_key)?) {
            Some(staged) if staged == text.as_bytes() => Ok(()),
            Some(_) => Err(staging_at(
                &self.url(&plan_key),
                "holds another plan under this plan's id".into(),
            )),
            None => Err(self.nothing_staged()),
        }
    }

    fn plan_text(&self) -> Result<Option<Vec<u8>>> {
        self.get(&self.staged(PLAN_FILE))
    }

    fn lock(&self, exclusive: bool) -> Result<BucketLock> {
        if self.plan_text()?.is_none() {
            return Err(self.nothing_staged());
        }
        let key = self.staged(LOCK_FILE);
        let held = || {
            staging_at(
                &self.url(&key),
                "a commit or an abort of this set is running (its lock is there); wait for it, or remove the lock if none runs".into(),
            )
        };
        if !exclusive {
            if self.get(&key)?.is_some() {
                return Err(held());
            }
            return Ok(BucketLock { held: None });
        }
        let who = format!(
            "{{\"pid\":{},\"host\":{:?}}}\n",
            std::process::id(),
            host_name()
        );
        if !self.put(&key, who.into_bytes(), true)? {
            return Err(held());
        }
        Ok(BucketLock {
            held: Some((
                self.store.clone(),
                self.path(&key)?,
                self.upload.wait,
                crate::interrupt::Busy::new(),
            )),
        })
    }

    fn put_part<F>(&self, name: &str, layout: Layout, _sync: bool, body: F) -> Result<()>
    where
        F: FnOnce(&mut StreamWriter<Upload>) -> Result<()>,
    {
        let key = self.staged(name);
        let located = store::Located {
            store: self.store.clone(),
            path: self.path(&key)?,
            display: self.url(&key),
        };
        let upload = Upload::new(located, self.upload.clone()).map_err(core)?;
        let mut writer = StreamWriter::new(upload, layout)?;
        body(&mut writer)?;
        writer.finish()?.finish().map_err(core)?;
        // A commit or an abort that ran meanwhile removed the staging
        // prefix: this part is litter.
        if self.plan_text()?.is_none() {
            self.delete(&key)?;
            return Err(self.nothing_staged());
        }
        Ok(())
    }

    fn part_head(&self, name: &str, published: bool, len: usize) -> Result<Option<PartHead>> {
        let key = if published {
            self.published(name)
        } else {
            self.staged(name)
        };
        let (s, p) = (self.store.store.clone(), self.path(&key)?);
        let len = len as u64;
        self.wait(&key, async move {
            let meta = match s.head(&p).await {
                Ok(meta) => meta,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            let end = len.min(meta.size);
            let head = if end == 0 {
                Vec::new()
            } else {
                s.get_range(&p, 0..end).await?.to_vec()
            };
            Ok(Some(PartHead {
                head,
                len: meta.size,
            }))
        })
    }

    fn publish_part(&self, name: &str, _sync: bool) -> Result<()> {
        let (from, to) = (self.staged(name), self.published(name));
        let (s, f, t) = (self.store.store.clone(), self.path(&from)?, self.path(&to)?);
        let len = if self.copy_limit == u64::MAX {
            0
        } else {
            let (s, f) = (s.clone(), f.clone());
            self.wait(&from, async move { s.head(&f).await })?.size
        };
        if len > self.copy_limit {
            self.copy_through(&from, &to, len)?;
        } else {
            self.wait(&to, async move { s.copy(&f, &t).await })?;
        }
        self.delete(&from)
    }

    fn sync_published(&self) -> Result<()> {
        // A store's put is durable when it answers.
        Ok(())
    }

    fn publish_index(&self, name: &str, bytes: &[u8], _sync: bool) -> Result<()> {
        self.put(&self.published(name), bytes.to_vec(), false)
            .map(drop)
    }

    fn remove_published(&self, name: &str) -> Result<()> {
        self.delete(&self.published(name))
    }

    fn remove_staging(&self) -> Result<()> {
        let (objects, _) = self.list(self.staging.trim_end_matches('/'))?;
        // The plan last: until it goes, the set is still found staged.
        for (name, _) in objects.iter().filter(|(n, _)| n != PLAN_FILE) {
            self.delete(&self.staged(name))?;
        }
        crate::upload::remove_pending(&self.url(&self.staging), self.upload.wait).map_err(core)?;
        self.delete(&self.staged(PLAN_FILE))
    }

    fn published_path(&self, name: &str) -> PathBuf {
        PathBuf::from(self.url(&self.published(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sets_own_names_are_taken() {
        for name in [
            "model.safetensors",
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
        ] {
            assert!(taken(name, "model"), "{name}");
        }
        for name in [
            "modelx.json",
            "other.safetensors",
            "model.bin",
            "config.json",
        ] {
            assert!(!taken(name, "model"), "{name}");
        }
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("out/m", "a"), "out/m/a");
    }
}
