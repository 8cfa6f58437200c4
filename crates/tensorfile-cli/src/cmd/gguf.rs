//! GGUF files in the `inspect`, `validate` and `convert` commands: the
//! hooks there call these when the input is GGUF (`tensorfile::input`
//! says so from its first bytes) or the output ends in `.gguf`.
//!
//! Untrusted text (metadata strings, keys, tensor names) is escaped before
//! it reaches a terminal: control and bidirectional-formatting characters
//! are shown as escapes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value as Json};
use tensorfile::gguf::{
    Endian, GgmlType, GgufArray as Array, GgufFile, GgufHeader, GgufValue as Value,
};
use tensorfile::InputKind as Kind;

use super::{out, Failure};

/// `s` escaped for a terminal (the command line's one rule,
/// [`super::escape_text`]).
pub fn esc(s: &str) -> String {
    super::escape_text(s).into_owned()
}

/// A string quoted for a terminal: `"..."` with `"`, `\` and hidden
/// characters escaped.
fn quoted(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    esc(&q)
}

/// Arrays longer than this are summarized (a vocabulary, merges).
const SHOWN: usize = 16;

/// One value as text for `inspect`.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => {
            // Long strings (chat templates) show their start.
            let chars: Vec<char> = s.chars().collect();
            if chars.len() > 200 {
                let head: String = chars[..120].iter().collect();
                format!("{}... ({} bytes)", quoted(&head), s.len())
            } else {
                quoted(s)
            }
        }
        Value::Array(a) => show_array(a),
        Value::F32(x) => format!("{x:?}"),
        Value::F64(x) => format!("{x:?}"),
        other => other.json(0).to_string(),
    }
}

fn show_array(a: &Array) -> String {
    let n = a.len();
    let items: Vec<String> = (0..n.min(if n > SHOWN { 8 } else { n }))
        .filter_map(|i| a.get(i))
        .map(|v| show(&v))
        .collect();
    let more = if n > items.len() { ", ..." } else { "" };
    format!(
        "[{}{more}] ({n} x {})",
        items.join(", "),
        a.element_type().name()
    )
}

/// Per-type totals: tensors, parameters, bytes.
fn per_type(h: &GgufHeader) -> BTreeMap<GgmlType, (usize, u128, u64)> {
    let mut m: BTreeMap<GgmlType, (usize, u128, u64)> = BTreeMap::new();
    for t in h.tensors() {
        let e = m.entry(t.ggml_type).or_default();
        e.0 += 1;
        e.1 += u128::from(t.numel());
        e.2 += t.byte_len;
    }
    m
}

fn endian(h: &GgufHeader) -> &'static str {
    match h.endian() {
        Endian::Little => "little",
        Endian::Big => "big",
    }
}

/// The sha256 of a tensor's stored bytes, read in pieces.
fn digest(file: &GgufFile, t: &tensorfile::gguf::GgufTensorInfo) -> Result<String, Failure> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; (4 << 20).min(t.byte_len as usize)];
    let mut at = 0u64;
    while at < t.byte_len {
        let n = ((t.byte_len - at) as usize).min(buf.len());
        file.read_raw(t, at, &mut buf[..n])?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hex::encode(hasher.finalize()))
}

/// `tensorfile inspect FILE.gguf [--json] [--hash]` (`--hash`: each
/// tensor's sha256, of its bytes as stored).
pub fn inspect(path: &Path, json_out: bool, hash: bool) -> Result<ExitCode, Failure> {
    let file = GgufFile::open(path)?;
    let h = file.header();
    let hashes: Vec<Option<String>> = h
        .tensors()
        .iter()
        .map(|t| {
            if hash {
                digest(&file, t).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect::<Result<_, _>>()?;
    let parameters: u128 = h.tensors().iter().map(|t| u128::from(t.numel())).sum();
    let data_bytes: u64 = h.tensors().iter().map(|t| t.byte_len).sum();
    let types = per_type(h);
    if json_out {
        let metadata: Vec<Json> = h
            .kv()
            .iter()
            .map(|kv| {
                let mut v = json!({
                    "key": kv.key,
                    "type": kv.value.value_type().name(),
                    "value": kv.value.json(SHOWN),
                });
                if let Value::Array(a) = &kv.value {
                    v["element_type"] = a.element_type().name().into();
                    v["len"] = a.len().into();
                }
                v
            })
            .collect();
        let tensors: Vec<Json> = h
            .tensors()
            .iter()
            .zip(&hashes)
            .map(|(t, sha)| {
                let mut v = json!({
                    "name": t.name,
                    "ggml_type": t.ggml_type.name(),
                    "dims": t.dims,
                    "shape": t.shape(),
                    "offset": t.offset,
                    "start": t.start,
                    "bytes": t.byte_len,
                });
                if let Some(sha) = sha {
                    v["sha256"] = sha.clone().into();
                }
                v
            })
            .collect();
        let type_totals: BTreeMap<&str, Json> = types
            .iter()
            .map(|(t, (count, params, bytes))| {
                (
                    t.name(),
                    json!({
                        "tensors": count,
                        "parameters": params,
                        "bytes": bytes,
                        "bits_per_weight": t.bits_per_weight(),
                    }),
                )
            })
            .collect();
        out(json!({
            "file": path,
            "format": "gguf",
            "version": h.version(),
            "endianness": endian(h),
            "alignment": h.alignment(),
            "size": h.file_len(),
            "tensor_info_end": h.info_end(),
            "data_offset": h.data_offset(),
            "architecture": h.architecture(),
            "metadata": metadata,
            "tensors": tensors,
            "types": type_totals,
            "parameters": parameters,
            "data_bytes": data_bytes,
            "warnings": h.warnings(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    out(format_args!("file: {}", esc(&path.display().to_string())));
    out(format_args!(
        "format: GGUF v{}, {}-endian, alignment {}",
        h.version(),
        endian(h),
        h.alignment()
    ));
    out(format_args!(
        "size: {} bytes (metadata and tensor infos end at byte {}, data starts at byte {}, {data_bytes} bytes of tensors)",
        h.file_len(),
        h.info_end(),
        h.data_offset()
    ));
    out(format_args!("metadata: {} keys", h.kv().len()));
    for kv in h.kv() {
        out(format_args!(
            "  {}: {} = {}",
            esc(&kv.key),
            kv.value.value_type().name(),
            show(&kv.value)
        ));
    }
    out(format_args!("tensors: {}", h.tensors().len()));
    let width = h
        .tensors()
        .iter()
        .map(|t| esc(&t.name).chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 64);
    out(format_args!(
        "  {:<width$}  {:<7}  {:<22}  {:<22}  {:>12}  offset",
        "name", "type", "gguf dims", "shape", "bytes"
    ));
    for (t, sha) in h.tensors().iter().zip(&hashes) {
        let line = format!(
            "  {:<width$}  {:<7}  {:<22}  {:<22}  {:>12}  {}",
            esc(&t.name),
            t.ggml_type.name(),
            format!("{:?}", t.dims),
            format!("{:?}", t.shape()),
            t.byte_len,
            t.offset
        );
        match sha {
            Some(sha) => out(format_args!("{line}  sha256 {sha}")),
            None => out(line),
        }
    }
    out("types:");
    for (t, (count, params, bytes)) in &types {
        out(format_args!(
            "  {:<7}  {count} tensors, {params} parameters, {bytes} bytes, {} bits per weight",
            t.name(),
            t.bits_per_weight()
        ));
    }
    out(format_args!("parameters: {parameters}"));
    for w in h.warnings() {
        out(format_args!("warning: {}", esc(w)));
    }
    Ok(ExitCode::SUCCESS)
}

/// `tensorfile validate FILE.gguf [--json]`: prints one line (and any
/// warnings); returns whether the file is valid.
pub fn validate(path: &Path, json_out: bool) -> bool {
    let name = esc(&path.display().to_string());
    let (error, warnings) = match GgufFile::open(path) {
        Ok(f) => (None, f.header().warnings().to_vec()),
        Err(e) => (
            Some(super::one_line(
                e.detail() as &(dyn std::error::Error + 'static)
            )),
            Vec::new(),
        ),
    };
    if json_out {
        out(json!({
            "file": path,
            "format": "gguf",
            "valid": error.is_none(),
            "error": error,
            "warnings": warnings,
        }));
    } else {
        match &error {
            None => out(format_args!("{name}: ok")),
            Some(e) => out(format_args!("{name}: invalid: {}", esc(e))),
        }
        for w in &warnings {
            out(format_args!("{name}: warning: {}", esc(w)));
        }
    }
    error.is_none()
}

/// Options of `convert` that apply to GGUF only.
#[derive(clap::Args)]
pub struct GgufArgs {
    /// GGUF input: keep Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q5_K weights
    /// quantized, as MLX affine weights (groups of 32) that give the same
    /// values; other tensors are decoded to --dtype. For a Hugging Face
    /// directory or a .safetensors OUT (not .npz).
    #[arg(long)]
    keep_quant: bool,
    /// GGUF output: the type of the weights (f32, f16, bf16, q8_0, q4_0,
    /// q4_1, q5_0, q5_1, q4_k, q6_k); norms and other 1-D tensors stay F32.
    /// With --raw: every float tensor of 2 or more dimensions whose rows are
    /// whole blocks of the type, whatever its name; the others are written
    /// as F32 (integers as they are) and reported with why.
    #[arg(long = "type", value_name = "TYPE")]
    gguf_type: Option<String>,
    /// GGUF output: write the tensors as they are (names, shapes, no
    /// permutation) with --arch as general.architecture, for a model of no
    /// known architecture.
    #[arg(long)]
    raw: bool,
    /// GGUF output with --raw: general.architecture.
    #[arg(long, value_name = "NAME")]
    arch: Option<String>,
    /// GGUF output: tokenizer.ggml.pre, when the tokenizer's pre-tokenizer
    /// is not GPT-2's (llama.cpp's name for it: llama-bpe, qwen2, ...).
    #[arg(long, value_name = "NAME")]
    tokenizer_pre: Option<String>,
}

impl GgufArgs {
    fn given(&self) -> Option<&'static str> {
        [
            (self.keep_quant, "--keep-quant"),
            (self.gguf_type.is_some(), "--type"),
            (self.raw, "--raw"),
            (self.arch.is_some(), "--arch"),
            (self.tokenizer_pre.is_some(), "--tokenizer-pre"),
        ]
        .into_iter()
        .find(|(on, _)| *on)
        .map(|(_, flag)| flag)
    }

    /// Refuses these options for a conversion that involves no GGUF file.
    pub fn refuse_for(&self, input: &Path) -> Result<(), Failure> {
        match self.given() {
            Some(flag) => Err(super::Usage::failure(format_args!(
                "{flag} applies only to GGUF conversions; {} is not GGUF and OUT does not end in .gguf",
                input.display()
            ))),
            None => Ok(()),
        }
    }
}

/// Whether a conversion from `input` to `output` is a GGUF one: GGUF in, or
/// an output named `*.gguf`.
pub fn handles(kind: Kind, output: &Path) -> bool {
    kind == Kind::Gguf
        || output
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// What a GGUF input becomes, by OUT's name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GgufOut {
    /// A Hugging Face directory (any other name).
    HfDir,
    /// One safetensors file, the tensors as they are.
    Safetensors,
    /// One npz archive, the tensors as they are.
    Npz,
}

fn gguf_out_of(output: &Path) -> Result<GgufOut, Failure> {
    let ext = output
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    Ok(match ext.as_deref() {
        Some("safetensors") => GgufOut::Safetensors,
        Some("npz") => GgufOut::Npz,
        Some("npy") => {
            return Err(super::Usage::failure(format_args!(
                "{}: a GGUF file holds many tensors; write an .npz (or .safetensors) file",
                output.display()
            )))
        }
        _ => GgufOut::HfDir,
    })
}

/// `tensorfile convert IN OUT` when IN is GGUF (to a Hugging Face
/// directory, or as it is to a `.safetensors` / `.npz` file) or OUT ends
/// in `.gguf` (from a Hugging Face directory).
pub fn convert(
    kind: Kind,
    io: &super::FileArgs,
    dtype: Option<tensorfile::Dtype>,
    args: &GgufArgs,
    npz: &super::npz::NpzArgs,
) -> Result<ExitCode, Failure> {
    let raw_out = if kind == Kind::Gguf {
        gguf_out_of(&io.output)?
    } else {
        GgufOut::HfDir
    };
    if raw_out != GgufOut::Npz {
        npz.refuse_for(&io.output)?;
    }
    if io.max_shard_size.is_some() {
        return Err(super::Usage::failure(
            "--max-shard-size does not apply to GGUF conversions (one GGUF file, one model.safetensors)",
        ));
    }
    let gguf_out = io
        .output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    if kind == Kind::Gguf {
        if gguf_out {
            return Err(super::Usage::failure(format_args!(
                "{} is GGUF and so is OUT: convert GGUF to a Hugging Face directory, or a directory to GGUF",
                io.input.display()
            )));
        }
        if raw_out != GgufOut::HfDir {
            return to_raw(io, dtype, args, raw_out, npz.compress);
        }
        return to_hf(io, dtype, args);
    }
    from_hf(io, dtype, args)
}

/// Refuses the options that only writing GGUF takes.
fn refuse_write_options(io: &super::FileArgs, args: &GgufArgs) -> Result<(), Failure> {
    for (on, flag) in [
        (args.gguf_type.is_some(), "--type"),
        (args.raw, "--raw"),
        (args.arch.is_some(), "--arch"),
        (args.tokenizer_pre.is_some(), "--tokenizer-pre"),
    ] {
        if on {
            return Err(super::Usage::failure(format_args!(
                "{flag} applies when writing GGUF; {} is GGUF already",
                io.input.display()
            )));
        }
    }
    Ok(())
}

/// GGUF to one safetensors or npz file, the tensors as they are
/// ([`tensorfile::gguf::gguf_to_safetensors`]).
fn to_raw(
    io: &super::FileArgs,
    dtype: Option<tensorfile::Dtype>,
    args: &GgufArgs,
    kind: GgufOut,
    compress: bool,
) -> Result<ExitCode, Failure> {
    use tensorfile::gguf::{gguf_to_npz, gguf_to_safetensors};
    refuse_write_options(io, args)?;
    if kind == GgufOut::Npz && (dtype.is_some() || args.keep_quant) {
        return Err(super::Usage::failure(
            "--dtype and --keep-quant apply to GGUF to safetensors; an .npz OUT gets the tensors as they are",
        ));
    }
    if io.output.is_dir() {
        return Err(super::Usage::failure(format_args!(
            "{}: a directory; its name says a file",
            io.output.display()
        )));
    }
    super::refuse_input_as_output(&io.output, [&io.input])?;
    let file = GgufFile::open(&io.input)?;
    let summary = match kind {
        GgufOut::Npz => {
            let opts = tensorfile::npz::NpzWriteOptions::default()
                .with_compress(compress)
                .with_sync(!io.no_sync);
            gguf_to_npz(&file, &io.output, &opts)
        }
        _ => gguf_to_safetensors(
            &file,
            &io.output,
            dtype,
            args.keep_quant,
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
    if io.json {
        out(json!({
            "input": io.input,
            "output": io.output,
            "direction": "gguf-raw",
            "output_format": format,
            "architecture": file.header().architecture(),
            "tensors": summary.tensors,
            "decoded": summary.decoded,
            "kept_quantized": summary.kept,
            "metadata_kept": summary.kept_keys,
            "metadata_dropped": summary.dropped,
            "bytes": bytes,
        }));
    } else {
        out(format_args!(
            "{}: {format}, {} tensors as they are ({} decoded from quantized blocks{}), {} metadata keys kept, {bytes} bytes",
            esc(&io.output.display().to_string()),
            summary.tensors,
            summary.decoded,
            if args.keep_quant {
                format!(", {} kept quantized as MLX affine", summary.kept.len())
            } else {
                String::new()
            },
            summary.kept_keys,
        ));
        if !summary.dropped.is_empty() {
            let shown: Vec<String> = summary.dropped.iter().take(4).map(|k| esc(k)).collect();
            let more = if summary.dropped.len() > 4 {
                ", ..."
            } else {
                ""
            };
            let why = if kind == GgufOut::Npz {
                "npz has no metadata".to_string()
            } else {
                format!(
                    "arrays longer than {} elements",
                    tensorfile::gguf::MAX_ARRAY_SHOWN
                )
            };
            out(format_args!(
                "note: {} metadata keys not kept ({why}): {}{more}",
                summary.dropped.len(),
                shown.join(", ")
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn from_hf(
    io: &super::FileArgs,
    dtype: Option<tensorfile::Dtype>,
    args: &GgufArgs,
) -> Result<ExitCode, Failure> {
    use tensorfile::gguf::{hf_to_gguf, FromHfOptions, HF_TO_GGUF_TYPES};
    if args.keep_quant {
        return Err(super::Usage::failure("--keep-quant applies to GGUF input"));
    }
    if dtype.is_some() {
        return Err(super::Usage::failure(
            "--dtype applies to GGUF input; the weights of a GGUF output take --type",
        ));
    }
    if args.raw != args.arch.is_some() {
        return Err(super::Usage::failure(
            "--raw and --arch go together: --raw --arch NAME writes the tensors as they are",
        ));
    }
    let ggml_type = match &args.gguf_type {
        None => GgmlType::F16,
        Some(name) => GgmlType::from_name(name)
            .filter(|t| HF_TO_GGUF_TYPES.contains(t))
            .ok_or_else(|| {
                super::Usage::failure(format_args!(
                    "--type {}: not one of {}",
                    esc(name),
                    HF_TO_GGUF_TYPES.map(|t| t.name().to_lowercase()).join(", ")
                ))
            })?,
    };
    let opts = FromHfOptions::default()
        .with_ggml_type(ggml_type)
        .with_raw(args.arch.clone().filter(|_| args.raw))
        .with_tokenizer_pre(args.tokenizer_pre.clone())
        .with_sync(!io.no_sync);
    let s = hf_to_gguf(&io.input, &io.output, &opts).map_err(|e| e.at(&io.input))?;
    if io.json {
        out(json!({
            "input": io.input,
            "output": io.output,
            "direction": "hf-to-gguf",
            "architecture": s.arch,
            "type": ggml_type.name(),
            "tensor_types": s.types,
            "fallbacks": s.fallbacks.iter().map(|(n, t)| json!({"tensor": n, "type": t.name()})).collect::<Vec<_>>(),
            "skipped": s.skipped,
            "not_converted": s.not_converted.iter().map(|(n, t, why)| json!({"tensor": n, "type": t.name(), "reason": why})).collect::<Vec<_>>(),
            "tokenizer_not_written": s.no_tokenizer,
            "bytes": s.bytes,
        }));
    } else {
        let types: Vec<String> = s.types.iter().map(|(t, n)| format!("{n} {t}")).collect();
        out(format_args!(
            "{}: GGUF {} ({}), {} bytes",
            esc(&io.output.display().to_string()),
            esc(&s.arch),
            types.join(", "),
            s.bytes
        ));
        let mut by_type: BTreeMap<GgmlType, Vec<&str>> = BTreeMap::new();
        for (n, t) in &s.fallbacks {
            by_type.entry(*t).or_default().push(n);
        }
        for (t, names) in by_type {
            let shown: Vec<String> = names.iter().take(4).map(|n| esc(n)).collect();
            let more = if names.len() > 4 { ", ..." } else { "" };
            out(format_args!(
                "note: {} tensors written as {t}, their rows not being whole {ggml_type} blocks: {}{more}",
                names.len(),
                shown.join(", ")
            ));
        }
        if !s.not_converted.is_empty() {
            let shown: Vec<String> = s
                .not_converted
                .iter()
                .take(8)
                .map(|(n, t, why)| format!("{} as {t} ({why})", esc(n)))
                .collect();
            let more = if s.not_converted.len() > 8 {
                ", ..."
            } else {
                ""
            };
            out(format_args!(
                "note: {} tensors not written as {ggml_type}: {}{more}",
                s.not_converted.len(),
                shown.join(", ")
            ));
        }
        if let Some(reason) = &s.no_tokenizer {
            out(format_args!("note: no tokenizer written: {}", esc(reason)));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn to_hf(
    io: &super::FileArgs,
    dtype: Option<tensorfile::Dtype>,
    args: &GgufArgs,
) -> Result<ExitCode, Failure> {
    use tensorfile::gguf::{gguf_file_to_hf, ToHfOptions};
    refuse_write_options(io, args)?;
    if io.output.is_file() {
        return Err(super::Usage::failure(format_args!(
            "{}: converting GGUF writes a Hugging Face directory, and this is a file",
            io.output.display()
        )));
    }
    let opts = ToHfOptions::default()
        .with_dtype(dtype.unwrap_or(tensorfile::Dtype::BF16))
        .with_keep_quant(args.keep_quant)
        .with_write(io.write_options());
    let summary = gguf_file_to_hf(&io.input, &io.output, &opts)?;
    let files: Vec<String> = summary
        .files
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    if io.json {
        out(json!({
            "input": io.input,
            "output": io.output,
            "direction": "gguf-to-hf",
            "architecture": summary.arch.gguf_name(),
            "dtype": opts.dtype.name(),
            "tensors": summary.tensors,
            "decoded": summary.decoded,
            "kept_quantized": summary.kept,
            "f32_scales": summary.f32_scales,
            "files": files,
            "tokenizer_not_written": summary.no_tokenizer,
        }));
    } else {
        let kept = if args.keep_quant {
            format!(
                ", {} kept quantized as MLX affine ({} with F32 scales)",
                summary.kept.len(),
                summary.f32_scales
            )
        } else {
            String::new()
        };
        out(format_args!(
            "{}: {} {} tensors ({} decoded from quantized blocks{kept}), {}; wrote {}",
            esc(&io.output.display().to_string()),
            summary.tensors,
            summary.arch,
            summary.decoded,
            opts.dtype,
            files.join(", ")
        ));
        if let Some(reason) = &summary.no_tokenizer {
            out(format_args!("note: no tokenizer.json: {}", esc(reason)));
        }
    }
    Ok(ExitCode::SUCCESS)
}
