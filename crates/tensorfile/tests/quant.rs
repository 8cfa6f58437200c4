//! Quantization: the int4 and MLX fixtures bit for bit, round trips,
//! selection rules, and every bad input.

use std::path::{Path, PathBuf};
use tensorfile::Decode;

use serde_json::Value;
use tensorfile::quant::{
    self, dequantize_file, dequantize_weight, int4, logical_weight, mlx, quantize_file,
    DequantizeOptions, Glob, Mode, QuantConfig, QuantError, QuantParams, QuantizeOptions, Scheme,
    Selection, Storage,
};
use tensorfile::{Dtype, Error, Metadata, SafeTensors, TensorRef, WriteOptions};

fn fixture(rel: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures")).join(rel)
}

fn json(rel: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(rel)).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn shape(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// Little-endian F32 bytes as values.
fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// An owned tensor for building inputs.
struct Owned {
    name: String,
    dtype: Dtype,
    shape: Vec<u64>,
    data: Vec<u8>,
}

impl Owned {
    fn f32(name: &str, shape: &[u64], values: &[f32]) -> Owned {
        Owned {
            name: name.into(),
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            data: f32_bytes(values),
        }
    }
    fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            name: &self.name,
            dtype: self.dtype,
            shape: &self.shape,
            data: &self.data,
        }
    }
}

fn view_ref<'a>(t: &tensorfile::TensorView<'a>) -> TensorRef<'a> {
    TensorRef {
        name: t.name(),
        dtype: t.dtype(),
        shape: t.shape(),
        data: t.data(),
    }
}

fn refs(ts: &[Owned]) -> Vec<TensorRef<'_>> {
    ts.iter().map(Owned::as_ref).collect()
}

fn no_sync() -> WriteOptions {
    WriteOptions {
        sync: false,
        ..WriteOptions::default()
    }
}

fn qopts(scheme: Scheme) -> QuantizeOptions {
    QuantizeOptions {
        scheme,
        selection: Selection::default(),
        write: no_sync(),
    }
}

fn dopts(mlx: Option<QuantConfig>, dtype: Option<Dtype>) -> DequantizeOptions {
    DequantizeOptions {
        mlx,
        dtype,
        write: no_sync(),
    }
}

fn values_of(file: &SafeTensors, name: &str) -> Vec<f32> {
    file.tensor(name).unwrap().to_f32_vec().unwrap()
}

fn bits_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// A deterministic pseudo-random sequence (xorshift) of values in [-1, 1).
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn quant_problem(e: &Error) -> (&str, &QuantError) {
    match e {
        Error::Quant { tensor, problem } => (tensor, problem),
        other => panic!("not a quantization error: {other}"),
    }
}

// ---------------------------------------------------------------- int4

#[test]
fn int4_fixture_quantizes_to_the_same_file_bytes() {
    let spec = json("quant/int4_g32_sym.json");
    let from = &spec["quantized_from"]["layer.weight"];
    let bias = spec["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "layer.bias")
        .unwrap();
    let input = [
        Owned::f32(
            "layer.bias",
            &shape(&bias["shape"]),
            &floats(&bias["values"]),
        ),
        Owned::f32(
            "layer.weight",
            &shape(&from["shape"]),
            &floats(&from["values"]),
        ),
    ];
    let metadata = Metadata::from([("format".into(), "tinyllm".into())]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.safetensors");
    let summary = quantize_file(
        &out,
        &refs(&input),
        Some(&metadata),
        &qopts(Scheme::Int4Sym { group: 32 }),
    )
    .unwrap();
    assert_eq!(summary.quantized, ["layer.weight"]);
    let ours = std::fs::read(&out).unwrap();
    let theirs = std::fs::read(fixture("quant/int4_g32_sym.safetensors")).unwrap();
    assert_eq!(ours, theirs);

    // The tensor-level function gives the same bytes, and the int4 values.
    let q = int4::quantize("layer.weight", Dtype::F32, &[8, 64], &input[1].data, 32).unwrap();
    let file = SafeTensors::open(fixture("quant/int4_g32_sym.safetensors")).unwrap();
    assert_eq!(
        q.qweight,
        file.tensor("layer.weight.qweight").unwrap().data()
    );
    assert_eq!(q.scales, file.tensor("layer.weight.scales").unwrap().data());
    let nibbles: Vec<i64> = q
        .qweight
        .iter()
        .flat_map(|&b| [((b << 4) as i8 >> 4) as i64, ((b as i8) >> 4) as i64])
        .collect();
    let want: Vec<i64> = spec["int4_values"]["layer.weight"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_eq!(nibbles, want);
}

#[test]
fn int4_fixture_dequantizes_to_the_listed_values() {
    let spec = json("quant/int4_g32_sym.json");
    let want = floats(&spec["dequantized"]["layer.weight"]["values"]);
    let file = SafeTensors::open(fixture("quant/int4_g32_sym.safetensors")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.safetensors");
    let tensors = file.tensors_by_name();
    let summary = dequantize_file(&out, &tensors, file.metadata(), &dopts(None, None)).unwrap();
    assert_eq!(
        summary.dequantized,
        [(
            "layer.weight".to_string(),
            Storage::Int4 { group_size: 32 },
            Dtype::F32
        )]
    );
    let back = SafeTensors::open(&out).unwrap();
    assert_eq!(back.names().collect::<Vec<_>>().len(), 2);
    assert_eq!(back.tensor("layer.weight").unwrap().dtype(), Dtype::F32);
    assert!(bits_eq(&values_of(&back, "layer.weight"), &want));
    assert_eq!(
        back.tensor("layer.bias").unwrap().data(),
        file.tensor("layer.bias").unwrap().data()
    );
    // The quant key goes; format stays.
    assert_eq!(
        back.metadata().unwrap(),
        &Metadata::from([("format".into(), "tinyllm".into())])
    );

    // In memory: every weight through its layout, the int4 one and the
    // plain bias; a part missing from the tensors given is named.
    let header = file.header();
    let names = header.tensors().map(|t| t.name);
    let group = quant::int4_group(file.metadata());
    let weights = quant::quantized_weights(names, |n| header.get(n), group, None).unwrap();
    let int4_weight = weights.iter().find(|w| w.name == "layer.weight").unwrap();
    assert!(bits_eq(
        &dequantize_weight(int4_weight, &tensors).unwrap(),
        &want
    ));
    let without_scales: Vec<_> = tensors
        .iter()
        .filter(|t| t.name() != "layer.weight.scales")
        .copied()
        .collect();
    let e = dequantize_weight(int4_weight, &without_scales).unwrap_err();
    assert!(
        matches!(quant_problem(&e), ("layer.weight", QuantError::Layout(_))),
        "{e}"
    );
    let same = quant::logical_weight("layer", |n| header.get(n), group, None)
        .unwrap()
        .unwrap();
    assert_eq!(&same, int4_weight);
    let b = file.tensor("layer.bias").unwrap();
    let plain = quant::LogicalWeight {
        name: "layer.bias".into(),
        storage: Storage::Plain,
        dtype: b.dtype(),
        shape: b.shape().to_vec(),
        parts: vec!["layer.bias"],
    };
    let values = dequantize_weight(&plain, &tensors).unwrap();
    assert!(bits_eq(&values, &values_of(&file, "layer.bias")));
    // A weight whose shape is not what its codes hold is refused before
    // anything is allocated: huge, overflowing, or merely different.
    for shape in [vec![1 << 40, 64], vec![u64::MAX, 3], vec![8, 32], vec![]] {
        let wrong = quant::LogicalWeight {
            shape: shape.clone(),
            ..int4_weight.clone()
        };
        let e = dequantize_weight(&wrong, &tensors).unwrap_err();
        assert!(
            matches!(quant_problem(&e), ("layer.weight", QuantError::Layout(_))),
            "{shape:?}: {e}"
        );
    }
}

#[test]
fn int4_round_trip_within_half_a_step_from_every_input_dtype() {
    let w = noise(16 * 128, 7);
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let data = tensorfile::cast::encode_f32_vec(&w, dtype, Default::default()).unwrap();
        let exact = tensorfile::cast::decode_f32_vec(dtype, &data).unwrap();
        for group in [2, 32, 128] {
            let q = int4::quantize("w", dtype, &[16, 128], &data, group).unwrap();
            let back = int4::dequantize("w", &q.qweight, &q.scales, &[16, 128], group).unwrap();
            for (r, (row, brow)) in exact.chunks(128).zip(back.chunks(128)).enumerate() {
                for (g, (x, y)) in row
                    .chunks(group as usize)
                    .zip(brow.chunks(group as usize))
                    .enumerate()
                {
                    let s = half::f16::from_le_bytes([
                        q.scales[2 * (r * (128 / group as usize) + g)],
                        q.scales[2 * (r * (128 / group as usize) + g) + 1],
                    ])
                    .to_f32();
                    for (a, b) in x.iter().zip(y) {
                        // Half a step, plus what rounding the scale to F16 can
                        // add at the clipped end (7 steps of its relative error).
                        assert!(
                            (a - b).abs() <= s * (0.5 + 7.0 / 1024.0),
                            "{dtype} g{group}: {a} vs {b}, scale {s}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn int4_zero_groups_and_errors_name_the_tensor() {
    // An all-zero group has scale 0 and codes 0.
    let q = int4::quantize("z", Dtype::F32, &[1, 4], &f32_bytes(&[0.0; 4]), 2).unwrap();
    assert_eq!(q.qweight, [0, 0]);
    assert_eq!(q.scales, [0; 4]);

    let e = int4::quantize(
        "bad",
        Dtype::F32,
        &[1, 4],
        &f32_bytes(&[0.0, f32::NAN, 1.0, 2.0]),
        2,
    )
    .unwrap_err();
    assert!(
        matches!(
            quant_problem(&e),
            ("bad", QuantError::NotFinite { row: 0, col: 1, .. })
        ),
        "{e}"
    );
    let e = int4::quantize(
        "inf",
        Dtype::F32,
        &[2, 2],
        &f32_bytes(&[0.0, 1.0, f32::INFINITY, 2.0]),
        2,
    )
    .unwrap_err();
    assert!(
        matches!(
            quant_problem(&e),
            ("inf", QuantError::NotFinite { row: 1, col: 0, .. })
        ),
        "{e}"
    );
    // 7 * 65520 rounds past F16's largest finite value.
    let e = int4::quantize(
        "big",
        Dtype::F32,
        &[1, 2],
        &f32_bytes(&[1.0, 7.0 * 65520.0]),
        2,
    )
    .unwrap_err();
    assert!(
        matches!(
            quant_problem(&e),
            (
                "big",
                QuantError::ScaleOverflow {
                    row: 0,
                    group: 0,
                    ..
                }
            )
        ),
        "{e}"
    );
    assert!(e.to_string().contains("\"big\""));
    let e = int4::quantize("odd", Dtype::F32, &[1, 6], &f32_bytes(&[0.0; 6]), 4).unwrap_err();
    assert!(
        matches!(quant_problem(&e), ("odd", QuantError::Shape(_))),
        "{e}"
    );
    let e = int4::quantize("i8", Dtype::I8, &[1, 2], &[0, 0], 2).unwrap_err();
    assert!(
        matches!(quant_problem(&e), ("i8", QuantError::Dtype { .. })),
        "{e}"
    );
    let e = int4::quantize("v", Dtype::F32, &[4], &f32_bytes(&[0.0; 4]), 2).unwrap_err();
    assert!(
        matches!(quant_problem(&e), ("v", QuantError::Shape(_))),
        "{e}"
    );
}

#[test]
fn int4_file_errors_leave_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.safetensors");
    let mut w = noise(4 * 64, 3);
    w[100] = f32::NAN;
    let input = [Owned::f32("l.weight", &[4, 64], &w)];
    let e = quantize_file(
        &out,
        &refs(&input),
        None,
        &qopts(Scheme::Int4Sym { group: 32 }),
    )
    .unwrap_err();
    assert!(
        matches!(
            quant_problem(&e),
            (
                "l.weight",
                QuantError::NotFinite {
                    row: 1,
                    col: 36,
                    ..
                }
            )
        ),
        "{e}"
    );
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temporary file left"
    );
}

#[test]
fn int4_files_of_many_batches_match_one_thread_and_report_the_first_bad_row() {
    // The file path splits rows into batches of about 1 MiB of codes on
    // two threads (2^21 values a batch); three batches and a bit here.
    let (rows, cols) = (3 * (1 << 15) + 7, 64);
    let w = noise(rows * cols, 11);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q.safetensors");
    let opts = qopts(Scheme::Int4Sym { group: 32 });
    let shape = [rows as u64, cols as u64];
    let input = [Owned::f32("l.weight", &shape, &w)];
    quantize_file(&out, &refs(&input), None, &opts).unwrap();
    let one = int4::quantize("l.weight", Dtype::F32, &shape, &f32_bytes(&w), 32).unwrap();
    let file = SafeTensors::open(&out).unwrap();
    assert!(file.tensor("l.weight.qweight").unwrap().data() == one.qweight);
    assert!(file.tensor("l.weight.scales").unwrap().data() == one.scales);
    // Dequantizing runs on the same batches.
    let back = dir.path().join("d.safetensors");
    let tensors = file.tensors_by_name();
    dequantize_file(&back, &tensors, file.metadata(), &dopts(None, None)).unwrap();
    let expected = int4::dequantize("l.weight", &one.qweight, &one.scales, &shape, 32).unwrap();
    assert!(bits_eq(
        &values_of(&SafeTensors::open(&back).unwrap(), "l.weight"),
        &expected
    ));
    drop(file);

    // Bad values in several batches, of both workers: the earliest row is
    // named whichever worker meets it, and the old file stays.
    let batch_rows = (1 << 15) as u64;
    for bad_rows in [[2, 1], [1, 0], [3, 2]] {
        let mut w = w.clone();
        for b in bad_rows {
            w[(b * batch_rows as usize + 5) * cols + 9] = f32::INFINITY;
        }
        let input = [Owned::f32("l.weight", &shape, &w)];
        let e = quantize_file(&out, &refs(&input), None, &opts).unwrap_err();
        let first = *bad_rows.iter().min().unwrap() as u64 * batch_rows + 5;
        assert!(
            matches!(
                quant_problem(&e),
                ("l.weight", QuantError::NotFinite { row, col: 9, .. }) if *row == first
            ),
            "{e}"
        );
        assert!(SafeTensors::open(&out)
            .unwrap()
            .tensor("l.weight.qweight")
            .is_ok());
    }
}

// ---------------------------------------------------------------- selection

#[test]
fn default_selection_and_globs() {
    let dir = tempfile::tempdir().unwrap();
    let input = [
        Owned::f32("model.embed_tokens.weight", &[8, 64], &noise(512, 1)),
        Owned::f32(
            "model.layers.0.input_layernorm.weight",
            &[64],
            &noise(64, 2),
        ),
        Owned::f32(
            "model.layers.0.self_attn.q_proj.weight",
            &[8, 64],
            &noise(512, 3),
        ),
        Owned::f32("model.layers.0.self_attn.q_proj.bias", &[8], &noise(8, 4)),
        Owned::f32(
            "model.layers.1.mlp.up_proj.weight",
            &[8, 64],
            &noise(512, 5),
        ),
        Owned::f32(
            "model.layers.1.mlp.odd_proj.weight",
            &[8, 48],
            &noise(384, 6),
        ),
        Owned::f32("model.norm.weight", &[64], &noise(64, 7)),
        Owned::f32("lm_head.weight", &[8, 64], &noise(512, 8)),
    ];
    let run = |include: &[&str], exclude: &[&str]| {
        let out = dir.path().join("q.safetensors");
        let opts = QuantizeOptions {
            selection: Selection {
                include: include.iter().map(|g| Glob::new(*g)).collect(),
                exclude: exclude.iter().map(|g| Glob::new(*g)).collect(),
            },
            ..qopts(Scheme::Int4Sym { group: 32 })
        };
        quantize_file(&out, &refs(&input), None, &opts).map(|s| s.quantized)
    };
    assert_eq!(
        run(&[], &[]).unwrap(),
        [
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.1.mlp.up_proj.weight",
            "lm_head.weight"
        ]
    );
    assert_eq!(
        run(&["*embed*"], &["lm_head.*", "*.layers.1.*"]).unwrap(),
        [
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight"
        ]
    );
    // An included tensor that cannot be quantized is an error naming it.
    let e = run(&["*.odd_proj.weight"], &[]).unwrap_err();
    assert_eq!(quant_problem(&e).0, "model.layers.1.mlp.odd_proj.weight");
    let e = run(&["model.norm.weight"], &[]).unwrap_err();
    assert_eq!(quant_problem(&e).0, "model.norm.weight");
    // Nothing selected is an error, not a silent copy.
    assert!(run(&[], &["*"]).is_err());
    // Exclude wins over include.
    assert!(run(&["lm_head.weight"], &["lm_head.weight", "model.*"])
        .unwrap_err()
        .to_string()
        .contains("no tensor"));
}

#[test]
fn globs() {
    let g = |p: &str, n: &str| Glob::new(p).matches(n);
    assert!(g("*", ""));
    assert!(g("*", "a.b.c"));
    assert!(g("a.*.c", "a.b.x.c"));
    assert!(!g("a.*.c", "a.c"));
    assert!(g("*.weight", "x.weight"));
    assert!(!g("*.weight", "x.weight.scales"));
    assert!(g("*a*a*", "aa"));
    assert!(!g("*a*a*", "a"));
    assert!(g("abc", "abc"));
    assert!(!g("abc", "abcd"));
    assert!(g("a**b", "ab"));
    assert!(g("*ab", "aab"));
}

// ---------------------------------------------------------------- MLX

#[test]
fn mlx_fixtures_dequantize_bit_for_bit() {
    let manifest = json("mlx/manifest.json");
    let dir = tempfile::tempdir().unwrap();
    for entry in manifest["files"].as_array().unwrap() {
        let name = entry["file"].as_str().unwrap();
        let mode: Mode = entry["mode"].as_str().unwrap().parse().unwrap();
        let params = QuantParams {
            bits: entry["bits"].as_u64().unwrap(),
            group_size: entry["group_size"].as_u64().unwrap(),
            mode,
        };
        let want = floats(&entry["dequantized"]);
        let file = SafeTensors::open(fixture(&format!("mlx/{name}"))).unwrap();
        let tensors = file.tensors_by_name();
        // In memory, through the weight's layout.
        let header = file.header();
        let config = QuantConfig::uniform(params);
        let weight = logical_weight("w", |n| header.get(n), None, Some(&config))
            .unwrap()
            .unwrap();
        assert_eq!(weight.shape, shape(&entry["shape"]));
        let values = dequantize_weight(&weight, &tensors).unwrap();
        assert!(bits_eq(&values, &want), "{name} in memory");
        let out = dir.path().join(name);
        for dtype in [None, Some(Dtype::F32)] {
            let s = dequantize_file(
                &out,
                &tensors,
                file.metadata(),
                &dopts(Some(QuantConfig::uniform(params)), dtype),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let default = if mode == Mode::Affine {
                Dtype::F32
            } else {
                Dtype::BF16
            };
            assert_eq!(
                s.dequantized,
                [(
                    "w.weight".into(),
                    Storage::Mlx(params),
                    dtype.unwrap_or(default)
                )]
            );
            let back = SafeTensors::open(&out).unwrap();
            assert_eq!(back.len(), 1, "{name}: scales and biases dropped");
            assert_eq!(
                back.tensor("w.weight").unwrap().shape(),
                shape(&entry["shape"])
            );
            assert!(
                bits_eq(&values_of(&back, "w.weight"), &want),
                "{name} {dtype:?}"
            );
        }
    }
}

#[test]
fn mlx_affine_quantizer_follows_mlx_and_keeps_every_weight_within_half_a_step() {
    // Per group of MLX's own files: where MLX put every weight within half
    // a step, our scale, bias and codes are MLX's, bit for bit; where it
    // did not, ours keep MLX's bias (the edge, exact), take a coarser step,
    // and put every weight within half of it.
    let manifest = json("mlx/manifest.json");
    let (mut same, mut lowered) = (0, 0);
    for entry in manifest["files"].as_array().unwrap() {
        if entry["mode"] != "affine" {
            continue;
        }
        let name = entry["file"].as_str().unwrap();
        let bits = entry["bits"].as_u64().unwrap();
        let group = entry["group_size"].as_u64().unwrap() as usize;
        let params = QuantParams::affine(bits, group as u64);
        let original = floats(&entry["original"]);
        let theirs_values = floats(&entry["dequantized"]);
        let ours = mlx::quantize_affine(
            "w",
            Dtype::F32,
            &shape(&entry["shape"]),
            &f32_bytes(&original),
            params,
        )
        .unwrap();
        let file = SafeTensors::open(fixture(&format!("mlx/{name}"))).unwrap();
        assert_eq!(file.tensor("w.scales").unwrap().dtype(), Dtype::F32);
        let codes = |packed: &[u8]| {
            let mut c = vec![0u8; original.len()];
            mlx::unpack(bits as u32, packed, &mut c).unwrap();
            c
        };
        let (our_scales, our_biases) = (f32_values(&ours.scales), f32_values(&ours.biases));
        let (their_scales, their_biases) =
            (values_of(&file, "w.scales"), values_of(&file, "w.biases"));
        let (our_codes, their_codes) = (
            codes(&ours.weight),
            codes(file.tensor("w.weight").unwrap().data()),
        );
        for g in 0..original.len() / group {
            let span = g * group..(g + 1) * group;
            let theirs_within = original[span.clone()]
                .iter()
                .zip(&theirs_values[span.clone()])
                .all(|(a, b)| (a - b).abs() <= their_scales[g].abs() * 0.5 * (1.0 + 1e-6));
            if theirs_within {
                same += 1;
                assert_eq!(
                    our_scales[g].to_bits(),
                    their_scales[g].to_bits(),
                    "{name} group {g}"
                );
                assert_eq!(
                    our_biases[g].to_bits(),
                    their_biases[g].to_bits(),
                    "{name} group {g}"
                );
                assert_eq!(
                    our_codes[span.clone()],
                    their_codes[span.clone()],
                    "{name} group {g}"
                );
            } else {
                lowered += 1;
                assert_eq!(
                    our_biases[g].to_bits(),
                    their_biases[g].to_bits(),
                    "{name} group {g}"
                );
                assert!(
                    our_scales[g].abs() > their_scales[g].abs(),
                    "{name} group {g}"
                );
            }
            let (scale, bias) = (our_scales[g], our_biases[g]);
            for (i, &w) in original[span.clone()].iter().enumerate() {
                let back = scale * f32::from(our_codes[g * group + i]) + bias;
                let tolerance = 1e-6 * w.abs().max(scale.abs());
                assert!(
                    (w - back).abs() <= scale.abs() * 0.5 + tolerance,
                    "{name} group {g}: {w} came back as {back}, step {scale}"
                );
            }
        }
    }
    // Counted on these files: MLX is more than half a step off in 93 groups.
    assert_eq!((same, lowered), (159, 93));
}

#[test]
fn mlx_mixed_model_matches_expected_via_its_config() {
    let dir = fixture("mlx/mlx_mixed_model");
    let expected = json("mlx/mlx_mixed_model/expected.json");
    let config = tensorfile::model::read_config(&dir.join("config.json")).unwrap();
    let q = QuantConfig::from_config(&config).unwrap().unwrap();
    let file = SafeTensors::open(dir.join("model.safetensors")).unwrap();
    let tensors = file.tensors_by_name();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("d.safetensors");
    let summary = dequantize_file(&out, &tensors, file.metadata(), &dopts(Some(q), None)).unwrap();
    assert_eq!(summary.dequantized.len(), 4);
    let back = SafeTensors::open(&out).unwrap();
    for (name, w) in expected["weights"].as_object().unwrap() {
        let t = back.tensor(name).unwrap();
        let dtype = match w["dtype"].as_str().unwrap() {
            "float16" => Dtype::F16,
            "bfloat16" => Dtype::BF16,
            _ => Dtype::F32,
        };
        assert_eq!(t.dtype(), dtype, "{name}");
        assert_eq!(t.shape(), shape(&w["shape"]), "{name}");
        assert!(
            bits_eq(&t.to_f32_vec().unwrap(), &floats(&w["dequantized"])),
            "{name}"
        );
    }
    // Plain tensors pass through; the q_proj bias is not MLX's biases.
    for name in ["model.norm.weight", "model.layers.0.self_attn.q_proj.bias"] {
        assert_eq!(
            back.tensor(name).unwrap().data(),
            file.tensor(name).unwrap().data()
        );
    }
    assert_eq!(back.len(), 6);
}

#[test]
fn mlx_needs_parameters_and_refuses_contradictions() {
    let file = SafeTensors::open(fixture("mlx/affine_b4_g64.safetensors")).unwrap();
    let tensors = file.tensors_by_name();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.safetensors");
    let run = |p: Option<QuantParams>| {
        dequantize_file(
            &out,
            &tensors,
            None,
            &dopts(p.map(QuantConfig::uniform), None),
        )
    };
    // No parameters: never a guess.
    let e = run(None).unwrap_err();
    assert_eq!(quant_problem(&e).0, "w.weight");
    // 8-bit/32 fits the same shapes as 4-bit/64 (which is why nothing is
    // guessed); 2-bit/64 does not.
    assert!(run(Some(QuantParams::affine(8, 32))).is_ok());
    std::fs::remove_file(&out).unwrap();
    let e = run(Some(QuantParams::affine(2, 64))).unwrap_err();
    assert_eq!(quant_problem(&e).0, "w.scales", "{e}");
    let e = run(Some(QuantParams::affine(4, 32))).unwrap_err();
    assert_eq!(quant_problem(&e).0, "w.scales", "{e}");
    // A floating-point mode where there are biases and float scales.
    let e = run(Some(QuantParams {
        bits: 4,
        group_size: 32,
        mode: Mode::Mxfp4,
    }))
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "w.scales", "{e}");
    assert!(!out.exists());

    // Missing biases in affine mode; mismatched biases.
    let mut parts: Vec<_> = tensors.iter().filter(|t| t.name() != "w.biases").collect();
    let e = dequantize_file(
        &out,
        &parts,
        None,
        &dopts(Some(QuantConfig::uniform(QuantParams::affine(4, 64))), None),
    )
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "w.biases", "{e}");
    let other = SafeTensors::open(fixture("mlx/affine_b4_g32.safetensors")).unwrap();
    let wrong_biases = other.tensor("w.biases").unwrap();
    parts.push(&wrong_biases);
    let e = dequantize_file(
        &out,
        &parts,
        None,
        &dopts(Some(QuantConfig::uniform(QuantParams::affine(4, 64))), None),
    )
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "w.biases", "{e}");
    assert!(!out.exists());
}

#[test]
fn mlx_affine_weights_are_within_half_a_step_whatever_the_group() {
    // Rows of many shapes of distribution: noise at several magnitudes,
    // shifted off zero either way, skewed by an outlier at either end,
    // constant, and tiny (where the step is the 1e-7 floor).
    let (rows, cols) = (96usize, 128usize);
    let base = noise(rows * cols, 5);
    let mut w = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        let row = &base[r * cols..(r + 1) * cols];
        let magnitude = 10f32.powi(r as i32 % 7 - 3);
        let shift = (r % 5) as f32 - 2.0;
        w.extend(row.iter().enumerate().map(|(c, &x)| match r % 8 {
            0 => 0.5,
            1 => x * 1e-8,
            2 if c % 37 == 0 => 40.0 * magnitude,
            3 if c % 41 == 0 => -40.0 * magnitude,
            _ => (x + shift * 0.3) * magnitude,
        }));
    }
    let shape = [rows as u64, cols as u64];
    for bits in [2u32, 3, 4, 5, 6, 8] {
        for group in [32usize, 64, 128] {
            let params = QuantParams::affine(u64::from(bits), group as u64);
            let q = mlx::quantize_affine("w", Dtype::F32, &shape, &f32_bytes(&w), params).unwrap();
            let (scales, biases) = (f32_values(&q.scales), f32_values(&q.biases));
            let mut codes = vec![0u8; w.len()];
            mlx::unpack(bits, &q.weight, &mut codes).unwrap();
            for (i, (&a, &code)) in w.iter().zip(&codes).enumerate() {
                let (step, bias) = (scales[i / group], biases[i / group]);
                let back = step * f32::from(code) + bias;
                let tolerance = 1e-6 * a.abs().max(step.abs());
                assert!(
                    (a - back).abs() <= step.abs() * 0.5 + tolerance,
                    "b{bits} g{group} [{i}]: {a} came back as {back}, step {step}"
                );
            }
        }
    }
}

#[test]
fn mlx_affine_refuses_groups_f32_cannot_span_and_keeps_huge_constants() {
    // Row 0 is ordinary; row 1 holds the group under test. A group whose
    // grid would reach infinity is refused, naming its row and group; a
    // constant group, however large, comes back exactly.
    let cases: [(&[f32], u64, bool); 5] = [
        (&[-3e38, 3e38], 4, true),
        (&[-3.402_823_5e38, 1.329_228e36], 2, true),
        (&[-0.0, 3.402_823_5e38], 5, true),
        (&[1e32], 4, false),
        (&[-2e38], 8, false),
    ];
    for (pattern, bits, refused) in cases {
        let mut w = noise(2 * 32, 3);
        for (i, x) in w[32..].iter_mut().enumerate() {
            *x = pattern[i % pattern.len()];
        }
        let params = QuantParams::affine(bits, 32);
        let q = mlx::quantize_affine("m.weight", Dtype::F32, &[2, 32], &f32_bytes(&w), params);
        if refused {
            let e = q.unwrap_err();
            assert!(
                matches!(
                    quant_problem(&e),
                    ("m.weight", QuantError::RangeOverflow { row: 1, group: 0 })
                ),
                "{pattern:?}: {e}"
            );
            continue;
        }
        let q = q.unwrap();
        let (scales, biases) = (f32_values(&q.scales), f32_values(&q.biases));
        let mut codes = vec![0u8; w.len()];
        mlx::unpack(bits as u32, &q.weight, &mut codes).unwrap();
        for (i, &x) in w[32..].iter().enumerate() {
            let back = scales[1] * f32::from(codes[32 + i]) + biases[1];
            assert_eq!(back, x, "{pattern:?} [{i}]");
        }
    }
}

#[test]
fn mlx_round_trip_within_half_a_step_and_reads_its_own_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let (rows, cols) = (8usize, 256usize);
    let mut w = noise(rows * cols, 11);
    // A constant group and a group with one outlier.
    w[..64].fill(0.25);
    w[64] = 30.0;
    for bits in [2u64, 3, 4, 5, 6, 8] {
        for group in [32u64, 64, 128] {
            let params = QuantParams::affine(bits, group);
            let input = [
                Owned::f32("m.weight", &[rows as u64, cols as u64], &w),
                Owned::f32("m.bias", &[rows as u64], &noise(rows, 1)),
            ];
            let q = dir.path().join("q.safetensors");
            let s = quantize_file(&q, &refs(&input), None, &qopts(Scheme::Mlx(params))).unwrap();
            assert_eq!(s.quantized, ["m.weight"]);
            let qf = SafeTensors::open(&q).unwrap();
            assert_eq!(qf.tensor("m.weight").unwrap().dtype(), Dtype::U32);
            assert_eq!(
                qf.tensor("m.weight").unwrap().shape(),
                [rows as u64, cols as u64 * bits / 32]
            );
            let scales = values_of(&qf, "m.scales");
            // Read back with the file's own metadata, no parameters given.
            let d = dir.path().join("d.safetensors");
            dequantize_file(&d, &qf.tensors_by_name(), qf.metadata(), &dopts(None, None)).unwrap();
            let df = SafeTensors::open(&d).unwrap();
            assert!(df.metadata().is_none());
            let back = values_of(&df, "m.weight");
            for (i, (a, b)) in w.iter().zip(&back).enumerate() {
                let step = scales[i / group as usize];
                // Within half a step, up to f32 rounding of the multiply
                // and the add.
                let tolerance = 1e-6 * a.abs().max(step.abs()) + 1e-9;
                assert!(
                    (a - b).abs() <= step.abs() * 0.5 + tolerance,
                    "b{bits} g{group} [{i}]: {a} vs {b}, step {step}"
                );
            }
            // Given parameters that contradict the file's own: refused.
            let other = QuantParams::affine(if bits == 8 { 4 } else { 8 }, group);
            let e = dequantize_file(
                &d,
                &qf.tensors_by_name(),
                qf.metadata(),
                &dopts(Some(QuantConfig::uniform(other)), None),
            );
            assert!(e.is_err());
        }
    }
}

#[test]
fn int4_structure_errors_name_the_tensor() {
    let file = SafeTensors::open(fixture("quant/int4_g32_sym.safetensors")).unwrap();
    let all = file.tensors_by_name();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.safetensors");
    let without =
        |name: &str| -> Vec<_> { all.iter().filter(|t| t.name() != name).cloned().collect() };
    // qweight without scales.
    let e = dequantize_file(
        &out,
        &without("layer.weight.scales"),
        file.metadata(),
        &dopts(None, None),
    )
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "layer.weight.scales");
    // Scales without their qweight.
    let e = dequantize_file(
        &out,
        &without("layer.weight.qweight"),
        file.metadata(),
        &dopts(None, None),
    )
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "layer.weight.scales");
    // Metadata group contradicting the scales.
    let meta = Metadata::from([("quant".into(), "int4-g16-sym".into())]);
    let e = dequantize_file(&out, &all, Some(&meta), &dopts(None, None)).unwrap_err();
    assert_eq!(quant_problem(&e).0, "layer.weight.scales");
    // Scales of the wrong shape and dtype.
    let s = file.tensor("layer.weight.scales").unwrap();
    let bad = TensorRef {
        name: "layer.weight.scales",
        dtype: Dtype::F16,
        shape: &[4, 4],
        data: s.data(),
    };
    let q = file.tensor("layer.weight.qweight").unwrap();
    let e = dequantize_file(
        &out,
        &[view_ref(&q), bad],
        file.metadata(),
        &dopts(None, None),
    )
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "layer.weight.scales");
    let bad = TensorRef {
        name: "layer.weight.scales",
        dtype: Dtype::BF16,
        shape: s.shape(),
        data: s.data(),
    };
    let e = dequantize_file(
        &out,
        &[view_ref(&q), bad],
        file.metadata(),
        &dopts(None, None),
    )
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "layer.weight.scales");
    // A dequantized weight cannot be written as an integer dtype.
    let e =
        dequantize_file(&out, &all, file.metadata(), &dopts(None, Some(Dtype::I32))).unwrap_err();
    assert_eq!(quant_problem(&e).0, "layer.weight");
    assert!(!out.exists());
}

#[test]
fn packing_round_trips_for_every_width() {
    for bits in [2u32, 3, 4, 5, 6, 8] {
        let codes: Vec<u8> = (0..64u32)
            .map(|i| ((i * 7 + 3) % (1 << bits)) as u8)
            .collect();
        let mut packed = vec![0u8; 64 * bits as usize / 8];
        mlx::pack(bits, &codes, &mut packed).unwrap();
        let mut back = vec![0u8; 64];
        mlx::unpack(bits, &packed, &mut back).unwrap();
        assert_eq!(back, codes, "{bits}");
        // LSB-first stream: code k at bits k*bits.
        let stream = |k: usize| {
            let bit = k * bits as usize;
            let word =
                u32::from_le_bytes(packed[bit / 32 * 4..bit / 32 * 4 + 4].try_into().unwrap())
                    as u64;
            let next = packed
                .get(bit / 32 * 4 + 4..bit / 32 * 4 + 8)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as u64);
            (((word | next << 32) >> (bit % 32)) & ((1 << bits) - 1)) as u8
        };
        assert!((0..64).all(|k| stream(k) == codes[k]), "{bits}");
    }
}

#[test]
fn scheme_and_config_parsing() {
    assert!(Scheme::parse("int4-g0-sym", None, None).is_err());
    assert!(Scheme::parse("int4-g32-sym", Some(4), None).is_err());
    assert!(Scheme::parse("mlx-affine", Some(7), Some(64)).is_err());
    assert!(Scheme::parse("mlx-mxfp4", None, None).is_err());
    assert!(Scheme::parse("gptq", None, None).is_err());
    let c = |v: Value| QuantConfig::from_config(v.as_object().unwrap());
    // The mirror is read when `quantization` is absent; another library's is not.
    let q = c(serde_json::json!({"quantization_config": {"bits": 8, "group_size": 32}}))
        .unwrap()
        .unwrap();
    assert_eq!(q.for_module("x"), Some(QuantParams::affine(8, 32)));
    assert_eq!(c(serde_json::json!({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}})).unwrap(), None);
    // Modes: fixed parameters filled in, contradictions refused.
    let q = c(serde_json::json!({"quantization": {"mode": "mxfp4"}}))
        .unwrap()
        .unwrap();
    assert_eq!(
        q.for_module("x"),
        Some(QuantParams {
            bits: 4,
            group_size: 32,
            mode: Mode::Mxfp4
        })
    );
    assert!(
        c(serde_json::json!({"quantization": {"mode": "nvfp4", "group_size": 32, "bits": 4}}))
            .is_err()
    );
    assert!(
        c(serde_json::json!({"quantization": {"mode": "fancy", "group_size": 32, "bits": 4}}))
            .is_err()
    );
    assert!(c(serde_json::json!({"quantization": {"bits": 4}})).is_err());
    assert_eq!(
        quant::int4_group(Some(&Metadata::from([(
            "quant".into(),
            "int4-g64-sym".into()
        )]))),
        Some(64)
    );
}

/// Shapes the format allows (a zero dimension beside a huge one, an odd
/// group) must get an error or an empty result, never a panic or an
/// allocation the size of the huge dimension.
#[test]
fn hostile_shapes_and_groups_are_refused_or_empty() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let t = |name: &'static str, dtype, shape: &'static [u64], data: &'static [u8]| TensorRef {
        name,
        dtype,
        shape,
        data,
    };
    let int4_meta = Metadata::from([("quant".to_string(), "int4-g32-sym".to_string())]);
    // int4 and MLX weights with no rows but 2^40 columns: empty outputs.
    let int4 = [
        t("a.weight.qweight", Dtype::U8, &[0, 1 << 40], &[]),
        t("a.weight.scales", Dtype::F16, &[0, 1 << 36], &[]),
    ];
    dequantize_file(&out, &int4, Some(&int4_meta), &dopts(None, None)).unwrap();
    assert_eq!(
        SafeTensors::open(&out)
            .unwrap()
            .tensor("a.weight")
            .unwrap()
            .shape(),
        &[0, 1 << 41]
    );
    let mlx_parts = [
        t("a.weight", Dtype::U32, &[0, 1 << 40], &[]),
        t("a.scales", Dtype::F16, &[0, 1 << 37], &[]),
        t("a.biases", Dtype::F16, &[0, 1 << 37], &[]),
    ];
    let q = QuantConfig::uniform(QuantParams::affine(4, 64));
    dequantize_file(&out, &mlx_parts, None, &dopts(Some(q), None)).unwrap();
    // Odd int4 groups, from the shapes or the metadata: a named error.
    let odd = [
        t("b.weight.qweight", Dtype::U8, &[1, 1], &[0x11]),
        t("b.weight.scales", Dtype::F16, &[1, 2], &[0, 0x3c, 0, 0x3c]),
    ];
    let err = dequantize_file(&out, &odd, None, &dopts(None, None)).unwrap_err();
    assert!(err.to_string().contains("even"), "{err}");
    // Quantizing to MLX a weight whose columns times bits overflow.
    let huge = [t("c.weight", Dtype::F32, &[0, 1 << 62], &[])];
    let mut opts = qopts(Scheme::Mlx(QuantParams::affine(4, 64)));
    opts.selection.include = vec![Glob::new("c.weight")];
    assert!(quantize_file(&out, &huge, None, &opts).is_err());
    // The per-tensor functions.
    assert!(int4::quantize("w", Dtype::F32, &[0, 1 << 40], &[], 32).is_ok());
    assert!(int4::dequantize("w", &[], &[], &[1 << 33, 1 << 33], 32).is_err());
    let mut codes = [0u8; 8];
    mlx::unpack(8, &[1, 2], &mut codes).unwrap();
    assert_eq!(codes, [1, 2, 0, 0, 0, 0, 0, 0]);
}

/// MLX affine on shapes with no values but a huge other dimension: an
/// empty result at once, not a loop over 2^40 rows or a row buffer of 2^60
/// values (which aborted on the allocation).
#[test]
fn mlx_quantize_affine_of_empty_shapes_allocates_nothing() {
    let params = QuantParams::affine(4, 64);
    for shape in [[1u64 << 40, 0], [0, 1 << 60], [0, 0]] {
        let q = mlx::quantize_affine("w", Dtype::F32, &shape, &[], params).unwrap();
        assert!(
            q.weight.is_empty() && q.scales.is_empty() && q.biases.is_empty(),
            "{shape:?}"
        );
    }
    // The bytes must still be the shape's: [1, 0] holds none, [0, 64] none.
    assert!(mlx::quantize_affine("w", Dtype::F32, &[1 << 40, 0], &[0; 4], params).is_err());
}

/// `pack`, `unpack` and `affine_params` take only the widths MLX packs:
/// 0 bits (a zero chunk size), 1, 7 and 9 or more bits (shifts past 64)
/// are a parameter error.
#[test]
fn mlx_packing_refuses_widths_it_does_not_pack() {
    let codes = [1u8; 64];
    let mut packed = [0u8; 128];
    let mut back = [0u8; 64];
    for bits in [0u32, 1, 7, 9, 16, 32, 63, 64, 65, u32::MAX] {
        let e = mlx::pack(bits, &codes, &mut packed).unwrap_err();
        assert!(matches!(e, QuantError::Params(_)), "{bits}: {e}");
        let e = mlx::unpack(bits, &packed, &mut back).unwrap_err();
        assert!(matches!(e, QuantError::Params(_)), "{bits}: {e}");
        assert!(mlx::affine_params(&[1.0, 2.0], bits).is_err(), "{bits}");
    }
    for bits in [2u32, 3, 4, 5, 6, 8] {
        let n = 64 * bits as usize / 8;
        mlx::pack(bits, &codes, &mut packed[..n]).unwrap();
        mlx::unpack(bits, &packed[..n], &mut back).unwrap();
        assert_eq!(back, codes, "{bits}");
    }
}

/// A weight's fields are public: storage that its parts do not make (a
/// zero, odd or wrong group, bits MLX does not pack, another mode) is a
/// layout error from `dequantize_weight`, never a panic in the row
/// arithmetic (zero-sized chunks, shifts past 64 bits).
#[test]
fn dequantize_weight_refuses_storage_its_parts_do_not_make() {
    let t = |name, dtype, shape, data| TensorRef {
        name,
        dtype,
        shape,
        data,
    };
    let layout_error = |e: &Error| {
        matches!(
            e,
            Error::Quant {
                problem: QuantError::Layout(_),
                ..
            }
        )
    };
    // int4 [2, 4] in groups of 4: qweight [2, 2], scales [2, 1].
    let one = half::f16::from_f32(1.0).to_le_bytes();
    let scales = [one, one].concat();
    let int4_parts = [
        t(
            "a.qweight",
            Dtype::U8,
            &[2, 2],
            &[0x21u8, 0x43, 0x65, 0x07][..],
        ),
        t("a.scales", Dtype::F16, &[2, 1], &scales[..]),
    ];
    let good = quant::LogicalWeight {
        name: "a".into(),
        storage: Storage::Int4 { group_size: 4 },
        dtype: Dtype::F16,
        shape: vec![2, 4],
        parts: vec!["a.qweight", "a.scales"],
    };
    assert_eq!(
        dequantize_weight(&good, &int4_parts).unwrap(),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 0.0]
    );
    for group_size in [0, 1, 2, 3, 8, u64::MAX] {
        let bad = quant::LogicalWeight {
            storage: Storage::Int4 { group_size },
            ..good.clone()
        };
        let e = dequantize_weight(&bad, &int4_parts).unwrap_err();
        assert!(layout_error(&e), "group {group_size}: {e}");
    }
    // Parts named but given as MLX: the layout is not MLX's.
    let bad = quant::LogicalWeight {
        storage: Storage::Mlx(QuantParams::affine(4, 4)),
        ..good.clone()
    };
    assert!(layout_error(
        &dequantize_weight(&bad, &int4_parts).unwrap_err()
    ));

    // MLX affine, 4 bits in groups of 8: weight U32 [1, 1], scales and
    // biases F32 [1, 1].
    let s = f32_bytes(&[1.0]);
    let b = f32_bytes(&[0.0]);
    let words = [0x21u8, 0x43, 0x65, 0x07];
    let mlx_parts = [
        t("m.weight", Dtype::U32, &[1, 1], &words[..]),
        t("m.scales", Dtype::F32, &[1, 1], &s[..]),
        t("m.biases", Dtype::F32, &[1, 1], &b[..]),
    ];
    let good = quant::LogicalWeight {
        name: "m.weight".into(),
        storage: Storage::Mlx(QuantParams::affine(4, 8)),
        dtype: Dtype::F32,
        shape: vec![1, 8],
        parts: vec!["m.weight", "m.scales", "m.biases"],
    };
    assert_eq!(
        dequantize_weight(&good, &mlx_parts).unwrap(),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 0.0]
    );
    let params = |bits, group_size, mode| QuantParams {
        bits,
        group_size,
        mode,
    };
    for p in [
        params(4, 0, Mode::Affine),
        params(4, 1, Mode::Affine),
        params(4, 4, Mode::Affine),
        params(4, 32, Mode::Mxfp4),
        params(4, 16, Mode::Nvfp4),
    ] {
        let bad = quant::LogicalWeight {
            storage: Storage::Mlx(p),
            ..good.clone()
        };
        let e = dequantize_weight(&bad, &mlx_parts).unwrap_err();
        assert!(layout_error(&e), "{p:?}: {e}");
    }
    // 9 bits a code: nine words hold 32 codes, whose unpacking shifted a
    // byte by 64 bits.
    let nine = [0u8; 36];
    let nine_parts = [
        t("m.weight", Dtype::U32, &[1, 9], &nine[..]),
        t("m.scales", Dtype::F32, &[1, 1], &s[..]),
        t("m.biases", Dtype::F32, &[1, 1], &b[..]),
    ];
    let bad = quant::LogicalWeight {
        storage: Storage::Mlx(params(9, 32, Mode::Affine)),
        shape: vec![1, 32],
        ..good.clone()
    };
    assert!(layout_error(
        &dequantize_weight(&bad, &nine_parts).unwrap_err()
    ));
    // A name that is no MLX weight's, or parts that are not the weight's own.
    let bad = quant::LogicalWeight {
        name: "m".into(),
        ..good.clone()
    };
    assert!(layout_error(
        &dequantize_weight(&bad, &mlx_parts).unwrap_err()
    ));
    let bad = quant::LogicalWeight {
        parts: vec!["m.weight", "m.biases", "m.scales"],
        ..good.clone()
    };
    assert!(dequantize_weight(&bad, &mlx_parts).is_err());
}

/// `Scheme::Mlx` takes any parameters: a floating-point mode, which the
/// rows are not quantized in (they are affine), is refused before a file
/// is written. It wrote affine codes and scales under a metadata key
/// saying mxfp8, a file that did not read back.
#[test]
fn quantize_file_refuses_mlx_modes_it_does_not_quantize() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let w = f32_bytes(&[0.5; 64]);
    let tensors = [TensorRef {
        name: "a.weight",
        dtype: Dtype::F32,
        shape: &[2, 32],
        data: &w,
    }];
    for mode in [Mode::Mxfp4, Mode::Mxfp8, Mode::Nvfp4] {
        let (bits, group_size) = mode.fixed().unwrap();
        let p = QuantParams {
            bits,
            group_size,
            mode,
        };
        let e = quantize_file(&out, &tensors, None, &qopts(Scheme::Mlx(p))).unwrap_err();
        assert!(
            matches!(quant_problem(&e).1, QuantError::Params(m) if m.contains("affine")),
            "{mode}: {e}"
        );
        assert!(!out.exists());
    }
    let p = QuantParams::affine(8, 32);
    quantize_file(&out, &tensors, None, &qopts(Scheme::Mlx(p))).unwrap();
}
