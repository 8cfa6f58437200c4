//! Which tensors `quantize` takes.
//!
//! By default: the 2-D `.weight` matrices of F32, F16 or BF16 whose input
//! dimension (the last) the scheme's group divides, except norms and
//! embeddings (names containing `norm` or `embed`, and GPT-2's `wte`/`wpe`).
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

/// Whether the scheme can take a tensor: float (F32, F16, BF16), 2-D, the
/// group dividing its input dimension and, for MLX, `in * bits` filling
/// whole U32 words (`bits` is 0 for int4). The reason when not.
pub fn quantizable(dtype: Dtype, shape: &[u64], group: u64, bits: u64) -> Verdict {
    if !matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
        return Verdict::Leave(format!("is {dtype}: only F32, F16 and BF16 quantize"));
    }
    let &[_, cols] = shape else {
        return Verdict::Leave(format!("has shape {shape:?}: only 2-D weights quantize"));
    };
    if group == 0 || cols % group != 0 {
        return Verdict::Leave(format!(
            "has {cols} inputs, which groups of {group} do not divide"
        ));
    }
    if bits > 0 && cols.checked_mul(bits).map_or(true, |b| b % 32 != 0) {
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
