//! GPT-2, as transformers builds it (`transformer.` prefix, `Conv1D`
//! weights stored `[in, out]`) and as mlx-lm writes it (`model.` prefix,
//! `Linear` weights `[out, in]`, the output layer always the embedding).

use std::rc::Rc;

use serde_json::{Map, Value};

use super::fields::{budget, invalid, mul, Fields};
use super::Variant;
use crate::model::arch::{DtypeRule, Expected, Plan, Stack};
use crate::model::report::ModelReport;

/// The `model_type`, whose classes are in [`FAMILIES`](super::FAMILIES).
pub(super) const MODEL_TYPE: &str = "gpt2";

struct Dims {
    vocab: u64,
    embd: u64,
    /// `2 * embd` and `3 * embd`: the fused projections' widths.
    embd2: u64,
    embd3: u64,
    layers: u64,
    inner: u64,
    positions: u64,
    tied: bool,
    cross: bool,
}

fn dims(config: &Map<String, Value>, report: &mut ModelReport) -> Option<Dims> {
    let f = Fields::new(config);
    let vocab = f.need(&["vocab_size"], 1, report);
    let embd = f.need(&["n_embd", "hidden_size"], 1, report);
    let layers = f.layers(&["n_layer", "num_hidden_layers"], report);
    let heads = f.need(&["n_head", "num_attention_heads"], 1, report);
    let inner = f.maybe(&["n_inner"], 1, report);
    let positions = f.need(&["n_positions", "max_position_embeddings"], 1, report);
    let tied = f.flag("tie_word_embeddings", true, report);
    let cross = f.flag("add_cross_attention", false, report);
    let (vocab, embd, layers, heads, inner, positions, tied, cross) = (
        vocab?, embd?, layers?, heads?, inner?, positions?, tied?, cross?,
    );
    if embd % heads != 0 {
        // transformers refuses this config (GPT2Attention raises).
        invalid(
            report,
            "n_head",
            format!("{heads} does not divide n_embd ({embd})"),
        );
        return None;
    }
    let inner = match inner {
        Some(n) => n,
        None => mul(embd, 4, "n_embd", report)?,
    };
    let embd2 = mul(embd, 2, "n_embd", report)?;
    let embd3 = mul(embd, 3, "n_embd", report)?;
    budget(layers, 24, 6, "n_layer", report)?;
    Some(Dims {
        vocab,
        embd,
        embd2,
        embd3,
        layers,
        inner,
        positions,
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
    let head = super::is_usual(MODEL_TYPE, class);
    let own = if head { "transformer." } else { "" };
    let other = if head { "" } else { "transformer." };
    Some(vec![
        Variant {
            layout: super::prefix_layout(own, own, "transformer."),
            plan: plan(&d, own, head, false),
        },
        Variant {
            layout: super::prefix_layout(other, own, "transformer."),
            plan: plan(&d, other, head, false),
        },
        Variant {
            layout: "mlx-lm (\"model.\" prefix, weights [out, in])".into(),
            plan: plan(&d, "model.", false, true),
        },
    ])
}

/// `head`: the LM head's output layer is named (tied or not); `mlx`:
/// weights `[out, in]`.
fn plan(d: &Rc<Dims>, prefix: &str, head: bool, mlx: bool) -> Plan {
    let e = d.embd;
    let mut expected = vec![
        Expected::linear(format!("{prefix}wte"), vec![d.vocab, e]),
        Expected::linear(format!("{prefix}wpe"), vec![d.positions, e]),
        vector(format!("{prefix}ln_f.weight"), e),
        vector(format!("{prefix}ln_f.bias"), e),
    ];
    if head {
        expected.push(Expected::linear("lm_head".into(), vec![d.vocab, e]).optional_if(d.tied));
    }
    let layer_dims = Rc::clone(d);
    let prefix = prefix.to_string();
    Plan {
        expected,
        stacks: vec![Stack {
            layers: d.layers,
            make: Box::new(move |i, out| layer(&layer_dims, &format!("{prefix}h.{i}"), mlx, out)),
        }],
        forbidden: Vec::new(),
    }
}

fn vector(name: String, width: u64) -> Expected {
    Expected::plain(name, vec![width], DtypeRule::Float)
}

/// A projection from `input` to `output` features and its bias: Conv1D
/// stores `[in, out]`, mlx-lm's Linear `[out, in]`.
fn conv(out: &mut Vec<Expected>, module: String, input: u64, output: u64, mlx: bool) {
    out.push(vector(format!("{module}.bias"), output));
    let shape = if mlx {
        vec![output, input]
    } else {
        vec![input, output]
    };
    out.push(Expected::linear(module, shape));
}

fn layer(d: &Dims, p: &str, mlx: bool, out: &mut Vec<Expected>) {
    let e = d.embd;
    let (e2, e3) = (d.embd2, d.embd3);
    for norm in ["ln_1", "ln_2"] {
        out.push(vector(format!("{p}.{norm}.weight"), e));
        out.push(vector(format!("{p}.{norm}.bias"), e));
    }
    conv(out, format!("{p}.attn.c_attn"), e, e3, mlx);
    conv(out, format!("{p}.attn.c_proj"), e, e, mlx);
    conv(out, format!("{p}.mlp.c_fc"), e, d.inner, mlx);
    conv(out, format!("{p}.mlp.c_proj"), d.inner, e, mlx);
    // The causal mask, saved by transformers before 4.31, dropped on load.
    out.push(Expected::buffer(format!("{p}.attn.bias")));
    out.push(Expected::buffer(format!("{p}.attn.masked_bias")));
    if d.cross {
        conv(out, format!("{p}.crossattention.c_attn"), e, e2, mlx);
        conv(out, format!("{p}.crossattention.q_attn"), e, e, mlx);
        conv(out, format!("{p}.crossattention.c_proj"), e, e, mlx);
        out.push(vector(format!("{p}.ln_cross_attn.weight"), e));
        out.push(vector(format!("{p}.ln_cross_attn.bias"), e));
        out.push(Expected::buffer(format!("{p}.crossattention.bias")));
        out.push(Expected::buffer(format!("{p}.crossattention.masked_bias")));
    }
}
