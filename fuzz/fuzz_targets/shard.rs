//! The shard index parser and the set checks. The body is
//! `tensorfile_fuzz_targets::shard` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::shard(data));
