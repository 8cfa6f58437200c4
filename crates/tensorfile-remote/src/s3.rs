//! S3 and S3-compatible stores: configuration from the standard AWS
//! environment and shared files, credentials from the chain of
//! [`crate::creds`], request signing by `rusty-s3` (SigV4, presigned URLs),
//! and `ListObjectsV2` for directories.

use std::sync::Arc;
use std::time::Duration;

use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use url::Url;

use crate::creds::{Chain, Provider, Source};
use crate::error::{Problem, RemoteError};

/// How long a signed URL is valid: each request signs its own.
const SIGNED_FOR: Duration = Duration::from_secs(3600);

/// A bucket and how to reach and sign for it.
pub struct S3Store {
    bucket: Bucket,
    /// `None`: anonymous (`AWS_NO_SIGN_REQUEST=true`).
    provider: Option<Arc<Provider>>,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket.name())
            .field(
                "endpoint",
                &self.bucket.base_url().origin().ascii_serialization(),
            )
            .field("source", &self.provider.as_ref().and_then(|p| p.source()))
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
    /// `AWS_REGION` or `AWS_DEFAULT_REGION` (else the profile's `region`,
    /// else `us-east-1`), credentials from the chain of [`crate::creds`]
    /// (none found, or `AWS_NO_SIGN_REQUEST=true`: anonymous requests, for
    /// public buckets). A custom endpoint is addressed path-style
    /// (`endpoint/bucket/key`), AWS virtual-host style; set
    /// `AWS_S3_ADDRESSING_STYLE` (or the profile's `s3 = addressing_style`)
    /// to `path` or `virtual` to choose.
    ///
    /// # Errors
    /// An endpoint that is not an http(s) URL, a bucket name that cannot
    /// be addressed that way, or a configured credential source that fails.
    pub fn from_env(name: &str) -> Result<S3Store, RemoteError> {
        S3Store::with_chain(name, Chain::from_env())
    }

    /// [`S3Store::from_env`] with the variables `chain` reads.
    ///
    /// # Errors
    /// As [`S3Store::from_env`].
    pub fn with_chain(name: &str, chain: Chain) -> Result<S3Store, RemoteError> {
        let var = |n: &str| chain.var_of(n);
        let region = chain.region().unwrap_or_else(|| "us-east-1".into());
        let custom = var("AWS_ENDPOINT_URL_S3").or_else(|| var("AWS_ENDPOINT_URL"));
        let bad = |what: String| RemoteError::new(format!("s3://{name}"), Problem::BadUrl(what));
        let endpoint = match &custom {
            Some(e) => e.clone(),
            None => format!("https://s3.{region}.amazonaws.com"),
        };
        let endpoint: Url = endpoint
            .parse()
            .map_err(|e| bad(format!("AWS_ENDPOINT_URL is not a URL: {e}")))?;
        let style =
            var("AWS_S3_ADDRESSING_STYLE").or_else(|| chain.profile_setting("s3.addressing_style"));
        let style = match style.as_deref() {
            Some("virtual") => UrlStyle::VirtualHost,
            Some("path") => UrlStyle::Path,
            _ if custom.is_some() => UrlStyle::Path,
            _ => UrlStyle::VirtualHost,
        };
        let bucket = Bucket::new(endpoint, style, name.to_string(), region)
            .map_err(|e| bad(format!("cannot address bucket {name:?}: {e:?}")))?;
        let anonymous = var("AWS_NO_SIGN_REQUEST").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let provider = if anonymous {
            None
        } else {
            Some(Provider::shared(chain)?)
        };
        Ok(S3Store { bucket, provider })
    }

    /// The credential provider (`None`: anonymous by
    /// `AWS_NO_SIGN_REQUEST`).
    #[cfg(feature = "s3-store")]
    pub(crate) fn provider(&self) -> Option<&Arc<Provider>> {
        self.provider.as_ref()
    }

    /// The bucket as rusty-s3 addresses it (endpoint, style, region).
    #[cfg(feature = "s3-store")]
    pub(crate) fn bucket(&self) -> &Bucket {
        &self.bucket
    }

    /// Where its credentials come from (`None`: anonymous).
    pub fn credential_source(&self) -> Option<Source> {
        self.provider.as_ref().and_then(|p| p.source())
    }

    /// The credentials to sign with now (fetched again near their expiry).
    fn credentials(&self) -> Option<Credentials> {
        self.provider
            .as_ref()
            .and_then(|p| p.current())
            .map(|c| c.for_signing())
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
        let creds = self.credentials();
        let creds = creds.as_ref();
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
        match self.credential_source() {
            Some(Source::Environment) => "the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) lack access to it, or have expired",
            Some(Source::WebIdentity) => "the credentials of the web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN) lack access to it",
            Some(Source::Profile(_)) => "the credentials of the profile (AWS_PROFILE, else default) in the shared files lack access to it, or have expired",
            Some(Source::AssumeRole(_)) => "the role of the profile (AWS_PROFILE, else default) lacks access to it",
            Some(Source::Container) => "the container's credentials lack access to it",
            Some(Source::InstanceMetadata) => "the instance's role (from the instance metadata service) lacks access to it",
            None => "the request was anonymous (no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set): the bucket is not public",
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
            let creds = self.credentials();
            let mut action = self.bucket.list_objects_v2(creds.as_ref());
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

/// A multipart upload begun and neither completed nor aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingUpload {
    /// The object's key.
    pub key: String,
    /// The upload's id.
    pub upload_id: String,
}

impl S3Store {
    /// The multipart uploads pending under `prefix` (every key that begins
    /// with it), through `ListMultipartUploads`, every page; `get` fetches
    /// a signed URL's answer.
    ///
    /// # Errors
    /// The requests fail, or the answer is not a listing.
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    pub(crate) fn pending_uploads(
        &self,
        prefix: &str,
        get: impl Fn(Url) -> Result<Vec<u8>, RemoteError>,
    ) -> Result<Vec<PendingUpload>, RemoteError> {
        let display = format!("s3://{}/{prefix}", self.name());
        pending_pages(&display, prefix, |markers| {
            let creds = self.credentials();
            // rusty-s3 has no ListMultipartUploads: ListObjectsV2's
            // request (GET on the bucket) with the other action's query.
            let mut action = self.bucket.list_objects_v2(creds.as_ref());
            let query = action.query_mut();
            query.remove("list-type");
            query.remove("encoding-type");
            query.insert("uploads", "");
            query.insert("prefix", prefix.to_string());
            if let Some((key, id)) = markers {
                query.insert("key-marker", key.clone());
                query.insert("upload-id-marker", id.clone());
            }
            get(action.sign(SIGNED_FOR))
        })
    }

    /// A freshly signed URL for the `DELETE` that aborts `upload`.
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    pub(crate) fn abort_url(&self, upload: &PendingUpload) -> Url {
        let creds = self.credentials();
        self.bucket
            .abort_multipart_upload(creds.as_ref(), &upload.key, &upload.upload_id)
            .sign(SIGNED_FOR)
    }
}

/// Every page of a `ListMultipartUploads` listing (S3's, and GCS's XML
/// API's, which answers the same): `page` fetches the page after the
/// markers given (`None`: the first). The uploads whose key begins with
/// `prefix`.
///
/// # Errors
/// `page` fails, an answer is not a listing, or its markers do not move.
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
pub(crate) fn pending_pages(
    display: &str,
    prefix: &str,
    page: impl Fn(Option<&(String, String)>) -> Result<Vec<u8>, RemoteError>,
) -> Result<Vec<PendingUpload>, RemoteError> {
    let bad = |what: String| RemoteError::new(display, Problem::Listing(what));
    let mut out = Vec::new();
    let mut markers: Option<(String, String)> = None;
    for _page in 0..MAX_PAGES {
        let body = page(markers.as_ref())?;
        let text = String::from_utf8_lossy(&body);
        let listed = parse_pending(&text).map_err(bad)?;
        out.extend(
            listed
                .upload
                .into_iter()
                .filter(|u| u.key.starts_with(prefix))
                .map(|u| PendingUpload {
                    key: u.key,
                    upload_id: u.upload_id,
                }),
        );
        if !listed.is_truncated {
            return Ok(out);
        }
        let next = (
            listed.next_key_marker.unwrap_or_default(),
            listed.next_upload_id_marker.unwrap_or_default(),
        );
        if next.0.is_empty() || markers.as_ref() == Some(&next) {
            return Err(bad("a truncated listing without new markers".into()));
        }
        markers = Some(next);
    }
    Err(bad(format!("more than {MAX_PAGES} pages")))
}

/// One page of a `ListMultipartUploads` answer (the elements read; the
/// others, such as `<Initiator>` and `<Owner>`, are skipped).
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PendingPage {
    #[serde(default)]
    upload: Vec<PendingEntry>,
    #[serde(default)]
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
}

#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PendingEntry {
    key: String,
    upload_id: String,
}

/// Reads a `ListMultipartUploadsResult` (quick-xml: entities, CDATA and
/// namespaces as XML has them).
#[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
fn parse_pending(text: &str) -> Result<PendingPage, String> {
    if !text.contains("ListMultipartUploadsResult") {
        return Err("not a ListMultipartUploads answer".into());
    }
    quick_xml::de::from_str(text).map_err(|e| format!("not a ListMultipartUploads answer: {e}"))
}

/// The most pages of a listing read.
const MAX_PAGES: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(feature = "gcs", feature = "azure", feature = "s3-store"))]
    fn pending_uploads_are_read_from_the_answer() {
        let xml = "<?xml version='1.0' encoding='UTF-8'?>\
            <ListMultipartUploadsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
            <Bucket>b</Bucket><KeyMarker></KeyMarker><IsTruncated>true</IsTruncated>\
            <NextKeyMarker>m/c</NextKeyMarker><NextUploadIdMarker>Y2</NextUploadIdMarker>\
            <Upload><Key>m/a&amp;b.safetensors</Key><UploadId>X1</UploadId>\
            <Initiator><ID>i</ID></Initiator><StorageClass>STANDARD</StorageClass></Upload>\
            <Upload><Key><![CDATA[m/c]]></Key><UploadId>Y&#x32;</UploadId></Upload>\
            </ListMultipartUploadsResult>";
        let page = parse_pending(xml).unwrap();
        let uploads: Vec<(&str, &str)> = page
            .upload
            .iter()
            .map(|u| (u.key.as_str(), u.upload_id.as_str()))
            .collect();
        assert_eq!(uploads, [("m/a&b.safetensors", "X1"), ("m/c", "Y2")]);
        assert!(page.is_truncated);
        assert_eq!(page.next_key_marker.as_deref(), Some("m/c"));
        // None, and one alone (GCS and S3 leave out what is empty).
        let none = parse_pending(
            "<ListMultipartUploadsResult><Bucket>b</Bucket></ListMultipartUploadsResult>",
        )
        .unwrap();
        assert!(none.upload.is_empty() && !none.is_truncated);
        assert!(parse_pending("<Error><Code>AccessDenied</Code></Error>").is_err());
        // Pages are followed by their markers; markers that do not move
        // are refused.
        let pages = [
            "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated><NextKeyMarker>p/a</NextKeyMarker><NextUploadIdMarker>1</NextUploadIdMarker><Upload><Key>p/a</Key><UploadId>1</UploadId></Upload><Upload><Key>q</Key><UploadId>9</UploadId></Upload></ListMultipartUploadsResult>",
            "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated><Upload><Key>p/b</Key><UploadId>2</UploadId></Upload></ListMultipartUploadsResult>",
        ];
        let got = pending_pages("s3://b/p/", "p/", |m| {
            Ok(pages[usize::from(m.is_some())].as_bytes().to_vec())
        })
        .unwrap();
        let keys: Vec<&str> = got.iter().map(|u| u.key.as_str()).collect();
        assert_eq!(keys, ["p/a", "p/b"]);
        let e = pending_pages("s3://b/p/", "p/", |_| Ok(pages[0].as_bytes().to_vec())).unwrap_err();
        assert!(matches!(e.problem, Problem::Listing(_)), "{e}");
    }
}
