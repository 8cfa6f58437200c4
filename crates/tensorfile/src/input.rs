//! One way in: what an input is, decided by what its bytes say (and, for a
//! directory, by the files in it), so that every front end (the command
//! line, the C library, Python) takes the same inputs the same way.
//!
//! ```
//! use tensorfile::input::{detect, Kind};
//! use tensorfile::{save, Dtype, TensorRef, WriteOptions};
//! let dir = tempfile::tempdir()?;
//! let model = dir.path().join("model.safetensors");
//! let w = TensorRef { name: "w", dtype: Dtype::F32, shape: &[1], data: &[0u8; 4] };
//! save(&model, [w], None, &WriteOptions::default())?;
//! assert_eq!(detect(&model)?, Kind::Safetensors);
//! // A directory holding a `model.safetensors` is a set (of one).
//! assert_eq!(detect(dir.path())?, Kind::SafetensorsSet);
//! // A legacy `torch.save`: PROTO 2, then LONG1 (its magic number).
//! let pt = dir.path().join("old.pt");
//! std::fs::write(&pt, b"\x80\x02\x8a\x0a")?;
//! assert_eq!(detect(&pt)?, Kind::Pytorch);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::io::{self, Read};
use std::path::Path;

use crate::source::open_regular;
use crate::Error;

/// What an input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A safetensors file.
    Safetensors,
    /// A set of safetensors files: an index (`*.safetensors.index.json`),
    /// or a directory holding one or a single `model.safetensors` (a model
    /// directory, diffusers' `diffusion_pytorch_model*` included).
    SafetensorsSet,
    /// A PyTorch checkpoint (`torch.save`: zip, legacy or tar).
    Pytorch,
    /// A set of PyTorch checkpoints: `pytorch_model.bin.index.json` (or
    /// diffusers'), or a directory holding one or a single `.bin`.
    PytorchSet,
    /// A GGUF file (llama.cpp).
    Gguf,
    /// A numpy `.npz` archive.
    Npz,
    /// A numpy `.npy` array.
    Npy,
}

impl Kind {
    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Safetensors => "a safetensors file",
            Kind::SafetensorsSet => "a set of safetensors files (a directory or an index)",
            Kind::Pytorch => "a PyTorch checkpoint",
            Kind::PytorchSet => "a set of PyTorch checkpoints (a .bin index or a directory)",
            Kind::Gguf => "a GGUF file",
            Kind::Npz => "a numpy .npz archive",
            Kind::Npy => "a numpy .npy array",
        }
    }

    /// Whether it is a safetensors file or set.
    pub fn is_safetensors(self) -> bool {
        matches!(self, Kind::Safetensors | Kind::SafetensorsSet)
    }

    /// Whether it holds several files (a set).
    pub fn is_set(self) -> bool {
        matches!(self, Kind::SafetensorsSet | Kind::PytorchSet)
    }

    /// The Cargo feature of this crate that reads this kind: `None` for
    /// safetensors (the core reads it).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Kind::Safetensors | Kind::SafetensorsSet => None,
            Kind::Pytorch | Kind::PytorchSet => Some("pytorch"),
            Kind::Gguf => Some("gguf"),
            Kind::Npz | Kind::Npy => Some("npz"),
        }
    }

    /// Whether this build reads this kind (its feature is on).
    pub fn is_built(self) -> bool {
        match self {
            Kind::Safetensors | Kind::SafetensorsSet => true,
            Kind::Pytorch | Kind::PytorchSet => cfg!(feature = "pytorch"),
            Kind::Gguf => cfg!(feature = "gguf"),
            Kind::Npz | Kind::Npy => cfg!(feature = "npz"),
        }
    }

    /// Refuses an input at `path` of this kind when this build does not
    /// read it: what a front end calls before opening a detected kind.
    ///
    /// # Errors
    /// [`Error::FeatureDisabled`] when the kind's feature is off.
    pub fn ensure_built(self, path: &Path) -> Result<(), Error> {
        match self.feature() {
            Some(feature) if !self.is_built() => Err(Error::FeatureDisabled {
                path: path.to_path_buf(),
                what: self.describe(),
                feature,
            }),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
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
pub fn detect(path: impl AsRef<Path>) -> Result<Kind, Error> {
    let path = path.as_ref();
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
    if head.starts_with(b"GGUF") {
        return Ok(Kind::Gguf);
    }
    if head.starts_with(b"\x93NUMPY") {
        return Ok(Kind::Npy);
    }
    if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        return Ok(zip_kind(head, &name));
    }
    // A safetensors file: the header length, then its JSON object.
    if head.len() >= 9 && head[8] == b'{' {
        return Ok(Kind::Safetensors);
    }
    // A legacy torch.save: PROTO 2..5 then LONG1 (the magic number), or a
    // tar archive (the 0.1.x format, which the loader refuses by name).
    let legacy = head.len() >= 3 && head[0] == 0x80 && (2..=5).contains(&head[1]);
    if legacy || head.get(257..262) == Some(b"ustar") {
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
        assert!(Kind::Safetensors.ensure_built(p).is_ok());
        assert!(Kind::SafetensorsSet.ensure_built(p).is_ok());
        let kinds = [
            Kind::Pytorch,
            Kind::PytorchSet,
            Kind::Gguf,
            Kind::Npz,
            Kind::Npy,
        ];
        for kind in kinds {
            let feature = kind.feature().unwrap();
            match kind.ensure_built(p) {
                Ok(()) => assert!(kind.is_built()),
                Err(e) => {
                    assert!(!kind.is_built());
                    assert_eq!(e.kind(), tensorfile_core::ErrorKind::Unsupported);
                    let text = e.to_string();
                    assert!(text.starts_with("m.gguf: this is "), "{text}");
                    assert!(text.contains(&format!("built without the {feature} feature")));
                }
            }
        }
        assert_eq!(Kind::Gguf.is_built(), cfg!(feature = "gguf"));
        assert_eq!(Kind::Npy.is_built(), cfg!(feature = "npz"));
        assert_eq!(Kind::PytorchSet.is_built(), cfg!(feature = "pytorch"));
    }
}
