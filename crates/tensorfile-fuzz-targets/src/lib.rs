//! The bodies of the cargo-fuzz targets in `fuzz/`: one function per
//! target, taking the fuzzer's bytes. Each one returns normally on every
//! input the library handles correctly (an error is a correct answer to a
//! bad input) and panics only on a real bug: a panic inside the library,
//! or a property the target checks that does not hold.
//!
//! `fuzz/fuzz_targets/<target>.rs` wraps each function for libFuzzer; the
//! test `tests/replay.rs` runs every file of `fuzz/corpus/<target>/` and
//! `fuzz/regressions/<target>/` through it, so `cargo test --workspace`
//! (overflow checks on) replays the corpora and every input that ever
//! failed without a fuzzer.
//!
//! Every target bounds the work one input can ask for (sizes, counts,
//! lengths it derives are capped), so that fuzzing measures the code and
//! not huge honest inputs.

#![warn(missing_docs)]

mod cast;
mod dcp;
mod formats;
mod gguf;
mod gguf_convert;
mod input;
mod model;
mod npz;
mod quant;
mod shard;
mod slice;
mod writer;

pub use cast::cast;
pub use dcp::dcp;
pub use formats::{checkpoint, header, pickle, zip};
pub use gguf::gguf;
pub use gguf_convert::gguf_convert;
pub use model::model;
pub use npz::npz;
pub use quant::quant;
pub use shard::shard;
pub use slice::slice;
pub use writer::writer;

/// A target's body: the fuzzer's bytes in, a panic only on a bug.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/` and the corpus folders
/// name them.
pub const TARGETS: [(&str, Target); 14] = [
    ("header", header),
    ("pickle", pickle),
    ("zip", zip),
    ("checkpoint", checkpoint),
    ("slice", slice),
    ("writer", writer),
    ("cast", cast),
    ("quant", quant),
    ("shard", shard),
    ("model", model),
    ("gguf", gguf),
    ("gguf_convert", gguf_convert),
    ("npz", npz),
    ("dcp", dcp),
];
