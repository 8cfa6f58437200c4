//! What each course architecture (`tl_arch`) expects: tensor names, shapes
//! and dtypes worked out from config.json.

use serde_json::{Map, Value};

use super::report::{ModelReport, Problem, ProblemKind};

/// The architectures a config's `tl_arch` may name.
pub const ARCHITECTURES: &[&str] = &["bigram", "llama"];

/// The most layers a config may declare: far above any real model, low
/// enough that checking every layer's names stays quick.
pub(crate) const MAX_LAYERS: u64 = 100_000;

/// Which dtypes a tensor may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DtypeRule {
    /// F32 only.
    F32,
    /// Any floating-point type.
    Float,
}

/// Whether a tensor must be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// It must be present.
    Required,
    /// It may be absent (a tied alias that some savers write and others
    /// leave out); when present, its shape and dtype are checked.
    Optional,
    /// A buffer older savers wrote and loaders drop (a causal mask, rotary
    /// frequencies): accepted as it is, present or not.
    Buffer,
}

/// One tensor an architecture names.
#[derive(Debug, Clone)]
pub(crate) struct Expected {
    /// The module path for a linear weight that may be quantized
    /// (`<module>.weight` when plain), else the tensor's own name.
    pub name: String,
    /// Whether it is a linear weight that may be stored quantized.
    pub linear: bool,
    /// Its (logical) shape.
    pub shape: Vec<u64>,
    /// Its dtype rule.
    pub dtype: DtypeRule,
    /// Whether it must be there.
    pub need: Need,
}

impl Expected {
    /// A tensor stored as it is (a norm, a bias, a course model's table).
    pub(crate) fn plain(name: String, shape: Vec<u64>, dtype: DtypeRule) -> Expected {
        Expected {
            name,
            linear: false,
            shape,
            dtype,
            need: Need::Required,
        }
    }

    /// The weight of a linear layer or an embedding, plain or quantized:
    /// `module` is its path without `.weight`.
    pub(crate) fn linear(module: String, shape: Vec<u64>) -> Expected {
        Expected {
            name: module,
            linear: true,
            shape,
            dtype: DtypeRule::Float,
            need: Need::Required,
        }
    }

    /// A buffer (see [`Need::Buffer`]).
    pub(crate) fn buffer(name: String) -> Expected {
        Expected {
            need: Need::Buffer,
            ..Expected::plain(name, Vec::new(), DtypeRule::Float)
        }
    }

    /// The same tensor, allowed to be absent.
    pub(crate) fn optional(self) -> Expected {
        Expected {
            need: Need::Optional,
            ..self
        }
    }

    /// The same tensor, allowed to be absent when `optional`.
    pub(crate) fn optional_if(self, optional: bool) -> Expected {
        if optional {
            self.optional()
        } else {
            self
        }
    }

    /// The name of the tensor when stored plain.
    pub fn tensor_name(&self) -> String {
        if self.linear {
            format!("{}.weight", self.name)
        } else {
            self.name.clone()
        }
    }
}

/// Writes the tensors of layer `i` of a stack into the vector.
pub(crate) type LayerFn = Box<dyn Fn(u64, &mut Vec<Expected>)>;

/// A stack of layers whose tensors are made one layer at a time, so that
/// a config declaring many layers costs time, never memory.
pub(crate) struct Stack {
    /// How many layers.
    pub layers: u64,
    /// The tensors of one layer.
    pub make: LayerFn,
}

/// What an architecture needs of the weights.
#[derive(Default)]
pub(crate) struct Plan {
    /// Tensors outside the layer stacks.
    pub expected: Vec<Expected>,
    /// The layer stacks (a decoder's layers; T5's encoder and decoder).
    pub stacks: Vec<Stack>,
    /// Tensors that must be absent, with why.
    pub forbidden: Vec<(String, String)>,
}

impl Plan {
    /// Calls `f` on every tensor of the plan: the stacks' layers in order,
    /// then the others.
    pub(crate) fn for_each(&self, f: impl FnMut(&Expected)) {
        self.for_each_in(u64::MAX, f);
    }

    /// [`Plan::for_each`] over at most the first `layers` layers of each
    /// stack.
    pub(crate) fn for_each_in(&self, layers: u64, mut f: impl FnMut(&Expected)) {
        let mut buf = Vec::new();
        for stack in &self.stacks {
            for i in 0..stack.layers.min(layers) {
                buf.clear();
                (stack.make)(i, &mut buf);
                buf.iter().for_each(&mut f);
            }
        }
        self.expected.iter().for_each(f);
    }
}

/// A config field read as a count: `Some` when usable, else a problem is
/// recorded (missing without a default, or not a fitting integer).
pub(crate) fn count(
    config: &Map<String, Value>,
    name: &str,
    default: Option<u64>,
    min: u64,
    report: &mut ModelReport,
) -> Option<u64> {
    match config.get(name) {
        None => {
            if default.is_none() {
                report.push(Problem::error(
                    ProblemKind::MissingField,
                    name,
                    "the architecture needs this config field",
                ));
            }
            default
        }
        Some(v) => match v.as_u64() {
            Some(n) if n >= min => Some(n),
            _ => {
                report.push(Problem::error(
                    ProblemKind::InvalidField,
                    name,
                    format!("must be an integer of at least {min}, found {v}"),
                ));
                None
            }
        },
    }
}

/// A config field read as true or false (`default` when absent); `None`
/// with a problem recorded when it is something else.
pub(crate) fn flag(
    config: &Map<String, Value>,
    name: &str,
    default: bool,
    report: &mut ModelReport,
) -> Option<bool> {
    match config.get(name) {
        None => Some(default),
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            report.push(Problem::error(
                ProblemKind::InvalidField,
                name,
                format!("must be true or false, found {v}"),
            ));
            None
        }
    }
}

/// The plan for `arch`, or `None` (with problems recorded) when the config
/// does not allow one.
pub(crate) fn plan(
    arch: &str,
    config: &Map<String, Value>,
    report: &mut ModelReport,
) -> Option<Plan> {
    match arch {
        "bigram" => {
            let vocab = count(config, "vocab_size", None, 1, report)?;
            Some(Plan {
                expected: vec![Expected::plain(
                    "bigram.weight".into(),
                    vec![vocab, vocab],
                    DtypeRule::F32,
                )],
                ..Plan::default()
            })
        }
        "llama" => llama(config, report),
        other => {
            report.push(Problem::error(
                ProblemKind::InvalidField,
                "tl_arch",
                format!(
                    "unknown architecture {other:?} (known: {})",
                    ARCHITECTURES.join(", ")
                ),
            ));
            None
        }
    }
}

/// Llama/HF names for every layer, shapes from the config.
fn llama(config: &Map<String, Value>, report: &mut ModelReport) -> Option<Plan> {
    // Read every field first so that all config problems are reported at once.
    let vocab = count(config, "vocab_size", None, 1, report);
    let hidden = count(config, "hidden_size", None, 1, report);
    let inter = count(config, "intermediate_size", None, 1, report);
    let layers = count(config, "num_hidden_layers", None, 0, report);
    let heads = count(config, "num_attention_heads", None, 1, report);
    let kv_heads = count(config, "num_key_value_heads", heads, 1, report);
    let head_dim_field = count(config, "head_dim", Some(0), 1, report);
    // HF's LlamaConfig defaults tie_word_embeddings to false.
    let tied = flag(config, "tie_word_embeddings", false, report);
    let (vocab, hidden, inter, layers, heads, kv_heads, head_dim_field, tied) = (
        vocab?,
        hidden?,
        inter?,
        layers?,
        heads?,
        kv_heads?,
        head_dim_field?,
        tied?,
    );
    let invalid = |report: &mut ModelReport, field: &str, message: String| {
        report.push(Problem::error(ProblemKind::InvalidField, field, message));
    };
    if layers > MAX_LAYERS {
        invalid(
            report,
            "num_hidden_layers",
            format!("{layers} is more than {MAX_LAYERS}"),
        );
        return None;
    }
    if heads % kv_heads != 0 {
        invalid(
            report,
            "num_key_value_heads",
            format!("{kv_heads} does not divide num_attention_heads ({heads})"),
        );
        return None;
    }
    let head_dim = if head_dim_field > 0 {
        head_dim_field
    } else if hidden % heads == 0 {
        hidden / heads
    } else {
        invalid(
            report,
            "head_dim",
            format!("absent, and hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})"),
        );
        return None;
    };
    let (Some(q_out), Some(kv_out)) = (heads.checked_mul(head_dim), kv_heads.checked_mul(head_dim))
    else {
        invalid(report, "head_dim", format!("{head_dim} x heads overflows"));
        return None;
    };

    let mut expected = vec![Expected::linear(
        "model.embed_tokens".into(),
        vec![vocab, hidden],
    )];
    for i in 0..layers {
        let p = format!("model.layers.{i}");
        expected.extend([
            Expected::linear(format!("{p}.self_attn.q_proj"), vec![q_out, hidden]),
            Expected::linear(format!("{p}.self_attn.k_proj"), vec![kv_out, hidden]),
            Expected::linear(format!("{p}.self_attn.v_proj"), vec![kv_out, hidden]),
            Expected::linear(format!("{p}.self_attn.o_proj"), vec![hidden, q_out]),
            Expected::linear(format!("{p}.mlp.gate_proj"), vec![inter, hidden]),
            Expected::linear(format!("{p}.mlp.up_proj"), vec![inter, hidden]),
            Expected::linear(format!("{p}.mlp.down_proj"), vec![hidden, inter]),
            Expected::plain(
                format!("{p}.input_layernorm.weight"),
                vec![hidden],
                DtypeRule::Float,
            ),
            Expected::plain(
                format!("{p}.post_attention_layernorm.weight"),
                vec![hidden],
                DtypeRule::Float,
            ),
        ]);
    }
    expected.push(Expected::plain(
        "model.norm.weight".into(),
        vec![hidden],
        DtypeRule::Float,
    ));
    let mut forbidden = Vec::new();
    if tied {
        forbidden.push((
            "lm_head.weight".to_string(),
            "tie_word_embeddings is true, so the output layer reuses model.embed_tokens.weight"
                .to_string(),
        ));
    } else {
        expected.push(Expected::linear("lm_head".into(), vec![vocab, hidden]));
    }
    Some(Plan {
        expected,
        forbidden,
        ..Plan::default()
    })
}
