//! Managed tables through a DataFusion session: each statement one Delta
//! commit, everything there again after reopening the directory.

use std::path::Path;
use std::sync::Arc;

use arrow::util::pretty::pretty_format_batches;
use datafusion::common::tree_node::TreeNode;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
use datafusion::prelude::SessionContext;
use skiff_tables::partition::{self, PARTITION_COLUMN, partition_of};
use skiff_tables::{ManagedTable, TableStore};

/// A session over `dir`'s managed tables, as a restarted server sees them.
async fn session(dir: &Path) -> (SessionContext, TableStore) {
    let ctx = SessionContext::new();
    let store = TableStore::open(dir).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if skiff_tables::is_delta_table(&path) {
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            let url = url::Url::from_directory_path(path.canonicalize().unwrap()).unwrap();
            let table = ManagedTable::open(&name, url).await.unwrap();
            ctx.register_table(name.as_str(), Arc::new(table)).unwrap();
        }
    }
    (ctx, store)
}

/// Run one statement as the engine does: DDL of managed tables by the
/// store, the rest by DataFusion. Returns the result as text.
async fn run(ctx: &SessionContext, store: &TableStore, sql: &str) -> Result<String, String> {
    let split = partition::split_clause(sql).map_err(|e| e.to_string())?;
    let (sql, partitioning) = match split {
        Some((rest, p)) => (rest, Some(p)),
        None => (sql.to_string(), None),
    };
    let plan = ctx
        .state()
        .create_logical_plan(&sql)
        .await
        .map_err(|e| e.to_string())?;
    if store
        .execute_ddl(ctx, &plan, partitioning.as_ref())
        .await
        .map_err(|e| e.to_string())?
    {
        return Ok(String::new());
    }
    let batches = ctx
        .execute_logical_plan(plan)
        .await
        .map_err(|e| e.to_string())?
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(pretty_format_batches(&batches).unwrap().to_string())
}

async fn ok(ctx: &SessionContext, store: &TableStore, sql: &str) -> String {
    run(ctx, store, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The single number a count or aggregate answered.
fn number(text: &str) -> i64 {
    text.lines()
        .filter_map(|l| l.trim_matches(|c| c == '|' || c == ' ').parse().ok())
        .next()
        .unwrap_or_else(|| panic!("no number in\n{text}"))
}

#[tokio::test]
async fn statements_commit_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (ctx, store) = session(dir.path()).await;
        ok(
            &ctx,
            &store,
            "CREATE TABLE t (a INT NOT NULL, b VARCHAR, c INT DEFAULT 7)",
        )
        .await;
        let inserted = ok(
            &ctx,
            &store,
            "INSERT INTO t (a, b) VALUES (1,'x'),(2,'y'),(3,'z')",
        )
        .await;
        assert_eq!(number(&inserted), 3);
        let updated = ok(&ctx, &store, "UPDATE t SET b = 'w' WHERE a >= 2").await;
        assert_eq!(number(&updated), 2);
        let deleted = ok(&ctx, &store, "DELETE FROM t WHERE a = 1").await;
        assert_eq!(number(&deleted), 1);
        ok(
            &ctx,
            &store,
            "CREATE TABLE u AS SELECT a * 10 AS a10 FROM t",
        )
        .await;
    }
    let (ctx, store) = session(dir.path()).await;
    let rows = ok(&ctx, &store, "SELECT a, b, c FROM t ORDER BY a").await;
    assert!(rows.contains("| 2 | w | 7 |"), "{rows}");
    assert!(rows.contains("| 3 | w | 7 |"), "{rows}");
    assert!(!rows.contains("| 1 "), "{rows}");
    let sum = ok(&ctx, &store, "SELECT sum(a10) FROM u").await;
    assert_eq!(number(&sum), 50);
    // Another default use after reopening: defaults are stored.
    ok(&ctx, &store, "INSERT INTO t (a) VALUES (9)").await;
    let c = ok(&ctx, &store, "SELECT c FROM t WHERE a = 9").await;
    assert_eq!(number(&c), 7);
    let truncated = ok(&ctx, &store, "TRUNCATE TABLE t").await;
    assert_eq!(number(&truncated), 3);
    assert_eq!(number(&ok(&ctx, &store, "SELECT count(*) FROM t").await), 0);
    ok(&ctx, &store, "DROP TABLE t").await;
    assert!(!dir.path().join("t").exists());
    assert!(run(&ctx, &store, "SELECT * FROM t").await.is_err());
}

#[tokio::test]
async fn bad_statements_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    ok(&ctx, &store, "CREATE TABLE t (a INT NOT NULL)").await;
    ok(&ctx, &store, "INSERT INTO t VALUES (1)").await;
    let null = run(&ctx, &store, "INSERT INTO t VALUES (2), (NULL)").await;
    assert!(null.is_err(), "{null:?}");
    let again = run(&ctx, &store, "CREATE TABLE t (b INT)")
        .await
        .unwrap_err();
    assert!(again.contains("already exists"), "{again}");
    ok(&ctx, &store, "CREATE TABLE IF NOT EXISTS t (b INT)").await;
    let rows = ok(&ctx, &store, "SELECT count(*) FROM t").await;
    assert_eq!(number(&rows), 1);
    let bad_ctas = run(&ctx, &store, "CREATE TABLE v AS SELECT 1 / 0 AS x").await;
    assert!(bad_ctas.is_err(), "{bad_ctas:?}");
    assert!(
        !dir.path().join("v").exists(),
        "a failed CTAS left a directory"
    );
}

/// Writers racing on one table: concurrent INSERTs all commit; concurrent
/// UPDATEs of the same rows either both commit, one after the other, or
/// the loser fails as a conflict having written nothing. No row is lost
/// or counted twice either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_commit_or_conflict_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    ok(&ctx, &store, "CREATE TABLE t (k INT, v INT)").await;
    let inserts: Vec<_> = (0..4)
        .map(|i| {
            let (ctx, store) = (ctx.clone(), store.clone());
            tokio::runtime::Handle::current().spawn(async move {
                let sql = format!("INSERT INTO t VALUES ({i}, 0), ({i}, 0)");
                ok(&ctx, &store, &sql).await
            })
        })
        .collect();
    for insert in inserts {
        insert.await.unwrap();
    }
    assert_eq!(number(&ok(&ctx, &store, "SELECT count(*) FROM t").await), 8);
    let updates: Vec<_> = (0..2)
        .map(|_| {
            let (ctx, store) = (ctx.clone(), store.clone());
            tokio::runtime::Handle::current()
                .spawn(async move { run(&ctx, &store, "UPDATE t SET v = v + 1").await })
        })
        .collect();
    let mut committed = 0;
    for update in updates {
        match update.await.unwrap() {
            Ok(_) => committed += 1,
            Err(e) => assert!(e.contains("could not serialize"), "{e}"),
        }
    }
    assert!(committed >= 1);
    let total = number(&ok(&ctx, &store, "SELECT sum(v) FROM t").await);
    assert_eq!(total, 8 * committed, "{committed} updates committed");
    assert_eq!(number(&ok(&ctx, &store, "SELECT count(*) FROM t").await), 8);
}

/// Run a `COPY ... FROM 'file'` as the engine does; rows loaded or the
/// error's text.
async fn copy(ctx: &SessionContext, sql: &str) -> Result<u64, String> {
    let Some(skiff_tables::copy::Copy::From(from)) =
        skiff_tables::copy::Copy::parse(sql).map_err(|e| e.to_string())?
    else {
        panic!("not a COPY FROM: {sql}");
    };
    let skiff_tables::copy::CopySourceKind::File(path) = &from.source else {
        panic!("not from a file: {sql}");
    };
    skiff_tables::copy::load_file(ctx, &from, path)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn copy_loads_csv_text_json_and_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    ok(
        &ctx,
        &store,
        "CREATE TABLE t (a INT NOT NULL, b VARCHAR, c INT DEFAULT 42)",
    )
    .await;
    let files = tempfile::tempdir().unwrap();
    let csv = files.path().join("rows.csv");
    std::fs::write(&csv, "a,b,c\n1,one,10\n2,,20\n").unwrap();
    let sql = format!(
        "COPY t FROM '{}' WITH (FORMAT csv, HEADER true)",
        csv.display()
    );
    assert_eq!(copy(&ctx, &sql).await.unwrap(), 2);
    let text = files.path().join("rows.txt");
    std::fs::write(&text, "3\tthree\n4\t\\N\n").unwrap();
    let sql = format!("COPY t (a, b) FROM '{}'", text.display());
    assert_eq!(copy(&ctx, &sql).await.unwrap(), 2);
    let json = files.path().join("rows.json");
    std::fs::write(&json, "{\"a\": 5, \"b\": \"five\", \"c\": 50}\n").unwrap();
    let sql = format!("COPY t FROM '{}'", json.display());
    assert_eq!(copy(&ctx, &sql).await.unwrap(), 1);
    let parquet = files.path().join("out");
    ok(
        &ctx,
        &store,
        &format!(
            "COPY (SELECT 6 AS a, 'six' AS b, 60 AS c) TO '{}' STORED AS PARQUET",
            parquet.display()
        ),
    )
    .await;
    let sql = format!("COPY t FROM '{}' WITH (FORMAT parquet)", parquet.display());
    assert_eq!(copy(&ctx, &sql).await.unwrap(), 1);
    let rows = ok(&ctx, &store, "SELECT a, b, c FROM t ORDER BY a").await;
    for line in [
        "| 1 | one   | 10 |",
        "| 2 |       | 20 |",
        "| 3 | three | 42 |",
        "| 4 |       | 42 |",
        "| 5 | five  | 50 |",
        "| 6 | six   | 60 |",
    ] {
        assert!(rows.contains(line), "no {line} in\n{rows}");
    }
    let nulls = ok(&ctx, &store, "SELECT count(*) FROM t WHERE b IS NULL").await;
    assert_eq!(number(&nulls), 2, "{rows}");
    // Text format's backslash escapes: a backslash, a tab and a newline
    // inside a value, an escaped delimiter, a value spelled like NULL.
    let escaped = files.path().join("escaped.txt");
    std::fs::write(&escaped, "7\tback\\\\slash\\ttab\\nline\n8\t\\\\N\n").unwrap();
    let sql = format!("COPY t (a, b) FROM '{}'", escaped.display());
    assert_eq!(copy(&ctx, &sql).await.unwrap(), 2);
    let exact = "SELECT count(*) FROM t WHERE (a = 7 AND b = concat('back', chr(92), 'slash', \
                 chr(9), 'tab', chr(10), 'line')) OR (a = 8 AND b = concat(chr(92), 'N'))";
    assert_eq!(number(&ok(&ctx, &store, exact).await), 2);
}

/// Each bad load is a clear error and leaves the table as it was.
#[tokio::test]
async fn a_bad_copy_names_the_problem_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    ok(
        &ctx,
        &store,
        "CREATE TABLE t (a SMALLINT NOT NULL, b VARCHAR)",
    )
    .await;
    ok(&ctx, &store, "INSERT INTO t VALUES (1, 'kept')").await;
    let files = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &[u8]| {
        let path = files.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    // Many good rows before the bad one: nothing of them may land.
    let mut long = String::new();
    for i in 0..5000 {
        long.push_str(&format!("{},x\n", i % 100));
    }
    long.push_str("oops,x\n");
    let cases = [
        (
            format!(
                "COPY t FROM '{}' WITH (FORMAT csv)",
                write("cols.csv", b"1,a,extra\n")
            ),
            "line",
        ),
        (
            format!(
                "COPY t FROM '{}' WITH (FORMAT csv)",
                write("long.csv", long.as_bytes())
            ),
            "long.csv, line 5001, column a)",
        ),
        (
            format!(
                "COPY t FROM '{}' WITH (FORMAT csv)",
                write("null.csv", b"2,a\n,b\n")
            ),
            "null",
        ),
        (
            format!(
                "COPY t FROM '{}' WITH (FORMAT csv)",
                write("range.csv", b"99999,a\n")
            ),
            "99999",
        ),
        (
            format!(
                "COPY nope FROM '{}' WITH (FORMAT csv)",
                write("x.csv", b"1,a\n")
            ),
            "nope",
        ),
        (
            format!("COPY t FROM '{}'", write("short.txt", b"5\tok\n6\n")),
            "missing data for column \"b\" (",
        ),
        (
            format!("COPY t FROM '{}'", write("extra.txt", b"5\tok\tmore\n")),
            "extra data after last expected column",
        ),
        (
            format!("COPY t FROM '{}'", write("range.txt", b"5\tok\n99999\tx\n")),
            "'99999' (",
        ),
        (
            "COPY t FROM '/no/such/file.csv' WITH (FORMAT csv)".to_string(),
            "/no/such/file.csv",
        ),
        (
            format!(
                "COPY t FROM '{}' WITH (FORMAT parquet)",
                write("cut.parquet", b"PAR1\x00\x01\x02")
            ),
            "cut.parquet",
        ),
    ];
    let mut cases: Vec<(String, String)> = cases
        .into_iter()
        .map(|(sql, names)| (sql, names.to_string()))
        .collect();
    // A real Parquet file cut in half (its footer gone).
    let whole = files.path().join("whole.parquet");
    ok(
        &ctx,
        &store,
        &format!(
            "COPY (SELECT CAST(v % 100 AS SMALLINT) AS a, 'x' AS b FROM range(20000) AS r(v)) \
             TO '{}' STORED AS PARQUET",
            whole.display()
        ),
    )
    .await;
    let bytes = std::fs::read(&whole).unwrap();
    let half = write("half.parquet", &bytes[..bytes.len() / 2]);
    cases.push((format!("COPY t FROM '{half}'"), "half.parquet".to_string()));
    // A file its reader may not read; root reads every file, so there
    // the case cannot happen and is skipped.
    let locked = write("locked.csv", b"1,a\n");
    std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    if std::fs::File::open(&locked).is_err() {
        cases.push((
            format!("COPY t FROM '{locked}' WITH (FORMAT csv)"),
            "permission denied".to_string(),
        ));
    } else {
        eprintln!("running as a user who reads any file: the unreadable-file case is skipped");
    }
    for (sql, names) in &cases {
        let error = copy(&ctx, sql)
            .await
            .expect_err(&format!("{sql} should fail"));
        assert!(
            error.to_lowercase().contains(&names.to_lowercase()),
            "{sql}: the error does not name {names}: {error}"
        );
        let rows = ok(&ctx, &store, "SELECT a, b FROM t").await;
        assert!(
            rows.contains("| 1 | kept |")
                && number(&ok(&ctx, &store, "SELECT count(*) FROM t").await) == 1,
            "{sql} changed the table:\n{rows}"
        );
    }
}

/// `ALTER TABLE ... ADD COLUMN`: the old rows read NULL there, new rows
/// carry it, and it is there after reopening; what it cannot honour is
/// refused with the table unchanged.
#[tokio::test]
async fn add_column_changes_the_schema_in_one_commit() {
    use skiff_tables::alter::AddColumns;
    let dir = tempfile::tempdir().unwrap();
    let alter = |ctx: SessionContext, sql: &'static str| async move {
        let parsed = AddColumns::parse(sql).map_err(|e| e.to_string())?;
        let Some(alter) = parsed else {
            panic!("not an ALTER TABLE: {sql}")
        };
        alter.run(&ctx).await.map_err(|e| e.to_string())
    };
    {
        let (ctx, store) = session(dir.path()).await;
        ok(&ctx, &store, "CREATE TABLE t (a INT NOT NULL)").await;
        ok(&ctx, &store, "INSERT INTO t VALUES (1), (2)").await;
        alter(
            ctx.clone(),
            "ALTER TABLE t ADD COLUMN b varchar, ADD c double",
        )
        .await
        .unwrap();
        ok(&ctx, &store, "INSERT INTO t VALUES (3, 'three', 0.5)").await;
        let rows = ok(&ctx, &store, "SELECT a, b, c FROM t ORDER BY a").await;
        assert!(rows.contains("| 1 |       |     |"), "{rows}");
        assert!(rows.contains("| 3 | three | 0.5 |"), "{rows}");
        alter(ctx.clone(), "ALTER TABLE t ADD COLUMN IF NOT EXISTS b int")
            .await
            .unwrap();
        for (sql, says) in [
            ("ALTER TABLE t ADD COLUMN b int", "already exists"),
            ("ALTER TABLE t ADD COLUMN d int NOT NULL", "NOT NULL"),
            ("ALTER TABLE t ADD COLUMN d int DEFAULT 4", "DEFAULT"),
            ("ALTER TABLE t DROP COLUMN b", "ADD COLUMN only"),
            ("ALTER TABLE nope ADD COLUMN d int", "nope"),
        ] {
            let error = alter(ctx.clone(), sql).await.expect_err(sql);
            assert!(error.contains(says), "{sql}: {error}");
        }
        alter(ctx.clone(), "ALTER TABLE IF EXISTS nope ADD COLUMN d int")
            .await
            .unwrap();
    }
    let (ctx, store) = session(dir.path()).await;
    let rows = ok(&ctx, &store, "SELECT a, b, c FROM t ORDER BY a").await;
    assert!(rows.contains("| 2 |       |     |"), "{rows}");
    assert!(rows.contains("| 3 | three | 0.5 |"), "{rows}");
    let columns = ok(&ctx, &store, "SELECT * FROM t LIMIT 0").await;
    assert!(!columns.contains("| d"), "{columns}");
}

/// Batches of rows as an ingest receives them; `fail` ends them with an
/// error after the rows, as a client that breaks off does.
fn batches(
    columns: Vec<(&str, arrow::array::ArrayRef)>,
    fail: bool,
) -> datafusion::physical_plan::SendableRecordBatchStream {
    let batch = arrow::array::RecordBatch::try_from_iter(columns).unwrap();
    let schema = batch.schema();
    let mut items = vec![Ok(batch)];
    if fail {
        items.push(Err(datafusion::error::DataFusionError::Execution(
            "the client went away".into(),
        )));
    }
    Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
            schema,
            futures::stream::iter(items),
        ),
    )
}

/// Ingest creates, appends and replaces, each one commit; one that fails
/// changes nothing.
#[tokio::test]
async fn ingest_creates_appends_and_replaces() {
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use skiff_tables::ingest::{IfExists, IfMissing, ingest};
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    let t = datafusion::common::TableReference::bare("t");
    let ints = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
    let strings = |v: Vec<&str>| Arc::new(StringArray::from(v)) as ArrayRef;
    let rows = ingest(
        &store,
        &ctx,
        &t,
        IfMissing::Create,
        IfExists::Fail,
        batches(
            vec![("a", ints(vec![1, 2])), ("b", strings(vec!["x", "y"]))],
            false,
        ),
    )
    .await
    .unwrap();
    assert_eq!(rows, 2);
    let again = ingest(
        &store,
        &ctx,
        &t,
        IfMissing::Create,
        IfExists::Fail,
        batches(vec![("a", ints(vec![3]))], false),
    )
    .await;
    assert!(again.unwrap_err().to_string().contains("exists"));
    // Append by column name: `b` before `a`, and `a` alone.
    let rows = ingest(
        &store,
        &ctx,
        &t,
        IfMissing::Fail,
        IfExists::Append,
        batches(vec![("b", strings(vec!["z"])), ("a", ints(vec![3]))], false),
    )
    .await
    .unwrap();
    assert_eq!(rows, 1);
    let broken = ingest(
        &store,
        &ctx,
        &t,
        IfMissing::Fail,
        IfExists::Append,
        batches(vec![("a", ints(vec![4, 5, 6]))], true),
    )
    .await;
    assert!(broken.is_err());
    let sum = ok(&ctx, &store, "SELECT sum(a) FROM t").await;
    assert_eq!(number(&sum), 6, "a broken ingest left rows");
    let missing = ingest(
        &store,
        &ctx,
        &datafusion::common::TableReference::bare("nope"),
        IfMissing::Fail,
        IfExists::Append,
        batches(vec![("a", ints(vec![1]))], false),
    )
    .await;
    assert!(missing.unwrap_err().to_string().contains("nope"));
    // Replace: new rows and a new schema, in one commit.
    let rows = ingest(
        &store,
        &ctx,
        &t,
        IfMissing::Fail,
        IfExists::Replace,
        batches(vec![("c", strings(vec!["only"]))], false),
    )
    .await
    .unwrap();
    assert_eq!(rows, 1);
    let all = ok(&ctx, &store, "SELECT * FROM t").await;
    assert!(
        all.contains("| c    |") && all.contains("| only |"),
        "{all}"
    );
    // A created table that a broken ingest would have made is not there.
    let created = ingest(
        &store,
        &ctx,
        &datafusion::common::TableReference::bare("u"),
        IfMissing::Create,
        IfExists::Fail,
        batches(vec![("a", ints(vec![1]))], true),
    )
    .await;
    assert!(created.is_err());
    assert!(!dir.path().join("u").exists());
    drop(ctx);
    let (ctx, store) = session(dir.path()).await;
    let all = ok(&ctx, &store, "SELECT * FROM t").await;
    assert!(all.contains("| only |"), "{all}");
}

/// A load dropped before its end (the shell's Ctrl-C drops it) commits
/// nothing: its source here sends rows and then never ends, so only the
/// drop can stop it. The table is as it was and takes writes after.
#[tokio::test]
async fn a_cancelled_load_leaves_the_table_as_it_was() {
    use arrow::array::{ArrayRef, Int64Array};
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    ok(&ctx, &store, "CREATE TABLE t (a bigint)").await;
    ok(&ctx, &store, "INSERT INTO t VALUES (1)").await;
    let column: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
    let batch = arrow::array::RecordBatch::try_from_iter(vec![("a", column)]).unwrap();
    let schema = batch.schema();
    let sent: Vec<datafusion::error::Result<_>> =
        vec![Ok(batch.clone()), Ok(batch.clone()), Ok(batch)];
    let endless =
        futures::StreamExt::chain(futures::stream::iter(sent), futures::stream::pending());
    let source =
        Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, endless));
    let table = datafusion::common::TableReference::bare("t");
    let load = skiff_tables::copy::append_batches(&ctx, &table, &[], source);
    let stopped = tokio::time::timeout(std::time::Duration::from_millis(300), load).await;
    assert!(stopped.is_err(), "an endless load finished");
    let (ctx, store) = session(dir.path()).await;
    assert_eq!(number(&ok(&ctx, &store, "SELECT count(*) FROM t").await), 1);
    let versions = std::fs::read_dir(dir.path().join("t/_delta_log"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".json")
        })
        .count();
    assert_eq!(versions, 2, "the cancelled load committed");
    ok(&ctx, &store, "INSERT INTO t VALUES (2)").await;
    assert_eq!(number(&ok(&ctx, &store, "SELECT count(*) FROM t").await), 2);
}

/// A file load reports the bytes it has read against the files' total.
#[tokio::test]
async fn a_file_load_reports_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    ok(&ctx, &store, "CREATE TABLE t (a bigint, b varchar)").await;
    let file = dir.path().join("rows.csv");
    let text: String = (0..50_000).map(|i| format!("{i},row {i}\n")).collect();
    std::fs::write(&file, &text).unwrap();
    let sql = format!("COPY t FROM '{}' WITH (FORMAT csv)", file.display());
    let Some(skiff_tables::copy::Copy::From(from)) = skiff_tables::copy::Copy::parse(&sql).unwrap()
    else {
        panic!("not a COPY FROM");
    };
    let progress = Arc::new(skiff_tables::copy::LoadProgress::default());
    let path = file.display().to_string();
    let rows = skiff_tables::copy::load_file_reporting(&ctx, &from, &path, Arc::clone(&progress))
        .await
        .unwrap();
    assert_eq!(rows, 50_000);
    let size = text.len() as u64;
    assert_eq!(progress.bytes(), (size, size));
}

/// The keys of table `name`'s active files (its latest Delta snapshot),
/// by the partition each file is recorded in.
async fn keys_by_partition(dir: &Path, name: &str, partitions: u32) -> Vec<Vec<i64>> {
    let root = dir.join(name).canonicalize().unwrap();
    let url = url::Url::from_directory_path(&root).unwrap();
    let table = deltalake_core::open_table(url).await.unwrap();
    let snapshot = table.snapshot().unwrap();
    let ctx = SessionContext::new();
    let mut out = vec![Vec::new(); partitions as usize];
    for file in snapshot.log_data() {
        let values = file.partition_values_map();
        let p: usize = values[PARTITION_COLUMN]
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        let path = root.join(file.object_store_path().as_ref());
        let batches = ctx
            .read_parquet(path.to_str().unwrap(), Default::default())
            .await
            .unwrap()
            .select_columns(&["k"])
            .unwrap()
            .collect()
            .await
            .unwrap();
        for b in &batches {
            let keys = b
                .column(0)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>();
            out[p].extend(keys.unwrap().values().iter().copied());
        }
    }
    out
}

/// Every stored row sits in the partition its key hashes to.
fn check_placement(by_partition: &[Vec<i64>]) {
    let partitions = by_partition.len() as u32;
    for (p, keys) in by_partition.iter().enumerate() {
        let array: arrow::array::ArrayRef = Arc::new(arrow::array::Int64Array::from(keys.clone()));
        let computed = partition_of(&[array], partitions).unwrap();
        assert!(
            computed.values().iter().all(|&c| c == p as i32),
            "partition {p} holds rows of other partitions"
        );
    }
}

#[tokio::test]
async fn a_hash_partitioned_table_keeps_each_row_in_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (ctx, store) = session(dir.path()).await;
        ok(
            &ctx,
            &store,
            "CREATE TABLE o (k BIGINT, v VARCHAR) PARTITION BY HASH (k) INTO 8 PARTITIONS",
        )
        .await;
        ok(
            &ctx,
            &store,
            "INSERT INTO o SELECT value, 'x' FROM generate_series(1, 1000)",
        )
        .await;
        let all = ok(&ctx, &store, "SELECT * FROM o LIMIT 1").await;
        assert!(
            !all.contains(PARTITION_COLUMN),
            "hidden column shown:\n{all}"
        );
        let stored = keys_by_partition(dir.path(), "o", 8).await;
        assert!(
            stored.iter().all(|keys| !keys.is_empty()),
            "an empty partition"
        );
        assert_eq!(stored.iter().map(Vec::len).sum::<usize>(), 1000);
        check_placement(&stored);
        ok(
            &ctx,
            &store,
            "CREATE TABLE c PARTITION BY HASH (k) INTO 4 PARTITIONS AS SELECT * FROM o",
        )
        .await;
        let moved = run(&ctx, &store, "UPDATE o SET k = k + 1 WHERE k = 1")
            .await
            .unwrap_err();
        assert!(moved.contains("partition key"), "{moved}");
        ok(&ctx, &store, "UPDATE o SET v = 'z' WHERE k <= 10").await;
        let copied = keys_by_partition(dir.path(), "c", 4).await;
        assert_eq!(copied.iter().map(Vec::len).sum::<usize>(), 1000);
        check_placement(&copied);
        let missing = run(
            &ctx,
            &store,
            "CREATE TABLE bad (k BIGINT) PARTITION BY HASH (nope) INTO 4 PARTITIONS",
        )
        .await
        .unwrap_err();
        assert!(missing.contains("does not have"), "{missing}");
        assert!(
            !dir.path().join("bad").exists(),
            "a refused table left files"
        );
    }
    // Reopened, the tables are still partitioned and new rows find their
    // partitions.
    let (ctx, store) = session(dir.path()).await;
    ok(
        &ctx,
        &store,
        "INSERT INTO o SELECT value, 'y' FROM generate_series(1001, 1500)",
    )
    .await;
    assert_eq!(
        number(&ok(&ctx, &store, "SELECT count(*) FROM o").await),
        1500
    );
    let stored = keys_by_partition(dir.path(), "o", 8).await;
    assert_eq!(stored.iter().map(Vec::len).sum::<usize>(), 1500);
    check_placement(&stored);
    // A scan tags each file with the partition its directory names: what
    // places a distributed query's scan tasks.
    let plan = ctx
        .sql("SELECT * FROM o")
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let mut tagged = 0;
    plan.apply(|node| {
        let scan = node
            .downcast_ref::<datafusion::datasource::source::DataSourceExec>()
            .and_then(|d| {
                d.data_source()
                    .downcast_ref::<datafusion::datasource::physical_plan::FileScanConfig>()
            });
        for file in scan
            .iter()
            .flat_map(|s| s.file_groups.iter())
            .flat_map(|g| g.iter())
        {
            let tag = file
                .extension::<skiff_tables::partition::FilePartition>()
                .expect("a partition tag");
            let path = file.object_meta.location.to_string();
            assert_eq!(tag.partitions, 8);
            assert!(
                path.contains(&format!("{PARTITION_COLUMN}={}/", tag.partition)),
                "{path} tagged {tag:?}"
            );
            tagged += 1;
        }
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    })
    .unwrap();
    assert!(tagged >= 8, "{tagged} files tagged");
}

/// The row groups of every Parquet file under `dir`.
fn row_groups(dir: &Path) -> Vec<usize> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(row_groups(&path));
        } else if path.extension().is_some_and(|e| e == "parquet") {
            let file = std::fs::File::open(&path).unwrap();
            let reader = SerializedFileReader::new(file).unwrap();
            let metadata = reader.metadata();
            // Compressed as before the row-group size was settable.
            for group in metadata.row_groups() {
                assert_eq!(group.column(0).compression(), Compression::SNAPPY);
            }
            found.push(metadata.num_row_groups());
        }
    }
    found
}

/// `CREATE TABLE ... AS` writes row groups of the session's size, plain
/// and partitioned alike, compressed as always.
#[tokio::test]
async fn created_files_follow_the_sessions_parquet_settings() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, store) = session(dir.path()).await;
    ok(
        &ctx,
        &store,
        "SET datafusion.execution.parquet.max_row_group_size = 100",
    )
    .await;
    for (table, clause) in [
        ("plain", ""),
        ("hashed", " PARTITION BY HASH (v) INTO 2 PARTITIONS"),
    ] {
        ok(
            &ctx,
            &store,
            &format!(
                "CREATE TABLE {table}{clause} AS SELECT value AS v FROM generate_series(1, 1000)"
            ),
        )
        .await;
        let groups = row_groups(&dir.path().join(table));
        assert!(!groups.is_empty(), "{table}: no files");
        // 1000 rows in groups of at most 100.
        assert!(groups.iter().sum::<usize>() >= 10, "{table}: {groups:?}");
        assert_eq!(
            number(&ok(&ctx, &store, &format!("SELECT count(*) FROM {table}")).await),
            1000
        );
    }
}
