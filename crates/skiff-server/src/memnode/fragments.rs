//! Offloaded fragments on the memory node (opportunistic offload,
//! `../shared/papers/opportunistic-query-execution-smartnics.txt`): a
//! worker's [`FragmentRequest`] names a Substrait plan (one table's scan,
//! filter and projection), the columns it reads and the files; the node
//! plans it with DataFusion against its chunks and runs it on its own few
//! threads (`--offload-threads`, the paper's embedded cores), row group by
//! row group, marking each one's end, or pushes it back with the reason.
//!
//! The plan is made once, over the first row group, and each row group then
//! runs the same physical plan with its rows in the memory scan's place.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
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
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, TableScanBuilder};
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_substrait::extensions::Extensions;
use datafusion_substrait::logical_plan::consumer::{
    SubstraitConsumer, from_substrait_plan_with_consumer,
};
use datafusion_substrait::substrait::proto::Plan;
use futures::StreamExt;
use prost::Message;
use skiff_flight::fragments::{RowEncoder, decision_message, mark_message, schema_of};
use skiff_flight::protocol::{
    ChunkFile, FragmentDecision, FragmentFile, FragmentMark, FragmentRecord, FragmentRequest,
    OffloadMode,
};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::mpsc;
use tonic::Status;
use tracing::{debug, info};

use super::chunks::{ChunkStore, FragmentGroup};
use super::estimate::{Estimate, Statistics, estimate};
use super::sketches::ColumnSketch;
use crate::config::FRAGMENT_HISTORY;

/// The threads fragments run on, apart from the node's serving threads,
/// and what became of the latest fragments.
pub struct Offloader {
    runtime: Option<Runtime>,
    threads: usize,
    history: Arc<History>,
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

impl std::fmt::Debug for Offloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offloader")
            .field("threads", &self.threads)
            .finish()
    }
}

impl Offloader {
    /// `threads` threads (at least one).
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
        })
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
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
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
    // Detached: the task ends when the fragment is done or the receiver
    // (the network) is gone, whichever comes first.
    drop(handle.spawn(async move {
        let started = Instant::now();
        match prepare(&chunks, &request, threads).await {
            Err(reason) => {
                debug!(%reason, "fragment pushed back");
                history.record(FragmentRecord {
                    reason: reason.clone(),
                    execution_nanos: nanos(started),
                    ..FragmentRecord::default()
                });
                let decision = FragmentDecision {
                    offload: false,
                    reason,
                    ..FragmentDecision::default()
                };
                let _ = tx.send(Ok(decision_message(&decision))).await;
            }
            Ok(prepared) => {
                let (input_rows, estimated_rows) = (
                    prepared.estimated.input_rows,
                    prepared.estimated.output_rows,
                );
                let ran = prepared.run(&tx, started).await;
                let mut record = FragmentRecord {
                    offloaded: true,
                    input_rows: input_rows as u64,
                    estimated_rows,
                    execution_nanos: nanos(started),
                    ..FragmentRecord::default()
                };
                match ran {
                    Ok(Some(rows)) => record.rows = rows,
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

/// A fragment planned over the node's chunks, ready to run.
struct Prepared {
    plan: Arc<dyn ExecutionPlan>,
    ctx: SessionContext,
    schema: SchemaRef,
    groups: Vec<FragmentGroup>,
    counts: Vec<usize>,
    /// The first row group's rows, read while planning.
    first: Option<RecordBatch>,
    threads: usize,
    estimated: Estimate,
}

/// The node's statistics of the row groups a fragment reads: their rows,
/// and the sketches of the fragment's columns over their files.
struct Sketched {
    rows: u64,
    columns: HashMap<String, ColumnSketch>,
}

impl Sketched {
    fn of(
        chunks: &ChunkStore,
        files: &[FragmentFile],
        schema: &SchemaRef,
        groups: &[FragmentGroup],
    ) -> Self {
        let files: Vec<ChunkFile> = files.iter().filter_map(|f| f.file.clone()).collect();
        let columns = schema
            .fields()
            .iter()
            .filter_map(|f| Some((f.name().clone(), chunks.sketch(&files, f.name())?)))
            .collect();
        Self {
            rows: groups.iter().map(|g| g.rows as u64).sum(),
            columns,
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
}

/// Plan `request` against the node's chunks; why not, in words.
async fn prepare(
    chunks: &ChunkStore,
    request: &FragmentRequest,
    threads: usize,
) -> std::result::Result<Prepared, String> {
    if request.mode != OffloadMode::Always as i32 {
        return Err("only `always` offload is decided yet".to_string());
    }
    let schema = schema_of(&request.input_schema).map_err(|e| e.message().to_string())?;
    let (counts, groups) = chunks.fragment_groups(&request.files, &schema)?;
    let first = match groups.first() {
        Some(group) => Some(group.batch(&schema)?),
        None => None,
    };
    let rows = first
        .clone()
        .unwrap_or_else(|| RecordBatch::new_empty(Arc::clone(&schema)));
    let config = SessionConfig::new().with_target_partitions(threads);
    let ctx = SessionContext::new_with_config(config);
    let plan =
        Plan::decode(request.plan.as_slice()).map_err(|e| format!("bad Substrait plan: {e}"))?;
    let table = Arc::new(
        MemTable::try_new(Arc::clone(&schema), split(&rows, threads)).map_err(|e| e.to_string())?,
    );
    let state = ctx.state();
    let extensions = Extensions::try_from(&plan.extensions).map_err(|e| e.to_string())?;
    let consumer = OneTable {
        extensions: &extensions,
        state: &state,
        table,
    };
    let logical = from_substrait_plan_with_consumer(&consumer, &plan)
        .await
        .map_err(|e| format!("cannot read the fragment: {e}"))?;
    supported(&logical)?;
    let logical =
        lift_scan_filters(logical).map_err(|e| format!("cannot plan the fragment: {e}"))?;
    let statistics = Sketched::of(chunks, &request.files, &schema, &groups);
    let estimated = estimate(&logical, &statistics);
    let plan = state
        .create_physical_plan(&logical)
        .await
        .map_err(|e| format!("cannot plan the fragment: {e}"))?;
    Ok(Prepared {
        plan,
        ctx,
        schema,
        groups,
        counts,
        first,
        threads,
        estimated,
    })
}

impl Prepared {
    /// Send the decision, then every row group's rows and mark, then the
    /// last mark: the rows sent. Stops quietly when the receiver is gone
    /// (`None`).
    async fn run(
        self,
        tx: &mpsc::Sender<Result<FlightData, Status>>,
        started: Instant,
    ) -> std::result::Result<Option<u64>, Status> {
        let decision = FragmentDecision {
            offload: true,
            reason: "asked to offload".to_string(),
            row_groups: self.counts.iter().map(|&n| n as u32).collect(),
            input_rows: self.estimated.input_rows as u64,
            estimated_rows: self.estimated.output_rows,
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
        let mut first = self.first;
        let mut sent_rows = 0;
        for group in &self.groups {
            let rows = match first.take() {
                Some(rows) => rows,
                None => group.batch(&self.schema).map_err(|e| failed(&e))?,
            };
            let plan = with_rows(&self.plan, split(&rows, self.threads)).map_err(|e| failed(&e))?;
            let mut stream = execute_stream(plan, self.ctx.task_ctx()).map_err(|e| failed(&e))?;
            let mut given = 0;
            while let Some(batch) = stream.next().await {
                let batch = batch.map_err(|e| failed(&e))?;
                given += batch.num_rows() as u64;
                for message in encoder.batch(&batch)? {
                    if tx.send(Ok(message)).await.is_err() {
                        return Ok(None);
                    }
                }
            }
            sent_rows += given;
            let mark = FragmentMark {
                file: group.file as u32,
                row_group: group.row_group as u32,
                rows: given,
                end: false,
                execution_nanos: 0,
            };
            if tx.send(Ok(mark_message(&mark))).await.is_err() {
                return Ok(None);
            }
        }
        let elapsed = started.elapsed();
        let end = FragmentMark {
            end: true,
            rows: sent_rows,
            execution_nanos: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
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
            "fragment offloaded"
        );
        Ok(Some(sent_rows))
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
/// projections (what workers send; anything else is pushed back).
fn supported(plan: &LogicalPlan) -> std::result::Result<(), String> {
    let mut scans = 0;
    let mut other = None;
    // Subqueries included: their scans would read the node's one table.
    let _ = plan.apply_with_subqueries(|node| {
        match node {
            LogicalPlan::TableScan(_) => scans += 1,
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
    Ok(())
}
