//! The canonical writer: the bytes the reference library writes, streamed.
//!
//! Writing has two steps. First every tensor is declared ([`TensorSpec`]:
//! name, dtype, shape) and a [`Layout`] is planned: the canonical file order,
//! each tensor's offsets and the header text. Then a [`StreamWriter`] writes
//! the header and takes each tensor's bytes, in file order, in pieces of any
//! size. Memory stays bounded by the header and one piece.
//!
//! [`serialize`] (to memory) and [`crate::atomic::save`] (to a path) are
//! conveniences over the same two steps, taking whole tensors
//! ([`TensorData`]).
//!
//! ```
//! use tensorfile_core::writer::{serialize, TensorRef};
//! use tensorfile_core::{Dtype, Metadata};
//!
//! let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let w = TensorRef { name: "w", dtype: Dtype::F32, shape: &[2, 2], data: &data };
//! let metadata = Metadata::from([("format".to_string(), "tinyllm".to_string())]);
//! let bytes = serialize([w], Some(&metadata))?;
//! assert_eq!(bytes.len(), 120); // the format page's worked example
//! # Ok::<(), tensorfile_core::Error>(())
//! ```

mod layout;
mod placed;
mod stream;

pub use layout::{Layout, Slot, Slots};
pub use placed::{PlacedWriter, Spool};
pub use stream::StreamWriter;

use crate::dtype::ByteLenError;
use crate::error::WriteError;
use crate::{Dtype, Error, Metadata, Result};

/// The declaration of one tensor: everything but its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    /// The tensor's name (a key of the header).
    pub name: String,
    /// Its element type.
    pub dtype: Dtype,
    /// Its dimensions, outermost first; `[]` for a scalar.
    pub shape: Vec<u64>,
}

impl TensorSpec {
    /// A declaration.
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: impl Into<Vec<u64>>) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dtype,
            shape: shape.into(),
        }
    }

    /// The number of bytes the tensor holds: its element count times the
    /// dtype's size. Refuses a shape whose byte count overflows `u64` and a
    /// sub-byte dtype whose elements do not fill whole bytes.
    ///
    /// # Errors
    ///
    /// [`WriteError::ShapeOverflow`] when the byte count overflows `u64`;
    /// [`WriteError::NotWholeBytes`] when sub-byte elements leave a partial
    /// byte.
    pub fn byte_len(&self) -> Result<u64, WriteError> {
        spec_byte_len(&self.name, self.dtype, &self.shape)
    }
}

fn spec_byte_len(name: &str, dtype: Dtype, shape: &[u64]) -> Result<u64, WriteError> {
    dtype.tensor_bytes(shape).map_err(|e| match e {
        ByteLenError::Overflow => WriteError::ShapeOverflow {
            tensor: name.to_string(),
            dtype,
            shape: shape.to_vec(),
        },
        ByteLenError::NotWholeBytes { numel } => WriteError::NotWholeBytes {
            tensor: name.to_string(),
            dtype,
            numel,
        },
    })
}

/// Padding of the header, which decides where the data buffer begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Align {
    /// N is a multiple of 8: the canonical file.
    #[default]
    Canonical,
    /// 8 + N is a multiple of 64 (a cache line): tensors of one dtype
    /// after the first start at their element alignment in a mapped file.
    Bytes64,
    /// 8 + N is a multiple of 4096 (a page).
    Bytes4096,
}

impl Align {
    /// The alignment of the data buffer's start in the file: 8, 64 or 4096.
    pub const fn bytes(self) -> u64 {
        match self {
            Align::Canonical => 8,
            Align::Bytes64 => 64,
            Align::Bytes4096 => 4096,
        }
    }

    /// The padding for `bytes` (8, 64 or 4096), `None` for anything else.
    pub const fn from_bytes(bytes: u64) -> Option<Align> {
        match bytes {
            8 => Some(Align::Canonical),
            64 => Some(Align::Bytes64),
            4096 => Some(Align::Bytes4096),
            _ => None,
        }
    }
}

/// How to write a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteOptions {
    /// The largest header (N, padding included) to write; the reader's cap by
    /// default, so that whatever is written can be read back.
    pub max_header_len: u64,
    /// Header padding: canonical (8) by default.
    pub align: Align,
    /// Whether saving to a path syncs the file and its directory (default
    /// `true`). The rename that makes a save atomic happens either way.
    pub sync: bool,
}

crate::with_fields!(WriteOptions {
    with_max_header_len => max_header_len: u64,
    with_align => align: Align,
    with_sync => sync: bool,
});

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            max_header_len: crate::DEFAULT_MAX_HEADER_LEN,
            align: Align::Canonical,
            sync: true,
        }
    }
}

/// Bytes a [`TensorData::produce`] piece holds at most when the tensor's
/// bytes are read from a source (not borrowed).
pub const PIECE: usize = 4 << 20;

/// A tensor to write or transform: its declaration, and its bytes, borrowed
/// when they are in memory and read on demand when they are not.
///
/// Implemented by [`TensorRef`] (plain borrowed data), by the reader's
/// [`crate::TensorView`] (borrowed from the file) and
/// [`crate::file::FileTensor`] (read from any byte source), and by
/// references to any of them, so a file read by this library can be
/// written back without copying, and a file that is not in memory is read
/// a piece at a time.
///
/// `E` is the error its reads return: the core's by default (so `dyn
/// TensorData` and `T: TensorData` mean the core's), a layer's own for a
/// tensor read by a layer above the core (a GGUF, npz or PyTorch tensor),
/// whose read errors then reach its caller typed. A type parameter, not an
/// associated type: the core's tensors implement `TensorData<E>` for every
/// `E` a core error converts into, so one safetensors tensor serves the
/// core's plans and every layer's (an associated type would fix one error
/// per tensor type and need adapters to mix tensors of two layers). They
/// carry inherent `name`/`dtype`/`shape` methods so that calls on a
/// concrete tensor stay unambiguous.
pub trait TensorData<E: From<Error> = Error>: Sync {
    /// The tensor's name.
    fn name(&self) -> &str;
    /// Its element type.
    fn dtype(&self) -> Dtype;
    /// Its dimensions.
    fn shape(&self) -> &[u64];
    /// The number of bytes it holds (which the writer checks against its
    /// dtype and shape).
    fn byte_len(&self) -> u64;
    /// All its bytes, borrowed, when they are in memory.
    fn bytes(&self) -> Option<&[u8]> {
        None
    }
    /// Fills `buf` with its bytes from `offset` bytes in.
    ///
    /// # Errors
    /// A range past its end, or a read that fails (naming the file).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), E>;

    /// Whether [`TensorData::read_at`] costs only the bytes it reads (true
    /// for bytes in memory or stored in a file). Tensors whose bytes are
    /// computed whole (gathered views of a checkpoint) say `false`, and
    /// are then taken through [`TensorData::produce`] in one pass.
    fn seekable(&self) -> bool {
        true
    }

    /// The `len` bytes from `offset`: borrowed when the tensor is in
    /// memory, else read into `scratch`.
    ///
    /// # Errors
    /// As [`TensorData::read_at`].
    fn bytes_at<'s>(
        &'s self,
        offset: u64,
        len: usize,
        scratch: &'s mut Vec<u8>,
    ) -> Result<&'s [u8], E> {
        if let Some(all) = self.bytes() {
            return Ok(in_memory_range(self.name(), all, offset, len)?);
        }
        // Only growth is zeroed: `read_at` fills every byte (or fails).
        scratch.resize(len, 0);
        self.read_at(offset, scratch)?;
        Ok(scratch)
    }

    /// Hands its bytes to `each(offset, piece)` in order of offset, every
    /// byte once: one piece when borrowed, pieces of at most [`PIECE`]
    /// bytes when read. Tensors whose bytes are computed (gathered views,
    /// inflated records) override it to produce them in their own pieces.
    ///
    /// # Errors
    /// A failed read, or what `each` returns.
    // The callback's type is the trait's contract; an alias would be one
    // more public name for it.
    #[allow(clippy::type_complexity)]
    fn produce(&self, each: &mut dyn FnMut(u64, &[u8]) -> Result<(), E>) -> Result<(), E> {
        if let Some(all) = self.bytes() {
            return each(0, all);
        }
        let len = self.byte_len();
        let mut buf = Vec::new();
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(PIECE as u64) as usize;
            let piece = self.bytes_at(at, n, &mut buf)?;
            each(at, piece)?;
            at += n as u64;
        }
        Ok(())
    }
}

/// `len` bytes at `offset` of a tensor's in-memory bytes, or an error
/// naming the tensor.
pub(crate) fn in_memory_range<'s>(
    name: &str,
    all: &'s [u8],
    offset: u64,
    len: usize,
) -> Result<&'s [u8]> {
    usize::try_from(offset)
        .ok()
        .and_then(|start| all.get(start..start.checked_add(len)?))
        .ok_or_else(|| crate::Error::Slice {
            tensor: name.to_string(),
            problem: format!(
                "{len} bytes at offset {offset} reach past its {} bytes",
                all.len()
            ),
        })
}

/// [`TensorData`] for a type whose bytes are in memory: `|self| (name,
/// dtype, shape, bytes)`.
macro_rules! in_memory_tensor {
    ($t:ty, |$s:ident| ($name:expr, $dtype:expr, $shape:expr, $data:expr)) => {
        impl<E: From<Error>> TensorData<E> for $t {
            fn name(&self) -> &str {
                let $s = self;
                $name
            }
            fn dtype(&self) -> Dtype {
                let $s = self;
                $dtype
            }
            fn shape(&self) -> &[u64] {
                let $s = self;
                $shape
            }
            fn byte_len(&self) -> u64 {
                let $s = self;
                $data.len() as u64
            }
            fn bytes(&self) -> Option<&[u8]> {
                let $s = self;
                Some($data)
            }
            fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), E> {
                let $s = self;
                let src = in_memory_range($name, $data, offset, buf.len())?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    };
}

impl<E: From<Error>, T: TensorData<E> + ?Sized> TensorData<E> for &T {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn dtype(&self) -> Dtype {
        (**self).dtype()
    }
    fn shape(&self) -> &[u64] {
        (**self).shape()
    }
    fn byte_len(&self) -> u64 {
        (**self).byte_len()
    }
    fn bytes(&self) -> Option<&[u8]> {
        (**self).bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), E> {
        (**self).read_at(offset, buf)
    }
    fn seekable(&self) -> bool {
        (**self).seekable()
    }
    fn produce(&self, each: &mut dyn FnMut(u64, &[u8]) -> Result<(), E>) -> Result<(), E> {
        (**self).produce(each)
    }
}

// A tensor read by this library writes back without a copy.
in_memory_tensor!(crate::TensorView<'_>, |t| (
    t.name(),
    t.dtype(),
    t.shape(),
    t.data()
));

/// A tensor made of borrowed parts, for writing user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorRef<'a> {
    /// The tensor's name.
    pub name: &'a str,
    /// Its element type.
    pub dtype: Dtype,
    /// Its dimensions.
    pub shape: &'a [u64],
    /// Its bytes.
    pub data: &'a [u8],
}

impl<'a> TensorRef<'a> {
    /// Its name (as [`TensorData::name`], which is ambiguous on a tensor
    /// that implements it for every error).
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// Its dimensions.
    pub fn shape(&self) -> &'a [u64] {
        self.shape
    }
}

in_memory_tensor!(TensorRef<'_>, |t| (t.name, t.dtype, t.shape, t.data));

/// Plans the layout of whole tensors: checks each one's byte length against
/// its dtype and shape, then declares them all.
pub(crate) fn plan_tensors<T: TensorData>(
    tensors: &[T],
    metadata: Option<&Metadata>,
    options: &WriteOptions,
) -> Result<Layout> {
    let mut decls = Vec::with_capacity(tensors.len());
    for t in tensors {
        let expected = spec_byte_len(t.name(), t.dtype(), t.shape())?;
        let actual = t.byte_len();
        if actual != expected {
            return Err(WriteError::LengthMismatch {
                tensor: t.name().to_string(),
                dtype: t.dtype(),
                shape: t.shape().to_vec(),
                expected,
                actual,
            }
            .into());
        }
        decls.push(layout::Decl {
            name: t.name(),
            dtype: t.dtype(),
            shape: t.shape(),
            len: expected,
        });
    }
    Layout::plan(decls, metadata, options)
}

/// Hands every tensor's bytes to `writer`, in file order. `tensors` must be
/// the slice `writer`'s layout was planned from.
pub(crate) fn write_tensors<W: std::io::Write, T: TensorData>(
    writer: &mut StreamWriter<W>,
    tensors: &[T],
) -> Result<()> {
    let order: Vec<usize> = writer.layout().slots().map(|s| s.declared()).collect();
    for index in order {
        let Some(t) = tensors.get(index) else {
            continue;
        };
        // The layout was planned from these tensors, lengths checked, and
        // this is its order: no need for `write_tensor`'s name check.
        match t.bytes() {
            Some(bytes) => writer.write_next(bytes)?,
            None if t.byte_len() == 0 => writer.write_next(&[])?,
            None => t.produce(&mut |_, piece| writer.write(piece))?,
        }
    }
    Ok(())
}

/// The canonical file holding `tensors` and `metadata`, in memory.
///
/// Tensors may come in any order; the file lays them out canonically.
/// Metadata that is `None` or empty writes no `__metadata__` key.
///
/// # Errors
///
/// [`Error::Write`] when the tensors cannot be planned (duplicate or
/// reserved names, data whose length does not match dtype and shape).
pub fn serialize<T: TensorData>(
    tensors: impl IntoIterator<Item = T>,
    metadata: Option<&Metadata>,
) -> Result<Vec<u8>> {
    serialize_with(tensors, metadata, &WriteOptions::default())
}

/// [`serialize`] with options (header cap, alignment; `sync` is ignored).
///
/// # Errors
///
/// As [`serialize`], and [`Error::Write`] when the header is over
/// `options`' cap.
pub fn serialize_with<T: TensorData>(
    tensors: impl IntoIterator<Item = T>,
    metadata: Option<&Metadata>,
    options: &WriteOptions,
) -> Result<Vec<u8>> {
    let tensors: Vec<T> = tensors.into_iter().collect();
    let layout = plan_tensors(&tensors, metadata, options)?;
    let mut writer = StreamWriter::in_memory(layout)?;
    write_tensors(&mut writer, &tensors)?;
    writer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn write_err(result: Result<impl std::fmt::Debug>) -> WriteError {
        match result {
            Err(Error::Write(e)) => e,
            other => panic!("expected a write error, got {other:?}"),
        }
    }

    #[test]
    fn worked_example() {
        let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
        let w = TensorRef {
            name: "w",
            dtype: Dtype::F32,
            shape: &[2, 2],
            data: &data,
        };
        let metadata = Metadata::from([("format".to_string(), "tinyllm".to_string())]);
        let bytes = serialize([w], Some(&metadata)).unwrap();
        let header = br#"{"__metadata__":{"format":"tinyllm"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}   "#;
        let mut expected = 96u64.to_le_bytes().to_vec();
        expected.extend_from_slice(header);
        expected.extend_from_slice(&data);
        assert_eq!(bytes, expected);
        assert_eq!(bytes.len(), 120);
    }

    #[test]
    fn order_escaping_and_empty_metadata() {
        let specs = vec![
            TensorSpec::new("b", Dtype::U8, [1]),
            TensorSpec::new("a\"\n\u{e9}", Dtype::U8, [0]),
            TensorSpec::new("z", Dtype::U64, []),
            TensorSpec::new("c", Dtype::F4, [2]),
        ];
        let empty = Metadata::new();
        let layout = Layout::new(&specs, Some(&empty), &WriteOptions::default()).unwrap();
        let names: Vec<&str> = layout.slots().map(|s| s.name()).collect();
        assert_eq!(names, ["z", "a\"\n\u{e9}", "b", "c"]);
        let text = std::str::from_utf8(&layout.header()[8..]).unwrap();
        assert!(text.starts_with(
            "{\"z\":{\"dtype\":\"U64\",\"shape\":[],\"data_offsets\":[0,8]},\"a\\\"\\n\u{e9}\":"
        ));
        assert!(text.ends_with("}}") || text.ends_with(' '));
        assert_eq!(layout.header_len() % 8, 0);
        assert_eq!(layout.data_len(), 10);
        assert_eq!(layout.slot(3).unwrap().data_offsets(), (9, 10));
    }

    #[test]
    fn alignment_pads_to_the_boundary() {
        for align in [Align::Bytes64, Align::Bytes4096] {
            let options = WriteOptions {
                align,
                ..Default::default()
            };
            let layout =
                Layout::new(&[TensorSpec::new("x", Dtype::F32, [3])], None, &options).unwrap();
            assert_eq!((8 + layout.header_len()) % align.bytes(), 0);
            assert!(layout.header_len() < align.bytes());
        }
        assert_eq!(Align::from_bytes(64), Some(Align::Bytes64));
        assert_eq!(Align::from_bytes(32), None);
    }

    #[test]
    fn refuses_invalid_declarations() {
        let opts = WriteOptions::default();
        let dup = vec![
            TensorSpec::new("a", Dtype::U8, [1]),
            TensorSpec::new("a", Dtype::F32, [1]),
        ];
        assert!(matches!(
            write_err(Layout::new(&dup, None, &opts)),
            WriteError::DuplicateName { name } if name == "a"
        ));
        let reserved = vec![TensorSpec::new("__metadata__", Dtype::U8, [1])];
        assert!(matches!(
            write_err(Layout::new(&reserved, None, &opts)),
            WriteError::ReservedName
        ));
        let odd = vec![TensorSpec::new("q", Dtype::F4, [3])];
        assert!(matches!(
            write_err(Layout::new(&odd, None, &opts)),
            WriteError::NotWholeBytes { numel: 3, .. }
        ));
        let huge = vec![TensorSpec::new("h", Dtype::U64, [u64::MAX / 4, 3])];
        assert!(matches!(
            write_err(Layout::new(&huge, None, &opts)),
            WriteError::ShapeOverflow { .. }
        ));
        // 16 tensors of 2^60 bytes: the last one's end is 2^64.
        let sum: Vec<TensorSpec> = (0..16)
            .map(|i| TensorSpec::new(format!("h{i:02}"), Dtype::U8, [1 << 30, 1 << 30]))
            .collect();
        let err = write_err(Layout::new(&sum, None, &opts));
        assert!(
            matches!(&err, WriteError::DataTooLarge { tensor } if tensor == "h15"),
            "{err:?}"
        );
        let small_cap = WriteOptions {
            max_header_len: 64,
            ..Default::default()
        };
        let long = vec![TensorSpec::new("x".repeat(100), Dtype::U8, [1])];
        let err = write_err(Layout::new(&long, None, &small_cap));
        assert!(matches!(
            err,
            WriteError::HeaderTooLarge {
                header_len: 152,
                limit: 64
            }
        ));
        assert_eq!(
            err.to_string(),
            "the header would be 152 bytes, over the limit of 64"
        );

        let data = [0u8; 3];
        let t = TensorRef {
            name: "t",
            dtype: Dtype::F16,
            shape: &[2],
            data: &data,
        };
        let err = write_err(serialize([t], None));
        assert_eq!(
            err.to_string(),
            "tensor \"t\": 3 bytes given, but shape [2] x F16 needs 4"
        );
    }

    fn two_tensor_writer() -> StreamWriter<Vec<u8>> {
        let specs = vec![
            TensorSpec::new("b", Dtype::U8, [3]),
            TensorSpec::new("e", Dtype::U8, [0]),
            TensorSpec::new("a", Dtype::U8, [2]),
        ];
        StreamWriter::create(Vec::new(), &specs, None, &WriteOptions::default()).unwrap()
    }

    #[test]
    fn streaming_in_pieces_matches_serialize() {
        let whole = serialize(
            [
                TensorRef {
                    name: "a",
                    dtype: Dtype::U8,
                    shape: &[2],
                    data: &[1, 2],
                },
                TensorRef {
                    name: "b",
                    dtype: Dtype::U8,
                    shape: &[3],
                    data: &[3, 4, 5],
                },
                TensorRef {
                    name: "e",
                    dtype: Dtype::U8,
                    shape: &[0],
                    data: &[],
                },
            ],
            None,
        )
        .unwrap();

        let mut w = two_tensor_writer();
        assert_eq!(w.expected().unwrap().name(), "a");
        w.write(&[1]).unwrap();
        assert_eq!(w.remaining(), 1);
        w.write(&[2, 3]).unwrap();
        assert_eq!(w.expected().unwrap().name(), "b");
        w.write(&[4, 5]).unwrap();
        // The zero-size tensor is still nameable, or can be left out.
        assert_eq!(w.expected().unwrap().name(), "e");
        assert_eq!(w.finish().unwrap(), whole);

        let mut w = two_tensor_writer();
        w.write_tensor("a", &[1, 2]).unwrap();
        w.write_from("b", &[3u8, 4, 5][..]).unwrap();
        w.write_tensor("e", &[]).unwrap();
        assert!(w.expected().is_none());
        assert_eq!(w.finish().unwrap(), whole);
    }

    #[test]
    fn streaming_refuses_short_long_and_out_of_order() {
        let mut w = two_tensor_writer();
        assert!(matches!(
            write_err(w.write_tensor("b", &[3, 4, 5])),
            WriteError::OutOfOrder { expected: Some(e), got } if e == "a" && got == "b"
        ));
        // Poisoned after any error.
        assert!(matches!(write_err(w.write(&[1])), WriteError::Poisoned));

        let mut w = two_tensor_writer();
        w.write(&[1, 2, 3, 4]).unwrap();
        let err = write_err(w.write(&[5, 6]));
        assert_eq!(
            err.to_string(),
            "every tensor is complete, but 1 more bytes were given"
        );

        let mut w = two_tensor_writer();
        w.write_tensor("a", &[1, 2]).unwrap();
        let err = write_err(w.write_from("b", &[3u8, 4, 5, 6][..]));
        assert!(matches!(
            err,
            WriteError::TooLong {
                expected: 3,
                received: 4,
                ..
            }
        ));

        let mut w = two_tensor_writer();
        w.write_tensor("a", &[1, 2]).unwrap();
        let err = write_err(w.write_from("b", &[3u8, 4][..]));
        assert_eq!(
            err.to_string(),
            "tensor \"b\": holds 3 bytes, but only 2 were given"
        );

        let mut w = two_tensor_writer();
        w.write(&[1, 2, 3]).unwrap();
        assert!(matches!(
            write_err(w.finish()),
            WriteError::TooShort { tensor, expected: 3, received: 1 } if tensor == "b"
        ));

        let mut w = two_tensor_writer();
        w.write(&[1]).unwrap();
        assert!(matches!(
            write_err(w.write_tensor("a", &[1, 2])),
            WriteError::Started { filled: 1, .. }
        ));

        struct Failing;
        impl std::io::Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("boom"))
            }
        }
        let mut w = two_tensor_writer();
        let err = write_err(w.write_from("a", Failing));
        assert_eq!(
            err.to_string(),
            "tensor \"a\": reading its bytes failed after 0 of 2: boom"
        );
    }

    #[test]
    fn output_errors_are_reported() {
        let mut out = [0u8; 20];
        let specs = vec![TensorSpec::new("a", Dtype::U8, [64])];
        let err = StreamWriter::create(&mut out[..], &specs, None, &WriteOptions::default());
        assert!(matches!(write_err(err), WriteError::Output(_)));
    }
}
