//! A counting global allocator: live and peak heap bytes, so a measured
//! call's peak extra memory can be read after it returns.
//!
//! Counting is off unless a [`peak_extra`] call is running, so timed runs
//! pay one relaxed load per allocation and nothing else. Only the heap is
//! seen: maps made with `mmap` (`SafeTensors::open`/`load`, `memmap2`) are
//! not counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// The system allocator, counting while asked to.
pub struct Counting;

static ENABLED: AtomicBool = AtomicBool::new(false);
// Signed: blocks allocated before counting started may be freed during it.
static CURRENT: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grow(by: usize) {
    if ENABLED.load(Ordering::Relaxed) {
        let by = by as isize;
        let now = CURRENT.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

fn shrink(by: usize) {
    if ENABLED.load(Ordering::Relaxed) {
        CURRENT.fetch_sub(by as isize, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` unchanged; the counters are
// bookkeeping on the side and never affect the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) };
        shrink(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p == ptr {
            // Resized in place: only the difference changes hands.
            if new_size >= layout.size() {
                grow(new_size - layout.size());
            } else {
                shrink(layout.size() - new_size);
            }
        } else if !p.is_null() {
            // Moved: count the new block before releasing the old one, as a
            // copying realloc holds both (conservative when the system moves
            // pages without copying them).
            grow(new_size);
            shrink(layout.size());
        }
        p
    }
}

/// Runs `f` with counting on and returns the peak heap bytes it held above
/// what was live when it started. Whatever `f` returns is dropped inside
/// the window, so it is counted while alive.
pub fn peak_extra<T>(f: impl FnOnce() -> T) -> usize {
    CURRENT.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    ENABLED.store(true, Ordering::Relaxed);
    drop(std::hint::black_box(f()));
    ENABLED.store(false, Ordering::Relaxed);
    PEAK.load(Ordering::Relaxed).max(0) as usize
}
