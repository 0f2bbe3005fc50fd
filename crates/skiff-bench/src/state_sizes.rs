//! `skiff bench <benchmark> --state-sizes`: the paper's state-size figures
//! (Figures 3-6) and its on-demand vs full state separation comparison
//! (Figure 12), measured with Skiff's engine in this process.
//!
//! Owns the measurement, its table, CSV and PNG. For every query it runs
//! the plan once paused after each pipeline k (0 < k < pipelines; the result
//! pipeline never holds state), selects the state there with Algorithm 1
//! (`skiff_state::select`), extracts it (lz4 and uncompressed) and extracts
//! the output of the pipeline that just finished as full state separation
//! would; then runs the query once more unpaused, watching when each
//! pipeline finishes, to place every boundary in time. Unlike the timing
//! benchmark it runs no child processes: sizes do not depend on the process,
//! and pausing needs the execution in hand.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::common::runtime::SpawnedTask;
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_plan::SendableRecordBatchStream;
use futures::TryStreamExt;
use plotters::coord::Shift;
use plotters::prelude::*;
use skiff_engine::statement::split_statements;
use skiff_engine::store::PipelineStatus;
use skiff_engine::{Engine, EngineConfig, Pause, PipelineId, QueryExecution};
use skiff_state::{Compression, ExtractedState, extract, remaining_plan, select};

use crate::args::BenchArgs;
use crate::harness::{BenchError, QueryFile, Setup, progress_bar, publish, results_stem};
use crate::plot;

/// How often the unpaused run looks at the pipelines' status. A pipeline
/// seen running gets its exact finish time (start + elapsed); one that
/// started and finished between two looks is placed within this interval.
const POLL: Duration = Duration::from_millis(1);
/// Progress bins of the by-progress summaries (Figures 6 and 12).
const BINS: usize = 5;
const MIB: f64 = (1u64 << 20) as f64;
/// Extraction costs below this (in % of the runtime) sit on the floor of
/// the log-scale cost panel.
const PERCENT_FLOOR: f64 = 0.01;

/// What one boundary k of one query showed.
#[derive(Clone, Debug, Default)]
struct Boundary {
    k: usize,
    /// The pipelines finished at k, to place k in the unpaused run's time.
    finished: Vec<PipelineId>,
    /// Algorithm 1's choice with each output's rows as the store recorded
    /// them when its pipeline finished.
    state_outputs: Vec<(PipelineId, u64)>,
    /// Outputs the remaining plan reads (`None`: it could not be built).
    state_reads: Option<usize>,
    /// Rows of the extracted frames.
    state_rows: u64,
    /// `Selection::bytes`: the selected outputs in memory plus spilled.
    state_bytes: u64,
    shipped_lz4: u64,
    shipped_none: u64,
    /// lz4 bytes of only the outputs the remaining plan reads.
    shipped_reads_lz4: Option<u64>,
    extract_lz4: Duration,
    /// Full separation: every finished pipeline's output, written out once.
    full_rows: u64,
    full_bytes: u64,
    full_lz4: u64,
    /// Extraction time of every finished output so far (cumulative).
    full_extract_lz4: Duration,
    /// Full separation as the paper ran it (Fig. 12): the whole state
    /// extracted at every boundary so far, so outputs are extracted again
    /// while they stay in the state. Sums over boundaries 1..=k.
    every_state_bytes: u64,
    every_state_lz4: u64,
    every_state_extract_lz4: Duration,
    /// When the last of `finished` ended in the unpaused run, as a
    /// fraction of that run's time.
    progress_time: Option<f64>,
}

impl Boundary {
    fn progress(&self, pipelines: usize) -> f64 {
        self.k as f64 / pipelines.max(1) as f64
    }

    /// On-demand state over full separation's, in bytes (1 when full
    /// separation holds nothing either).
    fn ratio(&self) -> f64 {
        if self.full_bytes == 0 {
            return 1.0;
        }
        self.state_bytes as f64 / self.full_bytes as f64
    }
}

/// One measured statement of one query file.
#[derive(Debug, Default)]
struct QueryStates {
    query: String,
    pipelines: usize,
    /// Wall time of the unpaused run, planning excluded.
    runtime: Option<Duration>,
    boundaries: Vec<Boundary>,
    error: Option<String>,
}

impl QueryStates {
    fn failed(query: &str, error: String) -> Self {
        Self {
            query: query.to_string(),
            error: Some(error),
            ..Self::default()
        }
    }

    fn max_state(&self) -> Option<&Boundary> {
        self.boundaries.iter().max_by_key(|b| b.state_bytes)
    }

    /// The boundary nearest 50% of the pipelines (the earlier on a tie).
    fn at_half(&self) -> Option<&Boundary> {
        let distance = |b: &&Boundary| (b.progress(self.pipelines) - 0.5).abs();
        self.boundaries
            .iter()
            .min_by(|a, b| distance(a).total_cmp(&distance(b)))
    }
}

pub(super) async fn run(
    setup: &Setup<'_>,
    args: &BenchArgs,
    queries: &[QueryFile],
    title: &str,
) -> Result<(), BenchError> {
    let engine = open_engine(setup)
        .await
        .map_err(|e| BenchError::Data(format!("cannot open {}: {e}", setup.data.display())))?;
    let header = format!(
        "{title} state sizes: {} queries, {} partitions, in process, data {}\n",
        queries.len(),
        setup.threads,
        setup.data.display(),
    );
    eprint!("{header}");
    let measured = measure_all(&engine, setup.timeout, queries).await;
    let text = summary(&header, &measured);
    let mut out = std::io::stdout().lock();
    // Losing stdout (a closed pipe) must not lose the files below.
    let _ = out.write_all(text.as_bytes());
    let stem = format!("{}-state-sizes", results_stem(args));
    let csv = csv(&measured);
    let files = publish(&args.results, &stem, args.archive, csv.as_bytes(), |png| {
        draw(png, title, &measured)
    })?;
    let _ = writeln!(out, "\nwrote {}", files.join(", "));
    Ok(())
}

async fn open_engine(setup: &Setup<'_>) -> Result<Engine> {
    let config = EngineConfig {
        target_partitions: Some(setup.threads),
        memory_limit: setup.session.memory_limit,
        spill_dir: None,
        cache_memory: None,
    };
    let engine = Engine::new(&config)?;
    engine.register_data_dir(&setup.data).await?;
    Ok(engine)
}

async fn measure_all(
    engine: &Engine,
    timeout: Duration,
    queries: &[QueryFile],
) -> Vec<QueryStates> {
    let bar = progress_bar(queries.len() as u64);
    let mut all = Vec::new();
    for query in queries {
        bar.set_message(query.name.clone());
        let measured = match tokio::time::timeout(timeout, measure_file(engine, query)).await {
            Ok(Ok(measured)) => measured,
            Ok(Err(e)) => vec![QueryStates::failed(&query.name, one_line(&e))],
            Err(_) => vec![QueryStates::failed(
                &query.name,
                format!("timed out after {} s", timeout.as_secs()),
            )],
        };
        for states in &measured {
            let line = progress_line(states);
            // indicatif drops println on a hidden bar (stderr not a terminal).
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
        }
        all.extend(measured);
        bar.inc(1);
    }
    bar.finish_and_clear();
    all
}

fn one_line(e: &DataFusionError) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn progress_line(states: &QueryStates) -> String {
    if let Some(error) = &states.error {
        return format!("{}  FAILED ({error})", states.query);
    }
    let runtime = states
        .runtime
        .map_or("-".to_string(), |t| format!("{:.1} ms", ms(t)));
    let max = states.max_state().map_or("-".to_string(), |b| {
        format!("{} at {}/{}", bytes(b.state_bytes), b.k, states.pipelines)
    });
    format!(
        "{}  {} pipelines  {runtime}  max state {max}",
        states.query, states.pipelines
    )
}

/// Every statement of the file in order; those whose plan has a boundary
/// are measured (the others, DDL such as q15's view, just run).
async fn measure_file(engine: &Engine, query: &QueryFile) -> Result<Vec<QueryStates>> {
    let script = std::fs::read_to_string(&query.path)
        .map_err(|e| DataFusionError::Plan(format!("cannot read {}: {e}", query.path.display())))?;
    let mut measured = Vec::new();
    for statement in split_statements(&script) {
        let plan = engine.physical_plan(statement).await?;
        let execution = engine.start(plan)?;
        if execution.graph().len() < 2 {
            drain(execution.execute()?).await?;
            continue;
        }
        let mut states = QueryStates {
            query: query.name.clone(),
            pipelines: execution.graph().len(),
            ..QueryStates::default()
        };
        states.boundaries = sweep(&execution).await?;
        // Planned again: an execution runs once. The sweep warmed the
        // caches, so this run is not a cold one either.
        let execution = engine.start(engine.physical_plan(statement).await?)?;
        let timing = timed_run(&execution).await?;
        for boundary in &mut states.boundaries {
            boundary.progress_time = timing.fraction(&boundary.finished);
        }
        states.runtime = Some(timing.runtime);
        measured.push(states);
    }
    // Files with several queries (TPC-DS q14, q23, q24, q39) name each.
    if measured.len() > 1 {
        for (i, states) in measured.iter_mut().enumerate() {
            states.query = format!("{}.{}", query.name, i + 1);
        }
    }
    Ok(measured)
}

async fn drain(stream: SendableRecordBatchStream) -> Result<u64> {
    stream
        .try_fold(0u64, |rows, batch| async move {
            Ok(rows + batch.num_rows() as u64)
        })
        .await
}

fn join_error(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("query task: {e}"))
}

/// One run paused at every boundary in turn: raising the pause point lets
/// the same driver go on, so each query runs once however many boundaries
/// it has.
async fn sweep(execution: &Arc<QueryExecution>) -> Result<Vec<Boundary>> {
    let graph = Arc::clone(execution.graph());
    let pipelines = graph.len();
    execution.pause_after(1);
    // The result stream must be polled for the driver to run at all.
    let result = SpawnedTask::spawn(drain(execution.execute()?));
    let mut boundaries = Vec::with_capacity(pipelines - 1);
    let mut written: BTreeSet<PipelineId> = BTreeSet::new();
    let mut full_lz4 = 0;
    let mut full_extract_lz4 = Duration::ZERO;
    let mut failure = None;
    for k in 1..pipelines {
        execution.pause_after(k);
        if let Err(e) = wait_paused(execution, k).await {
            failure = Some(e);
            break;
        }
        let state = execution.state();
        let selection = select(&graph, &state)?;
        let store = execution.store();

        // What a migration ships: the remaining plan may read less than
        // Algorithm 1 selects (a build side that only fed a dynamic filter).
        let reads = remaining_plan(&graph, &selection.finished)
            .ok()
            .map(|plan| plan.reads);
        // The uncompressed extraction goes first, untimed: a first read of
        // an output was measurably slower than a repeat (TPC-H SF 1 q10 had
        // each output once cost more than the whole state every time, which
        // holds the same outputs and more), and that cost would fall on
        // whichever timed extraction came first. The newest output is
        // always in the state, so this warms all that is timed below.
        let shipped_none = extract(store, &selection.pipelines, Compression::None)
            .await?
            .bytes();

        // Full separation wrote each output out as its pipeline finished;
        // at a pause exactly the new ones are unwritten and all are live
        // (their readers have not run yet).
        let new: BTreeSet<PipelineId> = selection.finished.difference(&written).copied().collect();
        let started = Instant::now();
        let written_now = extract(store, &new, Compression::Lz4).await?.bytes();
        full_extract_lz4 += started.elapsed();
        full_lz4 += written_now;
        written.extend(new);

        // One extraction held at a time, each dropped once measured: at
        // SF 1 a state can be hundreds of megabytes.
        let started = Instant::now();
        let lz4 = extract(store, &selection.pipelines, Compression::Lz4).await?;
        let extract_lz4 = started.elapsed();
        let (state_rows, shipped_lz4) = (lz4.rows(), lz4.bytes());
        let shipped_reads_lz4 = reads.as_ref().map(|r| output_bytes(&lz4, r));
        drop(lz4);

        let mut boundary = Boundary {
            k,
            finished: selection.finished.iter().copied().collect(),
            state_reads: reads.as_ref().map(BTreeSet::len),
            state_rows,
            state_bytes: selection.bytes,
            shipped_lz4,
            shipped_none,
            shipped_reads_lz4,
            extract_lz4,
            full_lz4,
            full_extract_lz4,
            ..Boundary::default()
        };
        for (i, status) in state.status.iter().enumerate() {
            if let PipelineStatus::Finished { output, .. } = status {
                boundary.full_rows += output.rows;
                boundary.full_bytes += output.bytes();
                if selection.pipelines.contains(&PipelineId(i)) {
                    boundary.state_outputs.push((PipelineId(i), output.rows));
                }
            }
        }
        if let Some(previous) = boundaries.last() {
            let previous: &Boundary = previous;
            boundary.every_state_bytes = previous.every_state_bytes;
            boundary.every_state_lz4 = previous.every_state_lz4;
            boundary.every_state_extract_lz4 = previous.every_state_extract_lz4;
        }
        boundary.every_state_bytes += boundary.state_bytes;
        boundary.every_state_lz4 += boundary.shipped_lz4;
        boundary.every_state_extract_lz4 += boundary.extract_lz4;
        boundaries.push(boundary);
    }
    execution.resume();
    // The query's own error explains an early end better than the pause.
    result.join_unwind().await.map_err(join_error)??;
    match failure {
        Some(e) => Err(e),
        None => Ok(boundaries),
    }
}

/// Bytes of the frames of the outputs in `pipelines`.
fn output_bytes(state: &ExtractedState, pipelines: &BTreeSet<PipelineId>) -> u64 {
    state
        .outputs
        .iter()
        .filter(|o| pipelines.contains(&o.pipeline))
        .flat_map(|o| o.partitions.iter().flatten())
        .map(|f| f.bytes.len() as u64)
        .sum()
}

/// Wait for the driver to stop with `k` pipelines finished. Just after the
/// pause point was raised the driver may not have woken yet and still
/// reports the previous pause, so that one is waited out.
async fn wait_paused(execution: &QueryExecution, k: usize) -> Result<()> {
    loop {
        match execution.paused().await {
            Pause::Paused { finished } if finished == k => return Ok(()),
            Pause::Paused { finished } if finished < k => {
                tokio::time::sleep(Duration::from_micros(50)).await;
            }
            other => {
                return Err(DataFusionError::Execution(format!(
                    "paused after {k} of {} pipelines, the driver says {other:?}",
                    execution.graph().len()
                )));
            }
        }
    }
}

/// When each pipeline of an unpaused run finished, relative to its start.
struct Timing {
    runtime: Duration,
    finished_at: Vec<Option<Duration>>,
}

impl Timing {
    /// When the last of `pipelines` finished, as a fraction of the run.
    fn fraction(&self, pipelines: &[PipelineId]) -> Option<f64> {
        let mut last = Duration::ZERO;
        for p in pipelines {
            last = last.max((*self.finished_at.get(p.0)?)?);
        }
        Some((last.as_secs_f64() / self.runtime.as_secs_f64().max(1e-9)).min(1.0))
    }
}

async fn timed_run(execution: &Arc<QueryExecution>) -> Result<Timing> {
    let pipelines = execution.graph().len();
    let start = Instant::now();
    let result = SpawnedTask::spawn(drain(execution.execute()?));
    let mut watch = FinishWatch {
        start,
        last_look: start,
        started: vec![None; pipelines],
        finished_at: vec![None; pipelines],
    };
    let mut result = std::pin::pin!(result.join_unwind());
    let rows = loop {
        tokio::select! {
            rows = &mut result => break rows,
            () = tokio::time::sleep(POLL) => watch.look(&execution.store().status()),
        }
    };
    let runtime = start.elapsed();
    watch.look(&execution.store().status());
    rows.map_err(join_error)??;
    Ok(Timing {
        runtime,
        finished_at: watch.finished_at,
    })
}

struct FinishWatch {
    start: Instant,
    last_look: Instant,
    started: Vec<Option<Instant>>,
    finished_at: Vec<Option<Duration>>,
}

impl FinishWatch {
    fn look(&mut self, status: &[PipelineStatus]) {
        let now = Instant::now();
        for (i, status) in status.iter().enumerate() {
            match status {
                PipelineStatus::Running { started } => self.started[i] = Some(*started),
                PipelineStatus::Finished { elapsed, .. } if self.finished_at[i].is_none() => {
                    // Never seen running: it started after the last look.
                    let end = match self.started[i] {
                        Some(started) => started + *elapsed,
                        None => (self.last_look + *elapsed).min(now),
                    };
                    self.finished_at[i] = Some(end.saturating_duration_since(self.start));
                }
                _ => {}
            }
        }
        self.last_look = now;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `1.5 MiB`: binary units, as the memory pool counts.
fn bytes(n: u64) -> String {
    let n = n as f64;
    match n {
        _ if n >= (1u64 << 30) as f64 => format!("{:.2} GiB", n / (1u64 << 30) as f64),
        _ if n >= MIB => format!("{:.1} MiB", n / MIB),
        _ if n >= 1024.0 => format!("{:.1} KiB", n / 1024.0),
        _ => format!("{n:.0} B"),
    }
}

/// Nearest-rank percentile of sorted `values` (`q` in 0..=1).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Which of `BINS` equal progress bins `progress` (0..=1) falls in.
fn bin(progress: f64) -> usize {
    ((progress * BINS as f64) as usize).min(BINS - 1)
}

fn bin_label(i: usize) -> String {
    let width = 100 / BINS;
    format!("{}-{}%", i * width, (i + 1) * width)
}

/// Every boundary of every query that was measured, with its query.
fn all_boundaries(measured: &[QueryStates]) -> impl Iterator<Item = (&QueryStates, &Boundary)> {
    measured
        .iter()
        .flat_map(|q| q.boundaries.iter().map(move |b| (q, b)))
}

/// The text printed at the end: per query, then the distributions.
fn summary(header: &str, measured: &[QueryStates]) -> String {
    let mut text = format!("\n{header}\n");
    let _ = writeln!(
        text,
        "{:<8} {:>5} {:>10} {:>11} {:>6} {:>11} {:>11} {:>11} {:>8} {:>7} {:>7} {:>7}",
        "query",
        "pipes",
        "ms",
        "max state",
        "at",
        "state@50%",
        "max lz4",
        "full@end",
        "od/full",
        "od ext%",
        "full%",
        "every%",
    );
    for q in measured {
        if let Some(error) = &q.error {
            let _ = writeln!(text, "{:<8} FAILED: {error}", q.query);
            continue;
        }
        let (Some(max), Some(half), Some(last)) = (q.max_state(), q.at_half(), q.boundaries.last())
        else {
            let _ = writeln!(text, "{:<8} {:>5} (no boundary)", q.query, q.pipelines);
            continue;
        };
        let runtime = q.runtime.map_or(0.0, ms);
        let ratios = sorted(q.boundaries.iter().map(Boundary::ratio));
        let max_lz4 = q
            .boundaries
            .iter()
            .map(|b| b.shipped_lz4)
            .max()
            .unwrap_or(0);
        let od_overhead = q
            .boundaries
            .iter()
            .map(|b| ms(b.extract_lz4))
            .fold(0.0, f64::max);
        let _ = writeln!(
            text,
            "{:<8} {:>5} {:>10.1} {:>11} {:>6} {:>11} {:>11} {:>11} {:>8.3} \
             {:>7.1} {:>7.1} {:>7.1}",
            q.query,
            q.pipelines,
            runtime,
            bytes(max.state_bytes),
            format!("{}/{}", max.k, q.pipelines),
            bytes(half.state_bytes),
            bytes(max_lz4),
            bytes(last.full_bytes),
            percentile(&ratios, 0.5),
            percent(od_overhead, runtime),
            percent(ms(last.full_extract_lz4), runtime),
            percent(ms(last.every_state_extract_lz4), runtime),
        );
    }
    text.push_str(
        "\n(max state: Algorithm 1's state at its largest and the boundary k/pipelines; \
         state@50%: at the boundary nearest half the pipelines; max lz4: bytes extracted; \
         full@end: every output written by full separation; od/full: median over the \
         boundaries of on-demand bytes / full bytes; od ext%: largest on-demand lz4 \
         extraction, full%: all of full separation's (each output once), every%: the whole \
         state extracted at every boundary (the paper's full separation), in % of the \
         unpaused run)\n",
    );
    text.push_str(&overall(measured));
    text
}

fn percent(part_ms: f64, whole_ms: f64) -> f64 {
    if whole_ms <= 0.0 {
        return 0.0;
    }
    100.0 * part_ms / whole_ms
}

fn overall(measured: &[QueryStates]) -> String {
    let mut text = String::new();
    let boundaries: Vec<(&QueryStates, &Boundary)> = all_boundaries(measured).collect();
    let queries = measured.iter().filter(|q| q.error.is_none()).count();
    let failed = measured.len() - queries;
    let _ = writeln!(
        text,
        "\nOverall: {} states (boundaries) in {queries} queries{}",
        boundaries.len(),
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        }
    );
    if boundaries.is_empty() {
        return text;
    }
    let distribution = |name: &str, values: Vec<f64>, text: &mut String| {
        let _ = writeln!(
            text,
            "  {name:<28} p10 {:>10}  p50 {:>10}  p90 {:>10}  p99 {:>10}  max {:>10}  mean {:>10}",
            bytes(percentile(&values, 0.10) as u64),
            bytes(percentile(&values, 0.50) as u64),
            bytes(percentile(&values, 0.90) as u64),
            bytes(percentile(&values, 0.99) as u64),
            bytes(percentile(&values, 1.0) as u64),
            bytes(mean(&values) as u64),
        );
    };
    let states = sorted(boundaries.iter().map(|(_, b)| b.state_bytes as f64));
    distribution("state, in memory", states.clone(), &mut text);
    let lz4 = sorted(boundaries.iter().map(|(_, b)| b.shipped_lz4 as f64));
    distribution("state, shipped lz4", lz4, &mut text);
    let none = sorted(boundaries.iter().map(|(_, b)| b.shipped_none as f64));
    distribution("state, shipped uncompressed", none, &mut text);
    // Figure 4: a state-separating system that synchronizes after every
    // pipeline moves the sum of all states of a query.
    let totals = sorted(
        measured
            .iter()
            .filter(|q| !q.boundaries.is_empty())
            .map(|q| q.boundaries.iter().map(|b| b.state_bytes as f64).sum()),
    );
    distribution("sum of states per query", totals, &mut text);
    let count = |limit: f64| states.iter().filter(|s| **s < limit).count();
    let share = |n: usize| 100.0 * n as f64 / states.len() as f64;
    let under_1m = count(MIB);
    let under_100m = count(100.0 * MIB);
    let over_1g = states.len() - count(1024.0 * MIB);
    let _ = writeln!(
        text,
        "  states < 1 MiB: {under_1m} ({:.0}%), < 100 MiB: {under_100m} ({:.0}%), \
         >= 1 GiB: {over_1g}",
        share(under_1m),
        share(under_100m),
    );
    // Figure 3: how many pipeline outputs (blocking operators) a state holds.
    let outputs = sorted(boundaries.iter().map(|(_, b)| b.state_outputs.len() as f64));
    let single_small = boundaries
        .iter()
        .filter(|(_, b)| b.state_outputs.len() == 1 && (b.state_bytes as f64) < MIB)
        .count();
    let _ = writeln!(
        text,
        "  outputs per state: p50 {}  p90 {}  max {}; one output under 1 MiB: {:.0}% of states",
        percentile(&outputs, 0.5),
        percentile(&outputs, 0.9),
        percentile(&outputs, 1.0),
        share(single_small),
    );
    let lz4_total: u64 = boundaries.iter().map(|(_, b)| b.shipped_lz4).sum();
    let none_total: u64 = boundaries.iter().map(|(_, b)| b.shipped_none).sum();
    let memory_total: u64 = boundaries.iter().map(|(_, b)| b.state_bytes).sum();
    let _ = writeln!(
        text,
        "  shipped/in memory over all states: lz4 {:.3}, uncompressed {:.3}",
        ratio(lz4_total, memory_total),
        ratio(none_total, memory_total),
    );
    // Extraction writes each stored batch as its own IPC stream; a state
    // that ships far more than it holds is worth a look (see
    // bench/README.md on sliced view arrays).
    let blown_up: Vec<&(&QueryStates, &Boundary)> = boundaries
        .iter()
        .filter(|(_, b)| b.shipped_none > 2 * b.state_bytes.max(MIB as u64))
        .collect();
    if let Some((q, b)) = blown_up
        .iter()
        .max_by_key(|(_, b)| b.shipped_none / b.state_bytes.max(1))
    {
        let _ = writeln!(
            text,
            "  !! {} states over 1 MiB extract to more than twice their size in memory; \
             worst {} k={}: {} in memory, {} uncompressed, {} lz4",
            blown_up.len(),
            q.query,
            b.k,
            bytes(b.state_bytes),
            bytes(b.shipped_none),
            bytes(b.shipped_lz4),
        );
    }
    text.push_str(&by_progress(&boundaries));
    text
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        return 0.0;
    }
    a as f64 / b as f64
}

/// Figures 5, 6 and 12 as numbers: per progress bin, the mean state, the
/// mean state normalized to its query's largest, on-demand vs full bytes,
/// and extraction cost in % of the query's unpaused run.
fn by_progress(boundaries: &[(&QueryStates, &Boundary)]) -> String {
    let mut text = String::new();
    let mut rows = vec![ProgressBin::default(); BINS];
    for (q, b) in boundaries {
        let max = q.max_state().map_or(0, |m| m.state_bytes);
        let row = &mut rows[bin(b.progress(q.pipelines))];
        row.states += 1;
        row.state_bytes += b.state_bytes;
        row.full_bytes += b.full_bytes;
        row.normalized += if max > 0 {
            b.state_bytes as f64 / max as f64
        } else {
            0.0
        };
        row.ratio += b.ratio();
        let runtime = q.runtime.map_or(0.0, ms);
        if let Some(time) = b.progress_time {
            let row = &mut rows[bin(time)];
            row.timed += 1;
            row.od_overhead += percent(ms(b.extract_lz4), runtime);
            row.full_overhead += percent(ms(b.full_extract_lz4), runtime);
            row.every_overhead += percent(ms(b.every_state_extract_lz4), runtime);
        }
    }
    let _ = writeln!(
        text,
        "\nBy progress (pipelines finished / total; extraction cost by time progress):\n  \
         {:<8} {:>6} {:>11} {:>10} {:>11} {:>8} {:>10} {:>7} {:>9} {:>9} {:>9}",
        "progress",
        "states",
        "mean state",
        "norm/max",
        "mean full",
        "od/full",
        "sum od/ful",
        "timed",
        "od ext%",
        "full ext%",
        "every st%",
    );
    for (i, row) in rows.iter().enumerate() {
        let n = row.states.max(1) as f64;
        let t = row.timed.max(1) as f64;
        let _ = writeln!(
            text,
            "  {:<8} {:>6} {:>11} {:>10.3} {:>11} {:>8.3} {:>10.3} {:>7} {:>9.2} {:>9.2} {:>9.2}",
            bin_label(i),
            row.states,
            bytes((row.state_bytes as f64 / n) as u64),
            row.normalized / n,
            bytes((row.full_bytes as f64 / n) as u64),
            row.ratio / n,
            ratio(row.state_bytes, row.full_bytes),
            row.timed,
            row.od_overhead / t,
            row.full_overhead / t,
            row.every_overhead / t,
        );
    }
    let od: u64 = boundaries.iter().map(|(_, b)| b.state_bytes).sum();
    let full: u64 = boundaries.iter().map(|(_, b)| b.full_bytes).sum();
    let od_lz4: u64 = boundaries.iter().map(|(_, b)| b.shipped_lz4).sum();
    let full_lz4: u64 = boundaries.iter().map(|(_, b)| b.full_lz4).sum();
    let ratios = sorted(boundaries.iter().map(|(_, b)| b.ratio()));
    let _ = writeln!(
        text,
        "\nOn-demand vs full state separation: sum over all states of on-demand bytes / full \
         bytes {:.3} (lz4 shipped {:.3}); per state median {:.3}, mean {:.3}",
        ratio(od, full),
        ratio(od_lz4, full_lz4),
        percentile(&ratios, 0.5),
        mean(&ratios),
    );
    text
}

#[derive(Clone, Default)]
struct ProgressBin {
    states: usize,
    state_bytes: u64,
    full_bytes: u64,
    normalized: f64,
    ratio: f64,
    timed: usize,
    od_overhead: f64,
    full_overhead: f64,
    every_overhead: f64,
}

const CSV_HEADER: &str = "query,k,pipelines,progress_pipelines,progress_time,state_outputs,\
state_output_rows,state_reads,state_rows,state_bytes,shipped_lz4_bytes,shipped_none_bytes,\
shipped_reads_lz4_bytes,extract_lz4_ms,full_rows,full_bytes,full_lz4_bytes,\
full_extract_lz4_ms,every_state_bytes,every_state_lz4_bytes,every_state_extract_lz4_ms,\
runtime_ms,error";

/// One row per boundary; a failed query gets one row with its error.
fn csv(measured: &[QueryStates]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    let option = |v: Option<String>| v.unwrap_or_default();
    for q in measured {
        if let Some(error) = &q.error {
            let error = error.replace('"', "'");
            let _ = writeln!(out, "{},,,,,,,,,,,,,,,,,,,,,,\"{error}\"", q.query);
            continue;
        }
        let runtime = option(q.runtime.map(|t| format!("{:.3}", ms(t))));
        for b in &q.boundaries {
            // Pipeline ids and their rows, space-separated: no quoting needed.
            let outputs: Vec<String> = b.state_outputs.iter().map(|(p, _)| p.to_string()).collect();
            let rows: Vec<String> = b.state_outputs.iter().map(|(_, r)| r.to_string()).collect();
            let _ = writeln!(
                out,
                "{},{},{},{:.4},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{:.3},\
                 {},{},{:.3},{runtime},",
                q.query,
                b.k,
                q.pipelines,
                b.progress(q.pipelines),
                option(b.progress_time.map(|t| format!("{t:.4}"))),
                outputs.join(" "),
                rows.join(" "),
                option(b.state_reads.map(|n| n.to_string())),
                b.state_rows,
                b.state_bytes,
                b.shipped_lz4,
                b.shipped_none,
                option(b.shipped_reads_lz4.map(|n| n.to_string())),
                ms(b.extract_lz4),
                b.full_rows,
                b.full_bytes,
                b.full_lz4,
                ms(b.full_extract_lz4),
                b.every_state_bytes,
                b.every_state_lz4,
                ms(b.every_state_extract_lz4),
            );
        }
    }
    out
}

const PANEL_WIDTH_PX: u32 = 760;
const PANEL_HEIGHT_PX: u32 = 440;
const BLUE: RGBColor = RGBColor(40, 100, 190);
const ORANGE: RGBColor = RGBColor(230, 120, 20);
const GREEN: RGBColor = RGBColor(60, 150, 60);
const RED_DARK: RGBColor = RGBColor(180, 30, 30);

/// What an axis's values are: plain numbers, or log10 of bytes or of a
/// percentage (plotted linearly, labelled as sizes or percentages).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    LogBytes,
    LogPercent,
}

/// How a series is drawn.
enum Mark {
    Points,
    Line,
}

struct Series {
    label: String,
    color: RGBColor,
    mark: Mark,
    points: Vec<(f64, f64)>,
}

/// One panel: axes, then every series, then the legend.
struct Panel<'a> {
    caption: String,
    x_desc: &'a str,
    y_desc: &'a str,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    /// Axes given in log10(bytes) label their ticks as sizes.
    x_scale: Scale,
    y_scale: Scale,
    x_integer: bool,
    series: Vec<Series>,
}

fn log_bytes(n: u64) -> f64 {
    (n.max(1) as f64).log10()
}

/// Tick labels: log10(bytes) axes in decimal units, so that the powers of
/// ten plotters ticks at read as round sizes (10 kB, 1 MB).
fn tick(value: f64, scale: Scale) -> String {
    if scale == Scale::LogPercent {
        let percent = 10f64.powf(value);
        return if percent >= 0.95 {
            format!("{percent:.0}%")
        } else {
            format!("{percent:.2}%")
        };
    }
    if scale == Scale::LogBytes {
        let n = 10f64.powf(value);
        let (scaled, unit) = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")]
            .into_iter()
            .find(|(scale, _)| n >= *scale * 0.999)
            .map_or((n, "B"), |(scale, unit)| (n / scale, unit));
        return if scaled >= 9.95 || (scaled - scaled.round()).abs() < 0.05 {
            format!("{scaled:.0} {unit}")
        } else {
            format!("{scaled:.1} {unit}")
        };
    }
    if value.abs() >= 10.0 || value == value.round() {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

impl Panel<'_> {
    fn draw(&self, area: &DrawingArea<BitMapBackend<'_>, Shift>) -> Result<(), String> {
        let err = |e: DrawingAreaErrorKind<_>| e.to_string();
        let mut chart = ChartBuilder::on(area)
            .caption(&self.caption, ("sans-serif", 17))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(self.x.clone(), self.y.clone())
            .map_err(err)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE.mix(0.0))
            .x_desc(self.x_desc)
            .y_desc(self.y_desc)
            .x_label_formatter(&|v: &f64| {
                // Counts on the x axis: no tick between two bars.
                if self.x_integer && (v - v.round()).abs() > 1e-6 {
                    return String::new();
                }
                tick(*v, self.x_scale)
            })
            .y_label_formatter(&|v: &f64| tick(*v, self.y_scale))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        for series in &self.series {
            let color = series.color;
            let drawn = match series.mark {
                Mark::Points => chart
                    .draw_series(
                        series
                            .points
                            .iter()
                            .map(|p| Circle::new(*p, 2, color.mix(0.55).filled())),
                    )
                    .map_err(err)?,
                Mark::Line => chart
                    .draw_series(std::iter::once(PathElement::new(
                        series.points.clone(),
                        color.stroke_width(2),
                    )))
                    .map_err(err)?,
            };
            drawn.label(series.label.as_str()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
            });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// `values` as a CDF: (value, fraction of values at most it).
fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, (i + 1) as f64 / n))
        .collect()
}

/// Mean of `points`' y per progress bin, at the bins' centres.
fn bin_means(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut sums = [(0.0, 0usize); BINS];
    for (x, y) in points {
        let slot = &mut sums[bin(*x)];
        slot.0 += y;
        slot.1 += 1;
    }
    sums.iter()
        .enumerate()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(i, (sum, n))| ((i as f64 + 0.5) / BINS as f64, sum / *n as f64))
        .collect()
}

fn range_of(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return 0.0..1.0;
    }
    let pad = ((hi - lo) * 0.05).max(0.1);
    (lo - pad)..(hi + pad)
}

/// Six panels: the size distribution (Figs. 3/4), outputs per state
/// (Fig. 3), size by progress (Fig. 5), size normalized to each query's
/// largest (Fig. 6), on-demand/full bytes (Fig. 12's sizes) and extraction
/// cost by time progress (Fig. 12).
fn draw(path: &Path, title: &str, measured: &[QueryStates]) -> Result<(), String> {
    plot::fonts()?;
    let root =
        BitMapBackend::new(path, (2 * PANEL_WIDTH_PX, 3 * PANEL_HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((3, 2));
    let boundaries: Vec<(&QueryStates, &Boundary)> = all_boundaries(measured).collect();
    for (area, panel) in areas.iter().zip(panels(title, &boundaries, measured)) {
        panel.draw(area)?;
    }
    root.present().map_err(|e| e.to_string())
}

fn panels<'a>(
    title: &str,
    boundaries: &[(&QueryStates, &Boundary)],
    measured: &[QueryStates],
) -> Vec<Panel<'a>> {
    let log_cdf = |values: Vec<f64>| cdf(&sorted(values.into_iter()));
    let memory = log_cdf(
        boundaries
            .iter()
            .map(|(_, b)| log_bytes(b.state_bytes))
            .collect(),
    );
    let lz4 = log_cdf(
        boundaries
            .iter()
            .map(|(_, b)| log_bytes(b.shipped_lz4))
            .collect(),
    );
    let totals = log_cdf(
        measured
            .iter()
            .filter(|q| !q.boundaries.is_empty())
            .map(|q| log_bytes(q.boundaries.iter().map(|b| b.state_bytes).sum()))
            .collect(),
    );
    let x = range_of(memory.iter().chain(&lz4).chain(&totals).map(|p| p.0));
    let distribution = Panel {
        caption: format!("{title}: state sizes (CDF)"),
        x_desc: "bytes (decimal units)",
        y_desc: "fraction",
        x,
        y: 0.0..1.05,
        x_scale: Scale::LogBytes,
        y_scale: Scale::Linear,
        x_integer: false,
        series: vec![
            series("state in memory", BLUE, Mark::Line, memory),
            series("state shipped (lz4)", GREEN, Mark::Line, lz4),
            series("sum of states per query", ORANGE, Mark::Line, totals),
        ],
    };

    // Figure 3: size against the number of outputs (blocking operators) a
    // state holds; points are spread around their integer so that equal
    // counts stay visible, and the median per count is drawn over them.
    let by_outputs: Vec<(f64, f64)> = boundaries
        .iter()
        .enumerate()
        .map(|(i, (_, b))| {
            let spread = ((i as f64 * 0.618_034).fract() - 0.5) * 0.5;
            (
                b.state_outputs.len() as f64 + spread,
                log_bytes(b.state_bytes),
            )
        })
        .collect();
    let most = boundaries
        .iter()
        .map(|(_, b)| b.state_outputs.len())
        .max()
        .unwrap_or(1);
    let medians: Vec<(f64, f64)> = (1..=most)
        .filter_map(|n| {
            let sizes = sorted(
                boundaries
                    .iter()
                    .filter(|(_, b)| b.state_outputs.len() == n)
                    .map(|(_, b)| log_bytes(b.state_bytes)),
            );
            (!sizes.is_empty()).then(|| (n as f64, percentile(&sizes, 0.5)))
        })
        .collect();
    let outputs = Panel {
        caption: format!("{title}: state size by pipeline outputs held"),
        x_desc: "pipeline outputs in the state",
        y_desc: "state bytes (decimal units)",
        x: 0.5..most as f64 + 0.5,
        y: range_of(by_outputs.iter().map(|p| p.1)),
        x_scale: Scale::Linear,
        y_scale: Scale::LogBytes,
        x_integer: true,
        series: vec![
            series("state", BLUE, Mark::Points, by_outputs),
            series("median", ORANGE, Mark::Line, medians),
        ],
    };

    let sizes: Vec<(f64, f64)> = boundaries
        .iter()
        .map(|(q, b)| (b.progress(q.pipelines), log_bytes(b.state_bytes)))
        .collect();
    let by_progress = Panel {
        caption: format!("{title}: state size by progress"),
        x_desc: "pipelines finished / total",
        y_desc: "state bytes (decimal units)",
        x: 0.0..1.0,
        y: range_of(sizes.iter().map(|p| p.1)),
        x_scale: Scale::Linear,
        y_scale: Scale::LogBytes,
        x_integer: false,
        series: vec![series(
            "state (one per boundary)",
            BLUE,
            Mark::Points,
            sizes,
        )],
    };

    let normalized: Vec<(f64, f64)> = boundaries
        .iter()
        .map(|(q, b)| {
            let max = q.max_state().map_or(0, |m| m.state_bytes);
            let share = if max > 0 {
                b.state_bytes as f64 / max as f64
            } else {
                0.0
            };
            (b.progress(q.pipelines), share)
        })
        .collect();
    let normalized_panel = Panel {
        caption: format!("{title}: state / query's largest, by progress"),
        x_desc: "pipelines finished / total",
        y_desc: "state / max state",
        x: 0.0..1.0,
        y: 0.0..1.05,
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        x_integer: false,
        series: vec![
            series("state", BLUE, Mark::Points, normalized.clone()),
            series("mean per 20%", ORANGE, Mark::Line, bin_means(&normalized)),
        ],
    };

    let ratios: Vec<(f64, f64)> = boundaries
        .iter()
        .map(|(q, b)| (b.progress(q.pipelines), b.ratio()))
        .collect();
    let full = Panel {
        caption: format!("{title}: on-demand / full state separation, bytes"),
        x_desc: "pipelines finished / total",
        y_desc: "on-demand bytes / full bytes",
        x: 0.0..1.0,
        y: 0.0..1.05,
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        x_integer: false,
        series: vec![
            series("state", BLUE, Mark::Points, ratios.clone()),
            series("mean per 20%", ORANGE, Mark::Line, bin_means(&ratios)),
        ],
    };

    let overhead = |extract: fn(&Boundary) -> Duration| -> Vec<(f64, f64)> {
        boundaries
            .iter()
            .filter_map(|(q, b)| {
                let runtime = ms(q.runtime?);
                Some((b.progress_time?, percent(ms(extract(b)), runtime)))
            })
            .collect()
    };
    // Log scale: a few extractions cost many times their query's runtime
    // and would flatten everything else; means are taken before the log.
    let log = |points: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        points
            .into_iter()
            .map(|(x, y)| (x, y.max(PERCENT_FLOOR).log10()))
            .collect()
    };
    let on_demand = overhead(|b| b.extract_lz4);
    let everything = overhead(|b| b.full_extract_lz4);
    let every_state = overhead(|b| b.every_state_extract_lz4);
    let lines = [
        log(bin_means(&on_demand)),
        log(bin_means(&everything)),
        log(bin_means(&every_state)),
    ];
    let (on_demand, everything) = (log(on_demand), log(everything));
    let y = range_of(
        on_demand
            .iter()
            .chain(&everything)
            .chain(lines.iter().flatten())
            .map(|p| p.1),
    );
    let [on_demand_mean, everything_mean, every_state_mean] = lines;
    let cost = Panel {
        caption: format!("{title}: extraction cost (lz4) by time progress"),
        x_desc: "time progress of the unpaused run",
        y_desc: "% of the query's runtime (log)",
        x: 0.0..1.0,
        y,
        x_scale: Scale::Linear,
        y_scale: Scale::LogPercent,
        x_integer: false,
        series: vec![
            series("on-demand", BLUE, Mark::Points, on_demand.clone()),
            series(
                "full, each output once",
                ORANGE,
                Mark::Points,
                everything.clone(),
            ),
            series("on-demand, mean", BLUE, Mark::Line, on_demand_mean),
            series(
                "full, each output once, mean",
                ORANGE,
                Mark::Line,
                everything_mean,
            ),
            series(
                "full, whole state at every boundary, mean",
                RED_DARK,
                Mark::Line,
                every_state_mean,
            ),
        ],
    };
    vec![
        distribution,
        outputs,
        by_progress,
        normalized_panel,
        full,
        cost,
    ]
}

fn series(label: &str, color: RGBColor, mark: Mark, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.to_string(),
        color,
        mark,
        points,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn field<'a>(row: &HashMap<&str, &'a str>, name: &str) -> &'a str {
        row.get(name)
            .copied()
            .unwrap_or_else(|| panic!("no column {name}"))
    }

    fn number(row: &HashMap<&str, &str>, name: &str) -> f64 {
        let text = field(row, name);
        text.parse()
            .unwrap_or_else(|_| panic!("{name} = {text:?} in {row:?}"))
    }

    /// The whole mode, from the command line to the files, on TPC-H SF 0.01:
    /// q03 (joins), q02 (a scalar subquery, many pipelines) and q15 (a view
    /// created and dropped around the query).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tpch_state_sizes_have_one_sane_row_per_boundary() {
        let data = skiff_testkit::dataset(skiff_gen::Benchmark::Tpch, 0.01);
        let results = tempfile::tempdir().expect("temporary directory");
        let query_dir = skiff_testkit::repo_root().join("tests/queries/tpch");
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let args = crate::harness::bench_args(&[
            "bench".to_string(),
            "tpch".to_string(),
            "--sf".to_string(),
            "0.01".to_string(),
            "--state-sizes".to_string(),
            "--queries".to_string(),
            "2,3,15".to_string(),
            "--partitions".to_string(),
            "2".to_string(),
            "--data".to_string(),
            path(&data),
            "--query-dir".to_string(),
            path(&query_dir),
            "--results".to_string(),
            path(results.path()),
        ]);
        crate::run(&args).await.expect("bench");
        assert!(
            results
                .path()
                .join("tpch-sf0.01-state-sizes-latest.png")
                .is_file()
        );
        let csv =
            std::fs::read_to_string(results.path().join("tpch-sf0.01-state-sizes-latest.csv"))
                .expect("csv");
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().expect("header").split(',').collect();
        assert_eq!(header.join(","), CSV_HEADER);
        let rows: Vec<HashMap<&str, &str>> = lines
            .map(|line| header.iter().copied().zip(line.split(',')).collect())
            .collect();

        // The pipeline counts the engine itself cuts these queries into.
        let engine = Engine::new(&EngineConfig {
            target_partitions: Some(2),
            ..EngineConfig::default()
        })
        .expect("engine");
        engine.register_data_dir(&data).await.expect("register");
        let q03 = std::fs::read_to_string(query_dir.join("q03.sql")).expect("q03");
        let q03_pipelines = engine
            .start(engine.physical_plan(&q03).await.expect("plan"))
            .expect("cut")
            .graph()
            .len();

        for query in ["q02", "q03", "q15"] {
            let rows: Vec<&HashMap<&str, &str>> =
                rows.iter().filter(|r| field(r, "query") == query).collect();
            assert!(!rows.is_empty(), "{query}: no rows");
            let pipelines = number(rows[0], "pipelines") as usize;
            if query == "q03" {
                assert_eq!(pipelines, q03_pipelines);
            }
            // One row per boundary 0 < k < pipelines, in order.
            let ks: Vec<usize> = rows.iter().map(|r| number(r, "k") as usize).collect();
            assert_eq!(ks, (1..pipelines).collect::<Vec<_>>(), "{query}");
            let mut time = 0.0;
            for row in rows {
                assert_eq!(field(row, "error"), "", "{query}");
                let k = number(row, "k");
                let progress = number(row, "progress_pipelines");
                assert!((progress - k / pipelines as f64).abs() < 1e-3, "{row:?}");
                // The unpaused run places the boundaries in time, in order.
                let at = number(row, "progress_time");
                assert!((0.0..=1.0).contains(&at) && at >= time, "{row:?}");
                time = at;
                // The state always holds the newest output, whose readers
                // have not run.
                let outputs = field(row, "state_outputs").split(' ').count();
                assert!(outputs >= 1 && !field(row, "state_outputs").is_empty());
                let output_rows: u64 = field(row, "state_output_rows")
                    .split(' ')
                    .map(|r| r.parse::<u64>().expect("rows"))
                    .sum();
                // The frames extracted carry exactly the selected outputs' rows.
                assert_eq!(number(row, "state_rows") as u64, output_rows, "{row:?}");
                assert!(number(row, "state_reads") <= outputs as f64, "{row:?}");
                // Full separation holds every finished output, so at least
                // the on-demand state.
                for (full, on_demand) in [
                    ("full_rows", "state_rows"),
                    ("full_bytes", "state_bytes"),
                    ("full_lz4_bytes", "shipped_lz4_bytes"),
                    ("shipped_lz4_bytes", "shipped_reads_lz4_bytes"),
                    ("every_state_bytes", "state_bytes"),
                    ("every_state_lz4_bytes", "shipped_lz4_bytes"),
                ] {
                    let (full_value, value) = (number(row, full), number(row, on_demand));
                    assert!(full_value >= value, "{full} < {on_demand}: {row:?}");
                }
                assert!(number(row, "state_bytes") > 0.0, "{row:?}");
                assert!(number(row, "shipped_none_bytes") > 0.0, "{row:?}");
                assert!(number(row, "runtime_ms") > 0.0, "{row:?}");
            }
        }
    }

    /// A failed query's row has every column, the error last.
    #[test]
    fn failed_query_row_has_every_column() {
        let csv = csv(&[QueryStates::failed(
            "q01",
            "it broke, \"badly\"".to_string(),
        )]);
        let mut lines = csv.lines();
        let columns = lines.next().expect("header").split(',').count();
        let row = lines.next().expect("row");
        assert_eq!(row.split(',').count(), columns + 1, "{row}"); // the comma quoted
        assert!(row.starts_with("q01,") && row.ends_with("\"it broke, 'badly'\""));
    }
}
