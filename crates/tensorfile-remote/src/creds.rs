//! AWS credentials as clusters hold them: the chain of sources in the
//! order the AWS SDKs document, each tried only when the ones before it
//! gave nothing.
//!
//! 1. **Environment**: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!    `AWS_SESSION_TOKEN`.
//! 2. **Web identity** (IRSA on EKS): `AWS_WEB_IDENTITY_TOKEN_FILE` and
//!    `AWS_ROLE_ARN` (`AWS_ROLE_SESSION_NAME`), exchanged with STS
//!    `AssumeRoleWithWebIdentity`.
//! 3. **The shared files**: `AWS_CONFIG_FILE` (`~/.aws/config`) and
//!    `AWS_SHARED_CREDENTIALS_FILE` (`~/.aws/credentials`), the profile
//!    `AWS_PROFILE` (else `default`); keys in either file (the credentials
//!    file wins), or `role_arn` with `source_profile`,
//!    `web_identity_token_file` or `credential_source`, assumed with STS
//!    `AssumeRole` (signed with the source's keys). The profile's `region`
//!    is the region when `AWS_REGION` is not set.
//! 4. **Container credentials** (ECS, EKS pod identity):
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or
//!    `AWS_CONTAINER_CREDENTIALS_FULL_URI`, with
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` or
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
//! 5. **The instance metadata service** (IMDSv2): one attempt with a 1 s
//!    connect limit, its absence remembered for the process; off with
//!    `AWS_EC2_METADATA_DISABLED=true`; `AWS_EC2_METADATA_SERVICE_ENDPOINT`
//!    moves it.
//!
//! STS is reached at `AWS_ENDPOINT_URL_STS`, else `AWS_ENDPOINT_URL`, else
//! `https://sts.REGION.amazonaws.com`. Credentials that expire are fetched
//! again [`REFRESH_BEFORE`] their expiry. Secrets are never printed: the
//! [`Debug`] of [`AwsCredentials`] shows the access key id and the source
//! only, and errors name the source and the file, never a value.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::error::{Problem, RemoteError};
use crate::profile::{self, FileKind, Profile};
use crate::secret::Secret;

/// How long before their expiry credentials are fetched again.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// The connect limit of the instance metadata service's probe.
pub const IMDS_CONNECT_LIMIT: Duration = Duration::from_secs(1);

/// Where a chain's credentials came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    Environment,
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` exchanged with STS.
    WebIdentity,
    /// Keys of this profile in the shared files.
    Profile(String),
    /// The role of this profile, assumed with STS.
    AssumeRole(String),
    /// The container credentials endpoint.
    Container,
    /// The instance metadata service.
    InstanceMetadata,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Environment => f.write_str("the environment"),
            Source::WebIdentity => f.write_str("web identity (AWS_WEB_IDENTITY_TOKEN_FILE)"),
            Source::Profile(p) => write!(f, "profile {p:?} of the shared files"),
            Source::AssumeRole(p) => write!(f, "the role of profile {p:?}"),
            Source::Container => f.write_str("the container credentials endpoint"),
            Source::InstanceMetadata => f.write_str("the instance metadata service"),
        }
    }
}

/// Credentials from one source: the access key id (not a secret: AWS
/// shows it in logs), the secret key and session token (never shown), and
/// when they expire.
#[derive(Clone)]
pub struct AwsCredentials {
    access_key_id: String,
    secret_access_key: Secret,
    session_token: Option<Secret>,
    expires: Option<SystemTime>,
    source: Source,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("source", &self.source)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

impl AwsCredentials {
    /// The access key id.
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// Where they came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// When they expire (`None`: long-lived keys).
    pub fn expires(&self) -> Option<SystemTime> {
        self.expires
    }

    /// Whether they expire within [`REFRESH_BEFORE`].
    fn expiring(&self) -> bool {
        self.expires
            .is_some_and(|e| e <= SystemTime::now() + REFRESH_BEFORE)
    }

    /// As object_store's S3 client signs with them.
    #[cfg(feature = "s3-store")]
    pub(crate) fn for_store(&self) -> object_store::aws::AwsCredential {
        object_store::aws::AwsCredential {
            key_id: self.access_key_id.clone(),
            secret_key: self.secret_access_key.expose().to_string(),
            token: self.session_token.as_ref().map(|t| t.expose().to_string()),
        }
    }

    /// As `rusty-s3` signs with them.
    pub(crate) fn for_signing(&self) -> rusty_s3::Credentials {
        match &self.session_token {
            Some(t) => rusty_s3::Credentials::new_with_token(
                self.access_key_id.clone(),
                self.secret_access_key.expose().to_string(),
                t.expose().to_string(),
            ),
            None => rusty_s3::Credentials::new(
                self.access_key_id.clone(),
                self.secret_access_key.expose().to_string(),
            ),
        }
    }
}

/// How the chain reads a variable (the process's environment, or a map in
/// tests).
type Vars = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The credential chain, configured by the variables it reads.
#[derive(Clone)]
pub struct Chain {
    vars: Vars,
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Chain")
    }
}

/// The variables that decide what the chain finds (a provider is shared
/// by every store configured by the same values).
const CHAIN_VARS: [&str; 21] = [
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL",
    "HOME",
];

impl Chain {
    /// The chain as the process's environment configures it.
    pub fn from_env() -> Chain {
        Chain::with_vars(|n| std::env::var(n).ok())
    }

    /// The chain as `vars` configures it (a test's environment).
    pub fn with_vars(vars: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Chain {
        Chain {
            vars: Arc::new(vars),
        }
    }

    fn var(&self, name: &str) -> Option<String> {
        (self.vars)(name).filter(|v| !v.trim().is_empty())
    }

    /// A variable as the chain reads it (unset when empty).
    pub(crate) fn var_of(&self, name: &str) -> Option<String> {
        self.var(name)
    }

    /// The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, else the profile's
    /// `region` (`None`: none of them).
    pub fn region(&self) -> Option<String> {
        self.var("AWS_REGION")
            .or_else(|| self.var("AWS_DEFAULT_REGION"))
            .or_else(|| {
                let files = self.files().ok()?;
                files.get(&self.profile_name())?.get("region").cloned()
            })
    }

    /// A profile property for S3 (`s3.addressing_style`), if set.
    pub(crate) fn profile_setting(&self, key: &str) -> Option<String> {
        let files = self.files().ok()?;
        files.get(&self.profile_name())?.get(key).cloned()
    }

    /// The first source in the chain's order that gives credentials
    /// (`None`: none does; requests go anonymous).
    ///
    /// # Errors
    /// A source that is configured fails: STS refuses the web identity or
    /// the role, the profile named by `AWS_PROFILE` is not in the files,
    /// the container endpoint does not answer. The message names the
    /// source, never a secret.
    pub fn resolve(&self) -> Result<Option<AwsCredentials>, RemoteError> {
        if let Some(c) = self.environment() {
            return Ok(Some(c));
        }
        if let Some(c) = self.web_identity()? {
            return Ok(Some(c));
        }
        if let Some(c) = self.profile()? {
            return Ok(Some(c));
        }
        if let Some(c) = self.container()? {
            return Ok(Some(c));
        }
        self.instance_metadata()
    }

    fn environment(&self) -> Option<AwsCredentials> {
        Some(AwsCredentials {
            access_key_id: self.var("AWS_ACCESS_KEY_ID")?,
            secret_access_key: Secret::new(self.var("AWS_SECRET_ACCESS_KEY")?),
            session_token: self.var("AWS_SESSION_TOKEN").map(Secret::new),
            expires: None,
            source: Source::Environment,
        })
    }

    fn web_identity(&self) -> Result<Option<AwsCredentials>, RemoteError> {
        let (Some(file), Some(role)) = (
            self.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
            self.var("AWS_ROLE_ARN"),
        ) else {
            return Ok(None);
        };
        let session = self.var("AWS_ROLE_SESSION_NAME");
        self.assume_with_web_identity(&file, &role, session.as_deref(), Source::WebIdentity)
            .map(Some)
    }

    fn assume_with_web_identity(
        &self,
        token_file: &str,
        role: &str,
        session: Option<&str>,
        source: Source,
    ) -> Result<AwsCredentials, RemoteError> {
        let token = std::fs::read_to_string(token_file).map_err(|e| {
            fail(
                &source,
                format!("cannot read the token file {token_file}: {e}"),
            )
        })?;
        let session = session.map_or_else(session_name, str::to_string);
        let form = form(&[
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", "2011-06-15"),
            ("RoleArn", role),
            ("RoleSessionName", &session),
            ("WebIdentityToken", token.trim()),
        ]);
        let endpoint = self.sts_endpoint();
        let answer = post(&endpoint, &form, &[])
            .map_err(|e| fail(&source, format!("STS at {endpoint}: {e}")))?;
        sts_credentials(&answer, source)
    }

    /// The STS endpoint.
    fn sts_endpoint(&self) -> String {
        match self
            .var("AWS_ENDPOINT_URL_STS")
            .or_else(|| self.var("AWS_ENDPOINT_URL"))
        {
            Some(e) => e.trim_end_matches('/').to_string() + "/",
            None => format!(
                "https://sts.{}.amazonaws.com/",
                self.region().unwrap_or_else(|| "us-east-1".into())
            ),
        }
    }

    fn profile_name(&self) -> String {
        self.var("AWS_PROFILE")
            .or_else(|| self.var("AWS_DEFAULT_PROFILE"))
            .unwrap_or_else(|| "default".into())
    }

    /// The shared files' paths.
    fn file_paths(&self) -> (Option<PathBuf>, Option<PathBuf>) {
        let home = self.var("HOME").map(PathBuf::from);
        let config = self
            .var("AWS_CONFIG_FILE")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws/config")));
        let creds = self
            .var("AWS_SHARED_CREDENTIALS_FILE")
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")));
        (config, creds)
    }

    /// Both files' profiles, merged (the credentials file's keys win).
    fn files(&self) -> Result<BTreeMap<String, Profile>, RemoteError> {
        let (config, creds) = self.file_paths();
        let read = |p: &Option<PathBuf>| -> Result<Option<String>, RemoteError> {
            let Some(p) = p else { return Ok(None) };
            match std::fs::read(p) {
                Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(fail(
                    &Source::Profile(self.profile_name()),
                    format!("cannot read {}: {e}", p.display()),
                )),
            }
        };
        let mut out = BTreeMap::new();
        if let Some(text) = read(&config)? {
            out = profile::parse(&text, FileKind::Config);
        }
        if let Some(text) = read(&creds)? {
            for (name, props) in profile::parse(&text, FileKind::Credentials) {
                out.entry(name).or_insert_with(Profile::new).extend(props);
            }
        }
        Ok(out)
    }

    fn profile(&self) -> Result<Option<AwsCredentials>, RemoteError> {
        let files = self.files()?;
        let name = self.profile_name();
        if !files.contains_key(&name) {
            let explicit =
                self.var("AWS_PROFILE").is_some() || self.var("AWS_DEFAULT_PROFILE").is_some();
            if explicit {
                return Err(fail(
                    &Source::Profile(name.clone()),
                    format!("AWS_PROFILE names profile {name:?}, which neither shared file has"),
                ));
            }
            return Ok(None);
        }
        self.profile_credentials(&files, &name, &mut Vec::new())
    }

    /// A profile's credentials: its role assumed, or its keys.
    fn profile_credentials(
        &self,
        files: &BTreeMap<String, Profile>,
        name: &str,
        seen: &mut Vec<String>,
    ) -> Result<Option<AwsCredentials>, RemoteError> {
        let source = Source::Profile(name.to_string());
        let Some(p) = files.get(name) else {
            return Err(fail(
                &source,
                format!("profile {name:?} is not in the shared files"),
            ));
        };
        let keys = || -> Option<AwsCredentials> {
            Some(AwsCredentials {
                access_key_id: p
                    .get("aws_access_key_id")
                    .filter(|v| !v.is_empty())?
                    .clone(),
                secret_access_key: Secret::new(
                    p.get("aws_secret_access_key")
                        .filter(|v| !v.is_empty())?
                        .clone(),
                ),
                session_token: p
                    .get("aws_session_token")
                    .filter(|v| !v.is_empty())
                    .map(|t| Secret::new(t.clone())),
                expires: None,
                source: source.clone(),
            })
        };
        let Some(role) = p.get("role_arn").filter(|v| !v.is_empty()) else {
            return Ok(keys());
        };
        // A profile that names itself as its source uses its own keys.
        if seen.iter().any(|s| s == name) {
            return match keys() {
                Some(k) if seen.last().map(String::as_str) == Some(name) => Ok(Some(k)),
                _ => Err(fail(
                    &source,
                    "source_profile goes round in a circle".into(),
                )),
            };
        }
        if seen.len() >= 8 {
            return Err(fail(
                &source,
                "more than 8 roles in a chain of source_profile".into(),
            ));
        }
        seen.push(name.to_string());
        let assumed = Source::AssumeRole(name.to_string());
        let session = p.get("role_session_name").cloned();
        if let Some(file) = p.get("web_identity_token_file") {
            return self
                .assume_with_web_identity(file, role, session.as_deref(), assumed)
                .map(Some);
        }
        let base = if let Some(src) = p.get("source_profile") {
            self.profile_credentials(files, src, seen)?.ok_or_else(|| {
                fail(
                    &assumed,
                    format!("its source_profile {src:?} has no credentials"),
                )
            })?
        } else if let Some(src) = p.get("credential_source") {
            let found = match src.as_str() {
                "Environment" => self.environment(),
                "EcsContainer" => self.container()?,
                "Ec2InstanceMetadata" => self.instance_metadata()?,
                other => {
                    return Err(fail(
                        &assumed,
                        format!("credential_source {other:?} is not known"),
                    ))
                }
            };
            found.ok_or_else(|| {
                fail(
                    &assumed,
                    format!("its credential_source {src} gave no credentials"),
                )
            })?
        } else {
            return Err(fail(
                &assumed,
                "role_arn without source_profile, credential_source or web_identity_token_file"
                    .into(),
            ));
        };
        let region = p
            .get("region")
            .cloned()
            .or_else(|| self.region())
            .unwrap_or_else(|| "us-east-1".into());
        self.assume_role(
            &base,
            role,
            session.as_deref(),
            p.get("external_id"),
            &region,
            assumed,
        )
        .map(Some)
    }

    /// STS `AssumeRole`, signed (SigV4) with `base`.
    fn assume_role(
        &self,
        base: &AwsCredentials,
        role: &str,
        session: Option<&str>,
        external_id: Option<&String>,
        region: &str,
        source: Source,
    ) -> Result<AwsCredentials, RemoteError> {
        let session = session.map_or_else(session_name, str::to_string);
        let mut params = vec![
            ("Action", "AssumeRole"),
            ("Version", "2011-06-15"),
            ("RoleArn", role),
            ("RoleSessionName", session.as_str()),
        ];
        if let Some(x) = external_id {
            params.push(("ExternalId", x.as_str()));
        }
        let body = form(&params);
        let endpoint = self.sts_endpoint();
        let url: url::Url = endpoint
            .parse()
            .map_err(|e| fail(&source, format!("the STS endpoint is not a URL: {e}")))?;
        let headers = sign_v4(
            base,
            "POST",
            &url,
            FORM,
            &body,
            region,
            "sts",
            SystemTime::now(),
        );
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let answer = post(&endpoint, &body, &headers)
            .map_err(|e| fail(&source, format!("STS at {endpoint}: {e}")))?;
        sts_credentials(&answer, source)
    }

    fn container(&self) -> Result<Option<AwsCredentials>, RemoteError> {
        let url = if let Some(rel) = self.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            format!("http://169.254.170.2{rel}")
        } else if let Some(full) = self.var("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            full
        } else {
            return Ok(None);
        };
        let source = Source::Container;
        let token = match self.var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
            Some(f) => Some(
                std::fs::read_to_string(&f)
                    .map_err(|e| fail(&source, format!("cannot read {f}: {e}")))?
                    .trim()
                    .to_string(),
            ),
            None => self.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        };
        let shown = crate::public_name(&url);
        let parsed: url::Url = url
            .parse()
            .map_err(|e| fail(&source, format!("{shown} is not a URL: {e}")))?;
        let allowed = parsed.scheme() == "https"
            || matches!(
                parsed.host(),
                Some(url::Host::Ipv4(ip)) if ip.is_loopback() || ip.octets() == [169, 254, 170, 2] || ip.octets() == [169, 254, 170, 23]
            )
            || matches!(parsed.host(), Some(url::Host::Ipv6(ip)) if ip.is_loopback() || ip.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23])
            || parsed.host_str() == Some("localhost");
        if !allowed {
            return Err(fail(
                &source,
                format!("{shown}: a plain http endpoint must be on this host or the container agent's address"),
            ));
        }
        let headers: Vec<(&str, &str)> = token
            .as_deref()
            .map(|t| vec![("Authorization", t)])
            .unwrap_or_default();
        let body = get(
            &agent(Duration::from_secs(2), Duration::from_secs(5)),
            &url,
            &headers,
        )
        .map_err(|e| fail(&source, format!("{shown}: {e}")))?;
        json_credentials(&body, source).map(Some)
    }

    fn instance_metadata(&self) -> Result<Option<AwsCredentials>, RemoteError> {
        if self
            .var("AWS_EC2_METADATA_DISABLED")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        {
            return Ok(None);
        }
        let base = self
            .var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            .unwrap_or_else(|| "http://169.254.169.254".into());
        let base = base.trim_end_matches('/').to_string();
        // The probe's verdict, once per process per endpoint.
        static ABSENT: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
        let absent = ABSENT.get_or_init(Default::default);
        if absent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&base)
        {
            return Ok(None);
        }
        let found = imds_credentials(&base);
        match found {
            Ok(Some(c)) => Ok(Some(c)),
            Ok(None) | Err(_) => {
                absent
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(base);
                Ok(None)
            }
        }
    }

    /// A fingerprint of what configures the chain.
    fn fingerprint(&self) -> String {
        let mut s = String::new();
        for n in CHAIN_VARS {
            s.push_str(&(self.vars)(n).unwrap_or_default());
            s.push('\0');
        }
        s
    }
}

/// The instance metadata service's role credentials: a session token
/// (`PUT`), the role's name, then its credentials. `Ok(None)`: no service
/// or no role.
fn imds_credentials(base: &str) -> Result<Option<AwsCredentials>, String> {
    let agent = agent(IMDS_CONNECT_LIMIT, Duration::from_secs(2));
    let token = agent
        .put(format!("{base}/latest/api/token"))
        .header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
        .send_empty()
        .map_err(|e| e.to_string())?;
    if !token.status().is_success() {
        return Ok(None);
    }
    let token = read_body(token)?;
    let token = token.trim().to_string();
    let roles = get(
        &agent,
        &format!("{base}/latest/meta-data/iam/security-credentials/"),
        &[("x-aws-ec2-metadata-token", &token)],
    )?;
    let Some(role) = roles.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return Ok(None);
    };
    let body = get(
        &agent,
        &format!(
            "{base}/latest/meta-data/iam/security-credentials/{}",
            encode(role, false)
        ),
        &[("x-aws-ec2-metadata-token", &token)],
    )?;
    json_credentials(&body, Source::InstanceMetadata)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// An error of a credential source.
fn fail(source: &Source, what: String) -> RemoteError {
    RemoteError::new(
        "aws credentials",
        Problem::Credentials(format!("{source}: {what}")),
    )
}

/// A session name: `tensorfile-` and the time.
fn session_name() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("tensorfile-{ms}")
}

/// Percent-encodes all but unreserved characters (`slash`: `/` too is
/// kept), as SigV4 and forms want.
fn encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The content type of STS requests.
const FORM: &str = "application/x-www-form-urlencoded";

/// An `application/x-www-form-urlencoded` body.
fn form(params: &[(&str, &str)]) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k, false), encode(v, false)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A small agent for the credential sources: no proxy (the metadata
/// addresses are link-local), statuses as answers.
fn agent(connect: Duration, total: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .tls_config(crate::tls::ureq_config_lenient())
        .timeout_connect(Some(connect))
        .timeout_global(Some(total))
        .user_agent(concat!("tensorfile/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

fn read_body(mut answer: ureq::http::Response<ureq::Body>) -> Result<String, String> {
    answer
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .map_err(|e| e.to_string())
}

/// A `GET` whose answer must be 200; its body.
fn get(agent: &ureq::Agent, url: &str, headers: &[(&str, &str)]) -> Result<String, String> {
    let mut req = agent.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let answer = req.call().map_err(|e| e.to_string())?;
    let status = answer.status();
    let body = read_body(answer)?;
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    Ok(body)
}

/// A form `POST` to STS; the body of a 200, else the error's code.
fn post(url: &str, body: &str, headers: &[(&str, &str)]) -> Result<String, String> {
    let agent = agent(Duration::from_secs(5), Duration::from_secs(30));
    let mut req = agent.post(url).header("content-type", FORM);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let answer = req.send(body).map_err(|e| e.to_string())?;
    let status = answer.status();
    let text = read_body(answer)?;
    if !status.is_success() {
        let code = xml_value(&text, "Code").unwrap_or_default();
        return Err(format!("HTTP {} {code}", status.as_u16())
            .trim()
            .to_string());
    }
    Ok(text)
}

/// The text of the first `<tag>` of an XML answer.
fn xml_value(text: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&format!("</{tag}>"))? + start;
    Some(
        text[start..end]
            .trim()
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'"),
    )
}

/// The credentials of an STS answer (`AssumeRole*Result`).
fn sts_credentials(answer: &str, source: Source) -> Result<AwsCredentials, RemoteError> {
    let need = |tag: &str| {
        xml_value(answer, tag)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| fail(&source, format!("STS's answer has no {tag}")))
    };
    Ok(AwsCredentials {
        access_key_id: need("AccessKeyId")?,
        secret_access_key: Secret::new(need("SecretAccessKey")?),
        session_token: Some(Secret::new(need("SessionToken")?)),
        expires: xml_value(answer, "Expiration").and_then(|e| parse_time(&e)),
        source,
    })
}

/// The credentials of a container or metadata answer (JSON).
fn json_credentials(body: &str, source: Source) -> Result<AwsCredentials, RemoteError> {
    let v: serde_json::Value = serde_json::from_str(body)
        .map_err(|_| fail(&source, "the answer is not JSON credentials".into()))?;
    let need = |k: &str| {
        v[k].as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| fail(&source, format!("the answer has no {k}")))
    };
    if let Some(code) = v["Code"].as_str() {
        if code != "Success" {
            return Err(fail(&source, format!("the answer's Code is {code:?}")));
        }
    }
    Ok(AwsCredentials {
        access_key_id: need("AccessKeyId")?,
        secret_access_key: Secret::new(need("SecretAccessKey")?),
        session_token: v["Token"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(Secret::new),
        expires: v["Expiration"].as_str().and_then(parse_time),
        source,
    })
}

/// An ISO 8601 UTC time (`2026-12-02T17:00:00Z`, with fractions or
/// `+00:00`), as STS and the metadata services write it.
pub(crate) fn parse_time(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let (date, time) = s.split_once(['T', ' '])?;
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let time = time
        .trim_end_matches('Z')
        .trim_end_matches("+00:00")
        .trim_end_matches("+0000");
    let time = time.split('.').next()?;
    let mut t = time.split(':');
    let (h, mi, sec): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next().unwrap_or("0").parse().ok()?,
    );
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec;
    let secs = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// The civil date and time of `t`, as SigV4 writes it (`20261202T170000Z`).
fn amz_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(data);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// The SigV4 headers of a request with a form body (`x-amz-date`,
/// `x-amz-security-token`, `authorization`; `host` and `content-type` are
/// signed as given and sent by the caller).
#[allow(clippy::too_many_arguments)]
fn sign_v4(
    creds: &AwsCredentials,
    method: &str,
    url: &url::Url,
    content_type: &str,
    body: &str,
    region: &str,
    service: &str,
    now: SystemTime,
) -> Vec<(&'static str, String)> {
    let date = amz_date(now);
    let day = &date[..8];
    let host = match url.port() {
        Some(p) => format!("{}:{p}", url.host_str().unwrap_or("")),
        None => url.host_str().unwrap_or("").to_string(),
    };
    let mut headers: Vec<(&'static str, String)> = vec![
        ("content-type", content_type.into()),
        ("host", host),
        ("x-amz-date", date.clone()),
    ];
    if let Some(t) = &creds.session_token {
        headers.push(("x-amz-security-token", t.expose().to_string()));
    }
    let signed: Vec<&str> = headers.iter().map(|(k, _)| *k).collect();
    let signed = signed.join(";");
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}:{}\n", v.trim()))
        .collect();
    let path = if url.path().is_empty() {
        "/"
    } else {
        url.path()
    };
    let canonical = format!(
        "{method}\n{path}\n{}\n{canonical_headers}\n{signed}\n{}",
        url.query().unwrap_or(""),
        hex::encode(Sha256::digest(body.as_bytes()))
    );
    let scope = format!("{day}/{region}/{service}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let k = hmac(
        format!("AWS4{}", creds.secret_access_key.expose()).as_bytes(),
        day.as_bytes(),
    );
    let k = hmac(&k, region.as_bytes());
    let k = hmac(&k, service.as_bytes());
    let k = hmac(&k, b"aws4_request");
    let signature = hex::encode(hmac(&k, to_sign.as_bytes()));
    // ureq sets host itself.
    headers.retain(|(k, _)| *k != "host" && *k != "content-type");
    headers.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
            creds.access_key_id
        ),
    ));
    headers
}

/// The providers of a process, by the fingerprint of their configuration.
type Shared = Vec<(String, Arc<Provider>)>;

/// Credentials kept for a process, fetched again before they expire.
pub struct Provider {
    chain: Chain,
    current: Mutex<Option<AwsCredentials>>,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Provider")
            .field("current", &*current)
            .finish()
    }
}

impl Provider {
    /// The chain's credentials now, kept until [`REFRESH_BEFORE`] their
    /// expiry (`Ok(None)`: anonymous).
    ///
    /// # Errors
    /// As [`Chain::resolve`].
    pub fn new(chain: Chain) -> Result<Provider, RemoteError> {
        let current = chain.resolve()?;
        Ok(Provider {
            chain,
            current: Mutex::new(current),
        })
    }

    /// The provider shared by every store of this process configured by
    /// the same environment (credentials from STS or a metadata service
    /// are fetched once, not once per URL).
    ///
    /// # Errors
    /// As [`Chain::resolve`].
    pub fn shared(chain: Chain) -> Result<Arc<Provider>, RemoteError> {
        static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
        let key = chain.fingerprint();
        let shared = SHARED.get_or_init(Default::default);
        let mut list = shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = list.iter().find(|(k, _)| *k == key) {
            return Ok(p.clone());
        }
        let p = Arc::new(Provider::new(chain)?);
        list.push((key, p.clone()));
        Ok(p)
    }

    /// The credentials to sign with now: fetched again when they expire
    /// within [`REFRESH_BEFORE`] (the old ones are kept when that fails:
    /// the server then says whether they still work).
    pub fn current(&self) -> Option<AwsCredentials> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(AwsCredentials::expiring) {
            if let Ok(Some(fresh)) = self.chain.resolve() {
                *current = Some(fresh);
            }
        }
        current.clone()
    }

    /// The credentials now when they need no refresh (`Some(None)`:
    /// anonymous), without blocking; `None`: they must be fetched again
    /// ([`Provider::current`], which may block on STS or a metadata
    /// service).
    #[cfg(feature = "s3-store")]
    pub(crate) fn fresh(&self) -> Option<Option<AwsCredentials>> {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref().is_some_and(AwsCredentials::expiring) {
            return None;
        }
        Some(current.clone())
    }

    /// Where the credentials come from (`None`: anonymous).
    pub fn source(&self) -> Option<Source> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.source.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_and_print() {
        let t = parse_time("2026-12-02T17:03:04Z").unwrap();
        assert_eq!(amz_date(t), "20261202T170304Z");
        assert_eq!(parse_time("2026-12-02T17:03:04.123+00:00"), Some(t));
        assert_eq!(amz_date(UNIX_EPOCH), "19700101T000000Z");
        assert_eq!(
            amz_date(parse_time("2024-02-29T23:59:59Z").unwrap()),
            "20240229T235959Z"
        );
        for bad in ["", "2026-13-01T00:00:00Z", "yesterday", "2026-12-02"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    /// HMAC-SHA256 as RFC 4231's test case 2 gives it.
    #[test]
    fn hmac_is_rfc_4231() {
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// AWS's documented example of a signed request (IAM `ListUsers`).
    #[test]
    fn sigv4_as_documented() {
        let c = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: None,
            expires: None,
            source: Source::Environment,
        };
        let url: url::Url = "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08"
            .parse()
            .unwrap();
        let headers = sign_v4(
            &c,
            "GET",
            &url,
            "application/x-www-form-urlencoded; charset=utf-8",
            "",
            "us-east-1",
            "iam",
            parse_time("2015-08-30T12:36:00Z").unwrap(),
        );
        let auth = &headers
            .iter()
            .find(|(k, _)| *k == "authorization")
            .unwrap()
            .1;
        assert!(
            auth.ends_with(
                "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
            ),
            "{auth}"
        );
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let c = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: Some(Secret::new("session-token-value")),
            expires: None,
            source: Source::Environment,
        };
        let shown = format!("{c:?} {:?}", Some(&c));
        assert!(shown.contains("AKIDEXAMPLE"), "{shown}");
        assert!(
            !shown.contains("wJalr") && !shown.contains("session-token-value"),
            "{shown}"
        );
    }
}
