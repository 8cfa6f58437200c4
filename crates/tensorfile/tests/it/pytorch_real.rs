//! Conversions of the files the real tools wrote (`tests/fixtures/real`,
//! see its README and manifests), issue 15 items 2 to 4:
//!
//! - tied `.bin` files of transformers 4.57 keep the name transformers
//!   keeps (the safetensors file it wrote has the same tensors, names and
//!   bytes as the conversion);
//! - `--key model` on a legacy training checkpoint whose optimizer
//!   storages the model subtree leaves unused;
//! - sharded `.bin` sets (a tied Llama, a diffusers UNet) to sharded
//!   safetensors sets with their index.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tensorfile::pytorch::{
    convert_file as convert, convert_set, plan_set, Checkpoint, CheckpointSet, ConvertOptions,
    LoadOptions,
};
use tensorfile::set::{ShardError, ShardIndex, ShardedTensors};
use tensorfile::SafeTensors;

fn real() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/real")
}

fn manifest(group: &str) -> serde_json::Value {
    let text = std::fs::read(real().join(group).join("manifest.json")).unwrap();
    serde_json::from_slice(&text).unwrap()
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn no_sync() -> ConvertOptions {
    let mut o = ConvertOptions::default();
    o.write.sync = false;
    o
}

/// Name -> (dtype, shape, sha256 of the bytes) of a safetensors file.
fn contents(path: &Path) -> BTreeMap<String, (String, Vec<u64>, String)> {
    let file = SafeTensors::open(path).unwrap();
    file.tensors()
        .map(|t| {
            (
                t.name().to_string(),
                (
                    t.dtype().name().to_string(),
                    t.shape().to_vec(),
                    sha(t.data()),
                ),
            )
        })
        .collect()
}

#[test]
fn tied_bins_keep_the_names_transformers_keeps() {
    let m = manifest("tied_bin");
    let dir = tempfile::tempdir().unwrap();
    let models = m["models"].as_object().unwrap();
    assert_eq!(models.len(), 5);
    for (model, spec) in models {
        let bin = real()
            .join("tied_bin")
            .join(model)
            .join("bin/pytorch_model.bin");
        let out = dir.path().join(format!("{model}.safetensors"));
        let report = convert(&bin, &out, &no_sync(), &()).unwrap();
        // What transformers 4.57 wrote from the same model.
        let theirs = real()
            .join("tied_bin")
            .join(model)
            .join("safetensors/model.safetensors");
        assert_eq!(contents(&out), contents(&theirs), "{model}");
        // The kept names are those both versions keep; every other tied
        // name is an alias of it in the metadata.
        let file = SafeTensors::open(&out).unwrap();
        let meta = file.metadata().unwrap();
        for version in ["transformers_4.57", "transformers_5"] {
            for kept in spec["kept_on_safetensors_save"][version]
                .as_array()
                .unwrap()
            {
                let kept = kept[0].as_str().unwrap();
                assert!(file.get(kept).is_some(), "{model}: {kept} not kept");
            }
        }
        let mut aliases = 0;
        for group in spec["tied_names_in_pickle_order"].as_array().unwrap() {
            let names: Vec<&str> = group
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_str().unwrap())
                .collect();
            for removed in &names[1..] {
                assert_eq!(
                    meta.get(*removed).map(String::as_str),
                    Some(names[0]),
                    "{model}"
                );
                aliases += 1;
            }
        }
        assert_eq!(report.aliases, aliases, "{model}");
        // The parameters counted once per tied tensor.
        let params: u128 = file
            .tensors()
            .map(|t| u128::from(tensorfile_core::dtype::numel(t.shape()).unwrap()))
            .sum();
        assert_eq!(report.parameters, params, "{model}");
    }
}

#[test]
fn key_model_of_a_legacy_training_checkpoint_converts() {
    let m = manifest("checkpoint");
    let spec = &m["files"]["legacy_train_checkpoint.pt"];
    let input = real().join("checkpoint/legacy_train_checkpoint.pt");
    let options = no_sync().with_load(LoadOptions::default().with_key(Some("model".into())));
    let ckpt = Checkpoint::open_with(&input, &options.load).unwrap();
    let want = spec["expected_key_model"]["tensors"].as_array().unwrap();
    assert_eq!(ckpt.len(), want.len());
    for w in want {
        let t = ckpt.tensor(w["name"].as_str().unwrap()).unwrap();
        assert_eq!(t.storage_key(), w["storage_key"]);
        assert_eq!(t.dtype().name(), w["dtype"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let report = convert(&input, &out, &options, &()).unwrap();
    assert_eq!(report.tensors, want.len());
    let got = contents(&out);
    for w in want {
        let (dtype, shape, digest) = &got[w["name"].as_str().unwrap()];
        assert_eq!(dtype, w["dtype"].as_str().unwrap());
        let shape_want: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(shape, &shape_want);
        assert_eq!(digest, w["sha256"].as_str().unwrap(), "{}", w["name"]);
    }
}

#[test]
fn a_sharded_tied_llama_bin_set_converts_shard_for_shard() {
    let input = real().join("sharded/llama_tied_bin");
    let bin_index = ShardIndex::read(input.join("pytorch_model.bin.index.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // The directory and the index itself are both ways in.
    for (way, input) in [
        ("dir", input.clone()),
        ("index", input.join("pytorch_model.bin.index.json")),
    ] {
        let out = out.join(way);
        let (report, written) = convert_set(&input, &out, &no_sync(), None, &()).unwrap();
        assert_eq!(written.files.len(), 4);
        assert_eq!(report.aliases, 1);
        let index = ShardIndex::read(out.join("model.safetensors.index.json")).unwrap();
        // Each tensor stays in its shard (renamed), the tied head is an
        // alias of the embedding, not in the index.
        let mut expected = bin_index.weight_map.clone();
        expected.remove("lm_head.weight");
        for shard in expected.values_mut() {
            *shard = shard
                .replace("pytorch_model-", "model-")
                .replace(".bin", ".safetensors");
        }
        assert_eq!(index.weight_map, expected);
        // As transformers wrote them for the .bin set.
        assert_eq!(index.total_size().unwrap(), Some(361_728));
        assert_eq!(index.metadata.get_u64("total_parameters"), Some(90_432));
        assert_eq!(
            index.to_json(),
            std::fs::read_to_string(out.join("model.safetensors.index.json")).unwrap()
        );
        let first = SafeTensors::open(out.join("model-00001-of-00004.safetensors")).unwrap();
        assert_eq!(
            first
                .metadata()
                .unwrap()
                .get("lm_head.weight")
                .map(String::as_str),
            Some("model.embed_tokens.weight")
        );
        // The set reads back, every tensor's bytes those of the .bin set.
        let set = ShardedTensors::open(&out).unwrap();
        let bins = CheckpointSet::open(&input, &LoadOptions::default()).unwrap();
        assert_eq!(set.len(), 20);
        for (_, t) in bins.tensors() {
            if t.name() == "lm_head.weight" {
                continue;
            }
            assert_eq!(
                set.read_tensor(t.name()).unwrap(),
                t.bytes().unwrap(),
                "{}",
                t.name()
            );
        }
    }
    // Re-cut with huggingface_hub's rule.
    let recut = dir.path().join("recut");
    let (_, written) = convert_set(&input, &recut, &no_sync(), Some(200_000), &()).unwrap();
    let index = ShardIndex::read(recut.join("model.safetensors.index.json")).unwrap();
    assert_eq!(
        written.files.len(),
        index
            .weight_map
            .values()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    assert!(written.files.len() < 4);
    let set = ShardedTensors::open(&recut).unwrap();
    assert_eq!(set.len(), 20);
    for shard in set.shards() {
        assert!(shard.header().data_len() <= 200_000 || shard.header().len() == 1);
    }
    // An output directory already holding weights is refused, untouched.
    let e = convert_set(&input, &recut, &no_sync(), None, &()).unwrap_err();
    assert!(already_exists(&e), "{e}");
}

#[test]
fn a_diffusers_bin_set_converts_to_diffusers_names() {
    // A one-shard diffusers .bin set: the UNet diffusers saved as .bin,
    // indexed.
    let dir = tempfile::tempdir().unwrap();
    let set_dir = dir.path().join("unet_bin_set");
    std::fs::create_dir(&set_dir).unwrap();
    let bin = real().join("sharded/unet_bin/diffusion_pytorch_model.bin");
    std::fs::copy(&bin, set_dir.join("diffusion_pytorch_model.bin")).unwrap();
    let ckpt = Checkpoint::open(&bin).unwrap();
    let weight_map = ckpt
        .tensors()
        .map(|t| {
            (
                t.name().to_string(),
                "diffusion_pytorch_model.bin".to_string(),
            )
        })
        .collect();
    let index = ShardIndex::new(0, weight_map);
    std::fs::write(
        set_dir.join("diffusion_pytorch_model.bin.index.json"),
        index.to_json(),
    )
    .unwrap();

    // One shard in, one file out, no index.
    let single = dir.path().join("single");
    let (_, written) = convert_set(&set_dir, &single, &no_sync(), None, &()).unwrap();
    assert_eq!(
        written.files,
        [single.join("diffusion_pytorch_model.safetensors")]
    );
    assert_eq!(written.index, None);
    let theirs = real().join("sharded/unet_safetensors/diffusion_pytorch_model.safetensors");
    assert_eq!(
        std::fs::read(single.join("diffusion_pytorch_model.safetensors")).unwrap(),
        std::fs::read(&theirs).unwrap(),
        "the file diffusers wrote as safetensors"
    );

    // Re-cut at 50KB: the shards diffusers wrote with max_shard_size="50KB".
    let sharded = dir.path().join("sharded");
    convert_set(&set_dir, &sharded, &no_sync(), Some(50_000), &()).unwrap();
    let theirs = real().join("sharded/unet_sharded_safetensors");
    let ours_index =
        ShardIndex::read(sharded.join("diffusion_pytorch_model.safetensors.index.json")).unwrap();
    let their_index =
        ShardIndex::read(theirs.join("diffusion_pytorch_model.safetensors.index.json")).unwrap();
    assert_eq!(ours_index.weight_map, their_index.weight_map);
    assert_eq!(
        ours_index.total_size().unwrap(),
        their_index.total_size().unwrap()
    );
    for shard in their_index
        .weight_map
        .values()
        .collect::<std::collections::BTreeSet<_>>()
    {
        assert_eq!(
            std::fs::read(sharded.join(shard)).unwrap(),
            std::fs::read(theirs.join(shard)).unwrap(),
            "{shard}"
        );
    }
}

#[test]
fn sets_that_disagree_with_their_index_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = real().join("sharded/llama_tied_bin");
    let copy = |to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    };
    let mut index = ShardIndex::read(src.join("pytorch_model.bin.index.json")).unwrap();
    type Edit = Box<dyn Fn(&mut ShardIndex)>;
    type Verdict = fn(&ShardError) -> bool;
    let cases: Vec<(&str, Edit, Verdict)> = vec![
        (
            "wrong shard",
            Box::new(|i: &mut ShardIndex| {
                i.weight_map.insert(
                    "model.norm.weight".into(),
                    "pytorch_model-00001-of-00004.bin".into(),
                );
            }),
            |e| matches!(e, ShardError::NotInShard { tensor, .. } if tensor == "model.norm.weight"),
        ),
        (
            "unlisted",
            Box::new(|i: &mut ShardIndex| {
                i.weight_map.remove("model.norm.weight");
            }),
            |e| matches!(e, ShardError::NotInMap { tensor, .. } if tensor == "model.norm.weight"),
        ),
        (
            "missing shard",
            Box::new(|i: &mut ShardIndex| {
                i.weight_map
                    .insert("x".into(), "pytorch_model-00009-of-00009.bin".into());
            }),
            |e| matches!(e, ShardError::MissingShard { tensor, .. } if tensor == "x"),
        ),
        (
            "path",
            Box::new(|i: &mut ShardIndex| {
                i.weight_map
                    .insert("x".into(), "../pytorch_model-00001-of-00004.bin".into());
            }),
            |e| matches!(e, ShardError::BadShardName { tensor, .. } if tensor == "x"),
        ),
    ];
    for (what, edit, verdict) in cases {
        let set = dir.path().join(what.replace(' ', "_"));
        copy(&set);
        let mut edited = index.clone();
        edit(&mut edited);
        std::fs::write(set.join("pytorch_model.bin.index.json"), edited.to_json()).unwrap();
        let e = CheckpointSet::open(&set, &LoadOptions::default()).unwrap_err();
        assert!(verdict(shard_problem(&e)), "{what}: {e}");
    }
    index.weight_map.clear();
    let set = dir.path().join("empty");
    copy(&set);
    std::fs::write(set.join("pytorch_model.bin.index.json"), index.to_json()).unwrap();
    let e = CheckpointSet::open(&set, &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(shard_problem(&e), ShardError::BadIndex { problem, .. }
            if problem.contains("lists no tensors")),
        "{e}"
    );
    // A plan of a valid set names one file per shard.
    let set = CheckpointSet::open(&src, &LoadOptions::default()).unwrap();
    let planned = plan_set(&set, &no_sync()).unwrap();
    assert_eq!(planned.shards, 4);
    assert_eq!(planned.prefix, "model");
    let shards: std::collections::BTreeSet<_> = planned.shard_of.iter().collect();
    assert_eq!(shards.len(), 4);
}

/// The shard error inside a library error (a set that disagrees with its
/// index).
fn shard_problem(e: &tensorfile::Error) -> &ShardError {
    match e.shard() {
        Some(s) => s,
        None => panic!("not a shard error: {e}"),
    }
}

/// Whether this is the refusal of an output directory that already holds
/// weights (an I/O error of kind `AlreadyExists` on the file in the way).
fn already_exists(e: &tensorfile::Error) -> bool {
    matches!(e.core(), Some(tensorfile_core::Error::Io { source, .. })
        if source.kind() == std::io::ErrorKind::AlreadyExists)
}
