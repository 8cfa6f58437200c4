//! `stats --plot`: the per-layer absolute-max and std curves of every
//! layer group, and the distributions of the groups (or of the tensors,
//! for a file without layers), drawn as SVG with plotters; a `.png` name
//! gets the same picture rasterized by resvg (its text in the system's
//! sans-serif font, when there is one). The file is saved atomically.
//!
//! It stands below the commands: its errors are its own ([`PlotError`]),
//! which `stats` turns into its failures.

use std::fmt;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use tensorfile::stats::{Figures as Report, Summary};

/// Why a picture was not made.
#[derive(Debug)]
pub enum PlotError {
    /// plotters or resvg could not draw it: what they said.
    Draw(String),
    /// The file could not be saved.
    Save(tensorfile_core::Error),
}

impl fmt::Display for PlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlotError::Draw(message) => f.write_str(message),
            PlotError::Save(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PlotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlotError::Draw(_) => None,
            PlotError::Save(e) => e.source(),
        }
    }
}

impl From<tensorfile_core::Error> for PlotError {
    fn from(e: tensorfile_core::Error) -> PlotError {
        PlotError::Save(e)
    }
}

/// Histograms drawn at most.
const PANELS: usize = 12;
const COLUMNS: usize = 3;
const WIDTH: u32 = 1200;
const CURVES_HEIGHT: u32 = 420;
const PANEL_HEIGHT: u32 = 220;
/// Space kept free at the picture's left and right edges: the last tick
/// label of a chart is centred on its end, and must not be cut.
const EDGE: u32 = 16;
/// The legend's width, right of the curves (never over them).
const LEGEND_WIDTH: u32 = 380;
/// A legend row's height, and its text's size, in pixels.
const LEGEND_ROW: u32 = 16;
const LEGEND_FONT: u32 = 12;

/// A rectangle of the picture, in pixels: left, top, width, height.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rect {
    x: u32,
    y: u32,
    w: u32,
    h: u32,
}

/// Where the parts of the picture go: the curves, their legend beside
/// them, and the histogram panels, three to a row, under them; all within
/// the picture, [`EDGE`] from its left and right edges.
#[derive(Debug)]
struct Layout {
    width: u32,
    height: u32,
    curves: Rect,
    legend: Rect,
    panels: Vec<Rect>,
}

impl Layout {
    fn new(panels: usize) -> Layout {
        let rows = panels.div_ceil(COLUMNS) as u32;
        let inner = WIDTH - 2 * EDGE;
        let curves = Rect {
            x: EDGE,
            y: 0,
            w: inner - LEGEND_WIDTH,
            h: CURVES_HEIGHT,
        };
        let legend = Rect {
            x: EDGE + curves.w,
            y: 0,
            w: LEGEND_WIDTH,
            h: CURVES_HEIGHT,
        };
        let column = inner / COLUMNS as u32;
        let panels = (0..panels as u32)
            .map(|i| Rect {
                x: EDGE + (i % COLUMNS as u32) * column,
                y: CURVES_HEIGHT + (i / COLUMNS as u32) * PANEL_HEIGHT,
                w: column,
                h: PANEL_HEIGHT,
            })
            .collect();
        Layout {
            width: WIDTH,
            height: CURVES_HEIGHT + rows * PANEL_HEIGHT,
            curves,
            legend,
            panels,
        }
    }
}

/// The part of `root` at `r`.
fn area<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    r: Rect,
) -> DrawingArea<DB, plotters::coord::Shift> {
    root.clone().shrink((r.x, r.y), (r.w, r.h))
}

/// A tick of a log axis: `mantissa` x 10^`exponent`, kept as integers so
/// that its label is exact (`0.3`, not `0.30000000000000004`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tick {
    mantissa: i64,
    exponent: i32,
}

impl Tick {
    fn value(self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exponent)
    }

    /// The label: digits as written (`0.02`, `5`, `300`), or with an
    /// exponent when far from 1 (`2e-7`).
    fn label(self) -> String {
        let digits = self.mantissa.to_string();
        let places = -self.exponent;
        if !(-6..=4).contains(&places) {
            return format!("{}e{}", digits, self.exponent);
        }
        if places <= 0 {
            return format!("{digits}{}", "0".repeat((-places) as usize));
        }
        let places = places as usize;
        let padded = format!("{digits:0>width$}", width = places + 1);
        let (whole, fraction) = padded.split_at(padded.len() - places);
        let fraction = fraction.trim_end_matches('0');
        if fraction.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{fraction}")
        }
    }
}

/// The labelled ticks of a log axis from `lo` to `hi` (positive): every
/// power of ten in the range, and when that gives fewer than three, the
/// 2s and 5s, then every digit, then evenly spaced round values, so that
/// any range of values can be read.
fn log_ticks(lo: f64, hi: f64) -> Vec<Tick> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return Vec::new();
    }
    let within = |t: &Tick| (lo..=hi).contains(&t.value());
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    for mantissas in [&[1][..], &[1, 2, 5], &[1, 2, 3, 4, 5, 6, 7, 8, 9]] {
        let ticks: Vec<Tick> = (first..=last)
            .flat_map(|exponent| {
                mantissas
                    .iter()
                    .map(move |&mantissa| Tick { mantissa, exponent })
            })
            .filter(within)
            .collect();
        if ticks.len() >= 3 {
            return ticks;
        }
    }
    // Within one digit's step (0.81 to 0.89, say): a round step giving
    // three to ten ticks.
    let span = hi - lo;
    let mut exponent = span.log10().floor() as i32 - 1;
    loop {
        for step in [1, 2, 5] {
            let size = step as f64 * 10f64.powi(exponent);
            if span / size <= 10.0 {
                let start = (lo / size).ceil() as i64;
                let end = (hi / size).floor() as i64;
                return (start..=end)
                    .map(|k| Tick {
                        mantissa: k * step,
                        exponent,
                    })
                    .filter(within)
                    .collect();
            }
        }
        exponent += 1;
    }
}

/// `label` cut to at most `max` characters, its end kept (names differ
/// at their end: `...layers.*.mlp.down_proj.weight`).
fn tail(label: &str, max: usize) -> String {
    let n = label.chars().count();
    if n <= max {
        return label.to_string();
    }
    let kept: String = label.chars().skip(n + 1 - max).collect();
    format!("…{kept}")
}

/// Colors of the series, in turn (tab20's darker and lighter halves).
const PALETTE: [RGBColor; 14] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 128),
    RGBColor(128, 0, 0),
    RGBColor(0, 128, 128),
    RGBColor(128, 128, 0),
];

/// The color of series `i`.
pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn plot_error(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(format!("cannot draw the plot: {e}"))
}

/// The distributions drawn: the groups', then the ungrouped tensors', as
/// many as there are panels.
fn distributions(r: &Report) -> Vec<(String, &Summary)> {
    let grouped: std::collections::HashSet<usize> = r
        .groups
        .iter()
        .flat_map(|g| g.members.iter().map(|&(_, i)| i))
        .collect();
    r.groups
        .iter()
        .map(|g| (g.pattern.clone(), &g.summary))
        .chain(
            r.tensors
                .iter()
                .enumerate()
                .filter(|(i, _)| !grouped.contains(i))
                .map(|(_, t)| (t.name.clone(), &t.summary)),
        )
        .filter(|(_, s)| s.finite > 0)
        .take(PANELS)
        .collect()
}

/// The SVG text of the picture.
pub fn svg(r: &Report, outlier_ratio: f64) -> Result<String, PlotError> {
    let dists = distributions(r);
    let layout = Layout::new(dists.len());
    let mut text = String::new();
    {
        let root =
            SVGBackend::with_string(&mut text, (layout.width, layout.height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        curves(&root, &layout, r, outlier_ratio)?;
        for (i, ((name, s), rect)) in dists.iter().zip(&layout.panels).enumerate() {
            histogram(&area(&root, *rect), name, s, color(i))?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(text)
}

/// Absolute max and std by layer for each group (log scale); without
/// groups, by tensor. The legend stands beside the chart.
fn curves<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    layout: &Layout,
    r: &Report,
    outlier_ratio: f64,
) -> Result<(), PlotError> {
    // (label, points (x, absmax), points (x, std)).
    type Series = (String, Vec<(f64, f64)>, Vec<(f64, f64)>);
    let mut series: Vec<Series> = r
        .groups
        .iter()
        .map(|g| {
            let point = |f: &dyn Fn(&Summary) -> f64| -> Vec<(f64, f64)> {
                g.members
                    .iter()
                    .map(|&(l, i)| (l as f64, f(&r.tensors[i].summary)))
                    .filter(|p| p.1 > 0.0 && p.1.is_finite())
                    .collect()
            };
            (
                g.pattern.clone(),
                point(&|s| s.absmax()),
                point(&|s| s.std()),
            )
        })
        .collect();
    let by_layer = !series.is_empty();
    if !by_layer {
        let point = |f: &dyn Fn(&Summary) -> f64| -> Vec<(f64, f64)> {
            r.tensors
                .iter()
                .enumerate()
                .map(|(i, t)| (i as f64, f(&t.summary)))
                .filter(|p| p.1 > 0.0 && p.1.is_finite())
                .collect()
        };
        series.push((
            "tensors".into(),
            point(&|s| s.absmax()),
            point(&|s| s.std()),
        ));
    }
    let all = series.iter().flat_map(|(_, a, s)| a.iter().chain(s));
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, 0f64);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !(x0.is_finite() && y0.is_finite() && y1 > 0.0) {
        (x0, x1, y0, y1) = (0.0, 1.0, 1e-3, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    // A log axis drawn as a linear one of log10(value), its ticks chosen
    // and drawn here ([`log_ticks`]), so that its labels are readable
    // round values: plotters' own log axis labels few of them, in any
    // number of digits.
    let (lo, hi) = (y0 / 1.5, y1 * 1.5);
    let title = format!(
        "absolute max (solid) and std (thin) {}; outliers at absmax >= {outlier_ratio} std",
        if by_layer { "by layer" } else { "by tensor" }
    );
    let chart_area = area(root, layout.curves);
    let mut chart = ChartBuilder::on(&chart_area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, lo.log10()..hi.log10())
        .map_err(plot_error)?;
    // Layers and tensors are whole numbers.
    let x_ticks = ((x1 - x0) as usize + 1).min(12);
    chart
        .configure_mesh()
        .x_desc(if by_layer { "layer" } else { "tensor" })
        .y_desc("value")
        .x_labels(x_ticks)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .disable_y_mesh()
        .y_labels(0)
        .draw()
        .map_err(plot_error)?;
    let label_style = ("sans-serif", 12)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    for tick in log_ticks(lo, hi) {
        let y = tick.value().log10();
        chart
            .draw_series(LineSeries::new([(x0, y), (x1, y)], BLACK.mix(0.15)))
            .map_err(plot_error)?;
        let (px, py) = chart.backend_coord(&(x0, y));
        root.draw(&PathElement::new(vec![(px - 5, py), (px, py)], BLACK))
            .map_err(plot_error)?;
        root.draw_text(&tick.label(), &label_style, (px - 8, py))
            .map_err(plot_error)?;
    }
    let log = |points: &[(f64, f64)]| -> Vec<(f64, f64)> {
        points.iter().map(|&(x, y)| (x, y.log10())).collect()
    };
    for (i, (_, absmax, std)) in series.iter().enumerate() {
        let c = color(i);
        let (absmax, std) = (log(absmax), log(std));
        chart
            .draw_series(LineSeries::new(absmax.iter().copied(), c.stroke_width(2)))
            .map_err(plot_error)?;
        // A single layer is a point, not a line: a mark shows it.
        if absmax.len() == 1 {
            chart
                .draw_series(absmax.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(plot_error)?;
        }
        chart
            .draw_series(LineSeries::new(
                std.iter().copied(),
                c.mix(0.6).stroke_width(1),
            ))
            .map_err(plot_error)?;
        if std.len() == 1 {
            chart
                .draw_series(
                    std.iter()
                        .map(|&p| Circle::new(p, 3, c.mix(0.6).stroke_width(1))),
                )
                .map_err(plot_error)?;
        }
    }
    legend(&area(root, layout.legend), &series)
}

/// The legend of the curves, in its own area: a line of each series'
/// color and its name (cut to fit, its end kept), as many as fit, then
/// how many more there are.
fn legend<DB: DrawingBackend, T, U>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[(String, T, U)],
) -> Result<(), PlotError> {
    let style = ("sans-serif", LEGEND_FONT).into_font().color(&BLACK);
    // Below the caption's height; a name gets the width left by its line.
    let top = 40;
    let rows = ((CURVES_HEIGHT - top - 40) / LEGEND_ROW) as usize;
    let chars = ((LEGEND_WIDTH - 40) / (LEGEND_FONT * 6 / 10)) as usize;
    let shown = if series.len() > rows {
        rows - 1
    } else {
        series.len()
    };
    for (i, (label, ..)) in series.iter().take(shown).enumerate() {
        let y = (top + i as u32 * LEGEND_ROW) as i32;
        let c = color(i);
        area.draw(&PathElement::new(
            vec![(4, y + 6), (24, y + 6)],
            c.stroke_width(2),
        ))
        .map_err(plot_error)?;
        area.draw_text(&tail(label, chars), &style, (30, y))
            .map_err(plot_error)?;
    }
    if shown < series.len() {
        let y = (top + shown as u32 * LEGEND_ROW) as i32;
        let more = format!("... and {} more", series.len() - shown);
        area.draw_text(&more, &style, (30, y)).map_err(plot_error)?;
    }
    Ok(())
}

/// One distribution, as bars over the values' range.
fn histogram<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    name: &str,
    s: &Summary,
    c: RGBColor,
) -> Result<(), PlotError> {
    let (lo, hi, counts) = s.histogram.coarse(48);
    let top = counts.iter().copied().max().unwrap_or(1).max(1);
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo - 1.0, lo + 1.0)
    };
    let width = (hi - lo) / counts.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(tail(name, 48), ("sans-serif", 13))
        .margin(8)
        // The last x label is centred on the axis' end: room for its half.
        .margin_right(24)
        .x_label_area_size(22)
        .y_label_area_size(48)
        .build_cartesian_2d(lo..hi, 0u64..top + top / 10 + 1)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(4)
        .y_labels(3)
        .draw()
        .map_err(plot_error)?;
    chart
        .draw_series(counts.iter().enumerate().map(|(i, &n)| {
            let x = lo + i as f64 * width;
            Rectangle::new([(x, 0), (x + width, n)], c.filled())
        }))
        .map_err(plot_error)?;
    Ok(())
}

/// The picture as PNG bytes.
fn png(svg: &str) -> Result<Vec<u8>, PlotError> {
    let mut options = resvg::usvg::Options::default();
    {
        let db = options.fontdb_mut();
        db.load_system_fonts();
        // plotters names the generic "sans-serif"; give it a face the
        // machine has, common ones first.
        let families: Vec<String> = db
            .faces()
            .flat_map(|f| f.families.iter().map(|(n, _)| n.clone()))
            .collect();
        let pick = [
            "DejaVu Sans",
            "Liberation Sans",
            "Noto Sans",
            "Arial",
            "Helvetica",
        ]
        .iter()
        .find(|want| families.iter().any(|f| f == *want))
        .map(|s| s.to_string())
        .or_else(|| families.first().cloned());
        if let Some(family) = pick {
            db.set_sans_serif_family(family);
        }
    }
    let tree = resvg::usvg::Tree::from_str(svg, &options).map_err(plot_error)?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| plot_error("the picture has no size"))?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(plot_error)
}

/// Draws the report into `path` (PNG when it ends in `.png`, else SVG).
pub fn draw(path: &Path, r: &Report, outlier_ratio: f64) -> Result<(), PlotError> {
    let svg = svg(r, outlier_ratio)?;
    let is_png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let bytes = if is_png { png(&svg)? } else { svg.into_bytes() };
    let file = tensorfile_core::AtomicFile::create(path)?;
    file.write_all_at(&bytes, 0)?;
    file.commit(true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_lies_within_the_picture() {
        for panels in 0..=PANELS {
            let l = Layout::new(panels);
            assert_eq!(l.width, WIDTH);
            assert_eq!(l.panels.len(), panels);
            // The legend is beside the curves, not over them.
            assert_eq!(l.legend.x, l.curves.x + l.curves.w);
            for r in l.panels.iter().chain([&l.curves, &l.legend]) {
                assert!(
                    r.x >= EDGE && r.x + r.w <= l.width - EDGE,
                    "{panels}: {r:?}"
                );
                assert!(r.y + r.h <= l.height, "{panels}: {r:?}");
            }
            // Panels do not overlap one another.
            for (i, a) in l.panels.iter().enumerate() {
                for b in &l.panels[i + 1..] {
                    let apart = a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y;
                    assert!(apart, "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn log_axes_have_readable_ticks_in_every_decade() {
        let labels =
            |lo, hi| -> Vec<String> { log_ticks(lo, hi).iter().map(|t| t.label()).collect() };
        // Weights: absmax near 0.1 and 1, std near 0.02.
        assert_eq!(
            labels(0.013, 1.5),
            ["0.02", "0.05", "0.1", "0.2", "0.5", "1"]
        );
        assert_eq!(
            labels(1.5e-5, 300.0),
            ["0.0001", "0.001", "0.01", "0.1", "1", "10", "100"]
        );
        assert_eq!(labels(3e-7, 2e-4), ["1e-6", "1e-5", "0.0001"]);
        assert_eq!(
            labels(0.25, 0.95),
            ["0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9"]
        );
        assert_eq!(
            labels(0.805, 0.895),
            ["0.81", "0.82", "0.83", "0.84", "0.85", "0.86", "0.87", "0.88", "0.89"]
        );
        let tiny = labels(2.1e-9, 5.5e-7);
        assert!(
            tiny.len() >= 3 && tiny.contains(&"1e-8".into()) && tiny.contains(&"1e-7".into()),
            "{tiny:?}"
        );
        for (lo, hi) in [
            (0.013, 1.5),
            (1e-9, 1e9),
            (0.999, 1.001),
            (3.0, 4.0),
            (5e-7, 6e-7),
        ] {
            let ticks = log_ticks(lo, hi);
            assert!(ticks.len() >= 3, "{lo}..{hi}: {ticks:?}");
            assert!(ticks.iter().all(|t| (lo..=hi).contains(&t.value())));
        }
        assert!(log_ticks(0.0, 1.0).is_empty());
    }
}
