//! Quantization on hostile shapes and parameters: int4 and MLX quantize,
//! dequantize, pack and unpack, the layout rules, and whole files. Each
//! must succeed or return an error; never panic, hang or allocate more
//! than the bytes given justify.

use std::path::PathBuf;
use std::sync::OnceLock;

use tensorfile::quant::{
    dequantize_file, dequantize_weight, int4_dequantize as dequantize_int4, int4_quantize,
    mlx_pack, mlx_quantize_affine, mlx_unpack, quantize_file, quantized_weights, DequantizeOptions,
    Glob, LogicalWeight, Mode, QuantConfig, QuantParams, QuantizeOptions, Scheme,
};
use tensorfile::{Dtype, SafeTensors, TensorInfo, TensorRef, WriteOptions};

use crate::input::{pattern, Input};

/// Most bytes of one tensor the target builds.
const MAX_BYTES: u64 = 4096;

/// Group sizes and widths that break arithmetic beside ordinary ones.
const GROUPS: [u64; 14] = [
    0,
    1,
    2,
    3,
    4,
    6,
    8,
    16,
    32,
    64,
    128,
    1 << 40,
    1 << 63,
    u64::MAX,
];
const BITS: [u64; 14] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 32, 64, (1 << 32) + 4];

/// One of several quantization operations, chosen and fed by the input.
pub fn quant(data: &[u8]) {
    let mut input = Input::new(data);
    match input.below(6) {
        0 => int4_round_trip(&mut input),
        1 => int4_dequantize(&mut input),
        2 => mlx_round_trip(&mut input),
        3 => packing(&mut input),
        4 => layouts(&mut input),
        _ => files(&mut input),
    }
}

/// A float dtype mostly, sometimes any.
fn weight_dtype(input: &mut Input<'_>) -> Dtype {
    match input.below(8) {
        0 => input.dtype(),
        k => [Dtype::F32, Dtype::F16, Dtype::BF16][k % 3],
    }
}

/// Bytes for `shape` of `dtype` when they are few enough: finite values
/// of a small range mostly (from the input's bytes), raw input bytes
/// sometimes (NaN, infinities, huge values). `None` when the shape needs
/// more than the target builds.
fn tensor_bytes(input: &mut Input<'_>, dtype: Dtype, shape: &[u64]) -> Option<Vec<u8>> {
    let n = dtype.tensor_bytes(shape).ok().filter(|&n| n <= MAX_BYTES)? as usize;
    let raw = input.flag();
    let seed = input.byte();
    if raw || !(dtype.is_float() && dtype != Dtype::C64) {
        let mut bytes = input.bytes(n).to_vec();
        bytes.resize(n, seed);
        return Some(bytes);
    }
    let numel = n * 8 / dtype.bits() as usize;
    let values: Vec<f32> = pattern(seed, numel)
        .iter()
        .map(|&b| (f32::from(b) - 128.0) / 16.0)
        .collect();
    tensorfile::cast::encode_f32_vec(&values, dtype, Default::default()).ok()
}

fn shape2(input: &mut Input<'_>) -> Vec<u64> {
    match input.below(8) {
        0 => (0..input.below(4)).map(|_| input.dim()).collect(),
        _ => vec![input.dim(), input.dim().saturating_mul(8)],
    }
}

fn params(input: &mut Input<'_>) -> QuantParams {
    QuantParams {
        bits: input.pick(&BITS),
        group_size: input.pick(&GROUPS),
        mode: input.pick(&Mode::ALL),
        global_scale: input.below(4) == 0,
    }
}

/// int4: quantize, then dequantize what came out.
fn int4_round_trip(input: &mut Input<'_>) {
    let dtype = weight_dtype(input);
    let shape = shape2(input);
    let group = input.pick(&GROUPS);
    let data = tensor_bytes(input, dtype, &shape).unwrap_or_default();
    let Ok(q) = int4_quantize("w", dtype, &shape, &data, group) else {
        return;
    };
    let back = dequantize_int4("w", &q.qweight, &q.scales, &shape, group)
        .unwrap_or_else(|e| panic!("{shape:?} g{group}: what int4 wrote does not read: {e}"));
    assert_eq!(back.len() as u64, numel(&shape), "{shape:?} g{group}");
    assert!(back.iter().all(|v| v.is_finite()), "{shape:?} g{group}");
}

/// int4: dequantize arbitrary bytes under hostile shapes and groups.
fn int4_dequantize(input: &mut Input<'_>) {
    let shape = shape2(input);
    let group = input.pick(&GROUPS);
    let qweight = input.bytes(512);
    let scales = input.bytes(512);
    if let Ok(values) = dequantize_int4("w", qweight, scales, &shape, group) {
        assert_eq!(values.len(), qweight.len() * 2, "{shape:?} g{group}");
    }
}

/// MLX affine: quantize, then find the weight by its layout and
/// dequantize it.
fn mlx_round_trip(input: &mut Input<'_>) {
    let dtype = weight_dtype(input);
    let shape = shape2(input);
    let p = params(input);
    let data = tensor_bytes(input, dtype, &shape).unwrap_or_default();
    let Ok(q) = mlx_quantize_affine("m.weight", dtype, &shape, &data, p) else {
        return;
    };
    let &[rows, cols] = &shape[..] else {
        panic!("quantized a weight of shape {shape:?}");
    };
    let words = [rows, cols * p.bits / 32];
    let groups = [rows, cols / p.group_size];
    let tensors = [
        TensorRef {
            name: "m.weight",
            dtype: Dtype::U32,
            shape: &words,
            data: &q.weight,
        },
        TensorRef {
            name: "m.scales",
            dtype,
            shape: &groups,
            data: &q.scales,
        },
        TensorRef {
            name: "m.biases",
            dtype,
            shape: &groups,
            data: &q.biases,
        },
    ];
    let config = QuantConfig::uniform(p);
    let lookup = |n: &str| info(&tensors, n);
    let names = tensors.iter().map(|t| t.name);
    let weights = quantized_weights(names, lookup, None, Some(&config))
        .unwrap_or_else(|e| panic!("{shape:?} {p}: the parts are no weight: {e}"));
    assert_eq!(weights.len(), 1, "{shape:?} {p}");
    let back =
        dequantize_weight(&weights[0], &tensors).unwrap_or_else(|e| panic!("{shape:?} {p}: {e}"));
    assert_eq!(back.len() as u64, numel(&shape), "{shape:?} {p}");
}

/// The element count of a shape that holds its values (0 with a zero
/// dimension, whatever the others).
fn numel(shape: &[u64]) -> u64 {
    if shape.contains(&0) {
        0
    } else {
        shape.iter().product()
    }
}

/// The header's view of one of `tensors`.
fn info<'a>(tensors: &'a [TensorRef<'a>], name: &str) -> Option<TensorInfo<'a>> {
    let t = tensors.iter().find(|t| t.name == name)?;
    Some(TensorInfo {
        name: t.name,
        dtype: t.dtype,
        shape: t.shape,
        data_offsets: (0, t.data.len() as u64),
    })
}

/// MLX bit packing at any width and length: the widths MLX packs round
/// trip, the others are refused.
fn packing(input: &mut Input<'_>) {
    let bits = u32::from(input.byte() % 12);
    let codes = input.bytes(256).to_vec();
    let mut packed = vec![0u8; input.below(256)];
    let packs = mlx_pack(bits, &codes, &mut packed);
    let mut back = vec![0u8; codes.len()];
    let unpacks = mlx_unpack(bits, &packed, &mut back);
    let valid = [2, 3, 4, 5, 6, 8].contains(&bits);
    assert_eq!(packs.is_ok(), valid, "pack at {bits} bits");
    assert_eq!(unpacks.is_ok(), valid, "unpack at {bits} bits");
    if valid && codes.len().is_multiple_of(8) && packed.len() == codes.len() * bits as usize / 8 {
        let masked: Vec<u8> = codes
            .iter()
            .map(|c| c & ((1u16 << bits) - 1) as u8)
            .collect();
        assert_eq!(back, masked, "{bits} bits");
    }
}

/// The layout rules and `dequantize_weight` on parts of hostile dtypes
/// and shapes, and on weights whose public fields say anything.
fn layouts(input: &mut Input<'_>) {
    const NAMES: [&str; 6] = [
        "m.weight",
        "m.scales",
        "m.biases",
        "m.weight.qweight",
        "m.weight.scales",
        "n.scales",
    ];
    let mut parts = Vec::new();
    for name in NAMES {
        if !input.flag() {
            continue;
        }
        let dtype = match input.below(3) {
            0 => input.dtype(),
            1 => Dtype::U32,
            _ => Dtype::F16,
        };
        let shape = shape2(input);
        let Some(data) = tensor_bytes(input, dtype, &shape) else {
            continue;
        };
        parts.push((name, dtype, shape, data));
    }
    let tensors: Vec<TensorRef<'_>> = parts
        .iter()
        .map(|(name, dtype, shape, data)| TensorRef {
            name,
            dtype: *dtype,
            shape,
            data,
        })
        .collect();
    let config = QuantConfig::uniform(params(input));
    let group = input.flag().then(|| input.pick(&GROUPS));
    let lookup = |n: &str| info(&tensors, n);
    let names = tensors.iter().map(|t| t.name);
    if let Ok(weights) = quantized_weights(names, lookup, group, Some(&config)) {
        for w in &weights {
            let _ = dequantize_weight(w, &tensors);
        }
    }
    // A weight whose fields say anything at all.
    let storage = match input.below(3) {
        0 => None,
        1 => Some(Scheme::Int4Sym {
            group: input.pick(&GROUPS),
        }),
        _ => Some(Scheme::Mlx(params(input))),
    };
    let weight = LogicalWeight {
        name: input.pick(&["m", "m.weight", "n"]).to_string(),
        storage,
        dtype: input.dtype(),
        shape: shape2(input),
        parts: (0..input.below(4)).map(|_| input.pick(&NAMES)).collect(),
    };
    let _ = dequantize_weight(&weight, &tensors);
}

/// A scratch directory for the whole process.
fn scratch() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
        .to_path_buf()
}

/// Whole files: quantize a few tensors with a scheme from the input; what
/// was written dequantizes back to the original names and shapes.
fn files(input: &mut Input<'_>) {
    let scheme = if input.flag() {
        Scheme::Int4Sym {
            group: input.pick(&GROUPS),
        }
    } else {
        Scheme::Mlx(params(input))
    };
    let mut built = Vec::new();
    for name in ["a.weight", "b.weight", "norm.weight"] {
        if !input.flag() {
            continue;
        }
        let dtype = weight_dtype(input);
        let shape = shape2(input);
        if let Some(data) = tensor_bytes(input, dtype, &shape) {
            built.push((name, dtype, shape, data));
        }
    }
    let tensors: Vec<TensorRef<'_>> = built
        .iter()
        .map(|(name, dtype, shape, data)| TensorRef {
            name,
            dtype: *dtype,
            shape,
            data,
        })
        .collect();
    let write = WriteOptions::default().with_sync(false);
    let mut opts = QuantizeOptions::new(scheme)
        .with_selection(Default::default())
        .with_write(write.clone());
    if input.flag() {
        opts.selection.include = vec![Glob::new("*")];
    }
    let dir = scratch();
    let (q, d) = (dir.join("q.safetensors"), dir.join("d.safetensors"));
    if quantize_file(&q, &tensors, None, &opts).is_err() {
        return;
    }
    let file = SafeTensors::open(&q).expect("a quantized file reads");
    let dopts = DequantizeOptions::default().with_write(write);
    let views = file.tensors_by_name();
    dequantize_file(&d, &views, file.metadata(), &dopts)
        .unwrap_or_else(|e| panic!("{scheme:?}: a quantized file does not dequantize: {e}"));
    let back = SafeTensors::open(&d).expect("a dequantized file reads");
    assert_eq!(back.len(), tensors.len(), "{scheme:?}");
    for t in &tensors {
        let b = back
            .tensor(t.name)
            .unwrap_or_else(|e| panic!("{scheme:?}: {:?}: {e}", t.name));
        assert_eq!(b.shape(), t.shape, "{scheme:?}: {:?}", t.name);
    }
}
