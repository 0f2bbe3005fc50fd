//! Stage checkpoints (`skiff.stage_checkpoints`, issue 42): a distributed
//! query's stage outputs committed to the memory node's store as their
//! consumers read them, so that a read that must happen again is served
//! from the store rather than by a producer that can no longer give it
//! (a producer's partition streams once and is gone).
//!
//! The hook is datafusion-distributed's `ChannelResolver`: every read of
//! a remote task's partitions (the library's `WorkerConnectionPool`,
//! under its network boundaries) asks it for a `WorkerChannel` and calls
//! `execute_task`. [`CheckpointResolver`] wraps the gRPC resolver. Its
//! channel, for a stage whose outputs the query commits
//! ([`Target::stages`]), serves a read from the store when every
//! partition it asks for is committed there (looked up only by an attempt
//! after the first, [`Target::lookup`]), and otherwise reads each of the
//! producer's streams whole, then yields it while it commits it under
//! [`key`]; the stream ends once the commit is in. A producer that fails
//! mid-partition leaves nothing committed and yields no row of that
//! partition, only the error: a consumer never sees part of an output, a
//! committed output is whole, and a read of a committed output neither
//! doubles nor loses a row. A read of any other stage goes straight to
//! its producer. A read takes all its partitions from one
//! attempt of the producer: how a producer deals its rows among its
//! partitions can differ between attempts (a round-robin split), so two
//! attempts' partitions need not add up to one output. So each committed
//! output names the attempt that made it (the library's query id of that
//! attempt, in its schema's metadata under [`ATTEMPT_KEY`]), and a read is
//! served from the store only when every partition it asks for is there
//! from one attempt; otherwise all of them come from the producer again.
//! The cost is that a consumer waits for a whole partition before it
//! starts on it, and the bytes travel to the store (over connections the
//! process keeps, [`Connections`]); `auto` commits only where the
//! consumer waits for all of it anyway (`skiff_coordinator`'s
//! `stage_commits`).
//!
//! Keys are the query's checkpoint name ([`Target::query`], the same for
//! every attempt that may share them), the stage, the task and the
//! partition: an attempt that runs the same stages again
//! (`skiff_coordinator`'s `stage_reuse`) reads what an earlier one
//! committed. The library answers a task's read of a task on its own
//! worker in-process, before any resolver: the coordinator marks each
//! stage's worker URLs apart ([`marked`]) so that no read is local, and
//! the resolver strips the mark before it connects.
//!
//! A checkpoint is an aid, never a failure: a store that cannot be
//! reached or refuses a put is logged and the batches go on as read.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::Schema;
use async_trait::async_trait;
use datafusion::common::runtime::SpawnedTask;
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
use skiff_flight::Clients;
use skiff_flight::state_cache::{PutOptions, get_state_with, put_state_with};
use skiff_state::{Compression, extract_batches, load};
use tonic::Code;
use tonic::codegen::http::{HeaderMap, HeaderName, HeaderValue};
use tracing::{debug, warn};
use url::Url;

use crate::limits::{CHECKPOINT_COMMIT_DEADLINE, CHECKPOINT_LOOKUP_DEADLINE, CHECKPOINT_TTL};

/// The header that tells a task's session where its query's checkpoints
/// go (the memory node's address); sent only when they are on.
pub const STORE_HEADER: &str = "x-skiff-checkpoint-store";

/// The header that names the query's checkpoints ([`Target::query`]).
pub const QUERY_HEADER: &str = "x-skiff-checkpoint-query";

/// The header that lists the stages whose outputs are committed
/// ([`Target::stages`]), their numbers joined by commas.
pub const STAGES_HEADER: &str = "x-skiff-checkpoint-stages";

/// The header that says whether an earlier attempt may have committed
/// outputs ([`Target::lookup`]): `1` or `0`.
pub const LOOKUP_HEADER: &str = "x-skiff-checkpoint-lookup";

/// The header that says how long a task runs before its reads commit
/// ([`Target::after`]), in milliseconds.
pub const AFTER_HEADER: &str = "x-skiff-checkpoint-after-ms";

/// The fragment of a worker URL that [`marked`] sets.
const MARK: &str = "stage-";

/// The schema metadata key of a committed output's attempt: the library's
/// query id of the attempt whose producer made it.
pub const ATTEMPT_KEY: &str = "skiff.checkpoint.attempt";

/// The one output of a committed partition's state.
const OUTPUT: PipelineId = PipelineId(0);

/// Where a query's checkpoints go, under what name, and of which stages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The memory node's `host:port`.
    pub store: String,
    /// The name its keys begin with: one per query, kept by the attempts
    /// that run the same stages again, a new one for an attempt that
    /// must not read an earlier one's outputs.
    pub query: String,
    /// The stages (the library's stage numbers) whose outputs are
    /// committed; a read of any other stage goes straight to its producer.
    pub stages: BTreeSet<usize>,
    /// An earlier attempt may have committed outputs under this name, so a
    /// read looks in the store first. A first attempt's reads do not: the
    /// store holds nothing of it yet, and each look is a round trip
    /// before the producer is asked.
    pub lookup: bool,
    /// How long a task (or the head stage) runs before its reads commit:
    /// a partition read whole sooner is not committed. Zero
    /// under `all`; under `auto` a query lost sooner runs again from the
    /// start at little cost (`skiff.stage_checkpoints_after_ms`).
    pub after: Duration,
}

/// Where a committed output of `task`'s `partition` lives in the store,
/// for the query whose checkpoints are named `query`. The library's own
/// query id is left out: each attempt has its own.
pub fn key(query: &str, task: &TaskKey, partition: usize) -> String {
    format!(
        "{}/{}/{}/{partition}",
        prefix(query),
        task.stage_id,
        task.task_number
    )
}

/// What every key of the checkpoints named `name` begins with, and those
/// of names that begin with it: the coordinator names a query's
/// checkpoints by a UUID and a later plan of the same query by that UUID
/// and another, so that one deletion takes them all.
pub fn prefix(name: &str) -> String {
    format!("checkpoint/{name}")
}

/// Add `target` to the headers a query's tasks carry.
pub fn add_target(headers: &mut HeaderMap, target: &Target) -> Result<()> {
    let stages: Vec<String> = target.stages.iter().map(usize::to_string).collect();
    let stages = stages.join(",");
    let lookup = if target.lookup { "1" } else { "0" }.to_string();
    let after = target.after.as_millis().to_string();
    let values = [
        (STORE_HEADER, &target.store),
        (QUERY_HEADER, &target.query),
        (STAGES_HEADER, &stages),
        (LOOKUP_HEADER, &lookup),
        (AFTER_HEADER, &after),
    ];
    for (name, value) in values {
        let value = HeaderValue::try_from(value.as_str())
            .map_err(|e| DataFusionError::Internal(format!("checkpoint {name} {value:?}: {e}")))?;
        headers.insert(HeaderName::from_static(name), value);
    }
    Ok(())
}

/// The target a task's headers name, if its query commits checkpoints
/// (of one stage at least). A stage list that does not parse names none:
/// a checkpoint is an aid, and the task runs without.
pub fn target_from(headers: &HeaderMap) -> Option<Target> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let stages = header(STAGES_HEADER)?;
    let stages = stages.split(',').map(|n| n.trim().parse::<usize>());
    let stages = match stages.collect::<std::result::Result<BTreeSet<_>, _>>() {
        Ok(stages) => stages,
        Err(e) => {
            warn!(error = %e, "checkpoint stages unreadable; nothing committed");
            return None;
        }
    };
    Some(Target {
        store: header(STORE_HEADER)?,
        query: header(QUERY_HEADER)?,
        stages,
        lookup: header(LOOKUP_HEADER).is_some_and(|v| v == "1"),
        after: Duration::from_millis(header(AFTER_HEADER)?.parse().ok()?),
    })
}

/// `url` as the URL of a task of the `stage`-th stage routed: the same
/// worker, but equal to no other stage's URL of it, so that the library
/// never answers a read between two stages in-process, past the store.
pub fn marked(url: &Url, stage: usize) -> Url {
    let mut marked = url.clone();
    marked.set_fragment(Some(&format!("{MARK}{stage}")));
    marked
}

/// `url` without [`marked`]'s mark: what a connection is made to.
fn unmarked(url: &Url) -> Url {
    let mut plain = url.clone();
    if plain.fragment().is_some_and(|f| f.starts_with(MARK)) {
        plain.set_fragment(None);
    }
    plain
}

/// The connections of a process that queries' checkpoints use, made once
/// and shared by them all: to the workers' task services (one gRPC
/// resolver, reusing its connections as the library's own does) and to
/// the store.
#[derive(Clone)]
pub struct Connections {
    pub tasks: Arc<dyn ChannelResolver + Send + Sync>,
    pub stores: Arc<Clients>,
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            tasks: Arc::new(datafusion_distributed::grpc::DefaultChannelResolver::default()),
            stores: Arc::default(),
        }
    }
}

/// A `ChannelResolver` whose channels read through the store its
/// [`Target`] names (`host:port` of a memory node), over the process's
/// [`Connections`].
pub struct CheckpointResolver {
    inner: Arc<dyn ChannelResolver + Send + Sync>,
    stores: Arc<Clients>,
    target: Arc<Target>,
    compression: Compression,
    /// When the task (or the head stage) was set up: [`Target::after`]
    /// counts from here. Each process's own clock, never compared with
    /// another's.
    began: Instant,
}

impl CheckpointResolver {
    pub fn new(connections: &Connections, target: Target, compression: Compression) -> Self {
        Self {
            inner: Arc::clone(&connections.tasks),
            stores: Arc::clone(&connections.stores),
            target: Arc::new(target),
            compression,
            began: Instant::now(),
        }
    }
}

#[async_trait]
impl ChannelResolver for CheckpointResolver {
    async fn get_worker_client_for_url(&self, url: &Url) -> Result<Box<dyn WorkerChannel>> {
        // The producer is reached only for what the store lacks: a
        // committed output is served even when its producer is gone.
        Ok(Box::new(CheckpointChannel {
            url: unmarked(url),
            inner: Arc::clone(&self.inner),
            producer: None,
            stores: Arc::clone(&self.stores),
            target: Arc::clone(&self.target),
            compression: self.compression,
            began: self.began,
        }))
    }
}

struct CheckpointChannel {
    url: Url,
    inner: Arc<dyn ChannelResolver + Send + Sync>,
    producer: Option<Box<dyn WorkerChannel>>,
    stores: Arc<Clients>,
    target: Arc<Target>,
    compression: Compression,
    began: Instant,
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
        if !self.target.stages.contains(&task.stage_id) {
            let producer = self.producer().await?;
            return producer
                .execute_task(headers, request, metrics, task_ctx)
                .await;
        }
        let keys: Vec<String> = (request.target_partition_start..request.target_partition_end)
            .map(|partition| key(&self.target.query, &task, partition))
            .collect();
        if self.target.lookup {
            let (stores, store) = (self.stores.as_ref(), self.target.store.as_str());
            let looks = keys.iter().map(|key| committed(stores, store, key));
            if let Some(outputs) = one_attempt(futures::future::join_all(looks).await) {
                debug!(?task, partitions = keys.len(), "served from checkpoints");
                return Ok(outputs.into_iter().map(stored).collect());
            }
        }
        // Not all committed by one attempt: every partition from the
        // producer, committed anew (the module's doc says why).
        let attempt: Arc<str> = Arc::from(task.query_id.to_string());
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
            .map(|(stream, key)| {
                let to = Commit {
                    stores: Arc::clone(&self.stores),
                    target: Arc::clone(&self.target),
                    key,
                    attempt: Arc::clone(&attempt),
                    compression: self.compression,
                    began: self.began,
                };
                commit_then_yield(stream, to)
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

/// A committed output: the attempt that made it, and its batches.
struct Committed {
    attempt: String,
    batches: Vec<RecordBatch>,
}

/// The outputs of `committed`, when every one is there and one attempt
/// made them all.
fn one_attempt(committed: Vec<Option<Committed>>) -> Option<Vec<Vec<RecordBatch>>> {
    let mut first: Option<String> = None;
    committed
        .into_iter()
        .map(|output| {
            let output = output?;
            let attempt = first.get_or_insert_with(|| output.attempt.clone());
            (*attempt == output.attempt).then_some(output.batches)
        })
        .collect()
}

/// The output committed under `key`, if any. A store that cannot answer
/// within `CHECKPOINT_LOOKUP_DEADLINE` counts as holding nothing (the
/// producer is asked), as does an entry that names no attempt.
async fn committed(stores: &Clients, store: &str, key: &str) -> Option<Committed> {
    let get = async { get_state_with(stores.get(store).await?, key).await };
    let state = match tokio::time::timeout(CHECKPOINT_LOOKUP_DEADLINE, get).await {
        Ok(Ok(state)) => state,
        Ok(Err(status)) if status.code() == Code::NotFound => return None,
        Ok(Err(status)) => {
            stores.forget(store);
            warn!(%key, error = status.message(), "checkpoint unreadable; reading the producer");
            return None;
        }
        Err(_) => {
            stores.forget(store);
            warn!(%key, "checkpoint store silent; reading the producer");
            return None;
        }
    };
    let loaded = match load(&state) {
        Ok(loaded) => loaded,
        Err(e) => {
            warn!(%key, error = %e, "checkpoint damaged; reading the producer");
            return None;
        }
    };
    let table = loaded.get(OUTPUT)?;
    let attempt = table.schema.metadata().get(ATTEMPT_KEY)?.clone();
    let batches = table.partitions.first()?.iter().map(untagged);
    match batches.collect::<std::result::Result<Vec<_>, _>>() {
        Ok(batches) => Some(Committed { attempt, batches }),
        Err(e) => {
            warn!(%key, error = %e, "checkpoint damaged; reading the producer");
            None
        }
    }
}

/// `batch` without [`ATTEMPT_KEY`] in its schema: as its producer gave it.
fn untagged(batch: &RecordBatch) -> std::result::Result<RecordBatch, arrow::error::ArrowError> {
    let mut metadata = batch.schema().metadata().clone();
    metadata.remove(ATTEMPT_KEY);
    let schema = Arc::new(batch.schema().as_ref().clone().with_metadata(metadata));
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema, batch.columns().to_vec(), &options)
}

/// Where and how a partition is committed: its target's store (and the
/// connections to it), its key, the attempt that made it (its library
/// query id), the compression, and when its task began
/// ([`Target::after`] counts from there).
struct Commit {
    stores: Arc<Clients>,
    target: Arc<Target>,
    key: String,
    attempt: Arc<str>,
    compression: Compression,
    began: Instant,
}

/// Read `stream` whole, then yield it while it is committed as `to`
/// says; the stream ends once the commit did (or gave up). A partition
/// read whole before its task ran [`Target::after`] is yielded
/// uncommitted: the library sets every read up as its task starts, so
/// the time is told when the partition is whole, not then. An error
/// before its end yields that error and no row. The consumer works on the
/// batches while they travel to the store, and a consumer that has read
/// to the end knows its input committed: when a query's head has its
/// last row, every commit its stages' reads made is in.
fn commit_then_yield(stream: Batches, to: Commit) -> Batches {
    futures::stream::once(async move {
        let batches: Vec<RecordBatch> = stream.try_collect().await?;
        if to.began.elapsed() < to.target.after {
            return Ok::<_, DataFusionError>(stored(batches));
        }
        let commit = {
            let batches = batches.clone();
            SpawnedTask::spawn(async move { commit(&to, &batches).await })
        };
        let committed = futures::stream::once(async move {
            if let Err(e) = commit.join().await {
                warn!(error = %e, "checkpoint commit lost; not committed");
            }
            None
        })
        .filter_map(futures::future::ready);
        Ok::<_, DataFusionError>(stored(batches).chain(committed).boxed())
    })
    .try_flatten()
    .boxed()
}

/// Commit `batches` as `to` says, its attempt in the schema's metadata,
/// waiting `CHECKPOINT_COMMIT_DEADLINE` at most. Logged, never fatal: the
/// consumer has the batches either way.
async fn commit(to: &Commit, batches: &[RecordBatch]) {
    let (store, key) = (to.target.store.as_str(), to.key.as_str());
    let schema = batches
        .first()
        .map_or_else(|| Arc::new(Schema::empty()), RecordBatch::schema);
    let mut metadata = schema.metadata().clone();
    metadata.insert(ATTEMPT_KEY.to_string(), to.attempt.to_string());
    let tagged = Arc::new(schema.as_ref().clone().with_metadata(metadata));
    let compression = to.compression;
    let state = match extract_batches(OUTPUT, &tagged, batches.to_vec(), compression) {
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
    let stores = to.stores.as_ref();
    let put = async { put_state_with(stores.get(store).await?, key, &options, &state).await };
    match tokio::time::timeout(CHECKPOINT_COMMIT_DEADLINE, put).await {
        Ok(Ok(_)) => {}
        Ok(Err(status)) => {
            stores.forget(store);
            warn!(%key, error = status.message(), "checkpoint not committed");
        }
        Err(_) => {
            stores.forget(store);
            warn!(%key, "checkpoint store silent; not committed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_travels_in_headers_and_a_garbled_stage_list_names_none() {
        let target = Target {
            store: "127.0.0.1:7000".into(),
            query: "q.1".into(),
            stages: [1, 4, 6].into(),
            lookup: true,
            after: Duration::from_millis(1000),
        };
        let mut headers = HeaderMap::new();
        add_target(&mut headers, &target).expect("headers");
        assert_eq!(target_from(&headers), Some(target));
        headers.insert(STAGES_HEADER, HeaderValue::from_static("1,x"));
        assert_eq!(target_from(&headers), None);
        // No stage to commit, no target: the task reads as without.
        headers.insert(STAGES_HEADER, HeaderValue::from_static(""));
        assert_eq!(target_from(&headers), None);
    }
}
