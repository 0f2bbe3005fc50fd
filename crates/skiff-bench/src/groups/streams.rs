//! Concurrent TPC-H streams over tables in a memory node: `--clients`
//! sessions each run the queries once, in the order rotated by its place
//! (TPC-H's throughput test runs permutations; a rotation keeps the
//! streams out of step), over one worker whose pool is off, with every
//! table loaded into a memory node behind `--stream-link`. Grouped runs
//! batch the queries that arrive within each of `--batch-windows` (at most
//! one per stream); ungrouped runs send each on its own. Throughput,
//! latency p50 and p99 (of every query, batch wait included) and the bytes
//! the memory node sent.

use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;

use super::{cluster, exec, report, served_bytes, session};
use crate::args::BenchArgs;
use crate::client::PgConn;
use crate::harness::{BenchError, find_queries, read_scripts, select_queries};
use crate::scale::PALETTE;

const TPCH_TABLES: [&str; 8] = [
    "region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem",
];

/// One setting's stream run.
struct Point {
    clients: usize,
    /// The batch window; 0: ungrouped.
    window_ms: u64,
    queries: usize,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    bytes: u64,
}

impl Point {
    fn throughput(&self) -> f64 {
        self.queries as f64 / self.seconds.max(1e-9)
    }
}

pub(super) async fn run(args: &BenchArgs, data: &Path, title: &str) -> Result<(), BenchError> {
    let dir = args
        .query_dir
        .clone()
        .unwrap_or_else(|| Path::new("tests/queries/tpch").to_path_buf());
    let queries = read_scripts(&select_queries(&find_queries(&dir)?, &args.queries, &dir)?)?;
    let mut clients = args.clients.clone();
    clients.sort_unstable();
    clients.dedup();
    clients.retain(|c| *c > 0);
    let mut windows = vec![0];
    windows.extend(args.batch_windows.iter().copied().filter(|w| *w > 0));
    windows.dedup();
    eprintln!(
        "{title}: {} TPC-H queries a stream, {clients:?} streams at once, ungrouped and \
         batched in windows of {:?} ms, link {}",
        queries.len(),
        &windows[1..],
        args.stream_link
    );
    let link = Some(args.stream_link.as_str()).filter(|l| *l != "off");
    let (server, _state, admin) = cluster(data, link, crate::harness::cores()).await?;
    for table in TPCH_TABLES {
        exec(&admin, &format!("SELECT skiff.load_to_memory('{table}')")).await?;
    }
    let most = clients.iter().copied().max().unwrap_or(1);
    let mut sessions = Vec::with_capacity(most);
    for _ in 0..most {
        let s = session(&server).await?;
        exec(&s, "SET skiff.distribute = 'off'").await?;
        exec(&s, "SET skiff.buffer_pool = false").await?;
        sessions.push(s);
    }
    // A stream alone first, uncounted: plans, metadata and connections warm.
    streams(&sessions[..1], &queries, 0).await?;
    let mut points = Vec::new();
    for &n in &clients {
        for &window_ms in &windows {
            let before = served_bytes(&admin, None).await?;
            let (seconds, mut latencies) = streams(&sessions[..n], &queries, window_ms).await?;
            let bytes = served_bytes(&admin, None).await? - before;
            latencies.sort_by(f64::total_cmp);
            let at = |q: f64| {
                latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)]
            };
            let point = Point {
                clients: n,
                window_ms,
                queries: latencies.len(),
                seconds,
                p50_ms: at(0.5),
                p99_ms: at(0.99),
                bytes,
            };
            eprintln!(
                "{n} streams, {}: {:.2} queries/s, p50 {:.0} ms, p99 {:.0} ms, {} MiB sent",
                label(window_ms),
                point.throughput(),
                point.p50_ms,
                point.p99_ms,
                bytes >> 20
            );
            points.push(point);
        }
    }
    let link = &args.stream_link;
    report(
        args,
        &format!("groups-streams-{link}"),
        &summary(title, link, &points),
        &csv(&points),
        |png| plot(png, title, link, &points),
    )
}

/// Run one stream per session at once; the wall time in seconds and every
/// query's latency in ms.
async fn streams(
    sessions: &[PgConn],
    queries: &[(String, String)],
    window_ms: u64,
) -> Result<(f64, Vec<f64>), BenchError> {
    for s in sessions {
        exec(s, &format!("SET skiff.batch_window_ms = {window_ms}")).await?;
        // One stream alone has nobody to share with: its batches close at
        // once (a batch of at most one is no batch).
        let most = sessions.len();
        exec(s, &format!("SET skiff.batch_max_queries = {most}")).await?;
    }
    let n = sessions.len();
    let started = Instant::now();
    let all = sessions.iter().enumerate().map(|(place, s)| async move {
        let mut latencies = Vec::with_capacity(queries.len());
        for k in 0..queries.len() {
            let (_, sql) = &queries[(k + place * queries.len() / n) % queries.len()];
            // Views are the catalog's, not the session's: each stream
            // names q15's its own, as TPC-H's throughput test does.
            let sql = sql.replace("revenue0", &format!("revenue_s{place}"));
            let began = Instant::now();
            exec(s, &sql).await?;
            latencies.push(began.elapsed().as_secs_f64() * 1e3);
        }
        Ok::<_, BenchError>(latencies)
    });
    let mut latencies = Vec::new();
    for stream in futures::future::join_all(all).await {
        latencies.extend(stream?);
    }
    Ok((started.elapsed().as_secs_f64(), latencies))
}

fn label(window_ms: u64) -> String {
    match window_ms {
        0 => "ungrouped".into(),
        ms => format!("batched {ms} ms"),
    }
}

fn find(points: &[Point], clients: usize, window_ms: u64) -> Option<&Point> {
    points
        .iter()
        .find(|p| p.clients == clients && p.window_ms == window_ms)
}

fn windows(points: &[Point]) -> Vec<u64> {
    let mut windows: Vec<u64> = points.iter().map(|p| p.window_ms).collect();
    windows.sort_unstable();
    windows.dedup();
    windows
}

fn summary(title: &str, link: &str, points: &[Point]) -> String {
    let windows = windows(points);
    let mut text = format!(
        "{title}: concurrent TPC-H streams, link {}, pool off; queries/s, latency p50/p99 \
         ms, MiB the memory node sent; then throughput and bytes against ungrouped\n\n{:>7}",
        link, "streams",
    );
    for w in &windows {
        text.push_str(&format!(" {:>30}", label(*w)));
    }
    for w in windows.iter().filter(|w| **w > 0) {
        text.push_str(&format!(" {:>22}", format!("{} q/s, bytes", label(*w))));
    }
    text.push('\n');
    let mut clients: Vec<usize> = points.iter().map(|p| p.clients).collect();
    clients.dedup();
    for n in clients {
        text.push_str(&format!("{n:>7}"));
        for w in &windows {
            let cell = match find(points, n, *w) {
                Some(p) => format!(
                    "{:.2}/s {:.0}/{:.0} {}M",
                    p.throughput(),
                    p.p50_ms,
                    p.p99_ms,
                    p.bytes >> 20
                ),
                None => "-".into(),
            };
            text.push_str(&format!(" {cell:>30}"));
        }
        for w in windows.iter().filter(|w| **w > 0) {
            let cell = match (find(points, n, 0), find(points, n, *w)) {
                (Some(a), Some(b)) if a.throughput() > 0.0 && a.bytes > 0 => format!(
                    "{:.2}x, {:.2}x",
                    b.throughput() / a.throughput(),
                    b.bytes as f64 / a.bytes as f64
                ),
                _ => "-".into(),
            };
            text.push_str(&format!(" {cell:>22}"));
        }
        text.push('\n');
    }
    text
}

fn csv(points: &[Point]) -> String {
    let mut text = String::from(
        "clients,batch_window_ms,queries,seconds,queries_per_s,p50_ms,p99_ms,bytes_sent\n",
    );
    for p in points {
        text.push_str(&format!(
            "{},{},{},{:.3},{:.4},{:.1},{:.1},{}\n",
            p.clients,
            p.window_ms,
            p.queries,
            p.seconds,
            p.throughput(),
            p.p50_ms,
            p.p99_ms,
            p.bytes
        ));
    }
    text
}

/// What a panel plots of a point.
type Measure = fn(&Point) -> f64;

/// Throughput and bytes sent against the streams, a line per window.
fn plot(path: &Path, title: &str, link: &str, points: &[Point]) -> Result<(), String> {
    crate::plot::fonts()?;
    let root = BitMapBackend::new(path, (1000, 960)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((2, 1));
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    let most = points.iter().map(|p| p.clients).max().unwrap_or(1) as f64;
    let panel_of: [(&str, Measure); 2] = [
        ("queries per second", Point::throughput),
        ("MiB the memory node sent", |p| (p.bytes >> 20) as f64),
    ];
    for (panel, (what, value)) in panels.iter().zip(panel_of) {
        let top = points.iter().map(value).fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{title}: TPC-H streams, link {}: {what}", link),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5..most + 0.5, 0.0..top * 1.2)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("concurrent streams")
            .y_desc(what)
            .draw()
            .map_err(err)?;
        for (i, window) in windows(points).into_iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let series: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.window_ms == window)
                .map(|p| (p.clients as f64, value(p)))
                .collect();
            chart
                .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))
                .map_err(err)?
                .label(label(window))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(series.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
        }
        crate::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_compares_grouped_with_ungrouped() {
        let point = |window_ms, seconds, bytes| Point {
            clients: 2,
            window_ms,
            queries: 44,
            seconds,
            p50_ms: 10.0,
            p99_ms: 30.0,
            bytes,
        };
        let points = [point(0, 22.0, 400 << 20), point(250, 11.0, 100 << 20)];
        let text = summary("t", "10Gbit", &points);
        assert!(text.contains("2.00x, 0.25x"), "{text}");
        assert!(text.contains("batched 250 ms"), "{text}");
        assert_eq!(csv(&points).lines().count(), 3);
    }
}
