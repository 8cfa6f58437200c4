//! What `inspect` says about quantized weights (the `quantized` and
//! `quantized_problem` of a [`tensorfile::ops::inspect`] description), for a
//! single file and for a model directory or sharded set alike.

use tensorfile::ops::inspect::QuantizedWeight;

/// Prints the quantized weights a description found, under a "quantized
/// weights" heading, or the problem that stopped them being read.
pub fn print(found: &Option<Vec<QuantizedWeight>>, problem: &Option<String>) {
    match (found, problem) {
        (_, Some(problem)) => {
            super::out(format_args!("quantized weights: cannot be read: {problem}"))
        }
        (Some(q), None) if !q.is_empty() => {
            super::out(format_args!("quantized weights: {}", q.len()));
            lines(q).into_iter().for_each(super::out);
        }
        _ => {}
    }
}

/// One text line per quantized weight.
fn lines(weights: &[QuantizedWeight]) -> Vec<String> {
    let width = weights
        .iter()
        .map(|w| w.name.len())
        .max()
        .unwrap_or(0)
        .min(60);
    weights
        .iter()
        .map(|w| {
            let mode = w.mode.as_ref().map(|m| format!(" {m}")).unwrap_or_default();
            let global = if w.global_scale { ", global scale" } else { "" };
            // The shape as JSON writes it (`[64,128]`), as before.
            let shape = format!(
                "[{}]",
                w.logical_shape
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            format!(
                "  {:<width$}  {}{mode} {}-bit, groups of {}{global}  logical shape {shape}  {:.3} bits/weight",
                w.name, w.scheme, w.bits, w.group_size, w.bits_per_weight,
            )
        })
        .collect()
}
