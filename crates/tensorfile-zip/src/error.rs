//! Why an archive or one of its members cannot be read or written.

use std::io;

/// Any error of this crate. Offsets are byte offsets in the archive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ZipError {
    /// No end-of-central-directory record: not a zip file, or truncated.
    #[error("no zip central directory: no end-of-central-directory record in the last {searched} bytes (the file is truncated, or not a zip file)")]
    NoEndOfCentralDirectory {
        /// How many bytes from the end were searched.
        searched: u64,
    },
    /// A structure lies (partly) outside the archive.
    #[error("zip: {what} at byte {offset} ({len} bytes) extends past the end of the {file_len}-byte file")]
    OutOfBounds {
        /// Which structure.
        what: String,
        /// Where it starts.
        offset: u64,
        /// Its length.
        len: u64,
        /// Length of the archive.
        file_len: u64,
    },
    /// A structure does not have the expected signature or content.
    #[error("zip: {what} at byte {offset}")]
    Malformed {
        /// What is wrong.
        what: String,
        /// Where.
        offset: u64,
    },
    /// Two members share one name.
    #[error("zip: duplicate entry name {0:?} (ambiguous which one a reader would pick)")]
    DuplicateEntry(String),
    /// A member uses a feature this reader does not support.
    #[error("zip: entry {entry:?}: {what}")]
    Unsupported {
        /// The member name.
        entry: String,
        /// What is unsupported.
        what: String,
    },
    /// A deflated member does not inflate to its declared size.
    #[error("zip: entry {entry:?}: {what}")]
    Inflate {
        /// The member name.
        entry: String,
        /// What went wrong.
        what: String,
    },
    /// A member's bytes do not match the CRC-32 the central directory
    /// records (checked by [`CrcCheck`](crate::CrcCheck) for callers that
    /// read members whole, as `np.load` does).
    #[error("zip: entry {entry:?}: its bytes have CRC-32 {actual:08x}, but the central directory records {expected:08x} (the member is corrupt)")]
    Crc {
        /// The member name.
        entry: String,
        /// The CRC-32 the central directory records.
        expected: u32,
        /// The CRC-32 of the bytes read.
        actual: u32,
    },
    /// A bound on what reading may hold was exceeded.
    #[error("zip: {what}: {needed} B, over the limit of {limit} B")]
    Limit {
        /// What was being read.
        what: String,
        /// The bytes it needs.
        needed: u64,
        /// The limit.
        limit: u64,
    },
    /// Reading the archive failed: the source's error (a file truncated
    /// or changed while being read says so), with what was being read.
    #[error("zip: reading {what} at byte {offset}: {message}")]
    Read {
        /// What was being read.
        what: String,
        /// Where.
        offset: u64,
        /// The kind of the I/O error (`UnexpectedEof` for a truncated file).
        kind: io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// Writing an archive failed, or what was asked cannot be written.
    #[error("zip: writing {what}: {message}")]
    Write {
        /// What was being written.
        what: String,
        /// The I/O error's message, or what is wrong.
        message: String,
    },
}

impl ZipError {
    /// This error's kind: features not read are
    /// [`ErrorKind::Unsupported`](tensorfile_core::ErrorKind::Unsupported),
    /// limits [`Limit`](tensorfile_core::ErrorKind::Limit), read and write
    /// failures [`Io`](tensorfile_core::ErrorKind::Io), the rest a malformed
    /// archive.
    pub fn kind(&self) -> tensorfile_core::ErrorKind {
        use tensorfile_core::ErrorKind;
        match self {
            ZipError::Unsupported { .. } => ErrorKind::Unsupported,
            ZipError::Limit { .. } => ErrorKind::Limit,
            ZipError::Read { .. } | ZipError::Write { .. } => ErrorKind::Io,
            ZipError::NoEndOfCentralDirectory { .. }
            | ZipError::OutOfBounds { .. }
            | ZipError::Malformed { .. }
            | ZipError::DuplicateEntry(_)
            | ZipError::Inflate { .. }
            | ZipError::Crc { .. } => ErrorKind::Format,
        }
    }

    /// A read error of the source.
    pub(crate) fn read(what: impl Into<String>, offset: u64, e: &io::Error) -> ZipError {
        ZipError::Read {
            what: what.into(),
            offset,
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    /// The I/O error this is, for a [`ZipError::Read`]: its kind and
    /// message, so that layers above can name the file.
    pub fn io_error(&self) -> Option<io::Error> {
        match self {
            ZipError::Read {
                what,
                offset,
                kind,
                message,
            } => Some(io::Error::new(
                *kind,
                format!("{message} (reading zip {what} at byte {offset})"),
            )),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`ZipError`].
pub type Result<T, E = ZipError> = std::result::Result<T, E>;
