//! `tensorfile stats FILE [--include GLOB]... [--json] [--plot out.svg]`:
//! what the values look like, per tensor and per layer group, with
//! outliers called out (the library's `tensorfile::stats`).

use super::words::fig;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile::stats::{unflatten, Figures as Report, Summary, OUTLIER_RATIO};
use tensorfile_ops::stats::{stats, StatsRequest};

use super::looking::{escape, shown};
use super::words::{plural, table, Align};
#[cfg(not(feature = "plot"))]
use super::Usage;
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `stats`.
#[derive(clap::Args)]
pub struct Args {
    /// A safetensors file, a set (directory or index), or a PyTorch
    /// checkpoint. Quantized weights (int4, MLX) are read dequantized.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Only tensors whose names match (`*` matches any run of
    /// characters); repeatable.
    #[arg(long, value_name = "GLOB")]
    include: Vec<String>,
    /// A tensor is an outlier when its largest magnitude reaches this many
    /// standard deviations (its elements that do are listed).
    #[arg(long, value_name = "R", default_value_t = OUTLIER_RATIO)]
    outlier_ratio: f64,
    /// Bins of each histogram in the JSON output (over the values' range).
    #[arg(long, value_name = "N", default_value_t = 32)]
    bins: usize,
    /// Draw each row's histogram with Unicode blocks even when standard
    /// output is not a terminal.
    #[arg(long)]
    bars: bool,
    /// Draw the distributions and the per-layer absolute-max and std curves
    /// into this picture: SVG, or PNG when the name ends in .png.
    #[arg(long, value_name = "OUT.svg")]
    plot: Option<PathBuf>,
    /// Print JSON: every figure of every tensor and group, and the outliers.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The input errors are reported against, and whether as JSON.
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (Some(&self.file), self.json)
    }
}

impl Args {
    /// The request: the input, the tensors, the outlier ratio and bins.
    fn request(&self) -> StatsRequest {
        let mut request = StatsRequest::new(&self.file);
        request.include = self.include.clone();
        request.outlier_ratio = self.outlier_ratio;
        request.bins = self.bins;
        request.plot = self.plot.clone();
        request.open = super::remote::open_options(&tensorfile::ReadOptions::default());
        request
    }
}

/// Summarizes FILE; exit 1 when it cannot be read.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    #[cfg(not(feature = "plot"))]
    if args.plot.is_some() {
        return Err(Usage::failure(
            "--plot: this tensorfile was built without the plot feature",
        ));
    }
    let bar = Bar::values_when_told("stats");
    let report = stats(&args.request(), &bar)?;
    drop(bar);
    #[cfg(feature = "plot")]
    if let Some(path) = &args.plot {
        use crate::plot::PlotError;
        crate::plot::draw(path, &report.figures, args.outlier_ratio).map_err(|e| match e {
            PlotError::Draw(message) => Failure::from(message),
            PlotError::Save(e) => Failure::from(e),
        })?;
    }
    if args.json {
        out(serde_json::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        print_text(&args, &report.figures);
    }
    Ok(ExitCode::SUCCESS)
}

/// Counts drawn as Unicode blocks, one character each (a space for 0).
pub fn sparkline(counts: &[u64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = counts.iter().copied().max().unwrap_or(0);
    counts
        .iter()
        .map(|&c| {
            if c == 0 || max == 0 {
                ' '
            } else {
                BLOCKS[((c as f64 / max as f64) * 7.0).round() as usize]
            }
        })
        .collect()
}

/// Values drawn as Unicode blocks between their minimum and maximum.
fn curve(values: &[f64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let finite = values.iter().copied().filter(|x| x.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
        (l.min(x), h.max(x))
    });
    values
        .iter()
        .map(|&x| {
            if !x.is_finite() {
                ' '
            } else if hi > lo {
                BLOCKS[(((x - lo) / (hi - lo)) * 7.0).round() as usize]
            } else {
                BLOCKS[3]
            }
        })
        .collect()
}

/// The special values of a tensor: `3 zeros, 1 NaN, 2 subnormals`.
fn specials(s: &Summary) -> String {
    let mut parts = Vec::new();
    for (n, what, counted) in [
        (s.zeros, "zero", true),
        (s.nan, "NaN", false),
        (s.inf, "inf", false),
        (s.subnormal, "subnormal", true),
    ] {
        match (n, counted) {
            (0, _) => {}
            (n, true) => parts.push(plural(n, what)),
            (n, false) => parts.push(format!("{n} {what}")),
        }
    }
    parts.join(", ")
}

fn print_text(args: &Args, r: &Report) {
    let bars = args.bars || std::io::stdout().is_terminal();
    let mut heading: Vec<String> = ["tensor", "dtype", "min", "max", "mean", "std", "absmax"]
        .map(String::from)
        .to_vec();
    heading.push("max/std".into());
    if bars {
        heading.push("histogram".into());
    }
    let mut rows = vec![heading];
    for t in &r.tensors {
        let s = &t.summary;
        let ratio = t.ratio();
        let mut row = vec![
            escape(&t.name),
            t.stored.describe(),
            fig(s.min),
            fig(s.max),
            fig(s.mean),
            fig(s.std()),
            fig(s.absmax()),
            if ratio.is_finite() {
                format!("{ratio:.1}")
            } else {
                "-".into()
            },
        ];
        if bars {
            row.push(sparkline(&s.histogram.coarse(16).2));
        }
        let extra = specials(s);
        if !extra.is_empty() {
            row.push(format!("({extra})"));
        }
        rows.push(row);
    }
    // Text left, figures right.
    let mut align = vec![Align::Left, Align::Left];
    align.extend([Align::Right; 6]);
    table(&rows, &align).into_iter().for_each(out);
    if !r.groups.is_empty() {
        out("layer groups (absmax and std by layer):");
    }
    let mut rows = Vec::new();
    for g in &r.groups {
        let absmax: Vec<f64> = g
            .members
            .iter()
            .map(|&(_, i)| r.tensors[i].summary.absmax())
            .collect();
        let std: Vec<f64> = g
            .members
            .iter()
            .map(|&(_, i)| r.tensors[i].summary.std())
            .collect();
        let (worst_layer, worst) = g
            .members
            .iter()
            .map(|&(l, i)| (l, r.tensors[i].summary.absmax()))
            .fold((0, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        rows.push(vec![
            escape(&g.pattern),
            plural(g.members.len() as u64, "layer"),
            format!("absmax {}", curve(&absmax)),
            format!("(largest {} in layer {worst_layer})", fig(worst)),
            format!("std {}", curve(&std)),
            format!("mean {}", fig(g.summary.mean)),
            format!("std {}", fig(g.summary.std())),
        ]);
    }
    for line in table(&rows, &[Align::Left, Align::Right]) {
        out(format_args!("  {line}"));
    }
    let outliers = r.outliers(args.outlier_ratio);
    if !outliers.is_empty() {
        out(format_args!(
            "outliers (absmax at least {} std):",
            args.outlier_ratio
        ));
    }
    for t in outliers {
        let elements: Vec<String> = t
            .outlier_elements(args.outlier_ratio)
            .iter()
            .map(|&(i, x)| format!("{:?} = {}", unflatten(&t.shape, i), fig(x)))
            .collect();
        out(format_args!(
            "  {}  absmax {} = {:.1} std; {}",
            escape(&t.name),
            fig(t.summary.absmax()),
            t.ratio(),
            elements.join(", ")
        ));
    }
    if let Some(p) = &args.plot {
        out(format_args!("plot: {}", shown(p)));
    }
}
