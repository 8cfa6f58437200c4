//! config.json and GGUF metadata, both ways, for the architectures of
//! [`Arch`].
//!
//! To GGUF: the keys llama.cpp's converter writes and llama.cpp reads
//! (`general.architecture`, `<arch>.context_length`, `embedding_length`,
//! `block_count`, `feed_forward_length`, `attention.head_count`,
//! `attention.head_count_kv`, `attention.layer_norm_rms_epsilon`,
//! `rope.freq_base`, `attention.key_length` / `value_length`,
//! `rope.dimension_count`, `vocab_size`, `general.file_type`,
//! `general.quantization_version`, ...), with the converter's types
//! (UINT32 counts, FLOAT32 floats) and in its order.
//!
//! From GGUF: the config.json transformers builds for such a file
//! (`architectures`, `model_type`, the sizes, `rms_norm_eps`,
//! `rope_theta`, `head_dim`, `tie_word_embeddings`, special token ids).
//! FLOAT32 values are written as the shortest decimal that gives the same
//! f32 (1e-05, not 9.999999747378752e-06).

use serde_json::{json, Map, Value as Json};

use super::error::GgufError;
use super::names::Arch;
use super::read::GgufHeader;
use super::value::Value;

fn key_error(key: &str, problem: impl Into<String>) -> GgufError {
    GgufError::Key {
        key: key.to_string(),
        problem: problem.into(),
    }
}

/// The f64 nearest the shortest decimal that rounds to `x` as an f32.
pub(crate) fn f32_decimal(x: f32) -> f64 {
    format!("{x:e}").parse().unwrap_or(f64::from(x))
}

/// A metadata key's unsigned integer value.
fn u64_key(h: &GgufHeader, key: &str) -> Result<Option<u64>, GgufError> {
    match h.get(key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            key_error(
                key,
                format!("must be a non-negative integer, not {}", v.value_type()),
            )
        }),
    }
}

fn required(h: &GgufHeader, key: &str) -> Result<u64, GgufError> {
    u64_key(h, key)?.ok_or_else(|| key_error(key, "missing (config.json needs it)"))
}

fn f32_key(h: &GgufHeader, key: &str) -> Result<Option<f64>, GgufError> {
    match h.get(key) {
        None => Ok(None),
        Some(Value::F32(x)) => Ok(Some(f32_decimal(*x))),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| key_error(key, format!("must be a number, not {}", v.value_type()))),
    }
}

/// The heads of a GGUF model: (`n_head`, `n_head_kv`).
///
/// # Errors
///
/// [`GgufError`] naming the key when `{arch}.attention.head_count` is
/// missing, either count is not an unsigned integer, or either is zero.
pub fn heads(h: &GgufHeader, arch: Arch) -> Result<(u64, u64), GgufError> {
    let a = arch.gguf_name();
    let n_head = required(h, &format!("{a}.attention.head_count"))?;
    let n_head_kv = u64_key(h, &format!("{a}.attention.head_count_kv"))?.unwrap_or(n_head);
    if n_head == 0 || n_head_kv == 0 {
        return Err(key_error(
            &format!("{a}.attention.head_count"),
            "zero heads",
        ));
    }
    Ok((n_head, n_head_kv))
}

/// What config.json needs besides the metadata.
#[derive(Debug, Clone)]
pub struct HfConfigParts {
    /// The vocabulary size (rows of `token_embd.weight`).
    pub vocab_size: u64,
    /// Whether the output layer is the embedding (no `output.weight`).
    pub tied: bool,
    /// The dtype name for `torch_dtype` (`bfloat16`, `float32`, ...).
    pub torch_dtype: &'static str,
    /// Whether the attention projections have biases.
    pub attention_bias: bool,
}

/// The config.json of a GGUF model of `arch`.
///
/// # Errors
/// A key config.json needs is missing or has the wrong type.
pub(crate) fn hf_config(
    h: &GgufHeader,
    arch: Arch,
    parts: &HfConfigParts,
) -> Result<Json, GgufError> {
    let a = arch.gguf_name();
    let k = |s: &str| format!("{a}.{s}");
    let hidden = required(h, &k("embedding_length"))?;
    let (n_head, n_head_kv) = heads(h, arch)?;
    let head_dim = u64_key(h, &k("attention.key_length"))?.unwrap_or(hidden / n_head);
    let mut c = Map::new();
    c.insert("architectures".into(), json!([arch.hf_class()]));
    c.insert("model_type".into(), arch.model_type().into());
    c.insert("hidden_size".into(), hidden.into());
    c.insert(
        "intermediate_size".into(),
        required(h, &k("feed_forward_length"))?.into(),
    );
    c.insert(
        "num_hidden_layers".into(),
        required(h, &k("block_count"))?.into(),
    );
    c.insert("num_attention_heads".into(), n_head.into());
    c.insert("num_key_value_heads".into(), n_head_kv.into());
    c.insert("head_dim".into(), head_dim.into());
    c.insert(
        "max_position_embeddings".into(),
        required(h, &k("context_length"))?.into(),
    );
    let eps = f32_key(h, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-6);
    c.insert("rms_norm_eps".into(), eps.into());
    let theta = f32_key(h, &k("rope.freq_base"))?.unwrap_or(10000.0);
    c.insert("rope_theta".into(), theta.into());
    c.insert("vocab_size".into(), parts.vocab_size.into());
    c.insert("tie_word_embeddings".into(), parts.tied.into());
    c.insert("torch_dtype".into(), parts.torch_dtype.into());
    c.insert("use_cache".into(), true.into());
    c.insert("initializer_range".into(), 0.02.into());
    c.insert("attention_dropout".into(), 0.0.into());
    let rope_scaling = match h.get(&k("rope.scaling.type")).and_then(Value::as_str) {
        None | Some("none") => Json::Null,
        Some("linear") => {
            let factor = f32_key(h, &k("rope.scaling.factor"))?.ok_or_else(|| {
                key_error(&k("rope.scaling.factor"), "missing for linear scaling")
            })?;
            json!({"rope_type": "linear", "factor": factor})
        }
        Some(other) => {
            return Err(key_error(
                &k("rope.scaling.type"),
                format!("{other:?} scaling is not converted here (only linear)"),
            ))
        }
    };
    c.insert("rope_scaling".into(), rope_scaling);
    match arch {
        Arch::Llama => {
            c.insert("hidden_act".into(), "silu".into());
            c.insert("attention_bias".into(), parts.attention_bias.into());
            c.insert("mlp_bias".into(), false.into());
            c.insert("pretraining_tp".into(), 1.into());
        }
        Arch::Qwen2 | Arch::Qwen3 => {
            c.insert("hidden_act".into(), "silu".into());
            c.insert("use_sliding_window".into(), false.into());
            c.insert("sliding_window".into(), Json::Null);
            if arch == Arch::Qwen3 {
                c.insert("attention_bias".into(), parts.attention_bias.into());
            }
        }
        Arch::Gemma => {
            c.insert("hidden_act".into(), "gelu_pytorch_tanh".into());
            c.insert("hidden_activation".into(), "gelu_pytorch_tanh".into());
            c.insert("attention_bias".into(), parts.attention_bias.into());
        }
        Arch::Phi3 => {
            c.insert("hidden_act".into(), "silu".into());
            let original = u64_key(h, &k("rope.scaling.original_context_length"))?;
            if let Some(o) = original {
                c.insert("original_max_position_embeddings".into(), o.into());
            }
            let rot = u64_key(h, &k("rope.dimension_count"))?.unwrap_or(head_dim);
            let factor = (rot * n_head) as f64 / hidden.max(1) as f64;
            c.insert("partial_rotary_factor".into(), factor.into());
            let window = u64_key(h, &k("attention.sliding_window"))?.filter(|&w| w > 0);
            c.insert(
                "sliding_window".into(),
                window.map_or(Json::Null, Json::from),
            );
        }
    }
    for (typ, key) in [
        ("bos", "tokenizer.ggml.bos_token_id"),
        ("eos", "tokenizer.ggml.eos_token_id"),
        ("pad", "tokenizer.ggml.padding_token_id"),
    ] {
        if let Some(id) = u64_key(h, key)? {
            c.insert(format!("{typ}_token_id"), id.into());
        }
    }
    Ok(Json::Object(c))
}

/// What a config.json says, read for the conversion to GGUF.
#[derive(Debug, Clone)]
pub struct HfModel {
    /// The architecture.
    pub arch: Arch,
    /// `num_attention_heads`.
    pub n_head: u64,
    /// `num_key_value_heads` (or `n_head`).
    pub n_head_kv: u64,
    /// `vocab_size`.
    pub vocab_size: u64,
}

fn config_u64(c: &Map<String, Json>, key: &str) -> Result<Option<u64>, GgufError> {
    match c.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| GgufError::Input {
            file: "config.json".into(),
            problem: format!("{key} must be a non-negative integer, not {v}"),
        }),
    }
}

fn config_required(c: &Map<String, Json>, key: &str) -> Result<u64, GgufError> {
    config_u64(c, key)?.ok_or_else(|| GgufError::Input {
        file: "config.json".into(),
        problem: format!("{key} is missing"),
    })
}

fn config_f64(c: &Map<String, Json>, key: &str) -> Result<Option<f64>, GgufError> {
    match c.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| GgufError::Input {
            file: "config.json".into(),
            problem: format!("{key} must be a number, not {v}"),
        }),
    }
}

/// Reads the architecture and head counts of a config.json.
///
/// # Errors
/// No `model_type`, one this library does not convert, or missing sizes.
pub(crate) fn hf_model(c: &Map<String, Json>) -> Result<HfModel, GgufError> {
    let model_type =
        c.get("model_type")
            .and_then(Json::as_str)
            .ok_or_else(|| GgufError::Input {
                file: "config.json".into(),
                problem: "model_type is missing".into(),
            })?;
    let arch = Arch::from_model_type(model_type).ok_or_else(|| GgufError::Architecture {
        arch: model_type.to_string(),
        problem: "not one this library converts to GGUF (llama, mistral, qwen2, qwen3, gemma, phi3); use --raw to write the tensors as they are".into(),
    })?;
    let n_head = config_required(c, "num_attention_heads")?;
    let n_head_kv = config_u64(c, "num_key_value_heads")?.unwrap_or(n_head);
    Ok(HfModel {
        arch,
        n_head,
        n_head_kv,
        vocab_size: config_required(c, "vocab_size")?,
    })
}

/// The rope parameters of a config.json, read as llama.cpp's converter
/// reads them (`conversion/base.py`, `TextModel.__init__`): transformers
/// 5's `rope_parameters` object, or transformers 4's `rope_scaling`, with
/// the top-level keys of transformers 4 (`rope_theta`, `type`,
/// `partial_rotary_factor`, `original_max_position_embeddings`) filling
/// what it lacks; the `full_attention` entry when there is one.
pub(crate) fn rope_parameters(c: &Map<String, Json>) -> Map<String, Json> {
    let mut rope = match c.get("rope_parameters").or_else(|| c.get("rope_scaling")) {
        Some(Json::Object(r)) => r.clone(),
        _ => Map::new(),
    };
    if !rope.contains_key("full_attention") && !rope.contains_key("sliding_attention") {
        let theta = ["rope_theta", "rotary_emb_base"]
            .iter()
            .find_map(|k| c.get(*k).filter(|v| !v.is_null()));
        if let (false, Some(t)) = (rope.contains_key("rope_theta"), theta) {
            rope.insert("rope_theta".into(), t.clone());
        }
        if let (false, Some(t)) = (rope.contains_key("rope_type"), rope.get("type").cloned()) {
            rope.insert("rope_type".into(), t);
        }
        for key in ["partial_rotary_factor", "original_max_position_embeddings"] {
            if let (false, Some(v)) = (rope.contains_key(key), c.get(key).filter(|v| !v.is_null()))
            {
                rope.insert(key.into(), v.clone());
            }
        }
    }
    match rope.get("full_attention") {
        Some(Json::Object(full)) => full.clone(),
        _ => rope,
    }
}

/// A number of the rope parameters.
fn rope_f64(r: &Map<String, Json>, key: &str) -> Result<Option<f64>, GgufError> {
    match r.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| GgufError::Input {
            file: "config.json".into(),
            problem: format!("rope_parameters.{key} must be a number, not {v}"),
        }),
    }
}

/// The rope type of the rope parameters (`default` when none is given).
fn rope_type(r: &Map<String, Json>) -> String {
    r.get("rope_type")
        .and_then(Json::as_str)
        .unwrap_or("default")
        .to_ascii_lowercase()
}

/// The rope scaling keys the converter writes for `r` (the output of
/// [`rope_parameters`]): linear's factor; yarn's factor, original context
/// and the optional extrapolation/attention factors and betas; nothing
/// for `default` or `llama3` (whose factors are the `rope_freqs.weight`
/// tensor, [`llama3_rope_factors`], Llama only). The kinds the converter
/// writes nothing or too little for (`dynamic`, `longrope` / `su`, any
/// other) are refused rather than written as a model that runs wrong.
fn rope_keys(
    r: &Map<String, Json>,
    arch: Arch,
    out: &mut Vec<(String, Value)>,
) -> Result<(), GgufError> {
    let a = arch.gguf_name();
    let k = |s: &str| format!("{a}.rope.scaling.{s}");
    let kind = rope_type(r);
    let factor = rope_f64(r, "factor")?;
    match (kind.as_str(), factor) {
        ("default", _) => {}
        ("llama3", _) if arch == Arch::Llama => {}
        // The converter writes no scaling for a linear or yarn type
        // without a factor.
        ("linear" | "yarn", None) => {}
        ("linear", Some(f)) => {
            out.push((k("type"), Value::String("linear".into())));
            out.push((k("factor"), Value::F32(f as f32)));
        }
        ("yarn", Some(f)) => {
            let original = r
                .get("original_max_position_embeddings")
                .and_then(Json::as_u64)
                .and_then(|o| u32::try_from(o).ok())
                .ok_or_else(|| GgufError::Input {
                    file: "config.json".into(),
                    problem: "yarn rope scaling needs original_max_position_embeddings (a UINT32)"
                        .into(),
                })?;
            out.push((k("type"), Value::String("yarn".into())));
            out.push((k("factor"), Value::F32(f as f32)));
            out.push((k("original_context_length"), Value::U32(original)));
            // The converter's names, then its GGUF keys.
            for (field, alt, key) in [
                ("extrapolation_factor", None, "yarn_ext_factor"),
                ("attention_factor", Some("attn_factor"), "yarn_attn_factor"),
                ("beta_fast", None, "yarn_beta_fast"),
                ("beta_slow", None, "yarn_beta_slow"),
            ] {
                let v = match rope_f64(r, field)? {
                    Some(v) => Some(v),
                    None => match alt {
                        Some(alt) => rope_f64(r, alt)?,
                        None => None,
                    },
                };
                if let Some(v) = v {
                    out.push((k(key), Value::F32(v as f32)));
                }
            }
        }
        (other, _) => {
            return Err(GgufError::Input {
                file: "config.json".into(),
                problem: format!(
                    "rope scaling of type {other:?} is not converted to {a} here (default, linear, yarn{})",
                    if arch == Arch::Llama { ", llama3" } else { "" }
                ),
            })
        }
    }
    Ok(())
}

/// Llama 3's rope frequency factors, the `rope_freqs.weight` the converter
/// adds for a `llama3` rope type (`LlamaModel.generate_extra_tensors`),
/// computed in f32 step for step as torch computes them there; `None` for
/// any other rope type or architecture.
///
/// # Errors
/// A rope parameter that is not a number.
pub(crate) fn llama3_rope_factors(
    c: &Map<String, Json>,
    m: &HfModel,
) -> Result<Option<Vec<f32>>, GgufError> {
    let r = rope_parameters(c);
    if m.arch != Arch::Llama || rope_type(&r) != "llama3" {
        return Ok(None);
    }
    let base = rope_f64(&r, "rope_theta")?.unwrap_or(10000.0) as f32;
    let dim = match config_u64(c, "head_dim")? {
        Some(d) => d,
        None => config_required(c, "hidden_size")? / m.n_head.max(1),
    };
    let factor = rope_f64(&r, "factor")?.unwrap_or(8.0) as f32;
    let low = rope_f64(&r, "low_freq_factor")?.unwrap_or(1.0) as f32;
    let high = rope_f64(&r, "high_freq_factor")?.unwrap_or(4.0) as f32;
    let old_context = rope_f64(&r, "original_max_position_embeddings")?.unwrap_or(8192.0) as f32;
    // The bounds are Python floats; compared with an f32 tensor, they are
    // cast to f32 (torch's type promotion).
    let (low_f64, high_f64, old_f64) = (f64::from(low), f64::from(high), f64::from(old_context));
    let low_wavelen = (old_f64 / low_f64) as f32;
    let high_wavelen = (old_f64 / high_f64) as f32;
    let two_pi = std::f64::consts::PI as f32 * 2.0;
    let dim_f = dim as f32;
    let factors = (0..dim)
        .step_by(2)
        .map(|i| {
            let freq = 1.0 / base.powf(i as f32 / dim_f);
            // `2 * math.pi / freq`: torch's reciprocal times the scalar.
            let wavelen = (1.0 / freq) * two_pi;
            if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = ((1.0 / wavelen) * old_context - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect();
    Ok(Some(factors))
}

/// The architecture keys of a config.json, in the converter's order, up
/// to (not including) `general.file_type`; [`arch_tail_keys`] gives the
/// ones after it.
///
/// # Errors
/// A size config.json lacks, or a rope scaling not converted here.
pub(crate) fn arch_keys(
    c: &Map<String, Json>,
    m: &HfModel,
) -> Result<Vec<(String, Value)>, GgufError> {
    let a = m.arch.gguf_name();
    let k = |s: &str| format!("{a}.{s}");
    let u32v = |key: &str, v: u64| -> Result<Value, GgufError> {
        u32::try_from(v)
            .map(Value::U32)
            .map_err(|_| GgufError::Input {
                file: "config.json".into(),
                problem: format!("{key} {v} does not fit UINT32"),
            })
    };
    let hidden = config_required(c, "hidden_size")?;
    let layers = config_required(c, "num_hidden_layers")?;
    let ffn = config_required(c, "intermediate_size")?;
    let ctx = config_required(c, "max_position_embeddings")?;
    let eps = config_f64(c, "rms_norm_eps")?;
    let rope = rope_parameters(c);
    let theta = rope_f64(&rope, "rope_theta")?;
    let head_dim = config_u64(c, "head_dim")?;
    let mut out: Vec<(String, Value)> = Vec::new();
    // The sizes every architecture writes: (key, config field, value).
    let sizes = [
        ("context_length", "max_position_embeddings", ctx),
        ("embedding_length", "hidden_size", hidden),
        ("block_count", "num_hidden_layers", layers),
        ("feed_forward_length", "intermediate_size", ffn),
        ("attention.head_count", "num_attention_heads", m.n_head),
        (
            "attention.head_count_kv",
            "num_key_value_heads",
            m.n_head_kv,
        ),
    ];
    // Those of `keys`, in that order (each architecture's converter has
    // its own).
    let put_sizes = |out: &mut Vec<(String, Value)>, keys: &[&str]| -> Result<(), GgufError> {
        for key in keys {
            if let Some(&(_, field, v)) = sizes.iter().find(|s| s.0 == *key) {
                out.push((k(key), u32v(field, v)?));
            }
        }
        Ok(())
    };
    let required_eps = || {
        eps.map(|e| Value::F32(e as f32))
            .ok_or_else(|| GgufError::Input {
                file: "config.json".into(),
                problem: "rms_norm_eps is missing".into(),
            })
    };
    let put_head_lengths = |out: &mut Vec<(String, Value)>, hd: u64| -> Result<(), GgufError> {
        out.push((k("attention.key_length"), u32v("head_dim", hd)?));
        out.push((k("attention.value_length"), u32v("head_dim", hd)?));
        Ok(())
    };
    let eps_key = k("attention.layer_norm_rms_epsilon");
    match m.arch {
        Arch::Gemma => {
            put_sizes(
                &mut out,
                &[
                    "context_length",
                    "embedding_length",
                    "block_count",
                    "feed_forward_length",
                    "attention.head_count",
                    "attention.head_count_kv",
                ],
            )?;
            out.push((eps_key, required_eps()?));
            put_head_lengths(&mut out, head_dim.unwrap_or(hidden / m.n_head.max(1)))?;
        }
        Arch::Phi3 => {
            let original = match rope.get("original_max_position_embeddings") {
                None | Some(Json::Null) => ctx,
                Some(v) => v.as_u64().ok_or_else(|| GgufError::Input {
                    file: "config.json".into(),
                    problem: format!(
                        "original_max_position_embeddings must be a non-negative integer, not {v}"
                    ),
                })?,
            };
            let rot = rope_f64(&rope, "partial_rotary_factor")?.unwrap_or(1.0);
            let rope_dims = ((rot * hidden as f64) as u64) / m.n_head.max(1);
            put_sizes(&mut out, &["context_length"])?;
            out.push((
                k("rope.scaling.original_context_length"),
                u32v("original_max_position_embeddings", original)?,
            ));
            put_sizes(
                &mut out,
                &[
                    "embedding_length",
                    "feed_forward_length",
                    "block_count",
                    "attention.head_count",
                    "attention.head_count_kv",
                ],
            )?;
            out.push((eps_key, required_eps()?));
            out.push((
                k("rope.dimension_count"),
                u32v("rope dimensions", rope_dims)?,
            ));
            let base = theta.unwrap_or(10000.0) as f32;
            out.push((k("rope.freq_base"), Value::F32(base)));
            if rope.get("long_factor").is_some() {
                return Err(GgufError::Input {
                    file: "config.json".into(),
                    problem: "Phi-3 long-context rope factors are not converted here".into(),
                });
            }
        }
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            put_sizes(
                &mut out,
                &[
                    "block_count",
                    "context_length",
                    "embedding_length",
                    "feed_forward_length",
                    "attention.head_count",
                    "attention.head_count_kv",
                ],
            )?;
            rope_keys(&rope, m.arch, &mut out)?;
            if let Some(t) = theta {
                out.push((k("rope.freq_base"), Value::F32(t as f32)));
            }
            if let Some(e) = eps {
                out.push((eps_key, Value::F32(e as f32)));
            }
            if let Some(hd) = head_dim {
                put_head_lengths(&mut out, hd)?;
            }
        }
    }
    Ok(out)
}

/// The architecture keys the converter writes after `general.file_type`.
///
/// # Errors
/// A size config.json lacks.
pub(crate) fn arch_tail_keys(
    c: &Map<String, Json>,
    m: &HfModel,
) -> Result<Vec<(String, Value)>, GgufError> {
    let a = m.arch.gguf_name();
    let mut out = Vec::new();
    match m.arch {
        Arch::Llama => {
            // The converter writes the vocabulary size for Llama only
            // (`LlamaModel.set_gguf_parameters`).
            let vocab = u32::try_from(m.vocab_size).unwrap_or(u32::MAX);
            out.push((format!("{a}.vocab_size"), Value::U32(vocab)));
            let hidden = config_required(c, "hidden_size")?;
            let rope_dim = config_u64(c, "head_dim")?.unwrap_or(hidden / m.n_head.max(1));
            out.push((
                format!("{a}.rope.dimension_count"),
                Value::U32(u32::try_from(rope_dim).unwrap_or(u32::MAX)),
            ));
        }
        Arch::Phi3 => {
            let window = config_u64(c, "sliding_window")?.unwrap_or(0);
            out.push((
                format!("{a}.attention.sliding_window"),
                Value::U32(u32::try_from(window).unwrap_or(u32::MAX)),
            ));
        }
        _ => {}
    }
    Ok(out)
}

/// gguf-py's title of a model directory's name (`hf_llama_tiny` ->
/// `Hf_Llama_Tiny`): each lower-case word title-cased as Python's
/// `str.title` does, unless it is a version or starts with a digit.
pub fn model_title(dir_name: &str) -> String {
    let title = |w: &str| {
        let mut out = String::with_capacity(w.len());
        let mut after_letter = false;
        for ch in w.chars() {
            if ch.is_alphabetic() {
                if after_letter {
                    out.extend(ch.to_lowercase());
                } else {
                    out.extend(ch.to_uppercase());
                }
                after_letter = true;
            } else {
                out.push(ch);
                after_letter = false;
            }
        }
        out
    };
    let is_version = |w: &str| {
        w.starts_with(|c: char| c.is_ascii_digit())
            || (w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
    };
    let lower = |w: &str| w.chars().any(char::is_alphabetic) && !w.chars().any(char::is_uppercase);
    dir_name
        .trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            if lower(w) && !is_version(w) {
                title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// gguf-py's size label of a parameter count (`112K`, `7.2B`).
pub fn size_label(params: u64) -> String {
    let p = params as f64;
    let (scaled, suffix) = if p > 1e12 {
        (p * 1e-12, "T")
    } else if p > 1e9 {
        (p * 1e-9, "B")
    } else if p > 1e6 {
        (p * 1e-6, "M")
    } else {
        (p * 1e-3, "K")
    };
    let digits = format!("{}", scaled.round_ties_even() as u64);
    let digits = digits.trim_start_matches('0').len();
    let fix = 2usize.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_and_labels_are_gguf_pys() {
        assert_eq!(model_title("hf_llama_tiny"), "Hf_Llama_Tiny");
        assert_eq!(model_title("my-model v2"), "My Model v2");
        assert_eq!(size_label(112_448), "112K");
        assert_eq!(size_label(547_584), "548K");
        assert_eq!(size_label(7_241_732_096), "7.2B");
        assert_eq!(size_label(999), "1.0K");
        assert_eq!(f32_decimal(1e-5), 1e-5);
    }
}
