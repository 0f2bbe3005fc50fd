//! Figure 5 of the paper: [`PIPELINES`] pipelines of [`COLUMNS`] columns
//! each, sharing 0 to all of them, over a copy of lineitem with twelve
//! BIGINT columns (`c0` ... `c11`, one row group per [`ROW_GROUP_ROWS`]).
//! Each pipeline is a query of its own (one partition: one thread, the
//! paper's execution ④ when they run at once and ① one after another),
//! read locally (the worker's warm pool), from the memory node alone,
//! one after another, at once, and at once in one batch, where they run
//! as one pipeline group and each shared chunk crosses once.

use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use super::super::scale::PALETTE;
use super::{cluster, exec, median_after_warm_up, report, served_bytes, session};
use crate::args::BenchArgs;
use crate::harness::BenchError;

const PIPELINES: usize = 4;
const COLUMNS: usize = 3;
/// Rows per row group of the copy: 1 MiB of each column per fetch.
const ROW_GROUP_ROWS: u64 = 128 * 1024;
const LINKS: [Option<&str>; 2] = [None, Some("10Gbit")];
const TABLE: &str = "overlap_wide";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    LocalSequential,
    LocalParallel,
    RemoteOne,
    RemoteSequential,
    RemoteParallel,
    Grouped,
}

impl Mode {
    /// In the order they run: remote first (the table loaded), then local.
    const ALL: [Mode; 6] = [
        Mode::RemoteOne,
        Mode::RemoteSequential,
        Mode::RemoteParallel,
        Mode::Grouped,
        Mode::LocalSequential,
        Mode::LocalParallel,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::LocalSequential => "local, one after another",
            Mode::LocalParallel => "local, at once",
            Mode::RemoteOne => "remote, one pipeline alone",
            Mode::RemoteSequential => "remote, one after another",
            Mode::RemoteParallel => "remote, at once, ungrouped",
            Mode::Grouped => "remote, at once, grouped",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Mode::LocalSequential => "local_sequential",
            Mode::LocalParallel => "local_parallel",
            Mode::RemoteOne => "remote_one",
            Mode::RemoteSequential => "remote_sequential",
            Mode::RemoteParallel => "remote_parallel",
            Mode::Grouped => "grouped",
        }
    }

    fn pipelines(self) -> usize {
        match self {
            Mode::RemoteOne => 1,
            _ => PIPELINES,
        }
    }

    fn at_once(self) -> bool {
        matches!(
            self,
            Mode::LocalParallel | Mode::RemoteParallel | Mode::Grouped
        )
    }
}

struct Run {
    link: Option<&'static str>,
    overlap: usize,
    mode: Mode,
    run: u32,
    ms: f64,
    /// Bytes the memory node sent of the copy during the run.
    bytes: u64,
}

/// The columns pipeline `p` reads when `overlap` of its columns are shared.
fn columns(overlap: usize, p: usize) -> Vec<usize> {
    let own = COLUMNS - overlap;
    (0..overlap)
        .chain((0..own).map(|j| overlap + p * own + j))
        .collect()
}

fn query(columns: &[usize]) -> String {
    let terms: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("c{c} % {}", 7 + 2 * i))
        .collect();
    format!("SELECT sum({}) FROM {TABLE}", terms.join(" + "))
}

pub(super) async fn run(args: &BenchArgs, data: &Path, title: &str) -> Result<(), BenchError> {
    eprintln!(
        "{title}: Figure 5, {PIPELINES} pipelines of {COLUMNS} columns, overlap 0-{COLUMNS}, \
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
        "groups-overlap",
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
    let (server, _state, admin) = cluster(data, link, 1).await?;
    let mut sessions = Vec::with_capacity(PIPELINES);
    for _ in 0..PIPELINES {
        let s = session(&server).await?;
        exec(&s, "SET skiff.distribute = 'off'").await?;
        sessions.push(s);
    }
    exec(
        &admin,
        &format!("SET datafusion.execution.parquet.max_row_group_size = {ROW_GROUP_ROWS}"),
    )
    .await?;
    exec(&admin, &format!("DROP TABLE IF EXISTS {TABLE}")).await?;
    let copies: Vec<String> = (0..PIPELINES * COLUMNS)
        .map(|c| format!("CAST(l_orderkey AS BIGINT) + {c} AS c{c}"))
        .collect();
    exec(
        &admin,
        &format!(
            "CREATE TABLE {TABLE} AS SELECT {} FROM lineitem",
            copies.join(", ")
        ),
    )
    .await?;
    exec(&admin, &format!("SELECT skiff.load_to_memory('{TABLE}')")).await?;
    let mut out = Vec::new();
    for mode in Mode::ALL {
        let local = matches!(mode, Mode::LocalSequential | Mode::LocalParallel);
        if mode == Mode::LocalSequential {
            exec(
                &admin,
                &format!("SELECT skiff.unload_from_memory('{TABLE}')"),
            )
            .await?;
        }
        for s in &sessions {
            exec(s, &format!("SET skiff.buffer_pool = {local}")).await?;
            let window = if mode == Mode::Grouped { 2000 } else { 0 };
            exec(s, &format!("SET skiff.batch_window_ms = {window}")).await?;
            exec(s, &format!("SET skiff.batch_max_queries = {PIPELINES}")).await?;
        }
        for overlap in 0..=COLUMNS {
            let queries: Vec<String> = (0..mode.pipelines())
                .map(|p| query(&columns(overlap, p)))
                .collect();
            for run in 0..runs {
                let before = served_bytes(&admin, Some(TABLE)).await?;
                let started = Instant::now();
                if mode.at_once() {
                    let all = sessions.iter().zip(&queries).map(|(s, q)| exec(s, q));
                    for done in futures::future::join_all(all).await {
                        done?;
                    }
                } else {
                    for (s, q) in sessions.iter().zip(&queries) {
                        exec(s, q).await?;
                    }
                }
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let bytes = served_bytes(&admin, Some(TABLE)).await? - before;
                eprintln!(
                    "link {}: overlap {overlap}/{COLUMNS}, {}: run {run}: {ms:.1} ms, {} MiB sent",
                    link.unwrap_or("off"),
                    mode.name(),
                    bytes >> 20
                );
                out.push(Run {
                    link,
                    overlap,
                    mode,
                    run,
                    ms,
                    bytes,
                });
            }
        }
    }
    exec(&admin, &format!("DROP TABLE {TABLE}")).await?;
    Ok(out)
}

fn point(runs: &[Run], link: Option<&str>, overlap: usize, mode: Mode) -> Option<(f64, u64)> {
    let of: Vec<&Run> = runs
        .iter()
        .filter(|r| r.link == link && r.overlap == overlap && r.mode == mode)
        .collect();
    let ms: Vec<f64> = of.iter().map(|r| r.ms).collect();
    Some((median_after_warm_up(&ms)?, of.last()?.bytes))
}

fn summary(title: &str, runs: &[Run]) -> String {
    let mut text = format!(
        "{title}: Figure 5, median ms (MiB the memory node sent); grouped against one \
         pipeline alone and against ungrouped\n"
    );
    for link in LINKS {
        text.push_str(&format!("\nlink {}\n", link.unwrap_or("off (loopback)")));
        text.push_str(&format!("{:>8}", "overlap"));
        for mode in Mode::ALL {
            text.push_str(&format!(" {:>27}", mode.name()));
        }
        text.push_str(&format!(" {:>12} {:>12}\n", "grouped/one", "grouped/ung"));
        for overlap in 0..=COLUMNS {
            text.push_str(&format!("{:>8}", format!("{overlap}/{COLUMNS}")));
            for mode in Mode::ALL {
                let cell = match point(runs, link, overlap, mode) {
                    Some((ms, bytes)) => format!("{ms:.1} ({} MiB)", bytes >> 20),
                    None => "-".into(),
                };
                text.push_str(&format!(" {cell:>27}"));
            }
            let ratio = |other: Mode| match (
                point(runs, link, overlap, Mode::Grouped),
                point(runs, link, overlap, other),
            ) {
                (Some((g, _)), Some((o, _))) if o > 0.0 => format!("{:.2}x", g / o),
                _ => "-".into(),
            };
            text.push_str(&format!(
                " {:>12} {:>12}\n",
                ratio(Mode::RemoteOne),
                ratio(Mode::RemoteParallel)
            ));
        }
    }
    text
}

fn csv(runs: &[Run]) -> String {
    let mut text = String::from("figure,link,overlap,mode,run,ms,bytes_sent\n");
    for r in runs {
        text.push_str(&format!(
            "5,{},{},{},{},{:.3},{}\n",
            r.link.unwrap_or("off"),
            r.overlap,
            r.mode.slug(),
            r.run,
            r.ms,
            r.bytes
        ));
    }
    text
}

/// A panel per link: median ms against the overlap, a line per mode.
fn plot(path: &Path, title: &str, runs: &[Run]) -> Result<(), String> {
    super::super::plot::fonts()?;
    let root = BitMapBackend::new(path, (1000, 480 * LINKS.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((LINKS.len(), 1));
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    for (panel, link) in panels.iter().zip(LINKS) {
        let max_ms = runs
            .iter()
            .filter(|r| r.link == link)
            .filter_map(|r| point(runs, link, r.overlap, r.mode).map(|p| p.0))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "{title}: {PIPELINES} pipelines x {COLUMNS} columns, link {}",
                    link.unwrap_or("off (loopback)")
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..COLUMNS as f64, 0.0..max_ms * 1.2)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(format!("columns shared of {COLUMNS}"))
            .y_desc("median ms")
            .draw()
            .map_err(err)?;
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let series: Vec<(f64, f64)> = (0..=COLUMNS)
                .filter_map(|o| Some((o as f64, point(runs, link, o, mode)?.0)))
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
        super::super::plot::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelines_share_the_first_columns_and_own_the_rest() {
        assert_eq!(columns(0, 0), vec![0, 1, 2]);
        assert_eq!(columns(0, 3), vec![9, 10, 11]);
        assert_eq!(columns(1, 2), vec![0, 5, 6]);
        assert_eq!(columns(3, 3), vec![0, 1, 2]);
        for overlap in 0..=COLUMNS {
            let all: std::collections::BTreeSet<usize> =
                (0..PIPELINES).flat_map(|p| columns(overlap, p)).collect();
            assert_eq!(all.len(), overlap + PIPELINES * (COLUMNS - overlap));
            assert!(all.iter().all(|c| *c < PIPELINES * COLUMNS));
        }
        assert_eq!(
            query(&[0, 4]),
            "SELECT sum(c0 % 7 + c4 % 9) FROM overlap_wide"
        );
    }
}
