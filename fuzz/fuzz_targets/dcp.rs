//! torch DCP checkpoints: rank files' sharding info and their
//! consolidation. The body is `tensorfile_fuzz_targets::dcp`
//! (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::dcp(data));
