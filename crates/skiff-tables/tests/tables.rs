//! Managed tables through a DataFusion session: each statement one Delta
//! commit, everything there again after reopening the directory.

use std::path::Path;
use std::sync::Arc;

use arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;
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
    let plan = ctx
        .state()
        .create_logical_plan(sql)
        .await
        .map_err(|e| e.to_string())?;
    if store
        .execute_ddl(ctx, &plan)
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
