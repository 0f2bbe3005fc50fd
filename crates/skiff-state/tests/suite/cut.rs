//! Mid-pipeline cuts (issue 4, beyond the paper), local half. For every
//! TPC-H query at SF 0.01 and a sweep of morsel counts m: with cut points
//! on, cut the running pipelines once their gates have let m morsels
//! through (and, for TPC-H, right after each gate partition's input ended,
//! every such moment up to the query's end), extract the finished outputs still needed and the cut
//! pipelines' partial work as IPC frames, and finish the query from the
//! rest plan on a fresh engine (with cut points on too, so the rest's gates
//! are gated again). TPC-H runs twice: on the generated files (one row
//! group each at SF 0.01) and on the same rows rewritten with small row
//! groups, so that, as at SF 1, a scan partition reads many row groups and
//! a gate's positions cross them. The answer must be DuckDB's, the source must refuse to
//! go on, every cut pipeline's rest must skip what the source consumed, and
//! the sweep must have cut every kind of sink.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::error::DataFusionError;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use skiff_engine::morsel::{Cut, MorselGateExec};
use skiff_engine::{Engine, EngineConfig, Pause, PipelineId, QueryExecution};
use skiff_flight::{decode_plan, encode_plan};
use skiff_gen::Benchmark;
use skiff_state::{Compression, ExtractedState, Separated, load, resume, separate};
use skiff_testkit::{
    Expected, Golden, compare, dataset, golden::Order, load_golden, queries, render_rows, repo_root,
};

/// More partitions than cores, so partition parallelism is real.
const PARTITIONS: usize = 4;
/// Small batches make many morsels at SF 0.01.
const BATCH_SIZE: usize = 512;
/// Longer than any run at SF 0.01 takes: a stage that does not end hangs.
const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);
/// Morsels let through before the cut.
const MORSELS: [u64; 9] = [1, 2, 4, 7, 12, 20, 33, 55, 90];
/// More gate ends and pipeline starts than any query has: those sweeps
/// stop at the first count the query finishes before.
const MAX_EVENTS: u64 = 400;

/// When to cut.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// After the gates let this many morsels through.
    Morsels(u64),
    /// Right after this many gate partitions read their input whole: a
    /// sink may still be working on input no gate can stop (a partial
    /// aggregation emitting its groups).
    GateEnds(u64),
    /// Right after the driver started this many pipelines: running
    /// pipelines without cut points are aborted.
    Starts(usize),
}

impl Trigger {
    fn arm(self, execution: &QueryExecution) -> bool {
        match self {
            Trigger::Morsels(m) => execution.cut_after_morsels(m),
            Trigger::GateEnds(e) => execution.cut_after_gate_ends(e),
            Trigger::Starts(k) => execution.cut_after_starts(k),
        }
    }
}

/// Rows per row group of the rewritten TPC-H files: lineitem then has
/// about 30 row groups, several per scan partition.
const SMALL_ROW_GROUP: usize = 2048;

/// TPC-H SF 0.01 with row groups of [`SMALL_ROW_GROUP`] rows, written once
/// next to the generated data (built aside and renamed into place).
async fn small_row_groups() -> PathBuf {
    let source = dataset(Benchmark::Tpch, 0.01);
    let dir = source.with_file_name(format!("tpch-sf0.01-rg{SMALL_ROW_GROUP}"));
    if dir.is_dir() {
        return dir;
    }
    let aside = dir.with_extension(format!("part{}", std::process::id()));
    let ctx = SessionContext::new();
    for table in skiff_gen::table_names(Benchmark::Tpch) {
        let from = source.join(table);
        ctx.register_parquet(*table, from.to_str().expect("utf-8"), Default::default())
            .await
            .expect("register");
        let to = aside.join(table).join("part-0.parquet");
        let copy = format!(
            "COPY {table} TO '{}' STORED AS PARQUET \
             OPTIONS ('format.max_row_group_size' '{SMALL_ROW_GROUP}')",
            to.display()
        );
        ctx.sql(&copy)
            .await
            .expect("copy")
            .collect()
            .await
            .expect("copy");
    }
    // Another test binary may have won the race: its copy is as good.
    if std::fs::rename(&aside, &dir).is_err() {
        std::fs::remove_dir_all(&aside).expect("remove the spare copy");
    }
    dir
}

async fn cut_engine(data: &Path, settings: &[&str]) -> Engine {
    let config = EngineConfig {
        target_partitions: Some(PARTITIONS),
        ..EngineConfig::default()
    };
    let engine = Engine::new(&config).expect("engine");
    engine.register_data_dir(data).await.expect("register data");
    let common = [
        "SET skiff.mid_pipeline_cuts = true".to_string(),
        format!("SET datafusion.execution.batch_size = {BATCH_SIZE}"),
    ];
    for setup in common
        .into_iter()
        .chain(settings.iter().map(|s| s.to_string()))
    {
        let output = engine.execute(&setup).await.expect("setup");
        let _: Vec<RecordBatch> = output.stream.try_collect().await.expect("setup");
    }
    engine
}

/// Hops per run: cut on the source, cut the rest again on the target,
/// finish on the source's engine (so that a rest's gates are gated again
/// and their skips carried on).
const HOPS: usize = 2;

/// Gates in `plan` that skip rows.
fn skipping_gates(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut gates = 0;
    let _ = plan.apply(|node| {
        if let Some(gate) = node.downcast_ref::<MorselGateExec>() {
            gates += usize::from(gate.skip().iter().any(|&n| n > 0));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    gates
}

/// How one execution ended.
enum Stop {
    /// It reached its result before the cut: its rows.
    Finished(Vec<RecordBatch>),
    /// The cut: the rest plan as shipped, the state, the kinds cut (and
    /// `Lost` for each pipeline whose partial work was lost, `Aborted` for
    /// each running one without cut points).
    Cut(Vec<u8>, ExtractedState, Vec<String>),
}

fn failed(e: DataFusionError) -> String {
    e.to_string()
}

/// Run `execution` to its cut (or its end) and hand it off as a worker
/// would. After a cut the execution must refuse to go on.
async fn run_to_cut(execution: &Arc<QueryExecution>, trigger: Trigger) -> Result<Stop, String> {
    let stream = execution.execute().map_err(failed)?;
    let paused = tokio::time::timeout(LIMIT, execution.paused()).await;
    match paused.map_err(|_| "never paused".to_string())? {
        Pause::Paused { .. } => {}
        Pause::Ended => {
            let batches = tokio::time::timeout(LIMIT, stream.try_collect())
                .await
                .map_err(|_| "never finished".to_string())?
                .map_err(failed)?;
            return Ok(Stop::Finished(batches));
        }
        Pause::Running => return Err("driver still running".into()),
    }
    let cuts = execution.cuts();
    let plans: BTreeMap<PipelineId, Cut> = cuts
        .iter()
        .map(|(id, (cut, _))| (*id, cut.clone()))
        .collect();
    let Separated {
        remaining, state, ..
    } = separate(execution, Compression::Lz4)
        .await
        .map_err(failed)?;
    if let Some(id) = plans.keys().find(|id| !remaining.reads.contains(id)) {
        return Err(format!(
            "the rest plan does not read the partial work of {id}"
        ));
    }
    let consumed = plans
        .values()
        .filter(|c| c.consumed.iter().any(|(_, p)| p.iter().any(|&n| n > 0)))
        .count();
    if skipping_gates(&remaining.plan) < consumed {
        return Err(format!(
            "{consumed} cut pipelines consumed input, {} gates skip any",
            skipping_gates(&remaining.plan)
        ));
    }
    if std::env::var_os("SKIFF_SHOW_CUTS").is_some() {
        let shown = datafusion::physical_plan::displayable(remaining.plan.as_ref()).indent(true);
        let consumed: Vec<_> = plans.values().map(|c| (c.pipeline, &c.consumed)).collect();
        println!("{trigger:?} consumed={consumed:?}\n{shown}");
    }
    let bytes = encode_plan(remaining.plan).map_err(failed)?.to_vec();
    // Its cut pipelines ended over part of their input: it must not go on.
    execution.resume();
    let refused: Result<Vec<RecordBatch>, _> = tokio::time::timeout(LIMIT, stream.try_collect())
        .await
        .map_err(|_| "hung after resuming".to_string())?;
    let lost = execution.lost();
    let aborted = execution.aborted_at_cut();
    if !(cuts.is_empty() && lost.is_empty() && aborted.is_empty()) && refused.is_ok() {
        return Err("went on after a cut".into());
    }
    let kinds = plans.values().map(|c| format!("{:?}", c.kind));
    let lost = lost.iter().map(|_| "Lost".to_string());
    let aborted = aborted.iter().map(|_| "Aborted".to_string());
    Ok(Stop::Cut(
        bytes,
        state,
        kinds.chain(lost).chain(aborted).collect(),
    ))
}

/// Cut `sql` at `trigger` on `engines[0]`, the rest again on `engines[1]`,
/// and so on for [`HOPS`] cuts; finish on the next. The kinds cut, or
/// `None` when the first run reached its result before the cut.
async fn cut_and_finish(
    engines: [&Engine; 2],
    sql: &str,
    trigger: Trigger,
    golden: &Golden,
) -> Result<Option<Vec<String>>, String> {
    let source = engines[0];
    let mut execution = source
        .start(source.physical_plan(sql).await.map_err(failed)?)
        .map_err(failed)?;
    let mut kinds = Vec::new();
    for hop in 0..=HOPS {
        if hop < HOPS && !trigger.arm(&execution) {
            return Err("no cut points".into());
        }
        let columns = execution.graph().result().plan.schema().fields().len();
        match run_to_cut(&execution, trigger)
            .await
            .map_err(|e| format!("hop {hop}: {e}"))?
        {
            Stop::Finished(batches) => {
                compare(golden, render_rows(&batches), columns)
                    .map_err(|e| format!("hop {hop}: {e}"))?;
                return Ok((hop > 0).then_some(kinds));
            }
            Stop::Cut(bytes, state, cut) => {
                if hop == HOPS {
                    return Err("the last hop was cut".into());
                }
                kinds.extend(cut);
                // Shipped as a worker gets it: fresh operators.
                let ctx = engines[(hop + 1) % 2].context().task_ctx();
                let shipped = decode_plan(&bytes, &ctx).map_err(failed)?;
                let loaded = load(&state).map_err(|e| e.to_string())?;
                execution = resume(shipped, &ctx, loaded).map_err(failed)?;
            }
        }
    }
    Err("unreachable: every hop returns".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_cuts_running_pipelines() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let kinds = cut_sweep(&data, "tpch", &MORSELS, true, &[]).await;
    for kind in ["Union", "Sort", "Aggregate", "Aborted"] {
        assert!(
            kinds.get(kind).is_some_and(|&n| n > 0),
            "no {kind} sink was cut: {kinds:?}"
        );
    }
}

/// Taps that keep little: an aggregation cut after its tap overflowed
/// loses its partial work and starts over on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_cuts_lose_the_work_of_overflowing_taps() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let settings = ["SET skiff.cut_tap_max_bytes = 65536"];
    let kinds = cut_sweep(&data, "tpch", &MORSELS, true, &settings).await;
    assert!(
        kinds.get("Lost").is_some_and(|&n| n > 0),
        "no partial work was lost: {kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_with_small_row_groups_cuts_running_pipelines() {
    let data = small_row_groups().await;
    let kinds = cut_sweep(&data, "tpch", &MORSELS, true, &[]).await;
    assert!(kinds.values().sum::<usize>() > 0, "nothing was cut");
}

/// All 99 TPC-DS queries, fewer cut points (SKIFF_SLOW_TESTS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_cuts_running_pipelines() {
    if !skiff_testkit::slow_tests("tpcds mid-pipeline cut sweep") {
        return;
    }
    let data = dataset(Benchmark::Tpcds, 0.01);
    // Every gate end and start of 99 queries takes minutes: on demand.
    let every_event = std::env::var_os("SKIFF_CUT_GATE_ENDS").is_some();
    let kinds = cut_sweep(&data, "tpcds", &[1, 6, 30], every_event, &[]).await;
    assert!(kinds.values().sum::<usize>() > 0, "nothing was cut");
}

/// Queries whose scans read a dynamic filter their own pipeline tightens
/// while it runs (a top-k's threshold, a min or max so far), over small
/// row groups so that the filter prunes some: a cut must not make the
/// rest read other rows. Checked against the same engine without cut
/// points (these queries have no DuckDB golden file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tightening_filters_over_small_row_groups() {
    let data = small_row_groups().await;
    let plain = Engine::new(&EngineConfig {
        target_partitions: Some(PARTITIONS),
        ..EngineConfig::default()
    })
    .expect("engine");
    plain.register_data_dir(&data).await.expect("register data");
    let (source, target) = (cut_engine(&data, &[]).await, cut_engine(&data, &[]).await);
    let queries = [
        "SELECT l_orderkey, l_linenumber, l_extendedprice FROM lineitem \
         ORDER BY l_extendedprice DESC, l_orderkey, l_linenumber LIMIT 7",
        "SELECT o_orderkey, o_totalprice FROM orders JOIN customer ON o_custkey = c_custkey \
         WHERE c_mktsegment = 'BUILDING' ORDER BY o_orderdate, o_orderkey LIMIT 5",
        "SELECT max(l_orderkey), min(l_orderkey) FROM lineitem WHERE l_quantity > 10",
    ];
    let mut failures = Vec::new();
    for sql in queries {
        let output = plain.execute(sql).await.expect(sql);
        let batches: Vec<RecordBatch> = output.stream.try_collect().await.expect(sql);
        let golden = Golden {
            statement: 1,
            columns: batches
                .first()
                .map(|b| {
                    b.schema()
                        .fields()
                        .iter()
                        .map(|f| f.name().clone())
                        .collect()
                })
                .unwrap_or_default(),
            rows: render_rows(&batches),
            order: Some(Order::Strict),
        };
        let triggers = (1..=40)
            .map(Trigger::Morsels)
            .chain((1..=16).map(Trigger::GateEnds));
        for trigger in triggers {
            if let Err(e) = cut_and_finish([&source, &target], sql, trigger, &golden).await {
                failures.push(format!("{sql} {trigger:?}: {e}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Cut every query of `bench` after each of `morsels` morsels and, with
/// `sweep_every_event`, right after every gate partition's input ended and
/// after every pipeline start; the kinds of pipelines cut, counted.
async fn cut_sweep(
    data: &Path,
    name: &str,
    morsels: &[u64],
    sweep_every_event: bool,
    settings: &[&str],
) -> BTreeMap<String, usize> {
    let source = cut_engine(data, settings).await;
    let target = cut_engine(data, settings).await;
    let golden_dir = repo_root().join(format!("tests/golden/{name}/sf0.01"));
    let mut failures = Vec::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let (mut cuts, mut uncut) = (0, 0);
    let only = std::env::var("SKIFF_CUT_QUERY").ok();
    for (query, sql) in queries(name) {
        if only.as_ref().is_some_and(|q| *q != query) {
            continue;
        }
        let answers = match load_golden(&golden_dir, &query) {
            Ok(Expected::Answers(answers)) => answers,
            // The engine's golden tests check that Skiff fails too.
            Ok(Expected::Error(_)) => continue,
            Err(e) => panic!("{query}: {e}"),
        };
        for (index, statement) in skiff_engine::statement::split_statements(&sql)
            .into_iter()
            .enumerate()
        {
            let Some(golden) = answers.iter().find(|g| g.statement == index + 1) else {
                for engine in [&source, &target] {
                    let output = engine.execute(statement).await.expect(statement);
                    let _: Vec<RecordBatch> = output.stream.try_collect().await.expect(statement);
                }
                continue;
            };
            let every = (1..=MAX_EVENTS)
                .flat_map(|n| [Trigger::GateEnds(n), Trigger::Starts(n as usize)])
                .filter(|_| sweep_every_event);
            // Event kinds the query finished before: later counts of them
            // never come first either.
            let mut past_the_end = Vec::new();
            for trigger in morsels.iter().map(|&m| Trigger::Morsels(m)).chain(every) {
                let kind = std::mem::discriminant(&trigger);
                if past_the_end.contains(&kind) {
                    continue;
                }
                match cut_and_finish([&source, &target], statement, trigger, golden).await {
                    Ok(Some(cut)) => {
                        cuts += cut.len();
                        for kind in cut {
                            *kinds.entry(kind).or_default() += 1;
                        }
                    }
                    Ok(None) => {
                        uncut += 1;
                        if !matches!(trigger, Trigger::Morsels(_)) {
                            past_the_end.push(kind);
                        }
                    }
                    Err(e) => failures.push(format!("{query} {trigger:?}: {e}")),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{cuts} pipelines cut ({kinds:?}); {uncut} runs reached the result first");
    kinds
}
