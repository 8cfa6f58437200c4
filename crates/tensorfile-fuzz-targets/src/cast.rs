//! Casts on arbitrary dtype pairs, bytes and shapes: never a panic; the
//! whole-tensor cast, the streamed one and the slice functions agree; and
//! the casts that are exact round-trip.

use tensorfile::cast::{self, cast_tensor, CastOptions, TensorCast};
use tensorfile::Dtype;

use crate::input::Input;

/// Most source bytes the target casts.
const MAX_BYTES: usize = 4096;

/// A pair of dtypes, options, a shape and bytes from the input (the bytes
/// need not fit the shape): [`cast_tensor`] succeeds or errs; streaming
/// the bytes through [`TensorCast`] in chunks the input chooses gives the
/// same bytes or fails too; a cast to the same dtype copies; a cast into a
/// dtype holding every value of the source comes back to the same values.
pub fn cast(data: &[u8]) {
    let mut input = Input::new(data);
    let from = input.dtype();
    let to = input.dtype();
    let flags = input.byte();
    let opts = CastOptions::default()
        .with_saturate(flags & 1 != 0)
        .with_allow_int(flags & 2 != 0)
        .with_strict(flags & 8 != 0);
    let ndim = input.below(4);
    let mut shape: Vec<u64> = (0..ndim).map(|_| input.dim()).collect();
    let chunk = 1 + input.below(64);
    let src = input.bytes(MAX_BYTES);
    if flags & 4 != 0 {
        // Mostly, the shape of the bytes given.
        let numel = src.len() as u64 * 8 / u64::from(from.bits());
        shape = vec![numel];
    }
    let whole = cast_tensor("t", from, &shape, src, to, opts);
    let mut streamed = Vec::new();
    let stream = TensorCast::new("t", from, &shape, to, opts).and_then(|mut c| {
        for piece in src.chunks(chunk) {
            c.push(piece, &mut streamed)?;
        }
        c.finish()
    });
    match (&whole, &stream) {
        (Ok(out), Ok(())) => assert_eq!(out, &streamed, "{from} -> {to} in chunks of {chunk}"),
        (Err(_), Err(_)) => {}
        // The streamed cast finds a bad value in a later chunk than the
        // whole cast reads at once, or vice versa: both must fail.
        (a, b) => panic!("{from} -> {to} {shape:?}: whole {a:?}, streamed {b:?}"),
    }
    let Ok(out) = whole else {
        return;
    };
    // The slice function on the same bytes.
    let mut dst = vec![0u8; out.len()];
    cast::cast_slice(from, src, to, &mut dst, opts)
        .expect("cast_slice takes what cast_tensor took");
    assert_eq!(dst, out, "{from} -> {to}: cast_slice");
    if from == to {
        assert_eq!(out, src, "{from} -> {to} is a copy");
    }
    // Saturation clamps infinities to the largest finite value: exact
    // only without it.
    if holds_every_value(to, from) && !opts.saturate {
        let back = cast_tensor("t", to, &shape, &out, from, opts)
            .unwrap_or_else(|e| panic!("{from} -> {to} -> {from}: {e}"));
        assert!(
            same_values(from, src, &back),
            "{from} -> {to} -> {from} changed values: {src:?} -> {out:?} -> {back:?}"
        );
    }
}

/// Whether every value of `from` is a value of `wide` (so a cast there and
/// back is exact): the same dtype, any real float into F64, the narrow
/// floats into F32, and integers into wider integers of the same or a
/// larger range.
fn holds_every_value(wide: Dtype, from: Dtype) -> bool {
    use Dtype::*;
    if wide == from {
        return true;
    }
    let float = from.is_float() && from != C64;
    match wide {
        F64 => float,
        F32 => float && from != F64,
        I64 => matches!(from, U8 | I8 | U16 | I16 | U32 | I32 | BOOL),
        U64 => matches!(from, U8 | U16 | U32 | BOOL),
        I32 => matches!(from, U8 | I8 | U16 | I16 | BOOL),
        U32 => matches!(from, U8 | U16 | BOOL),
        I16 => matches!(from, U8 | I8 | BOOL),
        U16 => matches!(from, U8 | BOOL),
        _ => false,
    }
}

/// Whether two buffers of `dtype` hold the same values: floats compared as
/// f64 with every NaN equal to every NaN (a round trip through F32 may
/// change a NaN's payload), anything else byte for byte.
fn same_values(dtype: Dtype, a: &[u8], b: &[u8]) -> bool {
    if !(dtype.is_float() && dtype != Dtype::C64) {
        return a == b;
    }
    match (
        cast::decode_f64_vec(dtype, a),
        cast::decode_f64_vec(dtype, b),
    ) {
        (Ok(x), Ok(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(&y)
                    .all(|(p, q)| (p.is_nan() && q.is_nan()) || p.to_bits() == q.to_bits())
        }
        _ => false,
    }
}
