//! The certificates HTTPS trusts, for both clients (ureq's and
//! object_store's): Mozilla's roots (webpki's), never the system's, plus
//! the certificates of the PEM bundle `SSL_CERT_FILE` names (a private
//! CA: MinIO, a proxy, Azurite with a certificate).
//!
//! | variable | read | why |
//! | --- | --- | --- |
//! | `SSL_CERT_FILE` | yes: its certificates are added to Mozilla's roots | the one variable OpenSSL, curl, Python's `ssl` and rustls' native-certs all read; adding (not replacing) keeps public endpoints (the Hub, the stores) working beside a private one |
//! | `AWS_CA_BUNDLE`, `REQUESTS_CA_BUNDLE` | no (a certificate error says so when one is set) | each is one tool's (the AWS SDKs', Python requests'), replaces the roots rather than adding to them, and our clients serve every URL of a command, not one service |
//!
//! The file is read once per process for each path; one that cannot be
//! read or holds no certificate is an error naming the variable and the
//! path at the first request (never silently ignored).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::Problem;

/// The variable naming extra trusted certificates (a PEM bundle).
pub const CA_VAR: &str = "SSL_CERT_FILE";

/// Certificates (DER) added to the roots, or why `SSL_CERT_FILE` is not
/// usable.
pub(crate) type Extra = Result<Arc<Vec<Vec<u8>>>, Problem>;

/// The certificates of the bundle `SSL_CERT_FILE` names in this process's
/// environment (`Ok` and empty: unset).
pub(crate) fn extra_roots() -> Extra {
    extra_roots_of(std::env::var_os(CA_VAR).map(|p| p.to_string_lossy().into_owned()))
}

/// The certificates of the bundle at `path` (`None` or empty: none), read
/// once per process for each path.
pub(crate) fn extra_roots_of(path: Option<String>) -> Extra {
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return Ok(Arc::default());
    };
    static READ: OnceLock<Mutex<HashMap<String, Extra>>> = OnceLock::new();
    let read = READ.get_or_init(Default::default);
    if let Some(r) = read.lock().unwrap_or_else(|e| e.into_inner()).get(&path) {
        return r.clone();
    }
    let got = load(&path);
    read.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path, got.clone());
    got
}

fn load(path: &str) -> Extra {
    let bad = |why: String| Problem::CaBundle {
        var: CA_VAR,
        path: path.to_string(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&bytes) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c.der().to_vec()),
            Ok(_) => {}
            Err(e) => return Err(bad(format!("not a PEM bundle: {e}"))),
        }
    }
    if certs.is_empty() {
        return Err(bad("it holds no PEM certificate".into()));
    }
    Ok(Arc::new(certs))
}

/// ureq's TLS settings: Mozilla's roots as ureq has them, or (with
/// `extra`) Mozilla's roots and those certificates. ring is the provider
/// (ureq's default with its `rustls` feature).
pub(crate) fn ureq_config(extra: &[Vec<u8>]) -> ureq::tls::TlsConfig {
    use ureq::tls::{Certificate, RootCerts, TlsConfig};
    if extra.is_empty() {
        return TlsConfig::default();
    }
    let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|c| Certificate::from_der(c.as_ref()).to_owned())
        .chain(extra.iter().map(|c| Certificate::from_der(c).to_owned()));
    TlsConfig::builder()
        .root_certs(RootCerts::from(roots))
        .build()
}

/// ureq's TLS settings from `SSL_CERT_FILE`, for the small agents of the
/// credential sources and probes: an unusable file gives Mozilla's roots
/// alone (the request that needs the CA then fails with a certificate
/// error, and the main client names the file).
pub(crate) fn ureq_config_lenient() -> ureq::tls::TlsConfig {
    match extra_roots() {
        Ok(extra) => ureq_config(&extra),
        Err(_) => ureq_config(&[]),
    }
}

/// The problem of an error whose chain holds a refused server
/// certificate (rustls's `InvalidCertificate`, or its words in an error
/// made of text), else `None`.
pub(crate) fn certificate_problem(e: &(dyn std::error::Error + 'static)) -> Option<Problem> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(p) = rustls_certificate(s).or_else(|| certificate_in_text(&s.to_string())) {
            return Some(p);
        }
        // io::Error's `source` skips the error it holds: look inside.
        if let Some(inner) = s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if let Some(p) = rustls_certificate(inner) {
                return Some(p);
            }
        }
        source = s.source();
    }
    None
}

fn rustls_certificate(e: &(dyn std::error::Error + 'static)) -> Option<Problem> {
    match e.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(c) => Some(refused(format!("{c:?}"))),
        _ => None,
    }
}

/// A refused certificate in an error's text (rustls says `invalid peer
/// certificate: WHY`).
pub(crate) fn certificate_in_text(text: &str) -> Option<Problem> {
    const SAID: &str = "invalid peer certificate: ";
    let at = text.find(SAID)? + SAID.len();
    let why: String = text[at..]
        .chars()
        .take_while(|c| !matches!(c, ')' | '\n' | ','))
        .take(120)
        .collect();
    Some(refused(why.trim().to_string()))
}

fn refused(why: String) -> Problem {
    let also = ["AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE"]
        .into_iter()
        .find(|v| std::env::var_os(v).is_some_and(|p| !p.is_empty()));
    Problem::Certificate {
        why,
        set: std::env::var_os(CA_VAR).is_some_and(|p| !p.is_empty()),
        unread: also,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_adds_its_certificates_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("ca.pem");
        // The test kit's CA, and a bundle of it twice.
        let pem = tensorfile_testkit::tls::CA_PEM.repeat(2);
        std::fs::write(&good, pem).unwrap();
        let got = extra_roots_of(Some(good.to_string_lossy().into_owned())).unwrap();
        assert_eq!(got.len(), 2);
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let missing = dir.path().join("missing.pem");
        for path in [empty, missing] {
            let shown = path.to_string_lossy().into_owned();
            let e = extra_roots_of(Some(shown.clone())).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("SSL_CERT_FILE") && text.contains(&shown),
                "{text}"
            );
        }
        assert!(extra_roots_of(None).unwrap().is_empty());
    }

    #[test]
    fn a_refused_certificate_is_found_in_text() {
        let p = certificate_in_text(
            "error sending request: client error (Connect): invalid peer certificate: UnknownIssuer",
        )
        .unwrap();
        let Problem::Certificate { why, .. } = &p else {
            panic!("{p:?}")
        };
        assert_eq!(why, "UnknownIssuer");
        assert!(p.to_string().contains("SSL_CERT_FILE"), "{p}");
        assert!(certificate_in_text("connection refused").is_none());
    }
}
