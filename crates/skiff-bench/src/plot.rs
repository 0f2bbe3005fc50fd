//! The PNG: grouped bars per query, median time on top, peak RSS below.
//!
//! Text is drawn with ab_glyph from DejaVu Sans embedded by the `dejavu`
//! crate, so plotting needs no system fonts (a fresh Debian has none).

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::args::BenchEngine;

use super::report::{self, Measurement, QueryRow};

/// Horizontal pixels per bar and between query groups.
const BAR_PX: u32 = 16;
const GROUP_GAP_PX: u32 = 14;
const WIDTH_MIN_PX: u32 = 900;
const PANEL_HEIGHT_PX: u32 = 480;

fn color(engine: BenchEngine) -> RGBColor {
    match engine {
        BenchEngine::Skiff => RGBColor(230, 120, 20),
        BenchEngine::SkiffCold => RGBColor(240, 190, 120),
        BenchEngine::Datafusion => RGBColor(40, 100, 190),
        BenchEngine::Duckdb => RGBColor(90, 160, 90),
        BenchEngine::DuckdbNative => RGBColor(30, 90, 40),
    }
}

/// plotters looks fonts up by family name; register ours once per process.
pub fn fonts() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let invalid = |_| "the embedded DejaVu font is invalid".to_string();
            register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
                .map_err(invalid)?;
            register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold()).map_err(invalid)
        })
        .clone()
}

/// The series' legend on `chart`, in a white box at `position`.
pub fn legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: plotters::coord::CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Draw both panels into `path`.
pub fn draw(
    path: &Path,
    title: &str,
    measurements: &[Measurement],
    engines: &[BenchEngine],
) -> Result<(), String> {
    fonts()?;
    let rows = report::rows(measurements, engines);
    let groups = rows.len() as u32;
    let width = (140 + groups * (engines.len() as u32 * BAR_PX + GROUP_GAP_PX)).max(WIDTH_MIN_PX);
    let root = BitMapBackend::new(path, (width, 2 * PANEL_HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(PANEL_HEIGHT_PX);
    let time = Panel {
        caption: format!("{title}: median time per query (lower is better)"),
        y_desc: "ms",
        value: |m: &Measurement| m.median_ms(),
    };
    time.draw(&top, &rows, engines)?;
    let memory = Panel {
        caption: format!("{title}: peak RSS per query, fixed overhead included"),
        y_desc: "MiB",
        value: |m: &Measurement| m.ok_peak().map(|b| b as f64 / (1u64 << 20) as f64),
    };
    memory.draw(&bottom, &rows, engines)?;
    root.present().map_err(|e| e.to_string())
}

struct Panel<F> {
    caption: String,
    y_desc: &'static str,
    value: F,
}

impl<F: Fn(&Measurement) -> Option<f64>> Panel<F> {
    fn draw(
        &self,
        area: &DrawingArea<BitMapBackend<'_>, Shift>,
        rows: &[QueryRow<'_>],
        engines: &[BenchEngine],
    ) -> Result<(), String> {
        let err = |e: DrawingAreaErrorKind<_>| e.to_string();
        let y_max = rows
            .iter()
            .flat_map(|r| r.by_engine.iter().flatten())
            .filter_map(|m| (self.value)(m))
            .fold(0.0f64, f64::max);
        // Headroom above the tallest bar keeps the legend off the bars.
        let y_top = if y_max > 0.0 { y_max * 1.3 } else { 1.0 };
        let n = rows.len();
        let mut chart = ChartBuilder::on(area)
            .caption(&self.caption, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..y_top)
            .map_err(err)?;
        let label = |x: &f64| {
            let i = x.round();
            if (x - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            rows.get(i as usize)
                .map(|r| r.query.to_string())
                .unwrap_or_default()
        };
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .x_labels(n + 1)
            .x_label_formatter(&label)
            .y_desc(self.y_desc)
            .y_label_formatter(&|v: &f64| {
                if y_top >= 10.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.1}")
                }
            })
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(err)?;
        let bar = 0.8 / engines.len().max(1) as f64;
        for (j, engine) in engines.iter().enumerate() {
            let offset = -0.4 + j as f64 * bar;
            let style = color(*engine).filled();
            let bars = rows.iter().enumerate().filter_map(|(i, row)| {
                let v = (self.value)(row.by_engine.get(j).copied().flatten()?)?;
                let x0 = i as f64 + offset;
                Some(Rectangle::new([(x0, 0.0), (x0 + bar * 0.9, v)], style))
            });
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(report::engine_name(*engine))
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], style));
            // A failed query has no bar; a red cross says so instead of a gap.
            let failed = rows.iter().enumerate().filter_map(|(i, row)| {
                let m = row.by_engine.get(j).copied().flatten()?;
                m.error.as_ref()?;
                let x = i as f64 + offset + bar * 0.2;
                Some(Text::new(
                    "x",
                    (x, y_top * 0.04),
                    ("sans-serif", 14).into_font().color(&RED),
                ))
            });
            chart.draw_series(failed).map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        Ok(())
    }
}
