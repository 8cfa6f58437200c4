//! HTTPS for the tests: a TLS-terminating proxy ([`TlsProxy`]) on
//! 127.0.0.1 in front of any plain HTTP stand-in (moto, the GCS stand-in,
//! Azurite, [`crate::serve`]), serving a certificate for 127.0.0.1, ::1 and
//! localhost that a private test CA signed ([`ca_file`]: what a client
//! trusts through `SSL_CERT_FILE`).
//!
//! The CA and the server certificate (P-256, valid 2000 to 2125) are
//! committed in `src/tls/`, made by `scripts/make-test-tls.sh` with
//! openssl; the CA's key was dropped once the leaf was signed. Test
//! material only: nothing else trusts that CA.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::http1::Background;

/// The test CA's certificate (PEM).
pub const CA_PEM: &str = include_str!("tls/ca.pem");
/// The server certificate (PEM), for 127.0.0.1, ::1 and localhost.
pub const SERVER_PEM: &str = include_str!("tls/server.pem");
/// The server certificate's key (PKCS#8 PEM).
pub const SERVER_KEY_PEM: &str = include_str!("tls/server.key.pem");

fn tls_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/tls")
}

/// The test CA's certificate as a file: the value of `SSL_CERT_FILE` that
/// makes a client trust [`TlsProxy`] (and the HTTPS Azurite).
pub fn ca_file() -> PathBuf {
    tls_dir().join("ca.pem")
}

/// The server certificate as a file (Azurite's `--cert`).
pub fn server_cert_file() -> PathBuf {
    tls_dir().join("server.pem")
}

/// The server certificate's key as a file (Azurite's `--key`).
pub fn server_key_file() -> PathBuf {
    tls_dir().join("server.key.pem")
}

/// A ureq agent that trusts the test CA alone, statuses as answers (the
/// test kit's own requests to an HTTPS stand-in).
pub fn agent() -> ureq::Agent {
    let ca = ureq::tls::Certificate::from_pem(CA_PEM.as_bytes()).expect("the test CA's PEM");
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&[ca]))
                .build(),
        )
        .build()
        .into()
}

fn server_config() -> Arc<rustls::ServerConfig> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(SERVER_PEM.as_bytes())
        .collect::<Result<_, _>>()
        .expect("the server certificate's PEM");
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY_PEM.as_bytes()).expect("the key's PEM");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("the server certificate and key");
    Arc::new(config)
}

/// A TLS-terminating proxy on 127.0.0.1: each connection's TLS is ended
/// here and its bytes relayed, as they come, to a new connection to the
/// backend (plain HTTP, keep-alive as the two ends want). Dropping it
/// stops accepting; connections end when either side closes (or after a
/// minute idle).
pub struct TlsProxy {
    server: Background,
}

impl std::fmt::Debug for TlsProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsProxy({})", self.url())
    }
}

impl TlsProxy {
    /// A proxy in front of `backend`, an `http://HOST:PORT` URL (a path
    /// after it is ignored).
    ///
    /// # Panics
    /// The URL is not `http://HOST:PORT`, or the port cannot be bound.
    pub fn in_front_of(backend: &str) -> TlsProxy {
        let rest = backend
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("not an http:// URL: {backend}"));
        let authority = rest.split('/').next().unwrap_or(rest).to_string();
        let config = server_config();
        let server = Background::start(move |stream, _| relay(stream, &authority, config.clone()))
            .expect("bind 127.0.0.1:0");
        TlsProxy { server }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.server.port())
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.server.port()
    }
}

/// How long a connection may be idle (both ends silent) before it is
/// closed.
const IDLE_MS: i32 = 60_000;

/// One connection: the handshake, then bytes both ways until either end
/// closes. Blocking sockets, each read only after `poll` says there is
/// something to read (an HTTP client does not write while it waits for
/// an answer, so no write blocks for long).
fn relay(
    mut tcp: TcpStream,
    backend: &str,
    config: Arc<rustls::ServerConfig>,
) -> std::io::Result<()> {
    let mut conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut back = TcpStream::connect(backend)?;
    tcp.set_nodelay(true)?;
    back.set_nodelay(true)?;
    let mut buf = vec![0u8; 16 << 10];
    let result = (|| -> std::io::Result<()> {
        loop {
            while conn.wants_write() {
                conn.write_tls(&mut tcp)?;
            }
            let mut fds = [
                libc::pollfd {
                    fd: tcp.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: back.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfd entries, owned by this frame.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, IDLE_MS) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Ok(());
            }
            if fds[0].revents != 0 {
                if conn.read_tls(&mut tcp)? == 0 {
                    return Ok(());
                }
                if let Err(e) = conn.process_new_packets() {
                    // Tell the client why (an alert), then close.
                    while conn.wants_write() {
                        let _ = conn.write_tls(&mut tcp);
                    }
                    return Err(std::io::Error::other(e));
                }
                loop {
                    match conn.reader().read(&mut buf) {
                        Ok(0) => return Ok(()),
                        Ok(n) => back.write_all(&buf[..n])?,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            if fds[1].revents != 0 {
                let n = back.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                let mut rest = &buf[..n];
                while !rest.is_empty() {
                    let sent = conn.writer().write(rest)?;
                    rest = &rest[sent..];
                    while conn.wants_write() {
                        conn.write_tls(&mut tcp)?;
                    }
                }
            }
        }
    })();
    conn.send_close_notify();
    while conn.wants_write() {
        if conn.write_tls(&mut tcp).is_err() {
            break;
        }
    }
    let _ = tcp.shutdown(Shutdown::Both);
    let _ = back.shutdown(Shutdown::Both);
    result
}
