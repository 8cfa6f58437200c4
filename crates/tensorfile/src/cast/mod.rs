//! Casts between dtypes: decode any float format to f32/f64, encode f32/f64
//! into any float format, and convert whole tensors (in memory or streamed
//! in chunks) from one dtype to another.
//!
//! # Semantics
//!
//! Every float cast gives what [ml_dtypes] 0.6.0 (numpy for F16) gives when
//! casting the same f32 value:
//!
//! - round to nearest, ties to even;
//! - F8_E5M2, F16 and BF16 overflow to infinity; F8_E4M3, F8_E4M3FNUZ and
//!   F8_E5M2FNUZ (no infinity) turn overflow and infinities into NaN;
//! - F4, F6_E2M3 and F6_E3M2 (no NaN, no infinity) saturate to their largest
//!   magnitude, and encode NaN as negative zero (-NaN as +0), as ml_dtypes does;
//! - the FNUZ types have no negative zero: -0 and negative underflow give 0x00;
//! - F8_E8M0 holds the powers of two 2^-127..2^127 (0xFF is NaN): a value
//!   rounds to the nearest power of two with ties *up* (1.5 -> 2, 3 -> 4);
//!   zero, negatives, NaN and overflow give NaN; positives up to 2^-127 give
//!   2^-127, and values strictly between 2^-127 and 2^-126 give 2^-126 (as
//!   ml_dtypes does for f32 subnormals);
//! - NaN keeps its sign where the format has a signed NaN (BF16 NaN is the
//!   quiet 0x7FC0 pattern; F16 keeps the top payload bits, as numpy does).
//!
//! Casting from F64 (or from 32- and 64-bit integers) rounds **once**,
//! directly to the target, by the same rules. (ml_dtypes itself goes
//! through f32 first; the results agree for every f64 that is exactly an
//! f32.)
//!
//! [`CastOptions::saturate`] clamps overflow (and infinities) to the largest
//! finite value for the F8 types, which quantization pipelines want; it does
//! not change F16/BF16, nor NaN inputs.
//!
//! Integer dtypes convert only with [`CastOptions::allow_int`], and fail on
//! a value that does not fit (for floats: a value that is not an integer in
//! range). BOOL converts only to and from integer dtypes. C64 converts only
//! to C64.
//!
//! # Sub-byte storage
//!
//! - **F4**: two values per byte, the first value in the **low** nibble.
//! - **F6_E2M3 / F6_E3M2**: four values per three bytes, as one
//!   little-endian bit stream: value `k` of a group is bits `6k..6k + 6` of
//!   `b0 | b1 << 8 | b2 << 16`.
//!
//! ```
//! use tensorfile::cast::{self, CastOptions};
//! use tensorfile::Dtype;
//!
//! let codes = cast::encode_f32_vec(&[1.0, -2.5, 500.0], Dtype::F8_E4M3, CastOptions::default())?;
//! assert_eq!(codes, [0x38, 0xC2, 0x7F]); // 500 overflows F8_E4M3: NaN
//! let sat = CastOptions::default().with_saturate(true);
//! assert_eq!(cast::encode_f32_vec(&[500.0], Dtype::F8_E4M3, sat)?, [0x7E]); // 448
//! assert_eq!(cast::decode_f32_vec(Dtype::F8_E4M3, &codes[..2])?, [1.0, -2.5]);
//! # Ok::<(), tensorfile::cast::CastError>(())
//! ```
//!
//! [ml_dtypes]: https://github.com/jax-ml/ml_dtypes

mod bf16;
mod decode;
mod encode;
mod error;
pub(crate) mod file;
mod int;
mod lanes;
mod loss;
mod minifloat;
mod tensor;

pub use error::CastError;
pub use file::{convert_plan, save_converted, ConvertSummary, Target};

pub use loss::{LossTally, Losses};
pub use tensor::{cast_tensor, TensorCast};

use crate::{Dtype, Error, Result, TensorView};

/// Decoding a tensor's elements to `f32` or `f64`, for every real float
/// dtype: methods on [`TensorView`] (bring the trait into scope, or use the
/// crate root's re-export).
///
/// ```
/// use tensorfile::{Decode, Dtype, SafeTensors, TensorRef};
/// let bf16 = [0x80, 0x3F, 0x00, 0xC0]; // 1.0, -2.0
/// let t = TensorRef { name: "w", dtype: Dtype::BF16, shape: &[2], data: &bf16 };
/// let bytes = tensorfile::serialize([t], None)?;
/// let file = SafeTensors::from_slice(&bytes)?;
/// assert_eq!(file.tensor("w")?.to_f32_vec()?, [1.0, -2.0]);
/// # Ok::<(), tensorfile::Error>(())
/// ```
pub trait Decode {
    /// The elements decoded to `f32` (F64 rounds to nearest even; the
    /// others are exact).
    ///
    /// # Errors
    /// [`tensorfile_core::Error::UnsupportedDtype`] for integers, BOOL and C64.
    fn to_f32_vec(&self) -> Result<Vec<f32>>;
    /// The elements decoded to `f64`, exactly.
    ///
    /// # Errors
    /// As [`Decode::to_f32_vec`].
    fn to_f64_vec(&self) -> Result<Vec<f64>>;
}

impl Decode for TensorView<'_> {
    fn to_f32_vec(&self) -> Result<Vec<f32>> {
        if self.dtype() == Dtype::F32 {
            return Ok(self.as_slice::<f32>()?.into_owned());
        }
        decodable(self, "decoding to f32")?;
        decode_f32_vec(self.dtype(), self.data()).map_err(|source| Error::Cast {
            tensor: self.name().to_string(),
            source,
        })
    }

    fn to_f64_vec(&self) -> Result<Vec<f64>> {
        if self.dtype() == Dtype::F64 {
            return Ok(self.as_slice::<f64>()?.into_owned());
        }
        decodable(self, "decoding to f64")?;
        decode_f64_vec(self.dtype(), self.data()).map_err(|source| Error::Cast {
            tensor: self.name().to_string(),
            source,
        })
    }
}

/// Refuses what has no float decoding: integers, BOOL, C64.
fn decodable(t: &TensorView<'_>, operation: &'static str) -> Result<()> {
    if t.dtype().is_float() && t.dtype() != Dtype::C64 {
        return Ok(());
    }
    Err(tensorfile_core::Error::UnsupportedDtype {
        tensor: t.name().to_string(),
        dtype: t.dtype(),
        operation,
    }
    .into())
}

/// Options of a cast.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CastOptions {
    /// Clamp overflow (and infinities) to the largest finite value for the
    /// F8 types instead of giving NaN or infinity.
    pub saturate: bool,
    /// Allow casts to, from and between integer dtypes (and BOOL to/from
    /// integers); values that do not fit are errors.
    pub allow_int: bool,
    /// Refuse any value the cast changes beyond rounding (see [`Losses`]:
    /// overflow to infinity, NaN, saturation, flush to zero), naming the
    /// first, before it is written.
    pub strict: bool,
}

tensorfile_core::with_fields!(CastOptions {
    with_saturate => saturate: bool,
    with_allow_int => allow_int: bool,
    with_strict => strict: bool,
});

/// Checks that `from` converts to `to` under `opts` (no data is looked at).
///
/// # Errors
///
/// [`CastError::Unsupported`], with the reason, when the pair does not
/// convert under `opts`.
///
/// ```
/// use tensorfile::cast::{check_cast, CastOptions};
/// use tensorfile::Dtype;
/// assert!(check_cast(Dtype::F32, Dtype::F8_E4M3, CastOptions::default()).is_ok());
/// assert!(check_cast(Dtype::F32, Dtype::I8, CastOptions::default()).is_err());
/// let ints = CastOptions::default().with_allow_int(true);
/// assert!(check_cast(Dtype::F32, Dtype::I8, ints).is_ok());
/// assert!(check_cast(Dtype::BOOL, Dtype::F32, ints).is_err());
/// ```
pub fn check_cast(from: Dtype, to: Dtype, opts: CastOptions) -> Result<(), CastError> {
    let refuse = |reason| Err(CastError::Unsupported { from, to, reason });
    if from == to {
        return Ok(());
    }
    if from == Dtype::C64 || to == Dtype::C64 {
        return refuse("C64 converts only to C64");
    }
    let boolish = |d: Dtype| d == Dtype::BOOL;
    if (boolish(from) && !to.is_int()) || (boolish(to) && !from.is_int()) {
        return refuse("BOOL converts only to and from integer dtypes");
    }
    let intish = |d: Dtype| d.is_int() || d == Dtype::BOOL;
    if (intish(from) || intish(to)) && !opts.allow_int {
        return refuse("integer dtypes convert only with allow_int");
    }
    Ok(())
}

/// The relative step between 1.0 and the next value of a float dtype
/// (`2^-mantissa bits`: one unit in the last place at 1.0; 1 for E8M0,
/// whose values are powers of two; C64 as its F32 parts); `None` for
/// integers and BOOL.
pub(crate) fn epsilon(dtype: Dtype) -> Option<f64> {
    match dtype {
        Dtype::F64 => Some(f64::EPSILON),
        Dtype::F32 | Dtype::C64 => Some(f64::from(f32::EPSILON)),
        _ => encode::format(dtype).map(|f| 2f64.powi(-(f.mbits as i32))),
    }
}

/// The smallest positive normal value of a float dtype: a nonzero value
/// of smaller magnitude is subnormal. `None` for E8M0 (no subnormals),
/// integers and BOOL.
pub(crate) fn smallest_normal(dtype: Dtype) -> Option<f64> {
    match dtype {
        Dtype::F64 => Some(f64::MIN_POSITIVE),
        Dtype::F32 | Dtype::C64 => Some(f64::from(f32::MIN_POSITIVE)),
        _ => encode::format(dtype)
            .filter(|f| !f.e8m0)
            .map(|f| 2f64.powi(1 - f.bias)),
    }
}

/// Element count of `len` bytes of `dtype` (whole packing groups for F4/F6).
///
/// # Errors
/// [`CastError::Length`] when `len` is not a whole number of elements (or
/// groups).
pub(crate) fn element_count(dtype: Dtype, len: usize) -> Result<usize, CastError> {
    let err = || CastError::Length {
        dtype,
        len: len as u64,
    };
    let n = (len as u64).checked_mul(8).ok_or_else(err)? / u64::from(dtype.bits());
    // The one sub-byte rule (`Dtype::byte_len`) says whether n fills len.
    if dtype.byte_len(n) != Some(len as u64) {
        return Err(err());
    }
    usize::try_from(n).map_err(|_| err())
}

/// Bytes of `n` elements of `dtype` (checked; sub-byte counts must fill whole groups).
fn byte_count(dtype: Dtype, n: usize) -> Result<usize, CastError> {
    dtype
        .byte_len(n as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or(CastError::NotWholeBytes {
            dtype,
            numel: n as u64,
        })
}

fn check_dst(expected: usize, dst: usize) -> Result<(), CastError> {
    if expected == dst {
        Ok(())
    } else {
        Err(CastError::BufferSize {
            expected: expected as u64,
            actual: dst as u64,
        })
    }
}

fn require_float(dtype: Dtype, to: Dtype) -> Result<(), CastError> {
    if dtype.is_float() && dtype != Dtype::C64 {
        Ok(())
    } else {
        Err(CastError::Unsupported {
            from: dtype,
            to,
            reason: "only real float dtypes decode to floats",
        })
    }
}

/// Decodes float elements (any float dtype but C64) into `dst`, which must
/// hold exactly the elements of `src`. Exact, except F64 which rounds to
/// nearest even.
///
/// # Errors
///
/// [`CastError::Unsupported`] when `dtype` is not a float dtype (or is C64),
/// [`CastError::Length`] when `src` is not a whole number of elements, and
/// [`CastError::BufferSize`] when `dst` does not hold exactly that many.
pub fn decode_f32(dtype: Dtype, src: &[u8], dst: &mut [f32]) -> Result<(), CastError> {
    require_float(dtype, Dtype::F32)?;
    let n = element_count(dtype, src.len())?;
    check_dst(n, dst.len())?;
    decode::to_f32(dtype, src, dst);
    Ok(())
}

/// Decodes float elements (any float dtype but C64) into `dst`, exactly.
///
/// # Errors
///
/// As [`decode_f32`].
pub(crate) fn decode_f64(dtype: Dtype, src: &[u8], dst: &mut [f64]) -> Result<(), CastError> {
    require_float(dtype, Dtype::F64)?;
    let n = element_count(dtype, src.len())?;
    check_dst(n, dst.len())?;
    decode::to_f64(dtype, src, dst);
    Ok(())
}

/// [`decode_f32`] into a new vector.
///
/// # Errors
///
/// [`CastError::Unsupported`] when `dtype` is not a float dtype (or is C64);
/// [`CastError::Length`] when `src` is not a whole number of elements.
pub fn decode_f32_vec(dtype: Dtype, src: &[u8]) -> Result<Vec<f32>, CastError> {
    require_float(dtype, Dtype::F32)?;
    let mut out = vec![0.0; element_count(dtype, src.len())?];
    decode::to_f32(dtype, src, &mut out);
    Ok(out)
}

/// `decode_f64` into a new vector.
///
/// # Errors
///
/// As [`decode_f32_vec`].
pub fn decode_f64_vec(dtype: Dtype, src: &[u8]) -> Result<Vec<f64>, CastError> {
    require_float(dtype, Dtype::F64)?;
    let mut out = vec![0.0; element_count(dtype, src.len())?];
    decode::to_f64(dtype, src, &mut out);
    Ok(out)
}

/// Encodes f32 values as `to` into `dst`, which must be exactly their byte
/// length (F4 needs an even count, F6 a multiple of 4).
///
/// # Errors
///
/// [`CastError::Unsupported`] when F32 does not convert to `to` under
/// `opts`, [`CastError::NotWholeBytes`] when the count does not fill whole
/// bytes of `to`, [`CastError::BufferSize`] when `dst` is the wrong size,
/// and [`CastError::OutOfRange`] or (strict) [`CastError::Lossy`] for the
/// first value `to` cannot hold.
pub fn encode_f32(
    src: &[f32],
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
) -> Result<(), CastError> {
    check_cast(Dtype::F32, to, opts)?;
    check_dst(byte_count(to, src.len())?, dst.len())?;
    if let (true, Some(b)) = (opts.strict, loss::Bounds::new(Dtype::F32, to, opts)) {
        b.scan(Dtype::F32, to, bytemuck::cast_slice(src), 0, true)?;
    }
    encode::from_f32(src, Dtype::F32, to, dst, opts, 0)
}

/// Encodes f64 values as `to` into `dst` (one rounding, see the module doc).
///
/// # Errors
///
/// As [`encode_f32`], for F64.
pub(crate) fn encode_f64(
    src: &[f64],
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
) -> Result<(), CastError> {
    check_cast(Dtype::F64, to, opts)?;
    check_dst(byte_count(to, src.len())?, dst.len())?;
    if let (true, Some(b)) = (opts.strict, loss::Bounds::new(Dtype::F64, to, opts)) {
        b.scan(Dtype::F64, to, bytemuck::cast_slice(src), 0, true)?;
    }
    encode::from_f64(src, Dtype::F64, to, dst, opts, 0)
}

/// [`encode_f32`] into a new vector.
///
/// # Errors
///
/// As [`encode_f32`], less the buffer size.
pub fn encode_f32_vec(src: &[f32], to: Dtype, opts: CastOptions) -> Result<Vec<u8>, CastError> {
    let mut out = vec![0; byte_count(to, src.len())?];
    encode_f32(src, to, &mut out, opts)?;
    Ok(out)
}

/// `encode_f64` into a new vector.
///
/// # Errors
///
/// As `encode_f64`, less the buffer size.
pub fn encode_f64_vec(src: &[f64], to: Dtype, opts: CastOptions) -> Result<Vec<u8>, CastError> {
    let mut out = vec![0; byte_count(to, src.len())?];
    encode_f64(src, to, &mut out, opts)?;
    Ok(out)
}

/// Converts the elements in `src` (bytes of `from`) into `dst` (bytes of
/// `to`, exactly as many elements). Error indices count from 0.
///
/// # Errors
///
/// [`CastError::Unsupported`] when the pair does not convert under `opts`,
/// [`CastError::Length`] or [`CastError::NotWholeBytes`] when `src` or the
/// result is not whole elements, [`CastError::BufferSize`] when `dst` is
/// the wrong size, and [`CastError::OutOfRange`], [`CastError::InvalidBool`]
/// or (strict) [`CastError::Lossy`] for the first element that does not
/// convert.
pub fn cast_slice(
    from: Dtype,
    src: &[u8],
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
) -> Result<(), CastError> {
    check_cast(from, to, opts)?;
    let n = element_count(from, src.len())?;
    check_dst(byte_count(to, n)?, dst.len())?;
    convert(from, src, to, dst, opts, 0).map(|_| ())
}

/// Elements per step of the general path (a multiple of 4, so F4/F6 groups
/// never straddle two steps).
const BLOCK: usize = 1024;

/// Elements a thread converts at least: below it, handing work to another
/// thread costs more than it saves.
const SPLIT_FROM: usize = 1 << 19;

/// The conversion proper: lengths and the pair are already checked. `base`
/// is the index of the first element, for error messages. Large inputs are
/// split into pieces converted on the pool's threads at once: casting is
/// computation on independent elements. Returns what was lost beyond
/// rounding (with `opts.strict`, a loss is an error before anything is
/// written).
fn convert(
    from: Dtype,
    src: &[u8],
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
    base: u64,
) -> Result<Losses, CastError> {
    let n = src.len() * 8 / from.bits() as usize;
    let bounds = loss::Bounds::new(from, to, opts);
    let bounds = bounds.as_ref();
    if n < 2 * SPLIT_FROM || from == to {
        return convert_serial(from, src, to, dst, opts, base, bounds);
    }
    // Pieces of whole BLOCKs: a multiple of BLOCK elements is a whole number
    // of bytes in every dtype (F4 and F6 included).
    use rayon::prelude::*;
    let (sb, db) = (from.bits() as usize, to.bits() as usize);
    let pieces = crate::parallel::pieces(n, BLOCK, SPLIT_FROM);
    let mut outs = Vec::with_capacity(pieces.len());
    let mut rest = dst;
    for &(s, e) in &pieces {
        let (piece, tail) = rest.split_at_mut((e - s) * db / 8);
        outs.push(piece);
        rest = tail;
    }
    let results: Vec<Result<Losses, CastError>> = crate::parallel::install(|| {
        pieces
            .into_par_iter()
            .zip(outs)
            .map(|((start, end), out)| {
                let input = &src[start * sb / 8..end * sb / 8];
                convert_serial(from, input, to, out, opts, base + start as u64, bounds)
            })
            .collect()
    });
    // Pieces come back in order: the first error names the lowest element.
    let mut total = Losses::default();
    for r in results {
        total.add(r?);
    }
    Ok(total)
}

/// [`convert`] on one thread.
fn convert_serial(
    from: Dtype,
    src: &[u8],
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
    base: u64,
    bounds: Option<&loss::Bounds>,
) -> Result<Losses, CastError> {
    if from == to {
        dst.copy_from_slice(src);
        return Ok(Losses::default());
    }
    if let (true, Some(b)) = (opts.strict, bounds) {
        // Every value is looked at before anything is written.
        let losses = b.scan(from, to, src, base, true)?;
        encode_serial(from, src, to, dst, opts, base, None)?;
        return Ok(losses);
    }
    encode_serial(from, src, to, dst, opts, base, bounds)
}

/// The conversion of [`convert_serial`], counting the losses against
/// `count` in the same pass when given: inside the vector loop for the hot
/// pairs, on each block's decoded values for the others (the source is
/// read and decoded once).
fn encode_serial(
    from: Dtype,
    src: &[u8],
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
    base: u64,
    count: Option<&loss::Bounds>,
) -> Result<Losses, CastError> {
    let f8 = |to| {
        if to == Dtype::F8_E4M3 {
            &minifloat::F8_E4M3
        } else {
            &minifloat::F8_E5M2
        }
    };
    match (from, to, count) {
        (Dtype::BF16, Dtype::F32, _) => bf16::bytes_to_f32_bytes(src, dst),
        (Dtype::F32, Dtype::BF16, None) => bf16::f32_bytes_to_bytes(src, dst),
        (Dtype::F32, Dtype::BF16, Some(b)) => {
            return Ok(b.map_counting(src, dst, bf16::from_f32_bits))
        }
        (Dtype::F32, Dtype::F8_E4M3 | Dtype::F8_E5M2, None) => {
            encode::f32_bytes_to_f8(f8(to), src, dst, opts.saturate)
        }
        (Dtype::F32, Dtype::F8_E4M3 | Dtype::F8_E5M2, Some(b)) => {
            let encoder = encode::f8_encoder(f8(to), opts.saturate);
            return Ok(b.map_counting(src, dst, encoder));
        }
        _ => {
            let (sb, db) = (from.bits() as usize, to.bits() as usize);
            let steps = src
                .chunks(BLOCK * sb / 8)
                .zip(dst.chunks_mut(BLOCK * db / 8));
            let mut losses = Losses::default();
            for (k, (s, d)) in steps.enumerate() {
                let base = base + (k * BLOCK) as u64;
                losses.add(block(from, s, to, d, opts, base, count)?);
            }
            return Ok(losses);
        }
    }
    Ok(Losses::default())
}

/// Converts up to [`BLOCK`] elements through a stack buffer of f32 (float
/// sources that f32 holds exactly), f64 (F64) or i128 (integers, BOOL),
/// counting the losses of the decoded values against `count` when given.
fn block(
    from: Dtype,
    src: &[u8],
    to: Dtype,
    dst: &mut [u8],
    opts: CastOptions,
    base: u64,
    count: Option<&loss::Bounds>,
) -> Result<Losses, CastError> {
    let n = src.len() * 8 / from.bits() as usize;
    let mut losses = Losses::default();
    if from == Dtype::F64 {
        let mut buf = [0f64; BLOCK];
        let buf = &mut buf[..n];
        decode::to_f64(from, src, buf);
        if let Some(b) = count {
            losses = b.count(bytemuck::cast_slice(buf), true);
        }
        encode::from_f64(buf, from, to, dst, opts, base)?;
    } else if from.is_float() {
        let mut buf = [0f32; BLOCK];
        let buf = &mut buf[..n];
        decode::to_f32(from, src, buf);
        if let Some(b) = count {
            losses = b.count(bytemuck::cast_slice(buf), true);
        }
        encode::from_f32(buf, from, to, dst, opts, base)?;
    } else {
        let mut buf = [0i128; BLOCK];
        let buf = &mut buf[..n];
        int::read(from, src, buf, base)?;
        if let Some(b) = count {
            losses = b.count_ints(buf);
        }
        encode::from_ints(buf, from, to, dst, opts, base)?;
    }
    Ok(losses)
}
