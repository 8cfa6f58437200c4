//! The umbrella error: the format core's errors and each layer's own
//! (shards, casts, quantization, model configs), every one saying what is
//! wrong and where.

use std::io;
use std::path::{Path, PathBuf};

use tensorfile_core::{ErrorKind, FormatError};

use crate::cast::CastError;
use crate::gguf::GgufError;
use crate::npz::NpzError;
use crate::quant::QuantError;
use tensorfile_core::set::ShardError;

/// Any error of this library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the format core: a reader rule broken, an I/O error, a
    /// missing tensor, a refused write, ... (see [`tensorfile_core::Error`]).
    #[error(transparent)]
    Core(tensorfile_core::Error),
    /// A model directory's `config.json` is not a JSON object.
    #[error("{}: not a valid config: {problem}", path.display())]
    Config {
        /// The config file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A tensor cannot be quantized or dequantized.
    #[error("tensor {tensor:?}: {problem}")]
    Quant {
        /// The tensor name.
        tensor: String,
        /// What is wrong.
        #[source]
        problem: QuantError,
    },
    /// A tensor cannot be cast to the requested dtype.
    #[error("tensor {tensor:?}: {source}")]
    Cast {
        /// The tensor name.
        tensor: String,
        /// What the cast refused.
        #[source]
        source: CastError,
    },
    /// A GGUF file breaks the format, or a conversion to or from GGUF
    /// cannot be made.
    #[error(transparent)]
    Gguf(GgufError),
    /// A `.npy` array or `.npz` archive breaks the format, holds what
    /// safetensors cannot, or cannot be written.
    #[error(transparent)]
    Npz(NpzError),
    /// A PyTorch checkpoint was refused, or one of its tensors could not
    /// be read (see [`tensorfile_pytorch::Error`]). (Boxed: errors travel
    /// by value.)
    #[error(transparent)]
    Pytorch(Box<tensorfile_pytorch::Error>),
    /// A remote input (a URL) cannot be reached or read: its store, the
    /// request, or the answer (see [`tensorfile_remote::RemoteError`]).
    /// (Boxed: errors travel by value.)
    #[cfg(feature = "remote")]
    #[error(transparent)]
    Remote(Box<tensorfile_remote::RemoteError>),
    /// An error about a named file. [`Error::detail`] gives the error
    /// without the file.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: Box<Error>,
    },
}

impl From<tensorfile_core::Error> for Error {
    /// A core error; one that carries an error of this crate through a plan
    /// ([`tensorfile_core::Error::Other`]) comes back out as itself.
    fn from(e: tensorfile_core::Error) -> Error {
        match e {
            tensorfile_core::Error::Other { kind, error } => match error.downcast::<Error>() {
                Ok(mine) => *mine,
                Err(error) => match error.downcast::<tensorfile_pytorch::Error>() {
                    Ok(pytorch) => Error::from(*pytorch),
                    Err(error) => Error::Core(tensorfile_core::Error::Other { kind, error }),
                },
            },
            core => Error::Core(core),
        }
    }
}

/// Lets this crate's errors travel through the core (a plan's jobs).
impl From<Error> for tensorfile_core::Error {
    fn from(e: Error) -> tensorfile_core::Error {
        match e {
            Error::Core(core) => core,
            other => tensorfile_core::Error::Other {
                kind: other.kind(),
                error: Box::new(other),
            },
        }
    }
}

/// A loader error; one that only carries a core error is that error.
impl From<tensorfile_pytorch::Error> for Error {
    fn from(e: tensorfile_pytorch::Error) -> Error {
        match e {
            tensorfile_pytorch::Error::Core(core) => Error::from(core),
            other => Error::Pytorch(Box::new(other)),
        }
    }
}

impl From<ShardError> for Error {
    fn from(e: ShardError) -> Error {
        Error::Core(e.into())
    }
}

#[cfg(feature = "remote")]
impl From<tensorfile_remote::RemoteError> for Error {
    fn from(e: tensorfile_remote::RemoteError) -> Error {
        Error::Remote(Box::new(e))
    }
}

impl From<GgufError> for Error {
    fn from(e: GgufError) -> Error {
        Error::Gguf(e)
    }
}

impl From<NpzError> for Error {
    fn from(e: NpzError) -> Error {
        Error::Npz(e)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Core(tensorfile_core::Error::Stream(e))
    }
}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Error {
        Error::Core(e.into())
    }
}

impl From<tensorfile_core::WriteError> for Error {
    fn from(e: tensorfile_core::WriteError) -> Error {
        Error::Core(e.into())
    }
}

impl Error {
    /// An I/O error on a named file.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Core(tensorfile_core::Error::io(path, source))
    }

    /// No tensor by that name.
    pub fn not_found(name: impl Into<String>) -> Error {
        Error::Core(tensorfile_core::Error::NotFound(name.into()))
    }

    /// Names the file this error is about (see
    /// [`tensorfile_core::Error::at`]); an error that already names a file
    /// is returned as it is.
    pub fn at(self, path: impl Into<PathBuf>) -> Error {
        match self {
            Error::Core(e) => Error::Core(e.at(path)),
            named @ Error::File { .. } => named,
            // A remote error names its URL already.
            #[cfg(feature = "remote")]
            named @ Error::Remote(_) => named,
            other => Error::File {
                path: path.into(),
                source: Box::new(other),
            },
        }
    }

    /// This error's kind: a core error's own ([`tensorfile_core::Error::kind`]),
    /// that of each layer's (see [`ErrorKind`]), the inner error's for
    /// [`Error::File`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Core(e) => e.kind(),
            Error::Config { .. } => ErrorKind::Format,
            Error::Quant { problem, .. } => problem.kind(),
            Error::Cast { source, .. } => source.kind(),
            Error::File { source, .. } => source.kind(),
            Error::Pytorch(e) => e.kind(),
            Error::Gguf(e) => e.kind(),
            Error::Npz(e) => e.kind(),
            #[cfg(feature = "remote")]
            Error::Remote(e) => ErrorKind::of_io(&io::Error::from(e.kind())),
        }
    }

    /// The error without the file it is about: what to match on.
    pub fn detail(&self) -> &Error {
        match self {
            Error::File { source, .. } => source.detail(),
            other => other,
        }
    }

    /// The core error, if this is one (about a named file or not), without
    /// the file.
    pub fn core(&self) -> Option<&tensorfile_core::Error> {
        match self.detail() {
            Error::Core(e) => Some(e.detail()),
            _ => None,
        }
    }

    /// The file this error is about, if it names one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Error::File { path, .. } => Some(path),
            Error::Core(e) => e.file(),
            #[cfg(feature = "remote")]
            Error::Remote(e) => Some(Path::new(&e.url)),
            _ => None,
        }
    }

    /// Whether this is an I/O error saying the file does not exist.
    pub fn is_not_found_file(&self) -> bool {
        #[cfg(feature = "remote")]
        if let Error::Remote(e) = self.detail() {
            return e.is_not_found();
        }
        self.core()
            .is_some_and(tensorfile_core::Error::is_not_found_file)
    }

    /// The format error, if this is one.
    pub fn format(&self) -> Option<&FormatError> {
        self.core().and_then(tensorfile_core::Error::format)
    }

    /// The reader rule broken, if this is a format error.
    pub fn rule(&self) -> Option<u8> {
        self.format().map(FormatError::rule)
    }

    /// The `.npy` / `.npz` error, if this is one (about a named file or not).
    pub fn npz(&self) -> Option<&NpzError> {
        match self.detail() {
            Error::Npz(e) => Some(e),
            _ => None,
        }
    }

    /// The set's error, if this is one (about a named file or not).
    pub fn shard(&self) -> Option<&ShardError> {
        self.core().and_then(tensorfile_core::Error::shard)
    }

    /// The GGUF error, if this is one (about a named file or not).
    pub fn gguf(&self) -> Option<&GgufError> {
        match self.detail() {
            Error::Gguf(e) => Some(e),
            _ => None,
        }
    }
}

/// `Result` with this library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
