//! A file truncated while a command reads it: every long read (hashing,
//! rewriting, casting, quantizing) ends in an error naming the file, exit
//! status 1, never a signal, and leaves no output behind.

use std::fs;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A valid file with one 1 GiB F32 weight, sparse on disk (zeros).
fn big_file(path: &std::path::Path) {
    let header =
        br#"{"layer.weight":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}}"#;
    let mut text = header.to_vec();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&text);
    fs::write(path, &bytes).unwrap();
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_len(bytes.len() as u64 + (1 << 30)).unwrap();
}

#[test]
fn long_reads_of_a_file_truncated_underneath_fail_cleanly() {
    let commands: [&[&str]; 4] = [
        &["inspect", "--hash"],
        &["rewrite", "--no-sync"],
        &["convert", "--no-sync", "--dtype", "bf16"],
        &["quantize", "--no-sync", "--scheme", "int4-g32-sym"],
    ];
    for args in commands {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.safetensors");
        let out_dir = dir.path().join("out");
        fs::create_dir(&out_dir).unwrap();
        big_file(&input);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfile"));
        cmd.args(args).arg(&input);
        if args[0] != "inspect" {
            cmd.arg(out_dir.join("out.safetensors"));
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        fs::OpenOptions::new()
            .write(true)
            .open(&input)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // An exit status, not a signal; and the input named.
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {:?} {stderr}",
            out.status
        );
        assert!(stderr.contains("in.safetensors"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("changed or truncated") || stderr.contains("rule "),
            "{args:?}: {stderr}"
        );
        let left: Vec<_> = fs::read_dir(&out_dir).unwrap().collect();
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
}
