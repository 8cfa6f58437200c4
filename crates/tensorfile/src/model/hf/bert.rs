//! BERT: the bare encoder (`BertModel`, with its pooler) and the
//! masked-LM (`BertForMaskedLM`: the encoder under `bert.` without a
//! pooler, and the prediction head under `cls.`).

use std::rc::Rc;

use serde_json::{Map, Value};

use super::fields::{budget, invalid, mul, Fields};
use super::Variant;
use crate::model::arch::{DtypeRule, Expected, Plan, Stack};
use crate::model::report::ModelReport;

/// The `model_type`, whose classes are in [`FAMILIES`](super::FAMILIES).
pub(super) const MODEL_TYPE: &str = "bert";

struct Dims {
    vocab: u64,
    hidden: u64,
    layers: u64,
    inter: u64,
    positions: u64,
    type_vocab: u64,
    /// The width of `distance_embedding` (relative position embeddings).
    distances: Option<(u64, u64)>,
    tied: bool,
    cross: bool,
}

fn dims(config: &Map<String, Value>, report: &mut ModelReport) -> Option<Dims> {
    let f = Fields::new(config);
    let vocab = f.need(&["vocab_size"], 1, report);
    let hidden = f.need(&["hidden_size"], 1, report);
    let layers = f.layers(&["num_hidden_layers"], report);
    let heads = f.need(&["num_attention_heads"], 1, report);
    let inter = f.need(&["intermediate_size"], 1, report);
    let positions = f.need(&["max_position_embeddings"], 1, report);
    let type_vocab = f.or(&["type_vocab_size"], 2, 0, report);
    let tied = f.flag("tie_word_embeddings", true, report);
    let cross = f.flag("add_cross_attention", false, report);
    let relative = !matches!(f.text("position_embedding_type"), None | Some("absolute"));
    let (vocab, hidden, layers, heads, inter, positions, type_vocab, tied, cross) = (
        vocab?,
        hidden?,
        layers?,
        heads?,
        inter?,
        positions?,
        type_vocab?,
        tied?,
        cross?,
    );
    if hidden % heads != 0 {
        // transformers refuses this config (BertSelfAttention raises).
        invalid(
            report,
            "num_attention_heads",
            format!("{heads} does not divide hidden_size ({hidden})"),
        );
        return None;
    }
    let distances = if relative {
        // 2 * max_position_embeddings - 1 distances, one head wide.
        let rows = mul(positions, 2, "max_position_embeddings", report)? - 1;
        Some((rows, hidden / heads))
    } else {
        None
    };
    budget(layers, 36, 16, "num_hidden_layers", report)?;
    Some(Dims {
        vocab,
        hidden,
        layers,
        inter,
        positions,
        type_vocab,
        distances,
        tied,
        cross,
    })
}

/// The layouts to try for `class`, best first.
pub(super) fn variants(
    class: &str,
    config: &Map<String, Value>,
    report: &mut ModelReport,
) -> Option<Vec<Variant>> {
    let d = Rc::new(dims(config, report)?);
    // The usual class is the bare model; the other has the MLM head.
    let mlm = !super::is_usual(MODEL_TYPE, class);
    let (own, other) = if mlm { ("bert.", "") } else { ("", "bert.") };
    Some(
        [own, other]
            .into_iter()
            .map(|prefix| Variant {
                layout: super::prefix_layout(prefix, own, "bert."),
                plan: plan(&d, prefix, mlm),
            })
            .collect(),
    )
}

fn vector(name: String, width: u64) -> Expected {
    Expected::plain(name, vec![width], DtypeRule::Float)
}

/// A LayerNorm's weight and bias.
fn layer_norm(out: &mut Vec<Expected>, module: &str, width: u64) {
    out.push(vector(format!("{module}.weight"), width));
    out.push(vector(format!("{module}.bias"), width));
}

/// A Linear `[out, in]` and its bias.
fn dense(out: &mut Vec<Expected>, module: String, rows: u64, cols: u64) {
    out.push(vector(format!("{module}.bias"), rows));
    out.push(Expected::linear(module, vec![rows, cols]));
}

fn plan(d: &Rc<Dims>, prefix: &str, mlm: bool) -> Plan {
    let h = d.hidden;
    let emb = format!("{prefix}embeddings");
    let mut expected = vec![
        Expected::linear(format!("{emb}.word_embeddings"), vec![d.vocab, h]),
        Expected::linear(format!("{emb}.position_embeddings"), vec![d.positions, h]),
        Expected::linear(
            format!("{emb}.token_type_embeddings"),
            vec![d.type_vocab, h],
        ),
        Expected::buffer(format!("{emb}.position_ids")),
        Expected::buffer(format!("{emb}.token_type_ids")),
    ];
    layer_norm(&mut expected, &format!("{emb}.LayerNorm"), h);
    if mlm {
        let p = "cls.predictions";
        dense(&mut expected, format!("{p}.transform.dense"), h, h);
        layer_norm(&mut expected, &format!("{p}.transform.LayerNorm"), h);
        expected.push(vector(format!("{p}.bias"), d.vocab));
        // The decoder's bias is the head's own (one parameter, two names);
        // its weight is the word embedding's when tied.
        expected.push(vector(format!("{p}.decoder.bias"), d.vocab).optional());
        expected
            .push(Expected::linear(format!("{p}.decoder"), vec![d.vocab, h]).optional_if(d.tied));
    } else {
        dense(&mut expected, format!("{prefix}pooler.dense"), h, h);
    }
    let layer_dims = Rc::clone(d);
    let prefix = prefix.to_string();
    Plan {
        expected,
        stacks: vec![Stack {
            layers: d.layers,
            make: Box::new(move |i, out| {
                layer(&layer_dims, &format!("{prefix}encoder.layer.{i}"), out)
            }),
        }],
        forbidden: Vec::new(),
    }
}

/// Self- or cross-attention under `a`.
fn attention(d: &Dims, a: &str, out: &mut Vec<Expected>) {
    let h = d.hidden;
    for m in ["query", "key", "value"] {
        dense(out, format!("{a}.self.{m}"), h, h);
    }
    if let Some((rows, width)) = d.distances {
        out.push(Expected::linear(
            format!("{a}.self.distance_embedding"),
            vec![rows, width],
        ));
    }
    dense(out, format!("{a}.output.dense"), h, h);
    layer_norm(out, &format!("{a}.output.LayerNorm"), h);
}

fn layer(d: &Dims, p: &str, out: &mut Vec<Expected>) {
    attention(d, &format!("{p}.attention"), out);
    if d.cross {
        attention(d, &format!("{p}.crossattention"), out);
    }
    dense(out, format!("{p}.intermediate.dense"), d.inter, d.hidden);
    dense(out, format!("{p}.output.dense"), d.hidden, d.inter);
    layer_norm(out, &format!("{p}.output.LayerNorm"), d.hidden);
}
