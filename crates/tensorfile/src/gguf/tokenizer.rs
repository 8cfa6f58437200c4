//! Byte-level BPE tokenizers between `tokenizer.json` (Hugging Face
//! `tokenizers`) and GGUF's `tokenizer.ggml.*` keys (`model` `gpt2`).
//!
//! To GGUF, as llama.cpp's converter does (`get_vocab_base`,
//! `gguf.SpecialVocab`): `tokens` is the vocabulary by id (ids without a
//! token become `[PAD<id>]`, type UNUSED), `token_type` is CONTROL (3) for
//! special added tokens, USER_DEFINED (4) for other added tokens, NORMAL
//! (1) for the rest; `merges` as `"a b"` strings (pairs joined, spaces in
//! them written as U+0120); special token ids from tokenizer_config.json's
//! `*_token` (looked up among the added tokens), then config.json's
//! `*_token_id`; `add_bos_token` / `add_eos_token` from the post-processor
//! (ByteLevel: false) and tokenizer_config.json; the chat template.
//! `tokenizer.ggml.pre` is `gpt-2` for the GPT-2 pre-tokenizer (ByteLevel
//! with its regex), else what the caller names (llama.cpp identifies
//! pre-tokenizers by hashing the tokens of a text, which needs the
//! tokenizer run).
//!
//! From GGUF, a `tokenizer.json` for `gpt2` vocabularies with the GPT-2
//! pre-tokenizer, and a `tokenizer_config.json`.

use std::collections::HashMap;

use serde_json::{json, Map, Value as Json};

use super::error::GgufError;
use super::read::GgufHeader;
use super::value::{Array, Value};

/// GGUF token types (the whole table, though this module writes and reads
/// only some of them).
#[allow(dead_code)]
mod token_type {
    /// An ordinary token.
    pub const NORMAL: i32 = 1;
    /// A token no text gives.
    pub const UNKNOWN: i32 = 2;
    /// A special (control) token.
    pub const CONTROL: i32 = 3;
    /// An added token that is not special.
    pub const USER_DEFINED: i32 = 4;
    /// An id with no token.
    pub const UNUSED: i32 = 5;
    /// A byte token.
    pub const BYTE: i32 = 6;
}

fn input(file: &str, problem: impl Into<String>) -> GgufError {
    GgufError::Input {
        file: file.to_string(),
        problem: problem.into(),
    }
}

/// The special token types the converter looks for, with their GGUF keys.
const SPECIAL: [(&str, &str); 7] = [
    ("bos", "tokenizer.ggml.bos_token_id"),
    ("eos", "tokenizer.ggml.eos_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"),
    ("sep", "tokenizer.ggml.seperator_token_id"),
    ("pad", "tokenizer.ggml.padding_token_id"),
    ("cls", "tokenizer.ggml.cls_token_id"),
    ("mask", "tokenizer.ggml.mask_token_id"),
];

/// Whether a `pre_tokenizer` is GPT-2's: ByteLevel with its regex.
fn is_gpt2_pre(pre: &Json) -> bool {
    pre.get("type").and_then(Json::as_str) == Some("ByteLevel")
        && pre.get("use_regex").and_then(Json::as_bool).unwrap_or(true)
}

/// Padding tokens (`[PAD<id>]`) a vocabulary of few tokens may still get:
/// real models pad a few hundred ids (to a multiple of 64 or 128, or to
/// the embedding's rows); more than this, or than the tokens listed, is
/// refused.
const MIN_PADDING_ALLOWED: usize = 1 << 16;

/// The `tokenizer.ggml.*` keys of a Hugging Face tokenizer, in the
/// converter's order. `Ok(None)` when it is not a byte-level BPE
/// tokenizer (`explain_unsupported` says why).
///
/// `pre` names `tokenizer.ggml.pre` when the pre-tokenizer is not GPT-2's.
///
/// # Errors
/// A tokenizer.json that is not what it claims (ids out of range, merges
/// of an unknown form).
pub(crate) fn gguf_tokenizer(
    tokenizer: &Json,
    tokenizer_config: Option<&Map<String, Json>>,
    config: &Map<String, Json>,
    vocab_size: u64,
    pre: Option<&str>,
) -> Result<Option<Vec<(String, Value)>>, GgufError> {
    let f = "tokenizer.json";
    let model = tokenizer.get("model").ok_or_else(|| input(f, "no model"))?;
    if model.get("type").and_then(Json::as_str) != Some("BPE") {
        return Ok(None);
    }
    let gpt2 = tokenizer.get("pre_tokenizer").is_some_and(is_gpt2_pre);
    let pre = match (gpt2, pre) {
        (_, Some(p)) => p.to_string(),
        (true, None) => "gpt-2".to_string(),
        (false, None) => return Ok(None),
    };
    let vocab = model
        .get("vocab")
        .and_then(Json::as_object)
        .ok_or_else(|| input(f, "model.vocab is not an object"))?;
    let n = usize::try_from(vocab_size).map_err(|_| input(f, "vocabulary too large"))?;
    if n > 1 << 24 {
        return Err(input(
            f,
            format!("vocab_size {vocab_size} is more than 2^24"),
        ));
    }
    // The ids without a token become padding: bounded by the tokens the
    // files hold, so that a tiny tokenizer.json cannot make millions.
    let listed = vocab.len().saturating_add(
        tokenizer
            .get("added_tokens")
            .and_then(Json::as_array)
            .map_or(0, Vec::len),
    );
    let padding_allowed = listed.max(MIN_PADDING_ALLOWED);
    if n.saturating_sub(listed) > padding_allowed {
        return Err(input(
            f,
            format!(
                "vocab_size {vocab_size} would pad {listed} tokens with {} more (at most {padding_allowed})",
                n - listed
            ),
        ));
    }
    let mut tokens: Vec<Option<String>> = vec![None; n];
    let mut place = |tok: &str, id: &Json| -> Result<(), GgufError> {
        let id = id
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < n)
            .ok_or_else(|| {
                input(
                    f,
                    format!("token {tok:?} has id {id}, not below vocab_size {n}"),
                )
            })?;
        tokens[id] = Some(tok.to_string());
        Ok(())
    };
    for (tok, id) in vocab {
        place(tok, id)?;
    }
    let mut added: HashMap<usize, bool> = HashMap::new();
    let added_tokens = tokenizer
        .get("added_tokens")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default();
    for t in &added_tokens {
        let (Some(content), Some(id)) = (t.get("content").and_then(Json::as_str), t.get("id"))
        else {
            return Err(input(f, "an added token without content or id"));
        };
        place(content, id)?;
        let special = t.get("special").and_then(Json::as_bool).unwrap_or(false);
        added.insert(id.as_u64().unwrap_or(0) as usize, special);
    }
    let mut types = Vec::with_capacity(n);
    let mut list = Vec::with_capacity(n);
    for (i, t) in tokens.into_iter().enumerate() {
        match t {
            None => {
                list.push(format!("[PAD{i}]"));
                types.push(token_type::UNUSED);
            }
            Some(t) => {
                types.push(match added.get(&i) {
                    Some(true) => token_type::CONTROL,
                    Some(false) => token_type::USER_DEFINED,
                    None => token_type::NORMAL,
                });
                list.push(t);
            }
        }
    }
    let merges = match model.get("merges") {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Array(m)) => m
            .iter()
            .map(|e| match e {
                Json::String(s) => Ok(s.clone()),
                Json::Array(pair) if pair.len() == 2 => {
                    let part = |p: &Json| {
                        p.as_str()
                            .map(|s| s.replace(' ', "\u{0120}"))
                            .ok_or_else(|| input(f, "a merge pair that is not two strings"))
                    };
                    Ok(format!("{} {}", part(&pair[0])?, part(&pair[1])?))
                }
                _ => Err(input(f, "merges of an unknown form")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(input(f, "model.merges is not a list")),
    };

    let mut out: Vec<(String, Value)> = vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String(pre)),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(list)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(types)),
        ),
    ];
    if !merges.is_empty() {
        out.push((
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(merges)),
        ));
    }

    // Special token ids: tokenizer_config.json first, then config.json.
    let mut ids: Vec<(&str, u32)> = Vec::new();
    let set = |typ: &'static str, id: Option<u64>, ids: &mut Vec<(&str, u32)>| {
        if let Some(id) = id.filter(|&i| i < vocab_size) {
            if !ids.iter().any(|(t, _)| *t == typ) {
                ids.push((typ, id as u32));
            }
        }
    };
    if let Some(tc) = tokenizer_config {
        for (typ, _) in SPECIAL {
            let content = match tc.get(&format!("{typ}_token")) {
                Some(Json::String(s)) => Some(s.as_str()),
                Some(Json::Object(o)) => o.get("content").and_then(Json::as_str),
                _ => None,
            };
            let id = content.and_then(|c| {
                added_tokens
                    .iter()
                    .find(|t| t.get("content").and_then(Json::as_str) == Some(c))
                    .and_then(|t| t.get("id").and_then(Json::as_u64))
            });
            set(typ, id, &mut ids);
        }
    }
    for (typ, _) in SPECIAL {
        set(
            typ,
            config
                .get(&format!("{typ}_token_id"))
                .and_then(Json::as_u64),
            &mut ids,
        );
    }
    for (typ, id) in &ids {
        let key = SPECIAL
            .iter()
            .find(|(t, _)| t == typ)
            .map(|(_, k)| *k)
            .unwrap_or_default();
        out.push((key.to_string(), Value::U32(*id)));
    }

    // add_bos / add_eos: the post-processor, then tokenizer_config.json.
    let mut add: Vec<(&str, bool)> = Vec::new();
    if let Some(pp) = tokenizer.get("post_processor").filter(|p| !p.is_null()) {
        let processors = match pp.get("processors").and_then(Json::as_array) {
            Some(list) => list.clone(),
            None => vec![pp.clone()],
        };
        for p in processors {
            if p.get("type").and_then(Json::as_str) == Some("ByteLevel") {
                for typ in ["bos", "eos"] {
                    if !add.iter().any(|(t, _)| *t == typ) {
                        add.push((typ, false));
                    }
                }
            }
        }
    }
    if let Some(tc) = tokenizer_config {
        for (typ, _) in SPECIAL {
            if let Some(Json::Bool(b)) = tc.get(&format!("add_{typ}_token")) {
                if !add.iter().any(|(t, _)| *t == typ) {
                    add.push((typ, *b));
                }
            }
        }
    }
    for (typ, b) in add {
        if matches!(typ, "bos" | "eos" | "sep") {
            out.push((format!("tokenizer.ggml.add_{typ}_token"), Value::Bool(b)));
        }
    }
    if let Some(Json::String(t)) = tokenizer_config.and_then(|tc| tc.get("chat_template")) {
        out.push(("tokenizer.chat_template".into(), Value::String(t.clone())));
    }
    Ok(Some(out))
}

/// Why a tokenizer.json is not converted to GGUF, in words.
pub(crate) fn explain_unsupported(tokenizer: &Json) -> String {
    let kind = tokenizer
        .get("model")
        .and_then(|m| m.get("type"))
        .and_then(Json::as_str)
        .unwrap_or("unknown");
    if kind != "BPE" {
        return format!("its model is {kind}, not byte-level BPE");
    }
    "its pre-tokenizer is not GPT-2's ByteLevel: name llama.cpp's pre-tokenizer for it (--tokenizer-pre)".into()
}

fn strings<'h>(h: &'h GgufHeader, key: &str) -> Result<Option<&'h [String]>, GgufError> {
    match h.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => a.as_strings().map(Some).ok_or_else(|| GgufError::Key {
            key: key.into(),
            problem: "must be an array of strings".into(),
        }),
        Some(v) => Err(GgufError::Key {
            key: key.into(),
            problem: format!("must be an array of strings, not {}", v.value_type()),
        }),
    }
}

/// A Hugging Face `tokenizer.json` and `tokenizer_config.json` for a GGUF
/// byte-level BPE vocabulary (`tokenizer.ggml.model` `gpt2`, pre-tokenizer
/// `gpt-2`); `Ok(None)` (with the reason) for any other tokenizer.
///
/// # Errors
/// Tokenizer keys of the wrong types, or token types that do not match the
/// tokens.
pub(crate) fn hf_tokenizer(h: &GgufHeader) -> Result<Result<(Json, Json), String>, GgufError> {
    let model = h.get("tokenizer.ggml.model").and_then(Value::as_str);
    if model != Some("gpt2") {
        return Ok(Err(match model {
            None => "the file has no tokenizer".into(),
            Some(m) => format!("tokenizer.ggml.model is {m:?}, not a byte-level BPE (gpt2)"),
        }));
    }
    let pre = h
        .get("tokenizer.ggml.pre")
        .and_then(Value::as_str)
        .unwrap_or("default");
    if pre != "gpt-2" {
        return Ok(Err(format!(
            "the pre-tokenizer is {pre:?}, whose regex tokenizer.json would need; only gpt-2 is written"
        )));
    }
    let Some(tokens) = strings(h, "tokenizer.ggml.tokens")? else {
        return Ok(Err("the file has no tokenizer.ggml.tokens".into()));
    };
    let Some(merges) = strings(h, "tokenizer.ggml.merges")? else {
        return Ok(Err("the file has no tokenizer.ggml.merges".into()));
    };
    let types: Vec<i64> = match h.get("tokenizer.ggml.token_type") {
        None => vec![i64::from(token_type::NORMAL); tokens.len()],
        Some(Value::Array(a)) if a.len() == tokens.len() => (0..a.len())
            .map(|i| {
                a.get(i)
                    .and_then(|v| v.as_f64())
                    .map(|x| x as i64)
                    .unwrap_or(1)
            })
            .collect(),
        Some(_) => {
            return Err(GgufError::Key {
                key: "tokenizer.ggml.token_type".into(),
                problem: format!("must be an array of {} integers", tokens.len()),
            })
        }
    };
    // Merges as pairs, as tokenizers 0.20 and later write them.
    let merges: Vec<Json> = merges
        .iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((a, b)) => Ok(json!([a, b])),
            None => Err(GgufError::Key {
                key: "tokenizer.ggml.merges".into(),
                problem: format!("merge {i} has no space between its two parts"),
            }),
        })
        .collect::<Result<_, _>>()?;
    let mut vocab = Map::new();
    let mut added = Vec::new();
    for (i, (t, &ty)) in tokens.iter().zip(&types).enumerate() {
        if ty == i64::from(token_type::UNUSED) && t == &format!("[PAD{i}]") {
            continue;
        }
        if ty == i64::from(token_type::CONTROL) || ty == i64::from(token_type::USER_DEFINED) {
            added.push(json!({
                "id": i, "content": t, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false,
                "special": ty == i64::from(token_type::CONTROL),
            }));
        }
        vocab.insert(t.clone(), i.into());
    }
    let byte_level = |prefix: bool, trim: bool| json!({"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": trim, "use_regex": true});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level(false, true),
        "post_processor": byte_level(true, false),
        "decoder": byte_level(true, true),
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges,
        },
    });
    let mut tc = Map::new();
    tc.insert("tokenizer_class".into(), "PreTrainedTokenizerFast".into());
    for (typ, key) in SPECIAL {
        if let Some(id) = h.get(key).and_then(Value::as_u64) {
            if let Some(t) = usize::try_from(id).ok().and_then(|i| tokens.get(i)) {
                tc.insert(format!("{typ}_token"), t.clone().into());
            }
        }
    }
    for typ in ["bos", "eos"] {
        if let Some(b) = h
            .get(&format!("tokenizer.ggml.add_{typ}_token"))
            .and_then(Value::as_bool)
        {
            tc.insert(format!("add_{typ}_token"), b.into());
        }
    }
    if let Some(t) = h.get("tokenizer.chat_template").and_then(Value::as_str) {
        tc.insert("chat_template".into(), t.into());
    }
    tc.insert("clean_up_tokenization_spaces".into(), false.into());
    Ok(Ok((tokenizer, Json::Object(tc))))
}
