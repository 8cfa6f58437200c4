//! What the command line tells a user: untrusted text escaped, errors that
//! name the file (as JSON with `--json`), casts that say what they lost.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

fn tensorfile(args: &[&str]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A safetensors file of F32 tensors, written by hand (names as given).
fn write_f32(path: &Path, tensors: &[(&str, &[f32])]) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, values) in tensors {
        let start = data.len();
        for v in *values {
            data.extend_from_slice(&v.to_le_bytes());
        }
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": "F32", "shape": [values.len()], "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&Value::Object(header)).unwrap();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

const HOSTILE: &str = "w\u{1b}[2J\u{1b}]0;owned\u{7}\nline\u{202e}";

#[test]
fn names_with_control_characters_reach_the_terminal_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostile.safetensors");
    write_f32(&file, &[(HOSTILE, &[1.0]), ("ok", &[2.0])]);
    let o = tensorfile(&["inspect", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
    assert!(
        out.contains("w\\u001b[2J\\u001b]0;owned\\u0007\\u000aline\\u202e"),
        "{out}"
    );
    // One line per tensor: the newline in the name does not break the table.
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("F32 ") && l.ends_with(')'))
            .count(),
        2,
        "{out}"
    );
    // JSON stays valid and gives the name back exactly.
    let o = tensorfile(&["inspect", "--json", file.to_str().unwrap()]);
    let out = text(&o.stdout);
    assert!(!out.chars().any(|c| c.is_control() && c != '\n'));
    let v: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&HOSTILE), "{names:?}");
}

#[test]
fn with_json_an_error_is_an_object_on_stdout() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let bad = fixtures.join("invalid/f4_odd_count.safetensors");
    let bad = bad.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("o.safetensors");
    let o_str = out_file.to_str().unwrap();
    for args in [
        vec!["inspect", "--json", bad],
        vec!["rewrite", "--json", bad, o_str],
        vec!["convert", "--json", "--dtype", "bf16", bad, o_str],
        vec!["quantize", "--json", "--scheme", "int4-g32-sym", bad, o_str],
    ] {
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o.stderr));
        let v: Value = serde_json::from_str(&text(&o.stdout)).unwrap();
        assert_eq!(v["file"], bad, "{args:?}");
        assert_eq!(v["rule"], 4, "{args:?}");
        assert!(v["error"].as_str().unwrap().contains("rule 4"), "{v}");
        assert!(!out_file.exists());
    }
    // Without --json: one line on stderr naming the file.
    let o = tensorfile(&["convert", "--dtype", "bf16", bad, o_str]);
    let err = text(&o.stderr);
    assert!(
        err.starts_with(&format!("tensorfile: {bad}: rule 4")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn an_integer_target_names_the_flag_that_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.safetensors");
    write_f32(&file, &[("a", &[1.0, 2.0])]);
    let out = dir.path().join("b.safetensors");
    let o = tensorfile(&[
        "convert",
        "--dtype",
        "i8",
        file.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert!(
        err.contains("--allow-int") && !err.contains("allow_int"),
        "{err}"
    );
    let o = tensorfile(&[
        "convert",
        "--dtype",
        "i8",
        "--allow-int",
        file.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn a_cast_reports_what_it_lost_and_strict_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.safetensors");
    let values: &[f32] = &[1e6, -1e6, 1e-9, 1.0, f32::INFINITY, 65519.0, 65520.0];
    write_f32(&file, &[("big", values), ("fine", &[1.0, 0.5])]);
    let input = file.to_str().unwrap();
    let out = dir.path().join("b.safetensors");
    let output = out.to_str().unwrap();

    let o = tensorfile(&["convert", "--dtype", "f16", input, output]);
    assert_eq!(o.status.code(), Some(0));
    let err = text(&o.stderr);
    // 1e6, -1e6 and 65520 overflow (65519 rounds to 65504); infinity stays.
    assert_eq!(
        err.trim_end(),
        format!("tensorfile: warning: {output}: tensor \"big\": 3 overflowed to inf, 1 flushed to zero (--strict refuses this)")
    );

    let o = tensorfile(&["convert", "--json", "--dtype", "f8_e4m3", input, output]);
    let v: Value = serde_json::from_str(&text(&o.stdout)).unwrap();
    // F8_E4M3 has no infinity: overflow and infinity become NaN; 1e-9 flushes.
    assert_eq!(
        v["losses"],
        serde_json::json!({"big": {"to_inf": 0, "to_nan": 5, "saturated": 0, "flushed": 1}})
    );
    let o = tensorfile(&[
        "convert",
        "--json",
        "--saturate",
        "--dtype",
        "f8_e4m3",
        input,
        output,
    ]);
    let v: Value = serde_json::from_str(&text(&o.stdout)).unwrap();
    assert_eq!(v["losses"]["big"]["saturated"], 5);
    assert_eq!(v["losses"]["fine"], Value::Null);

    std::fs::remove_file(&out).unwrap();
    let o = tensorfile(&["convert", "--strict", "--dtype", "f16", input, output]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.starts_with(&format!("tensorfile: {input}: tensor \"big\": element 0: F32 value 1000000 overflows to inf in F16")),
        "{err}"
    );
    assert!(!out.exists(), "a refused conversion writes nothing");
    // Within range, strict changes nothing.
    let o = tensorfile(&["convert", "--strict", "--dtype", "bf16", input, output]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stderr.is_empty());
}
