//! `skiff bench groups`: tables in memory nodes and pipeline groups
//! (`../shared/papers/pipeline-groups-disaggregated.txt`, issue 18), in
//! four parts (`--parts`): the paper's Figure 4 (here), Figure 5
//! ([`overlap`]), concurrent TPC-H streams ([`streams`]) and min/max
//! pruning in the memory node ([`prune`]).
//!
//! Figure 4: one pipeline (one worker, one partition, no distribution)
//! scanning and aggregating one remote column, against the bytes each
//! fetch moves, asked for on demand (`skiff.prefetch_depth = 0`) and ahead
//! ([`PREFETCH`] row groups), against the column in the worker's own
//! memory (its buffer pool, warm) and read from storage (the pool off, the
//! table not loaded). A fetch moves one row group's column: the sweep
//! writes copies of lineitem's `l_orderkey` (8 bytes a row) in row groups
//! of [`FETCH_BYTES`] each. Each setting of the memory node's emulated
//! link ([`LINKS`]) runs on a cluster of its own.

mod overlap;
mod prune;
mod streams;

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use super::launch::{self, Coordinator, START_TIMEOUT};
use super::scale::{PALETTE, own_state};
use crate::args::{BenchArgs, BenchmarkName, GroupsPart};
use crate::client::{Credentials, PgConn};
use crate::harness::{BenchError, data_tag, default_data_dir, ensure_data, publish};

/// Bytes one fetch moves (the row group's column), 64 KiB to 64 MiB.
const FETCH_BYTES: [u64; 6] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

/// Bytes of a row of the copy (one BIGINT).
const ROW_BYTES: u64 = 8;

/// Row groups asked for ahead in the prefetching runs.
const PREFETCH: usize = 2;

/// The emulated link's settings: none; one where a column's transfer
/// takes about as long as the pipeline's work on it at SF 1 (48 MB in 38
/// ms); and a network-bound one.
const LINKS: [Option<&str>; 3] = [None, Some("10Gbit"), Some("1Gbit")];

/// The pipeline: a scan, arithmetic on every row and a sum.
fn probe(table: &str) -> String {
    format!("SELECT sum(l_orderkey % 7 + l_orderkey / 13) FROM {table}")
}

/// How the column is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Storage,
    OnDemand,
    Prefetch,
    Local,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Storage, Mode::OnDemand, Mode::Prefetch, Mode::Local];

    fn name(self) -> &'static str {
        match self {
            Mode::Storage => "storage",
            Mode::OnDemand => "remote on demand",
            Mode::Prefetch => "remote prefetch",
            Mode::Local => "local (pool)",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Mode::Storage => "storage",
            Mode::OnDemand => "on_demand",
            Mode::Prefetch => "prefetch",
            Mode::Local => "local",
        }
    }
}

/// One timed run.
struct Run {
    link: Option<&'static str>,
    fetch_bytes: u64,
    mode: Mode,
    run: u32,
    ms: f64,
}

pub async fn run(args: &BenchArgs) -> Result<(), BenchError> {
    let data = args
        .engine
        .data
        .clone()
        .unwrap_or_else(|| default_data_dir(BenchmarkName::Tpch, args.sf));
    ensure_data(&data, BenchmarkName::Tpch, args.sf, None)?;
    let title = format!("Pipeline groups, TPC-H {}", data_tag(args));
    if args.parts.contains(&GroupsPart::Fetch) {
        figure4_all(args, &data, &title).await?;
    }
    if args.parts.contains(&GroupsPart::Overlap) {
        overlap::run(args, &data, &title).await?;
    }
    if args.parts.contains(&GroupsPart::Streams) {
        streams::run(args, &data, &title).await?;
    }
    if args.parts.contains(&GroupsPart::Prune) {
        prune::run(args, &data, &title).await?;
    }
    Ok(())
}

/// A `skiff serve` with one worker of `partitions` and one memory node
/// behind `link`, and a session on it.
async fn cluster(
    data: &Path,
    link: Option<&str>,
    partitions: usize,
) -> Result<(Coordinator, tempfile::TempDir, PgConn), BenchError> {
    let fail = |e: String| BenchError::Data(format!("skiff serve: {e}"));
    let state = own_state(data)?;
    let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
    let mut command = launch::serve(&exe, state.path(), 1, partitions);
    command.args(["--memory-nodes", "1"]);
    if let Some(link) = link {
        command.args(["--link-bandwidth", link]);
    }
    let server = Coordinator::start(&mut command, START_TIMEOUT).map_err(fail)?;
    let conn = session(&server).await?;
    Ok((server, state, conn))
}

/// Another session on `server`.
pub(crate) async fn session(server: &Coordinator) -> Result<PgConn, BenchError> {
    let fail = |e: String| BenchError::Data(format!("skiff serve: {e}"));
    PgConn::connect(server.pg().map_err(fail)?, &Credentials::default())
        .await
        .map_err(fail)
}

/// Run `sql` on `conn`; a failure names the statement.
pub(crate) async fn exec(conn: &PgConn, sql: &str) -> Result<u64, BenchError> {
    conn.query(sql)
        .await
        .map_err(|e| BenchError::Data(format!("{sql}: {e}")))
}

/// The one number `sql` answers (0 for NULL).
pub(crate) async fn number(conn: &PgConn, sql: &str) -> Result<u64, BenchError> {
    let rows = conn
        .rows(sql)
        .await
        .map_err(|e| BenchError::Data(format!("{sql}: {e}")))?;
    Ok(rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0) as u64)
}

/// Bytes the memory nodes have sent of `table` (all tables: `None`).
async fn served_bytes(conn: &PgConn, table: Option<&str>) -> Result<u64, BenchError> {
    let filter = table.map_or_else(String::new, |t| format!(" WHERE \"table\" = '{t}'"));
    number(
        conn,
        &format!("SELECT coalesce(sum(served_bytes), 0) FROM skiff.memory_tables{filter}"),
    )
    .await
}

/// Print a part's summary, write its CSV and plot as
/// RESULTS/tpch-<data>-`part`-latest.* and say where.
fn report(
    args: &BenchArgs,
    part: &str,
    summary: &str,
    csv: &str,
    draw: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<(), BenchError> {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(summary.as_bytes());
    let stem = format!("tpch-{}-{part}", data_tag(args));
    let files = publish(&args.results, &stem, args.archive, csv.as_bytes(), draw)?;
    let _ = writeln!(out, "\nwrote {}", files.join(", "));
    Ok(())
}

/// The median of `ms` after the first (the warm-up; all when one).
pub(crate) fn median_after_warm_up(ms: &[f64]) -> Option<f64> {
    let mut counted: Vec<f64> = if ms.len() > 1 {
        ms[1..].to_vec()
    } else {
        ms.to_vec()
    };
    counted.sort_by(f64::total_cmp);
    counted.get(counted.len() / 2).copied()
}

async fn figure4_all(args: &BenchArgs, data: &Path, title: &str) -> Result<(), BenchError> {
    eprintln!(
        "{title}: Figure 4, one pipeline over l_orderkey in row groups of {} KiB to {} MiB, \
         {} runs each (the first a warm-up), links {}",
        FETCH_BYTES[0] >> 10,
        FETCH_BYTES[FETCH_BYTES.len() - 1] >> 20,
        args.runs,
        LINKS.map(|l| l.unwrap_or("off")).join(", ")
    );
    let mut runs = Vec::new();
    for link in LINKS {
        runs.extend(figure4(data, link, args.runs).await?);
    }
    report(args, "groups", &summary(title, &runs), &csv(&runs), |png| {
        plot(png, title, &runs)
    })
}

/// Every point of Figure 4 with the link at `link`, on a cluster of its own.
async fn figure4(
    data: &Path,
    link: Option<&'static str>,
    runs: u32,
) -> Result<Vec<Run>, BenchError> {
    let (_server, _state, conn) = cluster(data, link, 1).await?;
    let sql = |s: String| {
        let conn = &conn;
        async move {
            conn.query(&s)
                .await
                .map_err(|e| BenchError::Data(format!("{s}: {e}")))
        }
    };
    sql("SET skiff.distribute = 'off'".into()).await?;
    let mut out = Vec::new();
    for fetch_bytes in FETCH_BYTES {
        let table = format!("fetch_{}k", fetch_bytes >> 10);
        let rows = fetch_bytes / ROW_BYTES;
        sql(format!(
            "SET datafusion.execution.parquet.max_row_group_size = {rows}"
        ))
        .await?;
        sql(format!("DROP TABLE IF EXISTS {table}")).await?;
        sql(format!(
            "CREATE TABLE {table} AS SELECT CAST(l_orderkey AS BIGINT) AS l_orderkey \
             FROM lineitem"
        ))
        .await?;
        for mode in Mode::ALL {
            let setup = match mode {
                Mode::Storage => ["SET skiff.buffer_pool = false".to_string()].to_vec(),
                Mode::OnDemand => vec![
                    format!("SELECT skiff.load_to_memory('{table}')"),
                    "SET skiff.prefetch_depth = 0".into(),
                ],
                Mode::Prefetch => vec![format!("SET skiff.prefetch_depth = {PREFETCH}")],
                Mode::Local => vec![
                    "SET skiff.buffer_pool = true".into(),
                    format!("SELECT skiff.unload_from_memory('{table}')"),
                ],
            };
            for statement in setup {
                sql(statement).await?;
            }
            for run in 0..runs {
                let started = Instant::now();
                sql(probe(&table)).await?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                eprintln!(
                    "link {}: {} KiB fetches, {}: run {run}: {ms:.1} ms",
                    link.unwrap_or("off"),
                    fetch_bytes >> 10,
                    mode.name()
                );
                out.push(Run {
                    link,
                    fetch_bytes,
                    mode,
                    run,
                    ms,
                });
            }
        }
        sql("SELECT skiff.clear_cache()".into()).await?;
        sql(format!("DROP TABLE {table}")).await?;
    }
    Ok(out)
}

/// The median of a point's runs after the first (all when there is one).
fn median(runs: &[Run], link: Option<&str>, fetch_bytes: u64, mode: Mode) -> Option<f64> {
    let mut ms: Vec<f64> = runs
        .iter()
        .filter(|r| r.link == link && r.fetch_bytes == fetch_bytes && r.mode == mode)
        .filter(|r| r.run > 0)
        .map(|r| r.ms)
        .collect();
    if ms.is_empty() {
        ms = runs
            .iter()
            .filter(|r| r.link == link && r.fetch_bytes == fetch_bytes && r.mode == mode)
            .map(|r| r.ms)
            .collect();
    }
    ms.sort_by(f64::total_cmp);
    ms.get(ms.len() / 2).copied()
}

fn summary(title: &str, runs: &[Run]) -> String {
    let mut text = format!("{title}: Figure 4, median ms (ratio to local)\n");
    for link in LINKS {
        text.push_str(&format!("\nlink {}\n", link.unwrap_or("off (loopback)")));
        text.push_str(&format!("{:>10}", "fetch"));
        for mode in Mode::ALL {
            text.push_str(&format!(" {:>24}", mode.name()));
        }
        text.push('\n');
        for fetch_bytes in FETCH_BYTES {
            text.push_str(&format!("{:>10}", size(fetch_bytes)));
            let local = median(runs, link, fetch_bytes, Mode::Local);
            for mode in Mode::ALL {
                let cell = match (median(runs, link, fetch_bytes, mode), local) {
                    (Some(ms), Some(local)) if local > 0.0 => {
                        format!("{ms:.1} ({:.2}x)", ms / local)
                    }
                    (Some(ms), _) => format!("{ms:.1}"),
                    (None, _) => "-".into(),
                };
                text.push_str(&format!(" {cell:>24}"));
            }
            text.push('\n');
        }
    }
    text
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

fn csv(runs: &[Run]) -> String {
    let mut text = String::from("figure,link,fetch_bytes,mode,run,ms\n");
    for r in runs {
        text.push_str(&format!(
            "4,{},{},{},{},{:.3}\n",
            r.link.unwrap_or("off"),
            r.fetch_bytes,
            r.mode.slug(),
            r.run,
            r.ms
        ));
    }
    text
}

/// A panel per link: median ms against the fetch size (log scale), a line
/// per mode.
fn plot(path: &Path, title: &str, runs: &[Run]) -> Result<(), String> {
    super::plot::fonts()?;
    let root = BitMapBackend::new(path, (1000, 480 * LINKS.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((LINKS.len(), 1));
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    for (panel, link) in panels.iter().zip(LINKS) {
        let max_ms = runs
            .iter()
            .filter(|r| r.link == link)
            .filter_map(|r| median(runs, link, r.fetch_bytes, r.mode))
            .fold(1.0, f64::max);
        let x_min = (FETCH_BYTES[0] >> 10) as f64;
        let x_max = (FETCH_BYTES[FETCH_BYTES.len() - 1] >> 10) as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!(
                    "{title}: one pipeline over a remote column, link {}",
                    link.unwrap_or("off (loopback)")
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..max_ms * 1.2)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("KiB moved per fetch (a row group's column)")
            .y_desc("median ms")
            .draw()
            .map_err(err)?;
        for (i, mode) in Mode::ALL.into_iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let series: Vec<(f64, f64)> = FETCH_BYTES
                .iter()
                .filter_map(|&b| Some(((b >> 10) as f64, median(runs, link, b, mode)?)))
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
        super::plot::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(link: Option<&'static str>, fetch_bytes: u64, mode: Mode, run: u32, ms: f64) -> Run {
        Run {
            link,
            fetch_bytes,
            mode,
            run,
            ms,
        }
    }

    #[test]
    fn medians_leave_out_the_warm_up() {
        let runs = [
            run(None, 64 << 10, Mode::Local, 0, 100.0),
            run(None, 64 << 10, Mode::Local, 1, 10.0),
            run(None, 64 << 10, Mode::Local, 2, 12.0),
            run(None, 64 << 10, Mode::Local, 3, 11.0),
            run(Some("1Gbit"), 64 << 10, Mode::Local, 0, 7.0),
        ];
        assert_eq!(median(&runs, None, 64 << 10, Mode::Local), Some(11.0));
        assert_eq!(
            median(&runs, Some("1Gbit"), 64 << 10, Mode::Local),
            Some(7.0)
        );
        assert_eq!(median(&runs, None, 64 << 10, Mode::Storage), None);
        let text = summary("t", &runs);
        assert!(text.contains("64 KiB"), "{text}");
        assert!(csv(&runs).lines().count() == runs.len() + 1);
    }
}
