//! Whole-file conversions, read back with the core reader; typed views of
//! every float format.

use std::path::{Path, PathBuf};
use tensorfile::Decode;

use tensorfile::cast::{self, cast_tensor, save_converted, CastError, CastOptions};
use tensorfile::{Dtype, Error, SafeTensors, TensorView, WriteOptions};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");

fn fixture(rel: &str) -> PathBuf {
    Path::new(FIXTURES).join(rel)
}

fn opts() -> CastOptions {
    CastOptions::default()
}

fn write_opts() -> WriteOptions {
    WriteOptions::default().with_sync(false)
}

fn convert(
    input: &Path,
    output: &Path,
    to: Option<Dtype>,
    o: CastOptions,
) -> tensorfile::Result<cast::ConvertSummary> {
    let file = SafeTensors::open(input)?;
    let tensors: Vec<TensorView<'_>> = file.tensors().collect();
    save_converted(output, &tensors, file.metadata(), to, o, &write_opts())
}

#[test]
fn typed_views_decode_every_float_format() {
    let file = SafeTensors::open(fixture("valid/every_dtype.safetensors")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("valid/every_dtype.json")).unwrap())
            .unwrap();
    let mut checked = 0;
    for e in json["tensors"].as_array().unwrap() {
        let t = file.tensor(e["name"].as_str().unwrap()).unwrap();
        if !t.dtype().is_float() || t.dtype() == Dtype::C64 {
            assert!(t.to_f32_vec().is_err(), "{}", t.name());
            continue;
        }
        let f32s = t.to_f32_vec().unwrap();
        let f64s = t.to_f64_vec().unwrap();
        assert_eq!(f32s.len() as u64, t.numel());
        for (a, b) in f32s.iter().zip(&f64s) {
            assert!((a.is_nan() && b.is_nan()) || f64::from(*a) == *b || t.dtype() == Dtype::F64);
        }
        match e["values"].as_array() {
            Some(values) => {
                for (g, v) in f64s.iter().zip(values) {
                    match v.as_f64() {
                        Some(v) if t.dtype() == Dtype::F64 => assert_eq!(*g, v),
                        Some(v) => assert_eq!(*g, f64::from(v as f32), "{}", t.name()),
                        None => assert!(g.is_nan(), "{}", t.name()),
                    }
                }
                checked += 1;
            }
            None => {
                // F4/F6: no decoded values in the fixture; encoding the
                // decoded values must give the stored bytes back.
                let back = cast::encode_f32_vec(&f32s, t.dtype(), opts()).unwrap();
                assert_eq!(back, t.data(), "{}", t.name());
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 12);
}

#[test]
fn every_dtype_to_bf16_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bf16.safetensors");
    let src = fixture("valid/every_dtype.safetensors");
    let summary = convert(&src, &out, Some(Dtype::BF16), opts()).unwrap();
    let input = SafeTensors::open(&src).unwrap();
    let output = SafeTensors::open(&out).unwrap();
    assert_eq!(output.metadata(), input.metadata());
    assert_eq!(output.len(), input.len());
    // F64, F32, F16, five F8, F4, two F6 are cast; BF16 stays; the rest is not float.
    assert_eq!(summary.cast, 11);
    for t in input.tensors() {
        let o = output.tensor(t.name()).unwrap();
        assert_eq!(o.shape(), t.shape());
        if t.dtype().is_float() && t.dtype() != Dtype::C64 {
            assert_eq!(o.dtype(), Dtype::BF16, "{}", t.name());
            let want = cast_tensor(
                t.name(),
                t.dtype(),
                t.shape(),
                t.data(),
                Dtype::BF16,
                opts(),
            )
            .unwrap();
            assert_eq!(o.data(), want, "{}", t.name());
        } else {
            assert_eq!((o.dtype(), o.data()), (t.dtype(), t.data()), "{}", t.name());
        }
    }
}

#[test]
fn bf16_model_to_f32_and_back_is_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("valid/llama_two_layers_bf16.safetensors");
    let wide = dir.path().join("f32.safetensors");
    let back = dir.path().join("bf16.safetensors");
    let s = convert(&src, &wide, Some(Dtype::F32), opts()).unwrap();
    assert_eq!(s.cast, s.tensors);
    let f = SafeTensors::open(&wide).unwrap();
    assert!(f.tensors().all(|t| t.dtype() == Dtype::F32));
    let orig = SafeTensors::open(&src).unwrap();
    for t in orig.tensors() {
        assert_eq!(
            f.tensor(t.name()).unwrap().to_f32_vec().unwrap(),
            t.to_f32_vec().unwrap()
        );
    }
    convert(&wide, &back, Some(Dtype::BF16), opts()).unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap());
    // Without a dtype: a canonical rewrite, byte for byte.
    let same = dir.path().join("same.safetensors");
    let s = convert(&src, &same, None, opts()).unwrap();
    assert_eq!(s.cast, 0);
    assert_eq!(std::fs::read(&same).unwrap(), std::fs::read(&src).unwrap());
}

#[test]
fn quantized_companions_keep_their_dtype() {
    let dir = tempfile::tempdir().unwrap();
    // int4: the bias is cast, the qweight/scales pair is not.
    let out = dir.path().join("int4.safetensors");
    let src = fixture("quant/int4_g32_sym.safetensors");
    let s = convert(&src, &out, Some(Dtype::BF16), opts()).unwrap();
    assert_eq!((s.cast, s.companions), (1, 2));
    let (i, o) = (
        SafeTensors::open(&src).unwrap(),
        SafeTensors::open(&out).unwrap(),
    );
    assert_eq!(o.tensor("layer.bias").unwrap().dtype(), Dtype::BF16);
    for name in ["layer.weight.scales", "layer.weight.qweight"] {
        let (a, b) = (i.tensor(name).unwrap(), o.tensor(name).unwrap());
        assert_eq!((a.dtype(), a.data()), (b.dtype(), b.data()), "{name}");
    }
    assert_eq!(o.metadata(), i.metadata());
    // MLX: weight (U32), scales and biases are all kept, even with --allow-int.
    for (file, kept) in [
        ("mlx/affine_b4_g32.safetensors", 3),
        ("mlx/mxfp4_g32.safetensors", 2),
    ] {
        let out = dir.path().join("mlx.safetensors");
        let all = opts().with_allow_int(true);
        let s = convert(&fixture(file), &out, Some(Dtype::F16), all).unwrap();
        assert_eq!((s.cast, s.companions), (0, kept), "{file}");
        let (i, o) = (
            SafeTensors::open(fixture(file)).unwrap(),
            SafeTensors::open(&out).unwrap(),
        );
        for t in i.tensors() {
            let b = o.tensor(t.name()).unwrap();
            assert_eq!(
                (t.dtype(), t.data()),
                (b.dtype(), b.data()),
                "{file} {}",
                t.name()
            );
        }
    }
}

#[test]
fn refused_conversions_leave_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let src = fixture("valid/minimal_bf16.safetensors");
    // Integer target without allow_int: refused before writing.
    let err = convert(&src, &out, Some(Dtype::I8), opts()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Cast {
                source: CastError::Unsupported { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(!out.exists());
    // C64 target: refused.
    assert!(convert(&src, &out, Some(Dtype::C64), opts()).is_err());
    assert!(!out.exists());
    // With allow_int, fractional values fail during the write: the old
    // file stays as it was, and no temporary file is left.
    std::fs::write(&out, b"old").unwrap();
    let ints = opts().with_allow_int(true);
    let err = convert(&src, &out, Some(Dtype::I32), ints).unwrap_err();
    assert!(
        matches!(
            err.detail(),
            Error::Cast {
                source: CastError::OutOfRange { to: Dtype::I32, .. },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    // F4 needs an even element count per tensor: the F32 [1] tensor refuses.
    let err = convert(
        &src,
        &dir.path().join("f4.safetensors"),
        Some(Dtype::F4),
        opts(),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Cast {
                source: CastError::NotWholeBytes { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn saturating_conversion_to_f8() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = [1.0f32, 1000.0, -1e6, 0.1]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let w = tensorfile::TensorRef {
        name: "w",
        dtype: Dtype::F32,
        shape: &[4],
        data: &data,
    };
    let src = dir.path().join("in.safetensors");
    tensorfile::save(&src, [w], None, &write_opts()).unwrap();
    let out = dir.path().join("out.safetensors");
    convert(&src, &out, Some(Dtype::F8_E4M3), opts()).unwrap();
    let f = SafeTensors::open(&out).unwrap();
    let v = f.tensor("w").unwrap().to_f32_vec().unwrap();
    assert!(v[0] == 1.0 && v[1].is_nan() && v[2].is_nan());
    let sat = opts().with_saturate(true);
    convert(&src, &out, Some(Dtype::F8_E4M3), sat).unwrap();
    let f = SafeTensors::open(&out).unwrap();
    let v = f.tensor("w").unwrap().to_f32_vec().unwrap();
    assert_eq!(&v[..3], [1.0, 448.0, -448.0]);
    assert_eq!(v[3], 0.1015625);
}
