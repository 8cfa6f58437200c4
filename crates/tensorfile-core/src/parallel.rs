//! Parallelism: one pool (rayon's global pool) for every parallel part of
//! the library and the layers above it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Runs `background` on another thread of the pool and `here` on this one,
/// and returns both results. A panic in either is a bug and is resumed
/// here, not turned into a value.
pub fn both<A: Send, B: Send>(
    background: impl FnOnce() -> A + Send,
    here: impl FnOnce() -> B + Send,
) -> (A, B) {
    let (mine, theirs) = rayon::join(here, background);
    (theirs, mine)
}

/// Calls `f(0)`, `f(1)`, ... `f(n - 1)` on the pool's threads, each taking
/// the next index in turn (so work advances in index order on every
/// thread, which keeps writes near each other in a file). Once an `f`
/// returns `false`, no further index is started.
pub fn for_each_index(n: usize, f: impl Fn(usize) -> bool + Sync) {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let work = || loop {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let k = next.fetch_add(1, Ordering::AcqRel);
        if k >= n {
            break;
        }
        if !f(k) {
            stop.store(true, Ordering::Release);
        }
    };
    let workers = rayon::current_num_threads().min(n);
    if workers <= 1 {
        work();
        return;
    }
    rayon::scope(|s| {
        for _ in 1..workers {
            s.spawn(|_| work());
        }
        work();
    });
}
