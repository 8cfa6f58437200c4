//! GGUF files in the `inspect` command (its hook calls this when the
//! input is GGUF), and the GGUF options of `convert`.
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

use super::words::{bytes, count, counted, plural, table, Align};
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
        "size: {}; metadata and tensor infos end at byte {}, data starts at byte {}, {} of tensors",
        bytes(h.file_len()),
        h.info_end(),
        h.data_offset(),
        bytes(data_bytes)
    ));
    out(format_args!(
        "metadata: {}",
        plural(h.kv().len() as u64, "key")
    ));
    for kv in h.kv() {
        out(format_args!(
            "  {}: {} = {}",
            esc(&kv.key),
            kv.value.value_type().name(),
            show(&kv.value)
        ));
    }
    out(format_args!("tensors: {}", h.tensors().len()));
    let mut rows = vec![["name", "type", "gguf dims", "shape", "bytes", "offset"]
        .map(String::from)
        .to_vec()];
    for (t, sha) in h.tensors().iter().zip(&hashes) {
        let mut row = vec![
            esc(&t.name),
            t.ggml_type.name().to_string(),
            format!("{:?}", t.dims),
            format!("{:?}", t.shape()),
            t.byte_len.to_string(),
            t.offset.to_string(),
        ];
        if let Some(sha) = sha {
            row.push(format!("sha256 {sha}"));
        }
        rows.push(row);
    }
    let align = [
        Align::Left,
        Align::Left,
        Align::Left,
        Align::Left,
        Align::Right,
        Align::Right,
    ];
    for line in table(&rows, &align) {
        out(format_args!("  {line}"));
    }
    out("types:");
    let rows: Vec<Vec<String>> = types
        .iter()
        .map(|(t, (tensors, params, size))| {
            vec![
                t.name().to_string(),
                plural(*tensors as u64, "tensor"),
                counted(*params, "parameter"),
                bytes(*size),
                format!("{} bits per weight", t.bits_per_weight()),
            ]
        })
        .collect();
    for line in table(
        &rows,
        &[Align::Left, Align::Right, Align::Right, Align::Right],
    ) {
        out(format_args!("  {line}"));
    }
    out(format_args!("parameters: {}", count(parameters)));
    for w in h.warnings() {
        out(format_args!("warning: {}", esc(w)));
    }
    Ok(ExitCode::SUCCESS)
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
    /// These options as the operation's request takes them.
    pub fn options(&self) -> tensorfile::ops::convert::GgufOptions {
        tensorfile::ops::convert::GgufOptions {
            keep_quant: self.keep_quant,
            ggml_type: self.gguf_type.clone(),
            raw: self.raw,
            arch: self.arch.clone(),
            tokenizer_pre: self.tokenizer_pre.clone(),
        }
    }

    /// Whether GGUF quantized weights are kept quantized.
    pub fn keep_quant(&self) -> bool {
        self.keep_quant
    }
}
