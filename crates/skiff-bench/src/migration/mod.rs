//! `skiff bench ... --migration`: what moving a running query costs, through
//! real clusters on this machine (the paper's Figures 9-11 and 13).
//!
//! This module owns the clusters it measures (a coordinator, a memory node
//! and worker processes, started as `skiff coordinator|memnode|worker`
//! children so that workers can differ in parallelism and be added or
//! killed one by one), the four experiments, their summary (with a fifth
//! section judging the cost model), CSV and PNG:
//!
//! 1. *symmetric*: per query and boundary k, the local runtime, the runtime
//!    with `skiff.migrate_after_pipelines = k` to an identical worker, and a
//!    restart (the time the source ran before it paused at k, by its own
//!    clock, plus a whole local run);
//! 2. *faster*: the same from a 1-partition worker to a 2-partition one,
//!    against staying on the slow worker and against restarting on the fast;
//! 3. *vacate*: 1, 2, 4, 8 long queries on one worker, which is then
//!    drained; the time until it holds no query;
//! 4. *zero*: no trigger against a trigger that never fires, and the cost
//!    of a snapshot after every pipeline and of adaptive snapshots (every
//!    other run has them off, so that its figures compare with earlier
//!    ones);
//! 5. the cost model's choice at every boundary of 1 against the faster
//!    measured alternative ([`judge`]).
//!
//! Every figure is client-side wall time over the PostgreSQL port, as a
//! user sees it; the server's own figures (state bytes, its hand-off
//! decision, its vacate latency) come from `skiff.queries`/`skiff.workers`.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use plotters::prelude::*;
use skiff_engine::statement::split_statements;

use crate::args::BenchArgs;
use crate::client::{Credentials, PgConn};
use crate::harness::{BenchError, QueryFile, Setup, publish, read_scripts, results_stem};
use crate::launch::{self, START_TIMEOUT};

mod answer;
mod judge;
mod reread;

use answer::Answer;

/// A trigger past every boundary of any query: it never fires.
const NEVER: usize = 100_000;
/// Boundaries tried per query at most (TPC-DS plans stay well below).
const MAX_BOUNDARIES: usize = 80;
/// States below this count as "small" in the paper's summary.
const SMALL_STATE: u64 = 50 << 20;
/// What every run sets first, unless its own settings name adaptive
/// snapshots: they are on by default, and would make the figures of the
/// other experiments incomparable with runs before them.
const ADAPTIVE_OFF: &str = "skiff.adaptive_snapshots = false";
/// Concurrent queries on the worker that is vacated.
const VACATE_CONCURRENCY: [usize; 4] = [1, 2, 4, 8];
/// Drains per concurrency and mode; the median is reported.
const VACATE_REPS: usize = 5;
/// `skiff.drain` modes measured, interleaved.
/// `cut`: abort, with the queries' cut points on, so that running
/// pipelines are cut at their next morsel and their partial work moves.
const VACATE_MODES: [&str; 3] = ["finish", "abort", "cut"];
/// When to drain, as fractions of the mix's expected runtime: early, middle.
const VACATE_AT: [f64; 3] = [0.2, 0.35, 0.5];
/// How often the client looks at the system tables while it waits.
const POLL: Duration = Duration::from_millis(2);

type Rows = Vec<Vec<Option<String>>>;

/// One measured figure; which fields are set depends on `kind`.
#[derive(Clone, Debug, Default)]
struct Row {
    kind: &'static str,
    query: String,
    k: Option<usize>,
    pipelines_total: Option<u64>,
    /// Time at k as a fraction of the local runtime.
    progress: Option<f64>,
    state_bytes: Option<u64>,
    local_ms: Option<f64>,
    time_at_k_ms: Option<f64>,
    measured_ms: Option<f64>,
    restart_ms: Option<f64>,
    concurrency: Option<usize>,
    rep: Option<usize>,
    vacate_ms: Option<f64>,
    /// Server-side vacate latency (`skiff.workers.vacate_ms`) when known.
    server_vacate_ms: Option<f64>,
    /// From the drain request until the last of the vacated queries had
    /// its last row: what the vacate mode costs the queries themselves
    /// (work an immediate vacate threw away is redone in it).
    finished_ms: Option<f64>,
    vacate_how: &'static str,
    rows: Option<u64>,
    /// The rows and values matched those of the local run.
    rows_ok: Option<bool>,
    error: Option<String>,
    decision: String,
    /// A local run's rows, for the vacate mix to check against (not in
    /// the CSV).
    answer: Option<Arc<Answer>>,
}

impl Row {
    fn overhead_ms(&self) -> Option<f64> {
        Some(self.measured_ms? - self.local_ms?)
    }

    fn overhead_pct(&self) -> Option<f64> {
        Some(100.0 * self.overhead_ms()? / self.local_ms?.max(1e-9))
    }

    fn ratio(&self) -> Option<f64> {
        Some(self.measured_ms? / self.local_ms?.max(1e-9))
    }

    fn restart_ratio(&self) -> Option<f64> {
        Some(self.restart_ms? / self.local_ms?.max(1e-9))
    }

    fn beats_restart(&self) -> Option<bool> {
        Some(self.measured_ms? < self.restart_ms?)
    }
}

pub async fn run(
    setup: &Setup<'_>,
    args: &BenchArgs,
    queries: &[QueryFile],
    title: &str,
) -> Result<(), BenchError> {
    let scripts = read_scripts(queries)?;
    let bench = Bench {
        data: setup.data.clone(),
        partitions: setup.threads,
        runs: setup.runs.max(1) as usize,
        timeout: setup.timeout,
    };
    let started = Instant::now();
    eprintln!(
        "{title}: migration, {} queries, {} partitions per worker, {} runs per figure",
        scripts.len(),
        bench.partitions,
        bench.counted()
    );
    let mut rows = Vec::new();
    if args.zero_only {
        for (name, script) in &scripts {
            rows.extend(bench.symmetric(name, script, false).await?);
        }
    } else if args.vacate_only {
        rows.extend(bench.local_only(&scripts).await?);
    } else {
        for (name, script) in &scripts {
            rows.extend(bench.symmetric(name, script, true).await?);
            rows.extend(bench.faster(name, script).await?);
        }
    }
    if !args.zero_only {
        rows.extend(bench.vacate(&scripts, &rows).await?);
    }
    let text = summary(title, &rows, Some(started.elapsed()));
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    let files = write(&args.results, args, title, &rows)?;
    println!("\nwrote {}", files.join(", "));
    Ok(())
}

/// Print the summary of the migration CSV at `path` (an earlier run's).
pub fn summarize(path: &Path, title: &str) -> Result<(), BenchError> {
    let rows = reread::read(path)?;
    let text = summary(title, &rows, None);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}

/// One run of a query file.
struct ScriptRun {
    ms: f64,
    answer: Answer,
    /// When its last statement started, ms after the first.
    last_started_ms: f64,
}

/// What every experiment shares.
struct Bench {
    data: PathBuf,
    partitions: usize,
    runs: usize,
    timeout: Duration,
}

impl Bench {
    /// Runs counted per figure: the first is a warm-up when there are more.
    fn counted(&self) -> usize {
        if self.runs > 1 { self.runs - 1 } else { 1 }
    }

    /// Experiment 4 for one query, and 1 when `boundaries`, on a fresh
    /// pair of identical workers (fresh, so the suspended states of one
    /// query never weigh on the next one's memory node).
    async fn symmetric(
        &self,
        name: &str,
        script: &str,
        boundaries: bool,
    ) -> Result<Vec<Row>, BenchError> {
        let p = self.partitions;
        let cluster = Cluster::start(&self.data, &[p, p]).await?;
        let mut out = Vec::new();
        let never = format!("skiff.migrate_after_pipelines = {NEVER}");
        let configs: [(&str, Vec<String>); 5] = [
            ("local", vec![]),
            ("zero_never", vec![never]),
            (
                "zero_snapshot",
                vec!["skiff.snapshot_every_pipelines = 1".into()],
            ),
            ("zero_cuts", vec!["skiff.mid_pipeline_cuts = true".into()]),
            (
                "zero_adaptive",
                vec!["skiff.adaptive_snapshots = true".into()],
            ),
        ];
        self.warm_up(&cluster, script).await;
        // Interleaved, so drift of a shared machine hits all alike.
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
        let mut answers: Vec<Option<Answer>> = vec![None; configs.len()];
        let mut errors: Vec<Option<String>> = vec![None; configs.len()];
        // Snapshots the adaptive runs took, and their bytes.
        let (mut adaptive_snapshots, mut adaptive_bytes) = (0, 0);
        for run in 0..self.runs {
            for (i, (kind, settings)) in configs.iter().enumerate() {
                match self.timed(&cluster, settings, script).await {
                    Ok((ms, answer)) => {
                        if run > 0 || self.runs == 1 {
                            times[i].push(ms);
                        }
                        answers[i] = Some(answer);
                    }
                    Err(e) => errors[i] = Some(e),
                }
                if *kind == "zero_adaptive"
                    && let Ok(record) = cluster.last_record().await
                {
                    adaptive_snapshots += record.snapshots;
                    adaptive_bytes += record.state_bytes;
                }
            }
        }
        let local_ms = median(&times[0]);
        let local_rows = answers[0].take();
        let record = cluster.last_record().await.ok();
        let total = record.as_ref().map(|r| r.pipelines_total);
        eprintln!(
            "{name}: local {} ms, never-firing trigger {} ms, snapshots {} ms, \
             cut points {} ms, adaptive snapshots {} ms ({adaptive_snapshots} in {} runs), \
             {} pipelines",
            fmt(local_ms),
            fmt(median(&times[1])),
            fmt(median(&times[2])),
            fmt(median(&times[3])),
            fmt(median(&times[4])),
            self.runs,
            total.map_or("?".into(), |t| t.to_string())
        );
        for (i, (kind, _)) in configs.iter().enumerate().skip(1) {
            let (rows_ok, wrong) = verdict(answers[i].as_ref(), local_rows.as_ref());
            let adaptive = *kind == "zero_adaptive";
            out.push(Row {
                kind,
                query: name.into(),
                pipelines_total: total,
                local_ms,
                measured_ms: median(&times[i]),
                rows: answers[i].as_ref().map(Answer::len),
                rows_ok,
                error: errors[i].clone().or_else(|| errors[0].clone()).or(wrong),
                // What the adaptive runs stored, all runs together.
                state_bytes: adaptive.then_some(adaptive_bytes),
                decision: if adaptive {
                    format!("{adaptive_snapshots} snapshots in {} runs", self.runs)
                } else {
                    String::new()
                },
                ..Row::default()
            });
        }
        out.push(Row {
            kind: "local",
            query: name.into(),
            pipelines_total: total,
            local_ms,
            measured_ms: local_ms,
            rows: local_rows.as_ref().map(Answer::len),
            error: errors[0].clone(),
            ..Row::default()
        });
        let Some(local) = local_ms.filter(|_| boundaries) else {
            return Ok(out);
        };
        let limit = total.map_or(MAX_BOUNDARIES, |t| t as usize + 1);
        for k in 0..limit.min(MAX_BOUNDARIES) {
            let Some(row) = self
                .boundary(
                    &cluster,
                    "symmetric",
                    name,
                    script,
                    k,
                    local,
                    local_rows.as_ref(),
                )
                .await
            else {
                break;
            };
            let restart = row.time_at_k_ms.map(|t| t + local);
            eprintln!(
                "{name} k={k}: progress {}, state {} B, migrated {} ms ({}), restart {} ms",
                row.progress
                    .map_or("-".into(), |p| format!("{:.0}%", p * 100.0)),
                row.state_bytes.unwrap_or(0),
                fmt(row.measured_ms),
                row.overhead_pct()
                    .map_or("-".into(), |p| format!("{p:+.1}%")),
                fmt(restart)
            );
            out.push(Row {
                pipelines_total: total,
                restart_ms: restart,
                ..row
            });
        }
        Ok(out)
    }

    /// Experiment 2 for one query: a 1-partition worker (registered first,
    /// so an idle cluster places queries there) and a 2-partition one.
    async fn faster(&self, name: &str, script: &str) -> Result<Vec<Row>, BenchError> {
        let cluster = Cluster::start(&self.data, &[1, 2]).await?;
        let slow = cluster
            .workers
            .first()
            .map(|w| w.0.clone())
            .unwrap_or_default();
        self.warm_up(&cluster, script).await;
        let mut local = Vec::new();
        let mut local_rows = None;
        let mut notes = Vec::new();
        for run in 0..self.runs {
            match self.timed(&cluster, &[], script).await {
                Ok((ms, answer)) => {
                    if run > 0 || self.runs == 1 {
                        local.push(ms);
                    }
                    local_rows = Some(answer);
                }
                Err(e) => notes.push(e),
            }
        }
        if let Ok(record) = cluster.last_record().await
            && record.worker != slow
        {
            notes.push(format!(
                "local run placed on {} not the slow worker",
                record.worker
            ));
        }
        let Some(local_ms) = median(&local) else {
            return Ok(vec![Row {
                kind: "faster",
                query: name.into(),
                error: notes.first().cloned(),
                ..Row::default()
            }]);
        };
        // A migration after 0 pipelines ships no state: the whole query on
        // the fast worker, the "restart there" baseline.
        let mut fast = Vec::new();
        for _ in 0..self.counted() {
            let settings = ["skiff.migrate_after_pipelines = 0".to_string()];
            if let Ok((ms, _)) = self.timed(&cluster, &settings, script).await {
                fast.push(ms);
            }
        }
        let fast_ms = median(&fast);
        eprintln!(
            "{name}: on 1 partition {local_ms:.1} ms, on 2 partitions {} ms",
            fmt(fast_ms)
        );
        let mut out = Vec::new();
        for k in 0..MAX_BOUNDARIES {
            let Some(row) = self
                .boundary(
                    &cluster,
                    "faster",
                    name,
                    script,
                    k,
                    local_ms,
                    local_rows.as_ref(),
                )
                .await
            else {
                break;
            };
            let restart = row.time_at_k_ms.zip(fast_ms).map(|(t, f)| t + f);
            out.push(Row {
                restart_ms: restart,
                error: row.error.clone().or_else(|| notes.first().cloned()),
                ..row
            });
        }
        Ok(out)
    }

    /// Migrate after `k` pipelines; the time at `k` is what the source ran
    /// before it paused. None once `k` is past the last boundary.
    #[allow(clippy::too_many_arguments)]
    async fn boundary(
        &self,
        cluster: &Cluster,
        kind: &'static str,
        name: &str,
        script: &str,
        k: usize,
        local_ms: f64,
        local_rows: Option<&Answer>,
    ) -> Option<Row> {
        let settings = [format!("skiff.migrate_after_pipelines = {k}")];
        let mut times = Vec::new();
        let mut row = Row {
            kind,
            query: name.into(),
            k: Some(k),
            local_ms: Some(local_ms),
            ..Row::default()
        };
        let mut ran = Vec::new();
        let mut reached = Vec::new();
        for _ in 0..self.counted() {
            // Boundaries are those of the last statement, where the trigger
            // applies; the statements before it count towards progress but
            // are not lost by a restart (it restarts the statement).
            let before_ms = match self.run_script(cluster, &settings, script, true).await {
                Ok(run) => {
                    times.push(run.ms);
                    row.rows = Some(run.answer.len());
                    let (ok, wrong) = verdict(Some(&run.answer), local_rows);
                    row.rows_ok = ok;
                    if wrong.is_some() {
                        row.error = wrong;
                    }
                    run.last_started_ms
                }
                Err(e) => {
                    row.error = Some(e);
                    break;
                }
            };
            match cluster.last_record().await {
                Ok(record) if record.migrations == 0 && record.restarts == 0 => return None,
                Ok(record) => {
                    row.pipelines_total = Some(record.pipelines_total);
                    row.state_bytes = Some(record.state_bytes);
                    if let Some(ms) = ran_ms(&record.decision) {
                        ran.push(ms);
                        reached.push(before_ms + ms);
                    }
                    row.decision = record.decision;
                }
                Err(e) => row.error = Some(e),
            }
        }
        if row.error.is_some() && times.is_empty() {
            return Some(row);
        }
        row.measured_ms = median(&times);
        // The source's own clock: how long the statement ran before it
        // paused at k, i.e. the work a restart at k would throw away.
        row.time_at_k_ms = median(&ran);
        row.progress = median(&reached).map(|ms| ms / local_ms.max(1e-9));
        Some(row)
    }

    /// Run `script` once where it is placed and once moved to the other
    /// worker before its first pipeline, uncounted: each worker process has
    /// read the files' metadata before anything is timed (otherwise the
    /// first migration pays for the target's cold caches).
    async fn warm_up(&self, cluster: &Cluster, script: &str) {
        let moved = ["skiff.migrate_after_pipelines = 0".to_string()];
        for settings in [&[][..], &moved[..]] {
            if let Err(e) = self.timed(cluster, settings, script).await {
                eprintln!("warm-up: {e}");
            }
        }
    }

    /// Run `script` on a connection of its own with `settings`: wall ms and
    /// rows of all its statements.
    async fn timed(
        &self,
        cluster: &Cluster,
        settings: &[String],
        script: &str,
    ) -> Result<(f64, Answer), String> {
        let run = self.run_script(cluster, settings, script, false).await?;
        Ok((run.ms, run.answer))
    }

    /// Run `script` on a connection of its own, `settings` applying to its
    /// last statement only when `last_only` (a trigger then fires once per
    /// run, in the last statement, not once per statement).
    async fn run_script(
        &self,
        cluster: &Cluster,
        settings: &[String],
        script: &str,
        last_only: bool,
    ) -> Result<ScriptRun, String> {
        let client = PgConn::connect(cluster.pg, &Credentials::default()).await?;
        let statements = split_statements(script);
        let last = statements.len().saturating_sub(1);
        let adaptive_named = settings
            .iter()
            .any(|s| s.starts_with("skiff.adaptive_snapshots"));
        let off = (!adaptive_named).then(|| ADAPTIVE_OFF.to_string());
        let set = async |client: &PgConn| {
            for setting in off.iter().chain(settings) {
                client.rows(&format!("SET {setting}")).await?;
            }
            Ok::<_, String>(())
        };
        if !last_only {
            set(&client).await?;
        }
        let start = Instant::now();
        let run = async {
            let mut answer = Answer::default();
            let mut last_started_ms = 0.0;
            for (i, statement) in statements.iter().enumerate() {
                if i == last {
                    if last_only {
                        set(&client).await?;
                    }
                    last_started_ms = start.elapsed().as_secs_f64() * 1000.0;
                }
                answer.extend(client.rows(statement).await?);
            }
            Ok::<_, String>((answer, last_started_ms))
        };
        let (answer, last_started_ms) = tokio::time::timeout(self.timeout, run)
            .await
            .map_err(|_| format!("timed out after {:?}", self.timeout))??;
        Ok(ScriptRun {
            ms: start.elapsed().as_secs_f64() * 1000.0,
            answer,
            last_started_ms,
        })
    }

    /// One local run of each script (after a warm-up), for `vacate` to
    /// pick its mix from.
    async fn local_only(&self, scripts: &[(String, String)]) -> Result<Vec<Row>, BenchError> {
        let cluster = Cluster::start(&self.data, &[self.partitions]).await?;
        let mut out = Vec::with_capacity(scripts.len());
        for (name, script) in scripts {
            if let Err(e) = self.timed(&cluster, &[], script).await {
                eprintln!("{name}: warm-up: {e}");
            }
            let (local_ms, answer, error) = match self.timed(&cluster, &[], script).await {
                Ok((ms, answer)) => (Some(ms), Some(Arc::new(answer)), None),
                Err(e) => (None, None, Some(e)),
            };
            eprintln!("{name}: local {} ms", fmt(local_ms));
            out.push(Row {
                kind: "local",
                query: name.clone(),
                local_ms,
                measured_ms: local_ms,
                rows: answer.as_ref().map(|a| a.len()),
                answer,
                error,
                ..Row::default()
            });
        }
        Ok(out)
    }

    /// Experiment 3: vacate a worker running 1..8 long queries.
    async fn vacate(
        &self,
        scripts: &[(String, String)],
        measured: &[Row],
    ) -> Result<Vec<Row>, BenchError> {
        // The longest single-statement queries (a view-creating script
        // would collide with itself when run concurrently).
        let mut mix: Vec<(&str, &str, f64, Option<Arc<Answer>>)> = measured
            .iter()
            .filter(|r| r.kind == "local" && r.error.is_none())
            .filter_map(|r| {
                let script = &scripts.iter().find(|(n, _)| *n == r.query)?.1;
                (split_statements(script).len() == 1).then_some((
                    r.query.as_str(),
                    script.as_str(),
                    r.local_ms?,
                    r.answer.clone(),
                ))
            })
            .collect();
        mix.sort_by(|a, b| b.2.total_cmp(&a.2));
        mix.truncate(3);
        if mix.is_empty() {
            eprintln!("vacate: no query to run");
            return Ok(Vec::new());
        }
        let names: Vec<&str> = mix.iter().map(|m| m.0).collect();
        let shortest = mix.iter().map(|m| m.2).fold(f64::MAX, f64::min);
        eprintln!("vacate: mixes of {}", names.join(", "));
        let mut cluster = Cluster::start(&self.data, &[self.partitions]).await?;
        let mut out = Vec::new();
        for n in VACATE_CONCURRENCY {
            // A single run is a smoke run: two drains per mode.
            let reps = if self.runs == 1 { 2 } else { VACATE_REPS };
            for (rep, how) in (0..reps).flat_map(|r| VACATE_MODES.map(|m| (r, m))) {
                let delay = shortest * n as f64 * VACATE_AT[rep % VACATE_AT.len()];
                let row = self
                    .vacate_once(&mut cluster, &mix, n, rep, delay, how)
                    .await?;
                eprintln!(
                    "vacate {n} queries, rep {rep}: {} ms ({}), server {} ms, rows ok {}{}",
                    fmt(row.vacate_ms),
                    row.vacate_how,
                    fmt(row.server_vacate_ms),
                    row.rows_ok.unwrap_or(false),
                    row.error
                        .as_ref()
                        .map_or(String::new(), |e| format!(", {e}"))
                );
                out.push(row);
            }
        }
        Ok(out)
    }

    /// One drain in mode `how`: `n` queries start on the cluster's only
    /// open worker, a fresh worker joins, and after `delay_ms` the first one
    /// is drained.
    async fn vacate_once(
        &self,
        cluster: &mut Cluster,
        mix: &[(&str, &str, f64, Option<Arc<Answer>>)],
        n: usize,
        rep: usize,
        delay_ms: f64,
        how: &'static str,
    ) -> Result<Row, BenchError> {
        let source = cluster
            .workers
            .last()
            .map(|w| w.0.clone())
            .ok_or_else(|| BenchError::Data("the cluster has no worker".into()))?;
        let mut row = Row {
            kind: "vacate",
            query: mix
                .iter()
                .cycle()
                .take(n)
                .map(|m| m.0)
                .collect::<Vec<_>>()
                .join("+"),
            concurrency: Some(n),
            rep: Some(rep),
            ..Row::default()
        };
        let start = Instant::now();
        let mut clients = tokio::task::JoinSet::new();
        let ended = Arc::new(AtomicUsize::new(0));
        for (name, script, _, rows) in mix.iter().cycle().take(n) {
            let pg = cluster.pg;
            let (script, expected, name) = (script.to_string(), rows.clone(), name.to_string());
            let timeout = self.timeout;
            let ended = Arc::clone(&ended);
            clients.spawn(async move {
                let client = PgConn::connect(pg, &Credentials::default()).await?;
                if how == "cut" {
                    client.rows("SET skiff.mid_pipeline_cuts = true").await?;
                }
                let rows = tokio::time::timeout(timeout, client.rows(&script)).await;
                let at = Instant::now();
                ended.fetch_add(1, Ordering::SeqCst);
                let rows = Answer(rows.map_err(|_| format!("{name} timed out"))??);
                match expected {
                    Some(expected) => rows.check(&expected).map_err(|e| format!("{name}: {e}")),
                    None => Ok(()),
                }
                .map(|()| at)
            });
        }
        // All of them must be on the source before the target exists.
        let on_source = format!(
            "SELECT count(*) FROM skiff.queries WHERE worker = '{source}' \
             AND state = 'running' AND sql NOT LIKE '%skiff.%'"
        );
        while count(&cluster.rows(&on_source).await.map_err(BenchError::Data)?) < n {
            // Short queries may end before the last one starts.
            if start.elapsed() > self.timeout || ended.load(Ordering::SeqCst) > 0 {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        cluster.add_worker(self.partitions).await?;
        let wait = Duration::from_secs_f64(delay_ms / 1000.0).saturating_sub(start.elapsed());
        tokio::time::sleep(wait).await;
        let drained = Instant::now();
        row.vacate_how = how;
        if let Err(e) = cluster
            .rows(&format!(
                "SELECT skiff.drain('{source}', '{}')",
                if how == "cut" { "abort" } else { how }
            ))
            .await
        {
            row.error = Some(e);
        }
        let vacate_sql = format!("SELECT vacate_ms FROM skiff.workers WHERE address = '{source}'");
        loop {
            let left = count(&cluster.rows(&on_source).await.map_err(BenchError::Data)?);
            if row.vacate_ms.is_none() && left == 0 {
                row.vacate_ms = Some(drained.elapsed().as_secs_f64() * 1000.0);
            }
            let server = cluster.rows(&vacate_sql).await.ok();
            row.server_vacate_ms = server
                .as_ref()
                .and_then(|r| r.first()?.first()?.as_deref()?.parse().ok());
            let done = row.vacate_ms.is_some() && row.server_vacate_ms.is_some();
            if done || drained.elapsed() > self.timeout {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let mut failures = Vec::new();
        let mut last_row = None;
        while let Some(done) = clients.join_next().await {
            match done {
                Ok(Ok(at)) => last_row = last_row.max(Some(at)),
                Ok(Err(e)) => failures.push(e),
                Err(e) => failures.push(format!("client task: {e}")),
            }
        }
        row.rows_ok = Some(failures.is_empty());
        // Not when the drain failed, nor when every query ended before it.
        if failures.is_empty() && row.error.is_none() {
            row.finished_ms = last_row
                .filter(|at| *at >= drained)
                .map(|at| (at - drained).as_secs_f64() * 1000.0);
        }
        if let Some(first) = failures.into_iter().next() {
            row.error = row.error.or(Some(first));
        }
        cluster.kill_worker(&source).await;
        Ok(row)
    }
}

/// `migrated after 2/5 pipelines at 120 ms: ...` -> 120.
fn ran_ms(decision: &str) -> Option<f64> {
    let rest = &decision[decision.find(" pipelines at ")? + " pipelines at ".len()..];
    rest.split(' ').next()?.parse().ok()
}

fn median(values: &[f64]) -> Option<f64> {
    super::report::stats(values).map(|s| s.median_ms)
}

/// Whether `answer` is `expected`'s (`rows_ok`), and what is wrong with it
/// when not; nothing when either is missing.
fn verdict(answer: Option<&Answer>, expected: Option<&Answer>) -> (Option<bool>, Option<String>) {
    match answer.zip(expected).map(|(a, e)| a.check(e)) {
        Some(Ok(())) => (Some(true), None),
        Some(Err(e)) => (Some(false), Some(format!("wrong answer: {e}"))),
        None => (None, None),
    }
}

fn count(rows: &Rows) -> usize {
    rows.first()
        .and_then(|r| r.first()?.as_deref()?.parse().ok())
        .unwrap_or(0)
}

fn fmt(ms: Option<f64>) -> String {
    ms.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
}

/// What `skiff.queries` says about the latest query that ran on a worker.
struct Record {
    worker: String,
    pipelines_total: u64,
    migrations: u64,
    restarts: u64,
    state_bytes: u64,
    decision: String,
    snapshots: u64,
}

/// A process the cluster owns; killed on drop.
struct Owned(Child);

impl Drop for Owned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cluster of separately started processes on loopback.
struct Cluster {
    exe: PathBuf,
    pg: SocketAddr,
    cluster: String,
    admin: PgConn,
    /// (address, process), in the order they registered.
    workers: Vec<(String, Owned)>,
    _memnode: Owned,
    /// Dropped last: the nodes go first, then the coordinator.
    _coordinator: launch::Coordinator,
    /// The memory node's state directory, removed with the cluster (its
    /// process is killed, so it cannot clean up itself).
    _state_dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(data: &Path, partitions: &[usize]) -> Result<Self, BenchError> {
        let fail = |e: String| BenchError::Data(format!("cannot start the cluster: {e}"));
        let exe = std::env::current_exe().map_err(|e| fail(e.to_string()))?;
        let mut command = child(&exe, "coordinator");
        command
            .arg("--data")
            .arg(data)
            .args(["--pg-addr", "127.0.0.1:0", "--flight-addr", "127.0.0.1:0"])
            .args(["--http-addr", "127.0.0.1:0"])
            .args(["--cluster-addr", "127.0.0.1:0"])
            // The experiments migrate queries with the test hooks.
            .arg("--fault-injection");
        // Spawned here, on a runtime thread that outlives the cluster (the
        // process dies with the thread that spawned it); waited for on a
        // blocking one.
        let starting = launch::Coordinator::spawn(&mut command).map_err(fail)?;
        let coordinator = tokio::task::spawn_blocking(move || starting.ready(START_TIMEOUT))
            .await
            .map_err(|e| fail(e.to_string()))?
            .map_err(fail)?;
        let pg = coordinator.pg().map_err(fail)?;
        let cluster_addr = coordinator.at.cluster.to_string();
        let admin = PgConn::connect(pg, &Credentials::default())
            .await
            .map_err(fail)?;
        let state_dir = tempfile::tempdir().map_err(|e| fail(e.to_string()))?;
        let mut memnode = child(&exe, "memnode");
        memnode.arg("--coordinator").arg(&cluster_addr);
        memnode.arg("--state-dir").arg(state_dir.path());
        let memnode = Owned(memnode.spawn().map_err(|e| fail(e.to_string()))?);
        let mut cluster = Self {
            exe,
            pg,
            cluster: cluster_addr,
            admin,
            workers: Vec::new(),
            _memnode: memnode,
            _coordinator: coordinator,
            _state_dir: state_dir,
        };
        for &p in partitions {
            cluster.add_worker(p).await?;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        let memnodes =
            "SELECT count(*) FROM skiff.workers WHERE role = 'memnode' AND state = 'alive'";
        while count(&cluster.rows(memnodes).await.map_err(fail)?) < 1 {
            if Instant::now() > deadline {
                return Err(fail("the memory node did not register".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(cluster)
    }

    /// Start a worker with `partitions` and wait until it has registered.
    async fn add_worker(&mut self, partitions: usize) -> Result<String, BenchError> {
        let fail = |e: String| BenchError::Data(format!("cannot add a worker: {e}"));
        let live = "SELECT address FROM skiff.workers WHERE role = 'worker' AND state = 'alive'";
        let known: Vec<String> = self
            .rows(live)
            .await
            .map_err(fail)?
            .into_iter()
            .filter_map(|r| r.into_iter().next().flatten())
            .collect();
        let mut command = child(&self.exe, "worker");
        command
            .arg("--coordinator")
            .arg(&self.cluster)
            .arg("--partitions")
            .arg(partitions.to_string());
        let process = Owned(command.spawn().map_err(|e| fail(e.to_string()))?);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let now: Vec<String> = self
                .rows(live)
                .await
                .map_err(fail)?
                .into_iter()
                .filter_map(|r| r.into_iter().next().flatten())
                .collect();
            if let Some(addr) = now.into_iter().find(|a| !known.contains(a)) {
                self.workers.push((addr.clone(), process));
                return Ok(addr);
            }
            if Instant::now() > deadline {
                return Err(fail("it did not register".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kill the worker at `addr` and wait until the coordinator has seen
    /// it go: a query dispatched to it meanwhile could fail with 57P03
    /// (the coordinator fails a dead node's queries when it finds it dead).
    async fn kill_worker(&mut self, addr: &str) {
        self.workers.retain(|(a, _)| a != addr);
        let alive = format!(
            "SELECT count(*) FROM skiff.workers WHERE address = '{addr}' AND state = 'alive'"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.rows(&alive).await {
                Ok(rows) if count(&rows) == 0 => return,
                Err(_) => return,
                Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    async fn rows(&self, sql: &str) -> Result<Rows, String> {
        self.admin.rows(sql).await
    }

    async fn last_record(&self) -> Result<Record, String> {
        let rows = self
            .rows(
                "SELECT worker, pipelines_total, migrations, restarts, state_bytes, decision, \
                 snapshots FROM skiff.queries \
                 WHERE worker IS NOT NULL OR migrations > 0 OR restarts > 0 \
                 ORDER BY id DESC LIMIT 1",
            )
            .await?;
        let row = rows.first().ok_or("no query ran on a worker")?;
        let cell = |i: usize| row.get(i).cloned().flatten().unwrap_or_default();
        let number = |i: usize| cell(i).parse::<u64>().unwrap_or(0);
        Ok(Record {
            worker: cell(0),
            pipelines_total: number(1),
            migrations: number(2),
            restarts: number(3),
            state_bytes: number(4),
            decision: cell(5),
            snapshots: number(6),
        })
    }
}

/// A `skiff ROLE` child that dies with this process, logging warnings only.
fn child(exe: &Path, role: &str) -> Command {
    let mut command = launch::role(exe, role);
    command.env("SKIFF_LOG", "warn");
    command
}

/// Progress rounded to the nearest 10%, as the paper groups it.
fn decile(progress: f64) -> u32 {
    ((progress * 10.0).round().clamp(0.0, 10.0) as u32) * 10
}

fn mean(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values
        .into_iter()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Per progress decile: (count, mean measured/local, mean restart/local,
/// migrations faster than the restart).
fn by_progress(rows: &[&Row]) -> BTreeMap<u32, (usize, f64, f64, usize)> {
    let mut groups: BTreeMap<u32, Vec<&Row>> = BTreeMap::new();
    for row in rows {
        if let (Some(p), Some(_), Some(_)) = (row.progress, row.ratio(), row.restart_ratio()) {
            groups.entry(decile(p)).or_default().push(row);
        }
    }
    groups
        .into_iter()
        .map(|(d, g)| {
            let ratio = mean(g.iter().filter_map(|r| r.ratio())).unwrap_or(0.0);
            let restart = mean(g.iter().filter_map(|r| r.restart_ratio())).unwrap_or(0.0);
            let wins = g.iter().filter(|r| r.beats_restart() == Some(true)).count();
            (d, (g.len(), ratio, restart, wins))
        })
        .collect()
}

/// The smallest decile from which, in every decile, migrating is faster
/// on average than restarting.
fn beats_restart_from(groups: &BTreeMap<u32, (usize, f64, f64, usize)>) -> Option<u32> {
    let mut from = None;
    for (d, (_, ratio, restart, _)) in groups {
        if ratio < restart {
            from = from.or(Some(*d));
        } else {
            from = None;
        }
    }
    from
}

fn size_bucket(bytes: u64) -> &'static str {
    match bytes {
        b if b < 1 << 20 => "< 1 MB",
        b if b < 10 << 20 => "1-10 MB",
        b if b < SMALL_STATE => "10-50 MB",
        b if b < 1 << 30 => "50 MB-1 GB",
        _ => ">= 1 GB",
    }
}

const SIZE_BUCKETS: [&str; 5] = ["< 1 MB", "1-10 MB", "10-50 MB", "50 MB-1 GB", ">= 1 GB"];

fn summary(title: &str, rows: &[Row], took: Option<Duration>) -> String {
    let mut t = format!("\n{title}: query migration (client-side wall ms, medians)\n");
    let of = |kind: &str| -> Vec<&Row> { rows.iter().filter(|r| r.kind == kind).collect() };
    let symmetric = of("symmetric");
    t.push_str("\n1. Migration to an identical worker, per query and boundary k\n");
    t.push_str(&format!(
        "{:<6} {:>3} {:>6} {:>12} {:>9} {:>9} {:>9} {:>8} {:>6} {:>9}  {}\n",
        "query",
        "k",
        "prog",
        "state B",
        "local",
        "migrated",
        "overhead",
        "ovh %",
        "ratio",
        "restart",
        "beats restart"
    ));
    for r in &symmetric {
        t.push_str(&format!(
            "{:<6} {:>3} {:>6} {:>12} {:>9} {:>9} {:>9} {:>8} {:>6} {:>9}  {}{}\n",
            r.query,
            r.k.unwrap_or(0),
            r.progress
                .map_or("-".into(), |p| format!("{:.0}%", p * 100.0)),
            r.state_bytes.map_or("-".into(), |b| b.to_string()),
            fmt(r.local_ms),
            fmt(r.measured_ms),
            fmt(r.overhead_ms()),
            r.overhead_pct().map_or("-".into(), |p| format!("{p:+.1}")),
            r.ratio().map_or("-".into(), |p| format!("{p:.3}")),
            fmt(r.restart_ms),
            r.beats_restart()
                .map_or("-", |b| if b { "yes" } else { "no" }),
            note(r)
        ));
    }
    let small: Vec<f64> = symmetric
        .iter()
        .filter(|r| r.state_bytes.is_some_and(|b| b < SMALL_STATE))
        .filter_map(|r| r.overhead_pct())
        .collect();
    t.push_str(&format!(
        "\nmean overhead, states < 50 MB: {} over {} migrations (target <= 5%)\n",
        mean(small.iter().copied()).map_or("-".into(), |m| format!("{m:+.2}%")),
        small.len()
    ));
    t.push_str("overhead by state size: bucket, migrations, mean %, mean ms\n");
    for bucket in SIZE_BUCKETS {
        let group: Vec<&&Row> = symmetric
            .iter()
            .filter(|r| r.state_bytes.is_some_and(|b| size_bucket(b) == bucket))
            .collect();
        if group.is_empty() {
            continue;
        }
        t.push_str(&format!(
            "  {:<11} {:>4} {:>9} {:>9}\n",
            bucket,
            group.len(),
            mean(group.iter().filter_map(|r| r.overhead_pct()))
                .map_or("-".into(), |m| format!("{m:+.2}%")),
            fmt(mean(group.iter().filter_map(|r| r.overhead_ms())))
        ));
    }
    let groups = by_progress(&symmetric);
    t.push_str(&progress_table(&groups, "local"));
    t.push_str(&format!(
        "migration beats restart (on average) from {} progress on (target: from 30%)\n",
        beats_restart_from(&groups).map_or("no".into(), |d| format!("{d}%"))
    ));
    let faster = of("faster");
    t.push_str("\n2. Migration from a 1-partition worker to a 2-partition one\n");
    let groups = by_progress(&faster);
    t.push_str(&progress_table(&groups, "staying on the slow worker"));
    let wins = faster
        .iter()
        .filter(|r| r.ratio().is_some_and(|x| x < 1.0))
        .count();
    let with_ratio = faster.iter().filter(|r| r.ratio().is_some()).count();
    t.push_str(&format!(
        "faster than staying: {wins} of {with_ratio} migrations; mean migrated/slow {}\n",
        mean(faster.iter().filter_map(|r| r.ratio())).map_or("-".into(), |m| format!("{m:.3}"))
    ));
    t.push_str(&format!(
        "migration beats restarting on the fast worker (on average) from {} progress on\n",
        beats_restart_from(&groups).map_or("no".into(), |d| format!("{d}%"))
    ));
    let vacate = of("vacate");
    t.push_str("\n3. Vacating a worker (from the drain request until it holds no query)\n");
    t.push_str(
        "   skiff.drain(w, mode); client = polled skiff.queries, \
         server = skiff.workers.vacate_ms;\n   all done = from the drain request until \
         the last vacated query had its last row (median)\n",
    );
    t.push_str(
        "mode       queries  reps  median ms  min ms  max ms  server median ms  \
         all done ms  rows ok\n",
    );
    for how in VACATE_MODES {
        for n in VACATE_CONCURRENCY {
            let group: Vec<&&Row> = vacate
                .iter()
                .filter(|r| r.concurrency == Some(n) && r.vacate_how == how)
                .collect();
            if group.is_empty() {
                continue;
            }
            let ms: Vec<f64> = group.iter().filter_map(|r| r.vacate_ms).collect();
            let server: Vec<f64> = group.iter().filter_map(|r| r.server_vacate_ms).collect();
            let done: Vec<f64> = group.iter().filter_map(|r| r.finished_ms).collect();
            let ok = group.iter().filter(|r| r.rows_ok == Some(true)).count();
            t.push_str(&format!(
                "{:<10} {:>7} {:>5} {:>10} {:>7} {:>7} {:>17} {:>12} {:>5}/{}\n",
                how,
                n,
                group.len(),
                fmt(median(&ms)),
                fmt(ms.iter().copied().reduce(f64::min)),
                fmt(ms.iter().copied().reduce(f64::max)),
                fmt(median(&server)),
                fmt(median(&done)),
                ok,
                group.len()
            ));
        }
    }
    t.push_str("target: median <= 1000 ms with 8 queries\n");
    for r in vacate.iter().filter(|r| r.error.is_some()) {
        t.push_str(&format!(
            "  {} {} queries rep {}: {}\n",
            r.vacate_how,
            r.concurrency.unwrap_or(0),
            r.rep.unwrap_or(0),
            r.error.as_deref().unwrap_or_default()
        ));
    }
    t.push_str("\n4. Nothing migrates: sum of medians over the queries\n");
    for (kind, what, target) in [
        (
            "zero_never",
            "trigger that never fires",
            " (target <= 1.01)",
        ),
        ("zero_snapshot", "snapshot after every pipeline", ""),
        ("zero_cuts", "mid-pipeline cut points, never cut", ""),
        (
            "zero_adaptive",
            "adaptive snapshots (on by default)",
            " (target <= 1.02)",
        ),
    ] {
        let group: Vec<&Row> = of(kind)
            .into_iter()
            .filter(|r| r.local_ms.is_some() && r.measured_ms.is_some())
            .collect();
        if group.is_empty() {
            t.push_str(&format!("  {what}: not measured in this run\n"));
            continue;
        }
        let local: f64 = group.iter().filter_map(|r| r.local_ms).sum();
        let measured: f64 = group.iter().filter_map(|r| r.measured_ms).sum();
        t.push_str(&format!(
            "  {what}: {measured:.1} ms vs no trigger {local:.1} ms, ratio {:.3}{target}\n",
            measured / local.max(1e-9)
        ));
        if kind == "zero_adaptive" {
            let taken: u64 = group
                .iter()
                .filter_map(|r| r.decision.split(' ').next()?.parse::<u64>().ok())
                .sum();
            let bytes: u64 = group.iter().filter_map(|r| r.state_bytes).sum();
            t.push_str(&format!(
                "    {taken} snapshots in all runs, {} stored\n",
                human_bytes(bytes as f64)
            ));
        }
    }
    t.push_str(&judge::section(&symmetric));
    let failed: Vec<&Row> = rows.iter().filter(|r| r.kind != "vacate").collect();
    let failed: Vec<String> = failed
        .iter()
        .filter_map(|r| {
            Some(format!(
                "  {} {} {:?}: {}\n",
                r.kind,
                r.query,
                r.k,
                r.error.as_ref()?
            ))
        })
        .collect();
    if !failed.is_empty() {
        t.push_str(&format!("\n{} errors:\n", failed.len()));
        t.extend(failed);
    }
    let mismatched = rows.iter().filter(|r| r.rows_ok == Some(false)).count();
    t.push_str(&format!(
        "\nanswers (rows and values): {mismatched} mismatches"
    ));
    if let Some(took) = took {
        t.push_str(&format!("; took {:.0} s", took.as_secs_f64()));
    }
    t.push('\n');
    t
}

fn note(row: &Row) -> String {
    let mut note = String::new();
    if row.rows_ok == Some(false) {
        note.push_str("  !! rows");
    }
    if let Some(e) = &row.error {
        note.push_str(&format!("  error: {e}"));
    }
    note
}

fn progress_table(groups: &BTreeMap<u32, (usize, f64, f64, usize)>, against: &str) -> String {
    let mut t = format!(
        "by progress (nearest 10%): migrations, mean migrated/{against}, mean restart/{against}, \
         migrations beating restart\n"
    );
    for (d, (n, ratio, restart, wins)) in groups {
        t.push_str(&format!(
            "  {d:>3}% {n:>4} {ratio:>8.3} {restart:>8.3} {wins:>4}/{n}\n"
        ));
    }
    t
}

const CSV_HEADER: &str = "kind,query,k,pipelines_total,progress,state_bytes,local_ms,\
time_at_k_ms,measured_ms,overhead_ms,overhead_pct,ratio,restart_ms,beats_restart,\
concurrency,rep,vacate_ms,server_vacate_ms,vacate_how,rows,rows_ok,error,decision,finished_ms\n";

fn csv(rows: &[Row]) -> String {
    let mut text = String::from(CSV_HEADER);
    let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.3}"));
    let u = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    let b = |v: Option<bool>| v.map_or(String::new(), |v| v.to_string());
    let quote = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("\"{}\"", s.replace('"', "\"\""))
        }
    };
    for r in rows {
        let fields = [
            r.kind.to_string(),
            r.query.clone(),
            u(r.k.map(|k| k as u64)),
            u(r.pipelines_total),
            r.progress.map_or(String::new(), |p| format!("{p:.4}")),
            u(r.state_bytes),
            f(r.local_ms),
            f(r.time_at_k_ms),
            f(r.measured_ms),
            f(r.overhead_ms()),
            f(r.overhead_pct()),
            r.ratio().map_or(String::new(), |x| format!("{x:.4}")),
            f(r.restart_ms),
            b(r.beats_restart()),
            u(r.concurrency.map(|c| c as u64)),
            u(r.rep.map(|c| c as u64)),
            f(r.vacate_ms),
            f(r.server_vacate_ms),
            r.vacate_how.to_string(),
            u(r.rows),
            b(r.rows_ok),
            quote(r.error.as_deref().unwrap_or_default()),
            quote(&r.decision),
            f(r.finished_ms),
        ];
        text.push_str(&fields.join(","));
        text.push('\n');
    }
    text
}

fn write(
    dir: &Path,
    args: &BenchArgs,
    title: &str,
    rows: &[Row],
) -> Result<Vec<String>, BenchError> {
    let zero = if args.zero_only { "-zero" } else { "" };
    let stem = format!("{}-migration{zero}", results_stem(args));
    publish(dir, &stem, args.archive, csv(rows).as_bytes(), |png| {
        plot(png, title, rows)
    })
}

const BLUE: RGBColor = RGBColor(40, 100, 190);
const ORANGE: RGBColor = RGBColor(230, 120, 20);
const GREEN: RGBColor = RGBColor(90, 160, 90);

/// Four panels: migrated and restart runtimes by progress (identical and
/// faster target), overhead by state size, vacate latency by concurrency.
fn plot(path: &Path, title: &str, rows: &[Row]) -> Result<(), String> {
    super::plot::fonts()?;
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((2, 2));
    let of = |kind: &str| -> Vec<&Row> { rows.iter().filter(|r| r.kind == kind).collect() };
    progress_panel(
        &panels[0],
        &format!("{title}: to an identical worker"),
        &of("symmetric"),
        "runtime / local",
    )?;
    size_panel(
        &panels[1],
        &format!("{title}: overhead by state size"),
        &of("symmetric"),
    )?;
    progress_panel(
        &panels[2],
        &format!("{title}: 1 -> 2 partitions"),
        &of("faster"),
        "runtime / local on 1 partition",
    )?;
    vacate_panel(
        &panels[3],
        &format!("{title}: vacate latency"),
        &of("vacate"),
    )?;
    root.present().map_err(|e| e.to_string())
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn progress_panel(area: &Area, caption: &str, rows: &[&Row], y_desc: &str) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let points = |value: fn(&Row) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| Some((r.progress?.min(1.2) * 100.0, value(r)?)))
            .collect()
    };
    let migrated = points(Row::ratio);
    let restart = points(Row::restart_ratio);
    let y_max = migrated
        .iter()
        .chain(&restart)
        .map(|p| p.1)
        .fold(1.5, f64::max)
        .min(5.0);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..120.0, 0.0..y_max * 1.05)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("progress at the migration (% of the local runtime)")
        .y_desc(y_desc)
        .draw()
        .map_err(e)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 1.0), (120.0, 1.0)],
            BLACK.mix(0.4),
        )))
        .map_err(e)?;
    for (label, color, data) in [("migrated", ORANGE, &migrated), ("restart", BLUE, &restart)] {
        chart
            .draw_series(
                data.iter()
                    .map(|&(x, y)| Circle::new((x, y.min(y_max)), 3, color.filled())),
            )
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| Circle::new((x + 5, y), 4, color.filled()));
    }
    super::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

fn size_panel(area: &Area, caption: &str, rows: &[&Row]) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let points: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| Some(((r.state_bytes? as f64).max(1.0), r.overhead_pct()?)))
        .collect();
    let x_max = points.iter().map(|p| p.0).fold(1e6, f64::max) * 2.0;
    let y_max = points.iter().map(|p| p.1).fold(10.0, f64::max).min(200.0);
    let y_min = points.iter().map(|p| p.1).fold(-10.0, f64::min).max(-100.0);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d((1.0..x_max).log_scale(), y_min..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("state shipped (bytes, log)")
        .y_desc("migrated - local, % of local")
        .x_label_formatter(&|x| human_bytes(*x))
        .draw()
        .map_err(e)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(1.0, 0.0), (x_max, 0.0)],
            BLACK.mix(0.4),
        )))
        .map_err(e)?;
    chart
        .draw_series(
            points
                .iter()
                .map(|&(x, y)| Circle::new((x, y.clamp(y_min, y_max)), 3, ORANGE.filled())),
        )
        .map_err(e)?;
    Ok(())
}

fn human_bytes(bytes: f64) -> String {
    match bytes {
        b if b >= 1e9 => format!("{:.0} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.0} MB", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kB", b / 1e3),
        b => format!("{b:.0} B"),
    }
}

fn vacate_panel(area: &Area, caption: &str, rows: &[&Row]) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let points = |how: &str| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.vacate_how == how)
            .filter_map(|r| Some((r.concurrency? as f64, r.vacate_ms?)))
            .collect()
    };
    let y_max = rows
        .iter()
        .filter_map(|r| r.vacate_ms)
        .fold(1000.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..9.0, 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("concurrent queries on the drained worker")
        .y_desc("ms until the worker holds no query")
        .draw()
        .map_err(e)?;
    for (how, color) in VACATE_MODES.into_iter().zip([BLUE, GREEN, ORANGE]) {
        let points = points(how);
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 3, color.mix(0.4).filled())),
            )
            .map_err(e)?;
        let medians: Vec<(f64, f64)> = VACATE_CONCURRENCY
            .iter()
            .filter_map(|&n| {
                let ms: Vec<f64> = points
                    .iter()
                    .filter(|p| p.0 == n as f64)
                    .map(|p| p.1)
                    .collect();
                Some((n as f64, median(&ms)?))
            })
            .collect();
        chart
            .draw_series(std::iter::once(PathElement::new(
                medians,
                color.stroke_width(2),
            )))
            .map_err(e)?
            .label(format!("{how}: median (dots: each vacate)"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 12, y)], color.stroke_width(2))
            });
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 1000.0), (9.0, 1000.0)],
            RED.mix(0.5),
        )))
        .map_err(e)?;
    super::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_at_the_boundary_is_read_from_the_decision() {
        let d = "migrated after 2/5 pipelines at 120 ms: 10 B of state, paused in 17 ms";
        assert_eq!(ran_ms(d), Some(120.0));
        assert_eq!(ran_ms("suspended after 2/5 pipelines"), None);
    }

    #[test]
    fn progress_rounds_to_the_nearest_tenth() {
        assert_eq!(decile(0.04), 0);
        assert_eq!(decile(0.26), 30);
        assert_eq!(decile(0.95), 100);
        assert_eq!(decile(1.7), 100);
    }

    #[test]
    fn restart_is_beaten_from_the_first_decile_that_stays_ahead() {
        let groups = BTreeMap::from([
            (0, (1, 1.2, 1.0, 0)),
            (30, (1, 1.1, 1.3, 1)),
            (50, (1, 1.3, 1.2, 0)),
            (60, (1, 1.1, 1.6, 1)),
            (90, (1, 1.1, 1.9, 1)),
        ]);
        assert_eq!(beats_restart_from(&groups), Some(60));
        assert_eq!(beats_restart_from(&BTreeMap::new()), None);
    }
}
