//! `tensorfile edit`: in place when only the header changes, else an
//! atomic rewrite, and either way the bytes `rewrite --align A` gives for
//! the edited file (built here apart from the library, as JSON).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Map, Value};
use tensorfile_testkit::fixtures;

fn tensorfile<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn ok(o: &Output) -> Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn valid_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(fixtures().join("valid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    files
}

/// `rewrite --align A IN OUT`.
fn rewrite(input: &Path, out: &Path, align: u64) {
    let a = align.to_string();
    let o = tensorfile(&[
        "rewrite".as_ref(),
        "--align".as_ref(),
        a.as_ref(),
        input.as_os_str(),
        out.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The edited file as `rewrite --align A` writes it: the header edited as
/// JSON, written plainly with the same data, then rewritten.
fn expected(
    input: &Path,
    dir: &Path,
    align: u64,
    set: &[(&str, &str)],
    rename: &[(&str, &str)],
) -> Vec<u8> {
    let bytes = fs::read(input).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut edited = Map::new();
    for (k, v) in header {
        let k = rename
            .iter()
            .find(|(old, _)| *old == k)
            .map_or(k.clone(), |(_, new)| new.to_string());
        edited.insert(k, v);
    }
    if !set.is_empty() {
        let meta = edited
            .entry("__metadata__")
            .or_insert_with(|| Value::Object(Map::new()));
        for (k, v) in set {
            meta.as_object_mut()
                .unwrap()
                .insert(k.to_string(), Value::from(*v));
        }
    }
    let mut text = Value::Object(edited).to_string().into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut plain = (text.len() as u64).to_le_bytes().to_vec();
    plain.extend_from_slice(&text);
    plain.extend_from_slice(&bytes[8 + n..]);
    let plain_path = dir.join("plain.safetensors");
    fs::write(&plain_path, plain).unwrap();
    let out = dir.join("expected.safetensors");
    rewrite(&plain_path, &out, align);
    fs::read(out).unwrap()
}

#[cfg(unix)]
fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).unwrap().ino()
}

#[test]
fn a_metadata_edit_is_in_place_and_gives_the_rewritten_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.safetensors");
    let mut in_place = 0;
    for input in valid_files() {
        for align in [8u64, 64, 4096] {
            rewrite(&input, &file, align);
            let before = fs::read(&file).unwrap();
            #[cfg(unix)]
            let ino = inode(&file);
            let report = ok(&tensorfile(&[
                "edit".as_ref(),
                "--json".as_ref(),
                "--set".as_ref(),
                "k=v".as_ref(),
                file.as_os_str(),
            ]));
            // The file's alignment is the largest that divides where its
            // data starts: a file written with 8 may turn out 64-aligned.
            let found = report["align"].as_u64().unwrap();
            assert!(found.is_multiple_of(align), "{}: {report}", input.display());
            let after = fs::read(&file).unwrap();
            let want = expected(
                &file_copy(&before, dir.path()),
                dir.path(),
                found,
                &[("k", "v")],
                &[],
            );
            assert!(
                after == want,
                "{} --align {align}: {report}",
                input.display()
            );
            // The header's text without its padding, and `"k":"v",` more.
            let n = u64::from_le_bytes(before[..8].try_into().unwrap()) as usize;
            let text = before[8..8 + n].trim_ascii_end().len() + 8;
            if align == 4096 && text + 32 < 4096 {
                assert_eq!(
                    report["in_place"],
                    Value::Bool(true),
                    "{}: {report}",
                    input.display()
                );
            }
            if report["in_place"] == Value::Bool(true) {
                in_place += 1;
                assert_eq!(report["reason"], Value::Null);
                assert_eq!(
                    report["bytes"].as_u64(),
                    Some(8 + report["header_len"].as_u64().unwrap())
                );
                #[cfg(unix)]
                assert_eq!(inode(&file), ino, "in place keeps the inode");
            } else {
                assert!(report["reason"].is_string(), "{report}");
            }
        }
    }
    assert!(in_place > 0);
}

fn file_copy(bytes: &[u8], dir: &Path) -> PathBuf {
    let p = dir.join("before.safetensors");
    fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn renames_in_place_only_when_the_order_stays() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.safetensors");
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let names: Vec<String> = {
        let bytes = fs::read(&input).unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        header
            .keys()
            .filter(|k| *k != "__metadata__")
            .cloned()
            .collect()
    };
    let first = names.first().unwrap().clone();
    let last = names.last().unwrap().clone();
    // "0" sorts before every name here: the first stays first. "~" after
    // every name: the first moves to the end (same dtype: BF16 throughout).
    for (new, stays) in [(format!("0{first}"), true), (format!("~{first}"), false)] {
        rewrite(&input, &file, 4096);
        let before = fs::read(&file).unwrap();
        let pair = format!("{first}={new}");
        let report = ok(&tensorfile(&[
            "edit".as_ref(),
            "--json".as_ref(),
            "--rename".as_ref(),
            pair.as_ref() as &std::ffi::OsStr,
            file.as_os_str(),
        ]));
        assert_eq!(report["in_place"], Value::Bool(stays), "{report}");
        if !stays {
            assert!(
                report["reason"].as_str().unwrap().contains("order"),
                "{report}"
            );
        }
        let want = expected(
            &file_copy(&before, dir.path()),
            dir.path(),
            4096,
            &[],
            &[(&first, &new)],
        );
        assert!(fs::read(&file).unwrap() == want, "{new}");
    }
    // Two names swapped at once.
    rewrite(&input, &file, 4096);
    let before = fs::read(&file).unwrap();
    let a = format!("{first}={last}");
    let b = format!("{last}={first}");
    ok(&tensorfile(&[
        "edit",
        "--json",
        "--rename",
        &a,
        "--rename",
        &b,
        file.to_str().unwrap(),
    ]));
    let want = expected(
        &file_copy(&before, dir.path()),
        dir.path(),
        4096,
        &[],
        &[(&first, &last), (&last, &first)],
    );
    assert!(fs::read(&file).unwrap() == want);
}

#[test]
fn a_header_that_outgrows_its_room_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.safetensors");
    let input = fixtures().join("valid/worked_example.safetensors");
    rewrite(&input, &file, 4096);
    let before = fs::read(&file).unwrap();
    let long = "x".repeat(5000);
    let pair = format!("long={long}");
    let report = ok(&tensorfile(&[
        "edit",
        "--json",
        "--set",
        &pair,
        file.to_str().unwrap(),
    ]));
    assert_eq!(report["in_place"], Value::Bool(false));
    assert!(
        report["reason"]
            .as_str()
            .unwrap()
            .contains("new header needs"),
        "{report}"
    );
    let want = expected(
        &file_copy(&before, dir.path()),
        dir.path(),
        4096,
        &[("long", &long)],
        &[],
    );
    assert!(fs::read(&file).unwrap() == want);
    // Now past the first page: even a small edit rewrites.
    let report = ok(&tensorfile(&[
        "edit",
        "--json",
        "--set",
        "k=v",
        file.to_str().unwrap(),
    ]));
    assert_eq!(report["in_place"], Value::Bool(false));
    assert!(
        report["reason"].as_str().unwrap().contains("page"),
        "{report}"
    );
    // --rewrite rewrites whatever fits.
    rewrite(&input, &file, 4096);
    let report = ok(&tensorfile(&[
        "edit",
        "--json",
        "--rewrite",
        "--set",
        "k=v",
        file.to_str().unwrap(),
    ]));
    assert_eq!(report["in_place"], Value::Bool(false));
}

#[test]
fn a_file_that_is_not_canonical_is_rewritten_canonically() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("valid/worked_example.safetensors");
    // The same file with its header in a different key order: valid, not canonical.
    let bytes = fs::read(&input).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut text = serde_json::to_vec_pretty(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut odd = (text.len() as u64).to_le_bytes().to_vec();
    odd.extend_from_slice(&text);
    odd.extend_from_slice(&bytes[8 + n..]);
    let file = dir.path().join("odd.safetensors");
    fs::write(&file, &odd).unwrap();
    let report = ok(&tensorfile(&[
        "edit",
        "--json",
        "--set",
        "k=v",
        file.to_str().unwrap(),
    ]));
    assert_eq!(report["in_place"], Value::Bool(false));
    assert!(
        report["reason"].as_str().unwrap().contains("not the file"),
        "{report}"
    );
    let align = report["align"].as_u64().unwrap();
    let want = expected(
        &file_copy(&odd, dir.path()),
        dir.path(),
        align,
        &[("k", "v")],
        &[],
    );
    assert!(fs::read(&file).unwrap() == want);
}

#[cfg(unix)]
#[test]
fn an_open_reader_sees_the_new_header_and_the_same_data() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.safetensors");
    rewrite(
        &fixtures().join("valid/worked_example.safetensors"),
        &file,
        4096,
    );
    let before = fs::read(&file).unwrap();
    let mut open = fs::File::open(&file).unwrap();
    let report = ok(&tensorfile(&[
        "edit",
        "--json",
        "--set",
        "k=v",
        file.to_str().unwrap(),
    ]));
    assert_eq!(report["in_place"], Value::Bool(true));
    let mut seen = Vec::new();
    open.read_to_end(&mut seen).unwrap();
    assert_eq!(seen, fs::read(&file).unwrap());
    assert_ne!(seen[..4096], before[..4096]);
    assert_eq!(seen[4096..], before[4096..]);
}

#[cfg(unix)]
#[test]
fn a_link_is_not_edited_in_place_its_file_is_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.safetensors");
    let link = dir.path().join("link.safetensors");
    rewrite(
        &fixtures().join("valid/worked_example.safetensors"),
        &file,
        4096,
    );
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let before = fs::read(&file).unwrap();
    let report = ok(&tensorfile(&[
        "edit",
        "--json",
        "--set",
        "k=v",
        link.to_str().unwrap(),
    ]));
    assert_eq!(report["in_place"], Value::Bool(false));
    assert!(
        report["reason"].as_str().unwrap().contains("symbolic link"),
        "{report}"
    );
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let want = expected(
        &file_copy(&before, dir.path()),
        dir.path(),
        4096,
        &[("k", "v")],
        &[],
    );
    assert!(fs::read(&file).unwrap() == want);
}

#[test]
fn refusals_leave_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.safetensors");
    rewrite(
        &fixtures().join("valid/worked_example.safetensors"),
        &file,
        4096,
    );
    let before = fs::read(&file).unwrap();
    let f = file.to_str().unwrap();
    for (args, code, says) in [
        (vec!["edit", f], 2, "nothing to do"),
        (
            vec!["edit", "--set", "k=v", "--unset", "k", f],
            2,
            "both set and removed",
        ),
        (vec!["edit", "--set", "novalue", f], 2, "KEY=VALUE"),
        (
            vec!["edit", "--rename", "nope=x", f],
            1,
            "no tensor named \"nope\"",
        ),
        (
            vec!["edit", "--rename", "w=__metadata__", f],
            1,
            "__metadata__",
        ),
    ] {
        let o = tensorfile(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(fs::read(&file).unwrap(), before, "{args:?}");
    }
    // Invalid files are refused with the reader's errors, naming the file.
    for entry in fs::read_dir(fixtures().join("invalid")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "safetensors") {
            continue;
        }
        let copy = dir.path().join("bad.safetensors");
        fs::copy(&path, &copy).unwrap();
        let o = tensorfile(&["edit", "--set", "k=v", copy.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{}: {err}", path.display());
        assert!(err.contains("bad.safetensors"), "{}: {err}", path.display());
        assert_eq!(fs::read(&copy).unwrap(), fs::read(&path).unwrap());
    }
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names.iter().all(|n| !n.to_string_lossy().ends_with(".tmp")),
        "{names:?}"
    );
}
