//! The HTTP layer: one [`Client`] (a ureq agent, its limits and its
//! counters) that sends range requests with retries, follows redirects
//! itself (so that a token never goes to another host) and checks every
//! answer against what was asked.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use url::Url;

use crate::error::{Problem, RemoteError};
use crate::s3::S3Store;
use crate::secret::Secret;

/// How remote objects are read: concurrency, request sizes, retries and
/// timeouts. The defaults suit a real network.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteOptions {
    /// Requests in flight at once, across every object of a [`Client`].
    pub concurrency: usize,
    /// The largest range one request asks for; longer reads are split.
    pub chunk_size: u64,
    /// Ranges this close together are read with one request (the bytes
    /// between them are read and dropped, never kept).
    pub coalesce_gap: u64,
    /// Retries of a request that failed in a way worth retrying (5xx, 429,
    /// timeouts, resets, short bodies).
    pub retries: u32,
    /// The first retry's delay; each later one doubles it, with jitter.
    pub backoff: Duration,
    /// The longest delay between two attempts (`Retry-After` included).
    pub max_backoff: Duration,
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// Time allowed for the answer to start (its first byte), after the
    /// request is sent.
    pub read_timeout: Duration,
    /// The slowest a body may come, in bytes per second, averaged over
    /// each [`RemoteOptions::rate_window`]: a server that sends less in a
    /// window (a trickle, or nothing) fails the attempt, however often it
    /// sends a byte. 0: no floor.
    pub min_rate: u64,
    /// The window the [`RemoteOptions::min_rate`] is measured over.
    pub rate_window: Duration,
    /// The most requests the client sends (retries and redirects count);
    /// `None`: no limit.
    pub max_requests: Option<u64>,
    /// The most body bytes the client receives (bytes read past what was
    /// asked for, between coalesced ranges, count); `None`: no limit.
    pub max_bytes: Option<u64>,
    /// The time the client may take, from its creation, for all of its
    /// requests, retries and waits: a request in progress is cut off at
    /// it, and no request starts and no retry waits past it; `None`: no
    /// limit (a long transfer that keeps up the rate floor takes as long
    /// as it takes).
    pub time_budget: Option<Duration>,
}

tensorfile_core::with_fields!(RemoteOptions {
    with_concurrency => concurrency: usize,
    with_chunk_size => chunk_size: u64,
    with_coalesce_gap => coalesce_gap: u64,
    with_retries => retries: u32,
    with_backoff => backoff: Duration,
    with_max_backoff => max_backoff: Duration,
    with_connect_timeout => connect_timeout: Duration,
    with_read_timeout => read_timeout: Duration,
    with_min_rate => min_rate: u64,
    with_rate_window => rate_window: Duration,
    with_max_requests => max_requests: Option<u64>,
    with_max_bytes => max_bytes: Option<u64>,
    with_time_budget => time_budget: Option<Duration>,
});

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions {
            concurrency: 16,
            chunk_size: 8 << 20,
            coalesce_gap: 1 << 20,
            retries: 6,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            min_rate: 1024,
            rate_window: Duration::from_secs(30),
            max_requests: None,
            max_bytes: None,
            time_budget: None,
        }
    }
}

/// Counters of what a [`Client`] sent and received (for benchmarks and
/// tests that count instead of timing).
#[derive(Debug, Default)]
pub struct Stats {
    requests: AtomicU64,
    body_bytes: AtomicU64,
    retries: AtomicU64,
}

/// What a [`Client`] has sent and received so far ([`Client::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// HTTP requests sent (each redirect hop counts).
    pub requests: u64,
    /// Response body bytes received.
    pub body_bytes: u64,
    /// Requests that were retries.
    pub retries: u64,
}

impl Stats {
    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            requests: self.requests.load(Ordering::Relaxed),
            body_bytes: self.body_bytes.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }
}

/// Where a request goes.
#[derive(Clone, Debug)]
pub(crate) enum Endpoint {
    /// A plain URL, with a bearer token for its own host only.
    Http {
        url: Url,
        token: Option<Secret>,
        /// What a 401/403 means here.
        denied_hint: &'static str,
    },
    /// An S3 object: every request gets a freshly signed URL.
    S3 { store: Arc<S3Store>, key: String },
    /// An object of an object store (`gs://`, `az://`), read through
    /// another client: the store layer's, which sits above this one.
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    Store { object: Arc<dyn ObjectBackend> },
}

/// An object read through another client than this module's (an object
/// store's): what [`Client::get_range`] and [`Client::head`] hand its reads
/// to. Implemented by the layer above (so that this one does not depend
/// on it), with the same checks and the client's bounds.
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
pub(crate) trait ObjectBackend: Send + Sync + std::fmt::Debug {
    /// [`Client::get_range`] of this object.
    ///
    /// # Errors
    /// As [`Client::get_range`].
    fn get_range(
        &self,
        client: &Client,
        name: &str,
        start: u64,
        end: u64,
        known: Option<&Meta>,
        sink: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<Meta, RemoteError>;

    /// [`Client::head`] of this object.
    ///
    /// # Errors
    /// As [`Client::head`].
    fn head(&self, client: &Client, name: &str) -> Result<Meta, RemoteError>;
}

impl Endpoint {
    /// The URL to send to and the headers that go with it (`x-amz-*`
    /// headers are signed into S3 URLs).
    fn prepare(
        &self,
        head: bool,
        amz: &[(&'static str, &'static str)],
    ) -> Option<(Url, Option<String>)> {
        Some(match self {
            Endpoint::Http { url, token, .. } => (
                url.clone(),
                token.as_ref().map(|t| format!("Bearer {}", t.expose())),
            ),
            Endpoint::S3 { store, key } => (store.signed_url(key, head, amz), None),
            // Never sent as HTTP: `get_range` and `head` hand it to the
            // store first.
            #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
            Endpoint::Store { .. } => return None,
        })
    }

    fn denied_hint(&self) -> &'static str {
        match self {
            Endpoint::Http { denied_hint, .. } => denied_hint,
            Endpoint::S3 { store, .. } => store.denied_hint(),
            #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
            Endpoint::Store { .. } => "the store's credentials lack access to it",
        }
    }
}

/// A counting semaphore bounding requests in flight.
#[derive(Debug)]
struct Slots {
    free: Mutex<usize>,
    freed: Condvar,
}

struct Slot<'a>(&'a Slots);

impl Slots {
    fn acquire(&self) -> Slot<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

/// How to tell whether an object changed: its `ETag`, else its
/// `Last-Modified`, and its length.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Validator {
    /// The `ETag`, as sent.
    pub etag: Option<String>,
    /// The `Last-Modified` date, as sent.
    pub last_modified: Option<String>,
}

/// What an answer said about the object.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meta {
    /// The object's length.
    pub len: u64,
    pub validator: Validator,
    /// Headers kept for verification (lowercase names).
    pub kept: Vec<(String, String)>,
    /// The server answered a range request with 200 and the whole object
    /// (it does not take ranges: `python3 -m http.server`).
    pub ranges_ignored: bool,
}

impl Meta {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.kept
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Headers worth keeping from an answer.
const KEPT: [&str; 8] = [
    "x-linked-etag",
    "x-linked-size",
    "x-repo-commit",
    "x-amz-checksum-sha256",
    "x-amz-checksum-type",
    // A Hub file stored with Xet: its hash names its payload in the
    // Hugging Face cache's shared store.
    "x-xet-hash",
    "x-xet-refresh-route",
    "link",
];

/// One attempt's failure: worth another attempt (after at least the
/// delay the server asked for), or final.
enum Failure {
    Retry(Problem, Option<Duration>),
    Fatal(Problem),
}

/// Requests to remote objects: an HTTP agent with its connection pool, the
/// options, a bound on requests in flight, and counters.
#[derive(Debug)]
pub struct Client {
    agent: ureq::Agent,
    /// Why `SSL_CERT_FILE` cannot be used, if it cannot: every request
    /// fails with it (the roots are not quietly left as they were).
    ca_problem: Option<Problem>,
    options: RemoteOptions,
    slots: Slots,
    stats: Stats,
    /// When the time budget runs out.
    deadline: Option<Instant>,
}

/// The size of the pieces a body is read in.
const PIECE: usize = 64 << 10;

impl Client {
    /// A client with these options.
    pub fn new(options: RemoteOptions) -> Arc<Client> {
        let (extra, ca_problem) = match crate::tls::extra_roots() {
            Ok(extra) => (extra, None),
            Err(p) => (Arc::default(), Some(p)),
        };
        let config = ureq::Agent::config_builder()
            .tls_config(crate::tls::ureq_config(&extra))
            .http_status_as_error(false)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_connect(Some(options.connect_timeout))
            .timeout_recv_response(Some(options.read_timeout))
            // A read that waits this long has seen a window without a
            // byte (or no first byte): it ends so the rate floor is checked.
            .timeout_per_read(Some(options.read_timeout.max(options.rate_window)))
            .max_idle_connections(options.concurrency.max(1) * 2)
            .max_idle_connections_per_host(options.concurrency.max(1) * 2)
            .user_agent(concat!("tensorfile/", env!("CARGO_PKG_VERSION")))
            .build();
        Arc::new(Client {
            agent: config.into(),
            ca_problem,
            slots: Slots {
                free: Mutex::new(options.concurrency.max(1)),
                freed: Condvar::new(),
            },
            deadline: options.time_budget.map(|t| Instant::now() + t),
            options,
            stats: Stats::default(),
        })
    }

    /// The budget a request of up to `bytes` body bytes would break, if any.
    fn over_budget(&self, bytes: u64) -> Option<Problem> {
        let counts = self.stats.counts();
        if let Some(max) = self.options.max_requests {
            if counts.requests >= max {
                return Some(Problem::Budget {
                    what: "requests",
                    limit: max.to_string(),
                    last: None,
                });
            }
        }
        if let Some(max) = self.options.max_bytes {
            if counts.body_bytes.saturating_add(bytes) > max {
                return Some(Problem::Budget {
                    what: "bytes received",
                    limit: max.to_string(),
                    last: None,
                });
            }
        }
        if let (Some(deadline), Some(budget)) = (self.deadline, self.options.time_budget) {
            if Instant::now() >= deadline {
                return Some(Problem::Budget {
                    what: "time",
                    limit: format!("{budget:?}"),
                    last: None,
                });
            }
        }
        None
    }

    /// One of the requests in flight (held until dropped), the budget
    /// checked and the request counted: for requests this client does not
    /// send itself (an object store's).
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    pub(crate) fn start_request(&self, bytes: u64) -> Result<impl Drop + '_, Problem> {
        if let Some(p) = self.over_budget(bytes) {
            return Err(p);
        }
        let slot = self.slots.acquire();
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        Ok(slot)
    }

    /// Counts body bytes received by a request this client did not send.
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    pub(crate) fn count_bytes(&self, n: u64) {
        self.stats.body_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// When the time budget runs out (`None`: no budget).
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The time left before the time budget runs out (`None`: no budget).
    fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// The time budget as used up, naming the attempt before, if any.
    pub(crate) fn out_of_time(&self, last: Option<Problem>) -> Problem {
        Problem::Budget {
            what: "time",
            limit: format!("{:?}", self.options.time_budget.unwrap_or_default()),
            last: last.map(Box::new),
        }
    }

    /// What the HTTP client said, as a failure: a timeout names the limit
    /// it hit; what no retry can fix is final.
    fn transport(&self, e: &ureq::Error) -> Failure {
        use ureq::Timeout as T;
        let o = &self.options;
        let timeout = |what: &'static str, limit: Duration| {
            Failure::Retry(
                Problem::Timeout {
                    what,
                    limit,
                    attempts: 1,
                },
                None,
            )
        };
        if let Some(p) = crate::tls::certificate_problem(e) {
            return Failure::Fatal(p);
        }
        match e {
            ureq::Error::Timeout(T::Global) => Failure::Fatal(self.out_of_time(None)),
            ureq::Error::Timeout(T::Connect | T::Resolve) => timeout("connect", o.connect_timeout),
            ureq::Error::Timeout(T::RecvResponse) => timeout("first byte", o.read_timeout),
            ureq::Error::Timeout(T::PerRead) => {
                timeout("no byte", o.read_timeout.max(o.rate_window))
            }
            // Asking again gives the same answer.
            ureq::Error::BadUri(_)
            | ureq::Error::Http(_)
            | ureq::Error::InvalidProxyUrl
            | ureq::Error::BodyExceedsLimit(_)
            | ureq::Error::TooManyRedirects
            | ureq::Error::RedirectFailed
            | ureq::Error::RequireHttpsOnly(_)
            | ureq::Error::LargeResponseHeader(..)
            | ureq::Error::TlsRequired
            | ureq::Error::Tls(_)
            | ureq::Error::Pem(_)
            | ureq::Error::Rustls(_) => Failure::Fatal(transport(e)),
            _ => Failure::Retry(transport(e), None),
        }
    }

    /// An error reading a body as a failure: the rate floor, a timeout of
    /// the HTTP client, or a connection problem (`short`: the problem of a
    /// body that ended early).
    fn body_error(&self, e: std::io::Error, short: impl FnOnce() -> Problem) -> Failure {
        if let Some(inner) = e.get_ref() {
            if let Some(p) = inner.downcast_ref::<Problem>() {
                return Failure::Retry(p.clone(), None);
            }
            if let Some(u) = inner.downcast_ref::<ureq::Error>() {
                return self.transport(u);
            }
        }
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            return Failure::Retry(short(), None);
        }
        Failure::Retry(
            Problem::Transport {
                message: scrub(&e.to_string()),
                attempts: 1,
            },
            None,
        )
    }

    /// The options.
    pub fn options(&self) -> &RemoteOptions {
        &self.options
    }

    /// The counters.
    pub fn stats(&self) -> Counts {
        self.stats.counts()
    }

    /// Sends one request, following redirects (a token goes only to the
    /// host it was given for), and returns an answer that is 2xx or 416.
    fn send(
        &self,
        endpoint: &Endpoint,
        head: bool,
        range: Option<&str>,
        amz: &[(&'static str, &'static str)],
        bytes: u64,
    ) -> Result<ureq::http::Response<ureq::Body>, Failure> {
        let Some((mut url, mut auth)) = endpoint.prepare(head, amz) else {
            return Err(Failure::Fatal(Problem::BadUrl(
                "an object store's object is not read over plain HTTP".into(),
            )));
        };
        if let Some(p) = &self.ca_problem {
            return Err(Failure::Fatal(p.clone()));
        }
        // Kept headers of redirects (the Hub's X-Linked-Etag and
        // X-Repo-Commit come with its redirect to the CDN).
        let mut hops: Vec<(&'static str, ureq::http::HeaderValue)> = Vec::new();
        for _hop in 0..=MAX_REDIRECTS {
            if let Some(p) = self.over_budget(bytes) {
                return Err(Failure::Fatal(p));
            }
            let mut request = if head {
                self.agent.head(url.as_str())
            } else {
                self.agent.get(url.as_str())
            };
            if let Some(range) = range {
                request = request.header("Range", range);
            }
            if let Some(auth) = &auth {
                request = request.header("Authorization", auth.as_str());
            }
            for (name, value) in amz {
                request = request.header(*name, *value);
            }
            if let Some(left) = self.remaining() {
                // The request, its answer and its body end by the deadline.
                request = request.config().timeout_global(Some(left)).build();
            }
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            let mut response = match request.call() {
                Ok(r) => r,
                Err(e) => return Err(self.transport(&e)),
            };
            let status = response.status().as_u16();
            match status {
                200..=299 | 416 => {
                    for (name, value) in hops {
                        if !response.headers().contains_key(name) {
                            response.headers_mut().insert(name, value);
                        }
                    }
                    return Ok(response);
                }
                301 | 302 | 303 | 307 | 308 => {
                    for name in KEPT {
                        if let Some(v) = response.headers().get(name) {
                            hops.push((name, v.clone()));
                        }
                    }
                    let Some(next) = header(&response, "location").and_then(|l| url.join(&l).ok())
                    else {
                        return Err(Failure::Fatal(Problem::Redirect(format!(
                            "HTTP {status} without a usable Location"
                        ))));
                    };
                    if !matches!(next.scheme(), "http" | "https") {
                        return Err(Failure::Fatal(Problem::Redirect(format!(
                            "to a {}: URL, not followed",
                            next.scheme()
                        ))));
                    }
                    if next.scheme() == "http" && url.scheme() == "https" {
                        return Err(Failure::Fatal(Problem::Redirect(
                            "from https to plain http, not followed".into(),
                        )));
                    }
                    // The token is for its own origin: never sent elsewhere.
                    if next.origin() != url.origin() {
                        auth = None;
                    }
                    url = next;
                }
                401 | 403 => {
                    return Err(Failure::Fatal(Problem::Denied {
                        status,
                        hint: endpoint.denied_hint().into(),
                    }))
                }
                404 | 410 => return Err(Failure::Fatal(Problem::NotFound)),
                408 | 429 | 500..=599 => {
                    let after = header(&response, "retry-after").and_then(|v| retry_after(&v));
                    let detail = error_detail(&mut response);
                    return Err(Failure::Retry(
                        Problem::Status {
                            status,
                            attempts: 1,
                            detail,
                        },
                        after,
                    ));
                }
                _ => {
                    let detail = error_detail(&mut response);
                    return Err(Failure::Fatal(Problem::Status {
                        status,
                        attempts: 1,
                        detail,
                    }));
                }
            }
        }
        Err(Failure::Fatal(Problem::Redirect(format!(
            "more than {MAX_REDIRECTS} redirects"
        ))))
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retries
    /// are used up; each attempt holds one of the in-flight slots.
    fn retrying<T>(
        &self,
        name: &str,
        mut attempt: impl FnMut() -> Result<T, Failure>,
    ) -> Result<T, RemoteError> {
        let mut tries = 0u32;
        let mut last: Option<Problem> = None;
        loop {
            tries += 1;
            let result = {
                let _slot = self.slots.acquire();
                attempt()
            };
            match result {
                Ok(v) => return Ok(v),
                Err(Failure::Fatal(Problem::Budget { what, limit, .. })) => {
                    // Say why the attempt before was retried, if one was.
                    let last = last.map(|p| Box::new(with_attempts(p, tries - 1)));
                    return Err(RemoteError::new(
                        name,
                        Problem::Budget { what, limit, last },
                    ));
                }
                Err(Failure::Fatal(p)) => {
                    return Err(RemoteError::new(name, with_attempts(p, tries)))
                }
                Err(Failure::Retry(p, after)) => {
                    if tries > self.options.retries {
                        return Err(RemoteError::new(name, with_attempts(p, tries)));
                    }
                    let delay = self.delay(tries, after);
                    if let (Some(deadline), Some(budget)) =
                        (self.deadline, self.options.time_budget)
                    {
                        // Waiting would end past the time budget.
                        if Instant::now() + delay >= deadline {
                            return Err(RemoteError::new(
                                name,
                                Problem::Budget {
                                    what: "time",
                                    limit: format!("{budget:?}"),
                                    last: Some(Box::new(with_attempts(p, tries))),
                                },
                            ));
                        }
                    }
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(delay);
                    last = Some(p);
                }
            }
        }
    }

    /// The delay before attempt `tries + 1`: what the server asked for, or
    /// exponential backoff with jitter (between half and all of it).
    fn delay(&self, tries: u32, after: Option<Duration>) -> Duration {
        let max = self.options.max_backoff;
        if let Some(after) = after {
            return after.min(max);
        }
        let full = self
            .options
            .backoff
            .saturating_mul(1u32 << (tries - 1).min(16))
            .min(max);
        let jitter = jitter_fraction();
        full.mul_f64(0.5 + 0.5 * jitter)
    }

    /// Reads `start..end` of an object (`end` may pass the object's end when
    /// `known` is `None`: the first read of an object of unknown length),
    /// handing the bytes to `sink` in order with their offsets. Every
    /// answer is checked: status 206, `Content-Range` exactly the range,
    /// the body exactly as long, and the validator and length unchanged.
    /// A body cut short is asked for again from where it stopped.
    pub(crate) fn get_range(
        &self,
        name: &str,
        endpoint: &Endpoint,
        start: u64,
        end: u64,
        known: Option<&Meta>,
        sink: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<Meta, RemoteError> {
        #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
        if let Endpoint::Store { object } = endpoint {
            return object.get_range(self, name, start, end, known, sink);
        }
        let mut pos = start;
        let mut learned: Option<Meta> = known.cloned();
        let mut piece = vec![0u8; PIECE];
        self.retrying(name, || {
            let asked = format!("bytes={pos}-{}", end - 1);
            let mut response = self.send(endpoint, false, Some(&asked), &[], end - pos)?;
            let status = response.status().as_u16();
            let asked_text = format!("bytes {pos}-{}", end - 1);
            let meta = meta_of(&response);
            if status == 416 {
                // The object's length now: `Content-Range: bytes */LEN`, or
                // S3's `<ActualObjectSize>` in the error body.
                let now = header(&response, "content-range")
                    .and_then(|v| {
                        v.trim()
                            .strip_prefix("bytes */")?
                            .trim()
                            .parse::<u64>()
                            .ok()
                    })
                    .or_else(|| {
                        xml_tag(&small_body(&mut response), "ActualObjectSize")?
                            .trim()
                            .parse()
                            .ok()
                    });
                match (&learned, now) {
                    // The first read of an empty object.
                    (None, Some(0)) if pos == 0 => return Ok(Meta { len: 0, ..meta }),
                    // A range that was within the object: it shrank.
                    (Some(before), Some(now)) if now != before.len => {
                        return Err(Failure::Fatal(Problem::Changed {
                            what: "the length",
                            before: before.len.to_string(),
                            now: now.to_string(),
                        }))
                    }
                    _ => {}
                }
                return Err(Failure::Fatal(Problem::NotSatisfiable {
                    asked: asked_text,
                }));
            }
            if status == 200 {
                return self.take_from_whole(
                    &mut response,
                    meta,
                    (start, &mut pos, end),
                    &mut learned,
                    &mut piece,
                    sink,
                );
            }
            if status != 206 {
                return Err(Failure::Fatal(Problem::IgnoredRange));
            }
            let got = header(&response, "content-range");
            let bad = || Problem::BadContentRange {
                asked: asked_text.clone(),
                got: got.clone(),
            };
            let (a, b, total) = got
                .as_deref()
                .and_then(parse_content_range)
                .ok_or_else(|| Failure::Fatal(bad()))?;
            if let Some(before) = &learned {
                if let Some(p) = changed(before, &meta, total) {
                    return Err(Failure::Fatal(p));
                }
            }
            let last = end.min(total).checked_sub(1);
            if a != pos || Some(b) != last {
                return Err(Failure::Fatal(bad()));
            }
            let expected = b - a + 1;
            let content_length = header(&response, "content-length");
            if let Some(n) = content_length
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
            {
                if n != expected {
                    return Err(Failure::Fatal(if n > expected {
                        Problem::LongBody { expected }
                    } else {
                        bad()
                    }));
                }
            }
            if learned.is_none() {
                learned = Some(Meta {
                    len: total,
                    ..meta.clone()
                });
            }
            let mut reader = RateFloor::new(response.body_mut().as_reader(), &self.options);
            let mut left = expected;
            while left > 0 {
                let want = left.min(PIECE as u64) as usize;
                match reader.read(&mut piece[..want]) {
                    Ok(0) => {
                        return Err(Failure::Retry(
                            Problem::ShortBody {
                                expected: end.min(total) - start,
                                got: pos - start,
                            },
                            None,
                        ))
                    }
                    Ok(n) => {
                        self.stats.body_bytes.fetch_add(n as u64, Ordering::Relaxed);
                        sink(pos, &piece[..n]);
                        pos += n as u64;
                        left -= n as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        return Err(self.body_error(e, || Problem::ShortBody {
                            expected: end.min(total) - start,
                            got: pos - start,
                        }))
                    }
                }
            }
            // A body without a length must end where the range does.
            if content_length.is_none() {
                let mut one = [0u8; 1];
                if matches!(reader.read(&mut one), Ok(n) if n > 0) {
                    return Err(Failure::Fatal(Problem::LongBody { expected }));
                }
            }
            Ok(Meta { len: total, ..meta })
        })
    }

    /// The bytes `*pos..end` of an object from an answer of 200 with the
    /// whole object (a server that does not take ranges), which must say
    /// its length: the bytes before `*pos` are read and dropped, the ones
    /// wanted handed to `sink`, and the rest never read (the connection is
    /// dropped, not drained: reading a header never downloads the object).
    #[allow(clippy::too_many_arguments)]
    fn take_from_whole(
        &self,
        response: &mut ureq::http::Response<ureq::Body>,
        meta: Meta,
        (start, pos, end): (u64, &mut u64, u64),
        learned: &mut Option<Meta>,
        piece: &mut [u8],
        sink: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<Meta, Failure> {
        let total = header(response, "content-length")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or(Failure::Fatal(Problem::IgnoredRange))?;
        if let Some(before) = learned.as_ref() {
            if let Some(p) = changed(before, &meta, total) {
                return Err(Failure::Fatal(p));
            }
        }
        let stop = end.min(total);
        if *pos > stop || (*pos == stop && learned.is_some()) {
            return Err(Failure::Fatal(Problem::NotSatisfiable {
                asked: format!("bytes {}-{}", *pos, end - 1),
            }));
        }
        let meta = Meta {
            len: total,
            ranges_ignored: true,
            ..meta
        };
        if learned.is_none() {
            *learned = Some(meta.clone());
        }
        let short = |pos: u64| Problem::ShortBody {
            expected: stop - start,
            got: pos - start,
        };
        let mut reader = RateFloor::new(response.body_mut().as_reader(), &self.options);
        // The body starts at the object's first byte.
        let mut at = 0u64;
        while at < stop {
            let want = (stop - at).min(piece.len() as u64) as usize;
            match reader.read(&mut piece[..want]) {
                Ok(0) => return Err(Failure::Retry(short(*pos), None)),
                Ok(n) => {
                    self.stats.body_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    // Bytes before `pos` came on an earlier attempt, or
                    // are not wanted.
                    let skip = pos.saturating_sub(at).min(n as u64) as usize;
                    if skip < n {
                        sink(*pos, &piece[skip..n]);
                        *pos += (n - skip) as u64;
                    }
                    at += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.body_error(e, || short(*pos))),
            }
        }
        Ok(meta)
    }

    /// A `HEAD` of the object: its length and validator, and the kept
    /// headers (S3 is asked for its checksum).
    pub(crate) fn head(&self, name: &str, endpoint: &Endpoint) -> Result<Meta, RemoteError> {
        let amz: &[(&'static str, &'static str)] = match endpoint {
            Endpoint::S3 { .. } => &[("x-amz-checksum-mode", "ENABLED")],
            Endpoint::Http { .. } => &[],
            #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
            Endpoint::Store { object } => return object.head(self, name),
        };
        self.retrying(name, || {
            let response = self.send(endpoint, true, None, amz, 0)?;
            if response.status().as_u16() == 416 {
                return Err(Failure::Fatal(Problem::Status {
                    status: 416,
                    attempts: 1,
                    detail: String::new(),
                }));
            }
            let len = header(&response, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            Ok(Meta {
                len,
                ..meta_of(&response)
            })
        })
    }

    /// A whole small document (a listing, an index): at most `limit` bytes.
    /// Returns the body and the `Link` header (the Hub's pagination).
    pub(crate) fn get_document(
        &self,
        name: &str,
        endpoint: &Endpoint,
        limit: u64,
    ) -> Result<(Vec<u8>, Option<String>), RemoteError> {
        self.retrying(name, || {
            let mut response = self.send(endpoint, false, None, &[], 0)?;
            if response.status().as_u16() == 416 {
                return Err(Failure::Fatal(Problem::NotSatisfiable {
                    asked: "the whole document".into(),
                }));
            }
            let link = header(&response, "link");
            let mut body = Vec::new();
            let reader = response.body_mut().with_config().limit(limit + 1).reader();
            let mut reader = RateFloor::new(reader, &self.options);
            if let Err(e) = reader.read_to_end(&mut body) {
                let too_long = e.get_ref().is_some_and(|i| {
                    matches!(
                        i.downcast_ref::<ureq::Error>(),
                        Some(ureq::Error::BodyExceedsLimit(_))
                    )
                });
                if too_long {
                    // No retry makes a document shorter.
                    return Err(Failure::Fatal(Problem::Listing(format!(
                        "longer than {limit} bytes"
                    ))));
                }
                return Err(self.body_error(e, || Problem::ShortBody {
                    expected: limit,
                    got: 0,
                }));
            }
            self.stats
                .body_bytes
                .fetch_add(body.len() as u64, Ordering::Relaxed);
            if body.len() as u64 > limit {
                return Err(Failure::Fatal(Problem::Listing(format!(
                    "longer than {limit} bytes"
                ))));
            }
            Ok((body, link))
        })
    }
}

/// The most redirects followed for one request.
const MAX_REDIRECTS: u32 = 10;

/// A body reader that fails once a window of
/// [`RemoteOptions::rate_window`] brings fewer bytes than
/// [`RemoteOptions::min_rate`] asks for: checked at each read, counted per
/// window, so a byte now and then does not reset it.
struct RateFloor<R> {
    inner: R,
    min_rate: u64,
    window: Duration,
    started: Instant,
    bytes: u64,
}

impl<R: Read> RateFloor<R> {
    fn new(inner: R, options: &RemoteOptions) -> RateFloor<R> {
        RateFloor {
            inner,
            min_rate: options.min_rate,
            window: options.rate_window,
            started: Instant::now(),
            bytes: 0,
        }
    }

    /// Ends the window if it is over: an error if it fell short.
    fn check(&mut self) -> std::io::Result<()> {
        if self.min_rate == 0 || self.started.elapsed() < self.window {
            return Ok(());
        }
        let floor = (self.min_rate as f64 * self.window.as_secs_f64()) as u64;
        if self.bytes < floor {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                Problem::TooSlow {
                    min_rate: self.min_rate,
                    window: self.window,
                    got: self.bytes,
                },
            ));
        }
        self.started = Instant::now();
        self.bytes = 0;
        Ok(())
    }
}

impl<R: Read> Read for RateFloor<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.check()?;
        match self.inner.read(buf) {
            Ok(n) => {
                self.bytes = self.bytes.saturating_add(n as u64);
                self.check()?;
                Ok(n)
            }
            // A read that waited out its timeout: the window says why.
            Err(e) => self.check().and(Err(e)),
        }
    }
}

/// The problem with its attempt count filled in.
fn with_attempts(p: Problem, tries: u32) -> Problem {
    match p {
        Problem::Status { status, detail, .. } => Problem::Status {
            status,
            attempts: tries,
            detail,
        },
        Problem::Transport { message, .. } => Problem::Transport {
            message,
            attempts: tries,
        },
        Problem::Timeout { what, limit, .. } => Problem::Timeout {
            what,
            limit,
            attempts: tries,
        },
        p => p,
    }
}

/// Whether the object changed since `before` was recorded.
pub(crate) fn changed(before: &Meta, now: &Meta, total: u64) -> Option<Problem> {
    if total != before.len {
        return Some(Problem::Changed {
            what: "the length",
            before: before.len.to_string(),
            now: total.to_string(),
        });
    }
    let (b, n) = (&before.validator, &now.validator);
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "absent".into());
    if b.etag.is_some() && b.etag != n.etag {
        return Some(Problem::Changed {
            what: "ETag",
            before: show(&b.etag),
            now: show(&n.etag),
        });
    }
    if b.etag.is_none() && b.last_modified.is_some() && b.last_modified != n.last_modified {
        return Some(Problem::Changed {
            what: "Last-Modified",
            before: show(&b.last_modified),
            now: show(&n.last_modified),
        });
    }
    None
}

/// A header's value as text.
fn header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn meta_of(response: &ureq::http::Response<ureq::Body>) -> Meta {
    Meta {
        len: 0,
        validator: Validator {
            etag: header(response, "etag"),
            last_modified: header(response, "last-modified"),
        },
        kept: KEPT
            .iter()
            .filter_map(|n| header(response, n).map(|v| (n.to_string(), v)))
            .collect(),
        ranges_ignored: false,
    }
}

/// `bytes A-B/T` (T a number).
pub(crate) fn parse_content_range(v: &str) -> Option<(u64, u64, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    let (a, b, total): (u64, u64, u64) = (
        a.trim().parse().ok()?,
        b.trim().parse().ok()?,
        total.trim().parse().ok()?,
    );
    (a <= b && b < total).then_some((a, b, total))
}

/// `Retry-After` in seconds (an HTTP date is left to the backoff).
pub(crate) fn retry_after(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A short, credential-free excerpt of an error body: S3's `<Code>` and
/// `<Message>`, else the first line of text.
fn error_detail(response: &mut ureq::http::Response<ureq::Body>) -> String {
    let text = small_body(response);
    let detail = match (xml_tag(&text, "Code"), xml_tag(&text, "Message")) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c,
        _ => text.lines().next().unwrap_or("").to_string(),
    };
    let detail: String = scrub(&detail).chars().take(200).collect();
    detail
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The first 4 KiB of a body (an error's), as text.
fn small_body(response: &mut ureq::http::Response<ureq::Body>) -> String {
    let mut body = Vec::new();
    let _ = response
        .body_mut()
        .with_config()
        .limit(4096)
        .reader()
        .take(4096)
        .read_to_end(&mut body);
    String::from_utf8_lossy(&body).into_owned()
}

/// The text of the first `<tag>` element of an XML answer (S3's errors).
fn xml_tag(text: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find('<')?;
    Some(text[start..start + len].to_string())
}

/// What the HTTP client said, with any URL's query (a signature) removed.
fn transport(e: &ureq::Error) -> Problem {
    let message = match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::Io(io) => format!("connection error: {}", scrub(&io.to_string())),
        other => scrub(&other.to_string()),
    };
    Problem::Transport {
        message,
        attempts: 1,
    }
}

/// Removes query strings (signatures, tokens) from text that may quote a URL.
pub(crate) fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_query = false;
    for c in text.chars() {
        if in_query {
            if c.is_whitespace() || c == '"' || c == '\'' || c == ')' {
                in_query = false;
                out.push(c);
            }
            continue;
        }
        if c == '?' && out.contains("://") {
            in_query = true;
            out.push_str("?<redacted>");
            continue;
        }
        out.push(c);
    }
    out
}

/// A number in `[0, 1)`, different on each call (jitter needs no quality).
fn jitter_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(parse_content_range("bytes 0-9/10"), Some((0, 9, 10)));
        assert_eq!(parse_content_range("bytes 5-5/6"), Some((5, 5, 6)));
        for bad in [
            "bytes 0-9/*",
            "bytes 9-0/10",
            "bytes 0-10/10",
            "0-9/10",
            "bytes */10",
            "",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn queries_are_scrubbed() {
        let s = scrub("failed http://h/b/k?X-Amz-Signature=abc&x=1 now");
        assert_eq!(s, "failed http://h/b/k?<redacted> now");
        assert_eq!(scrub("what? no url"), "what? no url");
    }

    /// A document longer than its limit is refused at once: no retry
    /// makes it shorter (a 64 MiB-plus listing was asked for 7 times).
    #[test]
    fn a_document_over_its_limit_is_not_retried() {
        let server = tensorfile_testkit::serve::Server::start().unwrap();
        server.put("/list", vec![b'x'; 4096]);
        let client = Client::new(
            RemoteOptions::default()
                .with_backoff(Duration::from_millis(1))
                .with_max_backoff(Duration::from_millis(1)),
        );
        let endpoint = Endpoint::Http {
            url: Url::parse(&format!("{}/list", server.url())).unwrap(),
            token: None,
            denied_hint: "",
        };
        let e = client.get_document("list", &endpoint, 1000).unwrap_err();
        assert!(matches!(e.problem, Problem::Listing(_)), "{e}");
        assert_eq!(client.stats().requests, 1, "{e}");
    }

    #[test]
    fn backoff_doubles_within_bounds() {
        let client = Client::new(RemoteOptions {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            ..RemoteOptions::default()
        });
        for tries in 1..10u32 {
            let d = client.delay(tries, None);
            let full = Duration::from_millis(100 * (1 << (tries - 1))).min(Duration::from_secs(1));
            assert!(d >= full / 2 && d <= full, "{tries}: {d:?}");
        }
        assert_eq!(
            client.delay(1, Some(Duration::from_secs(60))),
            Duration::from_secs(1)
        );
    }
}
