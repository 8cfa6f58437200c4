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
