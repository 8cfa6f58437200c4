//! A small HTTP/1.1 server on 127.0.0.1 for tests and benchmarks: it serves objects with `Range` as S3 does (suffix
//! ranges, 416 past the end, the whole object for a multi-range request),
//! a Hub-shaped repository (`resolve/` URLs redirected to a second port
//! standing in for the CDN, the `api/models/REPO/tree/REVISION` listing
//! with LFS oids, paginated with `Link`), added latency, and injected
//! faults; it records every request it answered and counts the bytes.
//!
//! Not a product server: no TLS, one thread per connection, bodies of
//! requests ignored. [`S3Bucket`] makes, fills and lists buckets of a real
//! S3 server (moto's) for the `s3://` tests, [`crate::azure`] makes
//! Azurite's containers, and [`Proxy`] stands in front of either to fail
//! or stall chosen requests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::http1::{Background, Listener};

/// A fault injected into the answers to requests whose path contains a
/// given text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The connection is closed without an answer.
    Drop,
    /// This status with an empty body (`Retry-After` when given).
    Status(u16, Option<u64>),
    /// 200 with the whole body, whatever the `Range`, and no
    /// `Accept-Ranges` (a server that does not take ranges, as
    /// `python3 -m http.server`).
    IgnoreRange,
    /// A 206 whose `Content-Range` starts one byte late.
    WrongRange,
    /// The headers promise the range, half the body comes, then the
    /// connection closes.
    Short,
    /// The body's first byte is flipped (a corruption no header shows).
    Corrupt,
    /// The headers promise the range, half the body comes, then the
    /// connection is reset (a TCP RST, not a clean close), as a peer or a
    /// middlebox that drops a connection mid-body does.
    Reset,
    /// The request is read and never answered: the connection stays open,
    /// silent, for this long (or until the server stops), then closes.
    Silent(Duration),
    /// The headers come at once, then the body one byte per this interval
    /// (until it is all sent, the client leaves or the server stops).
    Drip(Duration),
    /// A 302 to this `Location`, whatever it is.
    Redirect(String),
}

/// One request the server answered.
#[derive(Debug, Clone)]
pub struct Served {
    /// `GET` or `HEAD`.
    pub method: String,
    /// The path and query, as sent.
    pub target: String,
    /// The port it came in on (the main one or the CDN's).
    pub port: u16,
    /// The `Range` header, as sent.
    pub range: Option<String>,
    /// Whether an `Authorization` header came with it.
    pub authorized: bool,
    /// The status answered (0: dropped).
    pub status: u16,
    /// Body bytes sent.
    pub body_bytes: u64,
}

/// What an object's bytes are.
#[derive(Debug, Clone)]
enum Bytes {
    Memory(Arc<[u8]>),
    File(PathBuf, u64),
}

impl Bytes {
    fn len(&self) -> u64 {
        match self {
            Bytes::Memory(b) => b.len() as u64,
            Bytes::File(_, n) => *n,
        }
    }
}

#[derive(Debug, Clone)]
struct Object {
    bytes: Bytes,
    etag: String,
    sha256: Option<String>,
    /// Its Xet hash, for a Hub file stored with Xet.
    xet: Option<String>,
}

/// A Hub repository served under `/{repo}/resolve/{revision}/`.
#[derive(Debug, Clone)]
struct HubRepo {
    revision: String,
    /// The commit its answers name (`X-Repo-Commit`), as the Hub's do.
    commit: String,
    /// The token it wants (`None`: public).
    token: Option<String>,
}

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Object>,
    faults: Vec<(String, Fault, u32)>,
    log: Vec<Served>,
    repos: BTreeMap<String, HubRepo>,
    page_size: usize,
    latency: Duration,
    /// Paths that answer 401 without `Authorization: Bearer TOKEN`.
    guarded: Vec<(String, String)>,
}

struct Shared {
    state: Mutex<State>,
    /// Both listeners' stop flag.
    stop: Arc<AtomicBool>,
    body_bytes: AtomicU64,
    requests: AtomicU64,
    ports: (u16, u16),
    generation: AtomicU64,
    /// Requests read and not yet logged: the log and the counts wait for
    /// them (a client may have its answer before the server has counted it).
    answering: AtomicU64,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The server: two listeners on 127.0.0.1 (the main port, and a second
/// one that Hub downloads are redirected to, a different origin as a CDN
/// is), stopped when dropped.
pub struct Server {
    shared: Arc<Shared>,
    /// Dropping them stops the server.
    _listeners: [Background; 2],
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("ports", &self.shared.ports)
            .finish()
    }
}

impl Server {
    /// Starts a server on two free ports of 127.0.0.1.
    ///
    /// # Errors
    /// The ports cannot be bound.
    pub fn start() -> std::io::Result<Server> {
        let main = Listener::bind()?;
        let cdn = Listener::bind()?;
        let ports = (main.port(), cdn.port());
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                page_size: 1000,
                ..State::default()
            }),
            stop: stop.clone(),
            body_bytes: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            ports,
            generation: AtomicU64::new(0),
            answering: AtomicU64::new(0),
        });
        let listeners = [main, cdn].map(|listener| {
            let shared = shared.clone();
            listener.serve(stop.clone(), move |stream, _| connection(stream, &shared))
        });
        Ok(Server {
            shared,
            _listeners: listeners,
        })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.shared.ports.0)
    }

    /// Serves `bytes` at `path` (which starts with `/`), with a new `ETag`.
    pub fn put(&self, path: &str, bytes: impl Into<Arc<[u8]>>) {
        let bytes: Arc<[u8]> = bytes.into();
        let sha = hex::encode(Sha256::digest(&bytes));
        self.insert(path, Bytes::Memory(bytes), Some(sha));
    }

    /// Serves the file `file` at `path`, read as it is asked for (no
    /// checksum is computed: for large files in benchmarks).
    ///
    /// # Errors
    /// The file's length cannot be read.
    pub fn put_file(&self, path: &str, file: impl Into<PathBuf>) -> std::io::Result<()> {
        let file = file.into();
        let len = std::fs::metadata(&file)?.len();
        self.insert(path, Bytes::File(file, len), None);
        Ok(())
    }

    fn insert(&self, path: &str, bytes: Bytes, sha256: Option<String>) {
        let g = self.shared.generation.fetch_add(1, Ordering::Relaxed);
        let etag = format!("\"{:x}-{g}\"", bytes.len());
        self.shared.lock().objects.insert(
            path.to_string(),
            Object {
                bytes,
                etag,
                sha256,
                xet: None,
            },
        );
    }

    /// Stops serving `path`.
    pub fn remove(&self, path: &str) {
        self.shared.lock().objects.remove(path);
    }

    /// Adds `latency` before every answer.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().latency = latency;
    }

    /// Injects `fault` into the next `times` answers to requests whose
    /// path contains `path_contains`.
    pub fn inject(&self, path_contains: &str, fault: Fault, times: u32) {
        self.shared
            .lock()
            .faults
            .push((path_contains.to_string(), fault, times));
    }

    /// Requests for paths starting with `prefix` answer 401 unless they
    /// carry `Authorization: Bearer TOKEN`.
    pub fn guard(&self, prefix: &str, token: &str) {
        self.shared
            .lock()
            .guarded
            .push((prefix.to_string(), token.to_string()));
    }

    /// Serves a Hub repository `repo` (`ORG/NAME`) at `revision`: each file
    /// of `files` at `/{repo}/resolve/{revision}/{path}` (`.safetensors`
    /// files redirected to the CDN port), listed by
    /// `/api/models/{repo}/tree/{revision}[/{dir}]`. With a `token`, the
    /// repository answers 401 to requests without it (as a gated one).
    pub fn hub_repo(
        &self,
        repo: &str,
        revision: &str,
        files: &[(&str, Vec<u8>)],
        token: Option<&str>,
    ) {
        let mut digest = Sha256::new();
        digest.update(format!("{repo}@{revision}").as_bytes());
        for (path, bytes) in files {
            self.put(&format!("/{repo}/resolve/{revision}/{path}"), bytes.clone());
            digest.update(path.as_bytes());
            digest.update(Sha256::digest(bytes));
        }
        // A commit of 40 hex digits, new whenever the files are.
        let commit = hex::encode(digest.finalize())[..40].to_string();
        self.shared.lock().repos.insert(
            repo.to_string(),
            HubRepo {
                revision: revision.to_string(),
                commit,
                token: token.map(str::to_string),
            },
        );
    }

    /// Marks the Hub file `path` of `repo` at `revision` (served by
    /// [`Server::hub_repo`]) as stored with Xet under the hash `xet`: its
    /// answers carry `X-Xet-Hash` and a `Link` of `rel="xet-auth"`, as the
    /// Hub's do (the Xet service itself is not served).
    pub fn hub_xet(&self, repo: &str, revision: &str, path: &str, xet: &str) {
        let key = format!("/{repo}/resolve/{revision}/{path}");
        if let Some(o) = self.shared.lock().objects.get_mut(&key) {
            o.xet = Some(xet.to_string());
        }
    }

    /// How many entries a page of the Hub's tree holds (default 1000).
    pub fn set_page_size(&self, n: usize) {
        self.shared.lock().page_size = n.max(1);
    }

    /// Waits (up to 5 s) until every request read has been logged.
    fn settle(&self) {
        for _ in 0..5000 {
            if self.shared.answering.load(Ordering::SeqCst) == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Every request answered so far.
    pub fn log(&self) -> Vec<Served> {
        self.settle();
        self.shared.lock().log.clone()
    }

    /// Forgets the log and the counts.
    pub fn reset(&self) {
        self.settle();
        self.shared.lock().log.clear();
        self.shared.body_bytes.store(0, Ordering::Relaxed);
        self.shared.requests.store(0, Ordering::Relaxed);
    }

    /// Requests answered and body bytes sent since the last reset.
    pub fn counts(&self) -> (u64, u64) {
        self.settle();
        (
            self.shared.requests.load(Ordering::Relaxed),
            self.shared.body_bytes.load(Ordering::Relaxed),
        )
    }
}

/// A request's parts that matter here.
struct Request {
    method: String,
    target: String,
    range: Option<String>,
    authorization: Option<String>,
    close: bool,
}

fn read_request(reader: &mut BufReader<TcpStream>, shared: &Shared) -> Option<Request> {
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) => break,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if shared.stop.load(Ordering::Relaxed) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut request = Request {
        method,
        target,
        range: None,
        authorization: None,
        close: false,
    };
    let mut total = line.len();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        total += h.len();
        if total > 64 << 10 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            return Some(request);
        }
        let (name, value) = h.split_once(':')?;
        let value = value.trim().to_string();
        match name.trim().to_ascii_lowercase().as_str() {
            "range" => request.range = Some(value),
            "authorization" => request.authorization = Some(value),
            "connection" => request.close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
}

fn connection(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    let _ = stream.set_nodelay(true);
    let port = stream.local_addr()?.port();
    let mut out = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    while let Some(request) = read_request(&mut reader, shared) {
        shared.answering.fetch_add(1, Ordering::SeqCst);
        let answered = answer(&request, port, shared, &mut out);
        let (status, body_bytes, keep) = match answered {
            Ok(a) => a,
            Err(e) => {
                shared.answering.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        shared.requests.fetch_add(1, Ordering::Relaxed);
        shared.body_bytes.fetch_add(body_bytes, Ordering::Relaxed);
        shared.lock().log.push(Served {
            method: request.method.clone(),
            target: request.target.clone(),
            port,
            range: request.range.clone(),
            authorized: request.authorization.is_some(),
            status,
            body_bytes,
        });
        shared.answering.fetch_sub(1, Ordering::SeqCst);
        if !keep || request.close {
            // A connection to be reset is closed without a FIN first.
            if !resets_on_close(&out) {
                let _ = out.shutdown(Shutdown::Both);
            }
            return Ok(());
        }
    }
    Ok(())
}

/// Makes closing `socket` send a TCP reset (`SO_LINGER` of 0 seconds).
#[cfg(unix)]
fn reset_on_close(socket: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid descriptor and a `linger` of the size given.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Elsewhere a plain close stands in for the reset.
#[cfg(not(unix))]
fn reset_on_close(_socket: &TcpStream) -> std::io::Result<()> {
    Ok(())
}

/// Whether closing `socket` sends a reset ([`reset_on_close`] was called).
#[cfg(unix)]
fn resets_on_close(socket: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut linger = libc::linger {
        l_onoff: 0,
        l_linger: 0,
    };
    let mut len = std::mem::size_of::<libc::linger>() as libc::socklen_t;
    // SAFETY: a valid descriptor, and a `linger` of the size given.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&mut linger as *mut libc::linger).cast(),
            &mut len,
        )
    };
    r == 0 && linger.l_onoff != 0 && linger.l_linger == 0
}

#[cfg(not(unix))]
fn resets_on_close(_socket: &TcpStream) -> bool {
    false
}

/// What to send: status, extra headers, and the body's range of the
/// object (or a small body of its own).
enum Body<'a> {
    None,
    Text(String),
    Range(&'a Object, u64, u64),
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Answers one request; returns the status, the body bytes sent, and
/// whether the connection stays open.
fn answer(
    request: &Request,
    port: u16,
    shared: &Shared,
    out: &mut TcpStream,
) -> std::io::Result<(u16, u64, bool)> {
    let (latency, fault, object, hub, guarded, page_size) = {
        let mut state = shared.lock();
        let path = request.target.split('?').next().unwrap_or("").to_string();
        let mut fault = None;
        for (contains, f, times) in state.faults.iter_mut() {
            if *times > 0 && path.contains(contains.as_str()) {
                *times -= 1;
                fault = Some(f.clone());
                break;
            }
        }
        state.faults.retain(|(_, _, t)| *t > 0);
        // The CDN port serves /cdn/PATH as PATH.
        let lookup = if port == shared.ports.1 {
            path.strip_prefix("/cdn").unwrap_or(&path).to_string()
        } else {
            path.clone()
        };
        let object = state.objects.get(&lookup).cloned();
        let hub = hub_route(&state, &request.target);
        let guarded = state
            .guarded
            .iter()
            .find(|(p, _)| lookup.starts_with(p.as_str()))
            .map(|(_, t)| t.clone())
            .or_else(|| hub.as_ref().and_then(|h| h.token.clone()));
        (state.latency, fault, object, hub, guarded, state.page_size)
    };
    if !latency.is_zero() {
        std::thread::sleep(latency);
    }
    let head = request.method == "HEAD";
    let mut extra: Vec<(String, String)> = Vec::new();
    match fault {
        Some(Fault::Drop) => return Ok((0, 0, false)),
        Some(Fault::Silent(hold)) => {
            let until = std::time::Instant::now() + hold;
            while std::time::Instant::now() < until && !shared.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            return Ok((0, 0, false));
        }
        Some(Fault::Redirect(to)) => {
            extra.push(("Location".into(), to.clone()));
            return send(out, 302, &extra, Body::None, head);
        }
        Some(Fault::Status(status, after)) => {
            if let Some(a) = after {
                extra.push(("Retry-After".into(), a.to_string()));
            }
            return send(out, status, &extra, Body::None, head);
        }
        _ => {}
    }
    if let Some(token) = guarded {
        if port == shared.ports.0
            && request.authorization.as_deref() != Some(&format!("Bearer {token}"))
        {
            let status = if request.authorization.is_some() {
                403
            } else {
                401
            };
            return send(out, status, &extra, Body::None, head);
        }
    }
    if let Some(route) = &hub {
        if let HubRoute::Tree { repo, dir, cursor } = &route.route {
            let text = tree_page(shared, repo, dir, *cursor, page_size, &mut extra);
            return match text {
                Some(t) => send(out, 200, &extra, Body::Text(t), head),
                None => send(out, 404, &extra, Body::None, head),
            };
        }
    }
    let Some(object) = object else {
        return send(out, 404, &extra, Body::None, head);
    };
    // The Hub names the commit it answers from, and a Xet file's hash.
    if let Some(h) = &hub {
        extra.push(("X-Repo-Commit".into(), h.commit.clone()));
        if let (Some(xet), true) = (&object.xet, port == shared.ports.0) {
            extra.push(("X-Xet-Hash".into(), xet.clone()));
            extra.push((
                "Link".into(),
                format!(
                    "<http://127.0.0.1:{}/api/xet-read-token>; rel=\"xet-auth\"",
                    shared.ports.0
                ),
            ));
        }
    }
    // Hub weights are redirected to the CDN, as the Hub does for LFS files.
    if hub.is_some() && port == shared.ports.0 && request.target.ends_with(".safetensors") {
        extra.push((
            "Location".into(),
            format!(
                "http://127.0.0.1:{}/cdn{}",
                shared.ports.1,
                request.target.split('?').next().unwrap_or("")
            ),
        ));
        if let Some(sha) = &object.sha256 {
            extra.push(("X-Linked-Etag".into(), format!("\"{sha}\"")));
        }
        extra.push(("X-Linked-Size".into(), object.bytes.len().to_string()));
        return send(out, 302, &extra, Body::None, head);
    }
    // The Hub's small files have their content's hash as ETag (the Hub's
    // git oid; the sha256 here).
    match (&hub, &object.sha256) {
        (Some(_), Some(sha)) if port == shared.ports.0 => {
            extra.push(("ETag".into(), format!("\"{sha}\"")))
        }
        _ => extra.push(("ETag".into(), object.etag.clone())),
    }
    if fault != Some(Fault::IgnoreRange) {
        extra.push(("Accept-Ranges".into(), "bytes".into()));
    }
    let len = object.bytes.len();
    let range = match (&request.range, &fault) {
        (_, Some(Fault::IgnoreRange)) | (None, _) => None,
        (Some(r), _) => match parse_range(r, len) {
            Parsed::Whole => None,
            Parsed::Unsatisfiable => {
                extra.push(("Content-Range".into(), format!("bytes */{len}")));
                return send(out, 416, &extra, Body::None, head);
            }
            Parsed::Span(a, b) => Some((a, b)),
        },
    };
    let (status, a, b) = match range {
        None => (200, 0, len),
        Some((a, b)) => {
            let shown = if fault == Some(Fault::WrongRange) {
                a + 1
            } else {
                a
            };
            extra.push((
                "Content-Range".into(),
                format!("bytes {shown}-{}/{len}", b - 1),
            ));
            (206, a, b)
        }
    };
    if fault == Some(Fault::Short) {
        let half = a + (b - a) / 2;
        let (_, sent, _) = send_partial(out, status, &extra, &object, a, b, half, head)?;
        return Ok((status, sent, false));
    }
    if fault == Some(Fault::Reset) && !head {
        let half = a + (b - a) / 2;
        let (_, sent, _) = send_partial(out, status, &extra, &object, a, b, half, head)?;
        // Let the client take what came before the reset, which would
        // otherwise discard it in flight.
        std::thread::sleep(Duration::from_millis(100));
        reset_on_close(out)?;
        return Ok((status, sent, false));
    }
    if let (Some(Fault::Drip(every)), false) = (&fault, head) {
        out.write_all(head_text(status, &extra, b - a).as_bytes())?;
        let mut sent = 0;
        for at in a..b {
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(*every);
            let mut byte = [0u8];
            read_object(&object, at, &mut byte)?;
            if out.write_all(&byte).is_err() {
                break;
            }
            sent += 1;
        }
        return Ok((status, sent, false));
    }
    if fault == Some(Fault::Corrupt) && b > a && !head {
        out.write_all(head_text(status, &extra, b - a).as_bytes())?;
        let mut body = vec![0u8; (b - a) as usize];
        read_object(&object, a, &mut body)?;
        body[0] ^= 0xff;
        out.write_all(&body)?;
        return Ok((status, b - a, true));
    }
    send(out, status, &extra, Body::Range(&object, a, b), head)
}

/// Reads `buf.len()` bytes of an object from `at`.
fn read_object(object: &Object, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
    match &object.bytes {
        Bytes::Memory(bytes) => buf.copy_from_slice(&bytes[at as usize..at as usize + buf.len()]),
        Bytes::File(path, _) => {
            let mut file = std::fs::File::open(path)?;
            file.seek(SeekFrom::Start(at))?;
            file.read_exact(buf)?;
        }
    }
    Ok(())
}

/// A request of the Hub's shape.
struct HubMatch {
    token: Option<String>,
    commit: String,
    route: HubRoute,
}

enum HubRoute {
    Resolve,
    Tree {
        repo: String,
        dir: String,
        cursor: usize,
    },
}

fn hub_route(state: &State, path_and_query: &str) -> Option<HubMatch> {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    if let Some(rest) = path.strip_prefix("/api/models/") {
        for (repo, r) in &state.repos {
            let Some(tail) = rest.strip_prefix(repo.as_str()) else {
                continue;
            };
            let Some(tail) = tail.strip_prefix("/tree/") else {
                continue;
            };
            let rev = percent_decode(&r.revision);
            let quoted = r.revision.replace('/', "%2F");
            let tail = tail
                .strip_prefix(quoted.as_str())
                .or_else(|| tail.strip_prefix(rev.as_str()))?;
            let dir = tail.trim_start_matches('/').to_string();
            let cursor = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("cursor="))
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            return Some(HubMatch {
                token: r.token.clone(),
                commit: r.commit.clone(),
                route: HubRoute::Tree {
                    repo: repo.clone(),
                    dir,
                    cursor,
                },
            });
        }
        return None;
    }
    state.repos.iter().find_map(|(repo, r)| {
        path.strip_prefix(&format!("/{repo}/resolve/"))
            .map(|_| HubMatch {
                token: r.token.clone(),
                commit: r.commit.clone(),
                route: HubRoute::Resolve,
            })
    })
}

fn percent_decode(s: &str) -> String {
    s.replace("%2F", "/").replace("%2f", "/")
}

/// One page of the Hub's tree of `repo` below `dir`, with a `Link` to the
/// next page when there is one.
fn tree_page(
    shared: &Shared,
    repo: &str,
    dir: &str,
    cursor: usize,
    page_size: usize,
    extra: &mut Vec<(String, String)>,
) -> Option<String> {
    let state = shared.lock();
    let revision = state.repos.get(repo)?.revision.clone();
    let root = format!("/{repo}/resolve/{revision}/");
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{}/", percent_decode(dir))
    };
    let mut entries: Vec<serde_json::Value> = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for (path, object) in &state.objects {
        let Some(rel) = path.strip_prefix(&root) else {
            continue;
        };
        let Some(below) = rel.strip_prefix(&prefix) else {
            continue;
        };
        if let Some((sub, _)) = below.split_once('/') {
            if dirs.insert(sub.to_string()) {
                entries.push(serde_json::json!({
                    "type": "directory", "oid": "0", "size": 0,
                    "path": format!("{prefix}{sub}"),
                }));
            }
            continue;
        }
        let oid = object.sha256.clone().unwrap_or_else(|| "0".into());
        let mut e = serde_json::json!({
            "type": "file", "oid": oid, "size": object.bytes.len(), "path": rel,
        });
        if rel.ends_with(".safetensors") {
            if let Some(sha) = &object.sha256 {
                e["lfs"] =
                    serde_json::json!({"oid": sha, "size": object.bytes.len(), "pointerSize": 134});
            }
        }
        entries.push(e);
    }
    let page: Vec<_> = entries
        .iter()
        .skip(cursor)
        .take(page_size)
        .cloned()
        .collect();
    if cursor + page_size < entries.len() {
        let next = format!(
            "http://127.0.0.1:{}/api/models/{repo}/tree/{}{}{dir}?cursor={}",
            shared.ports.0,
            revision.replace('/', "%2F"),
            if dir.is_empty() { "" } else { "/" },
            cursor + page_size
        );
        extra.push(("Link".into(), format!("<{next}>; rel=\"next\"")));
    }
    Some(serde_json::Value::Array(page).to_string())
}

enum Parsed {
    Whole,
    Unsatisfiable,
    Span(u64, u64),
}

/// A `Range` header against an object of `len` bytes, as S3 reads it.
fn parse_range(value: &str, len: u64) -> Parsed {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Parsed::Whole;
    };
    if spec.contains(',') {
        return Parsed::Whole;
    }
    let Some((a, b)) = spec.split_once('-') else {
        return Parsed::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        // A suffix: the last b bytes.
        return match b.parse::<u64>() {
            Ok(0) | Err(_) => Parsed::Unsatisfiable,
            Ok(n) => Parsed::Span(len.saturating_sub(n), len),
        };
    }
    let Ok(a) = a.parse::<u64>() else {
        return Parsed::Whole;
    };
    if a >= len {
        return Parsed::Unsatisfiable;
    }
    let end = match b {
        "" => len,
        b => match b.parse::<u64>() {
            Ok(b) if b >= a => (b + 1).min(len),
            _ => return Parsed::Whole,
        },
    };
    Parsed::Span(a, end)
}

fn head_text(status: u16, extra: &[(String, String)], len: u64) -> String {
    let mut text = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (n, v) in extra {
        text.push_str(&format!("{n}: {v}\r\n"));
    }
    text.push_str(&format!("Content-Length: {len}\r\n"));
    text.push_str("Last-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n");
    text
}

fn send(
    out: &mut TcpStream,
    status: u16,
    extra: &[(String, String)],
    body: Body<'_>,
    head: bool,
) -> std::io::Result<(u16, u64, bool)> {
    match body {
        Body::None => {
            out.write_all(head_text(status, extra, 0).as_bytes())?;
            Ok((status, 0, true))
        }
        Body::Text(t) => {
            out.write_all(head_text(status, extra, t.len() as u64).as_bytes())?;
            if !head {
                out.write_all(t.as_bytes())?;
            }
            Ok((status, if head { 0 } else { t.len() as u64 }, true))
        }
        Body::Range(object, a, b) => send_partial(out, status, extra, object, a, b, b, head),
    }
}

/// Sends the headers for `a..b` of the object and the body up to `stop`
/// (`b` for a whole answer).
#[allow(clippy::too_many_arguments)]
fn send_partial(
    out: &mut TcpStream,
    status: u16,
    extra: &[(String, String)],
    object: &Object,
    a: u64,
    b: u64,
    stop: u64,
    head: bool,
) -> std::io::Result<(u16, u64, bool)> {
    out.write_all(head_text(status, extra, b - a).as_bytes())?;
    if head {
        return Ok((status, 0, true));
    }
    // In pieces, counting what went out: a client that leaves early
    // (having read what it wanted of a whole body) is seen as such.
    const PIECE: u64 = 64 << 10;
    let mut file = match &object.bytes {
        Bytes::Memory(_) => None,
        Bytes::File(path, _) => {
            let mut file = std::fs::File::open(path)?;
            file.seek(SeekFrom::Start(a))?;
            Some(file)
        }
    };
    let mut buf = vec![0u8; PIECE.min(stop - a) as usize];
    let mut at = a;
    while at < stop {
        let n = PIECE.min(stop - at) as usize;
        let piece: &[u8] = match (&object.bytes, file.as_mut()) {
            (_, Some(file)) => {
                file.read_exact(&mut buf[..n])?;
                &buf[..n]
            }
            (Bytes::Memory(bytes), None) => &bytes[at as usize..at as usize + n],
            // Not made: a file object always has its file opened above.
            (Bytes::File(..), None) => return Ok((status, at - a, false)),
        };
        if out.write_all(piece).is_err() {
            return Ok((status, at - a, false));
        }
        at += n as u64;
    }
    out.flush()?;
    Ok((status, stop - a, stop == b))
}

/// A bucket of an S3 server (moto's, in tests), made and filled with
/// requests signed by rusty-s3: for tests and benchmarks of `s3://`.
///
/// Test support only (the `serve` feature, which no product build
/// enables): its errors are the server's answer as text, since a test
/// only shows them.
pub struct S3Bucket {
    bucket: rusty_s3::Bucket,
    credentials: rusty_s3::Credentials,
    agent: ureq::Agent,
}

impl std::fmt::Debug for S3Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Bucket")
            .field("name", &self.bucket.name())
            .finish()
    }
}

impl S3Bucket {
    /// Creates the bucket `name` at `endpoint` (path-style, `us-east-1`)
    /// with these credentials.
    ///
    /// # Errors
    /// The endpoint or name is unusable, or the server refuses.
    pub fn create(endpoint: &str, name: &str, key: &str, secret: &str) -> Result<S3Bucket, String> {
        S3Bucket::make(endpoint, name, key, secret, None)
    }

    /// Creates the bucket `name` as [`create`](S3Bucket::create) does, with
    /// the `public-read` canned ACL: anyone may list it, without
    /// credentials (moto enforces ACLs on anonymous requests, as AWS does).
    ///
    /// # Errors
    /// The endpoint or name is unusable, or the server refuses.
    pub fn create_public(
        endpoint: &str,
        name: &str,
        key: &str,
        secret: &str,
    ) -> Result<S3Bucket, String> {
        S3Bucket::make(endpoint, name, key, secret, Some("public-read"))
    }

    fn make(
        endpoint: &str,
        name: &str,
        key: &str,
        secret: &str,
        acl: Option<&str>,
    ) -> Result<S3Bucket, String> {
        use rusty_s3::S3Action;
        let url = endpoint.parse().map_err(|e| format!("{endpoint}: {e}"))?;
        let bucket = rusty_s3::Bucket::new(
            url,
            rusty_s3::UrlStyle::Path,
            name.to_string(),
            "us-east-1".to_string(),
        )
        .map_err(|e| format!("bucket {name}: {e:?}"))?;
        let credentials = rusty_s3::Credentials::new(key, secret);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut action = bucket.create_bucket(&credentials);
        if let Some(acl) = acl {
            action.headers_mut().insert("x-amz-acl", acl);
        }
        let url = action.sign(Duration::from_secs(3600));
        let mut request = agent.put(url.as_str());
        if let Some(acl) = acl {
            request = request.header("x-amz-acl", acl);
        }
        let r = request.send_empty().map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("create bucket {name}: HTTP {}", r.status()));
        }
        Ok(S3Bucket {
            bucket,
            credentials,
            agent,
        })
    }

    /// Puts an object; with `checksum`, its sha256 too, sent as the SDKs
    /// send it (moto keeps it and gives it back).
    ///
    /// # Errors
    /// The server refuses.
    pub fn put(&self, key: &str, bytes: &[u8], checksum: bool) -> Result<(), String> {
        self.put_with(key, bytes, checksum, None)
    }

    /// Puts an object anyone may read without credentials (the
    /// `public-read` canned ACL).
    ///
    /// # Errors
    /// The server refuses.
    pub fn put_public(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        self.put_with(key, bytes, false, Some("public-read"))
    }

    fn put_with(
        &self,
        key: &str,
        bytes: &[u8],
        checksum: bool,
        acl: Option<&str>,
    ) -> Result<(), String> {
        use base64::Engine;
        use rusty_s3::S3Action;
        let mut action = self.bucket.put_object(Some(&self.credentials), key);
        let sum = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(bytes));
        if checksum {
            let headers = action.headers_mut();
            headers.insert("x-amz-checksum-sha256", sum.clone());
            headers.insert("x-amz-sdk-checksum-algorithm", "SHA256");
        }
        if let Some(acl) = acl {
            action.headers_mut().insert("x-amz-acl", acl);
        }
        let url = action.sign(Duration::from_secs(3600));
        let mut request = self.agent.put(url.as_str());
        if checksum {
            request = request
                .header("x-amz-checksum-sha256", &sum)
                .header("x-amz-sdk-checksum-algorithm", "SHA256");
        }
        if let Some(acl) = acl {
            request = request.header("x-amz-acl", acl);
        }
        let r = request.send(bytes).map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("put {key}: HTTP {}", r.status()));
        }
        Ok(())
    }
}

impl S3Bucket {
    /// The keys of the objects under `prefix`, sorted (one page of up to
    /// 1000: enough for a test).
    ///
    /// # Errors
    /// The server refuses, or the answer is not a listing.
    pub fn keys(&self, prefix: &str) -> Result<Vec<String>, String> {
        use rusty_s3::S3Action;
        let mut action = self.bucket.list_objects_v2(Some(&self.credentials));
        action.with_prefix(prefix);
        let url = action.sign(Duration::from_secs(3600));
        let text = self.get_text(url.as_str())?;
        let listed = rusty_s3::actions::ListObjectsV2::parse_response(&text)
            .map_err(|e| format!("list {prefix}: {e}"))?;
        let mut keys: Vec<String> = listed.contents.into_iter().map(|c| c.key).collect();
        keys.sort();
        Ok(keys)
    }

    /// The keys of the multipart uploads pending (started, neither
    /// completed nor aborted) under `prefix`, sorted.
    ///
    /// # Errors
    /// The server refuses, or the answer is not a listing.
    pub fn pending_uploads(&self, prefix: &str) -> Result<Vec<String>, String> {
        use rusty_s3::S3Action;
        // rusty-s3 has no ListMultipartUploads: ListObjectsV2's request
        // (a GET of the bucket) with that action's query.
        let mut action = self.bucket.list_objects_v2(Some(&self.credentials));
        let query = action.query_mut();
        query.remove("list-type");
        query.remove("encoding-type");
        query.insert("uploads", "");
        query.insert("prefix", prefix.to_string());
        let url = action.sign(Duration::from_secs(3600));
        let text = self.get_text(url.as_str())?;
        if !text.contains("ListMultipartUploadsResult") {
            return Err(format!("not a ListMultipartUploads answer: {text}"));
        }
        let mut keys = Vec::new();
        for upload in text.split("<Upload>").skip(1) {
            let key = upload
                .split_once("<Key>")
                .and_then(|(_, rest)| rest.split_once("</Key>"))
                .map(|(key, _)| key.to_string())
                .ok_or_else(|| format!("an upload without a key: {upload}"))?;
            keys.push(key);
        }
        keys.sort();
        Ok(keys)
    }

    fn get_text(&self, url: &str) -> Result<String, String> {
        let mut r = self.agent.get(url).call().map_err(|e| e.to_string())?;
        let status = r.status();
        let text = r
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("{url}: {e}"))?;
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}: {text}"));
        }
        Ok(text)
    }
}

/// What a [`Proxy`] does with a request whose request line contains a
/// given text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyFault {
    /// Read whole, never forwarded nor answered: the connection stays
    /// open until the proxy stops (a writer stuck mid-upload, to be
    /// killed).
    Hold,
    /// Read whole and answered with this status, not forwarded (a server
    /// failing a step).
    Status(u16),
}

type ProxyRules = Arc<Mutex<Vec<(String, ProxyFault)>>>;

/// An HTTP proxy on 127.0.0.1 in front of a real server (moto's S3, say),
/// one request a connection (each answer says `Connection: close`), that
/// records the request lines and applies [`ProxyFault`]s: a server that
/// fails or stalls a chosen request of a real protocol.
#[derive(Debug)]
pub struct Proxy {
    rules: ProxyRules,
    seen: Arc<Mutex<Vec<String>>>,
    /// Dropping it stops the proxy (and ends held requests).
    server: Background,
}

impl Proxy {
    /// A proxy to `upstream` (`http://HOST:PORT`).
    ///
    /// # Errors
    /// `upstream` is not `http://HOST:PORT`, or no port can be bound.
    pub fn start(upstream: &str) -> std::io::Result<Proxy> {
        let target = upstream
            .strip_prefix("http://")
            .map(|rest| rest.trim_end_matches('/').to_string())
            .filter(|hp| !hp.is_empty() && !hp.contains('/'))
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{upstream}: not http://HOST:PORT"),
                )
            })?;
        let rules: ProxyRules = Arc::default();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let server = {
            let (rules, seen) = (rules.clone(), seen.clone());
            Background::start(move |client, stop| proxy_one(client, &target, stop, &rules, &seen))?
        };
        Ok(Proxy {
            rules,
            seen,
            server,
        })
    }

    /// Its URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port())
    }

    /// From now on, requests whose request line contains `text` get
    /// `fault` (the first rule that matches counts).
    pub fn fault(&self, text: &str, fault: ProxyFault) {
        lock(&self.rules).push((text.to_string(), fault));
    }

    /// The request lines received so far (`PUT /b/k?partNumber=2&... HTTP/1.1`).
    pub fn requests(&self) -> Vec<String> {
        lock(&self.seen).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads an HTTP message's head (through the blank line) and the value of
/// its `Content-Length`; `None` at a clean end of the stream. A request's
/// body must have a length (an answer's runs to the close).
fn read_head(r: &mut impl BufRead, request: bool) -> std::io::Result<Option<(Vec<String>, u64)>> {
    let mut lines = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            return Ok(Some((lines, length)));
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
            if request && name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(std::io::Error::other("the proxy takes no chunked bodies"));
            }
        }
        lines.push(line);
    }
}

/// Writes a head with its `Connection` header made `close`.
fn write_head(w: &mut impl Write, lines: &[String]) -> std::io::Result<()> {
    let mut out = String::new();
    for line in lines {
        let connection = line
            .split_once(':')
            .is_some_and(|(n, _)| n.eq_ignore_ascii_case("connection"));
        if !connection {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    w.write_all(out.as_bytes())
}

fn proxy_one(
    client: TcpStream,
    target: &str,
    stop: &AtomicBool,
    rules: &Mutex<Vec<(String, ProxyFault)>>,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    let Some((head, length)) = read_head(&mut reader, true)? else {
        return Ok(());
    };
    let mut body = Vec::new();
    (&mut reader).take(length).read_to_end(&mut body)?;
    let line = head.first().cloned().unwrap_or_default();
    lock(seen).push(line.clone());
    let fault = lock(rules)
        .iter()
        .find(|(text, _)| line.contains(text.as_str()))
        .map(|(_, f)| f.clone());
    match fault {
        Some(ProxyFault::Hold) => {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        }
        Some(ProxyFault::Status(code)) => {
            let answer = format!(
                "HTTP/1.1 {code} Injected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            client.write_all(answer.as_bytes())
        }
        None => {
            let upstream = TcpStream::connect(target)?;
            let mut up_writer = upstream.try_clone()?;
            write_head(&mut up_writer, &head)?;
            up_writer.write_all(&body)?;
            let mut up_reader = BufReader::new(upstream);
            let Some((answer, _)) = read_head(&mut up_reader, false)? else {
                return Ok(());
            };
            write_head(&mut client, &answer)?;
            // The body runs to the close the upstream was asked for.
            std::io::copy(&mut up_reader, &mut client)?;
            client.flush()?;
            client.shutdown(Shutdown::Write)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_forwards_records_and_fails_what_it_is_told() {
        let server = Server::start().unwrap();
        server.put("/a", b"0123456789".to_vec());
        server.put("/b", b"b".to_vec());
        let proxy = Proxy::start(&server.url()).unwrap();
        proxy.fault("/b", ProxyFault::Status(503));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        for _ in 0..2 {
            let mut r = agent.get(format!("{}/a", proxy.url())).call().unwrap();
            assert_eq!(r.status().as_u16(), 200);
            assert_eq!(r.body_mut().read_to_vec().unwrap(), b"0123456789");
        }
        let r = agent.get(format!("{}/b", proxy.url())).call().unwrap();
        assert_eq!(r.status().as_u16(), 503);
        let lines = proxy.requests();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[2].starts_with("GET /b "), "{lines:?}");
        assert!(Proxy::start("https://example.com/x").is_err());
    }

    #[test]
    fn ranges_as_s3_reads_them() {
        assert!(matches!(parse_range("bytes=0-9", 100), Parsed::Span(0, 10)));
        assert!(matches!(
            parse_range("bytes=90-200", 100),
            Parsed::Span(90, 100)
        ));
        assert!(matches!(
            parse_range("bytes=-10", 100),
            Parsed::Span(90, 100)
        ));
        assert!(matches!(
            parse_range("bytes=-200", 100),
            Parsed::Span(0, 100)
        ));
        assert!(matches!(
            parse_range("bytes=50-", 100),
            Parsed::Span(50, 100)
        ));
        assert!(matches!(
            parse_range("bytes=100-", 100),
            Parsed::Unsatisfiable
        ));
        assert!(matches!(parse_range("bytes=0-1,5-6", 100), Parsed::Whole));
        assert!(matches!(parse_range("bytes=0-1", 0), Parsed::Unsatisfiable));
    }
}
