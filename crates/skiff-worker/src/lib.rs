//! The worker: runs the plans and distributed tasks the coordinator sends,
//! hands queries off at pipeline boundaries, and keeps and ships buffered
//! blocks.
//!
//! It receives plans from the coordinator, runs them as
//! pipeline graphs and streams the rows back as Arrow IPC over Flight; tells
//! the coordinator what it runs in every heartbeat. Hands queries off at
//! pipeline boundaries when asked ([`handoff`]), snapshots queries that run
//! long enough for it to pay ([`snapshot_pace`]), and continues queries
//! handed off by others from their state.

mod batch;
mod handoff;
pub mod limits;
mod matching;
mod memory;
mod snapshot_pace;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::{Action, Ticket};
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::TaskContext;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion_distributed::DistributedExt;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use skiff_engine::buffer::RemoteTier;
use skiff_engine::options::{SkiffOptions, StageCheckpoints};
use skiff_engine::store::PipelineStatus;
use skiff_engine::{
    Engine, EngineConfig, PauseMode, PipelineGraph, PipelineId, QueryExecution, explain,
    memory_pool,
};
use skiff_flight::protocol::{
    BufferCleared, BufferStats, BufferTable, CancelQuery, HandoffReason, Heartbeat, HeartbeatReply,
    PauseQuery, PauseReply, PipelineReport, Role, RunQuery, RunningQuery, ShipBlocks, VacateWorker,
    action,
};
use skiff_flight::{FlightStream, Handler, flight_server};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{debug, info, warn};

use skiff_node::checkpoints::{self, CheckpointResolver, Connections};
use skiff_node::error::{Result, ServerError, to_status};
use skiff_node::presence::{NodeIdentity, report_from_own_thread};
use skiff_node::scan_progress::{ScanCountCodec, ScanTally};
use skiff_node::sync::lock;

/// The session option whose value a worker replaces with its own.
const TARGET_PARTITIONS: &str = "datafusion.execution.target_partitions";

/// Settings of a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The coordinator's cluster address (`host:port`).
    pub coordinator: String,
    /// Where this worker listens; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Partitions per pipeline for plans this worker builds itself.
    pub partitions: Option<usize>,
    /// Memory the worker's queries may use together, in bytes.
    pub memory_limit: Option<usize>,
    pub spill_dir: Option<PathBuf>,
    /// Bytes of the worker's buffer pool; the engine's default when `None`.
    pub cache_memory: Option<usize>,
}

/// A query this worker runs.
struct Running {
    execution: Arc<QueryExecution>,
    token: CancellationToken,
    control: Arc<handoff::Control>,
    /// The pipeline group of each grouped pipeline.
    groups: HashMap<PipelineId, String>,
}

struct WorkerService {
    engine: Engine,
    /// Partitions this worker runs; a remaining plan from a worker with
    /// another count is rewritten for it.
    partitions: usize,
    running: Mutex<HashMap<u64, Running>>,
    /// The last report of each query that left since the last heartbeat.
    ended: Mutex<Vec<RunningQuery>>,
    /// The scans of distributed queries' tasks this worker runs.
    scans: Arc<ScanTally>,
    batches: batch::Batches,
}

/// Reports of ended queries a worker keeps until its next heartbeat.
const ENDED_REPORTS_MAX: usize = 256;

/// How long a worker told to stop waits for its queries to move away.
const VACATE_GRACE: Duration = Duration::from_secs(30);

/// Run a worker until `shutdown`: serve Flight, register, heartbeat. On
/// `shutdown` (SIGTERM) it first asks the coordinator to move its queries
/// elsewhere and waits for them to leave.
pub async fn run_worker(config: WorkerConfig, shutdown: CancellationToken) -> Result<()> {
    let engine = Engine::new(&EngineConfig {
        target_partitions: config.partitions,
        memory_limit: config.memory_limit,
        spill_dir: config.spill_dir.clone(),
        cache_memory: config.cache_memory,
    })?;
    if let Some(pool) = engine.buffer_pool() {
        info!(bytes = pool.budget(), "buffer pool");
    }
    // Scans read tables the memory nodes hold from them (pool first).
    let memory = memory::MemoryTier::default();
    let remote = skiff_engine::buffer::RemoteTier(Arc::new(memory.clone()));
    // Fragments are offered to the nodes holding their files.
    let offload = skiff_engine::offload::OffloadTier::new(Arc::new(memory.clone()));
    {
        let state = engine.context().state_ref();
        let mut state = state.write();
        state.config_mut().set_extension(Arc::new(remote.clone()));
        state.config_mut().set_extension(Arc::new(offload));
    }
    let stop = CancellationToken::new();
    let listener = skiff_node::presence::bind(config.listen).await?;
    let addr = skiff_node::presence::local_addr(&listener)?;
    let partitions = engine.context().copied_config().target_partitions();
    let service = Arc::new(WorkerService {
        engine,
        partitions,
        running: Mutex::new(HashMap::new()),
        ended: Mutex::new(Vec::new()),
        scans: Arc::default(),
        batches: batch::Batches::default(),
    });
    let identity = NodeIdentity {
        role: Role::Worker,
        addr: addr.to_string(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory: config.memory_limit.unwrap_or(0) as u64,
        preload: Vec::new(),
    };
    info!(%addr, coordinator = %config.coordinator, "worker listening");
    let reports = {
        let service = Arc::clone(&service);
        let memory = memory.clone();
        move || Heartbeat {
            memory_epoch: memory.epoch(),
            ..service.report()
        }
    };
    // The tasks of distributed queries (the coordinator's `distributed`) run on
    // the library's worker service, on the same port as Skiff's Flight
    // service, with the engine's object stores and memory pool.
    let scans = Arc::clone(&service.scans);
    let tiers = skiff_engine::buffer::Tiers {
        pool: service.engine.buffer_pool().cloned(),
        remote: Some(remote),
        // Each task's session says (`ScanCountCodec`), of these two.
        prefetch: 0,
        group: None,
        prune_chunks: false,
    };
    // One set of connections for the process, so that the tasks of
    // queries with stage checkpoints reuse them.
    let connections = Connections::default();
    let stage_tasks = datafusion_distributed::Worker::from_session_builder(move |ctx| {
        task_session(ctx, Arc::clone(&scans), tiers.clone(), connections.clone())
    })
    .with_runtime_env(service.engine.context().runtime_env());
    let server = skiff_flight::server_builder()
        .add_service(flight_server(Arc::new(WorkerHandle(Arc::clone(&service)))))
        .add_service(stage_tasks.into_worker_server())
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            stop.clone().cancelled_owned(),
        );
    // The coordinator says which partitions this worker owns: its pool
    // keeps their blocks before others'.
    let replies = {
        let pool = service.engine.buffer_pool().cloned();
        move |reply: &HeartbeatReply| {
            if let Some(routes) = &reply.memory {
                memory.apply(routes);
            }
            if let Some(pool) = &pool {
                pool.set_owned(
                    reply
                        .owned
                        .iter()
                        .map(|t| {
                            (
                                Arc::from(t.location.as_str()),
                                t.partitions.iter().copied().collect(),
                            )
                        })
                        .collect(),
                );
            }
        }
    };
    let heartbeats = report_from_own_thread(
        config.coordinator.clone(),
        identity,
        reports,
        replies,
        stop.clone(),
    );
    let vacated = {
        let service = Arc::clone(&service);
        let coordinator = config.coordinator.clone();
        let addr = addr.to_string();
        async move {
            shutdown.cancelled().await;
            service.vacate(&coordinator, &addr).await;
        }
    };
    tokio::select! {
        served = server => served.map_err(|e| ServerError::internal(format!("worker: {e}")))?,
        beat = heartbeats => beat?,
        () = vacated => stop.cancel(),
    }
    // Stop every query still running.
    for (_, running) in lock(&service.running).drain() {
        running.token.cancel();
    }
    Ok(())
}

/// The session of a distributed query's task: the settings its query
/// carried (`carried`), the library's own shuffle batch size first when
/// one is set, the codec of the scans it counts (`scan_progress`), and
/// reads of other tasks through the store when the query commits stage
/// checkpoints (`checkpoints`).
async fn task_session(
    mut ctx: datafusion_distributed::WorkerQueryContext,
    scans: Arc<ScanTally>,
    tiers: skiff_engine::buffer::Tiers,
    connections: Connections,
) -> datafusion::common::Result<datafusion::execution::SessionState> {
    let mut checkpoints = None;
    if let Some(config) = ctx.builder.config().as_mut() {
        let options = config.options_mut();
        skiff_node::carried::apply(&ctx.headers, options)?;
        // The library puts its settings in every task's session.
        let shuffle = datafusion_distributed::DistributedConfig::from_config_options(options)
            .map_or(0, |d| d.shuffle_batch_size);
        if shuffle != 0 {
            options.set("datafusion.execution.batch_size", &shuffle.to_string())?;
        }
        if let Some(o) = options.extensions.get::<SkiffOptions>()
            && o.stage_checkpoints != StageCheckpoints::Off
            && let Some(target) = checkpoints::target_from(&ctx.headers)
        {
            let compression = o.state_compression.into();
            checkpoints = Some(CheckpointResolver::new(&connections, target, compression));
        }
    }
    let mut builder = ctx
        .builder
        .with_distributed_user_codec(ScanCountCodec::new(scans).with_tiers(tiers));
    if let Some(resolver) = checkpoints {
        builder = builder.with_distributed_channel_resolver(resolver);
    }
    Ok(builder.build())
}

impl WorkerService {
    /// The buffer pool's budget, bytes and per-table counters.
    fn buffer_stats(&self) -> BufferStats {
        let Some(pool) = self.engine.buffer_pool() else {
            return BufferStats::default();
        };
        let tables = pool
            .tables()
            .into_iter()
            .map(|(scope, t)| BufferTable::new(&scope, &t))
            .collect();
        BufferStats {
            budget: pool.budget() as u64,
            bytes: pool.bytes() as u64,
            tables,
        }
    }

    /// Ask the coordinator to move this worker's queries away, and wait
    /// (up to [`VACATE_GRACE`]) until none is left.
    async fn vacate(&self, coordinator: &str, addr: &str) {
        let count = || lock(&self.running).len();
        if count() == 0 {
            return;
        }
        info!(
            queries = count(),
            "stopping: asking the coordinator to move the queries"
        );
        let asked = async {
            let mut client = skiff_flight::connect(coordinator).await?;
            let request = VacateWorker {
                addr: addr.to_string(),
            };
            skiff_flight::do_action::<_, VacateWorker>(&mut client, action::VACATE, &request).await
        };
        if let Err(e) = asked.await {
            warn!(error = %e.message(), "cannot reach the coordinator; stopping the queries");
            return;
        }
        let deadline = Instant::now() + VACATE_GRACE;
        while count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        info!(left = count(), "worker vacated; stopping");
    }

    /// What the heartbeat tells the coordinator.
    fn report(&self) -> Heartbeat {
        let queries = lock(&self.running)
            .iter()
            .map(|(&query_id, r)| query_report(query_id, r))
            .collect();
        let ended = std::mem::take(&mut *lock(&self.ended));
        let runtime = self.engine.context().runtime_env();
        Heartbeat {
            queries,
            ended,
            scans: self.scans.report(),
            memory_used: runtime.memory_pool.reserved() as u64,
            cache_bytes: self
                .engine
                .buffer_pool()
                .map_or(0, |pool| pool.bytes() as u64),
            ..Heartbeat::default()
        }
    }

    /// Decode and start a query (loading its state first when it continues
    /// from one); returns the stream the coordinator reads.
    async fn start(self: &Arc<Self>, request: RunQuery) -> Result<FlightStream> {
        let mut config = self.engine.context().copied_config();
        for (key, value) in &request.options {
            // The coordinator planned for its own parallelism; this worker
            // runs every plan at its own (below).
            if key == TARGET_PARTITIONS {
                continue;
            }
            if let Err(e) = config.options_mut().set(key, value) {
                debug!(key, error = %e, "session option not applied");
            }
        }
        // The query's fragments name it to the memory nodes.
        if let Some(tier) = config.get_extension::<skiff_engine::offload::OffloadTier>() {
            config.set_extension(Arc::new(tier.for_query(request.query_id)));
        }
        let mut state = SessionStateBuilder::new_from_existing(self.engine.context().state())
            .with_config(config);
        if request.memory_limit > 0 {
            let runtime =
                RuntimeEnvBuilder::from_runtime_env(self.engine.context().runtime_env().as_ref())
                    .with_memory_pool(memory_pool(Some(request.memory_limit as usize)))
                    .build_arc()?;
            state = state.with_runtime_env(runtime);
        }
        let task_ctx = state.build().task_ctx();
        let plan = skiff_flight::decode_plan(&request.plan, &task_ctx)?;
        // Planned at the coordinator's or the source worker's parallelism.
        let plan = skiff_state::with_partitions(plan, self.partitions)?;
        let mut labels = HashMap::new();
        let mut grouped = false;
        let execution = if request.state_key.is_empty() {
            let graph = skiff_engine::split(plan)?;
            let placed = self.place_in_batch(&request, &graph, &task_ctx).await;
            let groups = placed.as_ref().map(batch::Placed::assignment);
            labels = placed
                .as_ref()
                .map(batch::Placed::labels)
                .unwrap_or_default();
            grouped = groups.is_some();
            QueryExecution::grouped(graph, &task_ctx, groups)?
        } else {
            handoff::continue_from_state(&request, plan, &task_ctx).await?
        };
        let token = CancellationToken::new();
        let query_id = request.query_id;
        let control = Arc::new(handoff::Control::new(
            query_id,
            &request.state_cache,
            task_ctx.session_config().options(),
            grouped,
        ));
        lock(&self.running).insert(
            query_id,
            Running {
                execution: Arc::clone(&execution),
                token: token.clone(),
                control: Arc::clone(&control),
                groups: labels,
            },
        );
        info!(
            query = query_id,
            pipelines = execution.graph().len(),
            resumed = !request.state_key.is_empty(),
            "query started"
        );
        if request.explain_analyze {
            let rows = explain_analyze(Arc::clone(&execution))?;
            let rows = guarded(Arc::clone(self), query_id, token, rows);
            return Ok(handoff::encode(rows));
        }
        control.arm(&execution);
        let rows = execution.execute()?;
        let guard = Guard {
            service: Arc::clone(self),
            query_id,
        };
        Ok(handoff::serve(execution, rows, control, token, guard))
    }

    /// The query's place in its batch's pipeline groups, once its batch is
    /// grouped; `None` outside a batch, or when no memory node holds a
    /// table (nothing to share).
    async fn place_in_batch(
        &self,
        request: &RunQuery,
        graph: &PipelineGraph,
        task_ctx: &TaskContext,
    ) -> Option<batch::Placed> {
        if request.batch_id == 0 || request.batch_size < 2 {
            return None;
        }
        let RemoteTier(source) = task_ctx
            .session_config()
            .get_extension::<RemoteTier>()?
            .as_ref()
            .clone();
        let budget = self.engine.buffer_pool().map_or_else(
            || skiff_engine::buffer::default_budget(None, 1),
            |pool| pool.budget(),
        );
        self.batches
            .arrive(
                request.query_id,
                request.batch_id,
                request.batch_size as usize,
                graph,
                &source,
                budget,
            )
            .await
    }

    /// Ask query `query_id` to stop at a boundary and hand itself off.
    fn pause(&self, request: &PauseQuery) -> PauseReply {
        let running = lock(&self.running);
        let Some(running) = running.get(&request.query_id) else {
            return PauseReply {
                accepted: false,
                detail: "the query does not run on this worker".into(),
            };
        };
        let reason = HandoffReason::try_from(request.reason).unwrap_or(HandoffReason::Migrate);
        let mode = if request.abort {
            PauseMode::Abort
        } else {
            PauseMode::Finish
        };
        running
            .control
            .request(&running.execution, reason, mode, request.discard_state)
    }
}

/// Run to the end, then give the `EXPLAIN ANALYZE PIPELINES` rows.
fn explain_analyze(execution: Arc<QueryExecution>) -> Result<SendableRecordBatchStream> {
    let schema = explain::schema(true);
    let mut rows = execution.execute()?;
    let once = futures::stream::once(async move {
        while rows.try_next().await?.is_some() {}
        explain::render(execution.graph(), Some(&execution.state()))
    });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, once)))
}

/// A query's progress and its pipelines, as the heartbeat reports them.
fn query_report(query_id: u64, r: &Running) -> RunningQuery {
    let progress = r.execution.progress();
    let state = r.execution.state();
    let graph = r.execution.graph();
    let pipelines = state
        .status
        .iter()
        .enumerate()
        .map(|(i, status)| {
            let breaker = graph.pipelines()[i].breaker.to_string();
            let (name, rows, bytes, spilled, elapsed) = match status {
                PipelineStatus::Waiting => ("waiting", 0, 0, 0, 0),
                PipelineStatus::Running { started } => {
                    ("running", 0, 0, 0, started.elapsed().as_millis() as u64)
                }
                PipelineStatus::Finished { elapsed, output } => (
                    "finished",
                    output.rows,
                    output.memory_bytes + output.spilled_bytes,
                    output.spilled_bytes,
                    elapsed.as_millis() as u64,
                ),
            };
            PipelineReport {
                id: i as u32,
                breaker,
                status: name.to_string(),
                output_rows: rows,
                output_bytes: bytes,
                spilled_bytes: spilled,
                elapsed_ms: elapsed,
                inputs: graph.pipelines()[i]
                    .inputs
                    .iter()
                    .map(|p| p.0 as u32)
                    .collect(),
                group: r.groups.get(&PipelineId(i)).cloned().unwrap_or_default(),
            }
        })
        .collect();
    RunningQuery {
        query_id,
        pipelines_finished: progress.pipelines_finished as u32,
        pipelines_total: progress.pipelines_total as u32,
        rows_running: progress.rows_running,
        pipelines,
    }
}

/// Removes a query from the running set however its stream ends.
struct Guard {
    service: Arc<WorkerService>,
    query_id: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let left = lock(&self.service.running).remove(&self.query_id);
        if let Some(running) = left {
            let mut ended = lock(&self.service.ended);
            if ended.len() < ENDED_REPORTS_MAX {
                ended.push(query_report(self.query_id, &running));
            }
        }
        debug!(query = self.query_id, "query left the worker");
    }
}

/// Remove the query from the running set however its stream ends, and end
/// it early on cancel.
fn guarded(
    service: Arc<WorkerService>,
    query_id: u64,
    token: CancellationToken,
    rows: SendableRecordBatchStream,
) -> SendableRecordBatchStream {
    let schema = rows.schema();
    let guard = Guard { service, query_id };
    let stream = futures::stream::unfold(
        (rows, token, Some(guard)),
        |(mut rows, token, guard)| async move {
            guard.as_ref()?;
            let next = tokio::select! {
                biased;
                _ = token.cancelled() => Some(Err(DataFusionError::from(
                    ServerError::canceled("canceling statement due to user request"),
                ))),
                next = rows.next() => next,
            };
            match next {
                Some(Ok(batch)) => Some((Ok(batch), (rows, token, guard))),
                Some(Err(e)) => Some((Err(e), (rows, token, None))),
                None => None,
            }
        },
    );
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// The Flight face of a worker.
struct WorkerHandle(Arc<WorkerService>);

#[tonic::async_trait]
impl Handler for WorkerHandle {
    async fn get(&self, ticket: Ticket) -> std::result::Result<FlightStream, Status> {
        let request = RunQuery::decode(ticket.ticket)
            .map_err(|e| Status::invalid_argument(format!("bad query ticket: {e}")))?;
        let query_id = request.query_id;
        self.0.start(request).await.map_err(|e| {
            warn!(query = query_id, error = %e, "query did not start");
            to_status(&e)
        })
    }

    /// A `DoPut` of blocks from a partition's old owner (buffer matching).
    async fn put(&self, mut data: FlightStream) -> std::result::Result<bytes::Bytes, Status> {
        let first = data
            .try_next()
            .await?
            .ok_or_else(|| Status::invalid_argument("an empty put"))?;
        let blocks = first
            .flight_descriptor
            .as_ref()
            .and_then(skiff_flight::blocks::blocks_put);
        if blocks.is_none() {
            return Err(Status::invalid_argument(
                "a worker takes only puts of blocks",
            ));
        }
        matching::receive(self.0.engine.buffer_pool(), first, data).await
    }

    async fn action(&self, action: Action) -> std::result::Result<bytes::Bytes, Status> {
        match action.r#type.as_str() {
            action::CANCEL => {
                let request = CancelQuery::decode(action.body)
                    .map_err(|e| Status::invalid_argument(format!("bad cancel: {e}")))?;
                if let Some(running) = lock(&self.0.running).get(&request.query_id) {
                    running.token.cancel();
                }
                Ok(bytes::Bytes::new())
            }
            action::PAUSE => {
                let request = PauseQuery::decode(action.body)
                    .map_err(|e| Status::invalid_argument(format!("bad pause: {e}")))?;
                Ok(self.0.pause(&request).encode_to_vec().into())
            }
            action::BUFFER_STATS => Ok(self.0.buffer_stats().encode_to_vec().into()),
            action::PIPELINE_GROUPS => Ok(self.0.batches.reports().encode_to_vec().into()),
            action::BUFFER_SHIP => {
                let request = ShipBlocks::decode(action.body)
                    .map_err(|e| Status::invalid_argument(format!("bad ship: {e}")))?;
                let shipped = matching::ship(self.0.engine.buffer_pool(), &request).await;
                Ok(shipped.encode_to_vec().into())
            }
            action::BUFFER_CLEAR => {
                let bytes = self.0.engine.buffer_pool().map_or(0, |p| p.clear());
                let cleared = BufferCleared {
                    bytes: bytes as u64,
                };
                Ok(cleared.encode_to_vec().into())
            }
            other => Err(Status::unimplemented(format!("unknown action {other}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::execution::SessionStateBuilder;
    use datafusion::prelude::SessionConfig;
    use datafusion_distributed::{DistributedConfig, DistributedExt, WorkerQueryContext};

    use super::*;

    /// A task's session has its query's carried settings, and the
    /// library's shuffle batch size when one is set.
    #[tokio::test]
    async fn a_task_runs_with_its_querys_settings() {
        let coordinator = SessionConfig::new().with_batch_size(100);
        let headers = skiff_node::carried::headers(coordinator.options()).unwrap();
        let task = |headers| WorkerQueryContext {
            builder: SessionStateBuilder::new().with_config(SessionConfig::new()),
            headers,
        };
        let state = task_session(
            task(headers),
            Arc::default(),
            Default::default(),
            Connections::default(),
        )
        .await
        .unwrap();
        assert_eq!(state.config().batch_size(), 100);

        // The library sets its shuffle batch size from its own headers.
        let mut ctx = task(skiff_node::carried::headers(coordinator.options()).unwrap());
        ctx.headers.insert(
            "x-datafusion-distributed-config-distributed.shuffle_batch_size",
            tonic::codegen::http::HeaderValue::from_static("50"),
        );
        let config = SessionConfig::new()
            .with_distributed_option_extension_from_headers::<DistributedConfig>(&ctx.headers)
            .unwrap();
        ctx.builder = ctx.builder.with_config(config);
        let state = task_session(
            ctx,
            Arc::default(),
            Default::default(),
            Connections::default(),
        )
        .await
        .unwrap();
        assert_eq!(state.config().batch_size(), 50);
    }
}
