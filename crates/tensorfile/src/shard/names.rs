//! The file names of a set.

/// The file name of a sharded checkpoint's index.
pub const INDEX_NAME: &str = "model.safetensors.index.json";

/// The file name of an unsharded model's weights.
pub const SINGLE_NAME: &str = "model.safetensors";
