//! The file names of a set.

/// The file name of a sharded checkpoint's index.
pub const INDEX_NAME: &str = "model.safetensors.index.json";

/// The file name of an unsharded model's weights.
pub const SINGLE_NAME: &str = "model.safetensors";

/// diffusers' index of a sharded model.
pub const DIFFUSERS_INDEX_NAME: &str = "diffusion_pytorch_model.safetensors.index.json";

/// diffusers' file name of an unsharded model's weights.
pub const DIFFUSERS_SINGLE_NAME: &str = "diffusion_pytorch_model.safetensors";

/// The (index, single file) names a model directory may use, in the order
/// they are looked for: transformers' (and mlx-lm's), then diffusers'.
pub const DIR_NAMES: [(&str, &str); 2] = [
    (INDEX_NAME, SINGLE_NAME),
    (DIFFUSERS_INDEX_NAME, DIFFUSERS_SINGLE_NAME),
];
