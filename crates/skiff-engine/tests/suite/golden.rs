//! TPC-H and TPC-DS answers against DuckDB's, stored as golden files under
//! `tests/golden/<bench>/sf<X>/` (see tests/golden/README.md for the format
//! and how to regenerate them). Every query is run on the pipeline executor
//! after its graph passes the structural invariants; each failure is named
//! with its reason in one summary, never skipped.

use std::panic::AssertUnwindSafe;

use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use std::sync::Arc;

use skiff_engine::Engine;
use skiff_engine::buffer::TableCache;
use skiff_engine::store::PipelineStatus;
use skiff_gen::Benchmark;

use crate::invariants;
use skiff_testkit::{
    Expected, Golden, compare, dataset, load_golden, queries, render_rows, repo_root, same_failure,
};

use crate::support::engine;

/// Polls (10 ms apart) for the memory pool to be empty after a query.
const RELEASE_POLLS_MAX: usize = 500;

/// What one query file gave back.
#[derive(Default)]
struct QueryRun {
    /// Per statement (0-based): its batches and column count.
    results: Vec<(Vec<RecordBatch>, usize)>,
    /// Bytes its pipelines wrote to spill files.
    spilled_bytes: u64,
}

/// Run every statement of one query file; checks the graph invariants of
/// each and that the store holds nothing once the query is done.
async fn run_query(engine: &Engine, sql: &str) -> Result<QueryRun, String> {
    let run = run_statements(engine, sql).await?;
    // Every reservation taken for the query is returned once it is done.
    // Operator tasks wind down just after the last batch, so allow them a
    // moment; a leak stays reserved for good. The buffer pool's blocks
    // stay, reserved under its own consumer.
    let pool = &engine.context().runtime_env().memory_pool;
    let cached = || engine.buffer_pool().map_or(0, |b| b.bytes());
    for _ in 0..RELEASE_POLLS_MAX {
        if pool.reserved() == cached() {
            return Ok(run);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err(format!(
        "{} bytes still reserved after the query ({} of them the buffer pool's)",
        pool.reserved(),
        cached()
    ))
}

async fn run_statements(engine: &Engine, sql: &str) -> Result<QueryRun, String> {
    let mut run = QueryRun::default();
    for statement in skiff_engine::statement::split_statements(sql) {
        let plan = engine
            .physical_plan(statement)
            .await
            .map_err(|e| e.to_string())?;
        let execution = engine.start(plan.clone()).map_err(|e| e.to_string())?;
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            invariants::check(execution.graph(), &plan)
        }))
        .map_err(|panic| format!("invariant broken: {}", panic_message(&panic)))?;
        let stream = execution.execute().map_err(|e| e.to_string())?;
        let columns = stream.schema().fields().len();
        let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| e.to_string())?;
        let state = execution.state();
        if !state.outputs.is_empty() {
            return Err(format!("{} outputs left in the store", state.outputs.len()));
        }
        run.spilled_bytes += state
            .status
            .iter()
            .map(|s| match s {
                PipelineStatus::Finished { output, .. } => output.spilled_bytes,
                _ => 0,
            })
            .sum::<u64>();
        run.results.push((batches, columns));
    }
    Ok(run)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn compare_all(answers: &[Golden], run: &QueryRun) -> Result<(), String> {
    for golden in answers {
        let Some((batches, columns)) = run.results.get(golden.statement - 1) else {
            return Err(format!("no statement {}", golden.statement));
        };
        compare(golden, render_rows(batches), *columns)
            .map_err(|e| format!("statement {}: {e}", golden.statement))?;
    }
    Ok(())
}

/// Run the whole benchmark at `sf` after the `setup` statements; panics
/// with the list of failures. Returns the bytes spilled over all queries.
async fn check_benchmark(bench: Benchmark, name: &str, sf: &str, setup: &[&str]) -> u64 {
    let data = dataset(bench, sf.parse().expect("sf"));
    // More partitions than cores, so that partition parallelism is exercised
    // on any machine.
    let engine = engine(Some(&data), 4).await;
    check_on(&engine, name, sf, setup).await
}

/// [`check_benchmark`] on an engine already over the benchmark's data.
async fn check_on(engine: &Engine, name: &str, sf: &str, setup: &[&str]) -> u64 {
    let engine = engine.clone();
    let golden_dir = repo_root().join(format!("tests/golden/{name}/sf{sf}"));
    for statement in setup {
        engine.execute(statement).await.expect(statement);
    }
    let queries = queries(name);
    assert!(!queries.is_empty(), "no {name} queries");
    let mut failures = Vec::new();
    let mut spilled_bytes = 0;
    for (query, sql) in &queries {
        let outcome = match load_golden(&golden_dir, query) {
            Err(e) => Err(e),
            Ok(Expected::Error(duckdb)) => match run_query(&engine, sql).await {
                Ok(_) => Err(format!("DuckDB failed ({duckdb}) but skiff answered")),
                Err(skiff) if same_failure(&duckdb, &skiff) => Ok(()),
                Err(skiff) => Err(format!(
                    "DuckDB failed ({duckdb}), skiff differently: {skiff}"
                )),
            },
            Ok(Expected::Answers(answers)) => match run_query(&engine, sql).await {
                Ok(run) => {
                    spilled_bytes += run.spilled_bytes;
                    compare_all(&answers, &run)
                }
                Err(e) => Err(format!("skiff failed: {e}")),
            },
        };
        if let Err(reason) = outcome {
            failures.push(format!("{query}: {reason}"));
        }
    }
    let passed = queries.len() - failures.len();
    let setup = setup.join("; ");
    println!(
        "{name} sf{sf} [{setup}]: {passed}/{} match DuckDB",
        queries.len()
    );
    assert!(
        failures.is_empty(),
        "{name} sf{sf} [{setup}]: {passed}/{} match DuckDB; failures:\n{}",
        queries.len(),
        failures.join("\n")
    );
    spilled_bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_matches_duckdb() {
    check_benchmark(Benchmark::Tpch, "tpch", "0.01", &[]).await;
}

/// With no memory for the store, every materialized output goes through a
/// spill file: the answers must not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_with_every_output_spilled_matches_duckdb() {
    let setup = ["SET skiff.store_memory_max = 0"];
    let spilled = check_benchmark(Benchmark::Tpch, "tpch", "0.01", &setup).await;
    assert!(spilled > 0, "nothing was spilled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_with_every_output_spilled_matches_duckdb() {
    let setup = ["SET skiff.store_memory_max = 0"];
    let spilled = check_benchmark(Benchmark::Tpcds, "tpcds", "0.01", &setup).await;
    assert!(spilled > 0, "nothing was spilled");
}

/// Cut points (morsel gates, aggregation taps) that never fire change no
/// answer: every pipeline that can be cut reads through them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_with_cut_points_matches_duckdb() {
    let setup = ["SET skiff.mid_pipeline_cuts = true"];
    check_benchmark(Benchmark::Tpch, "tpch", "0.01", &setup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_with_cut_points_matches_duckdb() {
    let setup = ["SET skiff.mid_pipeline_cuts = true"];
    check_benchmark(Benchmark::Tpcds, "tpcds", "0.01", &setup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_1_matches_duckdb() {
    check_benchmark(Benchmark::Tpch, "tpch", "0.1", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_matches_duckdb() {
    check_benchmark(Benchmark::Tpcds, "tpcds", "0.01", &[]).await;
}

/// The whole benchmark twice on one engine whose buffer pool holds
/// `budget` bytes: answers equal DuckDB's cold and warm, and the pool's
/// counters show how the second pass read.
async fn check_twice(bench: Benchmark, name: &str, budget: usize) -> Vec<TableCache> {
    let data = dataset(bench, 0.01);
    let engine = skiff_engine::Engine::new(&skiff_engine::EngineConfig {
        target_partitions: Some(4),
        cache_memory: Some(budget),
        ..Default::default()
    })
    .expect("engine");
    engine
        .register_data_dir(&data)
        .await
        .expect("register data");
    let pool = Arc::clone(engine.buffer_pool().expect("a buffer pool"));
    check_on(&engine, name, "0.01", &[]).await;
    let cold = pool.tables();
    check_on(&engine, name, "0.01", &[]).await;
    assert!(pool.bytes() <= budget);
    assert_eq!(
        engine.context().runtime_env().memory_pool.reserved(),
        pool.bytes()
    );
    let warm = pool.tables();
    // Each table's counters over the second pass alone.
    warm.iter()
        .map(|(location, after)| {
            let before = cold
                .iter()
                .find(|(l, _)| l == location)
                .map(|(_, t)| t.clone())
                .unwrap_or_default();
            TableCache {
                blocks: after.blocks,
                bytes: after.bytes,
                hits: after.hits - before.hits,
                misses: after.misses - before.misses,
                evictions: after.evictions - before.evictions,
                ..TableCache::default()
            }
        })
        .collect()
}

/// With room for every block, the second pass reads nothing from storage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_warm_matches_duckdb_and_misses_nothing() {
    let warm = check_twice(Benchmark::Tpch, "tpch", 1 << 30).await;
    assert!(warm.iter().map(|t| t.hits).sum::<u64>() > 0);
    assert_eq!(warm.iter().map(|t| t.misses).sum::<u64>(), 0, "{warm:?}");
    assert_eq!(warm.iter().map(|t| t.evictions).sum::<u64>(), 0);
}

/// A pool far smaller than the data: blocks come and go between (and
/// within) queries, answers do not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_with_a_small_pool_matches_duckdb() {
    let warm = check_twice(Benchmark::Tpch, "tpch", 1 << 20).await;
    assert!(warm.iter().map(|t| t.evictions).sum::<u64>() > 0);
    assert!(warm.iter().map(|t| t.hits).sum::<u64>() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_warm_matches_duckdb_and_misses_nothing() {
    let warm = check_twice(Benchmark::Tpcds, "tpcds", 1 << 30).await;
    assert!(warm.iter().map(|t| t.hits).sum::<u64>() > 0);
    assert_eq!(warm.iter().map(|t| t.misses).sum::<u64>(), 0, "{warm:?}");
}

/// Without the pool (`skiff.buffer_pool = false`) every scan reads storage,
/// as DataFusion's own Parquet scan does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_without_the_pool_matches_duckdb() {
    check_benchmark(
        Benchmark::Tpch,
        "tpch",
        "0.01",
        &["SET skiff.buffer_pool = false"],
    )
    .await;
}

/// SF 1 is where every TPC-DS query returns rows; it takes minutes, so it
/// runs when SKIFF_SLOW_TESTS is set (CI sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf1_matches_duckdb() {
    if !skiff_testkit::slow_tests("tpcds sf1") {
        return;
    }
    check_benchmark(Benchmark::Tpcds, "tpcds", "1", &[]).await;
}
