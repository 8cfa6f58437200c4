//! Parallelism: one pool for every parallel part of the library and the
//! layers above it, sized to the machine's cores by default and settable:
//! [`set_threads`], or the `TENSORFILE_THREADS` environment variable read
//! when the pool is first used.
//!
//! The pool is the library's own (a `rayon::ThreadPool` built on first
//! use), never rayon's global pool: a host application that builds or
//! sizes the global pool itself keeps it as it made it. Parallel work goes
//! through [`install`] (or the helpers here, which use it).
//!
//! Work is split into as many pieces as the pool has threads (or more,
//! where pieces differ in cost), so `--threads 1` runs everything on one
//! thread and results never depend on the thread count.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The environment variable that sets the number of threads.
pub const THREADS_ENV: &str = "TENSORFILE_THREADS";

/// The library's pool, built once per process; `None` when the operating
/// system would not start its threads (then work runs on the caller's
/// thread alone).
static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();

/// Why the pool cannot take the number of threads asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadsError {
    /// Zero threads.
    #[error("the number of threads must be at least 1")]
    Zero,
    /// The pool already runs with another number of threads (it is set
    /// once per process, before its first use).
    #[error(
        "the thread pool already runs with {running} threads (set it before any parallel work)"
    )]
    AlreadySet {
        /// Its number of threads.
        running: usize,
    },
}

/// Builds the pool with `threads` threads (0: rayon's default, the
/// machine's cores unless `RAYON_NUM_THREADS` says otherwise).
fn build(threads: usize) -> Option<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("tensorfile-{i}"))
        .build()
        .ok()
}

/// The pool, built on first use as [`THREADS_ENV`] says (an unparsable
/// value is ignored).
fn pool() -> Option<&'static rayon::ThreadPool> {
    POOL.get_or_init(|| {
        let asked = std::env::var(THREADS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0);
        build(asked.unwrap_or(0))
    })
    .as_ref()
}

/// Sets the number of threads the library runs its parallel work on. Call
/// it before any parallel work (the pool is built once per process).
///
/// # Errors
/// [`ThreadsError::Zero`], or [`ThreadsError::AlreadySet`] when the pool
/// already runs with a different number.
pub fn set_threads(threads: usize) -> Result<(), ThreadsError> {
    if threads == 0 {
        return Err(ThreadsError::Zero);
    }
    let running = POOL
        .get_or_init(|| build(threads))
        .as_ref()
        .map_or(1, rayon::ThreadPool::current_num_threads);
    if running == threads {
        Ok(())
    } else {
        Err(ThreadsError::AlreadySet { running })
    }
}

/// The number of threads parallel work runs on (configuring the pool from
/// [`THREADS_ENV`] on first use; an unparsable value is ignored).
pub fn threads() -> usize {
    pool().map_or(1, rayon::ThreadPool::current_num_threads)
}

/// Runs `f` in the library's pool, so that rayon's parallel iterators,
/// `join` and `scope` inside it use the pool's threads rather than
/// rayon's global pool. Without a pool (its threads could not be started)
/// `f` runs here.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match pool() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// The pool, unless this thread is one of its own: work a pool thread
/// queues on the pool and then blocks on may wait forever (on a pool of
/// one thread, it waits behind itself), so such a thread runs it here.
fn pool_from_outside() -> Option<&'static rayon::ThreadPool> {
    pool().filter(|pool| pool.current_thread_index().is_none())
}

/// Runs `f` on this thread with a scope whose spawned jobs run on the
/// pool's threads (`None` without a pool, or on one of its threads: the
/// caller then runs each job itself). Returns once `f` and every job it
/// spawned have finished. `f` itself stays on the caller's thread, so it
/// need not be `Send` and may block without taking a thread from the pool.
pub(crate) fn in_place_scope<'scope, R>(f: impl FnOnce(Option<&rayon::Scope<'scope>>) -> R) -> R {
    match pool_from_outside() {
        Some(pool) => pool.in_place_scope(|scope| f(Some(scope))),
        None => f(None),
    }
}

/// Runs `f` on one of the pool's threads, in the background; here, before
/// returning, without a pool or on one of its threads (see
/// [`in_place_scope`]). Whoever waits for `f` must learn of its end from
/// `f` itself.
pub(crate) fn spawn(f: impl FnOnce() + Send + 'static) {
    match pool_from_outside() {
        Some(pool) => pool.spawn(f),
        None => f(),
    }
}

/// Runs `background` and `here`, on two threads of the pool when it has
/// them, and returns both results. A panic in either is a bug and is
/// resumed here, not turned into a value.
pub fn both<A: Send, B: Send>(
    background: impl FnOnce() -> A + Send,
    here: impl FnOnce() -> B + Send,
) -> (A, B) {
    let (mine, theirs) = match pool() {
        Some(pool) => pool.install(|| rayon::join(here, background)),
        // In the order rayon's join keeps on one thread.
        None => {
            let mine = here();
            (mine, background())
        }
    };
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
    let workers = threads().min(n);
    if workers <= 1 {
        work();
        return;
    }
    install(|| {
        rayon::scope(|s| {
            for _ in 1..workers {
                s.spawn(|_| work());
            }
            work();
        })
    });
}

/// Splits `0..len` into consecutive pieces of whole `unit`s (the last may
/// hold the remainder), one per thread of the pool, each at least
/// `min_piece` long so that small inputs stay whole: `(start, end)` pairs
/// in order, covering `0..len` (one empty piece when `len` is 0).
pub fn pieces(len: usize, unit: usize, min_piece: usize) -> Vec<(usize, usize)> {
    let unit = unit.max(1);
    let units = len / unit;
    let by_size = (len / min_piece.max(1)).max(1);
    let count = threads().min(by_size).min(units.max(1));
    let per = units.div_ceil(count).max(1) * unit;
    let mut out: Vec<(usize, usize)> = (0..count)
        .map(|i| ((i * per).min(len), ((i + 1) * per).min(len)))
        .filter(|(s, e)| s < e)
        .collect();
    match out.last_mut() {
        Some(last) => last.1 = len,
        None => out.push((0, len)),
    }
    out
}

/// Runs `f(start, end)` on each of [`pieces`]`(len, unit, min_piece)` in
/// parallel and returns the results in piece order.
pub fn map_pieces<R: Send>(
    len: usize,
    unit: usize,
    min_piece: usize,
    f: impl Fn(usize, usize) -> R + Sync,
) -> Vec<R> {
    use rayon::prelude::*;
    let bounds = pieces(len, unit, min_piece);
    if bounds.len() <= 1 {
        return bounds.iter().map(|&(s, e)| f(s, e)).collect();
    }
    install(|| bounds.par_iter().map(|&(s, e)| f(s, e)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_range_in_whole_units_and_in_order() {
        for len in [0usize, 1, 7, 64, 1000, 4096 * 3 + 12] {
            for unit in [1usize, 4, 12] {
                let len = len / unit * unit;
                let got = map_pieces(len, unit, 16, |s, e| (s, e));
                let mut at = 0;
                for &(s, e) in &got {
                    assert_eq!(s, at);
                    assert_eq!(s % unit, 0);
                    at = e;
                }
                assert_eq!(at, len, "{len} {unit}: {got:?}");
            }
        }
    }
}
