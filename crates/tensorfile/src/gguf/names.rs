//! Tensor names between Hugging Face and GGUF, and llama.cpp's q/k row
//! permutation, for the architectures llama.cpp converts from Hugging
//! Face and this library converts both ways.
//!
//! Names (llama.cpp's `convert_hf_to_gguf.py` with gguf-py's tensor map):
//! `model.embed_tokens.weight` is `token_embd.weight`, `lm_head.weight`
//! `output.weight`, `model.norm.weight` `output_norm.weight`, and in block
//! N (`model.layers.N.` / `blk.N.`): `input_layernorm` `attn_norm`,
//! `post_attention_layernorm` `ffn_norm`, `self_attn.{q,k,v,o}_proj`
//! `attn_q`, `attn_k`, `attn_v`, `attn_output`, `self_attn.qkv_proj`
//! `attn_qkv` (phi3), `self_attn.{q,k}_norm` `attn_{q,k}_norm` (qwen3),
//! `mlp.{gate,up,down}_proj` `ffn_gate`, `ffn_up`, `ffn_down`,
//! `mlp.gate_up_proj` `ffn_up` (phi3).
//!
//! The permutation: for Llama (and Mistral, which llama.cpp converts as
//! Llama), `q_proj` (with n_head) and `k_proj` (with n_head_kv), weights
//! and biases, have their rows reordered within each head: GGUF row
//! `h*d + 2*i + j` is Hugging Face row `h*d + j*d/2 + i` (head dim `d`),
//! from rotate-half pairs to interleaved pairs.

use std::fmt;

/// An architecture converted between Hugging Face and GGUF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Llama (and Mistral: llama.cpp converts `MistralForCausalLM` as
    /// `llama`).
    Llama,
    /// Qwen2.
    Qwen2,
    /// Qwen3.
    Qwen3,
    /// Gemma (the first one).
    Gemma,
    /// Phi-3.
    Phi3,
}

impl Arch {
    /// Every architecture.
    pub const ALL: [Arch; 5] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gemma,
        Arch::Phi3,
    ];

    /// The architecture of `general.architecture`.
    pub fn from_gguf(name: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.gguf_name() == name)
    }

    /// The architecture of a config.json's `model_type` (`mistral` is
    /// converted as Llama).
    pub fn from_model_type(model_type: &str) -> Option<Arch> {
        Some(match model_type {
            "llama" | "mistral" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma" => Arch::Gemma,
            "phi3" => Arch::Phi3,
            _ => return None,
        })
    }

    /// `general.architecture`.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma => "gemma",
            Arch::Phi3 => "phi3",
        }
    }

    /// config.json's `model_type` for a file converted back.
    pub fn model_type(self) -> &'static str {
        self.gguf_name()
    }

    /// config.json's `architectures[0]`: the model type's usual class, from
    /// the model module's table of Hugging Face architectures.
    ///
    /// ```
    /// use tensorfile::gguf::Arch;
    /// assert_eq!(Arch::Llama.hf_class(), "LlamaForCausalLM");
    /// assert_eq!(Arch::Phi3.hf_class(), "Phi3ForCausalLM");
    /// ```
    pub fn hf_class(self) -> &'static str {
        crate::model::hf_classes(self.model_type())
            .first()
            .copied()
            .unwrap_or_default()
    }

    /// Whether llama.cpp permutes q/k rows for this architecture.
    pub fn permutes(self) -> bool {
        self == Arch::Llama
    }

    /// Whether norms are stored as `1 + weight` in GGUF (Gemma's RMSNorm
    /// multiplies by `1 + weight`; llama.cpp adds the one when converting).
    pub fn norms_plus_one(self) -> bool {
        self == Arch::Gemma
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.gguf_name())
    }
}

/// Names outside the blocks: (Hugging Face, GGUF).
const GLOBAL: [(&str, &str); 3] = [
    ("model.embed_tokens.weight", "token_embd.weight"),
    ("model.norm.weight", "output_norm.weight"),
    ("lm_head.weight", "output.weight"),
];

/// Names inside block N, after `model.layers.N.` / `blk.N.`, without the
/// `.weight` / `.bias` suffix: (Hugging Face, GGUF, architectures).
const BLOCK: [(&str, &str, &[Arch]); 13] = {
    use Arch::*;
    const ALL: &[Arch] = &Arch::ALL;
    [
        ("input_layernorm", "attn_norm", ALL),
        ("post_attention_layernorm", "ffn_norm", ALL),
        ("self_attn.q_proj", "attn_q", &[Llama, Qwen2, Qwen3, Gemma]),
        ("self_attn.k_proj", "attn_k", &[Llama, Qwen2, Qwen3, Gemma]),
        ("self_attn.v_proj", "attn_v", &[Llama, Qwen2, Qwen3, Gemma]),
        ("self_attn.o_proj", "attn_output", ALL),
        ("self_attn.qkv_proj", "attn_qkv", &[Phi3]),
        ("self_attn.q_norm", "attn_q_norm", &[Qwen3]),
        ("self_attn.k_norm", "attn_k_norm", &[Qwen3]),
        ("mlp.gate_proj", "ffn_gate", &[Llama, Qwen2, Qwen3, Gemma]),
        ("mlp.up_proj", "ffn_up", &[Llama, Qwen2, Qwen3, Gemma]),
        ("mlp.down_proj", "ffn_down", ALL),
        ("mlp.gate_up_proj", "ffn_up", &[Phi3]),
    ]
};

/// Splits `prefix<N>.<rest>` into (N, rest), N a plain decimal number.
fn block_of<'n>(name: &'n str, prefix: &str) -> Option<(u64, &'n str)> {
    let rest = name.strip_prefix(prefix)?;
    let dot = rest.find('.')?;
    let (digits, rest) = (&rest[..dot], &rest[dot + 1..]);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !canonical {
        return None;
    }
    Some((digits.parse().ok()?, rest))
}

/// Splits `stem.weight` / `stem.bias`.
fn suffix(name: &str) -> Option<(&str, &str)> {
    name.strip_suffix(".weight")
        .map(|s| (s, "weight"))
        .or_else(|| name.strip_suffix(".bias").map(|s| (s, "bias")))
}

/// The GGUF name of a Hugging Face tensor, if `arch` has it (examples: the
/// test `hf_to_gguf_names` below).
pub(crate) fn hf_to_gguf(arch: Arch, name: &str) -> Option<String> {
    if let Some(&(_, g)) = GLOBAL.iter().find(|(h, _)| *h == name) {
        return Some(g.to_string());
    }
    let (n, rest) = block_of(name, "model.layers.")?;
    let (stem, kind) = suffix(rest)?;
    let &(_, g, _) = BLOCK
        .iter()
        .find(|(h, _, archs)| *h == stem && archs.contains(&arch))?;
    Some(format!("blk.{n}.{g}.{kind}"))
}

/// The Hugging Face name of a GGUF tensor, if `arch` has it.
///
/// ```
/// use tensorfile::gguf::{hf_tensor_name as gguf_to_hf, Arch};
/// assert_eq!(gguf_to_hf(Arch::Phi3, "blk.0.ffn_up.weight").as_deref(), Some("model.layers.0.mlp.gate_up_proj.weight"));
/// assert_eq!(gguf_to_hf(Arch::Llama, "blk.0.ffn_up.weight").as_deref(), Some("model.layers.0.mlp.up_proj.weight"));
/// assert_eq!(gguf_to_hf(Arch::Llama, "blk.00.ffn_up.weight"), None);
/// ```
pub fn gguf_to_hf(arch: Arch, name: &str) -> Option<String> {
    if let Some(&(h, _)) = GLOBAL.iter().find(|(_, g)| *g == name) {
        return Some(h.to_string());
    }
    let (n, rest) = block_of(name, "blk.")?;
    let (stem, kind) = suffix(rest)?;
    let &(h, _, _) = BLOCK
        .iter()
        .find(|(_, g, archs)| *g == stem && archs.contains(&arch))?;
    Some(format!("model.layers.{n}.{h}.{kind}"))
}

/// Which heads count a tensor's q/k permutation uses: `Some(n_head)` for
/// `q_proj`, `Some(n_head_kv)` for `k_proj` (weights and biases) when the
/// architecture permutes, else `None`. Takes the Hugging Face name.
pub fn permutation_heads(arch: Arch, hf_name: &str, n_head: u64, n_head_kv: u64) -> Option<u64> {
    if !arch.permutes() {
        return None;
    }
    let (_, rest) = block_of(hf_name, "model.layers.")?;
    match suffix(rest)?.0 {
        "self_attn.q_proj" => Some(n_head),
        "self_attn.k_proj" => Some(n_head_kv),
        _ => None,
    }
}

/// llama.cpp's q/k row permutation of a tensor of `rows` rows split into
/// `heads` heads, computed row by row (never tabulated: a tensor of 2^40
/// empty rows is as cheap as one of four).
///
/// ```
/// use tensorfile::gguf::QkPermutation;
/// // One head of dimension 4: HF rows (0, 1 | 2, 3) become pairs (0, 2, 1, 3).
/// let p = QkPermutation::new(4, 1).unwrap();
/// assert_eq!((0..4).map(|g| p.hf_row_of_gguf(g)).collect::<Vec<_>>(), [0, 2, 1, 3]);
/// assert_eq!((0..4).map(|h| p.gguf_row_of_hf(h)).collect::<Vec<_>>(), [0, 2, 1, 3]);
/// assert!(QkPermutation::new(10, 3).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkPermutation {
    /// Rows per head (`rows / heads`, even).
    head_rows: u64,
}

impl QkPermutation {
    /// The permutation of `rows` rows with `heads` heads; `None` when
    /// `rows` is not a multiple of `2 * heads`.
    pub fn new(rows: u64, heads: u64) -> Option<QkPermutation> {
        let pair_rows = heads.checked_mul(2).filter(|&p| p > 0)?;
        if !rows.is_multiple_of(pair_rows) {
            return None;
        }
        Some(QkPermutation {
            head_rows: rows / heads,
        })
    }

    /// The Hugging Face row that GGUF row `g` holds: GGUF row
    /// `h*d + 2*i + j` is Hugging Face row `h*d + j*d/2 + i`.
    pub fn hf_row_of_gguf(self, g: u64) -> u64 {
        let Some((d, half)) = self.dims() else {
            return g;
        };
        let (head, within) = (g / d, g % d);
        head * d + (within % 2) * half + within / 2
    }

    /// The GGUF row holding Hugging Face row `r`: the inverse of
    /// [`hf_row_of_gguf`](QkPermutation::hf_row_of_gguf).
    pub fn gguf_row_of_hf(self, r: u64) -> u64 {
        let Some((d, half)) = self.dims() else {
            return r;
        };
        let (head, within) = (r / d, r % d);
        head * d + 2 * (within % half) + within / half
    }

    /// (rows per head, half of them); `None` for zero rows (nothing to
    /// permute).
    fn dims(self) -> Option<(u64, u64)> {
        (self.head_rows > 0).then_some((self.head_rows, self.head_rows / 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Was this function's doctest while it was public.
    #[test]
    fn hf_to_gguf_names() {
        let q = hf_to_gguf(Arch::Llama, "model.layers.3.self_attn.q_proj.weight");
        assert_eq!(q.as_deref(), Some("blk.3.attn_q.weight"));
        let e = hf_to_gguf(Arch::Llama, "model.embed_tokens.weight");
        assert_eq!(e.as_deref(), Some("token_embd.weight"));
        assert_eq!(
            hf_to_gguf(Arch::Llama, "model.layers.3.self_attn.rotary_emb.inv_freq"),
            None
        );
    }

    #[test]
    fn every_architecture_has_its_causal_lm_class() {
        let want = [
            "LlamaForCausalLM",
            "Qwen2ForCausalLM",
            "Qwen3ForCausalLM",
            "GemmaForCausalLM",
            "Phi3ForCausalLM",
        ];
        for (arch, want) in Arch::ALL.into_iter().zip(want) {
            assert_eq!(arch.hf_class(), want);
            assert!(crate::model::HF_ARCHITECTURES.contains(&want));
        }
    }

    #[test]
    fn names_round_trip_for_every_architecture() {
        for arch in Arch::ALL {
            for &(h, g, archs) in &BLOCK {
                if !archs.contains(&arch) {
                    continue;
                }
                for kind in ["weight", "bias"] {
                    let hf = format!("model.layers.17.{h}.{kind}");
                    let gg = hf_to_gguf(arch, &hf).unwrap();
                    assert_eq!(gg, format!("blk.17.{g}.{kind}"));
                    assert_eq!(gguf_to_hf(arch, &gg).as_deref(), Some(hf.as_str()));
                }
            }
        }
        assert_eq!(gguf_to_hf(Arch::Llama, "blk.1.attn_qkv.weight"), None);
        assert_eq!(
            hf_to_gguf(Arch::Llama, "model.layers.x.mlp.up_proj.weight"),
            None
        );
        assert_eq!(
            hf_to_gguf(Arch::Llama, "model.layers.1.mlp.up_proj.scales"),
            None
        );
    }

    #[test]
    fn the_permutation_is_llama_cpps() {
        // numpy: w.reshape(n, 2, rows/n/2).swapaxes(1, 2).reshape(rows):
        // GGUF row (h, i, j) is HF row (h, j, i).
        let (rows, n) = (24u64, 3u64);
        let p = QkPermutation::new(rows, n).unwrap();
        let half = rows / n / 2;
        let mut seen = vec![false; rows as usize];
        for g in 0..rows {
            let h = p.hf_row_of_gguf(g);
            let (head, i, j) = (g / (2 * half), (g % (2 * half)) / 2, g % 2);
            assert_eq!(h, head * 2 * half + j * half + i);
            assert_eq!(p.gguf_row_of_hf(h), g);
            seen[h as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(QkPermutation::new(10, 3), None);
        assert_eq!(QkPermutation::new(10, 0), None);
        assert_eq!(QkPermutation::new(8, u64::MAX), None);
    }

    #[test]
    fn huge_and_empty_permutations_cost_nothing() {
        let p = QkPermutation::new(1 << 62, 2).unwrap();
        let last = (1u64 << 62) - 1;
        assert_eq!(p.gguf_row_of_hf(p.hf_row_of_gguf(last)), last);
        let empty = QkPermutation::new(0, 4).unwrap();
        assert_eq!(empty.hf_row_of_gguf(0), 0);
    }
}
