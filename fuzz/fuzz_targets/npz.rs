//! The numpy reader on arbitrary bytes. The body is
//! `tensorfile_fuzz_targets::npz` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::npz(data));
