//! The command as a newcomer meets it (issue 29's "the CLI's words" and
//! "the pictures"): help written for each command, files that are not
//! safetensors named for what they look like, counts with a human form,
//! plurals, paths as given, `verify DIR` asking for a manifest, a URL named
//! once, columns that line up, and a `stats --plot` picture that can be
//! read. (The progress bar's rate, shown only on a terminal, is tested by
//! the unit test of its formatting, `progress::tests::rates_are_rounded`.)

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::process::Output;

use serde_json::Value;
use tensorfile_testkit::serve::Server;
use tensorfile_testkit::{fixture, json, stderr, stdout};

const BIN: &str = env!("CARGO_BIN_EXE_tensorfile");

fn run<S: AsRef<OsStr>>(args: &[S]) -> Output {
    tensorfile_testkit::run(BIN, args)
}

/// The keys of a JSON object.
fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// The keys a help text lists after `lead` (`A file's keys:`), up to the
/// sentence's end: `a, b (in data order), c.` gives a, b, c.
fn listed_keys(help: &str, lead: &str) -> BTreeSet<String> {
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = flat
        .find(lead)
        .unwrap_or_else(|| panic!("{lead:?} in {flat}"))
        + lead.len();
    let sentence = &flat[start..];
    let end = sentence
        .find(". ")
        .unwrap_or(sentence.trim_end_matches('.').len());
    sentence[..end]
        .split(',')
        .map(|k| k.split(" (").next().unwrap().trim().to_string())
        .collect()
}

#[test]
fn help_texts_are_written_for_each_command() {
    let help = stdout(&run(&["--help"]));
    let about: String = help.lines().take_while(|l| !l.is_empty()).collect();
    for does in [
        "validate", "inspect", "convert", "quantize", "shard", "merge", "diff", "stats", "hash",
        "verify", "fetch",
    ] {
        assert!(about.contains(does), "{does}: {about}");
    }
    assert!(!help.contains("validate, inspect and rewrite"), "{help}");
    // Every line of the top of the help and of the command listing fits
    // 80 columns.
    let listing = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .take_while(|l| !l.is_empty());
    for line in help.lines().take_while(|l| !l.is_empty()).chain(listing) {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }

    // inspect --help lists the keys --json prints, for each kind of input.
    let help = stdout(&run(&["inspect", "--help"]));
    let file = json(&run(&[
        "inspect",
        "--json",
        fixture("valid/minimal_bf16.safetensors").to_str().unwrap(),
    ]));
    let set = json(&run(&[
        "inspect",
        "--json",
        fixture("models/bigram").to_str().unwrap(),
    ]));
    let checkpoint = json(&run(&[
        "inspect",
        "--json",
        fixture("pytorch/legacy_simple.pt").to_str().unwrap(),
    ]));
    assert_eq!(listed_keys(&help, "A file's keys:"), keys(&file));
    assert_eq!(listed_keys(&help, "A set's keys:"), keys(&set));
    assert_eq!(
        listed_keys(&help, "A PyTorch checkpoint's keys:"),
        keys(&checkpoint)
    );
    assert!(!keys(&file).contains("totals"));

    // convert, quantize and dequantize: IN and OUT said for each command.
    let arguments = |command: &str| -> (String, String) {
        let help = stdout(&run(&[command, "--help"]));
        let summary = help.lines().next().unwrap().to_string();
        let args: String = help
            .split("Arguments:")
            .nth(1)
            .unwrap()
            .split("Options:")
            .next()
            .unwrap()
            .to_string();
        (summary, args)
    };
    let (convert, convert_args) = arguments("convert");
    let (_, quantize_args) = arguments("quantize");
    let (_, dequantize_args) = arguments("dequantize");
    for format in ["PyTorch", "safetensors", "GGUF", "numpy"] {
        assert!(convert.contains(format), "{convert}");
    }
    for named in ["OUT.safetensors", "OUT.gguf", "OUT.npz", ".pt", "directory"] {
        assert!(convert_args.contains(named), "{named}: {convert_args}");
    }
    assert!(
        quantize_args.contains("weights to quantize"),
        "{quantize_args}"
    );
    assert!(
        dequantize_args.contains("quantized weights"),
        "{dequantize_args}"
    );
    let shared = "The file to read";
    for args in [&convert_args, &quantize_args, &dequantize_args] {
        assert!(!args.contains(shared), "{args}");
    }
}

#[test]
fn a_file_that_is_not_safetensors_is_named_for_what_it_looks_like() {
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("x.png");
    fs::write(
        &png,
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x02",
    )
    .unwrap();
    let text = dir.path().join("notes.txt");
    fs::write(&text, "weights, to be downloaded later\n").unwrap();
    let p = png.to_str().unwrap();
    let hint = "; this looks like a PNG image, not a safetensors file";

    let o = run(&["validate", p]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        format!(
            "{p}: invalid: rule 1: the header length is 727905341920923785 bytes, over the \
             limit of 100000000{hint}\n"
        )
    );
    let o = run(&["validate", text.to_str().unwrap()]);
    assert!(
        stdout(&o).ends_with("; this looks like plain text, not a safetensors file\n"),
        "{}",
        stdout(&o)
    );
    // Every command that opens a safetensors file says it, on stderr or in
    // its JSON error.
    for args in [
        vec!["inspect", p],
        vec!["stats", p],
        vec!["hash", "--per-tensor", p],
        vec!["rewrite", p, "out.safetensors"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&o).trim_end().ends_with(hint),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let valid = fixture("valid/minimal_bf16.safetensors");
    let o = run(&["diff", valid.to_str().unwrap(), p]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).trim_end().ends_with(hint), "{}", stderr(&o));
    for command in ["validate", "inspect"] {
        let v = json(&run(&[command, "--json", p]));
        assert_eq!(v["rule"], 1, "{command}");
        assert!(
            v["error"].as_str().unwrap().ends_with(hint),
            "{command}: {v}"
        );
    }
}

#[test]
fn counts_have_a_human_form_beside_them() {
    let file = fixture("valid/tricky_names.safetensors");
    let o = run(&["inspect", file.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(
        text.contains("\nsize: 1216 bytes (1.2 KiB); header 1136 bytes (1.1 KiB), data 72 bytes\n"),
        "{text}"
    );
    let model = fixture("models/llama_tiny");
    let text = stdout(&run(&["inspect", model.to_str().unwrap()]));
    let parameters = json(&run(&["inspect", "--json", model.to_str().unwrap()]))["totals"]
        ["parameters"]
        .as_u64()
        .unwrap();
    assert!(parameters >= 1000);
    let short = format!("{parameters} (");
    assert!(
        text.contains(&short) && text.contains("K) parameters"),
        "{text}"
    );
    let o = run(&["validate", model.to_str().unwrap()]);
    assert!(stdout(&o).contains(" KiB) of data)"), "{}", stdout(&o));

    // diff counts values; fetch, bytes.
    let dir = tempfile::tempdir().unwrap();
    let b16 = dir.path().join("b16.safetensors");
    let bigram = fixture("models/bigram/model.safetensors");
    let o = run(&[
        OsStr::new("convert"),
        bigram.as_os_str(),
        b16.as_os_str(),
        OsStr::new("--dtype"),
        OsStr::new("bf16"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).ends_with(", 2168 bytes (2.1 KiB)\n"),
        "{}",
        stdout(&o)
    );
    let o = run(&[OsStr::new("diff"), bigram.as_os_str(), b16.as_os_str()]);
    assert!(
        stdout(&o).contains(" of 1024 (1K) values beyond"),
        "{}",
        stdout(&o)
    );
    let server = Server::start().unwrap();
    server.put("/m/model.safetensors", fs::read(&bigram).unwrap());
    let url = format!("{}/m/model.safetensors", server.url());
    let copy = dir.path().join("copy.safetensors");
    let o = run(&[OsStr::new("fetch"), OsStr::new(&url), copy.as_os_str()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("fetched 4216 bytes (4.1 KiB)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn plurals_are_right() {
    let dir = tempfile::tempdir().unwrap();
    // One tensor, one metadata key, its digest embedded.
    let one = dir.path().join("one.safetensors");
    let minimal = fixture("valid/minimal_bf16.safetensors");
    let o = run(&[
        OsStr::new("convert"),
        minimal.as_os_str(),
        one.as_os_str(),
        OsStr::new("--embed-hash"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let single = dir.path().join("single.safetensors");
    let header =
        r#"{"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    tensorfile_testkit::sparse_file(&single, header, 4);
    let o = run(&[
        OsStr::new("rewrite"),
        single.as_os_str(),
        single.as_os_str(),
        OsStr::new("--embed-hash"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(": 1 tensor, "), "{}", stdout(&o));
    let text = stdout(&run(&[OsStr::new("inspect"), single.as_os_str()]));
    assert!(text.contains("\nmetadata: 2 keys\n"), "{text}");
    assert!(text.contains("  F32  1 tensor  4 bytes\n"), "{text}");
    assert!(
        text.contains("0 of 1 tensor misaligned for its dtype"),
        "{text}"
    );
    let text = stdout(&run(&[OsStr::new("verify"), single.as_os_str()]));
    assert!(text.contains("ok (1 tensor checked, "), "{text}");
    let set = dir.path().join("set");
    let o = run(&[OsStr::new("shard"), single.as_os_str(), set.as_os_str()]);
    assert_eq!(
        stdout(&o).lines().last(),
        Some("1 shard, 1 tensor, 4 bytes of data")
    );
    let o = run(&[OsStr::new("validate"), set.as_os_str()]);
    assert!(
        stdout(&o).ends_with(": ok (1 shard, 1 tensor, 4 bytes of data)\n"),
        "{}",
        stdout(&o)
    );
    let o = run(&[OsStr::new("check"), fixture("models/bigram").as_os_str()]);
    assert!(
        stdout(&o).contains("; 0 errors, 0 warnings)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn paths_are_named_as_given() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("x.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    // A set whose second shard is broken, opened by its index's bare name.
    let set = fixture("real/sharded/unet_sharded_safetensors");
    for e in fs::read_dir(&set).unwrap() {
        let e = e.unwrap();
        fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
    }
    let broken = "diffusion_pytorch_model-00002-of-00004.safetensors";
    fs::write(dir.path().join(broken), b"not a shard at all").unwrap();
    let index = "diffusion_pytorch_model.safetensors.index.json";
    for (args, named) in [
        (vec!["stats", "x.png"], "x.png"),
        (vec!["convert", "x.png", "y.safetensors"], "x.png"),
        (vec!["diff", "x.png", "x.png"], "x.png"),
        (
            vec!["inspect", "missing.safetensors"],
            "missing.safetensors",
        ),
        (vec!["stats", index], broken),
    ] {
        let o = tensorfile_testkit::run_in(BIN, dir.path(), &args);
        let err = stderr(&o);
        assert!(
            err.starts_with(&format!("tensorfile: {named}: "))
                || err.contains(&format!(": {named}: ")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("./"), "{args:?}: {err}");
    }
}

#[test]
fn verify_of_a_directory_asks_for_a_manifest() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    let d = dir.path().to_str().unwrap();
    for args in [vec!["verify", d], vec!["verify", "--json", d]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.contains("--manifest FILE") && err.contains("hash --write-manifest"),
            "{err}"
        );
        assert!(!err.contains("holding no model weights"), "{err}");
    }
}

#[test]
fn validate_of_a_url_names_it_once() {
    let server = Server::start().unwrap();
    server.put("/x/x.png", &b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..]);
    for url in [
        "https://127.0.0.1:1/x.safetensors".to_string(),
        format!("{}/x/missing.safetensors", server.url()),
        format!("{}/x/x.png", server.url()),
    ] {
        let o = run(&["validate", "--timeout", "5", &url]);
        assert_eq!(o.status.code(), Some(1), "{url}");
        let text = stdout(&o);
        assert!(text.starts_with(&format!("{url}: invalid: ")), "{text}");
        assert_eq!(text.matches(&url).count(), 1, "{text}");
        let v = json(&run(&["validate", "--json", "--timeout", "5", &url]));
        assert!(!v["error"].as_str().unwrap().contains(&url), "{v}");
    }
}

#[test]
fn columns_line_up() {
    // MLX weights: long names, tensors of several dtypes, quantized weights
    // of several bits and shapes.
    let model = fixture("mlx/mlx_mixed_model");
    let text = stdout(&run(&["inspect", model.to_str().unwrap()]));
    let section = |heading: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.starts_with(heading))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(String::from)
            .collect()
    };
    // Where each column starts (after two spaces or more): the same in
    // every row of a table whose columns are all text.
    let starts = |line: &str| -> Vec<usize> {
        let chars: Vec<char> = line.chars().collect();
        (2..chars.len())
            .filter(|&i| chars[i] != ' ' && chars[i - 1] == ' ' && chars[i - 2] == ' ')
            .collect()
    };
    let tensors = section("tensors:");
    assert_eq!(tensors.len(), 15, "{text}");
    for row in &tensors {
        assert_eq!(starts(row), starts(&tensors[0]), "\n{}", tensors.join("\n"));
    }
    // Figures are right-aligned: the words after them line up.
    let dtypes = section("dtypes:");
    let at: BTreeSet<usize> = dtypes.iter().map(|r| r.find(" tensor").unwrap()).collect();
    assert_eq!(at.len(), 1, "\n{}", dtypes.join("\n"));
    let rows = section("quantized weights:");
    assert_eq!(rows.len(), 4, "{text}");
    for column in ["-bit", "groups of", "logical shape", " bits/weight"] {
        let at: BTreeSet<usize> = rows.iter().map(|r| r.find(column).unwrap()).collect();
        assert_eq!(at.len(), 1, "{column}:\n{}", rows.join("\n"));
    }

    // Names with characters escaped and names longer than 60: measured as
    // printed.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("names.safetensors");
    let long = "model.layers.0.block_sparse_moe.experts.7.feed_forward.w3.weight_scale_inv";
    let header = format!(
        r#"{{"a\u001bb":{{"dtype":"F32","shape":[1],"data_offsets":[0,4]}},"{long}":{{"dtype":"BF16","shape":[2,3],"data_offsets":[4,16]}},"c":{{"dtype":"U8","shape":[4],"data_offsets":[16,20]}}}}"#
    );
    tensorfile_testkit::sparse_file(&file, &header, 20);
    let text = stdout(&run(&["inspect", file.to_str().unwrap()]));
    assert!(!text.contains('\u{1b}'), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("tensors:"))
        .skip(1)
        .take(4)
        .collect();
    for row in &rows {
        assert_eq!(starts(row), starts(rows[0]), "\n{}", rows.join("\n"));
    }
    assert!(text.contains("a\\u001bb"), "{text}");

    // stats' layer groups.
    let text = stdout(&run(&[
        "stats",
        fixture("real/mlx_lm/llama_q4").to_str().unwrap(),
    ]));
    let groups: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("layer groups"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(groups.len() > 3, "{text}");
    for word in [" layers ", "absmax", "(largest", "std ", "mean "] {
        let at: BTreeSet<usize> = groups.iter().map(|g| g.find(word).unwrap()).collect();
        assert_eq!(at.len(), 1, "{word}:\n{}", groups.join("\n"));
    }
}

#[cfg(feature = "plot")]
#[test]
fn stats_plot_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("p.svg");
    let model = fixture("real/hf/llama");
    let o = run(&[
        OsStr::new("stats"),
        OsStr::new("--plot"),
        svg.as_os_str(),
        model.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = fs::read_to_string(&svg).unwrap();
    let width: f64 = attr(&text, "<svg", "width").unwrap();
    let (mut curves_right, mut legend_left) = (0f64, f64::INFINITY);
    let (mut histogram_right, mut ticks) = (0f64, Vec::new());
    for element in text.split('<').skip(1) {
        let tag = element.split('>').next().unwrap();
        let body = element.split('>').nth(1).unwrap_or_default().trim();
        if tag.starts_with("polyline") && !tag.contains("#000000") {
            // A data curve; a legend's mark is a 20-pixel stroke.
            let points: Vec<(f64, f64)> = attr_text(tag, "points")
                .unwrap()
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            let xs = points.iter().map(|p| p.0);
            let span = xs.clone().fold(f64::MIN, f64::max) - xs.fold(f64::MAX, f64::min);
            if span > 20.0 && points.iter().all(|p| p.1 < 420.0) {
                curves_right = points.iter().map(|p| p.0).fold(curves_right, f64::max);
            }
        }
        if tag.starts_with("rect") && !tag.contains("#FFFFFF") {
            let right = attr::<f64>(tag, "", "x").unwrap() + attr::<f64>(tag, "", "width").unwrap();
            histogram_right = histogram_right.max(right);
        }
        if tag.starts_with("text") {
            let x: f64 = attr(tag, "", "x").unwrap();
            let y: f64 = attr(tag, "", "y").unwrap();
            if body.starts_with("model.layers.") && y < 420.0 && x > width / 2.0 {
                legend_left = legend_left.min(x);
            }
            if tag.contains("text-anchor=\"end\"") && y < 420.0 && body.parse::<f64>().is_ok() {
                ticks.push(body.to_string());
            }
        }
    }
    // The histograms end inside the picture, with room for the last label.
    assert!(
        histogram_right > 0.0 && histogram_right <= width - 16.0,
        "{histogram_right}"
    );
    // The legend stands right of every curve.
    assert!(
        curves_right > 0.0 && legend_left > curves_right,
        "{legend_left} {curves_right}"
    );
    // The log axis: labelled decades and more, round values.
    assert!(ticks.len() >= 3, "{ticks:?}");
    assert!(
        ticks.contains(&"0.1".to_string()) && ticks.contains(&"1".to_string()),
        "{ticks:?}"
    );
    assert!(ticks.iter().all(|t| t.len() <= 5), "{ticks:?}");
}

/// The value of attribute `name` in `tag` (after `lead`, the tag's start).
fn attr<T: std::str::FromStr>(tag: &str, lead: &str, name: &str) -> Option<T> {
    let tag = &tag[tag.find(lead)?..];
    attr_text(tag, name)?.parse().ok()
}

/// The text of attribute `name` in `tag`.
fn attr_text<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    tag[start..].split('"').next()
}
