//! The `tensorfile` command's tests (each runs the built binary): one binary, so that the library is linked once;
//! each file is a module.

mod convert;
mod dcp;
mod digests;
mod edit;
mod generate;
mod gguf;
mod gguf_raw;
mod gguf_tf5;
mod hostile_gguf;
mod hostile_npz;
mod hostile_sweep;
mod inputs;
mod looking;
mod models;
mod newcomer;
mod npz;
mod progress;
mod pytorch;
mod quant;
mod remote;
mod rewrite;
mod saves;
mod staged;
mod truncated;
mod truthful;
mod validate_inspect;
