//! The stored layout of quantized weights: which tensors make up a weight,
//! and its logical shape. Nothing is dequantized here; every file-level
//! operation and the model-directory check go through these functions.

use super::{Mode, QuantConfig, QuantParams, Scheme};
use crate::header::TensorInfo;
use crate::Dtype;

/// A weight as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalWeight<'a> {
    /// The weight's own name: `<name>` for int4's `<name>.qweight`,
    /// `<m>.weight` for MLX and plain weights.
    pub name: String,
    /// How it is stored: the scheme it is quantized in, `None` when plain.
    pub storage: Option<Scheme>,
    /// The dtype of its values: the tensor's own when plain, the scales'
    /// when quantized.
    pub dtype: Dtype,
    /// The logical shape: `[out, in]` for a quantized matrix; an MLX
    /// weight may have leading (batch) dimensions, `[experts, out, in]`.
    pub shape: Vec<u64>,
    /// The stored tensors making it up: the codes first, then the scales,
    /// then the biases (MLX affine) or the global scale (MLX nvfp4 with
    /// one, [`QuantParams::global_scale`]).
    pub parts: Vec<&'a str>,
}

impl LogicalWeight<'_> {
    /// Bits per weight, scales and biases included (the dtype's bits when
    /// plain); a global scale (32 bits per matrix) is not counted.
    pub fn bits_per_weight(&self) -> f64 {
        match self.storage {
            None => f64::from(self.dtype.bits()),
            Some(s) => s.bits_per_weight(self.dtype),
        }
    }
}

/// A stored layout that cannot be a quantized weight; says which tensor and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutError {
    /// The tensor at fault.
    pub tensor: String,
    /// Whether the fault is its dtype (else its shape, presence or parameters).
    pub dtype: bool,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tensor {:?}: {}", self.tensor, self.message)
    }
}

impl std::error::Error for LayoutError {}

impl From<LayoutError> for crate::Error {
    fn from(e: LayoutError) -> crate::Error {
        crate::Error::Quant {
            tensor: e.tensor,
            problem: super::QuantError::Layout(e.message),
        }
    }
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

/// The leading dimensions and the last of a tensor of rank 2 or more.
fn split_rows<'s>(t: &'s TensorInfo<'_>) -> Result<(&'s [u64], u64), LayoutError> {
    match t.shape.split_last() {
        Some((&last, lead)) if !lead.is_empty() => Ok((lead, last)),
        _ => Err(shape_error(
            t.name,
            format!(
                "has shape {:?}, but a packed MLX weight's part has 2 or more dimensions",
                t.shape
            ),
        )),
    }
}

/// Checks that scales (or biases) are `[..lead, in / group]`.
fn check_groups(
    t: &TensorInfo<'_>,
    lead: &[u64],
    input: u64,
    group: u64,
) -> Result<(), LayoutError> {
    if group == 0 || !input.is_multiple_of(group) {
        return Err(shape_error(
            t.name,
            format!("belongs to a weight of {input} inputs, which groups of {group} do not divide"),
        ));
    }
    let groups = input / group;
    let wanted: Vec<u64> = lead.iter().copied().chain([groups]).collect();
    if *t.shape != *wanted {
        return Err(shape_error(
            t.name,
            format!(
                "has shape {:?}, but {input} inputs in groups of {group} need {wanted:?}",
                t.shape
            ),
        ));
    }
    Ok(())
}

/// The int4 weight `name`, stored as `<name>.qweight` + `<name>.scales`;
/// `Ok(None)` when there is no `<name>.qweight`.
///
/// `group` is the group size from the file's metadata, if known; otherwise
/// the scales' shape gives it (the qweight fixes the input width, so this
/// is exact, not a guess).
pub fn int4_weight<'a>(
    name: &str,
    lookup: &impl Fn(&str) -> Option<TensorInfo<'a>>,
    group: Option<u64>,
) -> Result<Option<LogicalWeight<'a>>, LayoutError> {
    let Some(q) = lookup(&format!("{name}.qweight")) else {
        return Ok(None);
    };
    if lookup(name).is_some() {
        return Err(shape_error(
            name,
            format!("is stored both plain and as {}", q.name),
        ));
    }
    if q.dtype != Dtype::U8 {
        return Err(dtype_error(&q, "U8"));
    }
    let (out, half) = matrix(&q)?;
    let scales_name = format!("{name}.scales");
    let Some(s) = lookup(&scales_name) else {
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
    let group_size = match group {
        Some(g) => g,
        None if groups > 0 && input % groups == 0 => input / groups,
        None => {
            return Err(shape_error(
                s.name,
                format!("has {groups} groups, which do not divide {input} inputs"),
            ))
        }
    };
    if group_size % 2 != 0 {
        // A byte holds two columns of one group: an odd group is no int4 layout.
        return Err(shape_error(
            s.name,
            format!("gives groups of {group_size} inputs, which int4 needs to be even"),
        ));
    }
    check_groups(&s, &[out], input, group_size)?;
    Ok(Some(LogicalWeight {
        name: name.to_string(),
        storage: Some(Scheme::Int4Sym { group: group_size }),
        dtype: s.dtype,
        shape: vec![out, input],
        parts: vec![q.name, s.name],
    }))
}

/// The MLX weight of `module` (`<module>.weight` U32 with `<module>.scales`);
/// `Ok(None)` when it is not stored that way. `params` are the module's
/// parameters (`None`: unknown, which is an error for a packed weight).
///
/// Every part may have leading (batch) dimensions, as mlx-lm's expert
/// stacks do: weight `[..., out, in * bits / 32]`, scales and biases `[...,
/// out, in / group]`, logical shape `[..., out, in]`. An F32
/// `<module>.global_scale` (nvfp4 only) holds one scale per matrix (shape
/// `[...]`, the dimensions before `out`) or one for all; it is read whether
/// or not the config says `"global_scale": true` (as mlx-lm reads it), and
/// must be there when it does.
pub fn mlx_weight<'a>(
    module: &str,
    lookup: &impl Fn(&str) -> Option<TensorInfo<'a>>,
    params: Option<QuantParams>,
) -> Result<Option<LogicalWeight<'a>>, LayoutError> {
    let (Some(w), Some(s)) = (
        lookup(&format!("{module}.weight")),
        lookup(&format!("{module}.scales")),
    ) else {
        return Ok(None);
    };
    if w.dtype != Dtype::U32 {
        return Ok(None);
    }
    let Some(mut params) = params else {
        return Err(shape_error(
            w.name,
            format!(
                "is packed U32 with scales, but no bits and group size are known for {module} \
                 (give a config.json with quantization, or the bits, group size and mode)"
            ),
        ));
    };
    params
        .validate()
        .map_err(|e| shape_error(w.name, format!("cannot be read as {params}: {e}")))?;
    let (lead, packed) = split_rows(&w)?;
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
    let biases = lookup(&format!("{module}.biases"));
    let global_name = format!("{module}.global_scale");
    let global = lookup(&global_name);
    let mut parts = vec![w.name, s.name];
    match params.mode {
        Mode::Affine => {
            if !s.dtype.is_float() || s.dtype == Dtype::C64 {
                return Err(dtype_error(&s, "a float type in affine mode"));
            }
            check_groups(&s, lead, input, params.group_size)?;
            let Some(b) = biases else {
                return Err(shape_error(
                    &format!("{module}.biases"),
                    format!("is missing: affine mode needs biases beside {}", s.name),
                ));
            };
            if b.dtype != s.dtype {
                return Err(dtype_error(&b, &format!("{} like the scales", s.dtype)));
            }
            check_groups(&b, lead, input, params.group_size)?;
            parts.push(b.name);
        }
        mode => {
            if s.dtype != Dtype::U8 {
                return Err(dtype_error(&s, &format!("U8 in {mode} mode")));
            }
            check_groups(&s, lead, input, params.group_size)?;
            if let Some(b) = biases {
                return Err(shape_error(
                    b.name,
                    format!("is present, but {mode} mode has no biases"),
                ));
            }
        }
    }
    match global {
        Some(g) if params.mode != Mode::Nvfp4 => {
            return Err(shape_error(
                g.name,
                format!(
                    "is present, but only nvfp4 has global scales, not {}",
                    params.mode
                ),
            ))
        }
        Some(g) => {
            if g.dtype != Dtype::F32 {
                return Err(dtype_error(&g, "F32"));
            }
            let batch = &lead[..lead.len() - 1];
            let one = g.shape.iter().all(|&d| d == 1);
            if *g.shape != *batch && !one {
                return Err(shape_error(
                    g.name,
                    format!(
                        "has shape {:?}, but a global scale has one value per matrix of {} (shape {batch:?}) or one in all",
                        g.shape, w.name
                    ),
                ));
            }
            params.global_scale = true;
            parts.push(g.name);
        }
        None if params.global_scale => {
            return Err(shape_error(
                &global_name,
                format!("is missing: the parameters of {module} say it has a global scale"),
            ))
        }
        None => {}
    }
    let shape = lead.iter().copied().chain([input]).collect();
    Ok(Some(LogicalWeight {
        name: w.name.to_string(),
        storage: Some(Scheme::Mlx(params)),
        dtype: s.dtype,
        shape,
        parts,
    }))
}

/// The logical weight of `module` (`<module>.weight`, stored plain, as int4
/// `<module>.weight.qweight`, or MLX packed), found through `lookup`;
/// `Ok(None)` when no form of it is stored.
///
/// `int4_group` is the group size from the int4 file's metadata, if known;
/// `mlx` is config.json's `quantization`, if any.
///
/// # Errors
///
/// [`LayoutError`] naming the tensor when its stored form is inconsistent:
/// stored both plain and quantized, a part missing, or shapes that do not
/// make whole groups or packed values under `int4_group` or `mlx`.
pub fn logical_weight<'a>(
    module: &str,
    lookup: impl Fn(&str) -> Option<TensorInfo<'a>>,
    int4_group: Option<u64>,
    mlx: Option<&QuantConfig>,
) -> Result<Option<LogicalWeight<'a>>, LayoutError> {
    let weight_name = format!("{module}.weight");
    if let Some(w) = int4_weight(&weight_name, &lookup, int4_group)? {
        return Ok(Some(w));
    }
    if let Some(w) = mlx_weight(module, &lookup, mlx.and_then(|m| m.for_module(module)))? {
        return Ok(Some(w));
    }
    Ok(lookup(&weight_name).map(|w| LogicalWeight {
        name: w.name.to_string(),
        storage: None,
        dtype: w.dtype,
        shape: w.shape.to_vec(),
        parts: vec![w.name],
    }))
}

/// Every quantized weight among `names` (looked up through `lookup`), in
/// the order of `names`: int4 weights (`<name>.qweight`) and MLX weights
/// (`<m>.weight` U32 beside `<m>.scales`, of any rank 2 or more). A
/// `.scales` that belongs to no weight, or a `.qweight` without its scales,
/// is an error naming it.
///
/// # Errors
///
/// [`LayoutError`] naming the tensor: as [`logical_weight`], and for a
/// `.scales` or `.qweight` that belongs to no quantized weight.
pub fn quantized_weights<'a, 'n>(
    names: impl IntoIterator<Item = &'n str>,
    lookup: impl Fn(&str) -> Option<TensorInfo<'a>>,
    int4_group: Option<u64>,
    mlx: Option<&QuantConfig>,
) -> Result<Vec<LogicalWeight<'a>>, LayoutError> {
    let mut found = Vec::new();
    for name in names {
        if let Some(base) = name.strip_suffix(".qweight") {
            if let Some(w) = int4_weight(base, &lookup, int4_group)? {
                found.push(w);
            }
        } else if let Some(base) = name.strip_suffix(".scales") {
            if lookup(&format!("{base}.qweight")).is_some() {
                continue; // int4: found through its qweight
            }
            if let Some(w) = mlx_weight(base, &lookup, mlx.and_then(|m| m.for_module(base)))? {
                found.push(w);
                continue;
            }
            let plain = lookup(&format!("{base}.weight")).is_some_and(|w| w.dtype != Dtype::U32);
            if !plain {
                return Err(shape_error(
                    name,
                    format!(
                        "belongs to no quantized weight: there is neither {base}.qweight nor a packed U32 {base}.weight"
                    ),
                ));
            }
        }
    }
    Ok(found)
}
