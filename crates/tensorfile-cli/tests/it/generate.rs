//! `tensorfile generate`, hidden from --help, makes what the release
//! archive ships (scripts/release.sh): completions that bash loads and
//! manual pages that man renders, one per visible command.

use std::ffi::OsStr;
use std::process::Command;

use tensorfile_testkit::{stderr, stdout};

const BIN: &str = env!("CARGO_BIN_EXE_tensorfile");

#[test]
fn generate_is_hidden_from_help() {
    let o = tensorfile_testkit::run(BIN, ["--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains("generate"), "{}", stdout(&o));
}

#[test]
fn completions_load_in_bash() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new");
    let o = tensorfile_testkit::run(
        BIN,
        [
            OsStr::new("generate"),
            OsStr::new("completions"),
            out.as_os_str(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["tensorfile.bash", "_tensorfile", "tensorfile.fish"] {
        let text = std::fs::read_to_string(out.join(name)).unwrap();
        assert!(text.contains("inspect"), "{name}: {text}");
        // The hidden command is not offered.
        assert!(!text.contains("generate"), "{name} offers generate");
        assert!(stdout(&o).contains(name), "{}", stdout(&o));
    }
    let o = Command::new("bash")
        .arg("-c")
        .arg("source \"$1\" && complete -p tensorfile")
        .arg("bash")
        .arg(out.join("tensorfile.bash"))
        .output()
        .expect("bash runs");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).trim_end().ends_with(" tensorfile"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn man_pages_render() {
    let dir = tempfile::tempdir().unwrap();
    let o = tensorfile_testkit::run(
        BIN,
        [
            OsStr::new("generate"),
            OsStr::new("man"),
            dir.path().as_os_str(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for page in [
        "tensorfile.1",
        "tensorfile-inspect.1",
        "tensorfile-convert.1",
        "tensorfile-fetch.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} not in {pages:?}");
    }
    assert!(
        !pages
            .iter()
            .any(|p| p.contains("generate") || p.contains("help")),
        "{pages:?}"
    );
    let top = std::fs::read_to_string(dir.path().join("tensorfile.1")).unwrap();
    assert!(top.contains("\n.TH tensorfile 1 "), "{top}");
    // man -l renders each page; man is not on every machine (.ci/run and
    // scripts/check-install.sh install man-db when it is missing).
    if Command::new("man").arg("--version").output().is_err() {
        eprintln!("man_pages_render: no man here: pages not rendered");
        return;
    }
    for page in &pages {
        let o = Command::new("man")
            .env("MANWIDTH", "80")
            .arg("-l")
            .arg(dir.path().join(page))
            .output()
            .unwrap();
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "{page}: {}",
            stderr(&o)
        );
        assert!(stdout(&o).contains("SYNOPSIS"), "{page}: {}", stdout(&o));
    }
}
