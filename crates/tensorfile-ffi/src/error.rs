//! Error codes, the per-thread last error, and the guard every exported
//! function runs its body in (errors and panics become codes, never unwind
//! into C).

use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tensorfile::ErrorKind;

/// Success.
pub const TL_OK: c_int = 0;
/// The file breaks the safetensors format (a reader rule of the format
/// page), or a PyTorch checkpoint is malformed.
pub const TL_EFORMAT: c_int = -1;
/// The system refused an operation (open, read, write, rename, map), or the
/// output path is not a file that can be replaced (a directory, a FIFO).
pub const TL_EIO: c_int = -2;
/// Memory could not be allocated.
pub const TL_ENOMEM: c_int = -3;
/// A bad argument: NULL, a string that is not UTF-8, a length that
/// disagrees with dtype and shape, an unknown dtype, a duplicate name.
pub const TL_EINVAL: c_int = -4;
/// No such tensor, index or metadata key.
pub const TL_ENOTFOUND: c_int = -5;
/// Valid content the library refuses (a pickle global that is not allowed,
/// a dimension that does not fit `int64_t`), or over a limit or budget (a
/// header over 100,000,000 bytes, a checkpoint over the loader's budgets).
pub const TL_EUNSUPPORTED: c_int = -6;
/// A bug in libtensorfile: an internal invariant failed, or a panic was
/// caught (it never unwinds into C). Please report it with the message.
pub const TL_EINTERNAL: c_int = -7;

/// The C code of an error kind. No `_` arm: a kind added to the library
/// does not compile until it is given its code here.
pub(crate) fn code_of(kind: ErrorKind) -> c_int {
    match kind {
        ErrorKind::Format => TL_EFORMAT,
        ErrorKind::Io | ErrorKind::Output => TL_EIO,
        ErrorKind::OutOfMemory => TL_ENOMEM,
        ErrorKind::InvalidArgument => TL_EINVAL,
        ErrorKind::NotFound => TL_ENOTFOUND,
        ErrorKind::Unsupported | ErrorKind::Limit => TL_EUNSUPPORTED,
        ErrorKind::Internal => TL_EINTERNAL,
    }
}

/// A failure: its code and a message as specific as the Rust error.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(TL_EINVAL, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(TL_ENOTFOUND, message)
    }

    /// An invariant of this library that does not hold (a bug).
    pub(crate) fn internal(message: impl std::fmt::Display) -> Failure {
        Failure::new(
            TL_EINTERNAL,
            format!("internal error in libtensorfile (a bug): {message}"),
        )
    }
}

/// The code for an I/O error: out of memory is told apart from the rest.
pub(crate) fn io_code(e: &io::Error) -> c_int {
    code_of(ErrorKind::of_io(e))
}

/// The one mapping of the library's errors to C: the error's kind gives
/// the code (`code_of`), its message the text.
impl From<tensorfile::Error> for Failure {
    fn from(e: tensorfile::Error) -> Failure {
        Failure::new(code_of(e.kind()), e.to_string())
    }
}

/// A core error, as the library's error.
impl From<tensorfile::CoreError> for Failure {
    fn from(e: tensorfile::CoreError) -> Failure {
        tensorfile::Error::from(e).into()
    }
}

/// A loader error, as the library's error.
impl From<tensorfile::PytorchError> for Failure {
    fn from(e: tensorfile::PytorchError) -> Failure {
        tensorfile::Error::from(e).into()
    }
}

/// The last error of this thread: its code and its message, NUL-terminated
/// (kept as bytes so that clearing it does not allocate).
struct LastError {
    code: c_int,
    message: Vec<u8>,
}

thread_local! {
    static LAST: RefCell<LastError> = const { RefCell::new(LastError { code: TL_OK, message: Vec::new() }) };
}

fn set_last(code: c_int, message: &str) {
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        last.code = code;
        last.message.clear();
        // A message is for printing: an interior NUL would cut it short, so
        // it is shown as the two characters `\0` instead.
        for &b in message.as_bytes() {
            if b == 0 {
                last.message.extend_from_slice(b"\\0");
            } else {
                last.message.push(b);
            }
        }
        last.message.push(0);
    });
}

/// What an exported function returns when it fails.
pub(crate) trait FfiReturn {
    /// The failure value for `code`.
    fn failure(code: c_int) -> Self;
}

impl FfiReturn for c_int {
    fn failure(code: c_int) -> c_int {
        code
    }
}

impl<T> FfiReturn for *mut T {
    fn failure(_: c_int) -> *mut T {
        std::ptr::null_mut()
    }
}

impl<T> FfiReturn for *const T {
    fn failure(_: c_int) -> *const T {
        std::ptr::null()
    }
}

/// Runs an exported function's body: on success the thread's last error is
/// cleared, on failure it is set and the failure value returned. A panic
/// (a bug in this library) is caught here, reported as `TL_EINTERNAL` with
/// its message, and never crosses into C.
pub(crate) fn guard<T: FfiReturn>(body: impl FnOnce() -> Result<T, Failure>) -> T {
    // Unwind safety: a panicking body leaves at most a half-updated writer
    // behind, which then only refuses or writes what it holds; nothing of a
    // reader is ever mutated.
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => {
            set_last(TL_OK, "");
            return value;
        }
        Ok(Err(failure)) => failure,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Failure::internal(format_args!("panic: {what}"))
        }
    };
    set_last(failure.code, &failure.message);
    T::failure(failure.code)
}

/// The code of the last failure on this thread, or `TL_OK` (0) when the
/// last call into the library on this thread succeeded.
#[no_mangle]
pub extern "C" fn fs_last_error() -> c_int {
    LAST.with(|last| last.borrow().code)
}

/// The message of the last failure on this thread (`""` after a success):
/// what went wrong and where, as the Rust library says it. Never NULL.
///
/// Ownership: the library's. The string stays valid until the next call
/// into the library on the same thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn fs_last_error_message() -> *const c_char {
    const EMPTY: &[u8] = b"\0";
    LAST.with(|last| {
        let last = last.borrow();
        if last.message.is_empty() {
            EMPTY.as_ptr().cast()
        } else {
            // The heap buffer does not move until the next set_last.
            last.message.as_ptr().cast()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn message() -> String {
        // SAFETY: fs_last_error_message never returns NULL and always
        // points at a NUL-terminated buffer.
        unsafe { CStr::from_ptr(fs_last_error_message()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_error_code() {
        let r: c_int = guard(|| panic!("boom {}", 7));
        assert_eq!(r, TL_EINTERNAL);
        assert_eq!(fs_last_error(), TL_EINTERNAL);
        assert!(message().contains("boom 7"), "{}", message());
        let p: *mut u8 = guard(|| panic!("static"));
        assert!(p.is_null());
        assert!(message().contains("static"));
    }

    #[test]
    fn success_clears_and_errors_are_per_thread() {
        let r: c_int = guard(|| Err(Failure::not_found("no tensor named \"x\"\0y")));
        assert_eq!(r, TL_ENOTFOUND);
        assert_eq!(message(), "no tensor named \"x\"\\0y");
        std::thread::spawn(|| assert_eq!(fs_last_error(), TL_OK))
            .join()
            .unwrap();
        assert_eq!(fs_last_error(), TL_ENOTFOUND);
        let r: c_int = guard(|| Ok(3));
        assert_eq!(r, 3);
        assert_eq!(fs_last_error(), TL_OK);
        assert_eq!(message(), "");
    }
}
