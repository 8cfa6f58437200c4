//! `convert`: one model format into another, atomically. Safetensors (a
//! file or a set) cast to one dtype or rewritten canonically; PyTorch
//! checkpoints and `.bin` sets into safetensors, without executing
//! anything; GGUF to a Hugging Face directory or, as it is, to one
//! `.safetensors` or `.npz` file, and a Hugging Face directory to GGUF;
//! `.npz` / `.npy` to safetensors and safetensors to `.npz` / `.npy`.
//!
//! Which conversion runs is chosen from what the input is (its first
//! bytes) and the output's name (`*.gguf`, `*.npz`, `*.npy`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::transform::InOut;
use tensorfile::cast::{convert_plan, CastOptions, Losses};
use tensorfile::{Dtype, Error, InputKind as Kind, Progress, Result};

/// What to convert, and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConvertRequest {
    /// The input and the output.
    #[serde(flatten)]
    pub files: InOut,
    /// Cast the float tensors to this dtype; quantized weights and their
    /// scales/biases keep theirs. Without it, a safetensors output is the
    /// canonical rewrite of the input (which may then be the output).
    /// GGUF input: the dtype of the decoded tensors (default BF16 for a
    /// Hugging Face directory). numpy input holding opaque arrays: what
    /// they hold.
    #[serde(with = "crate::transform::dtype_name")]
    pub dtype: Option<Dtype>,
    /// Clamp values beyond an F8 target's range to its largest finite
    /// value instead of NaN or infinity.
    pub saturate: bool,
    /// Allow integer targets and cast integer tensors too.
    pub allow_int: bool,
    /// Refuse the conversion (nothing written) when a value would
    /// overflow, become NaN, saturate or flush to zero.
    pub strict: bool,
    /// Record every tensor's sha256 in the output's metadata
    /// (`tensorfile.sha256`); safetensors and PyTorch input only.
    pub embed_hash: bool,
    /// Options of PyTorch input.
    pub pytorch: PytorchOptions,
    /// Options of GGUF conversions.
    pub gguf: GgufOptions,
    /// `.npz` output: deflate the members, as `np.savez_compressed` does.
    pub compress: bool,
}

/// Options of `convert` that apply to PyTorch input only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PytorchOptions {
    /// Convert only this subtree (`model`, `model.encoder`); names are
    /// relative to it. A single checkpoint only.
    pub key: Option<String>,
    /// The name of a bare top-level tensor (otherwise ""). A single
    /// checkpoint only.
    pub name: Option<String>,
    /// Keep non-tensor values (epoch, learning rate, ...) as string
    /// metadata.
    pub keep_values: bool,
    /// Tensors sharing storage: `alias` (default) writes exact aliases
    /// once, `copy` gives every name its own bytes, `error` refuses.
    pub shared: Option<String>,
    /// Most bytes the pickle interpreter may hold.
    pub max_pickle_bytes: Option<usize>,
    /// Largest expanded tensor (a view larger than its storage), in bytes.
    pub max_expanded_bytes: Option<u64>,
    /// Most bytes of expanded tensors in all.
    pub max_expanded_total_bytes: Option<u64>,
    /// Most bytes of deflated records held inflated at once.
    pub max_inflated_bytes: Option<u64>,
}

/// Options of `convert` that apply to GGUF conversions only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GgufOptions {
    /// GGUF input: keep Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K weights
    /// quantized, as MLX affine weights that give the same values.
    pub keep_quant: bool,
    /// GGUF output: the type of the weights (f32, f16, bf16, q8_0, q4_0,
    /// q4_1, q5_0, q5_1, q4_k, q6_k); default f16.
    #[serde(rename = "type")]
    pub ggml_type: Option<String>,
    /// GGUF output: write the tensors as they are, with `arch` as
    /// general.architecture (the two go together).
    pub raw: bool,
    /// GGUF output with `raw`: general.architecture.
    pub arch: Option<String>,
    /// GGUF output: tokenizer.ggml.pre, when the tokenizer's
    /// pre-tokenizer is not GPT-2's.
    pub tokenizer_pre: Option<String>,
}

/// What a cast lost in one tensor: values that overflowed, became NaN,
/// saturated or flushed to zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossCounts {
    /// Nonzero values that became zero.
    pub flushed: u64,
    /// Values clamped to the largest finite value.
    pub saturated: u64,
    /// Finite values that became infinity.
    pub to_inf: u64,
    /// Values that became NaN.
    pub to_nan: u64,
}

impl From<Losses> for LossCounts {
    fn from(l: Losses) -> LossCounts {
        LossCounts {
            flushed: l.flushed,
            saturated: l.saturated,
            to_inf: l.to_inf,
            to_nan: l.to_nan,
        }
    }
}

/// What a conversion wrote: `tensorfile convert --json`, one shape per
/// kind of conversion. Each struct's fields are in the order of their
/// names: the order the command has always printed its keys in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConvertReport {
    /// Safetensors in, safetensors out.
    Safetensors(SafetensorsConverted),
    /// A PyTorch checkpoint or `.bin` set in.
    Pytorch(PytorchConverted),
    /// GGUF to one `.safetensors` or `.npz` file, the tensors as they are.
    GgufRaw(GgufRawConverted),
    /// GGUF to a Hugging Face directory.
    GgufToHf(GgufToHfConverted),
    /// A Hugging Face directory to GGUF.
    HfToGguf(HfToGgufConverted),
    /// `.npz` / `.npy` to safetensors.
    FromNumpy(FromNumpyConverted),
    /// Safetensors to `.npz` / `.npy`.
    ToNumpy(ToNumpyConverted),
}

/// Safetensors converted to safetensors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SafetensorsConverted {
    /// Bytes in all the files written.
    pub bytes: u64,
    /// Tensors whose dtype changed.
    pub cast: usize,
    /// Companions of quantized weights left as they were.
    pub companions: usize,
    /// The dtype cast to, if any.
    pub dtype: Option<String>,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// The index written, for a set.
    pub index: Option<PathBuf>,
    /// The input, as given.
    pub input: PathBuf,
    /// Per tensor whose cast changed values beyond rounding, how many.
    pub losses: BTreeMap<String, LossCounts>,
    /// The output, as given.
    pub output: PathBuf,
    /// Tensors written.
    pub tensors: usize,
}

/// A PyTorch checkpoint or `.bin` set converted to safetensors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PytorchConverted {
    /// Names recorded as aliases of a written tensor.
    pub aliases: usize,
    /// Bytes in all the files written.
    pub bytes: u64,
    /// Tensors whose dtype changed.
    pub cast: usize,
    /// The dtype cast to, if any.
    pub dtype: Option<String>,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// The index written, for a set.
    pub index: Option<PathBuf>,
    /// The checkpoint read (the set's index, for a set).
    pub input: PathBuf,
    /// `pytorch` or `pytorch-set`.
    pub input_format: String,
    /// Per tensor whose cast changed values beyond rounding, how many.
    pub losses: BTreeMap<String, LossCounts>,
    /// The output, as given.
    pub output: PathBuf,
    /// Tensors written with their own bytes.
    pub tensors: usize,
}

/// GGUF written as it is to one safetensors or npz file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GgufRawConverted {
    /// general.architecture, if the file says it.
    pub architecture: Option<String>,
    /// Bytes of the file written.
    pub bytes: u64,
    /// Tensors decoded from quantized blocks.
    pub decoded: usize,
    /// `gguf-raw`.
    pub direction: String,
    /// The input, as given.
    pub input: PathBuf,
    /// Weights kept quantized (as MLX affine).
    pub kept_quantized: Vec<String>,
    /// Metadata keys not kept.
    pub metadata_dropped: Vec<String>,
    /// How many metadata keys were kept.
    pub metadata_kept: usize,
    /// The output, as given.
    pub output: PathBuf,
    /// `safetensors` or `npz`.
    pub output_format: String,
    /// Tensors written.
    pub tensors: usize,
}

/// GGUF converted to a Hugging Face directory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GgufToHfConverted {
    /// The architecture, by its GGUF name.
    pub architecture: String,
    /// Tensors decoded from quantized blocks.
    pub decoded: usize,
    /// `gguf-to-hf`.
    pub direction: String,
    /// The dtype of the decoded tensors.
    pub dtype: String,
    /// Weights kept quantized whose scales are F32.
    pub f32_scales: usize,
    /// The names of the files written in the directory.
    pub files: Vec<String>,
    /// The input, as given.
    pub input: PathBuf,
    /// Weights kept quantized (as MLX affine), with their bits.
    pub kept_quantized: BTreeMap<String, u32>,
    /// The output, as given.
    pub output: PathBuf,
    /// Tensors written.
    pub tensors: usize,
    /// Why no tokenizer.json was written, if none was.
    pub tokenizer_not_written: Option<String>,
}

/// A tensor written in another type than the one asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GgufFallback {
    /// The tensor.
    pub tensor: String,
    /// The type it was written as.
    #[serde(rename = "type")]
    pub ggml_type: String,
}

/// A tensor not written as the type asked for, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GgufNotConverted {
    /// Why.
    pub reason: String,
    /// The tensor.
    pub tensor: String,
    /// The type it was written as.
    #[serde(rename = "type")]
    pub ggml_type: String,
}

/// A Hugging Face directory converted to GGUF.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HfToGgufConverted {
    /// general.architecture written.
    pub architecture: String,
    /// Bytes of the file written.
    pub bytes: u64,
    /// `hf-to-gguf`.
    pub direction: String,
    /// Tensors written in another type, their rows not being whole blocks.
    pub fallbacks: Vec<GgufFallback>,
    /// The input, as given.
    pub input: PathBuf,
    /// Tensors not written as the type asked for (`raw`), and why.
    pub not_converted: Vec<GgufNotConverted>,
    /// The output, as given.
    pub output: PathBuf,
    /// Tensors of the input not written (llama.cpp has no use for them).
    pub skipped: Vec<String>,
    /// Tensors written per type.
    pub tensor_types: BTreeMap<String, usize>,
    /// Why no tokenizer was written, if none was.
    pub tokenizer_not_written: Option<String>,
    /// The type asked for.
    #[serde(rename = "type")]
    pub ggml_type: String,
}

/// `.npz` / `.npy` converted to safetensors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FromNumpyConverted {
    /// Bytes in all the files written.
    pub bytes: u64,
    /// Tensors whose dtype changed.
    pub cast: usize,
    /// The dtype given, if any.
    pub dtype: Option<String>,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// The index written, for a set.
    pub index: Option<PathBuf>,
    /// The input, as given.
    pub input: PathBuf,
    /// `npz` or `npy`.
    pub input_format: String,
    /// Per tensor whose cast changed values beyond rounding, how many.
    pub losses: BTreeMap<String, LossCounts>,
    /// Opaque arrays (ml_dtypes' `<V2`, `<V1`, `<f1`), read as `dtype`.
    pub opaque: usize,
    /// The output, as given.
    pub output: PathBuf,
    /// Tensors written.
    pub tensors: usize,
}

/// Safetensors converted to `.npz` / `.npy`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToNumpyConverted {
    /// Arrays written.
    pub arrays: usize,
    /// Bytes of the file written.
    pub bytes: u64,
    /// Whether the members were deflated.
    pub compressed: bool,
    /// The input, as given.
    pub input: PathBuf,
    /// The output, as given.
    pub output: PathBuf,
    /// `npz` or `npy`.
    pub output_format: String,
}

/// The losses of a cast as the report keeps them, each told to
/// `progress` as a note naming `output` (in the order of the tensors).
fn losses(
    output: &Path,
    losses: Vec<(&str, Losses)>,
    progress: &dyn Progress,
) -> BTreeMap<String, LossCounts> {
    for (name, l) in &losses {
        progress.note(&format!(
            "{}: tensor \"{name}\": {l} (--strict refuses this)",
            output.display()
        ));
    }
    losses
        .into_iter()
        .map(|(n, l)| (n.to_string(), l.into()))
        .collect()
}

/// A usage error about a flag.
fn refused(message: impl Into<String>) -> Error {
    Error::request(message)
}

/// The numpy format `path` names by its extension, if any.
fn numpy_ext(path: &Path) -> Option<Kind> {
    let ext = path.extension()?.to_string_lossy().to_ascii_lowercase();
    match ext.as_str() {
        "npz" => Some(Kind::Npz),
        "npy" => Some(Kind::Npy),
        _ => None,
    }
}

/// Whether `path` is named `*.gguf`.
fn gguf_named(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

impl PytorchOptions {
    /// `load` with the budgets these options give (each replaces its
    /// default).
    #[cfg(feature = "pytorch")]
    pub fn budgets(
        &self,
        mut load: tensorfile::pytorch::LoadOptions,
    ) -> tensorfile::pytorch::LoadOptions {
        if let Some(n) = self.max_pickle_bytes {
            load.limits.max_bytes = n;
        }
        if let Some(n) = self.max_expanded_bytes {
            load.max_expanded_bytes = n;
        }
        if let Some(n) = self.max_expanded_total_bytes {
            load.max_expanded_total_bytes = n;
        }
        if let Some(n) = self.max_inflated_bytes {
            load.max_inflated_bytes = n;
        }
        load
    }

    /// The first option given (not a default), by its flag: what an input
    /// that is not a checkpoint refuses.
    pub fn given(&self) -> Option<&'static str> {
        [
            (self.key.is_some(), "--key"),
            (self.name.is_some(), "--name"),
            (self.keep_values, "--keep-values"),
            (
                self.shared.as_deref().is_some_and(|s| s != "alias"),
                "--shared",
            ),
            (self.max_pickle_bytes.is_some(), "--max-pickle-bytes"),
            (self.max_expanded_bytes.is_some(), "--max-expanded-bytes"),
            (
                self.max_expanded_total_bytes.is_some(),
                "--max-expanded-total-bytes",
            ),
            (self.max_inflated_bytes.is_some(), "--max-inflated-bytes"),
        ]
        .into_iter()
        .find_map(|(on, flag)| on.then_some(flag))
    }

    /// Refuses these options for an input that is not a checkpoint.
    fn refuse_for(&self, input: &Path) -> Result<()> {
        match self.given() {
            Some(flag) => Err(refused(format!(
                "{flag} applies only to PyTorch input; {} is not a PyTorch checkpoint",
                input.display()
            ))),
            None => Ok(()),
        }
    }
}

impl GgufOptions {
    /// The first option given, by its flag.
    fn given(&self) -> Option<&'static str> {
        [
            (self.keep_quant, "--keep-quant"),
            (self.ggml_type.is_some(), "--type"),
            (self.raw, "--raw"),
            (self.arch.is_some(), "--arch"),
            (self.tokenizer_pre.is_some(), "--tokenizer-pre"),
        ]
        .into_iter()
        .find_map(|(on, flag)| on.then_some(flag))
    }
}

/// Runs the conversion the input and the output's name call for (see the
/// module's docs). Warnings (values a cast lost, metadata a numpy file
/// cannot hold) are told to `progress` as notes, which also counts the
/// data bytes written.
///
/// # Errors
/// A bad request ([`Error::Request`]): options of another kind of
/// conversion, an integer dtype without `allow_int`, ...; an input that
/// cannot be read or is the output; a cast refused (`strict`); a failed
/// write (nothing is left behind).
pub fn convert(request: &ConvertRequest, progress: &dyn Progress) -> Result<ConvertReport> {
    let output = request.files.output.clone();
    request.files.via_local(
        progress,
        |io| {
            let mut local = request.clone();
            local.files = io.clone();
            convert_here(&local, progress)
        },
        |report, map| {
            let (files, index, out) = match report {
                ConvertReport::Safetensors(r) => {
                    (Some(&mut r.files), Some(&mut r.index), &mut r.output)
                }
                ConvertReport::Pytorch(r) => {
                    (Some(&mut r.files), Some(&mut r.index), &mut r.output)
                }
                ConvertReport::FromNumpy(r) => {
                    (Some(&mut r.files), Some(&mut r.index), &mut r.output)
                }
                ConvertReport::GgufRaw(r) => (None, None, &mut r.output),
                ConvertReport::GgufToHf(r) => (None, None, &mut r.output),
                ConvertReport::HfToGguf(r) => (None, None, &mut r.output),
                ConvertReport::ToNumpy(r) => (None, None, &mut r.output),
            };
            if let Some(files) = files {
                *files = files.iter().map(|f| map(f)).collect();
            }
            if let Some(index) = index {
                *index = index.as_deref().map(map);
            }
            *out = output;
        },
    )
}

fn convert_here(request: &ConvertRequest, progress: &dyn Progress) -> Result<ConvertReport> {
    let r = request;
    let io = &r.files;
    if let Some(d) = r.dtype.filter(|d| d.is_int() && !r.allow_int) {
        return Err(refused(format!(
            "--dtype {d} is an integer dtype: add --allow-int to cast to it"
        )));
    }
    let kind = tensorfile::probe(&io.input)?.kind();
    let cast = CastOptions::default()
        .with_saturate(r.saturate)
        .with_allow_int(r.allow_int)
        .with_strict(r.strict);
    let pytorch_in = matches!(kind, Kind::Pytorch | Kind::PytorchSet);
    if kind == Kind::Gguf || gguf_named(&io.output) {
        if !pytorch_in {
            r.pytorch.refuse_for(&io.input)?;
        }
        refuse_embed(r, "GGUF conversions")?;
        return gguf(kind, r);
    }
    if let Some(flag) = r.gguf.given() {
        return Err(refused(format!(
            "{flag} applies only to GGUF conversions; {} is not GGUF and OUT does not end in .gguf",
            io.input.display()
        )));
    }
    if matches!(kind, Kind::Npz | Kind::Npy) || numpy_ext(&io.output).is_some() {
        if !pytorch_in {
            r.pytorch.refuse_for(&io.input)?;
        }
        refuse_embed(r, "numpy conversions")?;
        return numpy(kind, r, cast, progress);
    }
    refuse_compress(r)?;
    if pytorch_in {
        return pytorch(kind, r, cast, progress);
    }
    // An input that cannot be read is that error, not a misuse of the
    // PyTorch options.
    let input = io.open_safetensors()?;
    r.pytorch.refuse_for(&io.input)?;
    if r.dtype.is_some() {
        // Only the canonical rewrite may replace its input.
        io.refuse_input_as_output(input.files())?;
    }
    let tensors = input.tensors();
    let metadata = input.metadata()?;
    // The output may be the input (a canonical rewrite): the save renames
    // a new inode over the name, and the input's open file keeps reading
    // the old one.
    let (plan, summary) = convert_plan(&tensors, metadata.as_ref(), r.dtype, cast)?;
    #[allow(unused_mut)]
    let mut written = io.write(&input.layout(&tensors), &plan, progress)?;
    let losses = losses(&io.output, summary.losses(), progress);
    embed_with(r, &mut written, &io.write_options())?;
    Ok(ConvertReport::Safetensors(SafetensorsConverted {
        bytes: written.bytes,
        cast: summary.cast,
        companions: summary.companions,
        dtype: r.dtype.map(|d| d.name().to_string()),
        files: written.files,
        index: written.index,
        input: io.input.clone(),
        losses,
        output: io.output.clone(),
        tensors: summary.tensors,
    }))
}

/// Refuses `embed_hash` for a conversion whose writer does not embed
/// digests.
fn refuse_embed(r: &ConvertRequest, what: &str) -> Result<()> {
    if r.embed_hash {
        return Err(refused(format!(
            "--embed-hash applies to safetensors and PyTorch conversions, not {what}; \
             convert first, then run `tensorfile convert OUT OUT --embed-hash`"
        )));
    }
    Ok(())
}

/// Refuses `compress` for a conversion that writes no `.npz`.
fn refuse_compress(r: &ConvertRequest) -> Result<()> {
    if r.compress {
        return Err(refused(format!(
            "--compress applies to .npz output; {} does not end in .npz",
            r.files.output.display()
        )));
    }
    Ok(())
}

/// Embeds the digests in every file written when asked to (rewriting
/// them with `write`).
fn embed_with(
    r: &ConvertRequest,
    written: &mut crate::transform::Written,
    write: &tensorfile::WriteOptions,
) -> Result<()> {
    #[cfg(feature = "digest")]
    if r.embed_hash {
        written.embed_hashes(write)?;
    }
    #[cfg(not(feature = "digest"))]
    if r.embed_hash {
        let _ = (written, write);
        return Err(refused("--embed-hash needs tensorfile's `digest` feature"));
    }
    Ok(())
}

/// A PyTorch checkpoint (or a directory holding one and no index), or a
/// sharded `.bin` set (its index, or a directory holding one), converted
/// into a safetensors file or set; exit 1 (and no output) when refused.
#[cfg(feature = "pytorch")]
fn pytorch(
    kind: Kind,
    r: &ConvertRequest,
    cast: CastOptions,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    use crate::transform::Layout;
    use tensorfile::pytorch::{
        checkpoint_plan, plan_set, Checkpoint, CheckpointSet, ConvertOptions, LoadOptions,
        BIN_INDEX_NAMES,
    };
    let io = &r.files;
    let p = &r.pytorch;
    let shared = match &p.shared {
        None => Default::default(),
        Some(s) => s
            .parse()
            .map_err(|e: String| refused(format!("--shared: {e}")))?,
    };
    let load = p.budgets(
        LoadOptions::default()
            .with_key(p.key.clone())
            .with_name(p.name.clone()),
    );
    // A checkpoint's conversion writes with the default header limit.
    let write = tensorfile::WriteOptions::default().with_sync(io.sync);
    let options = ConvertOptions::default()
        .with_load(load)
        .with_shared(shared)
        .with_keep_values(p.keep_values)
        .with_write(write.clone())
        .with_dtype(r.dtype)
        .with_cast(cast);
    let index = match kind {
        Kind::PytorchSet => CheckpointSet::find_index(&io.input),
        _ => None,
    };
    let report = |input: &Path, format: &str, written: crate::transform::Written, counts| {
        let (tensors, aliases, cast, lost): (usize, usize, usize, Vec<(&str, Losses)>) = counts;
        PytorchConverted {
            aliases,
            bytes: written.bytes,
            cast,
            dtype: r.dtype.map(|d| d.name().to_string()),
            files: written.files,
            index: written.index,
            input: input.to_path_buf(),
            input_format: format.to_string(),
            losses: losses(&io.output, lost, progress),
            output: io.output.clone(),
            tensors,
        }
    };
    if let Some(index) = index {
        for (given, flag) in [(p.key.is_some(), "--key"), (p.name.is_some(), "--name")] {
            if given {
                return Err(refused(format!(
                    "{flag} applies to a single checkpoint; {} is a sharded .bin set",
                    io.input.display()
                )));
            }
        }
        let set = CheckpointSet::open(&index, &options.load)?;
        // No output file may be one of the set's files.
        let mut inputs: Vec<PathBuf> = set
            .shards()
            .iter()
            .map(|s| set.dir().join(s.name()))
            .collect();
        inputs.push(set.index_path().to_path_buf());
        io.refuse_input_as_output(&inputs)?;
        let planned = plan_set(&set, &options)?;
        let layout = Layout {
            is_set: true,
            shard_of: planned.shard_of.clone(),
            shards: planned.shards,
            prefix: planned.prefix.into(),
        };
        let mut written = io.write(&layout, &planned.plan, progress)?;
        let rep = &planned.report;
        let counts = (rep.tensors, rep.aliases, rep.cast, rep.losses());
        embed_with(r, &mut written, &write)?;
        let converted = report(set.index_path(), "pytorch-set", written, counts);
        return Ok(ConvertReport::Pytorch(converted));
    }
    let single = if kind == Kind::PytorchSet {
        // A directory of one checkpoint, without an index.
        BIN_INDEX_NAMES
            .iter()
            .map(|(index, _)| io.input.join(index.trim_end_matches(".index.json")))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::io(
                    &io.input,
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no .bin checkpoint or index here",
                    ),
                )
            })?
    } else {
        io.input.clone()
    };
    // The output must not be the checkpoint itself.
    io.refuse_input_as_output([&single])?;
    let ckpt = Checkpoint::open_with(&single, &options.load)?;
    let (plan, rep) = checkpoint_plan(&ckpt, &options)?;
    let layout = Layout {
        is_set: false,
        shard_of: vec![0; plan.specs().len()],
        shards: 1,
        prefix: "model".into(),
    };
    let mut written = io.write(&layout, &plan, progress)?;
    let counts = (rep.tensors, rep.aliases, rep.cast, rep.losses());
    embed_with(r, &mut written, &write)?;
    let converted = report(&single, "pytorch", written, counts);
    Ok(ConvertReport::Pytorch(converted))
}

/// PyTorch input in a build without the `pytorch` feature.
#[cfg(not(feature = "pytorch"))]
fn pytorch(
    kind: Kind,
    r: &ConvertRequest,
    _cast: CastOptions,
    _progress: &dyn Progress,
) -> Result<ConvertReport> {
    tensorfile::ensure_built(kind, &r.files.input)?;
    Err(refused(
        "PyTorch input needs tensorfile's `pytorch` feature",
    ))
}

/// What a GGUF input becomes, by the output's name.
#[cfg(feature = "gguf")]
#[derive(Clone, Copy, PartialEq, Eq)]
enum GgufOut {
    /// A Hugging Face directory (any other name).
    HfDir,
    /// One safetensors file, the tensors as they are.
    Safetensors,
    /// One npz archive, the tensors as they are.
    Npz,
}

/// GGUF in (to a Hugging Face directory, or as it is to a `.safetensors`
/// / `.npz` file), or an output named `*.gguf` (from a Hugging Face
/// directory).
#[cfg(feature = "gguf")]
fn gguf(kind: Kind, r: &ConvertRequest) -> Result<ConvertReport> {
    let io = &r.files;
    let raw_out = if kind == Kind::Gguf {
        let ext = io
            .output
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        match ext.as_deref() {
            Some("safetensors") => GgufOut::Safetensors,
            Some("npz") => GgufOut::Npz,
            Some("npy") => {
                return Err(refused(format!(
                    "{}: a GGUF file holds many tensors; write an .npz (or .safetensors) file",
                    io.output.display()
                )))
            }
            _ => GgufOut::HfDir,
        }
    } else {
        GgufOut::HfDir
    };
    if raw_out != GgufOut::Npz {
        refuse_compress(r)?;
    }
    if io.max_shard_size.is_some() {
        return Err(refused(
            "--max-shard-size does not apply to GGUF conversions (one GGUF file, one model.safetensors)",
        ));
    }
    if kind != Kind::Gguf {
        return from_hf(r);
    }
    if gguf_named(&io.output) {
        return Err(refused(format!(
            "{} is GGUF and so is OUT: convert GGUF to a Hugging Face directory, or a directory to GGUF",
            io.input.display()
        )));
    }
    for (on, flag) in [
        (r.gguf.ggml_type.is_some(), "--type"),
        (r.gguf.raw, "--raw"),
        (r.gguf.arch.is_some(), "--arch"),
        (r.gguf.tokenizer_pre.is_some(), "--tokenizer-pre"),
    ] {
        if on {
            return Err(refused(format!(
                "{flag} applies when writing GGUF; {} is GGUF already",
                io.input.display()
            )));
        }
    }
    match raw_out {
        GgufOut::HfDir => to_hf(r),
        other => to_raw(r, other),
    }
}

/// GGUF to one safetensors or npz file, the tensors as they are.
#[cfg(feature = "gguf")]
fn to_raw(r: &ConvertRequest, kind: GgufOut) -> Result<ConvertReport> {
    use tensorfile::gguf::{gguf_to_safetensors, GgufFile};
    let io = &r.files;
    if kind == GgufOut::Npz && (r.dtype.is_some() || r.gguf.keep_quant) {
        return Err(refused(
            "--dtype and --keep-quant apply to GGUF to safetensors; an .npz OUT gets the tensors as they are",
        ));
    }
    if io.output.is_dir() {
        return Err(refused(format!(
            "{}: a directory; its name says a file",
            io.output.display()
        )));
    }
    io.refuse_input_as_output([&io.input])?;
    let file = GgufFile::open(&io.input)?;
    let summary = match kind {
        #[cfg(feature = "npz")]
        GgufOut::Npz => {
            let opts = tensorfile::npz::NpzWriteOptions::default()
                .with_compress(r.compress)
                .with_sync(io.sync);
            tensorfile::gguf::gguf_to_npz(&file, &io.output, &opts)
        }
        #[cfg(not(feature = "npz"))]
        GgufOut::Npz => Err(refused("an .npz output needs tensorfile's `npz` feature")),
        _ => gguf_to_safetensors(
            &file,
            &io.output,
            r.dtype,
            r.gguf.keep_quant,
            &io.write_options(),
        ),
    }
    .map_err(|e| e.at(&io.input))?;
    let bytes = std::fs::metadata(&io.output).map(|m| m.len()).unwrap_or(0);
    let format = if kind == GgufOut::Npz {
        "npz"
    } else {
        "safetensors"
    };
    Ok(ConvertReport::GgufRaw(GgufRawConverted {
        architecture: file.header().architecture().map(str::to_string),
        bytes,
        decoded: summary.decoded,
        direction: "gguf-raw".into(),
        input: io.input.clone(),
        kept_quantized: summary.kept,
        metadata_dropped: summary.dropped,
        metadata_kept: summary.kept_keys,
        output: io.output.clone(),
        output_format: format.into(),
        tensors: summary.tensors,
    }))
}

/// A Hugging Face directory to GGUF.
#[cfg(feature = "gguf")]
fn from_hf(r: &ConvertRequest) -> Result<ConvertReport> {
    use tensorfile::gguf::{hf_to_gguf, FromHfOptions, GgmlType, HF_TO_GGUF_TYPES};
    let (io, g) = (&r.files, &r.gguf);
    if g.keep_quant {
        return Err(refused("--keep-quant applies to GGUF input"));
    }
    if r.dtype.is_some() {
        return Err(refused(
            "--dtype applies to GGUF input; the weights of a GGUF output take --type",
        ));
    }
    if g.raw != g.arch.is_some() {
        return Err(refused(
            "--raw and --arch go together: --raw --arch NAME writes the tensors as they are",
        ));
    }
    let ggml_type = match &g.ggml_type {
        None => GgmlType::F16,
        Some(name) => GgmlType::from_name(name)
            .filter(|t| HF_TO_GGUF_TYPES.contains(t))
            .ok_or_else(|| {
                refused(format!(
                    "--type {name}: not one of {}",
                    HF_TO_GGUF_TYPES.map(|t| t.name().to_lowercase()).join(", ")
                ))
            })?,
    };
    let opts = FromHfOptions::default()
        .with_ggml_type(ggml_type)
        .with_raw(g.arch.clone().filter(|_| g.raw))
        .with_tokenizer_pre(g.tokenizer_pre.clone())
        .with_sync(io.sync);
    let s = hf_to_gguf(&io.input, &io.output, &opts).map_err(|e| e.at(&io.input))?;
    Ok(ConvertReport::HfToGguf(HfToGgufConverted {
        architecture: s.arch,
        bytes: s.bytes,
        direction: "hf-to-gguf".into(),
        fallbacks: s
            .fallbacks
            .iter()
            .map(|(n, t)| GgufFallback {
                tensor: n.clone(),
                ggml_type: t.name().to_string(),
            })
            .collect(),
        input: io.input.clone(),
        not_converted: s
            .not_converted
            .iter()
            .map(|(n, t, why)| GgufNotConverted {
                reason: why.clone(),
                tensor: n.clone(),
                ggml_type: t.name().to_string(),
            })
            .collect(),
        output: io.output.clone(),
        skipped: s.skipped,
        tensor_types: s.types,
        tokenizer_not_written: s.no_tokenizer,
        ggml_type: ggml_type.name().to_string(),
    }))
}

/// GGUF to a Hugging Face directory.
#[cfg(feature = "gguf")]
fn to_hf(r: &ConvertRequest) -> Result<ConvertReport> {
    use tensorfile::gguf::{gguf_file_to_hf, ToHfOptions};
    let io = &r.files;
    if io.output.is_file() {
        return Err(refused(format!(
            "{}: converting GGUF writes a Hugging Face directory, and this is a file",
            io.output.display()
        )));
    }
    let opts = ToHfOptions::default()
        .with_dtype(r.dtype.unwrap_or(Dtype::BF16))
        .with_keep_quant(r.gguf.keep_quant)
        .with_write(io.write_options());
    let summary = gguf_file_to_hf(&io.input, &io.output, &opts)?;
    Ok(ConvertReport::GgufToHf(GgufToHfConverted {
        architecture: summary.arch.gguf_name().to_string(),
        decoded: summary.decoded,
        direction: "gguf-to-hf".into(),
        dtype: opts.dtype.name().to_string(),
        f32_scales: summary.f32_scales,
        files: summary
            .files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect(),
        input: io.input.clone(),
        kept_quantized: summary.kept,
        output: io.output.clone(),
        tensors: summary.tensors,
        tokenizer_not_written: summary.no_tokenizer,
    }))
}

/// GGUF in or out in a build without the `gguf` feature.
#[cfg(not(feature = "gguf"))]
fn gguf(kind: Kind, r: &ConvertRequest) -> Result<ConvertReport> {
    tensorfile::ensure_built(kind, &r.files.input)?;
    Err(refused("a GGUF output needs tensorfile's `gguf` feature"))
}

/// `.npz` / `.npy` in (to safetensors) or an output named `*.npz` /
/// `*.npy` (from safetensors).
#[cfg(feature = "npz")]
fn numpy(
    kind: Kind,
    r: &ConvertRequest,
    cast: CastOptions,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    let io = &r.files;
    match (matches!(kind, Kind::Npz | Kind::Npy), numpy_ext(&io.output)) {
        (true, Some(_)) => Err(refused(format!(
            "{} is numpy and so is OUT: convert numpy files to safetensors, or safetensors to .npz / .npy",
            io.input.display()
        ))),
        (true, None) => {
            refuse_compress(r)?;
            from_numpy(r, cast, progress)
        }
        (false, Some(out_kind)) => to_numpy(r, out_kind, progress),
        (false, None) => Err(refused("not a numpy conversion")),
    }
}

/// numpy in or out in a build without the `npz` feature.
#[cfg(not(feature = "npz"))]
fn numpy(
    kind: Kind,
    r: &ConvertRequest,
    _cast: CastOptions,
    _progress: &dyn Progress,
) -> Result<ConvertReport> {
    tensorfile::ensure_built(kind, &r.files.input)?;
    Err(refused("a numpy output needs tensorfile's `npz` feature"))
}

/// `.npz` / `.npy` to safetensors. `dtype` with opaque arrays says what
/// they hold, and nothing is cast; with none, it casts the float arrays.
#[cfg(feature = "npz")]
fn from_numpy(
    r: &ConvertRequest,
    cast: CastOptions,
    progress: &dyn Progress,
) -> Result<ConvertReport> {
    use tensorfile::npz::{self, FromNpzOptions, NpzFile};
    let io = &r.files;
    io.refuse_input_as_output([&io.input])?;
    let file = NpzFile::open(&io.input)?;
    let opaque = file
        .arrays()
        .iter()
        .filter(|a| matches!(a.element, npz::NpyElement::Opaque { .. }))
        .count();
    let opts = FromNpzOptions::default()
        .with_opaque(r.dtype)
        .with_dtype(r.dtype.filter(|_| opaque == 0))
        .with_cast(cast)
        .with_write(io.write_options())
        .with_max_shard_size(io.max_shard_size);
    progress.total(file.arrays().iter().map(|a| a.data_len()).sum());
    let summary = npz::npz_to_safetensors(&file, &io.output, &opts, progress)?;
    let losses = losses(&io.output, summary.convert.losses(), progress);
    let mut bytes = 0;
    for f in summary.files.iter().chain(&summary.index) {
        bytes += std::fs::metadata(f).map_err(|e| Error::io(f, e))?.len();
    }
    let c = &summary.convert;
    let input_format = if file.container() == npz::Container::Npy {
        "npy"
    } else {
        "npz"
    };
    Ok(ConvertReport::FromNumpy(FromNumpyConverted {
        bytes,
        cast: c.cast,
        dtype: r.dtype.map(|d| d.name().to_string()),
        files: summary.files.clone(),
        index: summary.index.clone(),
        input: io.input.clone(),
        input_format: input_format.into(),
        losses,
        opaque,
        output: io.output.clone(),
        tensors: c.tensors,
    }))
}

/// Safetensors (a file or a set) to an `.npz` archive or one `.npy` array.
#[cfg(feature = "npz")]
fn to_numpy(r: &ConvertRequest, out_kind: Kind, progress: &dyn Progress) -> Result<ConvertReport> {
    use tensorfile::npz::{self, NpzWriteOptions};
    use tensorfile::TensorData;
    let io = &r.files;
    if r.dtype.is_some() {
        return Err(refused(
            "--dtype applies to numpy input; to write other dtypes to numpy, cast the safetensors first (`tensorfile convert IN TMP.safetensors --dtype D`)",
        ));
    }
    if io.max_shard_size.is_some() {
        return Err(refused(
            "--max-shard-size applies to safetensors output; a numpy file is one file",
        ));
    }
    if out_kind == Kind::Npy {
        refuse_compress(r)?;
    }
    let input = io.open_safetensors()?;
    io.refuse_input_as_output(input.files())?;
    let tensors = input.tensors();
    if let Some(m) = input.metadata()? {
        progress.note(&format!(
            "{}: {} metadata keys not written: numpy files have no metadata",
            io.output.display(),
            m.len()
        ));
    }
    progress.total(tensors.iter().map(TensorData::<Error>::byte_len).sum());
    let written = if out_kind == Kind::Npy {
        let [one] = &tensors[..] else {
            return Err(Error::io(
                &io.output,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "a .npy file holds one array, and {} holds {} tensors: write an .npz",
                        io.input.display(),
                        tensors.len()
                    ),
                ),
            ));
        };
        npz::save_npy(&io.output, one, io.sync, progress)
    } else {
        let opts = NpzWriteOptions::default()
            .with_compress(r.compress)
            .with_sync(io.sync);
        npz::save_npz(&io.output, &tensors, &opts, progress)
    }?;
    Ok(ConvertReport::ToNumpy(ToNumpyConverted {
        arrays: written.arrays,
        bytes: written.file_bytes,
        compressed: r.compress,
        input: io.input.clone(),
        output: io.output.clone(),
        output_format: if out_kind == Kind::Npy { "npy" } else { "npz" }.into(),
    }))
}
