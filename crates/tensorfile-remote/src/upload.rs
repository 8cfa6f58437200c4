//! Putting an object into a store (`s3://`, `gs://`, `az://`): written
//! complete or not at all.
//!
//! An [`Upload`] is a [`std::io::Write`]: what is written to it is kept in
//! memory up to one part ([`UploadOptions::part_size`], 16 MiB). An object
//! that ends within it is sent with one put; a larger one becomes a
//! multipart upload (S3's, GCS's XML API's, Azure's blocks), its parts sent
//! a few at once ([`UploadOptions::in_flight`]: memory stays within
//! `(in_flight + 1) × part_size`) and the object made only by
//! [`Upload::finish`]. An error, or a drop without `finish`, aborts the
//! upload: no object appears and no part is left. Every wait is bounded
//! ([`UploadOptions::wait`]).
//!
//! With [`UploadOptions::if_absent`] an object already there is not
//! replaced: a single put is conditional (`If-None-Match: *`, object_store's
//! `PutMode::Create`) and refused atomically by the store; a multipart
//! upload, which object_store cannot make conditional, checks before it
//! starts and again before it completes (a writer racing in between may
//! still be replaced).
//!
//! A process stopping on a signal takes the error path: once
//! [`crate::interrupt::interrupt`] is called (the `tensorfile` command does
//! on SIGINT, SIGTERM and SIGHUP), every wait of an upload ends at once
//! and the upload is aborted, the abort given
//! [`crate::interrupt::CLEANUP_LIMIT`]. An [`Upload`] counts as a write
//! under way ([`crate::interrupt::Busy`]) until it is dropped, so the one
//! stopping the process knows when the abort is done.
//!
//! A process killed outright during a multipart upload cannot abort it:
//! its parts stay, invisible, until [`remove_pending`] sweeps the prefix
//! (S3: `ListMultipartUploads`, then `AbortMultipartUpload` of each; GCS:
//! the XML API's same requests, with the store's own token). Azure needs
//! neither: blocks never committed are discarded by the service after
//! seven days, and are never part of a blob.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use object_store::{MultipartUpload, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::error::{Problem, RemoteError};
use crate::http::RemoteOptions;
use crate::store::{self, Located, Scheme, StoreUrl};

/// How an [`Upload`] sends an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadOptions {
    /// Bytes of one part of a multipart upload (at least 5 MiB, the
    /// stores' smallest); an object no longer than this is sent with one
    /// put.
    pub part_size: usize,
    /// Parts sent at once.
    pub in_flight: usize,
    /// The longest any one wait lasts: a part, the put, the completion,
    /// the abort.
    pub wait: Duration,
    /// Refuse to replace an object already there ([`Problem::Exists`]).
    pub if_absent: bool,
}

impl Default for UploadOptions {
    fn default() -> UploadOptions {
        UploadOptions {
            part_size: 16 << 20,
            in_flight: 4,
            wait: Duration::from_secs(600),
            if_absent: false,
        }
    }
}

impl UploadOptions {
    /// These options, refusing to replace an object (`true`) or not.
    pub fn with_if_absent(mut self, if_absent: bool) -> UploadOptions {
        self.if_absent = if_absent;
        self
    }

    /// These options with parts of `bytes` (at least 5 MiB).
    pub fn with_part_size(mut self, bytes: usize) -> UploadOptions {
        self.part_size = bytes.max(MIN_PART);
        self
    }
}

/// The stores' smallest part (all but the last).
const MIN_PART: usize = 5 << 20;

/// A multipart upload under way: the store's handle and the parts sent.
struct Multipart {
    /// Taken while a completion or an abort runs.
    upload: Option<Box<dyn MultipartUpload>>,
    /// Parts in flight, oldest first.
    parts: VecDeque<tokio::task::JoinHandle<object_store::Result<()>>>,
}

/// An object being written: see the module's documentation.
pub struct Upload {
    located: Located,
    options: UploadOptions,
    buf: Vec<u8>,
    multipart: Option<Multipart>,
    written: u64,
    /// An error happened: the upload is aborted, later writes fail.
    failed: bool,
    /// Completed (or aborted after an error): nothing to do on drop.
    done: bool,
    /// Counted as a write under way until dropped (its abort included).
    _busy: crate::interrupt::Busy,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("object", &self.located.display)
            .field("written", &self.written)
            .field("multipart", &self.multipart.is_some())
            .finish_non_exhaustive()
    }
}

impl Upload {
    /// An upload to the object at `url`, its store made (or reused) from
    /// the environment and `remote`.
    ///
    /// # Errors
    /// As [`store::locate`]; with `if_absent`, the object is there
    /// ([`Problem::Exists`]) or cannot be asked for.
    pub fn to_url(
        url: &str,
        remote: &RemoteOptions,
        options: UploadOptions,
    ) -> Result<Upload, RemoteError> {
        Upload::new(store::locate(url, remote)?, options)
    }

    /// An upload to `located`.
    ///
    /// # Errors
    /// With `if_absent`, the object is there ([`Problem::Exists`]) or
    /// cannot be asked for.
    pub fn new(located: Located, options: UploadOptions) -> Result<Upload, RemoteError> {
        let options = UploadOptions {
            part_size: options.part_size.max(MIN_PART),
            in_flight: options.in_flight.max(1),
            ..options
        };
        let upload = Upload {
            located,
            buf: Vec::new(),
            multipart: None,
            written: 0,
            failed: false,
            done: false,
            options,
            _busy: crate::interrupt::Busy::new(),
        };
        if upload.options.if_absent {
            upload.refuse_if_there()?;
        }
        Ok(upload)
    }

    /// The object's public name.
    pub fn display(&self) -> &str {
        &self.located.display
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn deadline(&self) -> Option<Instant> {
        Some(Instant::now() + self.options.wait)
    }

    fn error(&self, e: object_store::Error) -> RemoteError {
        store::error(&self.located.display, &self.located.store.denied_hint, e)
    }

    /// A wait given up: its deadline passed, or the process is stopping.
    fn stopped(&self, what: &'static str, why: store::Unfinished) -> RemoteError {
        RemoteError::new(&self.located.display, why.problem(what, self.options.wait))
    }

    /// [`store::block_on`] with this upload's wait, its errors ours.
    fn wait<T, F>(&self, what: &'static str, future: F) -> Result<T, RemoteError>
    where
        F: std::future::Future<Output = object_store::Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        match store::block_on(future, self.deadline()) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(e)),
            Err(why) => Err(self.stopped(what, why)),
        }
    }

    /// [`Problem::Exists`] when the object is there.
    fn refuse_if_there(&self) -> Result<(), RemoteError> {
        let (s, p) = (self.located.store.store.clone(), self.located.path.clone());
        match self.wait("an existence check", async move { s.head(&p).await }) {
            Ok(_) => Err(RemoteError::new(&self.located.display, Problem::Exists)),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sends `data` as the next part, starting the multipart upload first
    /// if needed; waits for the oldest part while `in_flight` are sent.
    fn send_part(&mut self, data: Vec<u8>) -> Result<(), RemoteError> {
        if self.multipart.is_none() {
            let (s, p) = (self.located.store.store.clone(), self.located.path.clone());
            let upload = self.wait("the multipart upload's start", async move {
                s.put_multipart(&p).await
            })?;
            self.multipart = Some(Multipart {
                upload: Some(upload),
                parts: VecDeque::new(),
            });
        }
        while self
            .multipart
            .as_ref()
            .is_some_and(|m| m.parts.len() >= self.options.in_flight)
        {
            self.wait_oldest()?;
        }
        let deadline = self.deadline();
        let Some(m) = self.multipart.as_mut() else {
            unreachable!("started above");
        };
        let Some(upload) = m.upload.as_mut() else {
            return Err(RemoteError::new(
                &self.located.display,
                Problem::Transport {
                    message: "the multipart upload was lost".into(),
                    attempts: 1,
                },
            ));
        };
        let part = upload.put_part(PutPayload::from(data));
        // Spawned (not awaited): it runs while the next part is filled.
        #[allow(clippy::async_yields_async)]
        let spawned = store::block_on(async move { tokio::spawn(part) }, deadline);
        match spawned {
            Ok(handle) => {
                m.parts.push_back(handle);
                Ok(())
            }
            Err(why) => Err(self.stopped("a part's start", why)),
        }
    }

    /// Waits for the oldest part in flight.
    fn wait_oldest(&mut self) -> Result<(), RemoteError> {
        let Some(handle) = self.multipart.as_mut().and_then(|m| m.parts.pop_front()) else {
            return Ok(());
        };
        let abort = handle.abort_handle();
        match store::block_on(handle, self.deadline()) {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(self.error(e)),
            Ok(Err(joined)) => Err(RemoteError::new(
                &self.located.display,
                Problem::Transport {
                    message: format!("a part's upload failed: {joined}"),
                    attempts: 1,
                },
            )),
            Err(why) => {
                abort.abort();
                Err(self.stopped("a part", why))
            }
        }
    }

    /// Completes the object: one put for a small one, else the last part,
    /// every part waited for, and the completion. Returns the object's
    /// length. On an error the upload is aborted: no object appears.
    ///
    /// # Errors
    /// A request fails or a wait runs out; with `if_absent`, the object
    /// appeared meanwhile ([`Problem::Exists`]).
    pub fn finish(mut self) -> Result<u64, RemoteError> {
        if self.failed {
            return Err(RemoteError::new(
                &self.located.display,
                Problem::Transport {
                    message: "an earlier write failed; the upload was aborted".into(),
                    attempts: 1,
                },
            ));
        }
        let result = self.complete();
        if result.is_err() {
            self.abort();
        }
        self.done = true;
        result.map(|()| self.written)
    }

    fn complete(&mut self) -> Result<(), RemoteError> {
        if self.multipart.is_none() {
            let data = std::mem::take(&mut self.buf);
            let (s, p) = (self.located.store.store.clone(), self.located.path.clone());
            let mode = if self.options.if_absent {
                PutMode::Create
            } else {
                PutMode::Overwrite
            };
            let opts = PutOptions::from(mode);
            return self
                .wait("the put", async move {
                    s.put_opts(&p, PutPayload::from(data), opts).await
                })
                .map(drop);
        }
        if !self.buf.is_empty() {
            let data = std::mem::take(&mut self.buf);
            self.send_part(data)?;
        }
        while self.multipart.as_ref().is_some_and(|m| !m.parts.is_empty()) {
            self.wait_oldest()?;
        }
        if self.options.if_absent {
            self.refuse_if_there()?;
        }
        let upload = self.multipart.as_mut().and_then(|m| m.upload.take());
        let Some(mut upload) = upload else {
            return Ok(());
        };
        // Should the wait run out, the upload is lost with the future:
        // remove_pending sweeps it.
        self.wait("the completion", async move { upload.complete().await })
            .map(drop)
    }

    /// Aborts a multipart upload under way (its parts in flight stopped,
    /// those sent removed by the store); errors are ignored: what they
    /// leave is for [`remove_pending`].
    fn abort(&mut self) {
        self.failed = true;
        self.buf = Vec::new();
        let Some(mut m) = self.multipart.take() else {
            return;
        };
        for part in m.parts.drain(..) {
            part.abort();
        }
        if let Some(mut upload) = m.upload.take() {
            let _ = store::cleanup(async move { upload.abort().await }, self.deadline());
        }
    }

    /// Records a failed step: aborts, and gives the error as an I/O one.
    fn fail(&mut self, e: RemoteError) -> io::Error {
        self.abort();
        e.into()
    }
}

impl io::Write for Upload {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.failed || self.done {
            return Err(io::Error::other(format!(
                "{}: the upload is {}",
                self.located.display,
                if self.done { "finished" } else { "aborted" }
            )));
        }
        let part = self.options.part_size;
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(part.min(data.len().max(1 << 16)));
        }
        let n = data.len().min(part - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        self.written += n as u64;
        if self.buf.len() == part {
            let full = std::mem::replace(&mut self.buf, Vec::with_capacity(part));
            if let Err(e) = self.send_part(full) {
                return Err(self.fail(e));
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.done {
            self.abort();
        }
    }
}

/// Uploads the local file `path` to `url` (see [`Upload`]); returns its
/// length. `progress` counts the bytes handed to the upload.
///
/// # Errors
/// The file cannot be read (an I/O error naming it), or as
/// [`Upload::finish`].
pub fn upload_file(
    path: &std::path::Path,
    url: &str,
    remote: &RemoteOptions,
    options: UploadOptions,
    progress: &dyn tensorfile_core::Progress,
) -> io::Result<u64> {
    let mut upload = Upload::to_url(url, remote, options)?;
    let file = std::fs::File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    io::copy(
        &mut Counted {
            inner: file,
            progress,
        },
        &mut upload,
    )?;
    Ok(upload.finish()?)
}

/// A reader telling `progress` of each read.
struct Counted<'a, R> {
    inner: R,
    progress: &'a dyn tensorfile_core::Progress,
}

impl<R: io::Read> io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.advance(n as u64);
        Ok(n)
    }
}

/// Whether the object at `url` is there.
///
/// # Errors
/// The store refuses, or the wait runs out.
pub fn exists(url: &str, remote: &RemoteOptions, wait: Duration) -> Result<bool, RemoteError> {
    let located = store::locate(url, remote)?;
    let (s, p) = (located.store.store.clone(), located.path.clone());
    match store::block_on(async move { s.head(&p).await }, Some(Instant::now() + wait)) {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(object_store::Error::NotFound { .. })) => Ok(false),
        Ok(Err(e)) => Err(store::error(
            &located.display,
            &located.store.denied_hint,
            e,
        )),
        Err(why) => Err(RemoteError::new(
            &located.display,
            why.problem("an existence check", wait),
        )),
    }
}

/// What a bounded read of a whole object found ([`get_small`]).
pub(crate) enum Small {
    /// No object there.
    Missing,
    /// Longer than the limit: its length (the body is not read).
    TooLarge(u64),
    /// Its bytes.
    Bytes(Vec<u8>),
}

/// Reads the object at `path` whole in one request, refusing one longer
/// than `limit` by its answer's length before its body is read.
pub(crate) async fn get_small(
    store: std::sync::Arc<dyn object_store::ObjectStore>,
    path: object_store::path::Path,
    limit: u64,
) -> object_store::Result<Small> {
    let answer = match store.get(&path).await {
        Ok(answer) => answer,
        Err(object_store::Error::NotFound { .. }) => return Ok(Small::Missing),
        Err(e) => return Err(e),
    };
    if answer.meta.size > limit {
        return Ok(Small::TooLarge(answer.meta.size));
    }
    Ok(Small::Bytes(answer.bytes().await?.to_vec()))
}

/// The bytes of the object at `url` if it is there and at most `limit`
/// bytes long; `None` otherwise (a small object read whole, such as a
/// set's index, one request).
///
/// # Errors
/// The store refuses, or the wait runs out.
pub fn read_small(
    url: &str,
    remote: &RemoteOptions,
    wait: Duration,
    limit: u64,
) -> Result<Option<Vec<u8>>, RemoteError> {
    let located = store::locate(url, remote)?;
    let (s, p) = (located.store.store.clone(), located.path.clone());
    let got = store::block_on(get_small(s, p, limit), Some(Instant::now() + wait));
    match got {
        Ok(Ok(Small::Bytes(bytes))) => Ok(Some(bytes)),
        Ok(Ok(Small::Missing | Small::TooLarge(_))) => Ok(None),
        Ok(Err(e)) => Err(store::error(
            &located.display,
            &located.store.denied_hint,
            e,
        )),
        Err(why) => Err(RemoteError::new(
            &located.display,
            why.problem("a read", wait),
        )),
    }
}

/// Removes the object at `url`; one that is not there is not an error. A
/// cleanup: an interruption ([`crate::interrupt`]) limits it, but does not
/// stop it.
///
/// # Errors
/// The store refuses, or the wait runs out.
pub fn remove(url: &str, remote: &RemoteOptions, wait: Duration) -> Result<(), RemoteError> {
    let located = store::locate(url, remote)?;
    let (s, p) = (located.store.store.clone(), located.path.clone());
    let wait = crate::interrupt::cleanup_wait(wait);
    match store::cleanup(
        async move { s.delete(&p).await },
        Some(Instant::now() + wait),
    ) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(object_store::Error::NotFound { .. })) => Ok(()),
        Ok(Err(e)) => Err(store::error(
            &located.display,
            &located.store.denied_hint,
            e,
        )),
        Err(why) => Err(RemoteError::new(
            &located.display,
            why.problem("a removal", wait),
        )),
    }
}

/// Aborts every multipart upload pending under the prefix `url` (every key
/// that begins with its key): what a process killed during an upload
/// left. Returns how many were aborted.
///
/// - S3: `ListMultipartUploads`, then `AbortMultipartUpload` of each,
///   signed by our credential chain;
/// - GCS: the XML API's same two requests (`GET /BUCKET?uploads&prefix=`,
///   `DELETE /BUCKET/KEY?uploadId=`), with the store's own token
///   (object_store cannot list them);
/// - Azure: 0, always. Blocks never committed are never part of a blob,
///   and the service discards them after seven days; there is nothing to
///   list or abort.
///
/// Only for a prefix no other process is writing to: their uploads are
/// aborted too. Each request waits at most `wait` (once the process is
/// interrupted, [`crate::interrupt::CLEANUP_LIMIT`]).
///
/// # Errors
/// The listing or an abort fails.
pub fn remove_pending(url: &str, wait: Duration) -> Result<usize, RemoteError> {
    let parsed = StoreUrl::parse(url)?;
    let wait = crate::interrupt::cleanup_wait(wait);
    match parsed.scheme {
        Scheme::S3 => remove_pending_s3(&parsed, wait),
        #[cfg(feature = "gcs")]
        Scheme::Gcs => remove_pending_gcs(&parsed, wait),
        // Azure (see above), and GCS in a build without it (which cannot
        // have started an upload there).
        _ => Ok(0),
    }
}

/// The sweep's HTTP client: one attempt, no redirect, `wait` for the
/// whole request; the roots (a private CA too) as every client's.
fn sweep_agent(wait: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .tls_config(crate::tls::ureq_config_lenient())
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(wait))
        .build()
        .into()
}

/// Sends a request of the sweep: its status and body (at most 64 MiB),
/// or the transport's failure naming `display`.
fn sweep_call(
    display: &str,
    request: ureq::RequestBuilder<ureq::typestate::WithoutBody>,
) -> Result<(u16, Vec<u8>), RemoteError> {
    let transport = |e: ureq::Error| {
        RemoteError::new(
            display,
            Problem::Transport {
                message: crate::http::scrub(&e.to_string()),
                attempts: 1,
            },
        )
    };
    let mut answer = request.call().map_err(transport)?;
    let code = answer.status().as_u16();
    let body = answer
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .map_err(transport)?;
    Ok((code, body))
}

/// A failed status of the sweep as an error: 401 and 403 as denied (with
/// where the credentials came from), others with the server's words.
fn sweep_status(display: &str, hint: &str, code: u16, body: &[u8]) -> RemoteError {
    let problem = match code {
        401 | 403 => Problem::Denied {
            status: code,
            hint: hint.to_string(),
        },
        _ => Problem::Status {
            status: code,
            attempts: 1,
            detail: String::from_utf8_lossy(body).chars().take(200).collect(),
        },
    };
    RemoteError::new(display, problem)
}

fn remove_pending_s3(parsed: &StoreUrl, wait: Duration) -> Result<usize, RemoteError> {
    let s3 = crate::s3::S3Store::from_env(&parsed.bucket)?;
    let display = parsed.display();
    let hint = s3.denied_hint();
    let agent = sweep_agent(wait);
    let pending = s3.pending_uploads(&parsed.key, |signed| {
        let (code, body) = sweep_call(&display, agent.get(signed.as_str()))?;
        if code / 100 != 2 {
            return Err(sweep_status(&display, hint, code, &body));
        }
        Ok(body)
    })?;
    for upload in &pending {
        let (code, body) = sweep_call(&display, agent.delete(s3.abort_url(upload).as_str()))?;
        // 404: completed or aborted meanwhile.
        if code / 100 != 2 && code != 404 {
            return Err(sweep_status(&display, hint, code, &body));
        }
    }
    Ok(pending.len())
}

#[cfg(feature = "gcs")]
fn remove_pending_gcs(parsed: &StoreUrl, wait: Duration) -> Result<usize, RemoteError> {
    let display = parsed.display();
    let store = store::Store::for_url(parsed, &RemoteOptions::default())?;
    let Some(xml) = store.gcs.clone() else {
        return Ok(0);
    };
    let hint = store.denied_hint.clone();
    let credentials = xml.credentials.clone();
    let token = match store::cleanup(
        async move { credentials.get_credential().await },
        Some(Instant::now() + wait),
    ) {
        Ok(Ok(c)) => c.bearer.clone(),
        Ok(Err(e)) => return Err(store::error(&display, &hint, e)),
        Err(u) => return Err(RemoteError::new(&display, u.problem("a token", wait))),
    };
    // An empty bearer: anonymous (a public bucket, an emulator).
    let authorized = |r: ureq::RequestBuilder<ureq::typestate::WithoutBody>| {
        if token.is_empty() {
            r
        } else {
            r.header("Authorization", format!("Bearer {token}"))
        }
    };
    let agent = sweep_agent(wait);
    let bucket = format!("{}/{}", xml.base, encode(&parsed.bucket));
    let pending = crate::s3::pending_pages(&display, &parsed.key, |markers| {
        let mut url = format!("{bucket}?uploads&prefix={}", encode(&parsed.key));
        if let Some((key, id)) = markers {
            url.push_str(&format!(
                "&key-marker={}&upload-id-marker={}",
                encode(key),
                encode(id)
            ));
        }
        let (code, body) = sweep_call(&display, authorized(agent.get(&url)))?;
        if code / 100 != 2 {
            return Err(sweep_status(&display, &hint, code, &body));
        }
        Ok(body)
    })?;
    for upload in &pending {
        let url = format!(
            "{bucket}/{}?uploadId={}",
            encode(&upload.key),
            encode(&upload.upload_id)
        );
        let (code, body) = sweep_call(&display, authorized(agent.delete(&url)))?;
        // 404: completed or aborted meanwhile.
        if code / 100 != 2 && code != 404 {
            return Err(sweep_status(&display, &hint, code, &body));
        }
    }
    Ok(pending.len())
}

/// Every byte but ASCII letters and digits percent-encoded (as
/// object_store encodes GCS's object names, `/` included).
#[cfg(feature = "gcs")]
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
