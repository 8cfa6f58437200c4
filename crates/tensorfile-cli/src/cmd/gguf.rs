//! GGUF files in the `inspect`, `validate` and `convert` commands: the
//! hooks there call these when the input is GGUF (its first four bytes are
//! `GGUF`) or the output ends in `.gguf`.
//!
//! Untrusted text (metadata strings, keys, tensor names) is escaped before
//! it reaches a terminal: control and bidirectional-formatting characters
//! are shown as escapes.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value as Json};
use tensorfile::gguf::{Array, Endian, GgmlType, GgufFile, GgufHeader, Value};

use super::{out, Failure};

/// Whether `path` is a GGUF file (starts with the magic). Unreadable paths
/// are not: the command's own reader then reports why.
pub fn is_gguf(path: &Path) -> bool {
    path.is_file() && tensorfile::gguf::is_gguf(path).unwrap_or(false)
}

/// `s` with control and bidirectional-formatting characters escaped, for a
/// terminal.
pub fn esc(s: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
    };
    if !s.chars().any(hidden) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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
        other => other.to_json(0).to_string(),
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

/// `tensorfile inspect FILE.gguf [--json]`.
pub fn inspect(path: &Path, json_out: bool) -> Result<ExitCode, Failure> {
    let file = GgufFile::open(path)?;
    let h = file.header();
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
                    "value": kv.value.to_json(SHOWN),
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
            .map(|t| {
                json!({
                    "name": t.name,
                    "ggml_type": t.ggml_type.name(),
                    "dims": t.dims,
                    "shape": t.shape(),
                    "offset": t.offset,
                    "start": t.start,
                    "bytes": t.byte_len,
                })
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
    for t in h.tensors() {
        out(format_args!(
            "  {:<width$}  {:<7}  {:<22}  {:<22}  {:>12}  {}",
            esc(&t.name),
            t.ggml_type.name(),
            format!("{:?}", t.dims),
            format!("{:?}", t.shape()),
            t.byte_len,
            t.offset
        ));
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
