//! The hostile checkpoints of issue 12, built at test time
//! (`common/hostile.rs`): each is refused with the budget it exceeds, or
//! loads correctly, in bounded memory. The tests check the error variant
//! and the bytes counted, never times.

#[path = "common/hostile.rs"]
mod hostile;

use hostile::{Apply, Shared};
use tensorfile_pytorch::convert::{convert, ConvertOptions};
use tensorfile_pytorch::{Checkpoint, Error, LoadOptions, ENTRY_BYTES};

/// The budget error's name, limit and counted bytes.
fn budget(e: &Error) -> (&'static str, u64, u64) {
    match e {
        Error::Budget {
            budget,
            limit,
            needed,
            ..
        } => (budget, *limit, *needed),
        other => panic!("not a budget error: {other}"),
    }
}

fn load(bytes: Vec<u8>, options: &LoadOptions) -> Result<Checkpoint, Error> {
    Checkpoint::from_bytes(bytes, options)
}

#[test]
fn the_clone_bomb_is_held_once_and_its_values_are_counted() {
    const N: usize = 1_000_000;
    // "torch.Size([?, ?, ... ?])" of a million dims, per value.
    let text = "torch.Size([])".len() + N + 2 * (N - 1);
    let entry = (text + ENTRY_BYTES) as u64;
    // The default budget once; a smaller one for the variants (the same
    // counting, less text to render in a debug build).
    let mut small = LoadOptions::default();
    small.walk.max_entry_bytes = 16 << 20;
    let cases = [
        (Apply::Reduce, Shared::TupleArg, LoadOptions::default()),
        (Apply::NewObj, Shared::TupleArg, small.clone()),
        (Apply::NewObjEx, Shared::TupleArg, small.clone()),
        (Apply::Reduce, Shared::List, small.clone()),
        (Apply::NewObj, Shared::List, small.clone()),
        (Apply::NewObjEx, Shared::List, small.clone()),
    ];
    for (apply, shared, options) in cases {
        let file = hostile::clone_bomb(apply, shared, N, 2000);
        assert!(file.len() < 16 << 10, "{} B", file.len());
        let e = load(file, &options).unwrap_err();
        // The pickle is held once (a few tens of MB); the values that
        // would each copy the million dims as text are counted.
        let limit = options.walk.max_entry_bytes as u64;
        let fits = limit / entry;
        assert_eq!(
            budget(&e),
            ("max_entry_bytes", limit, (fits + 1) * entry),
            "{apply:?} {shared:?}"
        );
        assert!(e.to_string().contains("max_entry_bytes"), "{e}");
    }
    // The file (the tuple is the argument tuple: torch.Size(None,
    // None, ...)), torch.Size of a dict, and torch.Size() given the tuple by
    // BUILD have no dims to copy: they load, 2000 small values.
    for (apply, shared) in [
        (Apply::Reduce, Shared::Tuple),
        (Apply::NewObj, Shared::Tuple),
        (Apply::NewObjEx, Shared::Tuple),
        (Apply::Reduce, Shared::Dict),
        (Apply::NewObjEx, Shared::Dict),
        (Apply::Build, Shared::Tuple),
        (Apply::Build, Shared::List),
        (Apply::Build, Shared::Dict),
    ] {
        let ckpt = load(
            hostile::clone_bomb(apply, shared, N, 2000),
            &LoadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{apply:?} {shared:?}: {e}"));
        assert_eq!(ckpt.values().len(), 2000, "{apply:?} {shared:?}");
        assert!(ckpt.values().iter().all(|(_, v)| v == "torch.Size([])"));
    }
}

#[test]
fn the_clone_bomb_under_a_small_pickle_budget_names_it() {
    let mut options = LoadOptions::default();
    options.limits.max_bytes = 16 << 20;
    let e = load(
        hostile::clone_bomb(Apply::Reduce, Shared::Tuple, 1_000_000, 2000),
        &options,
    )
    .unwrap_err();
    let Error::Pickle { source, .. } = &e else {
        panic!("{e}")
    };
    match source.kind {
        tensorfile_pytorch::pickle::PickleErrorKind::Budget {
            budget,
            limit,
            needed,
        } => {
            assert_eq!((budget, limit), ("max_bytes", 16 << 20));
            assert!(needed > limit, "{needed}");
        }
        ref other => panic!("{other}"),
    }
}

#[test]
fn expansions_are_capped_per_tensor_and_in_total() {
    // Sixteen views of 1 GiB each of a 256-byte storage: the fifth passes
    // the default 4 GiB total.
    let e = load(hostile::expansions(16, 1 << 22), &LoadOptions::default()).unwrap_err();
    assert_eq!(
        budget(&e),
        ("max_expanded_total_bytes", 4 << 30, 5 << 30),
        "{e}"
    );
    // One view over the per-tensor cap.
    let e = load(
        hostile::expansions(1, (1 << 22) + 1),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        budget(&e),
        ("max_expanded_bytes", 1 << 30, (1 << 30) + 256),
        "{e}"
    );

    // Four views of 256,000 B: one byte under the total is refused,
    // exactly the total is accepted and reads back right.
    let total = 4 * 1000 * 256;
    let mut options = LoadOptions {
        max_expanded_total_bytes: total - 1,
        ..LoadOptions::default()
    };
    let e = load(hostile::expansions(4, 1000), &options).unwrap_err();
    assert_eq!(
        budget(&e),
        ("max_expanded_total_bytes", total - 1, total),
        "{e}"
    );
    options.max_expanded_total_bytes = total;
    let ckpt = load(hostile::expansions(4, 1000), &options).unwrap();
    assert_eq!(ckpt.len(), 4);
    let row: Vec<u8> = (0..=255u8).collect();
    for t in ckpt.tensors() {
        let b = t.bytes().unwrap();
        assert_eq!(b.len(), 256_000);
        assert!(b.chunks(256).all(|c| c == row), "{}", t.name());
    }
}

#[test]
fn convert_refuses_expansions_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("expansions.pt");
    std::fs::write(&input, hostile::expansions(16, 1 << 22)).unwrap();
    let output = dir.path().join("out.safetensors");
    let e = convert(&input, &output, &ConvertOptions::default(), |_| {}).unwrap_err();
    assert_eq!(budget(&e).0, "max_expanded_total_bytes");
    assert!(!output.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no file left"
    );
}
