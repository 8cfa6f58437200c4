//! What `inspect` says about quantized weights (the `quantized` and
//! `quantized_problem` of a [`tensorfile_ops::inspect`] description), for a
//! single file and for a model directory or sharded set alike.

use tensorfile_ops::inspect::QuantizedWeight;

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

/// One text line per quantized weight, in columns: name, scheme and mode,
/// bits, group size (and global scale), logical shape, bits per weight.
fn lines(weights: &[QuantizedWeight]) -> Vec<String> {
    use super::words::{table, Align};
    let rows: Vec<Vec<String>> = weights
        .iter()
        .map(|w| {
            let mode = w.mode.as_ref().map(|m| format!(" {m}")).unwrap_or_default();
            let global = if w.global_scale { ", global scale" } else { "" };
            // The shape as JSON writes it (`[64,128]`), as before.
            let shape = w
                .logical_shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",");
            vec![
                super::escape_text(&w.name).into_owned(),
                format!("{}{mode}", w.scheme),
                format!("{}-bit", w.bits),
                format!("groups of {}{global}", w.group_size),
                format!("logical shape [{shape}]"),
                format!("{:.3} bits/weight", w.bits_per_weight),
            ]
        })
        .collect();
    let align = [
        Align::Left,
        Align::Left,
        Align::Right,
        Align::Left,
        Align::Left,
        Align::Right,
    ];
    table(&rows, &align)
        .into_iter()
        .map(|line| format!("  {line}"))
        .collect()
}
