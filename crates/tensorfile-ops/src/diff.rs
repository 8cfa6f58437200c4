//! `diff`: what changed between two models, and by how much (the
//! comparison is [`tensorfile::diff`]'s; this opens the inputs and says the
//! result as the `--json` schema, `docs/commands/diff.md`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::looking::{refs, Opened};
use tensorfile::diff::{values_to_compare, DiffOptions, TensorDiff, Verdict};
use tensorfile::stats::unflatten;
use tensorfile::values::Catalog;
use tensorfile::{OpenOptions, Progress, Result};

/// What `diff` is asked: the two inputs and the tolerance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DiffRequest {
    /// The reference: a safetensors file, a set (directory or index), or a
    /// PyTorch checkpoint.
    pub a: PathBuf,
    /// What to compare with it (the same kinds).
    pub b: PathBuf,
    /// Absolute tolerance (default: from the two dtypes of each pair).
    pub atol: Option<f64>,
    /// Relative tolerance, of |a| (default: from the two dtypes of each
    /// pair).
    pub rtol: Option<f64>,
    /// Only bit-identical is the same (names, dtypes, shapes, bytes and
    /// metadata).
    pub exact: bool,
    /// How the inputs are opened (the client URLs are read through, the
    /// PyTorch loader's budgets); local files are read with positional
    /// reads.
    #[serde(skip)]
    pub open: OpenOptions,
}

impl DiffRequest {
    /// A comparison of `b` with the reference `a`, default tolerances.
    pub fn new(a: impl Into<PathBuf>, b: impl Into<PathBuf>) -> DiffRequest {
        DiffRequest {
            a: a.into(),
            b: b.into(),
            ..DiffRequest::default()
        }
    }
}

/// What `diff` found: what `diff --json` prints (keys in ascending byte
/// order). NaN and infinite figures print as `null`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct DiffReport {
    /// The reference, as given.
    pub a: String,
    /// The other input, as given.
    pub b: String,
    /// Whether the comparison was exact (`--exact`).
    pub exact: bool,
    /// Metadata differences.
    pub metadata: MetadataChanges,
    /// Tensors only in A.
    pub only_in_a: Vec<String>,
    /// Tensors only in B.
    pub only_in_b: Vec<String>,
    /// Tensors whose bytes are under another name in B.
    pub renamed: Vec<Renamed>,
    /// Every pair, by name.
    pub tensors: Vec<Pair>,
    /// Totals over every pair.
    pub total: Total,
    /// `same`, `within` or `differs`.
    pub verdict: &'static str,
    /// The comparison itself, for a front end's text.
    #[serde(skip)]
    pub compared: tensorfile::diff::Comparison,
}

impl DiffReport {
    /// The verdict: `same` and `within` pass, `differs` does not.
    pub fn verdict(&self) -> Verdict {
        self.compared.verdict()
    }
}

/// A tensor under another name: the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renamed {
    /// Its name in A.
    pub a: String,
    /// Its name in B.
    pub b: String,
}

/// The metadata's differences.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataChanges {
    /// Keys in both, with different values.
    pub changed: Vec<ChangedKey>,
    /// Keys only in A.
    pub only_in_a: Vec<KeyValue>,
    /// Keys only in B.
    pub only_in_b: Vec<KeyValue>,
}

/// A metadata key whose value changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedKey {
    /// A's value.
    pub a: String,
    /// B's value.
    pub b: String,
    /// The key.
    pub key: String,
}

/// A metadata key and its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// One pair of tensors. The figures (`count` to `rms`) are there only
/// when the two shapes agree (the values were compared).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    /// A's stored type (`BF16`, `mlx affine 4-bit`, ...).
    pub a: String,
    /// The absolute tolerance used.
    pub atol: f64,
    /// B's stored type.
    pub b: String,
    /// Elements beyond the tolerance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond: Option<u64>,
    /// `beyond` over `count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_share: Option<Option<f64>>,
    /// The cosine similarity of the two, `null` when undefined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine: Option<Option<f64>>,
    /// Elements compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Elements finite on both sides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finite: Option<u64>,
    /// Bit-identical bytes.
    pub identical: bool,
    /// Elements where one side is infinite and the other is not the same
    /// infinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inf_differs: Option<u64>,
    /// Where the largest absolute difference is, as an index per
    /// dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abs_at: Option<Vec<u64>>,
    /// The largest absolute difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abs_diff: Option<Option<f64>>,
    /// Its flat index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abs_index: Option<u64>,
    /// The largest relative difference (of |a|).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rel_diff: Option<Option<f64>>,
    /// Its flat index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rel_index: Option<u64>,
    /// The mean absolute difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_abs_diff: Option<Option<f64>>,
    /// The tensor's name.
    pub name: String,
    /// Elements NaN in A only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nan_only_a: Option<u64>,
    /// Elements NaN in B only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nan_only_b: Option<u64>,
    /// The root mean square of the differences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rms: Option<Option<f64>>,
    /// The relative tolerance used.
    pub rtol: f64,
    /// A's shape.
    pub shape_a: Vec<u64>,
    /// B's shape.
    pub shape_b: Vec<u64>,
    /// Every element within the tolerance (and the shapes agree).
    pub within: bool,
}

/// Totals over every pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Total {
    /// Pairs not within the tolerance.
    pub beyond: usize,
    /// Pairs compared.
    pub compared: usize,
    /// Pairs bit-identical.
    pub identical: usize,
    /// The largest absolute difference of any pair, `null` when none
    /// differs.
    pub max_abs_diff: Option<f64>,
    /// The pair it is in.
    pub max_abs_diff_tensor: Option<String>,
    /// Elements compared.
    pub values: u64,
    /// Elements beyond the tolerance.
    pub values_beyond: u64,
    /// Pairs within the tolerance.
    pub within: usize,
}

/// A figure: `None` (printed `null`) for NaN and infinities.
fn num(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// One pair as the report says it.
fn pair(t: &TensorDiff) -> Pair {
    let m = t.metrics.as_ref();
    Pair {
        a: t.a.describe(),
        atol: t.tolerance.atol,
        b: t.b.describe(),
        beyond: m.map(|m| m.beyond),
        beyond_share: m.map(|m| num(m.beyond_share())),
        cosine: m.map(|m| m.cosine().and_then(num)),
        count: m.map(|m| m.count),
        finite: m.map(|m| m.finite),
        identical: t.identical,
        inf_differs: m.map(|m| m.inf),
        max_abs_at: m.map(|m| unflatten(&t.shape_a, m.max_abs.1)),
        max_abs_diff: m.map(|m| num(m.max_abs.0)),
        max_abs_index: m.map(|m| m.max_abs.1),
        max_rel_diff: m.map(|m| num(m.max_rel.0)),
        max_rel_index: m.map(|m| m.max_rel.1),
        mean_abs_diff: m.map(|m| num(m.mean_abs())),
        name: t.name.clone(),
        nan_only_a: m.map(|m| m.nan_a),
        nan_only_b: m.map(|m| m.nan_b),
        rms: m.map(|m| num(m.rms())),
        rtol: t.tolerance.rtol,
        shape_a: t.shape_a.clone(),
        shape_b: t.shape_b.clone(),
        within: t.within(),
    }
}

/// The totals over every pair.
fn total(r: &tensorfile::diff::Comparison) -> Total {
    let compared = r.tensors.len();
    let identical = r.tensors.iter().filter(|t| t.identical).count();
    let within = r.tensors.iter().filter(|t| t.within()).count();
    let (mut values, mut beyond) = (0u64, 0u64);
    let mut worst: Option<(&str, f64)> = None;
    for t in &r.tensors {
        if let Some(m) = &t.metrics {
            values += m.count;
            beyond += m.beyond;
            if m.max_abs.0 > worst.map_or(0.0, |(_, w)| w) {
                worst = Some((&t.name, m.max_abs.0));
            }
        }
    }
    Total {
        beyond: compared - within,
        compared,
        identical,
        max_abs_diff: worst.and_then(|w| num(w.1)),
        max_abs_diff_tensor: worst.map(|w| w.0.to_string()),
        values,
        values_beyond: beyond,
        within,
    }
}

/// Compares `request.b` with the reference `request.a`, value by value
/// (quantized weights by their dequantized values), counting the values
/// compared on `progress` (its total told first).
///
/// # Errors
///
/// A tolerance that is not a finite number of at least 0
/// ([`Error::Request`](tensorfile::Error::Request)); an input that cannot be
/// read, is invalid or is of a kind whose values cannot be read here; a
/// failed read.
pub fn diff(request: &DiffRequest, progress: &dyn Progress) -> Result<DiffReport> {
    for (name, v) in [("atol", request.atol), ("rtol", request.rtol)] {
        match v {
            Some(x) if !(x >= 0.0 && x.is_finite()) => {
                return Err(tensorfile::Error::request(format!(
                    "--{name} {x}: a tolerance is a finite number of at least 0"
                )))
            }
            _ => {}
        }
    }
    let (oa, ob) = (
        Opened::open(&request.a, &request.open)?,
        Opened::open(&request.b, &request.open)?,
    );
    let (ba, bb) = (oa.tensors(), ob.tensors());
    let (ra, rb) = (refs(&ba), refs(&bb));
    let ca = Catalog::new(&ra, oa.metadata(), oa.mlx()).map_err(|e| e.at(&request.a))?;
    let cb = Catalog::new(&rb, ob.metadata(), ob.mlx()).map_err(|e| e.at(&request.b))?;
    let options = DiffOptions::default()
        .with_tolerance(None)
        .with_atol(request.atol)
        .with_rtol(request.rtol)
        .with_exact(request.exact);
    progress.total(values_to_compare(&ca, &cb));
    let compared = tensorfile::diff::diff(
        (&ca, oa.metadata()),
        (&cb, ob.metadata()),
        &options,
        progress,
    )?;
    let m = &compared.metadata;
    let key_values = |v: &[(String, String)]| {
        v.iter()
            .map(|(k, x)| KeyValue {
                key: k.clone(),
                value: x.clone(),
            })
            .collect()
    };
    Ok(DiffReport {
        a: request.a.to_string_lossy().into_owned(),
        b: request.b.to_string_lossy().into_owned(),
        exact: request.exact,
        metadata: MetadataChanges {
            changed: m
                .changed
                .iter()
                .map(|(k, a, b)| ChangedKey {
                    a: a.clone(),
                    b: b.clone(),
                    key: k.clone(),
                })
                .collect(),
            only_in_a: key_values(&m.only_in_a),
            only_in_b: key_values(&m.only_in_b),
        },
        only_in_a: compared.only_in_a.clone(),
        only_in_b: compared.only_in_b.clone(),
        renamed: compared
            .renamed
            .iter()
            .map(|(a, b)| Renamed {
                a: a.clone(),
                b: b.clone(),
            })
            .collect(),
        tensors: compared.tensors.iter().map(pair).collect(),
        total: total(&compared),
        verdict: compared.verdict().as_str(),
        compared,
    })
}
