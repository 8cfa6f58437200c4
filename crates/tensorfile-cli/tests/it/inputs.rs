//! Inputs of the wrong kind are named for what they are, with what to do.

use std::path::Path;
use std::process::Output;
use tensorfile_testkit::fixtures;

fn tensorfile(args: &[&str]) -> Output {
    tensorfile_testkit::run(env!("CARGO_BIN_EXE_tensorfile"), args)
}

#[test]
fn safetensors_commands_given_a_pytorch_checkpoint_point_to_convert() {
    let pt = fixtures().join("pytorch/zip_simple.pt");
    let pt = pt.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.safetensors");
    let out = out.to_str().unwrap();
    let outdir = dir.path().join("shards");
    for args in [
        vec!["rewrite", pt, out],
        vec!["shard", pt, outdir.to_str().unwrap()],
        vec!["quantize", "--scheme", "int4-g32-sym", pt, out],
        vec!["dequantize", pt, out],
    ] {
        let o = tensorfile(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("zip_simple.pt: this is a PyTorch checkpoint, not safetensors")
                && err.contains("tensorfile convert"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("rule 1"), "{args:?}: {err}");
    }
    // validate reports it as an invalid safetensors file, on its line.
    let o = tensorfile(&["validate", pt]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with(&format!("{pt}: invalid: "))
            && text.contains("PyTorch checkpoint")
            && text.contains("tensorfile convert"),
        "{text}"
    );
}

#[test]
fn a_directory_without_weights_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let out = dir.path().join("o.safetensors");
    for args in [
        vec!["convert", d, out.to_str().unwrap()],
        vec!["inspect", d],
    ] {
        let o = tensorfile(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("holding no model weights"), "{args:?}: {err}");
        assert!(!err.contains("os error 21"), "{args:?}: {err}");
    }
}

fn tensors_of(dir: &Path) -> Vec<(String, Vec<String>)> {
    let set = tensorfile_core::ShardedTensors::open(dir).unwrap();
    set.shards()
        .iter()
        .map(|s| {
            let mut names: Vec<String> = s.header().tensors().map(|t| t.name.to_string()).collect();
            names.sort();
            (s.name().to_string(), names)
        })
        .collect()
}

#[test]
fn sets_in_give_sets_out_one_shard_per_shard_or_recut() {
    let src = fixtures().join("real/sharded/unet_sharded_safetensors");
    let before = tensors_of(&src);
    assert!(before.len() > 1);
    for cmd in [
        vec!["rewrite"],
        vec!["convert", "--dtype", "f16"],
        vec!["convert"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut args = cmd.clone();
        args.extend([src.to_str().unwrap(), out.to_str().unwrap(), "--no-sync"]);
        let o = tensorfile(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // The same files (diffusers' names kept), the same tensors in each.
        assert_eq!(tensors_of(&out), before, "{args:?}");
        assert!(out
            .join("diffusion_pytorch_model.safetensors.index.json")
            .is_file());
    }
    // Re-cut into shards of at most 100 KB.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = tensorfile(&[
        "rewrite",
        "--max-shard-size",
        "100KB",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let after = tensors_of(&out);
    let all = |v: &[(String, Vec<String>)]| {
        let mut n: Vec<String> = v.iter().flat_map(|(_, t)| t.clone()).collect();
        n.sort();
        n
    };
    assert_eq!(all(&after), all(&before));
    let set = tensorfile_core::ShardedTensors::open(&out).unwrap();
    for s in set.shards() {
        let big = s.header().tensors().any(|t| t.nbytes() > 100_000);
        assert!(s.header().data_len() <= 100_000 || (big && s.header().len() == 1));
    }
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join("diffusion_pytorch_model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    assert!(index["metadata"]["total_parameters"].as_u64().unwrap() > 0);
}
