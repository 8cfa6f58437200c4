//! What `diff`, `stats`, `hash` and `verify` share: untrusted text made
//! printable, the exit status of a comparison (2 for an input that cannot
//! be read), and opening any input as tensors.

use std::path::Path;
use std::process::ExitCode;

use super::Failure;

/// `text` with every control character (and the backslash) escaped, so
/// that a tensor or file name cannot move the cursor, clear the screen or
/// forge a line of output.
pub fn escape(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// A path, escaped for printing.
pub fn shown(path: &Path) -> String {
    escape(&path.display().to_string())
}

/// Runs a comparison whose failures (unreadable or invalid inputs, usage
/// errors) exit with status 2, as `diff(1)` and `cmp(1)` do: the error is
/// printed on one line.
pub fn comparison(run: impl FnOnce() -> Result<ExitCode, Failure>) -> Result<ExitCode, Failure> {
    match run() {
        Ok(code) => Ok(code),
        Err(err) => {
            eprintln!("tensorfile: {}", super::one_line(err.as_ref()));
            Ok(ExitCode::from(2))
        }
    }
}

/// A PyTorch checkpoint's tensor as [`tensorfile::TensorData`]: its bytes
/// are gathered (not seekable), in pieces when produced.
pub struct TorchData<'a> {
    tensor: tensorfile_pytorch::TorchTensor<'a>,
    name: String,
    shape: Vec<u64>,
}

impl<'a> TorchData<'a> {
    /// Wraps a tensor.
    pub fn new(tensor: tensorfile_pytorch::TorchTensor<'a>) -> TorchData<'a> {
        TorchData {
            name: tensor.name().to_string(),
            shape: tensor.shape().to_vec(),
            tensor,
        }
    }
}

fn torch_error(e: tensorfile_pytorch::Error) -> tensorfile_core::Error {
    tensorfile_core::Error::Other(Box::new(e))
}

impl tensorfile::TensorData for TorchData<'_> {
    fn name(&self) -> &str {
        &self.name
    }
    fn dtype(&self) -> tensorfile::Dtype {
        self.tensor.dtype()
    }
    fn shape(&self) -> &[u64] {
        &self.shape
    }
    fn byte_len(&self) -> u64 {
        self.tensor.nbytes()
    }
    fn seekable(&self) -> bool {
        false
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> tensorfile_core::Result<()> {
        let all = self.tensor.bytes().map_err(torch_error)?;
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match all.get(start..start.saturating_add(buf.len())) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(tensorfile_core::Error::Slice {
                tensor: self.name.clone(),
                problem: format!("{} bytes at offset {offset} reach past its end", buf.len()),
            }),
        }
    }
    fn produce(
        &self,
        each: &mut dyn FnMut(u64, &[u8]) -> tensorfile_core::Result<()>,
    ) -> tensorfile_core::Result<()> {
        let mut at = 0u64;
        self.tensor
            .for_each_piece(4 << 20, |piece: &[u8]| -> Result<(), PieceError> {
                each(at, piece).map_err(PieceError::Core)?;
                at += piece.len() as u64;
                Ok(())
            })
            .map_err(|e| match e {
                PieceError::Core(c) => c,
                PieceError::Torch(t) => torch_error(t),
            })
    }
}

/// An error while producing a checkpoint tensor's pieces.
enum PieceError {
    Core(tensorfile_core::Error),
    Torch(tensorfile_pytorch::Error),
}

impl From<tensorfile_pytorch::Error> for PieceError {
    fn from(e: tensorfile_pytorch::Error) -> PieceError {
        PieceError::Torch(e)
    }
}

/// An input opened for looking at its values: a safetensors file or set,
/// or a PyTorch checkpoint (anything `inspect` takes).
pub enum Opened {
    /// A safetensors file or set, read with positional reads.
    Set {
        /// The files.
        set: tensorfile::ShardedTensors,
        /// The union of their metadata.
        metadata: Option<tensorfile::Metadata>,
        /// MLX quantization parameters from the model's config.json.
        mlx: Option<tensorfile::quant::QuantConfig>,
    },
    /// A PyTorch checkpoint.
    Torch(tensorfile_pytorch::Checkpoint),
}

/// The `quantization` of the config.json of `input`'s model: in it when it
/// is a directory, beside it when it is a file or an index.
pub fn beside_config(input: &Path) -> Result<Option<tensorfile::quant::QuantConfig>, Failure> {
    let dir = if input.is_dir() {
        input
    } else {
        match input.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        }
    };
    let path = dir.join(tensorfile::model::CONFIG_NAME);
    if !path.is_file() {
        return Ok(None);
    }
    let config = tensorfile::model::read_config(&path)?;
    tensorfile::quant::QuantConfig::from_config(&config)
        .map_err(|e| format!("{}: {e}", path.display()).into())
}

impl Opened {
    /// Opens `path`, refusing (naming what it is) an input whose values
    /// cannot be read here.
    pub fn open(path: &Path) -> Result<Opened, Failure> {
        use tensorfile::input::Kind;
        match super::input_kind(path)? {
            Kind::Safetensors | Kind::SafetensorsSet => {
                let set =
                    tensorfile::ShardedTensors::open_pread(path, &tensorfile::ReadOptions::default())?;
                let m = set.metadata()?;
                Ok(Opened::Set {
                    set,
                    metadata: (!m.is_empty()).then_some(m),
                    mlx: beside_config(path)?,
                })
            }
            Kind::Pytorch => Ok(Opened::Torch(tensorfile_pytorch::Checkpoint::open(path)?)),
            other => Err(format!(
                "{}: this is {other}; this command reads safetensors files and sets and PyTorch checkpoints (`tensorfile convert` turns it into safetensors)",
                shown(path)
            )
            .into()),
        }
    }

    /// Every tensor, read on demand.
    pub fn tensors(&self) -> Vec<Box<dyn tensorfile::TensorData + '_>> {
        match self {
            Opened::Set { set, .. } => set
                .tensor_data()
                .into_iter()
                .map(|t| Box::new(t) as Box<dyn tensorfile::TensorData>)
                .collect(),
            Opened::Torch(ckpt) => ckpt
                .tensors()
                .map(|t| Box::new(TorchData::new(t)) as Box<dyn tensorfile::TensorData>)
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
    boxes: &'t [Box<dyn tensorfile::TensorData + 't>],
) -> Vec<&'t dyn tensorfile::TensorData> {
    boxes.iter().map(|b| b.as_ref()).collect()
}
