//! How long work tells its caller how it goes: one small trait that every
//! operation of the tensorfile crates takes (writes, conversions, hashing,
//! statistics, comparisons, fetches), with nothing shown for `&()` and a
//! closure `Fn(u64)` counting what is done.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use tensorfile_core::progress::Progress;
//!
//! fn work(progress: &dyn Progress) {
//!     progress.total(3);
//!     for _ in 0..3 {
//!         progress.advance(1);
//!     }
//! }
//!
//! work(&()); // no progress
//! let done = AtomicU64::new(0);
//! work(&|n| {
//!     done.fetch_add(n, Ordering::Relaxed);
//! });
//! assert_eq!(done.into_inner(), 3);
//! ```

/// Told how an operation goes (a progress bar, a counter, nothing), from
/// any thread. Every method does nothing unless implemented; what a unit
/// is (bytes written, values read, files checked) each operation says.
pub trait Progress: Sync {
    /// The units still to do, once the operation knows them (a fetch,
    /// after asking the server; operations whose caller knows the total
    /// beforehand do not call it).
    fn total(&self, _units: u64) {}

    /// `units` more were done.
    fn advance(&self, _units: u64) {}

    /// Something worth a line that is not an error (a copy that starts
    /// over instead of resuming).
    fn note(&self, _message: &str) {}

    /// A further stage of the work begins, called `what`, of `total`
    /// units (an output made locally, now uploaded to a bucket): what
    /// [`advance`](Progress::advance) counts from here on is this stage's.
    fn stage(&self, _what: &str, _total: u64) {}
}

/// No progress: every report is dropped.
impl Progress for () {}

/// A closure told of each step done (`advance`, the steps of every stage
/// alike); totals, notes and stages are dropped.
impl<F: Fn(u64) + Sync> Progress for F {
    fn advance(&self, units: u64) {
        self(units);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    /// Reports everything it is told through the trait object, as the
    /// operations do.
    fn tell(progress: &dyn Progress) {
        progress.total(10);
        progress.advance(4);
        progress.note("starting over");
        progress.advance(6);
    }

    #[test]
    fn unit_drops_everything() {
        tell(&());
    }

    #[test]
    fn a_closure_hears_each_advance_and_nothing_else() {
        let steps = Mutex::new(Vec::new());
        tell(&|n| steps.lock().unwrap().push(n));
        assert_eq!(steps.into_inner().unwrap(), vec![4, 6]);
    }

    #[test]
    fn a_closure_may_be_shared_between_threads() {
        let done = AtomicU64::new(0);
        let count = |n: u64| {
            done.fetch_add(n, Ordering::Relaxed);
        };
        let progress: &dyn Progress = &count;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| progress.advance(5));
            }
        });
        assert_eq!(done.into_inner(), 20);
    }

    #[test]
    fn an_implementation_hears_totals_and_notes() {
        #[derive(Default)]
        struct Log(Mutex<Vec<String>>);
        impl Progress for Log {
            fn total(&self, units: u64) {
                self.0.lock().unwrap().push(format!("total {units}"));
            }
            fn advance(&self, units: u64) {
                self.0.lock().unwrap().push(format!("advance {units}"));
            }
            fn note(&self, message: &str) {
                self.0.lock().unwrap().push(format!("note {message}"));
            }
        }
        let log = Log::default();
        tell(&log);
        assert_eq!(
            log.0.into_inner().unwrap(),
            ["total 10", "advance 4", "note starting over", "advance 6"]
        );
    }
}
