//! `tensorfile convert`, run as a user runs it, outputs read back with the
//! library's reader.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::Output;
use tensorfile_testkit::{fixture, stderr};

use serde_json::Value;
use tensorfile::cast::{cast_tensor, CastOptions};
use tensorfile::{Dtype, SafeTensors};

fn tensorfile(args: &[&OsStr]) -> Output {
    let mut all: Vec<&OsStr> = args.to_vec();
    all.push(OsStr::new("--no-sync"));
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), all)
}

fn convert(input: &Path, output: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&OsStr> = vec!["convert".as_ref(), input.as_os_str(), output.as_os_str()];
    args.extend(extra.iter().map(|a| OsStr::new(*a)));
    tensorfile(&args)
}

#[test]
fn casts_float_tensors_in_either_case_of_dtype_name() {
    let dir = tempfile::tempdir().unwrap();
    let src = fixture("valid/every_dtype.safetensors");
    let input = SafeTensors::open(&src).unwrap();
    for name in ["bf16", "BF16", "f8_e4m3", "F4"] {
        let dtype = name.parse::<Dtype>().unwrap();
        let out = dir.path().join(format!("{name}.safetensors"));
        let o = convert(&src, &out, &["--dtype", name, "--json"]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["dtype"], dtype.name());
        assert_eq!(report["tensors"], 22);
        let output = SafeTensors::open(&out).unwrap();
        assert_eq!(report["bytes"], fs::metadata(&out).unwrap().len());
        for t in input.tensors() {
            let o = output.tensor(t.name()).unwrap();
            if t.dtype().is_float() && t.dtype() != Dtype::C64 {
                let want = cast_tensor(
                    t.name(),
                    t.dtype(),
                    t.shape(),
                    t.data(),
                    dtype,
                    CastOptions::default(),
                )
                .unwrap();
                assert_eq!(
                    (o.dtype(), o.data()),
                    (dtype, &want[..]),
                    "{name} {}",
                    t.name()
                );
            } else {
                assert_eq!(
                    (o.dtype(), o.data()),
                    (t.dtype(), t.data()),
                    "{name} {}",
                    t.name()
                );
            }
        }
    }
}

#[test]
fn without_dtype_it_is_a_canonical_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    for name in [
        "valid/llama_two_layers_bf16.safetensors",
        "valid/every_dtype.safetensors",
        "quant/int4_g32_sym.safetensors",
    ] {
        let o = convert(&fixture(name), &out, &[]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert!(
            fs::read(&out).unwrap() == fs::read(fixture(name)).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn quantized_companions_keep_their_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    for (name, companions) in [
        ("quant/int4_g32_sym.safetensors", 2),
        ("mlx/affine_b4_g64.safetensors", 3),
        ("mlx/nvfp4_g16.safetensors", 2),
    ] {
        let o = convert(&fixture(name), &out, &["--dtype", "f16", "--json"]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let report: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["companions"], companions, "{name}");
        let (i, o) = (
            SafeTensors::open(fixture(name)).unwrap(),
            SafeTensors::open(&out).unwrap(),
        );
        for t in i.tensors() {
            let c = o.tensor(t.name()).unwrap();
            if t.name().ends_with(".scales")
                || t.name().ends_with(".biases")
                || t.name().ends_with("weight")
            {
                assert_eq!(
                    (c.dtype(), c.data()),
                    (t.dtype(), t.data()),
                    "{name} {}",
                    t.name()
                );
            } else {
                assert_eq!(c.dtype(), Dtype::F16, "{name} {}", t.name());
            }
        }
    }
}

#[test]
fn refusals_exit_1_and_leave_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.safetensors");
    let src = fixture("valid/minimal_bf16.safetensors");
    // An integer target without --allow-int is a usage error naming the flag.
    let o = convert(&src, &out, &["--dtype", "i8"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--allow-int"), "{err}");
    assert!(!out.exists());
    // A value that does not fit, found while writing: the old OUT survives.
    fs::write(&out, b"old").unwrap();
    let o = convert(&src, &out, &["--dtype", "I8", "--allow-int"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not fit I8"), "{}", stderr(&o));
    assert_eq!(fs::read(&out).unwrap(), b"old");
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
    // F6 packs four values per three bytes: 6-element tensors cannot.
    let o = convert(
        &fixture("valid/every_dtype.safetensors"),
        &out,
        &["--dtype", "f6_e2m3"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("6 elements of F6_E2M3 are not a whole number of bytes"),
        "{}",
        stderr(&o)
    );
    // An unreadable input.
    let o = convert(
        &fixture("invalid/does-not-exist.safetensors"),
        &out,
        &["--dtype", "bf16"],
    );
    assert_eq!(o.status.code(), Some(1));
    // A dtype that does not exist is a usage error.
    let o = convert(&src, &out, &["--dtype", "f12"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown dtype"));
}

#[test]
fn saturate_clamps_f8_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = [1.0f32, 1000.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let src = dir.path().join("in.safetensors");
    let w = tensorfile::TensorRef {
        name: "w",
        dtype: Dtype::F32,
        shape: &[2],
        data: &data,
    };
    tensorfile::save(&src, [w], None, &tensorfile::WriteOptions::default()).unwrap();
    let out = dir.path().join("out.safetensors");
    for (flags, want) in [
        (&["--dtype", "f8_e4m3"][..], [0x38, 0x7F]),
        (&["--dtype", "f8_e4m3", "--saturate"][..], [0x38, 0x7E]),
    ] {
        let o = convert(&src, &out, flags);
        assert!(o.status.success(), "{}", stderr(&o));
        let f = SafeTensors::open(&out).unwrap();
        assert_eq!(f.tensor("w").unwrap().data(), want);
    }
}

#[test]
fn pytorch_options_on_a_safetensors_file_are_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    let input = fixture("valid/minimal_bf16.safetensors");
    for flag in [&["--key", "model"][..], &["--keep-values"]] {
        let o = convert(&input, &out, flag);
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("applies only to PyTorch input"),
            "{}",
            stderr(&o)
        );
        assert!(!out.exists());
    }
    // An input that cannot be read is that error, whatever the options.
    let o = convert(&dir.path().join("missing.pt"), &out, &["--key", "model"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!stderr(&o).contains("applies only"), "{}", stderr(&o));
}
