//! `hash` and `verify`: digests against sha2 computed here, the
//! model-signing manifest against the one the `model-signing` package made
//! (tests/fixtures/signing, scripts/make_signing_fixtures.py), exit
//! statuses 0/1/2, and embedded per-tensor digests naming a corrupted tensor.

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::Output;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tensorfile_testkit::{fixtures, json};

fn run(args: &[&dyn AsRef<OsStr>]) -> Output {
    let bin = env!("CARGO_BIN_EXE_tensorfile");
    tensorfile_testkit::run(bin, args.iter().map(|a| a.as_ref()))
}

fn hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn hash_gives_file_data_and_tensor_digests() {
    let path = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let bytes = fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let o = run(&[&"hash", &"--json", &"--per-tensor", &path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    let f = &v["files"][0];
    assert_eq!(f["sha256"], hex(&bytes));
    assert_eq!(f["data_sha256"], hex(&bytes[8 + n..]));
    assert_eq!(f["data_start"], 8 + n as u64);
    // Per tensor: the same digests as inspect --hash.
    let inspect = json(&run(&[&"inspect", &"--json", &"--hash", &path]));
    let tensors = f["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), inspect["tensors"].as_array().unwrap().len());
    for t in inspect["tensors"].as_array().unwrap() {
        let mine = tensors.iter().find(|m| m["name"] == t["name"]).unwrap();
        assert_eq!(mine["sha256"], t["sha256"]);
        let (a, b) = (
            t["data_offsets"][0].as_u64().unwrap() as usize,
            t["data_offsets"][1].as_u64().unwrap() as usize,
        );
        assert_eq!(t["sha256"], hex(&bytes[8 + n + a..8 + n + b]));
    }
    // Text: sha256sum's line first.
    let o = run(&[&"hash", &path]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.starts_with(&format!("{}  {}\n", hex(&bytes), path.display())));
    // Several files at once: the same digests in the order given.
    let other = fixtures().join("valid/minimal_bf16.safetensors");
    let v = json(&run(&[&"hash", &"--json", &"--file-only", &other, &path]));
    assert_eq!(v["files"][0]["sha256"], hex(&fs::read(&other).unwrap()));
    assert_eq!(v["files"][1]["sha256"], hex(&bytes));
    assert!(v["files"][1]["data_sha256"].is_null());
    // An unreadable input: exit 1 (hash is not a comparison).
    assert_eq!(run(&[&"hash", &"/nonexistent/x"]).status.code(), Some(1));
    // An invalid *.safetensors file: its sha256 all the same (what a bad
    // download is checked with), the reason on stderr, exit 1.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("cut.safetensors");
    fs::write(&bad, &bytes[..bytes.len() - 3]).unwrap();
    let o = run(&[&"hash", &"--json", &bad]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["files"][0]["sha256"], hex(&bytes[..bytes.len() - 3]));
    assert!(v["files"][0]["data_sha256"].is_null());
    assert!(v["files"][0]["invalid"].as_str().unwrap().contains("rule"));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cut.safetensors"));
}

#[test]
fn the_manifest_is_model_signings() {
    let signing = fixtures().join("signing");
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    copy_dir(&signing.join("model"), &model);
    // Written inside the directory: left out of itself.
    let manifest = model.join("manifest.json");
    let o = run(&[&"hash", &"--write-manifest", &manifest, &model]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ours: Value = serde_json::from_slice(&fs::read(&manifest).unwrap()).unwrap();
    let theirs: Value =
        serde_json::from_slice(&fs::read(signing.join("manifest.json")).unwrap()).unwrap();
    for key in ["_type", "subject", "predicateType"] {
        assert_eq!(ours[key], theirs[key], "{key}");
    }
    assert_eq!(
        ours["predicate"]["resources"],
        theirs["predicate"]["resources"]
    );
    let ser = &ours["predicate"]["serialization"];
    assert_eq!(ser["method"], "files");
    assert_eq!(ser["hash_type"], "sha256");

    let o = run(&[&"verify", &model, &"--manifest", &manifest]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Against model-signing's own: our manifest.json is a file it does not list.
    let o = run(&[
        &"verify",
        &model,
        &"--manifest",
        &signing.join("manifest.json"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("EXTRA manifest.json"));
    let ours = dir.path().join("ours.json");
    fs::rename(&manifest, &ours).unwrap();
    for m in [signing.join("manifest.json"), signing.join("model.sig")] {
        let o = run(&[&"verify", &model, &"--manifest", &m]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = run(&[&"verify", &model, &"--manifest", &signing.join("model.sig")]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("signature was not checked"));

    // One changed, one removed, one added: each named, exit 1.
    fs::write(model.join("a.txt"), "changed\n").unwrap();
    fs::remove_file(model.join("empty")).unwrap();
    fs::write(model.join("new.bin"), "x").unwrap();
    let o = run(&[
        &"verify",
        &"--json",
        &model,
        &"--manifest",
        &signing.join("model.sig"),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["verdict"], "mismatch");
    assert_eq!(v["mismatched"][0]["name"], "a.txt");
    assert_eq!(v["missing"], serde_json::json!(["empty"]));
    assert_eq!(v["extra"], serde_json::json!(["new.bin"]));

    // Unreadable or invalid manifests, a missing directory: exit 2.
    let bad = dir.path().join("bad.json");
    fs::write(&bad, "{\"_type\": 3}").unwrap();
    for m in [bad, dir.path().join("none.json")] {
        assert_eq!(
            run(&[&"verify", &model, &"--manifest", &m]).status.code(),
            Some(2)
        );
    }
    assert_eq!(
        run(&[&"verify", &dir.path().join("gone"), &"--manifest", &ours])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn verify_one_file_by_sha256() {
    let path = fixtures().join("valid/minimal_bf16.safetensors");
    let good = hex(&fs::read(&path).unwrap());
    assert_eq!(
        run(&[&"verify", &path, &"--sha256", &good]).status.code(),
        Some(0)
    );
    let upper = good.to_uppercase();
    assert_eq!(
        run(&[&"verify", &path, &"--sha256", &upper]).status.code(),
        Some(0)
    );
    let wrong = hex(b"other");
    let o = run(&[&"verify", &path, &"--sha256", &wrong]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("MISMATCH"));
    assert_eq!(
        run(&[&"verify", &path, &"--sha256", &"abc"]).status.code(),
        Some(2)
    );
    // No digests to check against: a usage error.
    assert_eq!(run(&[&"verify", &path]).status.code(), Some(2));
}

#[test]
fn a_manifest_that_checks_nothing_verifies_nothing() {
    // A manifest of an empty directory lists no file: checking the same
    // empty directory against it finds no mismatch but proves nothing.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    fs::create_dir(&model).unwrap();
    // Hashing the empty directory alone is refused: nothing to hash is
    // more likely a wrong path than a model.
    let o = run(&[&"hash", &model]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("holding no files to hash"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let manifest = dir.path().join("m.json");
    let o = run(&[&"hash", &"--write-manifest", &manifest, &model]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&[&"verify", &model, &"--manifest", &manifest]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("nothing verified (0 files checked"), "{text}");
    assert!(!text.contains(": ok"), "{text}");
    let o = run(&[&"verify", &model, &"--manifest", &manifest, &"--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["verdict"], "nothing verified");
    assert_eq!(v["count"], 0);
    // One file in the directory and none in the manifest: a real failure
    // (an extra file), still exit 1 and said as before.
    fs::write(model.join("a.bin"), b"a").unwrap();
    let o = run(&[&"verify", &model, &"--manifest", &manifest, &"--json"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json(&o)["verdict"], "mismatch");
}

#[test]
fn embedded_digests_name_the_corrupted_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let out = dir.path().join("out.safetensors");
    let cases: [&[&str]; 3] = [
        &["rewrite", "--embed-hash"],
        &["convert", "--embed-hash", "--dtype", "f32"],
        &["quantize", "--embed-hash", "--scheme", "int4-g32-sym"],
    ];
    for args in cases {
        let mut full: Vec<&dyn AsRef<std::ffi::OsStr>> = args
            .iter()
            .map(|a| a as &dyn AsRef<std::ffi::OsStr>)
            .collect();
        full.push(&input);
        full.push(&out);
        let o = run(&full);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = run(&[&"verify", &out]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        // The embedded digests are the tensors' own.
        let inspect = json(&run(&[&"inspect", &"--json", &"--hash", &out]));
        let recorded: Value =
            serde_json::from_str(inspect["metadata"]["tensorfile.sha256"].as_str().unwrap())
                .unwrap();
        for t in inspect["tensors"].as_array().unwrap() {
            assert_eq!(recorded[t["name"].as_str().unwrap()], t["sha256"]);
        }
        // One flipped bit in the last tensor's data: found and named.
        let mut bytes = fs::read(&out).unwrap();
        let last = inspect["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .max_by_key(|t| t["data_offsets"][0].as_u64())
            .unwrap()
            .clone();
        let at =
            inspect["data_start"].as_u64().unwrap() + last["data_offsets"][0].as_u64().unwrap();
        bytes[at as usize] ^= 0x10;
        let bad = dir.path().join("bad.safetensors");
        fs::write(&bad, &bytes).unwrap();
        let o = run(&[&"verify", &"--json", &bad]);
        assert_eq!(o.status.code(), Some(1));
        let v = json(&o);
        assert_eq!(v["mismatched"].as_array().unwrap().len(), 1);
        assert_eq!(v["mismatched"][0]["name"], last["name"]);
    }
    // Truncated: unreadable, exit 2.
    let bytes = fs::read(&out).unwrap();
    let cut = dir.path().join("cut.safetensors");
    fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    assert_eq!(run(&[&"verify", &cut]).status.code(), Some(2));
}

#[test]
fn per_tensor_digests_of_a_pytorch_checkpoint_are_inspects() {
    let path = fixtures().join("pytorch/zip_simple.pt");
    let o = run(&[&"hash", &"--json", &"--per-tensor", &path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    let f = &v["files"][0];
    assert_eq!(f["sha256"], hex(&fs::read(&path).unwrap()));
    assert!(f["data_sha256"].is_null());
    let inspect = json(&run(&[&"inspect", &"--json", &"--hash", &path]));
    let tensors = f["tensors"].as_array().unwrap();
    assert!(!tensors.is_empty());
    for t in tensors {
        let theirs = inspect["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == t["name"])
            .unwrap();
        assert_eq!(theirs["sha256"], t["sha256"]);
    }
}

#[cfg(unix)]
#[test]
fn a_manifest_of_links_says_it_followed_them() {
    // A Hub cache snapshot: every file a link into blobs/.
    let dir = tempfile::tempdir().unwrap();
    let blobs = dir.path().join("blobs");
    let snap = dir.path().join("snapshot");
    fs::create_dir_all(&blobs).unwrap();
    fs::create_dir_all(&snap).unwrap();
    let weights = fs::read(fixtures().join("valid/worked_example.safetensors")).unwrap();
    fs::write(blobs.join("1"), &weights).unwrap();
    std::os::unix::fs::symlink(blobs.join("1"), snap.join("model.safetensors")).unwrap();
    let m = dir.path().join("m.json");
    assert!(run(&[&"hash", &"--write-manifest", &m, &snap])
        .status
        .success());
    let v: Value = serde_json::from_slice(&fs::read(&m).unwrap()).unwrap();
    assert_eq!(v["predicate"]["serialization"]["allow_symlinks"], true);
    assert_eq!(v["predicate"]["resources"][0]["digest"], hex(&weights));
    assert_eq!(
        run(&[&"verify", &snap, &"--manifest", &m]).status.code(),
        Some(0)
    );
}

#[test]
fn embedded_digests_of_a_set_and_of_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // A set in, a set out: each shard records its own tensors.
    let set = fixtures().join("real/sharded/unet_sharded_safetensors");
    let out = dir.path().join("set");
    let o = run(&[&"rewrite", &"--embed-hash", &set, &out]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&[&"verify", &"--json", &out]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v = json(&o);
    let inspect = json(&run(&[&"inspect", &"--json", &set]));
    assert_eq!(v["count"], inspect["tensors"].as_array().unwrap().len());
    // One byte of the third shard changed: named by tensor.
    let shard = out.join("diffusion_pytorch_model-00003-of-00004.safetensors");
    let mut bytes = fs::read(&shard).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&shard, &bytes).unwrap();
    let o = run(&[&"verify", &"--json", &out]);
    assert_eq!(o.status.code(), Some(1));
    let v = json(&o);
    assert_eq!(v["mismatched"].as_array().unwrap().len(), 1);

    // A PyTorch checkpoint converted with --embed-hash.
    let ckpt = fixtures().join("pytorch/zip_simple.pt");
    let st = dir.path().join("from_pt.safetensors");
    let o = run(&[&"convert", &"--embed-hash", &ckpt, &st]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(run(&[&"verify", &st]).status.code(), Some(0));
}

#[test]
fn digests_of_the_input_are_not_carried_to_other_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixtures().join("valid/llama_two_layers_bf16.safetensors");
    let embedded = dir.path().join("e.safetensors");
    assert!(run(&[&"rewrite", &"--embed-hash", &input, &embedded])
        .status
        .success());
    // Converted without --embed-hash: the input's digests do not hold for
    // the new bytes, and are not written.
    let f16 = dir.path().join("f16.safetensors");
    assert!(run(&[&"convert", &"--dtype", &"f16", &embedded, &f16])
        .status
        .success());
    let v = json(&run(&[&"inspect", &"--json", &f16]));
    assert!(v["metadata"].get("tensorfile.sha256").is_none(), "{v}");
    assert_eq!(run(&[&"verify", &f16]).status.code(), Some(2));
    // A set whose shards each carry their own digests still reads as one.
    let set = fixtures().join("real/sharded/unet_sharded_safetensors");
    let out = dir.path().join("set");
    assert!(run(&[&"rewrite", &"--embed-hash", &set, &out])
        .status
        .success());
    let o = run(&[&"diff", &set, &out]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
