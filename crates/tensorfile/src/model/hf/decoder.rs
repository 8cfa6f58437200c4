//! The Llama-shaped decoders (Llama, Mistral, Qwen2, Qwen3, Gemma, Phi-3)
//! and their mixture-of-experts relatives (Mixtral, Qwen2-MoE, Qwen3-MoE):
//! one row of [`DECODERS`] each, saying how the family departs from
//! Llama, and one builder that turns a row and a config into the tensors
//! transformers 4.57 (and 5, which saves the same names) expects.
//!
//! Two layouts are planned: transformers' (one tensor per expert,
//! `experts.<e>.<proj>`) and mlx-lm's, which stacks each projection of
//! all experts into one `[experts, out, in]` tensor under `switch_mlp`.

use std::rc::Rc;

use serde_json::{Map, Value};

use super::fields::{add, budget, invalid, mul, Fields};
use super::Variant;
use crate::model::arch::{DtypeRule, Expected, Plan, Stack};
use crate::model::report::ModelReport;

/// Whether a projection has a bias.
#[derive(Debug, Clone, Copy)]
pub(super) enum Bias {
    /// Never.
    No,
    /// Always.
    Yes,
    /// As the config's flag says (its default when absent).
    Field(&'static str, bool),
}

/// The default head width when the config has no `head_dim`.
#[derive(Debug, Clone, Copy)]
pub(super) enum HeadDim {
    /// `hidden_size / num_attention_heads`.
    Derived,
    /// The config class's own default (Qwen3: 128, Gemma: 256).
    Fixed(u64),
}

/// How a family's mixture-of-experts block is laid out.
#[derive(Debug, Clone, Copy)]
pub(super) struct Moe {
    /// The config field counting the experts.
    experts: &'static str,
    /// The config field giving an expert's intermediate size.
    inter: &'static str,
    /// The block's module name in a layer.
    block: &'static str,
    /// An expert's gate, up and down projections, as transformers names them.
    projections: [&'static str; 3],
    /// Whether a shared expert (with its sigmoid gate) sits beside them.
    shared_expert: bool,
    /// Whether `decoder_sparse_step` and `mlp_only_layers` choose which
    /// layers are sparse (the others have a dense MLP).
    sparse_step: bool,
}

/// One decoder family.
#[derive(Debug, Clone, Copy)]
pub(super) struct Decoder {
    /// Its `model_type`, whose classes (the causal LM's, with a `model.`
    /// prefix and an `lm_head`, then the base model's, with neither) are in
    /// [`FAMILIES`](super::FAMILIES).
    pub model_type: &'static str,
    /// `tie_word_embeddings` when the config does not say.
    tie_default: bool,
    head_dim: HeadDim,
    /// Bias of q, k and v.
    qkv_bias: Bias,
    /// Bias of o.
    o_bias: Bias,
    /// Bias of the MLP's projections.
    mlp_bias: Bias,
    /// RMS norms on each head's queries and keys (Qwen3).
    qk_norm: bool,
    /// Phi-3's fused `qkv_proj` and `gate_up_proj`.
    fused: bool,
    moe: Option<Moe>,
}

const LLAMA: Decoder = Decoder {
    model_type: "llama",
    tie_default: false,
    head_dim: HeadDim::Derived,
    qkv_bias: Bias::Field("attention_bias", false),
    o_bias: Bias::Field("attention_bias", false),
    mlp_bias: Bias::Field("mlp_bias", false),
    qk_norm: false,
    fused: false,
    moe: None,
};

/// The families, each checked against transformers 4.57's modeling code
/// and config defaults.
pub(super) const DECODERS: &[Decoder] = &[
    LLAMA,
    Decoder {
        model_type: "mistral",
        qkv_bias: Bias::No,
        o_bias: Bias::No,
        mlp_bias: Bias::No,
        ..LLAMA
    },
    Decoder {
        model_type: "qwen2",
        qkv_bias: Bias::Yes,
        o_bias: Bias::No,
        mlp_bias: Bias::No,
        ..LLAMA
    },
    Decoder {
        model_type: "qwen3",
        head_dim: HeadDim::Fixed(128),
        mlp_bias: Bias::No,
        qk_norm: true,
        ..LLAMA
    },
    Decoder {
        model_type: "gemma",
        tie_default: true,
        head_dim: HeadDim::Fixed(256),
        mlp_bias: Bias::No,
        ..LLAMA
    },
    Decoder {
        model_type: "phi3",
        qkv_bias: Bias::No,
        o_bias: Bias::No,
        mlp_bias: Bias::No,
        fused: true,
        ..LLAMA
    },
    Decoder {
        model_type: "mixtral",
        qkv_bias: Bias::No,
        o_bias: Bias::No,
        mlp_bias: Bias::No,
        moe: Some(Moe {
            experts: "num_local_experts",
            inter: "intermediate_size",
            block: "block_sparse_moe",
            projections: ["w1", "w3", "w2"],
            shared_expert: false,
            sparse_step: false,
        }),
        ..LLAMA
    },
    Decoder {
        model_type: "qwen2_moe",
        qkv_bias: Bias::Field("qkv_bias", true),
        o_bias: Bias::No,
        mlp_bias: Bias::No,
        moe: Some(Moe {
            experts: "num_experts",
            inter: "moe_intermediate_size",
            block: "mlp",
            projections: ["gate_proj", "up_proj", "down_proj"],
            shared_expert: true,
            sparse_step: true,
        }),
        ..LLAMA
    },
    Decoder {
        model_type: "qwen3_moe",
        head_dim: HeadDim::Fixed(128),
        mlp_bias: Bias::No,
        qk_norm: true,
        moe: Some(Moe {
            experts: "num_experts",
            inter: "moe_intermediate_size",
            block: "mlp",
            projections: ["gate_proj", "up_proj", "down_proj"],
            shared_expert: false,
            sparse_step: true,
        }),
        ..LLAMA
    },
];

/// The sizes of a decoder, read from its config.
struct Dims {
    family: Decoder,
    layers: u64,
    vocab: u64,
    hidden: u64,
    inter: u64,
    head_dim: u64,
    q_out: u64,
    kv_out: u64,
    /// Phi-3's fused q, k and v.
    qkv_out: u64,
    /// Phi-3's fused gate and up.
    gate_up: u64,
    tied: bool,
    qkv_bias: bool,
    o_bias: bool,
    mlp_bias: bool,
    moe: Option<MoeDims>,
}

struct MoeDims {
    experts: u64,
    inter: u64,
    shared_inter: u64,
    step: u64,
    dense_layers: Vec<u64>,
}

impl Dims {
    /// Whether layer `i` is a mixture of experts (transformers' rule).
    fn sparse(&self, i: u64) -> Option<&MoeDims> {
        let moe = self.moe.as_ref()?;
        let sparse =
            moe.experts > 0 && (i + 1).is_multiple_of(moe.step) && !moe.dense_layers.contains(&i);
        sparse.then_some(moe)
    }
}

fn bias(rule: Bias, fields: &Fields, report: &mut ModelReport) -> Option<bool> {
    match rule {
        Bias::No => Some(false),
        Bias::Yes => Some(true),
        Bias::Field(name, default) => fields.flag(name, default, report),
    }
}

/// Reads the sizes; `None` (with problems recorded) when the config does
/// not give usable ones.
fn dims(family: Decoder, config: &Map<String, Value>, report: &mut ModelReport) -> Option<Dims> {
    let f = Fields::new(config);
    // Every field first, so that all the config's problems are reported at once.
    let vocab = f.need(&["vocab_size"], 1, report);
    let hidden = f.need(&["hidden_size"], 1, report);
    let inter = f.need(&["intermediate_size"], 1, report);
    let layers = f.layers(&["num_hidden_layers"], report);
    let heads = f.need(&["num_attention_heads"], 1, report);
    let kv_heads = f.maybe(&["num_key_value_heads"], 1, report);
    let head_dim = f.maybe(&["head_dim"], 1, report);
    let tied = f.flag("tie_word_embeddings", family.tie_default, report);
    let qkv_bias = bias(family.qkv_bias, &f, report);
    let o_bias = bias(family.o_bias, &f, report);
    let mlp_bias = bias(family.mlp_bias, &f, report);
    let moe = match family.moe {
        None => Some(None),
        Some(m) => moe_dims(m, &f, report).map(Some),
    };
    let (vocab, hidden, inter, layers, heads, kv_heads, head_dim) = (
        vocab?, hidden?, inter?, layers?, heads?, kv_heads?, head_dim?,
    );
    let (tied, qkv_bias, o_bias, mlp_bias, moe) = (tied?, qkv_bias?, o_bias?, mlp_bias?, moe?);
    let kv_heads = kv_heads.unwrap_or(heads);
    if heads % kv_heads != 0 {
        invalid(
            report,
            "num_key_value_heads",
            format!("{kv_heads} does not divide num_attention_heads ({heads})"),
        );
        return None;
    }
    // transformers divides with the floor, as here.
    let head_dim = head_dim.unwrap_or(match family.head_dim {
        HeadDim::Derived => hidden / heads,
        HeadDim::Fixed(d) => d,
    });
    let q_out = mul(heads, head_dim, "head_dim", report)?;
    let kv_out = mul(kv_heads, head_dim, "head_dim", report)?;
    let qkv_out = add(
        q_out,
        mul(kv_out, 2, "head_dim", report)?,
        "head_dim",
        report,
    )?;
    let gate_up = mul(inter, 2, "intermediate_size", report)?;
    // Per layer: attention and norms (at most 12 with their biases and a
    // buffer), a dense MLP (6) or the experts' 3 each, a gate and a shared
    // expert (4).
    let per_layer = 22 + moe.as_ref().map_or(0, |m| 3 * m.experts);
    budget(layers, per_layer, 4, "num_hidden_layers", report)?;
    Some(Dims {
        family,
        layers,
        vocab,
        hidden,
        inter,
        head_dim,
        q_out,
        kv_out,
        qkv_out,
        gate_up,
        tied,
        qkv_bias,
        o_bias,
        mlp_bias,
        moe,
    })
}

fn moe_dims(m: Moe, f: &Fields, report: &mut ModelReport) -> Option<MoeDims> {
    let min_experts = u64::from(!m.sparse_step);
    let experts = f.experts(&[m.experts], min_experts, report);
    let inter = f.need(&[m.inter], 1, report);
    let shared_inter = if m.shared_expert {
        f.need(&["shared_expert_intermediate_size"], 1, report)
    } else {
        Some(0)
    };
    let (step, dense_layers) = if m.sparse_step {
        (
            f.or(&["decoder_sparse_step"], 1, 1, report),
            f.indices("mlp_only_layers", report),
        )
    } else {
        (Some(1), Some(Vec::new()))
    };
    Some(MoeDims {
        experts: experts?,
        inter: inter?,
        shared_inter: shared_inter?,
        step: step?,
        dense_layers: dense_layers?,
    })
}

/// Where mlx-lm keeps an expert stack, and its projections' names.
const STACKED: (&str, [&str; 3]) = ("switch_mlp", ["gate_proj", "up_proj", "down_proj"]);

/// The layouts to try for `class` (one of the family's two), best first.
pub(super) fn variants(
    family: Decoder,
    class: &str,
    config: &Map<String, Value>,
    report: &mut ModelReport,
) -> Option<Vec<Variant>> {
    let d = Rc::new(dims(family, config, report)?);
    let causal = super::is_usual(family.model_type, class);
    // A head class's checkpoint keeps the backbone under "model."; a base
    // class's has no prefix; transformers loads either into either.
    let prefixes = if causal {
        ["model.", ""]
    } else {
        ["", "model."]
    };
    let mut out: Vec<Variant> = prefixes
        .iter()
        .map(|prefix| Variant {
            layout: super::prefix_layout(prefix, prefixes[0], "model."),
            plan: plan(&d, prefix, causal, false),
        })
        .collect();
    if d.moe.is_some() {
        out.push(Variant {
            layout: "mlx-lm (experts stacked under switch_mlp)".into(),
            plan: plan(&d, "model.", causal, true),
        });
    }
    Some(out)
}

fn plan(d: &Rc<Dims>, prefix: &str, causal: bool, stacked: bool) -> Plan {
    let (vocab, hidden) = (d.vocab, d.hidden);
    let mut expected = vec![
        Expected::linear(format!("{prefix}embed_tokens"), vec![vocab, hidden]),
        Expected::plain(
            format!("{prefix}norm.weight"),
            vec![hidden],
            DtypeRule::Float,
        ),
        Expected::buffer(format!("{prefix}rotary_emb.inv_freq")),
    ];
    if causal {
        expected.push(Expected::linear("lm_head".into(), vec![vocab, hidden]).optional_if(d.tied));
    }
    let layer_dims = Rc::clone(d);
    let prefix = prefix.to_string();
    Plan {
        expected,
        stacks: vec![Stack {
            layers: d.layers,
            make: Box::new(move |i, out| {
                layer(&layer_dims, &format!("{prefix}layers.{i}"), i, stacked, out)
            }),
        }],
        forbidden: Vec::new(),
    }
}

fn norm(name: String, width: u64) -> Expected {
    Expected::plain(name, vec![width], DtypeRule::Float)
}

/// A linear layer `[out, in]` and, when `bias`, its bias.
fn linear(out: &mut Vec<Expected>, module: String, rows: u64, cols: u64, bias: bool) {
    if bias {
        out.push(norm(format!("{module}.bias"), rows));
    }
    out.push(Expected::linear(module, vec![rows, cols]));
}

fn layer(d: &Dims, p: &str, i: u64, stacked: bool, out: &mut Vec<Expected>) {
    let h = d.hidden;
    let a = format!("{p}.self_attn");
    if d.family.fused {
        linear(out, format!("{a}.qkv_proj"), d.qkv_out, h, false);
    } else {
        linear(out, format!("{a}.q_proj"), d.q_out, h, d.qkv_bias);
        linear(out, format!("{a}.k_proj"), d.kv_out, h, d.qkv_bias);
        linear(out, format!("{a}.v_proj"), d.kv_out, h, d.qkv_bias);
    }
    linear(out, format!("{a}.o_proj"), h, d.q_out, d.o_bias);
    if d.family.qk_norm {
        out.push(norm(format!("{a}.q_norm.weight"), d.head_dim));
        out.push(norm(format!("{a}.k_norm.weight"), d.head_dim));
    }
    // Written by transformers before 4.38; dropped on load since.
    out.push(Expected::buffer(format!("{a}.rotary_emb.inv_freq")));
    out.push(norm(format!("{p}.input_layernorm.weight"), h));
    out.push(norm(format!("{p}.post_attention_layernorm.weight"), h));
    let (Some(moe), Some(layout)) = (d.sparse(i), d.family.moe) else {
        let m = format!("{p}.mlp");
        if d.family.fused {
            linear(out, format!("{m}.gate_up_proj"), d.gate_up, h, false);
        } else {
            linear(out, format!("{m}.gate_proj"), d.inter, h, d.mlp_bias);
            linear(out, format!("{m}.up_proj"), d.inter, h, d.mlp_bias);
        }
        linear(out, format!("{m}.down_proj"), h, d.inter, d.mlp_bias);
        return;
    };
    let b = format!("{p}.{}", layout.block);
    linear(out, format!("{b}.gate"), moe.experts, h, false);
    let (e, mi) = (moe.experts, moe.inter);
    if stacked {
        let (stack, [gate, up, down]) = STACKED;
        out.push(Expected::linear(
            format!("{b}.{stack}.{gate}"),
            vec![e, mi, h],
        ));
        out.push(Expected::linear(
            format!("{b}.{stack}.{up}"),
            vec![e, mi, h],
        ));
        out.push(Expected::linear(
            format!("{b}.{stack}.{down}"),
            vec![e, h, mi],
        ));
    } else {
        let [gate, up, down] = layout.projections;
        for x in 0..e {
            let x = format!("{b}.experts.{x}");
            linear(out, format!("{x}.{gate}"), mi, h, false);
            linear(out, format!("{x}.{up}"), mi, h, false);
            linear(out, format!("{x}.{down}"), h, mi, false);
        }
    }
    if layout.shared_expert {
        let s = format!("{b}.shared_expert");
        let si = moe.shared_inter;
        linear(out, format!("{s}.gate_proj"), si, h, false);
        linear(out, format!("{s}.up_proj"), si, h, false);
        linear(out, format!("{s}.down_proj"), h, si, false);
        linear(out, format!("{b}.shared_expert_gate"), 1, h, false);
    }
}
