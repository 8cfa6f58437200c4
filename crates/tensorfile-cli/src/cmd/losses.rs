//! What a cast lost (values that overflowed, became NaN, saturated or
//! flushed to zero), as `convert` reports it for every input, safetensors
//! or PyTorch: warning lines, and the `losses` object of `--json`.

/// One warning line per tensor whose cast changed values beyond rounding.
pub fn report(output: &std::path::Path, losses: &[(&str, tensorfile::cast::Losses)]) {
    for (name, l) in losses {
        super::warn(format_args!(
            "{}: tensor {}: {l} (--strict refuses this)",
            output.display(),
            super::quoted(name)
        ));
    }
}

/// The losses as JSON: `{name: {to_inf, to_nan, saturated, flushed}}`.
pub fn json(losses: &[(&str, tensorfile::cast::Losses)]) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = losses
        .iter()
        .map(|(name, l)| {
            let counts = serde_json::json!({
                "to_inf": l.to_inf,
                "to_nan": l.to_nan,
                "saturated": l.saturated,
                "flushed": l.flushed,
            });
            (name.to_string(), counts)
        })
        .collect();
    serde_json::Value::Object(map)
}
