//! The writer's round trip on arbitrary tensors and metadata. The body is
//! `tensorfile_fuzz_targets::writer` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::writer(data));
