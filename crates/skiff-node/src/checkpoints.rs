//! Stage checkpoints (`skiff.stage_checkpoints`, issue 42): a distributed
//! query's stage outputs committed to the memory node's store as their
//! consumers read them, so that a read that must happen again is served
//! from the store rather than by a producer that can no longer give it
//! (a producer's partition streams once and is gone).
//!
//! The hook is datafusion-distributed's `ChannelResolver`: every read of
//! a remote task's partitions (the library's `WorkerConnectionPool`,
//! under its network boundaries) asks it for a `WorkerChannel` and calls
//! `execute_task`. [`CheckpointResolver`] wraps the gRPC resolver; its
//! channel serves each requested partition from the store when it is
//! committed there, and otherwise reads the producer's stream whole,
//! commits it under [`key`], and only then yields it. A producer that
//! fails mid-partition leaves nothing committed and yields no row of that
//! partition, only the error: a consumer never sees part of an output, a
//! committed output is whole, and a read of a committed output neither
//! doubles nor loses a row. The cost is that a consumer waits for a whole
//! partition before it starts on it, and the bytes travel to the store.
//!
//! A checkpoint is an aid, never a failure: a store that cannot be
//! reached or refuses a put is logged and the batches go on as read.
//! Not yet done (issue 42): a worker's reads of its own tasks are not
//! committed (the library answers them in-process before the resolver),
//! and nothing re-runs a lost task yet (a query that loses a worker still
//! runs again from the start).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::Schema;
use async_trait::async_trait;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion_distributed::{
    ChannelResolver, CoordinatorToWorkerMsg, ExecuteTaskRequest, GetWorkerInfoRequest,
    GetWorkerInfoResponse, SetPlanRequest, TaskKey, WorkerChannel, WorkerToCoordinatorMsg,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use skiff_engine::PipelineId;
use skiff_flight::state_cache::{PutOptions, get_state, put_state};
use skiff_state::{Compression, extract_batches, load};
use tonic::Code;
use tonic::codegen::http::{HeaderMap, HeaderName, HeaderValue};
use tracing::{debug, warn};
use url::Url;

use crate::limits::{CHECKPOINT_COMMIT_DEADLINE, CHECKPOINT_LOOKUP_DEADLINE, CHECKPOINT_TTL};

/// The header that tells a task's session where its query's checkpoints
/// go (the memory node's address); sent only when they are on.
pub const STORE_HEADER: &str = "x-skiff-checkpoint-store";

/// The one output of a committed partition's state.
const OUTPUT: PipelineId = PipelineId(0);

/// Where a committed output of `task`'s `partition` lives in the store.
pub fn key(task: &TaskKey, partition: usize) -> String {
    format!(
        "checkpoint/{}/{}/{}/{partition}",
        task.query_id, task.stage_id, task.task_number
    )
}

/// Add the store's address to the headers a query's tasks carry.
pub fn add_store(headers: &mut HeaderMap, store: &str) -> Result<()> {
    let value = HeaderValue::try_from(store)
        .map_err(|e| DataFusionError::Internal(format!("checkpoint store {store:?}: {e}")))?;
    headers.insert(HeaderName::from_static(STORE_HEADER), value);
    Ok(())
}

/// The store a task's headers name, if its query commits checkpoints.
pub fn store_from(headers: &HeaderMap) -> Option<String> {
    headers
        .get(STORE_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// A `ChannelResolver` whose channels read through the store at `store`
/// (`host:port` of a memory node).
pub struct CheckpointResolver {
    inner: Arc<dyn ChannelResolver + Send + Sync>,
    store: Arc<str>,
    compression: Compression,
}

impl CheckpointResolver {
    pub fn new(
        inner: Arc<dyn ChannelResolver + Send + Sync>,
        store: &str,
        compression: Compression,
    ) -> Self {
        Self {
            inner,
            store: Arc::from(store),
            compression,
        }
    }
}

#[async_trait]
impl ChannelResolver for CheckpointResolver {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        // The producer is reached only for what the store lacks: a
        // committed output is served even when its producer is gone.
        Ok(Box::new(CheckpointChannel {
            url: url.clone(),
            inner: Arc::clone(&self.inner),
            producer: None,
            store: Arc::clone(&self.store),
            compression: self.compression,
        }))
    }
}

struct CheckpointChannel {
    url: Url,
    inner: Arc<dyn ChannelResolver + Send + Sync>,
    producer: Option<Box<dyn WorkerChannel>>,
    store: Arc<str>,
    compression: Compression,
}

impl CheckpointChannel {
    async fn producer(&mut self) -> Result<&mut Box<dyn WorkerChannel>> {
        let channel = match self.producer.take() {
            Some(channel) => channel,
            None => self.inner.get_worker_client_for_url(&self.url).await?,
        };
        Ok(self.producer.insert(channel))
    }
}

type Batches = BoxStream<'static, Result<RecordBatch>>;

#[async_trait]
impl WorkerChannel for CheckpointChannel {
    async fn coordinator_channel(
        &mut self,
        headers: HeaderMap,
        set_plan_request: SetPlanRequest,
        c2w_stream: BoxStream<'static, CoordinatorToWorkerMsg>,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<WorkerToCoordinatorMsg>>> {
        self.producer()
            .await?
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
    }

    async fn execute_task(
        &mut self,
        headers: HeaderMap,
        request: ExecuteTaskRequest,
        metrics: ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> Result<Vec<Batches>> {
        let task = request.task_key;
        let keys: Vec<String> = (request.target_partition_start..request.target_partition_end)
            .map(|partition| key(&task, partition))
            .collect();
        let committed =
            futures::future::join_all(keys.iter().map(|key| committed(&self.store, key))).await;
        if committed.iter().all(Option::is_some) {
            debug!(?task, partitions = keys.len(), "served from checkpoints");
            return Ok(committed.into_iter().flatten().map(stored).collect());
        }
        let streams = self
            .producer()
            .await?
            .execute_task(headers, request, metrics, task_ctx)
            .await?;
        if streams.len() != keys.len() {
            return Err(DataFusionError::Internal(format!(
                "task {task:?} gave {} streams for {} partitions",
                streams.len(),
                keys.len()
            )));
        }
        Ok(streams
            .into_iter()
            .zip(keys)
            .zip(committed)
            .map(|((stream, key), committed)| match committed {
                // The producer's own copy goes unread (dropped).
                Some(batches) => stored(batches),
                None => commit_then_yield(stream, key, Arc::clone(&self.store), self.compression),
            })
            .collect())
    }

    async fn get_worker_info(
        &mut self,
        request: GetWorkerInfoRequest,
    ) -> Result<GetWorkerInfoResponse> {
        self.producer().await?.get_worker_info(request).await
    }
}

fn stored(batches: Vec<RecordBatch>) -> Batches {
    futures::stream::iter(batches.into_iter().map(Ok)).boxed()
}

/// The batches committed under `key`, if any. A store that cannot answer
/// within `CHECKPOINT_LOOKUP_DEADLINE` counts as holding nothing (the
/// producer is asked).
async fn committed(store: &str, key: &str) -> Option<Vec<RecordBatch>> {
    let state = match tokio::time::timeout(CHECKPOINT_LOOKUP_DEADLINE, get_state(store, key)).await
    {
        Ok(Ok(state)) => state,
        Ok(Err(status)) if status.code() == Code::NotFound => return None,
        Ok(Err(status)) => {
            warn!(%key, error = status.message(), "checkpoint unreadable; reading the producer");
            return None;
        }
        Err(_) => {
            warn!(%key, "checkpoint store silent; reading the producer");
            return None;
        }
    };
    match load(&state) {
        Ok(loaded) => loaded
            .get(OUTPUT)
            .and_then(|table| table.partitions.first().cloned()),
        Err(e) => {
            warn!(%key, error = %e, "checkpoint damaged; reading the producer");
            None
        }
    }
}

/// Read `stream` whole, commit it under `key`, then yield it; an error
/// before its end yields that error and no row.
fn commit_then_yield(stream: Batches, key: String, store: Arc<str>, c: Compression) -> Batches {
    futures::stream::once(async move {
        let batches: Vec<RecordBatch> = stream.try_collect().await?;
        commit(&store, &key, &batches, c).await;
        Ok::<_, DataFusionError>(stored(batches))
    })
    .try_flatten()
    .boxed()
}

/// Commit `batches` under `key`, waiting `CHECKPOINT_COMMIT_DEADLINE` at
/// most. Logged, never fatal: the consumer has the batches either way.
async fn commit(store: &str, key: &str, batches: &[RecordBatch], compression: Compression) {
    let schema = batches
        .first()
        .map_or_else(|| Arc::new(Schema::empty()), RecordBatch::schema);
    let state = match extract_batches(OUTPUT, &schema, batches.to_vec(), compression) {
        Ok(state) => state,
        Err(e) => {
            warn!(%key, error = %e, "checkpoint not encoded; not committed");
            return;
        }
    };
    let options = PutOptions {
        ttl: CHECKPOINT_TTL,
        read_once: false,
        durable: false,
    };
    // A put cut off by the deadline leaves nothing: the store makes an
    // entry visible only once it has every message.
    let put = put_state(store, key, &options, &state);
    match tokio::time::timeout(CHECKPOINT_COMMIT_DEADLINE, put).await {
        Ok(Ok(_)) => {}
        Ok(Err(status)) => warn!(%key, error = status.message(), "checkpoint not committed"),
        Err(_) => warn!(%key, "checkpoint store silent; not committed"),
    }
}
