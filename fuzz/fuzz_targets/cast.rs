//! Casts on arbitrary dtype pairs, bytes and shapes. The body is
//! `tensorfile_fuzz_targets::cast` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::cast(data));
