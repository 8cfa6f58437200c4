//! The GGUF reader on arbitrary bytes. The body is
//! `tensorfile_fuzz_targets::gguf` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::gguf(data));
