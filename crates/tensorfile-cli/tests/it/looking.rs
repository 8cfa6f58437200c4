//! `diff` and `stats`: figures checked against values computed here, a
//! quantized weight against its own dequantization, exit statuses 0/1/2,
//! the same JSON on one thread as on two, and the plot as a valid SVG and
//! PNG with the expected series.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use tensorfile::{serialize, Dtype, Metadata, TensorRef};
use tensorfile_testkit::{fixtures, json, Rng};

fn run_env(env: &[(&str, &str)], args: &[&dyn AsRef<OsStr>]) -> Output {
    let bin = env!("CARGO_BIN_EXE_tensorfile");
    tensorfile_testkit::run_env(bin, env, args.iter().map(|a| a.as_ref()))
}

fn run(args: &[&dyn AsRef<OsStr>]) -> Output {
    run_env(&[], args)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes a file of F32 tensors.
fn write(path: &Path, tensors: &[(&str, Vec<u64>, Vec<f32>)], metadata: Option<&Metadata>) {
    let data: Vec<Vec<u8>> = tensors.iter().map(|(_, _, v)| f32_bytes(v)).collect();
    let refs: Vec<TensorRef> = tensors
        .iter()
        .zip(&data)
        .map(|((name, shape, _), d)| TensorRef {
            name,
            dtype: Dtype::F32,
            shape,
            data: d,
        })
        .collect();
    fs::write(path, serialize(refs, metadata).unwrap()).unwrap();
}

/// `n` values in [-0.05, 0.05), from `seed`.
fn pseudo(n: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed).noise(n).iter().map(|x| x * 0.05).collect()
}

/// The llama fixture quantized to int4 in `dir`, and that dequantized to
/// F32: the source, the quantized file and its dequantization.
fn int4_and_back(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let src = fixtures().join("real/hf/llama/model.safetensors");
    let q = dir.join("q.safetensors");
    let dq = dir.join("dq.safetensors");
    let o = run(&[&"quantize", &"--scheme", &"int4-g32-sym", &src, &q]);
    assert!(o.status.success(), "{}", tensorfile_testkit::stderr(&o));
    let o = run(&[&"dequantize", &"--dtype", &"f32", &q, &dq]);
    assert!(o.status.success(), "{}", tensorfile_testkit::stderr(&o));
    (src, q, dq)
}

#[test]
fn diff_of_a_file_with_itself_its_cast_and_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.safetensors");
    let w = pseudo(64 * 96, 1);
    write(
        &a,
        &[
            ("w", vec![64, 96], w.clone()),
            ("b", vec![96], pseudo(96, 2)),
        ],
        None,
    );
    // Itself: same, exit 0, with or without --exact.
    for exact in [false, true] {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"diff", &"--json", &a, &a];
        if exact {
            args.push(&"--exact");
        }
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0));
        assert_eq!(json(&o)["verdict"], "same");
    }
    // Its BF16 cast: within BF16's tolerance; --exact says it differs.
    let bf = dir.path().join("bf.safetensors");
    assert!(run(&[&"convert", &"--dtype", &"bf16", &a, &bf])
        .status
        .success());
    let o = run(&[&"diff", &"--json", &a, &bf]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v = json(&o);
    assert_eq!(v["verdict"], "within");
    let t = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "w")
        .unwrap();
    assert_eq!(t["rtol"], 2f64.powi(-7));
    assert_eq!(
        (t["a"].as_str(), t["b"].as_str()),
        (Some("F32"), Some("BF16"))
    );
    assert!(t["max_rel_diff"].as_f64().unwrap() <= 2f64.powi(-8));
    assert!(t["cosine"].as_f64().unwrap() > 0.9999);
    // --exact fails it, and its verdict (text and JSON) says `differs`.
    let o = run(&[&"diff", &"--exact", &"--json", &a, &bf]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json(&o)["verdict"], "differs");
    let o = run(&[&"diff", &"--exact", &a, &bf]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.trim_end().ends_with("differs"), "{text}");

    // One element changed: beyond, at its index, exit 1; figures as
    // computed here.
    let mut w2 = w.clone();
    w2[5 * 96 + 7] += 0.25;
    w2[100] = f32::NAN;
    let c = dir.path().join("c.safetensors");
    write(
        &c,
        &[
            ("w", vec![64, 96], w2.clone()),
            ("b", vec![96], pseudo(96, 2)),
        ],
        None,
    );
    let o = run(&[&"diff", &"--json", &a, &c]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["verdict"], "differs");
    let t = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "w")
        .unwrap();
    assert_eq!(t["max_abs_index"], 5 * 96 + 7);
    assert_eq!(t["max_abs_at"], serde_json::json!([5, 7]));
    assert_eq!(t["beyond"], 2);
    assert_eq!(t["nan_only_b"], 1);
    let d = (f64::from(w2[5 * 96 + 7]) - f64::from(w[5 * 96 + 7])).abs();
    assert_eq!(t["max_abs_diff"].as_f64().unwrap(), d);
    let finite = (w.len() - 1) as f64;
    assert!((t["mean_abs_diff"].as_f64().unwrap() - d / finite).abs() < 1e-15);
    assert!((t["rms"].as_f64().unwrap() - (d * d / finite).sqrt()).abs() < 1e-12);
    assert_eq!(v["total"]["values_beyond"], 2);
    // A looser tolerance takes the change in, not the NaN.
    let o = run(&[&"diff", &"--json", &"--atol", &"1", &a, &c]);
    let t = &json(&o)["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "w")
        .unwrap()
        .clone();
    assert_eq!(t["beyond"], 1);
    // The text table: worst first, a total and the verdict.
    let o = run(&[&"diff", &a, &c]);
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("tensor"), "{text}");
    assert!(lines[1].starts_with("w "), "{text}");
    assert!(
        text.contains("total: 2 tensors compared, 1 identical"),
        "{text}"
    );
    assert!(lines.last().unwrap().ends_with("differs"));
}

#[test]
fn diff_names_moves_metadata_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        dir.path().join("a.safetensors"),
        dir.path().join("b.safetensors"),
    );
    let mut ma = Metadata::new();
    ma.insert("k".into(), "1".into());
    ma.insert("gone".into(), "x".into());
    let mut mb = Metadata::new();
    mb.insert("k".into(), "2".into());
    write(
        &a,
        &[
            ("x", vec![2], vec![1.0, 2.0]),
            ("moved", vec![3], vec![1.0, 2.0, 3.0]),
            ("only_a", vec![1], vec![9.0]),
            ("shape", vec![2], vec![1.0, 2.0]),
        ],
        Some(&ma),
    );
    write(
        &b,
        &[
            ("x", vec![2], vec![1.0, 2.0]),
            ("elsewhere", vec![3], vec![1.0, 2.0, 3.0]),
            ("shape", vec![1, 2], vec![1.0, 2.0]),
        ],
        Some(&mb),
    );
    let o = run(&[&"diff", &"--json", &a, &b]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["only_in_a"], serde_json::json!(["moved", "only_a"]));
    assert_eq!(v["only_in_b"], serde_json::json!(["elsewhere"]));
    assert_eq!(
        v["renamed"],
        serde_json::json!([{"a": "moved", "b": "elsewhere"}])
    );
    assert_eq!(
        v["metadata"]["changed"],
        serde_json::json!([{"key": "k", "a": "1", "b": "2"}])
    );
    assert_eq!(v["metadata"]["only_in_a"][0]["key"], "gone");
    let shape = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "shape")
        .unwrap();
    assert_eq!(shape["shape_b"], serde_json::json!([1, 2]));
    assert!(shape.get("max_abs_diff").is_none());
    // Unreadable and invalid inputs, usage errors: exit 2, JSON says error.
    let missing = dir.path().join("missing.safetensors");
    let o = run(&[&"diff", &"--json", &a, &missing]);
    assert_eq!(o.status.code(), Some(2));
    let v = json(&o);
    assert_eq!(v["verdict"], "error");
    assert!(v["file"].as_str().unwrap().ends_with("missing.safetensors"));
    let o = run(&[&"diff", &a, &missing]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.safetensors"));
    let bad = dir.path().join("bad.safetensors");
    fs::write(&bad, b"\x05\0\0\0\0\0\0\0{}").unwrap();
    assert_eq!(run(&[&"diff", &a, &bad]).status.code(), Some(2));
    assert_eq!(
        run(&[&"diff", &"--atol", &"-1", &a, &b]).status.code(),
        Some(2)
    );
    assert_eq!(run(&[&"diff", &a]).status.code(), Some(2));
}

#[test]
fn a_quantized_model_compares_by_its_dequantized_values() {
    let dir = tempfile::tempdir().unwrap();
    // int4: diff against the quantized file equals diff against its
    // dequantization, figure for figure.
    let (src, q, dq) = int4_and_back(dir.path());
    // MLX (mlx-lm's own 4-bit conversion) and its dequantization.
    let mlx_a = fixtures().join("real/mlx_lm/llama_bf16");
    let mlx_q = fixtures().join("real/mlx_lm/llama_q4");
    let mlx_dq = dir.path().join("mlx_dq");
    let o = run(&[&"dequantize", &"--dtype", &"f32", &mlx_q, &mlx_dq]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for (a, quantized, dequantized, scheme) in [
        (src.clone(), q, dq, "int4-g32-sym"),
        (mlx_a, mlx_q, mlx_dq, "mlx affine"),
    ] {
        let vq = json(&run(&[&"diff", &"--json", &a, &quantized]));
        let vd = json(&run(&[&"diff", &"--json", &a, &dequantized]));
        assert_eq!(
            vq["only_in_b"],
            serde_json::json!([]),
            "{scheme}: scales are parts"
        );
        let quantized_pairs: Vec<&Value> = vq["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["b"].as_str().unwrap().starts_with(scheme))
            .collect();
        assert!(quantized_pairs.len() >= 7, "{scheme}: {vq}");
        for t in quantized_pairs {
            let d = vd["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["name"] == t["name"])
                .unwrap();
            for k in [
                "max_abs_diff",
                "max_abs_index",
                "mean_abs_diff",
                "rms",
                "cosine",
            ] {
                assert_eq!(t[k], d[k], "{scheme} {}: {k}", t["name"]);
            }
            assert!(t["max_abs_diff"].as_f64().unwrap() > 0.0);
        }
    }
}

#[test]
fn a_checkpoint_against_its_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = fixtures().join("pytorch/zip_simple.pt");
    let st = dir.path().join("s.safetensors");
    assert!(run(&[&"convert", &ckpt, &st]).status.success());
    let o = run(&[&"diff", &"--json", &ckpt, &st]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json(&o);
    assert!(v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["identical"] == true));
    // And stats reads the checkpoint.
    let o = run(&[&"stats", &"--json", &ckpt]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = json(&run(&[&"stats", &"--json", &st]));
    let by_name = |v: &Value| -> std::collections::BTreeMap<String, Value> {
        v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_string(), t.clone()))
            .collect()
    };
    assert_eq!(by_name(&json(&o)), by_name(&s));
}

#[test]
fn stats_figures_groups_outliers_and_threads() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.safetensors");
    let mut special = vec![1.0f32, -2.0, 0.0, -0.0, f32::NAN, f32::INFINITY, 1e-40, 3.0];
    special.extend(std::iter::repeat_n(0.5, 8));
    // Two layers of one group; layer 1 has an outlier; one tensor big
    // enough for several tasks.
    let mut l1 = pseudo(4096, 3);
    l1[77] = 5.0;
    let big = pseudo(1 << 21, 4);
    write(
        &f,
        &[
            ("model.layers.0.mlp.w", vec![64, 64], pseudo(4096, 5)),
            ("model.layers.1.mlp.w", vec![64, 64], l1),
            ("special", vec![16], special.clone()),
            ("big", vec![1 << 21], big.clone()),
        ],
        None,
    );
    let o = run(&[&"stats", &"--json", &f]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    let t = |name: &str| {
        v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()
            .clone()
    };
    let s = t("special");
    let finite: Vec<f64> = special
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| f64::from(x))
        .collect();
    let mean = finite.iter().sum::<f64>() / finite.len() as f64;
    let std = (finite.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / finite.len() as f64).sqrt();
    assert_eq!(s["min"], -2.0);
    assert_eq!(s["max"], 3.0);
    assert!((s["mean"].as_f64().unwrap() - mean).abs() < 1e-15);
    assert!((s["std"].as_f64().unwrap() - std).abs() < 1e-15);
    assert_eq!(
        (
            &s["zeros"],
            &s["nan"],
            &s["inf"],
            &s["subnormal"],
            &s["finite"]
        ),
        (&2.into(), &1.into(), &1.into(), &1.into(), &14.into())
    );
    let counts: u64 = s["histogram"]["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(counts, 14);
    // The group and the outlier.
    assert_eq!(v["groups"][0]["pattern"], "model.layers.*.mlp.w");
    assert_eq!(v["groups"][0]["layers"][1]["absmax"], 5.0);
    let outliers = v["outliers"].as_array().unwrap();
    assert_eq!(outliers[0]["name"], "model.layers.1.mlp.w");
    assert_eq!(outliers[0]["elements"][0]["at"], serde_json::json!([1, 13]));
    // The same figures on one thread as on two.
    let one = run_env(&[("TENSORFILE_THREADS", "1")], &[&"stats", &"--json", &f]);
    let two = run_env(&[("TENSORFILE_THREADS", "2")], &[&"stats", &"--json", &f]);
    assert_eq!(one.stdout, two.stdout);
    assert_eq!(json(&one), v);
    let b = t("big");
    let mean: f64 = big.iter().map(|&x| f64::from(x)).sum::<f64>() / big.len() as f64;
    assert!((b["mean"].as_f64().unwrap() - mean).abs() < 1e-12);
    // --include, and a pattern that matches nothing.
    let o = run(&[&"stats", &"--json", &"--include", &"model.*", &f]);
    assert_eq!(json(&o)["tensors"].as_array().unwrap().len(), 2);
    assert_eq!(
        run(&[&"stats", &"--include", &"nothing", &f]).status.code(),
        Some(1)
    );
    // The text: a histogram per row with --bars, the outlier called out.
    let o = run(&[&"stats", &"--bars", &f]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.lines().nth(1).unwrap().contains('█'), "{text}");
    assert!(text.contains("outliers"), "{text}");
    assert!(text.contains("[1, 13] = 5.0000"), "{text}");
}

#[test]
fn stats_of_a_quantized_file_are_those_of_its_dequantization() {
    let dir = tempfile::tempdir().unwrap();
    let (_, q, dq) = int4_and_back(dir.path());
    let (vq, vd) = (
        json(&run(&[&"stats", &"--json", &q])),
        json(&run(&[&"stats", &"--json", &dq])),
    );
    let names = |v: &Value| -> Vec<String> {
        let mut n: Vec<String> = v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&vq), names(&vd));
    for t in vq["tensors"].as_array().unwrap() {
        let d = vd["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == t["name"])
            .unwrap();
        for k in ["min", "max", "mean", "std", "zeros", "histogram"] {
            assert_eq!(t[k], d[k], "{}: {k}", t["name"]);
        }
    }
}

#[cfg(not(feature = "plot"))]
#[test]
fn without_the_plot_feature_plot_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixtures().join("real/hf/llama");
    let svg = dir.path().join("p.svg");
    let o = run(&[&"stats", &"--plot", &svg, &model]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("built without the plot feature"), "{err}");
    assert!(!svg.exists());
    // Without --plot, stats still runs.
    assert!(run(&[&"stats", &model]).status.success());
}

#[cfg(feature = "plot")]
#[test]
fn the_plot_is_a_valid_svg_and_png_with_the_expected_series() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixtures().join("real/hf/llama");
    let svg = dir.path().join("p.svg");
    let o = run(&[&"stats", &"--plot", &svg, &model]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    let groups = json(&run(&[&"stats", &"--json", &model]))["groups"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(groups, 9);
    // One curve per group in its own color (absmax), with its legend
    // entry, and one for its std (none for the norms, whose std is 0: no
    // point on a log scale); one histogram panel per group, then the
    // ungrouped tensors, up to 12.
    let colors = [
        "#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F",
        "#BCBD22",
    ];
    let mut curves = 0;
    for c in colors {
        let n = text
            .split("<polyline")
            .skip(1)
            .filter(|p| {
                p.split('>')
                    .next()
                    .unwrap()
                    .contains(&format!("stroke=\"{c}\""))
            })
            .count();
        assert!(n == 2 || n == 3, "{c}: {n}");
        curves += n;
    }
    assert_eq!(curves, 3 * groups - 2);
    // The norms are constant: one bar; down_proj is spread over 48 at most.
    assert_eq!(text.matches("fill=\"#1F77B4\"").count(), 1);
    let bars = text.matches("fill=\"#FF7F0E\"").count();
    assert!((24..=48).contains(&bars), "{bars}");
    for pattern in [
        "model.layers.*.mlp.down_proj.weight",
        "model.layers.*.self_attn.q_proj.weight",
        "lm_head.weight",
    ] {
        assert!(text.contains(pattern), "{pattern}");
    }
    let png = dir.path().join("p.png");
    assert!(run(&[&"stats", &"--plot", &png, &model]).status.success());
    let decoder = png::Decoder::new(fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.width, 1200);
    assert_eq!(info.height, 420 + 4 * 220);
    // The first series' color is drawn.
    let rgba = info.color_type == png::ColorType::Rgba;
    assert!(rgba);
    let first = buf.chunks(4).filter(|p| p[..3] == [31, 119, 180]).count();
    assert!(first > 1000, "{first}");
}
