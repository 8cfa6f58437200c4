//! GGUF to a Hugging Face model directory: `model.safetensors` with the
//! Hugging Face names and layout (q/k permutation undone, Gemma's norms
//! back to `weight`, not `1 + weight`), decoded to one dtype or, with
//! `keep_quant`, kept quantized as MLX affine weights where that layout
//! holds the blocks exactly; `config.json`, `generation_config.json`, and
//! for byte-level BPE vocabularies `tokenizer.json` and
//! `tokenizer_config.json`.
//!
//! Memory stays bounded: tensors are decoded and cast in pieces by the
//! plan's parallel jobs and written at their places.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::f16;
use serde_json::{json, Map, Value as Json};

use super::config::{self, HfConfigParts};
use super::dequant::{affine_bits, affine_block};
use super::error::GgufError;
use super::names::{self, Arch, QkPermutation};
use super::read::{GgufFile, GgufTensor, TensorInfo};
use super::scratch::{grown, Scratch};
use super::tokenizer;
use crate::atomic::NewDirs;
use crate::cast::file::convert_plan_owned;
use crate::cast::CastOptions;
use crate::plan::Sink;
use crate::source::ByteSource;
use crate::{AtomicSet, Dtype, Error, Metadata, Result, TensorData, TensorSpec, WriteOptions};

/// How to convert.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToHfOptions {
    /// The dtype of decoded tensors (default BF16). Plain tensors of
    /// another float dtype are cast to it too.
    pub dtype: Dtype,
    /// Keep Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K weights quantized,
    /// as MLX affine weights with groups of 32 (4, 5 or 8 bits); other
    /// types are decoded to `dtype`.
    pub keep_quant: bool,
    /// How `model.safetensors` is written (`sync`).
    pub write: WriteOptions,
}

tensorfile_core::with_fields!(ToHfOptions {
    with_dtype => dtype: Dtype,
    with_keep_quant => keep_quant: bool,
    with_write => write: WriteOptions,
});

impl Default for ToHfOptions {
    fn default() -> Self {
        ToHfOptions {
            dtype: Dtype::BF16,
            keep_quant: false,
            write: WriteOptions::default(),
        }
    }
}

/// What a conversion did.
#[derive(Debug, Clone)]
pub struct ToHfSummary {
    /// The architecture.
    pub arch: Arch,
    /// Tensors of the GGUF file.
    pub tensors: usize,
    /// Of those, decoded from quantized blocks.
    pub decoded: usize,
    /// Of those, kept quantized (MLX affine), with their bits.
    pub kept: BTreeMap<String, u32>,
    /// Kept weights whose scales and biases are F32 (F16 does not give the
    /// same values).
    pub f32_scales: usize,
    /// The files written.
    pub files: Vec<PathBuf>,
    /// Why no tokenizer.json was written, if none was.
    pub no_tokenizer: Option<String>,
}

/// A GGUF tensor under its Hugging Face name and layout.
struct HfTensor<'f, S> {
    inner: GgufTensor<'f, S>,
    name: String,
    /// The q/k permutation of its rows, if permuted.
    rows: Option<QkPermutation>,
    /// Gemma norms: GGUF holds `1 + weight`.
    minus_one: bool,
    dtype: Dtype,
}

impl<S: ByteSource> HfTensor<'_, S> {
    fn row_bytes(&self) -> u64 {
        let shape = self.inner.shape();
        let rows = shape.first().copied().unwrap_or(1).max(1);
        self.inner.byte_len() / rows
    }

    /// Reads the inner tensor's bytes as this tensor lays them out (rows
    /// permuted), before the value change.
    fn read_rows(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let rb = self.row_bytes();
        let Some(perm) = self.rows.filter(|_| rb > 0) else {
            // Not permuted, or rows of no bytes: nothing to reorder (and
            // any read of an empty tensor is the inner one's error).
            return self.inner.read_at(offset, buf);
        };
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset.saturating_add(done as u64);
            let (row, within) = (at / rb, at % rb);
            let n = usize::try_from(rb - within)
                .unwrap_or(usize::MAX)
                .min(buf.len() - done);
            let src = perm.gguf_row_of_hf(row);
            let from = src.checked_mul(rb).and_then(|b| b.checked_add(within));
            let from = from.unwrap_or(u64::MAX); // past the end: the inner read refuses it
            self.inner.read_at(from, &mut buf[done..done + n])?;
            done += n;
        }
        Ok(())
    }
}

impl<S: ByteSource> TensorData<Error> for HfTensor<'_, S> {
    fn name(&self) -> &str {
        &self.name
    }
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[u64] {
        self.inner.shape()
    }
    fn byte_len(&self) -> u64 {
        if self.minus_one {
            // numel fits i64 (the reader checks it), and only a tensor
            // with bytes behind it has more than none.
            self.inner.info().numel().saturating_mul(4)
        } else {
            self.inner.byte_len()
        }
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if !self.minus_one {
            return self.read_rows(offset, buf);
        }
        // Whole f32 values around the range, decoded from the inner dtype.
        let from = self.inner.dtype();
        let size = u64::from(from.bits() / 8);
        let (first, last) = (offset / 4, (offset + buf.len() as u64).div_ceil(4));
        let mut raw = vec![0u8; ((last - first) * size) as usize];
        self.read_rows(first * size, &mut raw)?;
        let mut values = crate::cast::decode_f32_vec(from, &raw).map_err(|source| Error::Cast {
            tensor: self.name.clone(),
            source,
        })?;
        for v in &mut values {
            *v -= 1.0;
        }
        let bytes: &[u8] = bytemuck::cast_slice(&values);
        let skip = (offset - first * 4) as usize;
        buf.copy_from_slice(&bytes[skip..skip + buf.len()]);
        Ok(())
    }
}

/// A quantized tensor decoded by the plan's own jobs (whole rows, buffers
/// reused, no zero-filling): its GGUF info, Hugging Face name and rows.
#[derive(Clone)]
struct Direct<'f> {
    info: &'f TensorInfo,
    name: String,
    rows: Option<QkPermutation>,
}

/// Output bytes (as f32) a decoding job makes.
const DECODE_JOB_BYTES: u64 = 8 << 20;

/// Decodes rows `r0..r0 + n` (Hugging Face order) of `d` into `s.out` as
/// `dtype`; returns the bytes made.
fn decode_rows<S: ByteSource>(
    file: &GgufFile<S>,
    d: &Direct<'_>,
    r0: u64,
    n: u64,
    dtype: Dtype,
    s: &mut Scratch,
) -> Result<usize> {
    let info = d.info;
    let t = info.ggml_type;
    let ne0 = info.row_len();
    let row_raw = ne0 / t.block_size() * t.type_size();
    let (bs, ts) = (t.block_size(), t.type_size());
    let osize = (dtype.bits() / 8) as usize;
    // The caller's jobs hold rows the tensor's bytes have, a few MiB.
    let len_out = (n * ne0) as usize * osize;
    // (GGUF row, job row, rows) runs: one run when not permuted, else row
    // by row.
    let (run_count, run_len) = if d.rows.is_some() { (n, 1) } else { (1, n) };
    let Scratch { values, bytes, out } = s;
    let out = grown(out, len_out);
    // Decoded in pieces of about 4096 values, each cast while it is in L1.
    let piece_blocks = (4096 / bs).max(1);
    let piece = grown(values, (piece_blocks * bs) as usize);
    for k in 0..run_count {
        let src = d.rows.map_or(r0 + k, |p| p.gguf_row_of_hf(r0 + k));
        let (dst, len) = (k * run_len, run_len);
        let raw = grown(bytes, (len * row_raw) as usize);
        file.read_raw(info, src * row_raw, raw)?;
        let mut e = (dst * ne0) as usize;
        for chunk in raw.chunks(piece_blocks as usize * ts as usize) {
            let ne = chunk.len() / ts as usize * bs as usize;
            let vals = &mut piece[..ne];
            super::dequant::dequantize(t, chunk, vals);
            let o = &mut out[e * osize..(e + ne) * osize];
            let vb: &[u8] = bytemuck::cast_slice(vals);
            if dtype == Dtype::F32 {
                o.copy_from_slice(vb);
            } else {
                crate::cast::cast_slice(Dtype::F32, vb, dtype, o, CastOptions::default()).map_err(
                    |source| Error::Cast {
                        tensor: d.name.clone(),
                        source,
                    },
                )?;
            }
            e += ne;
        }
    }
    Ok(len_out)
}

/// A weight kept quantized: the GGUF tensor, its module name and layout.
#[derive(Clone)]
struct Kept<'f> {
    info: &'f TensorInfo,
    module: String,
    bits: u32,
    rows: Option<QkPermutation>,
    scale_dtype: Dtype,
}

/// Groups of 32 per GGUF block of a kept type.
fn groups_per_block(info: &TensorInfo) -> u64 {
    info.ggml_type.block_size() / 32
}

/// Converts rows `r0..r1` (Hugging Face order) of a kept weight into the
/// MLX bytes of those rows: packed codes, scales, biases.
fn kept_rows<S: ByteSource>(
    file: &GgufFile<S>,
    k: &Kept<'_>,
    r0: u64,
    r1: u64,
) -> Result<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let info = k.info;
    let t = info.ggml_type;
    let ne0 = info.row_len();
    let blocks = ne0 / t.block_size();
    let row_raw = (blocks * t.type_size()) as usize;
    let groups = (ne0 / 32) as usize;
    let packed_row = (ne0 as usize) * k.bits as usize / 8;
    let n = (r1 - r0) as usize;
    let size = (k.scale_dtype.bits() / 8) as usize;
    let (mut w, mut s, mut b) = (
        vec![0u8; n * packed_row],
        vec![0u8; n * groups * size],
        vec![0u8; n * groups * size],
    );
    let mut raw = vec![0u8; row_raw];
    let mut codes = vec![0u8; ne0 as usize];
    let (mut sc, mut bi) = (vec![0f32; groups], vec![0f32; groups]);
    let gpb = groups_per_block(info) as usize;
    for (i, r) in (r0..r1).enumerate() {
        let src = k.rows.map_or(r, |p| p.gguf_row_of_hf(r));
        file.read_raw(info, src * row_raw as u64, &mut raw)?;
        for (blk, block) in raw.chunks_exact(t.type_size() as usize).enumerate() {
            let e0 = blk * t.block_size() as usize;
            let g0 = blk * gpb;
            affine_block(
                t,
                block,
                &mut codes[e0..e0 + t.block_size() as usize],
                &mut sc[g0..g0 + gpb],
                &mut bi[g0..g0 + gpb],
            );
        }
        crate::quant::mlx_pack(k.bits, &codes, &mut w[i * packed_row..(i + 1) * packed_row])
            .map_err(|problem| Error::Quant {
                tensor: info.name.clone(),
                problem,
            })?;
        let span = i * groups * size..(i + 1) * groups * size;
        put_floats(&sc, k.scale_dtype, &mut s[span.clone()]);
        put_floats(&bi, k.scale_dtype, &mut b[span]);
    }
    Ok((w, s, b))
}

/// f32 values as F32 or F16 bytes (F16 only for values it holds exactly).
fn put_floats(v: &[f32], dtype: Dtype, out: &mut [u8]) {
    if dtype == Dtype::F16 {
        for (o, x) in out.chunks_exact_mut(2).zip(v) {
            o.copy_from_slice(&f16::from_f32(*x).to_le_bytes());
        }
    } else {
        for (o, x) in out.chunks_exact_mut(4).zip(v) {
            o.copy_from_slice(&x.to_le_bytes());
        }
    }
}

/// Whether F16 scales and biases give the same values as F32 ones under
/// MLX's arithmetic (in the scales' dtype): every scale and bias exact in
/// F16, and `f16(f16(s * q) + b)` equal to the f32 value for every code
/// used. Reads the tensor's blocks once.
fn f16_holds<S: ByteSource>(file: &GgufFile<S>, info: &TensorInfo) -> Result<bool> {
    let t = info.ggml_type;
    let ts = t.type_size() as usize;
    let gpb = groups_per_block(info) as usize;
    let blocks_total = info.byte_len / t.type_size();
    let chunk_blocks = ((4u64 << 20) / t.type_size()).max(1);
    let mut raw = Vec::new();
    let mut codes = vec![0u8; t.block_size() as usize];
    let (mut sc, mut bi) = (vec![0f32; gpb], vec![0f32; gpb]);
    let r16 = |x: f32| f16::from_f32(x).to_f32();
    let mut at = 0u64;
    while at < blocks_total {
        let n = (blocks_total - at).min(chunk_blocks);
        raw.resize((n as usize) * ts, 0);
        file.read_raw(info, at * ts as u64, &mut raw)?;
        for block in raw.chunks_exact(ts) {
            affine_block(t, block, &mut codes, &mut sc, &mut bi);
            for g in 0..gpb {
                let (s, b) = (sc[g], bi[g]);
                if r16(s) != s || r16(b) != b {
                    return Ok(false);
                }
                for &q in &codes[g * 32..g * 32 + 32] {
                    let exact = s * f32::from(q) + b;
                    if r16(r16(s * f32::from(q)) + b) != exact {
                        return Ok(false);
                    }
                }
            }
        }
        at += n;
    }
    Ok(true)
}

/// A JSON file's text, pretty-printed with a final newline.
fn json_text(path: &Path, value: &Json) -> Result<String> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::io(path, std::io::Error::other(e)))?;
    text.push('\n');
    Ok(text)
}

/// The rows a GGUF tensor's bytes hold (every dimension but the first,
/// multiplied): counted from its bytes, so a tensor of empty rows has
/// none, whatever its shape says.
fn stored_rows(info: &TensorInfo) -> u64 {
    let t = info.ggml_type;
    let row_bytes = (info.row_len() / t.block_size()).saturating_mul(t.type_size());
    info.byte_len.checked_div(row_bytes).unwrap_or(0)
}

/// Rows of kept weights converted per job.
const KEPT_JOB_ROWS: u64 = 256;

/// How GGUF tensors map to output ones: a model's Hugging Face names and
/// layout ([`plan_tensors`] without one: as they are).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Model {
    arch: Arch,
    n_head: u64,
    n_head_kv: u64,
}

/// The tensors of a GGUF file planned for one safetensors file, and what
/// was done to them.
pub(crate) struct Planned<'f> {
    /// The plan, with its metadata.
    pub(crate) plan: crate::plan::Plan<'f, Error>,
    /// Tensors decoded from quantized blocks.
    pub(crate) decoded: usize,
    /// Weights kept quantized (MLX affine), with their bits.
    pub(crate) kept: BTreeMap<String, u32>,
    /// Of those, the ones with F32 scales.
    pub(crate) f32_scales: usize,
    /// Per module: kept bits, or `None` for a 2-D weight not kept.
    pub(crate) quant_overrides: Vec<(String, Option<u32>)>,
}

/// Plans the tensors of `file`: mapped by `model` (or as they are),
/// decoded to `dtype` (or, without one, plain types kept and quantized
/// ones to F32), quantized weights kept as MLX affine ones where they can
/// be with `keep_quant`; `metadata` is the file's, `format` set to `mlx`
/// when a weight is kept.
///
/// # Errors
/// A tensor with no name in the model, rows that do not split into heads,
/// a type that is not decoded, or a failed read.
pub(crate) fn plan_tensors<'f, S: ByteSource>(
    file: &'f GgufFile<S>,
    model: Option<Model>,
    dtype: Option<Dtype>,
    keep_quant: bool,
    mut metadata: Metadata,
) -> Result<Planned<'f>> {
    let h = file.header();

    let mut decoded = Vec::new();
    let mut direct: Vec<Direct<'_>> = Vec::new();
    let mut kept: Vec<Kept<'_>> = Vec::new();
    let mut out = Planned {
        plan: crate::plan::Plan::with_error(None),
        decoded: 0,
        kept: BTreeMap::new(),
        f32_scales: 0,
        quant_overrides: Vec::new(),
    };
    for info in h.tensors() {
        let hf = match model {
            None => info.name.clone(),
            Some(m) => names::gguf_to_hf(m.arch, &info.name).ok_or_else(|| GgufError::Tensor {
                tensor: info.name.clone(),
                problem: format!("has no Hugging Face name in {}", m.arch),
            })?,
        };
        let shape = info.shape();
        let heads =
            model.and_then(|m| names::permutation_heads(m.arch, &hf, m.n_head, m.n_head_kv));
        let rows = match heads {
            None => None,
            Some(heads) => {
                let n = shape.first().copied().unwrap_or(1);
                Some(
                    QkPermutation::new(n, heads).ok_or_else(|| GgufError::Tensor {
                        tensor: info.name.clone(),
                        problem: format!("{n} rows do not split into {heads} heads of pairs"),
                    })?,
                )
            }
        };
        let bits = affine_bits(info.ggml_type).filter(|_| keep_quant && shape.len() == 2);
        if let (Some(bits), Some(module)) = (bits, hf.strip_suffix(".weight")) {
            let scale_dtype = if f16_holds(file, info)? {
                Dtype::F16
            } else {
                Dtype::F32
            };
            out.f32_scales += usize::from(scale_dtype == Dtype::F32);
            out.kept.insert(hf.clone(), bits);
            out.quant_overrides.push((module.to_string(), Some(bits)));
            kept.push(Kept {
                info,
                module: module.to_string(),
                bits,
                rows,
                scale_dtype,
            });
            continue;
        }
        if keep_quant && shape.len() == 2 {
            if let Some(module) = hf.strip_suffix(".weight") {
                out.quant_overrides.push((module.to_string(), None));
            }
        }
        let inner = file.tensor(&info.name)?;
        out.decoded += usize::from(inner.is_decoded());
        let minus_one =
            model.is_some_and(|m| m.arch.norms_plus_one()) && hf.ends_with("norm.weight");
        if inner.is_decoded() && !minus_one {
            direct.push(Direct {
                info,
                name: hf,
                rows,
            });
            continue;
        }
        let dtype = if minus_one { Dtype::F32 } else { inner.dtype() };
        decoded.push(HfTensor {
            inner,
            name: hf,
            rows,
            minus_one,
            dtype,
        });
    }

    if !kept.is_empty() {
        metadata.insert("format".to_string(), "mlx".to_string());
    }
    let (mut plan, _) =
        convert_plan_owned(decoded, Some(&metadata), dtype, CastOptions::default())?;
    // Decoded tensors become `dtype`, or stay F32.
    let decode_to = dtype.unwrap_or(Dtype::F32);
    let out_size = u64::from(decode_to.bits() / 8);
    for d in direct {
        let info = d.info;
        let shape = info.shape();
        let ne0 = info.row_len();
        // Rows counted from the bytes the tensor has: none when its rows
        // are empty, however many the shape says.
        let n_rows = stored_rows(info);
        let idx = plan.declare(TensorSpec::new(d.name.clone(), decode_to, shape));
        let rows_per_job = (DECODE_JOB_BYTES / ne0.saturating_mul(4).max(1)).max(1);
        if n_rows == 0 {
            // An empty tensor: a job that makes its no bytes.
            plan.push(vec![idx], |_: &dyn Sink<crate::Error>| -> Result<()> {
                Ok(())
            });
        }
        let mut r0 = 0;
        while r0 < n_rows {
            let n = (n_rows - r0).min(rows_per_job);
            let d = d.clone();
            plan.push(
                vec![idx],
                move |sink: &dyn Sink<crate::Error>| -> Result<()> {
                    let mut s = Scratch::take();
                    let result = decode_rows(file, &d, r0, n, decode_to, &mut s)
                        .and_then(|len| sink.write(idx, r0 * ne0 * out_size, &s.out[..len]));
                    s.give();
                    result
                },
            );
            r0 += n;
        }
    }
    for k in kept {
        let info = k.info;
        let rows_total = info.shape().first().copied().unwrap_or(1);
        let ne0 = info.row_len();
        // Kept types' rows are whole groups of 32 (the reader checks the
        // blocks), so these do not overflow.
        let groups = ne0 / 32;
        let packed = groups * u64::from(k.bits);
        let w = plan.declare(TensorSpec::new(
            format!("{}.weight", k.module),
            Dtype::U32,
            [rows_total, packed],
        ));
        let s = plan.declare(TensorSpec::new(
            format!("{}.scales", k.module),
            k.scale_dtype,
            [rows_total, groups],
        ));
        let b = plan.declare(TensorSpec::new(
            format!("{}.biases", k.module),
            k.scale_dtype,
            [rows_total, groups],
        ));
        let packed_row = packed * 4;
        let scale_row = groups * u64::from(k.scale_dtype.bits() / 8);
        // Jobs only for the rows the tensor's bytes hold.
        let n_rows = stored_rows(info);
        if n_rows == 0 {
            plan.push(vec![w, s, b], |_: &dyn Sink<crate::Error>| -> Result<()> {
                Ok(())
            });
        }
        let mut r0 = 0;
        while r0 < n_rows {
            let r1 = (r0 + KEPT_JOB_ROWS).min(n_rows);
            let k = k.clone();
            plan.push(
                vec![w, s, b],
                move |sink: &dyn Sink<crate::Error>| -> Result<()> {
                    let (wb, sb, bb) = kept_rows(file, &k, r0, r1)?;
                    sink.write(w, r0 * packed_row, &wb)?;
                    sink.write(s, r0 * scale_row, &sb)?;
                    sink.write(b, r0 * scale_row, &bb)?;
                    Ok(())
                },
            );
            r0 = r1;
        }
    }
    out.plan = plan;
    Ok(out)
}

/// Converts a GGUF model into a Hugging Face directory `out` (created if
/// needed; files in it are replaced atomically).
///
/// # Errors
/// An architecture or tensor this library does not convert, a metadata key
/// config.json needs that is missing, a type that is not decoded, or a
/// failed write.
pub fn gguf_to_hf<S: ByteSource>(
    file: &GgufFile<S>,
    out: &Path,
    opts: &ToHfOptions,
) -> Result<ToHfSummary> {
    let h = file.header();
    let arch_name = h.architecture().ok_or_else(|| GgufError::Key {
        key: "general.architecture".into(),
        problem: "missing or not a string".into(),
    })?;
    let arch = Arch::from_gguf(arch_name).ok_or_else(|| GgufError::Architecture {
        arch: arch_name.to_string(),
        problem: "not one this library converts to a Hugging Face directory (llama, qwen2, qwen3, gemma, phi3); convert it to a .safetensors or .npz file for its tensors and metadata as they are"
            .into(),
    })?;
    let (n_head, n_head_kv) = config::heads(h, arch)?;
    if !opts.dtype.is_float() || opts.dtype == Dtype::C64 {
        return Err(
            GgufError::Write(format!("{} is not a float dtype to decode to", opts.dtype)).into(),
        );
    }
    let metadata = Metadata::from([("format".to_string(), "pt".to_string())]);
    let planned = plan_tensors(
        file,
        Some(Model {
            arch,
            n_head,
            n_head_kv,
        }),
        Some(opts.dtype),
        opts.keep_quant,
        metadata,
    )?;
    let Planned {
        plan,
        decoded,
        kept,
        f32_scales,
        quant_overrides,
    } = planned;
    let mut summary = ToHfSummary {
        arch,
        tensors: h.tensors().len(),
        decoded,
        kept,
        f32_scales,
        files: Vec::new(),
        no_tokenizer: None,
    };

    // Everything that can be refused is worked out before a file is made:
    // config.json, generation_config.json, the tokenizer.
    let embd = h
        .tensor("token_embd.weight")
        .ok_or_else(|| GgufError::Tensor {
            tensor: "token_embd.weight".into(),
            problem: "missing: the vocabulary size comes from it".into(),
        })?;
    let parts = HfConfigParts {
        vocab_size: embd.shape().first().copied().unwrap_or(0),
        tied: h.tensor("output.weight").is_none(),
        torch_dtype: torch_dtype(opts.dtype),
        attention_bias: h.tensor("blk.0.attn_q.bias").is_some(),
    };
    let mut cfg = config::hf_config(h, arch, &parts)?;
    if !summary.kept.is_empty() {
        let common = most_common_bits(&summary.kept);
        let mut q = Map::new();
        q.insert("group_size".into(), 32.into());
        q.insert("bits".into(), common.into());
        q.insert("mode".into(), "affine".into());
        for (module, bits) in &quant_overrides {
            match bits {
                Some(b) if *b == common => {}
                Some(b) => {
                    q.insert(module.clone(), json!({"group_size": 32, "bits": b}));
                }
                None => {
                    q.insert(module.clone(), false.into());
                }
            }
        }
        cfg["quantization"] = Json::Object(q.clone());
        cfg["quantization_config"] = Json::Object(q);
    }
    let mut generation = Map::new();
    for key in ["bos_token_id", "eos_token_id", "pad_token_id"] {
        if let Some(v) = cfg.get(key) {
            generation.insert(key.into(), v.clone());
        }
    }
    let mut jsons: Vec<(&str, Json)> = Vec::new();
    if !generation.is_empty() {
        generation.insert("_from_model_config".into(), true.into());
        jsons.push(("generation_config.json", Json::Object(generation)));
    }
    jsons.insert(0, ("config.json", cfg));
    match tokenizer::hf_tokenizer(h)? {
        Ok((tok, tok_config)) => {
            jsons.push(("tokenizer.json", tok));
            jsons.push(("tokenizer_config.json", tok_config));
        }
        Err(reason) => summary.no_tokenizer = Some(reason),
    }

    // The directory's files as one set: all appear at the end, or none
    // does (and a directory made for them goes again).
    let made = NewDirs::create(out)?;
    let mut set = AtomicSet::new();
    let model = out.join("model.safetensors");
    let file = set.create(&model)?;
    crate::atomic::write_plan(&file, &plan, &opts.write, &())?;
    set.add(file)?;
    summary.files.push(model);
    for (name, value) in &jsons {
        let path = out.join(name);
        let file = set.create(&path)?;
        file.write_all_at(json_text(&path, value)?.as_bytes(), 0)?;
        set.add(file)?;
        summary.files.push(path);
    }
    set.commit(opts.write.sync)?;
    made.keep();
    Ok(summary)
}

/// The `torch_dtype` of config.json for a dtype.
fn torch_dtype(d: Dtype) -> &'static str {
    let d = match d {
        Dtype::F32 | Dtype::F16 | Dtype::F64 => d,
        _ => Dtype::BF16,
    };
    d.torch_name().unwrap_or_default()
}

fn most_common_bits(kept: &BTreeMap<String, u32>) -> u32 {
    let mut count: BTreeMap<u32, usize> = BTreeMap::new();
    for &b in kept.values() {
        *count.entry(b).or_default() += 1;
    }
    count
        .into_iter()
        .max_by_key(|&(b, n)| (n, std::cmp::Reverse(b)))
        .map_or(4, |(b, _)| b)
}

/// [`gguf_to_hf`] from a path.
///
/// # Errors
/// As [`GgufFile::open`] and [`gguf_to_hf`], naming the file.
pub fn convert_file(input: &Path, out: &Path, opts: &ToHfOptions) -> Result<ToHfSummary> {
    let file = GgufFile::open(input)?;
    gguf_to_hf(&file, out, opts).map_err(|e| e.at(input))
}
