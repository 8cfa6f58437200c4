//! Quantized weights: the int4 layout of the format page and MLX's packed
//! checkpoints. Quantize single tensors ([`int4_quantize`],
//! [`mlx_quantize`]) or whole files ([`quantize_plan`], [`quantize_file`]);
//! find the quantized weights of a file and their logical shapes
//! ([`quantized_weights`], [`logical_weight`]); dequantize one weight in
//! memory ([`dequantize_weight`], any int4 or MLX mode) or whole files
//! ([`dequantize_plan`], [`dequantize_file`]).
//!
//! # Layouts
//!
//! - **int4-g\<group\>-sym**: a weight `<name>` `[out, in]` is stored as
//!   `<name>.qweight` (U8 `[out, in / 2]`, column `2b` in the low nibble of
//!   byte `b`, signed 4-bit two's complement) and `<name>.scales` (F16
//!   `[out, in / group]`); the file's metadata says `"quant":
//!   "int4-g<group>-sym"`.
//! - **MLX**: a module `<m>` whose weight is `[..., out, in]` (any leading
//!   dimensions are batch: mlx-lm's expert stacks are `[experts, out, in]`)
//!   is stored as `<m>.weight` (U32 `[..., out, in * bits / 32]`, codes
//!   packed least-significant bits first as one little-endian bit stream per
//!   row), `<m>.scales` `[..., out, in / group]` (the weight's dtype in
//!   affine mode, U8 E8M0 or E4M3 otherwise), in affine mode `<m>.biases`
//!   like the scales, and in nvfp4 optionally `<m>.global_scale` (F32, one
//!   per matrix, `[...]`). Bits, group size and mode are not in the
//!   tensors: they come from config.json's `quantization` ([`QuantConfig`]).
//!
//! # Quantizers
//!
//! int4 is the format page's rule (`int4`). The MLX schemes are MLX's own
//! quantizer, `mx.quantize` of MLX 0.32's CPU backend, reproduced byte for
//! byte for F32, F16 and BF16 weights in every mode (`mlx` gives the
//! arithmetic); the only departure is that a group whose MLX result would
//! not stand for its weights is refused rather than written (see `mlx`).
//! In affine mode MLX keeps each group's largest weight exact and may leave
//! the other end up to a step off; an earlier quantizer here traded that
//! for a coarser step that kept every weight within half a step, and lost
//! on mean error (on the float weights of the mlx-lm fixtures, 1.47 to 1.60
//! times MLX's RMS error at 2 bits, 1.07 to 1.11 at 3 bits, 1.01 to 1.03 at
//! 4 bits), so only MLX's remains.
//!
//! # Where MLX parameters come from
//!
//! MLX keeps them in the model's config.json. A single file written by
//! [`quantize_file`] with an MLX scheme carries them itself, in the metadata
//! key [`QUANTIZATION_KEY`] whose value is the JSON text of a config's
//! `quantization` object (`{"bits":4,"group_size":64,"mode":"affine"}`,
//! with an entry per module that has a global scale, as mlx-lm writes), so
//! that [`dequantize_file`] reads the file back with no further input. The
//! tensors' shapes alone are never used to guess them (4-bit with groups
//! of 64 and 8-bit with groups of 32 have the same shapes).

mod config;
mod error;
pub(crate) mod file;
mod int4;
mod layout;
mod mlx;
pub(crate) mod rows;
mod select;

use std::fmt;
use std::str::FromStr;

pub use config::{int4_group, QuantConfig, QUANTIZATION_KEY, QUANT_KEY};
pub use error::QuantError;
pub use file::{
    dequantize_file, dequantize_plan, quantize_file, quantize_plan, DequantizeOptions,
    DequantizeSummary, QuantizeOptions, QuantizeSummary,
};
pub use int4::{dequantize as int4_dequantize, quantize as int4_quantize, Int4Tensor};
pub use layout::{logical_weight, quantized_weights, LayoutError, LogicalWeight};
pub use mlx::{
    affine_params as mlx_affine_params, pack as mlx_pack, quantize as mlx_quantize,
    quantize_affine as mlx_quantize_affine, unpack as mlx_unpack, MlxTensor,
};
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
    /// nvfp4 only: each matrix of the weight also has one F32 scale, stored
    /// as `<m>.global_scale` (one per index of the leading dimensions, as
    /// mlx-lm stores one per expert), that multiplies its values. Config
    /// entries say `"global_scale": true`.
    pub global_scale: bool,
}

/// The bit widths MLX packs.
pub(crate) const MLX_BITS: [u64; 6] = [2, 3, 4, 5, 6, 8];

impl QuantParams {
    /// Affine parameters.
    pub fn affine(bits: u64, group_size: u64) -> QuantParams {
        QuantParams {
            bits,
            group_size,
            mode: Mode::Affine,
            global_scale: false,
        }
    }

    /// The parameters of a floating-point mode (its fixed bits and group
    /// size, no global scale); `None` for affine, which has no fixed ones.
    ///
    /// ```
    /// use tensorfile::quant::{Mode, QuantParams};
    /// let p = QuantParams::floating(Mode::Nvfp4).unwrap();
    /// assert_eq!((p.bits, p.group_size, p.global_scale), (4, 16, false));
    /// assert!(QuantParams::floating(Mode::Affine).is_none());
    /// ```
    pub fn floating(mode: Mode) -> Option<QuantParams> {
        let (bits, group_size) = mode.fixed()?;
        Some(QuantParams {
            bits,
            group_size,
            mode,
            global_scale: false,
        })
    }

    /// Checks the combination: affine takes 2, 3, 4, 5, 6 or 8 bits and a
    /// group size of at least 2; the floating-point modes take only theirs;
    /// a global scale needs nvfp4.
    ///
    /// # Errors
    /// [`QuantError::Params`] saying what does not fit.
    pub fn validate(&self) -> Result<(), QuantError> {
        self.problem().map_err(QuantError::Params)
    }

    // The text of the error.
    fn problem(&self) -> Result<(), String> {
        if self.global_scale && self.mode != Mode::Nvfp4 {
            return Err(format!(
                "a global scale needs nvfp4 mode, not {}",
                self.mode
            ));
        }
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

    /// The JSON object config.json uses for these parameters
    /// (`"global_scale": true` only when there is one, as mlx-lm writes).
    pub(crate) fn json(self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "bits": self.bits,
            "group_size": self.group_size,
            "mode": self.mode.name(),
        });
        if self.global_scale {
            v["global_scale"] = true.into();
        }
        v
    }
}

impl fmt::Display for QuantParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}-bit, groups of {}",
            self.mode, self.bits, self.group_size
        )?;
        if self.global_scale {
            f.write_str(", global scale")?;
        }
        Ok(())
    }
}

/// A quantization scheme: what to quantize with, and how a quantized
/// weight is stored (a [`LogicalWeight`]'s `storage`, `None` when plain).
/// Its names are spelled here alone: [`Scheme::parse`] reads them;
/// [`Scheme::name`], [`Scheme::family`], [`Scheme::describe`],
/// [`Scheme::summary`] and `Display` write them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// The format page's int4: symmetric, F16 scales, groups of `group`.
    Int4Sym {
        /// Elements per scale.
        group: u64,
    },
    /// MLX's packed format in any of its modes, quantized as MLX's
    /// `mx.quantize` does (see `mlx`).
    Mlx(QuantParams),
}

impl Scheme {
    /// Parses `int4-g<group>-sym` (e.g. `int4-g32-sym`), `mlx-affine` with
    /// `bits` and `group_size` (both required: there is no default), or
    /// `mlx-mxfp4`, `mlx-mxfp8`, `mlx-nvfp4` (MLX's floating-point modes:
    /// `mlx-` and MLX's mode name), whose bits and group size are fixed and
    /// may be given only as those.
    ///
    /// ```
    /// use tensorfile::quant::{Mode, QuantParams, Scheme};
    /// assert_eq!(Scheme::parse("int4-g32-sym", None, None), Ok(Scheme::Int4Sym { group: 32 }));
    /// assert_eq!(
    ///     Scheme::parse("mlx-affine", Some(4), Some(64)),
    ///     Ok(Scheme::Mlx(QuantParams::affine(4, 64)))
    /// );
    /// assert_eq!(
    ///     Scheme::parse("mlx-nvfp4", None, None),
    ///     Ok(Scheme::Mlx(QuantParams::floating(Mode::Nvfp4).unwrap()))
    /// );
    /// assert!(Scheme::parse("mlx-affine", Some(4), None).is_err()); // never a default
    /// assert!(Scheme::parse("mlx-mxfp8", Some(4), None).is_err()); // mxfp8 is 8-bit
    /// assert!(Scheme::parse("int4-g3-sym", None, None).is_err()); // odd group
    /// ```
    ///
    /// # Errors
    /// [`QuantError::Params`]: an unknown scheme or parameters it does not take.
    pub fn parse(
        name: &str,
        bits: Option<u64>,
        group_size: Option<u64>,
    ) -> Result<Scheme, QuantError> {
        Self::parse_text(name, bits, group_size).map_err(QuantError::Params)
    }

    // The text of the error.
    fn parse_text(
        name: &str,
        bits: Option<u64>,
        group_size: Option<u64>,
    ) -> Result<Scheme, String> {
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
        let mode = name
            .strip_prefix("mlx-")
            .and_then(|m| Mode::ALL.into_iter().find(|mode| mode.name() == m));
        let Some(mode) = mode else {
            return Err(format!(
                "unknown scheme {name:?} (int4-g<group>-sym, mlx-affine, mlx-mxfp4, mlx-mxfp8 or mlx-nvfp4)"
            ));
        };
        let params = match QuantParams::floating(mode) {
            None => {
                let (Some(bits), Some(group_size)) = (bits, group_size) else {
                    return Err("mlx-affine needs --bits and --group-size".into());
                };
                QuantParams::affine(bits, group_size)
            }
            Some(fixed) => QuantParams {
                bits: bits.unwrap_or(fixed.bits),
                group_size: group_size.unwrap_or(fixed.group_size),
                ..fixed
            },
        };
        params.validate().map_err(|e| format!("{name}: {e}"))?;
        Ok(Scheme::Mlx(params))
    }

    /// The scheme with one global scale per matrix of every weight of rank 3
    /// or more (expert stacks), as mlx-lm's `quantize_model(...,
    /// global_scale=True)` writes: only `mlx-nvfp4` has one. 2-D weights
    /// keep none (mlx-lm's `QuantizedLinear` takes none).
    ///
    /// ```
    /// use tensorfile::quant::Scheme;
    /// let s = Scheme::parse("mlx-nvfp4", None, None).unwrap().with_global_scale().unwrap();
    /// assert_eq!(s.to_string(), "mlx-nvfp4 (nvfp4 4-bit, groups of 16, global scale)");
    /// assert!(Scheme::parse("mlx-mxfp4", None, None).unwrap().with_global_scale().is_err());
    /// ```
    ///
    /// # Errors
    /// [`QuantError::Params`] for a scheme other than mlx-nvfp4.
    pub fn with_global_scale(self) -> Result<Scheme, QuantError> {
        self.global_scale_text().map_err(QuantError::Params)
    }

    // The text of the error.
    fn global_scale_text(self) -> Result<Scheme, String> {
        match self {
            Scheme::Mlx(p) if p.mode == Mode::Nvfp4 => Ok(Scheme::Mlx(QuantParams {
                global_scale: true,
                ..p
            })),
            other => Err(format!(
                "{}: only mlx-nvfp4 has global scales",
                other.name()
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

    /// Bits per quantized element.
    pub fn bits(&self) -> u64 {
        match self {
            Scheme::Int4Sym { .. } => 4,
            Scheme::Mlx(p) => p.bits,
        }
    }

    /// The MLX mode; `None` for int4.
    pub fn mode(&self) -> Option<Mode> {
        match self {
            Scheme::Int4Sym { .. } => None,
            Scheme::Mlx(p) => Some(p.mode),
        }
    }

    /// Whether each matrix also has one global scale (MLX nvfp4 only).
    pub fn global_scale(&self) -> bool {
        matches!(self, Scheme::Mlx(p) if p.global_scale)
    }

    /// Bits per weight, scales and biases included, for scales of
    /// `scale_dtype` (MLX affine's scales and biases are the weight's
    /// dtype); a global scale (32 bits per matrix) is not counted.
    pub fn bits_per_weight(&self, scale_dtype: Dtype) -> f64 {
        match *self {
            Scheme::Int4Sym { group } => 4.0 + 16.0 / group as f64,
            Scheme::Mlx(p) => {
                let per_group = if p.mode == Mode::Affine {
                    2.0 * f64::from(scale_dtype.bits())
                } else {
                    8.0
                };
                p.bits as f64 + per_group / p.group_size as f64
            }
        }
    }

    /// The scheme's name: `int4-g32-sym`, `mlx-affine`, `mlx-nvfp4`, ...
    pub fn name(&self) -> String {
        match self {
            Scheme::Int4Sym { group } => format!("int4-g{group}-sym"),
            Scheme::Mlx(p) => format!("mlx-{}", p.mode),
        }
    }

    /// The scheme's family, without parameters: `int4-sym` or `mlx` (the
    /// `scheme` of a description's quantized weights).
    pub fn family(&self) -> &'static str {
        match self {
            Scheme::Int4Sym { .. } => "int4-sym",
            Scheme::Mlx(_) => "mlx",
        }
    }

    /// What a weight stored in the scheme was, as dequantizing reports
    /// it: `int4-g32-sym`, `mlx affine 4-bit, groups of 64`.
    pub fn describe(&self) -> String {
        match self {
            Scheme::Int4Sym { .. } => self.name(),
            Scheme::Mlx(p) => format!("mlx {p}"),
        }
    }

    /// The scheme as quantizing reports it: `int4-g32-sym`,
    /// `mlx-affine 4-bit, groups of 64`.
    pub fn summary(&self) -> String {
        match self {
            Scheme::Int4Sym { .. } => self.name(),
            Scheme::Mlx(p) => format!("mlx-{p}"),
        }
    }
}

impl fmt::Display for Scheme {
    /// The name, and for MLX the parameters: `mlx-affine (affine 4-bit,
    /// groups of 64)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scheme::Int4Sym { .. } => f.write_str(&self.name()),
            Scheme::Mlx(p) => write!(f, "{} ({p})", self.name()),
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
