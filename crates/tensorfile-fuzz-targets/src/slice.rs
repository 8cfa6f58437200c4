//! Slicing, checked against a naive model: the tensor's bytes are one
//! little-endian bit stream (element `k` is bits `k * bits .. (k + 1) *
//! bits`, which is how every dtype, F4 and F6 included, lays its elements
//! out), and a slice keeps the elements NumPy's rules name, in C order.

use tensorfile::{serialize, Dtype, ReadOptions, SafeTensors, SliceArg, TensorRef};

use crate::input::{pattern, Input};

/// Most dimensions and elements the target builds.
const MAX_NDIM: usize = 4;
const MAX_BYTES: u64 = 4096;

/// A shape, slice arguments and a dtype from the input; the slice's shape,
/// bytes and byte ranges must be the model's, and it must be refused
/// exactly when the model refuses it.
pub fn slice(data: &[u8]) {
    let mut input = Input::new(data);
    let dtype = input.dtype();
    let ndim = input.below(MAX_NDIM + 1);
    let shape: Vec<u64> = (0..ndim).map(|_| input.dim()).collect();
    let Ok(nbytes) = dtype.tensor_bytes(&shape) else {
        return;
    };
    if nbytes > MAX_BYTES {
        return;
    }
    let nargs = input.below(ndim + 2);
    let args: Vec<SliceArg> = (0..nargs).map(|_| slice_arg(&mut input)).collect();
    let bytes = pattern(input.byte(), nbytes as usize);
    let file = serialize(
        [TensorRef {
            name: "t",
            dtype,
            shape: &shape,
            data: &bytes,
        }],
        None,
    );
    // The header parser may refuse a shape (its running product can
    // overflow before a zero dimension); then there is nothing to slice.
    let Ok(file) = file.map(|f| SafeTensors::from_source(f, &ReadOptions::default())) else {
        return;
    };
    let file = file.expect("a serialized file reads back");
    let t = file.tensor("t").expect("the tensor is there");
    let expected = model(dtype, &shape, &args, &bytes);
    match (t.slice(&args), expected) {
        (Err(_), Err(_)) => {}
        (Ok(s), Ok((shape_want, bytes_want))) => {
            assert_eq!(s.shape(), &shape_want[..], "{shape:?} {args:?}");
            let numel = if shape_want.contains(&0) {
                0
            } else {
                shape_want.iter().product()
            };
            assert_eq!(s.numel(), numel, "{shape:?} {args:?}");
            assert_eq!(s.nbytes(), bytes_want.len() as u64, "{shape:?} {args:?}");
            let got = s.to_vec();
            assert_eq!(got, bytes_want, "{dtype} {shape:?} {args:?}");
            // The byte ranges are in order, in bounds, and hold those bytes.
            let mut joined = Vec::new();
            let begin = t.data_offsets().0;
            for (r, d) in s.byte_ranges().zip(s.data_ranges()) {
                assert!(r.start <= r.end && r.end <= bytes.len() as u64, "{r:?}");
                assert_eq!((d.start - begin, d.end - begin), (r.start, r.end));
                joined.extend_from_slice(&bytes[r.start as usize..r.end as usize]);
            }
            assert_eq!(joined, got, "{shape:?} {args:?}");
        }
        (got, want) => panic!(
            "{dtype} {shape:?} {args:?}: the library says {:?}, the model {:?}",
            got.map(|s| s.shape().to_vec()),
            want.map(|(shape, _)| shape)
        ),
    }
}

/// One slice argument: bounds near the dimension sizes the shapes use,
/// sometimes extreme.
fn slice_arg(input: &mut Input<'_>) -> SliceArg {
    let bound = |input: &mut Input<'_>| -> i64 {
        match input.byte() {
            0xFE => i64::MIN,
            0xFF => i64::MAX,
            0xFD => -(1 << 40),
            b => i64::from(b % 21) - 10,
        }
    };
    match input.below(4) {
        0 => SliceArg::Index(bound(input)),
        k => {
            let start = (k & 1 == 1).then(|| bound(input));
            let stop = input.flag().then(|| bound(input));
            let step = match input.byte() {
                0xFF => u64::MAX,
                0xFE => 1 << 40,
                b => u64::from(b % 4),
            };
            SliceArg::Range { start, stop, step }
        }
    }
}

/// What an argument keeps of a dimension of length `dim`: `count`
/// positions from `start`, `step` apart, and whether the dimension stays;
/// `None` when the request is out of range.
fn positions(arg: SliceArg, dim: u64) -> Option<(u64, u64, u64, bool)> {
    let dim = i128::from(dim);
    let resolve = |i: i64| -> Option<i128> {
        let i = i128::from(i);
        let p = if i < 0 { dim + i } else { i };
        (0..=dim).contains(&p).then_some(p)
    };
    match arg {
        SliceArg::Index(i) => {
            let p = resolve(i)?;
            (p < dim).then_some((p as u64, 1, 1, false))
        }
        SliceArg::Range { start, stop, step } => {
            if step == 0 {
                return None;
            }
            let s = start.map_or(Some(0), resolve)?;
            let e = stop.map_or(Some(dim), resolve)?;
            let step = i128::from(step);
            let count = if e > s { (e - s + step - 1) / step } else { 0 };
            Some((s as u64, step as u64, count as u64, true))
        }
    }
}

/// The model's result: the sliced shape and bytes, or `Err` when the slice
/// is refused (too many arguments, out of range, step 0, or sub-byte
/// elements cut off a byte boundary).
fn model(
    dtype: Dtype,
    shape: &[u64],
    args: &[SliceArg],
    bytes: &[u8],
) -> Result<(Vec<u64>, Vec<u8>), ()> {
    if args.len() > shape.len() {
        return Err(());
    }
    let mut kept = Vec::new();
    let mut out_shape = Vec::new();
    for (d, &dim) in shape.iter().enumerate() {
        let arg = args.get(d).copied().unwrap_or_else(SliceArg::full);
        let (start, step, count, keep) = positions(arg, dim).ok_or(())?;
        if keep {
            out_shape.push(count);
        }
        kept.push((start, step, count));
    }
    // Flat indices of the kept elements, in C order, one at a time (only
    // when there are some: then every dimension is small).
    let mut flat = Vec::new();
    if kept.iter().all(|&(_, _, count)| count > 0) {
        let mut idx = vec![0u64; shape.len()];
        'all: loop {
            let f = (0..shape.len()).fold(0u64, |f, d| {
                let (start, step, _) = kept[d];
                f * shape[d] + start + idx[d] * step
            });
            flat.push(f);
            let mut d = shape.len();
            loop {
                if d == 0 {
                    break 'all;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < kept[d].2 {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
    let bits = u64::from(dtype.bits());
    // Sub-byte elements must come in whole bytes: every maximal run of
    // consecutive elements starts and ends on a byte boundary.
    if dtype.is_sub_byte() {
        let mut i = 0;
        while i < flat.len() {
            let start = flat[i];
            let mut end = start + 1;
            while i + 1 < flat.len() && flat[i + 1] == end {
                i += 1;
                end += 1;
            }
            if (start * bits) % 8 != 0 || (end * bits) % 8 != 0 {
                return Err(());
            }
            i += 1;
        }
    }
    let bit = |k: u64| (bytes[(k / 8) as usize] >> (k % 8)) & 1;
    let mut out = vec![0u8; (flat.len() as u64 * bits / 8) as usize];
    let mut o = 0u64;
    for &f in &flat {
        for b in 0..bits {
            out[(o / 8) as usize] |= bit(f * bits + b) << (o % 8);
            o += 1;
        }
    }
    Ok((out_shape, out))
}
