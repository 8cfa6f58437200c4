//! The GGUF <-> Hugging Face mappings on models built from the input,
//! with zero dimensions beside huge ones. The body is
//! `tensorfile_fuzz_targets::gguf_convert` (crates/tensorfile-fuzz-targets).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tensorfile_fuzz_targets::gguf_convert(data));
