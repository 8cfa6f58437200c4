//! Read plans (`tensorfile_core::read`): what they read equals what the
//! views and the slice code give, byte for byte; they keep to their budget,
//! read only what a slice covers, and fail with typed errors naming the file.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tensorfile_core::read::{ReadPlan, TensorBytes};
use tensorfile_core::set::{ShardedTensors, Want};
use tensorfile_core::{
    ByteSource, Error, ErrorKind, FileSource, ReadOptions, SafeTensors, SliceArg,
};

use crate::common::{self, T};

/// The valid reference fixtures.
fn valid_files() -> Vec<std::path::PathBuf> {
    let dir = common::fixtures().join("valid");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    files
}

/// Every tensor handed over by a plan, in the order handed over.
fn collect(
    read: impl FnOnce(
        &mut dyn FnMut(TensorBytes) -> tensorfile_core::Result<()>,
    ) -> tensorfile_core::Result<tensorfile_core::read::ReadStats>,
) -> (Vec<TensorBytes>, tensorfile_core::read::ReadStats) {
    let mut got = Vec::new();
    let stats = read(&mut |t| {
        got.push(t);
        Ok(())
    })
    .unwrap();
    (got, stats)
}

/// The first half of the rows of a tensor with dimensions, else the whole.
fn half_rows(shape: &[u64]) -> Vec<SliceArg> {
    match shape.first() {
        Some(&rows) => vec![SliceArg::range(0, (rows / 2) as i64)],
        None => vec![],
    }
}

#[test]
fn plans_on_the_fixtures_equal_views_and_slices_byte_for_byte() {
    for path in valid_files() {
        let mapped = SafeTensors::open(&path).unwrap();
        let source = FileSource::open(&path).unwrap();
        let file = SafeTensors::from_source(source, &ReadOptions::default()).unwrap();
        // Every tensor whole, small chunks and budget so that reads split.
        for (chunk, budget, threads) in [(7, 64, 1), (1 << 20, 1 << 30, 0), (64, 0, 3)] {
            let plan = ReadPlan::all()
                .with_chunk(chunk)
                .with_budget(budget)
                .with_threads(threads);
            let (got, stats) = collect(|f| file.read_plan(&plan, f));
            assert_eq!(got.len(), mapped.len(), "{}", path.display());
            assert_eq!(stats.bytes_read, file.header().data_len());
            // Read order is the file's data order.
            for (t, view) in got.iter().zip(mapped.tensors()) {
                assert_eq!(t.name, view.name());
                assert_eq!((t.dtype, &t.shape[..]), (view.dtype(), view.shape()));
                assert_eq!(&t.data[..], view.data(), "{}: {}", path.display(), t.name);
                assert_eq!(t.data.as_ptr() as usize % 64, 0);
            }
        }
        // Half the rows of every tensor the slice code can cut, named in
        // reverse order: handed over in file order all the same.
        let views: Vec<_> = mapped.tensors().collect();
        let wants: Vec<(Want, Vec<u8>)> = views
            .iter()
            .rev()
            .filter_map(|v| {
                let args = half_rows(v.shape());
                let want = v.slice(&args).ok()?.to_vec();
                Some((Want::slice(v.name(), args), want))
            })
            .collect();
        let plan = ReadPlan::of(wants.iter().map(|(w, _)| w.clone())).with_gap(0);
        let (got, _) = collect(|f| file.read_plan(&plan, f));
        assert_eq!(got.len(), wants.len());
        for t in &got {
            let (want, bytes) = wants.iter().find(|(w, _)| w.name == t.name).unwrap();
            assert_eq!(&t.data[..], &bytes[..], "{}: {}", path.display(), t.name);
            let mut out = vec![0xAA; bytes.len()];
            file.read_into(&t.name, want.slice.as_deref(), &mut out)
                .unwrap();
            assert_eq!(&out, bytes);
        }
        // Handed over in offset order (ties, empty tensors, in plan order).
        let offsets: Vec<u64> = got
            .iter()
            .map(|t| mapped.header().get(&t.name).unwrap().data_offsets.0)
            .collect();
        assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{offsets:?}");
    }
}

#[test]
fn plans_on_reference_sets_equal_their_tensors() {
    let root = common::fixtures().join("real/sharded");
    for name in ["unet_safetensors", "unet_sharded_safetensors"] {
        let dir = root.join(name);
        let set = ShardedTensors::open_pread(&dir, &ReadOptions::default()).unwrap();
        let plan = ReadPlan::all().with_budget(1 << 16).with_chunk(1 << 12);
        let (got, stats) = collect(|f| set.read_plan(&plan, f));
        assert_eq!(got.len(), set.len(), "{name}");
        assert_eq!(stats.bytes_read, set.data_len());
        for t in &got {
            assert_eq!(
                &t.data[..],
                &set.read_tensor(&t.name).unwrap()[..],
                "{name}: {}",
                t.name
            );
            let mut out = vec![0u8; t.data.len()];
            set.read_into(&t.name, None, &mut out).unwrap();
            assert_eq!(&out[..], &t.data[..]);
        }
        // Slices across the shards equal the set's slices.
        let (shard_a, shard_b) = (set.shards().first().unwrap(), set.shards().last().unwrap());
        let names = [
            shard_b.header().tensors().last().unwrap().name,
            shard_a.header().tensors().next().unwrap().name,
        ];
        let wants: Vec<Want> = names
            .iter()
            .map(|n| Want::slice(*n, half_rows(set.info(n).unwrap().shape)))
            .collect();
        let (got, _) = collect(|f| set.read_plan(&ReadPlan::of(wants.clone()), f));
        assert_eq!(got[0].name, names[1], "shard order first");
        for t in &got {
            let want = wants.iter().find(|w| w.name == t.name).unwrap();
            let expected = set
                .read_slice(&t.name, want.slice.as_deref().unwrap())
                .unwrap();
            assert_eq!(&t.data[..], &expected[..], "{name}: {}", t.name);
        }
    }
}

/// Bytes in memory that count what is read, and record the most bytes read
/// but not yet handed over (`handed`, counted by the test's callback).
struct Recording {
    bytes: Vec<u8>,
    read: AtomicU64,
    handed: Arc<AtomicU64>,
    peak: AtomicU64,
}

impl Recording {
    fn new(bytes: Vec<u8>) -> Recording {
        Recording {
            bytes,
            read: AtomicU64::new(0),
            handed: Arc::new(AtomicU64::new(0)),
            peak: AtomicU64::new(0),
        }
    }
}

impl Recording {
    /// A file over these bytes, its header read and forgotten by the counts.
    fn open(bytes: Vec<u8>) -> SafeTensors<Recording> {
        let file =
            SafeTensors::from_source(Recording::new(bytes), &ReadOptions::default()).unwrap();
        file.source().read.store(0, Ordering::SeqCst);
        file.source().peak.store(0, Ordering::SeqCst);
        file
    }
}

impl ByteSource for Recording {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let read = self.read.fetch_add(buf.len() as u64, Ordering::SeqCst) + buf.len() as u64;
        let held = read - self.handed.load(Ordering::SeqCst);
        self.peak.fetch_max(held, Ordering::SeqCst);
        (&self.bytes[..]).read_exact_at(offset, buf)
    }
}

/// A file of `count` tensors of `rows` x 1024 bytes each, then one of
/// `big_rows` x 1024.
fn rows_file(count: usize, rows: u64, big_rows: u64) -> Vec<u8> {
    let mut tensors: Vec<T> = (0..count)
        .map(|i| {
            T::new(
                &format!("t{i:03}"),
                tensorfile_core::Dtype::U8,
                &[rows, 1024],
            )
        })
        .collect();
    tensors.push(T::new("big", tensorfile_core::Dtype::U8, &[big_rows, 1024]));
    common::st_bytes(&tensors, &[])
}

#[test]
fn the_budget_is_never_exceeded_and_a_larger_tensor_is_read_alone() {
    // 40 tensors of 16 KiB and one of 160 KiB.
    let bytes = rows_file(40, 16, 160);
    for threads in [1, 2, 4] {
        for budget in [0u64, 16 << 10, 40 << 10, 100 << 10] {
            let file = Recording::open(bytes.clone());
            let handed = file.source().handed.clone();
            let plan = ReadPlan::all()
                .with_budget(budget)
                .with_chunk(4 << 10)
                .with_threads(threads);
            let mut count = 0;
            let stats = file
                .read_plan(&plan, |t| {
                    count += 1;
                    handed.fetch_add(t.data.len() as u64, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
            assert_eq!(count, 41);
            let peak = file.source().peak.load(Ordering::SeqCst);
            // Every tensor fits but "big", which is read alone.
            let allowed = budget.max(16 << 10);
            let small_peak = peak_before_big(&bytes, budget, threads);
            assert!(
                small_peak <= allowed,
                "{threads} threads, budget {budget}: {small_peak}"
            );
            assert!(
                peak <= allowed.max(160 << 10),
                "{threads} threads, budget {budget}: {peak}"
            );
            assert!(stats.peak_held <= allowed.max(160 << 10));
        }
    }
}

/// The peak of bytes held while reading every tensor but "big".
fn peak_before_big(bytes: &[u8], budget: u64, threads: usize) -> u64 {
    let file = Recording::open(bytes.to_vec());
    let names: Vec<Want> = file
        .names()
        .filter(|n| *n != "big")
        .map(Want::tensor)
        .collect();
    let handed = file.source().handed.clone();
    let plan = ReadPlan::of(names)
        .with_budget(budget)
        .with_chunk(4 << 10)
        .with_threads(threads);
    file.read_plan(&plan, |t| {
        handed.fetch_add(t.data.len() as u64, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    file.source().peak.load(Ordering::SeqCst)
}

#[test]
fn a_half_rows_plan_reads_half_the_data_bytes() {
    let bytes = rows_file(20, 64, 256);
    let file = Recording::open(bytes);
    let wants: Vec<Want> = file
        .header()
        .tensors()
        .map(|t| Want::slice(t.name, half_rows(t.shape)))
        .collect();
    let (got, stats) = collect(|f| file.read_plan(&ReadPlan::of(wants), f));
    let read = file.source().read.load(Ordering::SeqCst);
    assert_eq!(read, stats.bytes_read);
    let data = file.header().data_len();
    assert!(read * 100 <= data * 52, "{read} of {data} bytes");
    assert_eq!(
        got.iter().map(|t| t.data.len() as u64).sum::<u64>(),
        data / 2
    );
    // Half the columns: runs 512 bytes apart, merged under the default gap
    // (a read of the gaps costs less than a request per row)...
    let columns = |gap: Option<u64>| {
        let file = Recording::open(rows_file(1, 64, 1));
        let want = Want::slice("t000", vec![SliceArg::full(), SliceArg::range(0, 512)]);
        let plan = match gap {
            Some(g) => ReadPlan::of([want]).with_gap(g),
            None => ReadPlan::of([want]),
        };
        let (got, stats) = collect(|f| file.read_plan(&plan, f));
        let expected = SafeTensors::from_slice(&rows_file(1, 64, 1))
            .unwrap()
            .tensor("t000")
            .unwrap()
            .slice(&[SliceArg::full(), SliceArg::range(0, 512)])
            .unwrap()
            .to_vec();
        assert_eq!(&got[0].data[..], &expected[..]);
        (stats.reads, stats.bytes_read)
    };
    assert_eq!(columns(None), (1, 63 * 1024 + 512));
    // ...and read row by row with no gap allowed.
    assert_eq!(columns(Some(0)), (64, 64 * 512));
}

#[test]
fn errors_are_typed_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.safetensors");
    std::fs::write(&path, rows_file(2, 16, 64)).unwrap();
    let file = SafeTensors::from_source(FileSource::open(&path).unwrap(), &ReadOptions::default())
        .unwrap();
    let file = Arc::new(file);
    let shown = path.display().to_string();
    let nothing =
        |_: TensorBytes| -> tensorfile_core::Result<()> { panic!("nothing is handed over") };

    let err = file
        .read_plan(
            &ReadPlan::of([Want::tensor("t000"), Want::tensor("nope")]),
            nothing,
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(matches!(err.detail(), Error::NotFound(n) if n == "nope"));
    assert!(err.to_string().starts_with(&shown), "{err}");
    // The iterator resolves its plan up front, as the callback form does.
    let err = Arc::clone(&file)
        .read_plan_iter(&ReadPlan::of([Want::tensor("nope")]))
        .unwrap_err();
    assert!(matches!(err.detail(), Error::NotFound(n) if n == "nope"));

    let bad = Want::slice("t001", vec![SliceArg::range(0, 99)]);
    let err = file.read_plan(&ReadPlan::of([bad]), nothing).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(matches!(err.detail(), Error::Slice { tensor, .. } if tensor == "t001"));
    let text = err.to_string();
    assert!(
        text.starts_with(&shown) && text.contains("slice [0:99]"),
        "{text}"
    );

    let mut out = vec![0u8; 100];
    let err = file.read_into("t000", None, &mut out).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(matches!(
        err.detail(),
        Error::DestinationLength {
            expected: 16384,
            actual: 100,
            ..
        }
    ));
    assert!(err.to_string().starts_with(&shown), "{err}");

    // The file truncated underneath: the read fails, naming the file.
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(1000)
        .unwrap();
    let err = file.read_plan(&ReadPlan::all(), |_| Ok(())).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().starts_with(&shown), "{err}");
    // The iterator yields the error, then ends.
    let mut iter = Arc::clone(&file).read_plan_iter(&ReadPlan::all()).unwrap();
    let err = iter.find_map(Result::err).unwrap();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().starts_with(&shown), "{err}");
    assert!(iter.next().is_none());
    let mut out = vec![0u8; 64 * 1024];
    let err = file.read_into("big", None, &mut out).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn an_error_of_the_callback_stops_the_plan() {
    let file = SafeTensors::from_source(rows_file(10, 16, 16), &ReadOptions::default()).unwrap();
    let mut seen = 0;
    let err = file
        .read_plan(&ReadPlan::all().with_budget(0), |t| {
            seen += 1;
            match t.name.as_str() {
                "t002" => Err(Error::NotFound("stop".into())),
                _ => Ok(()),
            }
        })
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(s) if s == "stop"));
    assert_eq!(seen, 3);
}

#[test]
fn a_set_names_the_index_for_a_tensor_no_shard_holds() {
    let dir = common::fixtures().join("real/sharded/unet_sharded_safetensors");
    let set = ShardedTensors::open_pread(&dir, &ReadOptions::default()).unwrap();
    let err = set
        .read_plan(&ReadPlan::of([Want::tensor("nope")]), |_| Ok(()))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let index = set.index_path().map(Path::display).unwrap().to_string();
    assert!(err.to_string().starts_with(&index), "{err}");
}

#[test]
fn the_iterator_hands_over_what_the_callback_does() {
    for path in valid_files() {
        let source = FileSource::open(&path).unwrap();
        let file = Arc::new(SafeTensors::from_source(source, &ReadOptions::default()).unwrap());
        for plan in [
            ReadPlan::all()
                .with_chunk(7)
                .with_budget(64)
                .with_threads(1),
            ReadPlan::all()
                .with_chunk(64)
                .with_budget(0)
                .with_threads(3),
            ReadPlan::all(),
        ] {
            let (called, stats) = collect(|f| file.read_plan(&plan, f));
            let mut iter = Arc::clone(&file).read_plan_iter(&plan).unwrap();
            let got: Vec<TensorBytes> = iter.by_ref().map(Result::unwrap).collect();
            assert_eq!(got.len(), called.len(), "{}", path.display());
            for (a, b) in got.iter().zip(&called) {
                assert_eq!((&a.name, a.dtype, &a.shape), (&b.name, b.dtype, &b.shape));
                assert_eq!(&a.data[..], &b.data[..], "{}: {}", path.display(), a.name);
            }
            let iterated = iter.stats();
            assert_eq!(
                (iterated.tensors, iterated.reads, iterated.bytes_read),
                (stats.tensors, stats.reads, stats.bytes_read)
            );
            assert!(iter.next().is_none(), "an ended iterator stays ended");
        }
    }
    // A set, shard by shard, with slices.
    let dir = common::fixtures().join("real/sharded/unet_sharded_safetensors");
    let set = Arc::new(ShardedTensors::open_pread(&dir, &ReadOptions::default()).unwrap());
    let wants: Vec<Want> = set
        .infos()
        .map(|(_, t)| Want::slice(t.name, half_rows(t.shape)))
        .collect();
    let plan = ReadPlan::of(wants.clone()).with_budget(1 << 16);
    let (called, _) = collect(|f| set.read_plan(&plan, f));
    let got: Vec<TensorBytes> = Arc::clone(&set)
        .read_plan_iter(&plan)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got.len(), wants.len());
    for (a, b) in got.iter().zip(&called) {
        assert_eq!((&a.name, &a.data[..]), (&b.name, &b.data[..]));
    }
}

#[test]
fn the_iterators_budget_counts_what_the_caller_has_not_taken() {
    // 41 tensors of 16 KiB, taken one by one while the reads go on: what
    // is read and not yet returned by `next` stays within the budget.
    let bytes = rows_file(40, 16, 16);
    for threads in [1, 2, 4] {
        for budget in [0u64, 40 << 10, 100 << 10] {
            let file = Arc::new(Recording::open(bytes.clone()));
            let handed = file.source().handed.clone();
            let plan = ReadPlan::all()
                .with_budget(budget)
                .with_chunk(4 << 10)
                .with_threads(threads);
            let mut iter = Arc::clone(&file).read_plan_iter(&plan).unwrap();
            let mut names = Vec::new();
            for t in iter.by_ref() {
                let t = t.unwrap();
                handed.fetch_add(t.data.len() as u64, Ordering::SeqCst);
                names.push(t.name);
            }
            assert_eq!(names.len(), 41);
            // A budget below one tensor reads one at a time.
            let allowed = budget.max(16 << 10);
            let peak = file.source().peak.load(Ordering::SeqCst);
            assert!(
                peak <= allowed,
                "{threads} threads, budget {budget}: {peak}"
            );
            assert!(iter.stats().peak_held <= allowed);
        }
    }
}

#[test]
fn dropping_the_iterator_stops_its_reads_and_lets_go_of_the_file() {
    // 41 tensors of 16 KiB; a budget of 4 of them.
    let bytes = rows_file(40, 16, 16);
    let budget = 64 << 10;
    for threads in [1, 2, 4] {
        let file = Arc::new(Recording::open(bytes.clone()));
        let plan = ReadPlan::all()
            .with_budget(budget)
            .with_chunk(4 << 10)
            .with_threads(threads);
        let mut iter = Arc::clone(&file).read_plan_iter(&plan).unwrap();
        let first = iter.next().unwrap().unwrap();
        assert_eq!(first.name, "t000");
        drop(iter);
        // No reader holds the file any more, so none can read it: the
        // pool has nothing of the plan left.
        assert_eq!(Arc::strong_count(&file), 1, "{threads} threads");
        // What was read: the first tensor and at most the budget after it
        // (the reads in flight at the drop lie within it).
        let read = file.source().read.load(Ordering::SeqCst);
        assert!(read <= (16 << 10) + budget, "{threads} threads: {read}");
        assert!(read < file.header().data_len());
        // The tensor handed over is the caller's, whole.
        assert_eq!(first.data.len(), 16 << 10);
    }
}
