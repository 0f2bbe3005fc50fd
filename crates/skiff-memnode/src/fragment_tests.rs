//! Offloaded fragments in process: the coordinator's cut of a query's
//! scan, filter and projection (perhaps aggregated), sent over Flight to a
//! memory node holding the files, answered row group by row group; and
//! every way it is pushed back instead.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use skiff_engine::buffer::FileVersion;
use skiff_engine::offload::{Fragment, FragmentEvent, is_partial_half};
use skiff_flight::chunks::chunk_file;
use skiff_flight::fragments::{run_fragment, schema_bytes};
use skiff_flight::protocol::{FragmentDecision, FragmentFile, FragmentRequest, OffloadMode};

use super::ChunkStore;
use super::chunk_tests::{load_request, served, served_with, version, write_file};
use skiff_offload::fragment::fragment;

const DEADLINE: Duration = Duration::from_secs(20);

/// The fragment of `sql` over table `t` (the files of `dir`), as the
/// coordinator cuts it, and DataFusion's own answer.
async fn cut(dir: &std::path::Path, sql: &str) -> (Fragment, Vec<RecordBatch>) {
    let ctx = SessionContext::new();
    ctx.register_parquet("t", dir.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let frame = ctx.sql(sql).await.unwrap();
    let plan = frame.clone().into_optimized_plan().unwrap();
    let fragment = fragment(&plan, &ctx.state()).unwrap();
    (fragment, frame.collect().await.unwrap())
}

fn request(fragment: &Fragment, files: Vec<FragmentFile>) -> FragmentRequest {
    FragmentRequest {
        plan: fragment.plan.clone(),
        input_schema: schema_bytes(&fragment.input_schema).unwrap(),
        files,
        mode: OffloadMode::Always as i32,
        fragment: true,
        ..FragmentRequest::default()
    }
}

fn whole(files: &[FileVersion]) -> Vec<FragmentFile> {
    files
        .iter()
        .map(|f| FragmentFile {
            file: Some(chunk_file(f)),
            ..FragmentFile::default()
        })
        .collect()
}

/// The node's answer: decision, rows, the (file, row group) marks in order
/// and whether the end mark came.
async fn ask(
    addr: &str,
    request: &FragmentRequest,
) -> (
    FragmentDecision,
    Vec<RecordBatch>,
    Vec<(usize, usize)>,
    bool,
) {
    let mut client = skiff_flight::connect(addr).await.unwrap();
    let (decision, mut events) = run_fragment(&mut client, request, DEADLINE, DEADLINE)
        .await
        .unwrap();
    let (mut rows, mut marks, mut ended) = (Vec::new(), Vec::new(), false);
    while let Some(event) = events.next().await {
        match event.unwrap() {
            FragmentEvent::Rows(batch) => rows.push(batch),
            FragmentEvent::Done { file, row_group } => marks.push((file, row_group)),
            FragmentEvent::End { measured } => {
                assert!(measured.execution > std::time::Duration::ZERO);
                ended = true;
            }
        }
    }
    (decision, rows, marks, ended)
}

/// `batches` as sorted lines, to compare answers whatever their order.
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let text = pretty_format_batches(batches).unwrap().to_string();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("| "))
        .skip(1)
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// Two files of table `t` (the first's path returned) wholly held by a
/// node serving over Flight.
async fn two_files_held() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    [FileVersion; 2],
    super::chunk_tests::Served,
) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.parquet"), dir.path().join("b.parquet"));
    write_file(&a, 0);
    write_file(&b, 1_000_000);
    let files = [version(&a).await, version(&b).await];
    let store = ChunkStore::new(10 << 20, 4 << 10);
    store
        .load(&load_request(&files, &["id", "name", "score"]))
        .await
        .unwrap();
    let node = served(store).await;
    (dir, a, files, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offloaded_fragment_answers_as_the_worker_would_row_group_by_row_group() {
    let (dir, a, files, node) = two_files_held().await;

    let sql = "SELECT id, upper(name) AS shout FROM t \
               WHERE score > 1000 AND id % 3 = 0 AND name LIKE '%7%'";
    let (fragment, expected) = cut(dir.path(), sql).await;
    // The node reads only the columns the fragment names.
    let read: Vec<&str> = fragment
        .input_schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(read, ["id", "name", "score"]);
    let (decision, rows, marks, ended) = ask(&node.addr, &request(&fragment, whole(&files))).await;
    assert!(decision.offload, "{}", decision.reason);
    assert_eq!(decision.row_groups, [5, 5]);
    // Estimated from the node's sketches: every row read, some kept.
    assert_eq!(decision.input_rows, 2 * super::chunk_tests::ROWS as u64);
    assert!(decision.estimated_rows > 0.0, "{decision:?}");
    assert!(ended);
    let every: Vec<(usize, usize)> = (0..2).flat_map(|f| (0..5).map(move |g| (f, g))).collect();
    assert_eq!(marks, every);
    assert!(!expected.is_empty());
    assert_eq!(lines(&rows), lines(&expected));

    // A byte range of a file: the row groups whose first page is in it.
    let meta = parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(
            std::fs::File::open(&a).unwrap(),
        )
        .unwrap(),
    )
    .clone();
    let start = |g: usize| {
        let column = meta.row_group(g).column(0);
        column
            .dictionary_page_offset()
            .unwrap_or_else(|| column.data_page_offset())
    };
    let ranged = vec![FragmentFile {
        file: Some(chunk_file(&files[0])),
        ranged: true,
        start: start(1),
        end: start(3),
    }];
    let (decision, _, marks, ended) = ask(&node.addr, &request(&fragment, ranged)).await;
    assert!(decision.offload && ended);
    assert_eq!(marks, [(0, 1), (0, 2)]);
}

/// `partials`, a node's partial states of `sql`'s aggregation, merged by
/// the final half DataFusion plans for `sql` over `dir` (as a worker's
/// plan merges them: positionally).
async fn merged(dir: &std::path::Path, sql: &str, partials: Vec<RecordBatch>) -> Vec<RecordBatch> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(2));
    ctx.register_parquet("t", dir.to_str().unwrap(), ParquetReadOptions::default())
        .await
        .unwrap();
    let plan = ctx
        .sql(sql)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let mut replaced = 0;
    let plan = plan
        .transform_up(|node| {
            if !is_partial_half(&node) {
                return Ok(Transformed::no(node));
            }
            replaced += 1;
            let schema = node.schema();
            let rows: Vec<RecordBatch> = partials
                .iter()
                .map(|b| RecordBatch::try_new(Arc::clone(&schema), b.columns().to_vec()).unwrap())
                .collect();
            let scan: Arc<dyn ExecutionPlan> =
                MemorySourceConfig::try_new_exec(&[rows], schema, None)?;
            Ok(Transformed::yes(scan))
        })
        .unwrap()
        .data;
    assert_eq!(replaced, 1, "one partial half in {sql}");
    collect(plan, ctx.task_ctx()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregated_fragment_answers_partial_states_the_worker_merges() {
    let (dir, _, files, node) = two_files_held().await;
    for sql in [
        "SELECT id % 5 AS k, count(*) AS n, count(name) AS named, sum(id) AS s, \
         avg(id) AS mean, min(score) AS lo, max(score) AS hi \
         FROM t WHERE score > 100 GROUP BY id % 5",
        "SELECT count(*), sum(id), max(name) FROM t WHERE id % 3 = 0",
        // Unfiltered: the partial states are what it saves.
        "SELECT name IS NULL AS unnamed, count(*) FROM t GROUP BY name IS NULL",
    ] {
        let (fragment, expected) = cut(dir.path(), sql).await;
        let (decision, rows, marks, ended) =
            ask(&node.addr, &request(&fragment, whole(&files))).await;
        assert!(decision.offload, "{sql}: {}", decision.reason);
        assert!(ended && marks.len() == 10, "{sql}: {marks:?}");
        // Estimated as partial states: a row group's groups, on each of
        // the node's threads.
        assert!(decision.estimated_rows >= 10.0, "{sql}: {decision:?}");
        let answer = merged(dir.path(), sql, rows).await;
        assert!(!expected.is_empty());
        assert_eq!(lines(&answer), lines(&expected), "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fragment_the_node_cannot_run_is_pushed_back_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    write_file(&a, 0);
    let files = [version(&a).await];
    let store = ChunkStore::new(10 << 20, 4 << 10);
    // score is not held.
    store
        .load(&load_request(&files, &["id", "name"]))
        .await
        .unwrap();
    let node = served(store).await;
    let pushed_back = |decision: &FragmentDecision, words: &str| {
        assert!(!decision.offload);
        assert!(decision.reason.contains(words), "{}", decision.reason);
    };

    let (scored, _) = cut(dir.path(), "SELECT id FROM t WHERE score > 10").await;
    let (decision, rows, marks, _) = ask(&node.addr, &request(&scored, whole(&files))).await;
    pushed_back(&decision, "column score");
    assert!(rows.is_empty() && marks.is_empty());

    // A file version the node does not hold.
    let (ids, _) = cut(dir.path(), "SELECT id FROM t WHERE id > 10").await;
    let mut other = files[0].clone();
    other.size += 1;
    let (decision, ..) = ask(&node.addr, &request(&ids, whole(&[other]))).await;
    pushed_back(&decision, "not held");

    // Bytes that are no Substrait plan.
    let mut garbage = request(&ids, whole(&files));
    garbage.plan = vec![0xff; 32];
    let (decision, ..) = ask(&node.addr, &garbage).await;
    pushed_back(&decision, "Substrait");

    // A plan that is no fragment: a sort and a limit.
    let ctx = SessionContext::new();
    ctx.register_parquet(
        "t",
        dir.path().to_str().unwrap(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let plan: LogicalPlan = ctx
        .sql("SELECT id FROM t WHERE id > 10 ORDER BY id DESC LIMIT 3")
        .await
        .unwrap()
        .into_optimized_plan()
        .unwrap();
    let sorted = fragment(&plan, &ctx.state()).unwrap();
    let (decision, ..) = ask(&node.addr, &request(&sorted, whole(&files))).await;
    pushed_back(&decision, "unsupported fragment");

    // A predicate only the scan carries (as a table that applies it
    // exactly leaves it) is applied by the node all the same.
    let source = Arc::new(
        datafusion::logical_expr::logical_plan::builder::LogicalTableSource::new(
            ids.input_schema.clone(),
        ),
    );
    let scan_only = datafusion::logical_expr::LogicalPlanBuilder::scan_with_filters(
        "t",
        source,
        None,
        vec![datafusion::prelude::col("id").lt(datafusion::prelude::lit(100i64))],
    )
    .unwrap()
    .build()
    .unwrap();
    let filtered = fragment(&scan_only, &ctx.state()).unwrap();
    let (decision, rows, ..) = ask(&node.addr, &request(&filtered, whole(&files))).await;
    assert!(decision.offload, "{}", decision.reason);
    let got: usize = rows.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(got, 100);

    // The node still answers what it can.
    let (decision, rows, ..) = ask(&node.addr, &request(&ids, whole(&files))).await;
    assert!(decision.offload, "{}", decision.reason);
    let got: usize = rows.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(got, super::chunk_tests::ROWS - 11);

    // The node remembers each: what it decided, estimated and kept.
    let stats = skiff_flight::chunks::memory_stats(&node.addr)
        .await
        .unwrap();
    let records = &stats.fragments;
    assert_eq!(records.len(), 6, "{records:?}");
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
    assert!(!records[0].offloaded && records[0].reason.contains("column score"));
    let last = &records[5];
    assert!(last.offloaded, "{last:?}");
    assert_eq!(last.rows, got as u64);
    assert_eq!(last.input_rows, super::chunk_tests::ROWS as u64);
    assert!(last.estimated_rows > 0.0 && last.execution_nanos > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_fragments_go_where_the_cost_models_predict_faster() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    write_file(&a, 0);
    let files = [version(&a).await];
    let load = || async {
        let store = ChunkStore::new(10 << 20, 4 << 10);
        store
            .load(&load_request(&files, &["id", "name", "score"]))
            .await
            .unwrap();
        store
    };
    // One offload thread, models of a 1 Gbit/s link.
    let offloader = super::fragments::Offloader::new(1)
        .unwrap()
        .with_models(skiff_offload::costs::testing::trained(), None);
    let node = served_with(load().await, offloader).await;
    let auto = |fragment: &Fragment| FragmentRequest {
        mode: OffloadMode::Auto as i32,
        query_id: 42,
        ..request(fragment, whole(&files))
    };

    // Ten rows of thousands: sending them beats sending the columns.
    let (selective, expected) = cut(dir.path(), "SELECT id, name FROM t WHERE id < 10").await;
    let (decision, rows, _, ended) = ask(&node.addr, &auto(&selective)).await;
    assert!(decision.offload && ended, "{decision:?}");
    assert!(
        decision.reason.contains("predicted faster here"),
        "{}",
        decision.reason
    );
    let predicted = decision.predicted.expect("predicted");
    assert!(
        predicted.offload_nanos() < predicted.push_back_nanos(),
        "{predicted:?}"
    );
    assert!(predicted.input_bytes > predicted.output_bytes);
    assert_eq!(lines(&rows), lines(&expected));

    // Everything kept: the same bytes cross either way, and the node
    // would add its encoding.
    let (everything, _) = cut(dir.path(), "SELECT id, name FROM t WHERE id >= 0").await;
    let (decision, rows, marks, _) = ask(&node.addr, &auto(&everything)).await;
    assert!(!decision.offload, "{decision:?}");
    assert!(
        decision.reason.contains("predicted faster pushed back"),
        "{}",
        decision.reason
    );
    assert!(rows.is_empty() && marks.is_empty());
    let predicted = decision.predicted.expect("predicted");
    assert!(
        predicted.push_back_nanos() <= predicted.offload_nanos(),
        "{predicted:?}"
    );

    // `always` runs it all the same, its prediction recorded.
    let (decision, ..) = ask(&node.addr, &request(&everything, whole(&files))).await;
    assert!(
        decision.offload && decision.predicted.is_some(),
        "{decision:?}"
    );

    let stats = skiff_flight::chunks::memory_stats(&node.addr)
        .await
        .unwrap();
    let records = &stats.fragments;
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(records.iter().all(|r| r.predicted.is_some()));
    assert_eq!(
        (records[0].query_id, records[0].mode.as_str()),
        (42, "auto")
    );
    assert_eq!(records[2].mode, "always");
    let measured = records[0].measured.expect("measured");
    assert!(
        measured.execution_nanos > 0 && measured.output_bytes > 0,
        "{measured:?}"
    );
    assert!(records[1].measured.is_none());

    // A node without models pushes every `auto` fragment back.
    let bare = served(load().await).await;
    let (decision, ..) = ask(&bare.addr, &auto(&selective)).await;
    assert!(!decision.offload && decision.predicted.is_none());
    assert!(
        decision.reason.contains("no cost models"),
        "{}",
        decision.reason
    );
}
