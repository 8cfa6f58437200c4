//! A stand-in for Google Cloud Storage on 127.0.0.1, started and stopped by
//! the test (dropping it stops it), serving what object_store's GCS client
//! asks of the XML API, plus Google's credential services:
//!
//! - objects: `GET` (with `Range`, `If-Match`, `If-None-Match`,
//!   `?generation=`) and `HEAD`, answering `ETag`, `Last-Modified` and
//!   `x-goog-generation`; `PUT` (with `x-goog-if-generation-match`, and
//!   `x-goog-copy-source` for a copy); `DELETE`;
//! - the listing object_store uses (`GET /BUCKET?list-type=2` with
//!   `prefix`, `delimiter`, `start-after`, `max-keys`, paged by
//!   `continuation-token`);
//! - XML multipart uploads: `POST ?uploads`, `PUT ?partNumber=&uploadId=`,
//!   `POST ?uploadId=` to complete, `DELETE ?uploadId=` to abort,
//!   `GET /BUCKET?uploads` to list the pending ones (with `prefix`,
//!   `key-marker`, `upload-id-marker`, `max-uploads`, paged);
//! - credentials: a private bucket wants `Authorization: Bearer` with a
//!   token the stand-in issued (its OAuth token endpoint `POST /token`
//!   takes a JWT signed with [`GcsServer::service_account_key`]'s key) or a
//!   self-signed JWT of that key (what object_store sends for a
//!   service-account key file), RS256-checked against the key; a public
//!   bucket takes anonymous requests too;
//! - the GCE metadata server (`GCE_METADATA_HOST=127.0.0.1:PORT`):
//!   `/computeMetadata/v1/` and the default service account's token and
//!   email, answering only with `Metadata-Flavor: Google`.
//!
//! Why a stand-in: no GCS emulator from PyPI or npm serves what
//! object_store asks. gcp-storage-emulator answers XML `GET`s without
//! `Last-Modified` and `GET /BUCKET?list-type=2` with 501;
//! fake-gcs-server (whose binary a PyPI wheel ships) reads and lists, but
//! answers the XML API's `PUT`, copy and multipart uploads with 400, and
//! checks no credentials. This one is written to Google's XML API
//! documentation for exactly those requests, and no more: no ACLs, no
//! object metadata beyond the content type, no resumable or JSON-API
//! uploads, no TLS.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use sha2::{Digest, Sha256};

use crate::http1::{self, civil, form_decode, http_date, percent_decode, Background};

/// The stand-in service account's email.
pub const CLIENT_EMAIL: &str = "stand-in@tensorfile-test.iam.gserviceaccount.com";
/// The stand-in service account's key id.
pub const KEY_ID: &str = "stand-in-key-1";
/// The service account's RSA key (PKCS #8, made for these tests only; it
/// opens nothing anywhere else).
const KEY_PEM: &str = include_str!("gcs_test_key.pem");

/// How a request was authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// No `Authorization` header.
    Anonymous,
    /// A JWT signed with the service account's key, sent as the bearer.
    SelfSignedJwt,
    /// A token the stand-in's OAuth endpoint issued for a signed JWT.
    OAuthToken,
    /// A token the stand-in's metadata server issued.
    MetadataToken,
    /// A bearer the stand-in did not issue and cannot verify.
    Invalid,
}

/// One request the stand-in answered.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `HEAD`, `PUT`, `POST`, `DELETE`.
    pub method: String,
    /// The path and query, as sent.
    pub target: String,
    /// How it was authorized.
    pub auth: Auth,
    /// The status answered.
    pub status: u16,
}

#[derive(Debug, Clone)]
struct Object {
    bytes: Arc<[u8]>,
    etag: String,
    generation: u64,
    modified: SystemTime,
    content_type: String,
}

/// A pending multipart upload: its key, and its parts by number (`ETag`,
/// bytes).
type Upload = (String, BTreeMap<u32, (String, Arc<[u8]>)>);

#[derive(Debug, Default)]
struct Bucket {
    public: bool,
    objects: BTreeMap<String, Object>,
    /// Pending multipart uploads by id: the key and the parts so far.
    uploads: BTreeMap<String, Upload>,
}

#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<String, Bucket>,
    generation: u64,
    issued: u64,
    oauth_tokens: HashSet<String>,
    metadata_tokens: HashSet<String>,
    metadata: bool,
    page_size: usize,
    seen: Vec<Seen>,
}

/// The stand-in server.
pub struct GcsServer {
    state: Arc<Mutex<State>>,
    server: Background,
}

impl std::fmt::Debug for GcsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsServer")
            .field("port", &self.server.port())
            .finish_non_exhaustive()
    }
}

impl GcsServer {
    /// Starts it with no buckets, its metadata server answering, listings
    /// paged by 1000.
    ///
    /// # Panics
    /// The port cannot be bound.
    pub fn start() -> GcsServer {
        let state = Arc::new(Mutex::new(State {
            metadata: true,
            page_size: 1000,
            ..State::default()
        }));
        let server = {
            let state = state.clone();
            Background::start(move |stream, stop| serve(stream, &state, stop))
                .expect("bind 127.0.0.1:0")
        };
        GcsServer { state, server }
    }

    /// `http://127.0.0.1:PORT`: the storage endpoint (`GOOGLE_BASE_URL`,
    /// or without the scheme `STORAGE_EMULATOR_HOST`), the token endpoint
    /// and the metadata server (`GCE_METADATA_HOST` without the scheme).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port())
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.server.port())
    }

    /// Makes a bucket (emptying one of that name): a public one takes
    /// anonymous requests, a private one only authorized ones.
    pub fn create_bucket(&self, name: &str, public: bool) {
        self.lock().buckets.insert(
            name.to_string(),
            Bucket {
                public,
                ..Bucket::default()
            },
        );
    }

    /// Puts an object (a new generation and `ETag`).
    ///
    /// # Panics
    /// No such bucket.
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) {
        let mut s = self.lock();
        let object = new_object(&mut s, bytes.into(), "application/octet-stream");
        s.buckets
            .get_mut(bucket)
            .expect("no such bucket")
            .objects
            .insert(key.to_string(), object);
    }

    /// An object's bytes (`None`: absent).
    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let s = self.lock();
        let o = s.buckets.get(bucket)?.objects.get(key)?;
        Some(o.bytes.to_vec())
    }

    /// The keys of a bucket's objects, in order.
    pub fn keys(&self, bucket: &str) -> Vec<String> {
        let s = self.lock();
        s.buckets
            .get(bucket)
            .map(|b| b.objects.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The pending multipart uploads of a bucket: (key, upload id).
    pub fn pending_uploads(&self, bucket: &str) -> Vec<(String, String)> {
        let s = self.lock();
        s.buckets
            .get(bucket)
            .map(|b| {
                b.uploads
                    .iter()
                    .map(|(id, (key, _))| (key.clone(), id.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many keys (or pending uploads) a listing page holds at most.
    pub fn set_page_size(&self, n: usize) {
        self.lock().page_size = n.max(1);
    }

    /// Whether the metadata server answers (without: 404 everywhere under
    /// `/computeMetadata/`).
    pub fn set_metadata(&self, on: bool) {
        self.lock().metadata = on;
    }

    /// The service account's key file (`GOOGLE_APPLICATION_CREDENTIALS`),
    /// its `token_uri` this stand-in's `/token`.
    pub fn service_account_key(&self) -> String {
        serde_json::json!({
            "type": "service_account",
            "project_id": "tensorfile-test",
            "private_key_id": KEY_ID,
            "private_key": KEY_PEM,
            "client_email": CLIENT_EMAIL,
            "client_id": "1",
            "token_uri": format!("{}/token", self.url()),
        })
        .to_string()
    }

    /// The requests answered so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    /// Forgets the requests answered so far.
    pub fn clear_seen(&self) {
        self.lock().seen.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn new_object(s: &mut State, bytes: Arc<[u8]>, content_type: &str) -> Object {
    s.generation += 1;
    let etag = format!("\"{}\"", &hex::encode(Sha256::digest(&bytes))[..32]);
    Object {
        bytes,
        etag,
        generation: s.generation,
        // Whole seconds, as `Last-Modified` carries them.
        modified: UNIX_EPOCH
            + Duration::from_secs(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
            ),
        content_type: content_type.to_string(),
    }
}

/// A request as read, its path and query decoded.
struct Request {
    method: String,
    target: String,
    path: String,
    query: Vec<(String, String)>,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What to send back.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// `HEAD`: the headers of the body, not the body.
    head: bool,
}

impl Answer {
    fn new(status: u16) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            head: false,
        }
    }

    fn xml(status: u16, body: String) -> Answer {
        let mut a = Answer::new(status);
        a.headers.push((
            "Content-Type".into(),
            "application/xml; charset=UTF-8".into(),
        ));
        a.body = body.into_bytes();
        a
    }

    fn error(status: u16, code: &str, message: &str) -> Answer {
        Answer::xml(
            status,
            format!(
                "<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{}</Message></Error>",
                escape(message)
            ),
        )
    }

    fn json(status: u16, v: serde_json::Value) -> Answer {
        let mut a = Answer::new(status);
        a.headers
            .push(("Content-Type".into(), "application/json".into()));
        a.body = v.to_string().into_bytes();
        a
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let Some(http1::Request {
        method,
        target,
        headers,
        body,
    }) = http1::Request::read(reader, usize::MAX)?
    else {
        return Ok(None);
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (form_decode(k), form_decode(v))
        })
        .collect();
    Ok(Some(Request {
        path: percent_decode(path),
        method,
        query,
        headers,
        body,
        target,
    }))
}

fn serve(stream: TcpStream, state: &Mutex<State>, stop: &AtomicBool) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    // Answers go out whole, in one write each: no Nagle wait between them.
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while let Some(req) = read_request(&mut reader)? {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        let auth = authorize(&s, req.header("authorization"));
        let answer = answer(&mut s, &req, &auth);
        s.seen.push(Seen {
            method: req.method.clone(),
            target: req.target.clone(),
            auth,
            status: answer.status,
        });
        drop(s);
        let mut head = format!("HTTP/1.1 {} {}\r\n", answer.status, reason(answer.status));
        for (k, v) in &answer.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !answer.headers.iter().any(|(k, _)| k == "Content-Length") {
            head.push_str(&format!("Content-Length: {}\r\n", answer.body.len()));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if !answer.head && req.method != "HEAD" {
            out.extend_from_slice(&answer.body);
        }
        writer.write_all(&out)?;
        writer.flush()?;
    }
    Ok(())
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        412 => "Precondition Failed",
        416 => "Requested Range Not Satisfiable",
        _ => "Other",
    }
}

/// Who the bearer is.
fn authorize(s: &State, header: Option<&str>) -> Auth {
    // object_store's anonymous writes send `Bearer ` with no token.
    let Some(h) = header.filter(|h| !h.trim().eq_ignore_ascii_case("bearer")) else {
        return Auth::Anonymous;
    };
    let Some(token) = h
        .strip_prefix("Bearer ")
        .or_else(|| h.strip_prefix("bearer "))
    else {
        return Auth::Invalid;
    };
    let token = token.trim();
    if s.metadata_tokens.contains(token) {
        Auth::MetadataToken
    } else if s.oauth_tokens.contains(token) {
        Auth::OAuthToken
    } else if jwt_claims(token).is_some() {
        Auth::SelfSignedJwt
    } else {
        Auth::Invalid
    }
}

/// The claims of a JWT signed (RS256) with the service account's key, by
/// it (`iss`) and not expired; `None` otherwise.
fn jwt_claims(jwt: &str) -> Option<serde_json::Value> {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut parts = jwt.split('.');
    let (header, claims, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let h: serde_json::Value = serde_json::from_slice(&b64.decode(header).ok()?).ok()?;
    if h["alg"] != "RS256" || h.get("kid").is_some_and(|k| k != KEY_ID) {
        return None;
    }
    let key = public_key();
    ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, &key)
        .verify(
            format!("{header}.{claims}").as_bytes(),
            &b64.decode(signature).ok()?,
        )
        .ok()?;
    let c: serde_json::Value = serde_json::from_slice(&b64.decode(claims).ok()?).ok()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    (c["iss"] == CLIENT_EMAIL && c["exp"].as_u64()? > now).then_some(c)
}

/// The service account's public key (DER, PKCS #1), from its private key.
fn public_key() -> Vec<u8> {
    let body: String = KEY_PEM
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("the test key is base64");
    let pair = ring::rsa::KeyPair::from_pkcs8(&der).expect("the test key is an RSA PKCS #8 key");
    pair.public().as_ref().to_vec()
}

fn answer(s: &mut State, req: &Request, auth: &Auth) -> Answer {
    if req.path.starts_with("/computeMetadata/") {
        return metadata(s, req);
    }
    if req.path == "/token" && req.method == "POST" {
        return token(s, req);
    }
    let rest = req.path.trim_start_matches('/');
    let (bucket, key) = match rest.split_once('/') {
        Some((b, k)) => (b.to_string(), Some(k.to_string())),
        None => (rest.to_string(), None),
    };
    let Some(b) = s.buckets.get(&bucket) else {
        return Answer::error(404, "NoSuchBucket", "The specified bucket does not exist.");
    };
    match auth {
        Auth::Invalid => {
            return Answer::error(401, "AuthenticationRequired", "Invalid Credentials.")
        }
        Auth::Anonymous if !b.public => {
            return Answer::error(
                401,
                "AuthenticationRequired",
                "Anonymous caller does not have storage.objects access.",
            )
        }
        _ => {}
    }
    match (req.method.as_str(), key) {
        ("GET", None) if req.query("uploads").is_some() => list_uploads(s, &bucket, req),
        ("GET", None) if req.query("list-type") == Some("2") => list(s, &bucket, req),
        ("GET", None) => Answer::error(400, "InvalidArgument", "only list-type=2 listings"),
        ("GET" | "HEAD", Some(key)) => get(s, &bucket, &key, req),
        ("PUT", Some(key)) if req.query("uploadId").is_some() => put_part(s, &bucket, &key, req),
        ("PUT", Some(key)) if req.header("x-goog-copy-source").is_some() => {
            copy(s, &bucket, &key, req)
        }
        ("PUT", Some(key)) => put(s, &bucket, &key, req),
        ("POST", Some(key)) if req.query("uploads").is_some() => initiate(s, &bucket, &key),
        ("POST", Some(key)) if req.query("uploadId").is_some() => complete(s, &bucket, &key, req),
        ("DELETE", Some(key)) if req.query("uploadId").is_some() => abort(s, &bucket, &key, req),
        ("DELETE", Some(key)) => {
            let b = s.buckets.get_mut(&bucket).expect("bucket");
            match b.objects.remove(&key) {
                Some(_) => Answer::new(204),
                None => no_such_key(),
            }
        }
        _ => Answer::error(400, "InvalidArgument", "not a request this stand-in serves"),
    }
}

fn no_such_key() -> Answer {
    Answer::error(404, "NoSuchKey", "The specified key does not exist.")
}

fn metadata(s: &mut State, req: &Request) -> Answer {
    if !s.metadata {
        return Answer::new(404);
    }
    if !req
        .header("metadata-flavor")
        .is_some_and(|v| v.eq_ignore_ascii_case("google"))
    {
        return Answer::new(403).header("Metadata-Flavor", "Google");
    }
    let a = match req.path.as_str() {
        "/computeMetadata/v1/" | "/computeMetadata/v1" => {
            let mut a = Answer::new(200);
            a.body = b"instance/\nproject/\n".to_vec();
            a
        }
        "/computeMetadata/v1/instance/service-accounts/default/token" => {
            s.issued += 1;
            let token = format!("gce-token-{}", s.issued);
            s.metadata_tokens.insert(token.clone());
            Answer::json(
                200,
                serde_json::json!({"access_token": token, "expires_in": 3600, "token_type": "Bearer"}),
            )
        }
        "/computeMetadata/v1/instance/service-accounts/default/email" => {
            let mut a = Answer::new(200);
            a.body = CLIENT_EMAIL.as_bytes().to_vec();
            a
        }
        _ => Answer::new(404),
    };
    a.header("Metadata-Flavor", "Google")
}

/// Google's OAuth token endpoint for a service account: a JWT (RS256, by
/// the account, for this `aud`) for an access token.
fn token(s: &mut State, req: &Request) -> Answer {
    let form: Vec<(String, String)> = String::from_utf8_lossy(&req.body)
        .split('&')
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (form_decode(k), form_decode(v))
        })
        .collect();
    let field = |n: &str| form.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    if field("grant_type") != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
        return Answer::json(400, serde_json::json!({"error": "unsupported_grant_type"}));
    }
    match field("assertion").and_then(jwt_claims) {
        Some(_) => {
            s.issued += 1;
            let token = format!("oauth-token-{}", s.issued);
            s.oauth_tokens.insert(token.clone());
            Answer::json(
                200,
                serde_json::json!({"access_token": token, "expires_in": 3600, "token_type": "Bearer"}),
            )
        }
        None => Answer::json(
            400,
            serde_json::json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}),
        ),
    }
}

fn object_headers(a: Answer, o: &Object) -> Answer {
    a.header("ETag", o.etag.clone())
        .header("Last-Modified", http_date(o.modified))
        .header("x-goog-generation", o.generation.to_string())
        .header("x-goog-stored-content-length", o.bytes.len().to_string())
        .header("Content-Type", o.content_type.clone())
        .header("Accept-Ranges", "bytes")
}

fn get(s: &State, bucket: &str, key: &str, req: &Request) -> Answer {
    let Some(o) = s.buckets[bucket].objects.get(key) else {
        return no_such_key();
    };
    if let Some(g) = req.query("generation") {
        if g != o.generation.to_string() {
            return no_such_key();
        }
    }
    if let Some(m) = req.header("if-match") {
        if m != o.etag && m != "*" {
            return Answer::error(412, "PreconditionFailed", "If-Match");
        }
    }
    if let Some(m) = req.header("if-none-match") {
        if m == o.etag || m == "*" {
            return object_headers(Answer::new(304), o);
        }
    }
    let len = o.bytes.len() as u64;
    let range = req.header("range").map(|r| parse_range(r, len));
    let a = match range {
        None => {
            let mut a = Answer::new(200);
            a.body = o.bytes.to_vec();
            a
        }
        Some(None) => {
            return Answer::error(
                416,
                "InvalidRange",
                "The requested range cannot be satisfied.",
            )
            .header("Content-Range", format!("bytes */{len}"))
        }
        Some(Some((start, end))) => {
            let mut a = Answer::new(206);
            a.body = o.bytes[start as usize..=end as usize].to_vec();
            a.header("Content-Range", format!("bytes {start}-{end}/{len}"))
        }
    };
    object_headers(a, o)
}

/// `bytes=A-B`, `bytes=A-`, `bytes=-N` against a length: the inclusive
/// range, or `None` when it cannot be satisfied.
fn parse_range(value: &str, len: u64) -> Option<(u64, u64)> {
    let spec = value.trim().strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let (start, end) = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        (len.saturating_sub(n), len.checked_sub(1)?)
    } else {
        let start: u64 = a.parse().ok()?;
        let end = if b.is_empty() {
            len.checked_sub(1)?
        } else {
            b.parse::<u64>().ok()?.min(len.checked_sub(1)?)
        };
        (start, end)
    };
    (start < len && start <= end).then_some((start, end))
}

/// `x-goog-if-generation-match`: 0 for "must not exist", else the
/// generation it must have.
fn precondition(b: &Bucket, key: &str, req: &Request) -> Option<Answer> {
    let want = req.header("x-goog-if-generation-match")?;
    let have = b.objects.get(key).map_or(0, |o| o.generation);
    (want != have.to_string()).then(|| {
        Answer::error(
            412,
            "PreconditionFailed",
            "At least one of the pre-conditions you specified did not hold.",
        )
    })
}

fn stored(a: Answer, o: &Object) -> Answer {
    a.header("ETag", o.etag.clone())
        .header("x-goog-generation", o.generation.to_string())
}

fn put(s: &mut State, bucket: &str, key: &str, req: &Request) -> Answer {
    if let Some(refused) = precondition(&s.buckets[bucket], key, req) {
        return refused;
    }
    let content_type = req
        .header("content-type")
        .unwrap_or("application/octet-stream")
        .to_string();
    let o = new_object(s, req.body.clone().into(), &content_type);
    let a = stored(Answer::new(200), &o);
    s.buckets
        .get_mut(bucket)
        .expect("bucket")
        .objects
        .insert(key.to_string(), o);
    a
}

fn copy(s: &mut State, bucket: &str, key: &str, req: &Request) -> Answer {
    let source = percent_decode(req.header("x-goog-copy-source").unwrap_or_default());
    let source = source.trim_start_matches('/');
    let Some((from_bucket, from_key)) = source.split_once('/') else {
        return Answer::error(400, "InvalidArgument", "x-goog-copy-source: BUCKET/KEY");
    };
    let Some(from) = s
        .buckets
        .get(from_bucket)
        .and_then(|b| b.objects.get(from_key))
        .cloned()
    else {
        return no_such_key();
    };
    if let Some(refused) = precondition(&s.buckets[bucket], key, req) {
        return refused;
    }
    let o = new_object(s, from.bytes.clone(), &from.content_type);
    let a = stored(
        Answer::xml(
            200,
            format!(
                "<?xml version='1.0' encoding='UTF-8'?><CopyObjectResult><LastModified>{}</LastModified><ETag>{}</ETag></CopyObjectResult>",
                iso_date(o.modified),
                escape(&o.etag)
            ),
        ),
        &o,
    );
    s.buckets
        .get_mut(bucket)
        .expect("bucket")
        .objects
        .insert(key.to_string(), o);
    a
}

fn initiate(s: &mut State, bucket: &str, key: &str) -> Answer {
    s.issued += 1;
    let id = format!("upload-{}", s.issued);
    s.buckets
        .get_mut(bucket)
        .expect("bucket")
        .uploads
        .insert(id.clone(), (key.to_string(), BTreeMap::new()));
    Answer::xml(
        200,
        format!(
            "<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key><UploadId>{id}</UploadId></InitiateMultipartUploadResult>",
            escape(bucket),
            escape(key)
        ),
    )
}

/// The upload a request names, if it is for this key.
fn upload<'a>(b: &'a mut Bucket, key: &str, req: &Request) -> Option<&'a mut Upload> {
    let u = b.uploads.get_mut(req.query("uploadId")?)?;
    (u.0 == key).then_some(u)
}

fn no_such_upload() -> Answer {
    Answer::error(404, "NoSuchUpload", "The requested upload was not found.")
}

fn put_part(s: &mut State, bucket: &str, key: &str, req: &Request) -> Answer {
    let Some(n) = req.query("partNumber").and_then(|n| n.parse::<u32>().ok()) else {
        return Answer::error(400, "InvalidArgument", "partNumber");
    };
    if !(1..=10_000).contains(&n) {
        return Answer::error(400, "InvalidArgument", "partNumber is 1 to 10000");
    }
    let b = s.buckets.get_mut(bucket).expect("bucket");
    let Some(u) = upload(b, key, req) else {
        return no_such_upload();
    };
    let etag = format!("\"{}\"", &hex::encode(Sha256::digest(&req.body))[..32]);
    u.1.insert(n, (etag.clone(), req.body.clone().into()));
    Answer::new(200).header("ETag", etag)
}

fn complete(s: &mut State, bucket: &str, key: &str, req: &Request) -> Answer {
    let body = String::from_utf8_lossy(&req.body).into_owned();
    let b = s.buckets.get_mut(bucket).expect("bucket");
    let Some(u) = upload(b, key, req) else {
        return no_such_upload();
    };
    // <Part><PartNumber>N</PartNumber><ETag>E</ETag></Part>, in order.
    let mut bytes = Vec::new();
    let mut last = 0;
    let mut count = 0;
    for part in body.split("<Part>").skip(1) {
        let field = |name: &str| {
            let open = format!("<{name}>");
            let close = format!("</{name}>");
            let from = part.find(&open)? + open.len();
            let to = part[from..].find(&close)? + from;
            Some(unescape(&part[from..to]))
        };
        let (Some(n), Some(etag)) = (field("PartNumber"), field("ETag")) else {
            return Answer::error(400, "MalformedXML", "a part without PartNumber or ETag");
        };
        let Ok(n) = n.parse::<u32>() else {
            return Answer::error(400, "MalformedXML", "PartNumber");
        };
        if n <= last {
            return Answer::error(400, "InvalidPartOrder", "parts must be in ascending order");
        }
        last = n;
        match u.1.get(&n) {
            Some((e, data)) if *e == etag || e.trim_matches('"') == etag.trim_matches('"') => {
                bytes.extend_from_slice(data)
            }
            _ => return Answer::error(400, "InvalidPart", "a part is missing or its ETag differs"),
        }
        count += 1;
    }
    if count == 0 {
        return Answer::error(400, "MalformedXML", "no parts");
    }
    let id = req.query("uploadId").unwrap_or_default().to_string();
    b.uploads.remove(&id);
    let o = new_object(s, bytes.into(), "application/octet-stream");
    let a = stored(
        Answer::xml(
            200,
            format!(
                "<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult><Location>/{b}/{k}</Location><Bucket>{b}</Bucket><Key>{k}</Key><ETag>{}</ETag></CompleteMultipartUploadResult>",
                escape(&o.etag),
                b = escape(bucket),
                k = escape(key)
            ),
        ),
        &o,
    );
    s.buckets
        .get_mut(bucket)
        .expect("bucket")
        .objects
        .insert(key.to_string(), o);
    a
}

fn abort(s: &mut State, bucket: &str, key: &str, req: &Request) -> Answer {
    let b = s.buckets.get_mut(bucket).expect("bucket");
    if upload(b, key, req).is_none() {
        return no_such_upload();
    }
    b.uploads.remove(req.query("uploadId").unwrap_or_default());
    Answer::new(204)
}

/// `GET /BUCKET?uploads`: the pending uploads whose key begins with
/// `prefix`, in (key, id) order, after `key-marker` (and, for that key,
/// `upload-id-marker`), a page of at most `max-uploads` (and the page
/// size), with `IsTruncated` and the next markers.
fn list_uploads(s: &State, bucket: &str, req: &Request) -> Answer {
    let prefix = req.query("prefix").unwrap_or_default();
    let key_marker = req.query("key-marker").unwrap_or_default();
    let id_marker = req.query("upload-id-marker").unwrap_or_default();
    let max = req
        .query("max-uploads")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(1000)
        .min(s.page_size);
    let mut all: Vec<(&str, &str)> = s.buckets[bucket]
        .uploads
        .iter()
        .map(|(id, (key, _))| (key.as_str(), id.as_str()))
        .filter(|(key, _)| key.starts_with(prefix))
        .filter(|&(key, id)| {
            key_marker.is_empty()
                || key > key_marker
                || (key == key_marker && !id_marker.is_empty() && id > id_marker)
        })
        .collect();
    all.sort_unstable();
    let truncated = all.len() > max;
    all.truncate(max);
    let mut xml = format!(
        "<?xml version='1.0' encoding='UTF-8'?><ListMultipartUploadsResult><Bucket>{}</Bucket><Prefix>{}</Prefix><KeyMarker>{}</KeyMarker><UploadIdMarker>{}</UploadIdMarker><MaxUploads>{max}</MaxUploads><IsTruncated>{truncated}</IsTruncated>",
        escape(bucket),
        escape(prefix),
        escape(key_marker),
        escape(id_marker)
    );
    if let (true, Some((key, id))) = (truncated, all.last()) {
        xml.push_str(&format!(
            "<NextKeyMarker>{}</NextKeyMarker><NextUploadIdMarker>{}</NextUploadIdMarker>",
            escape(key),
            escape(id)
        ));
    }
    for (key, id) in &all {
        xml.push_str(&format!(
            "<Upload><Key>{}</Key><UploadId>{}</UploadId><StorageClass>STANDARD</StorageClass></Upload>",
            escape(key),
            escape(id)
        ));
    }
    xml.push_str("</ListMultipartUploadsResult>");
    Answer::xml(200, xml)
}

fn list(s: &State, bucket: &str, req: &Request) -> Answer {
    let prefix = req.query("prefix").unwrap_or_default();
    let delimiter = req.query("delimiter").filter(|d| !d.is_empty());
    let after = req
        .query("continuation-token")
        .or_else(|| req.query("start-after"))
        .unwrap_or_default();
    let max = req
        .query("max-keys")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(usize::MAX)
        .min(s.page_size);
    // Objects and common prefixes, in key order; a prefix counts once, at
    // its first key.
    let mut contents = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut next = None;
    for (key, o) in s.buckets[bucket]
        .objects
        .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
    {
        if !key.starts_with(prefix) {
            continue;
        }
        let grouped = delimiter.and_then(|d| {
            key[prefix.len()..]
                .find(d)
                .map(|i| key[..prefix.len() + i + d.len()].to_string())
        });
        if let Some(p) = &grouped {
            if prefixes.last() == Some(p) {
                continue;
            }
            // A prefix before `after` was listed on an earlier page.
            if p.as_str() <= after {
                continue;
            }
        }
        if contents.len() + prefixes.len() == max {
            next = Some(last_listed(&contents, &prefixes));
            break;
        }
        match grouped {
            Some(p) => prefixes.push(p),
            None => contents.push((key.clone(), o)),
        }
    }
    let mut xml = format!(
        "<?xml version='1.0' encoding='UTF-8'?><ListBucketResult><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><IsTruncated>{}</IsTruncated>",
        escape(bucket),
        escape(prefix),
        contents.len() + prefixes.len(),
        next.is_some()
    );
    for (key, o) in &contents {
        xml.push_str(&format!(
            "<Contents><Key>{}</Key><Generation>{}</Generation><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size></Contents>",
            escape(key),
            o.generation,
            iso_date(o.modified),
            escape(&o.etag),
            o.bytes.len()
        ));
    }
    for p in &prefixes {
        xml.push_str(&format!(
            "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
            escape(p)
        ));
    }
    if let Some(n) = next {
        xml.push_str(&format!(
            "<NextContinuationToken>{}</NextContinuationToken>",
            escape(&n)
        ));
    }
    xml.push_str("</ListBucketResult>");
    Answer::xml(200, xml)
}

/// The greatest key or prefix a page listed: where the next page starts
/// (a prefix's every key sorts at or after it, and is skipped by the
/// `p <= after` check or the range).
fn last_listed(contents: &[(String, &Object)], prefixes: &[String]) -> String {
    let a = contents.last().map(|(k, _)| k.as_str()).unwrap_or("");
    let b = prefixes.last().map(String::as_str).unwrap_or("");
    // Every key under the prefix `b` sorts after `b`: step past them all.
    if b > a {
        format!("{b}\u{10FFFF}")
    } else {
        a.to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// ISO 8601 with milliseconds, as listings carry it.
fn iso_date(t: SystemTime) -> String {
    let (y, m, d, _, rem) = civil(t);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_gcs_takes_them() {
        assert_eq!(parse_range("bytes=2-5", 10), Some((2, 5)));
        assert_eq!(parse_range("bytes=2-", 10), Some((2, 9)));
        assert_eq!(parse_range("bytes=-3", 10), Some((7, 9)));
        assert_eq!(parse_range("bytes=8-20", 10), Some((8, 9)));
        assert_eq!(parse_range("bytes=10-12", 10), None);
        assert_eq!(parse_range("bytes=0-0", 0), None);
    }

    #[test]
    fn the_key_verifies_what_it_signs_and_nothing_else() {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let body: String = KEY_PEM
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        let pair = ring::rsa::KeyPair::from_pkcs8(&der).unwrap();
        let header = b64.encode(br#"{"alg":"RS256","typ":"JWT","kid":"stand-in-key-1"}"#);
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 60;
        let claims = b64.encode(format!(r#"{{"iss":"{CLIENT_EMAIL}","exp":{exp}}}"#));
        let message = format!("{header}.{claims}");
        let mut sig = vec![0; pair.public().modulus_len()];
        pair.sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            message.as_bytes(),
            &mut sig,
        )
        .unwrap();
        let jwt = format!("{message}.{}", b64.encode(&sig));
        assert!(jwt_claims(&jwt).is_some());
        sig[0] ^= 1;
        assert!(jwt_claims(&format!("{message}.{}", b64.encode(&sig))).is_none());
    }
}
