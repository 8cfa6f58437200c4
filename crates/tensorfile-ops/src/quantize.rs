//! `quantize`: the weights of a safetensors file or set quantized into
//! another (int4, or MLX's affine and floating-point modes).

use serde::{Deserialize, Serialize};

use crate::transform::InOut;
use tensorfile::quant::{quantize_plan, Glob, QuantizeOptions, Scheme, Selection};
use tensorfile::{Error, Metadata, Progress, Result};

/// What to quantize, and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QuantizeRequest {
    /// The input (a safetensors file or set) and the output.
    #[serde(flatten)]
    pub files: InOut,
    /// `int4-g<group>-sym` (e.g. `int4-g32-sym`), `mlx-affine` (needs
    /// `bits` and `group_size`), or MLX's floating-point modes `mlx-mxfp4`
    /// (E2M1 codes, E8M0 scales, groups of 32), `mlx-mxfp8` (E4M3 codes,
    /// groups of 32), `mlx-nvfp4` (E2M1 codes, E4M3 scales, groups of 16).
    pub scheme: String,
    /// Bits per weight for `mlx-affine`: 2, 3, 4, 5, 6 or 8.
    pub bits: Option<u64>,
    /// Weights per scale for `mlx-affine`.
    pub group_size: Option<u64>,
    /// `mlx-nvfp4`: give each expert of a 3-D expert stack its own F32
    /// scale (`<m>.global_scale`), as mlx-lm's `global_scale=True` does.
    pub global_scale: bool,
    /// Also quantize tensors whose names match one of these globs (`*` is
    /// any run of characters). By default the 2-D `.weight` matrices whose
    /// input dimension the group divides are taken (and, with an MLX
    /// scheme, the 3-D expert stacks of mlx-lm's switch layers).
    pub include: Vec<String>,
    /// Never quantize tensors whose names match; wins over `include`.
    pub exclude: Vec<String>,
    /// Record every tensor's sha256 in the output's metadata
    /// (`tensorfile.sha256`).
    pub embed_hash: bool,
}

/// What was quantized and written: `tensorfile quantize --json`.
///
/// Fields are in the order of their names: the order the command has
/// always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantizeReport {
    /// Bits per quantized weight.
    pub bits: u64,
    /// Bytes in all the files written.
    pub bytes: u64,
    /// The files written, in order.
    pub files: Vec<std::path::PathBuf>,
    /// Whether nvfp4 weights got per-expert global scales.
    pub global_scale: bool,
    /// Weights per scale.
    pub group_size: u64,
    /// The index written, for a set.
    pub index: Option<std::path::PathBuf>,
    /// The input, as given.
    pub input: std::path::PathBuf,
    /// The metadata written.
    pub metadata: Metadata,
    /// The MLX mode (`affine`, `mxfp4`, ...); `None` for int4.
    pub mode: Option<String>,
    /// The output, as given.
    pub output: std::path::PathBuf,
    /// The weights quantized, by their input names.
    pub quantized: Vec<String>,
    /// The scheme's name (`int4-g32-sym`, `mlx-affine`, ...).
    pub scheme: String,
    /// Tensors written.
    pub tensors: usize,
}

impl QuantizeRequest {
    /// The scheme the request names, checked.
    ///
    /// # Errors
    /// An unknown scheme or parameters it does not take ([`Error::Request`]).
    pub fn scheme(&self) -> Result<Scheme> {
        let scheme = Scheme::parse(&self.scheme, self.bits, self.group_size)
            .map_err(|e| Error::request(e.to_string()))?;
        if self.global_scale {
            return scheme
                .with_global_scale()
                .map_err(|e| Error::request(e.to_string()));
        }
        Ok(scheme)
    }
}

/// Quantizes the chosen weights of the input into an atomic save of the
/// output; other tensors are copied unchanged. `progress` counts the data
/// bytes written.
///
/// # Errors
/// A bad request ([`Error::Request`]), an input that is not safetensors or
/// is the output, a weight that cannot be quantized, a failed write
/// (nothing is left behind).
pub fn quantize(request: &QuantizeRequest, progress: &dyn Progress) -> Result<QuantizeReport> {
    request.files.via_local(
        progress,
        |io| {
            let mut local = request.clone();
            local.files = io.clone();
            quantize_here(&local, progress)
        },
        |r, map| {
            r.files = r.files.iter().map(|f| map(f)).collect();
            r.index = r.index.as_deref().map(map);
            r.output = request.files.output.clone();
        },
    )
}

fn quantize_here(request: &QuantizeRequest, progress: &dyn Progress) -> Result<QuantizeReport> {
    let scheme = request.scheme()?;
    #[cfg(not(feature = "digest"))]
    if request.embed_hash {
        return Err(Error::request(
            "embed_hash needs tensorfile's `digest` feature",
        ));
    }
    let files = &request.files;
    let input = files.open_safetensors()?;
    files.refuse_input_as_output(input.files())?;
    let opts = QuantizeOptions::new(scheme)
        .with_selection(Selection {
            include: request.include.iter().map(Glob::new).collect(),
            exclude: request.exclude.iter().map(Glob::new).collect(),
        })
        .with_write(files.write_options());
    let mut tensors = input.tensors();
    // Written by name, whatever the input's order.
    tensors.sort_unstable_by(|a, b| a.info().name.cmp(b.info().name));
    let metadata = input.metadata()?;
    let (plan, summary) = quantize_plan(&tensors, metadata.as_ref(), &opts)?;
    #[allow(unused_mut)]
    let mut written = files.write(&input.layout(&tensors), &plan, progress)?;
    #[cfg(feature = "digest")]
    if request.embed_hash {
        written.embed_hashes(&opts.write)?;
    }
    Ok(QuantizeReport {
        bits: scheme.bits(),
        bytes: written.bytes,
        files: written.files,
        global_scale: scheme.global_scale(),
        group_size: scheme.group_size(),
        index: written.index,
        input: files.input.clone(),
        metadata: summary.metadata,
        mode: scheme.mode().map(|m| m.name().to_string()),
        output: files.output.clone(),
        quantized: summary.quantized,
        scheme: scheme.name(),
        tensors: summary.tensors,
    })
}
