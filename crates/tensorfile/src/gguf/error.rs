//! Why a GGUF file was refused, or a conversion to or from one (a leaf: the
//! umbrella error wraps it). Errors about a file's bytes name the field and
//! the byte offset where it starts.

/// Why a GGUF file or conversion was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The file ends inside a field.
    #[error("{field} at byte {offset}: the file ends at byte {len}")]
    Truncated {
        /// What was being read.
        field: String,
        /// Where it starts.
        offset: u64,
        /// The file's length.
        len: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("not a GGUF file: bytes 0..4 are {found:02x?}, not \"GGUF\"")]
    Magic {
        /// The bytes found.
        found: Vec<u8>,
    },
    /// A version other than 2 or 3 (in either byte order).
    #[error("version at byte 4: {version} (little-endian) is not GGUF version 2 or 3")]
    Version {
        /// The version field read little-endian.
        version: u32,
    },
    /// A count or length is larger than the reader's limit.
    #[error("{field} at byte {offset}: {value} is more than the limit of {limit}")]
    Limit {
        /// What was being read.
        field: String,
        /// Where it starts.
        offset: u64,
        /// The value in the file.
        value: u64,
        /// The limit ([`crate::gguf::ReadLimits`]).
        limit: u64,
    },
    /// A count or length says more bytes follow than the file has left.
    #[error("{field} at byte {offset}: {value} needs at least {needed} bytes, but only {available} are left in the file")]
    Count {
        /// What was being read.
        field: String,
        /// Where it starts.
        offset: u64,
        /// The count or length in the file.
        value: u64,
        /// The bytes it needs at the least (saturated at `u64::MAX`).
        needed: u64,
        /// The bytes left.
        available: u64,
    },
    /// A string that is not UTF-8.
    #[error("{field} at byte {offset}: not UTF-8")]
    Utf8 {
        /// What was being read.
        field: String,
        /// Where it starts.
        offset: u64,
    },
    /// A value type id outside 0..=12.
    #[error("{field} at byte {offset}: unknown value type {type_id}")]
    ValueType {
        /// What was being read.
        field: String,
        /// Where it starts.
        offset: u64,
        /// The type id.
        type_id: u32,
    },
    /// A bool byte other than 0 or 1.
    #[error("{field} at byte {offset}: bool byte {byte:#04x} is neither 0 nor 1")]
    Bool {
        /// What was being read.
        field: String,
        /// Where it starts.
        offset: u64,
        /// The byte.
        byte: u8,
    },
    /// Arrays of arrays nested deeper than the limit.
    #[error("{field} at byte {offset}: arrays nested more than {limit} deep")]
    Nesting {
        /// What was being read.
        field: String,
        /// Where the too-deep array starts.
        offset: u64,
        /// The limit.
        limit: u32,
    },
    /// The metadata (keys, strings, arrays) would hold more memory than the
    /// limit.
    #[error("{field} at byte {offset}: the metadata would take more than {limit} bytes of memory")]
    Memory {
        /// What was being read.
        field: String,
        /// Where it starts.
        offset: u64,
        /// The limit.
        limit: u64,
    },
    /// An empty key.
    #[error("key {index} at byte {offset} is empty")]
    EmptyKey {
        /// The key's index.
        index: u64,
        /// Where it starts.
        offset: u64,
    },
    /// A key given twice.
    #[error("key {key:?} at byte {offset} appears a second time")]
    DuplicateKey {
        /// The key.
        key: String,
        /// Where the second one starts.
        offset: u64,
    },
    /// `general.alignment` is not a UINT32 power of two.
    #[error("general.alignment at byte {offset}: {problem}")]
    Alignment {
        /// Where its value starts.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// A tensor name given twice.
    #[error("tensor {tensor:?} at byte {offset} appears a second time")]
    DuplicateTensor {
        /// The name.
        tensor: String,
        /// Where the second one starts.
        offset: u64,
    },
    /// A tensor name longer than 64 bytes.
    #[error("tensor name at byte {offset}: {len} bytes, more than GGUF's 64")]
    NameTooLong {
        /// Where the name starts.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// A tensor with more than 4 dimensions, or dimensions whose element
    /// count or byte count overflows, or whose rows are not whole blocks.
    #[error("tensor {tensor:?} at byte {offset}: {problem}")]
    Shape {
        /// The tensor.
        tensor: String,
        /// Where its info starts.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// A tensor type id ggml does not have (or removed from GGUF files).
    #[error("tensor {tensor:?}: type at byte {offset}: {}", unknown_type(*type_id, removed))]
    UnknownType {
        /// The tensor.
        tensor: String,
        /// Where the type field starts.
        offset: u64,
        /// The id.
        type_id: u32,
        /// The name of a removed type.
        removed: Option<&'static str>,
    },
    /// A tensor's data offset is not a multiple of the alignment.
    #[error(
        "tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        /// The tensor.
        tensor: String,
        /// Its offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's bytes reach past the end of the file.
    #[error(
        "tensor {tensor:?}: its bytes {start}..{end} reach past the end of the file at byte {len}"
    )]
    OutOfRange {
        /// The tensor.
        tensor: String,
        /// Absolute start.
        start: u64,
        /// Absolute end (saturated).
        end: u64,
        /// The file's length.
        len: u64,
    },
    /// Two tensors share bytes.
    #[error("tensors {tensor:?} and {other:?} overlap in the data section")]
    Overlap {
        /// One tensor.
        tensor: String,
        /// The other.
        other: String,
    },
    /// A tensor type this library does not decode.
    #[error(
        "tensor {tensor:?}: {ggml_type} is not decoded here (gguf-py 0.19 cannot decode it either)"
    )]
    Unsupported {
        /// The tensor.
        tensor: String,
        /// The type's name.
        ggml_type: String,
    },
    /// A metadata key a conversion needs is missing or has the wrong type.
    #[error("key {key:?}: {problem}")]
    Key {
        /// The key.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// The architecture is not one this library converts.
    #[error("architecture {arch:?}: {problem}")]
    Architecture {
        /// The architecture.
        arch: String,
        /// What is wrong.
        problem: String,
    },
    /// A tensor cannot be converted (an unknown name, a shape that does
    /// not fit the architecture, a value that cannot be quantized).
    #[error("tensor {tensor:?}: {problem}")]
    Tensor {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        problem: String,
    },
    /// A config.json or tokenizer.json that cannot be used.
    #[error("{file}: {problem}")]
    Input {
        /// The file (`config.json`, `tokenizer.json`).
        file: String,
        /// What is wrong.
        problem: String,
    },
    /// The file to write breaks GGUF's rules (a name too long, a key twice).
    #[error("cannot write GGUF: {0}")]
    Write(String),
}

impl GgufError {
    /// This error's kind: limits and budgets [`ErrorKind::Limit`], types
    /// and architectures not decoded or converted
    /// [`ErrorKind::Unsupported`], a file the writer cannot make
    /// [`ErrorKind::InvalidArgument`], the rest (a file breaking the
    /// format, a conversion's input that is not what it must be)
    /// [`ErrorKind::Format`].
    ///
    /// [`ErrorKind::Limit`]: tensorfile_core::ErrorKind::Limit
    /// [`ErrorKind::Unsupported`]: tensorfile_core::ErrorKind::Unsupported
    /// [`ErrorKind::InvalidArgument`]: tensorfile_core::ErrorKind::InvalidArgument
    /// [`ErrorKind::Format`]: tensorfile_core::ErrorKind::Format
    pub fn kind(&self) -> tensorfile_core::ErrorKind {
        use tensorfile_core::ErrorKind;
        match self {
            GgufError::Limit { .. } | GgufError::Memory { .. } | GgufError::Nesting { .. } => {
                ErrorKind::Limit
            }
            GgufError::Unsupported { .. }
            | GgufError::Architecture { .. }
            | GgufError::Tensor { .. } => ErrorKind::Unsupported,
            GgufError::Write(_) => ErrorKind::InvalidArgument,
            GgufError::Truncated { .. }
            | GgufError::Magic { .. }
            | GgufError::Version { .. }
            | GgufError::Count { .. }
            | GgufError::Utf8 { .. }
            | GgufError::ValueType { .. }
            | GgufError::Bool { .. }
            | GgufError::EmptyKey { .. }
            | GgufError::DuplicateKey { .. }
            | GgufError::Alignment { .. }
            | GgufError::DuplicateTensor { .. }
            | GgufError::NameTooLong { .. }
            | GgufError::Shape { .. }
            | GgufError::UnknownType { .. }
            | GgufError::Misaligned { .. }
            | GgufError::OutOfRange { .. }
            | GgufError::Overlap { .. }
            | GgufError::Key { .. }
            | GgufError::Input { .. } => ErrorKind::Format,
        }
    }
}

fn unknown_type(id: u32, removed: &Option<&'static str>) -> String {
    match removed {
        Some(name) => format!("{id} is {name}, which ggml removed from GGUF files"),
        None => format!("{id} is not a ggml type"),
    }
}
