//! The chunk store and its Flight face, in process: a Parquet file of
//! several row groups loaded, cut, served and checked against the file.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::runtime::SpawnedTask;
use object_store::ObjectStoreExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::properties::WriterProperties;
use skiff_engine::buffer::FileVersion;
use skiff_flight::chunks::{chunk_file, fetch_chunks};
use skiff_flight::protocol::LoadTable;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::{CacheConfig, ChunkStore, MemnodeService, StateCache, serve};

pub(super) const ROWS: usize = 4500;
pub(super) const GROUP_ROWS: usize = 1000;

/// A Parquet file of [`ROWS`] rows in groups of [`GROUP_ROWS`]: id, name,
/// score.
pub(super) fn write_file(path: &std::path::Path, seed: i64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, false),
    ]));
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..ROWS as i64).map(|i| i + seed),
    ));
    let names: ArrayRef = Arc::new(StringArray::from_iter(
        (0..ROWS).map(|i| (i % 7 != 0).then(|| format!("name number {i}"))),
    ));
    let scores: ArrayRef = Arc::new(Float64Array::from_iter_values(
        (0..ROWS).map(|i| i as f64 / 3.0),
    ));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![ids, names, scores]).unwrap();
    let properties = WriterProperties::builder()
        .set_max_row_group_row_count(Some(GROUP_ROWS))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, schema, Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// The version of `path` as scans see it.
pub(super) async fn version(path: &std::path::Path) -> FileVersion {
    let store = LocalFileSystem::new();
    let meta = store
        .head(&Path::from_filesystem_path(path).unwrap())
        .await
        .unwrap();
    FileVersion::of(&meta)
}

pub(super) fn load_request(files: &[FileVersion], columns: &[&str]) -> LoadTable {
    LoadTable {
        table: "t".into(),
        location: "file:///data/t".into(),
        store: "file:///".into(),
        files: files.iter().map(chunk_file).collect(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
    }
}

/// Column `column` of row group `group` of the file, as the file has it.
fn from_file(path: &std::path::Path, group: usize, column: usize) -> ArrayRef {
    let file = std::fs::File::open(path).unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .with_row_groups(vec![group])
        .with_batch_size(ROWS)
        .build()
        .unwrap();
    let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1);
    Arc::clone(batches[0].column(column))
}

#[tokio::test]
async fn columns_are_cut_into_chunks_within_the_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    let b = dir.path().join("b.parquet");
    write_file(&a, 0);
    write_file(&b, 1_000_000);
    let files = [version(&a).await, version(&b).await];
    // 1000 ids are 8000 bytes: 2 KiB chunks cut each into 4.
    let store = ChunkStore::new(10 << 20, 2 << 10);
    let loaded = store
        .load(&load_request(&files, &["id", "score"]))
        .await
        .unwrap();
    assert_eq!(loaded.files, 2);
    let stats = store.stats();
    assert_eq!(stats.columns.len(), 2, "only the named columns");
    for column in &stats.columns {
        assert_eq!(column.rows, 2 * ROWS as u64);
        // 5 row groups a file (4 of 1000 rows, 4 chunks each; one of 500,
        // 2 chunks).
        assert_eq!(column.chunks, 2 * (4 * 4 + 2), "{column:?}");
    }
    assert_eq!(stats.bytes, loaded.bytes);
    assert!(stats.bytes <= stats.capacity);

    // A load that does not fit stores nothing and keeps what was held.
    let small = ChunkStore::new(loaded.bytes, 2 << 10);
    small
        .load(&load_request(&files[..1], &["id"]))
        .await
        .unwrap();
    let held = small.stats().bytes;
    let refused = small.load(&load_request(&files, &[])).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused}");
    assert!(refused.message().contains("--table-memory"), "{refused}");
    // The refused load was of table "t" too, which it would have replaced:
    // the earlier one stays whole.
    assert_eq!(small.stats().bytes, held);
    assert_eq!(small.unload("t").bytes, held);
    assert_eq!(small.stats().bytes, 0);
    assert!(small.stats().columns.is_empty());
}

#[tokio::test]
async fn a_file_of_another_size_than_planned_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    write_file(&a, 0);
    let planned = version(&a).await;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&a)
        .unwrap()
        .set_len(planned.size + 1)
        .unwrap();
    let store = ChunkStore::new(10 << 20, 4 << 20);
    let refused = store
        .load(&load_request(&[planned], &[]))
        .await
        .unwrap_err();
    assert!(refused.message().contains("changed"), "{refused}");
    assert_eq!(store.stats().bytes, 0);
}

pub(super) struct Served {
    pub(super) addr: String,
    corrupt: Arc<AtomicUsize>,
    shutdown: CancellationToken,
    _task: SpawnedTask<skiff_node::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(super) async fn served(store: ChunkStore) -> Served {
    served_with(store, super::fragments::Offloader::new(2).unwrap()).await
}

/// `store` served, fragments run by `offloader`.
pub(super) async fn served_with(
    store: ChunkStore,
    offloader: super::fragments::Offloader,
) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let cache = StateCache::open(CacheConfig {
        dir: dir.path().to_path_buf(),
        capacity: 0,
        default_ttl: Duration::from_secs(60),
    })
    .unwrap();
    let corrupt = Arc::new(AtomicUsize::new(0));
    let service = MemnodeService::new(Arc::new(cache))
        .with_chunks(Arc::new(store))
        .with_offloader(Some(Arc::new(offloader)))
        .corrupting(Arc::clone(&corrupt));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let task = SpawnedTask::spawn(serve(listener, service, shutdown.clone()));
    Served {
        addr,
        corrupt,
        shutdown,
        _task: task,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_group_comes_back_as_the_file_has_it_and_corruption_is_refetched() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    write_file(&a, 0);
    let file = version(&a).await;
    let store = ChunkStore::new(10 << 20, 4 << 10);
    store
        .load(&load_request(std::slice::from_ref(&file), &["id", "name"]))
        .await
        .unwrap();
    let node = served(store).await;
    let mut client = skiff_flight::connect(&node.addr).await.unwrap();
    let deadline = Duration::from_secs(10);
    for group in 0..5 {
        let rows = if group == 4 { 500 } else { GROUP_ROWS };
        // Column 2 (score) was not loaded: left to storage.
        let got = fetch_chunks(&mut client, &file, group, &[1, 2, 0], rows, None, deadline)
            .await
            .unwrap()
            .1;
        assert_eq!(got[0].as_deref(), Some(from_file(&a, group, 1).as_ref()));
        assert!(got[1].is_none());
        assert_eq!(got[2].as_deref(), Some(from_file(&a, group, 0).as_ref()));
    }
    // One corrupted chunk: asked again, and the second answer is whole.
    node.corrupt.store(1, std::sync::atomic::Ordering::SeqCst);
    let got = fetch_chunks(&mut client, &file, 0, &[0], GROUP_ROWS, None, deadline)
        .await
        .unwrap()
        .1;
    assert_eq!(got[0].as_deref(), Some(from_file(&a, 0, 0).as_ref()));
    assert_eq!(node.corrupt.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Corrupt again on the second try: refused, never passed on.
    node.corrupt.store(100, std::sync::atomic::Ordering::SeqCst);
    let error = fetch_chunks(&mut client, &file, 0, &[0], GROUP_ROWS, None, deadline)
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::DataLoss, "{error}");
    node.corrupt.store(0, std::sync::atomic::Ordering::SeqCst);

    // Another version of the file, or a file not held: not found.
    let other = FileVersion {
        modified: file.modified + 1,
        ..file.clone()
    };
    let error = fetch_chunks(&mut client, &other, 0, &[0], GROUP_ROWS, None, deadline)
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::NotFound, "{error}");

    // Served counters: each chunk sent counts.
    let stats = skiff_flight::chunks::memory_stats(&node.addr)
        .await
        .unwrap();
    let id = stats.columns.iter().find(|c| c.column == "id").unwrap();
    assert!(id.served_chunks >= id.chunks, "{id:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_request_gets_the_rows_the_chunks_min_max_leave() {
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, lit};

    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    write_file(&a, 0);
    let file = version(&a).await;
    // 1 KiB chunks: id (8 bytes a row) in chunks of 125 rows.
    let store = ChunkStore::new(10 << 20, 1 << 10);
    store
        .load(&load_request(std::slice::from_ref(&file), &["id", "name"]))
        .await
        .unwrap();
    let node = served(store).await;
    let mut client = skiff_flight::connect(&node.addr).await.unwrap();
    let deadline = Duration::from_secs(10);
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, false),
    ]);
    let id = || Arc::new(Column::new("id", 0));
    // 1100 <= id < 1200: rows 100..200 of row group 1, in id's chunks
    // 0..125 and 125..250.
    let expr = Arc::new(BinaryExpr::new(
        Arc::new(BinaryExpr::new(id(), Operator::GtEq, lit(1100i64))),
        Operator::And,
        Arc::new(BinaryExpr::new(id(), Operator::Lt, lit(1200i64))),
    ));
    let mut prune = super::zones::tests::encoded(&schema, expr, &[("id", 0)]);
    prune.rows = GROUP_ROWS as u64;
    let before = skiff_flight::chunks::memory_stats(&node.addr)
        .await
        .unwrap();
    let (kept, got) = fetch_chunks(
        &mut client,
        &file,
        1,
        &[0, 1, 2],
        GROUP_ROWS,
        Some(prune.clone()),
        deadline,
    )
    .await
    .unwrap();
    assert_eq!(kept, vec![0..250]);
    assert_eq!(
        got[0].as_deref(),
        Some(from_file(&a, 1, 0).slice(0, 250).as_ref())
    );
    assert_eq!(
        got[1].as_deref(),
        Some(from_file(&a, 1, 1).slice(0, 250).as_ref())
    );
    assert!(got[2].is_none(), "score is not held");
    // Fewer chunks sent than the two columns of the row group have, and
    // those cut to the rows kept.
    let after = skiff_flight::chunks::memory_stats(&node.addr)
        .await
        .unwrap();
    let served = |stats: &skiff_flight::protocol::MemoryStats| -> (u64, u64) {
        let chunks = stats.columns.iter().map(|c| c.served_chunks).sum();
        (chunks, stats.columns.iter().map(|c| c.served_bytes).sum())
    };
    let whole: u64 = after.columns.iter().map(|c| c.chunks).sum::<u64>() / 5;
    let whole_bytes: u64 = after.columns.iter().map(|c| c.bytes).sum::<u64>() / 5;
    let sent = served(&after).0 - served(&before).0;
    let sent_bytes = served(&after).1 - served(&before).1;
    assert!(sent > 0 && sent * 2 < whole, "{sent} of {whole}");
    assert!(
        sent_bytes * 3 < whole_bytes,
        "{sent_bytes} of {whole_bytes}"
    );

    // Row group 0 (ids 0..999) has none of the rows: nothing is sent.
    let (kept, got) = fetch_chunks(
        &mut client,
        &file,
        0,
        &[0, 1],
        GROUP_ROWS,
        Some(prune.clone()),
        deadline,
    )
    .await
    .unwrap();
    assert!(kept.is_empty());
    assert!(got.iter().all(Option::is_none));

    // A predicate the node cannot read prunes nothing.
    prune.predicate = vec![7; 16];
    let (kept, got) = fetch_chunks(
        &mut client,
        &file,
        1,
        &[0],
        GROUP_ROWS,
        Some(prune),
        deadline,
    )
    .await
    .unwrap();
    assert_eq!(kept, vec![0..GROUP_ROWS]);
    assert_eq!(got[0].as_deref(), Some(from_file(&a, 1, 0).as_ref()));
}
