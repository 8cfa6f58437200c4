//! One way in: what an input is, decided by what its bytes say (and, for a
//! directory, by the files in it; for a URL, by its name), so that every
//! front end (the command line, the C library, Python) takes the same
//! inputs the same way.
//!
//! [`open`] takes a path or a URL and opens it as what it is ([`Input`]);
//! [`probe`] says what it is without opening it (a front end that takes
//! only some kinds refuses the others first), and [`Probed::open`] then
//! opens it.
//!
//! ```
//! use tensorfile::{open, Input, OpenOptions};
//! use tensorfile::{save, Dtype, TensorRef, WriteOptions};
//! let dir = tempfile::tempdir()?;
//! let w = TensorRef { name: "w", dtype: Dtype::F32, shape: &[1], data: &[0u8; 4] };
//! save(dir.path().join("model.safetensors"), [w], None, &WriteOptions::default())?;
//! match open(dir.path(), &OpenOptions::default())? {
//!     Input::SafetensorsSet(set) => assert_eq!(set.len(), 1),
//!     other => panic!("{}", other.kind()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ```
//! use tensorfile::{probe, InputKind as Kind};
//! use tensorfile::{save, Dtype, TensorRef, WriteOptions};
//! let dir = tempfile::tempdir()?;
//! let model = dir.path().join("model.safetensors");
//! let w = TensorRef { name: "w", dtype: Dtype::F32, shape: &[1], data: &[0u8; 4] };
//! save(&model, [w], None, &WriteOptions::default())?;
//! assert_eq!(probe(&model)?.kind(), Kind::Safetensors);
//! // A directory holding a `model.safetensors` is a set (of one).
//! assert_eq!(probe(dir.path())?.kind(), Kind::SafetensorsSet);
//! // A legacy `torch.save`: PROTO 2, then LONG1 (its magic number).
//! let pt = dir.path().join("old.pt");
//! std::fs::write(&pt, b"\x80\x02\x8a\x0a")?;
//! assert_eq!(probe(&pt)?.kind(), Kind::Pytorch);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, Read};
use std::path::{Path, PathBuf};

#[cfg(feature = "gguf")]
use crate::gguf::{GgufFile, ReadLimits};
#[cfg(feature = "npz")]
use crate::npz::{NpzFile, NpzLimits};
#[cfg(feature = "pytorch")]
use crate::pytorch::{Checkpoint, CheckpointSet, LoadOptions};
use crate::source::open_regular;
use tensorfile_core::{url_of, LooksLike};

use crate::{ByteSource, Error, ReadOptions, SafeTensors, ShardedTensors};

pub(crate) use tensorfile_core::InputKind as Kind;

/// Whether this build reads inputs of `kind` (its Cargo feature is on).
// The arms are constants that differ from build to build, which clippy
// reads as a `matches!` in the build at hand.
#[allow(clippy::match_like_matches_macro)]
pub fn is_built(kind: Kind) -> bool {
    match kind {
        Kind::Pytorch | Kind::PytorchSet => cfg!(feature = "pytorch"),
        Kind::Gguf => cfg!(feature = "gguf"),
        Kind::Npz | Kind::Npy => cfg!(feature = "npz"),
        _ => true,
    }
}

/// Refuses an input at `path` of `kind` when this build does not read it:
/// what [`Probed::open`] does before opening, and what a front end that
/// opens a detected kind itself calls first.
///
/// # Errors
/// [`Error::FeatureDisabled`] when the kind's feature is off.
pub fn ensure_built(kind: Kind, path: &Path) -> Result<(), Error> {
    match kind.feature() {
        Some(feature) if !is_built(kind) => Err(Error::FeatureDisabled {
            path: path.to_path_buf(),
            what: kind.describe(),
            feature,
        }),
        _ => Ok(()),
    }
}

/// The weight files a model directory may hold, and what each makes it:
/// the safetensors names first (transformers prefers them).
const DIR_ENTRIES: [(&str, Kind); 8] = [
    ("model.safetensors.index.json", Kind::SafetensorsSet),
    ("model.safetensors", Kind::SafetensorsSet),
    (
        "diffusion_pytorch_model.safetensors.index.json",
        Kind::SafetensorsSet,
    ),
    ("diffusion_pytorch_model.safetensors", Kind::SafetensorsSet),
    ("pytorch_model.bin.index.json", Kind::PytorchSet),
    ("pytorch_model.bin", Kind::PytorchSet),
    ("diffusion_pytorch_model.bin.index.json", Kind::PytorchSet),
    ("diffusion_pytorch_model.bin", Kind::PytorchSet),
];

/// The weight file a model directory holds (the first of its index, its
/// single file, PyTorch's and diffusers' names that is there) and what it
/// makes the directory; `None` when it holds none.
pub fn dir_weights(dir: &Path) -> Option<(&'static str, Kind)> {
    DIR_ENTRIES
        .iter()
        .find(|(name, _)| dir.join(name).is_file())
        .copied()
}

/// How many bytes of a file [`detect`] looks at.
const HEAD: u64 = 512;

/// What the input at `path` is.
///
/// A file that is none of the other kinds is [`Kind::Safetensors`]: the
/// safetensors reader then says which rule it breaks.
///
/// # Errors
/// The path cannot be read, is not a regular file or directory, or is a
/// directory without model weights.
fn detect(path: &Path) -> Result<Kind, Error> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        return dir_weights(path).map(|(_, kind)| kind).ok_or_else(|| {
                not_a(
                    path,
                    "a directory holding no model weights (model.safetensors, its index, pytorch_model.bin or diffusers' equivalents)".into(),
                )
            });
    }
    let (file, _) = open_regular(path).map_err(|e| Error::io(path, e))?;
    let mut head = Vec::with_capacity(HEAD as usize);
    file.take(HEAD)
        .read_to_end(&mut head)
        .map_err(|e| Error::io(path, e))?;
    kind_of(path, &head)
}

/// What a file is, from its name and its first bytes; a file of no other
/// kind is taken for safetensors (invalid ones then fail with their rule).
fn kind_of(path: &Path, head: &[u8]) -> Result<Kind, Error> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The signatures, as the reader's errors name them.
    let looks = LooksLike::of(head);
    match looks {
        Some(LooksLike::Gguf) => return Ok(Kind::Gguf),
        Some(LooksLike::Npy) => return Ok(Kind::Npy),
        Some(LooksLike::Zip) => return Ok(zip_kind(head, &name)),
        _ => {}
    }
    // A safetensors file: the header length, then its JSON object.
    if head.len() >= 9 && head[8] == b'{' {
        return Ok(Kind::Safetensors);
    }
    // A legacy torch.save (a pickle: PROTO 2..5, then LONG1, its magic
    // number), or a tar archive (the 0.1.x format, which the loader
    // refuses by name).
    if looks == Some(LooksLike::Pickle) || head.get(257..262) == Some(b"ustar") {
        return Ok(Kind::Pytorch);
    }
    let text = head.iter().position(|b| !b.is_ascii_whitespace());
    if name.ends_with(".json") && text.is_some_and(|i| head[i] == b'{') {
        return Ok(if name.ends_with(".bin.index.json") {
            Kind::PytorchSet
        } else {
            Kind::SafetensorsSet
        });
    }
    // Anything else is read as safetensors: this tool's own format, whose
    // reader says exactly which rule the bytes break.
    Ok(Kind::Safetensors)
}

/// A zip archive is a PyTorch checkpoint (its first record is
/// `<dir>/data.pkl`, or any record under a top-level directory) unless its
/// members are `.npy` arrays.
fn zip_kind(head: &[u8], file_name: &str) -> Kind {
    // The first local header: 30 bytes, then the name.
    let first_name = head
        .get(26..28)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
        .and_then(|len| head.get(30..30 + len));
    match first_name {
        Some(n) if n.ends_with(b".npy") => Kind::Npz,
        _ if file_name.ends_with(".npz") => Kind::Npz,
        _ => Kind::Pytorch,
    }
}

fn not_a(path: &Path, what: String) -> Error {
    Error::io(
        path,
        io::Error::new(io::ErrorKind::InvalidData, format!("this is {what}")),
    )
}

/// How [`open`] opens an input.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OpenOptions {
    /// How safetensors headers are read and checked (every shard's, for a
    /// set).
    pub read: ReadOptions,
    /// Whether local safetensors files and shards are memory-mapped on
    /// first use (zero-copy, but not safe against a file truncated
    /// underneath) rather than read with positional reads. `true` by
    /// default; remote inputs are always read.
    pub map: bool,
    /// How PyTorch checkpoints are loaded.
    #[cfg(feature = "pytorch")]
    pub pytorch: LoadOptions,
    /// Limits on reading GGUF files.
    #[cfg(feature = "gguf")]
    pub gguf: ReadLimits,
    /// Limits on reading `.npy` arrays and `.npz` archives.
    #[cfg(feature = "npz")]
    pub npz: NpzLimits,
    /// The client URLs are read through; `None`: one client that the
    /// whole process shares, made on first use with the default options.
    #[cfg(feature = "remote")]
    pub client: Option<std::sync::Arc<tensorfile_remote::Client>>,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            read: ReadOptions::default(),
            map: true,
            #[cfg(feature = "pytorch")]
            pytorch: LoadOptions::default(),
            #[cfg(feature = "gguf")]
            gguf: ReadLimits::default(),
            #[cfg(feature = "npz")]
            npz: NpzLimits::default(),
            #[cfg(feature = "remote")]
            client: None,
        }
    }
}

tensorfile_core::with_fields!(OpenOptions {
    with_read => read: ReadOptions,
    with_map => map: bool,
});
#[cfg(feature = "pytorch")]
tensorfile_core::with_fields!(OpenOptions { with_pytorch => pytorch: LoadOptions });
#[cfg(feature = "gguf")]
tensorfile_core::with_fields!(OpenOptions { with_gguf => gguf: ReadLimits });
#[cfg(feature = "npz")]
tensorfile_core::with_fields!(OpenOptions { with_npz => npz: NpzLimits });

#[cfg(feature = "remote")]
impl OpenOptions {
    /// Sets [`OpenOptions::client`].
    #[must_use]
    pub fn with_client(mut self, client: std::sync::Arc<tensorfile_remote::Client>) -> Self {
        self.client = Some(client);
        self
    }

    /// The client URLs are read through: [`OpenOptions::client`], else
    /// the one the process shares.
    pub fn remote_client(&self) -> std::sync::Arc<tensorfile_remote::Client> {
        static SHARED: std::sync::OnceLock<std::sync::Arc<tensorfile_remote::Client>> =
            std::sync::OnceLock::new();
        match &self.client {
            Some(c) => c.clone(),
            None => SHARED
                .get_or_init(|| tensorfile_remote::Client::new(Default::default()))
                .clone(),
        }
    }
}

/// An opened input, as what it is: match on it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// A safetensors file: a set of one shard without an index, whose
    /// [`Shard::file`](tensorfile_core::set::Shard::file) is the file (local or
    /// remote); [`Input::into_file`] gives the file itself.
    Safetensors(ShardedTensors),
    /// A set of safetensors files: an index and its shards, or a model
    /// directory (local or remote), validated whole.
    SafetensorsSet(ShardedTensors),
    /// A PyTorch checkpoint; also a model directory holding a single
    /// `pytorch_model.bin` (or diffusers' equivalent) and no index.
    /// (Boxed: the loaded pickle is large.)
    #[cfg(feature = "pytorch")]
    Pytorch(Box<Checkpoint>),
    /// A set of PyTorch checkpoints: a `.bin` index and its shards.
    #[cfg(feature = "pytorch")]
    PytorchSet(Box<CheckpointSet>),
    /// A GGUF file.
    #[cfg(feature = "gguf")]
    Gguf(Box<GgufFile>),
    /// A numpy `.npz` archive.
    #[cfg(feature = "npz")]
    Npz(Box<NpzFile>),
    /// A numpy `.npy` array.
    #[cfg(feature = "npz")]
    Npy(Box<NpzFile>),
}

impl Input {
    /// What it is.
    pub fn kind(&self) -> Kind {
        match self {
            Input::Safetensors(_) => Kind::Safetensors,
            Input::SafetensorsSet(_) => Kind::SafetensorsSet,
            #[cfg(feature = "pytorch")]
            Input::Pytorch(_) => Kind::Pytorch,
            #[cfg(feature = "pytorch")]
            Input::PytorchSet(_) => Kind::PytorchSet,
            #[cfg(feature = "gguf")]
            Input::Gguf(_) => Kind::Gguf,
            #[cfg(feature = "npz")]
            Input::Npz(_) => Kind::Npz,
            #[cfg(feature = "npz")]
            Input::Npy(_) => Kind::Npy,
        }
    }

    /// The safetensors file, if it is one ([`Kind::Safetensors`], local or
    /// remote): its header and metadata whole, embedded digests included
    /// (see [`ShardedTensors::into_file`]), its bytes read on demand.
    pub fn into_file(self) -> Option<SafeTensors<Box<dyn ByteSource>>> {
        match self {
            Input::Safetensors(set) => set.into_file(),
            _ => None,
        }
    }

    /// The safetensors file or set, if it is one.
    pub fn into_safetensors(self) -> Option<ShardedTensors> {
        match self {
            Input::Safetensors(set) | Input::SafetensorsSet(set) => Some(set),
            #[cfg(any(feature = "pytorch", feature = "gguf", feature = "npz"))]
            _ => None,
        }
    }
}

/// What an input is, found by [`probe`] without opening it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probed {
    path: PathBuf,
    kind: Kind,
    url: bool,
}

impl Probed {
    /// What it is (judged from its name alone for a URL: see
    /// [`tensorfile_remote::kind`]).
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The path or URL, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The URL, when it is one.
    pub fn url(&self) -> Option<&str> {
        self.url.then(|| self.path.to_str()).flatten()
    }

    /// Opens it as one safetensors file (local or remote): its header and
    /// metadata whole, embedded digests included (see [`Input::into_file`]).
    ///
    /// # Errors
    /// "a directory, not a file" (an I/O error of kind `InvalidInput`,
    /// naming the input, a URL by its public name) when it is anything
    /// else; else as [`Probed::open`].
    pub fn open_file(
        &self,
        options: &OpenOptions,
    ) -> Result<SafeTensors<Box<dyn ByteSource>>, Error> {
        let not_a_file = || {
            let e = io::Error::new(io::ErrorKind::InvalidInput, "a directory, not a file");
            #[cfg(feature = "remote")]
            if let Some(url) = self.url() {
                return Error::io(tensorfile_remote::public_name(url), e);
            }
            Error::io(&self.path, e)
        };
        if self.kind != Kind::Safetensors {
            return Err(not_a_file());
        }
        self.open(options)?.into_file().ok_or_else(not_a_file)
    }

    /// Opens it as what it is.
    ///
    /// # Errors
    /// What the opener of its kind refuses (the format's errors, naming
    /// the file), or an I/O error.
    pub fn open(&self, options: &OpenOptions) -> Result<Input, Error> {
        if self.url {
            let set = open_set(&self.path, options)?;
            return Ok(match self.kind {
                Kind::Safetensors => Input::Safetensors(set),
                _ => Input::SafetensorsSet(set),
            });
        }
        let path = self.path.as_path();
        ensure_built(self.kind, path)?;
        let set = || open_set(path, options);
        Ok(match self.kind {
            Kind::Safetensors => Input::Safetensors(set()?),
            Kind::SafetensorsSet => Input::SafetensorsSet(set()?),
            #[cfg(feature = "pytorch")]
            Kind::Pytorch => {
                Input::Pytorch(Box::new(Checkpoint::open_with(path, &options.pytorch)?))
            }
            #[cfg(feature = "pytorch")]
            Kind::PytorchSet => match CheckpointSet::find_index(path) {
                Some(index) => {
                    Input::PytorchSet(Box::new(CheckpointSet::open(index, &options.pytorch)?))
                }
                // A directory holding one `.bin` and no index.
                None => {
                    let single = dir_weights(path)
                        .map(|(name, _)| path.join(name))
                        .unwrap_or_else(|| path.to_path_buf());
                    Input::Pytorch(Box::new(Checkpoint::open_with(single, &options.pytorch)?))
                }
            },
            #[cfg(feature = "gguf")]
            Kind::Gguf => Input::Gguf(Box::new(GgufFile::open_with(path, &options.gguf)?)),
            #[cfg(feature = "npz")]
            Kind::Npz => Input::Npz(Box::new(NpzFile::open_with(path, &options.npz)?)),
            #[cfg(feature = "npz")]
            Kind::Npy => Input::Npy(Box::new(NpzFile::open_with(path, &options.npz)?)),
            // A kind the core knows and this crate does not open.
            other => {
                return Err(not_a(
                    path,
                    format!("{other}, which this build does not open"),
                ))
            }
        })
    }
}

/// Opens `path_or_url` as a safetensors file or set, whatever it holds: a
/// file, an index, or a model directory, local ([`ShardedTensors::open`],
/// mapped or read as [`OpenOptions::map`] says) or at a URL (headers
/// only, through [`OpenOptions::client`]). Bytes that are not safetensors
/// fail with the reader rule they break: a front end that names other
/// kinds [`probe`]s first.
///
/// # Errors
/// As [`ShardedTensors::open`]; a URL's requests that fail, or a URL
/// without the `remote` feature.
pub fn open_set(
    path_or_url: impl AsRef<Path>,
    options: &OpenOptions,
) -> Result<ShardedTensors, Error> {
    let path = path_or_url.as_ref();
    if let Some(url) = url_of(path) {
        #[cfg(feature = "remote")]
        return Ok(tensorfile_remote::open_set(
            url,
            &options.remote_client(),
            &options.read,
        )?);
        #[cfg(not(feature = "remote"))]
        return Err(no_remote(url));
    }
    Ok(if options.map {
        ShardedTensors::open_with(path, &options.read)?
    } else {
        ShardedTensors::open_pread(path, &options.read)?
    })
}

#[cfg(not(feature = "remote"))]
fn no_remote(url: &str) -> Error {
    Error::io(
        url,
        io::Error::new(
            io::ErrorKind::Unsupported,
            "a URL, which this build does not read (tensorfile's `remote` feature is off)",
        ),
    )
}

/// What the input at `path_or_url` is, without opening it: a URL by its
/// name (see [`tensorfile_remote::kind`]), a file by its first bytes, a
/// directory by the model weights in it. A file that is none of
/// the other kinds is [`Kind::Safetensors`]: the safetensors reader then
/// says which rule it breaks.
///
/// # Errors
/// The path cannot be read, is not a regular file or directory, or is a
/// directory without model weights; a URL without the `remote` feature.
pub fn probe(path_or_url: impl AsRef<Path>) -> Result<Probed, Error> {
    let path = path_or_url.as_ref();
    if let Some(url) = url_of(path) {
        #[cfg(not(feature = "remote"))]
        return Err(no_remote(url));
        #[cfg(feature = "remote")]
        return Ok(Probed {
            path: path.to_path_buf(),
            kind: tensorfile_remote::kind(url),
            url: true,
        });
    }
    Ok(Probed {
        path: path.to_path_buf(),
        kind: detect(path)?,
        url: false,
    })
}

/// Opens `path_or_url` as what it is: a safetensors file or set (an index,
/// or a model directory), a PyTorch checkpoint or set, a GGUF file, a
/// `.npz` archive or a `.npy` array; local, or at an `s3://`, `hf://`,
/// `http(s)://` URL (safetensors only; with the `remote` feature, through
/// [`OpenOptions::client`]). [`probe`] then [`Probed::open`].
///
/// # Errors
/// As [`probe`] and [`Probed::open`].
pub fn open(path_or_url: impl AsRef<Path>, options: &OpenOptions) -> Result<Input, Error> {
    probe(path_or_url)?.open(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_the_first_bytes() {
        let p = Path::new("x");
        let mut st = 2u64.to_le_bytes().to_vec();
        st.extend_from_slice(b"{}");
        assert_eq!(kind_of(p, &st).unwrap(), Kind::Safetensors);
        assert_eq!(kind_of(p, b"GGUF\x03\0\0\0").unwrap(), Kind::Gguf);
        assert_eq!(kind_of(p, b"\x93NUMPY\x01\0").unwrap(), Kind::Npy);
        assert_eq!(kind_of(p, b"\x80\x02\x8a\x0a").unwrap(), Kind::Pytorch);
        let mut zip = b"PK\x03\x04".to_vec();
        zip.resize(26, 0);
        zip.extend_from_slice(&7u16.to_le_bytes());
        zip.extend_from_slice(&[0, 0]);
        zip.extend_from_slice(b"a_0.npy");
        assert_eq!(kind_of(p, &zip).unwrap(), Kind::Npz);
        zip.truncate(30);
        zip.extend_from_slice(b"archive");
        assert_eq!(kind_of(p, &zip).unwrap(), Kind::Pytorch);
        let index = Path::new("pytorch_model.bin.index.json");
        assert_eq!(
            kind_of(index, b" {\"weight_map\"").unwrap(),
            Kind::PytorchSet
        );
        let index = Path::new("model.safetensors.index.json");
        assert_eq!(kind_of(index, b"{").unwrap(), Kind::SafetensorsSet);
        assert_eq!(kind_of(p, b"hello world").unwrap(), Kind::Safetensors);
        assert_eq!(kind_of(p, b"").unwrap(), Kind::Safetensors);
    }

    #[test]
    fn kinds_without_their_feature_are_refused() {
        let p = Path::new("m.gguf");
        assert!(ensure_built(Kind::Safetensors, p).is_ok());
        assert!(ensure_built(Kind::SafetensorsSet, p).is_ok());
        let kinds = [
            Kind::Pytorch,
            Kind::PytorchSet,
            Kind::Gguf,
            Kind::Npz,
            Kind::Npy,
        ];
        for kind in kinds {
            let feature = kind.feature().unwrap();
            match ensure_built(kind, p) {
                Ok(()) => assert!(is_built(kind)),
                Err(e) => {
                    assert!(!is_built(kind));
                    assert_eq!(e.kind(), tensorfile_core::ErrorKind::Unsupported);
                    let text = e.to_string();
                    assert!(text.starts_with("m.gguf: this is "), "{text}");
                    assert!(text.contains(&format!("built without the {feature} feature")));
                }
            }
        }
        assert_eq!(is_built(Kind::Gguf), cfg!(feature = "gguf"));
        assert_eq!(is_built(Kind::Npy), cfg!(feature = "npz"));
        assert_eq!(is_built(Kind::PytorchSet), cfg!(feature = "pytorch"));
    }
}
