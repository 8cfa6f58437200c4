//! What changed between two models (or files, or sets), and by how much.
//!
//! [`diff()`] pairs the tensors of A and B by name (`names`): a quantized
//! weight (int4, MLX) against the other side's plain tensor compares by
//! its dequantized values, so a model against its quantization gives each
//! weight's quantization error. It reports names on one side only, the
//! tensors whose bytes moved to another name (renamed or tied weights),
//! dtype, shape and metadata changes, and for every pair whether it is
//! bit-identical and otherwise the figures of [`Metrics`]: largest
//! absolute and relative difference (with the element's index), mean
//! absolute difference, RMS, cosine similarity, and the elements beyond
//! the tolerance by numpy's `isclose` rule with A as the reference.
//! Values of different dtypes compare as f64.
//!
//! Each pair is read block by block on the pool (memory stays bounded by
//! a block per worker, or the two tensors when one must be gathered), and
//! blocks combine in a fixed order: results do not depend on the thread
//! count.
//!
//! # Default tolerance
//!
//! From the stored types of the two, so that a value and its rounding to
//! either type are within: `rtol` is the coarser type's unit in the last
//! place at 1.0 (`2^-mantissa bits`: 2^-7 = 0.0078125 for BF16, 2^-10 for
//! F16, 2^-23 for F32, 2^-52 for F64, 2^-3 for F8_E4M3), and `atol` the
//! larger of the two types' smallest subnormals, the spacing of their
//! values near zero (2^-24 for F16, 2^-133 for BF16, 2^-149 for F32,
//! 2^-9 for F8_E4M3). Integers and BOOL compare exactly (0 and 0). A
//! quantized weight counts as `rtol` `2^(1 - bits)` and adds nothing to
//! `atol`.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod lanes;
mod metrics;
mod names;

pub use lanes::Tolerance;
pub use metrics::Metrics;

use crate::values::{map_tasks, task_blocks, Catalog, Stored, Values, BLOCK};
use crate::{Metadata, Progress, Result};
use names::Item;

/// The default tolerance of a pair (see the module's documentation).
pub(crate) fn default_tolerance(a: Stored, b: Stored) -> Tolerance {
    // The spacing of a type's values near zero: its smallest subnormal.
    let tiny = |s: Stored| s.smallest_normal().map_or(0.0, |n| n * s.epsilon());
    Tolerance {
        rtol: a.epsilon().max(b.epsilon()),
        atol: tiny(a).max(tiny(b)),
    }
}

/// How a pair compared.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorDiff {
    /// The name (a quantized weight's logical name).
    pub name: String,
    /// A's stored type.
    pub a: Stored,
    /// B's stored type.
    pub b: Stored,
    /// A's shape.
    pub shape_a: Vec<u64>,
    /// B's shape.
    pub shape_b: Vec<u64>,
    /// The tolerance it was judged by.
    pub tolerance: Tolerance,
    /// Same dtype, shape and bytes.
    pub identical: bool,
    /// The figures (none when the shapes differ: nothing is compared).
    pub metrics: Option<Metrics>,
}

impl TensorDiff {
    /// Whether the shapes differ (the values are not compared).
    pub fn shape_changed(&self) -> bool {
        self.shape_a != self.shape_b
    }

    /// Whether every element is within the tolerance.
    pub fn within(&self) -> bool {
        self.identical || self.metrics.as_ref().is_some_and(|m| m.beyond == 0)
    }
}

/// Metadata keys that differ.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataDiff {
    /// (key, value) only in A.
    pub only_in_a: Vec<(String, String)>,
    /// (key, value) only in B.
    pub only_in_b: Vec<(String, String)>,
    /// (key, A's value, B's value).
    pub changed: Vec<(String, String, String)>,
}

impl MetadataDiff {
    /// The differences between two metadata maps.
    pub fn of(a: Option<&Metadata>, b: Option<&Metadata>) -> MetadataDiff {
        let empty = Metadata::new();
        let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
        let mut d = MetadataDiff::default();
        for (k, va) in a {
            match b.get(k) {
                None => d.only_in_a.push((k.clone(), va.clone())),
                Some(vb) if vb != va => d.changed.push((k.clone(), va.clone(), vb.clone())),
                Some(_) => {}
            }
        }
        for (k, vb) in b {
            if !a.contains_key(k) {
                d.only_in_b.push((k.clone(), vb.clone()));
            }
        }
        d
    }

    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.only_in_a.is_empty() && self.only_in_b.is_empty() && self.changed.is_empty()
    }
}

/// The verdict of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Everything bit-identical: names, dtypes, shapes, bytes, metadata.
    Same,
    /// The same tensors, every value within its tolerance (dtypes and
    /// metadata may differ). Never the verdict of an exact comparison.
    Within,
    /// Tensors on one side only, moved, of another shape, or values beyond
    /// the tolerance; in an exact comparison, anything not bit-identical.
    Differs,
}

impl Verdict {
    /// `same`, `within` or `differs`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Within => "within",
            Verdict::Differs => "differs",
        }
    }
}

/// What [`diff()`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Tensors only in A.
    pub only_in_a: Vec<String>,
    /// Tensors only in B.
    pub only_in_b: Vec<String>,
    /// (A's name, B's name): the same bytes under another name.
    pub renamed: Vec<(String, String)>,
    /// Metadata differences.
    pub metadata: MetadataDiff,
    /// Every pair, by name.
    pub tensors: Vec<TensorDiff>,
    /// Whether the comparison was exact ([`DiffOptions::exact`]).
    pub exact: bool,
}

impl Comparison {
    /// The verdict: in an exact comparison [`Verdict::Same`] or
    /// [`Verdict::Differs`], never [`Verdict::Within`].
    pub fn verdict(&self) -> Verdict {
        let structure = !self.only_in_a.is_empty()
            || !self.only_in_b.is_empty()
            || !self.renamed.is_empty()
            || self.tensors.iter().any(|t| t.shape_changed());
        if structure || !self.tensors.iter().all(|t| t.within()) {
            Verdict::Differs
        } else if self.metadata.is_empty() && self.tensors.iter().all(|t| t.identical) {
            Verdict::Same
        } else if self.exact {
            Verdict::Differs
        } else {
            Verdict::Within
        }
    }

    /// The pairs whose stored type changed.
    pub fn dtype_changes(&self) -> impl Iterator<Item = &TensorDiff> {
        self.tensors.iter().filter(|t| t.a != t.b)
    }
}

/// Options of [`diff()`].
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct DiffOptions {
    /// The tolerance of every pair; `None`: each pair's default.
    pub tolerance: Option<Tolerance>,
    /// The absolute tolerance only (the relative one as `tolerance` or
    /// the default says).
    pub atol: Option<f64>,
    /// The relative tolerance only.
    pub rtol: Option<f64>,
    /// Judge bit for bit: anything short of the same names, dtypes, shapes,
    /// bytes and metadata differs (the figures are still those of the
    /// tolerance).
    pub exact: bool,
}

tensorfile_core::with_fields!(DiffOptions {
    with_tolerance => tolerance: Option<Tolerance>,
    with_atol => atol: Option<f64>,
    with_rtol => rtol: Option<f64>,
    with_exact => exact: bool,
});

fn values<'a>(c: &Catalog<'a>, i: Item<'_, 'a>) -> Result<Values<'a>> {
    match i {
        Item::Plain(t) => Values::plain(t),
        Item::Quantized(w) => c.dequantized(w),
    }
}

/// Compares one pair of values.
///
/// # Errors
/// A failed read or dequantization, naming the tensor.
pub fn compare(
    name: &str,
    mut a: Values<'_>,
    mut b: Values<'_>,
    options: &DiffOptions,
    on_values: &dyn Progress,
) -> Result<TensorDiff> {
    let default = default_tolerance(a.stored(), b.stored());
    let base = options.tolerance.unwrap_or(default);
    let tolerance = Tolerance {
        atol: options.atol.unwrap_or(base.atol),
        rtol: options.rtol.unwrap_or(base.rtol),
    };
    let mut out = TensorDiff {
        name: name.to_string(),
        a: a.stored(),
        b: b.stored(),
        shape_a: a.shape().to_vec(),
        shape_b: b.shape().to_vec(),
        tolerance,
        identical: false,
        metrics: None,
    };
    if out.shape_changed() || a.len() != b.len() {
        return Ok(out);
    }
    a.prepare()?;
    b.prepare()?;
    let same_type =
        matches!((a.stored(), b.stored()), (Stored::Plain(x), Stored::Plain(y)) if x == y);
    let len = a.len();
    let (va, vb) = (&a, &b);
    // Values that are exactly f32 on both sides are read as f32 (half the
    // bytes); the figures are taken in f64 all the same.
    let f32s = a.fits_f32() && b.fits_f32();
    let parts = map_tasks(va.tasks(), |k| -> Result<(Metrics, bool)> {
        let (mut ra, mut rb) = (va.reader(), vb.reader());
        let mut m = Metrics::default();
        let mut identical = same_type;
        // The bytes are compared only while every block so far was equal.
        let mut same = |ba: Option<&[u8]>, bb: Option<&[u8]>| {
            identical = identical && ba.is_some() && ba == bb;
        };
        if f32s {
            let (mut xa, mut xb) = (vec![0f32; BLOCK], vec![0f32; BLOCK]);
            for (start, n) in task_blocks(len, k) {
                same(
                    ra.read_f32(start, &mut xa[..n])?,
                    rb.read_f32(start, &mut xb[..n])?,
                );
                m.add_block(&xa[..n], &xb[..n], start, tolerance);
                on_values.advance(n as u64);
            }
        } else {
            let (mut xa, mut xb) = (vec![0f64; BLOCK], vec![0f64; BLOCK]);
            for (start, n) in task_blocks(len, k) {
                same(ra.read(start, &mut xa[..n])?, rb.read(start, &mut xb[..n])?);
                m.add_block(&xa[..n], &xb[..n], start, tolerance);
                on_values.advance(n as u64);
            }
        }
        Ok((m, identical))
    });
    let mut metrics = Metrics::default();
    let mut identical = same_type;
    for p in parts {
        let (m, same) = p?;
        metrics.merge(&m);
        identical &= same;
    }
    out.identical = identical;
    out.metrics = Some(metrics);
    Ok(out)
}

/// Compares model A with model B (each a file's or a set's tensors, with
/// its metadata); see the module's documentation.
///
/// # Errors
/// A failed read or dequantization, naming the tensor.
pub fn diff(
    (a, meta_a): (&Catalog<'_>, Option<&Metadata>),
    (b, meta_b): (&Catalog<'_>, Option<&Metadata>),
    options: &DiffOptions,
    on_values: &dyn Progress,
) -> Result<Comparison> {
    let matched = names::match_names(a, b, true)?;
    let mut tensors = Vec::with_capacity(matched.pairs.len());
    for (name, ia, ib) in matched.pairs {
        tensors.push(compare(
            &name,
            values(a, ia)?,
            values(b, ib)?,
            options,
            on_values,
        )?);
    }
    Ok(Comparison {
        only_in_a: matched.only_in_a,
        only_in_b: matched.only_in_b,
        renamed: matched.renamed,
        metadata: MetadataDiff::of(meta_a, meta_b),
        tensors,
        exact: options.exact,
    })
}

/// The number of values [`diff()`] will compare (for a progress bar).
pub fn values_to_compare(a: &Catalog<'_>, b: &Catalog<'_>) -> u64 {
    let len = |c: &Catalog<'_>, i: Item<'_, '_>| match i {
        Item::Plain(t) => Values::plain(t).map(|v| v.len()).unwrap_or(0),
        Item::Quantized(w) => c.dequantized(w).map(|v| v.len()).unwrap_or(0),
    };
    match names::match_names(a, b, false) {
        Ok(m) => m.pairs.iter().map(|(_, ia, _)| len(a, *ia)).sum(),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::OwnedTensor;
    use crate::writer::{TensorData, TensorSpec};
    use crate::Dtype;

    fn t(name: &str, dtype: Dtype, values: &[f32]) -> OwnedTensor {
        let data = crate::cast::encode_f32_vec(values, dtype, Default::default()).unwrap();
        OwnedTensor {
            spec: TensorSpec::new(name, dtype, vec![values.len() as u64]),
            data,
        }
    }

    /// The default diff of two lists of in-memory tensors.
    fn diff_of(a: &[OwnedTensor], b: &[OwnedTensor]) -> Comparison {
        let (ra, rb): (
            Vec<&dyn TensorData<crate::Error>>,
            Vec<&dyn TensorData<crate::Error>>,
        ) = (
            a.iter()
                .map(|t| t as &dyn TensorData<crate::Error>)
                .collect(),
            b.iter()
                .map(|t| t as &dyn TensorData<crate::Error>)
                .collect(),
        );
        let (ca, cb) = (
            Catalog::new(&ra, None, None).unwrap(),
            Catalog::new(&rb, None, None).unwrap(),
        );
        diff((&ca, None), (&cb, None), &DiffOptions::default(), &()).unwrap()
    }

    #[test]
    fn a_model_against_its_cast_a_rename_and_a_change() {
        let w: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        let a = [
            t("w", Dtype::F32, &w),
            t("moved", Dtype::F32, &[1.0, 2.0]),
            t("gone", Dtype::F32, &[3.0]),
        ];
        let mut changed = w.clone();
        changed[10] += 0.5;
        let b = [
            t("w", Dtype::BF16, &w),
            t("elsewhere", Dtype::F32, &[1.0, 2.0]),
            t("new", Dtype::F32, &[3.0, 4.0]),
        ];
        let r = diff_of(&a, &b);
        assert_eq!(r.only_in_a, ["gone", "moved"]);
        assert_eq!(r.only_in_b, ["elsewhere", "new"]);
        assert_eq!(r.renamed, [("moved".to_string(), "elsewhere".to_string())]);
        let tw = &r.tensors[0];
        assert!(tw.within() && !tw.identical, "{tw:?}");
        assert_eq!(tw.tolerance.rtol, 2f64.powi(-7));
        assert_eq!(r.verdict(), Verdict::Differs);
        // Only the cast: within BF16's tolerance.
        let b2 = [t("w", Dtype::BF16, &w)];
        let a2 = [t("w", Dtype::F32, &w)];
        let (r2a, r2b): (
            Vec<&dyn TensorData<crate::Error>>,
            Vec<&dyn TensorData<crate::Error>>,
        ) = (vec![&a2[0]], vec![&b2[0]]);
        let (c2a, c2b) = (
            Catalog::new(&r2a, None, None).unwrap(),
            Catalog::new(&r2b, None, None).unwrap(),
        );
        let r = diff((&c2a, None), (&c2b, None), &DiffOptions::default(), &()).unwrap();
        assert_eq!(r.verdict(), Verdict::Within);
        // Exactly: it differs; itself is the same.
        let exact = DiffOptions::default().with_exact(true);
        let r = diff((&c2a, None), (&c2b, None), &exact, &()).unwrap();
        assert_eq!(r.verdict(), Verdict::Differs);
        let r = diff((&c2a, None), (&c2a, None), &exact, &()).unwrap();
        assert_eq!(r.verdict(), Verdict::Same);
        // A changed value: beyond, at its index.
        let b3 = [t("w", Dtype::F32, &changed)];
        let r3b: Vec<&dyn TensorData<crate::Error>> = vec![&b3[0]];
        let c3b = Catalog::new(&r3b, None, None).unwrap();
        let r = diff((&c2a, None), (&c3b, None), &DiffOptions::default(), &()).unwrap();
        let m = r.tensors[0].metrics.clone().unwrap();
        assert_eq!((m.beyond, m.max_abs.1), (1, 10));
        assert_eq!(r.verdict(), Verdict::Differs);
        // Itself: the same.
        let r = diff((&c2a, None), (&c2a, None), &DiffOptions::default(), &()).unwrap();
        assert_eq!(r.verdict(), Verdict::Same);
    }

    /// Moved tensors are found by their bytes, sha256 or (built without
    /// `digest`) a fingerprint confirmed byte for byte: tensors of one
    /// size whose bytes differ in one place are not moved.
    #[test]
    fn moved_tensors_are_the_ones_whose_bytes_are_equal() {
        let big: Vec<f32> = (0..100_000).map(|i| (i as f32 * 0.11).cos()).collect();
        let (mut p, mut q) = (big.clone(), big.clone());
        p[70_000] += 1.0;
        q[99_999] -= 1.0;
        let a = [t("x", Dtype::F32, &big), t("p", Dtype::F32, &p)];
        let b = [t("y", Dtype::F32, &big), t("q", Dtype::F32, &q)];
        let r = diff_of(&a, &b);
        assert_eq!(r.renamed, [("x".to_string(), "y".to_string())]);
    }
}
