//! Stand-ins for the AWS credential services that moto does not have, on
//! 127.0.0.1 at a port the OS chooses, started and stopped by the test
//! (dropping the server stops it): the instance metadata service (IMDSv2:
//! a session token by `PUT`, then the role and its credentials with it),
//! the container credentials endpoint (an `Authorization` token), and STS
//! (`AssumeRole`, `AssumeRoleWithWebIdentity`, as XML). Every issue of
//! credentials has a new access key id (`PREFIX` and a counter: `IMDS1`,
//! `IMDS2`, ...) and expires after [`CredentialServer::set_lifetime`], so
//! that a test sees which source was used and when it was fetched again.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::http1::{civil, form_decode, Background, Request};

/// The IMDSv2 session token the stand-in hands out.
pub const IMDS_TOKEN: &str = "stand-in-imds-token";
/// The role the stand-in's metadata service names.
pub const IMDS_ROLE: &str = "stand-in-role";
/// The secret of every key the stand-in issues (tests check it is never
/// printed).
pub const SECRET: &str = "stand-in-secret-NEVER-PRINTED";

/// One request the stand-in answered.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET`, `PUT`, `POST`.
    pub method: String,
    /// The path and query.
    pub target: String,
    /// Headers, names lowercased.
    pub headers: BTreeMap<String, String>,
    /// The body (STS's form).
    pub body: String,
}

#[derive(Default)]
struct State {
    issued: u64,
    lifetime: Option<Duration>,
    container_token: Option<String>,
    imds_role: bool,
    seen: Vec<Seen>,
}

/// The stand-in server.
pub struct CredentialServer {
    state: Arc<Mutex<State>>,
    server: Background,
}

impl CredentialServer {
    /// Starts it: the metadata service with a role, the container endpoint
    /// wanting `container-auth`, STS; credentials valid for an hour.
    ///
    /// # Panics
    /// The port cannot be bound.
    pub fn start() -> CredentialServer {
        let state = Arc::new(Mutex::new(State {
            lifetime: Some(Duration::from_secs(3600)),
            container_token: Some("container-auth".into()),
            imds_role: true,
            ..State::default()
        }));
        let server = {
            let state = state.clone();
            Background::start(move |stream, _| serve(stream, &state)).expect("bind 127.0.0.1:0")
        };
        CredentialServer { state, server }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port())
    }

    /// How long issued credentials are valid (`None`: no expiry given).
    pub fn set_lifetime(&self, lifetime: Option<Duration>) {
        self.lock().lifetime = lifetime;
    }

    /// The token the container endpoint wants (`None`: any).
    pub fn set_container_token(&self, token: Option<&str>) {
        self.lock().container_token = token.map(str::to_string);
    }

    /// Whether the metadata service has a role (without: 404).
    pub fn set_imds_role(&self, on: bool) {
        self.lock().imds_role = on;
    }

    /// The requests answered so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An ISO 8601 UTC time, as STS writes it.
pub fn iso8601(t: SystemTime) -> String {
    let (y, m, d, _, rem) = civil(t);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while let Some(Request {
        method,
        target,
        headers,
        body,
    }) = Request::read(&mut reader, 1 << 20)?
    {
        let seen = Seen {
            method,
            target,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        };
        let (status, content_type, text) = answer(&seen, state);
        state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seen
            .push(seen);
        let reason = match status {
            200 => "OK",
            401 => "Unauthorized",
            403 => "Forbidden",
            _ => "Not Found",
        };
        write!(
            writer,
            "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        )?;
        writer.flush()?;
    }
    Ok(())
}

/// Issues a key: `PREFIX` and the count so far, and its expiry.
fn issue(state: &Mutex<State>, prefix: &str) -> (String, Option<String>) {
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    s.issued += 1;
    let expiry = s.lifetime.map(|l| iso8601(SystemTime::now() + l));
    (format!("{prefix}{}", s.issued), expiry)
}

fn json_creds(state: &Mutex<State>, prefix: &str, with_code: bool) -> String {
    let (key, expiry) = issue(state, prefix);
    let mut v = serde_json::json!({
        "AccessKeyId": key,
        "SecretAccessKey": SECRET,
        "Token": format!("token-of-{key}"),
    });
    if let Some(e) = expiry {
        v["Expiration"] = e.into();
    }
    if with_code {
        v["Code"] = "Success".into();
        v["Type"] = "AWS-HMAC".into();
    }
    v.to_string()
}

fn answer(req: &Seen, state: &Mutex<State>) -> (u16, &'static str, String) {
    let header = |n: &str| req.headers.get(n).map(String::as_str);
    let path = req.target.as_str();
    let creds_path = "/latest/meta-data/iam/security-credentials/";
    match (req.method.as_str(), path) {
        ("PUT", "/latest/api/token") => {
            if header("x-aws-ec2-metadata-token-ttl-seconds").is_none() {
                return (400, "text/plain", "no ttl".into());
            }
            (200, "text/plain", IMDS_TOKEN.into())
        }
        ("GET", p) if p.starts_with(creds_path) => {
            if header("x-aws-ec2-metadata-token") != Some(IMDS_TOKEN) {
                return (401, "text/plain", String::new());
            }
            if !state.lock().unwrap_or_else(|e| e.into_inner()).imds_role {
                return (404, "text/plain", String::new());
            }
            match &p[creds_path.len()..] {
                "" => (200, "text/plain", IMDS_ROLE.into()),
                r if r == IMDS_ROLE => (200, "application/json", json_creds(state, "IMDS", true)),
                _ => (404, "text/plain", String::new()),
            }
        }
        ("GET", p) if p.starts_with("/container/") => {
            let want = state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .container_token
                .clone();
            if want.is_some() && header("authorization") != want.as_deref() {
                return (401, "application/json", "{}".into());
            }
            (
                200,
                "application/json",
                json_creds(state, "CONTAINER", false),
            )
        }
        ("POST", "/") => {
            let form: BTreeMap<String, String> = req
                .body
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), form_decode(v)))
                .collect();
            let (prefix, result) = match form.get("Action").map(String::as_str) {
                Some("AssumeRoleWithWebIdentity") => {
                    if form.get("WebIdentityToken").is_none_or(|t| t.is_empty()) {
                        return (400, "text/xml", sts_error("InvalidIdentityToken"));
                    }
                    ("WEBID", "AssumeRoleWithWebIdentityResult")
                }
                Some("AssumeRole") => {
                    if header("authorization").is_none() {
                        return (403, "text/xml", sts_error("MissingAuthenticationToken"));
                    }
                    ("ROLE", "AssumeRoleResult")
                }
                _ => return (400, "text/xml", sts_error("InvalidAction")),
            };
            let (key, expiry) = issue(state, prefix);
            let expiry =
                expiry.unwrap_or_else(|| iso8601(SystemTime::now() + Duration::from_secs(3600)));
            let action = &result[..result.len() - "Result".len()];
            (
                200,
                "text/xml",
                format!(
                    "<{action}Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><{result}><Credentials><AccessKeyId>{key}</AccessKeyId><SecretAccessKey>{SECRET}</SecretAccessKey><SessionToken>token-of-{key}</SessionToken><Expiration>{expiry}</Expiration></Credentials></{result}></{action}Response>"
                ),
            )
        }
        _ => (404, "text/plain", String::new()),
    }
}

fn sts_error(code: &str) -> String {
    format!("<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>stand-in</Message></Error></ErrorResponse>")
}
