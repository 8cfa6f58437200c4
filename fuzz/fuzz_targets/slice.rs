//! Slicing, checked against a naive model of the slice. The body is
//! `tensorfile_fuzz_targets::slice` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::slice(data));
