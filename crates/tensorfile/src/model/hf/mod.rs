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
use super::report::{ModelReport, Problem, ProblemKind};

/// The Hugging Face architectures tensorfile knows, one row per family:
/// its `model_type` and its classes, the usual one first (the class a
/// config without `architectures` is checked as, and the one a GGUF file
/// converted back names). The one table of these names: [`KNOWN`],
/// checking and GGUF conversion all read it.
pub(crate) const FAMILIES: &[(&str, &[&str])] = &[
    ("llama", &["LlamaForCausalLM", "LlamaModel"]),
    ("mistral", &["MistralForCausalLM", "MistralModel"]),
    ("qwen2", &["Qwen2ForCausalLM", "Qwen2Model"]),
    ("qwen3", &["Qwen3ForCausalLM", "Qwen3Model"]),
    ("gemma", &["GemmaForCausalLM", "GemmaModel"]),
    ("phi3", &["Phi3ForCausalLM", "Phi3Model"]),
    ("mixtral", &["MixtralForCausalLM", "MixtralModel"]),
    ("qwen2_moe", &["Qwen2MoeForCausalLM", "Qwen2MoeModel"]),
    ("qwen3_moe", &["Qwen3MoeForCausalLM", "Qwen3MoeModel"]),
    ("gpt2", &["GPT2LMHeadModel", "GPT2Model"]),
    ("bert", &["BertModel", "BertForMaskedLM"]),
    (
        "t5",
        &["T5ForConditionalGeneration", "T5Model", "T5EncoderModel"],
    ),
];

/// The number of classes in [`FAMILIES`].
const CLASS_COUNT: usize = {
    let (mut n, mut i) = (0, 0);
    while i < FAMILIES.len() {
        n += FAMILIES[i].1.len();
        i += 1;
    }
    n
};

/// [`FAMILIES`]' classes in order.
const CLASSES: [&str; CLASS_COUNT] = {
    let mut out = [""; CLASS_COUNT];
    let (mut at, mut i) = (0, 0);
    while i < FAMILIES.len() {
        let mut j = 0;
        while j < FAMILIES[i].1.len() {
            out[at] = FAMILIES[i].1[j];
            at += 1;
            j += 1;
        }
        i += 1;
    }
    out
};

/// The classes whose tensors `check` derives from config.json.
pub const KNOWN: &[&str] = &CLASSES;

/// The classes of the family of `model_type`, the usual one first (none
/// for a model type not in [`FAMILIES`]).
pub(crate) fn classes(model_type: &str) -> &'static [&'static str] {
    FAMILIES
        .iter()
        .find(|(t, _)| *t == model_type)
        .map_or(&[], |(_, c)| c)
}

/// Whether `class` is the usual class of the family of `model_type`.
pub(super) fn is_usual(model_type: &str, class: &str) -> bool {
    classes(model_type).first() == Some(&class)
}

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
    fn names(self) -> (&'static str, &'static [&'static str]) {
        let model_type = match self {
            Family::Decoder(d) => d.model_type,
            Family::Gpt2 => gpt2::MODEL_TYPE,
            Family::Bert => bert::MODEL_TYPE,
            Family::T5 => t5::MODEL_TYPE,
        };
        (model_type, classes(model_type))
    }

    fn variants(
        self,
        class: &str,
        config: &Map<String, Value>,
        report: &mut ModelReport,
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
fn not_checked(report: &mut ModelReport, subject: &str, message: String) {
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
    report: &mut ModelReport,
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

#[cfg(test)]
mod tests {
    // By full path: the layering test reads `super` here as the model module.
    use crate::model::hf::{classes, families, FAMILIES, KNOWN};

    #[test]
    fn known_lists_every_family_class_in_order() {
        let flat: Vec<&str> = FAMILIES
            .iter()
            .flat_map(|(_, c)| c.iter().copied())
            .collect();
        assert_eq!(KNOWN, flat.as_slice());
        assert_eq!(KNOWN.len(), 25);
        assert_eq!(classes("t5")[0], "T5ForConditionalGeneration");
        assert!(classes("unknown").is_empty());
        // Every family's model type is planned by exactly one family.
        for (ty, _) in FAMILIES {
            assert_eq!(families().filter(|f| f.names().0 == *ty).count(), 1, "{ty}");
        }
        assert_eq!(families().count(), FAMILIES.len());
    }
}
