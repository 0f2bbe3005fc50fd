//! Tables in memory nodes from SQL: `skiff.load_to_memory('t' [, 'col',
//! ...])` and `skiff.unload_from_memory('t')` (admins only: they take the
//! memory nodes' memory), and `skiff.memory_tables` (asked of every live
//! memory node when a query reads it).
//!
//! A load plans a scan of the table to learn the file versions a query
//! would read now, splits them over the live memory nodes (a hash
//! partition's files to node `p mod M`, other files round robin), has each
//! node load its share, and returns once the workers read with the new
//! routes (or [`ROUTES_WAIT`] passed). A load that fails anywhere is undone
//! everywhere: the table is read from storage, as before.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use arrow::array::{Int64Array, Int64Builder, RecordBatch, StringArray, StringBuilder};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, exec_err};
use datafusion::datasource::physical_plan::{FileScanConfig, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use futures::future::join_all;
use skiff_engine::buffer::{FileVersion, table_location};
use skiff_flight::chunks::{chunk_file, load_table, memory_stats, unload_table};
use skiff_flight::protocol::{ChunkFile, LoadTable, MemoryStats, Role, TableLoaded};
use tracing::{info, warn};

use super::membership::NodeState;
use super::memory_tables::{HeldFile, Loaded};
use super::session::Caller;
use crate::config::{
    BUFFER_CALL_TIMEOUT, PRELOAD_RETRY, PRELOAD_TRIES, ROUTES_WAIT, TABLE_LOAD_DEADLINE,
};
use crate::inner::Inner;
use skiff_node::error::{ServerError, SqlState};

pub(crate) const LOAD: &str = "skiff.load_to_memory";
pub(crate) const UNLOAD: &str = "skiff.unload_from_memory";

/// The live memory nodes, by id.
fn memory_nodes(inner: &Inner) -> Vec<(u64, String)> {
    let mut nodes: Vec<(u64, String)> = inner
        .membership
        .nodes()
        .into_iter()
        .filter(|n| n.role == Role::MemoryNode && n.state == NodeState::Alive)
        .map(|n| (n.id, n.addr))
        .collect();
    nodes.sort();
    nodes
}

/// What a scan of `table` reads now: its location, object store and files.
async fn table_files(
    ctx: &SessionContext,
    table: &str,
    columns: &[String],
) -> std::result::Result<(String, String, Vec<ChunkFile>), ServerError> {
    let invalid = |why: String| ServerError::new(SqlState::InvalidParameterValue, why);
    let frame = ctx
        .table(table)
        .await
        .map_err(|e| invalid(format!("no table {table}: {e}")))?;
    for column in columns {
        if frame.schema().field_with_unqualified_name(column).is_err() {
            return Err(invalid(format!("table {table} has no column {column}")));
        }
    }
    let plan = frame
        .create_physical_plan()
        .await
        .map_err(|e| ServerError::internal(format!("planning a scan of {table}: {e}")))?;
    let mut found: Option<(String, String)> = None;
    let mut files = Vec::new();
    let mut other = false;
    let _ = plan.apply(|node| {
        let Some(config) = node
            .downcast_ref::<DataSourceExec>()
            .and_then(|exec| exec.data_source().downcast_ref::<FileScanConfig>())
        else {
            return Ok(TreeNodeRecursion::Continue);
        };
        if config
            .file_source()
            .downcast_ref::<ParquetSource>()
            .is_none()
        {
            other = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        found = Some((
            table_location(config).to_string(),
            config.object_store_url.as_str().to_string(),
        ));
        for file in config.file_groups.iter().flat_map(|g| g.iter()) {
            files.push(chunk_file(&FileVersion::of(&file.object_meta)));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    match found {
        Some((location, store)) if !other => {
            files.sort_by(|a, b| a.path.cmp(&b.path));
            files.dedup_by(|a, b| a.path == b.path);
            Ok((location, store, files))
        }
        _ => Err(invalid(format!(
            "{table} is not a table of Parquet files (memory nodes hold those only)"
        ))),
    }
}

/// Load `columns` (every column when empty) of `table` into the memory
/// nodes; the bytes they hold of it.
pub(crate) async fn load(
    inner: &Arc<Inner>,
    table: &str,
    columns: Vec<String>,
) -> std::result::Result<u64, ServerError> {
    let _one_at_a_time = inner.memory_tables.changing.lock().await;
    let started = Instant::now();
    let nodes = memory_nodes(inner);
    if nodes.is_empty() {
        return Err(ServerError::new(
            SqlState::CannotConnectNow,
            "no memory node is running (skiff memnode --coordinator ...)",
        ));
    }
    let (location, store, files) = table_files(inner.engine.context(), table, &columns).await?;
    let mut shares: Vec<Vec<ChunkFile>> = vec![Vec::new(); nodes.len()];
    for (i, file) in files.iter().enumerate() {
        let at = file.partition.map_or(i, |p| p as usize) % nodes.len();
        shares[at].push(file.clone());
    }
    let asked = nodes.iter().zip(&shares).map(|((_, addr), share)| {
        let request = LoadTable {
            table: table.to_string(),
            location: location.clone(),
            store: store.clone(),
            files: share.clone(),
            columns: columns.clone(),
        };
        async move {
            if share.is_empty() {
                // It may hold an earlier load of the table.
                return tokio::time::timeout(TABLE_LOAD_DEADLINE, unload_table(addr, table)).await;
            }
            tokio::time::timeout(TABLE_LOAD_DEADLINE, load_table(addr, &request)).await
        }
    });
    let answers: Vec<_> = join_all(asked).await;
    let mut bytes = 0;
    let mut failure = None;
    for ((id, addr), answer) in nodes.iter().zip(&answers) {
        match answer {
            Ok(Ok(loaded)) => bytes += loaded.bytes,
            Ok(Err(e)) => {
                failure.get_or_insert(format!("memory node {id} ({addr}): {}", e.message()));
            }
            Err(_) => {
                failure.get_or_insert(format!(
                    "memory node {id} ({addr}) did not load its share within {}s",
                    TABLE_LOAD_DEADLINE.as_secs()
                ));
            }
        }
    }
    let shares_loaded: usize = shares.iter().map(Vec::len).sum();
    assert_eq!(shares_loaded, files.len(), "every file goes to one node");
    if let Some(failure) = failure {
        // Nothing half loaded: the table is read from storage.
        unload_everywhere(inner, table).await;
        return Err(ServerError::new(
            SqlState::InsufficientResources,
            format!("loading {table} into memory failed, it stays on storage: {failure}"),
        ));
    }
    let held = nodes
        .iter()
        .zip(&shares)
        .flat_map(|((id, addr), share)| {
            share.iter().map(move |file| HeldFile {
                file: file.clone(),
                node: *id,
                addr: addr.clone(),
            })
        })
        .collect();
    let epoch = inner.memory_tables.set(
        table,
        Loaded {
            location,
            files: held,
        },
    );
    let taken = wait_for_routes(inner, epoch).await;
    info!(
        table,
        files = files.len(),
        bytes,
        nodes = nodes.len(),
        ms = started.elapsed().as_millis() as u64,
        workers_have_routes = taken,
        "table loaded into memory"
    );
    Ok(bytes)
}

/// Load the tables a memory node that registered asks for, one after the
/// other over every live memory node, each tried [`PRELOAD_TRIES`] times;
/// failures are logged.
pub(crate) fn preload(inner: &Arc<Inner>, node: u64, tables: Vec<String>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        warn!(node, "no runtime to preload tables on");
        return;
    };
    let inner = Arc::clone(inner);
    // Detached: the outcome shows in skiff.memory_tables and the log.
    runtime.spawn(async move {
        for table in tables {
            for attempt in 1..=PRELOAD_TRIES {
                match load(&inner, &table, Vec::new()).await {
                    Ok(bytes) => {
                        info!(node, table, bytes, "preloaded");
                        break;
                    }
                    Err(e) if attempt < PRELOAD_TRIES => {
                        warn!(node, table, attempt, error = %e, "preload failed; trying again");
                        tokio::time::sleep(PRELOAD_RETRY).await;
                    }
                    Err(e) => warn!(node, table, error = %e, "preload failed; giving up"),
                }
            }
        }
    });
}

/// Drop table `table` from the routes and the memory nodes; the bytes
/// freed.
pub(crate) async fn unload(inner: &Arc<Inner>, table: &str) -> u64 {
    let _one_at_a_time = inner.memory_tables.changing.lock().await;
    if let Some((_, epoch)) = inner.memory_tables.remove(table) {
        // Workers stop asking first; then the chunks go.
        wait_for_routes(inner, epoch).await;
    }
    unload_everywhere(inner, table).await
}

async fn unload_everywhere(inner: &Inner, table: &str) -> u64 {
    let nodes = memory_nodes(inner);
    let answers = join_all(
        nodes
            .iter()
            .map(|(_, addr)| tokio::time::timeout(BUFFER_CALL_TIMEOUT, unload_table(addr, table))),
    )
    .await;
    let mut freed = 0;
    for ((id, addr), answer) in nodes.iter().zip(answers) {
        match answer {
            Ok(Ok(TableLoaded { bytes, .. })) => freed += bytes,
            Ok(Err(e)) => warn!(node = id, %addr, error = e.message(), "unload failed"),
            Err(_) => warn!(node = id, %addr, "unload not answered in time"),
        }
    }
    freed
}

/// Wait until every live worker reads with routes of `epoch`, or
/// [`ROUTES_WAIT`]; whether they all do.
async fn wait_for_routes(inner: &Inner, epoch: u64) -> bool {
    let deadline = tokio::time::Instant::now() + ROUTES_WAIT;
    loop {
        let workers = inner.membership.live_workers();
        if inner.memory_tables.taken_by(&workers, epoch) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            warn!(epoch, "not every worker took the memory routes in time");
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// What each live memory node says it holds and was offered; a node that
/// does not answer in time is left out.
async fn node_stats(inner: &Inner) -> Vec<(u64, MemoryStats)> {
    let nodes = memory_nodes(inner);
    let answers = join_all(
        nodes
            .iter()
            .map(|(_, addr)| tokio::time::timeout(BUFFER_CALL_TIMEOUT, memory_stats(addr))),
    )
    .await;
    let mut stats = Vec::with_capacity(nodes.len());
    for ((id, addr), answer) in nodes.into_iter().zip(answers) {
        match answer {
            Ok(Ok(answer)) => stats.push((id, answer)),
            Ok(Err(e)) => {
                tracing::debug!(node = id, %addr, error = %e, "no chunk store counters");
            }
            Err(_) => {}
        }
    }
    stats
}

/// What became of each query's offered fragments, in words, for
/// `skiff.queries` (from the memory nodes' records; a query whose records
/// the nodes have dropped has none). The nodes are asked only once a
/// table was held: `skiff.queries` is read often, fragments are rare.
pub(crate) async fn offload_by_query(inner: &Inner) -> HashMap<u64, String> {
    if !inner.memory_tables.ever_held() {
        return HashMap::new();
    }
    #[derive(Default)]
    struct Tally {
        offloaded: usize,
        pushed_back: usize,
        predicted_here: u64,
        predicted_back: u64,
        predicted: usize,
        measured: u64,
    }
    let mut tallies: HashMap<u64, Tally> = HashMap::new();
    for (_, stats) in node_stats(inner).await {
        for f in stats.fragments.iter().filter(|f| f.query_id > 0) {
            let tally = tallies.entry(f.query_id).or_default();
            if f.offloaded {
                tally.offloaded += 1;
            } else {
                tally.pushed_back += 1;
            }
            if let Some(p) = &f.predicted {
                tally.predicted += 1;
                tally.predicted_here += p.offload_nanos();
                tally.predicted_back += p.push_back_nanos();
            }
            tally.measured += f.measured.map_or(0, |m| m.offload_nanos());
        }
    }
    let ms = |nanos: u64| nanos as f64 / 1e6;
    tallies
        .into_iter()
        .map(|(query, t)| {
            let mut text = format!(
                "fragments: {} offloaded, {} pushed back",
                t.offloaded, t.pushed_back
            );
            if t.predicted > 0 {
                text.push_str(&format!(
                    "; predicted {:.1} ms offloaded, {:.1} ms pushed back",
                    ms(t.predicted_here),
                    ms(t.predicted_back)
                ));
            }
            if t.offloaded > 0 {
                text.push_str(&format!("; measured {:.1} ms offloaded", ms(t.measured)));
            }
            (query, text)
        })
        .collect()
}

/// `skiff.memory_tables`: a row per column of each table each live memory
/// node holds. A node that does not answer in time is left out.
pub(crate) async fn memory_tables_table(inner: &Inner) -> Result<RecordBatch> {
    let schema = schema();
    let mut node = Int64Builder::new();
    let mut table = StringBuilder::new();
    let mut column = StringBuilder::new();
    let mut numbers: [Int64Builder; 8] = Default::default();
    for (id, stats) in node_stats(inner).await {
        for c in &stats.columns {
            node.append_value(id as i64);
            table.append_value(&c.table);
            column.append_value(&c.column);
            let values = [
                c.chunks,
                c.bytes,
                c.rows,
                c.served_chunks,
                c.served_bytes,
                c.sketch_bytes,
                stats.bytes,
                stats.capacity,
            ];
            for (builder, value) in numbers.iter_mut().zip(values) {
                builder.append_value(i64::try_from(value).unwrap_or(i64::MAX));
            }
        }
    }
    let mut columns: Vec<arrow::array::ArrayRef> = vec![
        Arc::new(node.finish()),
        Arc::new(table.finish()),
        Arc::new(column.finish()),
    ];
    columns.extend(
        numbers
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as arrow::array::ArrayRef),
    );
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// `skiff.memory_fragments`: the fragments each live memory node was
/// offered lately (`FRAGMENT_HISTORY` of them), with the query, the mode,
/// its decision, its estimate of the rows kept, what its cost models
/// predicted of both paths and what it measured.
pub(crate) async fn memory_fragments_table(inner: &Inner) -> Result<RecordBatch> {
    use arrow::array::{BooleanBuilder, Float64Builder};
    let mut node = Int64Builder::new();
    let mut seq = Int64Builder::new();
    let mut query = Int64Builder::new();
    let mut mode = StringBuilder::new();
    let mut offloaded = BooleanBuilder::new();
    let mut reason = StringBuilder::new();
    let mut input_rows = Int64Builder::new();
    let mut estimated = Float64Builder::new();
    let mut rows = Int64Builder::new();
    let mut millis = Float64Builder::new();
    let mut estimation = Float64Builder::new();
    // Predicted (both paths) and measured (offloaded) parts, in ms.
    let mut parts: Vec<Float64Builder> = (0..7).map(|_| Float64Builder::new()).collect();
    let mut bytes: Vec<Int64Builder> = (0..2).map(|_| Int64Builder::new()).collect();
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let ms = |nanos: u64| nanos as f64 / 1e6;
    for (id, stats) in node_stats(inner).await {
        for f in &stats.fragments {
            node.append_value(id as i64);
            seq.append_value(count(f.seq));
            query.append_option(Some(count(f.query_id)).filter(|&q| q > 0));
            mode.append_value(&f.mode);
            offloaded.append_value(f.offloaded);
            reason.append_value(&f.reason);
            input_rows.append_value(count(f.input_rows));
            estimated.append_value(f.estimated_rows);
            rows.append_value(count(f.rows));
            millis.append_value(ms(f.execution_nanos));
            estimation.append_value(ms(f.estimation_nanos));
            let p = f.predicted.as_ref();
            let m = f.measured.as_ref();
            let values = [
                p.map(|p| ms(p.offload_nanos())),
                p.map(|p| ms(p.push_back_nanos())),
                p.map(|p| ms(p.execution_nanos)),
                p.map(|p| ms(p.push_back_network_nanos)),
                m.map(|m| ms(m.execution_nanos)),
                m.map(|m| ms(m.serialization_nanos)),
                m.map(|m| ms(m.network_nanos)),
            ];
            for (builder, value) in parts.iter_mut().zip(values) {
                builder.append_option(value);
            }
            bytes[0].append_option(m.map(|m| count(m.output_bytes)));
            bytes[1].append_option(p.map(|p| count(p.input_bytes)));
        }
    }
    let float = |name: &str| Field::new(name, DataType::Float64, true);
    let schema = Arc::new(Schema::new(vec![
        Field::new("node", DataType::Int64, false),
        Field::new("seq", DataType::Int64, false),
        Field::new("query_id", DataType::Int64, true),
        Field::new("mode", DataType::Utf8, false),
        Field::new("offloaded", DataType::Boolean, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("input_rows", DataType::Int64, false),
        Field::new("estimated_rows", DataType::Float64, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("execution_ms", DataType::Float64, false),
        Field::new("estimation_ms", DataType::Float64, false),
        float("predicted_offload_ms"),
        float("predicted_push_back_ms"),
        float("predicted_execution_ms"),
        float("predicted_push_back_network_ms"),
        float("measured_execution_ms"),
        float("measured_serialization_ms"),
        float("measured_network_ms"),
        Field::new("sent_bytes", DataType::Int64, true),
        Field::new("raw_bytes", DataType::Int64, true),
    ]));
    let mut columns: Vec<arrow::array::ArrayRef> = vec![
        Arc::new(node.finish()),
        Arc::new(seq.finish()),
        Arc::new(query.finish()),
        Arc::new(mode.finish()),
        Arc::new(offloaded.finish()),
        Arc::new(reason.finish()),
        Arc::new(input_rows.finish()),
        Arc::new(estimated.finish()),
        Arc::new(rows.finish()),
        Arc::new(millis.finish()),
        Arc::new(estimation.finish()),
    ];
    columns.extend(
        parts
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as arrow::array::ArrayRef),
    );
    columns.extend(
        bytes
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as arrow::array::ArrayRef),
    );
    Ok(RecordBatch::try_new(schema, columns)?)
}

fn schema() -> SchemaRef {
    let mut fields = vec![
        Field::new("node", DataType::Int64, false),
        Field::new("table", DataType::Utf8, false),
        Field::new("column", DataType::Utf8, false),
    ];
    for name in [
        "chunks",
        "bytes",
        "rows",
        "served_chunks",
        "served_bytes",
        "sketch_bytes",
        "node_bytes",
        "node_capacity",
    ] {
        fields.push(Field::new(name, DataType::Int64, false));
    }
    Arc::new(Schema::new(fields))
}

/// `skiff.load_to_memory` / `skiff.unload_from_memory`: the bytes loaded
/// or freed.
#[derive(Debug)]
pub(crate) struct MemoryFunction {
    load: bool,
    signature: Signature,
    coordinator: WeakInner,
}

#[derive(Debug)]
struct WeakInner(Weak<Inner>);

impl PartialEq for MemoryFunction {
    fn eq(&self, other: &Self) -> bool {
        self.load == other.load
    }
}

impl Eq for MemoryFunction {}

impl std::hash::Hash for MemoryFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.load.hash(state);
    }
}

impl MemoryFunction {
    pub(crate) fn udfs(coordinator: &Weak<Inner>) -> [ScalarUDF; 2] {
        [true, false].map(|load| {
            ScalarUDF::from(Self {
                load,
                signature: Signature::variadic_any(Volatility::Volatile),
                coordinator: WeakInner(coordinator.clone()),
            })
        })
    }

    fn usage(&self) -> &'static str {
        match self.load {
            true => "skiff.load_to_memory('table' [, 'column', ...])",
            false => "skiff.unload_from_memory('table')",
        }
    }
}

impl ScalarUDFImpl for MemoryFunction {
    fn name(&self) -> &str {
        match self.load {
            true => LOAD,
            false => UNLOAD,
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
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
                    self.name()
                ),
            )
            .into());
        }
        let usage = || ServerError::new(SqlState::InvalidParameterValue, self.usage());
        if args.args.is_empty() || (!self.load && args.args.len() > 1) {
            return Err(usage().into());
        }
        let mut texts = Vec::with_capacity(args.args.len());
        for arg in &args.args {
            let array = cast(&arg.to_array(args.number_rows.max(1))?, &DataType::Utf8)?;
            let Some(strings) = array.as_any().downcast_ref::<StringArray>() else {
                return Err(usage().into());
            };
            // One call per statement: the first row's arguments.
            match strings.iter().next().flatten() {
                Some(text) => texts.push(text.to_string()),
                None => return Err(usage().into()),
            }
        }
        // A scalar function is not async: the loads run on the server's
        // runtime while this thread waits.
        let handle = tokio::runtime::Handle::current();
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
            return exec_err!("{} needs the server's multi-threaded runtime", self.name());
        }
        let table = texts.remove(0);
        let bytes = tokio::task::block_in_place(|| {
            handle.block_on(async {
                match self.load {
                    true => load(&inner, &table, texts).await,
                    false => Ok(unload(&inner, &table).await),
                }
            })
        })?;
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(vec![
            bytes;
            args.number_rows.max(1)
        ]))))
    }
}
