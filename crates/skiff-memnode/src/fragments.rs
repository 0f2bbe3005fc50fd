//! Offloaded fragments on the memory node (opportunistic offload,
//! `../shared/papers/opportunistic-query-execution-smartnics.txt`): a
//! worker's [`FragmentRequest`] names a Substrait plan (one table's scan,
//! filter and projection, perhaps aggregated: the node then runs the
//! aggregation's partial half and sends partial states), the columns it
//! reads and the files; the node plans it with DataFusion against its
//! chunks and runs it on its own few threads (`--offload-threads`, the
//! paper's embedded cores), row group by row group, marking each one's end,
//! or pushes it back with the reason.
//!
//! The plan is made once, over the first row group, and each row group then
//! runs the same physical plan with its rows in the memory scan's place.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_flight::FlightData;
use async_trait::async_trait;
use datafusion::catalog::TableProvider;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, TableReference, internal_err};
use datafusion::datasource::MemTable;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::FunctionRegistry;
use datafusion::execution::session_state::SessionState;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, TableScanBuilder};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_optimizer::combine_partial_final_agg::CombinePartialFinalAggregate;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_substrait::extensions::Extensions;
use datafusion_substrait::logical_plan::consumer::{
    SubstraitConsumer, from_substrait_plan_with_consumer,
};
use datafusion_substrait::substrait::proto::Plan;
use futures::StreamExt;
use prost::Message;
use skiff_engine::offload::is_partial_half;
use skiff_flight::fragments::{RowEncoder, decision_message, mark_message, schema_of};
use skiff_flight::protocol::{
    ChunkFile, FragmentCosts, FragmentDecision, FragmentFile, FragmentMark, FragmentRecord,
    FragmentRequest, OffloadMode,
};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::mpsc;
use tonic::Status;
use tracing::{debug, info, warn};

use super::chunks::{ChunkStore, FragmentGroup};
use skiff_offload::costs::{CostModels, Observed, Shape, as_nanos, offload_is_faster};
use skiff_offload::estimate::{Estimate, Statistics, estimate};
use skiff_offload::limits::{DRIFT_FACTOR, DRIFT_WINDOW};
use skiff_offload::sketches::ColumnSketch;

use skiff_node::limits::FRAGMENT_HISTORY;

/// The threads fragments run on, apart from the node's serving threads,
/// the cost models that decide `auto` fragments, and what became of the
/// latest fragments.
pub struct Offloader {
    runtime: Option<Runtime>,
    threads: usize,
    history: Arc<History>,
    costs: Arc<CostState>,
}

/// The latest [`FRAGMENT_HISTORY`] fragments, oldest first.
#[derive(Debug, Default)]
struct History {
    records: Mutex<VecDeque<FragmentRecord>>,
    next: AtomicU64,
}

impl History {
    fn record(&self, mut record: FragmentRecord) {
        record.seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        if records.len() == FRAGMENT_HISTORY {
            records.pop_front();
        }
        records.push_back(record);
    }
}

/// The cost models, the node's load, and its measurements since the
/// models were fitted.
#[derive(Debug, Default)]
struct CostState {
    models: RwLock<Option<Arc<CostModels>>>,
    /// Where refitted models are saved (those loaded at start).
    path: Option<PathBuf>,
    /// Fragments being answered now.
    running: AtomicUsize,
    drift: Mutex<Drift>,
}

/// Measured against predicted execution times of the latest offloaded
/// fragments, and their samples for a refit.
#[derive(Debug, Default)]
struct Drift {
    ratios: VecDeque<f64>,
    observed: Observed,
    refitting: bool,
}

impl CostState {
    fn models(&self) -> Option<Arc<CostModels>> {
        self.models
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Note a fragment the node ran; the models to refit and the samples
    /// to refit them with when the latest [`DRIFT_WINDOW`] fragments'
    /// median is off by more than [`DRIFT_FACTOR`].
    /// `measured` is the run as it went, under `load` other fragments
    /// (as the prediction counted them); its samples are taken as if
    /// alone, as the models' rates are an idle node's.
    fn observe(
        &self,
        shape: &Shape,
        threads: usize,
        predicted: &FragmentCosts,
        measured: &FragmentCosts,
        load: usize,
    ) -> Option<(Arc<CostModels>, Observed)> {
        let models = self.models()?;
        let alone = FragmentCosts {
            execution_nanos: measured.execution_nanos / (1 + load as u64),
            ..*measured
        };
        let mut drift = self.drift.lock().unwrap_or_else(|p| p.into_inner());
        drift.observed.add(shape, threads, &alone);
        if predicted.execution_nanos > 0 && measured.execution_nanos > 0 {
            if drift.ratios.len() == DRIFT_WINDOW {
                drift.ratios.pop_front();
            }
            let ratio = measured.execution_nanos as f64 / predicted.execution_nanos as f64;
            drift.ratios.push_back(ratio);
        }
        if drift.refitting || drift.ratios.len() < DRIFT_WINDOW {
            return None;
        }
        let mut ratios: Vec<f64> = drift.ratios.iter().copied().collect();
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        if (1.0 / DRIFT_FACTOR..=DRIFT_FACTOR).contains(&median) {
            return None;
        }
        info!(
            median_ratio = median,
            "offload cost models drifted from measured times; refitting"
        );
        drift.refitting = true;
        drift.ratios.clear();
        Some((models, std::mem::take(&mut drift.observed)))
    }

    /// Put refitted models in place (and in their file).
    fn refitted(&self, refit: std::result::Result<CostModels, String>) {
        match refit {
            Ok(models) => {
                if let Some(path) = &self.path
                    && let Err(e) = models.save(path)
                {
                    warn!(error = %e, "cannot save the refitted cost models");
                }
                *self.models.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(models));
                info!("offload cost models refitted");
            }
            Err(e) => warn!(error = %e, "cannot refit the offload cost models"),
        }
        self.drift
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .refitting = false;
    }
}

/// Counts a fragment as running while it lives.
struct Running<'a>(&'a AtomicUsize);

impl<'a> Running<'a> {
    /// The fragments running before this one.
    fn start(count: &'a AtomicUsize) -> (Self, usize) {
        let before = count.fetch_add(1, Ordering::AcqRel);
        (Self(count), before)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for Offloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offloader")
            .field("threads", &self.threads)
            .finish()
    }
}

impl Offloader {
    /// `threads` threads (at least one), without cost models (`auto`
    /// fragments are pushed back).
    pub fn new(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("skiff-offload")
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
            threads,
            history: Arc::default(),
            costs: Arc::default(),
        })
    }

    /// With `models` deciding `auto` fragments; refits are saved to `path`.
    pub fn with_models(mut self, models: CostModels, path: Option<PathBuf>) -> Self {
        self.costs = Arc::new(CostState {
            models: RwLock::new(Some(Arc::new(models))),
            path,
            ..CostState::default()
        });
        self
    }

    /// The latest fragments, oldest first.
    pub fn recent(&self) -> Vec<FragmentRecord> {
        let records = self
            .history
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        records.iter().cloned().collect()
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    fn handle(&self) -> Option<&Handle> {
        self.runtime.as_ref().map(Runtime::handle)
    }

    /// Run `task` on the offload threads (`None` once they are stopping).
    pub(super) fn spawn<T: Send + 'static>(
        &self,
        task: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<T>> {
        self.handle().map(|h| h.spawn(task))
    }
}

impl Drop for Offloader {
    fn drop(&mut self) {
        // Dropped on the node's own runtime at shutdown, where a runtime
        // may not block to stop.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn nanos(since: Instant) -> u64 {
    as_nanos(since.elapsed())
}

/// Messages between the fragment's threads and the network.
const QUEUE: usize = 8;

/// Answer `request`: the stream of its messages (decision first).
pub(crate) fn answer(
    offloader: &Offloader,
    chunks: &Arc<ChunkStore>,
    request: FragmentRequest,
) -> Result<mpsc::Receiver<Result<FlightData, Status>>, Status> {
    let Some(handle) = offloader.handle() else {
        return Err(Status::unavailable("the node is stopping"));
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    let chunks = Arc::clone(chunks);
    let threads = offloader.threads;
    let history = Arc::clone(&offloader.history);
    let costs = Arc::clone(&offloader.costs);
    // Detached: the task ends when the fragment is done or the receiver
    // (the network) is gone, whichever comes first.
    drop(handle.spawn(async move {
        let started = Instant::now();
        let (running, load) = Running::start(&costs.running);
        let models = costs.models();
        let mode = if request.mode == OffloadMode::Always as i32 {
            "always"
        } else {
            "auto"
        };
        let base = FragmentRecord {
            query_id: request.query_id,
            mode: mode.to_string(),
            ..FragmentRecord::default()
        };
        match prepare(&chunks, &request, threads, models.as_deref(), load).await {
            Err(back) => {
                debug!(
                    query = request.query_id,
                    reason = %back.reason,
                    predicted_offload_ms = back.predicted.map(|p| p.offload_nanos() / 1_000_000),
                    predicted_push_back_ms =
                        back.predicted.map(|p| p.push_back_nanos() / 1_000_000),
                    "fragment pushed back"
                );
                history.record(FragmentRecord {
                    reason: back.reason.clone(),
                    execution_nanos: nanos(started),
                    input_rows: back.input_rows,
                    estimated_rows: back.estimated_rows,
                    predicted: back.predicted,
                    estimation_nanos: as_nanos(back.estimation),
                    ..base
                });
                let decision = FragmentDecision {
                    offload: false,
                    reason: back.reason,
                    input_rows: back.input_rows,
                    estimated_rows: back.estimated_rows,
                    predicted: back.predicted,
                    load: load as u32,
                    ..FragmentDecision::default()
                };
                let _ = tx.send(Ok(decision_message(&decision))).await;
            }
            Ok(prepared) => {
                let (input_rows, estimated_rows, predicted, estimation) = (
                    prepared.estimated.input_rows,
                    prepared.estimated.output_rows,
                    prepared.predicted,
                    prepared.estimation,
                );
                let mut shape = prepared.shape.clone();
                let reason = prepared.reason.clone();
                let ran = prepared.run(&tx, started, load).await;
                let mut record = FragmentRecord {
                    offloaded: true,
                    reason,
                    input_rows: input_rows as u64,
                    estimated_rows,
                    execution_nanos: nanos(started),
                    predicted,
                    estimation_nanos: as_nanos(estimation),
                    ..base
                };
                drop(running);
                match ran {
                    Ok(Some((rows, measured))) => {
                        record.rows = rows;
                        record.measured = Some(measured);
                        shape.output_rows = rows as f64;
                        shape.output_bytes = measured.output_bytes as f64;
                        refit_on_drift(&costs, &shape, threads, predicted, &measured, load);
                    }
                    Ok(None) => record.reason = "the worker left before the end".to_string(),
                    Err(e) => {
                        record.reason = format!("failed: {}", e.message());
                        let _ = tx.send(Err(e)).await;
                    }
                }
                history.record(record);
            }
        }
    }));
    Ok(rx)
}

/// Add a fragment's measurements to the drift watch; refit on this
/// runtime's blocking threads when it drifted.
fn refit_on_drift(
    costs: &Arc<CostState>,
    shape: &Shape,
    threads: usize,
    predicted: Option<FragmentCosts>,
    measured: &FragmentCosts,
    load: usize,
) {
    let Some(predicted) = predicted else {
        return;
    };
    let Some((models, observed)) = costs.observe(shape, threads, &predicted, measured, load) else {
        return;
    };
    let costs = Arc::clone(costs);
    drop(tokio::task::spawn_blocking(move || {
        let seed = rand::random::<u64>();
        costs.refitted(models.refit(&observed, seed));
    }));
}

/// Why a fragment goes back to the worker, and what was known of it.
#[derive(Debug, Default)]
pub(super) struct PushBack {
    pub(super) reason: String,
    input_rows: u64,
    estimated_rows: f64,
    predicted: Option<FragmentCosts>,
    /// The time estimating took, when it was estimated.
    estimation: Duration,
}

impl From<String> for PushBack {
    fn from(reason: String) -> Self {
        Self {
            reason,
            ..Self::default()
        }
    }
}

/// A fragment planned over the node's chunks, ready to run.
pub(super) struct Prepared {
    plan: Arc<dyn ExecutionPlan>,
    ctx: SessionContext,
    schema: SchemaRef,
    groups: Vec<FragmentGroup>,
    counts: Vec<usize>,
    /// The first row group's rows, read while planning.
    first: Option<RecordBatch>,
    threads: usize,
    pub(super) estimated: Estimate,
    /// The time estimating took.
    pub(super) estimation: Duration,
    /// The fragment as the cost models see it (estimated sizes).
    pub(super) shape: Shape,
    /// The models' prediction, when the node has models.
    predicted: Option<FragmentCosts>,
    /// Why it runs here, in words.
    reason: String,
}

/// The node's statistics of the row groups a fragment reads: their rows,
/// and the sketches of the fragment's columns over their files.
struct Sketched {
    rows: u64,
    schema: SchemaRef,
    columns: HashMap<String, ColumnSketch>,
    /// Row groups times threads: the partial aggregations an aggregated
    /// fragment runs.
    partials: u64,
}

impl Sketched {
    fn of(
        chunks: &ChunkStore,
        files: &[FragmentFile],
        schema: &SchemaRef,
        groups: &[FragmentGroup],
        threads: usize,
    ) -> Self {
        let files: Vec<ChunkFile> = files.iter().filter_map(|f| f.file.clone()).collect();
        let columns = schema
            .fields()
            .iter()
            .filter_map(|f| Some((f.name().clone(), chunks.sketch(&files, f.name())?)))
            .collect();
        Self {
            rows: groups.iter().map(|g| g.rows as u64).sum(),
            schema: Arc::clone(schema),
            columns,
            partials: (groups.len() * threads.max(1)) as u64,
        }
    }
}

impl Statistics for Sketched {
    fn rows(&self) -> u64 {
        self.rows
    }

    fn column(&self, name: &str) -> Option<&ColumnSketch> {
        self.columns.get(name)
    }

    fn partials(&self) -> u64 {
        self.partials
    }

    fn data_type(&self, name: &str) -> Option<DataType> {
        let field = self.schema.field_with_name(name).ok()?;
        Some(field.data_type().clone())
    }
}

/// The shape of `logical` over `groups` of `schema`'s columns, as
/// estimated: bytes of the raw chunks, and of the rows kept (each output
/// column as wide as the input column of its name, else its type's
/// width).
fn shape(
    logical: &LogicalPlan,
    schema: &SchemaRef,
    groups: &[FragmentGroup],
    estimated: &Estimate,
) -> Shape {
    let mut column_bytes = vec![0u64; schema.fields().len()];
    for group in groups {
        for (total, bytes) in column_bytes.iter_mut().zip(group.column_bytes()) {
            *total += bytes;
        }
    }
    let rows = estimated.input_rows.max(1.0);
    let width_of: HashMap<&str, f64> = schema
        .fields()
        .iter()
        .zip(&column_bytes)
        .map(|(f, &bytes)| (f.name().as_str(), bytes as f64 / rows))
        .collect();
    let output = logical.schema();
    let width: f64 = output
        .fields()
        .iter()
        .map(|f| {
            width_of.get(f.name().as_str()).copied().unwrap_or_else(|| {
                f.data_type()
                    .primitive_width()
                    .map_or(VARIABLE_WIDTH, |w| w as f64)
            })
        })
        .sum();
    Shape {
        input_rows: estimated.input_rows,
        output_rows: estimated.output_rows,
        input_columns: schema.fields().len(),
        output_columns: output.fields().len(),
        input_bytes: column_bytes.iter().sum::<u64>() as f64,
        output_bytes: estimated.output_rows * width,
        operations: estimated.operations.clone(),
    }
}

/// Bytes taken for a value of a variable-width type computed by the
/// fragment (an input column's own width is known from its chunks).
const VARIABLE_WIDTH: f64 = 16.0;

/// Plan `request` against the node's chunks and decide: run it here, or
/// push it back (why, in words).
pub(super) async fn prepare(
    chunks: &ChunkStore,
    request: &FragmentRequest,
    threads: usize,
    models: Option<&CostModels>,
    load: usize,
) -> std::result::Result<Prepared, PushBack> {
    let auto = request.mode != OffloadMode::Always as i32;
    if auto && models.is_none() {
        return Err("no cost models to decide by: run `skiff memnode calibrate`"
            .to_string()
            .into());
    }
    let schema = schema_of(&request.input_schema).map_err(|e| e.message().to_string())?;
    let (counts, groups) = chunks.fragment_groups(&request.files, &schema)?;
    let plan =
        Plan::decode(request.plan.as_slice()).map_err(|e| format!("bad Substrait plan: {e}"))?;
    let ctx = fragment_context(threads);
    let state = ctx.state();
    let extensions = Extensions::try_from(&plan.extensions).map_err(|e| e.to_string())?;
    let first = match groups.first() {
        Some(group) => Some(group.batch(&schema)?),
        None => None,
    };
    let rows = first
        .clone()
        .unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(&schema)));
    let table = Arc::new(
        MemTable::try_new(Arc::clone(&schema), split(&rows, threads)).map_err(|e| e.to_string())?,
    );
    let consumer = OneTable {
        extensions: &extensions,
        state: &state,
        table,
    };
    let logical = from_substrait_plan_with_consumer(&consumer, &plan)
        .await
        .map_err(|e| format!("cannot read the fragment: {e}"))?;
    let aggregated = supported(&logical)?;
    let logical =
        lift_scan_filters(logical).map_err(|e| format!("cannot plan the fragment: {e}"))?;
    let estimating = Instant::now();
    let statistics = Sketched::of(chunks, &request.files, &schema, &groups, threads);
    let estimated = estimate(&logical, &statistics);
    let shape = shape(&logical, &schema, &groups, &estimated);
    let estimation = estimating.elapsed();
    let predicted = models.map(|m| m.predict(&shape, threads, load));
    let reason = match &predicted {
        Some(p) if auto => {
            let (offload, back) = (
                p.offload_nanos() as f64 / 1e6,
                p.push_back_nanos() as f64 / 1e6,
            );
            if !offload_is_faster(p) {
                return Err(PushBack {
                    reason: format!(
                        "predicted faster pushed back: {back:.1} ms against {offload:.1} ms here"
                    ),
                    input_rows: estimated.input_rows as u64,
                    estimated_rows: estimated.output_rows,
                    predicted,
                    estimation,
                });
            }
            format!("predicted faster here: {offload:.1} ms against {back:.1} ms pushed back")
        }
        _ => "asked to offload".to_string(),
    };
    let plan = state
        .create_physical_plan(&logical)
        .await
        .map_err(|e| format!("cannot plan the fragment: {e}"))?;
    let plan = match aggregated {
        true => partial_half(&plan)
            .ok_or_else(|| "cannot plan the fragment: no partial aggregation".to_string())?,
        false => plan,
    };
    Ok(Prepared {
        plan,
        ctx,
        schema,
        groups,
        counts,
        first,
        threads,
        estimated,
        estimation,
        shape,
        predicted,
        reason,
    })
}

/// The parts of a run's time, as it goes.
#[derive(Default)]
struct Clocks {
    execution: Duration,
    serialization: Duration,
    network: Duration,
    bytes: u64,
}

impl Clocks {
    fn costs(&self) -> FragmentCosts {
        FragmentCosts {
            execution_nanos: as_nanos(self.execution),
            serialization_nanos: as_nanos(self.serialization),
            network_nanos: as_nanos(self.network),
            output_bytes: self.bytes,
            ..FragmentCosts::default()
        }
    }
}

impl Prepared {
    /// Send the decision, then every row group's rows and mark, then the
    /// last mark: the rows sent and the measured parts. Stops quietly when
    /// the receiver is gone (`None`).
    pub(super) async fn run(
        self,
        tx: &mpsc::Sender<Result<FlightData, Status>>,
        started: Instant,
        load: usize,
    ) -> std::result::Result<Option<(u64, FragmentCosts)>, Status> {
        let decision = FragmentDecision {
            offload: true,
            reason: self.reason.clone(),
            row_groups: self.counts.iter().map(|&n| n as u32).collect(),
            input_rows: self.estimated.input_rows as u64,
            estimated_rows: self.estimated.output_rows,
            predicted: self.predicted,
            load: load as u32,
        };
        let mut encoder = RowEncoder::default();
        let opening = [
            decision_message(&decision),
            encoder.schema(self.plan.schema().as_ref()),
        ];
        for message in opening {
            if tx.send(Ok(message)).await.is_err() {
                return Ok(None);
            }
        }
        let failed = |e: &dyn std::fmt::Display| Status::internal(format!("fragment: {e}"));
        let mut clocks = Clocks::default();
        let mut first = self.first;
        let mut sent_rows = 0;
        for group in &self.groups {
            let ran = Instant::now();
            let rows = match first.take() {
                Some(rows) => rows,
                None => group.batch(&self.schema).map_err(|e| failed(&e))?,
            };
            let plan = with_rows(&self.plan, split(&rows, self.threads)).map_err(|e| failed(&e))?;
            let mut stream = execute_stream(plan, self.ctx.task_ctx()).map_err(|e| failed(&e))?;
            clocks.execution += ran.elapsed();
            let mut given = 0;
            loop {
                let ran = Instant::now();
                let next = stream.next().await;
                clocks.execution += ran.elapsed();
                let Some(batch) = next else { break };
                let batch = batch.map_err(|e| failed(&e))?;
                given += batch.num_rows() as u64;
                let encoding = Instant::now();
                let messages = encoder.batch(&batch)?;
                clocks.serialization += encoding.elapsed();
                for message in messages {
                    clocks.bytes += (message.data_header.len() + message.data_body.len()) as u64;
                    let sending = Instant::now();
                    let sent = tx.send(Ok(message)).await;
                    clocks.network += sending.elapsed();
                    if sent.is_err() {
                        return Ok(None);
                    }
                }
            }
            sent_rows += given;
            let mark = FragmentMark {
                file: group.file as u32,
                row_group: group.row_group as u32,
                rows: given,
                ..FragmentMark::default()
            };
            if tx.send(Ok(mark_message(&mark))).await.is_err() {
                return Ok(None);
            }
        }
        let elapsed = started.elapsed();
        let measured = clocks.costs();
        let end = FragmentMark {
            end: true,
            rows: sent_rows,
            execution_nanos: as_nanos(elapsed),
            measured: Some(measured),
            ..FragmentMark::default()
        };
        if tx.send(Ok(mark_message(&end))).await.is_err() {
            return Ok(None);
        }
        info!(
            row_groups = self.groups.len(),
            input_rows = self.estimated.input_rows as u64,
            rows = sent_rows,
            estimated_rows = self.estimated.output_rows.round() as u64,
            millis = elapsed.as_millis() as u64,
            execution_ms = clocks.execution.as_millis() as u64,
            predicted_execution_ms = self.predicted.map(|p| p.execution_nanos / 1_000_000),
            "fragment offloaded"
        );
        Ok(Some((sent_rows, measured)))
    }
}

/// `rows` cut into at most `parts` slices, one per partition (slices share
/// the buffers).
fn split(rows: &RecordBatch, parts: usize) -> Vec<Vec<RecordBatch>> {
    let parts = parts.max(1);
    let each = rows.num_rows().div_ceil(parts).max(1);
    let mut out: Vec<Vec<RecordBatch>> = (0..rows.num_rows())
        .step_by(each)
        .map(|start| vec![rows.slice(start, each.min(rows.num_rows() - start))])
        .collect();
    // Every partition the plan was made with exists, empty if need be.
    out.resize_with(parts, Vec::new);
    out
}

/// `plan` with `partitions` in its memory scan's place.
fn with_rows(
    plan: &Arc<dyn ExecutionPlan>,
    partitions: Vec<Vec<RecordBatch>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let mut replaced = 0;
    let plan = Arc::clone(plan)
        .transform_up(|node| {
            let Some(memory) = node
                .downcast_ref::<DataSourceExec>()
                .and_then(|d| d.data_source().downcast_ref::<MemorySourceConfig>())
            else {
                return Ok(Transformed::no(node));
            };
            if memory.partitions().len() != partitions.len() {
                return internal_err!(
                    "a fragment planned over {} partitions, run over {}",
                    memory.partitions().len(),
                    partitions.len()
                );
            }
            replaced += 1;
            let scan: Arc<dyn ExecutionPlan> = MemorySourceConfig::try_new_exec(
                &partitions,
                memory.original_schema(),
                memory.projection().clone(),
            )?;
            Ok(Transformed::yes(scan))
        })?
        .data;
    if replaced != 1 {
        return internal_err!("a fragment's plan reads {replaced} memory scans, not one");
    }
    Ok(plan)
}

/// The consumer of a fragment: its one table is the node's rows, whatever
/// the worker's catalog called it.
struct OneTable<'a> {
    extensions: &'a Extensions,
    state: &'a SessionState,
    table: Arc<MemTable>,
}

#[async_trait]
impl SubstraitConsumer for OneTable<'_> {
    async fn resolve_table_ref(
        &self,
        _table_ref: &TableReference,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(Some(Arc::clone(&self.table) as Arc<dyn TableProvider>))
    }

    fn get_extensions(&self) -> &Extensions {
        self.extensions
    }

    fn get_function_registry(&self) -> &impl FunctionRegistry {
        self.state
    }
}

/// `plan` with every scan's filters evaluated in a filter above it: the
/// node's table is a memory table, which applies none of the filters a
/// scan carries, and a scan's filters may be all that is left of a
/// predicate the worker's table applied exactly.
fn lift_scan_filters(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|node| {
        let LogicalPlan::TableScan(scan) = &node else {
            return Ok(Transformed::no(node));
        };
        let Some(predicate) = scan.filters.iter().cloned().reduce(Expr::and) else {
            return Ok(Transformed::no(node));
        };
        let bare =
            TableScanBuilder::new(scan.table_name.clone(), Arc::clone(&scan.source)).build()?;
        let columns: Vec<Expr> = scan
            .projected_schema
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let lifted = LogicalPlanBuilder::from(LogicalPlan::TableScan(bare))
            .filter(predicate)?
            .project(columns)?
            .build()?;
        Ok(Transformed::yes(lifted))
    })
    .map(|t| t.data)
}

/// Whether `plan` is what a fragment may be: one scan under filters and
/// projections, perhaps under one aggregation (what workers send; anything
/// else is pushed back); and whether it is aggregated.
fn supported(plan: &LogicalPlan) -> std::result::Result<bool, String> {
    let mut scans = 0;
    let mut aggregations = 0;
    let mut other = None;
    // Subqueries included: their scans would read the node's one table.
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(_) => scans += 1,
            LogicalPlan::Aggregate(_) => aggregations += 1,
            LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            }
            node => other = Some(node.display().to_string()),
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if let Some(node) = other {
        return Err(format!("unsupported fragment: it holds {node}"));
    }
    if scans != 1 {
        return Err(format!("unsupported fragment: {scans} scans"));
    }
    if aggregations > 1 {
        return Err(format!("unsupported fragment: {aggregations} aggregations"));
    }
    Ok(aggregations == 1)
}

/// The session fragments are planned in: `threads` partitions, and an
/// aggregation kept in its two halves (DataFusion would merge them into one
/// where no exchange comes between; the node runs the partial half only).
fn fragment_context(threads: usize) -> SessionContext {
    let merging = CombinePartialFinalAggregate::new();
    let rules = PhysicalOptimizer::new()
        .rules
        .into_iter()
        .filter(|rule| rule.name() != merging.name())
        .collect();
    let state = SessionStateBuilder::new()
        .with_config(SessionConfig::new().with_target_partitions(threads))
        .with_default_features()
        .with_physical_optimizer_rules(rules)
        .build();
    SessionContext::new_with_state(state)
}

/// The partial half of the aggregation in `plan`: what the node runs of an
/// aggregated fragment (the worker's final half merges the states).
fn partial_half(plan: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let mut found = None;
    let _ = plan.apply(|node| {
        if is_partial_half(node) {
            found = Some(Arc::clone(node));
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}
