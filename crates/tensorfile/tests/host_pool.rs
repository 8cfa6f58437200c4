//! The library runs its parallel work in its own thread pool and leaves
//! rayon's global pool to the host application. One test in this binary:
//! the global pool is per process, and a second test running at once could
//! touch it.

use tensorfile::cast::{cast_slice, CastOptions};
use tensorfile::Dtype;
use tensorfile_core::parallel;

/// F32 values, enough of them that a cast is split across threads.
fn floats(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (i as f32 * 0.25).to_le_bytes())
        .collect()
}

/// Casts `src` (F32) to F16 and back, checking the values survive.
fn round_trip(src: &[u8]) {
    let n = src.len() / 4;
    let mut half = vec![0u8; n * 2];
    cast_slice(
        Dtype::F32,
        src,
        Dtype::F16,
        &mut half,
        CastOptions::default(),
    )
    .unwrap();
    let mut back = vec![0u8; src.len()];
    cast_slice(
        Dtype::F16,
        &half,
        Dtype::F32,
        &mut back,
        CastOptions::default(),
    )
    .unwrap();
    // i / 4 for i < 2048 is exact in F16.
    assert_eq!(back[..2048 * 4], src[..2048 * 4]);
}

/// The names of the threads `map_pieces` ran its pieces on.
fn piece_threads() -> Vec<String> {
    parallel::map_pieces(3000, 1, 1000, |_, _| {
        std::thread::current().name().unwrap_or("").to_string()
    })
}

#[test]
fn the_hosts_global_pool_is_left_alone() {
    parallel::set_threads(3).unwrap();
    let src = floats(4 << 20);
    // Library work first: before this change it built (or lazily started)
    // rayon's global pool, after which the host could not build its own.
    round_trip(&src);
    assert_eq!(piece_threads().len(), 3);

    rayon::ThreadPoolBuilder::new()
        .num_threads(5)
        .build_global()
        .expect("the library left the global pool unbuilt");
    assert_eq!(rayon::current_num_threads(), 5);

    // The library keeps its own size and threads, and still works.
    assert_eq!(parallel::threads(), 3);
    round_trip(&src);
    let names = piece_threads();
    assert_eq!(names.len(), 3);
    assert!(
        names.iter().all(|n| n.starts_with("tensorfile-")),
        "{names:?}"
    );
    let (a, b) = parallel::both(|| std::thread::current().name().map(str::to_string), || 7);
    assert_eq!(b, 7);
    assert!(a.is_some_and(|n| n.starts_with("tensorfile-")));
    // Called from inside another pool of the host's.
    let inside = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap()
        .install(|| (rayon::current_num_threads(), parallel::threads()));
    assert_eq!(inside, (2, 3));
    assert_eq!(rayon::current_num_threads(), 5);
    assert_eq!(
        parallel::set_threads(4),
        Err(parallel::ThreadsError::AlreadySet { running: 3 })
    );
}
