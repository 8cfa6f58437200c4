//! Checking what C hands in: NULLs, strings, paths, handles.

use std::ffi::{c_char, CStr, OsStr};
use std::path::Path;

use crate::error::Failure;

/// A NUL-terminated UTF-8 string argument. `what` names the parameter in
/// the error.
///
/// # Safety
/// `ptr` is NULL or points at a NUL-terminated string that stays valid for
/// `'a`.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL and NUL-terminated, by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    std::str::from_utf8(bytes).map_err(|e| {
        Failure::invalid(format!(
            "{what} is not valid UTF-8 (bad byte at position {})",
            e.valid_up_to()
        ))
    })
}

/// A path argument: any bytes but NUL (paths need not be UTF-8).
///
/// # Safety
/// As for [`c_str`].
#[cfg(unix)]
pub(crate) unsafe fn c_path<'a>(ptr: *const c_char) -> Result<&'a Path, Failure> {
    use std::os::unix::ffi::OsStrExt;
    if ptr.is_null() {
        return Err(Failure::invalid("path is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated, by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    if bytes.is_empty() {
        return Err(Failure::invalid("path is empty"));
    }
    Ok(Path::new(OsStr::from_bytes(bytes)))
}

/// A path argument (non-Unix systems: paths must be UTF-8).
///
/// # Safety
/// As for [`c_str`].
#[cfg(not(unix))]
pub(crate) unsafe fn c_path<'a>(ptr: *const c_char) -> Result<&'a Path, Failure> {
    // SAFETY: forwarded contract.
    let s = unsafe { c_str(ptr, "path") }?;
    if s.is_empty() {
        return Err(Failure::invalid("path is empty"));
    }
    Ok(Path::new(s))
}

/// A handle argument as a shared reference.
///
/// # Safety
/// `ptr` is NULL or a live handle of this library, not freed meanwhile.
pub(crate) unsafe fn handle<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: a live handle, by the caller's contract.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// A handle argument as an exclusive reference.
///
/// # Safety
/// As for [`handle`], and no other thread uses it meanwhile.
pub(crate) unsafe fn handle_mut<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: a live handle used by one thread, by the caller's contract.
    unsafe { ptr.as_mut() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}
