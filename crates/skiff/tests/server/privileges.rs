//! Who may do what on a server started as users run it (no
//! `--fault-injection`): test hooks are refused to everyone, admin
//! functions to everyone but admins, and a user cancels only their own
//! queries.

use std::time::{Duration, Instant};

use skiff_gen::Benchmark;
use skiff_testkit::dataset;

use crate::support::{Options, Server, connect, simple_rows, sqlstate};

/// Runs for minutes at SF 0.01 (a nested-loop join of lineitem with
/// itself), so it is surely running when it is canceled.
const LONG_QUERY: &str = "SELECT count(*) FROM lineitem a, lineitem b \
                          WHERE a.l_partkey + b.l_partkey = 7";

const USERS: &str = "# test users\nroot:admin:rootpw\nbob:bobpw\ncarol:user:carolpw\n";

async fn login(server: &Server, user: &str, password: &str) -> tokio_postgres::Client {
    let mut config = server.pg_config(user);
    config.password(password);
    connect(config).await.expect("log in")
}

/// The SQLSTATE of `sql` run through the simple protocol, or "ok".
async fn outcome(client: &tokio_postgres::Client, sql: &str) -> String {
    match client.simple_query(sql).await {
        Ok(_) => "ok".to_string(),
        Err(e) => sqlstate(&e),
    }
}

/// The id of the one running query of `user` whose text is `sql`.
async fn running_id(client: &tokio_postgres::Client, user: &str, sql: &str) -> String {
    let text = sql.replace('\'', "''");
    let q = format!(
        "SELECT id FROM skiff.queries WHERE state = 'running' AND \"user\" = '{user}' \
         AND sql = '{text}'"
    );
    let start = Instant::now();
    loop {
        let rows = simple_rows(client, &q).await.expect("skiff.queries");
        if let Some(id) = rows.first().and_then(|r| r[0].clone()) {
            return id;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{user}'s query never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn users_server() -> (Server, tempfile::TempDir) {
    let data = dataset(Benchmark::Tpch, 0.01);
    let dir = tempfile::tempdir().expect("users dir");
    let file = dir.path().join("users");
    std::fs::write(&file, USERS).expect("users file");
    let options = Options {
        as_users_run_it: true,
        extra: vec!["--users".into(), file.display().to_string()],
        ..Options::default()
    };
    (Server::start(&data, options), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_hooks_need_the_server_flag_and_admin_functions_an_admin() {
    let (server, _users) = users_server();
    let root = login(&server, "root", "rootpw").await;
    let bob = login(&server, "bob", "bobpw").await;
    for hook in skiff_engine::options::TEST_HOOKS {
        let value = if hook.ends_with("corrupt_state") {
            "true"
        } else {
            "1"
        };
        for (who, client) in [("root", &root), ("bob", &bob)] {
            let set = format!("SET {hook} = {value}");
            assert_eq!(outcome(client, &set).await, "42501", "{who}: {set}");
            // The extended protocol plans the statement the same way.
            let error = client.execute(&set, &[]).await.expect_err(&set);
            assert_eq!(sqlstate(&error), "42501", "{who} (extended): {set}");
        }
    }
    // A setting that spends what every session shares is an admin's.
    for setting in skiff_engine::options::ADMIN_SETTINGS {
        let value = if setting.ends_with("_ms") {
            "0"
        } else {
            "'auto'"
        };
        let set = format!("SET {setting} = {value}");
        assert_eq!(outcome(&bob, &set).await, "42501", "bob: {set}");
        let error = bob.execute(&set, &[]).await.expect_err(&set);
        assert_eq!(sqlstate(&error), "42501", "bob (extended): {set}");
        assert_eq!(outcome(&root, &set).await, "ok", "root: {set}");
    }
    // Ordinary settings stay open to everyone.
    assert_eq!(
        outcome(&bob, "SET skiff.snapshot_every_pipelines = 2").await,
        "ok"
    );
    assert_eq!(
        outcome(&bob, "SET datafusion.execution.batch_size = 4096").await,
        "ok"
    );
    // Nobody sets the caller's identity: the PostgreSQL port answers a
    // SET it does not know with success (drivers send such SETs) and
    // changes nothing, so the calls below are still refused.
    outcome(&bob, "SET skiff_caller.role = 'admin'").await;
    outcome(&bob, "SET skiff_caller.user = 'root'").await;

    let steering = [
        "SELECT skiff.migrate(1)",
        "SELECT skiff.migrate(1, '1', 'abort')",
        "SELECT skiff.suspend(1)",
        "SELECT skiff.resume(1)",
        "SELECT skiff.drain('1')",
        "SELECT skiff.undrain('1')",
        "SELECT skiff.spot_notice('1', 5)",
        "SELECT skiff.add_workers(1)",
        "SELECT skiff.remove_worker('1')",
        "SELECT skiff.clear_cache()",
    ];
    for call in steering {
        assert_eq!(outcome(&bob, call).await, "42501", "bob: {call}");
    }
    // Admins get past the privilege check to the arguments.
    assert_eq!(
        outcome(&root, "SELECT skiff.drain('nosuch')").await,
        "22023"
    );
    assert_eq!(outcome(&root, "SELECT skiff.resume(999999)").await, "22023");
    // A view made by an admin does not lend the admin's role.
    assert_eq!(
        outcome(
            &root,
            "CREATE VIEW steer AS SELECT skiff.drain('nosuch') AS d"
        )
        .await,
        "ok"
    );
    assert_eq!(outcome(&bob, "SELECT * FROM steer").await, "42501");
    assert_eq!(outcome(&root, "SELECT * FROM steer").await, "22023");
    // Reading the server's files is an admin's (as in PostgreSQL).
    assert_eq!(outcome(&root, "CREATE TABLE loaded (a int)").await, "ok");
    let file = tempfile::NamedTempFile::new().expect("file");
    std::fs::write(file.path(), "1\n2\n").expect("write");
    let copy = format!("COPY loaded FROM '{}'", file.path().display());
    assert_eq!(outcome(&bob, &copy).await, "42501");
    assert_eq!(outcome(&root, &copy).await, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_cancel_their_own_queries_and_admins_anyones() {
    let (server, _users) = users_server();
    let root = login(&server, "root", "rootpw").await;
    let bob = login(&server, "bob", "bobpw").await;
    let carol = login(&server, "carol", "carolpw").await;

    // Bob cancels his own query from another connection.
    let bob_runner = login(&server, "bob", "bobpw").await;
    let bobs = tokio::runtime::Handle::current()
        .spawn(async move { bob_runner.simple_query(LONG_QUERY).await });
    let id = running_id(&bob, "bob", LONG_QUERY).await;
    let cancel = format!("SELECT skiff.cancel({id})");
    assert_eq!(
        outcome(&carol, &cancel).await,
        "42501",
        "carol cancels bob's"
    );
    let rows = simple_rows(&bob, &cancel)
        .await
        .expect("bob cancels his own");
    assert_eq!(rows[0][0].as_deref(), Some("t"));
    let ended = bobs.await.expect("join").expect_err("canceled");
    assert_eq!(sqlstate(&ended), "57014", "{ended:?}");

    // Root's query: bob may not cancel it, root may cancel anyone's.
    let root_runner = login(&server, "root", "rootpw").await;
    let roots = tokio::runtime::Handle::current()
        .spawn(async move { root_runner.simple_query(LONG_QUERY).await });
    let id = running_id(&root, "root", LONG_QUERY).await;
    let cancel = format!("SELECT skiff.cancel({id})");
    assert_eq!(outcome(&bob, &cancel).await, "42501", "bob cancels root's");
    let bob_runner = login(&server, "bob", "bobpw").await;
    let bobs = tokio::runtime::Handle::current()
        .spawn(async move { bob_runner.simple_query(LONG_QUERY).await });
    let bobs_id = running_id(&root, "bob", LONG_QUERY).await;
    let rows = simple_rows(&root, &format!("SELECT skiff.cancel({bobs_id})"))
        .await
        .expect("root cancels bob's");
    assert_eq!(rows[0][0].as_deref(), Some("t"));
    let rows = simple_rows(&root, &cancel).await.expect("root cancels own");
    assert_eq!(rows[0][0].as_deref(), Some("t"));
    for ended in [roots.await, bobs.await] {
        let error = ended.expect("join").expect_err("canceled");
        assert_eq!(sqlstate(&error), "57014", "{error:?}");
    }
    // Canceling what is not running is no error for anyone.
    let rows = simple_rows(&bob, "SELECT skiff.cancel(999999)")
        .await
        .expect("cancel nothing");
    assert_eq!(rows[0][0].as_deref(), Some("f"));
}
