//! `tensorfile diff A B`: what changed between two models, and by how much
//! (the library's `tensorfile::diff`).

use super::words::fig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tensorfile::diff::{TensorDiff, Verdict};
use tensorfile::stats::unflatten;
use tensorfile_ops::diff::{diff, DiffReport, DiffRequest};

use super::looking::{comparison, escape, shown};
use super::words::{count, counted, plural};
use super::{out, Failure};
use crate::progress::Bar;

/// Arguments of `diff`.
#[derive(clap::Args)]
#[command(after_help = "\
Exit status, as diff(1) and cmp(1) give it: 0 when everything is within tolerance \
(with --exact: bit-identical), 1 when not, 2 on a usage error or an input that cannot \
be read or is invalid. --json prints a verdict: same, within, differs or error.

Default tolerance, from the stored types of each pair, so that a value and its rounding \
to either type are within: --rtol is the coarser type's unit in the last place at 1.0 \
(BF16: 2^-7 = 0.0078125, F16: 2^-10, F32: 2^-23, F64: 2^-52, F8_E4M3: 2^-3), --atol the \
larger smallest subnormal of the two, the spacing of values near zero (F16: 2^-24, BF16: \
2^-133, F32: 2^-149, F8_E4M3: 2^-9); integers compare exactly; a quantized weight counts \
as rtol 2^(1-bits) and adds nothing to atol. An element is within when \
|a - b| <= atol + rtol * |a| (numpy's isclose(b, a): A is the reference); NaN against \
NaN and an infinity against the same one are within.

Quantized weights (int4, MLX) compare by their dequantized values against the other \
side's floats, so `diff model/ model-4bit/` gives each weight's quantization error.")]
pub struct Args {
    /// The reference: a safetensors file, a set (directory or index), or a
    /// PyTorch checkpoint.
    #[arg(value_name = "A")]
    a: PathBuf,
    /// What to compare with it (the same kinds).
    #[arg(value_name = "B")]
    b: PathBuf,
    /// Absolute tolerance (default: from the dtypes, see below).
    #[arg(long, value_name = "X")]
    atol: Option<f64>,
    /// Relative tolerance, of |a| (default: from the dtypes, see below).
    #[arg(long, value_name = "X")]
    rtol: Option<f64>,
    /// Exit 0 only when everything is bit-identical (names, dtypes, shapes,
    /// bytes and metadata).
    #[arg(long)]
    exact: bool,
    /// List identical tensors too (by default only the total counts them).
    #[arg(long)]
    all: bool,
    /// Print JSON: verdict, names only in A or B, moved tensors, metadata
    /// changes and every pair's figures.
    #[arg(long)]
    json: bool,
}

/// Compares; see the exit statuses in the help.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let json = args.json;
    comparison(None, json, || compare(args))
}

impl Args {
    /// The input errors are reported against, and whether as JSON (each
    /// error of a comparison names its own input).
    pub fn report_to(&self) -> (Option<&std::path::Path>, bool) {
        (None, self.json)
    }

    /// The request: the inputs, the tolerance, how URLs are read.
    fn request(&self) -> DiffRequest {
        let mut request = DiffRequest::new(&self.a, &self.b);
        request.atol = self.atol;
        request.rtol = self.rtol;
        request.exact = self.exact;
        request.open = super::remote::open_options(&tensorfile::ReadOptions::default());
        request
    }
}

fn compare(args: Args) -> Result<ExitCode, Failure> {
    let bar = Bar::values_when_told("comparing");
    let report = diff(&args.request(), &bar)?;
    drop(bar);
    let ok = report.verdict() != Verdict::Differs;
    if args.json {
        out(serde_json::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        print_text(&args, &report);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Worst first: beyond the tolerance before within, then by the share of
/// elements beyond, then the largest difference.
fn worst_first(a: &TensorDiff, b: &TensorDiff) -> std::cmp::Ordering {
    let key = |t: &TensorDiff| {
        let m = t.metrics.as_ref();
        (
            t.shape_changed() || !t.within(),
            m.map_or(0.0, |m| m.beyond_share()),
            m.map_or(0.0, |m| m.max_abs.0),
        )
    };
    let (ka, kb) = (key(a), key(b));
    kb.0.cmp(&ka.0)
        .then(kb.1.total_cmp(&ka.1))
        .then(kb.2.total_cmp(&ka.2))
        .then(a.name.cmp(&b.name))
}

fn print_text(args: &Args, report: &DiffReport) {
    let r = &report.compared;
    for n in &r.only_in_a {
        out(format_args!("only in A: {}", escape(n)));
    }
    for n in &r.only_in_b {
        out(format_args!("only in B: {}", escape(n)));
    }
    for (a, b) in &r.renamed {
        out(format_args!(
            "same bytes: {} (A) = {} (B)",
            escape(a),
            escape(b)
        ));
    }
    let mut changes: BTreeMap<(String, String), usize> = BTreeMap::new();
    for t in r.dtype_changes() {
        *changes.entry((t.a.describe(), t.b.describe())).or_default() += 1;
    }
    for ((a, b), n) in &changes {
        out(format_args!(
            "dtype: {} {a} -> {b}",
            plural(*n as u64, "tensor")
        ));
    }
    let m = &r.metadata;
    for (k, v) in &m.only_in_a {
        out(format_args!(
            "metadata only in A: {} = {}",
            escape(k),
            escape(v)
        ));
    }
    for (k, v) in &m.only_in_b {
        out(format_args!(
            "metadata only in B: {} = {}",
            escape(k),
            escape(v)
        ));
    }
    for (k, a, b) in &m.changed {
        out(format_args!(
            "metadata changed: {}: {} -> {}",
            escape(k),
            escape(a),
            escape(b)
        ));
    }
    let mut rows: Vec<&TensorDiff> = r
        .tensors
        .iter()
        .filter(|t| args.all || !t.identical)
        .collect();
    rows.sort_by(|a, b| worst_first(a, b));
    if !rows.is_empty() {
        let width = rows
            .iter()
            .map(|t| escape(&t.name).chars().count())
            .max()
            .unwrap_or(6)
            .clamp(6, 60);
        let dtype_of = |t: &TensorDiff| {
            if t.a == t.b {
                t.a.describe()
            } else {
                format!("{}->{}", t.a.describe(), t.b.describe())
            }
        };
        let dw = rows
            .iter()
            .map(|t| dtype_of(t).chars().count())
            .max()
            .unwrap_or(5)
            .max(5);
        out(format_args!(
            "{:<width$}  {:<dw$}  {:>10}  {:<14}  {:>10}  {:>10}  {:>10}  {:>9}  beyond",
            "tensor", "dtype", "max|a-b|", "at", "max rel", "mean|a-b|", "rms", "cosine"
        ));
        for t in rows {
            let name = escape(&t.name);
            let dtype = dtype_of(t);
            let Some(m) = &t.metrics else {
                out(format_args!(
                    "{name:<width$}  {dtype:<dw$}  shape {:?} -> {:?}",
                    t.shape_a, t.shape_b
                ));
                continue;
            };
            if t.identical {
                out(format_args!("{name:<width$}  {dtype:<dw$}  identical"));
                continue;
            }
            let at = format!("{:?}", unflatten(&t.shape_a, m.max_abs.1));
            let cosine = m.cosine().map_or("-".to_string(), |c| format!("{c:.6}"));
            let mut beyond = format!("{} ({:.2}%)", m.beyond, 100.0 * m.beyond_share());
            if m.nan_a + m.nan_b + m.inf > 0 {
                beyond.push_str(&format!(
                    ", NaN only in A {} / B {}, inf {}",
                    m.nan_a, m.nan_b, m.inf
                ));
            }
            out(format_args!(
                "{name:<width$}  {dtype:<dw$}  {:>10}  {at:<14}  {:>10}  {:>10}  {:>10}  {cosine:>9}  {beyond}",
                fig(m.max_abs.0),
                fig(m.max_rel.0),
                fig(m.mean_abs()),
                fig(m.rms()),
            ));
        }
    }
    let t = &report.total;
    let worst = match (&t.max_abs_diff_tensor, t.max_abs_diff) {
        (Some(n), Some(x)) if x > 0.0 => format!("; largest |a-b| {} in {}", fig(x), escape(n)),
        _ => String::new(),
    };
    out(format_args!(
        "total: {} compared, {} identical, {} within tolerance, {} beyond; {} of {} beyond{worst}",
        plural(t.compared as u64, "tensor"),
        t.identical,
        t.within,
        t.beyond,
        count(t.values_beyond),
        counted(t.values, "value")
    ));
    out(format_args!(
        "{} vs {}: {}",
        shown(&args.a),
        shown(&args.b),
        report.verdict
    ));
}
