//! What a tensor's values look like: min, max, mean, standard deviation,
//! largest magnitude, zeros, NaN, infinities, subnormals and a histogram
//! per tensor (`tensor_stats`); for a model, per layer group too
//! ([`Figures::groups`]), with outliers called out: tensors whose largest
//! magnitude stands far above their standard deviation (what makes
//! quantization hurt), and their elements that do.
//!
//! Values are read in fixed blocks combined in a fixed order
//! ([`crate::values`]), so every figure is the same whatever the number of
//! threads. The standard deviation is the population one (numpy's
//! default, `ddof=0`), of the finite values; NaN and infinities are
//! counted, not averaged.
//!
//! ```
//! use tensorfile_core::plan::OwnedTensor;
//! use tensorfile::values::Values;
//! use tensorfile_core::writer::TensorSpec;
//! use tensorfile::Dtype;
//! let data: Vec<u8> = [1f32, -2.0, 3.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! let t = OwnedTensor { spec: TensorSpec::new("w", Dtype::F32, vec![4]), data };
//! let s = tensorfile::stats::tensor_stats(Values::plain(&t)?, &())?;
//! assert_eq!((s.summary.min, s.summary.max, s.summary.mean), (-2.0, 3.0, 0.5));
//! assert_eq!(s.summary.zeros, 1);
//! # Ok::<(), tensorfile::Error>(())
//! ```

#[cfg(target_arch = "x86_64")]
mod avx2;
mod groups;
mod histogram;
mod lanes;
mod summary;

pub use histogram::{Histogram, BINS};
pub use summary::Summary;

use crate::values::{map_tasks, task_blocks, Stored, Values, BLOCK};
use crate::{Progress, Result};

/// The default ratio of largest magnitude to standard deviation above
/// which a tensor is an outlier. A normal distribution's million values
/// reach about 5 standard deviations; trained weights commonly 10 to 20.
pub const OUTLIER_RATIO: f64 = 20.0;

/// The figures of one tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorStats {
    /// Its name (a quantized weight's logical name).
    pub name: String,
    /// What it is stored as.
    pub stored: Stored,
    /// Its shape.
    pub shape: Vec<u64>,
    /// The figures.
    pub summary: Summary,
}

impl TensorStats {
    /// Largest magnitude over standard deviation (NaN when undefined).
    pub fn ratio(&self) -> f64 {
        let std = self.summary.std();
        if std > 0.0 {
            self.summary.absmax() / std
        } else {
            f64::NAN
        }
    }

    /// Whether the ratio reaches `ratio`.
    pub fn is_outlier(&self, ratio: f64) -> bool {
        self.ratio() >= ratio
    }

    /// Its elements at least `ratio` standard deviations from zero, largest
    /// first (at most `TOP`): `(flat index, value)`.
    pub fn outlier_elements(&self, ratio: f64) -> Vec<(u64, f64)> {
        let bound = ratio * self.summary.std();
        self.summary
            .top
            .iter()
            .copied()
            .filter(|(_, x)| x.abs() >= bound && bound > 0.0)
            .collect()
    }

    /// A flat index as an index per dimension.
    pub fn unflatten(&self, flat: u64) -> Vec<u64> {
        unflatten(&self.shape, flat)
    }
}

/// A flat (row-major) index of `shape` as an index per dimension (C64
/// values count two per element: the index is the value's).
pub fn unflatten(shape: &[u64], mut flat: u64) -> Vec<u64> {
    let mut out = vec![0; shape.len()];
    for (o, &d) in out.iter_mut().zip(shape).rev() {
        if d > 0 {
            *o = flat % d;
            flat /= d;
        }
    }
    out
}

/// The figures of one tensor's values, in parallel over its blocks;
/// `on_values` is told of each block done.
///
/// # Errors
/// A failed read or dequantization, naming the tensor.
pub fn tensor_stats(mut values: Values<'_>, on_values: &dyn Progress) -> Result<TensorStats> {
    values.prepare()?;
    let normal = values.stored().smallest_normal();
    let len = values.len();
    let v = &values;
    let f32s = values.fits_f32();
    let parts = map_tasks(v.tasks(), |k| -> Result<Summary> {
        let mut reader = v.reader();
        let mut s = Summary::default();
        // Values that are exactly f32 are read as f32 (half the bytes);
        // the figures are taken in f64 all the same.
        if f32s {
            let mut buf = vec![0f32; BLOCK];
            for (start, n) in task_blocks(len, k) {
                reader.read_f32(start, &mut buf[..n])?;
                s.add_block(&buf[..n], start, normal);
                on_values.advance(n as u64);
            }
        } else {
            let mut buf = vec![0f64; BLOCK];
            for (start, n) in task_blocks(len, k) {
                reader.read(start, &mut buf[..n])?;
                s.add_block(&buf[..n], start, normal);
                on_values.advance(n as u64);
            }
        }
        Ok(s)
    });
    let mut summary = Summary::default();
    for p in parts {
        summary.merge(&p?);
    }
    Ok(TensorStats {
        name: values.name().to_string(),
        stored: values.stored(),
        shape: values.shape().to_vec(),
        summary,
    })
}

/// A layer group's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The pattern (`model.layers.*.mlp.down_proj.weight`).
    pub pattern: String,
    /// `(layer, index into Figures::tensors)`, by layer.
    pub members: Vec<(u64, usize)>,
    /// The members' figures combined.
    pub summary: Summary,
}

/// The figures of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// Every tensor, in the order read.
    pub tensors: Vec<TensorStats>,
    /// Layer groups, by pattern.
    pub groups: Vec<Group>,
}

impl Figures {
    /// The report of `tensors`, grouped by layer.
    pub fn new(tensors: Vec<TensorStats>) -> Figures {
        let groups = groups::layer_groups(tensors.iter().map(|t| t.name.as_str()))
            .into_iter()
            .map(|(pattern, members)| {
                let mut summary = Summary::default();
                for &(_, i) in &members {
                    // Indices of the group's values are not one tensor's.
                    let mut s = tensors[i].summary.clone();
                    s.top.clear();
                    summary.merge(&s);
                }
                Group {
                    pattern,
                    members,
                    summary,
                }
            })
            .collect();
        Figures { tensors, groups }
    }

    /// The tensors that are outliers at `ratio`, worst first.
    pub fn outliers(&self, ratio: f64) -> Vec<&TensorStats> {
        let mut out: Vec<&TensorStats> = self
            .tensors
            .iter()
            .filter(|t| t.is_outlier(ratio))
            .collect();
        out.sort_by(|a, b| b.ratio().total_cmp(&a.ratio()));
        out
    }
}

/// The report of every value in `values`, one tensor after another
/// (each in parallel), each dropped once read (so that only one gathered
/// tensor is held at a time).
///
/// # Errors
/// As `tensor_stats`.
pub fn model_stats(values: Vec<Values<'_>>, on_values: &dyn Progress) -> Result<Figures> {
    let mut tensors = Vec::with_capacity(values.len());
    for v in values {
        tensors.push(tensor_stats(v, on_values)?);
    }
    Ok(Figures::new(tensors))
}

/// Test data shared with [`crate::diff`]'s tests.
#[cfg(test)]
pub(crate) mod tests_support {
    pub(crate) use super::summary::tests::mixed_f32;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::OwnedTensor;
    use crate::writer::TensorSpec;
    use crate::Dtype;

    fn f32s(name: &str, v: &[f32]) -> OwnedTensor {
        OwnedTensor {
            spec: TensorSpec::new(name, Dtype::F32, vec![v.len() as u64]),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    #[test]
    fn the_same_figures_on_any_number_of_blocks() {
        // Three tasks' worth, with an outlier in the last block.
        let n = BLOCK * crate::values::TASK * 2 + 1000;
        let mut v: Vec<f32> = (0..n)
            .map(|i| ((i % 2001) as f32 - 1000.0) / 1000.0)
            .collect();
        v[n - 3] = 400.0;
        let t = f32s("model.layers.0.w", &v);
        let s = tensor_stats(Values::plain(&t).unwrap(), &()).unwrap();
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64;
        assert!((s.summary.mean - mean).abs() < 1e-12);
        assert_eq!(s.summary.max, 400.0);
        assert_eq!(s.summary.top[0], ((n - 3) as u64, 400.0));
        assert!(s.is_outlier(OUTLIER_RATIO));
        assert_eq!(s.outlier_elements(OUTLIER_RATIO), [((n - 3) as u64, 400.0)]);
        let small = f32s("model.layers.1.w", &[1.0, 2.0]);
        let s2 = tensor_stats(Values::plain(&small).unwrap(), &()).unwrap();
        let report = Figures::new(vec![s, s2]);
        assert_eq!(report.groups.len(), 1);
        assert_eq!(report.groups[0].summary.count, n as u64 + 2);
        assert_eq!(report.outliers(OUTLIER_RATIO).len(), 1);
        assert_eq!(unflatten(&[2, 3], 5), [1, 2]);
    }
}
