//! Loading across processes: what each of `world` ranks reads.
//!
//! The library knows nothing of ranks, processes or collectives; it gives
//! deterministic plans (every rank computes every rank's plan alike, from
//! the headers and the arguments alone) and reads them. Two kinds:
//!
//! - **Rank plans** ([`rank_plan`]): tensor parallelism. A [`RankRules`]
//!   set maps each tensor name to a [`RankRule`]: split along a dimension
//!   (column-parallel layers along 0, row-parallel along 1, fused
//!   projections section by section), replicated, or owned whole by one
//!   rank (experts by index). Each rank's [`Share`]s are the slices it
//!   reads, and it reads only their bytes.
//! - **Cooperative loads** ([`Cooperative`]): every rank needs every
//!   tensor. The tensors are laid out in one flat buffer; each rank reads a
//!   disjoint, balanced segment of it (cut at byte level, across tensor
//!   and file boundaries), and the caller's collective (a broadcast of each
//!   rank's segment, or an all-gather) fills in the rest, so that each byte
//!   leaves storage once in all.
//!
//! # The rule language
//!
//! One rule a line, `pattern = rule`; `#` starts a comment. The first
//! pattern matching the whole name wins; a name no pattern matches is
//! replicated. In patterns `*` matches any run of characters (dots
//! included) and `{E}` (any name in braces) a run of decimal digits, which
//! `owner(E)` refers to. Rules:
//!
//! - `replicated`: every rank reads the whole tensor.
//! - `split(D)`: rank `r` of `W` reads the `r`-th of `W` equal parts of
//!   dimension `D`. `split(D, sections=K)` splits dimension `D` into `K`
//!   equal sections first (fused qkv: `K=3`; gate_up: `K=2`) and gives rank
//!   `r` its part of each, in order; `sections=[a,b,c]` makes sections in
//!   the proportions `a:b:c` (fused qkv with fewer key/value heads). Every
//!   section must divide by `W` (torch's and vLLM's convention): an uneven
//!   split is refused, naming the tensor.
//! - `owner(E)`: the tensor is read whole by rank `E mod W` alone;
//!   `owner(E, blocks=N)` by rank `E * W / N` (`N` experts in contiguous
//!   blocks of `N / W`). `E` is a captured name or a number.
//!
//! ```
//! use tensorfile_core::ranks::{rank_plan, RankRules};
//! use tensorfile_core::{Dtype, TensorInfo};
//! let rules = RankRules::parse("*.q_proj.weight = split(0)\n*.o_proj.weight = split(1)")?;
//! let infos = [
//!     TensorInfo { name: "l.0.q_proj.weight", dtype: Dtype::F32, shape: &[8, 4], data_offsets: (0, 128) },
//!     TensorInfo { name: "l.0.o_proj.weight", dtype: Dtype::F32, shape: &[4, 8], data_offsets: (128, 256) },
//! ];
//! let plan = rank_plan(infos, &rules, 2, 1)?;
//! assert_eq!(plan[0].shape, [4, 4]); // rows 4..8
//! assert_eq!(plan[1].shape, [4, 4]); // columns 4..8
//! # Ok::<(), tensorfile_core::Error>(())
//! ```

use std::ops::Range;

use crate::error::{Error, Result};
use crate::file::SafeTensors;
use crate::header::TensorInfo;
use crate::set::ShardedTensors;
use crate::slice::SliceArg;
use crate::source::ByteSource;
use crate::Dtype;

/// What one rank reads of a tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankRule {
    /// Every rank reads all of it.
    Replicated,
    /// Split along `dim`: the dimension is cut into sections (in these
    /// proportions; `[1]` for a plain split) and each section into `world`
    /// equal parts; a rank reads its part of every section.
    Split {
        /// The dimension split.
        dim: usize,
        /// The sections' proportions.
        sections: Vec<u64>,
    },
    /// Read whole by one rank alone.
    Owned {
        /// The rank (already reduced to the world).
        rank: usize,
    },
}

/// Who owns a tensor under an `owner(..)` rule, before the world is known.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    /// A number, or the name captured by `{E}`.
    Index(OwnerIndex),
    /// `blocks=N`: index `E` of `N` in contiguous blocks.
    Blocks(OwnerIndex, u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum OwnerIndex {
    Fixed(u64),
    Captured(String),
}

/// A rule as written, before a name and a world resolve it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RuleSpec {
    Replicated,
    Split { dim: usize, sections: Vec<u64> },
    Owner(Owner),
}

/// One piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    Star,
    Capture(String),
}

/// Tensor name patterns and their rules (see the module documentation for
/// the language), in order: the first match wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankRules {
    rules: Vec<(String, Vec<Token>, RuleSpec)>,
}

/// The tensor-parallel layout of Llama-like models (Llama, Mistral, Qwen,
/// Mixtral and most decoder-only models in transformers' naming), as vLLM
/// shards them: column-parallel q/k/v/gate/up (and their fused forms),
/// row-parallel o/down, vocabulary-parallel embedding and output head,
/// experts owned whole by rank `E mod W`, the rest (norms, row-parallel
/// biases) replicated.
pub const LLAMA: &str = "\
# experts first: their names also end in gate_proj, up_proj, down_proj
*.experts.{E}.* = owner(E)
*.q_proj.weight = split(0)
*.q_proj.bias = split(0)
*.k_proj.weight = split(0)
*.k_proj.bias = split(0)
*.v_proj.weight = split(0)
*.v_proj.bias = split(0)
*.qkv_proj.weight = split(0, sections=3)
*.qkv_proj.bias = split(0, sections=3)
*.o_proj.weight = split(1)
*.gate_proj.weight = split(0)
*.up_proj.weight = split(0)
*.gate_up_proj.weight = split(0, sections=2)
*.down_proj.weight = split(1)
*embed_tokens.weight = split(0)
lm_head.weight = split(0)
* = replicated
";

impl RankRules {
    /// Parses rules (see the module documentation).
    ///
    /// # Errors
    /// [`Error::RankRules`] naming the line and what is wrong with it.
    pub fn parse(text: &str) -> Result<RankRules> {
        let mut rules = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |problem: String| Error::RankRules {
                line: i + 1,
                problem,
            };
            let (pattern, rule) = line
                .split_once('=')
                .ok_or_else(|| bad(format!("{line:?} is not `pattern = rule`")))?;
            let (pattern, rule) = (pattern.trim(), rule.trim());
            let tokens = parse_pattern(pattern).map_err(&bad)?;
            let spec = parse_rule(rule, &tokens).map_err(&bad)?;
            rules.push((pattern.to_string(), tokens, spec));
        }
        Ok(RankRules { rules })
    }

    /// A preset by name: `"llama"` ([`LLAMA`]).
    ///
    /// # Errors
    /// [`Error::RankRules`] for a name that is not a preset.
    pub fn preset(name: &str) -> Result<RankRules> {
        match name {
            "llama" => RankRules::parse(LLAMA),
            other => Err(Error::RankRules {
                line: 0,
                problem: format!("no preset named {other:?} (there is \"llama\")"),
            }),
        }
    }

    /// The rule for a tensor named `name`, with `world` ranks: the first
    /// rule whose pattern matches, or [`RankRule::Replicated`].
    ///
    /// # Errors
    /// [`Error::RankRules`] when `world` is 0.
    pub fn rule_for(&self, name: &str, world: usize) -> Result<RankRule> {
        if world == 0 {
            return Err(Error::RankRules {
                line: 0,
                problem: "a world of 0 ranks".to_string(),
            });
        }
        for (_, tokens, spec) in &self.rules {
            let Some(captures) = matches(tokens, name) else {
                continue;
            };
            let index = |i: &OwnerIndex| match i {
                OwnerIndex::Fixed(n) => *n,
                // A capture matched digits only; past u64 wraps to its
                // last digits' value, still deterministic.
                OwnerIndex::Captured(c) => captures
                    .iter()
                    .find(|(k, _)| k == c)
                    .map_or(0, |(_, v)| v.parse::<u64>().unwrap_or(u64::MAX)),
            };
            let w = world as u64;
            return Ok(match spec {
                RuleSpec::Replicated => RankRule::Replicated,
                RuleSpec::Split { dim, sections } => RankRule::Split {
                    dim: *dim,
                    sections: sections.clone(),
                },
                RuleSpec::Owner(Owner::Index(i)) => RankRule::Owned {
                    rank: (index(i) % w) as usize,
                },
                RuleSpec::Owner(Owner::Blocks(i, n)) => RankRule::Owned {
                    rank: ((u128::from(index(i) % n) * u128::from(w) / u128::from(*n)) as u64)
                        as usize,
                },
            });
        }
        Ok(RankRule::Replicated)
    }
}

fn parse_pattern(pattern: &str) -> std::result::Result<Vec<Token>, String> {
    if pattern.is_empty() {
        return Err("an empty pattern".to_string());
    }
    let mut tokens = Vec::new();
    let mut literal = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '{' => {
                if !literal.is_empty() {
                    tokens.push(Token::Literal(std::mem::take(&mut literal)));
                }
                if c == '*' {
                    tokens.push(Token::Star);
                } else {
                    let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                    if name.is_empty()
                        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(format!(
                            "pattern {pattern:?}: a capture is `{{NAME}}`, letters, digits and _"
                        ));
                    }
                    tokens.push(Token::Capture(name));
                }
            }
            '}' => return Err(format!("pattern {pattern:?}: an unmatched `}}`")),
            c if c.is_whitespace() => {
                return Err(format!("pattern {pattern:?} holds a space"));
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        tokens.push(Token::Literal(literal));
    }
    Ok(tokens)
}

fn parse_rule(rule: &str, tokens: &[Token]) -> std::result::Result<RuleSpec, String> {
    let compact: String = rule.chars().filter(|c| !c.is_whitespace()).collect();
    if compact == "replicated" {
        return Ok(RuleSpec::Replicated);
    }
    let call = |name: &str| {
        compact
            .strip_prefix(name)
            .and_then(|r| r.strip_prefix('('))
            .and_then(|r| r.strip_suffix(')'))
            .map(str::to_string)
    };
    let number = |s: &str, what: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("rule {rule:?}: {what} {s:?} is not a non-negative integer"))
    };
    if let Some(args) = call("split") {
        let (dim, rest) = args
            .split_once(',')
            .map_or((args.as_str(), None), |(d, r)| (d, Some(r)));
        let dim = usize::try_from(number(dim, "the dimension")?)
            .map_err(|_| format!("rule {rule:?}: the dimension is too large"))?;
        let sections = match rest {
            None => vec![1],
            Some(r) => {
                let value = r
                    .strip_prefix("sections=")
                    .ok_or_else(|| format!("rule {rule:?}: split takes `sections=K` or `sections=[a,b,..]` after the dimension"))?;
                let sections =
                    if let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                        list.split(',')
                            .map(|s| number(s, "a section"))
                            .collect::<std::result::Result<Vec<_>, _>>()?
                    } else {
                        let k = number(value, "the number of sections")?;
                        if k > 1 << 16 {
                            return Err(format!("rule {rule:?}: more than 65536 sections"));
                        }
                        vec![1; k as usize]
                    };
                if sections.is_empty() || sections.contains(&0) {
                    return Err(format!("rule {rule:?}: sections must be positive"));
                }
                sections
            }
        };
        return Ok(RuleSpec::Split { dim, sections });
    }
    if let Some(args) = call("owner") {
        let (index, rest) = args
            .split_once(',')
            .map_or((args.as_str(), None), |(d, r)| (d, Some(r)));
        let index = if index.chars().all(|c| c.is_ascii_digit()) && !index.is_empty() {
            OwnerIndex::Fixed(number(index, "the owner")?)
        } else if tokens.contains(&Token::Capture(index.to_string())) {
            OwnerIndex::Captured(index.to_string())
        } else {
            return Err(format!(
                "rule {rule:?}: {index:?} is neither a number nor a `{{{index}}}` of the pattern"
            ));
        };
        return Ok(RuleSpec::Owner(match rest {
            None => Owner::Index(index),
            Some(r) => {
                let n = r.strip_prefix("blocks=").ok_or_else(|| {
                    format!("rule {rule:?}: owner takes `blocks=N` after the index")
                })?;
                let n = number(n, "the number of blocks")?;
                if n == 0 {
                    return Err(format!("rule {rule:?}: blocks must be positive"));
                }
                Owner::Blocks(index, n)
            }
        }));
    }
    Err(format!(
        "rule {rule:?} is not `replicated`, `split(D)`, `split(D, sections=K)` or `owner(E)`"
    ))
}

/// Whether `tokens` match all of `name`; the captures if so.
fn matches(tokens: &[Token], name: &str) -> Option<Vec<(String, String)>> {
    fn go(tokens: &[Token], name: &str, caps: &mut Vec<(String, String)>) -> bool {
        let Some((first, rest)) = tokens.split_first() else {
            return name.is_empty();
        };
        match first {
            Token::Literal(l) => name
                .strip_prefix(l.as_str())
                .is_some_and(|n| go(rest, n, caps)),
            Token::Star => (0..=name.len())
                .filter(|&i| name.is_char_boundary(i))
                .any(|i| go(rest, &name[i..], caps)),
            Token::Capture(c) => {
                let digits = name.bytes().take_while(u8::is_ascii_digit).count();
                (1..=digits).rev().any(|i| {
                    caps.push((c.clone(), name[..i].to_string()));
                    if go(rest, &name[i..], caps) {
                        return true;
                    }
                    caps.pop();
                    false
                })
            }
        }
    }
    // Names are short, patterns have few stars: the backtracking is cheap
    // (a star tries each position of what remains once per star).
    let mut caps = Vec::new();
    go(tokens, name, &mut caps).then_some(caps)
}

/// What one rank reads of one tensor: its part along `dim` of each
/// section, or all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The tensor's name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// The whole tensor's shape.
    pub full_shape: Vec<u64>,
    /// The share's shape (the parts of the sections put together along
    /// `dim`).
    pub shape: Vec<u64>,
    /// The rule that gave it.
    pub rule: RankRule,
    /// The dimension split (`None`: the whole tensor).
    pub dim: Option<usize>,
    /// The positions along `dim` read, one range per section, in order.
    pub parts: Vec<Range<u64>>,
}

impl Share {
    /// The share's size in bytes.
    pub fn nbytes(&self) -> u64 {
        // The full tensor's bytes are bounded; a share is smaller.
        let numel: u64 = self.shape.iter().product();
        numel * self.dtype.bits() as u64 / 8
    }

    /// The slices (as [`SafeTensors::slice`] takes them) read, one per
    /// part; none for the whole tensor.
    pub fn slices(&self) -> Vec<Vec<SliceArg>> {
        let Some(dim) = self.dim else {
            return Vec::new();
        };
        self.parts
            .iter()
            .map(|p| {
                let mut args = vec![SliceArg::full(); dim + 1];
                args[dim] = SliceArg::range(p.start as i64, p.end as i64);
                args
            })
            .collect()
    }

    /// Reads the share from `from` into `out` (exactly [`Share::nbytes`],
    /// C order): only its bytes are read. Parts along dimension 0 land in
    /// place; parts along an inner dimension are read each into memory of
    /// its own and interleaved.
    ///
    /// # Errors
    /// As `read_into` of the file or set; [`Error::DestinationLength`]
    /// when `out` is not the share's size.
    pub fn read_into(&self, from: &impl ReadTensor, out: &mut [u8]) -> Result<()> {
        if out.len() as u64 != self.nbytes() {
            return Err(Error::DestinationLength {
                tensor: self.name.clone(),
                expected: self.nbytes(),
                actual: out.len() as u64,
            });
        }
        let Some(dim) = self.dim else {
            return from.read_tensor_into(&self.name, None, out);
        };
        let part_len = |p: &Range<u64>| p.end - p.start;
        if dim == 0 {
            // Each part is one run of the tensor, and they are consecutive
            // blocks of `out`.
            let mut at = 0;
            for (p, slice) in self.parts.iter().zip(self.slices()) {
                let n = (part_len(p) * self.row_bytes(dim)) as usize;
                from.read_tensor_into(&self.name, Some(&slice), &mut out[at..at + n])?;
                at += n;
            }
            return Ok(());
        }
        // Along an inner dimension: for each position of the outer
        // dimensions, one run per part, which are consecutive in `out` too.
        // Read exactly those runs (no gaps between them read), in groups on
        // the library's pool.
        let inner = self.row_bytes(dim);
        let len = self.full_shape[dim];
        let mut runs: Vec<Run<'_>> = Vec::new();
        let mut rest = out;
        let outer: u64 = self.shape[..dim].iter().product();
        for o in 0..outer {
            for p in &self.parts {
                let n = (part_len(p) * inner) as usize;
                let (dest, tail) = std::mem::take(&mut rest).split_at_mut(n);
                rest = tail;
                if n > 0 {
                    runs.push(((o * len + p.start) * inner, dest));
                }
            }
        }
        let per_group = (MIN_GROUP / inner.max(1)).max(1) as usize;
        let groups: Vec<std::sync::Mutex<&mut [Run<'_>]>> = runs
            .chunks_mut(per_group)
            .map(std::sync::Mutex::new)
            .collect();
        let failed = std::sync::Mutex::new(None);
        crate::parallel::for_each_index(groups.len(), |i| {
            let mut group = groups[i]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match from.read_data_ranges(&self.name, &mut group) {
                Ok(()) => true,
                Err(e) => {
                    failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get_or_insert(e);
                    false
                }
            }
        });
        match failed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Bytes of one position of `dim` and everything inside it.
    fn row_bytes(&self, dim: usize) -> u64 {
        self.full_shape[dim + 1..].iter().product::<u64>() * self.dtype.bits() as u64 / 8
    }
}

/// A run of a tensor's data to read: its first byte, and where it goes.
type Run<'a> = (u64, &'a mut [u8]);

/// A share along an inner dimension is read in groups of runs of about
/// this many bytes, one group per task of the pool.
const MIN_GROUP: u64 = 1 << 20;

/// A file or set that reads tensors, slices of them, and byte ranges of
/// their data into the caller's memory: what plans are read from.
pub trait ReadTensor: Sync {
    /// Reads the tensor `name`, or a slice of it, into `out` (exactly its
    /// bytes), as [`SafeTensors::read_into`].
    ///
    /// # Errors
    /// As [`SafeTensors::read_into`].
    fn read_tensor_into(
        &self,
        name: &str,
        slice: Option<&[SliceArg]>,
        out: &mut [u8],
    ) -> Result<()>;

    /// Reads `out.len()` bytes of the tensor `name`'s data from byte
    /// `start` of it.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::Slice`] for a range past the
    /// tensor's end, or the read's error; each names the file.
    fn read_data_at(&self, name: &str, start: u64, out: &mut [u8]) -> Result<()>;

    /// Reads several byte ranges of the tensor `name`'s data, each
    /// `(start, out)` as [`ReadTensor::read_data_at`], with one call to the
    /// source's [`ByteSource::read_ranges`] (which a remote source turns
    /// into few requests).
    ///
    /// # Errors
    /// As [`ReadTensor::read_data_at`].
    fn read_data_ranges(&self, name: &str, ranges: &mut [(u64, &mut [u8])]) -> Result<()>;
}

fn data_at<S: ByteSource>(
    file: &SafeTensors<S>,
    name: &str,
    start: u64,
    out: &mut [u8],
) -> Result<()> {
    data_ranges(file, name, &mut [(start, out)])
}

/// Reads byte ranges of a tensor's data, checked against its length.
fn data_ranges<S: ByteSource>(
    file: &SafeTensors<S>,
    name: &str,
    ranges: &mut [(u64, &mut [u8])],
) -> Result<()> {
    let named = |e: Error| match file.path() {
        Some(p) => e.at(p),
        None => e,
    };
    let info = file.info(name)?;
    let base = file.header().data_start() + info.data_offsets.0;
    for (start, out) in ranges.iter_mut() {
        let end = start
            .checked_add(out.len() as u64)
            .filter(|&e| e <= info.nbytes());
        if end.is_none() {
            return Err(named(Error::Slice {
                tensor: name.to_string(),
                problem: format!(
                    "bytes {start}..{} are past the end of its {} bytes",
                    *start as u128 + out.len() as u128,
                    info.nbytes()
                ),
            }));
        }
        *start += base;
    }
    file.source()
        .read_ranges(ranges)
        .map_err(|e| named(Error::Stream(e)))
}

impl<S: ByteSource> ReadTensor for SafeTensors<S> {
    fn read_tensor_into(
        &self,
        name: &str,
        slice: Option<&[SliceArg]>,
        out: &mut [u8],
    ) -> Result<()> {
        self.read_into(name, slice, out)
    }

    fn read_data_at(&self, name: &str, start: u64, out: &mut [u8]) -> Result<()> {
        data_at(self, name, start, out)
    }

    fn read_data_ranges(&self, name: &str, ranges: &mut [(u64, &mut [u8])]) -> Result<()> {
        data_ranges(self, name, ranges)
    }
}

impl ReadTensor for ShardedTensors {
    fn read_tensor_into(
        &self,
        name: &str,
        slice: Option<&[SliceArg]>,
        out: &mut [u8],
    ) -> Result<()> {
        self.read_into(name, slice, out)
    }

    fn read_data_at(&self, name: &str, start: u64, out: &mut [u8]) -> Result<()> {
        let shard = self.shard_of(name).ok_or_else(|| {
            Error::NotFound(name.to_string()).at(self.index_path().unwrap_or(self.dir()))
        })?;
        data_at(shard.file(), name, start, out)
    }

    fn read_data_ranges(&self, name: &str, ranges: &mut [(u64, &mut [u8])]) -> Result<()> {
        let shard = self.shard_of(name).ok_or_else(|| {
            Error::NotFound(name.to_string()).at(self.index_path().unwrap_or(self.dir()))
        })?;
        data_ranges(shard.file(), name, ranges)
    }
}

/// Rank `rank`'s shares of the tensors `infos` (in their order) under
/// `rules`, with `world` ranks: every tensor it reads, whole or in part;
/// tensors another rank owns are left out. Deterministic: any process
/// computes any rank's plan alike.
///
/// # Errors
/// [`Error::RankRules`] for a world of 0 or a rank outside it;
/// [`Error::Slice`] naming the tensor for a split of a dimension it does
/// not have, or of a section that does not divide by `world`.
pub fn rank_plan<'a>(
    infos: impl IntoIterator<Item = TensorInfo<'a>>,
    rules: &RankRules,
    world: usize,
    rank: usize,
) -> Result<Vec<Share>> {
    if rank >= world {
        return Err(Error::RankRules {
            line: 0,
            problem: format!("rank {rank} is outside a world of {world}"),
        });
    }
    let mut shares = Vec::new();
    for info in infos {
        let rule = rules.rule_for(info.name, world)?;
        let mut share = Share {
            name: info.name.to_string(),
            dtype: info.dtype,
            full_shape: info.shape.to_vec(),
            shape: info.shape.to_vec(),
            rule: rule.clone(),
            dim: None,
            parts: Vec::new(),
        };
        match &rule {
            RankRule::Replicated => {}
            RankRule::Owned { rank: owner } => {
                if *owner != rank {
                    continue;
                }
            }
            RankRule::Split { dim, sections } => {
                let refuse = |problem: String| Error::Slice {
                    tensor: info.name.to_string(),
                    problem,
                };
                let len = *info.shape.get(*dim).ok_or_else(|| {
                    refuse(format!(
                        "split({dim}) of a tensor of {} dimensions {:?}",
                        info.shape.len(),
                        info.shape
                    ))
                })?;
                let total: u128 = sections.iter().map(|&s| u128::from(s)).sum();
                let w = world as u64;
                let mut start = 0u64;
                for &s in sections {
                    let section = u128::from(len) * u128::from(s);
                    if section % total != 0 {
                        return Err(refuse(format!(
                            "dimension {dim} of {len} does not divide into sections {sections:?}"
                        )));
                    }
                    let section = (section / total) as u64;
                    if !section.is_multiple_of(w) {
                        return Err(refuse(format!(
                            "a section of {section} of dimension {dim} (of {len}) does not divide among {world} ranks"
                        )));
                    }
                    let part = section / w;
                    let from = start + part * rank as u64;
                    share.parts.push(from..from + part);
                    start += section;
                }
                share.dim = Some(*dim);
                share.shape[*dim] = len / w;
            }
        }
        shares.push(share);
    }
    Ok(shares)
}

/// Where tensors are placed in a cooperative load's flat buffer.
pub const COOPERATIVE_ALIGN: u64 = 64;

/// A tensor in a cooperative load's flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Its name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Where its bytes start in the buffer ([`COOPERATIVE_ALIGN`]-aligned).
    pub at: u64,
    /// Its size in bytes.
    pub nbytes: u64,
}

/// A run of one tensor's bytes a rank reads: `len` bytes from byte `start`
/// of the tensor's data, to `at` in the flat buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The tensor (an index into [`Cooperative::tensors`]).
    pub tensor: usize,
    /// The first byte of the tensor's data read.
    pub start: u64,
    /// Bytes read.
    pub len: u64,
    /// Where they go in the flat buffer.
    pub at: u64,
}

/// A cooperative load: tensors every rank needs, laid out in one flat
/// buffer (in the order given, each [`COOPERATIVE_ALIGN`]-aligned, the
/// length rounded up to a multiple of `world`), cut into `world` equal
/// segments. Rank `r` reads the tensor bytes in segment `r` (padding is not
/// read); the caller's collective gives every rank the other segments
/// (broadcast from rank `s` of segment `s`, or one all-gather, as the
/// segments are equal). Every byte of every tensor is in exactly one
/// segment, so each leaves storage once in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cooperative {
    /// The tensors and where they are.
    pub tensors: Vec<Placed>,
    /// The flat buffer's length, a multiple of `world`.
    pub len: u64,
    /// The number of ranks.
    pub world: usize,
}

impl Cooperative {
    /// Lays out `infos` (best in read order: file by file, each in offset
    /// order, as [`crate::Header::tensors`] and
    /// [`ShardedTensors::infos`] give them, so that a rank's pieces are
    /// long runs of each file) for `world` ranks.
    ///
    /// # Errors
    /// [`Error::RankRules`] for a world of 0.
    pub fn new<'a>(
        infos: impl IntoIterator<Item = TensorInfo<'a>>,
        world: usize,
    ) -> Result<Cooperative> {
        if world == 0 {
            return Err(Error::RankRules {
                line: 0,
                problem: "a world of 0 ranks".to_string(),
            });
        }
        let mut at = 0u64;
        let tensors: Vec<Placed> = infos
            .into_iter()
            .map(|t| {
                at = at.div_ceil(COOPERATIVE_ALIGN) * COOPERATIVE_ALIGN;
                let placed = Placed {
                    name: t.name.to_string(),
                    dtype: t.dtype,
                    shape: t.shape.to_vec(),
                    at,
                    nbytes: t.nbytes(),
                };
                at += t.nbytes();
                placed
            })
            .collect();
        let len = at.div_ceil(world as u64) * world as u64;
        Ok(Cooperative {
            tensors,
            len,
            world,
        })
    }

    /// Rank `rank`'s segment of the flat buffer (empty past the world).
    pub fn segment(&self, rank: usize) -> Range<u64> {
        let seg = self.len / self.world as u64;
        let r = rank.min(self.world) as u64;
        r * seg..(r * seg + seg).min(self.len).max(r * seg)
    }

    /// The runs of tensor bytes in rank `rank`'s segment, in buffer order.
    pub fn pieces(&self, rank: usize) -> Vec<Piece> {
        let seg = self.segment(rank);
        // The first tensor ending after the segment's start.
        let first = self
            .tensors
            .partition_point(|t| t.at + t.nbytes <= seg.start);
        self.tensors[first..]
            .iter()
            .enumerate()
            .take_while(|(_, t)| t.at < seg.end)
            .filter_map(|(i, t)| {
                let from = t.at.max(seg.start);
                let to = (t.at + t.nbytes).min(seg.end);
                (from < to).then_some(Piece {
                    tensor: first + i,
                    start: from - t.at,
                    len: to - from,
                    at: from,
                })
            })
            .collect()
    }

    /// The bytes rank `rank` reads.
    pub fn share_bytes(&self, rank: usize) -> u64 {
        self.pieces(rank).iter().map(|p| p.len).sum()
    }

    /// Reads rank `rank`'s pieces from `from` into `buf`: the whole flat
    /// buffer ([`Cooperative::len`] bytes; only the segment is written), or
    /// the segment alone (its length; a staging buffer to copy to a
    /// device). Returns the bytes read.
    ///
    /// # Errors
    /// [`Error::DestinationLength`] when `buf` is neither length; else the
    /// first read's error.
    pub fn read_share(&self, rank: usize, from: &impl ReadTensor, buf: &mut [u8]) -> Result<u64> {
        let seg = self.segment(rank);
        let base = if buf.len() as u64 == self.len {
            0
        } else if buf.len() as u64 == seg.end - seg.start {
            seg.start
        } else {
            return Err(Error::DestinationLength {
                tensor: format!(
                    "<rank {rank}'s segment {}..{} of {}>",
                    seg.start, seg.end, self.len
                ),
                expected: self.len,
                actual: buf.len() as u64,
            });
        };
        let pieces = self.pieces(rank);
        // Pieces cut into chunks, so that a large tensor is read on every
        // thread; each chunk has a disjoint part of the segment.
        let mut rest = &mut buf[(seg.start - base) as usize..(seg.end - base) as usize];
        let mut cursor = seg.start;
        let mut jobs = Vec::new();
        for p in &pieces {
            let (_, tail) = rest.split_at_mut((p.at - cursor) as usize);
            rest = tail;
            let mut done = 0;
            while done < p.len {
                let n = (p.len - done).min(crate::read::DEFAULT_CHUNK);
                let (dest, tail) = rest.split_at_mut(n as usize);
                jobs.push(std::sync::Mutex::new((p.tensor, p.start + done, dest)));
                rest = tail;
                done += n;
            }
            cursor = p.at + p.len;
        }
        let failed = std::sync::Mutex::new(None);
        crate::parallel::for_each_index(jobs.len(), |i| {
            let mut job = jobs[i]
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (tensor, start, ref mut dest) = *job;
            match from.read_data_at(&self.tensors[tensor].name, start, dest) {
                Ok(()) => true,
                Err(e) => {
                    failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get_or_insert(e);
                    false
                }
            }
        });
        if let Some(e) = failed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            return Err(e);
        }
        Ok(pieces.iter().map(|p| p.len).sum())
    }
}
