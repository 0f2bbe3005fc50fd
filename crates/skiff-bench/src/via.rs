//! `skiff bench ... --via pg|flight`: the server path against the embedded
//! engine on the same data and machine, then throughput with several
//! concurrent clients.
//!
//! The embedded figures come from the usual child processes (one per query,
//! as `skiff bench` measures Skiff). The server is a `skiff serve` child
//! with one worker, so one query has the same cores either way; what the
//! ratio shows is planning on the coordinator, shipping the plan, and
//! streaming and encoding the rows through the coordinator to the client.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use plotters::prelude::*;
use skiff_engine::statement::split_statements;

use super::report::{self, Measurement};
use crate::args::{BenchArgs, BenchEngine, Via};
use crate::client::{Credentials, FlightConn, PgConn};
use crate::harness::{
    BenchError, QueryFile, Setup, measure_all, publish, read_scripts, results_stem,
};
use crate::launch::{self, Coordinator, START_TIMEOUT};

/// A `skiff serve` with one worker over `data`, killed on drop.
fn start_server(data: &Path, partitions: usize) -> Result<Coordinator, BenchError> {
    let fail = |e: String| BenchError::Data(format!("cannot start skiff serve: {e}"));
    let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
    let mut command = launch::serve(&exe, data, 1, partitions);
    Coordinator::start(&mut command, START_TIMEOUT).map_err(fail)
}

/// One client connection of either kind.
enum Conn {
    Pg(PgConn),
    Flight(Box<FlightConn>),
}

impl Conn {
    async fn open(via: Via, server: &Coordinator) -> Result<Self, String> {
        let credentials = Credentials::default();
        Ok(match via {
            Via::Pg => Conn::Pg(PgConn::connect(server.pg()?, &credentials).await?),
            Via::Flight => Conn::Flight(Box::new(
                FlightConn::connect(&server.flight()?.to_string(), &credentials).await?,
            )),
        })
    }

    /// Run every statement of a query file; rows of all statements.
    async fn run(&mut self, script: &str) -> Result<u64, String> {
        let mut rows = 0;
        for statement in split_statements(script) {
            rows += match self {
                Conn::Pg(conn) => conn.query(statement).await?,
                Conn::Flight(conn) => {
                    let (_, batches) = conn.query(statement).await?;
                    batches.iter().map(|b| b.num_rows() as u64).sum()
                }
            };
        }
        Ok(rows)
    }
}

/// One query's figures.
struct Latency {
    query: String,
    embedded_ms: Option<f64>,
    server_ms: Option<f64>,
    rows: Option<u64>,
    error: Option<String>,
}

/// Throughput at one concurrency.
struct Throughput {
    clients: usize,
    queries: usize,
    wall_ms: f64,
    errors: usize,
    /// The first few error messages, to say what went wrong.
    messages: Vec<String>,
}

impl Throughput {
    fn per_minute(&self) -> f64 {
        (self.queries - self.errors) as f64 * 60_000.0 / self.wall_ms.max(1e-9)
    }
}

pub async fn run(
    setup: &Setup<'_>,
    args: &BenchArgs,
    via: Via,
    queries: &[QueryFile],
    title: &str,
) -> Result<(), BenchError> {
    let via_name = match via {
        Via::Pg => "pg",
        Via::Flight => "flight",
    };
    eprintln!("{title}: embedded Skiff, one child process per query");
    let embedded = measure_all(setup, queries, &[BenchEngine::Skiff]);
    eprintln!("{title}: the same queries through a `skiff serve` (1 worker) via {via_name}");
    let server = start_server(&setup.data, setup.threads)?;
    let scripts = read_scripts(queries)?;
    let mut conn = Conn::open(via, &server).await.map_err(BenchError::Data)?;
    let mut latencies = Vec::new();
    for (name, script) in &scripts {
        let mut times = Vec::new();
        let mut outcome = Ok(0);
        for _ in 0..setup.runs {
            let start = Instant::now();
            outcome = conn.run(script).await;
            if outcome.is_err() {
                break;
            }
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
        let embedded_ms = embedded
            .iter()
            .find(|m| &m.query == name)
            .and_then(Measurement::median_ms);
        let server_ms = report::stats(&times).map(|s| s.median_ms);
        eprintln!(
            "{name}: embedded {} ms, via {via_name} {} ms",
            fmt_ms(embedded_ms),
            fmt_ms(server_ms)
        );
        latencies.push(Latency {
            query: name.clone(),
            embedded_ms,
            server_ms: outcome.is_ok().then_some(server_ms).flatten(),
            rows: outcome.as_ref().ok().copied(),
            error: outcome.err(),
        });
    }
    drop(conn);
    let mut throughputs = Vec::new();
    for &clients in &args.clients {
        let result = throughput(via, &server, &scripts, clients).await;
        eprintln!(
            "{clients} clients: {} queries in {:.0} ms, {:.1} queries/min, {} errors",
            result.queries,
            result.wall_ms,
            result.per_minute(),
            result.errors
        );
        for message in &result.messages {
            eprintln!("  error: {message}");
        }
        throughputs.push(result);
    }
    let text = summary(title, via_name, &latencies, &throughputs);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    let files = write(
        &args.results,
        args,
        title,
        via_name,
        &latencies,
        &throughputs,
    )?;
    println!("\nwrote {}", files.join(", "));
    Ok(())
}

/// `clients` connections each run every query once, starting at different
/// queries so they do not move in lockstep.
async fn throughput(
    via: Via,
    server: &Coordinator,
    scripts: &[(String, String)],
    clients: usize,
) -> Throughput {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let mut conn = Conn::open(via, server).await;
        let order: Vec<String> = (0..scripts.len())
            .map(|i| own_views(&scripts[(i + client * 7) % scripts.len()].1, client))
            .collect();
        tasks.spawn(async move {
            let conn = match conn.as_mut() {
                Ok(conn) => conn,
                Err(e) => return vec![e.clone(); order.len()],
            };
            let mut errors = Vec::new();
            for script in &order {
                if let Err(e) = conn.run(script).await {
                    errors.push(e);
                }
            }
            errors
        });
    }
    let mut errors = 0;
    let mut messages = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let failed = done.unwrap_or_else(|e| vec![format!("client task failed: {e}")]);
        errors += failed.len();
        messages.extend(failed.into_iter().take(3 - messages.len().min(3)));
    }
    Throughput {
        clients,
        queries: clients * scripts.len(),
        wall_ms: start.elapsed().as_secs_f64() * 1000.0,
        errors,
        messages,
    }
}

/// `script` with the views it creates renamed for `client`: the catalog is
/// shared, so concurrent clients running TPC-H q15 would otherwise create
/// and drop the same view under each other.
fn own_views(script: &str, client: usize) -> String {
    let lower = script.to_ascii_lowercase();
    let mut names = Vec::new();
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("create view ") {
        rest = &rest[at + "create view ".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    let mut out = script.to_string();
    for name in names {
        out = replace_word(&out, &name, &format!("{name}_client{client}"));
    }
    out
}

/// Replace whole-word, case-insensitive occurrences of `word`.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, _) in lower.match_indices(word) {
        let before = lower[..at].chars().next_back();
        let after = lower[at + word.len()..].chars().next();
        if before.is_some_and(is_ident) || after.is_some_and(is_ident) || at < last {
            continue;
        }
        out.push_str(&text[last..at]);
        out.push_str(with);
        last = at + word.len();
    }
    out.push_str(&text[last..]);
    out
}

fn fmt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
}

fn summary(title: &str, via: &str, latencies: &[Latency], throughputs: &[Throughput]) -> String {
    let mut text = format!("\n{title}: embedded vs via {via} (median ms)\n");
    text.push_str(&format!(
        "{:<6} {:>12} {:>12} {:>7} {:>10}\n",
        "query", "embedded", via, "ratio", "rows"
    ));
    let (mut embedded_total, mut server_total) = (0.0, 0.0);
    for l in latencies {
        let ratio = match (l.embedded_ms, l.server_ms) {
            (Some(e), Some(s)) => {
                embedded_total += e;
                server_total += s;
                format!("{:.3}", s / e.max(1e-9))
            }
            _ => "-".into(),
        };
        text.push_str(&format!(
            "{:<6} {:>12} {:>12} {:>7} {:>10}{}\n",
            l.query,
            fmt_ms(l.embedded_ms),
            fmt_ms(l.server_ms),
            ratio,
            l.rows.map_or("-".into(), |r| r.to_string()),
            l.error
                .as_ref()
                .map_or(String::new(), |e| format!("  error: {e}"))
        ));
    }
    text.push_str(&format!(
        "total  {:>12.1} {:>12.1}   server/embedded {:.3} (queries both answered)\n",
        embedded_total,
        server_total,
        server_total / f64::max(embedded_total, 1e-9)
    ));
    text.push_str("\nclients  queries  wall ms  queries/min  errors\n");
    for t in throughputs {
        text.push_str(&format!(
            "{:>7} {:>8} {:>8.0} {:>12.1} {:>7}\n",
            t.clients,
            t.queries,
            t.wall_ms,
            t.per_minute(),
            t.errors
        ));
    }
    text
}

fn write(
    dir: &Path,
    args: &BenchArgs,
    title: &str,
    via: &str,
    latencies: &[Latency],
    throughputs: &[Throughput],
) -> Result<Vec<String>, BenchError> {
    let stem = format!("{}-via-{via}", results_stem(args));
    let mut text =
        String::from("kind,query,clients,embedded_ms,server_ms,rows,queries_per_min,error\n");
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    for l in latencies {
        text.push_str(&format!(
            "latency,{},1,{},{},{},,{}\n",
            l.query,
            opt(l.embedded_ms),
            opt(l.server_ms),
            l.rows.map_or(String::new(), |r| r.to_string()),
            l.error
                .as_deref()
                .map_or(String::new(), |e| format!("\"{}\"", e.replace('"', "\"\"")))
        ));
    }
    for t in throughputs {
        text.push_str(&format!(
            "throughput,,{},,{:.3},,{:.3},{}\n",
            t.clients,
            t.wall_ms,
            t.per_minute(),
            if t.errors > 0 {
                format!("{} errors", t.errors)
            } else {
                String::new()
            }
        ));
    }
    publish(dir, &stem, args.archive, text.as_bytes(), |png| {
        plot(png, title, via, latencies, throughputs)
    })
}

/// A bar series: label, colour, value, x offset within a query's slot.
type Series<'a> = (&'a str, RGBColor, fn(&Latency) -> Option<f64>, f64);

fn plot(
    path: &Path,
    title: &str,
    via: &str,
    latencies: &[Latency],
    throughputs: &[Throughput],
) -> Result<(), String> {
    super::plot::fonts()?;
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let width = (160 + latencies.len() as u32 * 40).max(900);
    let root = BitMapBackend::new(path, (width, 960)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let (top, bottom) = root.split_vertically(480);
    let max_ms = latencies
        .iter()
        .flat_map(|l| [l.embedded_ms, l.server_ms])
        .flatten()
        .fold(1.0, f64::max);
    let n = latencies.len().max(1);
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!("{title}: embedded vs via {via}, median ms"),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..max_ms * 1.1)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| {
            latencies
                .get(x.floor() as usize)
                .map(|l| l.query.clone())
                .unwrap_or_default()
        })
        .y_desc("ms")
        .draw()
        .map_err(e)?;
    let series: [Series; 2] = [
        ("embedded", RGBColor(230, 120, 20), |l| l.embedded_ms, 0.1),
        (via, RGBColor(40, 100, 190), |l| l.server_ms, 0.5),
    ];
    for (label, color, value, offset) in series {
        chart
            .draw_series(latencies.iter().enumerate().filter_map(|(i, l)| {
                let v = value(l)?;
                let x = i as f64 + offset;
                Some(Rectangle::new([(x, 0.0), (x + 0.38, v)], color.filled()))
            }))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    let max_clients = throughputs.iter().map(|t| t.clients).max().unwrap_or(1) as f64;
    let max_qpm = throughputs
        .iter()
        .map(Throughput::per_minute)
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&bottom)
        .caption(format!("{title}: throughput via {via}"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_clients + 0.5, 0.0..max_qpm * 1.1)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("concurrent clients")
        .y_desc("queries / minute")
        .draw()
        .map_err(e)?;
    let points: Vec<(f64, f64)> = throughputs
        .iter()
        .map(|t| (t.clients as f64, t.per_minute()))
        .collect();
    let blue = RGBColor(40, 100, 190);
    chart
        .draw_series(std::iter::once(PathElement::new(
            points.clone(),
            blue.stroke_width(2),
        )))
        .map_err(e)?;
    chart
        .draw_series(points.iter().map(|&p| Circle::new(p, 4, blue.filled())))
        .map_err(e)?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_gets_its_own_views() {
        let q15 = "create view revenue0 (supplier_no) as select 1;\n\
                   select * from Revenue0 r, revenue01;\ndrop view revenue0;";
        assert_eq!(
            own_views(q15, 3),
            "create view revenue0_client3 (supplier_no) as select 1;\n\
             select * from revenue0_client3 r, revenue01;\ndrop view revenue0_client3;"
        );
        assert_eq!(own_views("select 1", 3), "select 1");
    }
}
