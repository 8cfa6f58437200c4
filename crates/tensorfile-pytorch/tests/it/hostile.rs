//! The hostile checkpoints of issue 12, built at test time
//! (`common/hostile.rs`): each is refused with the budget it exceeds, or
//! loads correctly, in bounded memory. The tests check the error variant
//! and the bytes counted, never times.

use tensorfile_testkit::hostile;

use hostile::{Apply, Shared};
use tensorfile_pytorch::{Checkpoint, Error, LoadOptions};

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
fn the_clone_bombs_are_refused_as_torch_refuses_them() {
    // Every variant drops its memoized container with POP (opcode 48),
    // which torch.load(weights_only=True) refuses ("Unsupported operand
    // 48"): refused at that opcode, before any call is made. (They were
    // bounded by the budgets before, but the file converted to an
    // empty safetensors file.)
    const N: usize = 1_000_000;
    for apply in [Apply::Reduce, Apply::NewObj, Apply::NewObjEx, Apply::Build] {
        for shared in [Shared::Tuple, Shared::TupleArg, Shared::List, Shared::Dict] {
            let file = hostile::clone_bomb(apply, shared, N, 2000);
            assert!(file.len() < 16 << 10, "{} B", file.len());
            let e = load(file, &LoadOptions::default()).unwrap_err();
            let Error::Pickle { source, .. } = &e else {
                panic!("{apply:?} {shared:?}: {e}")
            };
            assert_eq!(
                source.kind,
                tensorfile_pytorch::PickleErrorKind::Refused {
                    opcode: "POP",
                    code: b'0'
                },
                "{apply:?} {shared:?}"
            );
            // PROTO, MARK or a container, the Nones, the closing opcode and
            // LONG_BINPUT 0: the POP comes right after.
            let nones = if shared == Shared::Dict { 2 * N } else { N };
            let opener = if shared == Shared::Tuple || shared == Shared::TupleArg {
                1
            } else {
                2
            };
            assert_eq!(
                source.offset,
                2 + opener + nones + 1 + 5,
                "{apply:?} {shared:?}"
            );
            assert!(
                e.to_string().contains("opcode POP (0x30) is refused"),
                "{e}"
            );
        }
    }
}

#[test]
fn expansions_are_capped_per_tensor_and_in_total() {
    // Sixteen views of 1 GiB each of a 256-byte storage: the first is
    // exactly at the default 1 GiB total, the second passes it.
    let e = load(hostile::expansions(16, 1 << 22), &LoadOptions::default()).unwrap_err();
    assert_eq!(
        budget(&e),
        ("max_expanded_total_bytes", 1 << 30, 2 << 30),
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

    // At the default cap of 1 GiB exactly: loaded (nothing materialized);
    // one byte more: refused, with that byte counted.
    let ckpt = load(
        hostile::expansions_at_default_cap(0),
        &LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(ckpt.tensors().map(|t| t.nbytes()).sum::<u64>(), 1 << 30);
    let e = load(
        hostile::expansions_at_default_cap(1),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        budget(&e),
        ("max_expanded_total_bytes", 1 << 30, (1 << 30) + 1),
        "{e}"
    );

    // Four views of 256,000 B: one byte under the total is refused,
    // exactly the total is accepted and reads back right.
    let total = 4 * 1000 * 256;
    let mut options = LoadOptions::default().with_max_expanded_total_bytes(total - 1);
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
fn a_deflated_storage_is_inflated_once_for_all_its_views() {
    // 10, 1000 and 100,000 one-element views of one 16 MiB deflated
    // storage, spread up to its last element: one pass inflates it, and
    // only the views' 4-byte spans are held.
    const STORAGE: u64 = 16 << 20;
    for views in [10u64, 1000, 100_000] {
        let ckpt = load(
            hostile::deflated_views(views, STORAGE, true),
            &LoadOptions::default(),
        )
        .unwrap();
        assert_eq!(ckpt.len() as u64, views);
        for t in ckpt.tensors() {
            assert_eq!(&*t.bytes().unwrap(), &[0u8; 4], "{}", t.name());
        }
        let stats = ckpt.inflate_stats();
        assert_eq!(stats.passes, 1, "{views} views");
        assert_eq!(stats.inflated, STORAGE, "{views} views");
        assert_eq!((stats.held, stats.peak), (4 * views, 4 * views));
        ckpt.release_storage(ckpt.tensors().next().unwrap().storage_index());
        assert_eq!(ckpt.inflate_stats().held, 0);
    }
}

#[test]
fn a_deflated_storage_is_inflated_only_up_to_the_furthest_byte_needed() {
    // The file: 128 one-element views at the start of a deflated
    // GiB of zeros (about 1 MB on disk). Only their 512 bytes are inflated.
    let file = hostile::deflated_views(128, 1 << 30, false);
    assert!(file.len() < 2 << 20, "{} B", file.len());
    let ckpt = load(file, &LoadOptions::default()).unwrap();
    for t in ckpt.tensors() {
        let d = t.data().unwrap();
        assert!(d.is_shared(), "{}", t.name());
        assert_eq!(&*d, &[0u8; 4]);
    }
    let stats = ckpt.inflate_stats();
    assert_eq!((stats.passes, stats.inflated, stats.held), (1, 512, 512));
}

#[test]
fn inflated_bytes_are_counted_against_their_budget() {
    let file = || hostile::deflated_views(1000, 1 << 20, true);
    let options = LoadOptions::default().with_max_inflated_bytes(4000 - 1);
    let ckpt = load(file(), &options).unwrap();
    let e = ckpt.tensor("t0").unwrap().bytes().unwrap_err();
    assert_eq!(budget(&e), ("max_inflated_bytes", 3999, 4000), "{e}");
    assert_eq!(
        ckpt.inflate_stats().held,
        0,
        "a refused storage holds nothing"
    );
    // Exactly at the budget: read.
    let options = LoadOptions::default().with_max_inflated_bytes(4000);
    let ckpt = load(file(), &options).unwrap();
    assert!(ckpt.tensors().all(|t| t.bytes().is_ok()));
    assert_eq!(ckpt.inflate_stats().held, 4000);
}

#[test]
fn views_of_a_deflated_storage_read_as_those_of_a_stored_one() {
    use hostile::{Record, Storage, Tensor};
    // 0, 1, 2, ... as F32: the whole, a transpose, a column, a row at the
    // end, an expansion and an empty view.
    let numel = 12 * 10;
    let data: Vec<u8> = (0..numel).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let storages = [Storage::f32("0", numel)];
    let view = |name: &str, offset, shape: &[u64], strides: &[u64]| {
        Tensor::view(name, 0, offset, shape, strides)
    };
    let tensors = [
        view("all", 0, &[12, 10], &[10, 1]),
        view("col", 3, &[12], &[10]),
        view("empty", 7, &[0, 5], &[5, 1]),
        view("expand", 20, &[4, 10], &[0, 1]),
        view("last", 110, &[10], &[1]),
        view("t", 0, &[10, 12], &[1, 10]),
    ];
    let pickle = hostile::state_dict_pickle(&storages, &tensors);
    let make = |deflated: bool| {
        let record = if deflated {
            Record::deflated("archive/data/0", &data)
        } else {
            Record::stored("archive/data/0", data.clone())
        };
        hostile::checkpoint(
            Record::stored("archive/data.pkl", pickle.clone()),
            vec![record],
        )
    };
    let stored = load(make(false), &LoadOptions::default()).unwrap();
    let deflated = load(make(true), &LoadOptions::default()).unwrap();
    for (a, b) in stored.tensors().zip(deflated.tensors()) {
        assert_eq!(a.name(), b.name());
        assert_eq!(a.bytes().unwrap(), b.bytes().unwrap(), "{}", a.name());
        let shared = b.data().unwrap().is_shared();
        assert_eq!(shared, b.is_contiguous() && b.nbytes() > 0, "{}", b.name());
    }
    let stats = deflated.inflate_stats();
    assert_eq!((stats.passes, stats.held), (1, numel * 4));
    // In pieces, every view reads the same, no piece over its size.
    for ckpt in [&stored, &deflated] {
        for t in ckpt.tensors() {
            assert_pieces(&t);
        }
    }
}

/// `for_each_piece` gives `bytes()` in order, in pieces no larger than
/// asked (or one element).
fn assert_pieces(t: &tensorfile_pytorch::TorchTensor<'_>) {
    let whole = t.bytes().unwrap();
    let elem = (t.dtype().bits() / 8).max(1) as usize;
    for piece in [1, 5, 12, 40, 100, 1 << 20] {
        let mut got = Vec::new();
        t.for_each_piece(piece, |b| -> Result<(), Error> {
            assert!(
                b.len() <= piece.max(elem),
                "{}: {} > {piece}",
                t.name(),
                b.len()
            );
            got.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(got, &*whole, "{} in pieces of {piece}", t.name());
    }
}

#[test]
fn every_fixture_reads_the_same_in_pieces() {
    let dir = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/pytorch"
    ));
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Ok(ckpt) = Checkpoint::open(&path) else {
            continue;
        };
        files += 1;
        for t in ckpt.tensors() {
            assert_pieces(&t);
        }
    }
    assert!(files >= 20, "{files} fixtures loaded");
}

/// A source that is not lent and records the largest single read and the
/// bytes read in all.
struct Counting {
    bytes: Vec<u8>,
    largest: std::sync::atomic::AtomicU64,
    total: std::sync::atomic::AtomicU64,
}

impl tensorfile_core::source::ByteSource for Counting {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        self.largest.fetch_max(buf.len() as u64, Ordering::Relaxed);
        self.total.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.bytes.as_slice().read_exact_at(offset, buf)
    }
}

#[test]
fn views_read_by_range_read_bounded_spans() {
    use hostile::{Record, Storage, Tensor};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use tensorfile_core::TensorData;
    // A 2048 x 1024 F32 storage (8 MiB) of 0, 1, 2, ...
    let (rows, cols) = (2048u64, 1024u64);
    let numel = rows * cols;
    let data: Vec<u8> = (0..numel).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let storages = [Storage::f32("0", numel)];
    let view = |name: &str, offset, shape: &[u64], strides: &[u64]| {
        Tensor::view(name, 0, offset, shape, strides)
    };
    let tensors = [
        // A column: 8 KiB spread over 8 MiB.
        view("col", 3, &[rows], &[cols]),
        // Every other column of the first 16 rows... of 2 KiB rows: a
        // strided block over 64 KiB.
        view("half", 0, &[16, cols / 2], &[cols, 2]),
        // A transpose: every byte, in another order.
        view("t", 0, &[cols, rows], &[1, cols]),
        // A row block, contiguous.
        view("rows", cols * 100, &[200, cols], &[cols, 1]),
        // An expansion of one row to 4096 rows (16 MiB from 4 KiB).
        view("expand", cols * 5, &[4096, cols], &[0, 1]),
    ];
    let pickle = hostile::state_dict_pickle(&storages, &tensors);
    let bytes = hostile::checkpoint(
        Record::stored("archive/data.pkl", pickle),
        vec![Record::stored("archive/data/0", data)],
    );
    let lent = Checkpoint::from_bytes(bytes.clone(), &LoadOptions::default()).unwrap();
    let source = Arc::new(Counting {
        bytes,
        largest: Default::default(),
        total: Default::default(),
    });
    let read =
        Checkpoint::from_source(Arc::clone(&source), "counting", &LoadOptions::default()).unwrap();
    for name in ["col", "half", "t", "rows", "expand"] {
        let (a, b) = (lent.tensor(name).unwrap(), read.tensor(name).unwrap());
        let want = a.bytes().unwrap();
        source.largest.store(0, Ordering::Relaxed);
        source.total.store(0, Ordering::Relaxed);
        let mut got = Vec::new();
        b.produce(&mut |at, p| {
            assert_eq!(at, got.len() as u64);
            got.extend_from_slice(p);
            Ok::<(), tensorfile_pytorch::Error>(())
        })
        .unwrap();
        assert!(got == *want, "{name}");
        let (largest, total) = (
            source.largest.load(Ordering::Relaxed),
            source.total.load(Ordering::Relaxed),
        );
        match name {
            // Read a bounded window at a time, never the whole storage.
            "col" => assert!(largest <= 1 << 20, "{name}: a read of {largest} B"),
            // Its span is small: read once.
            "half" => assert_eq!((largest, total), (64 * 1024 - 4, 64 * 1024 - 4)),
            // The storage it re-orders is read once, whole.
            "t" => assert_eq!((largest, total), (numel * 4, numel * 4)),
            // Stored as is: read by range, in pieces of 4 MiB at most.
            "rows" => {
                assert!(TensorData::<tensorfile_pytorch::Error>::seekable(&b));
                assert_eq!(total, 200 * cols * 4);
                assert!(largest <= 4 << 20);
            }
            // One 4 KiB row, read for each piece.
            "expand" => assert!(
                largest <= cols * 4 && total <= 64 * cols * 4,
                "{largest} {total}"
            ),
            _ => unreachable!(),
        }
    }
}
