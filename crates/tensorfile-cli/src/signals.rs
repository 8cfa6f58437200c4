//! SIGINT, SIGTERM and SIGHUP: the command ends by the signal (exit status
//! 128 + N), leaving no temporary file and nothing half-written in a
//! bucket.
//!
//! The signals are blocked in `main` before any thread starts (every
//! thread inherits the mask) and taken by a thread of their own with
//! `sigwait`, so that what runs on a signal is ordinary code, not a C
//! handler's few async-signal-safe calls. On the first signal:
//!
//! 1. the store requests of the process are interrupted
//!    ([`tensorfile_remote::interrupt`]): each wait of an upload ends at
//!    once, and the upload's error path runs in the main thread as for any
//!    error: a multipart upload is aborted, the objects already put for a
//!    set not yet published are removed (cleanup requests get 10 s more);
//! 2. this thread waits for those writes to end ([`CLEANUP_WAIT`] at
//!    most; none under way: not at all, the signal acts at once);
//! 3. the core's named temporaries and the local scratch directories of
//!    outputs bound for a bucket are removed;
//! 4. the signal's default action is restored and the signal raised again.
//!
//! A second signal meanwhile skips the wait. A signal ignored when the
//! process started (`nohup`, a background job) stays ignored; one with a
//! handler already is left alone. The main thread, once its command has
//! returned, does not report an error the interruption caused: it waits
//! for the signal to end the process.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The longest the writes under way may take to clean up.
#[cfg(unix)]
pub(crate) const CLEANUP_WAIT: Duration = Duration::from_secs(30);

/// The signal received (0: none yet).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The signals handled.
#[cfg(unix)]
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Takes over SIGINT, SIGTERM and SIGHUP (those with their default
/// action). Call first in `main`, before any thread is made. Falls back to
/// the core's C handler when the watching thread cannot be made.
#[cfg(unix)]
pub(crate) fn install() {
    // SAFETY: sigset_t and sigaction are plain C structs, initialized by
    // sigemptyset and sigaction before use; every pointer is valid.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        let mut any = false;
        for sig in SIGNALS {
            let mut old = std::mem::zeroed::<libc::sigaction>();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_DFL
            {
                libc::sigaddset(&mut set, sig);
                any = true;
            }
        }
        if !any {
            return;
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return fallback();
        }
        let watched = set;
        let spawned = std::thread::Builder::new()
            .name("tensorfile-signals".into())
            .stack_size(256 << 10)
            .spawn(move || watch(watched));
        if spawned.is_err() {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            fallback();
        }
    }
}

#[cfg(not(unix))]
pub(crate) fn install() {}

/// The core's handler: temporaries removed, nothing else.
#[cfg(unix)]
fn fallback() {
    if let Err(e) = tensorfile_core::atomic::remove_temporaries_on_signal() {
        eprintln!("tensorfile: warning: cannot install signal handlers: {e}");
    }
}

/// The watching thread: the first signal is handled by a thread of its
/// own (which ends the process); a second one ends it at once.
#[cfg(unix)]
fn watch(set: libc::sigset_t) {
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is a valid signal set, `sig` a valid pointer.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        let first = RECEIVED
            .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        tensorfile_remote::interrupt::interrupt();
        let busy = tensorfile_remote::interrupt::is_busy();
        if first && busy {
            let ended = std::thread::Builder::new()
                .name("tensorfile-stop".into())
                .spawn(move || {
                    tensorfile_remote::interrupt::wait_idle(CLEANUP_WAIT);
                    die(sig)
                });
            if ended.is_ok() {
                continue;
            }
        }
        die(sig)
    }
}

/// Removes what is local and ours, then ends the process by `sig`.
#[cfg(unix)]
fn die(sig: libc::c_int) -> ! {
    tensorfile_core::atomic::remove_temporaries();
    tensorfile_remote::scratch::remove_all();
    // SAFETY: restoring the default action and unblocking the signal in
    // this thread, then raising it here: the process ends by it.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut one = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::raise(sig);
    }
    // Not reached: the default action of these signals ends the process.
    std::process::exit(128 + sig)
}

/// Called by `main` once the command has returned: if a signal came, the
/// result is not reported (an interrupted upload's error is the signal's
/// doing) and this waits for the signal's thread to end the process.
pub(crate) fn settle() {
    if RECEIVED.load(Ordering::SeqCst) != 0 {
        loop {
            std::thread::park();
        }
    }
}
