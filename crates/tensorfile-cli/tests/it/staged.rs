//! One set, many writers, as scripts run it: `shard --plan`, four
//! `--write-part` processes at once, `--commit`; with unnamed and named
//! temporaries; and writers killed at several points (no index, no file
//! under OUTDIR's own names; the rerun and the commit then work).
#![cfg(target_os = "linux")]

use std::ffi::OsStr;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tensorfile_testkit::{default_signals, entries, sparse_file, stderr, stdout};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tensorfile")
}

/// `tensorfile ARGS`, with named temporaries or not.
fn run(args: &[&OsStr], named: bool) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args);
    if named {
        cmd.env("TENSORFILE_NO_TMPFILE", "1");
    } else {
        cmd.env_remove("TENSORFILE_NO_TMPFILE");
    }
    cmd.output().unwrap()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(o));
}

/// `n` weights of `bytes` each, `w0`..: data all zeros (sparse).
fn weights(path: &Path, n: u64, bytes: u64) {
    let parts: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#""w{i}":{{"dtype":"F32","shape":[{}],"data_offsets":[{},{}]}}"#,
                bytes / 4,
                i * bytes,
                (i + 1) * bytes
            )
        })
        .collect();
    sparse_file(
        path,
        &format!(
            r#"{{"__metadata__":{{"format":"pt"}},{}}}"#,
            parts.join(",")
        ),
        n * bytes,
    );
}

fn os<'a>(args: &'a [&'a str]) -> Vec<&'a OsStr> {
    args.iter().map(OsStr::new).collect()
}

/// Plans `input` into `out` for `writers` writers at `max`; returns the
/// staging folder.
fn plan(input: &Path, out: &Path, writers: usize, max: &str, named: bool) -> PathBuf {
    let w = writers.to_string();
    let words = [
        "shard",
        "--plan",
        "--writers",
        &w,
        "--max-shard-size",
        max,
        "--json",
    ];
    let mut args = os(&words);
    args.extend([input.as_os_str(), out.as_os_str()]);
    let o = run(&args, named);
    ok(&o);
    let text = stdout(&o);
    let staging = text
        .split("\"staging\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no staging in {text}"));
    PathBuf::from(staging)
}

fn commit(out: &Path, named: bool) -> Output {
    let mut args = os(&["shard", "--commit"]);
    args.push(out.as_os_str());
    run(&args, named)
}

/// Only hidden entries (the staging folder): nothing under OUTDIR's own
/// names, and no index.
fn nothing_visible(out: &Path) {
    let names = entries(out);
    assert!(
        names.iter().all(|n| n.starts_with(".tensorfile-set-")),
        "{names:?}"
    );
}

#[test]
fn four_writers_at_once_then_one_commit() {
    for named in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.safetensors");
        weights(&input, 8, 1 << 16);
        let out = dir.path().join("out");
        let staging = plan(&input, &out, 4, "100000", named);
        assert_eq!(entries(&out).len(), 1);
        // A commit before the writers: refused, naming a writer to run.
        let o = commit(&out, named);
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr(&o).contains("run writer 0"), "{}", stderr(&o));
        let children: Vec<Child> = (0..4)
            .map(|rank| {
                let mut cmd = Command::new(bin());
                cmd.arg("shard")
                    .arg("--write-part")
                    .arg(rank.to_string())
                    .arg(&input)
                    .arg(&out)
                    .stdout(Stdio::null());
                if named {
                    cmd.env("TENSORFILE_NO_TMPFILE", "1");
                }
                cmd.spawn().unwrap()
            })
            .collect();
        for child in children {
            let o = child.wait_with_output().unwrap();
            ok(&o);
        }
        nothing_visible(&out);
        assert_eq!(entries(&staging).len(), 9, "{:?}", entries(&staging));
        let o = commit(&out, named);
        ok(&o);
        let mut expected: Vec<String> = (1..=8)
            .map(|i| format!("model-{i:05}-of-00008.safetensors"))
            .collect();
        expected.push("model.safetensors.index.json".into());
        assert_eq!(entries(&out), expected);
        // The set reads back whole, checked by the command itself.
        let o = run(&[OsStr::new("validate"), out.as_os_str()], false);
        ok(&o);
        // Committed: a second commit and an abort find nothing staged.
        let o = commit(&out, named);
        assert_eq!(o.status.code(), Some(1));
        assert!(stderr(&o).contains("no set is staged"), "{}", stderr(&o));
    }
}

#[test]
fn usage_errors_exit_2_and_abort_removes_the_staging() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    weights(&input, 2, 64);
    let out = dir.path().join("out");
    let o = run(
        &[OsStr::new("shard"), OsStr::new("--plan"), input.as_os_str()],
        false,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let mut args = os(&["shard", "--commit"]);
    args.extend([input.as_os_str(), out.as_os_str()]);
    assert_eq!(run(&args, false).status.code(), Some(2));
    let o = run(&os(&["shard", "--plan", "--commit", "a", "b"]), false);
    assert_eq!(o.status.code(), Some(2));
    plan(&input, &out, 2, "64", false);
    let mut args = os(&["shard", "--write-part", "2"]);
    args.extend([input.as_os_str(), out.as_os_str()]);
    let o = run(&args, false);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Another plan for the same prefix is refused while one is staged.
    let mut args = os(&["shard", "--plan", "--writers", "1"]);
    args.extend([input.as_os_str(), out.as_os_str()]);
    let o = run(&args, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("another plan"), "{}", stderr(&o));
    let mut args = os(&["shard", "--abort"]);
    args.push(out.as_os_str());
    ok(&run(&args, false));
    assert_eq!(entries(&out), Vec::<String>::new());
}

/// A child killed (and reaped) if the test fails before it ends.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where to kill a writer.
#[derive(Debug, Clone, Copy)]
enum When {
    /// As soon as it writes its first part.
    Begun,
    /// A while into its first part.
    Midway,
    /// Once its first part is staged, while it writes the second.
    OnePartStaged,
}

/// Whether `pid` holds a file without a name in `dir`, or `dir` holds a
/// named temporary.
fn writing(pid: u32, dir: &Path) -> bool {
    let fds = PathBuf::from(format!("/proc/{pid}/fd"));
    let unnamed = fs::read_dir(fds).into_iter().flatten().flatten().any(|fd| {
        fs::read_link(fd.path())
            .is_ok_and(|t| t.parent() == Some(dir) && t.to_string_lossy().ends_with(" (deleted)"))
    });
    unnamed || entries(dir).iter().any(|n| n.ends_with(".tmp"))
}

#[test]
fn a_killed_writer_leaves_no_set_and_its_rerun_then_the_commit_work() {
    for (when, named) in [
        (When::Begun, false),
        (When::Midway, true),
        (When::OnePartStaged, false),
        (When::OnePartStaged, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.safetensors");
        // Four 64 MiB weights, one per shard, two shards per writer.
        weights(&input, 4, 1 << 26);
        let out = dir.path().join("out");
        let staging = fs::canonicalize(plan(&input, &out, 2, "70000000", named)).unwrap();
        let write = |rank: &str| {
            let mut cmd = Command::new(bin());
            default_signals(&mut cmd)
                .args(["shard", "--write-part", rank])
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
        ok(&write("1").output().unwrap());
        let mut child = Running(Some(write("0").spawn().unwrap()));
        let pid = child.0.as_ref().unwrap().id();
        let first = "model-00001-of-00004.safetensors".to_string();
        let start = Instant::now();
        loop {
            let ready = match when {
                When::Begun | When::Midway => writing(pid, &staging),
                When::OnePartStaged => entries(&staging).contains(&first),
            };
            if ready {
                break;
            }
            let status = child.0.as_mut().unwrap().try_wait().unwrap();
            assert!(
                status.is_none(),
                "{when:?}: the writer ended first ({status:?})"
            );
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{when:?}: no write"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        if matches!(when, When::Midway) {
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: a plain system call on our own child.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        let o = child.0.take().unwrap().wait_with_output().unwrap();
        assert_eq!(o.status.signal(), Some(libc::SIGKILL), "{when:?}");
        nothing_visible(&out);
        // The commit refuses the incomplete set and publishes nothing.
        let o = commit(&out, named);
        assert_eq!(o.status.code(), Some(1), "{when:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("writer 0"), "{}", stderr(&o));
        nothing_visible(&out);
        ok(&write("0").output().unwrap());
        ok(&commit(&out, named));
        assert_eq!(entries(&out).len(), 5, "{when:?}: {:?}", entries(&out));
        ok(&run(&[OsStr::new("validate"), out.as_os_str()], false));
    }
}
