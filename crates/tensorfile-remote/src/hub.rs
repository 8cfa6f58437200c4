//! The Hugging Face Hub, addressed as huggingface_hub does: `HF_ENDPOINT`,
//! `HF_TOKEN` (or the token file huggingface_hub writes), the
//! `resolve/REVISION/PATH` URL of a file and the `api/models/REPO/tree/REVISION`
//! listing of a directory.

use std::path::PathBuf;

use url::Url;

use crate::error::{Problem, RemoteError};
use crate::http::{Client, Endpoint};
use crate::s3::Listed;
use crate::secret::Secret;

/// What a 401 or 403 from the Hub means.
pub(crate) const DENIED: &str = "the repository needs a token, or the token lacks access to it (gated or private): set HF_TOKEN or log in with `hf auth login`";

/// The Hub's address and the token sent to it (and to no other host).
#[derive(Debug, Clone)]
pub struct Hub {
    endpoint: Url,
    token: Option<Secret>,
}

impl Hub {
    /// The Hub as the environment configures it: `HF_ENDPOINT` (default
    /// `https://huggingface.co`), the token from `HF_TOKEN` (or the older
    /// `HUGGING_FACE_HUB_TOKEN`), else from the file `HF_TOKEN_PATH`, else
    /// `$HF_HOME/token` (`HF_HOME` defaulting to
    /// `$XDG_CACHE_HOME/huggingface`, then `~/.cache/huggingface`), as
    /// huggingface_hub reads it.
    ///
    /// # Errors
    /// `HF_ENDPOINT` is not an http(s) URL.
    pub fn from_env() -> Result<Hub, RemoteError> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        let endpoint = var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into());
        let endpoint: Url = endpoint.trim_end_matches('/').parse().map_err(|e| {
            RemoteError::new(
                "hf://",
                Problem::BadUrl(format!("HF_ENDPOINT is not a URL: {e}")),
            )
        })?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(RemoteError::new(
                "hf://",
                Problem::BadUrl("HF_ENDPOINT must be an http(s) URL".into()),
            ));
        }
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let path = token_path()?;
                let text = std::fs::read_to_string(path).ok()?;
                Some(text.trim().to_string()).filter(|t| !t.is_empty())
            })
            .map(|t| Secret::new(t.trim()));
        Ok(Hub { endpoint, token })
    }

    /// Whether a token will be sent.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The endpoint of a file: its `resolve` URL, with the token.
    pub(crate) fn file(&self, repo: &Repo, path: &str) -> Endpoint {
        let url = format!(
            "{}/{}{}/resolve/{}/{}",
            self.base(),
            repo.kind.url_prefix(),
            repo.id,
            quote(&repo.revision, false),
            quote(path, true)
        );
        self.endpoint_for(url)
    }

    fn base(&self) -> String {
        self.endpoint.as_str().trim_end_matches('/').to_string()
    }

    /// An endpoint for a URL on the Hub; the token goes only to the Hub's
    /// own origin.
    fn endpoint_for(&self, url: String) -> Endpoint {
        let url: Url = url.parse().unwrap_or_else(|_| self.endpoint.clone());
        let token = (url.origin() == self.endpoint.origin())
            .then(|| self.token.clone())
            .flatten();
        Endpoint::Http {
            url,
            token,
            denied_hint: DENIED,
        }
    }

    /// The files directly in `dir` (`""` or ending in `/`) of the repository,
    /// through `api/{models,datasets}/REPO/tree/REVISION[/DIR]`, every page,
    /// with the sha256 of LFS files.
    ///
    /// # Errors
    /// The requests fail or the answer is not a tree.
    pub(crate) fn list(
        &self,
        client: &Client,
        repo: &Repo,
        dir: &str,
    ) -> Result<Vec<Listed>, RemoteError> {
        let display = format!("{}{dir}", repo.display());
        let sub = dir.trim_end_matches('/');
        let mut url = format!(
            "{}/api/{}/{}/tree/{}",
            self.base(),
            repo.kind.api_name(),
            repo.id,
            quote(&repo.revision, false)
        );
        if !sub.is_empty() {
            url.push('/');
            url.push_str(&quote(sub, false));
        }
        let mut out = Vec::new();
        for _page in 0..10_000 {
            let (body, link) =
                client.get_document(&display, &self.endpoint_for(url.clone()), 64 << 20)?;
            let bad = |what: String| RemoteError::new(&display, Problem::Listing(what));
            let entries: Vec<serde_json::Value> = serde_json::from_slice(&body)
                .map_err(|e| bad(format!("the Hub's tree is not a JSON list: {e}")))?;
            for e in entries {
                if e["type"] != "file" {
                    continue;
                }
                let Some(path) = e["path"].as_str() else {
                    return Err(bad("a tree entry without a path".into()));
                };
                let name = path.strip_prefix(dir).unwrap_or(path);
                if name.is_empty() || name.contains('/') {
                    continue;
                }
                out.push(Listed {
                    name: name.to_string(),
                    size: e["size"].as_u64().unwrap_or(0),
                    sha256: e["lfs"]["oid"]
                        .as_str()
                        .filter(|o| o.len() == 64 && o.bytes().all(|b| b.is_ascii_hexdigit()))
                        .map(str::to_ascii_lowercase),
                });
            }
            match link.as_deref().and_then(next_link) {
                Some(next) if next == url => {
                    return Err(RemoteError::new(
                        &display,
                        Problem::Listing("the next page's link is this page's".into()),
                    ))
                }
                Some(next) => url = next,
                None => return Ok(out),
            }
        }
        Err(RemoteError::new(
            &display,
            Problem::Listing("more than 10000 pages".into()),
        ))
    }
}

/// The token file huggingface_hub writes.
fn token_path() -> Option<PathBuf> {
    let var = |n: &str| std::env::var_os(n).filter(|v| !v.is_empty());
    if let Some(p) = var("HF_TOKEN_PATH") {
        return Some(PathBuf::from(p));
    }
    let home = match var("HF_HOME") {
        Some(h) => PathBuf::from(h),
        None => {
            let cache = var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            cache.join("huggingface")
        }
    };
    Some(home.join("token"))
}

/// The `rel="next"` target of a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"")
            .then(|| {
                target
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

/// Percent-encodes as Python's `urllib.parse.quote` does (`/` kept when
/// `keep_slash`, as in `quote(path)`; escaped, as in `quote(x, safe="")`).
pub(crate) fn quote(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let plain = b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (keep_slash && b == b'/');
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (a revision given as `refs%2Fpr%2F1`).
fn unquote(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A kind of repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    /// A model (the default).
    Model,
    /// A dataset (`hf://datasets/ORG/NAME`).
    Dataset,
}

impl RepoKind {
    fn url_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        }
    }
    fn api_name(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }
}

/// A repository at a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// Model or dataset.
    pub kind: RepoKind,
    /// `ORG/NAME`.
    pub id: String,
    /// A branch, tag or commit (default `main`).
    pub revision: String,
    /// Whether the revision was given (it is then shown).
    pub explicit_revision: bool,
}

impl Repo {
    /// `hf://[datasets/]ORG/NAME[@REVISION]/`.
    pub fn display(&self) -> String {
        let rev = if self.explicit_revision {
            format!("@{}", quote(&self.revision, false))
        } else {
            String::new()
        };
        format!("hf://{}{}{rev}/", self.kind.url_prefix(), self.id)
    }
}

/// Splits `hf://[datasets/|models/]ORG/NAME[@REVISION][/PATH]` into the
/// repository and the path in it (`""` for the whole repository).
///
/// # Errors
/// Not of that form.
pub fn parse_hf(url: &str) -> Result<(Repo, String), RemoteError> {
    let bad = |what: &str| RemoteError::new(url, Problem::BadUrl(what.into()));
    let rest = url
        .strip_prefix("hf://")
        .ok_or_else(|| bad("not an hf:// URL"))?;
    let (kind, rest) = if let Some(r) = rest.strip_prefix("datasets/") {
        (RepoKind::Dataset, r)
    } else if let Some(r) = rest.strip_prefix("models/") {
        (RepoKind::Model, r)
    } else {
        (RepoKind::Model, rest)
    };
    let mut parts = rest.splitn(3, '/');
    let org = parts.next().unwrap_or("");
    let name_rev = parts.next().unwrap_or("");
    let path = parts.next().unwrap_or("").to_string();
    let (name, revision) = match name_rev.split_once('@') {
        Some((n, r)) => (n, Some(unquote(r))),
        None => (name_rev, None),
    };
    let valid = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    if !valid(org) || !valid(name) {
        return Err(bad("expected hf://ORG/REPO[@REVISION][/PATH]"));
    }
    if revision.as_deref().is_some_and(str::is_empty) {
        return Err(bad("an empty revision after @"));
    }
    if path.split('/').any(|s| s == "..") {
        return Err(bad("a path with .."));
    }
    Ok((
        Repo {
            kind,
            id: format!("{org}/{name}"),
            explicit_revision: revision.is_some(),
            revision: revision.unwrap_or_else(|| "main".into()),
        },
        path,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_urls() {
        let (repo, path) = parse_hf("hf://org/repo").unwrap();
        assert_eq!(
            (repo.id.as_str(), repo.revision.as_str(), path.as_str()),
            ("org/repo", "main", "")
        );
        let (repo, path) = parse_hf("hf://org/repo@refs%2Fpr%2F1/sub/model.safetensors").unwrap();
        assert_eq!(repo.revision, "refs/pr/1");
        assert_eq!(path, "sub/model.safetensors");
        assert_eq!(repo.display(), "hf://org/repo@refs%2Fpr%2F1/");
        let (repo, _) = parse_hf("hf://datasets/org/data@v1/x").unwrap();
        assert_eq!(repo.kind, RepoKind::Dataset);
        for bad in [
            "hf://",
            "hf://org",
            "hf://org/",
            "hf://o rg/r",
            "hf://org/repo@/x",
            "hf://org/repo/../x",
        ] {
            assert!(parse_hf(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quoting_as_python() {
        assert_eq!(quote("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(quote("a b/c.safetensors", true), "a%20b/c.safetensors");
        assert_eq!(unquote("refs%2fpr%2F1"), "refs/pr/1");
        assert_eq!(unquote("100%"), "100%");
    }

    #[test]
    fn link_headers() {
        let l = r#"<https://hub/api/models/o/r/tree/main?cursor=x>; rel="next""#;
        assert_eq!(
            next_link(l).as_deref(),
            Some("https://hub/api/models/o/r/tree/main?cursor=x")
        );
        assert_eq!(next_link(r#"<https://x>; rel="prev""#), None);
    }
}
