//! `dequantize`: the quantized weights of a safetensors file or set turned
//! back into floats.
//!
//! int4 files say their group in their metadata. MLX parameters come from
//! the request (a config.json's `quantization`, or uniform `bits`,
//! `group_size` and `mode`), else from the config.json of the input's model
//! (in it when it is a directory, beside it otherwise), else from the
//! metadata of a file tensorfile quantized; they are never guessed from the
//! shapes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::transform::InOut;
use tensorfile::model::{read_config, CONFIG_NAME};
use tensorfile::quant::{dequantize_plan, DequantizeOptions, Mode, QuantConfig, QuantParams};
use tensorfile::{Dtype, Error, Progress, Result};

/// What to dequantize, and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DequantizeRequest {
    /// The input (a safetensors file or set) and the output.
    #[serde(flatten)]
    pub files: InOut,
    /// The dtype of the dequantized weights (a float dtype of whole
    /// bytes). Default: F32 for int4, the scales' dtype for MLX affine,
    /// BF16 for mxfp4/mxfp8/nvfp4, F32 for nvfp4 with global scales
    /// (MLX's defaults).
    #[serde(with = "crate::transform::dtype_name")]
    pub dtype: Option<Dtype>,
    /// A config.json whose `quantization` gives MLX's bits and group
    /// sizes; not with `bits`, `group_size` or `mode`.
    pub config: Option<PathBuf>,
    /// Bits of every MLX weight (with `group_size`).
    pub bits: Option<u64>,
    /// Group size of every MLX weight (with `bits`).
    pub group_size: Option<u64>,
    /// MLX mode of every weight: affine (the default, which needs `bits`
    /// and `group_size`), mxfp4, mxfp8 or nvfp4.
    #[serde(with = "crate::transform::mode_name")]
    pub mode: Option<Mode>,
}

/// One weight dequantized.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DequantizedWeight {
    /// The dtype written.
    pub dtype: String,
    /// The scheme it was stored in (`int4-g32-sym`, `mlx affine 4-bit,
    /// groups of 64`, ...).
    pub from: String,
    /// Its name.
    pub name: String,
}

/// What was dequantized and written: `tensorfile dequantize --json`.
///
/// Fields are in the order of their names: the order the command has
/// always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DequantizeReport {
    /// Bytes in all the files written.
    pub bytes: u64,
    /// The weights dequantized.
    pub dequantized: Vec<DequantizedWeight>,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// The index written, for a set.
    pub index: Option<PathBuf>,
    /// The input, as given.
    pub input: PathBuf,
    /// The output, as given.
    pub output: PathBuf,
    /// Tensors written.
    pub tensors: usize,
}

/// An error about `path` saying `message` (a config without what is
/// needed).
fn config_error(path: &Path, message: String) -> Error {
    Error::io(
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidData, message),
    )
}

/// The `quantization` of the config.json at `path`, which must have one.
fn required_config(path: &Path) -> Result<QuantConfig> {
    let config = read_config(path)?;
    match QuantConfig::from_config(&config) {
        Ok(Some(q)) => Ok(q),
        Ok(None) => Err(config_error(
            path,
            "no quantization in this config".to_string(),
        )),
        Err(e) => Err(config_error(path, e.to_string())),
    }
}

/// The `quantization` of the config.json of `input`'s model, if there is
/// one: in it when it is a directory, beside it when it is a file or an
/// index. A config.json that says nothing of quantization gives `None`.
///
/// # Errors
/// The config.json cannot be read, or its `quantization` is not one.
pub fn beside_config(input: &Path) -> Result<Option<QuantConfig>> {
    // Beside a bare file name is `config.json` as given, not `./config.json`.
    let dir = if input.is_dir() {
        input
    } else {
        input.parent().unwrap_or(Path::new(""))
    };
    let path = dir.join(CONFIG_NAME);
    if !path.is_file() {
        return Ok(None);
    }
    let config = read_config(&path)?;
    QuantConfig::from_config(&config).map_err(|e| config_error(&path, e.to_string()))
}

impl DequantizeRequest {
    /// The MLX parameters the request gives, or those of the input's
    /// model's config.json; `None` leaves them to the file's metadata.
    ///
    /// # Errors
    /// Parameters that contradict each other or are incomplete
    /// ([`Error::Request`]), a config.json that cannot be read or says no
    /// quantization.
    pub fn mlx_params(&self) -> Result<Option<QuantConfig>> {
        if let Some(path) = &self.config {
            if self.bits.is_some() || self.group_size.is_some() || self.mode.is_some() {
                return Err(Error::request(
                    "config and bits/group_size/mode are two ways to give the same parameters: give one",
                ));
            }
            return required_config(path).map(Some);
        }
        let mode = self.mode.unwrap_or(Mode::Affine);
        let (bits, group_size) = match (self.bits, self.group_size, mode.fixed()) {
            (Some(b), Some(g), _) => (b, g),
            (None, None, Some(fixed)) if self.mode.is_some() => fixed,
            (None, None, _) if self.mode.is_none() => return beside_config(&self.files.input),
            _ => return Err(Error::request("affine mode needs --bits and --group-size")),
        };
        // A global scale (nvfp4) is found beside each weight that has one.
        let params = QuantParams {
            bits,
            group_size,
            mode,
            global_scale: false,
        };
        params
            .validate()
            .map_err(|e| Error::request(e.to_string()))?;
        Ok(Some(QuantConfig::uniform(params)))
    }
}

/// Dequantizes the quantized weights of the input into an atomic save of
/// the output; other tensors are copied unchanged. `progress` counts the
/// data bytes written.
///
/// # Errors
/// A bad request ([`Error::Request`]), an input that is not safetensors or
/// is the output, parameters the file refutes, a failed write (nothing is
/// left behind).
pub fn dequantize(
    request: &DequantizeRequest,
    progress: &dyn Progress,
) -> Result<DequantizeReport> {
    request.files.via_local(
        progress,
        |io| {
            let mut local = request.clone();
            local.files = io.clone();
            dequantize_here(&local, progress)
        },
        |r, map| {
            r.files = r.files.iter().map(|f| map(f)).collect();
            r.index = r.index.as_deref().map(map);
            r.output = request.files.output.clone();
        },
    )
}

fn dequantize_here(
    request: &DequantizeRequest,
    progress: &dyn Progress,
) -> Result<DequantizeReport> {
    if let Some(dtype) = request
        .dtype
        .filter(|&d| !DequantizeOptions::accepts_dtype(d))
    {
        return Err(Error::request(format!(
            "--dtype {dtype}: dequantized weights are written as a float dtype of whole bytes (F32, F16, BF16, F64, F8_E4M3, ...)"
        )));
    }
    let mlx = request.mlx_params()?;
    let files = &request.files;
    let input = files.open_safetensors()?;
    files.refuse_input_as_output(input.files().into_iter().chain(request.config.as_deref()))?;
    let tensors = input.tensors();
    let metadata = input.metadata()?;
    let opts = DequantizeOptions::default()
        .with_mlx(mlx)
        .with_dtype(request.dtype)
        .with_write(files.write_options());
    let (plan, summary) = dequantize_plan(&tensors, metadata.as_ref(), &opts)?;
    let written = files.write(&input.layout(&tensors), &plan, progress)?;
    Ok(DequantizeReport {
        bytes: written.bytes,
        dequantized: summary
            .dequantized
            .iter()
            .map(|(name, scheme, dtype)| DequantizedWeight {
                dtype: dtype.name().to_string(),
                from: scheme.describe(),
                name: name.clone(),
            })
            .collect(),
        files: written.files,
        index: written.index,
        input: files.input.clone(),
        output: files.output.clone(),
        tensors: summary.tensors,
    })
}
