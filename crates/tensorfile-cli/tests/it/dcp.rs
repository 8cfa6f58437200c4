//! `merge` of a torch distributed checkpoint (DCP, Hugging Face storage):
//! the fixture torch wrote (tests/fixtures/dcp, made by
//! scripts/make_dcp_fixture.py) consolidates to the tensors torch's own
//! consolidation gives, byte for byte; broken checkpoints are refused with
//! nothing written; a merge killed while writing leaves no output.
#![cfg(target_os = "linux")]

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tensorfile_core::SafeTensors;
use tensorfile_testkit::{default_signals, entries, fixtures, sparse_file, stderr, stdout};

fn tensorfile(args: &[&str]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

fn dcp() -> PathBuf {
    fixtures().join("dcp")
}

fn manifest() -> Value {
    serde_json::from_slice(&fs::read(dcp().join("manifest.json")).unwrap()).unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Every tensor of the safetensors files in `dir` (or of the file `dir`):
/// name to (dtype, shape, bytes).
fn tensors(paths: &[PathBuf]) -> std::collections::BTreeMap<String, (String, Vec<u64>, Vec<u8>)> {
    let mut out = std::collections::BTreeMap::new();
    for path in paths {
        let file = SafeTensors::open(path).unwrap();
        for name in file.names() {
            let t = file.tensor(name).unwrap();
            let value = (t.dtype().to_string(), t.shape().to_vec(), t.data().to_vec());
            assert!(out.insert(name.to_string(), value).is_none(), "{name}");
        }
    }
    out
}

fn safetensors_in(dir: &Path) -> Vec<PathBuf> {
    entries(dir)
        .into_iter()
        .filter(|n| n.ends_with(".safetensors"))
        .map(|n| dir.join(n))
        .collect()
}

#[test]
fn the_fixture_consolidates_to_torchs_tensors() {
    let m = manifest();
    // The fixture is the one the manifest describes.
    for (file, sum) in m["files"].as_object().unwrap() {
        let bytes = fs::read(dcp().join(file)).unwrap();
        assert_eq!(sha256(&bytes), sum.as_str().unwrap(), "{file}");
    }
    let torch = tensors(&safetensors_in(&dcp().join("torch_consolidated")));
    let tmp = tempfile::tempdir().unwrap();
    let input = dcp().join("two_ranks");
    let set = tmp.path().join("set");
    let one = tmp.path().join("one.safetensors");
    let o = tensorfile(&[
        "merge",
        "--json",
        input.to_str().unwrap(),
        set.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["dcp_ranks"], 2);
    assert_eq!(report["shards"], 4);
    assert_eq!(report["tensors"], 11);
    let names: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    // torch's file names, and its mapping.
    assert_eq!(
        names,
        [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json"
        ]
    );
    let index: Value =
        serde_json::from_slice(&fs::read(set.join("model.safetensors.index.json")).unwrap())
            .unwrap();
    for (name, k) in m["fqn_to_index_mapping"].as_object().unwrap() {
        let file = format!("model-0000{}-of-00002.safetensors", k.as_u64().unwrap());
        assert_eq!(index["weight_map"][name], file.as_str(), "{name}");
    }
    let o = tensorfile(&["merge", input.to_str().unwrap(), one.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("11 tensors consolidated from a DCP checkpoint of 2 ranks (4 files)"),
        "{}",
        stdout(&o)
    );
    for ours in [
        tensors(&safetensors_in(&set)),
        tensors(std::slice::from_ref(&one)),
    ] {
        assert_eq!(ours.len(), 11);
        for (name, entry) in m["tensors"].as_object().unwrap() {
            let (dtype, shape, data) = &ours[name];
            assert_eq!(dtype, entry["dtype"].as_str().unwrap(), "{name}");
            let want: Vec<u64> = serde_json::from_value(entry["shape"].clone()).unwrap();
            assert_eq!(shape, &want, "{name}");
            // As saved, and as torch's reader (dcp.load) reads it back.
            assert_eq!(sha256(data), entry["sha256"].as_str().unwrap(), "{name}");
            assert_eq!(sha256(data), entry["dcp_load_sha256"].as_str().unwrap());
            // Byte for byte what torch's consolidation wrote, where it
            // consolidated (not I64) and got it right (not the 0-d tensor,
            // which torch 2.15 writes as zeros).
            let Some(theirs) = entry.get("torch_consolidated") else {
                assert_eq!(dtype, "I64", "{name}");
                continue;
            };
            let (t_dtype, t_shape, t_data) = &torch[name];
            assert_eq!((t_dtype, t_shape), (dtype, shape), "{name}");
            if theirs["equals_saved"] == true {
                assert!(t_data == data, "{name}: not torch's bytes");
            } else {
                assert!(shape.is_empty(), "{name}");
                assert!(t_data.iter().all(|&b| b == 0), "{name}");
            }
        }
    }
    let o = tensorfile(&["validate", set.to_str().unwrap(), one.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A second run refuses to mix two models in one directory.
    let o = tensorfile(&["merge", input.to_str().unwrap(), set.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // The checkpoint's own directory is refused as the output.
    let copy = tmp.path().join("copy");
    fs::create_dir(&copy).unwrap();
    for name in entries(&input) {
        fs::copy(input.join(&name), copy.join(&name)).unwrap();
    }
    let before = entries(&copy);
    let o = tensorfile(&["merge", copy.to_str().unwrap(), copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is the input"), "{}", stderr(&o));
    assert_eq!(entries(&copy), before);
}

/// A copy of the fixture in `dir`, with `change` applied to the file of
/// rank 2 holding output file 2.
fn broken(dir: &Path, change: impl FnOnce(&Path)) -> PathBuf {
    let input = dir.join("in");
    fs::create_dir(&input).unwrap();
    for name in entries(&dcp().join("two_ranks")) {
        fs::copy(dcp().join("two_ranks").join(&name), input.join(&name)).unwrap();
    }
    change(&input.join("shard-00002-model-00002-of-00002.safetensors"));
    input
}

/// Rewrites a rank file's header with `edit` applied to its JSON text.
fn edit_header(path: &Path, edit: impl FnOnce(&str) -> String) {
    let bytes = fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut text = edit(std::str::from_utf8(&bytes[8..8 + n]).unwrap()).into_bytes();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(&bytes[8 + n..]);
    fs::write(path, out).unwrap();
}

/// Rewrites a rank file's sharding info with `edit` applied to its text.
fn edit_info(path: &Path, edit: impl FnOnce(&str) -> String) {
    edit_header(path, |text| {
        let mut header: Value = serde_json::from_str(text).unwrap();
        let info = header["__metadata__"]["DCP_SHARDING_INFO"]
            .as_str()
            .unwrap()
            .to_string();
        header["__metadata__"]["DCP_SHARDING_INFO"] = Value::String(edit(&info));
        header.to_string()
    });
}

#[test]
fn broken_checkpoints_are_refused_and_nothing_is_written() {
    type Change = Box<dyn FnOnce(&Path)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "overlap",
            Box::new(|p| {
                edit_info(p, |i| {
                    i.replace(
                        r#""model.layers.0.counts": {"saved_offsets": [2, 0]}"#,
                        r#""model.layers.0.counts": {"saved_offsets": [1, 0]}"#,
                    )
                })
            }),
            "overlaps its piece at offsets [1, 0] (shape [2, 3]) in \"shard-00002",
        ),
        (
            "gap",
            Box::new(|p| {
                edit_info(p, |i| {
                    i.replace(
                        r#""model.layers.0.ids": {"saved_offsets": [0, 3]}"#,
                        r#""model.layers.0.ids": {"saved_offsets": [0, 4]}"#,
                    )
                })
            }),
            "its pieces cover 15 of the 18 elements of its full shape [3, 6]",
        ),
        (
            "out of bounds",
            Box::new(|p| {
                edit_info(p, |i| {
                    i.replace(
                        r#""model.layers.0.odd_rows": {"saved_offsets": [2, 0]}"#,
                        r#""model.layers.0.odd_rows": {"saved_offsets": [9, 0]}"#,
                    )
                })
            }),
            "its pieces cover 15 of the 50 elements of its full shape [10, 5]",
        ),
        (
            "dtype",
            Box::new(|p| {
                edit_header(p, |h| {
                    h.replace(
                        r#""model.layers.0.counts":{"dtype":"I64","shape":[2,3]"#,
                        r#""model.layers.0.counts":{"dtype":"F64","shape":[2,3]"#,
                    )
                })
            }),
            "dtype I64 or F64",
        ),
        (
            "truncated",
            Box::new(|p| {
                let bytes = fs::read(p).unwrap();
                fs::write(p, &bytes[..bytes.len() - 5]).unwrap();
            }),
            "shard-00002-model-00002-of-00002.safetensors: rule",
        ),
        (
            "no sharding info",
            Box::new(|p| edit_header(p, |h| h.replace("DCP_SHARDING_INFO", "OTHER_INFO"))),
            "no DCP_SHARDING_INFO",
        ),
    ];
    for (what, change, says) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let input = broken(tmp.path(), change);
        for out in [tmp.path().join("out"), tmp.path().join("out.safetensors")] {
            let o = tensorfile(&["merge", input.to_str().unwrap(), out.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(&o));
            let err = stderr(&o);
            assert!(err.contains(says), "{what}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
            assert!(!out.exists(), "{what}: {} was written", out.display());
        }
        assert_eq!(entries(tmp.path()), ["in"], "{what}");
    }
}

/// A two-rank checkpoint of `n` [rows, cols] F32 tensors cut in columns,
/// data all zeros (sparse): `n * rows * cols * 4` bytes.
fn sparse_checkpoint(dir: &Path, n: usize, rows: u64, cols: u64) {
    for rank in 0..2u64 {
        let half = cols / 2;
        let mut info = Vec::new();
        let mut entries = Vec::new();
        let bytes = rows * half * 4;
        for i in 0..n as u64 {
            info.push(format!(
                r#"\"w{i}\": {{\"saved_offsets\": [0, {}]}}"#,
                rank * half
            ));
            entries.push(format!(
                r#""w{i}":{{"dtype":"F32","shape":[{rows},{half}],"data_offsets":[{},{}]}}"#,
                i * bytes,
                (i + 1) * bytes
            ));
        }
        let header = format!(
            r#"{{"__metadata__":{{"format":"pt","DCP_VERSION":"1.0","DCP_SHARDING_INFO":"{{{}}}"}},{}}}"#,
            info.join(", "),
            entries.join(",")
        );
        let name = format!("shard-{:05}-model-00001-of-00001.safetensors", rank + 1);
        sparse_file(&dir.join(name), &header, n as u64 * bytes);
    }
}

/// Whether `pid` holds a file without a name in `dir`, or `dir` holds a
/// named temporary.
fn writing(pid: u32, dir: &Path) -> bool {
    let fds = PathBuf::from(format!("/proc/{pid}/fd"));
    let unnamed = fs::read_dir(fds).into_iter().flatten().flatten().any(|fd| {
        fs::read_link(fd.path())
            .is_ok_and(|t| t.parent() == Some(dir) && t.to_string_lossy().ends_with(" (deleted)"))
    });
    unnamed || (dir.exists() && entries(dir).iter().any(|n| n.ends_with(".tmp")))
}

#[test]
fn a_killed_merge_leaves_no_output_and_a_rerun_works() {
    for named in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let input = tmp.path().join("in");
        fs::create_dir(&input).unwrap();
        // 4 tensors of 32 MiB, in columns: 128 MiB to write.
        sparse_checkpoint(&input, 4, 2048, 4096);
        let out = tmp.path().join("out");
        let merge = || {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfile"));
            default_signals(&mut cmd)
                .arg("merge")
                .arg(&input)
                .arg(&out)
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            if named {
                cmd.env("TENSORFILE_NO_TMPFILE", "1");
            } else {
                cmd.env_remove("TENSORFILE_NO_TMPFILE");
            }
            cmd
        };
        let mut child = merge().spawn().unwrap();
        let pid = child.id();
        let start = Instant::now();
        while !writing(pid, &out) {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("named {named}: the merge ended first ({status:?})");
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no write");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: a plain system call on our own child.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.signal(), Some(libc::SIGKILL), "named {named}");
        // No file under the set's names, no index (a named temporary of
        // the killed process may remain: a rerun replaces nothing with it).
        let left = entries(&out);
        assert!(
            left.iter()
                .all(|n| n.starts_with('.') && n.ends_with(".tmp")),
            "named {named}: {left:?}"
        );
        let o = merge().output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let files = safetensors_in(&out);
        assert_eq!(files.len(), 1, "{:?}", entries(&out));
        let o = tensorfile(&["validate", files[0].to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}
