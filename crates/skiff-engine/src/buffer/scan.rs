//! Parquet scans that read through the buffer pool.
//!
//! [`BufferedSource`] wraps DataFusion's `ParquetSource` and reads each
//! file row group by row group: the row groups the file's range and the
//! scan's predicate (row-group statistics, dynamic filters as they stand
//! when the file opens) leave, every projected column of each from the
//! pool, else from a memory node that holds it ([`super::RemoteTier`]),
//! else decoded once from the file; and admitted. What a scan emits
//! does not depend on what the pool holds: always every row of every row
//! group left (a `FilterExec` above drops the rest), in file order, so a
//! morsel gate's positions (`crate::morsel`) name the same rows on every
//! node that reads through a pool. Page-index and bloom-filter pruning are
//! not applied on this path: they save I/O and decoding of a cold read,
//! and a hit has neither. The one exception is a scan that reads a memory
//! node around the pool with `Tiers::prune_chunks` (never with cut points):
//! it sends its predicate, and the node leaves out the rows its chunks'
//! min/max rule out; what the node did not send of other columns is read
//! from storage and cut to the same rows.
//!
//! A file this path cannot read exactly as DataFusion would (its schema
//! differs from the table's beyond the string/binary view coercions
//! DataFusion itself applies, or the scan has an access plan) is read by
//! the wrapped `ParquetSource`, as if there were no pool.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::runtime::SpawnedTask;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, internal_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::metadata::DFParquetMetadata;
use datafusion::datasource::physical_plan::parquet::{
    DefaultParquetFileReaderFactory, ParquetAccessPlan, ParquetFileMetrics,
    ParquetFileReaderFactory, RowGroupAccessPlanFilter, apply_file_schema_type_coercions,
};
use datafusion::datasource::physical_plan::{
    FileOpener, FileScanConfig, FileSource, ParquetSource,
};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::execution::cache::cache_manager::FileMetadataCache;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::projection::ProjectionExprs;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr_common::physical_expr::snapshot_physical_expr;
use datafusion::physical_optimizer::pruning::build_pruning_predicate;
use datafusion::physical_plan::DisplayFormatType;
use datafusion::physical_plan::filter_pushdown::FilterPushdownPropagation;
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, Time};
use datafusion_datasource::morsel::{Morsel, MorselPlan, MorselPlanner, Morselizer};
use datafusion_proto::physical_plan::DefaultPhysicalExtensionCodec;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::ObjectStore;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use prost::Message;

use super::pool::{BlockKey, BufferPool, FileVersion};
use super::remote::{ChunkFetch, ChunkSource, Prune, Pruned, every_row};
use super::{RemoteTier, Tiers};

/// A `ParquetSource` whose files are read through a [`BufferPool`].
#[derive(Clone)]
pub struct BufferedSource {
    inner: Arc<ParquetSource>,
    /// `None`: the session reads around the pool, through memory nodes.
    pool: Option<Arc<BufferPool>>,
    remote: Option<Arc<dyn ChunkSource>>,
    /// Row groups fetched ahead from the memory nodes.
    prefetch: usize,
    metadata: Arc<FileMetadataCache>,
    /// The table's location, as `skiff.cache` names it.
    table: Arc<str>,
    batch_size: Option<usize>,
    /// The pipeline group whose cache the scan reads through.
    group: Option<Arc<str>>,
    /// Send the predicate to the memory nodes (`Tiers::prune_chunks`,
    /// reading around the pool, outside a group).
    prune_chunks: bool,
}

impl BufferedSource {
    /// `inner` read through `tiers`, when this path can read it: a plain
    /// projection of columns, no row-level filter in the scan, no order to
    /// keep, no virtual columns, no INT96 coercion; and a pool to read, or
    /// memory nodes holding the table.
    pub fn wrap(
        inner: &ParquetSource,
        config: &FileScanConfig,
        tiers: &Tiers,
        metadata: Arc<FileMetadataCache>,
    ) -> Option<Self> {
        let options = &inner.table_parquet_options().global;
        let plain = inner
            .projection()
            .is_none_or(|p| p.iter().all(|e| e.expr.downcast_ref::<Column>().is_some()));
        let usable = plain
            && !options.pushdown_filters
            && options.coerce_int96.is_none()
            && config.output_ordering.is_empty()
            && !config.preserve_order
            && inner.table_schema().virtual_columns().is_empty();
        if !usable {
            return None;
        }
        let table = table_location(config);
        let remote = tiers
            .remote
            .as_ref()
            .map(|RemoteTier(source)| Arc::clone(source))
            .filter(|source| source.holds(&table));
        if tiers.pool.is_none() && remote.is_none() {
            return None;
        }
        Some(Self {
            inner: Arc::new(inner.clone()),
            pool: tiers.pool.clone(),
            remote,
            prefetch: tiers.prefetch,
            metadata,
            table,
            batch_size: None,
            group: tiers.group.as_ref().map(|g| Arc::clone(&g.label)),
            prune_chunks: tiers.prune_chunks && tiers.pool.is_none() && tiers.group.is_none(),
        })
    }
}

impl BufferedSource {
    /// The pipeline group whose cache the scan reads through.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }
}

/// The directory a scan's files share, less `key=value` partition
/// directories: the table's location (as the pool, `skiff.cache` and the
/// memory nodes name it).
pub fn table_location(config: &FileScanConfig) -> Arc<str> {
    let mut files = config.file_groups.iter().flat_map(|g| g.iter());
    let Some(first) = files.next() else {
        return Arc::from("");
    };
    let mut parts: Vec<&str> = first.path().as_ref().split('/').collect();
    parts.pop();
    for file in files {
        let shared = file
            .path()
            .as_ref()
            .split('/')
            .zip(&parts)
            .take_while(|(a, b)| a == *b)
            .count();
        parts.truncate(shared);
    }
    while parts.last().is_some_and(|p| p.contains('=')) {
        parts.pop();
    }
    Arc::from(format!(
        "{}{}",
        config.object_store_url.as_str(),
        parts.join("/")
    ))
}

impl fmt::Debug for BufferedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferedSource")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl FileSource for BufferedSource {
    fn create_file_opener(
        &self,
        _object_store: Arc<dyn ObjectStore>,
        _base_config: &FileScanConfig,
        _partition: usize,
    ) -> Result<Arc<dyn FileOpener>> {
        internal_err!("BufferedSource reads through the Morsel API")
    }

    fn create_morselizer(
        &self,
        object_store: Arc<dyn ObjectStore>,
        base_config: &FileScanConfig,
        partition: usize,
    ) -> Result<Box<dyn Morselizer>> {
        let fallback: Arc<dyn Morselizer> = Arc::from(self.inner.create_morselizer(
            Arc::clone(&object_store),
            base_config,
            partition,
        )?);
        let table_schema = Arc::clone(self.inner.table_schema().table_schema());
        let projection: Vec<usize> = match self.inner.projection() {
            Some(p) => p
                .iter()
                .map(|e| match e.expr.downcast_ref::<Column>() {
                    Some(c) => Ok(c.index()),
                    None => internal_err!("BufferedSource over a projection of expressions"),
                })
                .collect::<Result<_>>()?,
            None => (0..table_schema.fields().len()).collect(),
        };
        let output = match self.inner.projection() {
            Some(p) => Arc::new(p.project_schema(&table_schema)?),
            None => Arc::clone(&table_schema),
        };
        let readers = self
            .inner
            .parquet_file_reader_factory()
            .cloned()
            .unwrap_or_else(|| {
                Arc::new(DefaultParquetFileReaderFactory::new(Arc::clone(
                    &object_store,
                )))
            });
        let metrics = self.inner.metrics().clone();
        let Some(batch_size) = self.batch_size else {
            return internal_err!("BufferedSource opened before its batch size was set");
        };
        Ok(Box::new(BufferedMorselizer(Arc::new(ScanPlan {
            pool: self.pool.clone(),
            remote: self.remote.clone(),
            remote_failed: std::sync::atomic::AtomicBool::new(false),
            table: Arc::clone(&self.table),
            fallback,
            store: object_store,
            readers,
            metadata: Arc::clone(&self.metadata),
            file_columns: self.inner.table_schema().file_schema().fields().len(),
            table_schema,
            projection,
            output,
            predicate: self.inner.filter(),
            prune: self.inner.table_parquet_options().global.pruning,
            batch_size,
            partition,
            hits: MetricBuilder::new(&metrics).counter("block_hits", partition),
            misses: MetricBuilder::new(&metrics).counter("block_misses", partition),
            remote_columns: MetricBuilder::new(&metrics).counter("memory_node_columns", partition),
            remote_bytes: MetricBuilder::new(&metrics).counter("memory_node_bytes", partition),
            remote_prefetched: MetricBuilder::new(&metrics)
                .counter("memory_node_prefetched", partition),
            remote_wait: MetricBuilder::new(&metrics).subset_time("memory_node_wait", partition),
            remote_pruned: MetricBuilder::new(&metrics)
                .counter("memory_node_rows_pruned", partition),
            prefetch: self.prefetch,
            prune_chunks: self.prune_chunks,
            metrics,
        }))))
    }

    fn table_schema(&self) -> &TableSchema {
        self.inner.table_schema()
    }

    fn with_batch_size(&self, batch_size: usize) -> Arc<dyn FileSource> {
        let inner = self.inner.with_batch_size(batch_size);
        match inner.downcast_ref::<ParquetSource>() {
            Some(parquet) => Arc::new(Self {
                inner: Arc::new(parquet.clone()),
                batch_size: Some(batch_size),
                ..self.clone()
            }),
            None => inner,
        }
    }

    fn filter(&self) -> Option<Arc<dyn PhysicalExpr>> {
        self.inner.filter()
    }

    fn projection(&self) -> Option<&ProjectionExprs> {
        self.inner.projection()
    }

    fn metrics(&self) -> &ExecutionPlanMetricsSet {
        self.inner.metrics()
    }

    fn file_type(&self) -> &str {
        self.inner.file_type()
    }

    /// Shown as the scan it wraps: plans read the same wherever they run
    /// (`EXPLAIN ANALYZE` shows the pool's `block_hits` and `block_misses`);
    /// a grouped scan names its pipeline group.
    fn fmt_extra(&self, t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.fmt_extra(t, f)?;
        match &self.group {
            Some(group) => write!(f, ", pipeline_group={group}"),
            None => Ok(()),
        }
    }

    fn supports_repartitioning(&self) -> bool {
        false
    }

    fn try_pushdown_filters(
        &self,
        filters: Vec<Arc<dyn PhysicalExpr>>,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn FileSource>>> {
        // Wrapped after planning: nothing is pushed into it any more.
        Ok(FilterPushdownPropagation::with_parent_pushdown_result(
            vec![datafusion::physical_plan::filter_pushdown::PushedDown::No; filters.len()],
        ))
    }

    fn reorder_files(&self, files: Vec<PartitionedFile>) -> Vec<PartitionedFile> {
        self.inner.reorder_files(files)
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.inner.apply_expressions(f)
    }

    /// On the wire a buffered scan is the plain Parquet scan it wraps: the
    /// process that runs it reads through its own pool.
    fn try_to_proto(
        &self,
        base: &FileScanConfig,
        ctx: &datafusion::physical_plan::proto::ExecutionPlanEncodeCtx<'_>,
    ) -> Result<Option<datafusion_proto::protobuf::PhysicalPlanNode>> {
        self.inner.try_to_proto(base, ctx)
    }
}

/// What every file of one scan partition shares.
struct ScanPlan {
    pool: Option<Arc<BufferPool>>,
    remote: Option<Arc<dyn ChunkSource>>,
    /// A fetch from the memory nodes failed (logged once per scan).
    remote_failed: std::sync::atomic::AtomicBool,
    table: Arc<str>,
    /// The wrapped source's own reader, for files this path cannot read.
    fallback: Arc<dyn Morselizer>,
    store: Arc<dyn ObjectStore>,
    readers: Arc<dyn ParquetFileReaderFactory>,
    metadata: Arc<FileMetadataCache>,
    /// File columns, then partition columns.
    table_schema: SchemaRef,
    file_columns: usize,
    /// Indices into `table_schema`, in output order.
    projection: Vec<usize>,
    output: SchemaRef,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    prune: bool,
    batch_size: usize,
    partition: usize,
    metrics: ExecutionPlanMetricsSet,
    hits: Count,
    misses: Count,
    /// Columns of row groups, and their bytes, a memory node sent.
    remote_columns: Count,
    remote_bytes: Count,
    /// Row groups whose fetch had started ahead of their turn, and the
    /// time spent waiting for fetches.
    remote_prefetched: Count,
    remote_wait: Time,
    /// Rows of row groups read that the memory nodes' min/max ruled out.
    remote_pruned: Count,
    /// Row groups fetched ahead.
    prefetch: usize,
    /// Send the predicate along to the memory nodes.
    prune_chunks: bool,
}

#[derive(Debug)]
struct BufferedMorselizer(Arc<ScanPlan>);

impl fmt::Debug for ScanPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScanPlan")
            .field("table", &self.table)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

impl Morselizer for BufferedMorselizer {
    fn plan_file(&self, file: PartitionedFile) -> Result<Box<dyn MorselPlanner>> {
        if file.extension::<ParquetAccessPlan>().is_some() {
            return self.0.fallback.plan_file(file);
        }
        Ok(Box::new(FilePlanner {
            scan: Arc::clone(&self.0),
            file,
            open: None,
        }))
    }
}

/// One file, row group by row group.
#[derive(Debug)]
struct FilePlanner {
    scan: Arc<ScanPlan>,
    file: PartitionedFile,
    open: Option<OpenFile>,
}

#[derive(Debug)]
struct OpenFile {
    version: Arc<FileVersion>,
    /// The file's metadata, and its schema as this scan reads it (with
    /// DataFusion's coercions and the table's string and binary types).
    reader: ArrowReaderMetadata,
    /// For each projected column: its top-level index in the file, or
    /// `None` for a partition column.
    roots: Vec<Option<usize>>,
    row_groups: VecDeque<usize>,
    /// The projected file columns of the first of `row_groups` found so
    /// far (`None`: to decode), once looked up.
    ready: Option<Vec<Option<ArrayRef>>>,
    /// The rows of the first of `row_groups` that `ready` holds, when a
    /// memory node left some out (`None`: every row).
    kept: Option<Vec<Range<usize>>>,
    /// Fetches from a memory node under way for row groups still to come.
    prefetched: HashMap<usize, Prefetch>,
    /// The predicate sent to the memory nodes, when the scan prunes.
    prune: Option<Arc<Prune>>,
}

/// A fetch of `columns` of a row group ahead of its turn.
struct Prefetch {
    columns: Vec<usize>,
    task: SpawnedTask<Pruned>,
}

impl fmt::Debug for Prefetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prefetch")
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

impl MorselPlanner for FilePlanner {
    fn plan(mut self: Box<Self>) -> Result<Option<MorselPlan>> {
        let Some(open) = self.open.as_mut() else {
            let scan = Arc::clone(&self.scan);
            let file = self.file;
            return Ok(Some(
                MorselPlan::new().with_pending_planner(open_file(scan, file)),
            ));
        };
        let Some(&row_group) = open.row_groups.front() else {
            return Ok(None);
        };
        let found = match open.ready.take() {
            Some(found) => found,
            None => self.scan.lookup(open, row_group),
        };
        if found.iter().any(Option::is_none) {
            open.ready = Some(found);
            return Ok(Some(
                MorselPlan::new().with_pending_planner(decode_row_group(self)),
            ));
        }
        let columns = found.into_iter().flatten().collect();
        open.row_groups.pop_front();
        let rows = match open.kept.take() {
            Some(kept) => kept.iter().map(|r| r.len()).sum(),
            None => row_count(open, row_group),
        };
        let morsel = self.scan.morsel(&self.file, open, rows, columns)?;
        let rest: Vec<Box<dyn MorselPlanner>> = if open.row_groups.is_empty() {
            Vec::new()
        } else {
            vec![self]
        };
        Ok(Some(
            MorselPlan::new()
                .with_morsels(vec![Box::new(morsel)])
                .with_planners(rest),
        ))
    }
}

impl ScanPlan {
    fn key(&self, open: &OpenFile, row_group: usize, root: usize) -> BlockKey {
        BlockKey {
            file: Arc::clone(&open.version),
            row_group,
            column: root,
            data_type: open.reader.schema().field(root).data_type().clone(),
        }
    }

    /// Each projected file column of `row_group` the pool holds (counted
    /// as a hit), `None` for each it does not (a miss; each, without a pool).
    fn lookup(&self, open: &OpenFile, row_group: usize) -> Vec<Option<ArrayRef>> {
        let Some(pool) = &self.pool else {
            return vec![None; open.roots.iter().flatten().count()];
        };
        open.roots
            .iter()
            .flatten()
            .map(|root| {
                let found = pool.get(&self.table, &self.key(open, row_group, *root));
                match found {
                    Some(_) => self.hits.add(1),
                    None => self.misses.add(1),
                }
                found
            })
            .collect()
    }

    /// The row group's `rows` rows (all, or those a memory node left) in
    /// the scan's schema, a batch at a time.
    fn morsel(
        &self,
        file: &PartitionedFile,
        open: &OpenFile,
        rows: usize,
        columns: Vec<ArrayRef>,
    ) -> Result<Batches> {
        let mut file_columns = columns.into_iter();
        let mut arrays = Vec::with_capacity(self.projection.len());
        for (&index, root) in self.projection.iter().zip(&open.roots) {
            match root {
                Some(_) => match file_columns.next() {
                    Some(array) => arrays.push(array),
                    None => return internal_err!("buffered scan: a column short"),
                },
                None => {
                    let Some(value) = file.partition_values.get(index - self.file_columns) else {
                        return internal_err!("buffered scan: no value for partition column");
                    };
                    arrays.push(value.to_array_of_size(rows)?);
                }
            }
        }
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(Arc::clone(&self.output), arrays, &options)?;
        let size = self.batch_size.max(1);
        let batches = (0..rows)
            .step_by(size)
            .map(|at| batch.slice(at, size.min(rows - at)))
            .collect();
        Ok(Batches(batches))
    }
}

/// Load the file's metadata and choose its row groups; a file this path
/// cannot read goes to the wrapped source.
async fn open_file(scan: Arc<ScanPlan>, file: PartitionedFile) -> Result<Box<dyn MorselPlanner>> {
    let metadata = DFParquetMetadata::new(scan.store.as_ref(), &file.object_meta)
        .with_metadata_size_hint(file.metadata_size_hint)
        .with_file_metadata_cache(Some(Arc::clone(&scan.metadata)))
        .fetch_metadata()
        .await?;
    let found = ArrowReaderMetadata::try_new(Arc::clone(&metadata), ArrowReaderOptions::new())?;
    let file_schema = found.schema();
    let table_files = Schema::new(scan.table_schema.fields()[..scan.file_columns].to_vec());
    let coerced = match apply_file_schema_type_coercions(&table_files, file_schema) {
        Some(coerced) => coerced,
        None => file_schema.as_ref().clone(),
    };
    let read_schema = Arc::new(read_as_table(&coerced, &table_files));
    let mut roots = Vec::with_capacity(scan.projection.len());
    for &index in &scan.projection {
        if index >= scan.file_columns {
            roots.push(None);
            continue;
        }
        let field = scan.table_schema.field(index);
        match read_schema.index_of(field.name()) {
            Ok(root) if read_schema.field(root).data_type() == field.data_type() => {
                roots.push(Some(root));
            }
            // A column missing from this file or of another type: DataFusion
            // fills or casts it.
            _ => return scan.fallback.plan_file(file),
        }
    }
    let groups = metadata.row_groups();
    let mut access = RowGroupAccessPlanFilter::new(ParquetAccessPlan::new_all(groups.len()));
    if let Some(range) = &file.range {
        access.prune_by_range(groups, range);
    }
    if let Some(predicate) = scan.predicate.as_ref().filter(|_| scan.prune) {
        // Dynamic filters as they stand now, like DataFusion's own opener.
        let errors = Count::new();
        if let Some(pruning) =
            build_pruning_predicate(Arc::clone(predicate), &scan.table_schema, &errors)
        {
            let file_metrics =
                ParquetFileMetrics::new(scan.partition, file.path().as_ref(), &scan.metrics);
            access.prune_by_statistics(
                &read_schema,
                metadata.file_metadata().schema_descr(),
                groups,
                &pruning,
                &file_metrics,
            );
        }
    }
    let row_groups = access.build().row_group_indexes().into_iter().collect();
    // Built once per file (the Parquet schema's conversion), and checked
    // here: a schema the reader refuses sends the file to DataFusion.
    let options = ArrowReaderOptions::new().with_schema(Arc::clone(&read_schema));
    let Ok(reader) = ArrowReaderMetadata::try_new(metadata, options) else {
        return scan.fallback.plan_file(file);
    };
    let version = Arc::new(FileVersion::of(&file.object_meta));
    let prune = match (&scan.predicate, &scan.remote) {
        (Some(predicate), Some(_)) if scan.prune_chunks => {
            chunk_prune(predicate, &scan.table_schema, &read_schema)
        }
        _ => None,
    };
    Ok(Box::new(FilePlanner {
        scan,
        file,
        open: Some(OpenFile {
            version,
            reader,
            roots,
            row_groups,
            ready: None,
            kept: None,
            prefetched: HashMap::new(),
            prune,
        }),
    }))
}

/// The predicate as the memory nodes get it: dynamic filters as they stand
/// now, encoded, and the file columns it reads; `None` when it reads none
/// (a dynamic filter not yet set, a predicate on partition columns) or
/// cannot be encoded (the scan then asks for whole row groups).
fn chunk_prune(
    predicate: &Arc<dyn PhysicalExpr>,
    table_schema: &SchemaRef,
    read_schema: &Schema,
) -> Option<Arc<Prune>> {
    let predicate = snapshot_physical_expr(Arc::clone(predicate)).ok()?;
    let mut columns: Vec<(Arc<str>, usize)> = collect_columns(&predicate)
        .iter()
        .filter_map(|c| Some((Arc::from(c.name()), read_schema.index_of(c.name()).ok()?)))
        .collect();
    columns.sort();
    columns.dedup();
    if columns.is_empty() {
        return None;
    }
    let schema = datafusion_proto::protobuf::Schema::try_from(table_schema.as_ref()).ok()?;
    let predicate = serialize_physical_expr(&predicate, &DefaultPhysicalExtensionCodec {})
        .map_err(|e| tracing::debug!(error = %e, "predicate not sent to the memory nodes"))
        .ok()?;
    Some(Arc::new(Prune {
        predicate: predicate.encode_to_vec(),
        schema: schema.encode_to_vec(),
        columns,
    }))
}

/// `file` with each string or binary column read as the table's type
/// where the table's is another of the same family (deltalake writes
/// `Utf8View` into tables whose schema says `Utf8`): the Parquet reader
/// decodes the same bytes into either, where DataFusion would decode one
/// and cast.
fn read_as_table(file: &Schema, table: &Schema) -> Schema {
    let family = |t: &DataType| match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(0),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Some(1),
        _ => None,
    };
    let fields: Vec<Field> = file
        .fields()
        .iter()
        .map(|field| {
            let wanted = table.field_with_name(field.name()).ok();
            match wanted {
                Some(w)
                    if w.data_type() != field.data_type()
                        && family(w.data_type()).is_some()
                        && family(w.data_type()) == family(field.data_type()) =>
                {
                    field.as_ref().clone().with_data_type(w.data_type().clone())
                }
                _ => field.as_ref().clone(),
            }
        })
        .collect();
    Schema::new_with_metadata(fields, file.metadata().clone())
}

/// Decode the projected columns of the planner's next row group that the
/// pool did not hold (whole column chunks, so that they can be kept) and
/// admit them.
async fn decode_row_group(mut planner: Box<FilePlanner>) -> Result<Box<dyn MorselPlanner>> {
    let scan = Arc::clone(&planner.scan);
    let Some(open) = planner.open.as_mut() else {
        return internal_err!("buffered scan: decoding a file not opened");
    };
    let Some(&row_group) = open.row_groups.front() else {
        return internal_err!("buffered scan: decoding past the last row group");
    };
    let Some(mut found) = open.ready.take() else {
        return internal_err!("buffered scan: decoding a row group not looked up");
    };
    let projected: Vec<usize> = open.roots.iter().flatten().copied().collect();
    let mut wanted: Vec<usize> = projected
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(root, _)| *root)
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    let all = row_count(open, row_group);
    let mut decoded: Vec<Option<ArrayRef>> = vec![None; wanted.len()];
    let mut kept = None;
    if let Some(remote) = &scan.remote {
        kept = scan
            .fetch_remote(remote.as_ref(), open, row_group, &wanted, &mut decoded)
            .await;
    }
    let rows = kept
        .as_ref()
        .map_or(all, |k: &Vec<Range<usize>>| k.iter().map(|r| r.len()).sum());
    // Only a scan around the pool prunes: the pool keeps whole columns, and
    // none of this row group's came from it.
    assert!(
        kept.is_none() || scan.pool.is_none(),
        "a pruned scan reads around the pool"
    );
    let from_storage: Vec<usize> = wanted
        .iter()
        .zip(&decoded)
        .filter(|(_, d)| d.is_none())
        .map(|(root, _)| *root)
        .collect();
    if !from_storage.is_empty() {
        let read = if rows == 0 {
            // Every row ruled out: nothing to read.
            let schema = open.reader.schema();
            from_storage
                .iter()
                .map(|root| arrow::array::new_empty_array(schema.field(*root).data_type()))
                .collect()
        } else {
            read_columns(&scan, &planner.file, open, row_group, &from_storage).await?
        };
        for (root, array) in from_storage.iter().zip(read) {
            if let Ok(at) = wanted.binary_search(root) {
                decoded[at] = Some(match &kept {
                    Some(kept) if array.len() == all => take_ranges(&array, kept)?,
                    _ => array,
                });
            }
        }
    }
    let decoded: Vec<ArrayRef> = decoded.into_iter().flatten().collect();
    assert_eq!(decoded.len(), wanted.len(), "every missing column read");
    for (root, array) in wanted.iter().zip(&decoded) {
        if array.len() != rows {
            return internal_err!("buffered scan: row group {row_group} decoded short");
        }
        if let Some(pool) = &scan.pool {
            let key = scan.key(open, row_group, *root);
            pool.admit(&scan.table, key, Arc::clone(array));
        }
    }
    for (root, slot) in projected.iter().zip(found.iter_mut()) {
        if slot.is_none()
            && let Ok(at) = wanted.binary_search(root)
        {
            *slot = Some(Arc::clone(&decoded[at]));
        }
    }
    assert!(
        found.iter().all(Option::is_some),
        "every missing column decoded"
    );
    open.ready = Some(found);
    open.kept = kept;
    Ok(planner)
}

/// The rows of `array` in `ranges` (sorted, disjoint), in order.
fn take_ranges(array: &ArrayRef, ranges: &[Range<usize>]) -> Result<ArrayRef> {
    match ranges {
        [] => Ok(array.slice(0, 0)),
        [one] => Ok(array.slice(one.start, one.len())),
        _ => {
            let slices: Vec<ArrayRef> = ranges
                .iter()
                .map(|r| array.slice(r.start, r.len()))
                .collect();
            let parts: Vec<&dyn arrow::array::Array> = slices.iter().map(|a| a.as_ref()).collect();
            Ok(arrow::compute::concat(&parts)?)
        }
    }
}

impl ScanPlan {
    /// Fill `decoded` (aligned with `wanted`) with the columns a memory
    /// node sends, in the scan's types; a failure leaves them to storage.
    /// The rows sent, when the node pruned some (`None`: all of them).
    async fn fetch_remote(
        &self,
        remote: &dyn ChunkSource,
        open: &mut OpenFile,
        row_group: usize,
        wanted: &[usize],
        decoded: &mut [Option<ArrayRef>],
    ) -> Option<Vec<Range<usize>>> {
        let ahead = open
            .prefetched
            .remove(&row_group)
            .filter(|p| wanted.iter().all(|c| p.columns.contains(c)));
        let fetching = match ahead {
            Some(Prefetch { columns, task }) => {
                self.remote_prefetched.add(1);
                Some((columns, task))
            }
            None => self
                .remote_fetch(remote, open, row_group, wanted.to_vec())
                .map(|task| (wanted.to_vec(), task)),
        };
        // The next row groups travel while this one is worked on.
        self.prefetch(remote, open, row_group);
        let (columns, task) = fetching?;
        let fail = |error: String| {
            let first = !self
                .remote_failed
                .swap(true, std::sync::atomic::Ordering::Relaxed);
            if first {
                tracing::warn!(
                    table = %self.table,
                    path = %open.version.path,
                    row_group,
                    %error,
                    "memory node read failed; reading storage"
                );
            }
            None
        };
        let waited = self.remote_wait.timer();
        let joined = task.join().await;
        waited.done();
        let (kept, fetched) = match joined {
            Ok(Ok((kept, fetched))) if fetched.len() == columns.len() => (kept, fetched),
            Ok(Ok((_, fetched))) => {
                return fail(format!(
                    "{} columns for {} asked",
                    fetched.len(),
                    columns.len()
                ));
            }
            Ok(Err(error)) => return fail(error),
            Err(error) => return fail(error.to_string()),
        };
        let all = row_count(open, row_group);
        let rows: usize = kept.iter().map(|r| r.len()).sum();
        let mut got = Vec::with_capacity(wanted.len());
        for (root, array) in columns.iter().zip(fetched) {
            let Some(array) = array else { continue };
            // A prefetch may bring more columns than are missing now.
            let Some(at) = wanted.iter().position(|w| w == root) else {
                continue;
            };
            let wanted_type = open.reader.schema().field(*root).data_type();
            let array = if array.data_type() == wanted_type {
                array
            } else {
                // The node holds the file's own type; this scan may read a
                // string column as the table's other string type.
                match arrow::compute::cast(&array, wanted_type) {
                    Ok(cast) => cast,
                    Err(e) => return fail(format!("column {root} as {wanted_type}: {e}")),
                }
            };
            if array.len() != rows {
                return fail(format!("column {root}: {} rows, not {rows}", array.len()));
            }
            got.push((at, array));
        }
        for (at, array) in got {
            self.remote_columns.add(1);
            self.remote_bytes.add(array.get_array_memory_size());
            decoded[at] = Some(array);
        }
        if rows == all {
            return None;
        }
        self.remote_pruned.add(all - rows);
        Some(kept)
    }

    /// `columns` of `row_group` asked of the memory node holding the file,
    /// with the scan's predicate when it prunes, running on its own task;
    /// `None` when no node holds it.
    fn remote_fetch(
        &self,
        remote: &dyn ChunkSource,
        open: &OpenFile,
        row_group: usize,
        columns: Vec<usize>,
    ) -> Option<SpawnedTask<Pruned>> {
        let schema = open.reader.schema();
        let names = columns
            .iter()
            .map(|&c| Arc::from(schema.field(c).name().as_str()))
            .collect();
        let rows = row_count(open, row_group);
        let fetch = ChunkFetch {
            table: Arc::clone(&self.table),
            file: Arc::clone(&open.version),
            row_group,
            columns,
            names,
            rows,
        };
        if let Some(prune) = &open.prune
            && let Some(pruned) = remote.fetch_pruned(fetch.clone(), Arc::clone(prune))
        {
            return Some(SpawnedTask::spawn(pruned));
        }
        let whole = remote.fetch(fetch)?;
        Some(SpawnedTask::spawn(async move {
            let columns = whole.await?;
            Ok((every_row(rows), columns))
        }))
    }

    /// Ask for the missing columns of the [`ScanPlan::prefetch`] row
    /// groups after `row_group` that are not asked for yet.
    fn prefetch(&self, remote: &dyn ChunkSource, open: &mut OpenFile, row_group: usize) {
        let next: Vec<usize> = open
            .row_groups
            .iter()
            .copied()
            .skip_while(|g| *g != row_group)
            .skip(1)
            .take(self.prefetch)
            .filter(|g| !open.prefetched.contains_key(g))
            .collect();
        for group in next {
            let missing: Vec<usize> = open
                .roots
                .iter()
                .flatten()
                .copied()
                .filter(|root| {
                    self.pool
                        .as_ref()
                        .is_none_or(|pool| !pool.holds(&self.key(open, group, *root)))
                })
                .collect();
            if missing.is_empty() {
                continue;
            }
            if let Some(task) = self.remote_fetch(remote, open, group, missing.clone()) {
                let prefetch = Prefetch {
                    columns: missing,
                    task,
                };
                open.prefetched.insert(group, prefetch);
            }
        }
    }
}

/// Decode `columns` (sorted top-level indices) of `row_group` from the
/// file, whole column chunks.
async fn read_columns(
    scan: &ScanPlan,
    file: &PartitionedFile,
    open: &OpenFile,
    row_group: usize,
    wanted: &[usize],
) -> Result<Vec<ArrayRef>> {
    let reader: Box<dyn AsyncFileReader> = scan.readers.create_reader(
        scan.partition,
        file.clone(),
        file.metadata_size_hint,
        &scan.metrics,
    )?;
    let mask = ProjectionMask::roots(open.reader.parquet_schema(), wanted.iter().copied());
    let rows = row_count(open, row_group);
    let mut stream =
        ParquetRecordBatchStreamBuilder::new_with_metadata(reader, open.reader.clone())
            .with_row_groups(vec![row_group])
            .with_projection(mask)
            .with_batch_size(rows.max(1))
            .build()?;
    let mut batches = Vec::new();
    while let Some(batch) = stream.next().await {
        batches.push(batch?);
    }
    if batches.iter().any(|b| b.num_columns() != wanted.len()) {
        return internal_err!("buffered scan: row group {row_group} decoded other columns");
    }
    let mut decoded: Vec<ArrayRef> = Vec::with_capacity(wanted.len());
    for (at, root) in wanted.iter().enumerate() {
        decoded.push(match batches.as_slice() {
            [] => arrow::array::new_empty_array(open.reader.schema().field(*root).data_type()),
            [one] => Arc::clone(one.column(at)),
            _ => {
                let parts: Vec<&dyn arrow::array::Array> =
                    batches.iter().map(|b| b.column(at).as_ref()).collect();
                arrow::compute::concat(&parts)?
            }
        });
    }
    Ok(decoded)
}

/// The rows of `row_group` of `open`'s file.
fn row_count(open: &OpenFile, row_group: usize) -> usize {
    let rows = open.reader.metadata().row_group(row_group).num_rows();
    usize::try_from(rows).unwrap_or(0)
}

/// A row group's batches, ready.
#[derive(Debug)]
struct Batches(Vec<RecordBatch>);

impl Morsel for Batches {
    fn into_stream(self: Box<Self>) -> BoxStream<'static, Result<RecordBatch>> {
        futures::stream::iter(self.0.into_iter().map(Ok)).boxed()
    }
}
