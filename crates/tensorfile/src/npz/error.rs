//! Why a `.npy` array or `.npz` archive was refused, or cannot be written
//! (a leaf: the umbrella error wraps it). Errors about an array name it
//! (its name in the archive, or the file's for a single `.npy`) and, for
//! the bytes of its header, the byte offset.

/// Why an array, an archive or a write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NpzError {
    /// The bytes do not start with numpy's magic string `\x93NUMPY`.
    #[error("array {array:?}: not a .npy array: bytes 0..6 are {found:02x?}, not \\x93NUMPY")]
    Magic {
        /// The array (member) name.
        array: String,
        /// The bytes found.
        found: Vec<u8>,
    },
    /// A format version other than 1.0, 2.0 and 3.0.
    #[error("array {array:?}: .npy format version {major}.{minor} (bytes 6..8); numpy writes 1.0, 2.0 and 3.0")]
    Version {
        /// The array name.
        array: String,
        /// Major version byte.
        major: u8,
        /// Minor version byte.
        minor: u8,
    },
    /// The header is longer than the limit.
    #[error("array {array:?}: header of {len} bytes, more than the limit of {limit}")]
    HeaderTooLong {
        /// The array name.
        array: String,
        /// The header length the file gives.
        len: u64,
        /// The limit ([`crate::npz::NpzLimits::max_header_len`]).
        limit: u64,
    },
    /// The array's bytes end before its header or data does.
    #[error(
        "array {array:?}: {what} needs {needed} bytes, but the array's bytes end after {available}"
    )]
    Truncated {
        /// The array name.
        array: String,
        /// What was being read.
        what: String,
        /// The bytes needed, from the array's start.
        needed: u64,
        /// The bytes there are.
        available: u64,
    },
    /// The header is not the dictionary numpy writes.
    #[error("array {array:?}: header at byte {offset}: {problem}")]
    Header {
        /// The array name.
        array: String,
        /// Where in the array's bytes the problem is.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// A dtype that has no safetensors dtype, or that needs pickle.
    #[error("array {array:?}: dtype {descr}: {reason}")]
    Dtype {
        /// The array name.
        array: String,
        /// The header's `descr`, as written.
        descr: String,
        /// Why it is refused.
        reason: String,
    },
    /// An array of opaque bytes (how numpy saves ml_dtypes types) read
    /// without being told what it holds.
    #[error("array {array:?}: dtype '{descr}' does not say what the array holds (numpy saves ml_dtypes arrays this way: bfloat16 as '<V2', float8_e5m2 as '<f1', the other float8 and float4/6 types as '<V1'); say it with --dtype (bf16, f8_e4m3, f8_e5m2, f8_e8m0, f4, ...)")]
    Opaque {
        /// The array name.
        array: String,
        /// The header's `descr`.
        descr: String,
    },
    /// `--dtype` names a dtype that an opaque array's items cannot hold.
    #[error("array {array:?}: dtype '{descr}' has {itemsize}-byte items, which cannot hold {dtype} values ({dtype} is {bits} bits; sub-byte dtypes take 1-byte items, one value in the low bits of each)")]
    OpaqueWidth {
        /// The array name.
        array: String,
        /// The header's `descr`.
        descr: String,
        /// Bytes per item.
        itemsize: u64,
        /// The dtype asked for.
        dtype: crate::Dtype,
        /// Its bits per value.
        bits: u32,
    },
    /// The shape's element or byte count does not fit 64 bits, or a
    /// sub-byte dtype's values do not fill whole bytes.
    #[error("array {array:?}: shape {shape:?}: {problem}")]
    Shape {
        /// The array name.
        array: String,
        /// The shape.
        shape: Vec<u64>,
        /// What is wrong.
        problem: String,
    },
    /// The data is not exactly as long as the header's shape and dtype say.
    #[error("array {array:?}: the header says {expected} bytes of data (shape {shape:?}), but {found} bytes follow it")]
    DataLength {
        /// The array name.
        array: String,
        /// The shape.
        shape: Vec<u64>,
        /// Bytes the header implies.
        expected: u64,
        /// Bytes there are.
        found: u64,
    },
    /// A Fortran-order (or, once inflated, any) array whose reordering
    /// would hold more memory than the limit.
    #[error("array {array:?}: reordering its {bytes} bytes (Fortran order) would take more than the limit of {limit} bytes of memory")]
    Memory {
        /// The array name.
        array: String,
        /// Its bytes.
        bytes: u64,
        /// The limit ([`crate::npz::NpzLimits::max_reorder_bytes`]).
        limit: u64,
    },
    /// A member of the archive that is not a `.npy` array.
    #[error("member {member:?} is not a .npy array (np.load would give its raw bytes); an .npz holds arrays only")]
    NotArray {
        /// The member name.
        member: String,
    },
    /// Two members whose bytes overlap in the archive (how some zip bombs
    /// multiply one stream into many members).
    #[error("members {first:?} and {second:?} overlap in the archive (bytes {start}..{end} of the file are in both)")]
    Overlap {
        /// One member.
        first: String,
        /// The other.
        second: String,
        /// Start of the overlap.
        start: u64,
        /// End of the overlap.
        end: u64,
    },
    /// The zip structure of the archive is refused.
    #[error(transparent)]
    Zip(#[from] tensorfile_zip::ZipError),
    /// What was asked cannot be written as `.npy` or `.npz`.
    #[error("{0}")]
    Write(String),
}

impl NpzError {
    /// This error's kind: limits [`ErrorKind::Limit`], dtypes safetensors
    /// has not (or that need pickle) and opaque arrays not described
    /// [`ErrorKind::Unsupported`], a dtype that does not fit an opaque
    /// array or an output that cannot be written
    /// [`ErrorKind::InvalidArgument`], the zip reader's own kind, the rest
    /// (a file breaking the format) [`ErrorKind::Format`].
    ///
    /// [`ErrorKind::Limit`]: tensorfile_core::ErrorKind::Limit
    /// [`ErrorKind::Unsupported`]: tensorfile_core::ErrorKind::Unsupported
    /// [`ErrorKind::InvalidArgument`]: tensorfile_core::ErrorKind::InvalidArgument
    /// [`ErrorKind::Format`]: tensorfile_core::ErrorKind::Format
    pub fn kind(&self) -> tensorfile_core::ErrorKind {
        use tensorfile_core::ErrorKind;
        match self {
            NpzError::HeaderTooLong { .. } | NpzError::Memory { .. } => ErrorKind::Limit,
            NpzError::Dtype { .. } | NpzError::Opaque { .. } => ErrorKind::Unsupported,
            NpzError::OpaqueWidth { .. } | NpzError::Write(_) => ErrorKind::InvalidArgument,
            NpzError::Zip(e) => e.kind(),
            NpzError::Magic { .. }
            | NpzError::Version { .. }
            | NpzError::Truncated { .. }
            | NpzError::Header { .. }
            | NpzError::Shape { .. }
            | NpzError::DataLength { .. }
            | NpzError::NotArray { .. }
            | NpzError::Overlap { .. } => ErrorKind::Format,
        }
    }
}
