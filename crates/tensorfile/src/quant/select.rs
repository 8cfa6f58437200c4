//! Which tensors `quantize` takes.
//!
//! By default: the 2-D `.weight` matrices of F32, F16 or BF16 whose input
//! dimension (the last) the scheme's group divides, except norms and
//! embeddings (names containing `norm` or `embed`, and GPT-2's `wte`/`wpe`);
//! with an MLX scheme also the 3-D expert stacks `[experts, out, in]` of
//! mlx-lm's switch layers (a `.weight` under a path component named
//! `experts` or starting with `switch_`, such as
//! `model.layers.0.block_sparse_moe.switch_mlp.up_proj.weight`). Other
//! tensors of 3 or more dimensions (convolutions) quantize only when
//! included.
//! `include` patterns add tensors the default leaves out (an included tensor
//! the scheme cannot take is an error); `exclude` patterns remove tensors,
//! and win over `include`.
//!
//! ```
//! use tensorfile::quant::{Glob, Selection};
//! let sel = Selection {
//!     include: vec![Glob::new("lm_head.*")],
//!     exclude: vec![Glob::new("*.layers.0.*")],
//! };
//! assert!(Glob::new("model.*.q_proj.weight").matches("model.layers.3.self_attn.q_proj.weight"));
//! assert!(sel.excluded("model.layers.0.mlp.up_proj.weight"));
//! assert!(sel.included("lm_head.weight"));
//! ```

use super::Scheme;
use crate::Dtype;

/// A glob over tensor names: `*` matches any run of characters (dots
/// included); every other character matches itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
}

impl Glob {
    /// A pattern.
    pub fn new(pattern: impl Into<String>) -> Glob {
        Glob {
            pattern: pattern.into(),
        }
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        // Literal pieces between stars: the first anchors the start, the
        // last the end, and the middle ones are found leftmost in turn
        // (leftmost is always safe for `*`-only globs). Linear time.
        let mut pieces = self.pattern.split('*');
        let first = pieces.next().unwrap_or("");
        let Some(mut rest) = name.strip_prefix(first) else {
            return false;
        };
        let middle: Vec<&str> = pieces.collect();
        let Some((last, middle)) = middle.split_last() else {
            return rest.is_empty(); // no star at all
        };
        for piece in middle {
            match rest.find(piece) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last)
    }
}

/// Patterns overriding the default choice of tensors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Tensors to quantize even when the default leaves them out.
    pub include: Vec<Glob>,
    /// Tensors never to quantize.
    pub exclude: Vec<Glob>,
}

/// What the default rule says about a tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Quantize it.
    Take,
    /// Leave it; the reason says why (for an included tensor, an error).
    Leave(String),
}

impl Selection {
    /// Whether an include pattern names `name`.
    pub fn included(&self, name: &str) -> bool {
        self.include.iter().any(|g| g.matches(name))
    }

    /// Whether an exclude pattern names `name`.
    pub fn excluded(&self, name: &str) -> bool {
        self.exclude.iter().any(|g| g.matches(name))
    }
}

/// Whether `scheme` can take a tensor: float (F32, F16, BF16), 2-D (MLX:
/// 2-D or more, leading dimensions batch), the group dividing its input
/// dimension (the last) and, for MLX, `in * bits` filling whole U32 words.
/// The reason when not.
pub fn quantizable(dtype: Dtype, shape: &[u64], scheme: &Scheme) -> Verdict {
    if !matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
        return Verdict::Leave(format!("is {dtype}: only F32, F16 and BF16 quantize"));
    }
    let mlx = matches!(scheme, Scheme::Mlx(_));
    let cols = match (shape, mlx) {
        ([_, cols], _) => *cols,
        ([_, _, .., cols], true) => *cols,
        (_, true) => {
            return Verdict::Leave(format!(
                "has shape {shape:?}: MLX quantizes weights of 2 or more dimensions"
            ))
        }
        (_, false) => {
            return Verdict::Leave(format!("has shape {shape:?}: only 2-D weights quantize"))
        }
    };
    let group = scheme.group_size();
    if group == 0 || cols % group != 0 {
        return Verdict::Leave(format!(
            "has {cols} inputs, which groups of {group} do not divide"
        ));
    }
    let bits = scheme.bits();
    if mlx && cols.checked_mul(bits).is_none_or(|b| b % 32 != 0) {
        return Verdict::Leave(format!(
            "has {cols} inputs, which at {bits} bits do not fill whole U32 words"
        ));
    }
    Verdict::Take
}

/// Whether the default rule takes a tensor by its name: a `.weight` that is
/// not a norm or an embedding.
pub fn default_name(name: &str) -> bool {
    let Some(module) = name.strip_suffix(".weight") else {
        return false;
    };
    let last = module.rsplit('.').next().unwrap_or(module);
    !(module.contains("norm") || module.contains("embed") || last == "wte" || last == "wpe")
}

/// Whether a name is that of an expert stack of mlx-lm's switch layers: a
/// path component before the last is `experts` or starts with `switch_`.
/// (`...switch_mlp.down_proj.weight` and `...mlp.experts.gate_proj.weight`
/// are, `model.layers.0.conv1d.weight` is not).
pub fn expert_stack(name: &str) -> bool {
    let mut parts: Vec<&str> = name.split('.').collect();
    parts.pop();
    parts
        .iter()
        .any(|p| *p == "experts" || p.starts_with("switch_"))
}

/// Whether the default rule takes a tensor of `shape` by its name: a
/// [`default_name`] of 2 dimensions, or of 3 that is an [`expert_stack`]
/// (when `mlx`, the scheme being MLX's).
pub fn default_take(name: &str, shape: &[u64], mlx: bool) -> bool {
    default_name(name) && (shape.len() == 2 || (mlx && shape.len() == 3 && expert_stack(name)))
}

#[cfg(test)]
mod tests {
    use super::expert_stack;

    #[test]
    fn expert_stacks_by_name() {
        assert!(expert_stack(
            "model.layers.0.block_sparse_moe.switch_mlp.down_proj.weight"
        ));
        assert!(expert_stack("model.layers.3.mlp.experts.gate_proj.weight"));
        assert!(!expert_stack("model.layers.0.conv1d.weight"));
    }
}
