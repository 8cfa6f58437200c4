//! One sha256: the digest type, its hex form, and the digest of a tensor's
//! bytes (what `inspect --hash`, `hash --per-tensor` and embedded hashes
//! all use).

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use crate::writer::TensorData;
use crate::Progress;
use crate::Result;

/// A sha256 digest; shown as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Digest(pub [u8; 32]);

impl Sha256Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256Digest {
        Sha256Digest(Sha256::digest(bytes).into())
    }

    /// The 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            text[2 * i] = DIGITS[usize::from(b >> 4)];
            text[2 * i + 1] = DIGITS[usize::from(b & 15)];
        }
        f.write_str(std::str::from_utf8(&text).unwrap_or_default())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({self})")
    }
}

impl FromStr for Sha256Digest {
    type Err = String;

    /// 64 hex digits, either case.
    fn from_str(s: &str) -> std::result::Result<Sha256Digest, String> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(format!(
                "a sha256 is 64 hex digits, not {} characters",
                s.chars().count()
            ));
        }
        let digit = |c: u8| -> Option<u8> {
            match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                b'A'..=b'F' => Some(c - b'A' + 10),
                _ => None,
            }
        };
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => out[i] = h << 4 | l,
                _ => return Err("a sha256 is 64 hex digits (0-9, a-f)".into()),
            }
        }
        Ok(Sha256Digest(out))
    }
}

/// A running sha256 (the `sha2` crate's, which uses the CPU's SHA
/// extensions when it has them, chosen at run time).
#[derive(Clone, Default)]
pub struct Hasher(Sha256);

impl Hasher {
    /// A new hasher.
    pub fn new() -> Hasher {
        Hasher(Sha256::new())
    }

    /// Adds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The digest of everything added.
    pub fn finish(self) -> Sha256Digest {
        Sha256Digest(self.0.finalize().into())
    }
}

/// The sha256 of a tensor's bytes (its data in the file, C order), read a
/// piece at a time ([`TensorData::produce`]).
///
/// # Errors
/// A failed read, naming the file.
pub fn tensor_sha256<T: TensorData<crate::Error> + ?Sized>(t: &T) -> Result<Sha256Digest> {
    tensor_sha256_counted(t, &())
}

/// [`tensor_sha256`], telling `on_bytes` of each piece hashed (what a
/// progress bar counts).
///
/// # Errors
/// A failed read, naming the file.
pub fn tensor_sha256_counted<T: TensorData<crate::Error> + ?Sized>(
    t: &T,
    on_bytes: &dyn Progress,
) -> Result<Sha256Digest> {
    let mut hasher = Hasher::new();
    t.produce(&mut |_, piece| {
        hasher.update(piece);
        on_bytes.advance(piece.len() as u64);
        Ok(())
    })?;
    Ok(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_known_value() {
        let empty = Sha256Digest::of(b"");
        assert_eq!(
            empty.hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            empty.hex().to_uppercase().parse::<Sha256Digest>(),
            Ok(empty)
        );
        assert!("e3b0".parse::<Sha256Digest>().is_err());
        assert!("g".repeat(64).parse::<Sha256Digest>().is_err());
        let mut h = Hasher::new();
        h.update(b"a");
        h.update(b"bc");
        assert_eq!(h.finish(), Sha256Digest::of(b"abc"));
    }
}
