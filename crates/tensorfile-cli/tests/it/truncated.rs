//! A file truncated while a command reads it: every long read (hashing,
//! rewriting, casting, quantizing) ends in an error naming the file, exit
//! status 1, never a signal, and leaves no output behind.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The checkpoint builder of the loader's tests.
use tensorfile_testkit::hostile;

/// Starts `cmd` (its stderr captured), cuts `input` to 4 KiB while it
/// reads, and waits for it: its exit status and stderr.
fn run_while_truncating(cmd: &mut Command, input: &Path) -> (Option<i32>, String) {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    fs::OpenOptions::new()
        .write(true)
        .open(input)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `torch.save` zip checkpoint with one 1 GiB F32 weight stored as is,
/// sparse on disk (zeros): the archive is laid out by the builder with an
/// empty record, then the record's gigabyte is a hole before the central
/// directory, whose sizes and offset are patched to match.
fn big_checkpoint(path: &Path) {
    use hostile::{Record, Storage, Tensor};
    const LEN: u64 = 1 << 30;
    let storages = [Storage::f32("0", LEN / 4)];
    let tensors = [Tensor::view(
        "layer.weight",
        0,
        0,
        &[16384, 16384],
        &[16384, 1],
    )];
    let pickle = hostile::state_dict_pickle(&storages, &tensors);
    let bytes = hostile::zip(&[
        Record::stored("archive/data.pkl", pickle),
        Record::stored("archive/data/0", Vec::new()),
    ]);
    let eocd = bytes.len() - 22;
    let cd_offset = u32::from_le_bytes(bytes[eocd + 16..eocd + 20].try_into().unwrap()) as usize;
    let (head, tail) = bytes.split_at(cd_offset);
    let mut tail = tail.to_vec();
    // The second central entry follows the first (46 bytes and its name).
    let second = 46 + "archive/data.pkl".len();
    tail[second + 20..second + 28]
        .copy_from_slice(&[(LEN as u32).to_le_bytes(), (LEN as u32).to_le_bytes()].concat());
    let eocd = tail.len() - 22;
    let moved = (cd_offset as u64 + LEN) as u32;
    tail[eocd + 16..eocd + 20].copy_from_slice(&moved.to_le_bytes());
    let mut f = fs::File::create(path).unwrap();
    f.write_all(head).unwrap();
    f.set_len(cd_offset as u64 + LEN).unwrap();
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(&tail).unwrap();
}

/// Runs `tensorfile ARGS INPUT [OUT]` on a fresh input `name` that `make`
/// writes, cutting it while it is read: the exit status, stderr, and what
/// is left in the output's directory.
fn cut_while_reading(
    args: &[&str],
    name: &str,
    make: fn(&Path),
) -> (Option<i32>, String, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join(name);
    let out_dir = dir.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    make(&input);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfile"));
    cmd.args(args).arg(&input);
    if args[0] != "inspect" {
        cmd.arg(out_dir.join("out.safetensors"));
    }
    let (status, stderr) = run_while_truncating(&mut cmd, &input);
    let left = fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    (status, stderr, left)
}

/// [`big_checkpoint`], checked whole before it is cut.
fn whole_checkpoint(path: &Path) {
    big_checkpoint(path);
    let check = Command::new(env!("CARGO_BIN_EXE_tensorfile"))
        .args(["inspect", "--json"])
        .arg(path)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{check:?}");
}

#[test]
fn long_reads_of_a_checkpoint_truncated_underneath_fail_cleanly() {
    let commands: [&[&str]; 3] = [
        &["inspect", "--hash"],
        &["convert", "--no-sync"],
        &["convert", "--no-sync", "--dtype", "bf16"],
    ];
    for args in commands {
        let (status, stderr, left) = cut_while_reading(args, "in.pt", whole_checkpoint);
        assert_eq!(status, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("in.pt"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("changed or truncated"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
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
        // An exit status, not a signal; and the input named.
        let (status, stderr, left) =
            cut_while_reading(args, "in.safetensors", tensorfile_testkit::sparse_gib_f32);
        assert_eq!(status, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("in.safetensors"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("changed or truncated") || stderr.contains("rule "),
            "{args:?}: {stderr}"
        );
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
}

#[test]
fn a_bin_set_whose_shard_is_truncated_underneath_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set");
    fs::create_dir(&set).unwrap();
    let shard = set.join("pytorch_model-00001-of-00001.bin");
    big_checkpoint(&shard);
    fs::write(
        set.join("pytorch_model.bin.index.json"),
        br#"{"metadata":{"total_size":1073741824},"weight_map":{"layer.weight":"pytorch_model-00001-of-00001.bin"}}"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfile"));
    cmd.args(["convert", "--no-sync"]).arg(&set).arg(&out);
    let (status, stderr) = run_while_truncating(&mut cmd, &shard);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains("pytorch_model-00001-of-00001.bin"),
        "{stderr}"
    );
    assert!(stderr.contains("changed or truncated"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    // No shard, no index: the set is all or nothing.
    let left: Vec<_> = fs::read_dir(&out).map(|d| d.collect()).unwrap_or_default();
    assert!(left.is_empty(), "left {left:?}");
}
