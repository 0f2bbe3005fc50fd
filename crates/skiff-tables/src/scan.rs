//! Reading a Delta snapshot as a plain Parquet scan.
//!
//! deltalake's own scan (`DeltaScanExec`) has no physical codec, so a plan
//! holding it cannot travel to a worker. The files of a snapshot are
//! ordinary Parquet files, though: this builds DataFusion's own Parquet
//! `DataSourceExec` over exactly the snapshot's active files, which
//! datafusion-proto ships like any other scan. Table features that change
//! how a file's rows are read (deletion vectors, column mapping) are
//! refused rather than misread.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use datafusion::catalog::Session;
use datafusion::common::stats::Precision;
use datafusion::common::{Result, ScalarValue, Statistics};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder};
use datafusion::datasource::table_schema::TableSchemaBuilder;
use datafusion::execution::SessionState;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning, PhysicalExpr};
use deltalake_core::DeltaTable;
use object_store::path::Path as ObjectPath;
use url::Url;

use crate::co_location::CoLocation;
use crate::error::TableError;
use crate::partition::{FilePartition, HashPartitioning, PARTITION_COLUMN};

/// How a snapshot's columns reach a scan: the files' columns, then the
/// partition columns (DataFusion appends those after the file columns).
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) file_schema: SchemaRef,
    pub(crate) partition_fields: Vec<FieldRef>,
    /// What the table reports: file columns, then partition columns (but
    /// the hidden hash partition, `partition::PARTITION_COLUMN`).
    pub(crate) table_schema: SchemaRef,
    /// `PARTITION BY HASH`, when the table has it.
    pub(crate) partitioning: Option<HashPartitioning>,
}

impl Layout {
    pub(crate) fn of(table: &DeltaTable) -> Result<Layout, TableError> {
        let state = table
            .snapshot()
            .map_err(|e| TableError::delta(&table_name(table), e))?;
        let schema = state.snapshot().arrow_schema();
        let partitions = state.metadata().partition_columns();
        let partitioning = match schema.field_with_name(PARTITION_COLUMN) {
            Ok(field) => {
                let found = HashPartitioning::from_metadata(&table_name(table), field.metadata())?;
                Some(found.ok_or_else(|| {
                    TableError::Io(format!(
                        "table \"{}\": column {PARTITION_COLUMN} does not say how it partitions",
                        table_name(table)
                    ))
                })?)
            }
            Err(_) => None,
        };
        let (parts, files): (Vec<FieldRef>, Vec<FieldRef>) = schema
            .fields()
            .iter()
            .filter(|f| f.name() != PARTITION_COLUMN)
            .cloned()
            .partition(|f| partitions.contains(f.name()));
        let file_schema = Arc::new(Schema::new_with_metadata(
            files.clone(),
            schema.metadata().clone(),
        ));
        let table_schema = Arc::new(Schema::new_with_metadata(
            files
                .into_iter()
                .chain(parts.iter().cloned())
                .collect::<Vec<_>>(),
            schema.metadata().clone(),
        ));
        Ok(Layout {
            file_schema,
            partition_fields: parts,
            table_schema,
            partitioning,
        })
    }
}

/// The name a table's errors carry: the last part of its location.
pub(crate) fn table_name(table: &DeltaTable) -> String {
    let url = table.table_url();
    ObjectPath::from_url_path(url.path())
        .ok()
        .and_then(|path| path.filename().map(str::to_string))
        .unwrap_or_else(|| url.to_string())
}

/// A Parquet scan over the active files of `table`'s loaded snapshot.
pub(crate) async fn plan(
    table: &DeltaTable,
    state: &dyn Session,
    projection: Option<&Vec<usize>>,
    limit: Option<usize>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let name = table_name(table);
    let snapshot = table.snapshot().map_err(|e| TableError::delta(&name, e))?;
    let mapping = snapshot
        .metadata()
        .configuration()
        .get("delta.columnMapping.mode");
    if mapping.is_some_and(|mode| mode != "none") {
        return Err(TableError::Unsupported(format!(
            "table \"{name}\" uses Delta column mapping, which Skiff does not read yet"
        ))
        .into());
    }
    let layout = Layout::of(table)?;
    let root = table.table_url();
    let store_url = store_url(root)?;
    // The URL's path is percent-encoded; object paths are not.
    let root_path = ObjectPath::from_url_path(root.path())
        .map_err(|e| TableError::Io(format!("table \"{name}\" at {root}: {e}")))?;
    if root.scheme() != "file" && state.runtime_env().object_store(&store_url).is_err() {
        // deltalake plans some writes (CTAS) in a session of its own,
        // whose registry knows only local files.
        state.runtime_env().register_object_store(
            store_url.as_ref(),
            table.log_store().root_object_store(None),
        );
    }
    let mut files = Vec::new();
    let mut rows = 0usize;
    for file in snapshot.log_data() {
        if file.deletion_vector_descriptor().is_some() {
            return Err(TableError::Unsupported(format!(
                "table \"{name}\" has deletion vectors, which Skiff does not read yet"
            ))
            .into());
        }
        let values = file.partition_values_map();
        let partition_values = layout
            .partition_fields
            .iter()
            .map(|field| partition_value(&values, field))
            .collect::<Result<Vec<_>>>()?;
        let size = u64::try_from(file.size()).unwrap_or(0);
        let mut part = PartitionedFile::new("", size).with_partition_values(partition_values);
        if let Some(hash) = &layout.partitioning {
            part = part.with_extension(file_partition(&name, hash, &values)?);
        }
        // Joined part by part: a path made from a string is re-escaped,
        // which would turn a `#` or `%` in a table's name into another key.
        let file_path = file.object_store_path();
        part.object_meta.location = root_path.parts().chain(file_path.parts()).collect();
        if let Some(n) = file.num_records() {
            rows += n;
            let mut stats = Statistics::new_unknown(&layout.file_schema);
            stats.num_rows = Precision::Exact(n);
            part = part.with_statistics(Arc::new(stats));
        }
        files.push(part);
    }
    if files.is_empty() {
        let schema = match projection {
            Some(p) => Arc::new(layout.table_schema.project(p)?),
            None => Arc::clone(&layout.table_schema),
        };
        return Ok(Arc::new(EmptyExec::new(schema)));
    }
    let target = state.config().target_partitions().max(1);
    let format = ParquetFormat::default().with_options(state.table_options().parquet.clone());
    let source = format.file_source(
        TableSchemaBuilder::from(&layout.file_schema)
            .with_table_partition_cols(layout.partition_fields.clone())
            .build(),
    );
    // A table of at least as many partitions as the session's target
    // declares its hash partitioning, grouped partition by partition, so
    // that joins and aggregations on its key need no repartition
    // (`co_location` keeps that sound); a smaller one would be
    // repartitioned to the target anyway and is dealt by size instead.
    let declared = layout
        .partitioning
        .as_ref()
        .filter(|hash| hash.partitions as usize >= target && keeps_co_location(state))
        .and_then(|hash| declared_partitioning(hash, source.table_schema().table_schema(), target));
    let groups = match &declared {
        Some(_) => group_by_partition(files, target, |partition| partition as usize),
        None => {
            let width = target.min(files.len());
            deal_files(files, width)
        }
    };
    let mut stats = Statistics::new_unknown(&layout.table_schema);
    stats.num_rows = Precision::Exact(rows);
    let config = FileScanConfigBuilder::new(store_url, source)
        .with_file_groups(groups)
        .with_statistics(stats)
        .with_projection_indices(projection.cloned())?
        .with_limit(limit)
        .with_output_partitioning(declared)
        .build();
    format.create_physical_plan(state, config).await
}

/// Whether the session plans with Skiff's co-location rules: without them
/// (deltalake plans some writes in a session of its own) a declared
/// partitioning could meet DataFusion's hash in a join.
fn keeps_co_location(state: &dyn Session) -> bool {
    state
        .as_any()
        .downcast_ref::<SessionState>()
        .is_some_and(|s| {
            s.physical_optimizers()
                .iter()
                .any(|r| r.name() == CoLocation::NAME)
        })
}

/// `Hash(key columns, width)` over a scan's full table schema (file
/// columns, then partition columns); `None` when a key column is missing.
fn declared_partitioning(
    hash: &HashPartitioning,
    schema: &SchemaRef,
    width: usize,
) -> Option<Partitioning> {
    let mut keys: Vec<Arc<dyn PhysicalExpr>> = Vec::with_capacity(hash.columns.len());
    for name in &hash.columns {
        let index = schema.index_of(name).ok()?;
        keys.push(Arc::new(Column::new(name, index)));
    }
    Some(Partitioning::Hash(keys, width))
}

/// The files of a declared scan (each tagged with its [`FilePartition`])
/// in exactly `width` groups: a file of partition `p` in group
/// `slot(p) mod width`. Every scan of one equivalence class given the same
/// `slot` and `width` puts each partition in the same group, which is what
/// lets a join read group `i` of both sides together.
pub fn group_by_partition(
    files: Vec<PartitionedFile>,
    width: usize,
    slot: impl Fn(u32) -> usize,
) -> Vec<FileGroup> {
    let width = width.max(1);
    let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); width];
    for file in files {
        let partition = file
            .extension::<FilePartition>()
            .map_or(0, |tag| tag.partition);
        groups[slot(partition) % width].push(file);
    }
    groups.into_iter().map(FileGroup::new).collect()
}

/// The object store a table's files are read through: scheme and bucket.
fn store_url(root: &Url) -> Result<ObjectStoreUrl> {
    ObjectStoreUrl::parse(format!("{}://{}", root.scheme(), root.authority()))
}

/// The hash partition a file's partition values name, checked against P.
fn file_partition(
    name: &str,
    hash: &HashPartitioning,
    values: &HashMap<String, Option<String>>,
) -> Result<FilePartition> {
    let partition = values
        .get(PARTITION_COLUMN)
        .cloned()
        .flatten()
        .and_then(|text| text.parse::<u32>().ok())
        .filter(|&p| p < hash.partitions);
    let Some(partition) = partition else {
        return Err(TableError::Io(format!(
            "table \"{name}\" has a file outside its {} partitions",
            hash.partitions
        ))
        .into());
    };
    Ok(FilePartition {
        partitions: hash.partitions,
        partition,
    })
}

fn partition_value(values: &HashMap<String, Option<String>>, field: &Field) -> Result<ScalarValue> {
    match values.get(field.name()).cloned().flatten() {
        Some(text) => ScalarValue::try_from_string(text, field.data_type()),
        None => ScalarValue::try_from(field.data_type()),
    }
}

/// Files dealt into exactly `groups` groups (at least one), largest first
/// onto the lightest group; some are empty when there are fewer files.
pub fn deal_files(mut files: Vec<PartitionedFile>, groups: usize) -> Vec<FileGroup> {
    files.sort_by_key(|f| std::cmp::Reverse(f.object_meta.size));
    let mut dealt: Vec<(u64, Vec<PartitionedFile>)> = vec![(0, Vec::new()); groups.max(1)];
    for file in files {
        if let Some(lightest) = dealt.iter_mut().min_by_key(|(bytes, _)| *bytes) {
            lightest.0 += file.object_meta.size;
            lightest.1.push(file);
        }
    }
    dealt
        .into_iter()
        .map(|(_, files)| FileGroup::new(files))
        .collect()
}
