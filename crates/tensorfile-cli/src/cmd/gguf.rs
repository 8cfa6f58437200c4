//! GGUF files in the `inspect` command (the text of
//! [`tensorfile_ops::inspect`]'s GGUF description), and the GGUF options
//! of `convert`.
//!
//! Untrusted text (metadata strings, keys, tensor names) is escaped before
//! it reaches a terminal: control and bidirectional-formatting characters
//! are shown as escapes.

use tensorfile::gguf::{GgufArray as Array, GgufHeader, GgufValue as Value};
use tensorfile_ops::inspect::GgufDescription;

use super::out;
use super::words::{bytes, count, counted, plural, table, Align};

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

/// A GGUF file's description, as text (the header shows the values).
pub fn print(d: &GgufDescription, h: &GgufHeader) {
    out(format_args!("file: {}", esc(&d.file)));
    out(format_args!(
        "format: GGUF v{}, {}-endian, alignment {}",
        d.version, d.endianness, d.alignment
    ));
    out(format_args!(
        "size: {}; metadata and tensor infos end at byte {}, data starts at byte {}, {} of tensors",
        bytes(d.size),
        d.tensor_info_end,
        d.data_offset,
        bytes(d.data_bytes)
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
    out(format_args!("tensors: {}", d.tensors.len()));
    let mut rows = vec![["name", "type", "gguf dims", "shape", "bytes", "offset"]
        .map(String::from)
        .to_vec()];
    for t in &d.tensors {
        let mut row = vec![
            esc(&t.name),
            t.ggml_type.clone(),
            format!("{:?}", t.dims),
            format!("{:?}", t.shape),
            t.bytes.to_string(),
            t.offset.to_string(),
        ];
        if let Some(sha) = &t.sha256 {
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
    // In ggml's type order (F32, F16, Q4_0, ...), not the JSON's name order.
    let ids: std::collections::BTreeSet<_> = h.tensors().iter().map(|t| t.ggml_type).collect();
    let rows: Vec<Vec<String>> = ids
        .iter()
        .filter_map(|id| d.types.get(id.name()).map(|t| (id.name(), t)))
        .map(|(name, t)| {
            vec![
                name.to_string(),
                plural(t.tensors, "tensor"),
                counted(t.parameters, "parameter"),
                bytes(t.bytes),
                format!("{} bits per weight", t.bits_per_weight),
            ]
        })
        .collect();
    for line in table(
        &rows,
        &[Align::Left, Align::Right, Align::Right, Align::Right],
    ) {
        out(format_args!("  {line}"));
    }
    out(format_args!("parameters: {}", count(d.parameters)));
    for w in &d.warnings {
        out(format_args!("warning: {}", esc(w)));
    }
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
    pub fn options(&self) -> tensorfile_ops::convert::GgufOptions {
        tensorfile_ops::convert::GgufOptions {
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
