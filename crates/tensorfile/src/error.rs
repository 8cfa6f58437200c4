//! The umbrella error: the one error of this library. Each layer's typed
//! error is a variant's source under its own name ([`CoreError`],
//! [`ShardError`], [`CastError`], [`QuantError`], [`GgufError`],
//! [`NpzError`], [`PytorchError`]), and the accessors say what every front
//! end reports: [`Error::kind`], [`Error::path`], [`Error::tensor`] and
//! [`Error::rule`].
//!
//! [`CoreError`]: crate::CoreError
//! [`PytorchError`]: crate::PytorchError

use std::io;
use std::path::{Path, PathBuf};

use tensorfile_core::{ErrorKind, FormatError};

use crate::cast::CastError;
#[cfg(feature = "gguf")]
use crate::gguf::GgufError;
#[cfg(feature = "npz")]
use crate::npz::NpzError;
use crate::quant::QuantError;
use tensorfile_core::set::ShardError;

/// Any error of this library.
///
/// Plans built by this library run jobs that return this error
/// ([`Plan`](crate::Plan)`<'_, Error>`), so an error of a layer comes back
/// from [`save_plan`](crate::save_plan) as its own variant, not as a core
/// error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the format core: a reader rule broken, an I/O error, a
    /// missing tensor, a refused write, ... (see [`CoreError`](crate::CoreError)).
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
    #[cfg(feature = "gguf")]
    #[error(transparent)]
    Gguf(GgufError),
    /// A `.npy` array or `.npz` archive breaks the format, holds what
    /// safetensors cannot, or cannot be written.
    #[cfg(feature = "npz")]
    #[error(transparent)]
    Npz(NpzError),
    /// A PyTorch checkpoint was refused, or one of its tensors could not
    /// be read (see [`PytorchError`](crate::PytorchError)). (Boxed: errors
    /// travel by value.)
    #[cfg(feature = "pytorch")]
    #[error(transparent)]
    Pytorch(Box<tensorfile_pytorch::Error>),
    /// An input of a kind this build does not read: the library was built
    /// without the Cargo feature that reads it (see
    /// `ensure_built`).
    #[error("{}: this is {what}, but tensorfile was built without the {feature} feature", path.display())]
    FeatureDisabled {
        /// The input.
        path: PathBuf,
        /// What the input is, in words.
        what: &'static str,
        /// The feature that reads it: `pytorch`, `gguf` or `npz`.
        feature: &'static str,
    },
    /// A request an operation cannot run (see the `tensorfile-ops`
    /// crate): an unknown scheme, options that contradict each other, a
    /// value only the operation can check. A usage error: the command
    /// exits 2, Python raises its `ValueError`.
    #[error("{message}")]
    Request {
        /// What is wrong with the request.
        message: String,
    },
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
    fn from(e: tensorfile_core::Error) -> Error {
        Error::Core(e)
    }
}

/// A loader error; one that only carries a core error is that error.
#[cfg(feature = "pytorch")]
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

#[cfg(feature = "gguf")]
impl From<GgufError> for Error {
    fn from(e: GgufError) -> Error {
        Error::Gguf(e)
    }
}

#[cfg(feature = "npz")]
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
            Error::FeatureDisabled { .. } => ErrorKind::Unsupported,
            Error::Request { .. } => ErrorKind::InvalidArgument,
            #[cfg(feature = "pytorch")]
            Error::Pytorch(e) => e.kind(),
            #[cfg(feature = "gguf")]
            Error::Gguf(e) => e.kind(),
            #[cfg(feature = "npz")]
            Error::Npz(e) => e.kind(),
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
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::File { path, .. } | Error::Config { path, .. } => Some(path),
            Error::Core(e) => e.file(),
            #[cfg(feature = "pytorch")]
            Error::Pytorch(e) => e.file(),
            Error::FeatureDisabled { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The tensor this error is about, if it names one.
    pub fn tensor(&self) -> Option<&str> {
        match self {
            Error::Core(e) => e.tensor(),
            Error::Quant { tensor, .. } | Error::Cast { tensor, .. } => Some(tensor),
            #[cfg(feature = "gguf")]
            Error::Gguf(e) => gguf_tensor(e),
            #[cfg(feature = "pytorch")]
            Error::Pytorch(e) => e.tensor(),
            Error::File { source, .. } => source.tensor(),
            #[cfg(feature = "npz")]
            Error::Npz(_) => None,
            Error::Config { .. } | Error::FeatureDisabled { .. } | Error::Request { .. } => None,
        }
    }

    /// A [`Error::Request`] saying `message`.
    pub fn request(message: impl Into<String>) -> Error {
        Error::Request {
            message: message.into(),
        }
    }

    /// Whether this is an I/O error saying the file does not exist.
    pub fn is_not_found_file(&self) -> bool {
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
    #[cfg(feature = "npz")]
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
    #[cfg(feature = "gguf")]
    pub fn gguf(&self) -> Option<&GgufError> {
        match self.detail() {
            Error::Gguf(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(feature = "gguf")]
/// The tensor a GGUF error is about, if it names one.
fn gguf_tensor(e: &GgufError) -> Option<&str> {
    match e {
        GgufError::DuplicateTensor { tensor, .. }
        | GgufError::Shape { tensor, .. }
        | GgufError::UnknownType { tensor, .. }
        | GgufError::Misaligned { tensor, .. }
        | GgufError::OutOfRange { tensor, .. }
        | GgufError::Overlap { tensor, .. }
        | GgufError::Unsupported { tensor, .. }
        | GgufError::Tensor { tensor, .. } => Some(tensor),
        _ => None,
    }
}

/// `Result` with this library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
