//! The memory node's chunk store: tables' columns held in RAM as chunks
//! (pipeline groups, `../shared/papers/pipeline-groups-disaggregated.txt`
//! §3), served to workers' scans in place of storage.
//!
//! A load reads the named columns of the given file versions from the
//! object store, cuts each column of each row group into chunks of at most
//! the chunk size (`skiff_flight::chunks`) and keeps the encoded messages,
//! so serving is a copy of reference counts. Chunks are keyed like the
//! workers' buffered blocks, by file version (path, size, modification
//! time), row group and column: a file rewritten since its load is never
//! served, its scans read storage. The store is pinned (nothing is evicted)
//! within a byte capacity; a load that would pass it stores nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{Schema, SchemaRef};
use arrow_flight::FlightData;
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::physical_plan::parquet::{
    DefaultParquetFileReaderFactory, ParquetFileReaderFactory,
};
use datafusion::execution::TaskContext;
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::physical_plan::metrics::ExecutionPlanMetricsSet;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions};
use parquet::arrow::async_reader::{AsyncFileReader, ParquetRecordBatchStreamBuilder};
use skiff_engine::buffer::{Block, BlockKey, every_row};
use skiff_flight::chunks::{
    assemble, chunk_cuts, chunk_messages, file_version, selection_message, trim,
};
use skiff_flight::protocol::{
    ChunkFile, ChunkRequest, FragmentFile, LoadTable, MemoryColumn, MemoryStats, TableLoaded,
};
use skiff_tables::location::Stores;
use tonic::Status;
use tracing::{debug, info};

use super::zones::{ColumnZones, Prune, Zone, zones};
use skiff_offload::sketches::ColumnSketch;

/// What names a column of a row group of a file version.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ColumnKey {
    file: FileKey,
    row_group: usize,
    column: usize,
}

/// A file version, as chunks are keyed (the e-tag and partition ride
/// along in the headers).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FileKey {
    path: String,
    size: u64,
    modified: i64,
}

impl FileKey {
    fn of(file: &ChunkFile) -> Self {
        Self {
            path: file.path.clone(),
            size: file.size,
            modified: file.modified,
        }
    }
}

/// One column of one row group: its chunks' messages.
#[derive(Debug)]
struct Held {
    table: String,
    column: String,
    messages: Vec<FlightData>,
    /// Each chunk's first row and rows, aligned with `messages`.
    cuts: Vec<(usize, usize)>,
    /// The zones of the chunks ([`super::zones`]; `None` for a type
    /// without min/max).
    zones: Option<Vec<Zone>>,
    bytes: u64,
    rows: u64,
}

/// Counters of one column of one table.
#[derive(Clone, Debug, Default)]
struct ColumnCounts {
    chunks: u64,
    bytes: u64,
    rows: u64,
    sketch_bytes: u64,
    served_chunks: u64,
    served_bytes: u64,
}

#[derive(Debug, Default)]
struct Table {
    keys: Vec<ColumnKey>,
    files: HashSet<FileKey>,
    columns: BTreeMap<String, ColumnCounts>,
    bytes: u64,
}

/// What a fragment needs to know of a held file beside its chunks.
#[derive(Debug, Default)]
struct FileLayout {
    /// Each row group's first byte (of its first column's first page):
    /// DataFusion gives a row group to the byte range holding it.
    starts: Vec<i64>,
    /// The column index of each column name held.
    roots: HashMap<String, usize>,
    /// Sketches of each column held, by name.
    sketches: HashMap<String, Arc<ColumnSketch>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Bytes of the chunks held, and of loads under way.
    bytes: u64,
    loading: u64,
    tables: BTreeMap<String, Table>,
    columns: HashMap<ColumnKey, Arc<Held>>,
    /// File versions held, with the tables holding them.
    files: HashMap<FileKey, usize>,
    layouts: HashMap<FileKey, FileLayout>,
}

/// One row group an offloaded fragment reads: its held columns, in the
/// order of the fragment's input schema.
#[derive(Debug)]
pub(crate) struct FragmentGroup {
    /// The file's index in the request, and the row group's in the file.
    pub file: usize,
    pub row_group: usize,
    pub rows: usize,
    version: skiff_engine::buffer::FileVersion,
    columns: Vec<(usize, Arc<Held>)>,
}

impl FragmentGroup {
    /// Bytes of each held column's chunks, in the input schema's order.
    pub(crate) fn column_bytes(&self) -> impl Iterator<Item = u64> + '_ {
        self.columns.iter().map(|(_, held)| held.bytes)
    }

    /// The row group's rows of `schema`'s columns (cast to its types where
    /// the file's differ, as a scan reads them).
    pub(crate) fn batch(&self, schema: &SchemaRef) -> Result<RecordBatch, String> {
        let mut arrays = Vec::with_capacity(self.columns.len());
        for ((root, held), field) in self.columns.iter().zip(schema.fields()) {
            let kept = every_row(self.rows);
            let array = assemble(
                &held.messages,
                &self.version,
                self.row_group,
                &[*root],
                &kept,
            )?
            .pop()
            .flatten()
            .ok_or_else(|| format!("column {} decoded to nothing", field.name()))?;
            let array = if array.data_type() == field.data_type() {
                array
            } else {
                arrow::compute::cast(&array, field.data_type())
                    .map_err(|e| format!("column {}: {e}", field.name()))?
            };
            arrays.push(array);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &options)
            .map_err(|e| e.to_string())
    }
}

/// The chunk store.
pub struct ChunkStore {
    capacity: u64,
    chunk_size: usize,
    stores: Stores,
    inner: Mutex<Inner>,
    /// DataFusion's functions, to decode the predicates scans send.
    functions: Arc<TaskContext>,
}

impl std::fmt::Debug for ChunkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkStore")
            .field("capacity", &self.capacity)
            .field("chunk_size", &self.chunk_size)
            .finish_non_exhaustive()
    }
}

/// A load's byte reservation, given back if the load does not finish.
struct Reservation<'a> {
    store: &'a ChunkStore,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut inner = self.store.lock();
        inner.loading -= self.bytes;
    }
}

impl ChunkStore {
    /// A store of at most `capacity` bytes, cutting columns into chunks of
    /// at most `chunk_size` bytes.
    pub fn new(capacity: u64, chunk_size: usize) -> Self {
        assert!(chunk_size > 0, "chunks have a size");
        Self {
            capacity,
            chunk_size,
            stores: Stores::default(),
            inner: Mutex::default(),
            functions: SessionContext::new().task_ctx(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock left counters, never chunks, half
        // updated: go on with them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grow `reservation` by `bytes`, if the store has room for them
    /// beside what it holds (less `replaced`, the bytes of the table this
    /// load replaces).
    fn reserve(&self, reservation: &mut Reservation<'_>, bytes: u64, replaced: u64) -> bool {
        let mut inner = self.lock();
        let used = inner.bytes - replaced.min(inner.bytes) + inner.loading;
        if used + bytes > self.capacity {
            return false;
        }
        inner.loading += bytes;
        reservation.bytes += bytes;
        true
    }

    /// Load `request`: every named column of every file, or nothing.
    pub async fn load(&self, request: &LoadTable) -> Result<TableLoaded, Status> {
        let url = url::Url::parse(&request.store)
            .map_err(|e| Status::invalid_argument(format!("bad store {}: {e}", request.store)))?;
        let store = self
            .stores
            .get_store(&url)
            .map_err(|e| Status::failed_precondition(format!("store {url}: {e}")))?;
        let replaced = self
            .lock()
            .tables
            .get(&request.table)
            .map_or(0, |t| t.bytes);
        let mut reservation = Reservation {
            store: self,
            bytes: 0,
        };
        let mut loaded: Vec<(ColumnKey, Held)> = Vec::new();
        let mut layouts = Vec::with_capacity(request.files.len());
        for file in &request.files {
            let (layout, columns) = self.read_file(&store, request, file).await?;
            layouts.push((FileKey::of(file), layout));
            for (key, held) in columns {
                if !self.reserve(&mut reservation, held.bytes, replaced) {
                    let inner = self.lock();
                    return Err(Status::resource_exhausted(format!(
                        "table {} does not fit in this memory node: {} bytes held, {} of \
                         other loads, {} read so far of the table, capacity {} \
                         (--table-memory)",
                        request.table,
                        inner.bytes,
                        inner.loading - reservation.bytes,
                        reservation.bytes + held.bytes,
                        self.capacity
                    )));
                }
                loaded.push((key, held));
            }
        }
        let mut table = Table::default();
        for (key, held) in &loaded {
            let counts = table.columns.entry(held.column.clone()).or_default();
            counts.chunks += held.messages.len() as u64;
            counts.bytes += held.bytes;
            counts.rows += held.rows;
            table.bytes += held.bytes;
            table.keys.push(key.clone());
        }
        for (_, layout) in &layouts {
            for (column, sketch) in &layout.sketches {
                let counts = table.columns.entry(column.clone()).or_default();
                counts.sketch_bytes += sketch.bytes() as u64;
            }
        }
        table.files = request.files.iter().map(FileKey::of).collect();
        let answer = TableLoaded {
            chunks: table.columns.values().map(|c| c.chunks).sum(),
            bytes: table.bytes,
            files: table.files.len() as u64,
        };
        let mut inner = self.lock();
        remove_table(&mut inner, &request.table);
        for file in &table.files {
            *inner.files.entry(file.clone()).or_default() += 1;
        }
        for (key, held) in loaded {
            inner.columns.insert(key, Arc::new(held));
        }
        for (file, layout) in layouts {
            let known = inner.layouts.entry(file).or_default();
            known.starts = layout.starts;
            known.roots.extend(layout.roots);
            known.sketches.extend(layout.sketches);
        }
        inner.bytes += table.bytes;
        inner.tables.insert(request.table.clone(), table);
        assert!(
            inner.bytes <= self.capacity,
            "the store stays within capacity"
        );
        drop(inner);
        info!(
            table = %request.table,
            files = answer.files,
            chunks = answer.chunks,
            bytes = answer.bytes,
            "table loaded"
        );
        Ok(answer)
    }

    /// The named columns of each row group of `file`, cut into chunks.
    async fn read_file(
        &self,
        store: &Arc<dyn ObjectStore>,
        request: &LoadTable,
        file: &ChunkFile,
    ) -> Result<(FileLayout, Vec<(ColumnKey, Held)>), Status> {
        let path = Path::from(file.path.as_str());
        let unreadable = |e: &dyn std::fmt::Display| {
            Status::failed_precondition(format!("cannot read {}: {e}", file.path))
        };
        let meta = store.head(&path).await.map_err(|e| unreadable(&e))?;
        // The version is as the scan names it: for a Delta table from its
        // log (whose time is the commit's, not the file system's), so only
        // the size can be checked here. Delta never rewrites a file; an
        // external file rewritten since the coordinator listed it mostly
        // changes size, and otherwise its next listing names a new time,
        // which these chunks are never served for.
        if meta.size != file.size {
            return Err(Status::aborted(format!(
                "{} changed since the load was planned; load the table again",
                file.path
            )));
        }
        // Read the way workers read (DataFusion's reader over the store).
        let factory = DefaultParquetFileReaderFactory::new(Arc::clone(store));
        let metrics = ExecutionPlanMetricsSet::new();
        let partitioned = PartitionedFile::from(meta.clone());
        let reader = || -> Result<Box<dyn AsyncFileReader>, Status> {
            let reader = factory
                .create_reader(0, partitioned.clone(), None, &metrics)
                .map_err(|e| unreadable(&e))?;
            Ok(reader as Box<dyn AsyncFileReader>)
        };
        let mut first = reader()?;
        let metadata = ArrowReaderMetadata::load_async(&mut first, ArrowReaderOptions::new())
            .await
            .map_err(|e| unreadable(&e))?;
        let schema = Arc::clone(metadata.schema());
        let mut roots: Vec<usize> = if request.columns.is_empty() {
            (0..schema.fields().len()).collect()
        } else {
            request
                .columns
                .iter()
                .filter_map(|name| schema.index_of(name).ok())
                .collect()
        };
        roots.sort_unstable();
        roots.dedup();
        let version = Arc::new(file_version(file));
        let mut out = Vec::new();
        let mut layout = FileLayout {
            starts: metadata
                .metadata()
                .row_groups()
                .iter()
                .map(|g| {
                    let first = g.column(0);
                    first
                        .dictionary_page_offset()
                        .unwrap_or_else(|| first.data_page_offset())
                })
                .collect(),
            roots: roots
                .iter()
                .map(|&r| (schema.field(r).name().clone(), r))
                .collect(),
            sketches: HashMap::new(),
        };
        if roots.is_empty() {
            return Ok((layout, out));
        }
        let mut sketches: Vec<ColumnSketch> = roots
            .iter()
            .map(|&r| ColumnSketch::new(schema.field(r).data_type()))
            .collect();
        let row_groups = metadata.metadata().num_row_groups();
        for row_group in 0..row_groups {
            let rows = metadata.metadata().row_group(row_group).num_rows();
            let rows = usize::try_from(rows).map_err(|e| unreadable(&e))?;
            let mask = ProjectionMask::roots(metadata.parquet_schema(), roots.iter().copied());
            let mut stream =
                ParquetRecordBatchStreamBuilder::new_with_metadata(reader()?, metadata.clone())
                    .with_row_groups(vec![row_group])
                    .with_projection(mask)
                    .with_batch_size(rows.max(1))
                    .build()
                    .map_err(|e| unreadable(&e))?;
            let mut batches = Vec::new();
            while let Some(batch) = stream.next().await {
                batches.push(batch.map_err(|e| unreadable(&e))?);
            }
            for (at, &root) in roots.iter().enumerate() {
                let array: ArrayRef = match batches.as_slice() {
                    [] => arrow::array::new_empty_array(schema.field(root).data_type()),
                    [one] => Arc::clone(one.column(at)),
                    _ => {
                        let parts: Vec<&dyn Array> =
                            batches.iter().map(|b| b.column(at).as_ref()).collect();
                        arrow::compute::concat(&parts).map_err(|e| unreadable(&e))?
                    }
                };
                if array.len() != rows {
                    return Err(unreadable(&format!("row group {row_group} decoded short")));
                }
                sketches[at].update(array.as_ref());
                let block = Block {
                    table: Arc::from(request.location.as_str()),
                    key: BlockKey {
                        file: Arc::clone(&version),
                        row_group,
                        column: root,
                        data_type: array.data_type().clone(),
                    },
                    array,
                };
                let cuts = chunk_cuts(&block, self.chunk_size);
                let messages = chunk_messages(&block, &cuts)
                    .map_err(|e| Status::internal(format!("{}: {e}", file.path)))?;
                let zones = zones(&block.array, &cuts);
                let bytes = messages
                    .iter()
                    .map(|m| (m.data_body.len() + m.app_metadata.len()) as u64)
                    .sum();
                let key = ColumnKey {
                    file: FileKey::of(file),
                    row_group,
                    column: root,
                };
                out.push((
                    key,
                    Held {
                        table: request.table.clone(),
                        column: schema.field(root).name().clone(),
                        messages,
                        cuts,
                        zones,
                        bytes,
                        rows: rows as u64,
                    },
                ));
            }
        }
        layout.sketches = roots
            .iter()
            .zip(sketches)
            .map(|(&r, sketch)| (schema.field(r).name().clone(), Arc::new(sketch)))
            .collect();
        Ok((layout, out))
    }

    /// Drop table `name`'s chunks; what was freed.
    pub fn unload(&self, name: &str) -> TableLoaded {
        let mut inner = self.lock();
        let freed = remove_table(&mut inner, name);
        if freed.bytes > 0 {
            info!(table = name, bytes = freed.bytes, "table unloaded");
        }
        freed
    }

    /// The messages of the asked columns of a row group, counted as served:
    /// every chunk of each, or, for a request with its scan's predicate, a
    /// [`ChunkSelection`](skiff_flight::protocol::ChunkSelection) message
    /// and the chunks that meet the rows it names, each cut to those rows.
    pub fn chunks(&self, request: &ChunkRequest) -> Result<Vec<FlightData>, Status> {
        let Some(file) = &request.file else {
            return Err(Status::invalid_argument("a chunk request names no file"));
        };
        let file = FileKey::of(file);
        let row_group = usize::try_from(request.row_group)
            .map_err(|_| Status::invalid_argument("bad row group"))?;
        let columns = request
            .columns
            .iter()
            .map(|&c| usize::try_from(c).map_err(|_| Status::invalid_argument("bad column")))
            .collect::<Result<Vec<_>, _>>()?;
        // Decoded before the lock; a predicate that cannot be read (another
        // version's encoding, a function this node lacks) prunes nothing.
        let prune = request.prune.as_ref().and_then(|p| {
            Prune::decode(p, &self.functions)
                .map_err(|e| debug!(error = %e, "chunk request: predicate not used"))
                .ok()
        });
        let inner = self.lock();
        if !inner.files.contains_key(&file) {
            return Err(Status::not_found(format!(
                "{} (size {}, modified {}) is not held here",
                file.path, file.size, file.modified
            )));
        }
        let key = |column| ColumnKey {
            file: file.clone(),
            row_group,
            column,
        };
        let held: Vec<Arc<Held>> = columns
            .iter()
            .filter_map(|&c| inner.columns.get(&key(c)).cloned())
            .collect();
        let kept: Option<Vec<Range<usize>>> = match &request.prune {
            None => None,
            Some(asked) => {
                let rows = usize::try_from(asked.rows)
                    .map_err(|_| Status::invalid_argument("bad row count"))?;
                if let Some(other) = held.iter().find(|h| h.rows != asked.rows) {
                    return Err(Status::invalid_argument(format!(
                        "row group {row_group} of {} has {} rows, not {rows}",
                        file.path, other.rows
                    )));
                }
                Some(match &prune {
                    Some(prune) => kept(prune, &inner, &key, rows),
                    None => every_row(rows),
                })
            }
        };
        drop(inner);
        // Cut outside the lock: a trimmed chunk is decoded and encoded.
        let mut messages = Vec::new();
        if let Some(kept) = &kept {
            messages.push(selection_message(kept));
        }
        let mut served = Vec::with_capacity(held.len());
        for held in held {
            let sent: Vec<FlightData> = match &kept {
                None => held.messages.clone(),
                Some(kept) => {
                    let mut sent = Vec::new();
                    for (message, cut) in held.messages.iter().zip(&held.cuts) {
                        let part = trim(message, *cut, kept)
                            .map_err(|e| Status::internal(format!("{}: {e}", file.path)))?;
                        sent.extend(part);
                    }
                    sent
                }
            };
            let bytes: u64 = sent
                .iter()
                .map(|m| (m.data_body.len() + m.app_metadata.len()) as u64)
                .sum();
            served.push((held.table.clone(), held.column.clone(), sent.len(), bytes));
            messages.extend(sent);
        }
        let mut inner = self.lock();
        for (table, column, chunks, bytes) in served {
            if let Some(counts) = inner
                .tables
                .get_mut(&table)
                .and_then(|t| t.columns.get_mut(&column))
            {
                counts.served_chunks += chunks as u64;
                counts.served_bytes += bytes;
            }
        }
        Ok(messages)
    }

    /// The row groups of `files` an offloaded fragment reading `schema`'s
    /// columns runs over (those in each file's range), and each file's
    /// count of row groups; or why the node cannot run it (a file or a
    /// column not held), in words.
    pub(crate) fn fragment_groups(
        &self,
        files: &[FragmentFile],
        schema: &Schema,
    ) -> Result<(Vec<usize>, Vec<FragmentGroup>), String> {
        let inner = self.lock();
        let mut counts = Vec::with_capacity(files.len());
        let mut groups = Vec::new();
        for (index, asked) in files.iter().enumerate() {
            let Some(file) = &asked.file else {
                return Err("a fragment file without a name".to_string());
            };
            let key = FileKey::of(file);
            let Some(layout) = inner.layouts.get(&key) else {
                return Err(format!("{} (this version) is not held here", file.path));
            };
            counts.push(layout.starts.len());
            let version = file_version(file);
            for (row_group, start) in layout.starts.iter().enumerate() {
                if asked.ranged && !(asked.start..asked.end).contains(start) {
                    continue;
                }
                let mut columns = Vec::with_capacity(schema.fields().len());
                let mut rows = None;
                for field in schema.fields() {
                    let held = layout.roots.get(field.name()).and_then(|&root| {
                        let column = ColumnKey {
                            file: key.clone(),
                            row_group,
                            column: root,
                        };
                        Some((root, Arc::clone(inner.columns.get(&column)?)))
                    });
                    let Some((root, held)) = held else {
                        return Err(format!(
                            "column {} of {} is not held here",
                            field.name(),
                            file.path
                        ));
                    };
                    if *rows.get_or_insert(held.rows) != held.rows {
                        return Err(format!(
                            "row group {row_group} of {}: columns disagree",
                            file.path
                        ));
                    }
                    columns.push((root, held));
                }
                groups.push(FragmentGroup {
                    file: index,
                    row_group,
                    rows: usize::try_from(rows.unwrap_or(0)).map_err(|e| e.to_string())?,
                    version: version.clone(),
                    columns,
                });
            }
        }
        Ok((counts, groups))
    }

    /// The sketches of `column` over `files` merged, when every one of
    /// them holds it.
    pub(crate) fn sketch(&self, files: &[ChunkFile], column: &str) -> Option<ColumnSketch> {
        let inner = self.lock();
        let mut merged: Option<ColumnSketch> = None;
        for file in files {
            let sketch = inner
                .layouts
                .get(&FileKey::of(file))?
                .sketches
                .get(column)?;
            match &mut merged {
                None => merged = Some(sketch.snapshot()),
                Some(merged) => merged.merge(sketch),
            }
        }
        merged
    }

    /// Bytes of table chunks held.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Capacity, bytes held and a row per column of each table.
    pub fn stats(&self) -> MemoryStats {
        let inner = self.lock();
        let columns = inner
            .tables
            .iter()
            .flat_map(|(table, t)| {
                t.columns.iter().map(move |(column, c)| MemoryColumn {
                    table: table.clone(),
                    column: column.clone(),
                    chunks: c.chunks,
                    bytes: c.bytes,
                    rows: c.rows,
                    served_chunks: c.served_chunks,
                    served_bytes: c.served_bytes,
                    sketch_bytes: c.sketch_bytes,
                })
            })
            .collect();
        MemoryStats {
            capacity: self.capacity,
            bytes: inner.bytes,
            chunk_size: self.chunk_size as u64,
            columns,
            fragments: Vec::new(),
        }
    }
}

/// The rows of a row group of `rows` rows that `prune` may keep, judged by
/// the bounds of its columns held here (those of `key`'s row group).
fn kept(
    prune: &Prune,
    inner: &Inner,
    key: &dyn Fn(usize) -> ColumnKey,
    rows: usize,
) -> Vec<Range<usize>> {
    let bounds: HashMap<String, ColumnZones<'_>> = prune
        .columns
        .iter()
        .filter_map(|(name, root)| {
            let held = inner.columns.get(&key(*root))?;
            let zones = ColumnZones {
                zones: held.zones.as_deref()?,
                data_type: prune.data_type(name)?,
            };
            (held.rows == rows as u64).then(|| (name.clone(), zones))
        })
        .collect();
    prune.kept(&bounds, rows)
}

/// Take table `name` out of `inner`; what it held.
fn remove_table(inner: &mut Inner, name: &str) -> TableLoaded {
    let Some(table) = inner.tables.remove(name) else {
        return TableLoaded::default();
    };
    for key in &table.keys {
        // Another table over the same files may hold the key now: only the
        // entry this table put there goes.
        if inner
            .columns
            .get(key)
            .is_some_and(|held| held.table == name)
        {
            inner.columns.remove(key);
        }
    }
    for file in &table.files {
        if let Some(count) = inner.files.get_mut(file) {
            *count -= 1;
            if *count == 0 {
                inner.files.remove(file);
                inner.layouts.remove(file);
            }
        }
    }
    inner.bytes -= table.bytes;
    TableLoaded {
        chunks: table.columns.values().map(|c| c.chunks).sum(),
        bytes: table.bytes,
        files: table.files.len() as u64,
    }
}
