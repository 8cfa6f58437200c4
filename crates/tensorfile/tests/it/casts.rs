//! Casts: the ml_dtypes 0.6.0 vectors, round trips, options, integers,
//! packing and streaming.

use std::collections::BTreeMap;

use tensorfile::cast::{self, cast_tensor, CastError, CastOptions, TensorCast};
use tensorfile::{Dtype, Error};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/casts");

const SMALL: [Dtype; 8] = [
    Dtype::F8_E5M2,
    Dtype::F8_E4M3,
    Dtype::F8_E8M0,
    Dtype::F8_E4M3FNUZ,
    Dtype::F8_E5M2FNUZ,
    Dtype::F4,
    Dtype::F6_E2M3,
    Dtype::F6_E3M2,
];

const FLOATS: [Dtype; 12] = [
    Dtype::F64,
    Dtype::F32,
    Dtype::F16,
    Dtype::BF16,
    Dtype::F8_E5M2,
    Dtype::F8_E4M3,
    Dtype::F8_E8M0,
    Dtype::F8_E4M3FNUZ,
    Dtype::F8_E5M2FNUZ,
    Dtype::F4,
    Dtype::F6_E2M3,
    Dtype::F6_E3M2,
];

fn opts() -> CastOptions {
    CastOptions::default()
}

fn sat() -> CastOptions {
    CastOptions::default().with_saturate(true)
}

fn ints() -> CastOptions {
    CastOptions::default().with_allow_int(true)
}

fn load(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn hex32(v: &serde_json::Value) -> u32 {
    u32::from_str_radix(v.as_str().unwrap(), 16).unwrap()
}

/// Packs codes as the format page says (written independently of the
/// library): F4 first value in the low nibble; F6 value k at bits 6k of a
/// little-endian 24-bit group; otherwise one code per byte or u16 LE.
fn pack(dtype: Dtype, codes: &[u32]) -> Vec<u8> {
    match dtype.bits() {
        4 => codes.chunks(2).map(|p| (p[0] | p[1] << 4) as u8).collect(),
        6 => codes
            .chunks(4)
            .flat_map(|q| {
                let w = q[0] | q[1] << 6 | q[2] << 12 | q[3] << 18;
                [w as u8, (w >> 8) as u8, (w >> 16) as u8]
            })
            .collect(),
        8 => codes.iter().map(|&c| c as u8).collect(),
        16 => codes
            .iter()
            .flat_map(|&c| (c as u16).to_le_bytes())
            .collect(),
        _ => unreachable!(),
    }
}

fn unpack(dtype: Dtype, bytes: &[u8]) -> Vec<u32> {
    match dtype.bits() {
        4 => bytes
            .iter()
            .flat_map(|&b| [u32::from(b & 0xF), u32::from(b >> 4)])
            .collect(),
        6 => bytes
            .chunks(3)
            .flat_map(|g| {
                let w = u32::from(g[0]) | u32::from(g[1]) << 8 | u32::from(g[2]) << 16;
                [w & 63, w >> 6 & 63, w >> 12 & 63, w >> 18 & 63]
            })
            .collect(),
        8 => bytes.iter().map(|&b| u32::from(b)).collect(),
        16 => bytes
            .chunks(2)
            .map(|p| u32::from(u16::from_le_bytes([p[0], p[1]])))
            .collect(),
        _ => unreachable!(),
    }
}

/// Codes of any float dtype, F32/F64 as their bits.
fn unpack_any(dtype: Dtype, bytes: &[u8]) -> Vec<u64> {
    match dtype {
        Dtype::F32 => bytes
            .chunks(4)
            .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        Dtype::F64 => bytes
            .chunks(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        _ => unpack(dtype, bytes).into_iter().map(u64::from).collect(),
    }
}

/// Equal codes, or both NaN for F32/F64 (whose NaN payloads follow the hardware).
fn same(dtype: Dtype, a: u64, b: u64) -> bool {
    a == b
        || match dtype {
            Dtype::F32 => f32::from_bits(a as u32).is_nan() && f32::from_bits(b as u32).is_nan(),
            Dtype::F64 => f64::from_bits(a).is_nan() && f64::from_bits(b).is_nan(),
            _ => false,
        }
}

fn codes_of(dtype: Dtype) -> Vec<u32> {
    (0..1u32 << dtype.bits()).collect()
}

fn is_nan_code(dtype: Dtype, code: u32) -> bool {
    let bytes = pack(dtype, &[code; 4]);
    cast::decode_f32_vec(dtype, &bytes).unwrap()[0].is_nan()
}

#[test]
fn decode_matches_every_code_of_the_vectors() {
    let v = load("decode_to_f32.json");
    let formats = v["formats"].as_object().unwrap();
    assert_eq!(formats.len(), SMALL.len());
    for dtype in SMALL {
        let expected: Vec<u32> = formats[dtype.name()]
            .as_array()
            .unwrap()
            .iter()
            .map(hex32)
            .collect();
        let codes = codes_of(dtype);
        assert_eq!(expected.len(), codes.len(), "{dtype}");
        let bytes = pack(dtype, &codes);
        let got: Vec<u32> = cast::decode_f32_vec(dtype, &bytes)
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        for (code, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "{dtype} code {code:#x}: got {g:08x}, want {e:08x}");
        }
        // The f64 decoder agrees (NaN as NaN).
        let wide = cast::decode_f64_vec(dtype, &bytes).unwrap();
        for (code, (w, e)) in wide.iter().zip(&expected).enumerate() {
            let e = f32::from_bits(*e);
            assert!(
                (w.is_nan() && e.is_nan()) || w.to_bits() == f64::from(e).to_bits(),
                "{dtype} code {code:#x} as f64"
            );
        }
    }
}

fn encode_vectors() -> (Vec<f32>, BTreeMap<String, Vec<u32>>) {
    let v = load("encode_from_f32.json");
    let inputs: Vec<f32> = v["inputs_f32_bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| f32::from_bits(hex32(h)))
        .collect();
    let codes = v["codes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, c)| {
            let c = c.as_array().unwrap();
            (
                k.clone(),
                c.iter().map(|x| x.as_u64().unwrap() as u32).collect(),
            )
        })
        .collect();
    (inputs, codes)
}

#[test]
fn encode_matches_every_vector() {
    let (inputs, codes) = encode_vectors();
    assert_eq!(inputs.len(), 1988);
    assert_eq!(codes.len(), 10);
    for (name, expected) in &codes {
        let dtype = Dtype::from_name(name).unwrap();
        let got = unpack(
            dtype,
            &cast::encode_f32_vec(&inputs, dtype, opts()).unwrap(),
        );
        let mut bad = Vec::new();
        for (i, (g, e)) in got.iter().zip(expected).enumerate() {
            if g != e {
                bad.push(format!(
                    "{:08x}: got {g:#x} want {e:#x}",
                    inputs[i].to_bits()
                ));
            }
        }
        assert!(
            bad.is_empty(),
            "{dtype}: {} mismatches: {:?}",
            bad.len(),
            &bad[..bad.len().min(10)]
        );
        // Same through the byte-level path (F32 tensor bytes).
        let bytes: Vec<u8> = inputs.iter().flat_map(|x| x.to_le_bytes()).collect();
        let shape = [inputs.len() as u64];
        let t = cast_tensor("v", Dtype::F32, &shape, &bytes, dtype, opts()).unwrap();
        assert_eq!(&unpack(dtype, &t), expected, "{dtype} via cast_tensor");
    }
}

#[test]
fn f64_that_is_an_f32_encodes_the_same() {
    let (inputs, codes) = encode_vectors();
    let wide: Vec<f64> = inputs.iter().map(|&x| f64::from(x)).collect();
    for name in codes.keys() {
        let dtype = Dtype::from_name(name).unwrap();
        for o in [opts(), sat()] {
            assert_eq!(
                cast::encode_f64_vec(&wide, dtype, o).unwrap(),
                cast::encode_f32_vec(&inputs, dtype, o).unwrap(),
                "{dtype} {o:?}"
            );
        }
    }
}

/// f32 bit patterns spread over the whole range, plus every pattern near
/// zero, one, and the format boundaries.
fn sweep() -> Vec<f32> {
    let mut v: Vec<u32> = (0..=u32::MAX).step_by(65_537).collect();
    for centre in [
        0u32,
        0x3F80_0000,
        0x43E0_0000,
        0x4760_0000,
        0x3880_0000,
        0x0040_0000,
        0x7F00_0000,
    ] {
        for d in 0..2048u32 {
            v.extend([centre.wrapping_add(d << 9), centre.wrapping_sub(d << 9)]);
            v.extend([(centre ^ 0x8000_0000).wrapping_add(d << 9)]);
        }
    }
    v.truncate(v.len() / 4 * 4);
    v.into_iter().map(f32::from_bits).collect()
}

#[test]
fn fast_f32_paths_agree_with_the_exact_encoder() {
    // The f32 encoders are branch-free fast paths; the f64 encoder is the
    // generic exact one. On values that are f32 they must agree.
    let xs = sweep();
    let wide: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    for dtype in FLOATS
        .into_iter()
        .filter(|d| *d != Dtype::F64 && *d != Dtype::F32)
    {
        for o in [opts(), sat()] {
            let want = cast::encode_f64_vec(&wide, dtype, o).unwrap();
            let got = cast::encode_f32_vec(&xs, dtype, o).unwrap();
            let (g, w) = (unpack(dtype, &got), unpack(dtype, &want));
            // f64::from quiets signaling NaNs, whose payload F16 keeps:
            // for NaN inputs only the NaN-ness and sign can be compared.
            let differs = |i: usize| {
                if xs[i].is_nan() && dtype == Dtype::F16 {
                    !is_nan_code(dtype, g[i])
                        || !is_nan_code(dtype, w[i])
                        || g[i] >> (dtype.bits() - 1) != w[i] >> (dtype.bits() - 1)
                } else {
                    g[i] != w[i]
                }
            };
            if let Some(i) = (0..g.len()).find(|&i| differs(i)) {
                panic!(
                    "{dtype} {o:?}: input {:08x}: fast {:#x}, exact {:#x}",
                    xs[i].to_bits(),
                    g[i],
                    w[i]
                );
            }
            let mut dst = vec![0; got.len()];
            cast::cast_slice(Dtype::F32, &bytes, dtype, &mut dst, o).unwrap();
            assert_eq!(dst, got, "{dtype} {o:?} byte path");
        }
    }
}

#[test]
fn f64_rounds_once() {
    let one = |x: f64, dtype| cast::encode_f64_vec(&[x, x, x, x], dtype, opts()).unwrap();
    // Through f32 these are ties that round down to even; directly they are above the tie.
    let p = |e: i32| 2f64.powi(e);
    assert_eq!(one(1.0 + p(-4) + p(-30), Dtype::F8_E4M3)[0], 0x39);
    assert_eq!(
        one(1.0 + p(-8) + p(-40), Dtype::BF16),
        [0x81, 0x3F].repeat(4)
    );
    assert_eq!(
        one(1.0 + p(-11) + p(-40), Dtype::F16),
        [0x01, 0x3C].repeat(4)
    );
    assert_eq!(one(1.0 + p(-2) + p(-40), Dtype::F4)[0], 0x33); // 1.25+ -> 1.5
    assert_eq!(
        one(1.0 + p(-24) + p(-40), Dtype::F32),
        (1.0f32 + f32::EPSILON).to_le_bytes().repeat(4)
    );
    // E8M0 ties up, but 1.5 - tiny is below the tie.
    assert_eq!(one(1.5 - p(-40), Dtype::F8_E8M0)[0], 0x7F);
    assert_eq!(one(1.5, Dtype::F8_E8M0)[0], 0x80);
    // f64 values far below f32's range: 2^-127 is E8M0's smallest; F16 underflows.
    assert_eq!(one(1e-300, Dtype::F8_E8M0)[0], 0x00);
    assert_eq!(one(-1e-300, Dtype::F16), [0x00, 0x80].repeat(4));
    assert_eq!(one(1e300, Dtype::F8_E5M2)[0], 0x7C);
    // Between 2^-127 and 2^-126 ml_dtypes rounds E8M0 up (f32 subnormals);
    // an f64 there does the same.
    assert_eq!(one(p(-127) * (1.0 + p(-40)), Dtype::F8_E8M0)[0], 0x01);
    assert_eq!(one(p(-127) * (1.0 - p(-40)), Dtype::F8_E8M0)[0], 0x00);
    let sub = [0x0040_0000u32, 0x0040_0001, 0x003F_FFFF, 0x005F_FFFF].map(f32::from_bits);
    assert_eq!(
        cast::encode_f32_vec(&sub, Dtype::F8_E8M0, opts()).unwrap(),
        [0, 1, 0, 1]
    );
}

#[test]
fn round_trips_through_f32_are_exact() {
    for dtype in [Dtype::BF16, Dtype::F16].into_iter().chain(SMALL) {
        let codes = codes_of(dtype);
        let bytes = pack(dtype, &codes);
        let xs = cast::decode_f32_vec(dtype, &bytes).unwrap();
        let back = unpack(dtype, &cast::encode_f32_vec(&xs, dtype, opts()).unwrap());
        // Through f64 as well.
        let wide = cast::decode_f64_vec(dtype, &bytes).unwrap();
        let back64 = unpack(dtype, &cast::encode_f64_vec(&wide, dtype, opts()).unwrap());
        for (&c, (&b, &b64)) in codes.iter().zip(back.iter().zip(&back64)) {
            if is_nan_code(dtype, c) {
                assert!(
                    is_nan_code(dtype, b) && is_nan_code(dtype, b64),
                    "{dtype} NaN {c:#x}"
                );
                // The sign survives where the format has a signed NaN.
                let sign = 1 << (dtype.bits() - 1);
                if !matches!(
                    dtype,
                    Dtype::F8_E8M0 | Dtype::F8_E4M3FNUZ | Dtype::F8_E5M2FNUZ
                ) {
                    assert_eq!(b & sign, c & sign, "{dtype} NaN sign {c:#x}");
                }
            } else {
                assert_eq!((b, b64), (c, c), "{dtype} code {c:#x}");
            }
        }
    }
    // F32 -> F64 -> F32 over the sweep (NaNs stay NaN; signaling ones
    // may come back quiet, as the hardware conversions do).
    let xs = sweep();
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let shape = [xs.len() as u64];
    let wide = cast_tensor("x", Dtype::F32, &shape, &bytes, Dtype::F64, opts()).unwrap();
    let back = cast_tensor("x", Dtype::F64, &shape, &wide, Dtype::F32, opts()).unwrap();
    for (x, b) in xs.iter().zip(back.chunks(4)) {
        let b = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        assert!(
            b.to_bits() == x.to_bits() || (x.is_nan() && b.is_nan()),
            "{:08x}",
            x.to_bits()
        );
    }
}

#[test]
fn bf16_to_f32_and_back_over_the_byte_path() {
    let codes: Vec<u32> = (0..=0xFFFF).collect();
    let bytes = pack(Dtype::BF16, &codes);
    let shape = [codes.len() as u64];
    let f32s = cast_tensor("b", Dtype::BF16, &shape, &bytes, Dtype::F32, opts()).unwrap();
    for (c, w) in codes.iter().zip(f32s.chunks(4)) {
        assert_eq!(u32::from_le_bytes([w[0], w[1], w[2], w[3]]), c << 16);
    }
    let back = unpack(
        Dtype::BF16,
        &cast_tensor("b", Dtype::F32, &shape, &f32s, Dtype::BF16, opts()).unwrap(),
    );
    for (&c, &b) in codes.iter().zip(&back) {
        let nan = c & 0x7FFF > 0x7F80;
        assert_eq!(b, if nan { (c & 0x8000) | 0x7FC0 } else { c }, "{c:#06x}");
    }
}

#[test]
fn saturate_clamps_overflow_for_f8_only() {
    let big = [
        500.0f32,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0,
        -0.0,
        1e-30,
    ];
    let cases: [(Dtype, [u8; 8], [u8; 8]); 5] = [
        (
            Dtype::F8_E4M3,
            [0x7F, 0xFF, 0x7F, 0xFF, 0x7F, 0x38, 0x80, 0x00],
            [0x7E, 0xFE, 0x7E, 0xFE, 0x7F, 0x38, 0x80, 0x00],
        ),
        (
            Dtype::F8_E5M2,
            [0x60, 0xFC, 0x7C, 0xFC, 0x7E, 0x3C, 0x80, 0x00],
            [0x60, 0xFB, 0x7B, 0xFB, 0x7E, 0x3C, 0x80, 0x00],
        ),
        (
            Dtype::F8_E4M3FNUZ,
            [0x80, 0x80, 0x80, 0x80, 0x80, 0x40, 0x00, 0x00],
            [0x7F, 0xFF, 0x7F, 0xFF, 0x80, 0x40, 0x00, 0x00],
        ),
        (
            Dtype::F8_E5M2FNUZ,
            [0x64, 0x80, 0x80, 0x80, 0x80, 0x40, 0x00, 0x00],
            [0x64, 0xFF, 0x7F, 0xFF, 0x80, 0x40, 0x00, 0x00],
        ),
        (
            Dtype::F8_E8M0,
            [0x88, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F, 0xFF, 0x1B],
            [0x88, 0xFF, 0xFE, 0xFF, 0xFF, 0x7F, 0xFF, 0x1B],
        ),
    ];
    for (dtype, plain, saturated) in cases {
        assert_eq!(
            cast::encode_f32_vec(&big, dtype, opts()).unwrap(),
            plain,
            "{dtype}"
        );
        assert_eq!(
            cast::encode_f32_vec(&big, dtype, sat()).unwrap(),
            saturated,
            "{dtype} saturate"
        );
        let wide: Vec<f64> = big.iter().map(|&x| f64::from(x)).collect();
        assert_eq!(
            cast::encode_f64_vec(&wide, dtype, sat()).unwrap(),
            saturated,
            "{dtype} f64 saturate"
        );
    }
    // E8M0: 2^127 * 1.5 overflows; saturate keeps 2^127.
    let top = [f32::from_bits(0x7F40_0000)];
    assert_eq!(
        cast::encode_f32_vec(&top, Dtype::F8_E8M0, opts()).unwrap(),
        [0xFF]
    );
    assert_eq!(
        cast::encode_f32_vec(&top, Dtype::F8_E8M0, sat()).unwrap(),
        [0xFE]
    );
    // F16/BF16 keep IEEE overflow; F4/F6 always saturate.
    let inf = [1e30f32, 1e30, 1e30, 1e30];
    assert_eq!(
        cast::encode_f32_vec(&inf[..1], Dtype::F16, sat()).unwrap(),
        [0x00, 0x7C]
    );
    assert_eq!(
        cast::encode_f32_vec(&[f32::INFINITY], Dtype::BF16, sat()).unwrap(),
        [0x80, 0x7F]
    );
    assert_eq!(
        cast::encode_f32_vec(&inf[..2], Dtype::F4, opts()).unwrap(),
        [0x77]
    );
    assert_eq!(
        cast::encode_f32_vec(&inf, Dtype::F6_E3M2, opts()).unwrap(),
        [0xDF, 0xF7, 0x7D]
    );
}

#[test]
fn integers_need_allow_int_and_must_fit() {
    let i32s: Vec<u8> = [0i32, 255, 256, -1]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let shape = [4u64];
    let err = cast_tensor("t", Dtype::I32, &shape, &i32s, Dtype::U8, opts()).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Cast {
                source: CastError::Unsupported { .. },
                ..
            }
        ),
        "{err}"
    );
    let err = cast_tensor("t", Dtype::I32, &shape, &i32s, Dtype::U8, ints()).unwrap_err();
    match &err {
        Error::Cast {
            tensor,
            source:
                CastError::OutOfRange {
                    index,
                    value,
                    from,
                    to,
                },
        } => {
            assert_eq!(
                (tensor.as_str(), *index, value.as_str(), *from, *to),
                ("t", 2, "256", Dtype::I32, Dtype::U8)
            );
        }
        e => panic!("{e}"),
    }
    assert_eq!(
        err.to_string(),
        "tensor \"t\": element 2: I32 value 256 does not fit U8"
    );
    // Fits: I32 -> I64 -> I16 round trip, U8 -> F16, I8 -> F32.
    let i64s = cast_tensor("t", Dtype::I32, &shape, &i32s, Dtype::I64, ints()).unwrap();
    let expect: Vec<u8> = [0i64, 255, 256, -1]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(i64s, expect);
    let i16s = cast_tensor("t", Dtype::I64, &shape, &i64s, Dtype::I16, ints()).unwrap();
    assert_eq!(i16s, [0, 0, 255, 0, 0, 1, 0xFF, 0xFF]);
    let f16 = cast_tensor("t", Dtype::I16, &shape, &i16s, Dtype::F16, ints()).unwrap();
    assert_eq!(
        cast::decode_f32_vec(Dtype::F16, &f16).unwrap(),
        [0.0, 255.0, 256.0, -1.0]
    );
    // Floats to ints: exact integers only.
    let f32s: Vec<u8> = [3.0f32, -7.0, 1.5, f32::NAN]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    // The element, its value and both dtypes, typed.
    let out_of_range = |err: &Error| match err {
        Error::Cast {
            tensor,
            source:
                CastError::OutOfRange {
                    index,
                    value,
                    from,
                    to,
                },
        } => (tensor.clone(), *index, value.clone(), *from, *to),
        other => panic!("not an out-of-range cast: {other}"),
    };
    let err = cast_tensor("f", Dtype::F32, &shape, &f32s, Dtype::I8, ints()).unwrap_err();
    assert_eq!(
        out_of_range(&err),
        ("f".into(), 2, "1.5".into(), Dtype::F32, Dtype::I8)
    );
    let ok = cast_tensor("f", Dtype::F32, &[2], &f32s[..8], Dtype::I8, ints()).unwrap();
    assert_eq!(ok, [3, 0xF9]);
    let err = cast_tensor("f", Dtype::F32, &[1], &f32s[12..], Dtype::I64, ints()).unwrap_err();
    assert_eq!(
        out_of_range(&err),
        ("f".into(), 0, "NaN".into(), Dtype::F32, Dtype::I64)
    );
    let err = cast_tensor(
        "f",
        Dtype::F32,
        &[1],
        &(-1.0f32).to_le_bytes(),
        Dtype::U32,
        ints(),
    )
    .unwrap_err();
    assert_eq!(
        out_of_range(&err),
        ("f".into(), 0, "-1".into(), Dtype::F32, Dtype::U32)
    );
    // u64 beyond 2^53 rounds once into BF16 and F32.
    let big = (1u64 << 63) + (1 << 55) + 1; // just above the BF16 tie 2^63 + 2^55
    let bf = cast_tensor(
        "u",
        Dtype::U64,
        &[1],
        &big.to_le_bytes(),
        Dtype::BF16,
        ints(),
    )
    .unwrap();
    assert_eq!(u16::from_le_bytes([bf[0], bf[1]]), 0x5F01);
    let f = cast_tensor(
        "u",
        Dtype::U64,
        &[1],
        &u64::MAX.to_le_bytes(),
        Dtype::F32,
        ints(),
    )
    .unwrap();
    assert_eq!(f32::from_le_bytes([f[0], f[1], f[2], f[3]]), 2f32.powi(64));
    let err = cast_tensor(
        "u",
        Dtype::U64,
        &[1],
        &u64::MAX.to_le_bytes(),
        Dtype::I64,
        ints(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("18446744073709551615 does not fit I64"),
        "{err}"
    );
}

#[test]
fn bool_converts_only_to_and_from_integers() {
    for other in FLOATS.into_iter().chain([Dtype::C64]) {
        assert!(
            cast::check_cast(Dtype::BOOL, other, ints()).is_err(),
            "{other}"
        );
        assert!(
            cast::check_cast(other, Dtype::BOOL, ints()).is_err(),
            "{other}"
        );
    }
    assert!(cast::check_cast(Dtype::BOOL, Dtype::I32, opts()).is_err());
    let b = cast_tensor("b", Dtype::BOOL, &[3], &[0, 1, 1], Dtype::I32, ints()).unwrap();
    assert_eq!(b, [0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(
        cast_tensor("b", Dtype::I32, &[3], &b, Dtype::BOOL, ints()).unwrap(),
        [0, 1, 1]
    );
    let err = cast_tensor("b", Dtype::U8, &[3], &[0, 1, 2], Dtype::BOOL, ints()).unwrap_err();
    assert!(
        err.to_string()
            .contains("element 2: U8 value 2 does not fit BOOL"),
        "{err}"
    );
    let err = cast_tensor("b", Dtype::BOOL, &[2], &[1, 7], Dtype::U8, ints()).unwrap_err();
    assert!(matches!(
        err,
        Error::Cast {
            source: CastError::InvalidBool { index: 1, byte: 7 },
            ..
        }
    ));
    // Identity casts need no option.
    assert_eq!(
        cast_tensor("b", Dtype::BOOL, &[2], &[1, 0], Dtype::BOOL, opts()).unwrap(),
        [1, 0]
    );
}

#[test]
fn c64_converts_only_to_c64() {
    let z: Vec<u8> = [1.0f32, -2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(
        cast_tensor("z", Dtype::C64, &[1], &z, Dtype::C64, opts()).unwrap(),
        z
    );
    for &other in Dtype::ALL.iter().filter(|d| **d != Dtype::C64) {
        let o = CastOptions::default()
            .with_saturate(true)
            .with_allow_int(true)
            .with_strict(false);
        assert!(cast::check_cast(Dtype::C64, other, o).is_err(), "{other}");
        assert!(cast::check_cast(other, Dtype::C64, o).is_err(), "{other}");
    }
    assert!(cast::decode_f32_vec(Dtype::C64, &z).is_err());
}

#[test]
fn every_float_pair_agrees_with_decode_then_encode() {
    // A spread of values of every magnitude, as f32 bytes, first cast to
    // each source format.
    let xs: Vec<f32> = sweep().into_iter().step_by(7).take(4000).collect();
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let n = [xs.len() as u64];
    for from in FLOATS {
        let src = cast_tensor("x", Dtype::F32, &n, &bytes, from, opts()).unwrap();
        let wide = cast::decode_f64_vec(from, &src).unwrap();
        // (from == to is a plain copy, tested elsewhere.)
        for to in FLOATS.into_iter().filter(|&to| to != from) {
            for o in [opts(), sat()] {
                let got = unpack_any(to, &cast_tensor("x", from, &n, &src, to, o).unwrap());
                let want = unpack_any(to, &cast::encode_f64_vec(&wide, to, o).unwrap());
                if let Some(i) = got.iter().zip(&want).position(|(g, w)| !same(to, *g, *w)) {
                    panic!(
                        "{from} -> {to} {o:?}: element {i}: got {:#x}, want {:#x}",
                        got[i], want[i]
                    );
                }
            }
        }
    }
}

#[test]
fn odd_layouts_of_sub_byte_formats() {
    let three: Vec<u8> = [1.0f32, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    for to in [Dtype::F4, Dtype::F6_E2M3] {
        let err = cast_tensor("w", Dtype::F32, &[3], &three, to, opts()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Cast {
                    source: CastError::NotWholeBytes { numel: 3, .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(cast::encode_f32_vec(&[1.0, 2.0, 3.0], to, opts()).is_err());
    }
    // F4 with 6 values cannot become F6 (6 values are 36 bits).
    let err = cast_tensor(
        "w",
        Dtype::F4,
        &[2, 3],
        &[0x21, 0x43, 0x65],
        Dtype::F6_E2M3,
        opts(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Cast {
                source: CastError::NotWholeBytes { numel: 6, .. },
                ..
            }
        ),
        "{err}"
    );
    // 2-D shapes with odd rows are fine when the total fills whole bytes.
    let f4 = cast_tensor(
        "w",
        Dtype::F32,
        &[2, 3, 2],
        &[three.clone(), three.clone(), three.clone(), three.clone()].concat(),
        Dtype::F4,
        opts(),
    )
    .unwrap();
    assert_eq!(f4, [0x42, 0x25, 0x54, 0x42, 0x25, 0x54]);
    // F6 -> F4 -> F6 keeps values F4 holds.
    let f6 = cast_tensor("w", Dtype::F4, &[12], &f4, Dtype::F6_E2M3, opts()).unwrap();
    assert_eq!(f6.len(), 9);
    assert_eq!(
        cast_tensor("w", Dtype::F6_E2M3, &[12], &f6, Dtype::F4, opts()).unwrap(),
        f4
    );
    assert_eq!(
        cast::decode_f32_vec(Dtype::F6_E2M3, &f6).unwrap(),
        [1.0, 2.0, 3.0].repeat(4)
    );
    // Byte buffers that are not whole groups.
    assert!(matches!(
        cast::decode_f32_vec(Dtype::F6_E3M2, &[0, 0]),
        Err(CastError::Length { len: 2, .. })
    ));
    assert!(matches!(
        cast::decode_f32_vec(Dtype::BF16, &[0; 3]),
        Err(CastError::Length { len: 3, .. })
    ));
    let mut small = [0u8; 1];
    assert!(matches!(
        cast::encode_f32(&[1.0, 2.0, 3.0, 4.0], Dtype::F4, &mut small, opts()),
        Err(CastError::BufferSize {
            expected: 2,
            actual: 1
        })
    ));
    let mut out = [0.0f32; 3];
    assert!(cast::decode_f32(Dtype::F4, &[0x21], &mut out).is_err());
}

#[test]
fn streaming_in_any_chunking_equals_one_call() {
    let xs: Vec<f32> = sweep().into_iter().step_by(97).take(960).collect();
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let n = [xs.len() as u64];
    let pairs = [
        (Dtype::F32, Dtype::BF16),
        (Dtype::F32, Dtype::F6_E3M2),
        (Dtype::F6_E3M2, Dtype::F4),
        (Dtype::F4, Dtype::F6_E2M3),
        (Dtype::F6_E2M3, Dtype::F64),
        (Dtype::F16, Dtype::F8_E4M3),
        (Dtype::F64, Dtype::F8_E8M0),
    ];
    for (from, to) in pairs {
        let src = cast_tensor("s", Dtype::F32, &n, &bytes, from, opts()).unwrap();
        let whole = cast_tensor("s", from, &n, &src, to, opts()).unwrap();
        for size in [1usize, 2, 3, 5, 7, 64, 1000, 4099] {
            let mut cast = TensorCast::new("s", from, &n, to, opts()).unwrap();
            assert_eq!(cast.output_len(), whole.len() as u64);
            let mut out = Vec::new();
            for chunk in src.chunks(size) {
                cast.push(chunk, &mut out).unwrap();
            }
            cast.finish().unwrap();
            assert_eq!(out, whole, "{from} -> {to} in chunks of {size}");
        }
    }
}

#[test]
fn streaming_errors_name_the_tensor_and_the_element() {
    let vals: Vec<u8> = (0..100i32)
        .map(|v| v * 3)
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut cast = TensorCast::new("layer.w", Dtype::I32, &[100], Dtype::I8, ints()).unwrap();
    let mut out = Vec::new();
    let mut err = None;
    for chunk in vals.chunks(7) {
        if let Err(e) = cast.push(chunk, &mut out) {
            err = Some(e);
            break;
        }
    }
    // 43 * 3 = 129 is the first value above 127.
    let err = err.unwrap();
    assert_eq!(
        err.to_string(),
        "tensor \"layer.w\": element 43: I32 value 129 does not fit I8"
    );
    assert_eq!(out.len(), 43);

    let mut short = TensorCast::new("x", Dtype::F32, &[2], Dtype::F16, opts()).unwrap();
    short.push(&[0; 7], &mut Vec::new()).unwrap();
    let err = short.finish().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Cast {
                source: CastError::TensorLength {
                    expected: 8,
                    actual: 7,
                    ..
                },
                ..
            }
        ),
        "{err}"
    );
    let mut long = TensorCast::new("x", Dtype::F32, &[2], Dtype::F16, opts()).unwrap();
    assert!(long.push(&[0; 9], &mut Vec::new()).is_err());
    assert!(cast_tensor("x", Dtype::F32, &[2], &[0; 4], Dtype::F16, opts()).is_err());
    let err = TensorCast::new("x", Dtype::F32, &[u64::MAX, 4], Dtype::F16, opts()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Cast {
                source: CastError::ShapeOverflow { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn large_casts_split_across_threads_give_the_same_bytes_and_indices() {
    // Over the size where a conversion is split in two halves.
    let n = 3_000_000usize;
    let values: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 - 500.0) / 64.0).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    for to in [Dtype::BF16, Dtype::F8_E4M3, Dtype::F4, Dtype::F6_E2M3] {
        let mut whole = vec![0u8; n * to.bits() as usize / 8];
        tensorfile::cast::cast_slice(Dtype::F32, &bytes, to, &mut whole, opts()).unwrap();
        // Element by element, in small pieces that are never split.
        let mut pieces = Vec::with_capacity(whole.len());
        for chunk in bytes.chunks(4 * 4096) {
            let mut out = vec![0u8; chunk.len() / 4 * to.bits() as usize / 8];
            tensorfile::cast::cast_slice(Dtype::F32, chunk, to, &mut out, opts()).unwrap();
            pieces.extend_from_slice(&out);
        }
        assert!(whole == pieces, "{to}");
    }
    // An error in the second half names its element in the whole slice.
    let mut ints: Vec<i32> = vec![1; n];
    ints[2_500_000] = 1000;
    let src: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut dst = vec![0u8; n];
    let err = tensorfile::cast::cast_slice(Dtype::I32, &src, Dtype::I8, &mut dst, self::ints())
        .unwrap_err();
    assert!(err.to_string().starts_with("element 2500000:"), "{err}");
}
