//! The state-separation sweep (issue 4, item 9, local half). For every
//! TPC-H query at SF 0.01 and every pipeline boundary k: run to k finished
//! pipelines, select and extract the state, rewrite the remaining plan, ship
//! it through datafusion-proto to a fresh engine, load the state there and
//! finish the query. The answer must be DuckDB's; the target's graph must
//! hold no pipeline that finished on the source; the bytes loaded must be
//! the bytes extracted, and the rows extracted those of the selected
//! outputs. The source then resumes and must reach the same answer
//! (extraction is non-destructive).

use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use futures::TryStreamExt;
use std::time::Duration;

use skiff_engine::materialized::{MaterializedExec, Source};
use skiff_engine::{Engine, EngineConfig, Pause, PauseMode, QueryExecution};
use skiff_flight::{decode_plan, encode_plan};
use skiff_gen::Benchmark;
use skiff_state::{Compression, LoadError, Separated, load, resume, separate, with_partitions};
use skiff_testkit::{
    Expected, Golden, compare, dataset, load_golden, queries, render_rows, repo_root,
};

/// Source partitions: more than cores, so partition parallelism is real.
const SOURCE_PARTITIONS: usize = 4;

async fn engine(partitions: usize) -> Engine {
    engine_over(Benchmark::Tpch, partitions).await
}

async fn engine_over(bench: Benchmark, partitions: usize) -> Engine {
    let config = EngineConfig {
        target_partitions: Some(partitions),
        ..EngineConfig::default()
    };
    let engine = Engine::new(&config).expect("engine");
    let data = dataset(bench, 0.01);
    engine
        .register_data_dir(&data)
        .await
        .expect("register data");
    engine
}

/// When the source stops.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// Exactly after k pipelines.
    After(usize),
    /// On demand, this long after the start.
    Now(PauseMode, Duration),
}

/// What one migration at boundary k showed.
#[derive(Debug, Default)]
struct Migration {
    /// False when the query had reached its result pipeline before the
    /// pause (nothing left to move; it finished on the source).
    moved: bool,
    pipelines: usize,
    state_rows: u64,
    state_bytes_memory: u64,
    shipped_bytes: u64,
    plan_bytes: usize,
}

async fn collect(execution: &Arc<QueryExecution>) -> Result<(Vec<RecordBatch>, usize), String> {
    let stream = execution.execute().map_err(|e| e.to_string())?;
    let columns = stream.schema().fields().len();
    let batches = stream.try_collect().await.map_err(|e| e.to_string())?;
    Ok((batches, columns))
}

/// The state leaves of `plan` as (pipeline, schema, partitioning, ordering)
/// descriptions, in walk order.
fn leaf_shapes(plan: &Arc<dyn ExecutionPlan>) -> Vec<String> {
    let mut shapes = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(leaf) = MaterializedExec::of(node.as_ref(), Source::Migrated) {
            let properties = leaf.properties();
            shapes.push(format!(
                "{} {:?} {:?} {:?}",
                leaf.pipeline(),
                leaf.schema(),
                properties.partitioning,
                properties.output_ordering()
            ));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    shapes
}

/// Output partition counts of the hash and round-robin repartitions in
/// `plan`.
fn exchange_counts(plan: &Arc<dyn ExecutionPlan>) -> Vec<usize> {
    let mut counts = Vec::new();
    let _ = plan.apply(|node| {
        if let Some(exchange) = node.downcast_ref::<RepartitionExec>() {
            match exchange.partitioning() {
                Partitioning::Hash(_, n) | Partitioning::RoundRobinBatch(n) => counts.push(*n),
                _ => {}
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    counts
}

/// Base-table scans in `plan`.
fn base_scans(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut scans = 0;
    let _ = plan.apply(|node| {
        scans += usize::from(node.is::<DataSourceExec>());
        Ok(TreeNodeRecursion::Continue)
    });
    scans
}

fn migrated_leaves(plan: &Arc<dyn ExecutionPlan>) -> usize {
    let mut leaves = 0;
    let _ = plan.apply(|node| {
        leaves += usize::from(MaterializedExec::of(node.as_ref(), Source::Migrated).is_some());
        Ok(TreeNodeRecursion::Continue)
    });
    leaves
}

/// Pause `sql` on `source` as `trigger` says, migrate to `target`, and
/// check both the target's and the resumed source's answers.
async fn migrate(
    source: &Engine,
    target: &Target<'_>,
    sql: &str,
    trigger: Trigger,
    golden: &Golden,
) -> Result<Migration, String> {
    let err = |e: datafusion::error::DataFusionError| e.to_string();
    let plan = source.physical_plan(sql).await.map_err(err)?;
    let execution = source.start(plan).map_err(err)?;
    let graph = Arc::clone(execution.graph());
    if let Trigger::After(k) = trigger {
        execution.pause_after(k);
    }
    let stream = execution.execute().map_err(err)?;
    if let Trigger::Now(mode, delay) = trigger {
        tokio::time::sleep(delay).await;
        execution.pause_now(mode);
    }
    let k = match (execution.paused().await, trigger) {
        (Pause::Paused { finished }, Trigger::After(k)) if finished == k => k,
        (Pause::Paused { finished }, Trigger::Now(..)) => finished,
        (Pause::Ended, Trigger::Now(..)) => {
            let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(err)?;
            let columns = graph.result().plan.schema().fields().len();
            compare(golden, render_rows(&batches), columns)
                .map_err(|e| format!("{trigger:?} unmoved: {e}"))?;
            return Ok(Migration {
                pipelines: graph.len(),
                ..Migration::default()
            });
        }
        (other, _) => return Err(format!("{trigger:?}: driver {other:?}")),
    };
    let state = execution.state();
    let compression = [Compression::None, Compression::Lz4, Compression::Zstd][k % 3];
    let Separated {
        selection,
        remaining,
        state: extracted,
        ..
    } = separate(&execution, compression).await.map_err(err)?;
    if selection.finished.len() != k {
        return Err(format!("k={k}: {} finished", selection.finished.len()));
    }
    if !remaining.reads.is_subset(&selection.pipelines) {
        return Err(format!(
            "k={k}: plan reads {:?} outside the state",
            remaining.reads
        ));
    }
    let read_rows: u64 = state
        .outputs
        .iter()
        .filter(|o| remaining.reads.contains(&o.pipeline))
        .map(|o| o.size.rows)
        .sum();
    if extracted.rows() != read_rows {
        return Err(format!(
            "k={k}: {} rows extracted, {read_rows} selected",
            extracted.rows()
        ));
    }
    let plan_bytes = encode_plan(Arc::clone(&remaining.plan)).map_err(err)?;

    // The target: a fresh engine and task context; nothing shared but bytes.
    let target_ctx = target.engine.context().task_ctx();
    let shipped = decode_plan(&plan_bytes, &target_ctx).map_err(err)?;
    // The codec keeps each leaf's exact schema, partitioning and ordering.
    if leaf_shapes(&shipped) != leaf_shapes(&remaining.plan) {
        return Err(format!("k={k}: state leaves changed on the wire"));
    }
    let loaded = load(&extracted).map_err(|e| e.to_string())?;
    let shipped = match target.partitions {
        Some(partitions) => with_partitions(shipped, partitions).map_err(err)?,
        None => shipped,
    };
    let moved = resume(shipped, &target_ctx, loaded).map_err(err)?;
    let target_graph = Arc::clone(moved.graph());
    // No pipeline that finished on the source runs again: the target scans
    // exactly the base tables of the source's unfinished pipelines.
    let unfinished_scans: usize = graph
        .pipelines()
        .iter()
        .filter(|p| !selection.finished.contains(&p.id))
        .map(|p| base_scans(&p.plan))
        .sum();
    let target_scans: usize = target_graph
        .pipelines()
        .iter()
        .map(|p| base_scans(&p.plan))
        .sum();
    if target_scans != unfinished_scans {
        return Err(format!(
            "k={k}: target scans {target_scans} tables, unfinished pipelines {unfinished_scans}"
        ));
    }
    // ... and runs exactly the unfinished pipelines, plus one literal per
    // inlined subquery value: the leaves keep the properties the operators
    // above were planned for, so the target cuts the plan as the source did.
    let expected = graph.len() - k + remaining.inlined_values;
    // Re-hashing state on a target with other partitions is a pipeline of
    // its own where the leaf fed a join build.
    if target.partitions.is_none() && target_graph.len() != expected {
        return Err(format!(
            "k={k}: target has {} pipelines, {expected} expected",
            target_graph.len()
        ));
    }
    if let Some(partitions) = target.partitions {
        let counts = target_graph
            .pipelines()
            .iter()
            .flat_map(|p| exchange_counts(&p.plan));
        if let Some(other) = counts.into_iter().find(|n| *n != partitions) {
            return Err(format!(
                "k={k}: a repartition to {other} on a {partitions}-way target"
            ));
        }
    }
    let leaves: usize = target_graph
        .pipelines()
        .iter()
        .map(|p| migrated_leaves(&p.plan))
        .sum();
    if leaves < remaining.reads.len() {
        return Err(format!(
            "k={k}: {leaves} state leaves for {:?}",
            remaining.reads
        ));
    }
    let (batches, columns) = collect(&moved)
        .await
        .map_err(|e| format!("k={k} target: {e}"))?;
    compare(golden, render_rows(&batches), columns).map_err(|e| format!("k={k} target: {e}"))?;

    // Extraction did not consume: the source finishes as if nothing happened
    // (unless an immediate pause aborted pipelines: then it must refuse).
    if execution.aborted() {
        execution.resume();
        let refused: Result<Vec<RecordBatch>, _> = stream.try_collect().await;
        if refused.is_ok() {
            return Err(format!("{trigger:?}: source went on after aborting"));
        }
        return Ok(Migration {
            moved: true,
            pipelines: graph.len(),
            state_rows: extracted.rows(),
            ..Migration::default()
        });
    }
    execution.resume();
    let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(err)?;
    compare(golden, render_rows(&batches), columns).map_err(|e| format!("k={k} source: {e}"))?;
    Ok(Migration {
        moved: true,
        pipelines: graph.len(),
        state_rows: extracted.rows(),
        state_bytes_memory: selection.bytes,
        shipped_bytes: extracted.bytes(),
        plan_bytes: plan_bytes.len(),
    })
}

/// Where a migration goes: an engine, and the partition count the remaining
/// plan is rewritten for (`None`: keep the source's).
struct Target<'a> {
    engine: &'a Engine,
    partitions: Option<usize>,
}

/// Sweep every query of `bench` at every boundary from `source` to a
/// target: boundary k migrates to `targets[k % targets.len()]`.
async fn sweep(bench: &str, source: &Engine, targets: &[Target<'_>]) {
    assert!(!targets.is_empty());
    // Two shards of the queries at once: one query at a time left a core
    // of two idle, and each migration is its own execution on the engines.
    let mut shards = vec![Vec::new(); SWEEP_SHARDS];
    for (i, query) in queries(bench).into_iter().enumerate() {
        shards[i % SWEEP_SHARDS].push(query);
    }
    let swept = futures::future::join_all(
        shards
            .into_iter()
            .map(|shard| sweep_shard(bench, shard, source, targets)),
    )
    .await;
    let migrations: usize = swept.iter().map(|(m, _)| m).sum();
    let failures: Vec<String> = swept.into_iter().flat_map(|(_, f)| f).collect();
    assert!(migrations > 0, "nothing migrated");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{migrations} migrations match DuckDB");
}

/// Queries of a sweep run at once (`sweep`).
const SWEEP_SHARDS: usize = 2;

/// Migrates each of `shard`'s queries at every boundary: the migrations
/// and the failures.
async fn sweep_shard(
    bench: &str,
    shard: Vec<(String, String)>,
    source: &Engine,
    targets: &[Target<'_>],
) -> (usize, Vec<String>) {
    let golden_dir = repo_root().join(format!("tests/golden/{bench}/sf0.01"));
    let mut failures = Vec::new();
    let mut migrations = 0;
    for (query, sql) in shard {
        let answers = match load_golden(&golden_dir, &query) {
            Ok(Expected::Answers(answers)) => answers,
            // The engine's golden tests check that Skiff fails too.
            Ok(Expected::Error(_)) => continue,
            Err(e) => panic!("{query}: {e}"),
        };
        let mut summary = Vec::new();
        for (index, statement) in skiff_engine::statement::split_statements(&sql)
            .into_iter()
            .enumerate()
        {
            let Some(golden) = answers.iter().find(|g| g.statement == index + 1) else {
                // DDL around the query (q15's view): run it on the source;
                // the shipped physical plan needs no view on the target.
                let output = source.execute(statement).await.expect(statement);
                let _: Vec<RecordBatch> = output.stream.try_collect().await.expect(statement);
                continue;
            };
            let pipelines = source
                .start(source.physical_plan(statement).await.expect("plan"))
                .expect("cut")
                .graph()
                .len();
            // k = pipelines - 1: all but the result pipeline finished.
            for k in 0..pipelines {
                let target = &targets[k % targets.len()];
                match migrate(source, target, statement, Trigger::After(k), golden).await {
                    Ok(m) => {
                        migrations += 1;
                        summary.push(format!("k{k}:{}r/{}B", m.state_rows, m.shipped_bytes));
                        debug_assert_eq!(m.pipelines, pipelines);
                        let _ = (m.state_bytes_memory, m.plan_bytes);
                    }
                    Err(e) => failures.push(format!("{query}: {e}")),
                }
            }
        }
        println!("{query}: {}", summary.join(" "));
    }
    (migrations, failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_migrates_after_every_pipeline() {
    let source = engine(SOURCE_PARTITIONS).await;
    let target = engine(SOURCE_PARTITIONS).await;
    let target = Target {
        engine: &target,
        partitions: None,
    };
    sweep("tpch", &source, std::slice::from_ref(&target)).await;
}

/// TPC-DS at SF 0.01, every query at every boundary: even boundaries to a
/// target of the source's partitions, odd ones to a 2-partition target
/// (the TPC-H sweeps take every boundary both ways). Slow, so it runs when
/// SKIFF_SLOW_TESTS is set (CI sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_migrates_after_every_pipeline_to_either_partition_count() {
    if !skiff_testkit::slow_tests("tpcds sweep") {
        return;
    }
    let source = engine_over(Benchmark::Tpcds, SOURCE_PARTITIONS).await;
    let same = engine_over(Benchmark::Tpcds, SOURCE_PARTITIONS).await;
    let fewer = engine_over(Benchmark::Tpcds, 2).await;
    let targets = [
        Target {
            engine: &same,
            partitions: None,
        },
        Target {
            engine: &fewer,
            partitions: Some(2),
        },
    ];
    sweep("tpcds", &source, &targets).await;
}

/// A target with half the partitions (in a cluster, a worker with half the
/// cores): the remaining plan is rewritten for 2 partitions, hash-partitioned
/// state is re-hashed on arrival, and the target rebuilds its hash tables and
/// sorts from the tuples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_migrates_to_fewer_partitions() {
    let source = engine(SOURCE_PARTITIONS).await;
    let target = engine(SOURCE_PARTITIONS / 2).await;
    let target = Target {
        engine: &target,
        partitions: Some(SOURCE_PARTITIONS / 2),
    };
    sweep("tpch", &source, std::slice::from_ref(&target)).await;
}

/// On-demand pauses (what `skiff.migrate` and a vacate use): for every
/// TPC-H query, in both modes, at several moments of its run. Where the
/// pause lands is up to timing, so each case checks whatever boundary it
/// reached; an immediate pause aborts the running pipelines, which must
/// start over from nothing on the target and on the resumed source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_migrates_on_demand() {
    let source = engine(SOURCE_PARTITIONS).await;
    let target = engine(SOURCE_PARTITIONS).await;
    let target = Target {
        engine: &target,
        partitions: None,
    };
    let golden_dir = repo_root().join("tests/golden/tpch/sf0.01");
    let mut failures = Vec::new();
    let (mut moved, mut finished_first) = (0, 0);
    for (query, sql) in queries("tpch") {
        let Ok(Expected::Answers(answers)) = load_golden(&golden_dir, &query) else {
            panic!("{query}: no golden answer");
        };
        for (index, statement) in skiff_engine::statement::split_statements(&sql)
            .into_iter()
            .enumerate()
        {
            let Some(golden) = answers.iter().find(|g| g.statement == index + 1) else {
                let output = source.execute(statement).await.expect(statement);
                let _: Vec<RecordBatch> = output.stream.try_collect().await.expect(statement);
                continue;
            };
            for mode in [PauseMode::Finish, PauseMode::Abort] {
                for delay_ms in [0, 1, 3, 8, 20] {
                    let trigger = Trigger::Now(mode, Duration::from_millis(delay_ms));
                    match migrate(&source, &target, statement, trigger, golden).await {
                        Ok(m) if m.moved => moved += 1,
                        Ok(_) => finished_first += 1,
                        Err(e) => failures.push(format!("{query} {trigger:?}: {e}")),
                    }
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
    // Where pauses land depends on timing; a pause at 0 ms lands before the
    // result pipeline on any machine, so some must have moved.
    assert!(moved > 0, "no pause moved a query");
    println!(
        "{moved} on-demand migrations match DuckDB; {finished_first} reached the result first"
    );
}

/// A corrupted state byte is caught before the state is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_state_byte_is_detected() {
    let source = engine(SOURCE_PARTITIONS).await;
    let sql = queries("tpch")
        .into_iter()
        .find(|(q, _)| q == "q03")
        .expect("q03")
        .1;
    let execution = source
        .start(source.physical_plan(&sql).await.expect("plan"))
        .expect("cut");
    let k = execution.graph().len() - 1;
    execution.pause_after(k);
    let _stream = execution.execute().expect("execute");
    assert_eq!(execution.paused().await, Pause::Paused { finished: k });
    let mut extracted = separate(&execution, Compression::Lz4)
        .await
        .expect("separate")
        .state;
    assert!(extracted.rows() > 0, "empty state");
    let frame = extracted
        .outputs
        .iter_mut()
        .flat_map(|o| o.partitions.iter_mut().flatten())
        .find(|f| f.rows > 0)
        .expect("a frame");
    let middle = frame.bytes.len() / 2;
    frame.bytes[middle] ^= 0x10;
    match load(&extracted) {
        Err(LoadError::Checksum { .. }) => {}
        other => panic!("corruption not detected: {other:?}"),
    }
}

/// State that does not fit the plan's leaves is refused before anything
/// runs, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_of_another_shape_is_refused() {
    let source = engine(SOURCE_PARTITIONS).await;
    let sql = queries("tpch")
        .into_iter()
        .find(|(q, _)| q == "q03")
        .expect("q03")
        .1;
    let execution = source
        .start(source.physical_plan(&sql).await.expect("plan"))
        .expect("cut");
    execution.pause_after(2);
    let _stream = execution.execute().expect("execute");
    assert_eq!(execution.paused().await, Pause::Paused { finished: 2 });
    let Separated {
        remaining,
        state: mut extracted,
        ..
    } = separate(&execution, Compression::None)
        .await
        .expect("separate");
    assert!(
        !remaining.reads.is_empty(),
        "q03 reads state after 2 pipelines"
    );
    extracted.outputs[0].partitions.pop();
    let ctx = source.context().task_ctx();
    let plan = decode_plan(&encode_plan(remaining.plan).expect("encode"), &ctx).expect("decode");
    let loaded = load(&extracted).expect("load");
    let refused = resume(plan, &ctx, loaded).expect_err("resumed with a partition missing");
    assert!(refused.to_string().contains("partitions"), "{refused}");
}

/// A pause point beyond the last pipeline before the result never pauses:
/// the driver ends and the query answers as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_beyond_the_last_boundary_ends() {
    let source = engine(SOURCE_PARTITIONS).await;
    let sql = queries("tpch")
        .into_iter()
        .find(|(q, _)| q == "q01")
        .expect("q01")
        .1;
    let execution = source
        .start(source.physical_plan(&sql).await.expect("plan"))
        .expect("cut");
    execution.pause_after(execution.graph().len());
    let stream = execution.execute().expect("execute");
    assert_eq!(execution.paused().await, Pause::Ended);
    let batches: Vec<RecordBatch> = stream.try_collect().await.expect("answer");
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 4);
    assert!(
        execution.state().outputs.is_empty(),
        "state left after the query"
    );
}
