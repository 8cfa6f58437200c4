//! Stopping the store requests of a process that is being stopped (the
//! `tensorfile` command's signal watcher).
//!
//! After [`interrupt`], every wait of [`store::block_on`](crate::store::block_on)
//! ends at once with [`Unfinished::Interrupted`] (an upload then fails
//! with [`Problem::Interrupted`](crate::Problem::Interrupted) and takes its
//! error path), except the cleanup requests (a multipart upload's abort,
//! an object's removal, the sweep of pending uploads), which are given
//! [`CLEANUP_LIMIT`] more. [`Busy`] counts the writes under way in the
//! process (an upload, a publication of a set's objects, a held commit
//! lock), and [`wait_idle`] waits for them to end, so that the one who
//! stops the process knows when their cleanup is done.
//!
//! Nothing here happens unless someone calls [`interrupt`]: a library
//! user (and Python) sees no difference.

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a cleanup request may still take once the process is
/// interrupted.
pub const CLEANUP_LIMIT: Duration = Duration::from_secs(10);

/// Why [`store::block_on`](crate::store::block_on) gave up a future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// Its deadline passed (for a cleanup: [`CLEANUP_LIMIT`] after an
    /// interruption).
    DeadlinePassed,
    /// The process is being stopped ([`interrupt`]).
    Interrupted,
}

impl Unfinished {
    /// The problem it is for a request described by `what` whose limit
    /// was `limit`.
    pub fn problem(self, what: &'static str, limit: Duration) -> crate::Problem {
        match self {
            Unfinished::DeadlinePassed => crate::Problem::Timeout {
                what,
                limit,
                attempts: 1,
            },
            Unfinished::Interrupted => crate::Problem::Interrupted,
        }
    }
}

fn flag() -> &'static tokio::sync::watch::Sender<bool> {
    static FLAG: OnceLock<tokio::sync::watch::Sender<bool>> = OnceLock::new();
    FLAG.get_or_init(|| tokio::sync::watch::Sender::new(false))
}

/// Interrupts the process's store requests (see the module's
/// documentation). It cannot be undone: the process is expected to end.
pub fn interrupt() {
    flag().send_replace(true);
}

/// Whether [`interrupt`] was called.
pub fn interrupted() -> bool {
    *flag().borrow()
}

/// Ends when [`interrupt`] is called (at once if it was).
pub(crate) async fn until_interrupted() {
    let mut rx = flag().subscribe();
    // Err: the sender is gone, which a static never is.
    let _ = rx.wait_for(|v| *v).await;
}

/// The number of [`Busy`] alive, and its change.
fn busy() -> &'static (Mutex<usize>, Condvar) {
    static BUSY: OnceLock<(Mutex<usize>, Condvar)> = OnceLock::new();
    BUSY.get_or_init(Default::default)
}

/// A write to a store under way (counted while alive; see
/// [`wait_idle`]).
#[derive(Debug)]
pub struct Busy(());

impl Busy {
    /// Counts one more write under way.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Busy {
        *busy().0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let (count, changed) = busy();
        let mut n = count.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        changed.notify_all();
    }
}

/// Whether a write to a store is under way.
pub fn is_busy() -> bool {
    *busy().0.lock().unwrap_or_else(|e| e.into_inner()) > 0
}

/// Waits until no write is under way, at most `limit`; whether none is.
pub fn wait_idle(limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let (count, changed) = busy();
    let mut n = count.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        n = changed
            .wait_timeout(n, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    true
}

/// The limit of a cleanup's requests (`wait`, or [`CLEANUP_LIMIT`] once
/// interrupted).
pub(crate) fn cleanup_wait(wait: Duration) -> Duration {
    if interrupted() {
        wait.min(CLEANUP_LIMIT)
    } else {
        wait
    }
}
