//! Hugging Face model directories: which tensors a `config.json` calls
//! for, by name and shape, for the architectures tensorfile knows
//! ([`KNOWN`]), as transformers 4.57 and 5 build them and as mlx-lm
//! writes them (plain or MLX-quantized: a packed weight's logical shape
//! comes from the config's `quantization`, see [`crate::quant`]).
//!
//! The config's class (`architectures[0]`, else the `model_type`'s usual
//! one) picks the family; the family gives a few layouts (the class's own
//! prefix or none, as transformers loads either; mlx-lm's stacked
//! experts), and the one whose names the file holds is checked. Any other
//! architecture, a diffusers model, or a scheme whose tensors are laid out
//! otherwise (GPTQ, AWQ, FP8...) is reported as not checked (a warning).

mod bert;
mod decoder;
mod fields;
mod gpt2;
mod t5;

use serde_json::{Map, Value};

use super::arch::{Need, Plan};
use super::report::{Problem, ProblemKind, Report};

/// The classes whose tensors `check` derives from config.json.
pub const KNOWN: &[&str] = &[
    "LlamaForCausalLM",
    "LlamaModel",
    "MistralForCausalLM",
    "MistralModel",
    "Qwen2ForCausalLM",
    "Qwen2Model",
    "Qwen3ForCausalLM",
    "Qwen3Model",
    "GemmaForCausalLM",
    "GemmaModel",
    "Phi3ForCausalLM",
    "Phi3Model",
    "MixtralForCausalLM",
    "MixtralModel",
    "Qwen2MoeForCausalLM",
    "Qwen2MoeModel",
    "Qwen3MoeForCausalLM",
    "Qwen3MoeModel",
    "GPT2LMHeadModel",
    "GPT2Model",
    "BertModel",
    "BertForMaskedLM",
    "T5ForConditionalGeneration",
    "T5Model",
    "T5EncoderModel",
];

/// One way a checkpoint of a class may name its tensors.
pub(super) struct Variant {
    /// Who writes it this way, for the report's note.
    pub layout: String,
    /// The tensors.
    pub plan: Plan,
}

/// A family of classes and how to plan each.
#[derive(Clone, Copy)]
enum Family {
    Decoder(&'static decoder::Decoder),
    Gpt2,
    Bert,
    T5,
}

impl Family {
    /// Its `model_type` and classes, the usual one first.
    fn names(self) -> (&'static str, Vec<&'static str>) {
        match self {
            Family::Decoder(d) => (d.model_type, vec![d.causal_lm, d.base]),
            Family::Gpt2 => ("gpt2", gpt2::CLASSES.to_vec()),
            Family::Bert => ("bert", bert::CLASSES.to_vec()),
            Family::T5 => ("t5", t5::CLASSES.to_vec()),
        }
    }

    fn variants(
        self,
        class: &str,
        config: &Map<String, Value>,
        report: &mut Report,
    ) -> Option<Vec<Variant>> {
        match self {
            Family::Decoder(d) => decoder::variants(*d, class, config, report),
            Family::Gpt2 => gpt2::variants(class, config, report),
            Family::Bert => bert::variants(class, config, report),
            Family::T5 => t5::variants(class, config, report),
        }
    }
}

fn families() -> impl Iterator<Item = Family> {
    decoder::DECODERS
        .iter()
        .map(Family::Decoder)
        .chain([Family::Gpt2, Family::Bert, Family::T5])
}

/// The note for a layout keeping the backbone under `prefix` when the
/// class's own is `own` (`other` names the prefix when `prefix` is empty).
pub(super) fn prefix_layout(prefix: &str, own: &str, other: &str) -> String {
    if prefix == own {
        "transformers".into()
    } else if prefix.is_empty() {
        format!("transformers, without the {other:?} prefix (a base model's checkpoint)")
    } else {
        format!("transformers, under {prefix:?} (a checkpoint of a class with a head)")
    }
}

/// A warning that the tensors were not checked against the architecture.
fn not_checked(report: &mut Report, subject: &str, message: String) {
    report.push(Problem::warning(
        ProblemKind::UnknownArchitecture,
        subject,
        message,
    ));
}

/// The plan for a config without `tl_arch`: `None` when its architecture
/// is not known or its config unusable (a warning or errors say which).
/// `has` tells whether the weights hold a tensor, to pick the layout.
pub(crate) fn plan(
    config: &Map<String, Value>,
    has: &dyn Fn(&str) -> bool,
    report: &mut Report,
) -> Option<Plan> {
    let text = |name: &str| config.get(name).and_then(Value::as_str);
    if let Some(class) = text("_class_name").filter(|_| config.contains_key("_diffusers_version")) {
        report.arch = Some(class.to_string());
        not_checked(
            report,
            "_class_name",
            format!(
                "a diffusers {class}: its files were checked, but tensorfile does not derive a \
                 diffusers model's tensors from its config"
            ),
        );
        return None;
    }
    let class = match config.get("architectures") {
        Some(Value::Array(a)) => a.first().and_then(Value::as_str),
        _ => None,
    };
    let model_type = text("model_type");
    let found = families().find_map(|f| {
        let (ty, classes) = f.names();
        match class {
            Some(c) => classes.contains(&c).then_some((f, c)),
            None => (model_type == Some(ty)).then(|| (f, classes[0])),
        }
    });
    let Some((family, class)) = found else {
        let (subject, message) = match (class, model_type) {
            (Some(c), _) => {
                let same_type = families().find(|f| Some(f.names().0) == model_type);
                let known = same_type.map_or_else(|| KNOWN.join(", "), |f| f.names().1.join(", "));
                ("architectures", format!("{c} is not an architecture tensorfile knows (it knows {known}): only the files were checked"))
            }
            (None, Some(t)) => ("model_type", format!("{t:?} is not a model type tensorfile knows: only the files were checked")),
            (None, None) => ("config.json", "names no architecture (no architectures, model_type or tl_arch): only the files were checked".to_string()),
        };
        report.arch = class.or(model_type).map(str::to_string);
        not_checked(report, subject, message);
        return None;
    };
    report.arch = Some(class.to_string());
    if let Some(method) = config
        .get("quantization_config")
        .and_then(|q| q.get("quant_method"))
        .and_then(Value::as_str)
    {
        not_checked(
            report,
            "quantization_config",
            format!("quantized by {method:?}, whose tensors tensorfile does not lay out: only the files were checked"),
        );
        return None;
    }
    if class_missing(config) {
        report.notes.push(format!(
            "config.json has no architectures: checked as {class}, the model type's usual class"
        ));
    }
    let mut variants = family.variants(class, config, report)?;
    let best = (0..variants.len())
        .max_by_key(|&i| (score(&variants[i].plan, has), std::cmp::Reverse(i)))
        .unwrap_or(0);
    let chosen = variants.swap_remove(best);
    report
        .notes
        .push(format!("checked as {class}, {} layout", chosen.layout));
    Some(chosen.plan)
}

fn class_missing(config: &Map<String, Value>) -> bool {
    !matches!(config.get("architectures"), Some(Value::Array(a)) if a.first().is_some_and(Value::is_string))
}

/// How many tensors of a plan's first layers (and its other tensors) the
/// weights hold: the layout with most is the one they were written in.
fn score(plan: &Plan, has: &dyn Fn(&str) -> bool) -> usize {
    let mut n = 0;
    plan.for_each_in(2, |e| {
        if e.need == Need::Buffer {
            return;
        }
        let name = e.tensor_name();
        if has(&name) || (e.linear && has(&format!("{name}.qweight"))) {
            n += 1;
        }
    });
    n
}
