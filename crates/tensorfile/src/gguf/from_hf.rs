//! A Hugging Face model directory to GGUF, as llama.cpp's
//! `convert_hf_to_gguf.py` makes it (and, for the K types, as
//! `llama_model_quantize` would quantize that file's F32 weights with no
//! importance matrix): llama.cpp's tensor names and q/k permutation,
//! Gemma's norms as `1 + weight`, the architecture keys, the tokenizer,
//! 1-D tensors and norms in F32 and the weights in the chosen type,
//! quantized in parallel jobs of a few MiB (memory stays bounded by a few
//! jobs' rows, whatever the model's size).
//!
//! Tensors are written in the converter's order: shard by shard, by name.
//! A row length the type's blocks do not divide falls back as llama.cpp
//! does (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, Q2_K and Q3_K to Q4_0;
//! then, or for the 32-element types, F16).
//!
//! With `raw`, any directory or safetensors file becomes a plain tensor
//! container: the names and shapes as they are, no permutation, with
//! `general.architecture` as given; the type applies to every float
//! tensor of 2 or more dimensions whose rows are whole blocks of it (not
//! only to `.weight`s, llama.cpp's rule for models), and the others are
//! written as F32 (integers as they are) and listed in
//! [`FromHfSummary::not_converted`].

use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json};

use super::config::{self, HfModel};
use super::error::GgufError;
use super::names::{self, Arch, QkPermutation};
use super::quant::{quantize_into, RowFault};
use super::scratch::{grown, Scratch};
use super::types::GgmlType;
use super::value::Value;
use super::write::{GgufSpec, GgufWriter};
use crate::plan::Sink;
use crate::{Dtype, Error, ReadOptions, Result, TensorData};
use tensorfile_core::set::ShardedTensors;

/// The types a directory converts to.
pub const TYPES: [GgmlType; 10] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
];

/// How to convert.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FromHfOptions {
    /// The type of the weights (2-D and larger tensors ending in `.weight`,
    /// norms excepted); default F16, as the converter's.
    pub ggml_type: GgmlType,
    /// Write the tensors as they are, with this `general.architecture`.
    pub raw: Option<String>,
    /// `tokenizer.ggml.pre` when the pre-tokenizer is not GPT-2's.
    pub tokenizer_pre: Option<String>,
    /// Sync the file and its directory.
    pub sync: bool,
}

tensorfile_core::with_fields!(FromHfOptions {
    with_ggml_type => ggml_type: GgmlType,
    with_raw => raw: Option<String>,
    with_tokenizer_pre => tokenizer_pre: Option<String>,
    with_sync => sync: bool,
});

impl Default for FromHfOptions {
    fn default() -> Self {
        FromHfOptions {
            ggml_type: GgmlType::F16,
            raw: None,
            tokenizer_pre: None,
            sync: true,
        }
    }
}

/// What a conversion did.
#[derive(Debug, Clone, Default)]
pub struct FromHfSummary {
    /// The architecture written (`general.architecture`).
    pub arch: String,
    /// Tensors written, by type.
    pub types: std::collections::BTreeMap<String, usize>,
    /// Tensors that fell back to another type, with it.
    pub fallbacks: Vec<(String, GgmlType)>,
    /// Input tensors skipped (`rotary_emb.inv_freq`, Gemma's `lm_head`).
    pub skipped: Vec<String>,
    /// With `raw`: the tensors not written as the type asked for, with the
    /// type written and why (integer, fewer than 2 dimensions, rows not
    /// whole blocks).
    pub not_converted: Vec<(String, GgmlType, String)>,
    /// Why no tokenizer was written, if none was.
    pub no_tokenizer: Option<String>,
    /// The output's size.
    pub bytes: u64,
}

/// llama.cpp's `general.file_type` for a type.
fn file_type(t: GgmlType) -> u32 {
    match t {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q4_K => 14, // MOSTLY_Q4_K_S: Q4_K weights
        GgmlType::Q6_K => 18,
        _ => 32, // BF16
    }
}

/// The type a weight whose rows are `row` long gets instead of `t` when
/// `t`'s blocks do not divide them.
fn fallback(t: GgmlType, row: u64) -> GgmlType {
    use GgmlType::*;
    let fits = |t: GgmlType| row.is_multiple_of(t.block_size());
    if fits(t) {
        return t;
    }
    let next = match t {
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        Q6_K => Q8_0,
        Q2_K | Q3_K => Q4_0,
        _ => F16,
    };
    if fits(next) {
        next
    } else {
        F16
    }
}

/// One output tensor: its source and how it is made.
struct Out<'s, T> {
    source: &'s T,
    spec: GgufSpec,
    /// The q/k permutation of its rows, if permuted.
    rows: Option<QkPermutation>,
    plus_one: bool,
}

/// Input bytes converted per job.
const JOB_BYTES: u64 = 8 << 20;

/// Decodes input rows to f32 into `s.values[..n * row]`: `n` rows of `row`
/// elements starting at (output) row `first` of `t` (permuted through
/// `rows`), with `plus_one` applied. F32 input is read straight into the
/// values. The caller's jobs hold rows the tensor's bytes have.
fn read_rows<T: TensorData<crate::Error>>(
    t: &T,
    first: u64,
    n: u64,
    row: u64,
    rows: Option<QkPermutation>,
    plus_one: bool,
    s: &mut Scratch,
) -> Result<()> {
    let dtype = t.dtype();
    let esize = u64::from(dtype.bits() / 8);
    let rb = (row * esize) as usize;
    let count = (n * row) as usize;
    let values = grown(&mut s.values, count);
    // (input row, output row, rows) runs: one run when not permuted, else
    // row by row.
    let (run_count, run_len) = if rows.is_some() { (n, 1) } else { (1, n) };
    for k in 0..run_count {
        let src = rows.map_or(first + k, |p| p.hf_row_of_gguf(first + k));
        let (dst, len) = (k * run_len, run_len);
        let out = &mut values[(dst * row) as usize..((dst + len) * row) as usize];
        if dtype == Dtype::F32 {
            t.read_at(src * rb as u64, bytemuck::cast_slice_mut(out))?;
            continue;
        }
        let raw = grown(&mut s.bytes, len as usize * rb);
        t.read_at(src * rb as u64, raw)?;
        crate::cast::decode_f32(dtype, raw, out).map_err(|source| Error::Cast {
            tensor: t.name().to_string(),
            source,
        })?;
    }
    if plus_one {
        // As the converter: + 1 in the input's float type (f32 for BF16,
        // which it widens first; F16 stays F16).
        for v in values.iter_mut() {
            *v += 1.0;
            if dtype == Dtype::F16 {
                *v = half::f16::from_f32(*v).to_f32();
            }
        }
    }
    Ok(())
}

/// Reads and quantizes rows `r0..r0 + n` into `s.out`.
#[allow(clippy::too_many_arguments)]
fn quantize_job<T: TensorData<crate::Error>>(
    src: &T,
    r0: u64,
    n: u64,
    row: u64,
    rows: Option<QkPermutation>,
    plus_one: bool,
    t: GgmlType,
    out_row: u64,
    name: &str,
    s: &mut Scratch,
) -> Result<()> {
    read_rows(src, r0, n, row, rows, plus_one, s)?;
    let values = &s.values[..(n * row) as usize];
    let q = grown(&mut s.out, (n * out_row) as usize);
    for (k, (x, y)) in values
        .chunks_exact(row as usize)
        .zip(q.chunks_exact_mut(out_row as usize))
        .enumerate()
    {
        quantize_into(t, x, y).map_err(|f| match f {
            RowFault::NotFinite { col, value } => tensor_error(
                name,
                format!(
                    "row {}, element {col} is {value}, which {t} cannot hold",
                    r0 + k as u64
                ),
            ),
            other => tensor_error(name, format!("cannot be quantized to {t}: {other:?}")),
        })?;
    }
    Ok(())
}

fn tensor_error(name: &str, problem: String) -> Error {
    GgufError::Tensor {
        tensor: name.to_string(),
        problem,
    }
    .into()
}

fn read_json(path: &Path) -> Result<Option<Json>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            GgufError::Input {
                file: path.display().to_string(),
                problem: format!("not JSON: {e}"),
            }
            .into()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Converts the Hugging Face directory (or, with `raw`, safetensors file)
/// `input` into the GGUF file `out`, atomically.
///
/// # Errors
/// An architecture or tensor this library does not convert (without
/// `raw`), a config.json that lacks what GGUF needs, a value that cannot
/// be quantized (not finite), or a failed read or write.
pub fn hf_to_gguf(input: &Path, out: &Path, opts: &FromHfOptions) -> Result<FromHfSummary> {
    if !TYPES.contains(&opts.ggml_type) {
        return Err(GgufError::Write(format!(
            "{} is not a type written here ({})",
            opts.ggml_type,
            TYPES.map(|t| t.name().to_lowercase()).join(", ")
        ))
        .into());
    }
    let set = ShardedTensors::open_pread(input, &ReadOptions::default())?;
    let dir: PathBuf = set.dir().to_path_buf();
    let config_path = dir.join("config.json");
    let config: Option<Map<String, Json>> = match read_json(&config_path)? {
        None => None,
        Some(Json::Object(m)) => Some(m),
        Some(_) => {
            return Err(GgufError::Input {
                file: config_path.display().to_string(),
                problem: "not a JSON object".into(),
            }
            .into())
        }
    };
    let model: Option<HfModel> = match (&opts.raw, &config) {
        (Some(_), _) => None,
        (None, Some(c)) => Some(config::hf_model(c)?),
        (None, None) => {
            return Err(GgufError::Input {
                file: config_path.display().to_string(),
                problem: "missing: a model directory needs it (or use --raw with --arch)".into(),
            }
            .into())
        }
    };
    let arch_name = match (&opts.raw, &model) {
        (Some(a), _) => a.clone(),
        (None, Some(m)) => m.arch.gguf_name().to_string(),
        (None, None) => unreachable_arch()?,
    };
    if arch_name.is_empty() {
        return Err(GgufError::Write("general.architecture must not be empty".into()).into());
    }

    // The tensors, shard by shard, by name (the converter's order).
    let mut inputs = set.tensor_data();
    let shard_of: Vec<usize> = {
        let names: Vec<&str> = set.shards().iter().map(|s| s.name()).collect();
        inputs
            .iter()
            .map(|t| {
                names
                    .iter()
                    .position(|n| *n == t.shard().name())
                    .unwrap_or(0)
            })
            .collect()
    };
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by(|&a, &b| (shard_of[a], inputs[a].name()).cmp(&(shard_of[b], inputs[b].name())));
    let inputs_sorted: Vec<_> = order.iter().map(|&i| inputs[i]).collect();
    inputs = inputs_sorted;

    let mut summary = FromHfSummary {
        arch: arch_name.clone(),
        ..FromHfSummary::default()
    };
    let mut outs: Vec<Out<'_, _>> = Vec::new();
    let mut params: u64 = 0;
    // Tensors the converter makes rather than reads (Llama 3's rope
    // factors), written first as it writes them.
    let mut made: Vec<(GgufSpec, Vec<u8>)> = Vec::new();
    if let (Some(m), Some(c)) = (&model, &config) {
        if let Some(factors) = config::llama3_rope_factors(c, m)? {
            let n = factors.len() as u64;
            params = params.saturating_add(n);
            *summary
                .types
                .entry(GgmlType::F32.name().to_string())
                .or_default() += 1;
            let bytes = factors.iter().flat_map(|f| f.to_le_bytes()).collect();
            made.push((
                GgufSpec::from_shape("rope_freqs.weight", &[n], GgmlType::F32),
                bytes,
            ));
        }
    }
    for t in &inputs {
        let name = t.name();
        let shape = t.shape();
        let dtype = t.dtype();
        let gguf_name = match &model {
            None => name.to_string(),
            Some(m) => {
                let skip = name.ends_with(".rotary_emb.inv_freq")
                    || name.ends_with(".attention.masked_bias")
                    || name.ends_with(".attention.bias")
                    || (m.arch == Arch::Gemma && name == "lm_head.weight");
                if skip {
                    summary.skipped.push(name.to_string());
                    continue;
                }
                names::hf_to_gguf(m.arch, name).ok_or_else(|| {
                    tensor_error(
                        name,
                        format!(
                            "has no GGUF name in {} (use --raw to write the tensors as they are)",
                            m.arch
                        ),
                    )
                })?
            }
        };
        let float = dtype.is_float() && dtype != Dtype::C64;
        let n_dims = shape.len();
        let row = shape.last().copied().unwrap_or(1);
        // Raw: the type for every float tensor it can hold (2-D or more,
        // rows whole blocks), whatever its name; the rest as they were
        // (integers) or F32, each reported with why.
        let raw_reason = if model.is_some() {
            None
        } else if !float {
            Some("an integer tensor".to_string())
        } else if n_dims < 2 {
            Some(format!("{n_dims}-D"))
        } else if !row.is_multiple_of(opts.ggml_type.block_size()) {
            Some(format!(
                "rows of {row} are not whole blocks of {}",
                opts.ggml_type.block_size()
            ))
        } else {
            None
        };
        let target = if model.is_none() && float && raw_reason.is_none() {
            opts.ggml_type
        } else if model.is_none() && float {
            GgmlType::F32
        } else if !float {
            match dtype {
                Dtype::I8 => GgmlType::I8,
                Dtype::I16 => GgmlType::I16,
                Dtype::I32 => GgmlType::I32,
                Dtype::I64 => GgmlType::I64,
                other => {
                    return Err(tensor_error(
                        name,
                        format!("is {other}, which GGUF has no type for"),
                    ))
                }
            }
        } else if n_dims <= 1
            || gguf_name.ends_with("_norm.weight")
            || !gguf_name.ends_with(".weight")
        {
            GgmlType::F32
        } else {
            let t2 = fallback(opts.ggml_type, row);
            if t2 != opts.ggml_type {
                summary.fallbacks.push((gguf_name.clone(), t2));
            }
            t2
        };
        if let Some(reason) = raw_reason.filter(|_| target != opts.ggml_type) {
            summary
                .not_converted
                .push((gguf_name.clone(), target, reason));
        }
        let rows = match &model {
            Some(m) => match names::permutation_heads(m.arch, name, m.n_head, m.n_head_kv) {
                Some(heads) => {
                    let n = shape.first().copied().unwrap_or(1);
                    Some(QkPermutation::new(n, heads).ok_or_else(|| {
                        tensor_error(
                            name,
                            format!("{n} rows do not split into {heads} heads of pairs"),
                        )
                    })?)
                }
                None => None,
            },
            None => None,
        };
        let plus_one = model.as_ref().is_some_and(|m| m.arch.norms_plus_one())
            && gguf_name.ends_with("norm.weight");
        params = params.saturating_add(tensorfile_core::dtype::numel(shape).unwrap_or(u64::MAX));
        *summary.types.entry(target.name().to_string()).or_default() += 1;
        outs.push(Out {
            source: t,
            spec: GgufSpec::from_shape(gguf_name, shape, target),
            rows,
            plus_one,
        });
    }

    // Metadata, in the converter's order.
    let mut kv: Vec<(String, Value)> = vec![(
        "general.architecture".into(),
        Value::String(arch_name.clone()),
    )];
    kv.push(("general.type".into(), Value::String("model".into())));
    let dir_name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    if !dir_name.is_empty() {
        kv.push((
            "general.name".into(),
            Value::String(config::model_title(&dir_name)),
        ));
    }
    kv.push((
        "general.size_label".into(),
        Value::String(config::size_label(params)),
    ));
    if let (Some(m), Some(c)) = (&model, &config) {
        kv.extend(config::arch_keys(c, m)?);
        kv.push((
            "general.file_type".into(),
            Value::U32(file_type(opts.ggml_type)),
        ));
        kv.extend(config::arch_tail_keys(c, m)?);
    } else {
        kv.push((
            "general.file_type".into(),
            Value::U32(file_type(opts.ggml_type)),
        ));
    }
    kv.push(("general.quantization_version".into(), Value::U32(2)));
    if let (Some(m), Some(c)) = (&model, &config) {
        match read_json(&dir.join("tokenizer.json"))? {
            None => summary.no_tokenizer = Some("the directory has no tokenizer.json".into()),
            Some(tok) => {
                let tc = match read_json(&dir.join("tokenizer_config.json"))? {
                    Some(Json::Object(o)) => Some(o),
                    _ => None,
                };
                let keys = super::tokenizer::gguf_tokenizer(
                    &tok,
                    tc.as_ref(),
                    c,
                    m.vocab_size,
                    opts.tokenizer_pre.as_deref(),
                )?;
                match keys {
                    Some(keys) => kv.extend(keys),
                    None => {
                        summary.no_tokenizer = Some(super::tokenizer::explain_unsupported(&tok))
                    }
                }
            }
        }
    }

    let mut writer = GgufWriter::new(kv);
    for (spec, bytes) in made {
        let index = writer.declare(spec)?;
        writer.push(
            vec![index],
            move |sink: &dyn Sink<crate::Error>| -> Result<()> { sink.write(index, 0, &bytes) },
        );
    }
    for o in &outs {
        let index = writer.declare(o.spec.clone())?;
        let shape = o.source.shape();
        // A scalar is one row of one element; the rows are counted from
        // the bytes the tensor has, so a tensor of empty rows has none
        // (and makes no job), whatever its shape says.
        let row = shape.last().copied().unwrap_or(1);
        let esize = u64::from(o.source.dtype().bits() / 8).max(1);
        let in_row_bytes = row.saturating_mul(esize);
        let n_rows = TensorData::<Error>::byte_len(o.source)
            .checked_div(in_row_bytes)
            .unwrap_or(0);
        let t = o.spec.ggml_type;
        let out_row = t.bytes_for(row).unwrap_or(0);
        if matches!(
            t,
            GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64
        ) {
            let src = o.source;
            writer.push(
                vec![index],
                move |sink: &dyn Sink<crate::Error>| -> Result<()> {
                    let mut at = 0;
                    let len = TensorData::<Error>::byte_len(src);
                    let mut scratch = Vec::new();
                    while at < len {
                        let n = (len - at).min(JOB_BYTES);
                        let b = TensorData::<Error>::bytes_at(src, at, n as usize, &mut scratch)?;
                        sink.write(index, at, b)?;
                        at += n;
                    }
                    Ok(())
                },
            );
            continue;
        }
        let rows_per_job = (JOB_BYTES / in_row_bytes.max(1)).max(1);
        if n_rows == 0 {
            // An empty tensor: a job that makes its no bytes.
            writer.push(vec![index], |_: &dyn Sink<crate::Error>| -> Result<()> {
                Ok(())
            });
        }
        let mut r0 = 0;
        while r0 < n_rows {
            let n = (n_rows - r0).min(rows_per_job);
            let (src, rows, plus_one, name) = (o.source, o.rows, o.plus_one, o.spec.name.as_str());
            writer.push(
                vec![index],
                move |sink: &dyn Sink<crate::Error>| -> Result<()> {
                    let mut s = Scratch::take();
                    let result =
                        quantize_job(src, r0, n, row, rows, plus_one, t, out_row, name, &mut s)
                            .and_then(|()| {
                                sink.write(index, r0 * out_row, &s.out[..(n * out_row) as usize])
                            });
                    s.give();
                    result
                },
            );
            r0 += n;
        }
    }
    writer.save(out, opts.sync, &())?;
    summary.bytes = std::fs::metadata(out).map_err(|e| Error::io(out, e))?.len();
    Ok(summary)
}

fn unreachable_arch() -> Result<String> {
    Err(GgufError::Write("no architecture".into()).into())
}
