//! Errors. Every refusal says what is wrong and where: the record, the
//! storage key, the tensor name, the byte offset.

use std::io;
use std::path::PathBuf;

use tensorfile_core::ErrorKind;
use tensorfile_zip::ZipError;

use crate::pickle::{PickleError, PickleErrorKind};

/// Any error of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// The zip container is malformed or unsupported.
    #[error(transparent)]
    Zip(#[from] ZipError),
    /// A pickle was refused.
    #[error("{record}: {source}")]
    Pickle {
        /// Which pickle (`archive/data.pkl`, `legacy object pickle`, ...).
        record: String,
        /// What is wrong.
        #[source]
        source: PickleError,
    },
    /// The input is not a checkpoint this crate can load (tar format,
    /// TorchScript, something else); the message says what it is.
    #[error("{0}")]
    NotACheckpoint(String),
    /// The archive's layout is wrong (missing `data.pkl`, several
    /// top-level directories, a bad `byteorder` record, ...).
    #[error("{0}")]
    Archive(String),
    /// The legacy (pre-1.6) layout is wrong.
    #[error("legacy checkpoint: {0}")]
    Legacy(String),
    /// A storage is missing or does not match its persistent id.
    #[error("storage {key:?}: {problem}")]
    Storage {
        /// The storage key.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// One storage is used with two different dtypes.
    #[error("storage {key:?} is used as {first} and as {second} (tensor {tensor:?}); refusing to reinterpret its bytes")]
    DtypeConflict {
        /// The storage key.
        key: String,
        /// The dtype it was first used with.
        first: &'static str,
        /// The other dtype.
        second: &'static str,
        /// The tensor that uses it with `second`.
        tensor: String,
    },
    /// A tensor cannot be represented or its view is invalid.
    #[error("tensor {name:?}: {reason}")]
    Tensor {
        /// The tensor's flattened name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A well-formed tensor that safetensors cannot hold (complex128,
    /// conjugate or negative bit, packed float4, ...): refused on purpose,
    /// as opposed to a malformed one ([`Error::Tensor`]).
    #[error("tensor {name:?}: {reason}")]
    Refused {
        /// The tensor's flattened name.
        name: String,
        /// What it is and why it is refused.
        reason: String,
    },
    /// The object tree cannot be flattened into names (duplicate names,
    /// too deep, too many paths, unsupported keys, `--key` not found).
    #[error("{0}")]
    Structure(String),
    /// A budget that bounds what loading or converting may hold, gather or
    /// write was exceeded: `budget` names the option
    /// ([`crate::LoadOptions`] or [`crate::WalkLimits`] field) to raise.
    #[error("{context}: {needed} B needed, over the budget {budget} = {limit} B")]
    Budget {
        /// The option that sets the budget, such as `max_expanded_total_bytes`.
        budget: &'static str,
        /// Its value, in bytes.
        limit: u64,
        /// The bytes counted when it was exceeded (saturating at 2^64 - 1).
        needed: u64,
        /// What was being counted: the tensor, the storage, the values.
        context: String,
    },
    /// Tensors share storage and the sharing policy refuses it.
    #[error("{0}")]
    Shared(String),
    /// An error of the format core: writing, or a tensor's bytes that a
    /// writer could not take.
    #[error(transparent)]
    Core(tensorfile_core::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<tensorfile_core::Error> for Error {
    fn from(e: tensorfile_core::Error) -> Error {
        Error::Core(e)
    }
}

impl Error {
    /// The tensor this error is about, if it names one.
    pub fn tensor(&self) -> Option<&str> {
        match self {
            Error::Tensor { name, .. } | Error::Refused { name, .. } => Some(name),
            Error::DtypeConflict { tensor, .. } => Some(tensor),
            Error::Core(e) => e.tensor(),
            _ => None,
        }
    }

    /// The file this error is about, if it names one.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            Error::Io { path, .. } => Some(path),
            Error::Core(e) => e.file(),
            _ => None,
        }
    }

    /// This error's kind: a malformed archive, pickle, storage or view is
    /// [`ErrorKind::Format`]; what is refused on purpose (a pickle global
    /// off the allow-list, TorchScript or tar containers, zip features not
    /// supported, tensors safetensors cannot hold, shared storage the policy
    /// refuses) [`ErrorKind::Unsupported`]; the pickle's limits and the
    /// loader's budgets [`ErrorKind::Limit`]; a failed write its own kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } => ErrorKind::of_io(source),
            Error::Zip(e) => e.kind(),
            Error::Pickle { source, .. } => source.kind.error_kind(),
            Error::NotACheckpoint(_) | Error::Refused { .. } | Error::Shared(_) => {
                ErrorKind::Unsupported
            }
            Error::Archive(_)
            | Error::Legacy(_)
            | Error::Storage { .. }
            | Error::DtypeConflict { .. }
            | Error::Tensor { .. }
            | Error::Structure(_) => ErrorKind::Format,
            Error::Budget { .. } => ErrorKind::Limit,
            Error::Core(e) => e.kind(),
        }
    }
}

impl PickleErrorKind {
    /// The [`ErrorKind`] of this pickle problem: a refused global is
    /// [`ErrorKind::Unsupported`], as is an opcode torch refuses; the limits and the budget
    /// [`ErrorKind::Limit`], the rest a malformed pickle.
    pub fn error_kind(&self) -> ErrorKind {
        use PickleErrorKind as K;
        match self {
            K::ForbiddenGlobal { .. } | K::Refused { .. } => ErrorKind::Unsupported,
            K::Limit { .. } | K::Budget { .. } => ErrorKind::Limit,
            K::OutOfMemory(_) => ErrorKind::OutOfMemory,
            K::UnknownOpcode(_)
            | K::Truncated { .. }
            | K::NoStop
            | K::StackUnderflow(_)
            | K::NoMark(_)
            | K::MissingMemo(_)
            | K::WrongType { .. }
            | K::Utf8(_)
            | K::BadStop(_)
            | K::OpenMark { .. } => ErrorKind::Format,
        }
    }
}
