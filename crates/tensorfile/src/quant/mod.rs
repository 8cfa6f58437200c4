//! Quantized weights: the int4 layout of the format page and MLX's packed
//! checkpoints. Quantize single tensors ([`int4::quantize`],
//! [`mlx::quantize_affine`]) or whole files ([`quantize_file`]); find the
//! quantized weights of a file and their logical shapes
//! ([`quantized_weights`], [`logical_weight`]); dequantize one weight in
//! memory ([`dequantize_weight`], any int4 or MLX mode) or whole files
//! ([`dequantize_file`]).
//!
//! # Layouts
//!
//! - **int4-g\<group\>-sym**: a weight `<name>` `[out, in]` is stored as
//!   `<name>.qweight` (U8 `[out, in / 2]`, column `2b` in the low nibble of
//!   byte `b`, signed 4-bit two's complement) and `<name>.scales` (F16
//!   `[out, in / group]`); the file's metadata says `"quant":
//!   "int4-g<group>-sym"`.
//! - **MLX**: a module `<m>` is stored as `<m>.weight` (U32 `[out, in * bits
//!   / 32]`, codes packed least-significant bits first as one little-endian
//!   bit stream per row), `<m>.scales` `[out, in / group]` and, in affine
//!   mode, `<m>.biases`. Bits, group size and mode are not in the tensors:
//!   they come from config.json's `quantization` ([`QuantConfig`]).
//!
//! # Where MLX parameters come from
//!
//! MLX keeps them in the model's config.json. A single file written by
//! [`quantize_file`] with an MLX scheme carries them itself, in the metadata
//! key [`QUANTIZATION_KEY`] whose value is the JSON text of a config's
//! `quantization` object (`{"bits":4,"group_size":64,"mode":"affine"}`), so
//! that [`dequantize_file`] reads the file back with no further input. The
//! tensors' shapes alone are never used to guess them (4-bit with groups
//! of 64 and 8-bit with groups of 32 have the same shapes).

mod config;
mod error;
mod file;
pub mod int4;
mod layout;
pub mod mlx;
mod rows;
pub mod select;

use std::fmt;
use std::str::FromStr;

pub use config::{int4_group, QuantConfig, QUANTIZATION_KEY, QUANT_KEY};
pub use error::QuantError;
pub use file::{
    dequantize_file, dequantize_plan, is_dequantize_dtype, quantize_file, quantize_plan,
    DequantizeOptions, DequantizeSummary, QuantizeOptions, QuantizeSummary,
};
pub use layout::{logical_weight, quantized_weights, LayoutError, LogicalWeight, Storage};
pub use rows::dequantize_weight;
pub use select::{Glob, Selection};

use crate::{Dtype, Error};

/// A [`QuantError`] about `tensor`.
fn quant_error(tensor: &str, problem: QuantError) -> Error {
    Error::Quant {
        tensor: tensor.to_string(),
        problem,
    }
}

/// How the codes of an MLX weight turn into values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// `w = scale * q + bias`, `q` unsigned; scales and biases are floats.
    Affine,
    /// E2M1 codes, U8 scales holding E8M0 exponents, groups of 32.
    Mxfp4,
    /// E4M3 codes, E8M0 scales, groups of 32.
    Mxfp8,
    /// E2M1 codes, U8 scales holding F8_E4M3, groups of 16.
    Nvfp4,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 4] = [Mode::Affine, Mode::Mxfp4, Mode::Mxfp8, Mode::Nvfp4];

    /// The name MLX uses (`affine`, `mxfp4`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Affine => "affine",
            Mode::Mxfp4 => "mxfp4",
            Mode::Mxfp8 => "mxfp8",
            Mode::Nvfp4 => "nvfp4",
        }
    }

    /// The only (bits, group size) a floating-point mode allows; `None` for affine.
    pub fn fixed(self) -> Option<(u64, u64)> {
        match self {
            Mode::Affine => None,
            Mode::Mxfp4 => Some((4, 32)),
            Mode::Mxfp8 => Some((8, 32)),
            Mode::Nvfp4 => Some((4, 16)),
        }
    }

    /// The float format of the codes of a floating-point mode.
    pub fn code_dtype(self) -> Option<Dtype> {
        match self {
            Mode::Affine => None,
            Mode::Mxfp4 | Mode::Nvfp4 => Some(Dtype::F4),
            Mode::Mxfp8 => Some(Dtype::F8_E4M3),
        }
    }

    /// The float format held by the U8 scales of a floating-point mode.
    pub fn scale_dtype(self) -> Option<Dtype> {
        match self {
            Mode::Affine => None,
            Mode::Mxfp4 | Mode::Mxfp8 => Some(Dtype::F8_E8M0),
            Mode::Nvfp4 => Some(Dtype::F8_E4M3),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown mode {s:?} (affine, mxfp4, mxfp8 or nvfp4)"))
    }
}

/// Bits per element, elements per group and mode of an MLX quantized weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantParams {
    /// Bits per quantized element.
    pub bits: u64,
    /// Elements sharing one scale.
    pub group_size: u64,
    /// How codes become values.
    pub mode: Mode,
}

/// The bit widths MLX packs.
pub const MLX_BITS: [u64; 6] = [2, 3, 4, 5, 6, 8];

impl QuantParams {
    /// Affine parameters.
    pub fn affine(bits: u64, group_size: u64) -> QuantParams {
        QuantParams {
            bits,
            group_size,
            mode: Mode::Affine,
        }
    }

    /// Checks the combination: affine takes 2, 3, 4, 5, 6 or 8 bits and a
    /// group size of at least 2; the floating-point modes take only theirs.
    pub fn validate(&self) -> Result<(), String> {
        match self.mode.fixed() {
            Some((bits, group)) if (bits, group) != (self.bits, self.group_size) => Err(format!(
                "{} needs bits {bits} and group size {group}, not bits {} and group size {}",
                self.mode, self.bits, self.group_size
            )),
            Some(_) => Ok(()),
            None if !MLX_BITS.contains(&self.bits) => Err(format!(
                "affine bits must be 2, 3, 4, 5, 6 or 8, not {}",
                self.bits
            )),
            None if self.group_size < 2 => Err(format!(
                "the group size must be at least 2, not {}",
                self.group_size
            )),
            None => Ok(()),
        }
    }

    /// The JSON object config.json uses for these parameters.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "bits": self.bits,
            "group_size": self.group_size,
            "mode": self.mode.name(),
        })
    }
}

impl fmt::Display for QuantParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}-bit, groups of {}",
            self.mode, self.bits, self.group_size
        )
    }
}

/// A quantization scheme to quantize with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// The format page's int4: symmetric, F16 scales, groups of `group`.
    Int4Sym {
        /// Elements per scale.
        group: u64,
    },
    /// MLX affine (the only MLX mode quantized here).
    Mlx(QuantParams),
}

impl Scheme {
    /// Parses `int4-g<group>-sym` (e.g. `int4-g32-sym`), or
    /// `mlx-affine` with `bits` and `group_size` (both required).
    ///
    /// ```
    /// use tensorfile::quant::{QuantParams, Scheme};
    /// assert_eq!(Scheme::parse("int4-g32-sym", None, None), Ok(Scheme::Int4Sym { group: 32 }));
    /// assert_eq!(
    ///     Scheme::parse("mlx-affine", Some(4), Some(64)),
    ///     Ok(Scheme::Mlx(QuantParams::affine(4, 64)))
    /// );
    /// assert!(Scheme::parse("mlx-affine", Some(4), None).is_err()); // never a default
    /// assert!(Scheme::parse("int4-g3-sym", None, None).is_err()); // odd group
    /// ```
    pub fn parse(name: &str, bits: Option<u64>, group_size: Option<u64>) -> Result<Scheme, String> {
        if let Some(group) = parse_int4(name) {
            if bits.is_some() || group_size.is_some() {
                return Err(format!(
                    "{name} fixes its bits and group size: --bits and --group-size do not apply"
                ));
            }
            if group == 0 || group % 2 != 0 {
                return Err(format!("{name}: the group must be a positive even number"));
            }
            return Ok(Scheme::Int4Sym { group });
        }
        match name {
            "mlx-affine" => {
                let (Some(bits), Some(group_size)) = (bits, group_size) else {
                    return Err("mlx-affine needs --bits and --group-size".into());
                };
                let params = QuantParams::affine(bits, group_size);
                params.validate()?;
                Ok(Scheme::Mlx(params))
            }
            "mlx-mxfp4" | "mlx-mxfp8" | "mlx-nvfp4" => Err(format!(
                "{name}: only mlx-affine is quantized here (the floating-point modes dequantize)"
            )),
            _ => Err(format!(
                "unknown scheme {name:?} (int4-g<group>-sym or mlx-affine)"
            )),
        }
    }

    /// The group size.
    pub fn group_size(&self) -> u64 {
        match self {
            Scheme::Int4Sym { group } => *group,
            Scheme::Mlx(p) => p.group_size,
        }
    }

    /// The scheme's name: `int4-g32-sym`, `mlx-affine`.
    pub fn name(&self) -> String {
        match self {
            Scheme::Int4Sym { group } => format!("int4-g{group}-sym"),
            Scheme::Mlx(p) => format!("mlx-{}", p.mode),
        }
    }
}

/// The group of `int4-g<group>-sym`, if `name` has that form.
fn parse_int4(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("int4-g")?.strip_suffix("-sym")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
