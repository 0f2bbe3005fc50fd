//! Min/max pruning in the memory node: one selective scan of lineitem
//! (a range of `l_orderkey`, which lineitem's files hold in order) at
//! [`SELECTIVITIES`], its chunks sent whole (`skiff.chunk_pruning =
//! false`) or only those holding rows the range may keep. Row groups the
//! Parquet footer rules out are never asked for in either; what pruning
//! adds is the rows within the row groups left. The pool is off (every
//! column from the memory node), one worker, one partition.

use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use super::super::scale::PALETTE;
use super::{cluster, exec, median_after_warm_up, number, report, served_bytes};
use crate::args::BenchArgs;
use crate::harness::BenchError;

/// Shares of lineitem's orderkeys the range spans.
const SELECTIVITIES: [f64; 5] = [0.001, 0.01, 0.1, 0.5, 1.0];
const LINKS: [Option<&str>; 2] = [None, Some("10Gbit")];
const COLUMNS: [&str; 4] = ["l_orderkey", "l_quantity", "l_extendedprice", "l_discount"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Whole,
    Pruned,
}

impl Mode {
    const ALL: [Mode; 2] = [Mode::Whole, Mode::Pruned];

    fn name(self) -> &'static str {
        match self {
            Mode::Whole => "chunks sent whole",
            Mode::Pruned => "pruned by min/max",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Mode::Whole => "whole",
            Mode::Pruned => "pruned",
        }
    }
}

struct Run {
    link: Option<&'static str>,
    selectivity: f64,
    mode: Mode,
    run: u32,
    ms: f64,
    /// Bytes the memory node sent during the run.
    bytes: u64,
}

/// The range of orderkeys of `selectivity` of `max`, starting at 30% of
/// it (all of them at 1).
fn range(max: u64, selectivity: f64) -> (u64, u64) {
    if selectivity >= 1.0 {
        return (0, max);
    }
    let low = (max as f64 * 0.3) as u64;
    (low, low + (max as f64 * selectivity) as u64)
}

fn query(low: u64, high: u64) -> String {
    format!(
        "SELECT count(*), sum(l_extendedprice * (1 - l_discount)), sum(l_quantity) \
         FROM lineitem WHERE l_orderkey BETWEEN {low} AND {high}"
    )
}

pub(super) async fn run(args: &BenchArgs, data: &Path, title: &str) -> Result<(), BenchError> {
    eprintln!(
        "{title}: min/max pruning, a range of l_orderkey at selectivities {SELECTIVITIES:?}, \
         {} runs each (the first a warm-up), links {}",
        args.runs,
        LINKS.map(|l| l.unwrap_or("off")).join(", ")
    );
    let mut runs = Vec::new();
    for link in LINKS {
        runs.extend(on_link(data, link, args.runs).await?);
    }
    report(
        args,
        "groups-prune",
        &summary(title, &runs),
        &csv(&runs),
        |png| plot(png, title, &runs),
    )
}

async fn on_link(
    data: &Path,
    link: Option<&'static str>,
    runs: u32,
) -> Result<Vec<Run>, BenchError> {
    let (_server, _state, conn) = cluster(data, link, 1).await?;
    let names: Vec<String> = COLUMNS.iter().map(|c| format!("'{c}'")).collect();
    exec(
        &conn,
        &format!(
            "SELECT skiff.load_to_memory('lineitem', {})",
            names.join(", ")
        ),
    )
    .await?;
    for sql in [
        "SET skiff.distribute = 'off'",
        "SET skiff.buffer_pool = false",
    ] {
        exec(&conn, sql).await?;
    }
    let max = number(&conn, "SELECT max(l_orderkey) FROM lineitem").await?;
    let mut out = Vec::new();
    for selectivity in SELECTIVITIES {
        let (low, high) = range(max, selectivity);
        let sql = query(low, high);
        let mut answers = Vec::new();
        for mode in Mode::ALL {
            let on = mode == Mode::Pruned;
            exec(&conn, &format!("SET skiff.chunk_pruning = {on}")).await?;
            for run in 0..runs {
                let before = served_bytes(&conn, Some("lineitem")).await?;
                let started = Instant::now();
                let rows = conn
                    .rows(&sql)
                    .await
                    .map_err(|e| BenchError::Data(format!("{sql}: {e}")))?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let bytes = served_bytes(&conn, Some("lineitem")).await? - before;
                if run == 0 {
                    answers.push(rows);
                }
                eprintln!(
                    "link {}: selectivity {selectivity}, {}: run {run}: {ms:.1} ms, {} KiB sent",
                    link.unwrap_or("off"),
                    mode.name(),
                    bytes >> 10
                );
                out.push(Run {
                    link,
                    selectivity,
                    mode,
                    run,
                    ms,
                    bytes,
                });
            }
        }
        if answers.windows(2).any(|w| w[0] != w[1]) {
            return Err(BenchError::Data(format!(
                "{sql}: pruned and whole answers differ: {answers:?}"
            )));
        }
    }
    Ok(out)
}

fn point(runs: &[Run], link: Option<&str>, selectivity: f64, mode: Mode) -> Option<(f64, u64)> {
    let of: Vec<&Run> = runs
        .iter()
        .filter(|r| r.link == link && r.selectivity == selectivity && r.mode == mode)
        .collect();
    let ms: Vec<f64> = of.iter().map(|r| r.ms).collect();
    Some((median_after_warm_up(&ms)?, of.last()?.bytes))
}

fn summary(title: &str, runs: &[Run]) -> String {
    let mut text = format!(
        "{title}: min/max pruning, median ms (KiB the memory node sent); pruned against whole\n"
    );
    for link in LINKS {
        text.push_str(&format!("\nlink {}\n", link.unwrap_or("off (loopback)")));
        text.push_str(&format!("{:>12}", "selectivity"));
        for mode in Mode::ALL {
            text.push_str(&format!(" {:>24}", mode.name()));
        }
        text.push_str(&format!(" {:>10} {:>10}\n", "time", "bytes"));
        for selectivity in SELECTIVITIES {
            text.push_str(&format!("{:>12}", format!("{}%", selectivity * 100.0)));
            for mode in Mode::ALL {
                let cell = match point(runs, link, selectivity, mode) {
                    Some((ms, bytes)) => format!("{ms:.1} ({} KiB)", bytes >> 10),
                    None => "-".into(),
                };
                text.push_str(&format!(" {cell:>24}"));
            }
            let (ms, bytes) = match (
                point(runs, link, selectivity, Mode::Pruned),
                point(runs, link, selectivity, Mode::Whole),
            ) {
                (Some((p, pb)), Some((w, wb))) if w > 0.0 && wb > 0 => (
                    format!("{:.2}x", p / w),
                    format!("{:.3}x", pb as f64 / wb as f64),
                ),
                _ => ("-".into(), "-".into()),
            };
            text.push_str(&format!(" {ms:>10} {bytes:>10}\n"));
        }
    }
    text
}

fn csv(runs: &[Run]) -> String {
    let mut text = String::from("link,selectivity,mode,run,ms,bytes_sent\n");
    for r in runs {
        text.push_str(&format!(
            "{},{},{},{},{:.3},{}\n",
            r.link.unwrap_or("off"),
            r.selectivity,
            r.mode.slug(),
            r.run,
            r.ms,
            r.bytes
        ));
    }
    text
}

/// A panel per link: median ms against the selectivity (log), a line per
/// mode.
fn plot(path: &Path, title: &str, runs: &[Run]) -> Result<(), String> {
    super::super::plot::fonts()?;
    let root = BitMapBackend::new(path, (1000, 480 * LINKS.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((LINKS.len(), 1));
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    for (panel, link) in panels.iter().zip(LINKS) {
        let max_ms = SELECTIVITIES
            .iter()
            .flat_map(|&s| Mode::ALL.map(|m| point(runs, link, s, m).map_or(0.0, |p| p.0)))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "{title}: a range of l_orderkey, link {}",
                    link.unwrap_or("off (loopback)")
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (SELECTIVITIES[0] * 100.0..100.0).log_scale(),
                0.0..max_ms * 1.2,
            )
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("rows in the range, % (log)")
            .y_desc("median ms")
            .draw()
            .map_err(err)?;
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let series: Vec<(f64, f64)> = SELECTIVITIES
                .iter()
                .filter_map(|&s| Some((s * 100.0, point(runs, link, s, mode)?.0)))
                .collect();
            chart
                .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(mode.name())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(series.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
        }
        super::super::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_span_their_share_of_the_keys() {
        assert_eq!(range(6_000_000, 1.0), (0, 6_000_000));
        assert_eq!(range(6_000_000, 0.01), (1_800_000, 1_860_000));
        let (low, high) = range(6_000_000, 0.5);
        assert!(high <= 6_000_000 && low < high);
        assert_eq!(
            query(1, 2),
            "SELECT count(*), sum(l_extendedprice * (1 - l_discount)), sum(l_quantity) \
             FROM lineitem WHERE l_orderkey BETWEEN 1 AND 2"
        );
    }
}
