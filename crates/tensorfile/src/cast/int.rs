//! Integer and BOOL elements: every integer dtype widens losslessly to
//! `i128`, so conversions are a range check.

use super::CastError;
use crate::Dtype;

/// The inclusive value range of an integer dtype or BOOL.
pub(crate) fn range(dtype: Dtype) -> Option<(i128, i128)> {
    Some(match dtype {
        Dtype::BOOL => (0, 1),
        Dtype::U8 => (0, u8::MAX.into()),
        Dtype::I8 => (i8::MIN.into(), i8::MAX.into()),
        Dtype::U16 => (0, u16::MAX.into()),
        Dtype::I16 => (i16::MIN.into(), i16::MAX.into()),
        Dtype::U32 => (0, u32::MAX.into()),
        Dtype::I32 => (i32::MIN.into(), i32::MAX.into()),
        Dtype::U64 => (0, u64::MAX.into()),
        Dtype::I64 => (i64::MIN.into(), i64::MAX.into()),
        _ => return None,
    })
}

/// Reads integer (or BOOL) elements. A BOOL byte other than 0 or 1 is an error.
pub(crate) fn read(dtype: Dtype, src: &[u8], dst: &mut [i128], base: u64) -> Result<(), CastError> {
    let size = dtype.size().unwrap_or(1);
    for (k, (o, b)) in dst.iter_mut().zip(src.chunks_exact(size)).enumerate() {
        let mut le = [0u8; 16];
        le[..size].copy_from_slice(b);
        let signed = matches!(dtype, Dtype::I8 | Dtype::I16 | Dtype::I32 | Dtype::I64);
        if signed && b[size - 1] & 0x80 != 0 {
            le[size..].fill(0xFF);
        }
        *o = i128::from_le_bytes(le);
        if dtype == Dtype::BOOL && *o > 1 {
            return Err(CastError::InvalidBool {
                index: base + k as u64,
                byte: b[0],
            });
        }
    }
    Ok(())
}

/// Writes `values` as `to` (an integer dtype or BOOL), failing on the first
/// value outside its range.
pub(crate) fn write(
    values: impl IntoIterator<Item = Result<i128, String>>,
    from: Dtype,
    to: Dtype,
    dst: &mut [u8],
    base: u64,
) -> Result<(), CastError> {
    let size = to.size().unwrap_or(1);
    let (lo, hi) = range(to).ok_or(CastError::Unsupported {
        from,
        to,
        reason: "not an integer dtype",
    })?;
    for (k, (o, v)) in dst.chunks_exact_mut(size).zip(values).enumerate() {
        let out_of_range = |value: String| CastError::OutOfRange {
            index: base + k as u64,
            value,
            from,
            to,
        };
        let v = v.map_err(out_of_range)?;
        if v < lo || v > hi {
            return Err(out_of_range(v.to_string()));
        }
        o.copy_from_slice(&v.to_le_bytes()[..size]);
    }
    Ok(())
}

/// The integer a float holds exactly, or the value's text when it is not one
/// (fractional, infinite, NaN, or beyond 2^127).
pub(crate) fn from_float(x: f64) -> Result<i128, String> {
    // 2^127: every finite f64 below it in magnitude fits i128.
    const LIMIT: f64 = 1.7014118346046923e38;
    if x.is_finite() && x.fract() == 0.0 && x.abs() < LIMIT {
        Ok(x as i128)
    } else {
        Err(x.to_string())
    }
}
