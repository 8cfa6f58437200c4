//! Model directories: config.json and the weights. The body is
//! `tensorfile_fuzz_targets::model` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::model(data));
