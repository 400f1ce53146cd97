//! PNG plots of a metric against the heartbeat period: log x, log y, one line per
//! strategy, one panel per client count.
//!
//! Pure Rust: plotters' bitmap backend writes the PNG and text is drawn with ab_glyph
//! from DejaVu Sans embedded in the binary (crate `dejavu`), so no system font or
//! library is needed.

use std::{
    error::Error,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use plotters::{
    prelude::*,
    style::{FontStyle, register_font},
};

use super::{
    lb::{SweepRow, Variant},
    report::{Metric, fmt_h},
};
use dra::routing::Strategy;

/// Plot width per panel and height, pixels.
const PANEL_W: u32 = 640;
const PANEL_H: u32 = 480;

/// Drawing a plot failed.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The embedded font could not be parsed (a broken build).
    #[error("the embedded DejaVu Sans font could not be registered with plotters")]
    Font,
    /// The sweep has no run of this variant with a value for the metric.
    #[error("no {metric} values for variant {variant} to plot")]
    NoData {
        /// The variant asked for.
        variant: Variant,
        /// The metric name.
        metric: &'static str,
    },
    /// Drawing or writing the PNG failed.
    #[error("drawing {path}")]
    Draw {
        /// The PNG being written.
        path: PathBuf,
        /// What plotters reported.
        #[source]
        source: Box<dyn Error + Send + Sync>,
    },
}

/// Register the embedded font as plotters' "sans-serif" once per process.
fn ensure_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

/// Line colour of a strategy (fixed, so every plot uses the same legend).
fn colour(s: Strategy) -> RGBColor {
    match s {
        Strategy::Priority => RGBColor(214, 39, 40),
        Strategy::RoundRobin => RGBColor(31, 119, 180),
        Strategy::LeastLoaded => RGBColor(44, 160, 44),
        Strategy::WeightedLoad => RGBColor(148, 103, 189),
        Strategy::P2c => RGBColor(255, 127, 14),
    }
}

/// Axis tick label: plain below 10^6 and above 10^-3, e-notation otherwise.
fn axis_num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || (1e-3..1e6).contains(&a) {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        format!("{v:.0e}")
    }
}

/// Draw `metric` against the heartbeat period for the runs of `variant` in `rows` into
/// the PNG `path`: one panel per client count, one line per strategy, both axes
/// logarithmic. H = 0 is drawn at half the smallest positive H (said on the x axis);
/// values of 0 are drawn at half the smallest positive value.
pub fn plot_metric(
    rows: &[SweepRow],
    variant: Variant,
    metric: Metric,
    path: &Path,
) -> Result<(), PlotError> {
    ensure_font()?;
    let rows: Vec<&SweepRow> = rows
        .iter()
        .filter(|r| r.config.variant == variant && metric.of(&r.result).is_some())
        .collect();
    let no_data = || PlotError::NoData {
        variant,
        metric: metric.name(),
    };
    if rows.is_empty() {
        return Err(no_data());
    }
    let min_pos_h = rows
        .iter()
        .map(|r| r.config.heartbeat)
        .filter(|h| *h > 0.0)
        .fold(f64::INFINITY, f64::min);
    let h_zero_at = if min_pos_h.is_finite() {
        min_pos_h / 2.0
    } else {
        1.0
    };
    let x_of = |h: f64| if h > 0.0 { h } else { h_zero_at };
    let values = rows.iter().filter_map(|r| metric.of(&r.result));
    let min_pos_y = values
        .clone()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let y_floor = if min_pos_y.is_finite() {
        min_pos_y / 2.0
    } else {
        1e-9
    };
    let y_of = |v: f64| v.max(y_floor);
    let x_max = rows
        .iter()
        .map(|r| x_of(r.config.heartbeat))
        .fold(h_zero_at, f64::max);
    let y_max = values.map(y_of).fold(y_floor, f64::max);
    let (x0, x1) = (h_zero_at / 1.5, x_max * 1.5);
    // Head room above the data (40 % of the decades shown) keeps the legend off the lines.
    let y0 = y_floor / 1.5;
    let y1 = y_max * 1.5 * (y_max * 1.5 / y0).powf(0.4);

    let mut clients: Vec<usize> = Vec::new();
    for r in &rows {
        if !clients.contains(&r.config.clients) {
            clients.push(r.config.clients);
        }
    }
    let mut strategies: Vec<Strategy> = Vec::new();
    for r in &rows {
        if !strategies.contains(&r.config.strategy) {
            strategies.push(r.config.strategy);
        }
    }

    let draw_err = |e: Box<dyn Error + Send + Sync>| PlotError::Draw {
        path: path.to_owned(),
        source: e,
    };
    let width = PANEL_W * clients.len() as u32;
    let root = BitMapBackend::new(path, (width, PANEL_H)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(Box::new(e)))?;
    let panels = root.split_evenly((1, clients.len()));
    for (panel, &n) in panels.iter().zip(&clients) {
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "{variant}: {} — {n} client{}",
                    metric.name(),
                    if n == 1 { "" } else { "s" }
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(|e| draw_err(Box::new(e)))?;
        chart
            .configure_mesh()
            .x_desc(format!(
                "heartbeat period H, mean inter-arrival times (H=0 drawn at {})",
                fmt_h(h_zero_at)
            ))
            .y_desc(metric.describe(variant))
            .axis_desc_style(("sans-serif", 13))
            .label_style(("sans-serif", 12))
            .x_label_formatter(&|x| axis_num(*x))
            .y_label_formatter(&|y| axis_num(*y))
            .draw()
            .map_err(|e| draw_err(Box::new(e)))?;
        for &s in &strategies {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.config.clients == n && r.config.strategy == s)
                .filter_map(|r| {
                    metric
                        .of(&r.result)
                        .map(|v| (x_of(r.config.heartbeat), y_of(v)))
                })
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = colour(s);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|e| draw_err(Box::new(e)))?
                .label(s.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(|e| draw_err(Box::new(e)))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| draw_err(Box::new(e)))?;
    }
    root.present().map_err(|e| draw_err(Box::new(e)))?;
    Ok(())
}
