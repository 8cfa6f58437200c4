//! `stats`: what the values of a model look like, per tensor and per
//! layer group, with outliers called out (the figures are
//! [`tensorfile::stats`]'s; this opens the input, picks the tensors and says the
//! result as the `--json` schema, `docs/commands/stats.md`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::looking::{refs, Opened};
use tensorfile::quant::Glob;
use tensorfile::stats::{model_stats, unflatten, Summary, TensorStats, BINS, OUTLIER_RATIO};
use tensorfile::values::Catalog;
use tensorfile::{OpenOptions, Progress, Result};

/// What `stats` is asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StatsRequest {
    /// A safetensors file, a set (directory or index), or a PyTorch
    /// checkpoint. Quantized weights (int4, MLX) are read dequantized.
    pub file: PathBuf,
    /// Only tensors whose names match one of these globs (`*` matches any
    /// run of characters); none: every tensor.
    pub include: Vec<String>,
    /// A tensor is an outlier when its largest magnitude reaches this many
    /// standard deviations (its elements that do are listed).
    pub outlier_ratio: f64,
    /// Bins of each histogram in the report (over the values' range), 1 to
    /// [`BINS`].
    pub bins: usize,
    /// The picture a front end draws the figures into, named in the
    /// report (the operation draws nothing).
    pub plot: Option<PathBuf>,
    /// How the input is opened (the client URLs are read through, the
    /// PyTorch loader's budgets); local files are read with positional
    /// reads.
    #[serde(skip)]
    pub open: OpenOptions,
}

impl StatsRequest {
    /// The figures of every tensor of `file`, with the default outlier
    /// ratio and 32 bins.
    pub fn new(file: impl Into<PathBuf>) -> StatsRequest {
        StatsRequest {
            file: file.into(),
            include: Vec::new(),
            outlier_ratio: OUTLIER_RATIO,
            bins: 32,
            plot: None,
            open: OpenOptions::default(),
        }
    }
}

/// What `stats` found: what `stats --json` prints (keys in ascending byte
/// order). NaN and infinite figures print as `null`.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct StatsReport {
    /// Layer groups (`model.layers.*.mlp.down_proj.weight`), by pattern.
    pub groups: Vec<GroupEntry>,
    /// The input, as given.
    pub input: String,
    /// The outlier ratio used.
    pub outlier_ratio: f64,
    /// The outliers, largest ratio first.
    pub outliers: Vec<Outlier>,
    /// The picture asked for, as given, or `null`.
    pub plot: Option<String>,
    /// Every tensor, in the order read.
    pub tensors: Vec<TensorFigures>,
    /// The figures themselves, for a front end's text and pictures.
    #[serde(skip)]
    pub figures: tensorfile::stats::Figures,
}

/// A histogram over `[lo, hi]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bins {
    /// Values per bin.
    pub counts: Vec<u64>,
    /// The upper end.
    pub hi: f64,
    /// The lower end.
    pub lo: f64,
}

/// An element: its flat index, its index per dimension, its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Element {
    /// Its index per dimension.
    pub at: Vec<u64>,
    /// Its flat index.
    pub index: u64,
    /// Its value.
    pub value: Option<f64>,
}

/// One tensor's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorFigures {
    /// The largest magnitude.
    pub absmax: Option<f64>,
    /// `absmax` over `std`.
    pub absmax_over_std: Option<f64>,
    /// Values seen.
    pub count: u64,
    /// The stored type (`BF16`, `mlx affine 4-bit`, ...).
    pub dtype: String,
    /// Finite values.
    pub finite: u64,
    /// The distribution of finite values.
    pub histogram: Bins,
    /// Infinities.
    pub inf: u64,
    /// The largest magnitudes, largest first.
    pub largest: Vec<Element>,
    /// The largest finite value.
    pub max: Option<f64>,
    /// The mean of the finite values.
    pub mean: Option<f64>,
    /// The smallest finite value.
    pub min: Option<f64>,
    /// Its name.
    pub name: String,
    /// NaN values.
    pub nan: u64,
    /// Whether it is an outlier.
    pub outlier: bool,
    /// Its shape.
    pub shape: Vec<u64>,
    /// The standard deviation of the finite values.
    pub std: Option<f64>,
    /// Nonzero values below the dtype's smallest normal.
    pub subnormal: u64,
    /// Zeros (either sign).
    pub zeros: u64,
}

/// A layer group's figures: its members' combined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupEntry {
    /// The largest magnitude.
    pub absmax: Option<f64>,
    /// Values seen.
    pub count: u64,
    /// Finite values.
    pub finite: u64,
    /// The distribution of finite values.
    pub histogram: Bins,
    /// Infinities.
    pub inf: u64,
    /// Each layer's tensor, by layer.
    pub layers: Vec<Layer>,
    /// The largest finite value.
    pub max: Option<f64>,
    /// The mean of the finite values.
    pub mean: Option<f64>,
    /// The smallest finite value.
    pub min: Option<f64>,
    /// NaN values.
    pub nan: u64,
    /// The pattern (`model.layers.*.mlp.down_proj.weight`).
    pub pattern: String,
    /// The standard deviation of the finite values.
    pub std: Option<f64>,
    /// Nonzero values below the dtype's smallest normal.
    pub subnormal: u64,
    /// Zeros (either sign).
    pub zeros: u64,
}

/// One layer of a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    /// Its tensor's largest magnitude.
    pub absmax: Option<f64>,
    /// `absmax` over `std`.
    pub absmax_over_std: Option<f64>,
    /// The layer's number.
    pub layer: u64,
    /// Its tensor's mean.
    pub mean: Option<f64>,
    /// Its tensor's name.
    pub name: String,
    /// Its tensor's standard deviation.
    pub std: Option<f64>,
}

/// An outlier: a tensor whose largest magnitude reaches the ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlier {
    /// Its largest magnitude over its standard deviation.
    pub absmax_over_std: Option<f64>,
    /// Its elements that reach the ratio.
    pub elements: Vec<Element>,
    /// Its name.
    pub name: String,
}

/// A figure: `None` (printed `null`) for NaN and infinities.
fn num(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn histogram(s: &Summary, bins: usize) -> Bins {
    let (lo, hi, counts) = s.histogram.coarse(bins);
    Bins { counts, hi, lo }
}

fn elements(t: &TensorStats, items: &[(u64, f64)]) -> Vec<Element> {
    items
        .iter()
        .map(|&(i, x)| Element {
            at: unflatten(&t.shape, i),
            index: i,
            value: num(x),
        })
        .collect()
}

/// The figures of `request.file`'s tensors (those `include` picks), with
/// the values read counted on `progress` (its total told first).
///
/// # Errors
///
/// An outlier ratio that is not a positive number, bins out of range
/// ([`Error::Request`](tensorfile::Error::Request)); an input that cannot be
/// read, is invalid or is of a kind whose values cannot be read here;
/// globs that pick no tensor; a failed read.
pub fn stats(request: &StatsRequest, progress: &dyn Progress) -> Result<StatsReport> {
    if !(request.outlier_ratio > 0.0 && request.outlier_ratio.is_finite()) {
        return Err(tensorfile::Error::request(
            "--outlier-ratio must be a positive number",
        ));
    }
    if request.bins == 0 || request.bins > BINS {
        return Err(tensorfile::Error::request(format!(
            "--bins must be between 1 and {BINS}"
        )));
    }
    let path = &request.file;
    let opened = Opened::open(path, &request.open)?;
    let boxes = opened.tensors();
    let tensors = refs(&boxes);
    let catalog =
        Catalog::new(&tensors, opened.metadata(), opened.mlx()).map_err(|e| e.at(path))?;
    let globs: Vec<Glob> = request.include.iter().map(Glob::new).collect();
    let values =
        catalog.model_values(|name| globs.is_empty() || globs.iter().any(|g| g.matches(name)))?;
    if values.is_empty() && !globs.is_empty() {
        return Err(tensorfile::Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("no tensor matches --include {}", request.include.join(", ")),
            ),
        ));
    }
    progress.total(values.iter().map(|v| v.len()).sum());
    let figures = model_stats(values, progress)?;
    let (ratio, bins) = (request.outlier_ratio, request.bins);
    let tensors = figures
        .tensors
        .iter()
        .map(|t| {
            let s = &t.summary;
            TensorFigures {
                absmax: num(s.absmax()),
                absmax_over_std: num(t.ratio()),
                count: s.count,
                dtype: t.stored.describe(),
                finite: s.finite,
                histogram: histogram(s, bins),
                inf: s.inf,
                largest: elements(t, &s.top),
                max: num(s.max),
                mean: num(s.mean),
                min: num(s.min),
                name: t.name.clone(),
                nan: s.nan,
                outlier: t.is_outlier(ratio),
                shape: t.shape.clone(),
                std: num(s.std()),
                subnormal: s.subnormal,
                zeros: s.zeros,
            }
        })
        .collect();
    let groups = figures
        .groups
        .iter()
        .map(|g| {
            let s = &g.summary;
            GroupEntry {
                absmax: num(s.absmax()),
                count: s.count,
                finite: s.finite,
                histogram: histogram(s, bins),
                inf: s.inf,
                layers: g
                    .members
                    .iter()
                    .map(|&(layer, i)| {
                        let t = &figures.tensors[i];
                        Layer {
                            absmax: num(t.summary.absmax()),
                            absmax_over_std: num(t.ratio()),
                            layer,
                            mean: num(t.summary.mean),
                            name: t.name.clone(),
                            std: num(t.summary.std()),
                        }
                    })
                    .collect(),
                max: num(s.max),
                mean: num(s.mean),
                min: num(s.min),
                nan: s.nan,
                pattern: g.pattern.clone(),
                std: num(s.std()),
                subnormal: s.subnormal,
                zeros: s.zeros,
            }
        })
        .collect();
    let outliers = figures
        .outliers(ratio)
        .into_iter()
        .map(|t| Outlier {
            absmax_over_std: num(t.ratio()),
            elements: elements(t, &t.outlier_elements(ratio)),
            name: t.name.clone(),
        })
        .collect();
    Ok(StatsReport {
        groups,
        input: path.to_string_lossy().into_owned(),
        outlier_ratio: ratio,
        outliers,
        plot: request
            .plot
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        tensors,
        figures,
    })
}
