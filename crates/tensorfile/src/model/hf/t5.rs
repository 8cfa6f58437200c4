//! T5: an encoder and a decoder stack around one shared embedding
//! (`shared`, which `encoder.embed_tokens` and `decoder.embed_tokens`
//! alias, and `lm_head` too when tied). Each stack's first block holds the
//! relative attention bias.

use std::rc::Rc;

use serde_json::{Map, Value};

use super::fields::{budget, mul, Fields};
use super::Variant;
use crate::model::arch::{DtypeRule, Expected, Plan, Stack};
use crate::model::report::ModelReport;

/// The `model_type`, whose classes are in [`FAMILIES`](super::FAMILIES).
pub(super) const MODEL_TYPE: &str = "t5";

struct Dims {
    vocab: u64,
    model: u64,
    /// `num_heads * d_kv`.
    inner: u64,
    ff: u64,
    heads: u64,
    buckets: u64,
    encoder_layers: u64,
    decoder_layers: u64,
    gated: bool,
    tied: bool,
}

fn dims(config: &Map<String, Value>, report: &mut ModelReport) -> Option<Dims> {
    let f = Fields::new(config);
    let vocab = f.need(&["vocab_size"], 1, report);
    let model = f.need(&["d_model", "hidden_size"], 1, report);
    let kv = f.need(&["d_kv", "head_dim"], 1, report);
    let ff = f.need(&["d_ff"], 1, report);
    let heads = f.need(&["num_heads", "num_attention_heads"], 1, report);
    let encoder_layers = f.layers(&["num_layers", "num_hidden_layers"], report);
    let decoder_layers = f.maybe(&["num_decoder_layers"], 0, report);
    let buckets = f.or(&["relative_attention_num_buckets"], 32, 1, report);
    let tied = f.flag("tie_word_embeddings", true, report);
    // transformers reads is_gated_act when the config has it, else derives
    // it from feed_forward_proj ("gated-gelu").
    let derived = f
        .text("feed_forward_proj")
        .is_some_and(|p| p.starts_with("gated-"));
    let gated = f.flag("is_gated_act", derived, report);
    let (vocab, model, kv, ff, heads, encoder_layers, decoder_layers, buckets, tied, gated) = (
        vocab?,
        model?,
        kv?,
        ff?,
        heads?,
        encoder_layers?,
        decoder_layers?,
        buckets?,
        tied?,
        gated?,
    );
    let inner = mul(heads, kv, "d_kv", report)?;
    let decoder_layers = decoder_layers.unwrap_or(encoder_layers);
    if decoder_layers > crate::model::arch::MAX_LAYERS {
        super::fields::invalid(
            report,
            "num_decoder_layers",
            format!(
                "{decoder_layers} is more than {}",
                crate::model::arch::MAX_LAYERS
            ),
        );
        return None;
    }
    budget(encoder_layers, 12, 8, "num_layers", report)?;
    budget(decoder_layers, 20, 8, "num_decoder_layers", report)?;
    Some(Dims {
        vocab,
        model,
        inner,
        ff,
        heads,
        buckets,
        encoder_layers,
        decoder_layers,
        gated,
        tied,
    })
}

/// The layout for `class` (T5 checkpoints have one).
pub(super) fn variants(
    class: &str,
    config: &Map<String, Value>,
    report: &mut ModelReport,
) -> Option<Vec<Variant>> {
    let d = Rc::new(dims(config, report)?);
    // The encoder-only class is the family's last.
    let decoder = super::classes(MODEL_TYPE).last() != Some(&class);
    let head = super::is_usual(MODEL_TYPE, class);
    let (v, m) = (d.vocab, d.model);
    let mut expected = vec![
        Expected::linear("shared".into(), vec![v, m]),
        Expected::linear("encoder.embed_tokens".into(), vec![v, m]).optional(),
        vector("encoder.final_layer_norm.weight".into(), m),
    ];
    let mut stacks = vec![stack(&d, "encoder", d.encoder_layers, false)];
    if decoder {
        expected.push(Expected::linear("decoder.embed_tokens".into(), vec![v, m]).optional());
        expected.push(vector("decoder.final_layer_norm.weight".into(), m));
        stacks.push(stack(&d, "decoder", d.decoder_layers, true));
    }
    if head {
        expected.push(Expected::linear("lm_head".into(), vec![v, m]).optional_if(d.tied));
    }
    Some(vec![Variant {
        layout: "transformers".into(),
        plan: Plan {
            expected,
            stacks,
            forbidden: Vec::new(),
        },
    }])
}

fn vector(name: String, width: u64) -> Expected {
    Expected::plain(name, vec![width], DtypeRule::Float)
}

fn stack(d: &Rc<Dims>, name: &'static str, layers: u64, decoder: bool) -> Stack {
    let d = Rc::clone(d);
    Stack {
        layers,
        make: Box::new(move |i, out| block(&d, &format!("{name}.block.{i}"), i, decoder, out)),
    }
}

/// An attention module's q, k, v, o (T5's have no biases).
fn attention(d: &Dims, a: &str, out: &mut Vec<Expected>) {
    for m in ["q", "k", "v"] {
        out.push(Expected::linear(format!("{a}.{m}"), vec![d.inner, d.model]));
    }
    out.push(Expected::linear(format!("{a}.o"), vec![d.model, d.inner]));
}

fn block(d: &Dims, p: &str, i: u64, decoder: bool, out: &mut Vec<Expected>) {
    let a = format!("{p}.layer.0.SelfAttention");
    attention(d, &a, out);
    if i == 0 {
        out.push(Expected::linear(
            format!("{a}.relative_attention_bias"),
            vec![d.buckets, d.heads],
        ));
    }
    out.push(vector(format!("{p}.layer.0.layer_norm.weight"), d.model));
    let ff_at = if decoder {
        attention(d, &format!("{p}.layer.1.EncDecAttention"), out);
        out.push(vector(format!("{p}.layer.1.layer_norm.weight"), d.model));
        2
    } else {
        1
    };
    let ff = format!("{p}.layer.{ff_at}");
    let inputs: &[&str] = if d.gated { &["wi_0", "wi_1"] } else { &["wi"] };
    for wi in inputs {
        out.push(Expected::linear(
            format!("{ff}.DenseReluDense.{wi}"),
            vec![d.ff, d.model],
        ));
    }
    out.push(Expected::linear(
        format!("{ff}.DenseReluDense.wo"),
        vec![d.model, d.ff],
    ));
    out.push(vector(format!("{ff}.layer_norm.weight"), d.model));
}
