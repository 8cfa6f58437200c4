//! Which tensors of A and B are compared with which: by name, a quantized
//! weight by its logical name against the other side's plain tensor (so
//! that a model and its quantization compare weight by weight), both
//! sides' parts by their own names when both are quantized; and what is
//! left on one side only, with the tensors whose bytes are the same as one
//! on the other side under another name (moved or tied weights).

use std::collections::{BTreeMap, BTreeSet, HashMap};

#[cfg(feature = "digest")]
use crate::digest::{tensor_digests, Sha256Digest};
use crate::quant::LogicalWeight;
use crate::values::Catalog;
use crate::writer::TensorData;
use crate::Result;

/// One side of a pair.
#[derive(Clone, Copy)]
pub enum Item<'c, 'a> {
    /// A stored tensor.
    Plain(&'a dyn TensorData<crate::Error>),
    /// A quantized weight, read dequantized.
    Quantized(&'c LogicalWeight<'a>),
}

/// What [`match_names`] found.
pub struct Matched<'c, 'a> {
    /// Pairs to compare, by name: (name, A's, B's).
    pub pairs: Vec<(String, Item<'c, 'a>, Item<'c, 'a>)>,
    /// Names only in A.
    pub only_in_a: Vec<String>,
    /// Names only in B.
    pub only_in_b: Vec<String>,
    /// (A's name, B's name) of tensors with the same dtype, shape and
    /// bytes under different names, one of them on its side only.
    pub renamed: Vec<(String, String)>,
}

/// The logical entries of a side: plain tensors that are no quantized
/// weight's part, and quantized weights.
fn entries<'c, 'a>(c: &'c Catalog<'a>) -> BTreeMap<String, Item<'c, 'a>> {
    let mut out = BTreeMap::new();
    for t in c.tensors() {
        if c.weight_of_part(t.name()).is_none() {
            out.insert(t.name().to_string(), Item::Plain(*t));
        }
    }
    for w in c.weights() {
        out.insert(w.name.clone(), Item::Quantized(w));
    }
    out
}

/// Pairs the tensors of A and B; with `find_moved`, hashes the tensors on
/// one side only (and those of the other side they may be) to find the
/// ones that moved.
///
/// # Errors
/// A failed read while hashing the tensors that may have moved.
pub fn match_names<'c, 'a>(
    a: &'c Catalog<'a>,
    b: &'c Catalog<'a>,
    find_moved: bool,
) -> Result<Matched<'c, 'a>> {
    let (ea, eb) = (entries(a), entries(b));
    let mut pairs = Vec::new();
    let mut only_a: Vec<(String, Item)> = Vec::new();
    let mut only_b: Vec<(String, Item)> = Vec::new();
    for (name, ia) in &ea {
        match (ia, eb.get(name)) {
            (_, None) => only_a.push((name.clone(), *ia)),
            // Both quantized: their parts compare as stored.
            (Item::Quantized(wa), Some(Item::Quantized(wb))) => {
                for pa in &wa.parts {
                    match (
                        a.tensor(pa),
                        wb.parts.contains(pa).then(|| b.tensor(pa)).flatten(),
                    ) {
                        (Some(ta), Some(tb)) => {
                            pairs.push((pa.to_string(), Item::Plain(ta), Item::Plain(tb)))
                        }
                        (Some(ta), None) => only_a.push((pa.to_string(), Item::Plain(ta))),
                        _ => {}
                    }
                }
                for pb in wb.parts.iter().filter(|p| !wa.parts.contains(p)) {
                    if let Some(tb) = b.tensor(pb) {
                        only_b.push((pb.to_string(), Item::Plain(tb)));
                    }
                }
            }
            (_, Some(ib)) => pairs.push((name.clone(), *ia, *ib)),
        }
    }
    for (name, ib) in &eb {
        if !ea.contains_key(name) {
            only_b.push((name.clone(), *ib));
        }
    }
    let renamed = if find_moved {
        moved(&only_a, &ea, &only_b, &eb)?
    } else {
        Vec::new()
    };
    Ok(Matched {
        pairs,
        only_in_a: only_a.into_iter().map(|(n, _)| n).collect(),
        only_in_b: only_b.into_iter().map(|(n, _)| n).collect(),
        renamed,
    })
}

/// (dtype, shape, bytes) of a plain item.
fn key(i: &Item<'_, '_>) -> Option<(crate::Dtype, Vec<u64>, u64)> {
    match i {
        Item::Plain(t) => Some((t.dtype(), t.shape().to_vec(), t.byte_len())),
        Item::Quantized(_) => None,
    }
}

/// A side's plain tensors whose key is one of `wanted`.
fn pick<'a>(
    all: &BTreeMap<String, Item<'_, 'a>>,
    wanted: &BTreeSet<(crate::Dtype, Vec<u64>, u64)>,
) -> Vec<(String, &'a dyn TensorData<crate::Error>)> {
    all.iter()
        .filter_map(|(n, i)| match i {
            Item::Plain(t) if key(i).is_some_and(|k| wanted.contains(&k)) => Some((n.clone(), *t)),
            _ => None,
        })
        .collect()
}

/// The sha256 of each candidate.
#[cfg(feature = "digest")]
fn hash(c: &[(String, &dyn TensorData<crate::Error>)]) -> Result<HashMap<String, Sha256Digest>> {
    let tensors: Vec<&dyn TensorData<crate::Error>> = c.iter().map(|(_, t)| *t).collect();
    Ok(c.iter()
        .map(|(n, _)| n.clone())
        .zip(tensor_digests(&tensors)?)
        .collect())
}

/// Bytes per step of the fingerprint and the comparison without sha256:
/// fixed, so equal bytes feed the hasher the same calls however a tensor
/// is stored, and memory stays at two blocks whatever the tensor's size.
#[cfg(not(feature = "digest"))]
const BLOCK: u64 = 1 << 16;

/// The ranges `(offset, len)` of `t`'s blocks of [`BLOCK`] bytes.
#[cfg(not(feature = "digest"))]
fn blocks(t: &dyn TensorData<crate::Error>) -> impl Iterator<Item = (u64, usize)> {
    let len = t.byte_len();
    (0..len.div_ceil(BLOCK)).map(move |k| (k * BLOCK, (len - k * BLOCK).min(BLOCK) as usize))
}

/// Without sha256 (no `digest` feature): a 64-bit fingerprint of each
/// candidate, which [`same_bytes`] confirms when two agree.
#[cfg(not(feature = "digest"))]
fn hash(c: &[(String, &dyn TensorData<crate::Error>)]) -> Result<HashMap<String, u64>> {
    use std::hash::Hasher;
    let mut out = HashMap::with_capacity(c.len());
    let mut scratch = Vec::new();
    for (name, t) in c {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (at, n) in blocks(*t) {
            h.write(t.bytes_at(at, n, &mut scratch)?);
        }
        out.insert(name.clone(), h.finish());
    }
    Ok(out)
}

/// Whether two tensors of one size hold the same bytes: sha256 equality
/// already says so.
#[cfg(feature = "digest")]
fn same_bytes(_: &dyn TensorData<crate::Error>, _: &dyn TensorData<crate::Error>) -> Result<bool> {
    Ok(true)
}

/// Whether two tensors of one size hold the same bytes, compared block by
/// block (a 64-bit fingerprint may collide).
#[cfg(not(feature = "digest"))]
fn same_bytes(a: &dyn TensorData<crate::Error>, b: &dyn TensorData<crate::Error>) -> Result<bool> {
    if a.byte_len() != b.byte_len() {
        return Ok(false);
    }
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    for (at, n) in blocks(a) {
        if a.bytes_at(at, n, &mut sa)? != b.bytes_at(at, n, &mut sb)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The tensors on one side only whose bytes are a tensor's of the other
/// side: only those whose dtype, shape and size a tensor on one side only
/// shares are hashed.
fn moved(
    only_a: &[(String, Item<'_, '_>)],
    all_a: &BTreeMap<String, Item<'_, '_>>,
    only_b: &[(String, Item<'_, '_>)],
    all_b: &BTreeMap<String, Item<'_, '_>>,
) -> Result<Vec<(String, String)>> {
    if only_a.is_empty() && only_b.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: BTreeSet<_> = only_a
        .iter()
        .chain(only_b)
        .filter_map(|(_, i)| key(i))
        .collect();
    let (ca, cb) = (pick(all_a, &wanted), pick(all_b, &wanted));
    let (ha, hb) = (hash(&ca)?, hash(&cb)?);
    let only_a: BTreeSet<&str> = only_a.iter().map(|(n, _)| n.as_str()).collect();
    let only_b: BTreeSet<&str> = only_b.iter().map(|(n, _)| n.as_str()).collect();
    let mut out = Vec::new();
    for (na, ta) in &ca {
        for (nb, tb) in &cb {
            if na == nb || !(only_a.contains(na.as_str()) || only_b.contains(nb.as_str())) {
                continue;
            }
            let same = (ta.dtype(), ta.shape()) == (tb.dtype(), tb.shape());
            if same && ha.get(na) == hb.get(nb) && same_bytes(*ta, *tb)? {
                out.push((na.clone(), nb.clone()));
            }
        }
    }
    Ok(out)
}
