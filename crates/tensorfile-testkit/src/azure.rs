//! Azurite (Azure Blob Storage's emulator, from npm) for the tests and
//! benchmarks: its well-known account and key, and making a container,
//! which object stores cannot do (a SharedKey-signed
//! `PUT ?restype=container`; Azurite checks the signature).

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use base64::Engine;

use crate::http1::{form_decode, http_date, Background, Request};

/// Azurite's well-known account (public: its documentation's).
pub const ACCOUNT: &str = "devstoreaccount1";
/// Azurite's well-known account key (public: its documentation's).
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// HMAC-SHA256, as SharedKey and SAS signatures use it (ring's).
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::sign(&key, data).as_ref().to_vec()
}

/// Makes a container at Azurite's blob endpoint (`http://127.0.0.1:PORT`,
/// or `https://` with the test certificate, the account in the path), signed with the account key; one that is
/// there already is fine.
///
/// # Errors
/// The request fails, or Azurite answers other than 201 or 409.
pub fn create_container(endpoint: &str, name: &str) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let date = http_date(std::time::SystemTime::now());
    let version = "2021-08-06";
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
    );
    let key = b64.decode(KEY).map_err(|e| e.to_string())?;
    let sig = b64.encode(hmac_sha256(&key, to_sign.as_bytes()));
    // An HTTPS Azurite serves the test certificate.
    let agent: ureq::Agent = if endpoint.starts_with("https://") {
        crate::tls::agent()
    } else {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    };
    let answer = agent
        .put(format!(
            "{}/{ACCOUNT}/{name}?restype=container",
            endpoint.trim_end_matches('/')
        ))
        .header("x-ms-date", &date)
        .header("x-ms-version", version)
        .header("authorization", format!("SharedKey {ACCOUNT}:{sig}"))
        .send_empty()
        .map_err(|e| e.to_string())?;
    match answer.status().as_u16() {
        201 | 409 => Ok(()),
        s => Err(format!("create container {name}: HTTP {s}")),
    }
}

/// The tenant the AAD stand-in ([`TokenServer`]) knows.
pub const TENANT: &str = "00000000-0000-0000-0000-00000000aaaa";
/// The application (client) id the AAD stand-in knows.
pub const CLIENT_ID: &str = "00000000-0000-0000-0000-00000000c1d0";
/// The client secret the AAD stand-in takes (tests check it is never
/// printed).
pub const CLIENT_SECRET: &str = "stand-in-client-secret-NEVER-PRINTED";
/// The federated token (workload identity: the file
/// `AZURE_FEDERATED_TOKEN_FILE` names) the AAD stand-in takes.
pub const FEDERATED_TOKEN: &str = "stand-in-federated-token";

/// Which credential flow a token was issued to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// `POST /{tenant}/oauth2/v2.0/token` with `client_secret`.
    ClientSecret,
    /// The same with `client_assertion` (workload identity).
    Workload,
    /// `GET /metadata/identity/oauth2/token` (managed identity, IMDS).
    ManagedIdentity,
    /// A request the stand-in refused (a wrong secret, assertion, scope,
    /// tenant or client, a missing `Metadata: true`).
    Refused,
}

/// A stand-in for Azure AD (Microsoft Entra ID) and the instance metadata
/// service's managed identity, as object_store's Azure credentials ask
/// them, on 127.0.0.1 (plain HTTP: put a [`crate::tls::TlsProxy`] in
/// front for `AZURE_AUTHORITY_HOST`, which object_store reaches through
/// its HTTPS-only client; the managed identity endpoint may stay plain):
///
/// - `POST /{TENANT}/oauth2/v2.0/token`, a form with `client_id`
///   ([`CLIENT_ID`]), `scope=https://storage.azure.com/.default`,
///   `grant_type=client_credentials`, and either `client_secret`
///   ([`CLIENT_SECRET`]) or `client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer`
///   with `client_assertion` ([`FEDERATED_TOKEN`]): `{access_token,
///   expires_in, token_type}`, else 401 `invalid_client`;
/// - `GET /metadata/identity/oauth2/token?api-version=...&resource=https://storage.azure.com`
///   with `Metadata: true` (`AZURE_MSI_ENDPOINT=http://127.0.0.1:PORT/metadata/identity/oauth2/token`):
///   `{access_token, expires_on}` (a string of Unix seconds), else 400.
///
/// Tokens are JWTs that Azurite's `--oauth basic` takes: issuer
/// `https://sts.windows.net/{TENANT}/`, audience
/// `https://storage.azure.com`, valid from a minute ago for an hour, and
/// unsigned (`alg: none`: Azurite checks the claims, not a signature).
/// Dropping it stops it.
pub struct TokenServer {
    flows: Arc<Mutex<Vec<Flow>>>,
    server: Background,
}

impl std::fmt::Debug for TokenServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenServer({})", self.url())
    }
}

impl TokenServer {
    /// Starts it.
    ///
    /// # Panics
    /// The port cannot be bound.
    pub fn start() -> TokenServer {
        let flows = Arc::new(Mutex::new(Vec::new()));
        let server = {
            let flows = flows.clone();
            Background::start(move |stream, _| serve_tokens(stream, &flows))
                .expect("bind 127.0.0.1:0")
        };
        TokenServer { flows, server }
    }

    /// `http://127.0.0.1:PORT` (the authority host, behind a TLS proxy).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port())
    }

    /// The managed identity endpoint (`AZURE_MSI_ENDPOINT`).
    pub fn msi_endpoint(&self) -> String {
        format!("{}/metadata/identity/oauth2/token", self.url())
    }

    /// The flows of the token requests answered so far, in order.
    pub fn flows(&self) -> Vec<Flow> {
        self.flows.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// An unsigned JWT that Azurite's `--oauth basic` accepts, naming `who`.
pub fn storage_token(who: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header = serde_json::json!({"typ": "JWT", "alg": "none"});
    let claims = serde_json::json!({
        "aud": "https://storage.azure.com",
        "iss": format!("https://sts.windows.net/{TENANT}/"),
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + 3600,
        "tid": TENANT,
        "appid": who,
        "oid": who,
    });
    format!(
        "{}.{}.",
        b64.encode(header.to_string()),
        b64.encode(claims.to_string())
    )
}

fn form_value(body: &str, name: &str) -> Option<String> {
    body.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| form_decode(v))
    })
}

/// The answer to one token request: status, JSON body, and the flow.
fn token_answer(
    method: &str,
    target: &str,
    headers: &BTreeMap<String, String>,
    body: &str,
) -> (u16, serde_json::Value, Flow) {
    let refused = |status: u16, error: &str, description: &str| {
        (
            status,
            serde_json::json!({"error": error, "error_description": description}),
            Flow::Refused,
        )
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if method == "POST" && path == format!("/{TENANT}/oauth2/v2.0/token") {
        if form_value(body, "client_id").as_deref() != Some(CLIENT_ID) {
            return refused(
                400,
                "unauthorized_client",
                "AADSTS700016: application not found",
            );
        }
        if form_value(body, "scope").as_deref() != Some("https://storage.azure.com/.default")
            || form_value(body, "grant_type").as_deref() != Some("client_credentials")
        {
            return refused(
                400,
                "invalid_scope",
                "AADSTS70011: the scope or grant is not valid",
            );
        }
        let flow = match (
            form_value(body, "client_secret"),
            form_value(body, "client_assertion_type").as_deref(),
            form_value(body, "client_assertion"),
        ) {
            (Some(s), None, None) if s == CLIENT_SECRET => Flow::ClientSecret,
            (None, Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer"), Some(a))
                if a.trim() == FEDERATED_TOKEN =>
            {
                Flow::Workload
            }
            _ => {
                return refused(
                    401,
                    "invalid_client",
                    "AADSTS7000215: Invalid client secret or assertion provided.",
                )
            }
        };
        let token = storage_token(CLIENT_ID);
        return (
            200,
            serde_json::json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token}),
            flow,
        );
    }
    if method == "GET" && path == "/metadata/identity/oauth2/token" {
        let metadata = headers
            .get("metadata")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let resource = form_value(query, "resource");
        if !metadata || form_value(query, "api-version").is_none() {
            return refused(
                400,
                "invalid_request",
                "Required metadata header not specified",
            );
        }
        if resource.as_deref().map(|r| r.trim_end_matches('/')) != Some("https://storage.azure.com")
        {
            return refused(400, "invalid_resource", "AADSTS500011: resource not found");
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        return (
            200,
            serde_json::json!({
                "access_token": storage_token("managed-identity"),
                "expires_on": (now + 3600).to_string(),
                "resource": "https://storage.azure.com",
                "token_type": "Bearer",
            }),
            Flow::ManagedIdentity,
        );
    }
    refused(404, "not_found", "no such endpoint")
}

fn serve_tokens(stream: TcpStream, flows: &Mutex<Vec<Flow>>) -> std::io::Result<()> {
    use std::io::{BufReader, Write};
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    while let Some(req) = Request::read(&mut reader, 1 << 20)? {
        let body = String::from_utf8_lossy(&req.body);
        let (status, json, flow) = token_answer(&req.method, &req.target, &req.headers, &body);
        flows.lock().unwrap_or_else(|e| e.into_inner()).push(flow);
        let json = json.to_string();
        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            if status == 200 { "OK" } else { "Error" },
            json.len()
        );
        writer.write_all(head.as_bytes())?;
        writer.write_all(json.as_bytes())?;
        writer.flush()?;
    }
    Ok(())
}
