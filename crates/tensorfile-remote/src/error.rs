//! What went wrong with a remote object, naming it.
//!
//! Every failure is a [`RemoteError`]: the object's public name (an
//! `s3://`, `hf://` or `http(s)://` URL without credentials, signatures or
//! tokens) and a [`Problem`]. Readers see it as an [`std::io::Error`] whose
//! kind follows the problem (`NotFound`, `PermissionDenied`, `InvalidData`,
//! ...), with the `RemoteError` as its inner error.

use std::fmt;
use std::io;

/// A failure of a remote read, naming the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// The object's public name (never a signed URL, never a token).
    pub url: String,
    /// What went wrong.
    pub problem: Problem,
}

/// What went wrong with a remote request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// There is no such object (HTTP 404, S3 `NoSuchKey`).
    NotFound,
    /// 401 or 403: no credentials, or credentials that lack access; `hint`
    /// says which variable or file supplies them.
    Denied {
        /// The HTTP status.
        status: u16,
        /// What to do about it.
        hint: String,
    },
    /// The server answered 200 with the whole body to a `Range` request.
    IgnoredRange,
    /// `Content-Range` is missing or does not describe the range asked for.
    BadContentRange {
        /// What was asked for, as `bytes A-B`.
        asked: String,
        /// What the server said (`None`: no header).
        got: Option<String>,
    },
    /// The body ended before the range did (after every retry).
    ShortBody {
        /// Bytes the range holds.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
    /// The body was longer than the range (or than its `Content-Length`).
    LongBody {
        /// Bytes the range holds.
        expected: u64,
    },
    /// The object changed between two requests.
    Changed {
        /// `ETag`, `Last-Modified` or the length.
        what: &'static str,
        /// Its value when the object was opened.
        before: String,
        /// Its value now.
        now: String,
    },
    /// 416: the range is past the object's end.
    NotSatisfiable {
        /// The range asked for, as `bytes A-B`.
        asked: String,
    },
    /// Another HTTP status, final or still failing after every retry.
    Status {
        /// The status code.
        status: u16,
        /// Requests made.
        attempts: u32,
        /// A short excerpt of the server's error body (S3's `<Code>`).
        detail: String,
    },
    /// A connection failure, a reset or a timeout, still failing after
    /// every retry.
    Transport {
        /// What the HTTP client said (no URL in it).
        message: String,
        /// Requests made.
        attempts: u32,
    },
    /// More redirects than followed, or one without a usable `Location`.
    Redirect(String),
    /// The URL or its configuration is not usable.
    BadUrl(String),
    /// A listing (S3 `ListObjectsV2`, the Hub's tree) that cannot be read.
    Listing(String),
    /// A budget of the client ([`RemoteOptions`](crate::RemoteOptions)) is
    /// used up: no more requests are sent.
    Budget {
        /// Which budget: `requests`, `bytes received` or `time`.
        what: &'static str,
        /// Its limit, as set.
        limit: String,
        /// Why the attempt before was retried, if one was.
        last: Option<Box<Problem>>,
    },
    /// A time limit of the client ([`RemoteOptions`](crate::RemoteOptions))
    /// was hit: connecting, the answer's first byte, or a body that sent
    /// nothing for as long.
    Timeout {
        /// Which limit: `connect`, `first byte` or `no byte`.
        what: &'static str,
        /// Its length.
        limit: std::time::Duration,
        /// Requests made.
        attempts: u32,
    },
    /// A body came slower than the rate floor
    /// ([`RemoteOptions::min_rate`](crate::RemoteOptions::min_rate)).
    TooSlow {
        /// The floor, in bytes per second.
        min_rate: u64,
        /// The window it is measured over.
        window: std::time::Duration,
        /// Bytes received in the window that fell short.
        got: u64,
    },
    /// The server's TLS certificate was refused (not signed by a trusted
    /// root, expired, for another name).
    Certificate {
        /// What the TLS library said (`UnknownIssuer`, `Expired`, ...).
        why: String,
        /// Whether `SSL_CERT_FILE` was set (its certificates were trusted
        /// too).
        set: bool,
        /// A CA variable of another tool that is set but not read
        /// (`AWS_CA_BUNDLE`, `REQUESTS_CA_BUNDLE`).
        unread: Option<&'static str>,
    },
    /// The bundle of extra trusted certificates (`SSL_CERT_FILE`) cannot
    /// be used.
    CaBundle {
        /// The variable naming it.
        var: &'static str,
        /// The path it names.
        path: String,
        /// Why it cannot be used.
        why: String,
    },
    /// A configured source of AWS credentials fails (it names the source,
    /// never a secret).
    Credentials(String),
    /// `HF_HUB_OFFLINE` is set and the file is not in the Hugging Face
    /// cache.
    Offline(String),
    /// The Hugging Face cache holds something it should not (a snapshot
    /// link out of its repository's blobs), named by its path.
    Cache(String),
    /// The object to write is already there, and replacing it was not
    /// asked for.
    Exists,
    /// The process is being stopped ([`crate::interrupt`]): the request
    /// was given up.
    Interrupted,
    /// The bytes do not have the digest the source gives.
    Checksum {
        /// Which digest (`sha256`, the Hub's LFS oid, S3's checksum).
        what: String,
        /// What the source says.
        expected: String,
        /// What the bytes give.
        got: String,
    },
}

impl RemoteError {
    /// An error about `url`.
    pub fn new(url: impl Into<String>, problem: Problem) -> RemoteError {
        RemoteError {
            url: url.into(),
            problem,
        }
    }

    /// The kind of I/O error this is.
    pub fn kind(&self) -> io::ErrorKind {
        match &self.problem {
            Problem::NotFound => io::ErrorKind::NotFound,
            Problem::Denied { .. } => io::ErrorKind::PermissionDenied,
            Problem::Transport { .. } => io::ErrorKind::ConnectionAborted,
            Problem::Timeout { .. } | Problem::TooSlow { .. } => io::ErrorKind::TimedOut,
            Problem::Budget { what: "time", .. } => io::ErrorKind::TimedOut,
            Problem::ShortBody { .. } => io::ErrorKind::UnexpectedEof,
            Problem::BadUrl(_) => io::ErrorKind::InvalidInput,
            Problem::Credentials(_) => io::ErrorKind::PermissionDenied,
            Problem::CaBundle { .. } => io::ErrorKind::InvalidInput,
            Problem::Offline(_) => io::ErrorKind::NotFound,
            Problem::Exists => io::ErrorKind::AlreadyExists,
            // Not `Interrupted`: `write_all` and `io::copy` retry that.
            Problem::Interrupted => io::ErrorKind::Other,
            _ => io::ErrorKind::InvalidData,
        }
    }

    /// Whether this says the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self.problem, Problem::NotFound | Problem::Offline(_))
    }
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.url, self.problem)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotFound => f.write_str("not found (HTTP 404)"),
            Problem::Denied { status, hint } => write!(f, "access denied (HTTP {status}): {hint}"),
            Problem::IgnoredRange => f.write_str(
                "the server ignored the Range header (200 with the whole body instead of 206): it cannot serve parts of the file",
            ),
            Problem::BadContentRange { asked, got: None } => {
                write!(f, "asked for {asked}, got a 206 without Content-Range")
            }
            Problem::BadContentRange {
                asked,
                got: Some(got),
            } => write!(f, "asked for {asked}, got Content-Range {got:?}"),
            Problem::ShortBody { expected, got } => {
                write!(f, "short body: {got} of {expected} bytes received")
            }
            Problem::LongBody { expected } => {
                write!(f, "the body is longer than the {expected} bytes asked for")
            }
            Problem::Changed { what, before, now } => write!(
                f,
                "the object changed while being read ({what} was {before}, now {now})"
            ),
            Problem::NotSatisfiable { asked } => {
                write!(f, "range not satisfiable (HTTP 416) for {asked}")
            }
            Problem::Status {
                status,
                attempts,
                detail,
            } => {
                write!(f, "HTTP {status}")?;
                if !detail.is_empty() {
                    write!(f, " ({detail})")?;
                }
                if *attempts > 1 {
                    write!(f, " after {attempts} attempts")?;
                }
                Ok(())
            }
            Problem::Transport { message, attempts } => {
                write!(f, "{message}")?;
                if *attempts > 1 {
                    write!(f, " (after {attempts} attempts)")?;
                }
                Ok(())
            }
            Problem::Redirect(what) => write!(f, "redirect: {what}"),
            Problem::Timeout {
                what,
                limit,
                attempts,
            } => {
                match *what {
                    "connect" => write!(f, "timed out: no connection within the connect limit of {limit:?}")?,
                    "first byte" => write!(f, "timed out: no answer within the first-byte limit of {limit:?}")?,
                    what => write!(f, "timed out: {what} within {limit:?}")?,
                }
                if *attempts > 1 {
                    write!(f, " (after {attempts} attempts)")?;
                }
                Ok(())
            }
            Problem::TooSlow {
                min_rate,
                window,
                got,
            } => write!(
                f,
                "timed out: slower than the rate floor of {min_rate} bytes/s ({got} bytes in {window:?})"
            ),
            Problem::Budget {
                what: "time",
                limit,
                last,
            } => {
                write!(f, "timed out: the timeout of {limit} for all remote reads ran out")?;
                if let Some(last) = last {
                    write!(f, " (the attempt before: {last})")?;
                }
                Ok(())
            }
            Problem::Budget { what, limit, last } => {
                write!(f, "over the budget of {what} ({limit}): not sent")?;
                if let Some(last) = last {
                    write!(f, " (the attempt before: {last})")?;
                }
                Ok(())
            }
            Problem::BadUrl(what) => f.write_str(what),
            Problem::Listing(what) => write!(f, "cannot list: {what}"),
            Problem::Credentials(what) => write!(f, "no usable AWS credentials: {what}"),
            Problem::Certificate { why, set, unread } => {
                write!(f, "the server's TLS certificate was refused ({why}): ")?;
                if *set {
                    f.write_str("not trusted by Mozilla's roots nor by the certificates of SSL_CERT_FILE")?;
                } else {
                    f.write_str("for a private certificate authority, set SSL_CERT_FILE to a PEM file holding its certificate")?;
                }
                if let Some(v) = unread {
                    write!(f, " ({v} is not read: use SSL_CERT_FILE)")?;
                }
                Ok(())
            }
            Problem::CaBundle { var, path, why } => {
                write!(f, "{var}={path}: {why}")
            }
            Problem::Offline(what) => write!(f, "{what}"),
            Problem::Cache(what) => write!(f, "the Hugging Face cache: {what}"),
            Problem::Exists => f.write_str("already exists (not replaced unless asked to)"),
            Problem::Interrupted => f.write_str("interrupted: the process is being stopped"),
            Problem::Checksum {
                what,
                expected,
                got,
            } => write!(
                f,
                "{what} mismatch: the source says {expected}, the bytes give {got}"
            ),
        }
    }
}

impl std::error::Error for RemoteError {}

impl std::error::Error for Problem {}

/// A [`RemoteError`] inside an [`io::Error`] whose reader names the object
/// itself (tensorfile's errors put the file's name first): it displays the
/// problem alone, so that the name is not said twice.
#[derive(Debug)]
pub struct Unnamed(pub RemoteError);

impl fmt::Display for Unnamed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.problem.fmt(f)
    }
}

impl std::error::Error for Unnamed {}

impl RemoteError {
    /// This error as an [`io::Error`] for a caller that names the object
    /// (see [`Unnamed`]).
    pub fn into_io_unnamed(self) -> io::Error {
        io::Error::new(self.kind(), Unnamed(self))
    }

    /// The `RemoteError` inside an I/O error made by this crate, if any.
    pub fn of_io(e: &io::Error) -> Option<&RemoteError> {
        let inner = e.get_ref()?;
        inner
            .downcast_ref::<RemoteError>()
            .or_else(|| inner.downcast_ref::<Unnamed>().map(|u| &u.0))
    }
}

impl From<RemoteError> for io::Error {
    fn from(e: RemoteError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}
