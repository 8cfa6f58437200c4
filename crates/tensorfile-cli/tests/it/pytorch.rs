//! `inspect` and `convert` on PyTorch checkpoints, run as a user runs them.

use std::path::{Path, PathBuf};
use std::process::Output;
use tensorfile::Decode;
use tensorfile_testkit::stdout;

use serde_json::Value;

/// The hostile checkpoints of issue 12, built at test time.
use tensorfile_testkit::hostile;

fn pytorch(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pytorch")
        .join(name)
}

fn tensorfile(args: &[&str]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

#[test]
fn inspect_describes_checkpoints() {
    let p = pytorch("zip_views.pt");
    let o = tensorfile(&["inspect", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(text.contains("format: PyTorch zip checkpoint"), "{text}");
    assert!(text.contains("tensors: 5"), "{text}");
    assert!(text.contains("\n  t     F32    [4, 3]  "), "{text}");

    let p = pytorch("legacy_simple.pt");
    let o = tensorfile(&["inspect", "--json", "--hash", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["format"], "PyTorch legacy checkpoint (before 1.6)");
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 3);
    assert_eq!(tensors[0]["name"], "a");
    assert_eq!(
        tensors[0]["sha256"],
        "e2c0a71510b5394df7773b63fb5f54372b84c3564e67811bde7d665be227976d"
    );
}

#[test]
fn inspect_refuses_hostile_checkpoints_on_one_line() {
    for name in [
        "evil_posix_system.pt",
        "hostile_deep_nesting.pt",
        "reject_torchscript.pt",
        "tar_format_stub.pt",
    ] {
        let p = pytorch(name);
        let o = tensorfile(&["inspect", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{name}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("tensorfile: "), "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn convert_writes_a_canonical_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tied.safetensors");
    let p = pytorch("zip_tied.pt");
    let o = tensorfile(&[
        "convert",
        "--no-sync",
        p.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout(&o).contains("1 tensor (+1 alias)"), "{}", stdout(&o));
    assert!(o.stderr.is_empty(), "no progress bar off a terminal");
    let file = tensorfile::SafeTensors::open(&out).unwrap();
    assert_eq!(
        file.metadata()
            .unwrap()
            .get("head.weight")
            .map(String::as_str),
        Some("emb.weight")
    );
    let again = tensorfile_core::writer::serialize(file.tensors(), file.metadata()).unwrap();
    assert!(again == file.as_bytes(), "canonical");

    // A safetensors input is a canonical rewrite: the same bytes again.
    let out2 = dir.path().join("again.safetensors");
    let o = tensorfile(&["convert", out.to_str().unwrap(), out2.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&out2).unwrap());

    // --shared copy keeps both names.
    let o = tensorfile(&[
        "convert",
        "--shared",
        "copy",
        "--json",
        p.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (v["tensors"].as_u64(), v["aliases"].as_u64()),
        (Some(2), Some(0))
    );
}

#[test]
fn refused_conversion_exits_1_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("reject_conj.pt", None),
        ("evil_builtins_eval.pt", None),
        ("zip_views.pt", Some("--shared=error")),
        ("zip_simple.pt", Some("--key=nope")),
    ] {
        let out = dir.path().join("out.safetensors");
        let p = pytorch(name);
        let mut args = vec!["convert", p.to_str().unwrap(), out.to_str().unwrap()];
        args.extend(extra);
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(1), "{name}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(!out.exists(), "{name}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{name}: no temporary file left"
        );
    }
}

#[test]
fn convert_casts_checkpoints_with_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("views.safetensors");
    let p = pytorch("zip_views.pt");
    let o = tensorfile(&[
        "convert",
        "--dtype",
        "bf16",
        p.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let file = tensorfile::SafeTensors::open(&out).unwrap();
    let col = file.get("col").unwrap();
    assert_eq!(col.dtype(), tensorfile::Dtype::BF16);
    assert_eq!(col.to_f32_vec().unwrap(), [1.0, 5.0, 9.0]);
    let t = file.get("t").unwrap();
    assert_eq!(t.shape(), [4, 3]);
    assert_eq!(t.to_f32_vec().unwrap()[..4], [0.0, 4.0, 8.0, 1.0]);
    assert_eq!(
        file.metadata().unwrap().get("format").map(String::as_str),
        Some("pt")
    );
}

/// Runs `tensorfile` on a hostile checkpoint written into `dir`.
fn on_hostile(dir: &Path, file: &str, bytes: Vec<u8>, args: &[&str]) -> (Output, PathBuf) {
    let input = dir.join(file);
    std::fs::write(&input, bytes).unwrap();
    let mut all: Vec<&str> = args.to_vec();
    all.push(input.to_str().unwrap());
    let out = dir.join(format!("{file}.safetensors"));
    if args.first() == Some(&"convert") {
        all.push(out.to_str().unwrap());
    }
    (tensorfile(&all), out)
}

/// Exit 1 with one line naming `budget`, and no output file.
fn assert_refused(o: &Output, out: &Path, budget: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(budget), "{err}");
    assert!(!out.exists());
}

#[test]
fn hostile_expansions_are_refused_by_their_budget() {
    let dir = tempfile::tempdir().unwrap();
    let big = || hostile::expansions(16, 1 << 22);
    for cmd in [&["convert", "--no-sync"][..], &["inspect"]] {
        let (o, out) = on_hostile(dir.path(), "e16.pt", big(), cmd);
        assert_refused(&o, &out, "max_expanded_total_bytes");
        assert!(String::from_utf8_lossy(&o.stderr).contains("2147483648 B needed"));
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the input"
    );
    // Listing them reads no bytes: with the budget raised, inspect works.
    let (o, _) = on_hostile(
        dir.path(),
        "e16.pt",
        big(),
        &[
            "inspect",
            "--json",
            "--max-expanded-total-bytes",
            "17179869184",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["tensors"].as_array().unwrap().len(), 16);

    // One byte under the total refuses; exactly the total converts (every
    // name counts, and with --shared copy every name is written).
    let small = || hostile::expansions(4, 1000);
    let (o, out) = on_hostile(
        dir.path(),
        "e4.pt",
        small(),
        &[
            "convert",
            "--no-sync",
            "--max-expanded-total-bytes",
            "1023999",
        ],
    );
    assert_refused(&o, &out, "max_expanded_total_bytes");
    let (o, out) = on_hostile(
        dir.path(),
        "e4.pt",
        small(),
        &[
            "convert",
            "--no-sync",
            "--shared",
            "copy",
            "--max-expanded-total-bytes",
            "1024000",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let file = tensorfile::SafeTensors::open(&out).unwrap();
    assert_eq!(file.len(), 4);
    assert!(file.tensors().all(|t| t.data().len() == 256_000));
}

#[test]
fn the_clone_bombs_are_refused_as_torch_refuses_them() {
    // The two files (REDUCE and NEWOBJ of torch.Size over a
    // memoized tuple of a million Nones, dropped with POP): torch's
    // restricted unpickler refuses them ("Unsupported operand 48"), so does
    // every command, naming the opcode and its offset, leaving no file.
    use tensorfile_testkit::{run_limited, Limits};
    let dir = tempfile::tempdir().unwrap();
    for apply in [hostile::Apply::Reduce, hostile::Apply::NewObj] {
        let input = dir.path().join("bomb.pt");
        std::fs::write(
            &input,
            hostile::clone_bomb(apply, hostile::Shared::Tuple, 1_000_000, 2000),
        )
        .unwrap();
        let out = dir.path().join("out.safetensors");
        for args in [
            vec!["convert".as_ref(), input.as_os_str(), out.as_os_str()],
            vec!["inspect".as_ref(), input.as_os_str()],
        ] {
            let run = run_limited(env!("CARGO_BIN_EXE_tensorfile"), &args, Limits::HOSTILE);
            run.assert_within(Limits::HOSTILE, "a clone bomb");
            assert_eq!(run.code, Some(1), "{apply:?}: {}", run.stderr);
            assert!(
                run.stderr
                    .contains("pickle byte 1000009: opcode POP (0x30) is refused"),
                "{apply:?}: {}",
                run.stderr
            );
        }
        assert_eq!(tensorfile_testkit::entries(dir.path()), ["bomb.pt"]);
    }
}

#[test]
fn a_far_memo_id_costs_one_entry() {
    // LONG_BINPUT 19,999,999 of None: a dense memo wanted 480 MB (refused
    // by the pickle budget); the map holds one entry, and the checkpoint
    // loads as torch loads it (a None, no tensors).
    use tensorfile_testkit::{run_limited, Limits};
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("memo.pt");
    std::fs::write(&input, hostile::sparse_memo()).unwrap();
    let args = ["inspect".as_ref(), input.as_os_str()];
    let run = run_limited(env!("CARGO_BIN_EXE_tensorfile"), args, Limits::HOSTILE);
    run.assert_within(Limits::HOSTILE, "a far memo id");
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("tensors: 0"), "{}", run.stdout);
    assert!(run.max_rss < 64 << 20, "{} B peak", run.max_rss);
}

#[test]
fn views_of_a_deflated_gib_convert_and_hash() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = || hostile::deflated_views(128, 1 << 30, false);
    let (o, out) = on_hostile(dir.path(), "d.pt", bytes(), &["convert", "--no-sync"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let file = tensorfile::SafeTensors::open(&out).unwrap();
    assert_eq!(file.len(), 128);
    assert!(file.tensors().all(|t| t.data() == [0u8; 4]));
    let (o, _) = on_hostile(
        dir.path(),
        "d.pt",
        bytes(),
        &["inspect", "--hash", "--json"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let zeros = "df3f619804a92fdb4057192dc43dd748ea778adc52bc498ce80524c014b81119";
    assert!(v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["sha256"] == zeros));
    // The budget too small for its 512 bytes refuses.
    let (o, out) = on_hostile(
        dir.path(),
        "d511.pt",
        bytes(),
        &["convert", "--max-inflated-bytes", "511"],
    );
    assert_refused(&o, &out, "max_inflated_bytes");
}

#[test]
fn budget_flags_apply_only_to_pytorch_input() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("a.safetensors");
    let o = tensorfile(&[
        "convert",
        pytorch("zip_simple.pt").to_str().unwrap(),
        st.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    for cmd in ["inspect", "convert"] {
        let mut args = vec![cmd, "--max-inflated-bytes", "1", st.to_str().unwrap()];
        let out = dir.path().join("b.safetensors");
        if cmd == "convert" {
            args.push(out.to_str().unwrap());
        }
        let o = tensorfile(&args);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        assert!(String::from_utf8_lossy(&o.stderr)
            .contains("--max-inflated-bytes applies only to PyTorch input"));
    }
}

fn real(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real")
        .join(path)
}

#[test]
fn convert_writes_a_sharded_set_from_a_bin_set() {
    let dir = tempfile::tempdir().unwrap();
    let input = real("sharded/llama_tied_bin");
    let out = dir.path().join("out");
    let o = tensorfile(&[
        "convert",
        "--no-sync",
        "--json",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["input_format"], "pytorch-set");
    assert_eq!(
        (v["tensors"].as_u64(), v["aliases"].as_u64()),
        (Some(20), Some(1))
    );
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "model-00001-of-00004.safetensors",
            "model-00002-of-00004.safetensors",
            "model-00003-of-00004.safetensors",
            "model-00004-of-00004.safetensors",
            "model.safetensors.index.json",
        ]
    );
    // The set validates; re-cut with --max-shard-size, and cast.
    let o = tensorfile(&["validate", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let recut = dir.path().join("recut");
    let index = input.join("pytorch_model.bin.index.json");
    let o = tensorfile(&[
        "convert",
        "--no-sync",
        "--max-shard-size",
        "1MB",
        "--dtype",
        "bf16",
        index.to_str().unwrap(),
        recut.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stdout(&o).contains("1 file, 20 tensors (+1 alias), 20 cast to BF16"),
        "{}",
        stdout(&o)
    );
    assert!(recut.join("model.safetensors").exists());
}

#[test]
fn convert_takes_a_directory_of_one_checkpoint_and_cuts_with_max_shard_size() {
    let dir = tempfile::tempdir().unwrap();
    let input = real("tied_bin/llama/bin");
    let bin = input.join("pytorch_model.bin");
    // A directory holding one pytorch_model.bin and no index is that
    // checkpoint, as a directory holding one model.safetensors is that file.
    let from_dir = dir.path().join("from_dir.safetensors");
    let from_bin = dir.path().join("from_bin.safetensors");
    for (input, out) in [(&input, &from_dir), (&bin, &from_bin)] {
        let o = tensorfile(&[
            "convert",
            "--no-sync",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{o:?}");
    }
    assert_eq!(
        std::fs::read(&from_dir).unwrap(),
        std::fs::read(&from_bin).unwrap()
    );
    // --max-shard-size makes a set of a single checkpoint's conversion, as
    // of a single safetensors file's.
    let cut = dir.path().join("cut");
    let o = tensorfile(&[
        "convert",
        "--no-sync",
        "--json",
        "--max-shard-size",
        "40KB",
        bin.to_str().unwrap(),
        cut.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let files = v["files"].as_array().unwrap();
    assert!(files.len() > 1, "{v}");
    assert!(cut.join("model.safetensors.index.json").exists());
    let o = tensorfile(&["validate", cut.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // A directory with no weights explains itself on one line.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = dir.path().join("out");
    let o = tensorfile(&["convert", empty.to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no model weights"), "{err}");
    assert!(err.contains("empty"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists());
}

#[test]
fn inspect_counts_a_tied_tensor_once() {
    let bin = real("tied_bin/llama/bin/pytorch_model.bin");
    let o = tensorfile(&["inspect", "--json", bin.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let tensors = v["tensors"].as_array().unwrap();
    let all: u64 = tensors
        .iter()
        .map(|t| {
            t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .product::<u64>()
        })
        .sum();
    // The embedding (256 x 32) is also lm_head.weight.
    assert_eq!(v["parameters"].as_u64(), Some(all - 256 * 32));
}

#[test]
fn a_cast_of_a_checkpoint_reports_what_it_lost_and_strict_refuses_it() {
    use hostile::{Record, Storage, Tensor};
    let dir = tempfile::tempdir().unwrap();
    let values: [f32; 4] = [1e6, -1e6, 1e-9, 1.0];
    let storages = [Storage::f32("0", 4)];
    let tensors = [Tensor::view("big", 0, 0, &[4], &[1])];
    let bytes = hostile::checkpoint(
        Record::stored(
            "archive/data.pkl",
            hostile::state_dict_pickle(&storages, &tensors),
        ),
        vec![Record::stored(
            "archive/data/0",
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )],
    );
    let input = dir.path().join("big.pt");
    std::fs::write(&input, bytes).unwrap();
    let out = dir.path().join("out.safetensors");
    let (i, o) = (input.to_str().unwrap(), out.to_str().unwrap());
    let r = tensorfile(&["convert", "--json", "--dtype", "f16", i, o]);
    assert_eq!(r.status.code(), Some(0), "{r:?}");
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(
        err.trim_end(),
        format!("tensorfile: warning: {o}: tensor \"big\": 2 overflowed to inf, 1 flushed to zero (--strict refuses this)")
    );
    let v: Value = serde_json::from_str(&stdout(&r)).unwrap();
    assert_eq!(v["losses"]["big"]["to_inf"], 2);
    std::fs::remove_file(&out).unwrap();
    let r = tensorfile(&["convert", "--strict", "--dtype", "f16", i, o]);
    assert_eq!(r.status.code(), Some(1), "{r:?}");
    assert!(String::from_utf8_lossy(&r.stderr).contains("overflows to inf in F16"));
    assert!(!out.exists(), "a refused conversion writes nothing");
}
