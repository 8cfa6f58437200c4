//! Quantization: the int4 and MLX fixtures bit for bit, round trips,
//! selection rules, and every bad input.

use std::path::{Path, PathBuf};
use tensorfile::Decode;

use serde_json::Value;
use tensorfile::quant::{
    self, dequantize_file, dequantize_weight, int4_dequantize, int4_quantize, logical_weight,
    mlx_affine_params, mlx_pack, mlx_quantize, mlx_quantize_affine, mlx_unpack, quantize_file,
    DequantizeOptions, Glob, Mode, QuantConfig, QuantError, QuantParams, QuantizeOptions, Scheme,
    Selection,
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
    WriteOptions::default().with_sync(false)
}

fn qopts(scheme: Scheme) -> QuantizeOptions {
    QuantizeOptions::new(scheme)
        .with_selection(Selection::default())
        .with_write(no_sync())
}

fn dopts(mlx: Option<QuantConfig>, dtype: Option<Dtype>) -> DequantizeOptions {
    DequantizeOptions::default()
        .with_mlx(mlx)
        .with_dtype(dtype)
        .with_write(no_sync())
}

fn values_of(file: &SafeTensors, name: &str) -> Vec<f32> {
    file.tensor(name).unwrap().to_f32_vec().unwrap()
}

fn bits_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// `n` deterministic pseudo-random values in [-1, 1).
fn noise(n: usize, seed: u64) -> Vec<f32> {
    tensorfile_testkit::Rng::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1).noise(n)
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
    let q = int4_quantize("layer.weight", Dtype::F32, &[8, 64], &input[1].data, 32).unwrap();
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
            Scheme::Int4Sym { group: 32 },
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
        .filter(|&t| t.name() != "layer.weight.scales")
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
        storage: None,
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
            let q = int4_quantize("w", dtype, &[16, 128], &data, group).unwrap();
            let back = int4_dequantize("w", &q.qweight, &q.scales, &[16, 128], group).unwrap();
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
    let q = int4_quantize("z", Dtype::F32, &[1, 4], &f32_bytes(&[0.0; 4]), 2).unwrap();
    assert_eq!(q.qweight, [0, 0]);
    assert_eq!(q.scales, [0; 4]);

    let e = int4_quantize(
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
    let e = int4_quantize(
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
    let e = int4_quantize(
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
    let e = int4_quantize("odd", Dtype::F32, &[1, 6], &f32_bytes(&[0.0; 6]), 4).unwrap_err();
    assert!(
        matches!(quant_problem(&e), ("odd", QuantError::Shape(_))),
        "{e}"
    );
    let e = int4_quantize("i8", Dtype::I8, &[1, 2], &[0, 0], 2).unwrap_err();
    assert!(
        matches!(quant_problem(&e), ("i8", QuantError::Dtype { .. })),
        "{e}"
    );
    let e = int4_quantize("v", Dtype::F32, &[4], &f32_bytes(&[0.0; 4]), 2).unwrap_err();
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
    let one = int4_quantize("l.weight", Dtype::F32, &shape, &f32_bytes(&w), 32).unwrap();
    let file = SafeTensors::open(&out).unwrap();
    assert!(file.tensor("l.weight.qweight").unwrap().data() == one.qweight);
    assert!(file.tensor("l.weight.scales").unwrap().data() == one.scales);
    // Dequantizing runs on the same batches.
    let back = dir.path().join("d.safetensors");
    let tensors = file.tensors_by_name();
    dequantize_file(&back, &tensors, file.metadata(), &dopts(None, None)).unwrap();
    let expected = int4_dequantize("l.weight", &one.qweight, &one.scales, &shape, 32).unwrap();
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
        let opts = qopts(Scheme::Int4Sym { group: 32 }).with_selection(Selection {
            include: include.iter().map(|g| Glob::new(*g)).collect(),
            exclude: exclude.iter().map(|g| Glob::new(*g)).collect(),
        });
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
            global_scale: false,
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
                    Scheme::Mlx(params),
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
fn mlx_affine_quantizer_reproduces_the_older_mlx_fixtures() {
    // MLX's own F32 files (mlx/): every byte of the codes, scales and
    // biases, including the 93 groups an earlier quantizer here changed.
    let manifest = json("mlx/manifest.json");
    let mut checked = 0;
    for entry in manifest["files"].as_array().unwrap() {
        if entry["mode"] != "affine" {
            continue;
        }
        let name = entry["file"].as_str().unwrap();
        let params = QuantParams::affine(
            entry["bits"].as_u64().unwrap(),
            entry["group_size"].as_u64().unwrap(),
        );
        let original = floats(&entry["original"]);
        let ours = mlx_quantize(
            "w",
            Dtype::F32,
            &shape(&entry["shape"]),
            &f32_bytes(&original),
            params,
        )
        .unwrap();
        let file = SafeTensors::open(fixture(&format!("mlx/{name}"))).unwrap();
        assert_eq!(
            ours.weight,
            file.tensor("w.weight").unwrap().data(),
            "{name}"
        );
        assert_eq!(
            ours.scales,
            file.tensor("w.scales").unwrap().data(),
            "{name}"
        );
        assert_eq!(
            ours.biases,
            file.tensor("w.biases").unwrap().data(),
            "{name}"
        );
        checked += 1;
    }
    assert_eq!(checked, 18);
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
    let e = run(QuantParams::floating(Mode::Mxfp4)).unwrap_err();
    assert_eq!(quant_problem(&e).0, "w.scales", "{e}");
    assert!(!out.exists());

    // Missing biases in affine mode; mismatched biases.
    let mut parts: Vec<_> = tensors.iter().filter(|&t| t.name() != "w.biases").collect();
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
fn mlx_affine_keeps_the_edge_exact_and_every_weight_within_a_step() {
    // MLX's guarantees, on rows of many shapes of distribution: noise at
    // several magnitudes, shifted off zero either way, skewed by an outlier
    // at either end, constant, and tiny (where the step is the 1e-7
    // floor). The weight of largest magnitude comes back exactly; the
    // others within one step (half a step unless the grid stops short of
    // them, which it does by less than a step), up to f32 rounding.
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
    let mut beyond_half = 0;
    for bits in [2u32, 3, 4, 5, 6, 8] {
        for group in [32usize, 64, 128] {
            let params = QuantParams::affine(u64::from(bits), group as u64);
            let q = mlx_quantize("w", Dtype::F32, &shape, &f32_bytes(&w), params).unwrap();
            let (scales, biases) = (f32_values(&q.scales), f32_values(&q.biases));
            let mut codes = vec![0u8; w.len()];
            mlx_unpack(bits, &q.weight, &mut codes).unwrap();
            for (g, chunk) in w.chunks(group).enumerate() {
                let (step, bias) = (scales[g], biases[g]);
                let edge = chunk
                    .iter()
                    .fold(0f32, |m, x| if x.abs() > m.abs() { *x } else { m });
                for (i, &a) in chunk.iter().enumerate() {
                    let back = step * f32::from(codes[g * group + i]) + bias;
                    let tolerance = 1e-6 * a.abs().max(step.abs());
                    if a.abs() == edge.abs() && step.abs() > 1.5e-7 {
                        assert_eq!(back, a, "b{bits} g{group} group {g}: the edge");
                    }
                    assert!(
                        (a - back).abs() <= step.abs() + tolerance,
                        "b{bits} g{group} [{i}]: {a} came back as {back}, step {step}"
                    );
                    if (a - back).abs() > step.abs() * 0.5 + tolerance {
                        beyond_half += 1;
                    }
                }
            }
        }
    }
    // MLX's grid stops short of some groups' far end (the trade it makes).
    assert!(beyond_half > 0);
}

#[test]
fn mlx_affine_refuses_groups_f32_cannot_span_and_keeps_huge_constants() {
    // Row 0 is ordinary; row 1 holds the group under test. A group whose
    // MLX parameters dequantize to infinity or NaN is refused, naming its
    // row and group; a constant group, however large, comes back exactly
    // (MLX's step is then -0 and every code 0).
    let cases: [(&[f32], u64, bool); 6] = [
        (&[-3e38, 3e38], 4, true),
        (&[-3.402_823_5e38, 1.329_228e36], 2, true),
        (&[-0.0, 3.402_823_5e38], 5, true), // MLX: the 31st step is -inf
        (&[1e32], 4, false),
        (&[-2e38], 8, false),
        (&[5e-8, -2e-8], 3, false),
    ];
    for (pattern, bits, refused) in cases {
        let mut w = noise(2 * 32, 3);
        for (i, x) in w[32..].iter_mut().enumerate() {
            *x = pattern[i % pattern.len()];
        }
        let params = QuantParams::affine(bits, 32);
        let q = mlx_quantize("m.weight", Dtype::F32, &[2, 32], &f32_bytes(&w), params);
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
        mlx_unpack(bits as u32, &q.weight, &mut codes).unwrap();
        for (i, &x) in w[32..].iter().enumerate() {
            let back = scales[1] * f32::from(codes[32 + i]) + biases[1];
            assert!(back.is_finite(), "{pattern:?} [{i}]");
            if pattern.len() == 1 {
                assert_eq!(back, x, "{pattern:?} [{i}]");
                assert_eq!(scales[1], -0.0);
            }
        }
    }
}

#[test]
fn mlx_round_trip_within_a_step_and_reads_its_own_metadata() {
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
                // Within a step (MLX's bound), up to f32 rounding of the
                // multiply and the add.
                let tolerance = 1e-6 * a.abs().max(step.abs()) + 1e-9;
                assert!(
                    (a - b).abs() <= step.abs() + tolerance,
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
        |name: &str| -> Vec<_> { all.iter().filter(|&t| t.name() != name).cloned().collect() };
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
        mlx_pack(bits, &codes, &mut packed).unwrap();
        let mut back = vec![0u8; 64];
        mlx_unpack(bits, &packed, &mut back).unwrap();
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
    assert_eq!(
        Scheme::parse("mlx-mxfp4", Some(4), Some(32)),
        Ok(Scheme::Mlx(QuantParams::floating(Mode::Mxfp4).unwrap()))
    );
    assert!(Scheme::parse("mlx-mxfp4", None, Some(16)).is_err());
    assert!(Scheme::parse("mlx-nvfp8", None, None).is_err());
    assert!(Scheme::parse("mlx-affine", Some(4), Some(64))
        .unwrap()
        .with_global_scale()
        .is_err());
    assert!(Scheme::parse("gptq", None, None).is_err());
    let c = |v: Value| {
        QuantConfig::from_config(&tensorfile::JsonObject::parse(&v.to_string()).unwrap())
    };
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
    assert_eq!(q.for_module("x"), QuantParams::floating(Mode::Mxfp4));
    // mlx-lm's per-module global scale entries.
    let q = c(serde_json::json!({"quantization": {"mode": "nvfp4", "group_size": 16, "bits": 4,
        "e.switch_mlp.up_proj": {"mode": "nvfp4", "group_size": 16, "bits": 4, "global_scale": true}}}))
    .unwrap()
    .unwrap();
    let nv = QuantParams::floating(Mode::Nvfp4).unwrap();
    assert_eq!(q.for_module("x"), Some(nv));
    assert_eq!(
        q.for_module("e.switch_mlp.up_proj"),
        Some(QuantParams {
            global_scale: true,
            ..nv
        })
    );
    assert!(c(
        serde_json::json!({"quantization": {"bits": 4, "group_size": 64, "global_scale": true}})
    )
    .is_err());
    assert!(c(serde_json::json!({"quantization": {"mode": "nvfp4", "global_scale": 1}})).is_err());
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
    assert!(
        // QuantError::Layout covers every layout refused; its text says which.
        matches!(quant_problem(err.detail()), ("b.weight.scales", QuantError::Layout(m)) if m.contains("even")),
        "{err}"
    );
    // Quantizing to MLX a weight whose columns times bits overflow.
    let huge = [t("c.weight", Dtype::F32, &[0, 1 << 62], &[])];
    let mut opts = qopts(Scheme::Mlx(QuantParams::affine(4, 64)));
    opts.selection.include = vec![Glob::new("c.weight")];
    assert!(quantize_file(&out, &huge, None, &opts).is_err());
    // The per-tensor functions.
    assert!(int4_quantize("w", Dtype::F32, &[0, 1 << 40], &[], 32).is_ok());
    let nvfp4 = QuantParams::floating(Mode::Nvfp4).unwrap();
    for shape in [
        &[1u64 << 40, 0][..],
        &[0, 1 << 40],
        &[1 << 40, 1 << 20, 0],
        &[0, 4, 64],
    ] {
        let q = mlx_quantize("w", Dtype::F32, shape, &[], nvfp4).unwrap();
        assert!(q.weight.is_empty() && q.scales.is_empty());
        let global = QuantParams {
            global_scale: true,
            ..nvfp4
        };
        let q = mlx_quantize("w", Dtype::F32, shape, &[], global);
        // Refused unless there are no matrices at all.
        assert_eq!(q.is_err(), shape.len() == 2 || shape[0] > 0, "{shape:?}");
    }
    assert!(int4_dequantize("w", &[], &[], &[1 << 33, 1 << 33], 32).is_err());
    let mut codes = [0u8; 8];
    mlx_unpack(8, &[1, 2], &mut codes).unwrap();
    assert_eq!(codes, [1, 2, 0, 0, 0, 0, 0, 0]);
}

/// MLX affine on shapes with no values but a huge other dimension: an
/// empty result at once, not a loop over 2^40 rows or a row buffer of 2^60
/// values (which aborted on the allocation).
#[test]
fn mlx_quantize_affine_of_empty_shapes_allocates_nothing() {
    let params = QuantParams::affine(4, 64);
    for shape in [[1u64 << 40, 0], [0, 1 << 60], [0, 0]] {
        let q = mlx_quantize_affine("w", Dtype::F32, &shape, &[], params).unwrap();
        assert!(
            q.weight.is_empty() && q.scales.is_empty() && q.biases.is_empty(),
            "{shape:?}"
        );
    }
    // The bytes must still be the shape's: [1, 0] holds none, [0, 64] none.
    assert!(mlx_quantize_affine("w", Dtype::F32, &[1 << 40, 0], &[0; 4], params).is_err());
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
        let e = mlx_pack(bits, &codes, &mut packed).unwrap_err();
        assert!(matches!(e, QuantError::Params(_)), "{bits}: {e}");
        let e = mlx_unpack(bits, &packed, &mut back).unwrap_err();
        assert!(matches!(e, QuantError::Params(_)), "{bits}: {e}");
        assert!(mlx_affine_params(&[1.0, 2.0], bits).is_err(), "{bits}");
    }
    for bits in [2u32, 3, 4, 5, 6, 8] {
        let n = 64 * bits as usize / 8;
        mlx_pack(bits, &codes, &mut packed[..n]).unwrap();
        mlx_unpack(bits, &packed[..n], &mut back).unwrap();
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
        storage: Some(Scheme::Int4Sym { group: 4 }),
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
            storage: Some(Scheme::Int4Sym { group: group_size }),
            ..good.clone()
        };
        let e = dequantize_weight(&bad, &int4_parts).unwrap_err();
        assert!(layout_error(&e), "group {group_size}: {e}");
    }
    // Parts named but given as MLX: the layout is not MLX's.
    let bad = quant::LogicalWeight {
        storage: Some(Scheme::Mlx(QuantParams::affine(4, 4))),
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
        storage: Some(Scheme::Mlx(QuantParams::affine(4, 8))),
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
        global_scale: false,
    };
    for p in [
        params(4, 0, Mode::Affine),
        params(4, 1, Mode::Affine),
        params(4, 4, Mode::Affine),
        params(4, 32, Mode::Mxfp4),
        params(4, 16, Mode::Nvfp4),
    ] {
        let bad = quant::LogicalWeight {
            storage: Some(Scheme::Mlx(p)),
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
        storage: Some(Scheme::Mlx(params(9, 32, Mode::Affine))),
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

// ---------------------------------------------------------------- mx.quantize fixtures

/// The fixtures of `real/mlx_quant`: per file, per input dtype.
struct MxEntry {
    file: String,
    prefix: String,
    params: QuantParams,
    dtype: Dtype,
}

fn mx_entries() -> Vec<MxEntry> {
    let manifest = json("real/mlx_quant/manifest.json");
    let mut out = Vec::new();
    for f in manifest["files"].as_array().unwrap() {
        for e in f["entries"].as_array().unwrap() {
            let mode: Mode = e["mode"].as_str().unwrap().parse().unwrap();
            let prefix = e["tensors"]["original"]["name"]
                .as_str()
                .unwrap()
                .split('.')
                .next()
                .unwrap()
                .to_string();
            let dtype = match e["input_dtype"].as_str().unwrap() {
                "float32" => Dtype::F32,
                "float16" => Dtype::F16,
                _ => Dtype::BF16,
            };
            out.push(MxEntry {
                file: f["file"].as_str().unwrap().to_string(),
                prefix,
                params: QuantParams {
                    bits: e["bits"].as_u64().unwrap(),
                    group_size: e["group_size"].as_u64().unwrap(),
                    mode,
                    global_scale: e["global_scale"].as_bool().unwrap(),
                },
                dtype,
            });
        }
    }
    out
}

#[test]
fn mlx_quantize_is_mx_quantize_on_every_fixture_group() {
    // Each group of every fixture (8 rows of edge cases, F32, F16 and BF16
    // inputs, every mode, bits and group size) quantized on its own gives
    // mx.quantize's bytes, or is refused where mx.quantize's own result
    // does not stand for the weights: there, mx.dequantize gives values
    // that are not finite or more than twice the group's largest
    // magnitude. The nvfp4 files with a global scale are quantized whole
    // (the scale is the matrix's largest magnitude) and must match whole.
    let (mut same, mut refused) = (0usize, 0usize);
    let mut refused_by: std::collections::BTreeMap<String, usize> = Default::default();
    for e in mx_entries() {
        let file = SafeTensors::open(fixture(&format!("real/mlx_quant/{}", e.file))).unwrap();
        let t = |part: &str| file.tensor(&format!("{}.{part}", e.prefix)).unwrap();
        let original = t("original");
        assert_eq!(original.dtype(), e.dtype);
        let (rows, cols) = (8usize, 256usize);
        let p = e.params;
        let gs = p.group_size as usize;
        let elem = e.dtype.size().unwrap();
        let what = format!("{} {}", e.file, e.prefix);
        if p.global_scale {
            let q = mlx_quantize("w", e.dtype, &[8, 256], original.data(), p).unwrap();
            assert_eq!(q.global_scale, t("global_scale").data(), "{what}");
            assert_eq!(q.weight, t("weight").data(), "{what}");
            assert_eq!(q.scales, t("scales").data(), "{what}");
            assert!(q.biases.is_empty());
            same += rows * cols / gs;
            continue;
        }
        let scale_size = if p.mode == Mode::Affine { elem } else { 1 };
        let code_bytes = gs * p.bits as usize / 8;
        let theirs_values = t("dequantized").to_f32_vec().unwrap();
        let values = original.to_f32_vec().unwrap();
        for g in 0..rows * cols / gs {
            let input = &original.data()[g * gs * elem..(g + 1) * gs * elem];
            let at = |bytes: &[u8], size: usize| bytes[g * size..(g + 1) * size].to_vec();
            let span = g * gs..(g + 1) * gs;
            let amax = values[span.clone()]
                .iter()
                .fold(0f32, |m, w| m.max(w.abs()));
            let stands = theirs_values[span]
                .iter()
                .all(|v| v.is_finite() && v.abs() <= 2.0 * amax);
            match mlx_quantize("w", e.dtype, &[1, gs as u64], input, p) {
                Ok(q) => {
                    assert!(
                        stands || p.mode == Mode::Nvfp4,
                        "{what} group {g}: MLX's values do not stand"
                    );
                    assert_eq!(
                        q.weight,
                        at(t("weight").data(), code_bytes),
                        "{what} group {g}"
                    );
                    assert_eq!(
                        q.scales,
                        at(t("scales").data(), scale_size),
                        "{what} group {g}"
                    );
                    if p.mode == Mode::Affine {
                        assert_eq!(
                            q.biases,
                            at(t("biases").data(), scale_size),
                            "{what} group {g}"
                        );
                    }
                    same += 1;
                }
                Err(err) => {
                    let problem = quant_problem(&err).1;
                    match (p.mode, problem) {
                        (
                            Mode::Affine | Mode::Mxfp4 | Mode::Mxfp8,
                            QuantError::RangeOverflow { row: 0, group: 0 },
                        ) => {}
                        (
                            Mode::Mxfp4 | Mode::Mxfp8,
                            QuantError::ScaleOutOfRange {
                                row: 0,
                                group: 0,
                                exponent,
                            },
                        ) => assert!(*exponent < -127),
                        _ => panic!("{what} group {g}: {err}"),
                    }
                    assert!(!stands, "{what} group {g}: refused, but MLX's values stand");
                    refused += 1;
                    *refused_by
                        .entry(format!("{} {}", p.mode, e.prefix))
                        .or_default() += 1;
                }
            }
        }
    }
    // Counted on these fixtures: groups of the near-limit row (3) in affine
    // mode and mxfp4 (a code rounded up to 2^128), and of the subnormal row
    // (4) in mxfp4 (F32, BF16) and mxfp8 (F32), whose exponent MLX wraps
    // around.
    assert_eq!((same, refused), (3048, 120), "{refused_by:?}");
    let by: Vec<(&str, usize)> = refused_by.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        by,
        [
            ("affine bf16", 30),
            ("affine f16", 42),
            ("affine f32", 30),
            ("mxfp4 bf16", 7),
            ("mxfp4 f32", 7),
            ("mxfp8 f32", 4)
        ]
    );
}

#[test]
fn mlx_dequantize_is_mx_dequantize_on_every_fixture() {
    // mx.dequantize's output in its default dtype and in F32, bit for bit,
    // NaN and infinities included, through the file plan (the parts read
    // from a file, not memory).
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for e in mx_entries() {
        let path = fixture(&format!("real/mlx_quant/{}", e.file));
        let file = SafeTensors::from_source(
            tensorfile::FileSource::open(&path).unwrap(),
            &Default::default(),
        )
        .unwrap();
        let names: Vec<String> = ["weight", "scales", "biases", "global_scale"]
            .iter()
            .map(|p| format!("{}.{p}", e.prefix))
            .collect();
        let parts: Vec<_> = file
            .tensor_data()
            .filter(|t| names.iter().any(|n| n == t.name()))
            .collect();
        let plain = QuantParams {
            global_scale: false,
            ..e.params
        };
        let reference = SafeTensors::open(&path).unwrap();
        let want = |part: &str| reference.tensor(&format!("{}.{part}", e.prefix)).unwrap();
        let out = dir.path().join("d.safetensors");
        for (dtype, expected) in [(None, "dequantized"), (Some(Dtype::F32), "dequantized_f32")] {
            let s = dequantize_file(
                &out,
                &parts,
                None,
                &dopts(Some(QuantConfig::uniform(plain)), dtype),
            )
            .unwrap_or_else(|err| panic!("{} {}: {err}", e.file, e.prefix));
            assert_eq!(s.dequantized.len(), 1);
            assert_eq!(s.dequantized[0].1, Scheme::Mlx(e.params));
            let back = SafeTensors::open(&out).unwrap();
            let got = back.tensor(&format!("{}.weight", e.prefix)).unwrap();
            let want = want(expected);
            assert_eq!(
                got.dtype(),
                want.dtype(),
                "{} {} {expected}",
                e.file,
                e.prefix
            );
            assert_eq!(got.shape(), [8, 256]);
            if got.data() != want.data() {
                let (a, b) = (got.to_f32_vec().unwrap(), want.to_f32_vec().unwrap());
                let first = a
                    .iter()
                    .zip(&b)
                    .position(|(x, y)| x.to_bits() != y.to_bits());
                let i = first.unwrap_or(0);
                panic!(
                    "{} {} {expected}: {} values differ, first [{i}]: ours {} ({:#x}), MLX {} ({:#x})",
                    e.file,
                    e.prefix,
                    a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count(),
                    a[i],
                    a[i].to_bits(),
                    b[i],
                    b[i].to_bits()
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 22 * 3 * 2);
}

// ---------------------------------------------------------------- mlx-lm model directories

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn mlx_lm_config(dir: &str) -> QuantConfig {
    let path = fixture(&format!("real/mlx_lm/{dir}/config.json"));
    let config = tensorfile::model::read_config(&path).unwrap();
    QuantConfig::from_config(&config).unwrap().unwrap()
}

#[test]
fn mlx_lm_expert_stacks_dequantize_to_mx_dequantize() {
    // Mixtral-style directories written by mlx-lm: 3-D expert stacks
    // [experts, out, in * bits / 32] beside 2-D layers, affine and nvfp4,
    // and nvfp4 with one F32 global scale per expert (mlx-lm 0.32). Every
    // quantized layer, read from the file (not memory), dequantizes in
    // MLX's default dtype to the bytes mx.dequantize gave, whole and per
    // expert.
    let manifest = json("real/mlx_lm/manifest.json");
    let tmp = tempfile::tempdir().unwrap();
    for dir in [
        "mixtral_q4",
        "mixtral_nvfp4",
        "mixtral_nvfp4_global_scale",
        "llama_q4",
    ] {
        let record = &manifest["dirs"][dir];
        let config = mlx_lm_config(dir);
        let file = SafeTensors::from_source(
            tensorfile::FileSource::open(fixture(&format!("real/mlx_lm/{dir}/model.safetensors")))
                .unwrap(),
            &Default::default(),
        )
        .unwrap();
        let tensors: Vec<_> = file.tensor_data().collect();
        let out = tmp.path().join(format!("{dir}.safetensors"));
        let summary = dequantize_file(&out, &tensors, file.metadata(), &dopts(Some(config), None))
            .unwrap_or_else(|e| panic!("{dir}: {e}"));
        let layers = record["quantized_layers"].as_array().unwrap();
        assert_eq!(summary.dequantized.len(), layers.len(), "{dir}");
        let back = SafeTensors::open(&out).unwrap();
        let mut stacks = 0;
        for layer in layers {
            let name = format!("{}.weight", layer["layer"].as_str().unwrap());
            let t = back.tensor(&name).unwrap();
            let want = &layer["dequantized"];
            assert_eq!(t.shape(), shape(&want["shape"]), "{dir} {name}");
            assert_eq!(
                t.dtype().name().to_lowercase(),
                match want["dtype"].as_str().unwrap() {
                    "bfloat16" => "bf16",
                    "float32" => "f32",
                    other => other,
                },
                "{dir} {name}"
            );
            assert_eq!(sha256_hex(t.data()), want["sha256"], "{dir} {name}");
            if let Some(per_expert) = layer["dequantized_per_expert_sha256"].as_array() {
                let experts = per_expert.len();
                let size = t.data().len() / experts;
                for (e, want) in per_expert.iter().enumerate() {
                    let bytes = &t.data()[e * size..(e + 1) * size];
                    assert_eq!(sha256_hex(bytes), *want, "{dir} {name} expert {e}");
                }
                stacks += 1;
            }
        }
        // The scales, biases and global scales are gone; the rest is copied.
        assert!(back.names().all(|n| !n.ends_with(".scales")
            && !n.ends_with(".biases")
            && !n.ends_with(".global_scale")));
        assert_eq!(stacks, if dir == "llama_q4" { 0 } else { 6 }, "{dir}");
    }
}

#[test]
fn mlx_lm_models_quantize_to_mlx_lm_bytes() {
    // The float models quantized here give, tensor for tensor, the bytes
    // mlx-lm wrote for the same models: affine 4-bit groups of 64 (Llama
    // and Mixtral, whose expert stacks are 3-D), nvfp4, and nvfp4 with one
    // global scale per expert (mlx-lm 0.32's quantize_model(...,
    // global_scale=True)). mlx-lm also quantizes the embedding, which the
    // default here leaves: it is included by name.
    let tmp = tempfile::tempdir().unwrap();
    let nvfp4 = Scheme::parse("mlx-nvfp4", None, None).unwrap();
    let cases = [
        (
            "llama_bf16",
            "llama_q4",
            Scheme::Mlx(QuantParams::affine(4, 64)),
        ),
        (
            "mixtral_bf16",
            "mixtral_q4",
            Scheme::Mlx(QuantParams::affine(4, 64)),
        ),
        ("mixtral_bf16", "mixtral_nvfp4", nvfp4),
        (
            "mixtral_bf16",
            "mixtral_nvfp4_global_scale",
            nvfp4.with_global_scale().unwrap(),
        ),
    ];
    for (float_dir, quant_dir, scheme) in cases {
        let input = SafeTensors::from_source(
            tensorfile::FileSource::open(fixture(&format!(
                "real/mlx_lm/{float_dir}/model.safetensors"
            )))
            .unwrap(),
            &Default::default(),
        )
        .unwrap();
        let tensors: Vec<_> = input.tensor_data().collect();
        let mut opts = qopts(scheme);
        opts.selection.include = vec![Glob::new("model.embed_tokens.weight")];
        let out = tmp.path().join(format!("{quant_dir}.safetensors"));
        let summary = quantize_file(&out, &tensors, input.metadata(), &opts).unwrap();
        let ours = SafeTensors::open(&out).unwrap();
        let theirs = SafeTensors::open(fixture(&format!(
            "real/mlx_lm/{quant_dir}/model.safetensors"
        )))
        .unwrap();
        let mut names: Vec<&str> = ours.names().collect();
        let mut their_names: Vec<&str> = theirs.names().collect();
        names.sort_unstable();
        their_names.sort_unstable();
        assert_eq!(names, their_names, "{quant_dir}");
        for name in names {
            let (a, b) = (ours.tensor(name).unwrap(), theirs.tensor(name).unwrap());
            assert_eq!(
                (a.dtype(), a.shape()),
                (b.dtype(), b.shape()),
                "{quant_dir} {name}"
            );
            assert!(a.data() == b.data(), "{quant_dir} {name}");
        }
        // The file's own parameters read it back as mlx-lm's config does.
        let config = mlx_lm_config(quant_dir);
        let own = QuantConfig::from_metadata(ours.metadata())
            .unwrap()
            .unwrap();
        for name in &summary.quantized {
            let module = name.strip_suffix(".weight").unwrap();
            assert_eq!(own.for_module(module), config.for_module(module), "{name}");
        }
    }
}

#[test]
fn mlx_weights_of_any_rank_round_trip_and_bad_layouts_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let q = dir.path().join("q.safetensors");
    let d = dir.path().join("d.safetensors");
    // A 4-D weight (two batch dimensions) in every mode, named by
    // --include, quantizes row by row and reads back through its metadata
    // with its logical shape; with a global scale, one per matrix.
    let shape = [2u64, 3, 4, 64];
    let w = noise(2 * 3 * 4 * 64, 21);
    let nvfp4 = QuantParams::floating(Mode::Nvfp4).unwrap();
    for params in [
        QuantParams::affine(3, 32),
        QuantParams::floating(Mode::Mxfp4).unwrap(),
        QuantParams::floating(Mode::Mxfp8).unwrap(),
        nvfp4,
        QuantParams {
            global_scale: true,
            ..nvfp4
        },
    ] {
        let input = [Owned::f32("conv.kernel.weight", &shape, &w)];
        let mut opts = qopts(Scheme::Mlx(params));
        opts.selection.include = vec![Glob::new("conv.*")];
        quantize_file(&q, &refs(&input), None, &opts).unwrap();
        let qf = SafeTensors::open(&q).unwrap();
        assert_eq!(
            qf.tensor("conv.kernel.weight").unwrap().shape(),
            [2, 3, 4, 64 * params.bits / 32]
        );
        let groups = 64 / params.group_size;
        assert_eq!(
            qf.tensor("conv.kernel.scales").unwrap().shape(),
            [2, 3, 4, groups]
        );
        let global = qf.get("conv.kernel.global_scale");
        assert_eq!(
            global.map(|g| g.shape().to_vec()),
            params.global_scale.then(|| vec![2, 3])
        );
        // The same values as the in-memory quantizer, matrix by matrix.
        let whole = mlx_quantize("w", Dtype::F32, &shape, &f32_bytes(&w), params).unwrap();
        assert_eq!(
            whole.weight,
            qf.tensor("conv.kernel.weight").unwrap().data()
        );
        if let Some(g) = global {
            assert_eq!(whole.global_scale, g.data());
            let maxima: Vec<f32> = w
                .chunks(4 * 64)
                .map(|m| m.iter().fold(0f32, |a, x| a.max(x.abs())))
                .collect();
            assert_eq!(f32_values(g.data()), maxima);
        }
        let s = dequantize_file(
            &d,
            &qf.tensors_by_name(),
            qf.metadata(),
            &dopts(None, Some(Dtype::F32)),
        )
        .unwrap();
        assert_eq!(s.dequantized[0].1, Scheme::Mlx(params));
        let back = values_of(&SafeTensors::open(&d).unwrap(), "conv.kernel.weight");
        assert_eq!(back.len(), w.len());
        let worst = w
            .iter()
            .zip(&back)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 0.5, "{params}: {worst}");
    }
    // The default takes 3-D expert stacks by their switch-layer names, and
    // no other 3-D tensor.
    let input = [
        Owned::f32(
            "m.layers.0.mlp.switch_mlp.up_proj.weight",
            &[2, 4, 64],
            &w[..512],
        ),
        Owned::f32("m.layers.0.conv1d.weight", &[2, 4, 64], &w[..512]),
    ];
    let s = quantize_file(
        &q,
        &refs(&input),
        None,
        &qopts(Scheme::Mlx(QuantParams::affine(4, 64))),
    )
    .unwrap();
    assert_eq!(s.quantized, ["m.layers.0.mlp.switch_mlp.up_proj.weight"]);
    let s = quantize_file(
        &q,
        &refs(&input),
        None,
        &qopts(Scheme::Int4Sym { group: 32 }),
    );
    assert!(s.is_err(), "int4 is 2-D only");

    // Layouts that cannot be MLX weights name the tensor at fault.
    let t = |name: &'static str, dtype, shape: &[u64]| Owned {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        data: vec![0; shape.iter().product::<u64>() as usize * Dtype::size(dtype).unwrap()],
    };
    let nv = QuantConfig::uniform(nvfp4);
    let nv_global = QuantConfig::uniform(QuantParams {
        global_scale: true,
        ..nvfp4
    });
    let affine = QuantConfig::uniform(QuantParams::affine(4, 64));
    let cases: Vec<(Vec<Owned>, &QuantConfig, &str)> = vec![
        // Scales whose leading dimensions are not the weight's.
        (
            vec![
                t("e.weight", Dtype::U32, &[4, 8, 8]),
                t("e.scales", Dtype::U8, &[2, 8, 4]),
            ],
            &nv,
            "e.scales",
        ),
        // A global scale of the wrong dtype, shape, or mode; missing.
        (
            vec![
                t("e.weight", Dtype::U32, &[4, 8, 8]),
                t("e.scales", Dtype::U8, &[4, 8, 4]),
                t("e.global_scale", Dtype::F16, &[4]),
            ],
            &nv,
            "e.global_scale",
        ),
        (
            vec![
                t("e.weight", Dtype::U32, &[4, 8, 8]),
                t("e.scales", Dtype::U8, &[4, 8, 4]),
                t("e.global_scale", Dtype::F32, &[3]),
            ],
            &nv,
            "e.global_scale",
        ),
        (
            vec![
                t("e.weight", Dtype::U32, &[4, 8, 8]),
                t("e.scales", Dtype::BF16, &[4, 8, 1]),
                t("e.biases", Dtype::BF16, &[4, 8, 1]),
                t("e.global_scale", Dtype::F32, &[4]),
            ],
            &affine,
            "e.global_scale",
        ),
        (
            vec![
                t("e.weight", Dtype::U32, &[4, 8, 8]),
                t("e.scales", Dtype::U8, &[4, 8, 4]),
            ],
            &nv_global,
            "e.global_scale",
        ),
        // A packed weight of one dimension.
        (
            vec![
                t("e.weight", Dtype::U32, &[8]),
                t("e.scales", Dtype::U8, &[4]),
            ],
            &nv,
            "e.weight",
        ),
    ];
    for (parts, config, at_fault) in cases {
        let e = dequantize_file(&d, &refs(&parts), None, &dopts(Some(config.clone()), None))
            .unwrap_err();
        assert_eq!(quant_problem(&e).0, at_fault, "{e}");
    }
    // One global scale for all matrices is read as MLX's scalar.
    let one = [
        t("e.weight", Dtype::U32, &[4, 8, 8]),
        t("e.scales", Dtype::U8, &[4, 8, 4]),
        t("e.global_scale", Dtype::F32, &[]),
    ];
    let s = dequantize_file(&d, &refs(&one), None, &dopts(Some(nv.clone()), None)).unwrap();
    assert_eq!(s.dequantized[0].2, Dtype::F32);

    // Hostile sizes: no values beside a huge dimension give an empty
    // result, never an allocation of its size; a global scale for matrices
    // without values is refused.
    let empty = [
        Owned {
            name: "e.weight".into(),
            dtype: Dtype::U32,
            shape: vec![1 << 40, 0, 8],
            data: vec![],
        },
        Owned {
            name: "e.scales".into(),
            dtype: Dtype::U8,
            shape: vec![1 << 40, 0, 4],
            data: vec![],
        },
    ];
    dequantize_file(&d, &refs(&empty), None, &dopts(Some(nv.clone()), None)).unwrap();
    assert_eq!(
        SafeTensors::open(&d)
            .unwrap()
            .tensor("e.weight")
            .unwrap()
            .shape(),
        [1 << 40, 0, 64]
    );
    let empty_float = [Owned::f32("x.switch_mlp.w.weight", &[1 << 40, 0, 64], &[])];
    let e = quantize_file(
        &q,
        &refs(&empty_float),
        None,
        &qopts(Scheme::Mlx(QuantParams {
            global_scale: true,
            ..nvfp4
        })),
    )
    .unwrap_err();
    assert_eq!(quant_problem(&e).0, "x.switch_mlp.w.weight", "{e}");
    quantize_file(&q, &refs(&empty_float), None, &qopts(Scheme::Mlx(nvfp4))).unwrap();
    // A global scale claiming more bytes than it holds.
    let lying = [
        t("e.weight", Dtype::U32, &[4, 8, 8]),
        t("e.scales", Dtype::U8, &[4, 8, 4]),
        Owned {
            name: "e.global_scale".into(),
            dtype: Dtype::F32,
            shape: vec![4],
            data: vec![0; 4],
        },
    ];
    assert!(dequantize_file(&d, &refs(&lying), None, &dopts(Some(nv), None)).is_err());
}
