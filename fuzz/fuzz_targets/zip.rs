//! The zip reader on arbitrary bytes. The body is
//! `tensorfile_fuzz_targets::zip` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::zip(data));
