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
    let rows = dists.len().div_ceil(COLUMNS) as u32;
    let height = CURVES_HEIGHT + rows * PANEL_HEIGHT;
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (top, bottom) = root.split_vertically(CURVES_HEIGHT);
        curves(&top, r, outlier_ratio)?;
        let panels = bottom.split_evenly((rows.max(1) as usize, COLUMNS));
        for (i, ((name, s), area)) in dists.iter().zip(panels.iter()).enumerate() {
            histogram(area, name, s, color(i))?;
        }
        root.present().map_err(plot_error)?;
    }
    Ok(text)
}

/// Absolute max and std by layer for each group (log scale); without
/// groups, by tensor.
fn curves<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
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
    let title = format!(
        "absolute max (solid) and std (thin) {}; outliers at absmax >= {outlier_ratio} std",
        if by_layer { "by layer" } else { "by tensor" }
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, (y0 / 1.5..y1 * 1.5).log_scale())
        .map_err(plot_error)?;
    // Layers and tensors are whole numbers.
    let ticks = ((x1 - x0) as usize + 1).min(12);
    chart
        .configure_mesh()
        .x_desc(if by_layer { "layer" } else { "tensor" })
        .y_desc("value")
        .x_labels(ticks)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(plot_error)?;
    for (i, (label, absmax, std)) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(absmax.iter().copied(), c.stroke_width(2)))
            .map_err(plot_error)?
            .label(label.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                std.iter().copied(),
                c.mix(0.6).stroke_width(1),
            ))
            .map_err(plot_error)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_error)?;
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
    let caption: String = if name.chars().count() > 48 {
        let tail: String = name
            .chars()
            .rev()
            .take(47)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    } else {
        name.to_string()
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 13))
        .margin(8)
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
