//! `fetch`: files, sets and model directories copied to disk with parallel
//! range requests, atomically per file, resumed, verified against the
//! sha256 the source gives and the header rules, nothing left behind.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use tensorfile_remote::fetch::{fetch, FetchOptions, Outcome};
use tensorfile_remote::{Client, Problem};
use tensorfile_testkit::serve::{Fault, Server};

/// Names in a directory, sorted (hidden ones too), but for the notes of
/// what each fetched file was (tests/it/plain_servers.rs tests them).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".tensorfile-partial.fetched"))
        .collect();
    v.sort();
    v
}

fn small_chunks(concurrency: usize) -> Arc<Client> {
    Client::new(
        common::fast()
            .with_chunk_size(16 << 10)
            .with_concurrency(concurrency),
    )
}

fn options() -> FetchOptions {
    FetchOptions::default().with_sync(false)
}

/// A 3 MiB safetensors file.
fn big_file() -> Vec<u8> {
    let n = 3u64 << 20;
    let header = format!(r#"{{"t":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend((0..n).map(|i| (i % 253) as u8));
    file
}

#[test]
fn a_hub_repository_is_fetched_verified_and_then_up_to_date() {
    let _env = tensorfile_testkit::env_lock();
    let server = Server::start().unwrap();
    let src = common::fixtures().join("real/sharded/unet_sharded_safetensors");
    let files: Vec<(String, Vec<u8>)> = common::files_under(&src)
        .into_iter()
        .map(|r| {
            (
                r.display().to_string(),
                std::fs::read(src.join(&r)).unwrap(),
            )
        })
        .collect();
    let as_refs: Vec<(&str, Vec<u8>)> =
        files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    server.hub_repo("org/unet", "main", &as_refs, None);
    std::env::set_var("HF_ENDPOINT", server.url());
    std::env::remove_var("HF_TOKEN");
    let dest = tempfile::tempdir().unwrap();
    let client = small_chunks(8);
    let got = fetch("hf://org/unet", dest.path(), &client, &options(), &()).unwrap();
    assert_eq!(got.files.len(), files.len());
    assert_eq!(got.set.map(|s| s.0), Some(4));
    for (name, bytes) in &files {
        assert_eq!(
            &std::fs::read(dest.path().join(name)).unwrap(),
            bytes,
            "{name}"
        );
    }
    for f in &got.files {
        assert_eq!(f.outcome, Outcome::Fetched);
        // The Hub gives the sha256 of LFS files (the weights).
        assert_eq!(
            f.sha256.is_some(),
            f.name.ends_with(".safetensors"),
            "{f:?}"
        );
        assert_eq!(f.header_checked, f.name.ends_with(".safetensors"));
    }
    let mut expected: Vec<String> = files.iter().map(|(n, _)| n.clone()).collect();
    expected.sort();
    assert_eq!(names(dest.path()), expected, "nothing else is left");
    // Again: the weights are there with the right sha256, the small files
    // with the ETag they were fetched with.
    let again = fetch("hf://org/unet", dest.path(), &client, &options(), &()).unwrap();
    for f in &again.files {
        assert_eq!(f.outcome, Outcome::UpToDate, "{f:?}");
        assert_eq!(
            f.sha256.is_some(),
            f.name.ends_with(".safetensors"),
            "{f:?}"
        );
    }
    // A corrupted body is caught by the sha256, named, and left nowhere.
    let fresh = tempfile::tempdir().unwrap();
    server.inject(
        "/cdn/org/unet/resolve/main/diffusion_pytorch_model-00002",
        Fault::Corrupt,
        1,
    );
    let e = fetch("hf://org/unet", fresh.path(), &client, &options(), &()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with(
            "hf://org/unet/diffusion_pytorch_model-00002-of-00004.safetensors: sha256 mismatch"
        ),
        "{text}"
    );
    assert!(!names(fresh.path())
        .iter()
        .any(|n| n.contains("00002-of-00004")));
}

#[test]
fn an_interrupted_fetch_resumes_where_it_stopped() {
    let server = Server::start().unwrap();
    let file = big_file();
    server.put("/m/big.safetensors", file.clone());
    let url = format!("{}/m/big.safetensors", server.url());
    let dest = tempfile::tempdir().unwrap();
    let target = dest.path().join("big.safetensors");
    // A budget of 40 requests stops it part way (192 chunks of 16 KiB).
    let client = Client::new(
        common::fast()
            .with_chunk_size(16 << 10)
            .with_concurrency(4)
            .with_max_requests(Some(40)),
    );
    let e = fetch(&url, &target, &client, &options(), &()).unwrap_err();
    assert!(
        matches!(
            common::remote(&e).problem,
            Problem::Budget {
                what: "requests",
                ..
            }
        ),
        "{e}"
    );
    assert!(!target.exists());
    let left = names(dest.path());
    assert_eq!(
        left,
        [
            ".big.safetensors.tensorfile-partial",
            ".big.safetensors.tensorfile-partial.json"
        ]
    );
    server.reset();
    let got = fetch(&url, &target, &small_chunks(4), &options(), &()).unwrap();
    let Outcome::Resumed { from } = got.files[0].outcome else {
        panic!("{:?}", got.files[0]);
    };
    assert!(from >= 30 * (16 << 10), "{from}");
    assert_eq!(std::fs::read(&target).unwrap(), file);
    // Only what was missing was asked for (and the first 64 KiB again).
    let (_, sent) = server.counts();
    assert!(
        sent <= file.len() as u64 - from + (64 << 10),
        "{sent} {from}"
    );
    assert_eq!(names(dest.path()), ["big.safetensors"]);

    // An object that changed since starts over.
    let client = Client::new(
        common::fast()
            .with_chunk_size(16 << 10)
            .with_concurrency(4)
            .with_max_requests(Some(40)),
    );
    let target2 = dest.path().join("again.safetensors");
    fetch(&url, &target2, &client, &options(), &()).unwrap_err();
    let mut changed = file.clone();
    *changed.last_mut().unwrap() = 7;
    server.put("/m/big.safetensors", changed.clone());
    let got = fetch(&url, &target2, &small_chunks(4), &options(), &()).unwrap();
    assert_eq!(got.files[0].outcome, Outcome::Fetched);
    assert_eq!(std::fs::read(&target2).unwrap(), changed);
}

#[test]
fn files_breaking_the_header_rules_are_refused_and_removed() {
    let server = Server::start().unwrap();
    let bad = common::fixtures().join("invalid/overlap.safetensors");
    server.put("/m/overlap.safetensors", std::fs::read(&bad).unwrap());
    let url = format!("{}/m/overlap.safetensors", server.url());
    let dest = tempfile::tempdir().unwrap();
    let e = fetch(&url, dest.path(), &small_chunks(2), &options(), &()).unwrap_err();
    assert!(e.to_string().starts_with(&format!("{url}: rule ")), "{e}");
    assert_eq!(e.rule(), Some(5), "{e}");
    assert!(names(dest.path()).is_empty(), "{:?}", names(dest.path()));
}

#[test]
fn an_http_directory_gives_its_set_and_side_files() {
    let server = Server::start().unwrap();
    let src = common::fixtures().join("real/mlx_lm/mixtral_q4");
    for rel in common::files_under(&src) {
        server.put(
            &format!("/m/{}", rel.display()),
            std::fs::read(src.join(&rel)).unwrap(),
        );
    }
    let dest = tempfile::tempdir().unwrap();
    let out = dest.path().join("model");
    let got = fetch(
        &format!("{}/m/", server.url()),
        &out,
        &small_chunks(8),
        &options(),
        &(),
    )
    .unwrap();
    assert!(got.set.is_some());
    let mut expected: Vec<String> = common::files_under(&src)
        .iter()
        .map(|r| r.display().to_string())
        .collect();
    expected.sort();
    assert_eq!(names(&out), expected);
    for name in expected {
        assert_eq!(
            std::fs::read(out.join(&name)).unwrap(),
            std::fs::read(src.join(&name)).unwrap()
        );
    }
}

#[test]
fn a_single_file_goes_to_a_path_or_into_a_directory() {
    let server = Server::start().unwrap();
    let src = common::fixtures().join("valid/minimal_bf16.safetensors");
    let bytes = std::fs::read(&src).unwrap();
    server.put("/x/minimal_bf16.safetensors", bytes.clone());
    let url = format!("{}/x/minimal_bf16.safetensors", server.url());
    let dest = tempfile::tempdir().unwrap();
    let got = fetch(&url, dest.path(), &small_chunks(2), &options(), &()).unwrap();
    assert_eq!(got.dest, dest.path().join("minimal_bf16.safetensors"));
    let path = dest.path().join("sub/renamed.safetensors");
    fetch(&url, &path, &small_chunks(2), &options(), &()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// The error of a fetch refused for what is at its partial file's name.
fn is_unsafe_partial(e: &tensorfile_core::Error) -> bool {
    matches!(
        e.detail(),
        tensorfile_core::Error::Output {
            problem: tensorfile_core::OutputError::UnsafePartial { .. },
            ..
        }
    )
}

/// A symbolic link planted at the partial file's predictable name is never
/// followed: the file it points to outside DEST is untouched, the fetch
/// fails naming the partial file, DEST/NAME is not created, and the link
/// is left for the user to look at.
#[cfg(unix)]
#[test]
fn a_link_planted_at_the_partial_name_is_refused_not_followed() {
    let server = Server::start().unwrap();
    let bytes = std::fs::read(common::fixtures().join("valid/minimal_bf16.safetensors")).unwrap();
    server.put("/x/m.safetensors", bytes);
    let url = format!("{}/x/m.safetensors", server.url());
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let planted = ".m.safetensors.tensorfile-partial";
    std::os::unix::fs::symlink(&victim, dest.path().join(planted)).unwrap();
    let e = fetch(&url, dest.path(), &small_chunks(2), &options(), &()).unwrap_err();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(is_unsafe_partial(&e), "{e:?}");
    assert!(e.to_string().contains(planted), "{e}");
    assert_eq!(names(dest.path()), [planted]);
    assert!(dest.path().join(planted).is_symlink());
}

/// A link planted at the partial file's note is neither read through nor
/// written through: the note of a fetch that stops part way replaces the
/// link, and the file it pointed to is untouched.
#[cfg(unix)]
#[test]
fn a_link_planted_at_the_partial_note_is_replaced_not_followed() {
    let server = Server::start().unwrap();
    server.put("/m/big.safetensors", big_file());
    let url = format!("{}/m/big.safetensors", server.url());
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let note = dest.path().join(".big.safetensors.tensorfile-partial.json");
    std::os::unix::fs::symlink(&victim, &note).unwrap();
    // A budget of 10 requests stops it part way, and the note is written.
    let client = Client::new(
        common::fast()
            .with_chunk_size(16 << 10)
            .with_concurrency(2)
            .with_max_requests(Some(10)),
    );
    fetch(&url, dest.path(), &client, &options(), &()).unwrap_err();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!note.is_symlink());
    assert!(!dest.path().join("big.safetensors").exists());
}

/// Anything but a regular file at the partial name (a FIFO here) is
/// refused as such, naming it, and left where it is.
#[cfg(unix)]
#[test]
fn a_fifo_at_the_partial_name_is_refused() {
    let server = Server::start().unwrap();
    let bytes = std::fs::read(common::fixtures().join("valid/minimal_bf16.safetensors")).unwrap();
    server.put("/x/m.safetensors", bytes);
    let url = format!("{}/x/m.safetensors", server.url());
    let dest = tempfile::tempdir().unwrap();
    let fifo = dest.path().join(".m.safetensors.tensorfile-partial");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let e = fetch(&url, dest.path(), &small_chunks(2), &options(), &()).unwrap_err();
    assert!(is_unsafe_partial(&e), "{e:?}");
    assert!(e.to_string().contains("tensorfile-partial"), "{e}");
    assert_eq!(names(dest.path()), [".m.safetensors.tensorfile-partial"]);
}
