//! Object stores by URL: `s3://`, `gs://` and `az://` (`abfss://`) to an
//! [`ObjectStore`] of the `object_store` crate, the object's path in it and
//! its public name.
//!
//! | URL | store | configured by |
//! | --- | --- | --- |
//! | `s3://BUCKET/KEY` | S3 and S3-compatible stores | the same settings as S3 reads ([`crate::s3`]): `AWS_ENDPOINT_URL(_S3)`, the region, `AWS_S3_ADDRESSING_STYLE`, and credentials from our chain ([`crate::creds`]) |
//! | `gs://BUCKET/KEY` | Google Cloud Storage | application default credentials: `GOOGLE_APPLICATION_CREDENTIALS` (a service-account key or an authorized-user file), `GOOGLE_SERVICE_ACCOUNT(_KEY)`, gcloud's well-known file (`$CLOUDSDK_CONFIG` or `~/.config/gcloud/application_default_credentials.json`), else the metadata server (`GCE_METADATA_HOST`), else anonymous; `STORAGE_EMULATOR_HOST` or `GOOGLE_BASE_URL` for another endpoint |
//! | `az://CONTAINER/PATH` | Azure Blob Storage, account `AZURE_STORAGE_ACCOUNT_NAME` | `AZURE_STORAGE_ACCOUNT_KEY`, `AZURE_STORAGE_SAS_TOKEN`, `AZURE_STORAGE_TOKEN`, a client secret or workload identity (`AZURE_CLIENT_ID`, `AZURE_TENANT_ID`, `AZURE_CLIENT_SECRET` or `AZURE_FEDERATED_TOKEN_FILE`, `AZURE_AUTHORITY_HOST`), else managed identity, else anonymous (each tested: docs/remote.md); `AZURE_STORAGE_USE_EMULATOR` (Azurite), `AZURE_STORAGE_ENDPOINT` |
//! | `abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH` | the same, the account in the URL (also `az://` and `abfs://` in that form, and `abfs[s]://CONTAINER/PATH`) | the same |
//! | every URL | every store | `SSL_CERT_FILE`: a PEM bundle whose certificates are added to Mozilla's roots (a private CA); `AWS_CA_BUNDLE` and `REQUESTS_CA_BUNDLE` are not read (docs/remote.md) |
//!
//! Everything a store does (signing, tokens, retries, its credential
//! chain) is object_store's; what is ours: S3 uses our credential chain
//! and endpoint settings, so that what is written to S3 is what is read
//! from it, and the metadata services (GCE's, Azure's instance metadata)
//! are probed first with one attempt and a 1 s connect limit, remembered
//! for the process ([`METADATA_CONNECT_LIMIT`]): object_store would retry
//! an absent one for minutes. Where none is there, requests go anonymous
//! (public buckets).
//!
//! The stores are async; [`block_on`] runs a future on one small runtime
//! of this crate's (one thread, made when first used) for sync callers,
//! with a deadline.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};

use crate::creds::Chain;
use crate::error::{Problem, RemoteError};
use crate::http::{Client, Meta, RemoteOptions, Validator};

/// The connect limit of a metadata service's probe (as for AWS's, part a).
pub const METADATA_CONNECT_LIMIT: Duration = Duration::from_secs(1);

/// Which store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `s3://`.
    S3,
    /// `gs://`.
    Gcs,
    /// `az://`, `abfs://`, `abfss://`.
    Azure,
}

impl Scheme {
    /// The scheme of a store URL (`None`: not one).
    pub fn of(url: &str) -> Option<Scheme> {
        let (scheme, _) = url.split_once("://")?;
        match scheme.to_ascii_lowercase().as_str() {
            "s3" => Some(Scheme::S3),
            "gs" => Some(Scheme::Gcs),
            "az" | "abfs" | "abfss" => Some(Scheme::Azure),
            _ => None,
        }
    }

    /// Whether this build has the store (its Cargo feature).
    pub fn enabled(self) -> bool {
        match self {
            Scheme::S3 => cfg!(feature = "s3-store"),
            Scheme::Gcs => cfg!(feature = "gcs"),
            Scheme::Azure => cfg!(feature = "azure"),
        }
    }

    /// The feature that gives the store.
    fn feature(self) -> &'static str {
        match self {
            Scheme::S3 => "s3-store",
            Scheme::Gcs => "gcs",
            Scheme::Azure => "azure",
        }
    }
}

/// A store URL, parsed: which store, the bucket (container), the Azure
/// account when the URL names it, the key (path) and the public name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    /// The store.
    pub scheme: Scheme,
    /// The bucket (the container, for Azure).
    pub bucket: String,
    /// The Azure account named in the URL (`CONTAINER@ACCOUNT.dfs...`).
    pub account: Option<String>,
    /// The key below the bucket, as given (may be empty or end in `/`).
    pub key: String,
    /// The URL up to the key (`gs://bucket/`, `abfss://c@a.dfs.core.windows.net/`).
    prefix: String,
}

impl StoreUrl {
    /// Parses `s3://BUCKET/KEY`, `gs://BUCKET/KEY`, `az://CONTAINER/PATH`,
    /// and `az|abfs|abfss://CONTAINER@ACCOUNT.(dfs|blob).core.windows.net/PATH`.
    ///
    /// # Errors
    /// Not one of these forms (an empty bucket, a query, user info other
    /// than an Azure container, a host that is not an Azure account).
    pub fn parse(input: &str) -> Result<StoreUrl, RemoteError> {
        let bad = |what: String| RemoteError::new(crate::http::scrub(input), Problem::BadUrl(what));
        let scheme = Scheme::of(input)
            .ok_or_else(|| bad("not an s3://, gs://, az://, abfs:// or abfss:// URL".into()))?;
        let (given, rest) = input.split_once("://").unwrap_or_default();
        let given = given.to_ascii_lowercase();
        if rest.contains(['?', '#']) {
            return Err(bad("a store URL has no query or fragment".into()));
        }
        let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
        let (bucket, account, prefix) = match (scheme, authority.split_once('@')) {
            (Scheme::Azure, Some((container, host))) => {
                let host = host.to_ascii_lowercase();
                let account = host
                    .strip_suffix(".dfs.core.windows.net")
                    .or_else(|| host.strip_suffix(".blob.core.windows.net"))
                    .filter(|a| !a.is_empty() && !a.contains('.'))
                    .ok_or_else(|| {
                        bad(format!(
                            "expected {given}://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH"
                        ))
                    })?;
                (
                    container.to_string(),
                    Some(account.to_string()),
                    format!("{given}://{container}@{host}/"),
                )
            }
            (_, Some(_)) => return Err(bad("user info in a store URL".into())),
            (_, None) => (
                authority.to_string(),
                None,
                format!("{given}://{authority}/"),
            ),
        };
        if bucket.is_empty() {
            let what = match scheme {
                Scheme::Azure => format!("expected {given}://CONTAINER/PATH"),
                _ => format!("expected {given}://BUCKET/KEY"),
            };
            return Err(bad(what));
        }
        Ok(StoreUrl {
            scheme,
            bucket,
            account,
            key: key.to_string(),
            prefix,
        })
    }

    /// The URL's public name (it holds no secret: a store URL has no
    /// query and no password).
    pub fn display(&self) -> String {
        format!("{}{}", self.prefix, self.key)
    }

    /// The same bucket with another key.
    pub fn with_key(&self, key: &str) -> StoreUrl {
        StoreUrl {
            key: key.to_string(),
            ..self.clone()
        }
    }

    /// The key as an object path.
    ///
    /// # Errors
    /// A key object_store cannot address (an empty segment, `.` or `..`).
    pub fn path(&self) -> Result<Path, RemoteError> {
        let key = self.key.trim_end_matches('/');
        Path::parse(key).map_err(|e| {
            RemoteError::new(
                self.display(),
                Problem::BadUrl(format!("not a usable object key: {e}")),
            )
        })
    }
}

/// One object (or prefix) of a store: the store, its path there and its
/// public name.
#[derive(Debug, Clone)]
pub struct Located {
    /// The store of its bucket.
    pub store: Store,
    /// Its path in the store (without a trailing `/`).
    pub path: Path,
    /// Its public name (the URL, which holds no secret).
    pub display: String,
}

/// Parses a store URL and makes (or reuses) its bucket's store, configured
/// from the process's environment and bounded by `options`.
///
/// # Errors
/// As [`StoreUrl::parse`], [`StoreUrl::path`] and [`Store::for_url`].
pub fn locate(input: &str, options: &RemoteOptions) -> Result<Located, RemoteError> {
    let url = StoreUrl::parse(input)?;
    Ok(Located {
        path: url.path()?,
        store: Store::for_url(&url, options)?,
        display: url.display(),
    })
}

/// One object of a store, as the HTTP layer's [`Client`] reads it (an
/// [`ObjectBackend`](crate::http::ObjectBackend): [`get_range`] and
/// [`head`] below).
#[derive(Debug)]
pub(crate) struct StoreObject {
    pub(crate) store: Store,
    pub(crate) path: Path,
}

impl crate::http::ObjectBackend for StoreObject {
    fn get_range(
        &self,
        client: &Client,
        name: &str,
        start: u64,
        end: u64,
        known: Option<&Meta>,
        sink: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<Meta, RemoteError> {
        get_range(
            client,
            name,
            &self.store,
            &self.path,
            start,
            end,
            known,
            sink,
        )
    }

    fn head(&self, client: &Client, name: &str) -> Result<Meta, RemoteError> {
        head(client, name, &self.store, &self.path)
    }
}

/// An object store, with what its errors say about credentials.
#[derive(Clone)]
pub struct Store {
    /// The store (one bucket or container).
    pub store: Arc<dyn ObjectStore>,
    /// Where a 401 or 403 comes from: the credentials used, or none.
    pub denied_hint: Arc<str>,
    /// The store.
    pub scheme: Scheme,
    /// GCS: what the sweep of pending uploads needs.
    #[cfg(feature = "gcs")]
    pub(crate) gcs: Option<GcsXml>,
}

/// What the sweep of a GCS bucket's pending multipart uploads needs
/// (object_store does not list them): the XML API's base URL and the
/// store's own credentials.
#[cfg(feature = "gcs")]
#[derive(Clone)]
pub(crate) struct GcsXml {
    /// `https://storage.googleapis.com`, or the configured endpoint.
    pub(crate) base: String,
    /// The store's credential provider (an empty bearer: anonymous).
    pub(crate) credentials: object_store::gcp::GcpCredentialProvider,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("store", &self.store.to_string())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The store of `url`'s bucket, configured from the process's
    /// environment, its client bounded by `options` (connect and read
    /// limits, retries, backoff). Stores are made once per process for the
    /// same bucket, options and environment.
    ///
    /// # Errors
    /// A store this build lacks, a configuration object_store refuses (a
    /// missing Azure account, an unreadable key file), or a failing S3
    /// credential source; named by the URL.
    pub fn for_url(url: &StoreUrl, options: &RemoteOptions) -> Result<Store, RemoteError> {
        Store::with_env(url, options, &Chain::from_env())
    }

    /// [`Store::for_url`] with the variables `env` reads (tests).
    ///
    /// # Errors
    /// As [`Store::for_url`].
    pub fn with_env(
        url: &StoreUrl,
        options: &RemoteOptions,
        env: &Chain,
    ) -> Result<Store, RemoteError> {
        let display = url.with_key("").display();
        if !url.scheme.enabled() {
            return Err(RemoteError::new(
                display,
                Problem::BadUrl(format!(
                    "this build has no {:?} store (Cargo feature `{}` of tensorfile-remote)",
                    url.scheme,
                    url.scheme.feature()
                )),
            ));
        }
        static MADE: OnceLock<Mutex<HashMap<String, Store>>> = OnceLock::new();
        let key = format!(
            "{:?}\0{}\0{:?}\0{options:?}\0{}",
            url.scheme,
            url.bucket,
            url.account,
            fingerprint(env)
        );
        let made = MADE.get_or_init(Default::default);
        if let Some(s) = made.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(s.clone());
        }
        let store = build(url, options, env, &display)?;
        made.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, store.clone());
        Ok(store)
    }
}

/// The variables a store's configuration reads, besides the AWS chain's.
const STORE_VARS: [&str; 32] = [
    "SSL_CERT_FILE",
    "AWS_ENDPOINT_URL_S3",
    "AWS_S3_ADDRESSING_STYLE",
    "AWS_NO_SIGN_REQUEST",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_SERVICE_ACCOUNT",
    "GOOGLE_SERVICE_ACCOUNT_PATH",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_BASE_URL",
    "GOOGLE_BEARER_TOKEN",
    "GOOGLE_SKIP_SIGNATURE",
    "STORAGE_EMULATOR_HOST",
    "CLOUDSDK_CONFIG",
    "GCE_METADATA_HOST",
    "NO_GCE_CHECK",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_TOKEN",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_AUTHORITY_HOST",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_STORAGE_USE_EMULATOR",
    "AZURE_STORAGE_ENDPOINT",
    "AZURITE_BLOB_STORAGE_URL",
    "AZURE_MSI_ENDPOINT",
    "IDENTITY_ENDPOINT",
    "AZURE_USE_AZURE_CLI",
    "AZURE_SKIP_SIGNATURE",
];

fn fingerprint(env: &Chain) -> String {
    let mut s = String::new();
    for n in STORE_VARS {
        s.push_str(&env.var_of(n).unwrap_or_default());
        s.push('\0');
    }
    s
}

/// object_store's client limits from ours: connect and read limits (a
/// read that sends nothing for `read_timeout` fails), no limit on a whole
/// request (a long range that keeps coming is fine), our retries and
/// backoff; and the root certificates ureq trusts (webpki's, Mozilla's
/// set), not the system's, so that every URL is checked against the same
/// roots, with `extra` (`SSL_CERT_FILE`'s, [`crate::tls`]) added.
fn client_options(
    options: &RemoteOptions,
    allow_http: bool,
    extra: &[Vec<u8>],
) -> (ClientOptions, RetryConfig) {
    tls_provider();
    let mut client = ClientOptions::new();
    let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|c| c.as_ref())
        .chain(extra.iter().map(Vec::as_slice));
    for cert in roots {
        if let Ok(c) = object_store::Certificate::from_der(cert) {
            client = client.with_root_certificate(c);
        }
    }
    let client = client
        .with_no_system_certificates(true)
        .with_allow_http(allow_http)
        .with_connect_timeout(options.connect_timeout)
        .with_read_timeout(options.read_timeout)
        .with_timeout_disabled()
        .with_user_agent(object_store::HeaderValue::from_static(concat!(
            "tensorfile/",
            env!("CARGO_PKG_VERSION")
        )));
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: options.backoff,
            max_backoff: options.max_backoff,
            base: 2.0,
        },
        max_retries: options.retries as usize,
        retry_timeout: options
            .max_backoff
            .saturating_mul(options.retries.max(1))
            .max(Duration::from_secs(30)),
    };
    (client, retry)
}

/// Installs ring as the process's rustls crypto provider, unless one is
/// there already: object_store's client (reqwest, built without a
/// provider of its own so that aws-lc-rs stays out) takes the installed
/// one. ureq's client is given ring directly.
fn tls_provider() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        // Err: another provider was installed first; reqwest uses that one.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn is_http(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
}

fn build(
    url: &StoreUrl,
    options: &RemoteOptions,
    env: &Chain,
    display: &str,
) -> Result<Store, RemoteError> {
    let refused = |e: object_store::Error| {
        RemoteError::new(
            display,
            Problem::BadUrl(format!(
                "cannot configure the store: {}",
                crate::http::scrub(&e.to_string())
            )),
        )
    };
    let extra = crate::tls::extra_roots_of(env.var_of(crate::tls::CA_VAR))
        .map_err(|p| RemoteError::new(display, p))?;
    // Unused in a build with none of the stores' features.
    let _ = &extra;
    match url.scheme {
        #[cfg(feature = "s3-store")]
        Scheme::S3 => s3(url, options, env, &extra).map_err(|e| match e {
            Built::Remote(e) => e,
            Built::Store(e) => refused(e),
        }),
        #[cfg(feature = "gcs")]
        Scheme::Gcs => gcs(url, options, env, &extra).map_err(refused),
        #[cfg(feature = "azure")]
        Scheme::Azure => azure(url, options, env, display, &extra).map_err(|e| match e {
            Built::Remote(e) => e,
            Built::Store(e) => refused(e),
        }),
        #[allow(unreachable_patterns)]
        _ => Err(RemoteError::new(
            display,
            Problem::BadUrl(format!("this build has no {:?} store", url.scheme)),
        )),
    }
}

/// Why a store could not be made.
#[allow(dead_code)]
enum Built {
    Remote(RemoteError),
    Store(object_store::Error),
}

impl From<object_store::Error> for Built {
    fn from(e: object_store::Error) -> Built {
        Built::Store(e)
    }
}

/// S3 with our settings and credential chain: the endpoint, region and
/// addressing style that [`crate::s3::S3Store`] uses for reads.
#[cfg(feature = "s3-store")]
fn s3(
    url: &StoreUrl,
    options: &RemoteOptions,
    env: &Chain,
    extra: &[Vec<u8>],
) -> Result<Store, Built> {
    use object_store::aws::AmazonS3Builder;
    let ours = crate::s3::S3Store::with_chain(&url.bucket, env.clone()).map_err(Built::Remote)?;
    let bucket = ours.bucket();
    let base = bucket.base_url().as_str().trim_end_matches('/');
    // rusty-s3's base URL holds the bucket: as its last path segment
    // (path style), or in the host (virtual-hosted style), which is how
    // object_store wants its endpoint in each style.
    let suffix = format!("/{}", url.bucket);
    let (endpoint, virtual_host) = match base.strip_suffix(&suffix) {
        Some(endpoint) => (endpoint.to_string(), false),
        None => (base.to_string(), true),
    };
    let (client, retry) = client_options(options, is_http(&endpoint), extra);
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&url.bucket)
        .with_region(bucket.region())
        .with_endpoint(&endpoint)
        .with_virtual_hosted_style_request(virtual_host)
        .with_client_options(client)
        .with_retry(retry);
    let provider = ours.provider().filter(|p| p.source().is_some());
    builder = match provider {
        Some(p) => builder.with_credentials(Arc::new(ChainCredentials(p.clone()))),
        None => builder.with_skip_signature(true),
    };
    Ok(Store {
        store: Arc::new(builder.build()?),
        denied_hint: ours.denied_hint().into(),
        scheme: Scheme::S3,
        #[cfg(feature = "gcs")]
        gcs: None,
    })
}

/// Our AWS credential chain as object_store's provider: the kept
/// credentials, or (near their expiry) the chain run again off the
/// runtime's thread.
#[cfg(feature = "s3-store")]
#[derive(Debug)]
struct ChainCredentials(Arc<crate::creds::Provider>);

#[cfg(feature = "s3-store")]
#[async_trait::async_trait]
impl object_store::CredentialProvider for ChainCredentials {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        let current = match self.0.fresh() {
            Some(c) => c,
            None => {
                let p = self.0.clone();
                tokio::task::spawn_blocking(move || p.current()).await?
            }
        };
        match current {
            Some(c) => Ok(Arc::new(c.for_store())),
            None => Err(object_store::Error::Generic {
                store: "S3",
                source: "the AWS credential chain no longer gives credentials".into(),
            }),
        }
    }
}

/// Google Cloud Storage: object_store's builder with the `GOOGLE_*`
/// settings; application default credentials where they are (explicit
/// files and keys, gcloud's well-known file), else the metadata server if
/// a bounded probe finds it, else anonymous.
#[cfg(feature = "gcs")]
fn gcs(
    url: &StoreUrl,
    options: &RemoteOptions,
    env: &Chain,
    extra: &[Vec<u8>],
) -> Result<Store, object_store::Error> {
    use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
    let var = |n: &str| env.var_of(n);
    let mut builder = GoogleCloudStorageBuilder::new().with_bucket_name(&url.bucket);
    let mut explicit = false;
    for (name, key) in [
        ("GOOGLE_SERVICE_ACCOUNT", GoogleConfigKey::ServiceAccount),
        (
            "GOOGLE_SERVICE_ACCOUNT_PATH",
            GoogleConfigKey::ServiceAccount,
        ),
        (
            "GOOGLE_SERVICE_ACCOUNT_KEY",
            GoogleConfigKey::ServiceAccountKey,
        ),
        (
            "GOOGLE_APPLICATION_CREDENTIALS",
            GoogleConfigKey::ApplicationCredentials,
        ),
        ("GOOGLE_BEARER_TOKEN", GoogleConfigKey::BearerToken),
    ] {
        if let Some(v) = var(name) {
            builder = builder.with_config(key, v);
            explicit = true;
        }
    }
    // gcloud's application default credentials (`gcloud auth
    // application-default login`), found with our environment.
    if !explicit {
        let dir = var("CLOUDSDK_CONFIG")
            .map(std::path::PathBuf::from)
            .or_else(|| var("HOME").map(|h| std::path::Path::new(&h).join(".config/gcloud")));
        if let Some(file) = dir.map(|d| d.join("application_default_credentials.json")) {
            if file.is_file() {
                builder = builder.with_application_credentials(file.to_string_lossy());
                explicit = true;
            }
        }
    }
    // The emulator's variable (Google's client libraries), else ours.
    let base = var("STORAGE_EMULATOR_HOST")
        .map(|h| {
            if h.contains("://") {
                h
            } else {
                format!("http://{h}")
            }
        })
        .or_else(|| var("GOOGLE_BASE_URL"));
    let emulator = var("STORAGE_EMULATOR_HOST").is_some();
    let skip = var("GOOGLE_SKIP_SIGNATURE").is_some_and(|v| truthy(&v));
    let anonymous = skip || (!explicit && (emulator || !gce_metadata(env)));
    let (client, retry) = client_options(options, base.as_deref().is_some_and(is_http), extra);
    builder = builder.with_client_options(client).with_retry(retry);
    if let Some(base) = &base {
        builder = builder.with_base_url(base);
    }
    if anonymous {
        // Skipping signatures is not enough: object_store's PUTs (and
        // multipart uploads) still ask the credential provider, the
        // metadata server by default, for a token. An empty one is never
        // sent on reads, and on writes is `Bearer ` with nothing.
        builder = builder.with_skip_signature(true).with_credentials(Arc::new(
            object_store::StaticCredentialProvider::new(object_store::gcp::GcpCredential {
                bearer: String::new(),
            }),
        ));
    }
    let hint = if anonymous {
        "the request was anonymous (no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application default credentials, no metadata server): the bucket is not public"
    } else if explicit {
        "the credentials (GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_SERVICE_ACCOUNT or gcloud's application default credentials) lack access to it"
    } else {
        "the instance's service account (from the metadata server) lacks access to it"
    };
    let built = builder.build()?;
    let gcs = GcsXml {
        base: base
            .unwrap_or_else(|| "https://storage.googleapis.com".into())
            .trim_end_matches('/')
            .to_string(),
        credentials: built.credentials().clone(),
    };
    Ok(Store {
        store: Arc::new(built),
        denied_hint: hint.into(),
        scheme: Scheme::Gcs,
        gcs: Some(gcs),
    })
}

#[cfg(any(feature = "gcs", feature = "azure"))]
fn truthy(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes")
}

/// Whether GCE's metadata server answers: one request to
/// `GCE_METADATA_HOST` (else 169.254.169.254) with a 1 s connect limit,
/// its answer carrying `Metadata-Flavor: Google`; once per process per
/// host. `NO_GCE_CHECK=true` (google-auth's variable) skips it.
#[cfg(feature = "gcs")]
fn gce_metadata(env: &Chain) -> bool {
    if env.var_of("NO_GCE_CHECK").is_some_and(|v| truthy(&v)) {
        return false;
    }
    let host = env
        .var_of("GCE_METADATA_HOST")
        .unwrap_or_else(|| "169.254.169.254".into());
    probe(
        &format!("http://{host}/computeMetadata/v1/"),
        &[("Metadata-Flavor", "Google")],
        |r| {
            r.headers()
                .get("metadata-flavor")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"google"))
        },
    )
}

/// Azure Blob Storage: object_store's builder with the `AZURE_*` settings
/// (the account from the URL, else `AZURE_STORAGE_ACCOUNT_NAME`); when no
/// credential is configured, managed identity if a bounded probe finds
/// the instance metadata service, else anonymous.
#[cfg(feature = "azure")]
fn azure(
    url: &StoreUrl,
    options: &RemoteOptions,
    env: &Chain,
    display: &str,
    extra: &[Vec<u8>],
) -> Result<Store, Built> {
    use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
    let var = |n: &str| env.var_of(n);
    let mut builder = MicrosoftAzureBuilder::new().with_container_name(&url.bucket);
    let emulator = var("AZURE_STORAGE_USE_EMULATOR").is_some_and(|v| truthy(&v));
    let account = url
        .account
        .clone()
        .or_else(|| var("AZURE_STORAGE_ACCOUNT_NAME"));
    match &account {
        Some(a) => builder = builder.with_account(a),
        None if emulator => {}
        None => {
            return Err(Built::Remote(RemoteError::new(
                display,
                Problem::BadUrl(
                    "no storage account: set AZURE_STORAGE_ACCOUNT_NAME, or name it in the URL (abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH)".into(),
                ),
            )))
        }
    }
    let mut configured = false;
    for (name, key, credential) in [
        ("AZURE_STORAGE_ACCOUNT_KEY", AzureConfigKey::AccessKey, true),
        ("AZURE_STORAGE_SAS_TOKEN", AzureConfigKey::SasKey, true),
        ("AZURE_STORAGE_SAS_KEY", AzureConfigKey::SasKey, true),
        ("AZURE_STORAGE_TOKEN", AzureConfigKey::Token, true),
        ("AZURE_CLIENT_SECRET", AzureConfigKey::ClientSecret, true),
        (
            "AZURE_FEDERATED_TOKEN_FILE",
            AzureConfigKey::FederatedTokenFile,
            true,
        ),
        ("AZURE_USE_AZURE_CLI", AzureConfigKey::UseAzureCli, true),
        ("AZURE_SKIP_SIGNATURE", AzureConfigKey::SkipSignature, true),
        ("AZURE_CLIENT_ID", AzureConfigKey::ClientId, false),
        ("AZURE_TENANT_ID", AzureConfigKey::AuthorityId, false),
        ("AZURE_AUTHORITY_HOST", AzureConfigKey::AuthorityHost, false),
        ("AZURE_STORAGE_ENDPOINT", AzureConfigKey::Endpoint, false),
        (
            "AZURE_STORAGE_USE_EMULATOR",
            AzureConfigKey::UseEmulator,
            false,
        ),
    ] {
        if let Some(v) = var(name) {
            builder = builder.with_config(key, v);
            configured |= credential;
        }
    }
    let msi = var("AZURE_MSI_ENDPOINT").or_else(|| var("IDENTITY_ENDPOINT"));
    if let Some(m) = &msi {
        builder = builder.with_config(AzureConfigKey::MsiEndpoint, m);
    }
    // With nothing configured object_store asks the instance metadata
    // service for a managed identity's token, retrying for minutes where
    // there is none: probe it once first.
    let anonymous = !emulator
        && !configured
        && !azure_imds(
            msi.as_deref()
                .unwrap_or("http://169.254.169.254/metadata/identity/oauth2/token"),
        );
    if anonymous {
        builder = builder.with_skip_signature(true);
    }
    let endpoint = var("AZURE_STORAGE_ENDPOINT").unwrap_or_default();
    let (client, retry) = client_options(options, is_http(&endpoint), extra);
    builder = builder.with_client_options(client).with_retry(retry);
    let hint = if anonymous {
        "the request was anonymous (no AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN, client secret, workload or managed identity): the container is not public".to_string()
    } else {
        format!(
            "{} is wrong, has expired or lacks access to it",
            azure_source(env, emulator)
        )
    };
    Ok(Store {
        store: Arc::new(builder.build()?),
        denied_hint: hint.into(),
        scheme: Scheme::Azure,
        #[cfg(feature = "gcs")]
        gcs: None,
    })
}

/// The credential object_store's Azure builder picks from these
/// variables, in its order (`resolve_credential_auto`), named with them.
#[cfg(feature = "azure")]
fn azure_source(env: &Chain, emulator: bool) -> &'static str {
    let has = |n: &str| env.var_of(n).is_some();
    let client = has("AZURE_CLIENT_ID") && has("AZURE_TENANT_ID");
    if has("AZURE_STORAGE_TOKEN") {
        "the bearer token (AZURE_STORAGE_TOKEN)"
    } else if has("AZURE_STORAGE_ACCOUNT_KEY") {
        "the account key (AZURE_STORAGE_ACCOUNT_KEY)"
    } else if emulator {
        "Azurite's account key (AZURE_STORAGE_USE_EMULATOR)"
    } else if client && has("AZURE_FEDERATED_TOKEN_FILE") {
        "the workload identity (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE)"
    } else if client && has("AZURE_CLIENT_SECRET") {
        "the client secret (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CLIENT_SECRET)"
    } else if has("AZURE_STORAGE_SAS_TOKEN") || has("AZURE_STORAGE_SAS_KEY") {
        "the SAS token (AZURE_STORAGE_SAS_TOKEN)"
    } else if env
        .var_of("AZURE_USE_AZURE_CLI")
        .is_some_and(|v| truthy(&v))
    {
        "the Azure CLI's login (AZURE_USE_AZURE_CLI)"
    } else {
        "the managed identity (the instance metadata service, or AZURE_MSI_ENDPOINT)"
    }
}

/// Whether Azure's instance metadata service (or the identity endpoint
/// given) answers at all: one request with a 1 s connect limit, once per
/// process per endpoint.
#[cfg(feature = "azure")]
fn azure_imds(endpoint: &str) -> bool {
    probe(endpoint, &[("Metadata", "true")], |_| true)
}

/// One `GET` with the metadata connect limit; whether `ok` likes the
/// answer. Remembered for the process by URL.
#[allow(dead_code)]
fn probe(
    url: &str,
    headers: &[(&str, &str)],
    ok: impl Fn(&ureq::http::Response<ureq::Body>) -> bool,
) -> bool {
    static SEEN: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(&v) = seen.lock().unwrap_or_else(|e| e.into_inner()).get(url) {
        return v;
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .timeout_connect(Some(METADATA_CONNECT_LIMIT))
        .timeout_global(Some(2 * METADATA_CONNECT_LIMIT))
        .build()
        .into();
    let mut request = agent.get(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let found = request.call().is_ok_and(|r| ok(&r));
    seen.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(url.to_string(), found);
    found
}

/// The runtime that drives the stores: one thread, made when first used.
fn runtime() -> &'static tokio::runtime::Handle {
    static HANDLE: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("cannot make the object stores' runtime: {e}"));
        let handle = rt.handle().clone();
        let spawned = std::thread::Builder::new()
            .name("tensorfile-stores".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()));
        if let Err(e) = spawned {
            panic!("cannot start the object stores' thread: {e}");
        }
        handle
    })
}

pub use crate::interrupt::Unfinished;

/// Runs `future` on the stores' runtime and waits for it, at most until
/// `deadline` (`None`: for as long as it takes) or until the process is
/// interrupted ([`crate::interrupt`]); a future still running then is
/// cancelled (dropped where it stands).
///
/// # Errors
/// The deadline passed, or the process was interrupted.
pub fn block_on<F>(future: F, deadline: Option<Instant>) -> Result<F::Output, Unfinished>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    run(future, deadline, false)
}

/// [`block_on`] for a cleanup (an abort, a removal): an interruption does
/// not stop it, but limits it to [`crate::interrupt::CLEANUP_LIMIT`] more.
///
/// # Errors
/// The deadline (or that limit) passed.
pub(crate) fn cleanup<F>(future: F, deadline: Option<Instant>) -> Result<F::Output, Unfinished>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    run(future, deadline, true)
}

fn run<F>(future: F, deadline: Option<Instant>, cleanup: bool) -> Result<F::Output, Unfinished>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    use futures_util::future::{select, Either};
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let stop = async move {
        crate::interrupt::until_interrupted().await;
        if cleanup {
            tokio::time::sleep(crate::interrupt::CLEANUP_LIMIT).await;
        }
    };
    let task = runtime().spawn(async move {
        let got = match select(Box::pin(future), Box::pin(stop)).await {
            Either::Left((v, _)) => Ok(v),
            Either::Right(_) if cleanup => Err(Unfinished::DeadlinePassed),
            Either::Right(_) => Err(Unfinished::Interrupted),
        };
        let _ = tx.send(got);
    });
    let got = match deadline {
        None => rx.recv().map_err(|_| Unfinished::DeadlinePassed),
        Some(d) => rx
            .recv_timeout(d.saturating_duration_since(Instant::now()))
            .map_err(|_| Unfinished::DeadlinePassed),
    };
    if got.is_err() {
        task.abort();
    }
    got.and_then(|g| g)
}

/// What the store says of an object, as the HTTP layer keeps it: the
/// length, the `ETag` and the modification time.
fn meta_of(m: &object_store::ObjectMeta) -> Meta {
    Meta {
        len: m.size,
        validator: Validator {
            etag: m.e_tag.clone(),
            last_modified: Some(m.last_modified.to_rfc3339()),
        },
        ..Meta::default()
    }
}

/// What the task reading a range hands to the caller's thread.
enum Piece {
    /// The answer's object and range, first.
    Start(Meta, std::ops::Range<u64>),
    /// Bytes, in order.
    Bytes(bytes::Bytes),
    /// The request or the body failed.
    Failed(object_store::Error),
}

/// Reads `start..end` of an object through its store, handing the bytes to
/// `sink` in order with their offsets, with the checks of HTTP reads: the
/// answer is exactly the range asked for (clipped to the object's end on
/// the first read, when `known` is `None`), the body exactly that long,
/// and the length and `ETag` those of `known`. The request takes one of
/// the client's slots and counts against its budgets; its deadline is the
/// client's time budget. Retries are object_store's (a body cut short is
/// asked for again from where it stopped, with the same `ETag`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn get_range(
    client: &Client,
    name: &str,
    store: &Store,
    path: &Path,
    start: u64,
    end: u64,
    known: Option<&Meta>,
    sink: &mut dyn FnMut(u64, &[u8]),
) -> Result<Meta, RemoteError> {
    use futures_util::StreamExt;
    let fail = |p: Problem| RemoteError::new(name, p);
    let _slot = client.start_request(end - start).map_err(fail)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Piece>(8);
    let (inner, located) = (store.store.clone(), path.clone());
    let read = async move {
        let options = object_store::GetOptions {
            range: Some((start..end).into()),
            ..Default::default()
        };
        let answer = match inner.get_opts(&located, options).await {
            Ok(a) => a,
            Err(e) => {
                let _ = tx.send(Piece::Failed(e)).await;
                return;
            }
        };
        let first = Piece::Start(meta_of(&answer.meta), answer.range.clone());
        if tx.send(first).await.is_err() {
            return;
        }
        let mut body = answer.into_stream();
        while let Some(piece) = body.next().await {
            let piece = match piece {
                Ok(b) => Piece::Bytes(b),
                Err(e) => Piece::Failed(e),
            };
            if tx.send(piece).await.is_err() {
                return;
            }
        }
    };
    let deadline = client.deadline();
    let task = runtime().spawn(async move {
        match deadline {
            Some(d) => {
                let _ = tokio::time::timeout_at(d.into(), read).await;
            }
            None => read.await,
        }
    });
    // Ends the task if this returns early (a check failed).
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _abort = Abort(task);
    let asked = format!("bytes {start}-{}", end.saturating_sub(1));
    let mut meta: Option<Meta> = None;
    let mut at = start;
    let mut stop = end;
    let window = client.options().rate_window.max(Duration::from_millis(1));
    let (mut window_start, mut window_bytes) = (Instant::now(), 0u64);
    while let Some(piece) = rx.blocking_recv() {
        match piece {
            Piece::Start(m, range) => {
                if let Some(before) = known {
                    if let Some(p) = crate::http::changed(before, &m, m.len) {
                        return Err(fail(p));
                    }
                }
                // The whole range, or (first read) up to the object's end.
                let expected = match known {
                    Some(_) => start..end,
                    None => start..end.min(m.len),
                };
                if range != expected {
                    return Err(fail(Problem::BadContentRange {
                        asked,
                        got: Some(format!(
                            "bytes {}-{}/{}",
                            range.start,
                            range.end.saturating_sub(1),
                            m.len
                        )),
                    }));
                }
                stop = range.end;
                meta = Some(m);
            }
            Piece::Bytes(b) => {
                let n = b.len() as u64;
                if meta.is_none() || at + n > stop {
                    return Err(fail(Problem::LongBody {
                        expected: stop - start,
                    }));
                }
                client.count_bytes(n);
                sink(at, &b);
                at += n;
                window_bytes += n;
                let min_rate = client.options().min_rate;
                if min_rate > 0 && window_start.elapsed() >= window {
                    let floor = (min_rate as f64 * window_start.elapsed().as_secs_f64()) as u64;
                    if window_bytes < floor {
                        return Err(fail(Problem::TooSlow {
                            min_rate,
                            window,
                            got: window_bytes,
                        }));
                    }
                    (window_start, window_bytes) = (Instant::now(), 0);
                }
            }
            Piece::Failed(e) => {
                // The first read of an empty object: no range to give.
                if known.is_none() && start == 0 && meta.is_none() {
                    if let Ok(m) = head(client, name, store, path) {
                        if m.len == 0 {
                            return Ok(m);
                        }
                    }
                }
                return Err(error(name, &store.denied_hint, e));
            }
        }
    }
    match meta {
        Some(m) if at == stop => Ok(m),
        Some(_) => Err(fail(Problem::ShortBody {
            expected: stop - start,
            got: at - start,
        })),
        // The task ended without a word: the deadline.
        None => Err(fail(client.out_of_time(None))),
    }
}

/// The object's length and validator, from the store.
///
/// # Errors
/// The request fails, or the client's deadline passes.
pub(crate) fn head(
    client: &Client,
    name: &str,
    store: &Store,
    path: &Path,
) -> Result<Meta, RemoteError> {
    let _slot = client
        .start_request(0)
        .map_err(|p| RemoteError::new(name, p))?;
    let (inner, located) = (store.store.clone(), path.clone());
    use object_store::ObjectStoreExt;
    let answer = block_on(async move { inner.head(&located).await }, client.deadline())
        .map_err(|u| RemoteError::new(name, stopped(client, u)))?;
    answer
        .map(|m| meta_of(&m))
        .map_err(|e| error(name, &store.denied_hint, e))
}

/// The objects directly below `prefix` (a directory's path), through
/// `list_with_delimiter`: their names below it and sizes.
///
/// # Errors
/// The listing fails, or the client's deadline passes.
pub(crate) fn list(
    client: &Client,
    display: &str,
    store: &Store,
    prefix: &Path,
) -> Result<Vec<crate::s3::Listed>, RemoteError> {
    let _slot = client
        .start_request(0)
        .map_err(|p| RemoteError::new(display, p))?;
    let (inner, located) = (store.store.clone(), prefix.clone());
    let root = prefix.as_ref().is_empty();
    let answer = block_on(
        async move {
            inner
                .list_with_delimiter(if root { None } else { Some(&located) })
                .await
        },
        client.deadline(),
    )
    .map_err(|u| RemoteError::new(display, stopped(client, u)))?
    .map_err(|e| error(display, &store.denied_hint, e))?;
    Ok(answer
        .objects
        .into_iter()
        .filter_map(|o| {
            let name = o.location.filename()?.to_string();
            Some(crate::s3::Listed {
                name,
                size: o.size,
                sha256: None,
            })
        })
        .collect())
}

/// Why a read was given up: the client's time, or an interruption.
fn stopped(client: &Client, why: Unfinished) -> Problem {
    match why {
        Unfinished::Interrupted => Problem::Interrupted,
        Unfinished::DeadlinePassed => client.out_of_time(None),
    }
}

/// An object_store error as ours, naming `url` (object_store's messages
/// quote request URLs, which for Azure may carry a SAS token: only its
/// status and the server's words are kept, queries removed).
pub fn error(url: &str, hint: &str, e: object_store::Error) -> RemoteError {
    use object_store::Error as E;
    let problem = match &e {
        E::NotFound { .. } => Problem::NotFound,
        E::AlreadyExists { .. } => Problem::Exists,
        E::PermissionDenied { .. } => Problem::Denied {
            status: 403,
            hint: hint.to_string(),
        },
        E::Unauthenticated { .. } => Problem::Denied {
            status: 401,
            hint: hint.to_string(),
        },
        E::Precondition { .. } | E::NotModified { .. } => Problem::Changed {
            what: "ETag",
            before: "the one opened".into(),
            now: "another".into(),
        },
        E::InvalidPath { source } => Problem::BadUrl(format!("not a usable object key: {source}")),
        _ => crate::tls::certificate_problem(&e)
            .unwrap_or_else(|| token_refused(&e, hint).unwrap_or_else(|| from_text(&e))),
    };
    RemoteError::new(url, problem)
}

/// A credential's token request that its service refused (4xx: a wrong
/// secret or assertion, an unknown client or tenant), as access denied
/// with the service's error code and what the credential is (`hint`);
/// `None` for anything else (a token service out of reach stays a
/// transport failure).
fn token_refused(e: &object_store::Error, hint: &str) -> Option<Problem> {
    let text = chain_text(e);
    let (_, rest) = text.split_once("Error performing token request")?;
    let Problem::Status { status, detail, .. } = from_text(e) else {
        return None;
    };
    if !(400..500).contains(&status) {
        return None;
    }
    // OAuth's `{"error": "invalid_client", ...}`, else the server's words.
    let code = rest
        .split_once("\"error\":\"")
        .and_then(|(_, r)| r.split('"').next())
        .map_or(detail, str::to_string);
    Some(Problem::Denied {
        status,
        hint: format!("the credential's token request was refused ({code}): {hint}"),
    })
}

/// An error's text with its sources', each once.
fn chain_text(e: &object_store::Error) -> String {
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&t);
        }
        source = s.source();
    }
    text
}

/// A problem from an error's text: object_store's `Error performing GET
/// URL in 1ms, after 3 retries ... - Server returned non-2xx status code:
/// 500 ...: BODY` becomes an HTTP status with the server's words; anything
/// else a transport failure in its own words (the URL dropped).
fn from_text(e: &object_store::Error) -> Problem {
    let text = chain_text(e);
    let attempts = text
        .split("after ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse::<u32>().ok())
        .map_or(1, |n| n + 1);
    // Only what the server or the transport said, not the request's URL.
    let said = text
        .split_once(" - ")
        .map_or(text.as_str(), |(_, said)| said);
    let said = crate::http::scrub(said);
    if let Some(rest) = said.split("status code: ").nth(1) {
        let status = rest
            .get(..3)
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or(0);
        let detail: String = rest
            .get(3..)
            .unwrap_or("")
            .trim_start_matches([':', ' '])
            .chars()
            .take(200)
            .collect();
        return Problem::Status {
            status,
            attempts,
            detail: short_detail(&detail),
        };
    }
    Problem::Transport {
        message: said.chars().take(300).collect(),
        attempts,
    }
}

/// The `<Code>` of an XML error body, else the body's start.
fn short_detail(body: &str) -> String {
    if let Some(start) = body.find("<Code>") {
        let rest = &body[start + 6..];
        if let Some(end) = rest.find("</Code>") {
            return rest[..end].to_string();
        }
    }
    body.trim().chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_store_bucket_and_key() {
        let u = StoreUrl::parse("gs://bucket/dir/model.safetensors").unwrap();
        assert_eq!(
            (
                u.scheme,
                u.bucket.as_str(),
                u.key.as_str(),
                u.account.as_deref()
            ),
            (Scheme::Gcs, "bucket", "dir/model.safetensors", None)
        );
        assert_eq!(u.display(), "gs://bucket/dir/model.safetensors");
        assert_eq!(u.path().unwrap().as_ref(), "dir/model.safetensors");
        let u = StoreUrl::parse("az://weights/m/").unwrap();
        assert_eq!((u.scheme, u.key.as_str()), (Scheme::Azure, "m/"));
        assert_eq!(u.with_key("m/a.json").display(), "az://weights/m/a.json");
        let u =
            StoreUrl::parse("abfss://weights@acct.dfs.core.windows.net/m/x.safetensors").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.account.as_deref(), u.key.as_str()),
            ("weights", Some("acct"), "m/x.safetensors")
        );
        assert_eq!(
            u.display(),
            "abfss://weights@acct.dfs.core.windows.net/m/x.safetensors"
        );
        let u = StoreUrl::parse("S3://b").unwrap();
        assert_eq!((u.scheme, u.key.as_str()), (Scheme::S3, ""));
        assert_eq!(u.display(), "s3://b/");
        for bad in [
            "gs:///key",
            "az://",
            "gs://b/k?sig=secret",
            "gs://user@b/k",
            "abfss://c@acct.example.com/k",
            "https://b/k",
        ] {
            let e = StoreUrl::parse(bad).unwrap_err();
            assert!(matches!(e.problem, Problem::BadUrl(_)), "{bad}: {e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        assert!(StoreUrl::parse("gs://b/a//b").unwrap().path().is_err());
    }

    #[test]
    fn errors_keep_the_status_and_drop_the_url() {
        let e = object_store::Error::Generic {
            store: "MicrosoftAzure",
            source: "Error performing GET http://127.0.0.1:1/acct/c/k?sig=SECRET in 3ms, after 2 retries, max_retries: 2, retry_timeout: 30s  - Server returned non-2xx status code: 503 Service Unavailable: <Error><Code>ServerBusy</Code></Error>".into(),
        };
        let e = error("az://c/k", "hint", e);
        assert_eq!(
            e.problem,
            Problem::Status {
                status: 503,
                attempts: 3,
                detail: "ServerBusy".into()
            }
        );
        assert!(!e.to_string().contains("SECRET"), "{e}");
    }

    #[test]
    fn block_on_runs_and_cancels_at_the_deadline() {
        assert_eq!(block_on(async { 7 }, None), Ok(7));
        let soon = Instant::now() + Duration::from_millis(50);
        assert_eq!(
            block_on(std::future::pending::<()>(), Some(soon)),
            Err(Unfinished::DeadlinePassed)
        );
    }
}
