//! Manifests of a directory's files in the payload format of OpenSSF
//! model signing (the `model-signing` package, v1.x): an in-toto
//! Statement v1 whose predicate lists every file with its sha256.
//!
//! ```json
//! {
//!   "_type": "https://in-toto.io/Statement/v1",
//!   "subject": [{"name": "<directory name>", "digest": {"sha256": "<root>"}}],
//!   "predicateType": "https://model_signing/signature/v1.0",
//!   "predicate": {
//!     "serialization": {"method": "files", "hash_type": "sha256",
//!                       "allow_symlinks": false, "ignore_paths": [".git", ...]},
//!     "resources": [{"name": "a/b.bin", "algorithm": "sha256", "digest": "<hex>"}, ...]
//!   }
//! }
//! ```
//!
//! Resources are sorted by path component (Python's `pathlib` order:
//! `a/b.bin` before `a.txt`); the root digest is the sha256 of the
//! resources' raw 32-byte digests concatenated in that order. A signature
//! bundle (`model.sig`, a Sigstore bundle v0.3 whose DSSE envelope carries
//! the statement in base64) is read for its statement only: **the
//! signature is not checked** (use `model_signing verify` for that).

use std::path::Path;

use serde_json::{json, Value};

use super::error::DigestError;
use super::sha::{Hasher, Sha256Digest};

/// The in-toto statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// model-signing's predicate type (v1.0).
pub const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
/// The predicate type of model-signing 0.2, whose subjects are the files.
pub const PREDICATE_TYPE_V0_1: &str = "https://model_signing/Digests/v0.1";
/// The DSSE payload type of the statement in a bundle.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A manifest: every file of a model with its sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The model's name (its directory's name; informative only).
    pub model_name: String,
    /// Relative `/`-separated path and digest of every file, in
    /// model-signing's order.
    pub files: Vec<(String, Sha256Digest)>,
    /// The paths left out (relative to the model directory).
    pub ignore_paths: Vec<String>,
    /// Whether symbolic links were followed.
    pub allow_symlinks: bool,
}

/// Where a manifest was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestSource {
    /// An unsigned statement (what `hash --write-manifest` writes).
    Statement,
    /// The statement inside a signature bundle, signature not checked.
    Bundle,
}

/// model-signing's order: by path component.
fn sort(files: &mut [(String, Sha256Digest)]) {
    files.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
}

impl Manifest {
    /// A manifest of `files` (sorted here).
    pub fn new(
        model_name: impl Into<String>,
        mut files: Vec<(String, Sha256Digest)>,
        ignore_paths: Vec<String>,
        allow_symlinks: bool,
    ) -> Manifest {
        sort(&mut files);
        Manifest {
            model_name: model_name.into(),
            files,
            ignore_paths,
            allow_symlinks,
        }
    }

    /// The subject's digest: sha256 over the files' digests in order.
    pub fn root_digest(&self) -> Sha256Digest {
        let mut h = Hasher::new();
        for (_, d) in &self.files {
            h.update(&d.0);
        }
        h.finish()
    }

    /// The in-toto statement as JSON text, indented by two spaces (as
    /// model-signing writes it), without a final newline. (Text rather than a
    /// `serde_json` value, so no serde_json type is in the public API.)
    pub fn to_statement_json(&self) -> String {
        format!("{:#}", self.to_statement())
    }

    /// The in-toto statement.
    fn to_statement(&self) -> Value {
        let resources: Vec<Value> = self
            .files
            .iter()
            .map(|(name, d)| json!({"name": name, "algorithm": "sha256", "digest": d.hex()}))
            .collect();
        let mut serialization = json!({
            "method": "files",
            "hash_type": "sha256",
            "allow_symlinks": self.allow_symlinks,
        });
        if !self.ignore_paths.is_empty() {
            serialization["ignore_paths"] = json!(self.ignore_paths);
        }
        json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": self.model_name, "digest": {"sha256": self.root_digest().hex()}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": {"serialization": serialization, "resources": resources},
        })
    }

    /// Reads a statement (v1.0, or the v0.1 one of model-signing 0.2),
    /// checking its types, digests and root digest; `problem` errors say
    /// what is wrong.
    fn from_statement(v: &Value) -> Result<Manifest, String> {
        if v["_type"] != STATEMENT_TYPE {
            return Err(format!(
                "not an in-toto statement v1 (_type is {})",
                v["_type"]
            ));
        }
        let subjects = v["subject"]
            .as_array()
            .ok_or("the statement has no subject list")?;
        let digest_of = |d: &Value, what: &str| -> Result<Sha256Digest, String> {
            d.as_str()
                .ok_or_else(|| format!("{what}: no sha256 digest"))?
                .parse()
                .map_err(|e| format!("{what}: {e}"))
        };
        match v["predicateType"].as_str() {
            Some(PREDICATE_TYPE) => {}
            Some(PREDICATE_TYPE_V0_1) => {
                let mut files = Vec::new();
                for s in subjects {
                    let name = s["name"].as_str().ok_or("a subject has no name")?;
                    files.push((name.to_string(), digest_of(&s["digest"]["sha256"], name)?));
                }
                return Ok(Manifest::new("", files, Vec::new(), false));
            }
            other => {
                return Err(format!(
                    "predicate type {} is not model-signing's ({PREDICATE_TYPE})",
                    other.map_or("missing".to_string(), |s| format!("{s:?}"))
                ))
            }
        }
        let [subject] = subjects.as_slice() else {
            return Err(format!("{} subjects, not one", subjects.len()));
        };
        let predicate = &v["predicate"];
        let ser = &predicate["serialization"];
        if ser["method"] != "files" {
            return Err(format!(
                "serialization method {} is not supported (only \"files\": one digest per file)",
                ser["method"]
            ));
        }
        if ser["hash_type"] != "sha256" {
            return Err(format!(
                "hash type {} is not supported (only sha256)",
                ser["hash_type"]
            ));
        }
        let resources = predicate["resources"]
            .as_array()
            .ok_or("the predicate has no resources")?;
        let mut files = Vec::with_capacity(resources.len());
        let mut root = Hasher::new();
        for r in resources {
            let name = r["name"].as_str().ok_or("a resource has no name")?;
            if r["algorithm"] != "sha256" {
                return Err(format!(
                    "{name}: algorithm {} is not sha256",
                    r["algorithm"]
                ));
            }
            let d = digest_of(&r["digest"], name)?;
            root.update(&d.0);
            files.push((name.to_string(), d));
        }
        let expected = digest_of(&subject["digest"]["sha256"], "the subject")?;
        if root.finish() != expected {
            return Err(format!(
                "inconsistent: the subject's digest is {expected}, but the resources hash to another"
            ));
        }
        let ignore_paths = ser["ignore_paths"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let model_name = subject["name"].as_str().unwrap_or_default().to_string();
        let allow_symlinks = ser["allow_symlinks"] == true;
        Ok(Manifest::new(
            model_name,
            files,
            ignore_paths,
            allow_symlinks,
        ))
    }

    /// The statement inside a Sigstore bundle's DSSE envelope, **without
    /// checking the signature**.
    fn from_bundle(v: &Value) -> Result<Manifest, String> {
        let envelope = &v["dsseEnvelope"];
        if envelope["payloadType"] != PAYLOAD_TYPE {
            return Err(format!(
                "the bundle's payload type is {}, not {PAYLOAD_TYPE}",
                envelope["payloadType"]
            ));
        }
        let payload = envelope["payload"]
            .as_str()
            .ok_or("the bundle's envelope has no payload")?;
        let bytes = base64_decode(payload).ok_or("the bundle's payload is not base64")?;
        let statement: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the bundle's payload is not JSON: {e}"))?;
        Manifest::from_statement(&statement)
    }

    /// Reads a statement or a bundle (told apart by their fields).
    ///
    /// # Errors
    /// The file cannot be read, is not JSON, or is neither.
    pub fn read(path: &Path) -> Result<(Manifest, ManifestSource), DigestError> {
        let bad = |problem: String| DigestError::Manifest {
            path: path.to_path_buf(),
            problem,
        };
        let text = std::fs::read(path).map_err(|e| crate::Error::io(path, e))?;
        let v: Value = serde_json::from_slice(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        if v.get("dsseEnvelope").is_some() {
            Manifest::from_bundle(&v)
                .map(|m| (m, ManifestSource::Bundle))
                .map_err(bad)
        } else {
            Manifest::from_statement(&v)
                .map(|m| (m, ManifestSource::Statement))
                .map_err(bad)
        }
    }

    /// Compares the manifest with the digests of the files found.
    pub fn check(&self, found: &[(String, Sha256Digest)]) -> Check {
        let expected: std::collections::BTreeMap<&str, &Sha256Digest> =
            self.files.iter().map(|(n, d)| (n.as_str(), d)).collect();
        let actual: std::collections::BTreeMap<&str, &Sha256Digest> =
            found.iter().map(|(n, d)| (n.as_str(), d)).collect();
        let mut check = Check::default();
        for (name, want) in &expected {
            match actual.get(name) {
                None => check.missing.push(name.to_string()),
                Some(got) if got != want => {
                    check.mismatched.push((name.to_string(), **want, **got))
                }
                Some(_) => check.matched += 1,
            }
        }
        check.extra = actual
            .keys()
            .filter(|n| !expected.contains_key(*n))
            .map(|n| n.to_string())
            .collect();
        check
    }
}

/// What [`Manifest::check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Check {
    /// Files whose digest matches.
    pub matched: usize,
    /// Files whose digest differs: name, expected, found.
    pub mismatched: Vec<(String, Sha256Digest, Sha256Digest)>,
    /// Files in the manifest but not found.
    pub missing: Vec<String>,
    /// Files found but not in the manifest.
    pub extra: Vec<String>,
}

impl Check {
    /// Whether everything matches.
    pub fn ok(&self) -> bool {
        self.mismatched.is_empty() && self.missing.is_empty() && self.extra.is_empty()
    }
}

/// The DSSE payload: standard base64 (what Sigstore bundles carry),
/// padding optional.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
    use base64::engine::DecodePaddingMode;
    const STANDARD: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    base64::Engine::decode(&STANDARD, text.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_statement_round_trip() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbA").unwrap(), b"hell");
        assert_eq!(base64_decode("aGVs").unwrap(), b"hel");
        assert!(base64_decode("a").is_none());
        let d = Sha256Digest::of(b"x");
        let m = Manifest::new(
            "m",
            vec![("a.txt".into(), d), ("a/b".into(), d)],
            vec![".git".into()],
            false,
        );
        assert_eq!(m.files[0].0, "a/b");
        let back = Manifest::from_statement(&m.to_statement()).unwrap();
        assert_eq!(back, m);
        // The text form is what serde_json's pretty printer writes.
        let text = m.to_statement_json();
        assert_eq!(
            text,
            serde_json::to_string_pretty(&m.to_statement()).unwrap()
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(Manifest::from_statement(&parsed).unwrap(), m);
        let mut broken = m.to_statement();
        broken["predicate"]["resources"][0]["digest"] = json!(Sha256Digest::of(b"y").hex());
        assert!(Manifest::from_statement(&broken)
            .unwrap_err()
            .contains("inconsistent"));
        let check = m.check(&[("a/b".into(), Sha256Digest::of(b"y")), ("c".into(), d)]);
        assert_eq!(check.missing, ["a.txt"]);
        assert_eq!(check.extra, ["c"]);
        assert_eq!(check.mismatched.len(), 1);
        assert!(!check.ok());
    }
}
