//! What a save leaves, run as a user runs the commands and under faults:
//! interrupted by signals (nothing new in the directory, named or hidden,
//! and the old file intact), sharding onto a disk that fills up (no shard
//! left, and the rerun works), the modes of new and replaced files under
//! several umasks, symbolic links at the output, and outputs that are
//! inputs (refused by identity, not by name).
#![cfg(target_os = "linux")]

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tensorfile_testkit::{
    default_signals, entries, fixture, sparse_file, sparse_gib_f32 as big_float, stderr,
};

const OLD: &[u8] = b"the old output, which must survive";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tensorfile")
}

/// The same weight as int4 (zero scales): dequantizing writes 1 GiB.
fn big_int4(path: &Path) {
    sparse_file(
        path,
        r#"{"__metadata__":{"quant":"int4-g32-sym"},"layer.scales":{"dtype":"F16","shape":[16384,512],"data_offsets":[0,16777216]},"layer.qweight":{"dtype":"U8","shape":[16384,8192],"data_offsets":[16777216,150994944]}}"#,
        150_994_944,
    );
}

/// Four 256 MiB weights: four shards at 300MB.
fn big_four(path: &Path) {
    let q = 1u64 << 28;
    let parts: Vec<String> = (0..4)
        .map(|i| {
            format!(
                r#""w{i}":{{"dtype":"F32","shape":[{}],"data_offsets":[{},{}]}}"#,
                q / 4,
                i * q,
                (i + 1) * q
            )
        })
        .collect();
    sparse_file(path, &format!("{{{}}}", parts.join(",")), 4 * q);
}

/// A child killed (and reaped) if the test fails before it ends.
struct Running(Option<Child>);

impl Running {
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    fn signal(&self, sig: i32) {
        // SAFETY: a plain system call on our own child.
        assert_eq!(unsafe { libc::kill(self.pid() as libc::pid_t, sig) }, 0);
    }
    fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `tensorfile ARGS` to be signalled: with the default signal
/// dispositions, not the ones the test run inherited (a background job's
/// SIGINT is ignored).
fn spawn(args: &[&OsStr], named: bool) -> Running {
    let mut cmd = Command::new(bin());
    default_signals(&mut cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
    if named {
        cmd.env("TENSORFILE_NO_TMPFILE", "1");
    } else {
        cmd.env_remove("TENSORFILE_NO_TMPFILE");
    }
    Running(Some(cmd.spawn().unwrap()))
}

/// Waits until the child has begun writing its output in `dir`: it holds
/// a file there with no name (`O_TMPFILE`), or the directory's entries are
/// no longer `before` (taken before the child started): a temporary has
/// appeared. Panics if that never happens (the child ended first).
fn wait_mid_save(child: &mut Running, dir: &Path, before: &[String]) {
    let dir = fs::canonicalize(dir).unwrap();
    let fds = PathBuf::from(format!("/proc/{}/fd", child.pid()));
    let start = Instant::now();
    loop {
        let unnamed = fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                fs::read_link(fd.path()).is_ok_and(|target| {
                    let t = target.to_string_lossy();
                    target.parent() == Some(dir.as_path()) && t.ends_with(" (deleted)")
                })
            });
        let named = entries(&dir) != before;
        if unnamed || named {
            return;
        }
        if let Some(status) = child.0.as_mut().unwrap().try_wait().unwrap() {
            panic!("the command ended ({status}) before its save began");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no save began in a minute"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A command writing one file from a large input: the input's path, and
/// the arguments before IN OUT.
struct Case {
    args: &'static [&'static str],
    make: fn(&Path),
}

const CASES: [Case; 4] = [
    Case {
        args: &["rewrite"],
        make: big_float,
    },
    Case {
        args: &["convert", "--dtype", "bf16"],
        make: big_float,
    },
    Case {
        args: &["quantize", "--scheme", "int4-g32-sym"],
        make: big_float,
    },
    Case {
        args: &["dequantize"],
        make: big_int4,
    },
];

/// Interrupts `case` with `sig`, `delay` after its save began, writing over
/// an old file; returns the directory (to look at) and the child's output.
fn interrupt(case: &Case, sig: i32, delay: u64, named: bool) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    (case.make)(&input);
    let out_dir = dir.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    let output = out_dir.join("out.safetensors");
    fs::write(&output, OLD).unwrap();
    let mut args: Vec<&OsStr> = case.args.iter().map(OsStr::new).collect();
    args.extend([input.as_os_str(), output.as_os_str()]);
    let before = entries(&out_dir);
    let mut child = spawn(&args, named);
    wait_mid_save(&mut child, &out_dir, &before);
    std::thread::sleep(Duration::from_millis(delay));
    child.signal(sig);
    let out = child.wait();
    (dir, out)
}

/// Nothing new in `out/`, named or hidden, and the old file intact.
fn assert_untouched(dir: &Path, what: &str) {
    let out_dir = dir.join("out");
    assert_eq!(entries(&out_dir), ["out.safetensors"], "{what}");
    assert_eq!(
        fs::read(out_dir.join("out.safetensors")).unwrap(),
        OLD,
        "{what}"
    );
}

#[test]
fn signals_mid_save_leave_nothing_and_the_old_file() {
    // Each command meets each signal, at several points of its save.
    let plan = [
        (0, libc::SIGINT, 0),
        (0, libc::SIGKILL, 100),
        (1, libc::SIGTERM, 50),
        (1, libc::SIGKILL, 0),
        (2, libc::SIGHUP, 150),
        (2, libc::SIGINT, 20),
        (3, libc::SIGTERM, 0),
        (3, libc::SIGHUP, 100),
        (3, libc::SIGKILL, 50),
    ];
    for (case, sig, delay) in plan {
        let case = &CASES[case];
        let what = format!("{:?} signal {sig} at +{delay} ms", case.args);
        let (dir, out) = interrupt(case, sig, delay, false);
        // Ended by the signal itself.
        assert_eq!(out.status.signal(), Some(sig), "{what}: {}", stderr(&out));
        assert_untouched(dir.path(), &what);
    }
}

#[test]
fn with_named_temporaries_signals_remove_them_and_the_next_save_sweeps() {
    let plan = [
        (0, libc::SIGTERM, 0),
        (1, libc::SIGHUP, 50),
        (2, libc::SIGINT, 100),
        (3, libc::SIGINT, 20),
    ];
    for (case, sig, delay) in plan {
        let case = &CASES[case];
        let what = format!("named: {:?} signal {sig} at +{delay} ms", case.args);
        let (dir, out) = interrupt(case, sig, delay, true);
        assert_eq!(out.status.signal(), Some(sig), "{what}: {}", stderr(&out));
        assert_untouched(dir.path(), &what);
    }
    // SIGKILL cannot be caught: the temporary stays, hidden, until the
    // next save to that directory, which removes it (its writer is dead).
    let (dir, out) = interrupt(&CASES[0], libc::SIGKILL, 50, true);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{:?} {}",
        out.status,
        stderr(&out)
    );
    let out_dir = dir.path().join("out");
    let left = entries(&out_dir);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left[0].starts_with(".out.safetensors.tensorfile-"),
        "{left:?}"
    );
    let small = fixture("models/bigram/model.safetensors");
    let other = out_dir.join("other.safetensors");
    let o = Command::new(bin())
        .env("TENSORFILE_NO_TMPFILE", "1")
        .args([OsStr::new("rewrite"), small.as_os_str(), other.as_os_str()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(entries(&out_dir), ["other.safetensors", "out.safetensors"]);
    assert_eq!(fs::read(out_dir.join("out.safetensors")).unwrap(), OLD);
}

#[test]
fn an_interrupted_shard_leaves_no_shard() {
    for (sig, delay, named) in [
        (libc::SIGINT, 400, false),
        (libc::SIGKILL, 300, false),
        (libc::SIGTERM, 400, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.safetensors");
        big_four(&input);
        let out_dir = dir.path().join("out");
        fs::create_dir(&out_dir).unwrap();
        fs::write(out_dir.join("README"), OLD).unwrap();
        let args: Vec<&OsStr> = vec![
            "shard".as_ref(),
            "--max-shard-size".as_ref(),
            "300MB".as_ref(),
            input.as_os_str(),
            out_dir.as_os_str(),
        ];
        let before = entries(&out_dir);
        let mut child = spawn(&args, named);
        wait_mid_save(&mut child, &out_dir, &before);
        std::thread::sleep(Duration::from_millis(delay));
        child.signal(sig);
        let out = child.wait();
        assert_eq!(out.status.signal(), Some(sig), "{}", stderr(&out));
        assert_eq!(entries(&out_dir), ["README"], "signal {sig}, named {named}");
    }
}

/// A signal ignored when the command started (as `nohup` ignores SIGHUP,
/// a background job SIGINT) stays ignored: the save carries on and
/// completes; another signal still ends it.
#[test]
fn signals_ignored_at_the_start_stay_ignored() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    big_four(&input);
    for (ignored, then) in [(libc::SIGINT, None), (libc::SIGHUP, Some(libc::SIGTERM))] {
        let out_dir = dir.path().join(format!("out-{ignored}"));
        fs::create_dir(&out_dir).unwrap();
        let mut cmd = Command::new(bin());
        default_signals(&mut cmd);
        // SAFETY: signal(2) is async-signal-safe, the only call between
        // fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(ignored, libc::SIG_IGN);
                Ok(())
            });
        }
        cmd.args([
            "shard".as_ref(),
            "--max-shard-size".as_ref(),
            "300MB".as_ref(),
            input.as_os_str(),
            out_dir.as_os_str(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .stdin(Stdio::null());
        let mut child = Running(Some(cmd.spawn().unwrap()));
        wait_mid_save(&mut child, &out_dir, &[]);
        child.signal(ignored);
        std::thread::sleep(Duration::from_millis(100));
        match then {
            None => {
                let out = child.wait();
                assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
                assert_eq!(entries(&out_dir).len(), 5, "{:?}", entries(&out_dir));
            }
            Some(sig) => {
                child.signal(sig);
                let out = child.wait();
                assert_eq!(out.status.signal(), Some(sig), "{}", stderr(&out));
                assert_eq!(entries(&out_dir), Vec::<String>::new());
            }
        }
    }
}

/// Runs `tensorfile ARGS` through `sh` with `prelude` first (a umask, a
/// file size limit).
fn with_shell(prelude: &str, args: &[&OsStr]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("{prelude}; exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args)
        .output()
        .unwrap()
}

/// Three tensors whose second shard (the large one, alone) does not fit
/// under a file size limit of 64 KiB, while the first does.
fn three_for_shards(path: &Path) {
    sparse_file(
        path,
        r#"{"a":{"dtype":"U8","shape":[1500],"data_offsets":[0,1500]},"b":{"dtype":"U8","shape":[1500],"data_offsets":[1500,3000]},"c":{"dtype":"U8","shape":[1048576],"data_offsets":[3000,1051576]}}"#,
        1_051_576,
    );
}

#[test]
fn a_shard_that_does_not_fit_leaves_no_shard_and_the_rerun_works() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    three_for_shards(&input);
    let out_dir = dir.path().join("out");
    let args: Vec<&OsStr> = vec![
        "shard".as_ref(),
        "--max-shard-size".as_ref(),
        "2000".as_ref(),
        input.as_os_str(),
        out_dir.as_os_str(),
    ];
    // Files may grow to 64 KiB (ulimit counts 512-byte blocks): the first
    // shard is written, the second's space cannot be reserved (EFBIG, as a
    // full disk gives ENOSPC), SIGXFSZ ignored so that it is an error.
    for named in [false, true] {
        let env = if named {
            "TENSORFILE_NO_TMPFILE=1 "
        } else {
            ""
        };
        let o = with_shell(
            &format!("trap '' XFSZ; ulimit -f 128; export {env}X=1"),
            &args,
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("model-00002-of-00003.safetensors"), "{err}");
        assert!(err.contains("File too large"), "{err}");
        // Not even the directory, which the shard created.
        assert!(!out_dir.exists(), "named {named}");
    }
    // The rerun, with room, is not refused by leftovers.
    let o = Command::new(bin()).args(&args).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        entries(&out_dir),
        [
            "model-00001-of-00003.safetensors",
            "model-00002-of-00003.safetensors",
            "model-00003-of-00003.safetensors",
            "model.safetensors.index.json",
        ]
    );
}

#[test]
fn a_failed_shard_leaves_no_new_directory() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.safetensors");
    three_for_shards(&input);
    // A new OUTDIR two levels deep, and an existing one with a file in it.
    let new_root = dir.path().join("new");
    let nested = new_root.join("deeper/out");
    let existing = dir.path().join("old");
    fs::create_dir(&existing).unwrap();
    fs::write(existing.join("README"), OLD).unwrap();
    for out_dir in [&nested, &existing] {
        let args: Vec<&OsStr> = vec![
            "shard".as_ref(),
            "--max-shard-size".as_ref(),
            "2000".as_ref(),
            input.as_os_str(),
            out_dir.as_os_str(),
        ];
        // The second shard cannot grow past 64 KiB (see above): exit 1.
        let o = with_shell("trap '' XFSZ; ulimit -f 128", &args);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    }
    assert!(!new_root.exists(), "a failed shard left {new_root:?}");
    assert_eq!(entries(dir.path()), ["in.safetensors", "old"]);
    assert_eq!(entries(&existing), ["README"]);
    assert_eq!(fs::read(existing.join("README")).unwrap(), OLD);
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn new_files_get_0666_less_the_umask_and_replaced_files_keep_their_bits() {
    let src = fixture("models/llama_tiny/model.safetensors");
    for umask in [0o022, 0o077, 0o002, 0o027] {
        let dir = tempfile::tempdir().unwrap();
        let prelude = format!("umask {umask:03o}");
        let shards = dir.path().join("shards");
        let o = with_shell(
            &prelude,
            &[
                "shard".as_ref(),
                "--max-shard-size".as_ref(),
                "30000".as_ref(),
                src.as_os_str(),
                shards.as_os_str(),
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let names = entries(&shards);
        assert_eq!(names.len(), 4, "{names:?}");
        for name in names {
            assert_eq!(
                mode(&shards.join(&name)),
                0o666 & !umask,
                "{name} under {umask:03o}"
            );
        }
        let out = dir.path().join("out.safetensors");
        let rewrite = |out: &Path| {
            let o = with_shell(
                &prelude,
                &["rewrite".as_ref(), src.as_os_str(), out.as_os_str()],
            );
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        };
        rewrite(&out);
        assert_eq!(mode(&out), 0o666 & !umask, "new file under {umask:03o}");
        // Replaced: the old file's bits, whatever the umask, but never
        // setuid, setgid or sticky.
        for (old, new) in [
            (0o4755, 0o755),
            (0o2640, 0o640),
            (0o1604, 0o604),
            (0o644, 0o644),
        ] {
            fs::set_permissions(&out, fs::Permissions::from_mode(old)).unwrap();
            rewrite(&out);
            assert_eq!(mode(&out), new, "replacing {old:o} under {umask:03o}");
        }
    }
}

#[test]
fn a_symbolic_link_at_the_output_is_followed_to_a_file_only() {
    let src = fixture("models/bigram/model.safetensors");
    let dir = tempfile::tempdir().unwrap();
    let real_dir = dir.path().join("real");
    fs::create_dir(&real_dir).unwrap();
    let real = real_dir.join("m.safetensors");
    fs::write(&real, OLD).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("link.safetensors");
    std::os::unix::fs::symlink("real/m.safetensors", &link).unwrap();
    let rewrite = |out: &Path| {
        Command::new(bin())
            .args([OsStr::new("rewrite"), src.as_os_str(), out.as_os_str()])
            .output()
            .unwrap()
    };
    // A link to a file: that file is replaced (keeping its mode), the link
    // stays, and nothing else appears in either directory.
    let o = rewrite(&link);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(fs::read(&real).unwrap(), fs::read(&src).unwrap());
    assert_eq!(mode(&real), 0o640);
    assert_eq!(entries(&real_dir), ["m.safetensors"]);
    // A link to a directory, and a link to nothing: refused, exit 1, one
    // line naming the link; nothing changes (no executable file appears).
    let to_dir = dir.path().join("to_dir.safetensors");
    std::os::unix::fs::symlink("real", &to_dir).unwrap();
    let dangling = dir.path().join("dangling.safetensors");
    std::os::unix::fs::symlink("gone/m.safetensors", &dangling).unwrap();
    for (out, needle) in [
        (&to_dir, "is a symbolic link to the directory"),
        (&dangling, "is a symbolic link that leads nowhere"),
    ] {
        let o = rewrite(out);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains(out.to_str().unwrap()) && err.contains(needle),
            "{err}"
        );
    }
    assert_eq!(
        entries(dir.path()),
        [
            "dangling.safetensors",
            "link.safetensors",
            "real",
            "to_dir.safetensors"
        ]
    );
    assert_eq!(entries(&real_dir), ["m.safetensors"]);
}

/// `tensorfile ARGS` is refused as writing over its input `input` (named
/// `out` on the command line): exit 1, one line naming both, and the
/// input's directory unchanged.
fn refused_as_input(args: &[&OsStr], out: &Path, input: &Path) {
    let dir = input.parent().unwrap();
    let before = (entries(dir), fs::read(input).unwrap());
    let o = Command::new(bin()).args(args).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "{}: is the input {}",
            out.display(),
            input.display()
        )),
        "{args:?}: {err}"
    );
    assert_eq!((entries(dir), fs::read(input).unwrap()), before, "{args:?}");
}

#[test]
fn outputs_that_are_inputs_are_refused_by_identity() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A PyTorch checkpoint, converted onto itself, through a hard link, and
    // through a symbolic link.
    let pt = d.join("z.pt");
    fs::copy(fixture("pytorch/legacy_simple.pt"), &pt).unwrap();
    let hard = d.join("hard.safetensors");
    fs::hard_link(&pt, &hard).unwrap();
    let soft = d.join("soft.safetensors");
    std::os::unix::fs::symlink("z.pt", &soft).unwrap();
    for out in [&pt, &hard, &soft] {
        let args = ["convert".as_ref(), pt.as_os_str(), out.as_os_str()];
        refused_as_input(&args, out, &pt);
    }
    // A safetensors file: casting, quantizing or dequantizing onto itself.
    let st = d.join("m.safetensors");
    fs::copy(fixture("models/llama_tiny/model.safetensors"), &st).unwrap();
    let link = d.join("link.safetensors");
    fs::hard_link(&st, &link).unwrap();
    for sub in [
        &["convert", "--dtype", "bf16"][..],
        &["quantize", "--scheme", "int4-g32-sym"],
        &["dequantize"],
    ] {
        for out in [&st, &link] {
            let mut args: Vec<&OsStr> = sub.iter().map(OsStr::new).collect();
            args.extend([st.as_os_str(), out.as_os_str()]);
            refused_as_input(&args, out, &st);
        }
    }
    // The in-place canonical rewrite works, by `rewrite` or `convert`
    // without a dtype.
    for sub in ["rewrite", "convert"] {
        let o = Command::new(bin())
            .args([OsStr::new(sub), st.as_os_str(), st.as_os_str()])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{sub}: {}", stderr(&o));
    }
    // dequantize --config: the config is an input too.
    let config = d.join("config.json");
    fs::write(&config, r#"{"quantization":{"bits":4,"group_size":32}}"#).unwrap();
    let args = [
        "dequantize".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        st.as_os_str(),
        config.as_os_str(),
    ];
    refused_as_input(&args, &config, &config);

    // merge: onto one of its own shards, or onto its index.
    let set = d.join("set");
    let o = Command::new(bin())
        .args([
            OsStr::new("shard"),
            "--max-shard-size".as_ref(),
            "30000".as_ref(),
            st.as_os_str(),
            set.as_os_str(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let shard = set.join("model-00002-of-00003.safetensors");
    let index = set.join("model.safetensors.index.json");
    for out in [&shard, &index] {
        let args = ["merge".as_ref(), set.as_os_str(), out.as_os_str()];
        refused_as_input(&args, out, out);
    }
    // Another name in that directory is fine.
    let merged = set.join("merged.safetensors");
    let o = Command::new(bin())
        .args([OsStr::new("merge"), set.as_os_str(), merged.as_os_str()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(fs::read(&merged).unwrap(), fs::read(&st).unwrap());
}
