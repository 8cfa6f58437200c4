//! Flattens a checkpoint's object tree into named tensors and values.
//!
//! Names are the path from the root: dict keys and list or tuple indices
//! joined with `.`; the root itself is named `""`. The walk is iterative
//! (no recursion over untrusted depth), bounded in depth (which also stops
//! cycles), in the number of paths visited (which stops exponential graphs
//! built through the memo), in the bytes of the paths it builds (a key
//! shared through the memo can be long and reached many times) and in the
//! bytes of the entries it keeps (a long string or shape shared through the
//! memo is copied into each entry that reaches it).

use crate::error::{Error, Result};
use crate::globals::Global;
use crate::pickle::{Object, Pickle, Value};
use crate::rebuild::Rebuilder;

/// Limits of the walk.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WalkLimits {
    /// Deepest path (in dict / list levels).
    pub max_depth: usize,
    /// Most paths visited, tensors and values included.
    pub max_visits: usize,
    /// Longest name (path) in bytes.
    pub max_name_len: usize,
    /// Most bytes of names built in all, over the whole walk.
    pub max_name_bytes: usize,
    /// Most bytes of the entries the walk keeps, names aside: each tensor
    /// and each non-tensor value counts [`ENTRY_BYTES`], plus 16 bytes per
    /// dimension of a tensor (its shape and strides) or the length of a
    /// value's text. Counted before each entry is made; exceeding it is
    /// [`Error::Budget`] naming `max_entry_bytes`. 256 MiB by default
    /// (a million tensors of four dimensions take about 190 MiB).
    pub max_entry_bytes: usize,
}

tensorfile_core::with_fields!(WalkLimits {
    with_max_depth => max_depth: usize,
    with_max_visits => max_visits: usize,
    with_max_name_len => max_name_len: usize,
    with_max_name_bytes => max_name_bytes: usize,
    with_max_entry_bytes => max_entry_bytes: usize,
});

/// What one tensor or value entry counts against
/// [`WalkLimits::max_entry_bytes`] besides its dimensions or text: about
/// what its records take in memory.
pub const ENTRY_BYTES: usize = 128;

impl Default for WalkLimits {
    fn default() -> WalkLimits {
        WalkLimits {
            max_depth: 1000,
            max_visits: 10_000_000,
            max_name_len: 64 * 1024,
            max_name_bytes: 256 << 20,
            max_entry_bytes: 256 << 20,
        }
    }
}

/// The flattened tree.
#[derive(Debug, Default)]
pub(crate) struct Flat {
    /// Tensor names, their spec index and their place in the walk (pickle
    /// order: a dict's items in insertion order, depth first), sorted by
    /// name.
    pub tensors: Vec<(String, usize, usize)>,
    /// Non-tensor leaves, rendered as text, in tree order.
    pub values: Vec<(String, String)>,
}

/// Walks the tree under `root`. With `key`, only the subtree at that path
/// is kept and names are relative to it.
pub(crate) fn flatten(
    pickle: &Pickle,
    rebuilder: &mut Rebuilder<'_>,
    key: Option<&str>,
    limits: &WalkLimits,
) -> Result<Flat> {
    let mut flat = Flat::default();
    let mut stack: Vec<(Value, String, usize)> = vec![(pickle.root(), String::new(), 0)];
    let mut visits = 0usize;
    let mut name_bytes = 0usize;
    let mut entry_bytes = 0usize;
    // Counts one entry of `bytes` against the budget, before it is made.
    let mut keep = |bytes: usize, path: &str| -> Result<()> {
        let needed = bytes
            .saturating_add(ENTRY_BYTES)
            .saturating_add(entry_bytes);
        if needed > limits.max_entry_bytes {
            return Err(Error::Budget {
                budget: "max_entry_bytes",
                limit: limits.max_entry_bytes as u64,
                needed: needed as u64,
                context: format!(
                    "the tensors and values kept, at {:?} (a long value or shape reached many times through shared references?)",
                    truncate(path)
                ),
            });
        }
        entry_bytes = needed;
        Ok(())
    };
    let mut matched = key.is_none();
    while let Some((value, path, depth)) = stack.pop() {
        visits += 1;
        if visits > limits.max_visits {
            return Err(Error::Structure(format!(
                "more than {} objects reached from the root (an exponential graph of shared references?)",
                limits.max_visits
            )));
        }
        if depth > limits.max_depth {
            return Err(Error::Structure(format!(
                "nesting depth exceeds the limit of {} at {:?} (or a container contains itself)",
                limits.max_depth,
                truncate(&path)
            )));
        }
        // Inside the selected subtree, or on the way to it?
        let inside = match key {
            None => true,
            Some(k) => {
                path == k
                    || (path.len() > k.len()
                        && path.starts_with(k)
                        && path.as_bytes()[k.len()] == b'.')
            }
        };
        if !inside {
            let on_the_way = key.is_some_and(|k| {
                path.is_empty()
                    || (k.starts_with(&path) && k.as_bytes().get(path.len()) == Some(&b'.'))
            });
            if !on_the_way {
                continue;
            }
        }
        matched |= inside;
        let mut child = |name: &str| -> Result<String> {
            let len = if path.is_empty() {
                name.len()
            } else {
                path.len() + 1 + name.len()
            };
            name_bytes = name_bytes.saturating_add(len);
            if len > limits.max_name_len || name_bytes > limits.max_name_bytes {
                return Err(Error::Structure(format!(
                    "names under {:?} exceed the limits ({} bytes for one, {} in all): \
                     a long key reached many times through shared references?",
                    truncate(&path),
                    limits.max_name_len,
                    limits.max_name_bytes
                )));
            }
            Ok(if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            })
        };
        let obj = match value {
            Value::Ref(id) => pickle.get(id).map(|o| (id, o)),
            _ => None,
        };
        match obj {
            Some((_, Object::Dict(items))) => {
                for (k, v) in items.iter().rev() {
                    let name = key_name(pickle, *k).map_err(|why| {
                        Error::Structure(format!("dict at {:?}: {why}", truncate(&path)))
                    })?;
                    stack.push((*v, child(&name)?, depth + 1));
                }
            }
            Some((_, Object::List(items) | Object::Tuple(items))) => {
                for (i, v) in items.iter().enumerate().rev() {
                    stack.push((*v, child(&i.to_string())?, depth + 1));
                }
            }
            Some((id, Object::Call { func, .. })) if Rebuilder::is_rebuild(*func) => {
                if inside {
                    let spec = rebuilder.tensor(id, &path)?;
                    let dims = rebuilder.specs.get(spec).map_or(0, |s| s.shape.len());
                    keep(dims.saturating_mul(16), &path)?;
                    let order = flat.tensors.len();
                    flat.tensors.push((path, spec, order));
                }
            }
            Some((_, Object::PersistentId(_))) => {
                return Err(Error::Tensor {
                    name: path,
                    reason: "a bare storage, not a tensor".into(),
                })
            }
            _ => {
                if inside {
                    if let Some(len) = rendered_len(pickle, value) {
                        keep(len, &path)?;
                        if let Some(text) = render(pickle, value) {
                            flat.values.push((path, text));
                        }
                    }
                }
            }
        }
    }
    if !matched {
        return Err(Error::Structure(format!(
            "no entry named {:?} in the checkpoint",
            key.unwrap_or_default()
        )));
    }
    // Names relative to the selected subtree.
    if let Some(k) = key {
        let strip = |name: &mut String| {
            *name = if name.len() == k.len() {
                String::new()
            } else {
                name[k.len() + 1..].to_string()
            };
        };
        flat.tensors.iter_mut().for_each(|(n, _, _)| strip(n));
        flat.values.iter_mut().for_each(|(n, _)| strip(n));
    }
    flat.tensors
        .sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    if let Some(w) = flat.tensors.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::Structure(format!(
            "two tensors are named {:?} (dict keys that print alike, such as 1 and '1', or keys containing '.')",
            w[0].0
        )));
    }
    Ok(flat)
}

/// A dict key as a name component.
fn key_name(pickle: &Pickle, k: Value) -> Result<String, String> {
    match k {
        Value::Int(i) => Ok(i.to_string()),
        Value::Bool(b) => Ok(if b { "True" } else { "False" }.into()),
        Value::None => Ok("None".into()),
        Value::Float(f) => Ok(format!("{f:?}")),
        Value::Ref(_) => pickle
            .as_str(k)
            .map(str::to_string)
            .ok_or_else(|| format!("unsupported key type: {}", pickle.kind(k))),
    }
}

/// The length of [`render`]'s text, computed without making it (so that
/// it is counted before it is allocated), or `None` when there is none.
fn rendered_len(pickle: &Pickle, v: Value) -> Option<usize> {
    Some(match v {
        // Numbers, booleans and None are short: count their longest text.
        Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) => 32,
        Value::Ref(id) => match pickle.get(id)? {
            Object::Str(s) => s.len(),
            Object::BigInt(b) => 2 + 2 * b.len(),
            Object::Global(Global::Dtype(_)) => 32,
            Object::Call { .. } => match pickle.call(v)? {
                (Global::Size, args) => {
                    let dims = size_dims(pickle, args);
                    let digits: usize = dims
                        .iter()
                        .map(|d| match d {
                            Value::Int(i) => i.to_string().len(),
                            _ => 1,
                        })
                        .sum();
                    "torch.Size([])".len() + digits + 2 * dims.len().saturating_sub(1)
                }
                (Global::Device, args) => {
                    let dev = args.first().and_then(|a| pickle.as_str(*a)).unwrap_or("?");
                    "device(type='')".len() + dev.len()
                }
                _ => return None,
            },
            _ => return None,
        },
    })
}

/// The dimensions of `torch.Size(args)`.
fn size_dims<'p>(pickle: &'p Pickle, args: &'p [Value]) -> &'p [Value] {
    args.first()
        .and_then(|a| pickle.as_seq(*a))
        .unwrap_or_default()
}

/// A non-tensor leaf as text (`--keep-values`), or `None` for values that
/// have no useful text form.
fn render(pickle: &Pickle, v: Value) -> Option<String> {
    Some(match v {
        Value::None => "None".into(),
        Value::Bool(b) => if b { "True" } else { "False" }.into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format!("{f:?}"),
        Value::Ref(id) => match pickle.get(id)? {
            Object::Str(s) => s.clone(),
            Object::BigInt(b) => {
                let hex: String = b.iter().rev().map(|x| format!("{x:02x}")).collect();
                format!("0x{hex}")
            }
            Object::Global(Global::Dtype(d)) => format!("torch.{}", d.torch_name()),
            Object::Call { .. } => match pickle.call(v)? {
                (Global::Size, args) => {
                    let mut text = String::from("torch.Size([");
                    for (i, d) in size_dims(pickle, args).iter().enumerate() {
                        if i > 0 {
                            text.push_str(", ");
                        }
                        match d {
                            Value::Int(n) => text.push_str(&n.to_string()),
                            _ => text.push('?'),
                        }
                    }
                    text.push_str("])");
                    text
                }
                (Global::Device, args) => {
                    let dev = args.first().and_then(|a| pickle.as_str(*a)).unwrap_or("?");
                    format!("device(type='{dev}')")
                }
                _ => return None,
            },
            _ => return None,
        },
    })
}

fn truncate(s: &str) -> &str {
    s.char_indices().nth(200).map_or(s, |(i, _)| &s[..i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pickle::Limits;

    /// `{K: {K: {K: ... 1}}}` nested `levels` deep and `{K: .., ...}` wide,
    /// with one long key `K` shared through the memo: a small pickle whose
    /// paths would add up to `levels * len(K)` bytes each.
    fn shared_key_pickle(key_len: usize, levels: usize) -> Vec<u8> {
        let mut p = vec![0x80, 2]; // PROTO 2
        p.push(b'}'); // EMPTY_DICT: the outermost, keyed by the key itself
        p.push(b'X'); // BINUNICODE
        p.extend_from_slice(&(key_len as u32).to_le_bytes());
        p.extend(std::iter::repeat_n(b'k', key_len));
        p.extend_from_slice(&[b'q', 0]); // BINPUT 0
        for _ in 1..levels {
            p.push(b'}'); // EMPTY_DICT
            p.extend_from_slice(&[b'h', 0]); // BINGET 0: the shared key
        }
        p.extend_from_slice(&[b'K', 1]); // BININT1 1
        p.extend(std::iter::repeat_n(b's', levels)); // SETITEM, once per dict
        p.push(b'.'); // STOP
        p
    }

    fn walk(bytes: &[u8]) -> Result<Flat> {
        let (pickle, _) = Pickle::parse(bytes, &Limits::default()).expect("the test pickle parses");
        let mut rebuilder = Rebuilder::new(&pickle, 1 << 30);
        flatten(&pickle, &mut rebuilder, None, &WalkLimits::default())
    }

    #[test]
    fn long_shared_keys_are_refused_before_paths_grow() {
        // A 1 MiB key nested 100 deep: paths of up to 100 MiB, refused.
        let err = walk(&shared_key_pickle(1 << 20, 100)).unwrap_err();
        // Error::Structure covers every flattening refusal: the message
        // says which.
        assert!(matches!(err, Error::Structure(_)), "{err}");
        assert!(err.to_string().contains("exceed the limits"), "{err}");
        // Short keys at the same depth are fine.
        let flat = walk(&shared_key_pickle(8, 100)).unwrap();
        assert_eq!(flat.values.len(), 1);
        assert_eq!(flat.values[0].0.len(), 100 * 9 - 1);
    }

    /// `[S, S, ... S]`: one string of `len` bytes referenced `count` times.
    fn shared_value_pickle(len: usize, count: usize) -> Vec<u8> {
        let mut p = vec![0x80, 2, b']', b'(', b'X'];
        p.extend_from_slice(&(len as u32).to_le_bytes());
        p.extend(std::iter::repeat_n(b'v', len));
        p.extend_from_slice(&[b'q', 0]);
        for _ in 1..count {
            p.extend_from_slice(&[b'h', 0]);
        }
        p.extend_from_slice(b"e.");
        p
    }

    #[test]
    fn values_shared_through_the_memo_are_counted_per_entry() {
        let (pickle, _) = Pickle::parse(&shared_value_pickle(1 << 20, 100), &Limits::default())
            .expect("the test pickle parses");
        let mut rebuilder = Rebuilder::new(&pickle, 1 << 30);
        // Ten entries of 1 MiB + ENTRY_BYTES fit exactly; the eleventh does not.
        let limits = WalkLimits {
            max_entry_bytes: 10 * ((1 << 20) + ENTRY_BYTES),
            ..WalkLimits::default()
        };
        let err = flatten(&pickle, &mut rebuilder, None, &limits).unwrap_err();
        match err {
            Error::Budget {
                budget,
                limit,
                needed,
                ..
            } => {
                assert_eq!(budget, "max_entry_bytes");
                assert_eq!(limit, limits.max_entry_bytes as u64);
                assert_eq!(needed, 11 * ((1 << 20) + ENTRY_BYTES) as u64);
            }
            other => panic!("{other}"),
        }
        // Ten references are exactly at the budget: kept.
        let (pickle, _) = Pickle::parse(&shared_value_pickle(1 << 20, 10), &Limits::default())
            .expect("the test pickle parses");
        let mut rebuilder = Rebuilder::new(&pickle, 1 << 30);
        let flat = flatten(&pickle, &mut rebuilder, None, &limits).unwrap();
        assert_eq!(flat.values.len(), 10);
    }
}
