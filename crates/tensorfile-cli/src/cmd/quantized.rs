//! What `inspect` says about quantized weights (found by
//! [`tensorfile::describe::quantized`]), for a single file and for a model
//! directory or sharded set alike: [`of`], then [`print()`].

use serde_json::Value;

/// The quantized weights an `inspect` description holds (its `quantized`
/// list), or the problem that stopped them being read.
pub fn of(described: &Value) -> Result<Vec<Value>, String> {
    match described["quantized_problem"].as_str() {
        Some(problem) => Err(problem.to_string()),
        None => Ok(described["quantized"]
            .as_array()
            .cloned()
            .unwrap_or_default()),
    }
}

/// Prints what [`of`] found, under a "quantized weights" heading.
pub fn print(found: &Result<Vec<Value>, String>) {
    match found {
        Ok(q) if q.is_empty() => {}
        Ok(q) => {
            super::out(format_args!("quantized weights: {}", q.len()));
            lines(q).into_iter().for_each(super::out);
        }
        Err(problem) => super::out(format_args!("quantized weights: cannot be read: {problem}")),
    }
}

/// One text line per quantized weight.
fn lines(weights: &[Value]) -> Vec<String> {
    let width = weights
        .iter()
        .filter_map(|w| w["name"].as_str().map(str::len))
        .max()
        .unwrap_or(0)
        .min(60);
    weights
        .iter()
        .map(|w| {
            let mode = w["mode"]
                .as_str()
                .map(|m| format!(" {m}"))
                .unwrap_or_default();
            let global = if w["global_scale"] == true {
                ", global scale"
            } else {
                ""
            };
            format!(
                "  {:<width$}  {}{mode} {}-bit, groups of {}{global}  logical shape {}  {:.3} bits/weight",
                w["name"].as_str().unwrap_or(""),
                w["scheme"].as_str().unwrap_or(""),
                w["bits"],
                w["group_size"],
                w["logical_shape"],
                w["bits_per_weight"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}
