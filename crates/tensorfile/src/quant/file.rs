//! Whole files: quantize or dequantize a set of tensors and save the result
//! atomically, one tensor at a time and a batch of rows at a time, so
//! memory stays bounded by a few batch buffers whatever the tensor sizes.
//!
//! A quantized weight's parts land at different places of the canonical
//! file order (F16 scales before U8 codes), so the output is written with
//! positional writes: one pass over a weight's rows computes every part,
//! and two workers each write the batches of rows they computed.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use half::f16;

use super::config::{int4_group, QuantConfig, QUANTIZATION_KEY, QUANT_KEY};
use super::int4::{self, RowFault};
use super::layout::{quantized_weights, LogicalWeight};
use super::mlx::{self, Arith, RowParts};
use super::rows::{check_len, default_arith, RowSource};
use super::select::{default_take, quantizable, Selection, Verdict};
use super::{quant_error, Mode, QuantError, QuantParams, Scheme};
use crate::cast::{decode_f32, encode_f32, CastOptions};
use crate::header::TensorInfo;
use crate::parallel;
use crate::plan::{Plan, Sink};
use crate::writer::{TensorData, TensorSpec, WriteOptions};
use crate::{save_plan, Dtype, Error, Metadata, Result};

/// Output bytes gathered before each write.
const BATCH: usize = 1 << 20;

/// How to quantize a file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QuantizeOptions {
    /// The scheme.
    pub scheme: Scheme,
    /// Overrides of the default choice of tensors.
    pub selection: Selection,
    /// How to write the output.
    pub write: WriteOptions,
}

impl QuantizeOptions {
    /// Options with these `scheme`; the other fields at their defaults.
    pub fn new(scheme: Scheme) -> QuantizeOptions {
        QuantizeOptions {
            scheme,
            selection: Default::default(),
            write: Default::default(),
        }
    }
}

tensorfile_core::with_fields!(QuantizeOptions {
    with_scheme => scheme: Scheme,
    with_selection => selection: Selection,
    with_write => write: WriteOptions,
});

/// What [`quantize_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantizeSummary {
    /// Tensors written.
    pub tensors: usize,
    /// The weights quantized, by their input names.
    pub quantized: Vec<String>,
    /// The metadata written.
    pub metadata: Metadata,
}

/// How to dequantize a file.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct DequantizeOptions {
    /// MLX parameters from outside the file (config.json's `quantization`,
    /// or uniform ones from the command line). Without them, the file's own
    /// [`QUANTIZATION_KEY`] metadata is used; with both, they must agree.
    pub mlx: Option<QuantConfig>,
    /// The dtype of the dequantized weights (a float of whole bytes).
    /// Default: F32 for int4; the scales' dtype for MLX affine; BF16 for
    /// the MLX floating-point modes, F32 for nvfp4 with a global scale
    /// (MLX's own defaults on its CPU backend). MLX's floating-point modes
    /// compute in this dtype (F32 for other dtypes), as MLX does.
    pub dtype: Option<Dtype>,
    /// How to write the output.
    pub write: WriteOptions,
}

tensorfile_core::with_fields!(DequantizeOptions {
    with_mlx => mlx: Option<QuantConfig>,
    with_dtype => dtype: Option<Dtype>,
    with_write => write: WriteOptions,
});

/// What [`dequantize_file`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct DequantizeSummary {
    /// Tensors written.
    pub tensors: usize,
    /// The weights dequantized: name, the scheme they were stored in, and
    /// the dtype written.
    pub dequantized: Vec<(String, Scheme, Dtype)>,
}

/// Which part of a quantized weight a tensor of the output is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Int4Codes,
    Int4Scales,
    MlxCodes,
    MlxScales,
    MlxBiases,
    /// One F32 per matrix, written once (not a row at a time).
    MlxGlobalScale,
}

#[derive(Debug, Clone, Copy)]
enum QJob {
    Copy(usize),
    Quant { src: usize, part: Part },
}

/// The metadata of a quantized file: the input's, with the scheme's key
/// (for MLX, the parameters, with an entry per module of `global` that
/// has a global scale).
fn quantized_metadata(
    metadata: Option<&Metadata>,
    scheme: &Scheme,
    global: &[String],
) -> Result<Metadata> {
    let mut out = metadata.cloned().unwrap_or_default();
    let (key, value) = match scheme {
        Scheme::Int4Sym { .. } => {
            // The format page's int4 file is a course file.
            out.entry("format".into())
                .or_insert_with(|| "tinyllm".into());
            (QUANT_KEY, scheme.name())
        }
        Scheme::Mlx(p) => {
            let plain = QuantParams {
                global_scale: false,
                ..*p
            };
            let config = global.iter().fold(QuantConfig::uniform(plain), |c, m| {
                c.with_module(m.clone(), Some(*p))
            });
            (QUANTIZATION_KEY, config.to_json().to_string())
        }
    };
    if let Some(old) = out.get(key).filter(|old| **old != value) {
        return Err(quant_error(
            "__metadata__",
            QuantError::Params(format!(
                "the input already says {key:?}: {old:?}; quantizing with {value:?} would mix two schemes in one file"
            )),
        ));
    }
    out.insert(key.into(), value);
    Ok(out)
}

/// A planned quantization: the output's declarations and where each
/// tensor comes from.
struct QuantPlan {
    specs: Vec<TensorSpec>,
    jobs: HashMap<String, QJob>,
    quantized: Vec<String>,
    metadata: Metadata,
}

/// Plans a quantization; every choice and shape is checked here, before a
/// byte is written.
fn plan_quantize<T: TensorData<crate::Error>>(
    tensors: &[T],
    metadata: Option<&Metadata>,
    opts: &QuantizeOptions,
) -> Result<QuantPlan> {
    let mlx_params = match opts.scheme {
        Scheme::Int4Sym { .. } => None,
        Scheme::Mlx(p) => {
            p.validate().map_err(|e| quant_error("__metadata__", e))?;
            Some(p)
        }
    };
    let group = opts.scheme.group_size();
    let mut specs = Vec::with_capacity(tensors.len() + tensors.len() / 2);
    let mut jobs = HashMap::with_capacity(specs.capacity());
    let mut quantized = Vec::new();
    let mut global = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let name = t.name();
        check_len(t)?;
        let verdict = quantizable(t.dtype(), t.shape(), &opts.scheme);
        let included = opts.selection.included(name);
        let default = default_take(name, t.shape(), mlx_params.is_some());
        let take =
            !opts.selection.excluded(name) && (included || (default && verdict == Verdict::Take));
        if !take {
            specs.push(TensorSpec::new(name, t.dtype(), t.shape()));
            jobs.insert(name.to_string(), QJob::Copy(i));
            continue;
        }
        if let Verdict::Leave(why) = verdict {
            return Err(quant_error(
                name,
                QuantError::Shape(format!("is included but cannot be quantized: it {why}")),
            ));
        }
        let parts: Vec<(String, Dtype, Vec<u64>, Part)> = match mlx_params {
            None => {
                let (out, input) = match *t.shape() {
                    [out, input] => (out, input),
                    _ => unreachable_shape(name)?,
                };
                vec![
                    (
                        format!("{name}.qweight"),
                        Dtype::U8,
                        vec![out, input / 2],
                        Part::Int4Codes,
                    ),
                    (
                        format!("{name}.scales"),
                        Dtype::F16,
                        vec![out, input / group],
                        Part::Int4Scales,
                    ),
                ]
            }
            Some(p) => {
                let Some(module) = name.strip_suffix(".weight") else {
                    return Err(quant_error(
                        name,
                        QuantError::Shape(
                            "is included, but MLX stores a quantized weight as <module>.weight: the name must end in .weight".into(),
                        ),
                    ));
                };
                let [codes, groups, batch] = mlx::part_shapes(t.shape(), &p)
                    .ok_or_else(|| quant_error(name, QuantError::Shape("is too large".into())))?;
                let scale_dtype = if p.mode == Mode::Affine {
                    t.dtype()
                } else {
                    Dtype::U8
                };
                let mut parts = vec![
                    (name.to_string(), Dtype::U32, codes, Part::MlxCodes),
                    (
                        format!("{module}.scales"),
                        scale_dtype,
                        groups.clone(),
                        Part::MlxScales,
                    ),
                ];
                if p.mode == Mode::Affine {
                    parts.push((
                        format!("{module}.biases"),
                        t.dtype(),
                        groups,
                        Part::MlxBiases,
                    ));
                }
                // As mlx-lm: expert stacks get one global scale each, 2-D
                // weights none.
                if p.global_scale && t.shape().len() >= 3 {
                    let empty = t.shape().contains(&0);
                    if empty && batch.iter().all(|&d| d > 0) {
                        return Err(quant_error(
                            name,
                            QuantError::Shape(format!(
                                "has shape {:?}: matrices without values get no global scale",
                                t.shape()
                            )),
                        ));
                    }
                    parts.push((
                        format!("{module}.global_scale"),
                        Dtype::F32,
                        batch,
                        Part::MlxGlobalScale,
                    ));
                    global.push(module.to_string());
                }
                parts
            }
        };
        for (part_name, dtype, shape, part) in parts {
            specs.push(TensorSpec::new(part_name.clone(), dtype, shape));
            jobs.insert(part_name, QJob::Quant { src: i, part });
        }
        quantized.push(name.to_string());
    }
    if quantized.is_empty() {
        let what = if mlx_params.is_some() {
            "no tensor is a 2-D F32/F16/BF16 .weight (not a norm or embedding) or a 3-D expert stack"
        } else {
            "no tensor is a 2-D F32/F16/BF16 .weight (not a norm or embedding)"
        };
        return Err(quant_error(
            "*",
            QuantError::Shape(format!(
                "{what} whose inputs groups of {group} divide; use --include to name tensors"
            )),
        ));
    }
    let metadata = quantized_metadata(metadata, &opts.scheme, &global)?;
    Ok(QuantPlan {
        specs,
        jobs,
        quantized,
        metadata,
    })
}

/// A quantizable int4 tensor is 2-D; this keeps the match total without a panic.
fn unreachable_shape<V>(name: &str) -> Result<V> {
    Err(quant_error(name, QuantError::Shape("is not 2-D".into())))
}

/// Scratch space of one worker of [`row_batches`] when quantizing.
#[derive(Default)]
struct Scratch {
    /// The source row's bytes, when they cannot be borrowed.
    raw: Vec<u8>,
    /// The source row decoded to f32, when it cannot be borrowed.
    row: Vec<f32>,
    /// Codes of one row, one per byte.
    codes: Vec<u8>,
    /// One row's int4 scales.
    scales: Vec<f16>,
}

/// Most parts one row of output has (MLX: codes, scales, biases).
const MAX_PARTS: usize = 3;

/// Produces `rows` rows of output on two threads, in batches of about
/// [`BATCH`] bytes of the widest part. Each row has one piece of
/// `widths[i]` bytes per part, filled by `fill(row, pieces, scratch)`; a
/// worker gives each finished batch to `emit(first_row, parts)` itself,
/// so both threads compute and write at once (rows are independent). Batch
/// `b` goes to worker `b % 2`, so the output advances through the file in
/// step on both threads.
///
/// On failure the error is the one of the earliest failing row, as with
/// one thread: a worker stops at its first failure and skips batches after
/// the earliest failure seen so far, never one before it.
fn row_batches<S: Send>(
    rows: usize,
    widths: &[usize],
    scratch: &mut [S; 2],
    fill: impl Fn(usize, &mut [&mut [u8]], &mut S) -> Result<()> + Sync,
    emit: impl Fn(usize, &[&[u8]]) -> Result<()> + Sync,
) -> Result<()> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    if widths.len() > MAX_PARTS {
        return Err(quant_error(
            "*",
            QuantError::Layout("too many parts".into()),
        ));
    }
    let widest = widths.iter().copied().max().unwrap_or(0).max(1);
    let per_batch = (BATCH / widest).clamp(1, rows.max(1));
    let batches = rows.div_ceil(per_batch);
    let first_failed = AtomicUsize::new(usize::MAX);
    // Worker `first`: batches first, first + 2, ...; the failing batch and
    // its error, if any.
    let worker = |first: usize, scratch: &mut S| -> Option<(usize, Error)> {
        let mut bufs: Vec<Vec<u8>> = widths.iter().map(|&wd| vec![0u8; per_batch * wd]).collect();
        let mut run = |b: usize| -> Result<()> {
            let start = b * per_batch;
            let n = per_batch.min(rows - start);
            for k in 0..n {
                let mut pieces: [&mut [u8]; MAX_PARTS] = Default::default();
                for ((piece, buf), &wd) in pieces.iter_mut().zip(bufs.iter_mut()).zip(widths) {
                    *piece = &mut buf[k * wd..(k + 1) * wd];
                }
                fill(start + k, &mut pieces[..widths.len()], scratch)?;
            }
            let mut parts: [&[u8]; MAX_PARTS] = Default::default();
            for ((part, buf), &wd) in parts.iter_mut().zip(&bufs).zip(widths) {
                *part = &buf[..n * wd];
            }
            emit(start, &parts[..widths.len()])
        };
        let mut b = first;
        while b < batches && b < first_failed.load(Ordering::Acquire) {
            if let Err(e) = run(b) {
                first_failed.fetch_min(b, Ordering::AcqRel);
                return Some((b, e));
            }
            b += 2;
        }
        None
    };
    let [s0, s1] = &mut *scratch;
    let (theirs, mine) = if batches > 1 {
        parallel::both(|| worker(1, s1), || worker(0, s0))
    } else {
        (None, worker(0, s0))
    };
    match (mine, theirs) {
        (Some((b0, e0)), Some((b1, e1))) => Err(if b0 < b1 { e0 } else { e1 }),
        (Some((_, e)), None) | (None, Some((_, e))) => Err(e),
        (None, None) => Ok(()),
    }
}

/// Bytes one row of a weight of `cols` inputs takes in `part` (0 for the
/// global scale, which is not written by rows).
fn part_row_bytes(part: Part, cols: usize, scheme: &Scheme, elem: usize) -> usize {
    let groups = cols / scheme.group_size() as usize;
    match (part, scheme) {
        (Part::Int4Codes, _) => cols / 2,
        (Part::Int4Scales, _) => groups * 2,
        (Part::MlxCodes, Scheme::Mlx(p)) => cols * p.bits as usize / 8,
        (Part::MlxCodes, _) | (Part::MlxGlobalScale, _) => 0,
        (Part::MlxScales, Scheme::Mlx(p)) if p.mode != Mode::Affine => groups,
        (Part::MlxScales | Part::MlxBiases, _) => groups * elem,
    }
}

/// The values of row `r` of `t` (`cols` values of `dtype`): borrowed when
/// the row is F32 in memory and aligned, else read and decoded into `buf`.
fn source_row<'s, T: TensorData<crate::Error>>(
    t: &'s T,
    r: usize,
    cols: usize,
    raw: &'s mut Vec<u8>,
    buf: &'s mut Vec<f32>,
) -> Result<&'s [f32]> {
    let name = t.name();
    let dtype = t.dtype();
    let row_bytes = cols * (dtype.bits() as usize / 8);
    if ((r + 1) as u64).saturating_mul(row_bytes as u64) > t.byte_len() {
        return Err(quant_error(
            name,
            QuantError::Shape("is shorter than its shape".into()),
        ));
    }
    let src = t.bytes_at((r * row_bytes) as u64, row_bytes, raw)?;
    if dtype == Dtype::F32 {
        if let Ok(row) = bytemuck::try_cast_slice::<u8, f32>(src) {
            return Ok(row);
        }
    }
    buf.resize(cols, 0.0);
    decode_f32(dtype, src, buf).map_err(|e| quant_error(name, QuantError::Shape(e.to_string())))?;
    Ok(&buf[..])
}

/// The global scale of every matrix of `t` (its largest magnitude, as
/// mlx-lm gives each expert), in one pass over its rows.
fn matrix_maxima<T: TensorData<crate::Error>>(t: &T, geometry: &mlx::Geometry) -> Result<Vec<f32>> {
    let (mut raw, mut buf) = (Vec::new(), Vec::new());
    mlx::global_scales(geometry, |r| {
        source_row(t, r, geometry.cols, &mut raw, &mut buf).map(mlx::abs_max)
    })
}

/// Quantizes weight `t` in one pass over its rows and writes each of its
/// parts (`parts`: slot index in the file and which part) at its place.
/// Computing the scales and the codes of a row together reads the input
/// once; positional writes make that possible although the canonical
/// order puts every F16 `.scales` before every U8 `.qweight`. Each batch of
/// rows is split between two threads (rows are independent). A global
/// scale (nvfp4) takes a first pass for each matrix's largest magnitude.
fn quantize_weight<T: TensorData<crate::Error>>(
    w: &dyn Sink<crate::Error>,
    t: &T,
    scheme: &Scheme,
    parts: &[(usize, Part)],
) -> Result<()> {
    let name = t.name();
    let dtype = t.dtype();
    let (rows, cols, geometry) = match scheme {
        Scheme::Int4Sym { group } => {
            let (rows, cols) =
                int4::check_shape(t.shape(), *group).map_err(|e| quant_error(name, e))?;
            (rows, cols, None)
        }
        Scheme::Mlx(p) => {
            let g = mlx::check_shape(t.shape(), p).map_err(|e| quant_error(name, e))?;
            (g.rows, g.cols, Some(g))
        }
    };
    let elem = dtype.bits() as usize / 8;
    let arith = Arith::of(dtype).ok_or_else(|| {
        quant_error(
            name,
            QuantError::Dtype {
                dtype,
                wanted: "only F32, F16 and BF16 quantize".into(),
            },
        )
    })?;
    // The global scales, written once; the other parts a row at a time.
    let global_slot = parts
        .iter()
        .find(|&&(_, part)| part == Part::MlxGlobalScale)
        .map(|&(slot, _)| slot);
    let globals = match (global_slot, geometry) {
        (Some(slot), Some(g)) => {
            // An empty weight has no matrices here (the plan refuses
            // matrices without values).
            let maxima = if rows == 0 || cols == 0 {
                Vec::new()
            } else {
                matrix_maxima(t, &g)?
            };
            let bytes: Vec<u8> = maxima.iter().flat_map(|x| x.to_le_bytes()).collect();
            w.write(slot, 0, &bytes)?;
            Some(maxima)
        }
        _ => None,
    };
    if rows == 0 || cols == 0 {
        return Ok(()); // every other part is empty
    }
    let parts: Vec<(usize, Part)> = parts
        .iter()
        .copied()
        .filter(|&(_, part)| part != Part::MlxGlobalScale)
        .collect();
    let parts = &parts[..];
    let group = scheme.group_size() as usize;
    let groups = cols / group;
    let widths: Vec<usize> = parts
        .iter()
        .map(|&(_, part)| part_row_bytes(part, cols, scheme, elem))
        .collect();
    let mut scratch = [Scratch::default(), Scratch::default()];
    let fault = |r: usize| move |f: RowFault| quant_error(name, f.at_row(r as u64));
    let index = |wanted: Part| parts.iter().position(|&(_, part)| part == wanted);
    let (codes_at, scales_at, biases_at) = match scheme {
        Scheme::Int4Sym { .. } => (index(Part::Int4Codes), index(Part::Int4Scales), None),
        Scheme::Mlx(_) => (
            index(Part::MlxCodes),
            index(Part::MlxScales),
            index(Part::MlxBiases),
        ),
    };
    let (Some(codes_at), Some(scales_at)) = (codes_at, scales_at) else {
        return Err(quant_error(
            name,
            QuantError::Layout("a part is missing".into()),
        ));
    };
    // One row: decode (or borrow) the input and fill that row of every part.
    let fill = |r: usize, outs: &mut [&mut [u8]], scratch: &mut Scratch| -> Result<()> {
        let Scratch {
            raw,
            row: buf,
            codes,
            scales,
        } = scratch;
        let row = source_row(t, r, cols, raw, buf)?;
        codes.resize(cols, 0);
        // The row's piece of each part.
        let (mut code_out, mut scale_out, mut bias_out): (&mut [u8], &mut [u8], &mut [u8]) =
            (&mut [], &mut [], &mut []);
        for (i, out) in outs.iter_mut().enumerate() {
            if i == codes_at {
                code_out = out;
            } else if i == scales_at {
                scale_out = out;
            } else if Some(i) == biases_at {
                bias_out = out;
            }
        }
        match *scheme {
            Scheme::Int4Sym { .. } => {
                scales.resize(groups, f16::ZERO);
                int4::quantize_row(row, group, scales, codes, code_out).map_err(fault(r))?;
                for (o, v) in scale_out.chunks_exact_mut(2).zip(scales.iter()) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            Scheme::Mlx(p) => {
                let global = globals
                    .as_ref()
                    .zip(geometry)
                    .and_then(|(m, g)| m.get(g.matrix_of(r)).copied());
                let params = QuantParams {
                    global_scale: global.is_some(),
                    ..p
                };
                let out = RowParts {
                    codes,
                    scales: scale_out,
                    biases: bias_out,
                };
                mlx::quantize_row(&params, arith, global, row, out).map_err(fault(r))?;
                mlx::pack(p.bits as u32, codes, code_out).map_err(|e| quant_error(name, e))?;
            }
        }
        Ok(())
    };
    row_batches(rows, &widths, &mut scratch, fill, |first_row, batch| {
        for ((&(slot, _), bytes), &wd) in parts.iter().zip(batch).zip(&widths) {
            w.write(slot, (first_row * wd) as u64, bytes)?;
        }
        Ok(())
    })
}

/// The plan of quantizing the chosen weights of `tensors` (see
/// [`Selection`]); other tensors are copied unchanged. The metadata is the
/// input's plus the scheme's key (see the module docs of [`crate::quant`]);
/// int4 also sets `"format": "tinyllm"` when the input has no `format`.
/// Every choice and shape is checked here; a value that cannot be
/// quantized (NaN, infinity, an F16 scale overflow) is its job's error.
///
/// # Errors
/// Bad parameters, a named tensor that cannot be quantized, no tensor to
/// quantize, or metadata that already names another scheme.
pub fn quantize_plan<'a, T: TensorData<crate::Error>>(
    tensors: &'a [T],
    metadata: Option<&Metadata>,
    opts: &QuantizeOptions,
) -> Result<(Plan<'a, Error>, QuantizeSummary)> {
    let QuantPlan {
        specs,
        jobs,
        quantized,
        metadata,
    } = plan_quantize(tensors, metadata, opts)?;
    let mut plan = Plan::with_error(Some(metadata.clone()));
    // Each source tensor once: copied, or quantized into all its parts.
    let mut by_source: Vec<Vec<(usize, Part)>> = vec![Vec::new(); tensors.len()];
    for spec in &specs {
        match jobs.get(&spec.name) {
            Some(&QJob::Copy(i)) => {
                let t = tensors
                    .get(i)
                    .ok_or_else(|| Error::not_found(spec.name.clone()))?;
                plan.copy_from(t, i);
            }
            Some(&QJob::Quant { src, part }) => {
                let out = plan.declare_from(spec.clone(), src);
                by_source
                    .get_mut(src)
                    .ok_or_else(|| Error::not_found(spec.name.clone()))?
                    .push((out, part));
            }
            None => return Err(Error::not_found(spec.name.clone())),
        }
    }
    let scheme = opts.scheme;
    for (t, parts) in tensors.iter().zip(by_source) {
        if parts.is_empty() {
            continue;
        }
        let outputs = parts.iter().map(|&(o, _)| o).collect();
        plan.push(outputs, move |sink: &dyn Sink<crate::Error>| {
            quantize_weight(sink, t, &scheme, &parts)
        });
    }
    let summary = QuantizeSummary {
        tensors: specs.len(),
        quantized,
        metadata,
    };
    Ok((plan, summary))
}

/// Quantizes as [`quantize_plan`] says and saves the file at `path`
/// atomically. A value that cannot be quantized aborts the save and leaves
/// `path` as it was.
///
/// # Errors
/// As [`quantize_plan`], or a failed write (naming `path`).
pub fn quantize_file<T: TensorData<crate::Error>>(
    path: impl AsRef<Path>,
    tensors: &[T],
    metadata: Option<&Metadata>,
    opts: &QuantizeOptions,
) -> Result<QuantizeSummary> {
    let (plan, summary) = quantize_plan(tensors, metadata, opts)?;
    save_plan(path, &plan, &opts.write, &())?;
    Ok(summary)
}

impl DequantizeOptions {
    /// Whether dequantized weights can be written as `dtype`
    /// ([`DequantizeOptions::dtype`]): a float dtype of whole bytes, not
    /// C64. Dequantizing refuses any other; the CLI and the Python package
    /// ask first, to refuse a bad `--dtype` before reading a byte.
    pub fn accepts_dtype(dtype: Dtype) -> bool {
        dtype.is_float() && dtype != Dtype::C64 && dtype.bits().is_multiple_of(8)
    }
}

/// The dtype a dequantized weight is written in.
fn output_dtype(w: &LogicalWeight<'_>, requested: Option<Dtype>) -> Result<Dtype> {
    let dtype = requested.unwrap_or(match w.storage {
        Some(Scheme::Int4Sym { .. }) => Dtype::F32,
        Some(Scheme::Mlx(p)) if p.global_scale => Dtype::F32,
        Some(Scheme::Mlx(p)) if p.mode != Mode::Affine => Dtype::BF16,
        _ => w.dtype,
    });
    if !DequantizeOptions::accepts_dtype(dtype) {
        return Err(quant_error(
            &w.name,
            QuantError::Dtype {
                dtype,
                wanted: "dequantized weights are written as a float dtype of whole bytes".into(),
            },
        ));
    }
    Ok(dtype)
}

/// Every quantized weight of `tensors` (int4 and MLX) with its
/// parameters: MLX's from `mlx` (a model's config.json) or from the file's
/// own [`QUANTIZATION_KEY`] metadata, which must agree; int4's from the
/// metadata. What [`dequantize_plan`] dequantizes.
///
/// # Errors
/// Parameters that are missing, contradict the file's, or do not fit a
/// weight's parts.
pub(crate) fn find_quantized<'a, T: TensorData<crate::Error>>(
    tensors: &'a [T],
    metadata: Option<&Metadata>,
    mlx: Option<&QuantConfig>,
) -> Result<Vec<LogicalWeight<'a>>> {
    let by_name: HashMap<&str, usize> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name(), i))
        .collect();
    find_weights(tensors, &by_name, metadata, mlx)
}

/// Finds every quantized weight of `tensors` with its parameters, checking
/// explicit MLX parameters against the file's own.
fn find_weights<'a, T: TensorData<crate::Error>>(
    tensors: &'a [T],
    by_name: &HashMap<&'a str, usize>,
    metadata: Option<&Metadata>,
    explicit: Option<&QuantConfig>,
) -> Result<Vec<LogicalWeight<'a>>> {
    let lookup = |n: &str| -> Option<TensorInfo<'a>> {
        let t = tensors.get(*by_name.get(n)?)?;
        Some(TensorInfo {
            name: t.name(),
            dtype: t.dtype(),
            shape: t.shape(),
            // Only names, dtypes and shapes are looked at.
            data_offsets: (0, t.byte_len()),
        })
    };
    let own = QuantConfig::from_metadata(metadata).map_err(|e| quant_error("__metadata__", e))?;
    let config = explicit.or(own.as_ref());
    let names = tensors.iter().map(|t| t.name());
    let weights = quantized_weights(names, lookup, int4_group(metadata), config)?;
    if let (Some(_), Some(own)) = (explicit, own.as_ref()) {
        for w in &weights {
            let module = w.name.strip_suffix(".weight").unwrap_or(&w.name);
            if let Some(Scheme::Mlx(given)) = w.storage {
                // Whether there is a global scale is the layout's to say.
                let same = own.for_module(module).is_some_and(|p| {
                    (p.bits, p.group_size, p.mode) == (given.bits, given.group_size, given.mode)
                });
                if !same {
                    return Err(quant_error(
                        &w.name,
                        QuantError::Params(format!(
                            "the parameters given ({given}) contradict the file's own {QUANTIZATION_KEY:?} metadata"
                        )),
                    ));
                }
            }
        }
    }
    for w in &weights {
        if let Some(Scheme::Mlx(p)) = w.storage {
            if p.mode == Mode::Affine && Arith::of(w.dtype).is_none() {
                return Err(quant_error(
                    w.parts.get(1).copied().unwrap_or(&w.name),
                    QuantError::Dtype {
                        dtype: w.dtype,
                        wanted: "MLX affine scales are F32, F16 or BF16".into(),
                    },
                ));
            }
        }
    }
    Ok(weights)
}

/// The plan of dequantizing every quantized weight of `tensors` (int4 and
/// MLX; see [`crate::quant`]). Each weight comes back under its own name
/// (`<name>` for int4, `<m>.weight` for MLX) in
/// [`DequantizeOptions::dtype`]; scales and biases are dropped; other
/// tensors are copied unchanged. The metadata loses its `quant` and
/// [`QUANTIZATION_KEY`] keys when a weight was dequantized.
///
/// # Errors
/// Parameters that are missing, contradict the file's, or do not fit a
/// weight's parts; an output dtype that cannot hold floats.
pub fn dequantize_plan<'a, T: TensorData<crate::Error>>(
    tensors: &'a [T],
    metadata: Option<&Metadata>,
    opts: &DequantizeOptions,
) -> Result<(Plan<'a, Error>, DequantizeSummary)> {
    let by_name: HashMap<&str, usize> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name(), i))
        .collect();
    let weights = find_weights(tensors, &by_name, metadata, opts.mlx.as_ref())?;
    let consumed: HashSet<&str> = weights
        .iter()
        .flat_map(|w| w.parts.iter().copied())
        .collect();
    let mut metadata = metadata.cloned().unwrap_or_default();
    if !weights.is_empty() {
        metadata.remove(QUANT_KEY);
        metadata.remove(QUANTIZATION_KEY);
    }
    let mut plan = Plan::with_error((!metadata.is_empty()).then_some(metadata));
    let mut summary = DequantizeSummary {
        tensors: 0,
        dequantized: Vec::new(),
    };
    for (i, t) in tensors.iter().enumerate() {
        if !consumed.contains(t.name()) {
            check_len(t)?;
            plan.copy_from(t, i);
        }
    }
    let by_name = std::sync::Arc::new(by_name);
    let requested = opts.dtype;
    for weight in weights {
        let dtype = output_dtype(&weight, opts.dtype)?;
        let spec = TensorSpec::new(weight.name.clone(), dtype, weight.shape.clone());
        // The weight comes from its codes' input.
        let origin = weight.parts.first().and_then(|n| by_name.get(n)).copied();
        let out = match origin {
            Some(o) => plan.declare_from(spec, o),
            None => plan.declare(spec),
        };
        // Always a scheme: the weights found are the quantized ones.
        if let Some(scheme) = weight.storage {
            summary
                .dequantized
                .push((weight.name.clone(), scheme, dtype));
        }
        let by_name = by_name.clone();
        plan.push(vec![out], move |sink: &dyn Sink<crate::Error>| {
            let part = |n: &str| by_name.get(n).and_then(|&i| tensors.get(i));
            dequantize_into(sink, out, &weight, (dtype, requested), part)
        });
    }
    summary.tensors = plan.specs().len();
    Ok((plan, summary))
}

/// Dequantizes one weight into output `out` of `dtype`, a batch of rows at
/// a time; `requested` is the dtype asked for, if any.
fn dequantize_into<'a, T: TensorData<crate::Error> + 'a>(
    sink: &dyn Sink<crate::Error>,
    out: usize,
    weight: &LogicalWeight<'a>,
    (dtype, requested): (Dtype, Option<Dtype>),
    part: impl Fn(&str) -> Option<&'a T>,
) -> Result<()> {
    let name = weight.name.as_str();
    if weight.shape.contains(&0) {
        // No values: nothing to read, and a shape like [0, 2^40] must not
        // size row buffers.
        return Ok(());
    }
    // MLX's floating-point modes compute in the requested dtype, else in
    // their default BF16 (F32 for other dtypes).
    let arith = match requested {
        Some(d) => Arith::of(d).unwrap_or(Arith::F32),
        None => default_arith(weight),
    };
    let rows: RowSource<'a, T> =
        RowSource::new(weight, arith, |j| weight.parts.get(j).and_then(|n| part(n)))?;
    let (out_rows, cols) = (rows.rows, rows.cols);
    let row_bytes = cols * dtype.bits() as usize / 8;
    let mut scratch = [(rows.clone(), vec![0f32; cols]), (rows, vec![0f32; cols])];
    row_batches(
        out_rows,
        &[row_bytes],
        &mut scratch,
        |r, pieces, (rows, values)| {
            rows.row(r, values, name)?;
            let nan = values.iter().any(|v| v.is_nan());
            for piece in pieces.iter_mut() {
                encode_f32(values, dtype, piece, CastOptions::default())
                    .map_err(|e| quant_error(name, QuantError::Shape(e.to_string())))?;
                if nan {
                    // NaN as MLX's conversion to the output dtype writes it.
                    mlx::mlx_nan_bytes(dtype, piece);
                }
            }
            Ok(())
        },
        |first_row, parts| {
            parts
                .iter()
                .try_for_each(|bytes| sink.write(out, (first_row * row_bytes) as u64, bytes))
        },
    )
}

/// Dequantizes as [`dequantize_plan`] says and saves the file at `path`
/// atomically.
///
/// # Errors
/// As [`dequantize_plan`], or a failed write (naming `path`).
pub fn dequantize_file<T: TensorData<crate::Error>>(
    path: impl AsRef<Path>,
    tensors: &[T],
    metadata: Option<&Metadata>,
    opts: &DequantizeOptions,
) -> Result<DequantizeSummary> {
    let (plan, summary) = dequantize_plan(tensors, metadata, opts)?;
    save_plan(path, &plan, &opts.write, &())?;
    Ok(summary)
}
