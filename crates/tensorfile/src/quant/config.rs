//! Where quantization parameters are written down: config.json's
//! `quantization` (MLX) and a file's metadata (`quant` for int4,
//! [`QUANTIZATION_KEY`] for MLX files written here).

use super::QuantError;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{Mode, QuantParams};
use crate::Metadata;
use tensorfile_core::JsonObject;

/// The metadata key of the int4 scheme: `"quant": "int4-g<group>-sym"`.
pub const QUANT_KEY: &str = "quant";

/// The metadata key holding, as JSON text, the `quantization` object of an
/// MLX file written by this library (config.json's format).
pub const QUANTIZATION_KEY: &str = "quantization";

/// config.json's `quantization` (MLX): defaults and per-module overrides
/// (mlx-lm writes one for every module with a global scale:
/// `{"bits": 4, "group_size": 16, "mode": "nvfp4", "global_scale": true}`).
///
/// ```
/// use tensorfile::quant::{Mode, QuantConfig, QuantParams};
/// let config = tensorfile::JsonObject::parse(r#"{"quantization": {
///     "bits": 4, "group_size": 64,
///     "model.layers.0.mlp.down_proj": {"bits": 6, "group_size": 32},
///     "lm_head": false
/// }}"#)?;
/// let q = QuantConfig::from_config(&config)?.unwrap();
/// assert_eq!(q.for_module("model.layers.0.mlp.up_proj"), Some(QuantParams::affine(4, 64)));
/// assert_eq!(q.for_module("model.layers.0.mlp.down_proj"), Some(QuantParams::affine(6, 32)));
/// assert_eq!(q.for_module("lm_head"), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantConfig {
    default: Option<QuantParams>,
    /// Module path to its parameters; `None` when the module is left
    /// unquantized (`false` in the config).
    modules: BTreeMap<String, Option<QuantParams>>,
}

/// Reads `bits`, `group_size`, `mode` and `global_scale` from an object;
/// `Ok(None)` when none of the first three is there. A missing mode is
/// affine; a floating-point mode may omit the bits and group size it fixes.
fn params_of(object: &Map<String, Value>, place: &str) -> Result<Option<QuantParams>, String> {
    let field = |name: &str| -> Result<Option<u64>, String> {
        match object.get(name) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 => Ok(Some(n)),
                _ => Err(format!(
                    "{place}.{name} must be a positive integer, found {v}"
                )),
            },
        }
    };
    let mode = match object.get("mode") {
        None => None,
        Some(Value::String(s)) => Some(
            s.parse::<Mode>()
                .map_err(|e| format!("{place}.mode: {e}"))?,
        ),
        Some(v) => return Err(format!("{place}.mode must be a string, found {v}")),
    };
    let global_scale = match object.get("global_scale") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(format!(
                "{place}.global_scale must be true or false, found {v}"
            ))
        }
    };
    let (bits, group_size) = (field("bits")?, field("group_size")?);
    let fixed = mode.and_then(Mode::fixed);
    let params = match (bits, group_size, fixed) {
        (None, None, None) if mode.is_none() => return Ok(None),
        (Some(bits), Some(group_size), _) => QuantParams {
            bits,
            group_size,
            mode: mode.unwrap_or(Mode::Affine),
            global_scale,
        },
        (bits, group_size, Some((b, g))) => QuantParams {
            bits: bits.unwrap_or(b),
            group_size: group_size.unwrap_or(g),
            mode: mode.unwrap_or(Mode::Affine),
            global_scale,
        },
        _ => return Err(format!("{place} needs both bits and group_size")),
    };
    params.validate().map_err(|e| format!("{place}: {e}"))?;
    Ok(Some(params))
}

impl QuantConfig {
    /// One set of parameters for every module.
    pub fn uniform(params: QuantParams) -> QuantConfig {
        QuantConfig {
            default: Some(params),
            modules: BTreeMap::new(),
        }
    }

    /// These parameters with `module`'s own (`None`: left unquantized).
    pub fn with_module(mut self, module: impl Into<String>, params: Option<QuantParams>) -> Self {
        self.modules.insert(module.into(), params);
        self
    }

    /// The config's `quantization` object: the defaults' fields and one
    /// entry per module (`false` for a module left unquantized).
    pub fn to_json(&self) -> JsonObject {
        let mut out = match self.default.map(QuantParams::json) {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        for (module, params) in &self.modules {
            let entry = params.map_or(Value::Bool(false), QuantParams::json);
            out.insert(module.clone(), entry);
        }
        JsonObject::from_map(out)
    }

    /// Reads a config's `quantization`, or, when there is none, its mirror
    /// `quantization_config` unless that names a `quant_method` (another
    /// library's scheme, not MLX's). `Ok(None)` when there is neither. The
    /// error names the offending entry.
    ///
    /// # Errors
    /// [`QuantError::Params`] naming the entry.
    pub fn from_config(config: &JsonObject) -> Result<Option<QuantConfig>, QuantError> {
        Self::from_config_map(config.as_map())
    }

    /// [`QuantConfig::from_config`] on serde_json's map (the model layer's
    /// checks hold the config so).
    pub(crate) fn from_config_map(
        config: &Map<String, Value>,
    ) -> Result<Option<QuantConfig>, QuantError> {
        Self::from_config_text(config).map_err(QuantError::Params)
    }

    // The text of the error.
    fn from_config_text(config: &Map<String, Value>) -> Result<Option<QuantConfig>, String> {
        let (key, q) = match (
            config.get("quantization"),
            config.get("quantization_config"),
        ) {
            (Some(q), _) => ("quantization", q),
            (None, Some(q)) if q.get("quant_method").is_none() => ("quantization_config", q),
            _ => return Ok(None),
        };
        QuantConfig::from_value_text(q, key).map(Some)
    }

    // The text of the error.
    fn from_value_text(q: &Value, place: &str) -> Result<QuantConfig, String> {
        let Some(q) = q.as_object() else {
            return Err(format!("{place} must be an object, found {q}"));
        };
        let mut out = QuantConfig {
            default: params_of(q, place)?,
            ..QuantConfig::default()
        };
        for (key, value) in q {
            let entry = match value {
                Value::Object(o) => params_of(o, &format!("{place}.{key}"))?,
                Value::Bool(false) => None,
                // Scalars are the defaults' own fields (bits, mode, ...).
                _ => continue,
            };
            out.modules.insert(key.clone(), entry);
        }
        Ok(out)
    }

    /// Reads the [`QUANTIZATION_KEY`] metadata of a file written by this
    /// library; `Ok(None)` when absent.
    ///
    /// # Errors
    /// [`QuantError::Params`]: the metadata is not JSON or not parameters.
    pub fn from_metadata(metadata: Option<&Metadata>) -> Result<Option<QuantConfig>, QuantError> {
        Self::from_metadata_text(metadata).map_err(QuantError::Params)
    }

    // The text of the error.
    fn from_metadata_text(metadata: Option<&Metadata>) -> Result<Option<QuantConfig>, String> {
        let Some(text) = metadata.and_then(|m| m.get(QUANTIZATION_KEY)) else {
            return Ok(None);
        };
        let value: Value = serde_json::from_str(text)
            .map_err(|e| format!("metadata {QUANTIZATION_KEY:?} is not JSON: {e}"))?;
        QuantConfig::from_value_text(&value, &format!("metadata {QUANTIZATION_KEY:?}")).map(Some)
    }

    /// The parameters for a module path (a weight's name without
    /// `.weight`); `None` when the config leaves it unquantized.
    pub fn for_module(&self, module: &str) -> Option<QuantParams> {
        match self.modules.get(module) {
            Some(entry) => *entry,
            None => self.default,
        }
    }
}

/// The group size of an int4 file, from its `"quant": "int4-g<group>-sym"`.
pub fn int4_group(metadata: Option<&Metadata>) -> Option<u64> {
    // Groups pair columns into bytes: an odd group cannot be int4.
    super::parse_int4(metadata?.get(QUANT_KEY)?).filter(|&g| g > 0 && g % 2 == 0)
}
