//! Quantization on hostile shapes and parameters. The body is
//! `tensorfile_fuzz_targets::quant` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::quant(data));
