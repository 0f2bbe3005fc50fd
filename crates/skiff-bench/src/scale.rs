//! `skiff bench tpch --scale 1,2,3,4`: every query distributed over each
//! worker count against the single-worker path on the same server, then
//! the resize experiment of the VectorH paper's Table 2: from "add a
//! worker" (2 to 3) or "remove one" (3 to 2) until the first answer on the
//! new cluster, online with buffer matching and without it, against
//! stopping everything and restarting with the new count.
//!
//! The data is hash-partitioned ([`partitions_for`]), so each worker reads
//! the partitions it owns. Every figure comes from `skiff serve` children
//! driven over the PostgreSQL wire: one server per worker count, its state
//! (catalog, partition map) fresh in a directory of links to the tables.
//! On a machine with fewer cores than workers the query figures measure
//! the cost of distribution (planning in stages, shipping them, exchanges
//! through Arrow Flight), not a speedup.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plotters::prelude::*;
use skiff_engine::statement::split_statements;

use super::report;
use crate::args::BenchArgs;
use crate::client::{Credentials, PgConn};
use crate::harness::{BenchError, QueryFile, Setup, publish, read_scripts, results_stem};
use crate::launch::{self, Coordinator, START_TIMEOUT};

/// The worker count the resize experiment starts from: it adds one to it
/// and removes one from one more (the 2 to 3 and 3 to 2).
const RESIZE_FROM: usize = 2;

/// The queries of the paper's resize experiment (TPC-H 1 and 9; the same
/// numbers of TPC-DS when it runs).
pub(crate) const RESIZE_PROBES: [usize; 2] = [1, 9];

/// How long a worker may take to register after it was started.
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// How often registrations are looked for while waiting.
const JOIN_POLL: Duration = Duration::from_millis(20);

/// How long after a resize a buffer matching may take to appear in
/// `skiff.matchings` (a join's starts when the worker registers).
const MATCHING_GRACE: Duration = Duration::from_secs(2);

/// How long a buffer matching may run (the server's own deadline for it
/// is shorter).
const MATCHING_TIMEOUT: Duration = Duration::from_secs(120);

/// The most partitions a table may have (`skiff_tables::partition`).
const PARTITIONS_MAX: u64 = 1024;

/// Partitions of the bench's tables for `counts` workers: the least
/// common multiple of the counts (12 for 1,2,3,4), so that every count
/// owns an equal share; at least 8, so one worker still reads several.
pub fn partitions_for(counts: &[usize]) -> Result<u32, BenchError> {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    let mut lcm: u64 = 1;
    for &n in counts {
        if n == 0 {
            return Err(BenchError::Data("--scale counts start at 1 worker".into()));
        }
        let n = n as u64;
        lcm = lcm / gcd(lcm, n) * n;
        if lcm > PARTITIONS_MAX {
            return Err(BenchError::Data(format!(
                "worker counts {counts:?} need more than {PARTITIONS_MAX} partitions \
                 to share them evenly; use fewer or smaller counts"
            )));
        }
    }
    let mut partitions = lcm;
    while partitions < 8 {
        partitions *= 2;
    }
    Ok(partitions as u32)
}

/// Where the partitioned data of a benchmark lives by default.
pub fn default_data_dir(plain: &Path, partitions: u32) -> PathBuf {
    let mut name = plain.file_name().unwrap_or_default().to_os_string();
    name.push(format!("-p{partitions}"));
    plain.with_file_name(name)
}

/// One query at one worker count.
struct QueryFigure {
    workers: usize,
    query: String,
    distributed_ms: Option<f64>,
    single_ms: Option<f64>,
    rows: Option<u64>,
    /// The distributed runs were planned in stages over the workers
    /// (`skiff.queries` says so); otherwise they ran on one worker.
    staged: bool,
    error: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    Add,
    Remove,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// Online, the buffered blocks of moved partitions sent to their new
    /// owners (`skiff.buffer_matching` on, the default), the first query
    /// after the blocks arrived.
    Online,
    /// Online with matching, the first query as soon as the new worker
    /// takes queries, while blocks still move (what a client sees: nothing
    /// waits for matching but a removal).
    Background,
    /// Online with `skiff.buffer_matching` off.
    Unmatched,
    Restart,
}

const METHODS: [Method; 4] = [
    Method::Online,
    Method::Background,
    Method::Unmatched,
    Method::Restart,
];

/// One resize until its first answer.
pub(crate) struct ResizeFigure {
    pub(crate) change: Change,
    pub(crate) method: Method,
    pub(crate) probe: String,
    /// Until the new cluster took queries (and its buffer matching ended).
    pub(crate) ready_ms: f64,
    /// Until the probe's first answer, from the start of the change.
    pub(crate) total_ms: f64,
    /// The resize's buffer matching, when one ran.
    pub(crate) matching: Option<Matched>,
}

/// What `skiff.matchings` says of the matchings of one resize, summed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Matched {
    pub ms: f64,
    pub blocks: u64,
    pub bytes: u64,
    pub failures: u64,
}

impl Matched {
    /// ` (N blocks, M MiB matched in T ms)` for a progress line; empty
    /// without a matching.
    pub(crate) fn note(matched: Option<Matched>) -> String {
        matched.map_or(String::new(), |m| {
            let failed = if m.failures > 0 {
                format!(", {} transfers failed", m.failures)
            } else {
                String::new()
            };
            format!(
                " ({} blocks, {:.1} MiB matched in {:.0} ms{failed})",
                m.blocks,
                m.bytes as f64 / MIB,
                m.ms
            )
        })
    }
}

impl Change {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Change::Add => "add",
            Change::Remove => "remove",
        }
    }

    pub(crate) fn counts(self) -> (usize, usize) {
        match self {
            Change::Add => (RESIZE_FROM, RESIZE_FROM + 1),
            Change::Remove => (RESIZE_FROM + 1, RESIZE_FROM),
        }
    }
}

impl Method {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::Online => "online",
            Method::Background => "online-background",
            Method::Unmatched => "online-unmatched",
            Method::Restart => "restart",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Method::Online => "online, matched first",
            Method::Background => "online, matching meanwhile",
            Method::Unmatched => "online, no matching",
            Method::Restart => "restart",
        }
    }
}

pub async fn run(
    setup: &Setup<'_>,
    args: &BenchArgs,
    queries: &[QueryFile],
    probes: &[QueryFile],
    title: &str,
) -> Result<(), BenchError> {
    let counts = &args.scale;
    eprintln!(
        "{title}: {} queries distributed over {} workers against the single-worker path, \
         runs per query {}{}, data {}",
        queries.len(),
        counts
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        setup.runs,
        if setup.runs > 1 {
            " (first is a warm-up)"
        } else {
            ""
        },
        setup.data.display()
    );
    let scripts = read_scripts(queries)?;
    let mut figures = Vec::new();
    for &workers in counts {
        figures.extend(at_count(setup, &scripts, workers).await?);
    }
    let probe_scripts = read_scripts(probes)?;
    let mut resizes = Vec::new();
    for (name, script) in &probe_scripts {
        for repetition in 0..setup.runs {
            eprintln!(
                "resize with {name}, repetition {} of {}",
                repetition + 1,
                setup.runs
            );
            resizes.extend(resize_round(setup, name, script).await?);
        }
    }
    let text = summary(title, counts, &figures, &resizes);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    let stem = format!("{}-scale", results_stem(args));
    let files = publish(
        &args.results,
        &stem,
        args.archive,
        csv(&figures, &resizes).as_bytes(),
        |png| plot(png, title, counts, &figures, &resizes),
    )?;
    println!("\nwrote {}", files.join(", "));
    Ok(())
}

/// A `skiff serve` with `workers` workers whose state lives in `state`,
/// and a connection once they have all registered.
pub(crate) struct Cluster {
    /// Held for its drop, which kills the server and its workers.
    _server: Coordinator,
    pub(crate) conn: PgConn,
    /// Its PostgreSQL front door, for more connections.
    pub(crate) pg: std::net::SocketAddr,
}

impl Cluster {
    pub(crate) async fn start(
        setup: &Setup<'_>,
        state: &Path,
        workers: usize,
    ) -> Result<Self, BenchError> {
        let fail = |e: String| BenchError::Data(format!("cannot start skiff serve: {e}"));
        let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
        let mut command = launch::serve(&exe, state, workers, setup.threads);
        let server = Coordinator::start(&mut command, START_TIMEOUT).map_err(fail)?;
        let pg = server.pg().map_err(fail)?;
        let conn = PgConn::connect(pg, &Credentials::default())
            .await
            .map_err(fail)?;
        let cluster = Self {
            _server: server,
            conn,
            pg,
        };
        cluster.wait_for(workers).await?;
        Ok(cluster)
    }

    /// The ids of the workers that take queries.
    pub(crate) async fn live(&self) -> Result<Vec<u64>, BenchError> {
        let rows = self
            .conn
            .rows(
                "SELECT id FROM skiff.workers WHERE role = 'worker' AND state = 'alive' \
                 ORDER BY id",
            )
            .await
            .map_err(BenchError::Data)?;
        Ok(rows
            .iter()
            .filter_map(|r| r.first()?.as_deref()?.parse().ok())
            .collect())
    }

    /// Wait until exactly `n` workers take queries.
    pub(crate) async fn wait_for(&self, n: usize) -> Result<(), BenchError> {
        let deadline = Instant::now() + JOIN_TIMEOUT;
        loop {
            let live = self.live().await?.len();
            if live == n {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Data(format!(
                    "{live} workers alive after {JOIN_TIMEOUT:?}, waiting for {n}"
                )));
            }
            tokio::time::sleep(JOIN_POLL).await;
        }
    }

    /// Run every statement of a query file; rows of all of them.
    pub(crate) async fn run(&self, script: &str) -> Result<u64, String> {
        self.conn.run_script(script).await
    }

    /// A statement whose rows do not matter.
    pub(crate) async fn execute(&self, sql: &str) -> Result<(), BenchError> {
        self.conn
            .query(sql)
            .await
            .map(|_| ())
            .map_err(|e| BenchError::Data(format!("{sql}: {e}")))
    }

    pub(crate) async fn set_distribute(&self, mode: &str) -> Result<(), BenchError> {
        self.execute(&format!("SET skiff.distribute = '{mode}'"))
            .await
    }

    pub(crate) async fn set_matching(&self, on: bool) -> Result<(), BenchError> {
        self.execute(&format!("SET skiff.buffer_matching = {on}"))
            .await
    }

    /// One number from a query of one row and column.
    pub(crate) async fn number(&self, sql: &str) -> Result<u64, BenchError> {
        let rows = self.conn.rows(sql).await.map_err(BenchError::Data)?;
        let cell = rows.first().and_then(|r| r.first().cloned().flatten());
        Ok(cell.and_then(|c| c.parse().ok()).unwrap_or(0))
    }

    /// The newest buffer matching's id (0 before any).
    pub(crate) async fn last_matching(&self) -> Result<u64, BenchError> {
        self.number("SELECT coalesce(max(id), 0) FROM skiff.matchings")
            .await
    }

    /// The buffer matchings after `after`, summed, once all have ended;
    /// `None` when none started within [`MATCHING_GRACE`].
    pub(crate) async fn matched_after(&self, after: u64) -> Result<Option<Matched>, BenchError> {
        let start = Instant::now();
        let sql = format!(
            "SELECT state, elapsed_ms, blocks_kept, bytes_kept, failures FROM skiff.matchings \
             WHERE id > {after}"
        );
        loop {
            let rows = self.conn.rows(&sql).await.map_err(BenchError::Data)?;
            let done = rows.iter().all(|r| r[0].as_deref() == Some("done"));
            if rows.is_empty() && start.elapsed() >= MATCHING_GRACE {
                return Ok(None);
            }
            if !rows.is_empty() && done {
                let cell = |r: &Vec<Option<String>>, i: usize| -> u64 {
                    r[i].as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
                };
                let mut sum = Matched::default();
                for r in &rows {
                    sum.ms += cell(r, 1) as f64;
                    sum.blocks += cell(r, 2);
                    sum.bytes += cell(r, 3);
                    sum.failures += cell(r, 4);
                }
                return Ok(Some(sum));
            }
            if start.elapsed() >= MATCHING_TIMEOUT {
                return Err(BenchError::Data(format!(
                    "a buffer matching still runs after {MATCHING_TIMEOUT:?}"
                )));
            }
            tokio::time::sleep(JOIN_POLL).await;
        }
    }

    /// Add a worker and wait until `to` workers take queries and, with
    /// `matching` on, the blocks matched to the new one have arrived;
    /// what the matching moved.
    pub(crate) async fn add_worker(
        &self,
        to: usize,
        matching: bool,
    ) -> Result<Option<Matched>, BenchError> {
        let last = self.last_matching().await?;
        self.execute("SELECT skiff.add_workers(1)").await?;
        self.wait_for(to).await?;
        if !matching {
            return Ok(None);
        }
        self.matched_after(last).await
    }

    /// Remove worker `id` and wait until `to` workers are left (with
    /// `matching` on, its blocks are sent before it leaves); what the
    /// matching moved.
    pub(crate) async fn remove_worker(
        &self,
        id: u64,
        to: usize,
        matching: bool,
    ) -> Result<Option<Matched>, BenchError> {
        let last = self.last_matching().await?;
        self.execute(&format!("SELECT skiff.remove_worker('{id}')"))
            .await?;
        self.wait_for(to).await?;
        if !matching {
            return Ok(None);
        }
        self.matched_after(last).await
    }

    /// Whether one of the last `statements` queries (a query file's, other
    /// than this look) ran in stages over the workers.
    async fn last_was_staged(&self, statements: usize) -> bool {
        let sql = format!(
            "SELECT decision FROM skiff.queries \
             WHERE sql NOT LIKE '%skiff.queries%' ORDER BY id DESC LIMIT {statements}"
        );
        self.conn.rows(&sql).await.is_ok_and(|rows| {
            rows.iter().any(|r| {
                r.first()
                    .and_then(|d| d.as_deref())
                    .is_some_and(|d| d.starts_with("distributed over"))
            })
        })
    }
}

/// A data directory of its own for one server's state (`.skiff`), whose
/// tables are links to `data`'s; hidden beside `data`, removed on drop.
pub(crate) fn own_state(data: &Path) -> Result<tempfile::TempDir, BenchError> {
    let fail = |e: std::io::Error| BenchError::Data(format!("cannot link {}: {e}", data.display()));
    let parent = data.parent().unwrap_or(Path::new("."));
    let own = tempfile::Builder::new()
        .prefix(".scale-")
        .tempdir_in(parent)
        .map_err(fail)?;
    let data = std::path::absolute(data).map_err(fail)?;
    for entry in std::fs::read_dir(&data).map_err(fail)? {
        let path = entry.map_err(fail)?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        if !name.to_string_lossy().starts_with('.') {
            std::os::unix::fs::symlink(&path, own.path().join(name)).map_err(fail)?;
        }
    }
    Ok(own)
}

/// Median of the timed runs of `script` (the first is a warm-up when
/// there are several), and its rows.
pub(crate) async fn timed(
    cluster: &Cluster,
    script: &str,
    runs: u32,
) -> Result<(f64, u64), String> {
    let mut times = Vec::new();
    let mut rows = 0;
    for _ in 0..runs {
        let start = Instant::now();
        rows = cluster.run(script).await?;
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let counted = if times.len() > 1 { &times[1..] } else { &times };
    let median = report::stats(counted).map_or(f64::NAN, |s| s.median_ms);
    Ok((median, rows))
}

/// Every query on a fresh `skiff serve` with `workers` workers, each
/// distributed and then on the single-worker path, in turn, so drift over
/// the run touches both alike.
async fn at_count(
    setup: &Setup<'_>,
    scripts: &[(String, String)],
    workers: usize,
) -> Result<Vec<QueryFigure>, BenchError> {
    let state = own_state(&setup.data)?;
    let cluster = Cluster::start(setup, state.path(), workers).await?;
    let mut figures = Vec::new();
    for (name, script) in scripts {
        cluster.set_distribute("on").await?;
        let distributed = timed(&cluster, script, setup.runs).await;
        let staged = distributed.is_ok()
            && cluster
                .last_was_staged(split_statements(script).len())
                .await;
        cluster.set_distribute("off").await?;
        let single = timed(&cluster, script, setup.runs).await;
        let mut error = None;
        let rows = match (&distributed, &single) {
            (Ok((_, a)), Ok((_, b))) if a != b => {
                error = Some(format!("{a} rows distributed, {b} on one worker"));
                None
            }
            (Ok((_, rows)), _) | (_, Ok((_, rows))) => Some(*rows),
            _ => None,
        };
        if let Err(e) = distributed.as_ref().and(single.as_ref()) {
            error = Some(e.clone());
        }
        let figure = QueryFigure {
            workers,
            query: name.clone(),
            distributed_ms: distributed.ok().map(|(ms, _)| ms),
            single_ms: single.ok().map(|(ms, _)| ms),
            rows,
            staged,
            error,
        };
        eprintln!(
            "{workers} workers {name}: distributed {} ms{}, one worker {} ms{}",
            fmt_ms(figure.distributed_ms),
            if figure.staged { "" } else { " (not staged)" },
            fmt_ms(figure.single_ms),
            figure
                .error
                .as_ref()
                .map_or(String::new(), |e| format!("  error: {e}"))
        );
        figures.push(figure);
    }
    Ok(figures)
}

/// One round of the resize experiment with `probe`: online add and
/// remove without buffer matching, then with it, then the same two
/// changes by restarting. Queries are distributed (`skiff.distribute =
/// on`), so each worker reads the partitions it owns.
pub(crate) async fn resize_round(
    setup: &Setup<'_>,
    probe: &str,
    script: &str,
) -> Result<Vec<ResizeFigure>, BenchError> {
    let state = own_state(&setup.data)?;
    let mut cluster = Cluster::start(setup, state.path(), RESIZE_FROM).await?;
    cluster.set_distribute("on").await?;
    // The figures are of a warm cluster: the probe has run once.
    let expected = cluster.run(script).await.map_err(BenchError::Data)?;
    let mut figures = Vec::new();
    let mut record = |change: Change,
                      method: Method,
                      ready: Duration,
                      total: Duration,
                      matching: Option<Matched>| {
        eprintln!(
            "  {} {} -> {} {}: ready in {:.0} ms, first answer at {:.0} ms{}",
            change.name(),
            change.counts().0,
            change.counts().1,
            method.label(),
            ready.as_secs_f64() * 1000.0,
            total.as_secs_f64() * 1000.0,
            Matched::note(matching)
        );
        figures.push(ResizeFigure {
            change,
            method,
            probe: probe.to_string(),
            ready_ms: ready.as_secs_f64() * 1000.0,
            total_ms: total.as_secs_f64() * 1000.0,
            matching,
        });
    };
    // Without matching first: the pools hold the same blocks again after
    // its last answer (the owned partitions of two workers, warm).
    for method in [Method::Unmatched, Method::Background, Method::Online] {
        let matching = method != Method::Unmatched;
        cluster.set_matching(matching).await?;
        // Add a worker, wait for it to take queries (and for its blocks),
        // answer.
        let last = cluster.last_matching().await?;
        let start = Instant::now();
        let matched = cluster
            .add_worker(RESIZE_FROM + 1, method == Method::Online)
            .await?;
        let ready = start.elapsed();
        check(expected, cluster.run(script).await, probe)?;
        let total = start.elapsed();
        // In the background case, what moved meanwhile (and a settled
        // cluster for the removal).
        let matched = match method {
            Method::Background => cluster.matched_after(last).await?,
            _ => matched,
        };
        record(Change::Add, method, ready, total, matched);

        // Remove the oldest worker (not the one just added, which would
        // only undo the add), answer.
        let Some(leaving) = cluster.live().await?.first().copied() else {
            return Err(BenchError::Data("no worker left to remove".into()));
        };
        let start = Instant::now();
        // A removal sends the leaving worker's blocks before it goes.
        let matched = cluster
            .remove_worker(leaving, RESIZE_FROM, matching)
            .await?;
        let ready = start.elapsed();
        check(expected, cluster.run(script).await, probe)?;
        record(Change::Remove, method, ready, start.elapsed(), matched);
    }

    // Restart: stop everything, start with the new count, answer.
    for change in [Change::Add, Change::Remove] {
        let start = Instant::now();
        drop(cluster);
        cluster = Cluster::start(setup, state.path(), change.counts().1).await?;
        cluster.set_distribute("on").await?;
        let ready = start.elapsed();
        check(expected, cluster.run(script).await, probe)?;
        record(change, Method::Restart, ready, start.elapsed(), None);
    }
    Ok(figures)
}

/// Bytes in a MiB, for figures.
pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// A resize's first answer must be the answer before it.
pub(crate) fn check(
    expected: u64,
    got: Result<u64, String>,
    probe: &str,
) -> Result<(), BenchError> {
    match got {
        Ok(rows) if rows == expected => Ok(()),
        Ok(rows) => Err(BenchError::Data(format!(
            "{probe} after a resize returned {rows} rows, {expected} before"
        ))),
        Err(e) => Err(BenchError::Data(format!(
            "{probe} failed after a resize: {e}"
        ))),
    }
}

pub(crate) fn fmt_ms(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
}

/// Median total and ready time of one (change, method) over its rounds.
fn resize_median(
    resizes: &[ResizeFigure],
    change: Change,
    method: Method,
    probe: &str,
) -> Option<(f64, f64)> {
    let pick = |f: &ResizeFigure| f.change == change && f.method == method && f.probe == probe;
    let totals: Vec<f64> = resizes
        .iter()
        .filter(|f| pick(f))
        .map(|f| f.total_ms)
        .collect();
    let ready: Vec<f64> = resizes
        .iter()
        .filter(|f| pick(f))
        .map(|f| f.ready_ms)
        .collect();
    Some((
        report::stats(&totals)?.median_ms,
        report::stats(&ready)?.median_ms,
    ))
}

pub(crate) fn probes_of(resizes: &[ResizeFigure]) -> Vec<String> {
    let mut probes: Vec<String> = resizes.iter().map(|f| f.probe.clone()).collect();
    probes.dedup();
    probes
}

fn summary(
    title: &str,
    counts: &[usize],
    figures: &[QueryFigure],
    resizes: &[ResizeFigure],
) -> String {
    let mut text = format!(
        "\n{title}: distributed over N workers / the single-worker path on the same server \
         (median ms; * = not planned in stages)\n"
    );
    text.push_str(&format!("{:<6}", "query"));
    for n in counts {
        text.push_str(&format!(
            " {:>9} {:>9} {:>6}",
            format!("{n}w dist"),
            "single",
            "ratio"
        ));
    }
    text.push('\n');
    let mut queries: Vec<&str> = figures.iter().map(|f| f.query.as_str()).collect();
    queries.sort_unstable();
    queries.dedup();
    for query in &queries {
        text.push_str(&format!("{query:<6}"));
        for &n in counts {
            let f = figures.iter().find(|f| f.workers == n && f.query == *query);
            let (d, s) = f.map_or((None, None), |f| (f.distributed_ms, f.single_ms));
            let star = if f.is_some_and(|f| !f.staged) {
                "*"
            } else {
                " "
            };
            text.push_str(&format!(
                " {:>8}{star} {:>9} {:>6}",
                fmt_ms(d),
                fmt_ms(s),
                ratio(d, s)
            ));
        }
        if let Some(e) = figures
            .iter()
            .find(|f| f.query == *query && f.error.is_some())
            .and_then(|f| f.error.as_ref())
        {
            text.push_str(&format!("  error: {e}"));
        }
        text.push('\n');
    }
    text.push_str(&format!("{:<6}", "total"));
    for &n in counts {
        let (d, s) = totals(figures, n);
        text.push_str(&format!(
            " {:>9.1} {:>9.1} {:>6}",
            d,
            s,
            ratio(Some(d), Some(s))
        ));
    }
    text.push_str("\n(totals over the queries both paths answered)\n");
    text.push_str(&resize_table(resizes));
    text
}

/// Table 2: per probe and change, each method's median time until the
/// first answer and until the cluster was ready; empty without resizes.
pub(crate) fn resize_table(resizes: &[ResizeFigure]) -> String {
    if resizes.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "\nresize until the first answer (median ms over the rounds). matched: the first \
         query after the blocks arrived (ready = until then); meanwhile: as soon as the \
         worker takes queries (a removal always sends first); speedup = restart / \
         meanwhile\n\
         {:<6} {:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10}\n",
        "probe",
        "change",
        "matched",
        "ready",
        "meanwhile",
        "no match",
        "restart",
        "ready",
        "speedup",
        "moved"
    );
    for probe in probes_of(resizes) {
        for change in [Change::Add, Change::Remove] {
            let [online, background, unmatched, restart] =
                METHODS.map(|m| resize_median(resizes, change, m, &probe));
            let matched: Vec<f64> = resizes
                .iter()
                .filter(|f| f.probe == probe && f.change == change)
                .filter_map(|f| f.matching.map(|m| m.bytes as f64 / MIB))
                .collect();
            let (from, to) = change.counts();
            text.push_str(&format!(
                "{probe:<6} {:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10}\n",
                format!("{} {from}->{to}", change.name()),
                fmt_ms(online.map(|o| o.0)),
                fmt_ms(online.map(|o| o.1)),
                fmt_ms(background.map(|o| o.0)),
                fmt_ms(unmatched.map(|o| o.0)),
                fmt_ms(restart.map(|r| r.0)),
                fmt_ms(restart.map(|r| r.1)),
                ratio(restart.map(|r| r.0), background.map(|o| o.0)),
                report::stats(&matched).map_or("-".into(), |s| format!("{:.1} MiB", s.median_ms)),
            ));
        }
    }
    text
}

/// Distributed and single-worker totals at `workers`, over the queries
/// both answered.
fn totals(figures: &[QueryFigure], workers: usize) -> (f64, f64) {
    figures
        .iter()
        .filter(|f| f.workers == workers)
        .filter_map(|f| Some((f.distributed_ms?, f.single_ms?)))
        .fold((0.0, 0.0), |(a, b), (d, s)| (a + d, b + s))
}

pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

fn csv(figures: &[QueryFigure], resizes: &[ResizeFigure]) -> String {
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    let mut text = String::from(
        "kind,workers,query,distributed_ms,single_ms,staged,rows,change,method,ready_ms,\
         total_ms,matching_ms,blocks_matched,bytes_matched,error\n",
    );
    for f in figures {
        text.push_str(&format!(
            "query,{},{},{},{},{},{},,,,,,,,{}\n",
            f.workers,
            f.query,
            opt(f.distributed_ms),
            opt(f.single_ms),
            f.staged,
            f.rows.map_or(String::new(), |r| r.to_string()),
            f.error
                .as_deref()
                .map_or(String::new(), |e| format!("\"{}\"", e.replace('"', "\"\"")))
        ));
    }
    text.push_str(&resize_rows(resizes));
    text
}

/// The CSV rows of the resize experiment (`scale`'s columns).
pub(crate) fn resize_rows(resizes: &[ResizeFigure]) -> String {
    let mut text = String::new();
    for r in resizes {
        let (from, to) = r.change.counts();
        let m = |f: &dyn Fn(Matched) -> String| r.matching.map_or(String::new(), f);
        text.push_str(&format!(
            "resize,{from}->{to},{},,,,,{},{},{:.3},{:.3},{},{},{},\n",
            r.probe,
            r.change.name(),
            r.method.name(),
            r.ready_ms,
            r.total_ms,
            m(&|m| format!("{:.0}", m.ms)),
            m(&|m| m.blocks.to_string()),
            m(&|m| m.bytes.to_string()),
        ));
    }
    text
}

/// Colours of the worker counts' bars, cycled.
pub(crate) const PALETTE: [RGBColor; 6] = [
    RGBColor(40, 100, 190),
    RGBColor(90, 160, 90),
    RGBColor(150, 90, 170),
    RGBColor(200, 160, 40),
    RGBColor(60, 170, 170),
    RGBColor(120, 120, 120),
];
pub(crate) const SINGLE: RGBColor = RGBColor(230, 120, 20);

/// Top: per query, the single-worker path (at the first count) and the
/// distributed time at each count. Bottom: the resize experiment.
fn plot(
    path: &Path,
    title: &str,
    counts: &[usize],
    figures: &[QueryFigure],
    resizes: &[ResizeFigure],
) -> Result<(), String> {
    super::plot::fonts()?;
    let mut queries: Vec<&str> = figures.iter().map(|f| f.query.as_str()).collect();
    queries.sort_unstable();
    queries.dedup();
    let width = (160 + queries.len() as u32 * ((counts.len() as u32 + 1) * 14 + 14)).max(900);
    let root = BitMapBackend::new(path, (width, 960)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(480);

    // The single-worker path (at the first count's server), then the
    // distributed runs at each count.
    let first = counts.first().copied().unwrap_or(1);
    let per_query = |value: &dyn Fn(&QueryFigure) -> Option<f64>| -> Vec<Option<f64>> {
        queries
            .iter()
            .map(|q| figures.iter().filter(|f| f.query == *q).find_map(value))
            .collect()
    };
    let mut series = vec![Bars {
        label: format!("one worker (server of {first})"),
        color: SINGLE,
        values: per_query(&|f| (f.workers == first).then_some(f.single_ms).flatten()),
    }];
    for (i, &count) in counts.iter().enumerate() {
        series.push(Bars {
            label: format!("distributed over {count}"),
            color: PALETTE[i % PALETTE.len()],
            values: per_query(&|f| (f.workers == count).then_some(f.distributed_ms).flatten()),
        });
    }
    let labels: Vec<String> = queries.iter().map(|q| q.to_string()).collect();
    grouped_bars(
        &top,
        format!("{title}: distributed over N workers vs one worker, median ms"),
        &labels,
        &series,
    )?;

    resize_bars(&bottom, title, resizes)?;
    root.present().map_err(|e| e.to_string())
}

/// The resize experiment on `area`: per probe and change, each method's
/// median time until the first answer.
pub(crate) fn resize_bars(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    resizes: &[ResizeFigure],
) -> Result<(), String> {
    let mut labels = Vec::new();
    let mut values: [Vec<Option<f64>>; 4] = Default::default();
    for probe in probes_of(resizes) {
        for change in [Change::Add, Change::Remove] {
            let (from, to) = change.counts();
            labels.push(format!("{probe} {} {from}->{to}", change.name()));
            for (i, method) in METHODS.into_iter().enumerate() {
                values[i].push(resize_median(resizes, change, method, &probe).map(|m| m.0));
            }
        }
    }
    let colors = [PALETTE[0], PALETTE[4], PALETTE[1], SINGLE];
    let series: Vec<Bars> = METHODS
        .into_iter()
        .zip(values)
        .zip(colors)
        .map(|((method, values), color)| Bars {
            label: method.label().into(),
            color,
            values,
        })
        .collect();
    grouped_bars(
        area,
        format!("{title}: resize until the first answer, median ms"),
        &labels,
        &series,
    )
}

/// One series of bars: its legend, colour, and a value per group.
pub(crate) struct Bars {
    pub(crate) label: String,
    pub(crate) color: RGBColor,
    pub(crate) values: Vec<Option<f64>>,
}

/// Bars in groups on `area`: a group per label, in each a bar per series
/// (none where the series has no value), in milliseconds.
pub(crate) fn grouped_bars(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    caption: String,
    labels: &[String],
    series: &[Bars],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    let max_ms = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(1.0, |a: f64, b| a.max(*b));
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..max_ms * 1.3)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| labels.get(x.floor() as usize).cloned().unwrap_or_default())
        .y_desc("ms")
        .draw()
        .map_err(err)?;
    let width = 0.85 / series.len().max(1) as f64;
    for (j, bars) in series.iter().enumerate() {
        let color = bars.color;
        let rects: Vec<_> = bars
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                let x = i as f64 + 0.075 + j as f64 * width;
                Some(Rectangle::new(
                    [(x, 0.0), (x + width * 0.9, (*v)?)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(rects)
            .map_err(err)?
            .label(bars.label.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    super::plot::legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn every_count_gets_an_equal_share() {
        assert_eq!(partitions_for(&[1, 2, 3, 4]).ok(), Some(12));
        assert_eq!(partitions_for(&[1, 2]).ok(), Some(8));
        assert_eq!(partitions_for(&[3]).ok(), Some(12));
        assert_eq!(partitions_for(&[16]).ok(), Some(16));
        assert!(partitions_for(&[0]).is_err());
        assert!(partitions_for(&[7, 11, 13, 17]).is_err());
    }

    #[test]
    fn the_plot_has_both_panels() {
        let figures: Vec<QueryFigure> = [1, 2]
            .into_iter()
            .map(|workers| QueryFigure {
                workers,
                query: "q01".into(),
                distributed_ms: Some(10.0 * workers as f64),
                single_ms: Some(9.0),
                rows: Some(4),
                staged: workers > 1,
                error: None,
            })
            .collect();
        let resizes: Vec<ResizeFigure> = METHODS
            .into_iter()
            .map(|method| ResizeFigure {
                change: Change::Add,
                method,
                probe: "q01".into(),
                ready_ms: 1.0,
                total_ms: 2.0,
                matching: (method == Method::Online).then_some(Matched {
                    ms: 1.0,
                    blocks: 3,
                    bytes: 4096,
                    failures: 0,
                }),
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("scale.png");
        plot(&png, "TPC-H", &[1, 2], &figures, &resizes).unwrap();
        let drawn = image_size(&png);
        assert_eq!(drawn, (900, 960));
    }

    /// Width and height from a PNG's header.
    pub(crate) fn image_size(png: &Path) -> (u32, u32) {
        let bytes = std::fs::read(png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        (word(16), word(20))
    }

    #[test]
    fn partitioned_data_lives_beside_the_plain_data() {
        assert_eq!(
            default_data_dir(Path::new("bench/data/tpch-sf1"), 12),
            PathBuf::from("bench/data/tpch-sf1-p12")
        );
    }
}
