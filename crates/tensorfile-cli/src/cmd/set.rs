//! `validate` for a set of tensors given as a directory or an index (not a
//! subcommand: the command dispatches here).

use std::path::Path;

use serde_json::json;
use tensorfile::{Error, ReadOptions};

use super::{one_line, out};

/// Validates a set; prints the verdict and totals; returns whether it is valid.
pub fn validate(path: &Path, options: &ReadOptions, json: bool) -> bool {
    let name = path.display();
    let set = super::remote::open_set(path, options);
    let error = set
        .as_ref()
        .err()
        .map(|e| one_line(e.detail() as &(dyn std::error::Error + 'static)));
    if json {
        let mut v = json!({
            "file": path,
            "valid": error.is_none(),
            "rule": set.as_ref().err().and_then(Error::rule),
            "error": error,
            "warnings": set.as_ref().map(|s| s.warnings()).unwrap_or_default(),
        });
        if let Ok(set) = &set {
            v["shards"] = json!(set.shards().len());
            v["tensors"] = json!(set.len());
            v["data_bytes"] = json!(set.data_len());
        }
        out(v);
    } else {
        match &set {
            Ok(set) => out(format_args!(
                "{name}: ok ({} shards, {} tensors, {} data bytes)",
                set.shards().len(),
                set.len(),
                set.data_len()
            )),
            Err(_) => out(format_args!(
                "{name}: invalid: {}",
                error.as_deref().unwrap_or_default()
            )),
        }
        for warning in set.as_ref().map(|s| s.warnings()).unwrap_or_default() {
            out(format_args!("{name}: warning: {warning}"));
        }
    }
    set.is_ok()
}
