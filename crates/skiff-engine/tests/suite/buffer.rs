//! The buffer pool under change: after every kind of write a scan answers
//! from the table's current files, never from blocks of files it no longer
//! has or of a file's earlier version.

use std::sync::Arc;

use arrow::array::{Array, Int64Array};
use futures::TryStreamExt;
use skiff_engine::buffer::BufferPool;
use skiff_engine::{Engine, EngineConfig};

/// An engine with a managed-table directory and a pool of ample size.
async fn engine(dir: &std::path::Path) -> (Engine, Arc<BufferPool>) {
    let engine = Engine::new(&EngineConfig {
        target_partitions: Some(2),
        cache_memory: Some(64 << 20),
        ..EngineConfig::default()
    })
    .expect("engine");
    engine.register_data_dir(dir).await.expect("data dir");
    let pool = Arc::clone(engine.buffer_pool().expect("pool"));
    (engine, pool)
}

async fn run(engine: &Engine, sql: &str) {
    let output = engine.execute(sql).await.expect(sql);
    let _: Vec<_> = output.stream.try_collect().await.expect(sql);
}

/// The one BIGINT `sql` answers (NULL as `None`).
async fn number(engine: &Engine, sql: &str) -> Option<i64> {
    let output = engine.execute(sql).await.expect(sql);
    let batches: Vec<_> = output.stream.try_collect().await.expect(sql);
    let batch = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    let column = arrow::compute::cast(batch.column(0), &arrow::datatypes::DataType::Int64)
        .expect("a number");
    let values = column.as_any().downcast_ref::<Int64Array>().expect("int64");
    (!values.is_null(0)).then(|| values.value(0))
}

fn hits(pool: &BufferPool) -> u64 {
    pool.tables().iter().map(|(_, t)| t.hits).sum()
}

/// Sums read twice after each write: the second read is served by the
/// pool (its hits grow), and both equal the sum of the rows written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_to_a_managed_table_is_seen_through_the_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (engine, pool) = engine(dir.path()).await;
    let sum = "SELECT sum(a) + count(b) * 1000000 FROM t";
    let check = |expected: Option<i64>, after: &'static str| {
        let engine = engine.clone();
        let pool = Arc::clone(&pool);
        async move {
            for pass in ["cold", "warm"] {
                let before = hits(&pool);
                assert_eq!(number(&engine, sum).await, expected, "{pass} after {after}");
                if pass == "warm" && expected.is_some() {
                    assert!(
                        hits(&pool) > before,
                        "the warm read after {after} hit nothing"
                    );
                }
            }
        }
    };
    run(&engine, "CREATE TABLE t (a BIGINT, b VARCHAR)").await;
    run(
        &engine,
        "INSERT INTO t VALUES (1, 'x'), (2, 'y'), (3, NULL)",
    )
    .await;
    check(Some(6 + 2_000_000), "the first insert").await;
    run(&engine, "INSERT INTO t VALUES (10, 'z')").await;
    check(Some(16 + 3_000_000), "a second insert").await;
    run(&engine, "UPDATE t SET a = a * 2 WHERE a < 3").await;
    check(Some(19 + 3_000_000), "an update").await;
    run(&engine, "DELETE FROM t WHERE a = 10").await;
    check(Some(9 + 2_000_000), "a delete").await;
    run(&engine, "ALTER TABLE t ADD COLUMN c BIGINT").await;
    check(Some(9 + 2_000_000), "adding a column").await;
    run(&engine, "TRUNCATE t").await;
    check(None, "a truncate").await;
    run(&engine, "DROP TABLE t").await;
    run(&engine, "CREATE TABLE t (a BIGINT, b VARCHAR)").await;
    run(&engine, "INSERT INTO t VALUES (100, 'again')").await;
    check(
        Some(100 + 1_000_000),
        "a drop and a new table of the same name",
    )
    .await;
    run(&engine, "CREATE TABLE u AS SELECT a + 1 AS a, b FROM t").await;
    assert_eq!(
        number(&engine, "SELECT sum(a) FROM u").await,
        Some(101),
        "CREATE TABLE AS"
    );
}

/// An external Parquet file written again in place (same path, other
/// rows): its blocks are of the old version, the scan reads the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_file_rewritten_in_place_is_read_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (engine, pool) = engine(dir.path()).await;
    let file = dir.path().join("ext.parquet");
    let file = file.display();
    run(
        &engine,
        &format!("COPY (SELECT * FROM (VALUES (1), (2), (3)) v(a)) TO '{file}'"),
    )
    .await;
    run(
        &engine,
        &format!("CREATE EXTERNAL TABLE e STORED AS PARQUET LOCATION '{file}'"),
    )
    .await;
    assert_eq!(number(&engine, "SELECT sum(a) FROM e").await, Some(6));
    let before = hits(&pool);
    assert_eq!(number(&engine, "SELECT sum(a) FROM e").await, Some(6));
    assert!(hits(&pool) > before, "the second read hit nothing");
    // The same number of rows of the same type: a file of (nearly) the
    // same size, told apart by its modification time and size.
    run(
        &engine,
        &format!("COPY (SELECT * FROM (VALUES (7), (8), (9)) v(a)) TO '{file}'"),
    )
    .await;
    assert_eq!(number(&engine, "SELECT sum(a) FROM e").await, Some(24));
    assert_eq!(number(&engine, "SELECT sum(a) FROM e").await, Some(24));
}

/// `skiff.cache` lists what the pool holds; `skiff.clear_cache()` empties
/// it and answers the bytes it freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_table_and_clear_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (engine, pool) = engine(dir.path()).await;
    run(&engine, "CREATE TABLE t (a BIGINT)").await;
    run(&engine, "INSERT INTO t VALUES (1), (2)").await;
    run(&engine, "SELECT sum(a) FROM t").await;
    let held = pool.bytes() as i64;
    assert!(held > 0);
    let listed = "SELECT sum(bytes) FROM skiff.cache WHERE table_name = 't'";
    assert_eq!(number(&engine, listed).await, Some(held));
    assert_eq!(
        number(&engine, "SELECT skiff.clear_cache()").await,
        Some(held)
    );
    assert_eq!(pool.bytes(), 0);
    assert_eq!(number(&engine, listed).await, Some(0));
    assert_eq!(number(&engine, "SELECT sum(a) FROM t").await, Some(3));
}
