//! S3 and S3-compatible stores: configuration from the standard AWS
//! environment, request signing by `rusty-s3` (SigV4, presigned URLs), and
//! `ListObjectsV2` for directories.

use std::time::Duration;

use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use url::Url;

use crate::error::{Problem, RemoteError};

/// How long a signed URL is valid: each request signs its own.
const SIGNED_FOR: Duration = Duration::from_secs(3600);

/// A bucket and how to reach and sign for it.
pub struct S3Store {
    bucket: Bucket,
    credentials: Option<Credentials>,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket.name())
            .field(
                "endpoint",
                &self.bucket.base_url().origin().ascii_serialization(),
            )
            .field("signed", &self.credentials.is_some())
            .finish()
    }
}

/// One entry of a listing.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The name below the listed prefix.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256 in hex, where the listing gives it (the Hub's LFS oid).
    pub sha256: Option<String>,
}

impl S3Store {
    /// The bucket `name`, configured from the environment:
    /// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (else AWS itself),
    /// `AWS_REGION` or `AWS_DEFAULT_REGION` (else `us-east-1`),
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`
    /// (none, or `AWS_NO_SIGN_REQUEST=true`: anonymous requests, for public
    /// buckets). A custom endpoint is addressed path-style
    /// (`endpoint/bucket/key`), AWS virtual-host style; set
    /// `AWS_S3_ADDRESSING_STYLE` to `path` or `virtual` to choose.
    ///
    /// # Errors
    /// An endpoint that is not an http(s) URL, or a bucket name that cannot
    /// be addressed that way.
    pub fn from_env(name: &str) -> Result<S3Store, RemoteError> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        let region = var("AWS_REGION")
            .or_else(|| var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".into());
        let custom = var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL"));
        let bad = |what: String| RemoteError::new(format!("s3://{name}"), Problem::BadUrl(what));
        let endpoint = match &custom {
            Some(e) => e.clone(),
            None => format!("https://s3.{region}.amazonaws.com"),
        };
        let endpoint: Url = endpoint
            .parse()
            .map_err(|e| bad(format!("AWS_ENDPOINT_URL is not a URL: {e}")))?;
        let style = match var("AWS_S3_ADDRESSING_STYLE").as_deref() {
            Some("virtual") => UrlStyle::VirtualHost,
            Some("path") => UrlStyle::Path,
            _ if custom.is_some() => UrlStyle::Path,
            _ => UrlStyle::VirtualHost,
        };
        let bucket = Bucket::new(endpoint, style, name.to_string(), region)
            .map_err(|e| bad(format!("cannot address bucket {name:?}: {e:?}")))?;
        let anonymous = var("AWS_NO_SIGN_REQUEST").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let credentials = if anonymous {
            None
        } else {
            Credentials::from_env()
        };
        Ok(S3Store {
            bucket,
            credentials,
        })
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        self.bucket.name()
    }

    /// A freshly signed URL for a `GET` (or `HEAD`) of `key`, with the
    /// `x-amz-*` headers the request will carry signed in.
    pub(crate) fn signed_url(
        &self,
        key: &str,
        head: bool,
        amz: &[(&'static str, &'static str)],
    ) -> Url {
        let creds = self.credentials.as_ref();
        if head {
            let mut action = self.bucket.head_object(creds, key);
            for (n, v) in amz {
                action.headers_mut().insert(*n, *v);
            }
            action.sign(SIGNED_FOR)
        } else {
            let mut action = self.bucket.get_object(creds, key);
            for (n, v) in amz {
                action.headers_mut().insert(*n, *v);
            }
            action.sign(SIGNED_FOR)
        }
    }

    /// What a 401 or 403 means for this store.
    pub(crate) fn denied_hint(&self) -> &'static str {
        if self.credentials.is_some() {
            "the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) lack access to it, or have expired"
        } else {
            "the request was anonymous (no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set): the bucket is not public"
        }
    }

    /// The objects directly below `prefix` (which ends in `/` or is empty),
    /// through `ListObjectsV2`, every page; `get` fetches a signed URL's
    /// answer (the HTTP layer, which this module does not know).
    ///
    /// # Errors
    /// The requests fail, or the answer is not a listing.
    pub(crate) fn list(
        &self,
        prefix: &str,
        get: impl Fn(Url) -> Result<Vec<u8>, RemoteError>,
    ) -> Result<Vec<Listed>, RemoteError> {
        let display = format!("s3://{}/{prefix}", self.name());
        let bad = |what: String| RemoteError::new(&display, Problem::Listing(what));
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        for _page in 0..MAX_PAGES {
            let mut action = self.bucket.list_objects_v2(self.credentials.as_ref());
            action.with_prefix(prefix);
            action.with_delimiter("/");
            if let Some(t) = &token {
                action.with_continuation_token(t.clone());
            }
            let body = get(action.sign(SIGNED_FOR))?;
            let text = String::from_utf8_lossy(&body);
            let page = rusty_s3::actions::ListObjectsV2::parse_response(&text)
                .map_err(|e| bad(format!("not a ListObjectsV2 answer: {e}")))?;
            for c in page.contents {
                if let Some(name) = c.key.strip_prefix(prefix) {
                    if !name.is_empty() && !name.contains('/') {
                        out.push(Listed {
                            name: name.to_string(),
                            size: c.size.unwrap_or(0),
                            sha256: None,
                        });
                    }
                }
            }
            match page.next_continuation_token {
                Some(t) if token.as_ref() == Some(&t) => {
                    return Err(bad("the same continuation token twice".into()))
                }
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(out),
            }
        }
        Err(bad(format!("more than {MAX_PAGES} pages")))
    }
}

/// The most pages of a listing read.
const MAX_PAGES: usize = 10_000;
