//! The library's integration tests: one binary, so that the library is linked once;
//! each file is a module.
//! `host_pool.rs` stays a binary of its own: rayon's global pool, which
//! it checks the library leaves alone, is per process.

mod atomic;
mod cast_files;
mod casts;
mod common;
mod error_kind;
mod gguf_convert;
mod gguf_quant;
mod gguf_read;
mod gguf_write;
mod hf_check;
mod json_grammar;
mod layers;
mod model;
mod no_panic;
mod npz;
mod open;
mod pytorch_convert;
mod pytorch_hostile;
mod pytorch_real;
mod quant;
mod ranks;
mod read_plans;
mod reader;
mod reference_verdicts;
mod repository;
mod reshard;
mod rules;
mod shard;
mod slicing;
mod typed_errors;
mod writer;
