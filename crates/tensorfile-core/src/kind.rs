//! What an input is, in words every layer shares: the remote crate judges
//! a URL by it, the umbrella's `open` and `detect` by a file's bytes.

use std::fmt;

/// What an input is: a safetensors file or set, a PyTorch checkpoint or
/// set, a GGUF file, a numpy archive or array.
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

    /// The Cargo feature of the `tensorfile` crate that reads this kind:
    /// `None` for safetensors (the core reads it).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Kind::Safetensors | Kind::SafetensorsSet => None,
            Kind::Pytorch | Kind::PytorchSet => Some("pytorch"),
            Kind::Gguf => Some("gguf"),
            Kind::Npz | Kind::Npy => Some("npz"),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Whether an input names a URL this project reads (`s3://`, `hf://`,
/// `http://`, `https://`, any case) rather than a local path: the one
/// table of schemes, which builds without remote support use to refuse a
/// URL by name.
pub fn is_url(input: &str) -> bool {
    ["s3://", "hf://", "http://", "https://"]
        .iter()
        .any(|p| input.len() > p.len() && input[..p.len()].eq_ignore_ascii_case(p))
}

/// The URL a path argument holds, if it holds one (see [`is_url`]): how a
/// caller that takes local paths and URLs alike (the CLI, the Python
/// package) tells them apart.
pub fn url_of(path: &std::path::Path) -> Option<&str> {
    path.to_str().filter(|s| is_url(s))
}
