//! What an input is, in words every layer shares: the remote crate judges
//! a URL by it, the umbrella's `open` and `detect` by a file's bytes; and
//! what a file that is not safetensors looks like, from its first bytes
//! ([`LooksLike`]), which the reader's rule 1 and 2 errors say.

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

/// Whether an input names a URL this project reads (`s3://`, `gs://`,
/// `az://`, `abfs://`, `abfss://`, `hf://`, `http://`, `https://`, any
/// case) rather than a local path: the one table of schemes, which builds
/// without remote support use to refuse a URL by name.
pub fn is_url(input: &str) -> bool {
    [
        "s3://", "gs://", "az://", "abfs://", "abfss://", "hf://", "http://", "https://",
    ]
    .iter()
    .any(|p| input.len() > p.len() && input[..p.len()].eq_ignore_ascii_case(p))
}

/// The URL a path argument holds, if it holds one (see [`is_url`]): how a
/// caller that takes local paths and URLs alike (the CLI, the Python
/// package) tells them apart.
pub fn url_of(path: &std::path::Path) -> Option<&str> {
    path.to_str().filter(|s| is_url(s))
}

/// What the first bytes of a file look like, when they are a signature
/// this project knows or plain text: said by the reader's errors of rules 1
/// and 2 ("this looks like a PNG image, not a safetensors file"), and used
/// by the umbrella's probe to route GGUF, numpy, zip and pickle files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LooksLike {
    /// `\x89PNG\r\n\x1a\n`.
    Png,
    /// `FF D8 FF`, then a marker.
    Jpeg,
    /// `1F 8B 08`: gzip, deflated.
    Gzip,
    /// `PK\x03\x04` (a member) or `PK\x05\x06` (an empty archive).
    Zip,
    /// `GGUF`.
    Gguf,
    /// `\x93NUMPY`.
    Npy,
    /// A pickle of protocol 2 to 5: `PROTO` (0x80), the protocol, then
    /// an opcode.
    Pickle,
    /// Text opening with `<!doctype html`, `<html`, `<head`, `<body` or
    /// `<!--`.
    Html,
    /// Text opening with `{` or `[`.
    Json,
    /// UTF-8 text of printable characters and line breaks.
    Text,
}

/// How many bytes [`LooksLike::of`] looks at, at most.
const LOOKS_LIKE_BYTES: usize = 16;

impl LooksLike {
    /// What `prefix`, a file's first bytes, looks like; `None` when it is
    /// nothing known (a safetensors header length, whose high bytes are
    /// zero, is never text). Only the first 16 bytes are looked at;
    /// eight are enough for every signature.
    pub fn of(prefix: &[u8]) -> Option<LooksLike> {
        let head = &prefix[..prefix.len().min(LOOKS_LIKE_BYTES)];
        let signatures: [(&[u8], LooksLike); 7] = [
            (b"\x89PNG\r\n\x1a\n", LooksLike::Png),
            (b"\x1f\x8b\x08", LooksLike::Gzip),
            (b"PK\x03\x04", LooksLike::Zip),
            (b"PK\x05\x06", LooksLike::Zip),
            (b"GGUF", LooksLike::Gguf),
            (b"\x93NUMPY", LooksLike::Npy),
            (b"\xff\xd8\xff", LooksLike::Jpeg),
        ];
        if let Some(&(_, looks)) = signatures.iter().find(|(magic, _)| head.starts_with(magic)) {
            return Some(looks);
        }
        // PROTO 2..5, then an opcode: printable ASCII or 0x80..=0x98 (a
        // header length's third byte, 0 below 64 KiB, is neither).
        if let [0x80, 2..=5, op, ..] = *head {
            if matches!(op, b'('..=b'}' | 0x80..=0x98) {
                return Some(LooksLike::Pickle);
            }
        }
        let text = printable_text(head)?;
        let opening = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
        let lower = opening.to_ascii_lowercase();
        let html = ["<!doctype html", "<html", "<head", "<body", "<!--"]
            .iter()
            .any(|tag| lower.starts_with(tag) || lower.len() >= 5 && tag.starts_with(&lower));
        Some(if html {
            LooksLike::Html
        } else if opening.starts_with(['{', '[']) {
            LooksLike::Json
        } else {
            LooksLike::Text
        })
    }

    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            LooksLike::Png => "a PNG image",
            LooksLike::Jpeg => "a JPEG image",
            LooksLike::Gzip => "gzip-compressed data",
            LooksLike::Zip => "a zip archive (a PyTorch checkpoint or .npz?)",
            LooksLike::Gguf => "a GGUF file",
            LooksLike::Npy => "a numpy .npy array",
            LooksLike::Pickle => "a Python pickle (a legacy PyTorch checkpoint?)",
            LooksLike::Html => "an HTML page",
            LooksLike::Json => "JSON text",
            LooksLike::Text => "plain text",
        }
    }
}

impl fmt::Display for LooksLike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// `head` as text when it is UTF-8 (a character cut at its end allowed)
/// of printable characters, tabs and line breaks; `None` otherwise or when
/// empty.
fn printable_text(head: &[u8]) -> Option<&str> {
    let text = match std::str::from_utf8(head) {
        Ok(text) => text,
        // A character cut by the end of the prefix.
        Err(e) if e.error_len().is_none() => std::str::from_utf8(&head[..e.valid_up_to()]).ok()?,
        Err(_) => return None,
    };
    let printable = |c: char| !c.is_control() || matches!(c, '\t' | '\n' | '\r' | '\x0c');
    (!text.is_empty() && text.chars().all(printable)).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_and_text_are_named() {
        let cases: [(&[u8], Option<LooksLike>); 17] = [
            (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", Some(LooksLike::Png)),
            (b"\xff\xd8\xff\xe0\0\x10JFIF", Some(LooksLike::Jpeg)),
            (b"\x1f\x8b\x08\0\0\0\0\0", Some(LooksLike::Gzip)),
            (b"PK\x03\x04\x14\0\0\0", Some(LooksLike::Zip)),
            (b"PK\x05\x06\0\0\0\0", Some(LooksLike::Zip)),
            (b"GGUF\x03\0\0\0", Some(LooksLike::Gguf)),
            (b"\x93NUMPY\x01\0", Some(LooksLike::Npy)),
            (b"\x80\x02\x8a\x0al\xfc\x9cF", Some(LooksLike::Pickle)),
            (b"\x80\x04\x95\x10\0\0\0\0", Some(LooksLike::Pickle)),
            (b"<!DOCTYP", Some(LooksLike::Html)),
            (b"\n  <html lang=en>", Some(LooksLike::Html)),
            (b"{\"a\": 1}", Some(LooksLike::Json)),
            (b"hello, w\xc3", Some(LooksLike::Text)),
            (b"hi\n", Some(LooksLike::Text)),
            // Header lengths: a valid file's first eight bytes, a pickle
            // PROTO's look-alike (N = 640), and bytes that are no text.
            (b"\x50\0\0\0\0\0\0\0{", None),
            (b"\x80\x02\0\0\0\0\0\0", None),
            (b"\xff\xfe\xfd\xfc", None),
        ];
        for (bytes, looks) in cases {
            assert_eq!(LooksLike::of(bytes), looks, "{bytes:?}");
        }
        assert_eq!(LooksLike::of(b""), None);
        assert_eq!(
            LooksLike::Zip.to_string(),
            "a zip archive (a PyTorch checkpoint or .npz?)"
        );
    }

    #[test]
    fn only_the_first_bytes_are_looked_at() {
        let mut text = b"plain words".to_vec();
        text.resize(LOOKS_LIKE_BYTES, b'x');
        // Binary bytes past the first few change nothing.
        text.extend_from_slice(&[0, 1, 2, 0xff]);
        assert_eq!(LooksLike::of(&text), Some(LooksLike::Text));
    }
}
