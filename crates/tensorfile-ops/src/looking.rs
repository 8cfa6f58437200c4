//! What `diff` and `stats` share: any input opened for looking at its
//! values (a safetensors file or set, local or remote, or a PyTorch
//! checkpoint), with the MLX parameters of its model's config.json.

use std::path::Path;

use tensorfile::quant::QuantConfig;
use tensorfile::set::ShardedTensors;
use tensorfile::{InputKind, Metadata, OpenOptions, Result, TensorData};

/// An input opened for looking at its values.
pub(crate) enum Opened {
    /// A safetensors file or set, read with positional reads.
    Set {
        /// The files.
        set: ShardedTensors,
        /// The union of their metadata.
        metadata: Option<Metadata>,
        /// MLX quantization parameters from the model's config.json.
        mlx: Option<QuantConfig>,
    },
    /// A PyTorch checkpoint.
    #[cfg(feature = "pytorch")]
    Torch(tensorfile::pytorch::Checkpoint),
}

impl Opened {
    /// Opens `path` (local files with positional reads, URLs through
    /// `options`' client), refusing (naming what it is) an input whose
    /// values cannot be read here.
    pub(crate) fn open(path: &Path, options: &OpenOptions) -> Result<Opened> {
        let options = options.clone().with_map(false);
        match tensorfile::probe(path)?.kind() {
            InputKind::Safetensors | InputKind::SafetensorsSet => {
                let set = tensorfile::open_set(path, &options)?;
                let m = set.metadata()?;
                Ok(Opened::Set {
                    set,
                    metadata: (!m.is_empty()).then_some(m),
                    mlx: super::dequantize::beside_config(path)?,
                })
            }
            #[cfg(feature = "pytorch")]
            InputKind::Pytorch => Ok(Opened::Torch(tensorfile::pytorch::Checkpoint::open_with(
                path,
                &options.pytorch,
            )?)),
            other => Err(tensorfile::Error::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("this is {other}; this command reads safetensors files and sets and PyTorch checkpoints (`tensorfile convert` turns it into safetensors)"),
                ),
            )),
        }
    }

    /// Every tensor, read on demand.
    pub(crate) fn tensors(&self) -> Vec<Box<dyn TensorData<tensorfile::Error> + '_>> {
        match self {
            Opened::Set { set, .. } => set
                .tensor_data()
                .into_iter()
                .map(|t| Box::new(t) as Box<dyn TensorData<tensorfile::Error>>)
                .collect(),
            #[cfg(feature = "pytorch")]
            Opened::Torch(ckpt) => ckpt
                .tensors()
                .map(|t| Box::new(t) as Box<dyn TensorData<tensorfile::Error>>)
                .collect(),
        }
    }

    /// The metadata (none for a checkpoint).
    pub(crate) fn metadata(&self) -> Option<&Metadata> {
        match self {
            Opened::Set { metadata, .. } => metadata.as_ref(),
            #[cfg(feature = "pytorch")]
            Opened::Torch(_) => None,
        }
    }

    /// MLX parameters from the model's config.json.
    pub(crate) fn mlx(&self) -> Option<&QuantConfig> {
        match self {
            Opened::Set { mlx, .. } => mlx.as_ref(),
            #[cfg(feature = "pytorch")]
            Opened::Torch(_) => None,
        }
    }
}

/// References to boxed tensors, as the library's catalogs take them.
pub(crate) fn refs<'t>(
    boxes: &'t [Box<dyn TensorData<tensorfile::Error> + 't>],
) -> Vec<&'t dyn TensorData<tensorfile::Error>> {
    boxes.iter().map(|b| b.as_ref()).collect()
}
