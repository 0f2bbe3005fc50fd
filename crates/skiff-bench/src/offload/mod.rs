//! `skiff bench offload`: opportunistic offload
//! (`../shared/papers/opportunistic-query-execution-smartnics.txt`, issue
//! 19) on the paper's particle data set (`skiff gen particles`, 6,177,731
//! rows at `--sf 1`), behind the memory node's emulated link at [`LINKS`],
//! the node on [`OFFLOAD_THREADS`] thread(s):
//!
//! - the cost models: a calibration of the node behind each link (`skiff
//!   memnode calibrate`), its held-out predictions against the times
//!   measured (Figures 6-8, 11) and the estimator's rows (Figure 10;
//!   `models`);
//! - the case studies (Figure 12), CQ1 (a bounding box keeping 0.9% of the
//!   rows) and CQ2 (18.4%), each run pushed back (`SET skiff.offload =
//!   never`: the node sends the raw chunks, the worker filters), offloaded
//!   (`always`: the node filters and sends the rows kept) and decided
//!   (`auto`), with the node's predictions of both paths. Like the paper's
//!   `SELECT *`, each query reads every column of the rows it keeps (a sum
//!   of each, so that the client's own transfer is one row; the paper's
//!   fragments end at the projection, so the sums run on the worker:
//!   `skiff.offload_aggregations = false`), and once more offloaded with
//!   the sums' partial half on the node (past the paper);
//! - the decision on held-out random fragments against the oracle and
//!   both fixed policies (`decisions`).

mod decisions;
mod models;

use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use crate::args::{BenchArgs, BenchmarkName};
use crate::client::PgConn;
use crate::groups::{exec, median_after_warm_up, number, session};
use crate::harness::{BenchError, data_tag, default_data_dir, ensure_data, publish};
use crate::launch::{self, Coordinator, START_TIMEOUT};
use crate::scale::{PALETTE, own_state};

/// The emulated link between memory node and worker: the paper's case
/// studies are network-bound at 1 Gbit.
const LINKS: [&str; 2] = ["1Gbit", "10Gbit"];

/// Threads the memory node runs fragments on: fewer than the worker's.
const OFFLOAD_THREADS: usize = 1;

/// The paper's case studies: a name and the bounding box.
const QUERIES: [(&str, &str); 2] = [
    ("CQ1", "x >= 0.7 AND y < 0.3 AND z <= 0.1"),
    ("CQ2", "x >= 0.5 AND y < 0.6 AND z <= 0.613"),
];

fn query(predicate: &str) -> String {
    format!(
        "SELECT count(*), sum(id), sum(x), sum(y), sum(z), sum(vx), sum(vy), sum(vz), \
         sum(mass), sum(charge) FROM particles WHERE {predicate}"
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    PushBack,
    Offload,
    Auto,
    /// Offloaded with the query's aggregation (its partial half) on the
    /// node: past the paper, whose fragments end at the projection.
    Aggregated,
}

impl Route {
    /// The paper's routes: its fragments are a scan, filter and projection.
    const ALL: [Route; 3] = [Route::PushBack, Route::Offload, Route::Auto];
    /// The case studies' routes.
    const CASES: [Route; 4] = [
        Route::PushBack,
        Route::Offload,
        Route::Auto,
        Route::Aggregated,
    ];

    fn setting(self) -> &'static str {
        match self {
            Route::PushBack => "never",
            Route::Offload | Route::Aggregated => "always",
            Route::Auto => "auto",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Route::PushBack => "pushed back",
            Route::Offload => "offloaded",
            Route::Auto => "decided",
            Route::Aggregated => "aggregated on the node",
        }
    }

    /// Its name in the CSV.
    fn tag(self) -> &'static str {
        match self {
            Route::Aggregated => "always-aggregated",
            route => route.setting(),
        }
    }

    /// The session's settings for it.
    fn settings(self) -> [String; 2] {
        [
            format!("SET skiff.offload = {}", self.setting()),
            format!(
                "SET skiff.offload_aggregations = {}",
                self == Route::Aggregated
            ),
        ]
    }
}

/// Held-out fragments per link, and their seed (the calibration's
/// corpus is seeded apart, over its own table).
const HELD_OUT: usize = 24;
const HELD_OUT_SEED: u64 = 19;

struct Run {
    link: &'static str,
    query: &'static str,
    route: Route,
    run: u32,
    ms: f64,
}

/// The rows a query kept, and the node's estimate of them and its
/// predictions of both paths (summed over the query's fragments).
struct Cardinality {
    link: &'static str,
    query: &'static str,
    actual: u64,
    estimated: f64,
    predicted_offload_ms: f64,
    predicted_push_back_ms: f64,
}

pub async fn run(args: &BenchArgs) -> Result<(), BenchError> {
    let data = args
        .engine
        .data
        .clone()
        .unwrap_or_else(|| default_data_dir(BenchmarkName::Particles, args.sf));
    ensure_data(&data, BenchmarkName::Particles, args.sf, None)?;
    let title = format!("Offload, particles {}", data_tag(args));
    eprintln!(
        "{title}: CQ1 and CQ2 pushed back and offloaded, {} runs each (the first a warm-up), \
         links {}, {OFFLOAD_THREADS} offload thread(s)",
        args.runs,
        LINKS.join(", ")
    );
    let models_dir = tempfile::tempdir()
        .map_err(|e| BenchError::Data(format!("a directory for the models: {e}")))?;
    let mut calibrated = Vec::new();
    for link in LINKS {
        calibrated.push(models::calibrate(models_dir.path(), link)?);
    }
    let mut runs = Vec::new();
    let mut cardinalities = Vec::new();
    let mut decided = Vec::new();
    for c in &calibrated {
        let (timed, counted, held_out) = on_link(&data, c.link, &c.models, args.runs).await?;
        runs.extend(timed);
        cardinalities.extend(counted);
        decided.extend(held_out);
    }
    let mut summary = summary(&title, &runs, &cardinalities);
    summary.push_str(&models::summary(&calibrated));
    summary.push_str(&decisions::summary(&decided, &LINKS));
    print!("{summary}");
    let tag = data_tag(args);
    let mut files = publish(
        &args.results,
        &format!("particles-{tag}-offload"),
        args.archive,
        csv(&runs).as_bytes(),
        |png| plot(png, &title, &runs),
    )?;
    files.extend(publish(
        &args.results,
        &format!("particles-{tag}-offload-models"),
        args.archive,
        models::csv(&calibrated).as_bytes(),
        |png| models::plot(png, "Cost models: held-out predictions", &calibrated),
    )?);
    let decisions_csv = args
        .results
        .join(format!("particles-{tag}-offload-decisions-latest.csv"));
    std::fs::write(&decisions_csv, decisions::csv(&decided)).map_err(|source| {
        BenchError::Write {
            path: decisions_csv.clone(),
            source,
        }
    })?;
    files.push(decisions_csv.display().to_string());
    println!("\nwrote {}", files.join(", "));
    Ok(())
}

/// A `skiff serve` with one worker and one memory node behind `link`.
async fn cluster(
    data: &Path,
    link: &str,
    models: &Path,
) -> Result<(Coordinator, tempfile::TempDir, PgConn), BenchError> {
    let fail = |e: String| BenchError::Data(format!("skiff serve: {e}"));
    let state = own_state(data)?;
    let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
    let mut command = launch::serve(&exe, state.path(), 1, crate::harness::cores());
    command.args(["--memory-nodes", "1", "--link-bandwidth", link]);
    command.args(["--offload-threads", &OFFLOAD_THREADS.to_string()]);
    command.arg("--offload-models").arg(models);
    let server = Coordinator::start(&mut command, START_TIMEOUT).map_err(fail)?;
    let conn = session(&server).await?;
    Ok((server, state, conn))
}

async fn on_link(
    data: &Path,
    link: &'static str,
    models: &Path,
    runs: u32,
) -> Result<(Vec<Run>, Vec<Cardinality>, Vec<decisions::Decided>), BenchError> {
    let (_server, _state, conn) = cluster(data, link, models).await?;
    exec(&conn, "SELECT skiff.load_to_memory('particles')").await?;
    for sql in [
        "SET skiff.distribute = 'off'",
        "SET skiff.buffer_pool = false",
    ] {
        exec(&conn, sql).await?;
    }
    let mut timed = Vec::new();
    let mut counted = Vec::new();
    for (name, predicate) in QUERIES {
        let sql = query(predicate);
        let mut answers = Vec::new();
        for route in Route::CASES {
            for set in route.settings() {
                exec(&conn, &set).await?;
            }
            for run in 0..runs {
                let started = Instant::now();
                let rows = conn
                    .rows(&sql)
                    .await
                    .map_err(|e| BenchError::Data(format!("{sql}: {e}")))?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                if run == 0 {
                    answers.push(rows);
                }
                eprintln!(
                    "link {link}: {name} {}: run {run}: {ms:.1} ms",
                    route.name()
                );
                timed.push(Run {
                    link,
                    query: name,
                    route,
                    run,
                    ms,
                });
            }
        }
        if answers.windows(2).any(|w| !alike(&w[0], &w[1])) {
            return Err(BenchError::Data(format!(
                "{name}: answers differ between routes: {answers:?}"
            )));
        }
        for set in Route::Offload.settings() {
            exec(&conn, &set).await?;
        }
        // The node's records of one more offloaded run: its estimate and
        // the rows it kept, exactly (EXPLAIN's figures are rounded).
        let last = last_record(&conn).await?;
        exec(&conn, &sql).await?;
        let recorded = conn
            .rows(&format!(
                "SELECT count(*), sum(estimated_rows), sum(rows), bool_and(offloaded), \
                 coalesce(sum(predicted_offload_ms), 0), coalesce(sum(predicted_push_back_ms), 0) \
                 FROM skiff.memory_fragments WHERE seq > {last}"
            ))
            .await
            .map_err(|e| BenchError::Data(format!("skiff.memory_fragments: {e}")))?;
        let cell = |i: usize| recorded.first().and_then(|r| r.get(i).cloned().flatten());
        if cell(3).as_deref() != Some("t") {
            return Err(BenchError::Data(format!(
                "{name} was not offloaded: {recorded:?}"
            )));
        }
        let float = |i: usize| cell(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        counted.push(Cardinality {
            link,
            query: name,
            actual: float(2) as u64,
            estimated: float(1),
            predicted_offload_ms: float(4),
            predicted_push_back_ms: float(5),
        });
    }
    let held_out = decisions::held_out(&conn, link, HELD_OUT, runs, HELD_OUT_SEED).await?;
    Ok((timed, counted, held_out))
}

/// The number of the newest fragment record of the cluster's memory
/// nodes (0 before any).
async fn last_record(conn: &PgConn) -> Result<u64, BenchError> {
    number(
        conn,
        "SELECT coalesce(max(seq), 0) FROM skiff.memory_fragments",
    )
    .await
}

/// The first row of `sql`, each cell as a number (0 for a null or a
/// cell that is not one).
async fn first_row_numbers(conn: &PgConn, sql: &str) -> Result<Vec<f64>, BenchError> {
    let rows = conn
        .rows(sql)
        .await
        .map_err(|e| BenchError::Data(format!("{sql}: {e}")))?;
    Ok(rows.first().map_or_else(Vec::new, |row| {
        row.iter()
            .map(|v| v.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0.0))
            .collect()
    }))
}

/// Whether two answers are the same, sums of floats to 1e-9 of their size
/// (rows kept in another order add up in another order).
fn alike(a: &[Vec<Option<String>>], b: &[Vec<Option<String>>]) -> bool {
    let close = |x: &Option<String>, y: &Option<String>| match (x, y) {
        (Some(x), Some(y)) => match (x.parse::<f64>(), y.parse::<f64>()) {
            (Ok(x), Ok(y)) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
            _ => x == y,
        },
        _ => x == y,
    };
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(r, s)| r.len() == s.len() && r.iter().zip(s).all(|(x, y)| close(x, y)))
}

fn median(runs: &[Run], link: &str, query: &str, route: Route) -> Option<f64> {
    let ms: Vec<f64> = runs
        .iter()
        .filter(|r| r.link == link && r.query == query && r.route == route)
        .map(|r| r.ms)
        .collect();
    median_after_warm_up(&ms)
}

fn summary(title: &str, runs: &[Run], cardinalities: &[Cardinality]) -> String {
    let mut text = format!("{title}: median ms end to end; offloaded against pushed back\n");
    text.push_str(&format!(
        "\n{:>8} {:>6} {:>14} {:>14} {:>14} {:>10} {:>22} {:>14}\n",
        "link",
        "query",
        "pushed back",
        "offloaded",
        "decided",
        "offloaded",
        "predicted back / here",
        "node aggregates"
    ));
    for link in LINKS {
        for (query, _) in QUERIES {
            let back = median(runs, link, query, Route::PushBack);
            let off = median(runs, link, query, Route::Offload);
            let auto = median(runs, link, query, Route::Auto);
            let aggregated = median(runs, link, query, Route::Aggregated);
            let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            let ratio = match (off, back) {
                (Some(o), Some(b)) if b > 0.0 => format!("{:.2}x", o / b),
                _ => "-".to_string(),
            };
            let predicted = cardinalities
                .iter()
                .find(|c| c.link == link && c.query == query)
                .map_or("-".to_string(), |c| {
                    format!(
                        "{:.1} / {:.1}",
                        c.predicted_push_back_ms, c.predicted_offload_ms
                    )
                });
            text.push_str(&format!(
                "{link:>8} {query:>6} {:>14} {:>14} {:>14} {ratio:>10} {predicted:>22} {:>14}\n",
                cell(back),
                cell(off),
                cell(auto),
                cell(aggregated)
            ));
        }
    }
    text.push_str(
        "(predicted: the node's, ms, summed over the query's fragments, one per partition; \
         node aggregates: offloaded with the sums' partial half, past the paper)\n",
    );
    text.push_str("\nThe node's cardinality estimate (its sketches) against the rows kept\n");
    for c in cardinalities.iter().filter(|c| c.link == LINKS[0]) {
        let error = if c.actual > 0 {
            (c.estimated - c.actual as f64).abs() / c.actual as f64 * 100.0
        } else {
            0.0
        };
        text.push_str(&format!(
            "{:>6}: {} rows kept, {:.0} estimated, error {error:.2}%\n",
            c.query, c.actual, c.estimated
        ));
    }
    text
}

fn csv(runs: &[Run]) -> String {
    let mut text = String::from("link,query,route,run,ms\n");
    for r in runs {
        text.push_str(&format!(
            "{},{},{},{},{:.3}\n",
            r.link,
            r.query,
            r.route.tag(),
            r.run,
            r.ms
        ));
    }
    text
}

/// Median time of each query by route, one panel-less chart: x is the
/// link (1 Gbit, 10 Gbit), one line per (query, route).
fn plot(path: &Path, title: &str, runs: &[Run]) -> Result<(), String> {
    crate::plot::fonts()?;
    let top = runs.iter().map(|r| r.ms).fold(1.0, f64::max) * 1.1;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(LINKS.len() as f64 - 0.5), 0f64..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_labels(LINKS.len())
        .x_label_formatter(&|x| {
            let at = x.round();
            if (x - at).abs() < 1e-6 && at >= 0.0 {
                LINKS.get(at as usize).copied().unwrap_or("").to_string()
            } else {
                String::new()
            }
        })
        .y_desc("median ms, end to end")
        .draw()
        .map_err(|e| e.to_string())?;
    let mut colour = 0;
    for (query, _) in QUERIES {
        for route in Route::CASES {
            let points: Vec<(f64, f64)> = LINKS
                .iter()
                .enumerate()
                .filter_map(|(i, link)| Some((i as f64, median(runs, link, query, route)?)))
                .collect();
            let style = PALETTE[colour % PALETTE.len()];
            colour += 1;
            chart
                .draw_series(LineSeries::new(points.clone(), style.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(format!("{query} {}", route.name()))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 4, style.filled())))
                .map_err(|e| e.to_string())?;
        }
    }
    crate::plot::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(|e| e.to_string())
}
