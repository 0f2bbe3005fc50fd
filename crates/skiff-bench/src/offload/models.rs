//! The memory node's cost models as the bench trains them (`skiff memnode
//! calibrate` behind each link, the node on the bench's offload threads)
//! and their figures: the paper's Figures 6-8 and 11 (held-out
//! predictions of the network, serialization and execution models
//! against the times measured) and Figure 10 (the estimator's rows against
//! those kept, and its time as a share of execution).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::OFFLOAD_THREADS;
use crate::BenchError;
use crate::scale::PALETTE;

/// Corpus size of the bench's calibrations.
const FRAGMENTS: usize = 160;
const ROWS: usize = 1 << 20;

/// One calibration's points: (model, predicted, measured).
pub(super) struct Calibrated {
    pub link: &'static str,
    pub models: PathBuf,
    pub points: Vec<(String, f64, f64)>,
}

/// Calibrate a node behind `link` into `dir`.
pub(super) fn calibrate(dir: &Path, link: &'static str) -> Result<Calibrated, BenchError> {
    let fail = |e: String| BenchError::Data(format!("skiff memnode calibrate: {e}"));
    let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
    let models = dir.join(format!("models-{link}.json"));
    let report = dir.join(format!("models-{link}.csv"));
    eprintln!("calibrating a node behind {link} ({FRAGMENTS} fragments)");
    let output = std::process::Command::new(exe)
        .args(["memnode", "calibrate", "--link-bandwidth", link])
        .args(["--offload-threads", &OFFLOAD_THREADS.to_string()])
        .args(["--fragments", &FRAGMENTS.to_string()])
        .args(["--rows", &ROWS.to_string()])
        .arg("--out")
        .arg(&models)
        .arg("--report")
        .arg(&report)
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !output.status.success() {
        return Err(fail(String::from_utf8_lossy(&output.stderr).to_string()));
    }
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
    let text = std::fs::read_to_string(&report).map_err(|e| fail(e.to_string()))?;
    let points = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let model = line.split(',').next()?.to_string();
            let mut numbers = line.rsplitn(3, ',');
            let measured: f64 = numbers.next()?.parse().ok()?;
            let predicted: f64 = numbers.next()?.parse().unwrap_or(f64::NAN);
            Some((model, predicted, measured))
        })
        .collect();
    Ok(Calibrated {
        link,
        models,
        points,
    })
}

/// |predicted - measured| / measured of `model`'s points.
fn errors(c: &Calibrated, model: &str) -> Vec<f64> {
    c.points
        .iter()
        .filter(|(m, p, _)| m == model && p.is_finite())
        .map(|(_, p, m)| (p - m).abs() / m.max(1.0))
        .collect()
}

pub(super) fn median_p90(mut values: Vec<f64>) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

/// The models' errors per link, as the summary prints them.
pub(super) fn summary(calibrated: &[Calibrated]) -> String {
    let mut text =
        String::from("\nCost models, held out (a fifth of each calibration): error median / p90\n");
    text.push_str(&format!(
        "{:>8} {:>18} {:>18} {:>18} {:>18} {:>16}\n",
        "link",
        "network (Fig 6-8)",
        "serialization",
        "execution (Fig 11)",
        "cardinality (10)",
        "estimation CPU"
    ));
    for c in calibrated {
        let cell = |model: &str| {
            let (median, p90) = median_p90(errors(c, model));
            format!("{:.1}% / {:.1}%", median * 100.0, p90 * 100.0)
        };
        let shares: Vec<f64> = c
            .points
            .iter()
            .filter(|(m, _, _)| m == "estimation")
            .map(|(_, _, share)| *share)
            .collect();
        let (share, share90) = median_p90(shares);
        text.push_str(&format!(
            "{:>8} {:>18} {:>18} {:>18} {:>18} {:>16}\n",
            c.link,
            cell("network"),
            cell("serialization"),
            cell("execution"),
            cell("cardinality"),
            format!("{:.2}% / {:.2}%", share * 100.0, share90 * 100.0)
        ));
    }
    text
}

pub(super) fn csv(calibrated: &[Calibrated]) -> String {
    let mut text = String::from("link,model,predicted,measured\n");
    for c in calibrated {
        for (model, predicted, measured) in &c.points {
            text.push_str(&format!("{},{model},{predicted},{measured}\n", c.link));
        }
    }
    text
}

/// Predicted against measured, log-log, one panel per model (Figures 6-8
/// and 11 as scatter plots; the cardinality's Figure 10 beside them).
pub(super) fn plot(path: &Path, title: &str, calibrated: &[Calibrated]) -> Result<(), String> {
    crate::plot::fonts()?;
    const MODELS: [&str; 4] = ["network", "serialization", "execution", "cardinality"];
    let root = BitMapBackend::new(path, (1400, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| e.to_string())?;
    for (panel, model) in root.split_evenly((1, MODELS.len())).iter().zip(MODELS) {
        let points: Vec<(f64, f64, usize)> = calibrated
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.points
                    .iter()
                    .filter(move |(m, p, v)| m == model && p.is_finite() && *p > 0.0 && *v > 0.0)
                    .map(move |(_, p, v)| (*v, *p, i))
            })
            .collect();
        let low = points
            .iter()
            .map(|p| p.0.min(p.1))
            .fold(f64::INFINITY, f64::min)
            .min(1.0);
        let high = points.iter().map(|p| p.0.max(p.1)).fold(10.0, f64::max);
        let unit = if model == "cardinality" { "rows" } else { "ns" };
        let mut chart = ChartBuilder::on(panel)
            .caption(model, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d((low..high * 1.2).log_scale(), (low..high * 1.2).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc(format!("measured, {unit}"))
            .y_desc(format!("predicted, {unit}"))
            .x_labels(4)
            .y_labels(4)
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(LineSeries::new(
                [(low, low), (high, high)],
                BLACK.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
        for (i, c) in calibrated.iter().enumerate() {
            let style = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(
                    points
                        .iter()
                        .filter(|p| p.2 == i)
                        .map(|&(x, y, _)| Circle::new((x, y), 3, style.filled())),
                )
                .map_err(|e| e.to_string())?
                .label(c.link)
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, style.filled()));
        }
        crate::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    root.present().map_err(|e| e.to_string())
}
