//! Reading a Hugging Face config's sizes: every field checked (a count, a
//! flag), every product of sizes checked, and a budget on how many
//! tensors a config may imply, so that a hostile config gives a named
//! problem, never an overflow or a huge allocation.

use serde_json::{Map, Value};

use crate::model::arch::{count, flag, MAX_LAYERS};
use crate::model::report::{ModelReport, Problem, ProblemKind};

/// The most tensors a config may imply: ten times the largest real
/// checkpoints (about 100,000 tensors), low enough to check in seconds.
pub(super) const MAX_TENSORS: u64 = 1_000_000;

/// The most experts a mixture-of-experts layer may declare: 32 times the
/// most any real model has (512), so that one layer's tensors stay small.
pub(super) const MAX_EXPERTS: u64 = 16_384;

/// A config, read field by field; problems go to the report.
pub(super) struct Fields<'a> {
    config: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    pub(super) fn new(config: &'a Map<String, Value>) -> Fields<'a> {
        Fields { config }
    }

    /// The config's own spelling among `names` (GPT-2 says `n_embd` where
    /// others say `hidden_size`; transformers maps one to the other), or
    /// the first when none is there.
    fn pick(&self, names: &[&'static str]) -> &'static str {
        names
            .iter()
            .copied()
            .find(|n| self.config.contains_key(*n))
            .unwrap_or(names[0])
    }

    /// A count the architecture cannot do without (a missing one is an error).
    pub(super) fn need(
        &self,
        names: &[&'static str],
        min: u64,
        report: &mut ModelReport,
    ) -> Option<u64> {
        count(self.config, self.pick(names), None, min, report)
    }

    /// A count with a default, which `null` also selects (as transformers
    /// reads `"head_dim": null`).
    pub(super) fn or(
        &self,
        names: &[&'static str],
        default: u64,
        min: u64,
        report: &mut ModelReport,
    ) -> Option<u64> {
        let name = self.pick(names);
        match self.config.get(name) {
            None | Some(Value::Null) => Some(default),
            Some(_) => count(self.config, name, None, min, report),
        }
    }

    /// A count that may be absent or `null` (`None`), else at least `min`;
    /// the outer `None` means it is unusable (a problem was recorded).
    pub(super) fn maybe(
        &self,
        names: &[&'static str],
        min: u64,
        report: &mut ModelReport,
    ) -> Option<Option<u64>> {
        let name = self.pick(names);
        match self.config.get(name) {
            None | Some(Value::Null) => Some(None),
            Some(_) => count(self.config, name, None, min, report).map(Some),
        }
    }

    /// A flag (`default` when absent).
    pub(super) fn flag(&self, name: &str, default: bool, report: &mut ModelReport) -> Option<bool> {
        flag(self.config, name, default, report)
    }

    /// A string field, when it is one.
    pub(super) fn text(&self, name: &str) -> Option<&'a str> {
        self.config.get(name).and_then(Value::as_str)
    }

    /// A list of layer indices (`mlp_only_layers`); empty when absent.
    pub(super) fn indices(&self, name: &str, report: &mut ModelReport) -> Option<Vec<u64>> {
        match self.config.get(name) {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(items)) => {
                let found: Option<Vec<u64>> = items.iter().map(Value::as_u64).collect();
                if found.is_none() {
                    invalid(report, name, "must list non-negative integers".into());
                }
                found
            }
            Some(v) => {
                invalid(
                    report,
                    name,
                    format!("must be a list of layer indices, found {v}"),
                );
                None
            }
        }
    }

    /// The number of layers in `names`, at most [`MAX_LAYERS`].
    pub(super) fn layers(&self, names: &[&'static str], report: &mut ModelReport) -> Option<u64> {
        let layers = self.need(names, 0, report)?;
        if layers > MAX_LAYERS {
            invalid(
                report,
                self.pick(names),
                format!("{layers} is more than {MAX_LAYERS}"),
            );
            return None;
        }
        Some(layers)
    }

    /// The number of experts in `names`, at most [`MAX_EXPERTS`].
    pub(super) fn experts(
        &self,
        names: &[&'static str],
        min: u64,
        report: &mut ModelReport,
    ) -> Option<u64> {
        let experts = self.need(names, min, report)?;
        if experts > MAX_EXPERTS {
            invalid(
                report,
                self.pick(names),
                format!("{experts} is more than {MAX_EXPERTS}"),
            );
            return None;
        }
        Some(experts)
    }
}

/// An unusable config field.
pub(super) fn invalid(report: &mut ModelReport, field: &str, message: String) {
    report.push(Problem::error(ProblemKind::InvalidField, field, message));
}

/// `a * b`, or a problem naming `field` when it overflows.
pub(super) fn mul(a: u64, b: u64, field: &str, report: &mut ModelReport) -> Option<u64> {
    let product = a.checked_mul(b);
    if product.is_none() {
        invalid(report, field, format!("{a} x {b} overflows"));
    }
    product
}

/// `a + b`, or a problem naming `field` when it overflows.
pub(super) fn add(a: u64, b: u64, field: &str, report: &mut ModelReport) -> Option<u64> {
    let sum = a.checked_add(b);
    if sum.is_none() {
        invalid(report, field, format!("{a} + {b} overflows"));
    }
    sum
}

/// Refuses a config implying more than [`MAX_TENSORS`] tensors: `layers`
/// layers (the field `field`) of at most `per_layer` tensors each, plus
/// `others`.
pub(super) fn budget(
    layers: u64,
    per_layer: u64,
    others: u64,
    field: &str,
    report: &mut ModelReport,
) -> Option<()> {
    let total = layers
        .checked_mul(per_layer)
        .and_then(|t| t.checked_add(others));
    match total {
        Some(t) if t <= MAX_TENSORS => Some(()),
        _ => {
            invalid(
                report,
                field,
                format!(
                    "{layers} layers of up to {per_layer} tensors each are more than {MAX_TENSORS} tensors"
                ),
            );
            None
        }
    }
}
