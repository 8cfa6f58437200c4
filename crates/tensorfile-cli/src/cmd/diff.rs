//! `tensorfile diff A B`: what changed between two models, and by how much
//! (the library's `tensorfile::diff`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};
use tensorfile::diff::{
    diff, values_to_compare, DiffOptions, DiffReport as Report, TensorDiff, Verdict,
};
use tensorfile::stats::unflatten;
use tensorfile::values::Catalog;

use super::looking::{comparison, escape, refs, shown, Opened};
use super::{out, Failure, Usage};
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
}

fn check_tolerance(name: &str, v: Option<f64>) -> Result<(), Failure> {
    match v {
        Some(x) if !(x >= 0.0 && x.is_finite()) => Err(Usage::failure(format_args!(
            "--{name} {x}: a tolerance is a finite number of at least 0"
        ))),
        _ => Ok(()),
    }
}

fn compare(args: Args) -> Result<ExitCode, Failure> {
    check_tolerance("atol", args.atol)?;
    check_tolerance("rtol", args.rtol)?;
    let (oa, ob) = (Opened::open(&args.a)?, Opened::open(&args.b)?);
    let (ba, bb) = (oa.tensors(), ob.tensors());
    let (ra, rb) = (refs(&ba), refs(&bb));
    let ca = Catalog::new(&ra, oa.metadata(), oa.mlx()).map_err(|e| e.at(&args.a))?;
    let cb = Catalog::new(&rb, ob.metadata(), ob.mlx()).map_err(|e| e.at(&args.b))?;
    let options = DiffOptions::default()
        .with_tolerance(None)
        .with_atol(args.atol)
        .with_rtol(args.rtol)
        .with_exact(args.exact);
    let bar = Bar::values(values_to_compare(&ca, &cb), "comparing");
    let report = diff((&ca, oa.metadata()), (&cb, ob.metadata()), &options, &bar)?;
    drop(bar);
    let verdict = report.verdict();
    let ok = verdict != Verdict::Differs;
    if args.json {
        out(to_json(&args, &report, verdict));
    } else {
        print_text(&args, &report, verdict);
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A figure for JSON: null for NaN and infinities.
fn num(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

fn pair_json(t: &TensorDiff) -> Value {
    let mut v = json!({
        "name": t.name,
        "a": t.a.describe(),
        "b": t.b.describe(),
        "shape_a": t.shape_a,
        "shape_b": t.shape_b,
        "identical": t.identical,
        "within": t.within(),
        "atol": t.tolerance.atol,
        "rtol": t.tolerance.rtol,
    });
    if let Some(m) = &t.metrics {
        v["count"] = json!(m.count);
        v["finite"] = json!(m.finite);
        v["max_abs_diff"] = num(m.max_abs.0);
        v["max_abs_index"] = json!(m.max_abs.1);
        v["max_abs_at"] = json!(unflatten(&t.shape_a, m.max_abs.1));
        v["max_rel_diff"] = num(m.max_rel.0);
        v["max_rel_index"] = json!(m.max_rel.1);
        v["mean_abs_diff"] = num(m.mean_abs());
        v["rms"] = num(m.rms());
        v["cosine"] = m.cosine().map_or(Value::Null, num);
        v["beyond"] = json!(m.beyond);
        v["beyond_share"] = num(m.beyond_share());
        v["nan_only_a"] = json!(m.nan_a);
        v["nan_only_b"] = json!(m.nan_b);
        v["inf_differs"] = json!(m.inf);
    }
    v
}

fn to_json(args: &Args, r: &Report, verdict: Verdict) -> Value {
    let pairs = |v: &[(String, String)]| -> Vec<Value> {
        v.iter()
            .map(|(k, x)| json!({"key": k, "value": x}))
            .collect()
    };
    let m = &r.metadata;
    json!({
        "a": args.a,
        "b": args.b,
        "verdict": verdict.as_str(),
        "exact": args.exact,
        "only_in_a": r.only_in_a,
        "only_in_b": r.only_in_b,
        "renamed": r.renamed.iter().map(|(a, b)| json!({"a": a, "b": b})).collect::<Vec<_>>(),
        "metadata": {
            "only_in_a": pairs(&m.only_in_a),
            "only_in_b": pairs(&m.only_in_b),
            "changed": m.changed.iter().map(|(k, a, b)| json!({"key": k, "a": a, "b": b})).collect::<Vec<_>>(),
        },
        "tensors": r.tensors.iter().map(pair_json).collect::<Vec<_>>(),
        "total": totals(r),
    })
}

/// The totals over every pair.
fn totals(r: &Report) -> Value {
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
    json!({
        "compared": compared,
        "identical": identical,
        "within": within,
        "beyond": compared - within,
        "values": values,
        "values_beyond": beyond,
        "max_abs_diff": worst.map_or(Value::Null, |w| num(w.1)),
        "max_abs_diff_tensor": worst.map(|w| w.0),
    })
}

/// A figure in a few digits.
fn fig(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if !x.is_finite() {
        format!("{x}")
    } else if (1e-3..1e4).contains(&x.abs()) {
        format!("{x:.4}")
    } else {
        format!("{x:.3e}")
    }
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

fn print_text(args: &Args, r: &Report, verdict: Verdict) {
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
        out(format_args!("dtype: {n} tensors {a} -> {b}"));
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
    let t = totals(r);
    let worst = match (
        t["max_abs_diff_tensor"].as_str(),
        t["max_abs_diff"].as_f64(),
    ) {
        (Some(n), Some(x)) if x > 0.0 => format!("; largest |a-b| {} in {}", fig(x), escape(n)),
        _ => String::new(),
    };
    out(format_args!(
        "total: {} tensors compared, {} identical, {} within tolerance, {} beyond; {} of {} values beyond{worst}",
        t["compared"], t["identical"], t["within"], t["beyond"], t["values_beyond"], t["values"]
    ));
    out(format_args!(
        "{} vs {}: {}",
        shown(&args.a),
        shown(&args.b),
        verdict.as_str()
    ));
}
