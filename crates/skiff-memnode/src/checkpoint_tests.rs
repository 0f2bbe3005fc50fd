//! Stage checkpoints (`skiff_node::checkpoints`) against a real memory
//! node's store: a committed task output is read exactly once, whoever
//! reads it and whichever attempt of its producer runs later; a producer
//! that fails mid-partition leaves nothing committed and no row read; a
//! read never mixes two attempts' partitions; a stage the query does not
//! commit is never committed. The producer is a test
//! channel that says which attempt made each row.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest,
    GetWorkerInfoResponse, ProducerHead, SetPlanRequest, TaskKey, WorkerChannel,
    WorkerToCoordinatorMsg,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use skiff_node::checkpoints::{CheckpointResolver, Connections, Target, key, marked, prefix};
use skiff_state::Compression;
use tonic::Code;
use tonic::codegen::http::HeaderMap;
use url::Url;

use crate::tests::node;

const PARTITIONS: usize = 3;

/// The query's checkpoint name.
const QUERY: &str = "q";

/// Rows of one partition: `(value, attempt)`, 5 per partition but the
/// last, which is empty.
fn rows(partition: usize) -> Vec<i64> {
    if partition + 1 == PARTITIONS {
        return Vec::new();
    }
    (0..5).map(|i| (partition * 100 + i) as i64).collect()
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("value", DataType::Int64, false),
        Field::new("attempt", DataType::Int64, false),
    ]))
}

/// A partition that fails, and after how many batches.
type Fail = Option<(usize, usize)>;

/// A producer task: each partition's rows in batches of two, tagged with
/// `attempt`; with `fail`, one partition fails after some batches.
struct Producer {
    attempt: i64,
    fail: Fail,
    calls: Arc<AtomicUsize>,
}

impl Producer {
    fn partition(&self, partition: usize) -> BoxStream<'static, Result<RecordBatch>> {
        let values = rows(partition);
        let mut batches: Vec<Result<RecordBatch>> = values
            .chunks(2)
            .map(|chunk| {
                let attempts = vec![self.attempt; chunk.len()];
                RecordBatch::try_new(
                    schema(),
                    vec![
                        Arc::new(Int64Array::from(chunk.to_vec())),
                        Arc::new(Int64Array::from(attempts)),
                    ],
                )
                .map_err(DataFusionError::from)
            })
            .collect();
        if let Some((failing, after)) = self.fail
            && failing == partition
        {
            batches.truncate(after);
            batches.push(Err(DataFusionError::Execution("producer lost".into())));
        }
        Box::pin(futures::stream::iter(batches))
    }
}

#[async_trait]
impl WorkerChannel for Producer {
    async fn coordinator_channel(
        &mut self,
        _: HeaderMap,
        _: SetPlanRequest,
        _: BoxStream<'static, CoordinatorToWorkerMsg>,
        _: ExecutionPlanMetricsSet,
        _: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        Err(DataFusionError::NotImplemented(
            "a producer of rows only".into(),
        ))
    }

    async fn execute_task(
        &mut self,
        _: HeaderMap,
        request: ExecuteTaskRequest,
        _: ExecutionPlanMetricsSet,
        _: &Arc<TaskContext>,
    ) -> Result<Vec<BoxStream<'static, Result<RecordBatch>>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(
            (request.target_partition_start..request.target_partition_end)
                .map(|p| self.partition(p))
                .collect(),
        )
    }

    async fn get_worker_info(&mut self, _: GetWorkerInfoRequest) -> Result<GetWorkerInfoResponse> {
        Ok(GetWorkerInfoResponse {
            version: "test".into(),
        })
    }
}

/// Resolves every URL to a [`Producer`] of `attempt`, or to nothing
/// (`attempt` 0: the producer's worker is gone).
struct Producers {
    attempt: i64,
    fail: Fail,
    calls: Arc<AtomicUsize>,
}

#[async_trait]
impl ChannelResolver for Producers {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        // A stage's mark is the coordinator's, never sent to a worker.
        assert_eq!(url.fragment(), None, "{url}");
        if self.attempt == 0 {
            return Err(DataFusionError::Execution(format!(
                "{url}: connection refused"
            )));
        }
        Ok(Box::new(Producer {
            attempt: self.attempt,
            fail: self.fail,
            calls: Arc::clone(&self.calls),
        }))
    }
}

/// The task read, as attempt `attempt` of the query knows it (each
/// attempt has its own library query id).
fn task(attempt: i64) -> TaskKey {
    TaskKey {
        query_id: uuid::Uuid::from_u128(attempt as u128),
        stage_id: 1,
        task_number: 2,
    }
}

/// A consumer reading `partitions` of [`task`] through the store at
/// `store`, from producers of `attempt`: the producer's calls, and per
/// partition its `(value, attempt)` rows or its error.
async fn read(
    store: &str,
    attempt: i64,
    fail: Fail,
    partitions: std::ops::Range<usize>,
) -> (usize, Vec<Result<Vec<(i64, i64)>>>) {
    let stages = [task(attempt).stage_id];
    read_committing(store, attempt, partitions, &stages, Duration::ZERO, fail).await
}

/// [`read`], of a query that commits the outputs of `stages` only, once
/// its task has run `after`.
async fn read_committing(
    store: &str,
    attempt: i64,
    partitions: std::ops::Range<usize>,
    stages: &[usize],
    after: Duration,
    fail: Fail,
) -> (usize, Vec<Result<Vec<(i64, i64)>>>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let producers = Producers {
        attempt,
        fail,
        calls: Arc::clone(&calls),
    };
    let target = Target {
        store: store.to_string(),
        query: QUERY.to_string(),
        stages: stages.iter().copied().collect(),
        lookup: true,
        after,
    };
    let connections = Connections {
        tasks: Arc::new(producers),
        stores: Arc::default(),
    };
    let resolver = CheckpointResolver::new(&connections, target, Compression::Lz4);
    let url = marked(&Url::parse("http://127.0.0.1:1").expect("url"), 3);
    let mut channel = resolver
        .get_worker_client_for_url(&url)
        .await
        .expect("channel");
    let request = ExecuteTaskRequest {
        task_key: task(attempt),
        target_partition_start: partitions.start,
        target_partition_end: partitions.end,
        producer_head: ProducerHead::None,
    };
    let streams = channel
        .execute_task(
            HeaderMap::new(),
            request,
            ExecutionPlanMetricsSet::new(),
            &Arc::new(TaskContext::default()),
        )
        .await
        .expect("streams");
    let mut read = Vec::new();
    for mut stream in streams {
        // Every batch the consumer is given counts, those before an error
        // too: it would have used them.
        let (mut batches, mut error) = (Vec::new(), None);
        while let Some(item) = stream.next().await {
            match item {
                Ok(batch) => batches.push(batch),
                Err(e) => error = Some(e),
            }
        }
        read.push(match error {
            Some(e) if batches.is_empty() => Err(e),
            Some(e) => panic!("{} rows given before the error {e}", pairs(&batches).len()),
            None => Ok(pairs(&batches)),
        });
    }
    (calls.load(Ordering::SeqCst), read)
}

fn pairs(batches: &[RecordBatch]) -> Vec<(i64, i64)> {
    let mut pairs = Vec::new();
    for batch in batches {
        let column = |i: usize| {
            batch
                .column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("int64")
                .clone()
        };
        let (values, attempts) = (column(0), column(1));
        pairs.extend(
            values
                .iter()
                .zip(attempts.iter())
                .map(|(v, a)| (v.expect("value"), a.expect("attempt"))),
        );
    }
    pairs
}

fn made_by(partition: usize, attempt: i64) -> Vec<(i64, i64)> {
    rows(partition).into_iter().map(|v| (v, attempt)).collect()
}

#[tokio::test]
async fn a_committed_output_is_read_again_from_the_store_exactly_once() {
    let node = node(0).await;
    // The first read asks the producer and commits each partition.
    let (calls, first) = read(&node.addr, 1, None, 0..PARTITIONS).await;
    assert_eq!(calls, 1);
    for (p, partition) in first.into_iter().enumerate() {
        assert_eq!(partition.expect("read"), made_by(p, 1), "partition {p}");
    }
    // A consumer run again reads the same outputs with the producer gone:
    // the store serves each, rows neither doubled nor lost.
    let (calls, again) = read(&node.addr, 0, None, 0..PARTITIONS).await;
    assert_eq!(calls, 0);
    for (p, partition) in again.into_iter().enumerate() {
        assert_eq!(partition.expect("reread"), made_by(p, 1), "partition {p}");
    }
    // With a producer run again (attempt 2), what is committed still wins:
    // the consumer never mixes two attempts' rows.
    let (calls, third) = read(&node.addr, 2, None, 0..PARTITIONS).await;
    assert_eq!(calls, 0, "every partition was committed");
    for (p, partition) in third.into_iter().enumerate() {
        assert_eq!(partition.expect("read"), made_by(p, 1), "partition {p}");
    }
    // When the query ends its checkpoints go, all at once, and nothing
    // else does.
    let other = "other-query/0";
    let kept = skiff_flight::get_state(&node.addr, &key(QUERY, &task(1), 0))
        .await
        .expect("committed");
    let options = skiff_flight::PutOptions::default();
    skiff_flight::put_state(&node.addr, other, &options, &kept)
        .await
        .expect("put");
    skiff_flight::delete_states_under(&node.addr, &prefix(QUERY))
        .await
        .expect("delete");
    for partition in 0..PARTITIONS {
        let gone = skiff_flight::get_state(&node.addr, &key(QUERY, &task(1), partition))
            .await
            .expect_err("deleted");
        assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    }
    let stats = skiff_flight::cache_stats(&node.addr).await.expect("stats");
    assert_eq!(stats.entries, 1, "only {other} is left");
}

#[tokio::test]
async fn a_producer_lost_mid_partition_commits_nothing_and_its_rerun_is_read_once() {
    let node = node(0).await;
    // Partition 0 fails after one batch: the consumer sees the error and
    // none of the batch before it; partition 1 is read and committed.
    let (calls, first) = read(&node.addr, 1, Some((0, 1)), 0..2).await;
    assert_eq!(calls, 1);
    let mut first = first.into_iter();
    let lost = first.next().expect("partition 0");
    assert!(
        matches!(&lost, Err(e) if e.to_string().contains("producer lost")),
        "{lost:?}"
    );
    assert_eq!(
        first.next().expect("partition 1").expect("read"),
        made_by(1, 1)
    );
    let status = skiff_flight::get_state(&node.addr, &key(QUERY, &task(1), 0))
        .await
        .expect_err("nothing committed for the failed partition");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    // The producer runs again (attempt 2): the read takes both
    // partitions from it, whole, not partition 1 from the store (two
    // attempts may deal their rows apart), and commits them.
    let (calls, again) = read(&node.addr, 2, None, 0..2).await;
    assert_eq!(calls, 1);
    let again: Vec<_> = again.into_iter().map(|p| p.expect("read")).collect();
    assert_eq!(again, vec![made_by(0, 2), made_by(1, 2)]);
    let (calls, third) = read(&node.addr, 0, None, 0..2).await;
    assert_eq!(calls, 0);
    let third: Vec<_> = third.into_iter().map(|p| p.expect("reread")).collect();
    assert_eq!(third, vec![made_by(0, 2), made_by(1, 2)]);
}

#[tokio::test]
async fn a_read_never_mixes_two_attempts_partitions() {
    let node = node(0).await;
    // Attempt 1 commits partition 0 and loses partition 1; attempt 2
    // loses partition 0 and commits partition 1: both are in the store,
    // made by two attempts, whose splits of the rows need not agree.
    let (_, first) = read(&node.addr, 1, Some((1, 1)), 0..2).await;
    assert!(first[0].is_ok() && first[1].is_err(), "{first:?}");
    let (_, second) = read(&node.addr, 2, Some((0, 1)), 0..2).await;
    assert!(second[0].is_err() && second[1].is_ok(), "{second:?}");
    for partition in 0..2 {
        skiff_flight::get_state(&node.addr, &key(QUERY, &task(1), partition))
            .await
            .expect("committed");
    }
    // A read of both asks the producer again and takes both from it.
    let (calls, third) = read(&node.addr, 3, None, 0..2).await;
    assert_eq!(calls, 1, "served from two attempts' partitions");
    let third: Vec<_> = third.into_iter().map(|p| p.expect("read")).collect();
    assert_eq!(third, vec![made_by(0, 3), made_by(1, 3)]);
    // Now one attempt made both: the store serves them.
    let (calls, fourth) = read(&node.addr, 0, None, 0..2).await;
    assert_eq!(calls, 0);
    let fourth: Vec<_> = fourth.into_iter().map(|p| p.expect("reread")).collect();
    assert_eq!(fourth, vec![made_by(0, 3), made_by(1, 3)]);
}

#[tokio::test]
async fn a_stage_left_out_or_read_too_soon_is_read_from_its_producer_and_never_committed() {
    let node = node(0).await;
    // The query commits stage 4's outputs only: a read of stage 1 goes to
    // its producer each time, and nothing of it reaches the store. So
    // does a read of stage 1 by a task that has not run long enough.
    let reads = [
        (1, [4], Duration::ZERO),
        (2, [1], Duration::from_secs(3600)),
    ];
    for (attempt, stages, after) in reads {
        let (calls, read) =
            read_committing(&node.addr, attempt, 0..PARTITIONS, &stages, after, None).await;
        assert_eq!(calls, 1, "attempt {attempt}");
        for (p, partition) in read.into_iter().enumerate() {
            assert_eq!(
                partition.expect("read"),
                made_by(p, attempt),
                "partition {p}"
            );
        }
    }
    let stats = skiff_flight::cache_stats(&node.addr).await.expect("stats");
    assert_eq!((stats.puts, stats.entries), (0, 0));
}
