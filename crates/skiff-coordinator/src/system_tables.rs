//! The `skiff` schema: live views of the coordinator's state as tables
//! (`skiff.queries`, `skiff.pipelines`, `skiff.workers`,
//! `skiff.partitions`, the workers' buffer pools in `skiff.cache`, buffer
//! matchings in `skiff.matchings`, what memory nodes hold in
//! `skiff.memory_tables`, the fragments they were offered in
//! `skiff.memory_fragments`, the workers' pipeline groups in
//! `skiff.pipeline_groups`), managed
//! tables' commits (`skiff.table_history`), and admin
//! functions (`skiff.cancel(id)`, `skiff.migrate`, `skiff.clear_cache()`, ...). Each scan
//! snapshots the state at planning time. Everyone may cancel their own
//! queries; the rest of the functions are for admins.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, UNIX_EPOCH};

use arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Array, Int64Builder, RecordBatch,
    StringArray, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{MemTable, SchemaProvider, TableProvider};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use skiff_flight::protocol::HandoffReason;
use skiff_tables::history;

use super::membership::Membership;
use super::partitions::{PartitionedTable, partitioned_tables};
use super::queries::QueryRegistry;
use super::session::Caller;
use super::vacate::{self, Vacate};
use crate::inner::Inner;
use crate::{buffer_view, groups_view, matching, memory_view, relay, resize};
use skiff_node::error::{ServerError, SqlState};

/// The schema's name.
pub const SCHEMA: &str = skiff_engine::catalog::SYSTEM_SCHEMA;

const TABLES: [&str; 10] = [
    "queries",
    "pipelines",
    "workers",
    "partitions",
    "cache",
    "matchings",
    "memory_tables",
    "memory_fragments",
    "pipeline_groups",
    history::NAME,
];

/// Register the `skiff` schema and functions in `ctx`'s default catalog.
pub(crate) fn install(ctx: &SessionContext, coordinator: Weak<Inner>) {
    let schema = Arc::new(SystemSchema {
        coordinator: coordinator.clone(),
    });
    if let Some(catalog) = ctx.catalog(skiff_engine::catalog::DATABASE) {
        // Only fails for a schema of the same name, which nothing else makes.
        let _ = catalog.register_schema(SCHEMA, schema);
    }
    ctx.register_udf(ScalarUDF::from(CancelFunction::new(coordinator.clone())));
    ctx.register_udf(buffer_view::clear_cache(coordinator.clone()));
    for udf in memory_view::MemoryFunction::udfs(&coordinator) {
        ctx.register_udf(udf);
    }
    for op in [
        Admin::Migrate,
        Admin::Suspend,
        Admin::Resume,
        Admin::Drain,
        Admin::Undrain,
        Admin::SpotNotice,
        Admin::AddWorkers,
        Admin::RemoveWorker,
    ] {
        ctx.register_udf(ScalarUDF::from(AdminFunction::new(op, coordinator.clone())));
    }
}

#[derive(Debug)]
struct SystemSchema {
    coordinator: Weak<Inner>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator").finish_non_exhaustive()
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        TABLES.iter().map(|t| t.to_string()).collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let Some(inner) = self.coordinator.upgrade() else {
            return exec_err!("the coordinator is shutting down");
        };
        if name == history::NAME {
            return Ok(Some(Arc::new(history::TableHistory)));
        }
        let Some(batch) = rows_now(&inner, name).await? else {
            return Ok(None);
        };
        let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
        Ok(Some(Arc::new(table)))
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.contains(&name)
    }
}

/// The rows of the system table `name` now; `None` for a name that is not
/// one (or is `table_history`, which reads the tables' logs when scanned).
pub(crate) async fn rows_now(inner: &Inner, name: &str) -> Result<Option<RecordBatch>> {
    Ok(Some(match name {
        "queries" => queries(&inner.queries, &memory_view::offload_by_query(inner).await)?,
        "pipelines" => pipelines(&inner.queries)?,
        "workers" => workers(&inner.membership)?,
        "partitions" => {
            let tables = partitioned_tables(inner.engine.context()).await;
            partitions(&inner.partition_map(), &tables)?
        }
        "cache" => buffer_view::cache_table(inner).await?,
        "matchings" => matchings(&inner.matching.records())?,
        "memory_tables" => memory_view::memory_tables_table(inner).await?,
        "memory_fragments" => memory_view::memory_fragments_table(inner).await?,
        "pipeline_groups" => groups_view::pipeline_groups_table(inner).await?,
        _ => return Ok(None),
    }))
}

/// `skiff.queries` without the memory nodes' offload records (which cost
/// a call to each node): what the console lists every tick.
pub(crate) fn queries_now(inner: &Inner) -> Result<RecordBatch> {
    queries(&inner.queries, &HashMap::new())
}

/// `skiff.queries.offload` of query `id`: its fragments offloaded and
/// pushed back, from the memory nodes' records.
pub(crate) async fn offload_of(inner: &Inner, id: u64) -> Option<String> {
    memory_view::offload_by_query(inner).await.remove(&id)
}

fn micros(time: std::time::SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, None)
}

/// `skiff.matchings`: the last buffer matchings, oldest first.
fn matchings(records: &[matching::Record]) -> Result<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("cause", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("started", timestamp(), false),
        Field::new("elapsed_ms", DataType::Int64, true),
        Field::new("partitions_moved", DataType::Int64, false),
        Field::new("senders", DataType::Int64, false),
        Field::new("receivers", DataType::Int64, false),
        Field::new("blocks_sent", DataType::Int64, false),
        Field::new("blocks_kept", DataType::Int64, false),
        Field::new("bytes_kept", DataType::Int64, false),
        Field::new("failures", DataType::Int64, false),
    ]));
    let int = |f: &dyn Fn(&matching::Record) -> u64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            records.iter().map(|r| f(r) as i64),
        ))
    };
    let mut started = TimestampMicrosecondBuilder::new();
    for r in records {
        started.append_value(micros(r.started));
    }
    let columns: Vec<ArrayRef> = vec![
        int(&|r| r.id),
        Arc::new(StringArray::from_iter_values(
            records.iter().map(|r| r.cause.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(records.iter().map(|r| {
            if r.elapsed_ms.is_some() {
                "done"
            } else {
                "running"
            }
        }))),
        Arc::new(started.finish()),
        Arc::new(Int64Array::from_iter(
            records.iter().map(|r| r.elapsed_ms.map(|ms| ms as i64)),
        )),
        int(&|r| r.moves as u64),
        int(&|r| r.shipped.senders as u64),
        int(&|r| r.shipped.receivers as u64),
        int(&|r| r.shipped.blocks_sent),
        int(&|r| r.shipped.blocks_kept),
        int(&|r| r.shipped.bytes_kept),
        int(&|r| r.shipped.failures),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn queries(registry: &QueryRegistry, offload: &HashMap<u64, String>) -> Result<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("user", DataType::Utf8, false),
        Field::new("sql", DataType::Utf8, false),
        Field::new("worker", DataType::Utf8, true),
        Field::new("state", DataType::Utf8, false),
        Field::new("progress", DataType::Float64, true),
        Field::new("pipelines_done", DataType::Int32, true),
        Field::new("pipelines_total", DataType::Int32, true),
        Field::new("rows_sent", DataType::Int64, false),
        Field::new("started", timestamp(), false),
        Field::new("elapsed_ms", DataType::Int64, false),
        Field::new("error", DataType::Utf8, true),
        Field::new("migrations", DataType::Int32, false),
        Field::new("suspensions", DataType::Int32, false),
        Field::new("restarts", DataType::Int32, false),
        Field::new("snapshots", DataType::Int32, false),
        Field::new("state_bytes", DataType::Int64, false),
        Field::new("decision", DataType::Utf8, true),
        Field::new("tasks", DataType::Utf8, true),
        Field::new("scan_files_done", DataType::Int64, true),
        Field::new("scan_files_total", DataType::Int64, true),
        Field::new("offload", DataType::Utf8, true),
    ]));
    let all = registry.all();
    let mut files_done = Int64Builder::new();
    let mut files_total = Int64Builder::new();
    let mut migrations = Int32Builder::new();
    let mut suspensions = Int32Builder::new();
    let mut restarts = Int32Builder::new();
    let mut snapshots = Int32Builder::new();
    let mut state_bytes = Int64Builder::new();
    let mut decision = StringBuilder::new();
    let mut tasks = StringBuilder::new();
    let mut offloads = StringBuilder::new();
    let mut id = Int64Builder::new();
    let mut user = StringBuilder::new();
    let mut sql = StringBuilder::new();
    let mut worker = StringBuilder::new();
    let mut state = StringBuilder::new();
    let mut progress = Float64Builder::new();
    let mut done = Int32Builder::new();
    let mut total = Int32Builder::new();
    let mut rows = Int64Builder::new();
    let mut started = TimestampMicrosecondBuilder::new();
    let mut elapsed = Int64Builder::new();
    let mut error = StringBuilder::new();
    for entry in all {
        let info = entry.info();
        id.append_value(entry.id as i64);
        user.append_value(&entry.user);
        sql.append_value(&entry.sql);
        worker.append_option(info.worker.as_ref().map(|(_, addr)| addr.as_str()));
        state.append_value(info.status.name());
        let finished = info.status == crate::queries::QueryStatus::Finished;
        // Reads the coordinator's tally: once per row.
        let scanned = info.scans.as_ref().map(|s| (s.done(), s.total));
        match &info.progress {
            Some(p) => {
                let (d, t) = if finished {
                    (p.pipelines_total, p.pipelines_total)
                } else {
                    (p.pipelines_finished, p.pipelines_total)
                };
                progress.append_value(if t == 0 {
                    1.0
                } else {
                    f64::from(d) / f64::from(t)
                });
                done.append_value(d as i32);
                total.append_value(t as i32);
            }
            None => {
                progress.append_option(match scanned {
                    _ if finished => Some(1.0),
                    Some((d, t)) => Some(scan_progress(d, t, &info.status)),
                    None => None,
                });
                done.append_null();
                total.append_null();
            }
        }
        let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        files_done.append_option(scanned.map(|(d, _)| as_i64(d)));
        files_total.append_option(scanned.map(|(_, t)| as_i64(t)));
        rows.append_value(info.rows_sent as i64);
        started.append_value(micros(entry.started));
        elapsed.append_value(entry.elapsed().as_millis() as i64);
        match &info.status {
            crate::queries::QueryStatus::Failed(m) | crate::queries::QueryStatus::Canceled(m) => {
                error.append_value(m)
            }
            _ => error.append_null(),
        }
        migrations.append_value(info.migrations as i32);
        suspensions.append_value(info.suspensions as i32);
        restarts.append_value(info.restarts as i32);
        snapshots.append_value(info.snapshots as i32);
        state_bytes.append_value(info.state_bytes as i64);
        decision.append_option(Some(info.decision.as_str()).filter(|d| !d.is_empty()));
        tasks.append_option(info.routes.as_ref().and_then(|r| r.describe()));
        offloads.append_option(offload.get(&entry.id));
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(id.finish()),
        Arc::new(user.finish()),
        Arc::new(sql.finish()),
        Arc::new(worker.finish()),
        Arc::new(state.finish()),
        Arc::new(progress.finish()),
        Arc::new(done.finish()),
        Arc::new(total.finish()),
        Arc::new(rows.finish()),
        Arc::new(started.finish()),
        Arc::new(elapsed.finish()),
        Arc::new(error.finish()),
        Arc::new(migrations.finish()),
        Arc::new(suspensions.finish()),
        Arc::new(restarts.finish()),
        Arc::new(snapshots.finish()),
        Arc::new(state_bytes.finish()),
        Arc::new(decision.finish()),
        Arc::new(tasks.finish()),
        Arc::new(files_done.finish()),
        Arc::new(files_total.finish()),
        Arc::new(offloads.finish()),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A distributed query's progress: the share of its scans' files its tasks
/// finished, below 1 until the query ends (the stages above the scans may
/// still be running).
fn scan_progress(done: u64, total: u64, status: &crate::queries::QueryStatus) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let share = (done as f64 / total as f64).min(1.0);
    if status.is_done() {
        share
    } else {
        share.min(SCAN_PROGRESS_RUNNING_MAX)
    }
}

/// The most progress a running distributed query shows.
const SCAN_PROGRESS_RUNNING_MAX: f64 = 0.99;

fn pipelines(registry: &QueryRegistry) -> Result<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("query_id", DataType::Int64, false),
        Field::new("pipeline", DataType::Int32, false),
        Field::new("breaker", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("output_rows", DataType::Int64, false),
        Field::new("output_bytes", DataType::Int64, false),
        Field::new("elapsed_ms", DataType::Int64, false),
        Field::new("pipeline_group", DataType::Utf8, true),
    ]));
    let mut query = Int64Builder::new();
    let mut pipeline = Int32Builder::new();
    let mut breaker = StringBuilder::new();
    let mut status = StringBuilder::new();
    let mut rows = Int64Builder::new();
    let mut bytes = Int64Builder::new();
    let mut elapsed = Int64Builder::new();
    let mut group = StringBuilder::new();
    for entry in registry.live() {
        let Some(progress) = entry.info().progress else {
            continue;
        };
        for p in &progress.pipelines {
            query.append_value(entry.id as i64);
            pipeline.append_value(p.id as i32);
            breaker.append_value(&p.breaker);
            status.append_value(&p.status);
            rows.append_value(p.output_rows as i64);
            bytes.append_value(p.output_bytes as i64);
            elapsed.append_value(p.elapsed_ms as i64);
            group.append_option(Some(p.group.as_str()).filter(|g| !g.is_empty()));
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(query.finish()),
        Arc::new(pipeline.finish()),
        Arc::new(breaker.finish()),
        Arc::new(status.finish()),
        Arc::new(rows.finish()),
        Arc::new(bytes.finish()),
        Arc::new(elapsed.finish()),
        Arc::new(group.finish()),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// One row per partition of every equivalence class: its owner under the
/// current epoch, whether the last resize moved it, and the class's tables.
fn partitions(
    manager: &skiff_cluster::PartitionManager,
    tables: &[PartitionedTable],
) -> Result<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("epoch", DataType::Int64, false),
        Field::new("partitions", DataType::Int32, false),
        Field::new("partition", DataType::Int32, false),
        Field::new("worker", DataType::Int64, false),
        Field::new("moved", DataType::Boolean, false),
        Field::new("tables", DataType::Utf8, false),
    ]));
    let mut epoch = Int64Builder::new();
    let mut class = Int32Builder::new();
    let mut partition = Int32Builder::new();
    let mut worker = Int64Builder::new();
    let mut moved = BooleanBuilder::new();
    let mut names = StringBuilder::new();
    for (p, mapping) in manager.classes() {
        let members = tables
            .iter()
            .filter(|t| t.partitioning.partitions == p)
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(",");
        for (i, (&owner, &was_moved)) in mapping.owners().iter().zip(mapping.moved()).enumerate() {
            epoch.append_value(manager.epoch() as i64);
            class.append_value(p as i32);
            partition.append_value(i as i32);
            worker.append_value(owner as i64);
            moved.append_value(was_moved);
            names.append_value(&members);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(epoch.finish()),
        Arc::new(class.finish()),
        Arc::new(partition.finish()),
        Arc::new(worker.finish()),
        Arc::new(moved.finish()),
        Arc::new(names.finish()),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn workers(membership: &Membership) -> Result<RecordBatch> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("role", DataType::Utf8, false),
        Field::new("address", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("cores", DataType::Int32, false),
        Field::new("memory", DataType::Int64, false),
        Field::new("running_queries", DataType::Int64, false),
        Field::new("pid", DataType::Int64, false),
        Field::new("registered", timestamp(), false),
        Field::new("last_heartbeat_ms", DataType::Int64, false),
        Field::new("draining", DataType::Boolean, false),
        Field::new("vacate_ms", DataType::Int64, true),
        Field::new("memory_used", DataType::Int64, false),
        Field::new("cache_bytes", DataType::Int64, false),
    ]));
    let now = Instant::now();
    let mut id = Int64Builder::new();
    let mut role = StringBuilder::new();
    let mut addr = StringBuilder::new();
    let mut state = StringBuilder::new();
    let mut cores = Int32Builder::new();
    let mut memory = Int64Builder::new();
    let mut running = Int64Builder::new();
    let mut pid = Int64Builder::new();
    let mut registered = TimestampMicrosecondBuilder::new();
    let mut heartbeat = Int64Builder::new();
    let mut draining = BooleanBuilder::new();
    let mut vacate_ms = Int64Builder::new();
    let mut memory_used = Int64Builder::new();
    let mut cache_bytes = Int64Builder::new();
    for node in membership.nodes() {
        memory_used.append_value(node.memory_used as i64);
        cache_bytes.append_value(node.cache_bytes as i64);
        draining.append_value(node.draining);
        vacate_ms.append_option(node.vacate_ms.map(|ms| ms as i64));
        id.append_value(node.id as i64);
        role.append_value(node.role.name());
        addr.append_value(&node.addr);
        state.append_value(node.state.name());
        cores.append_value(node.cores as i32);
        memory.append_value(node.memory as i64);
        running.append_value(node.assigned as i64);
        pid.append_value(i64::from(node.pid));
        registered.append_value(micros(node.registered));
        heartbeat.append_value(
            now.saturating_duration_since(node.last_heartbeat)
                .as_millis() as i64,
        );
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(id.finish()),
        Arc::new(role.finish()),
        Arc::new(addr.finish()),
        Arc::new(state.finish()),
        Arc::new(cores.finish()),
        Arc::new(memory.finish()),
        Arc::new(running.finish()),
        Arc::new(pid.finish()),
        Arc::new(registered.finish()),
        Arc::new(heartbeat.finish()),
        Arc::new(draining.finish()),
        Arc::new(vacate_ms.finish()),
        Arc::new(memory_used.finish()),
        Arc::new(cache_bytes.finish()),
    ];
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `skiff.cancel(id)`: cancel a running query; true if it was running.
#[derive(Debug)]
struct CancelFunction {
    coordinator: Weak<Inner>,
    signature: Signature,
}

impl CancelFunction {
    fn new(coordinator: Weak<Inner>) -> Self {
        Self {
            coordinator,
            signature: Signature::exact(vec![DataType::Int64], Volatility::Volatile),
        }
    }
}

impl PartialEq for CancelFunction {
    fn eq(&self, other: &Self) -> bool {
        self.signature == other.signature
    }
}

impl Eq for CancelFunction {}

impl std::hash::Hash for CancelFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.signature.hash(state);
    }
}

impl ScalarUDFImpl for CancelFunction {
    fn name(&self) -> &str {
        "skiff.cancel"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(inner) = self.coordinator.upgrade() else {
            return exec_err!("the coordinator is shutting down");
        };
        let ids = match &args.args[..] {
            [arg] => arg.to_array(args.number_rows)?,
            _ => return exec_err!("skiff.cancel takes one query id"),
        };
        let Some(ids) = ids.as_any().downcast_ref::<Int64Array>() else {
            return exec_err!("skiff.cancel takes a BIGINT query id");
        };
        let caller = Caller::of(&args.config_options);
        let mut canceled = BooleanBuilder::with_capacity(ids.len());
        for id in ids {
            let Some(id) = id else {
                canceled.append_null();
                continue;
            };
            let Ok(id) = u64::try_from(id) else {
                canceled.append_value(false);
                continue;
            };
            if let Some(entry) = inner.queries.get(id)
                && entry.user != caller.user
                && !caller.is_admin()
            {
                return Err(ServerError::new(
                    SqlState::InsufficientPrivilege,
                    format!(
                        "permission denied to cancel query {id}: it belongs to another user \
                         (only admins cancel others' queries)"
                    ),
                )
                .into());
            }
            canceled.append_value(inner.queries.cancel(
                id,
                ServerError::canceled("canceling statement due to user request"),
            ));
        }
        Ok(ColumnarValue::Array(Arc::new(canceled.finish())))
    }
}

/// The state-separation operations on one query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Admin {
    /// `skiff.migrate(id [, worker [, 'finish' | 'abort']])`
    Migrate,
    /// `skiff.suspend(id [, 'finish' | 'abort'])`
    Suspend,
    /// `skiff.resume(id)`
    Resume,
    /// `skiff.drain(worker [, 'finish' | 'abort'])`
    Drain,
    /// `skiff.undrain(worker)`: a drained worker takes queries again.
    Undrain,
    /// `skiff.spot_notice(worker, seconds)`
    SpotNotice,
    /// `skiff.add_workers(n)`: start n local workers (`skiff serve`).
    AddWorkers,
    /// `skiff.remove_worker(worker)`: vacate it, then remove it.
    RemoveWorker,
}

/// A state-separation operation as a SQL function: true when it was asked
/// for; what happened shows in `skiff.queries`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct AdminFunction {
    op: Admin,
    #[allow(clippy::struct_field_names)]
    name: &'static str,
    signature: Signature,
    coordinator: WeakInner,
}

/// Functions compare by name; the coordinator is the same for all.
#[derive(Debug)]
struct WeakInner(Weak<Inner>);

impl PartialEq for WeakInner {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for WeakInner {}

impl std::hash::Hash for WeakInner {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl AdminFunction {
    fn new(op: Admin, coordinator: Weak<Inner>) -> Self {
        let name = match op {
            Admin::Migrate => "skiff.migrate",
            Admin::Suspend => "skiff.suspend",
            Admin::Resume => "skiff.resume",
            Admin::Drain => "skiff.drain",
            Admin::Undrain => "skiff.undrain",
            Admin::SpotNotice => "skiff.spot_notice",
            Admin::AddWorkers => "skiff.add_workers",
            Admin::RemoveWorker => "skiff.remove_worker",
        };
        Self {
            op,
            name,
            signature: Signature::variadic_any(Volatility::Volatile),
            coordinator: WeakInner(coordinator),
        }
    }

    fn usage(&self) -> &'static str {
        match self.op {
            Admin::Migrate => "skiff.migrate(id [, worker [, 'finish' | 'abort']])",
            Admin::Suspend => "skiff.suspend(id [, 'finish' | 'abort'])",
            Admin::Resume => "skiff.resume(id)",
            Admin::Drain => "skiff.drain(worker [, 'finish' | 'abort'])",
            Admin::Undrain => "skiff.undrain(worker)",
            Admin::SpotNotice => "skiff.spot_notice(worker, seconds)",
            Admin::AddWorkers => "skiff.add_workers(n)",
            Admin::RemoveWorker => "skiff.remove_worker(worker)",
        }
    }

    /// Run the operation for one row of arguments.
    fn apply(&self, inner: &Arc<Inner>, first: &str, text: &[Option<String>]) -> Result<bool> {
        let usage = || ServerError::new(SqlState::InvalidParameterValue, self.usage());
        let worker = |name: &str| {
            inner.membership.resolve_worker(name).ok_or_else(|| {
                ServerError::new(
                    SqlState::InvalidParameterValue,
                    format!("no live worker '{name}' (a worker id or address)"),
                )
            })
        };
        // Whether running pipelines are aborted. 'drain' and 'immediate'
        // are the modes' names before 'finish' and 'abort', still accepted.
        let aborts = |arg: Option<&Option<String>>| match arg.and_then(|m| m.as_deref()) {
            None | Some("finish" | "drain") => Ok(false),
            Some("abort" | "immediate") => Ok(true),
            Some(other) => Err(ServerError::new(
                SqlState::InvalidParameterValue,
                format!("unknown mode '{other}': finish or abort"),
            )),
        };
        match (self.op, text) {
            (Admin::Drain, [] | [_]) => {
                let how = match aborts(text.first())? {
                    true => Vacate::Abort,
                    false => Vacate::Finish,
                };
                vacate::vacate(inner, worker(first)?, how)?;
                return Ok(true);
            }
            (Admin::SpotNotice, [Some(seconds)]) => {
                let seconds: f64 = seconds.trim().parse().map_err(|_| usage())?;
                let notice = Duration::try_from_secs_f64(seconds).map_err(|_| usage())?;
                vacate::vacate(inner, worker(first)?, Vacate::Notice(notice))?;
                return Ok(true);
            }
            (Admin::Undrain, []) => return Ok(inner.membership.stop_draining(worker(first)?)),
            (Admin::AddWorkers, []) => {
                let n: usize = first.trim().parse().map_err(|_| usage())?;
                resize::add_workers(inner, n)?;
                return Ok(true);
            }
            (Admin::RemoveWorker, []) => {
                resize::remove_worker(inner, worker(first)?)?;
                return Ok(true);
            }
            (
                Admin::Drain
                | Admin::Undrain
                | Admin::SpotNotice
                | Admin::AddWorkers
                | Admin::RemoveWorker,
                _,
            ) => return Err(usage().into()),
            _ => {}
        }
        let id: u64 = first.trim().parse().map_err(|_| usage())?;
        match (self.op, text) {
            (Admin::Migrate, [] | [_] | [_, _]) => {
                let target = match text.first().and_then(|t| t.as_deref()) {
                    None => None,
                    Some(name) => Some(worker(name)?),
                };
                let abort = aborts(text.get(1))?;
                relay::request_handoff(inner, id, HandoffReason::Migrate, target, abort)?;
                Ok(true)
            }
            (Admin::Suspend, [] | [_]) => {
                let abort = aborts(text.first())?;
                relay::request_handoff(inner, id, HandoffReason::Suspend, None, abort)?;
                Ok(true)
            }
            (Admin::Resume, []) => match inner.queries.get(id) {
                Some(entry) => Ok(entry.resume(None)),
                None => Err(ServerError::new(
                    SqlState::InvalidParameterValue,
                    format!("no query {id} is running"),
                )
                .into()),
            },
            _ => Err(usage().into()),
        }
    }
}

impl ScalarUDFImpl for AdminFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(inner) = self.coordinator.0.upgrade() else {
            return exec_err!("the coordinator is shutting down");
        };
        if !Caller::of(&args.config_options).is_admin() {
            return Err(ServerError::new(
                SqlState::InsufficientPrivilege,
                format!(
                    "permission denied for {}: only admin users may call it",
                    self.name
                ),
            )
            .into());
        }
        if args.args.is_empty() {
            return exec_err!("{}", self.usage());
        }
        if matches!(self.op, Admin::AddWorkers | Admin::RemoveWorker) {
            let options = args
                .config_options
                .extensions
                .get::<skiff_engine::SkiffOptions>();
            inner.matching.set_from(options);
        }
        let texts = args
            .args
            .iter()
            .map(|arg| {
                let array = cast(&arg.to_array(args.number_rows)?, &DataType::Utf8)?;
                match array.as_any().downcast_ref::<StringArray>() {
                    Some(strings) => Ok(strings.iter().map(|s| s.map(str::to_string)).collect()),
                    None => exec_err!("{}", self.usage()),
                }
            })
            .collect::<Result<Vec<Vec<Option<String>>>>>()?;
        let mut done = BooleanBuilder::new();
        for row in 0..args.number_rows {
            let Some(first) = texts[0][row].as_deref() else {
                done.append_null();
                continue;
            };
            let text: Vec<Option<String>> = texts[1..].iter().map(|t| t[row].clone()).collect();
            done.append_value(self.apply(&inner, first, &text)?);
        }
        Ok(ColumnarValue::Array(Arc::new(done.finish())))
    }
}
