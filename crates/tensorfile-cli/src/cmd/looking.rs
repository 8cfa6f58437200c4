//! What `diff`, `stats`, `hash` and `verify` share: untrusted text made
//! printable, the exit status of a comparison (2 for an input that cannot
//! be read), and opening any input as tensors (a checkpoint's tensors are
//! the loader's own `TensorData`).

use std::path::Path;
use std::process::ExitCode;

use super::Failure;

/// Text from a file made safe for a terminal (the command line's one
/// rule, [`super::escape_text`]).
pub fn escape(text: &str) -> String {
    super::escape_text(text).into_owned()
}

/// A path, escaped for printing.
pub fn shown(path: &Path) -> String {
    escape(&path.display().to_string())
}

/// Runs a comparison whose failures (unreadable or invalid inputs, usage
/// errors) exit with status 2, as `diff(1)` and `cmp(1)` do: the error is
/// reported on one line naming the file, or with `json` as the object
/// `{verdict: "error", error, file, rule}` on stdout.
pub fn comparison(
    input: Option<&Path>,
    json: bool,
    run: impl FnOnce() -> Result<ExitCode, Failure>,
) -> Result<ExitCode, Failure> {
    match run() {
        Ok(code) => Ok(code),
        Err(err) => {
            let usage = err.is_usage();
            let input = input.filter(|_| !usage);
            if json && !usage {
                let mut v = super::error_json(&err, input);
                v["verdict"] = serde_json::json!("error");
                super::out(v);
            } else {
                super::report(&err, input, false);
            }
            Ok(ExitCode::from(2))
        }
    }
}

/// An input opened for looking at its values: a safetensors file or set,
/// or a PyTorch checkpoint (anything `inspect` takes).
pub enum Opened {
    /// A safetensors file or set, read with positional reads.
    Set {
        /// The files.
        set: tensorfile_core::ShardedTensors,
        /// The union of their metadata.
        metadata: Option<tensorfile::Metadata>,
        /// MLX quantization parameters from the model's config.json.
        mlx: Option<tensorfile::quant::QuantConfig>,
    },
    /// A PyTorch checkpoint.
    Torch(tensorfile::pytorch::Checkpoint),
}

/// The `quantization` of the config.json of `input`'s model: in it when it
/// is a directory, beside it when it is a file or an index.
pub fn beside_config(input: &Path) -> Result<Option<tensorfile::quant::QuantConfig>, Failure> {
    Ok(tensorfile::ops::dequantize::beside_config(input)?)
}

impl Opened {
    /// Opens `path`, refusing (naming what it is) an input whose values
    /// cannot be read here.
    pub fn open(path: &Path) -> Result<Opened, Failure> {
        use tensorfile::InputKind as Kind;
        match super::input_kind(path)? {
            Kind::Safetensors | Kind::SafetensorsSet => {
                let set = super::remote::open_set(path, &tensorfile::ReadOptions::default())?;
                let m = set.metadata()?;
                Ok(Opened::Set {
                    set,
                    metadata: (!m.is_empty()).then_some(m),
                    mlx: beside_config(path)?,
                })
            }
            Kind::Pytorch => Ok(Opened::Torch(tensorfile::pytorch::Checkpoint::open(path)?)),
            other => Err(format!(
                "{}: this is {other}; this command reads safetensors files and sets and PyTorch checkpoints (`tensorfile convert` turns it into safetensors)",
                shown(path)
            )
            .into()),
        }
    }

    /// Every tensor, read on demand.
    pub fn tensors(&self) -> Vec<Box<dyn tensorfile::TensorData<tensorfile::Error> + '_>> {
        match self {
            Opened::Set { set, .. } => set
                .tensor_data()
                .into_iter()
                .map(|t| Box::new(t) as Box<dyn tensorfile::TensorData<tensorfile::Error>>)
                .collect(),
            Opened::Torch(ckpt) => ckpt
                .tensors()
                .map(|t| Box::new(t) as Box<dyn tensorfile::TensorData<tensorfile::Error>>)
                .collect(),
        }
    }

    /// The metadata (none for a checkpoint).
    pub fn metadata(&self) -> Option<&tensorfile::Metadata> {
        match self {
            Opened::Set { metadata, .. } => metadata.as_ref(),
            Opened::Torch(_) => None,
        }
    }

    /// MLX parameters from the model's config.json.
    pub fn mlx(&self) -> Option<&tensorfile::quant::QuantConfig> {
        match self {
            Opened::Set { mlx, .. } => mlx.as_ref(),
            Opened::Torch(_) => None,
        }
    }
}

/// References to boxed tensors, as the library's catalogs take them.
pub fn refs<'t>(
    boxes: &'t [Box<dyn tensorfile::TensorData<tensorfile::Error> + 't>],
) -> Vec<&'t dyn tensorfile::TensorData<tensorfile::Error>> {
    boxes.iter().map(|b| b.as_ref()).collect()
}
