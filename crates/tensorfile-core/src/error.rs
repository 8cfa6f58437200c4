//! Errors. Every rejection says what is wrong and where.

use std::io;
use std::path::PathBuf;

use crate::{Dtype, LooksLike};

/// A violation of one of the five reader rules of the format.
///
/// [`FormatError::rule`] gives the rule's number (1 to 5); the message names
/// the rule, the tensor and the offsets or header byte position involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Rule 1: fewer than 8 bytes.
    #[error(
        "rule 1: the file is {len} bytes long, shorter than the 8-byte header length field{}",
        hint(looks_like)
    )]
    TooShort {
        /// Length of the input.
        len: u64,
        /// What the input's first bytes look like, when they are
        /// something known (see [`FormatError::looks_like`]).
        looks_like: Option<LooksLike>,
    },
    /// Rule 1: N is above the header cap.
    #[error(
        "rule 1: the header length is {header_len} bytes, over the limit of {limit}{}",
        hint(looks_like)
    )]
    HeaderTooLarge {
        /// N as stored in the first 8 bytes.
        header_len: u64,
        /// The cap in force.
        limit: u64,
        /// What the input's first bytes look like, when they are
        /// something known.
        looks_like: Option<LooksLike>,
    },
    /// Rule 1: 8 + N is past the end of the input.
    #[error("rule 1: the header ends at byte {end} (8 + {header_len}), past the end of the file at byte {len}{}", hint(looks_like))]
    HeaderPastEof {
        /// N.
        header_len: u64,
        /// 8 + N.
        end: u64,
        /// Length of the input.
        len: u64,
        /// What the input's first bytes look like, when they are
        /// something known.
        looks_like: Option<LooksLike>,
    },
    /// Rule 2: the header is not UTF-8.
    #[error(
        "rule 2: the header is not valid UTF-8 (bad byte at header position {pos}){}",
        hint(looks_like)
    )]
    NotUtf8 {
        /// Byte position in the header of the first invalid byte.
        pos: usize,
        /// What the input's first bytes look like, when they are
        /// something known.
        looks_like: Option<LooksLike>,
    },
    /// Rule 2: the header is not valid JSON.
    #[error(
        "rule 2: the header is not valid JSON at header position {pos}: {msg}{}",
        hint(looks_like)
    )]
    Json {
        /// Byte position in the header.
        pos: usize,
        /// What the JSON parser said.
        msg: String,
        /// What the input's first bytes look like, when they are
        /// something known.
        looks_like: Option<LooksLike>,
    },
    /// Rule 2: a number whose magnitude rounds past the largest 64-bit float
    /// (`1e400`, an integer of 400 digits), wherever it stands in the header,
    /// unknown fields and metadata included.
    ///
    /// JSON's grammar puts no bound on numbers, but RFC 8259 (section 6) lets
    /// a reader bound the range it accepts, and the reader the format is
    /// pinned to holds every number as a 64-bit integer or float: it refuses
    /// such a number as malformed JSON ("number out of range") while reading
    /// the text, before it looks at any field. A header holding one is
    /// therefore not JSON the format can read: rule 2, at its position, not a
    /// rule 4 problem of the entry it is in.
    #[error("rule 2: the header is not valid JSON at header position {pos}: the number {number} in {place} is out of range (it rounds past the largest 64-bit float)")]
    NumberOutOfRange {
        /// Byte position in the header of the number's first character.
        pos: usize,
        /// The number as written (cut short when long).
        number: String,
        /// Where it is: `field "x" of tensor "a"`, `__metadata__ value of "k"`, ...
        place: String,
    },
    /// Rule 2: the header is JSON, but not an object.
    #[error("rule 2: the header is a JSON {found}, not an object")]
    NotObject {
        /// What it is instead (`array`, `string`, ...).
        found: &'static str,
    },
    /// Rule 2: a key appears twice in one object.
    #[error("rule 2: duplicate key {key:?} in {place} (header position {pos})")]
    DuplicateKey {
        /// The key, unescaped.
        key: String,
        /// Where: `the header`, `__metadata__`, or `tensor "name"`.
        place: String,
        /// Byte position in the header of the second occurrence.
        pos: usize,
    },
    /// Rule 3: `__metadata__` is neither an object nor null.
    #[error("rule 3: __metadata__ must be an object of strings, found a {found}")]
    MetadataNotObject {
        /// What it is instead.
        found: &'static str,
    },
    /// Rule 3: a metadata value is not a string.
    #[error("rule 3: metadata value of {key:?} must be a string, found a {found}")]
    MetadataNotString {
        /// The metadata key.
        key: String,
        /// What the value is instead.
        found: &'static str,
    },
    /// Rule 4: a tensor entry is not an object, lacks a field, or a field has the wrong type.
    #[error("rule 4: tensor {tensor:?}: {problem}")]
    BadEntry {
        /// The tensor name.
        tensor: String,
        /// What is wrong with the entry.
        problem: String,
    },
    /// Rule 4: a dimension or data offset written `-0`.
    ///
    /// `-0` is valid JSON, but a JSON reader takes it for the float -0.0
    /// (JSON integers have no negative zero; the reference reader refuses it
    /// with "invalid type: floating point -0.0, expected usize"). Rule 4 asks
    /// for non-negative integers, so `-0` is refused as `0.0` and `0e0` are:
    /// a well-formed number of the wrong kind for the field, an entry error.
    #[error("rule 4: tensor {tensor:?}: {field} element {index} is -0 (header position {pos}), which JSON readers take for the float -0.0, not an unsigned integer")]
    NegativeZero {
        /// The tensor name.
        tensor: String,
        /// `shape` or `data_offsets`.
        field: &'static str,
        /// The element's index in that array.
        index: usize,
        /// Byte position in the header of the `-`.
        pos: usize,
    },
    /// Rule 4: an unknown dtype name.
    #[error("rule 4: tensor {tensor:?}: unknown dtype {dtype:?}")]
    UnknownDtype {
        /// The tensor name.
        tensor: String,
        /// The dtype string as written.
        dtype: String,
    },
    /// Rule 4: the shape's byte count overflows 64 bits.
    #[error(
        "rule 4: tensor {tensor:?}: the byte count of shape {shape:?} x {dtype} overflows 64 bits"
    )]
    ShapeOverflow {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<u64>,
    },
    /// Rule 4: a sub-byte dtype whose element count does not fill whole bytes.
    #[error(
        "rule 4: tensor {tensor:?}: {numel} elements of {dtype} are not a whole number of bytes"
    )]
    NotWholeBytes {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its element count.
        numel: u64,
    },
    /// Rule 4: `end - begin` disagrees with shape x dtype size (or `begin > end`).
    #[error("rule 4: tensor {tensor:?}: data_offsets [{begin}, {end}] hold {actual} bytes, but shape {shape:?} x {dtype} needs {expected}")]
    SizeMismatch {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<u64>,
        /// Begin offset.
        begin: u64,
        /// End offset.
        end: u64,
        /// Bytes the offsets give (negative when reversed).
        actual: i128,
        /// Bytes the shape and dtype need.
        expected: u64,
    },
    /// Rule 5: sorted by begin, a tensor does not begin where the previous one ended.
    #[error("rule 5: tensor {tensor:?} begins at data byte {begin}, but {}", match previous {
        None => format!("the data buffer begins at {expected}"),
        Some(p) => format!("the previous tensor {p:?} ends at {expected}"),
    })]
    NotContiguous {
        /// The tensor name.
        tensor: String,
        /// Its begin offset.
        begin: u64,
        /// Where it should begin.
        expected: u64,
        /// The tensor before it, if any.
        previous: Option<String>,
    },
    /// Rule 5: the tensors do not end exactly at the end of the file.
    #[error("rule 5: the tensors end at data byte {end}, but the data buffer is {data_len} bytes ({})", if *.end < *.data_len { "trailing bytes" } else { "the file is truncated" })]
    NotCovered {
        /// Where the last tensor ends.
        end: u64,
        /// Length of the data buffer (file size - 8 - N).
        data_len: u64,
    },
}

/// The end of a rule 1 or 2 message for an input that looks like
/// something else: "; this looks like a PNG image, not a safetensors file".
fn hint(looks_like: &Option<LooksLike>) -> String {
    match looks_like {
        Some(looks) => format!("; this looks like {looks}, not a safetensors file"),
        None => String::new(),
    }
}

impl FormatError {
    /// What the input looks like instead of safetensors, for the errors
    /// that say ([`TooShort`](FormatError::TooShort),
    /// [`HeaderTooLarge`](FormatError::HeaderTooLarge),
    /// [`HeaderPastEof`](FormatError::HeaderPastEof),
    /// [`NotUtf8`](FormatError::NotUtf8), [`Json`](FormatError::Json)):
    /// the input's first bytes are a signature of another format (PNG, zip,
    /// GGUF, a pickle, ...) or plain text.
    pub fn looks_like(&self) -> Option<LooksLike> {
        use FormatError::*;
        match self {
            TooShort { looks_like, .. }
            | HeaderTooLarge { looks_like, .. }
            | HeaderPastEof { looks_like, .. }
            | NotUtf8 { looks_like, .. }
            | Json { looks_like, .. } => *looks_like,
            _ => None,
        }
    }

    /// This error, saying what `prefix` (the input's first bytes) looks
    /// like when it is one that says ([`FormatError::looks_like`]) and the
    /// bytes are something known: a file that is not safetensors at all is
    /// named for what it is, not only for the rule its bytes break.
    pub(crate) fn looking_at(mut self, prefix: &[u8]) -> FormatError {
        use FormatError::*;
        if let TooShort { looks_like, .. }
        | HeaderTooLarge { looks_like, .. }
        | HeaderPastEof { looks_like, .. }
        | NotUtf8 { looks_like, .. }
        | Json { looks_like, .. } = &mut self
        {
            *looks_like = LooksLike::of(prefix);
        }
        self
    }

    /// The tensor whose entry breaks the rule, if the rule is about one.
    pub fn tensor(&self) -> Option<&str> {
        use FormatError::*;
        match self {
            BadEntry { tensor, .. }
            | NegativeZero { tensor, .. }
            | UnknownDtype { tensor, .. }
            | ShapeOverflow { tensor, .. }
            | NotWholeBytes { tensor, .. }
            | SizeMismatch { tensor, .. }
            | NotContiguous { tensor, .. } => Some(tensor),
            _ => None,
        }
    }

    /// The number (1 to 5) of the reader rule this error breaks.
    pub fn rule(&self) -> u8 {
        use FormatError::*;
        match self {
            TooShort { .. } | HeaderTooLarge { .. } | HeaderPastEof { .. } => 1,
            NotUtf8 { .. }
            | Json { .. }
            | NumberOutOfRange { .. }
            | NotObject { .. }
            | DuplicateKey { .. } => 2,
            MetadataNotObject { .. } | MetadataNotString { .. } => 3,
            BadEntry { .. }
            | NegativeZero { .. }
            | UnknownDtype { .. }
            | ShapeOverflow { .. }
            | NotWholeBytes { .. }
            | SizeMismatch { .. } => 4,
            NotContiguous { .. } | NotCovered { .. } => 5,
        }
    }
}

/// Why the writer refused its input or stopped.
///
/// The checks on declarations ([`WriteError::DuplicateName`] to
/// [`WriteError::HeaderTooLarge`]) run before a single byte is written; the
/// others arise while the tensors' bytes stream in.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// Two tensors share a name.
    #[error("two tensors are named {name:?}")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A tensor is named `__metadata__`, the key of the metadata map.
    #[error("a tensor cannot be named \"__metadata__\": that key holds the metadata map")]
    ReservedName,
    /// The byte count of a shape overflows 64 bits.
    #[error("tensor {tensor:?}: the byte count of shape {shape:?} x {dtype} overflows 64 bits")]
    ShapeOverflow {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<u64>,
    },
    /// A sub-byte dtype whose element count does not fill whole bytes.
    #[error("tensor {tensor:?}: {numel} elements of {dtype} are not a whole number of bytes")]
    NotWholeBytes {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its element count.
        numel: u64,
    },
    /// The bytes given for a tensor disagree with its dtype and shape.
    #[error(
        "tensor {tensor:?}: {actual} bytes given, but shape {shape:?} x {dtype} needs {expected}"
    )]
    LengthMismatch {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<u64>,
        /// Bytes the shape and dtype need.
        expected: u64,
        /// Bytes given.
        actual: u64,
    },
    /// The tensors hold more than `u64::MAX` bytes together.
    #[error("the tensors hold more than 2^64 - 1 bytes together (at tensor {tensor:?})")]
    DataTooLarge {
        /// The tensor whose bytes overflow the total.
        tensor: String,
    },
    /// The header, padding included, is over the cap.
    #[error("the header would be {header_len} bytes, over the limit of {limit}")]
    HeaderTooLarge {
        /// N, padding included.
        header_len: u64,
        /// The cap in force.
        limit: u64,
    },
    /// Bytes were handed over for another tensor than the one expected next.
    #[error("tensor {got:?} was given, but {} is next in file order", match .expected { Some(t) => format!("tensor {t:?}"), None => "no tensor".to_string() })]
    OutOfOrder {
        /// The tensor expected next (`None` when every tensor is complete).
        expected: Option<String>,
        /// The tensor given.
        got: String,
    },
    /// [`StreamWriter`](crate::StreamWriter): a whole tensor was given
    /// after some of its bytes were written.
    #[error("tensor {tensor:?}: {filled} of its bytes were already written")]
    Started {
        /// The tensor name.
        tensor: String,
        /// Bytes of it written before.
        filled: u64,
    },
    /// A positional write covered bytes of a tensor already written.
    #[error(
        "tensor {tensor:?}: bytes {}..{} were given again (bytes {}..{} are already written)",
        range.0, range.1, written.0, written.1
    )]
    Overlap {
        /// The tensor name.
        tensor: String,
        /// The byte range given, within the tensor.
        range: (u64, u64),
        /// The range already written that it overlaps.
        written: (u64, u64),
    },
    /// A tensor received more bytes than it holds.
    #[error("tensor {tensor:?}: holds {expected} bytes, but at least {received} were given")]
    TooLong {
        /// The tensor name.
        tensor: String,
        /// Bytes it holds.
        expected: u64,
        /// Bytes given, at least.
        received: u64,
    },
    /// A tensor received fewer bytes than it holds.
    #[error("tensor {tensor:?}: holds {expected} bytes, but only {received} were given")]
    TooShort {
        /// The tensor name.
        tensor: String,
        /// Bytes it holds.
        expected: u64,
        /// Bytes given.
        received: u64,
    },
    /// Bytes were given after every tensor was complete.
    #[error("every tensor is complete, but {extra} more bytes were given")]
    Trailing {
        /// Bytes given past the end.
        extra: u64,
    },
    /// Reading a tensor's bytes from its source failed.
    #[error(
        "tensor {tensor:?}: reading its bytes failed after {received} of {expected}: {source}"
    )]
    Input {
        /// The tensor name.
        tensor: String,
        /// Bytes it holds.
        expected: u64,
        /// Bytes read before the failure.
        received: u64,
        /// What the source said.
        #[source]
        source: io::Error,
    },
    /// Writing to the output failed.
    #[error("writing the output failed: {0}")]
    Output(#[source] io::Error),
    /// An earlier error left the output incomplete; the writer takes no more.
    #[error("an earlier error stopped this writer")]
    Poisoned,
    /// [`PlacedWriter`](crate::writer::PlacedWriter): a tensor that was
    /// not declared.
    #[error("tensor {tensor:?} was not declared")]
    Undeclared {
        /// The tensor name.
        tensor: String,
    },
    /// [`PlacedWriter`](crate::writer::PlacedWriter): a tensor of another
    /// dtype or shape than declared.
    #[error("tensor {tensor:?} was declared {declared}, but is {given}")]
    NotAsDeclared {
        /// The tensor name.
        tensor: String,
        /// Its declared dtype and shape, as `F32 [2, 3]`.
        declared: String,
        /// Those given.
        given: String,
    },
}

/// Why a path cannot be written to ([`Error::Output`]): what is at the
/// path, or that it is one of the inputs being read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// A directory is at the path.
    #[error("is a directory, not a file to write")]
    Directory,
    /// A FIFO, socket or device is at the path: a save would replace it
    /// with a regular file, so it is refused.
    #[error("is not a regular file (a FIFO, socket or device), so it is not replaced")]
    NotRegular,
    /// A symbolic link to a directory is at the path.
    #[error("is a symbolic link to the directory {}", target.display())]
    LinkToDirectory {
        /// Where the link leads.
        target: PathBuf,
    },
    /// A symbolic link is at the path, and what it leads to does not exist
    /// (or cannot be reached).
    #[error("is a symbolic link that leads nowhere ({problem})")]
    DanglingLink {
        /// What resolving it said.
        problem: String,
    },
    /// Something other than a regular file of this user is at a partial
    /// download's name (a symbolic link, a FIFO, another user's file): it
    /// is neither followed nor reused nor removed.
    #[error("is {found} where a partial download of this user was expected: not followed, reused or removed (remove it to fetch again)")]
    UnsafePartial {
        /// What is there.
        found: &'static str,
    },
    /// The path is one of the files being read (the same file, whatever
    /// its name: same device and inode).
    #[error("is the input {}: writing it would replace what is being read", input.display())]
    IsInput {
        /// The input as it was named.
        input: PathBuf,
    },
    /// A set written by several processes ([`crate::set::StagedSet`]) is
    /// not in a state for this step: no plan staged, another plan staged,
    /// a part missing or not the plan's.
    #[error("{problem}")]
    Staging {
        /// What is wrong, and what to do.
        problem: String,
    },
    /// An object is already at an output in an object store (or one of a
    /// set's names is), and replacing it was not asked for (the command
    /// line's `--replace`, Python's `replace=True`).
    #[error("already exists: give --replace to replace it")]
    Exists,
}

/// What kind of failure an error is: what to decide on (report a bad
/// input, fix the call, raise a limit, retry), whichever layer the error
/// comes from. Every error of the workspace's crates has one
/// (`tensorfile_core::Error::kind`, `tensorfile::Error::kind`,
/// `tensorfile_pytorch::Error::kind`), and the C library turns each kind
/// into its `TL_E*` code.
///
/// Deliberately not `#[non_exhaustive]`: a `match` on it names every kind,
/// so a kind added later does not compile until each such match (the C
/// library's among them) says what to do with it:
///
/// ```
/// use tensorfile_core::ErrorKind;
///
/// // No `_` arm: this compiles only while these are all the kinds.
/// fn retry_makes_sense(kind: ErrorKind) -> bool {
///     match kind {
///         ErrorKind::Io | ErrorKind::OutOfMemory => true,
///         ErrorKind::Format
///         | ErrorKind::NotFound
///         | ErrorKind::InvalidArgument
///         | ErrorKind::Unsupported
///         | ErrorKind::Limit
///         | ErrorKind::Output
///         | ErrorKind::Internal => false,
///     }
/// }
/// assert!(retry_makes_sense(ErrorKind::Io));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// An input is malformed: a safetensors file breaking a reader rule, an
    /// index or a config that is not what it must be, shards that disagree
    /// with their index, a broken PyTorch archive, pickle or storage.
    Format,
    /// The system refused an operation: open, read, write, rename, map (a
    /// file that does not exist included).
    Io,
    /// Memory could not be allocated.
    OutOfMemory,
    /// What was asked for by name or index is not there: a tensor, a
    /// metadata key.
    NotFound,
    /// The caller's request is wrong: a typed view of another dtype, a
    /// slice outside the tensor, tensors declared to the writer that
    /// disagree with their bytes, share a name or arrive out of order, cast
    /// buffers of the wrong size, contradictory parameters.
    InvalidArgument,
    /// Well-formed input refused on purpose: a dtype an operation or the
    /// reader's contract does not take, a pickle global off the allow-list,
    /// a tensor or container kind that is not loaded, a value a cast or a
    /// quantization cannot represent.
    Unsupported,
    /// Over a limit or a budget: a header over the format's cap, a pickle
    /// or a checkpoint over the loader's budgets (the message names the
    /// option that raises it).
    Limit,
    /// The output path cannot be written: a directory, a FIFO or device, a
    /// symbolic link to a directory or to nothing, one of the inputs.
    Output,
    /// A bug: an invariant of the library does not hold.
    Internal,
}

impl ErrorKind {
    /// The kind of an I/O error: [`ErrorKind::OutOfMemory`] when the system
    /// says so, [`ErrorKind::Io`] otherwise.
    pub fn of_io(e: &io::Error) -> ErrorKind {
        if e.kind() == io::ErrorKind::OutOfMemory {
            ErrorKind::OutOfMemory
        } else {
            ErrorKind::Io
        }
    }
}

impl WriteError {
    /// This error's kind: declarations and calls the writer refuses are
    /// [`ErrorKind::InvalidArgument`], sizes past the format's caps
    /// [`ErrorKind::Limit`], failures to read or write bytes
    /// [`ErrorKind::Io`] (or [`ErrorKind::OutOfMemory`]).
    pub fn kind(&self) -> ErrorKind {
        use WriteError::*;
        match self {
            DuplicateName { .. }
            | ReservedName
            | ShapeOverflow { .. }
            | NotWholeBytes { .. }
            | LengthMismatch { .. }
            | OutOfOrder { .. }
            | Started { .. }
            | Overlap { .. }
            | TooLong { .. }
            | TooShort { .. }
            | Trailing { .. }
            | Undeclared { .. }
            | NotAsDeclared { .. }
            | Poisoned => ErrorKind::InvalidArgument,
            DataTooLarge { .. } | HeaderTooLarge { .. } => ErrorKind::Limit,
            Input { source, .. } | Output(source) => ErrorKind::of_io(source),
        }
    }
}

/// Any error of the format core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input breaks the format.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// An I/O error on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// An I/O error on a stream.
    #[error("I/O error: {0}")]
    Stream(#[from] io::Error),
    /// An error about a named file (its format, a tensor in it, ...).
    /// [`Error::detail`] gives the error without the file.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: Box<Error>,
    },
    /// No tensor by that name.
    #[error("no tensor named {0:?}")]
    NotFound(String),
    /// A typed view asked for the wrong element type.
    #[error("tensor {tensor:?} is {actual}, not {requested}")]
    DtypeMismatch {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        actual: Dtype,
        /// The dtype the caller asked for.
        requested: Dtype,
    },
    /// An operation does not support this dtype.
    #[error("tensor {tensor:?}: {operation} does not support {dtype}")]
    UnsupportedDtype {
        /// The tensor name.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// What was attempted.
        operation: &'static str,
    },
    /// A slice request does not fit the tensor.
    #[error("tensor {tensor:?}: {problem}")]
    Slice {
        /// The tensor name.
        tensor: String,
        /// What is wrong with the request.
        problem: String,
    },
    /// A buffer given to be filled (`read_into`) is not the size of the
    /// tensor or slice read into it.
    #[error("tensor {tensor:?}: the output buffer holds {actual} bytes, but the result is {expected} bytes")]
    DestinationLength {
        /// The tensor name.
        tensor: String,
        /// Bytes of the result.
        expected: u64,
        /// Bytes the buffer holds.
        actual: u64,
    },
    /// Rank rules ([`crate::ranks`]) that do not parse, or a world or rank
    /// they cannot serve (`line` 0: not about a line).
    #[error("rank rules{}: {problem}", if *line > 0 { format!(" line {line}") } else { String::new() })]
    RankRules {
        /// The line of the rules text (from 1), or 0.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// A well-formed file holds a dtype the reader does not accept
    /// ([`crate::ReadOptions::accept`]): an unsupported format, not a
    /// malformed one.
    #[error("unsupported format: tensor {tensor:?} is {dtype}, which {accepted} does not read")]
    UnsupportedFormat {
        /// The first tensor (in data order) outside the accepted dtypes.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// The dtypes accepted.
        accepted: crate::accept::Accept,
    },
    /// The writer refused its input, or writing failed.
    #[error("cannot write: {0}")]
    Write(#[from] WriteError),
    /// A sharded set's index, shards, or their agreement is wrong.
    /// (Boxed: it is the largest variant, and errors travel by value.)
    #[error(transparent)]
    Shard(Box<ShardError>),
    /// A path cannot be written to: see [`OutputError`]. Nothing was written.
    #[error("{}: {problem}", path.display())]
    Output {
        /// The output path, as given.
        path: PathBuf,
        /// What is wrong with it.
        problem: OutputError,
    },
    /// Committing a set of files ([`crate::atomic::AtomicSet`]) failed at
    /// `path`. The files of the set committed before it were removed again,
    /// except those that had replaced an older file (the old one is gone):
    /// `kept` lists them.
    #[error("{}: {source}{}", path.display(), kept_note(kept))]
    Set {
        /// The file whose commit failed.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<Error>,
        /// Files of the set that were committed and remain.
        kept: Vec<PathBuf>,
    },
}

/// The end of [`Error::Set`]'s message: what remains of the set.
fn kept_note(kept: &[PathBuf]) -> String {
    if kept.is_empty() {
        " (no file of the set was kept)".to_string()
    } else {
        let names: Vec<String> = kept.iter().map(|p| p.display().to_string()).collect();
        format!(
            " (committed before the failure and kept, having replaced older files: {})",
            names.join(", ")
        )
    }
}

impl Error {
    /// Attaches a path to an I/O error.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Names the file this error is about: a stream I/O error becomes
    /// [`Error::Io`], any other error is wrapped in [`Error::File`]. An
    /// error that already names a file is returned as it is.
    pub fn at(self, path: impl Into<PathBuf>) -> Error {
        match self {
            Error::Stream(source) => Error::io(path, source),
            named @ (Error::Io { .. }
            | Error::File { .. }
            | Error::Output { .. }
            | Error::Set { .. }) => named,
            other => Error::File {
                path: path.into(),
                source: Box::new(other),
            },
        }
    }

    /// This error's kind (that of the error inside, for [`Error::File`] and
    /// [`Error::Set`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Format(_) => ErrorKind::Format,
            Error::Io { source, .. } | Error::Stream(source) => ErrorKind::of_io(source),
            Error::File { source, .. } | Error::Set { source, .. } => source.kind(),
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::DtypeMismatch { .. }
            | Error::Slice { .. }
            | Error::DestinationLength { .. }
            | Error::RankRules { .. } => ErrorKind::InvalidArgument,
            Error::UnsupportedDtype { .. } | Error::UnsupportedFormat { .. } => {
                ErrorKind::Unsupported
            }
            Error::Write(e) => e.kind(),
            Error::Shard(e) => e.kind(),
            Error::Output { .. } => ErrorKind::Output,
        }
    }

    /// The error without the file it is about ([`Error::File`] unwrapped):
    /// what to match on.
    pub fn detail(&self) -> &Error {
        match self {
            Error::File { source, .. } => source.detail(),
            other => other,
        }
    }

    /// The file this error is about, if it names one.
    pub fn file(&self) -> Option<&std::path::Path> {
        match self {
            Error::File { path, .. }
            | Error::Io { path, .. }
            | Error::Output { path, .. }
            | Error::Set { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The tensor this error is about, if it names one (a missing tensor,
    /// a refused view, slice or dtype, a tensor the writer refused).
    pub fn tensor(&self) -> Option<&str> {
        use WriteError as W;
        match self.detail() {
            Error::Format(e) => e.tensor(),
            Error::NotFound(tensor)
            | Error::DtypeMismatch { tensor, .. }
            | Error::UnsupportedDtype { tensor, .. }
            | Error::Slice { tensor, .. }
            | Error::UnsupportedFormat { tensor, .. } => Some(tensor),
            Error::Set { source, .. } => source.tensor(),
            Error::Shard(e) => e.tensor(),
            Error::Write(
                W::DuplicateName { name: tensor }
                | W::ShapeOverflow { tensor, .. }
                | W::NotWholeBytes { tensor, .. }
                | W::LengthMismatch { tensor, .. }
                | W::DataTooLarge { tensor }
                | W::Started { tensor, .. }
                | W::Overlap { tensor, .. }
                | W::TooLong { tensor, .. }
                | W::TooShort { tensor, .. }
                | W::Input { tensor, .. },
            ) => Some(tensor),
            _ => None,
        }
    }

    /// Whether this is an I/O error saying the file does not exist.
    pub fn is_not_found_file(&self) -> bool {
        matches!(self.detail(), Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// The format error, if this is one (about a named file or not).
    pub fn format(&self) -> Option<&FormatError> {
        match self.detail() {
            Error::Format(e) => Some(e),
            _ => None,
        }
    }

    /// The reader rule broken, if this is a format error.
    pub fn rule(&self) -> Option<u8> {
        self.format().map(FormatError::rule)
    }
}

/// `Result` with this library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<ShardError> for Error {
    fn from(e: ShardError) -> Error {
        Error::Shard(Box::new(e))
    }
}

impl Error {
    /// The set's error, if this is one (about a named file or not).
    pub fn shard(&self) -> Option<&ShardError> {
        match self.detail() {
            Error::Shard(e) => Some(e),
            _ => None,
        }
    }
}

/// A text that does not parse (a shard size, an index's JSON): the message
/// says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

impl ParseError {
    /// A text's problem, in words.
    pub fn new(message: impl Into<String>) -> ParseError {
        ParseError(message.into())
    }

    /// This error's kind: [`ErrorKind::Format`] (a text that is not what
    /// it should be).
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Format
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.0
    }
}

/// A piece of a tensor in a torch DCP checkpoint: where it is in the full
/// tensor, and the rank file holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DcpPiece {
    /// The rank file's name.
    pub file: String,
    /// Where the piece starts in the full tensor (`saved_offsets`).
    pub offsets: Vec<u64>,
    /// Its shape.
    pub shape: Vec<u64>,
}

impl std::fmt::Display for DcpPiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "at offsets {:?} (shape {:?}) in {:?}",
            self.offsets, self.shape, self.file
        )
    }
}

/// A problem with a sharded set: the index, a shard, or how they agree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The index is not the expected JSON.
    #[error("{}: not a valid index: {problem}", index.display())]
    BadIndex {
        /// The index file.
        index: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A shard name is not a plain `.safetensors` file name.
    #[error("tensor {tensor:?} is mapped to shard {shard:?}, which is not a plain file name in the index's directory: {problem}")]
    BadShardName {
        /// The first tensor mapped to it.
        tensor: String,
        /// The shard name as written in the index.
        shard: String,
        /// Why it is refused.
        problem: &'static str,
    },
    /// A shard named by the index does not exist.
    #[error("shard {shard:?} (holding tensor {tensor:?}) does not exist in {}", dir.display())]
    MissingShard {
        /// The shard's file name.
        shard: String,
        /// The first tensor mapped to it.
        tensor: String,
        /// The directory it should be in.
        dir: PathBuf,
    },
    /// A shard is not a valid safetensors file (or cannot be read). The
    /// source error names the shard's path.
    #[error("{source}")]
    InvalidShard {
        /// The shard's file name.
        shard: String,
        /// Why it was refused.
        #[source]
        source: Box<Error>,
    },
    /// The index maps a tensor to a shard that does not hold it.
    #[error("tensor {tensor:?} is mapped to shard {shard:?}, which does not hold it{}", match found_in {
        Some(other) => format!(" (shard {other:?} does)"),
        None => String::new(),
    })]
    NotInShard {
        /// The tensor.
        tensor: String,
        /// The shard the index names.
        shard: String,
        /// A shard that does hold it, if any.
        found_in: Option<String>,
    },
    /// A tensor is held by two shards.
    #[error("tensor {tensor:?} is in two shards: {first:?} and {second:?}")]
    InTwoShards {
        /// The tensor.
        tensor: String,
        /// The shard the index maps it to.
        first: String,
        /// Another shard holding it.
        second: String,
    },
    /// A shard holds a tensor that the index does not list.
    #[error("shard {shard:?} holds tensor {tensor:?}, which the index's weight_map does not list")]
    NotInMap {
        /// The tensor.
        tensor: String,
        /// The shard holding it.
        shard: String,
    },
    /// A directory holds both a single file and an index that do not
    /// agree (mlx-lm writes both, agreeing: that is accepted).
    #[error("{}: {single} and {index} disagree ({problem}); transformers loads {single}", dir.display())]
    Ambiguous {
        /// The directory.
        dir: PathBuf,
        /// The single file's name.
        single: String,
        /// The index's name.
        index: String,
        /// How they disagree.
        problem: String,
    },
    /// A directory holds neither a single file nor an index.
    #[error("{}: holds neither {} nor {}", dir.display(), crate::set::names::SINGLE_NAME, crate::set::names::INDEX_NAME)]
    NoWeights {
        /// The directory.
        dir: PathBuf,
    },
    /// Two shards give one metadata key different values.
    #[error("metadata key {key:?} is {first:?} in shard {first_shard:?} but {second:?} in shard {second_shard:?}")]
    MetadataConflict {
        /// The key.
        key: String,
        /// Its first value.
        first: String,
        /// The shard giving the first value.
        first_shard: String,
        /// Its other value.
        second: String,
        /// The shard giving the other value.
        second_shard: String,
    },
    /// A file of a torch distributed checkpoint (DCP, Hugging Face
    /// storage) is not what its writer writes: a name other than
    /// `shard-R-model-K-of-N.safetensors`, sharding info
    /// (`DCP_SHARDING_INFO`) missing or malformed, a tensor without its
    /// offsets. The error around it names the file.
    #[error("not a torch DCP rank file: {problem}")]
    DcpFile {
        /// What is wrong.
        problem: String,
    },
    /// Two pieces of a DCP tensor overlap.
    #[error("tensor {tensor:?}: its piece {} overlaps its piece {}", pieces[0], pieces[1])]
    DcpOverlap {
        /// The tensor.
        tensor: String,
        /// The two pieces.
        pieces: Box<[DcpPiece; 2]>,
    },
    /// The pieces of a DCP tensor leave part of it uncovered (a rank's
    /// file missing, or an offset past where the tensor ends).
    #[error("tensor {tensor:?}: its pieces cover {covered} of the {numel} elements of its full shape {shape:?} (the pieces' extent)")]
    DcpNotCovered {
        /// The tensor.
        tensor: String,
        /// The full shape (the pieces' bounding box, as torch computes it).
        shape: Vec<u64>,
        /// Elements the pieces hold.
        covered: u64,
        /// Elements of the full shape.
        numel: u64,
    },
    /// The files of a DCP checkpoint disagree about a tensor (its dtype,
    /// its number of dimensions, its output file), or about the
    /// checkpoint (ranks missing, counts of output files).
    #[error("{}{first:?} and {second:?} disagree: {problem}", match tensor { Some(t) => format!("tensor {t:?}: "), None => String::new() })]
    DcpDisagree {
        /// The tensor, when the disagreement is about one.
        tensor: Option<String>,
        /// One file.
        first: String,
        /// The other.
        second: String,
        /// About what.
        problem: String,
    },
    /// The index's `metadata.total_size` is not a non-negative integer
    /// ([`ShardIndex::total_size`](crate::set::ShardIndex::total_size); opening
    /// a set only warns of it, since Hub indexes are not always exact).
    #[error("the index's total_size is {found}, not a byte count")]
    BadTotalSize {
        /// The value found, as JSON text.
        found: String,
    },
}

impl ShardError {
    /// The tensor this error is about, if it names one.
    pub fn tensor(&self) -> Option<&str> {
        match self {
            ShardError::BadShardName { tensor, .. }
            | ShardError::MissingShard { tensor, .. }
            | ShardError::NotInShard { tensor, .. }
            | ShardError::InTwoShards { tensor, .. }
            | ShardError::NotInMap { tensor, .. }
            | ShardError::DcpOverlap { tensor, .. }
            | ShardError::DcpNotCovered { tensor, .. } => Some(tensor),
            ShardError::DcpDisagree { tensor, .. } => tensor.as_deref(),
            ShardError::InvalidShard { source, .. } => source.tensor(),
            _ => None,
        }
    }

    /// This error's kind: a shard's own error's for
    /// [`ShardError::InvalidShard`];
    /// [`Format`](ErrorKind::Format) for the rest (an index,
    /// shard names or shards that are not what the set needs).
    pub fn kind(&self) -> ErrorKind {
        match self {
            ShardError::InvalidShard { source, .. } => source.kind(),
            ShardError::BadIndex { .. }
            | ShardError::BadShardName { .. }
            | ShardError::MissingShard { .. }
            | ShardError::NotInShard { .. }
            | ShardError::InTwoShards { .. }
            | ShardError::NotInMap { .. }
            | ShardError::Ambiguous { .. }
            | ShardError::NoWeights { .. }
            | ShardError::MetadataConflict { .. }
            | ShardError::BadTotalSize { .. }
            | ShardError::DcpFile { .. }
            | ShardError::DcpOverlap { .. }
            | ShardError::DcpNotCovered { .. }
            | ShardError::DcpDisagree { .. } => ErrorKind::Format,
        }
    }
}
