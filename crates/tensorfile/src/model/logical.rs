//! The logical shape of a linear weight, whether it is stored plain or
//! quantized.
//!
//! A weight `<module>.weight` of logical shape `[out, in]` is stored as
//! - plain: `<module>.weight` itself;
//! - int4 (the format page): `<module>.qweight` U8 `[out, in / 2]` and
//!   `<module>.scales` F16 `[out, in / group]`, the group from the file's
//!   `"quant": "int4-g<group>-sym"` metadata;
//! - MLX: `<module>.weight` U32 `[out, in * bits / 32]`, `<module>.scales`
//!   `[out, in / group]` and, in affine mode, `<module>.biases` of the same
//!   shape, with bits and group from config.json's `quantization` (whose
//!   entries keyed by a module path override the defaults for that module).
//!
//! Only shapes are worked out here; nothing is dequantized.

use serde_json::{Map, Value};

use crate::header::TensorInfo;
use crate::Dtype;

/// Bits per element and elements per group of a quantized weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantParams {
    /// Bits per quantized element.
    pub bits: u64,
    /// Elements sharing one scale.
    pub group_size: u64,
}

/// config.json's `quantization` (MLX): defaults and per-module overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuantConfig {
    default: Option<QuantParams>,
    /// Module path to its parameters; `None` when the module is left
    /// unquantized (`false` in the config).
    modules: std::collections::BTreeMap<String, Option<QuantParams>>,
}

/// Reads `bits` and `group_size` from an object; `Ok(None)` when both are absent.
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
    match (field("bits")?, field("group_size")?) {
        (None, None) => Ok(None),
        (Some(bits), Some(group_size)) if bits <= 32 => Ok(Some(QuantParams { bits, group_size })),
        (Some(bits), Some(_)) => Err(format!("{place}.bits is {bits}, more than 32")),
        _ => Err(format!("{place} needs both bits and group_size")),
    }
}

impl QuantConfig {
    /// Reads `quantization` from a config; `Ok(None)` when there is none.
    /// The error names the offending entry.
    pub fn from_config(config: &Map<String, Value>) -> Result<Option<QuantConfig>, String> {
        let Some(q) = config.get("quantization") else {
            return Ok(None);
        };
        let Some(q) = q.as_object() else {
            return Err(format!("quantization must be an object, found {q}"));
        };
        let mut out = QuantConfig {
            default: params_of(q, "quantization")?,
            ..QuantConfig::default()
        };
        for (key, value) in q {
            let entry = match value {
                Value::Object(o) => params_of(o, &format!("quantization.{key}"))?,
                Value::Bool(false) => None,
                // Scalars are the defaults' own fields (bits, mode, ...).
                _ => continue,
            };
            out.modules.insert(key.clone(), entry);
        }
        Ok(Some(out))
    }

    /// The parameters for a module path (a weight's name without `.weight`).
    pub fn for_module(&self, module: &str) -> Option<QuantParams> {
        match self.modules.get(module) {
            Some(entry) => *entry,
            None => self.default,
        }
    }
}

/// The group size of an int4 file, from its `"quant": "int4-g<group>-sym"`.
pub fn int4_group(metadata: Option<&crate::Metadata>) -> Option<u64> {
    let quant = metadata?.get("quant")?;
    let group = quant.strip_prefix("int4-g")?.strip_suffix("-sym")?;
    group.parse().ok().filter(|&g| g > 0)
}

/// How a weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// Unquantized.
    Plain,
    /// int4: `.qweight` + `.scales`.
    Int4 {
        /// Elements per scale.
        group_size: u64,
    },
    /// MLX packed U32: `.weight` + `.scales` (+ `.biases`).
    Mlx(QuantParams),
}

/// A weight as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalWeight<'a> {
    /// How it is stored.
    pub storage: Storage,
    /// The dtype of its values: the tensor's own when plain, the scales'
    /// when quantized.
    pub dtype: Dtype,
    /// The logical shape: `[out, in]` for a quantized weight.
    pub shape: Vec<u64>,
    /// The stored tensors making it up.
    pub parts: Vec<&'a str>,
}

/// A stored layout that cannot be a quantized weight; says which tensor and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutError {
    /// The tensor at fault.
    pub tensor: String,
    /// Whether the fault is its dtype (else its shape or presence).
    pub dtype: bool,
    /// What is wrong.
    pub message: String,
}

fn shape_error(tensor: &str, message: String) -> LayoutError {
    LayoutError {
        tensor: tensor.to_string(),
        dtype: false,
        message,
    }
}

fn dtype_error(t: &TensorInfo<'_>, wanted: &str) -> LayoutError {
    LayoutError {
        tensor: t.name.to_string(),
        dtype: true,
        message: format!(
            "is {}, but a quantized weight's part must be {wanted}",
            t.dtype
        ),
    }
}

/// `[rows, cols]` of a 2-D tensor.
fn matrix(t: &TensorInfo<'_>) -> Result<(u64, u64), LayoutError> {
    match *t.shape {
        [rows, cols] => Ok((rows, cols)),
        _ => Err(shape_error(
            t.name,
            format!(
                "has shape {:?}, but a quantized weight's part is 2-D",
                t.shape
            ),
        )),
    }
}

/// Checks that scales (or biases) are `[out, in / group]`.
fn check_groups(t: &TensorInfo<'_>, out: u64, input: u64, group: u64) -> Result<(), LayoutError> {
    let (rows, cols) = matrix(t)?;
    if input % group != 0 || rows != out || cols != input / group {
        return Err(shape_error(
            t.name,
            format!(
                "has shape {:?}, but {input} inputs in groups of {group} need [{out}, {}]",
                t.shape,
                input / group
            ),
        ));
    }
    Ok(())
}

/// The logical weight of `module` (`<module>.weight`, `.qweight`, ...),
/// found through `lookup`; `Ok(None)` when no form of it is stored.
///
/// `int4_group` is the group size from the int4 file's metadata, if known
/// (otherwise it is inferred from the scales); `mlx` is config.json's
/// `quantization`, if any.
pub fn logical_weight<'a>(
    module: &str,
    lookup: impl Fn(&str) -> Option<TensorInfo<'a>>,
    int4_group: Option<u64>,
    mlx: Option<&QuantConfig>,
) -> Result<Option<LogicalWeight<'a>>, LayoutError> {
    let weight_name = format!("{module}.weight");
    let scales_name = format!("{module}.scales");
    let weight = lookup(&weight_name);
    let scales = lookup(&scales_name);

    if let Some(q) = lookup(&format!("{module}.qweight")) {
        if weight.is_some() {
            return Err(shape_error(
                &weight_name,
                format!("is stored both plain and as {module}.qweight"),
            ));
        }
        if q.dtype != Dtype::U8 {
            return Err(dtype_error(&q, "U8"));
        }
        let (out, half) = matrix(&q)?;
        let Some(s) = scales else {
            return Err(shape_error(
                &scales_name,
                format!("is missing beside {}", q.name),
            ));
        };
        if s.dtype != Dtype::F16 {
            return Err(dtype_error(&s, "F16"));
        }
        let input = half
            .checked_mul(2)
            .ok_or_else(|| shape_error(q.name, "is too wide".into()))?;
        let (_, groups) = matrix(&s)?;
        let group_size = match int4_group {
            Some(g) => g,
            // No metadata: the scales say how many groups there are.
            None if groups > 0 && input % groups == 0 => input / groups,
            None => 0,
        };
        if group_size == 0 {
            return Err(shape_error(
                s.name,
                format!("has {groups} groups, which do not divide {input} inputs"),
            ));
        }
        check_groups(&s, out, input, group_size)?;
        return Ok(Some(LogicalWeight {
            storage: Storage::Int4 { group_size },
            dtype: s.dtype,
            shape: vec![out, input],
            parts: vec![q.name, s.name],
        }));
    }

    let Some(w) = weight else {
        return Ok(None);
    };
    let (true, Some(s)) = (w.dtype == Dtype::U32, scales) else {
        return Ok(Some(LogicalWeight {
            storage: Storage::Plain,
            dtype: w.dtype,
            shape: w.shape.to_vec(),
            parts: vec![w.name],
        }));
    };
    let Some(params) = mlx.and_then(|m| m.for_module(module)) else {
        return Err(shape_error(
            w.name,
            format!("is packed U32 with scales, but config.json's quantization gives no bits for {module}"),
        ));
    };
    if !s.dtype.is_float() {
        return Err(dtype_error(&s, "a float type"));
    }
    let (out, packed) = matrix(&w)?;
    let bits = packed
        .checked_mul(32)
        .ok_or_else(|| shape_error(w.name, "is too wide".into()))?;
    if bits % params.bits != 0 {
        return Err(shape_error(
            w.name,
            format!(
                "has {packed} U32 words a row, not a whole number of {}-bit values",
                params.bits
            ),
        ));
    }
    let input = bits / params.bits;
    check_groups(&s, out, input, params.group_size)?;
    let mut parts = vec![w.name, s.name];
    if let Some(b) = lookup(&format!("{module}.biases")) {
        if b.dtype != s.dtype {
            return Err(dtype_error(&b, "the scales' dtype"));
        }
        check_groups(&b, out, input, params.group_size)?;
        parts.push(b.name);
    }
    Ok(Some(LogicalWeight {
        storage: Storage::Mlx(params),
        dtype: s.dtype,
        shape: vec![out, input],
        parts,
    }))
}
