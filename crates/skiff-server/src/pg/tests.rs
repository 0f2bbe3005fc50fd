//! End to end: a coordinator and a worker in this process, a
//! `tokio-postgres` client on the PostgreSQL port.

use std::net::SocketAddr;
use std::time::Duration;

use skiff_flight::protocol::Role;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio_postgres::error::SqlState as PgState;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};
use tokio_util::sync::CancellationToken;

use skiff_coordinator::auth::Users;
use skiff_coordinator::config::{CoordinatorConfig, Limits};
use skiff_coordinator::{Coordinator, QueryStatus};
use skiff_worker::{WorkerConfig, run_worker};

/// Polls of a condition the cluster reaches by itself, before a test gives
/// up (a guard against hanging, not a timing assertion).
const WAIT_POLLS_MAX: usize = 3000;
const WAIT_POLL: Duration = Duration::from_millis(10);

const ITEMS: &str = "id,name,price,day\n\
                     1,apple,1.25,2024-01-05\n\
                     2,pear,2.50,2024-02-29\n\
                     3,plum,,1999-12-31\n";

/// A coordinator with one worker, serving PostgreSQL on a free port (and
/// the console, when asked).
pub(crate) struct Cluster {
    pub pg: SocketAddr,
    pub http: Option<SocketAddr>,
    pub coordinator: Coordinator,
    cluster_addr: SocketAddr,
    shutdown: CancellationToken,
    _tasks: JoinSet<()>,
    _data: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub(crate) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..WAIT_POLLS_MAX {
        if done() {
            return;
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
    panic!("gave up waiting until {what}");
}

async fn cluster(users: Users, limits: Limits) -> Cluster {
    cluster_with(users, limits, None).await
}

/// A cluster serving the console on a free port when `console` says which
/// pod files it watches.
pub(crate) async fn cluster_with(
    users: Users,
    limits: Limits,
    console: Option<&[std::path::PathBuf]>,
) -> Cluster {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("items.csv"), ITEMS).unwrap();
    let config = CoordinatorConfig {
        data: skiff_tables::DataLocation::Local(data.path().to_path_buf()),
        state_dir: data.path().join(".skiff"),
        cluster_addr: "127.0.0.1:0".parse().unwrap(),
        pg_addr: Some("127.0.0.1:0".parse().unwrap()),
        flight_addr: None,
        metrics_addr: None,
        http_addr: console.map(|_| "127.0.0.1:0".parse().unwrap()),
        pods: console.map(<[_]>::to_vec).unwrap_or_default(),
        partitions: Some(2),
        limits,
        users,
        tls: None,
        fault_injection: false,
    };
    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let (ready, listening) = tokio::sync::oneshot::channel();
    let token = shutdown.clone();
    tasks.spawn(async move {
        let served = crate::server::serve_coordinator(config, token, move |c, l| {
            let _ = ready.send((c.clone(), l.clone()));
        });
        if let Err(e) = served.await {
            panic!("coordinator failed: {e}");
        }
    });
    let (coordinator, listening) = listening.await.unwrap();
    let mut cluster = Cluster {
        pg: listening.pg.unwrap(),
        http: listening.http,
        coordinator,
        cluster_addr: listening.cluster,
        shutdown,
        _tasks: tasks,
        _data: data,
    };
    cluster.add_worker().await;
    cluster
}

impl Cluster {
    /// Start one more worker here and wait until it registered.
    pub(crate) async fn add_worker(&mut self) {
        let before = self.coordinator.membership().live(Role::Worker);
        let worker = WorkerConfig {
            coordinator: self.cluster_addr.to_string(),
            listen: "127.0.0.1:0".parse().unwrap(),
            partitions: Some(2),
            memory_limit: None,
            spill_dir: None,
            cache_memory: Some(64 << 20),
        };
        let token = self.shutdown.clone();
        self._tasks.spawn(async move {
            let _ = run_worker(worker, token).await;
        });
        let coordinator = self.coordinator.clone();
        wait_until("a worker registered", || {
            coordinator.membership().live(Role::Worker) > before
        })
        .await;
    }
}

async fn try_connect(
    pg: SocketAddr,
    user: &str,
    password: Option<&str>,
) -> Result<Client, tokio_postgres::Error> {
    Ok(connect_with_task(pg, user, password).await?.0)
}

/// A client and the task that drives its connection: aborting the task
/// closes the socket at once, as a client that vanishes does.
async fn connect_with_task(
    pg: SocketAddr,
    user: &str,
    password: Option<&str>,
) -> Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(pg.port())
        .user(user)
        .dbname("skiff");
    if let Some(password) = password {
        config.password(password);
    }
    let (client, connection) = config.connect(NoTls).await?;
    // Detached: the connection task ends when the client is dropped.
    let task = tokio::runtime::Handle::current().spawn(async move {
        let _ = connection.await;
    });
    Ok((client, task))
}

async fn connect(pg: SocketAddr) -> Client {
    try_connect(pg, "skiff", None).await.unwrap()
}

/// The text values of the rows of a simple query.
async fn texts(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let messages = client.simple_query(sql).await.unwrap();
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// A value's bytes as the server sent them (binary format).
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

fn code(error: &tokio_postgres::Error) -> Option<&PgState> {
    error.code()
}

fn s(text: &str) -> Option<String> {
    Some(text.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_simple_query_text_results() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    let rows = texts(
        &client,
        "SELECT id, name, CAST(price AS DECIMAL(10, 2)) AS price, CAST(day AS DATE) AS day, \
         id > 1 AS big FROM items ORDER BY id",
    )
    .await;
    assert_eq!(
        rows,
        vec![
            vec![s("1"), s("apple"), s("1.25"), s("2024-01-05"), s("f")],
            vec![s("2"), s("pear"), s("2.50"), s("2024-02-29"), s("t")],
            vec![s("3"), s("plum"), None, s("1999-12-31"), s("t")],
        ]
    );
    // Several statements in one message, each answered in turn.
    let messages = client
        .simple_query("SELECT 1; SELECT 'a', NULL")
        .await
        .unwrap();
    let completes = messages
        .iter()
        .filter(|m| matches!(m, SimpleQueryMessage::CommandComplete(_)))
        .count();
    assert_eq!(completes, 2);
    assert_eq!(
        texts(&client, "SELECT 'x' AS a; SELECT 2").await,
        vec![vec![s("x")], vec![s("2")]]
    );
    // What clients send at connect and around statements is accepted.
    for sql in [
        "SET extra_float_digits = 3",
        "SET application_name = 'PostgreSQL JDBC Driver'",
        "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "BEGIN",
        "COMMIT",
        "",
    ] {
        client.simple_query(sql).await.unwrap();
    }
    client
        .batch_execute("BEGIN; SELECT 1; ROLLBACK")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_prepared_statements_with_parameters() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    let statement = client
        .prepare(
            "SELECT id, name, CAST(price AS DECIMAL(10, 2)) AS price, CAST(day AS DATE) AS day \
             FROM items WHERE id >= $1 AND name <> $2 ORDER BY id",
        )
        .await
        .unwrap();
    assert_eq!(statement.params(), &[Type::INT8, Type::TEXT]);
    let types: Vec<_> = statement
        .columns()
        .iter()
        .map(|c| c.type_().clone())
        .collect();
    assert_eq!(
        types,
        vec![Type::INT8, Type::TEXT, Type::NUMERIC, Type::DATE]
    );
    // tokio-postgres asks for binary results.
    let rows = client
        .query(&statement, &[&2i64, &"nothing"])
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].get::<_, i64>(0), 2);
    assert_eq!(rows[0].get::<_, String>(1), "pear");
    // numeric 2.50: one base-10000 digit group after the point... 2 . 5000
    let price = rows[0].get::<_, Raw>(2).0;
    let words: Vec<i16> = price
        .chunks(2)
        .map(|c| i16::from_be_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(words, vec![2, 0, 0, 2, 2, 5000]);
    // 2024-02-29 is day 8825 after 2000-01-01.
    let day = rows[0].get::<_, Raw>(3).0;
    assert_eq!(day, 8825i32.to_be_bytes());
    assert!(rows[1].get::<_, Option<Raw>>(2).is_none());
    // Same statement, other parameters.
    let rows = client.query(&statement, &[&3i64, &"pear"]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>(1), "plum");
    // A parameter DataFusion cannot type arrives as text.
    let row = client
        .query_one("SELECT $1 AS v", &[&"free"])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "free");
    let flag = client
        .query_one("SELECT count(*) > 1 FROM items", &[])
        .await
        .unwrap();
    assert!(flag.get::<_, bool>(0));
    // Commands through the extended protocol.
    client
        .execute("SET extra_float_digits = 3", &[])
        .await
        .unwrap();
    client.execute("BEGIN", &[]).await.unwrap();
    client.execute("COMMIT", &[]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_errors_leave_the_connection_usable() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    let div = client.simple_query("SELECT 1 / 0").await.unwrap_err();
    assert_eq!(code(&div), Some(&PgState::DIVISION_BY_ZERO), "{div:?}");
    // A division by zero on the worker, while rows stream.
    let div = client
        .simple_query("SELECT id / (id - id) FROM items")
        .await
        .unwrap_err();
    assert_eq!(code(&div), Some(&PgState::DIVISION_BY_ZERO), "{div:?}");
    let div = client
        .query("SELECT id / (id - id) FROM items", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&div), Some(&PgState::DIVISION_BY_ZERO), "{div:?}");
    let syntax = client.simple_query("SELEC 1").await.unwrap_err();
    assert_eq!(code(&syntax), Some(&PgState::SYNTAX_ERROR), "{syntax:?}");
    let missing = client.prepare("SELECT * FROM nowhere").await.unwrap_err();
    assert_eq!(
        code(&missing),
        Some(&PgState::UNDEFINED_TABLE),
        "{missing:?}"
    );
    let bad_set = client
        .simple_query("SET datafusion.nope = 1")
        .await
        .unwrap_err();
    assert!(bad_set.code().is_some(), "{bad_set:?}");
    let bad_skiff = client
        .simple_query("SET skiff.store_memory_max = 'soon'")
        .await
        .unwrap_err();
    assert!(bad_skiff.code().is_some(), "{bad_skiff:?}");
    // The first error ends a multi-statement message.
    let messages = client.simple_query("SELECT 1 / 0; SELECT 2").await;
    assert!(messages.is_err());
    assert_eq!(texts(&client, "SELECT 7").await, vec![vec![s("7")]]);
    let row = client
        .query_one("SELECT count(*) FROM items", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_scram_rejects_a_wrong_password() {
    let users = Users::parse("skiff:secret\n").unwrap();
    let cluster = cluster(users, Limits::default()).await;
    let wrong = try_connect(cluster.pg, "skiff", Some("guess"))
        .await
        .err()
        .unwrap();
    assert_eq!(code(&wrong), Some(&PgState::INVALID_PASSWORD), "{wrong:?}");
    let message = wrong.as_db_error().map(|e| e.message().to_string());
    assert_eq!(
        message.as_deref(),
        Some("password authentication failed for user \"skiff\"")
    );
    let stranger = try_connect(cluster.pg, "eve", Some("secret"))
        .await
        .err()
        .unwrap();
    assert_eq!(
        code(&stranger),
        Some(&PgState::INVALID_PASSWORD),
        "{stranger:?}"
    );
    let client = try_connect(cluster.pg, "skiff", Some("secret"))
        .await
        .unwrap();
    assert_eq!(texts(&client, "SELECT 1").await, vec![vec![s("1")]]);
    // The failed attempts hold no session.
    assert_eq!(cluster.coordinator.open_sessions(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_connection_limit_is_a_fatal_error() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let cluster = cluster(Users::default(), limits).await;
    let first = connect(cluster.pg).await;
    let refused = try_connect(cluster.pg, "skiff", None).await.err().unwrap();
    assert_eq!(
        code(&refused),
        Some(&PgState::TOO_MANY_CONNECTIONS),
        "{refused:?}"
    );
    assert_eq!(texts(&first, "SELECT 1").await, vec![vec![s("1")]]);
    drop(first);
    wait_until("the first session closed", || {
        cluster.coordinator.open_sessions() == 0
    })
    .await;
    let again = connect(cluster.pg).await;
    assert_eq!(texts(&again, "SELECT 2").await, vec![vec![s("2")]]);
}

/// A query that runs until it is stopped.
/// (A filter, so the count cannot come from statistics.)
const ENDLESS: &str = "SELECT count(*) FROM generate_series(1, 1000000000000) WHERE value % 7 = 3";

fn running(coordinator: &Coordinator) -> bool {
    coordinator
        .queries()
        .live()
        .iter()
        .any(|q| q.info().status == QueryStatus::Running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_cancel_request_stops_a_long_query() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    let token = client.cancel_token();
    let query = client.simple_query(ENDLESS);
    let cancel = async {
        wait_until("the query runs", || running(&cluster.coordinator)).await;
        token.cancel_query(NoTls).await.unwrap();
    };
    let (outcome, ()) = tokio::join!(query, cancel);
    let canceled = outcome.unwrap_err();
    assert_eq!(
        code(&canceled),
        Some(&PgState::QUERY_CANCELED),
        "{canceled:?}"
    );
    assert_eq!(texts(&client, "SELECT 3").await, vec![vec![s("3")]]);
    wait_until("no query is live", || {
        cluster.coordinator.queries().live().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_garbage_and_vanishing_clients_leave_the_server_up() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    // Bytes that are no PostgreSQL message at all.
    let mut garbage = tokio::net::TcpStream::connect(cluster.pg).await.unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    garbage.write_all(&[0xff; 64]).await.unwrap();
    drop(garbage);
    // A client that leaves in the middle of an endless result.
    let (client, connection) = connect_with_task(cluster.pg, "skiff", None).await.unwrap();
    let rows = client
        .query_raw(
            "SELECT value FROM generate_series(1, 1000000000000)",
            Vec::<i64>::new(),
        )
        .await
        .unwrap();
    let mut rows = Box::pin(rows);
    let first = futures::StreamExt::next(&mut rows).await.unwrap().unwrap();
    assert_eq!(first.get::<_, i64>(0), 1);
    connection.abort();
    drop(rows);
    drop(client);
    wait_until("the abandoned query ended", || {
        cluster.coordinator.queries().live().is_empty()
    })
    .await;
    wait_until("its session closed", || {
        cluster.coordinator.open_sessions() == 0
    })
    .await;
    let client = connect(cluster.pg).await;
    assert_eq!(texts(&client, "SELECT 4").await, vec![vec![s("4")]]);
}

/// A count from the first column of the first row.
async fn count(client: &Client, sql: &str) -> i64 {
    texts(client, sql).await[0][0]
        .as_deref()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count from {sql}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_over_system_tables_see_every_change() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    // What psycopg does from a statement's fifth execution on: Parse once,
    // then Bind and Execute with parameters.
    let by_state = client
        .prepare("SELECT count(*) FROM skiff.queries WHERE state = $1")
        .await
        .unwrap();
    // SQL PREPARE and EXECUTE.
    client
        .simple_query(
            "PREPARE finished_count(VARCHAR) AS \
             SELECT count(*) FROM skiff.queries WHERE state = $1",
        )
        .await
        .unwrap();
    let mut last = (-1, -1);
    for round in 0..6 {
        let protocol: i64 = client
            .query_one(&by_state, &[&"finished"])
            .await
            .unwrap()
            .get(0);
        let sql = count(&client, "EXECUTE finished_count('finished')").await;
        // Each round finishes at least its own two statements and a third.
        assert!(
            protocol > last.0,
            "round {round}: {protocol} after {}",
            last.0
        );
        assert!(sql > last.1, "round {round}: {sql} after {}", last.1);
        assert!(sql > protocol, "round {round}: the EXECUTE ran later");
        last = (protocol, sql);
        texts(&client, "SELECT 1").await;
    }
    let workers: i64 = client
        .query_one(
            "SELECT count(*) FROM skiff.workers WHERE role = $1",
            &[&"worker"],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(workers, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements_see_tables_dropped_created_and_grown() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    let files = tempfile::tempdir().unwrap();
    let two = files.path().join("two.csv");
    let three = files.path().join("three.csv");
    let other = files.path().join("other.csv");
    std::fs::write(&two, "a,b\n1,x\n2,y\n").unwrap();
    std::fs::write(&three, "a,b\n1,x\n2,y\n3,z\n").unwrap();
    std::fs::write(&other, "c\n1.5\n").unwrap();
    let create = |path: &std::path::Path| {
        format!(
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '{}' \
             OPTIONS ('format.has_header' 'true')",
            path.display()
        )
    };
    client.simple_query(&create(&two)).await.unwrap();
    let counted = client.prepare("SELECT count(*) FROM t").await.unwrap();
    let rows = client.prepare("SELECT * FROM t ORDER BY 1").await.unwrap();
    client
        .simple_query("PREPARE t_count AS SELECT count(*) FROM t")
        .await
        .unwrap();
    let n: i64 = client.query_one(&counted, &[]).await.unwrap().get(0);
    assert_eq!(n, 2);
    assert_eq!(count(&client, "EXECUTE t_count").await, 2);

    client.simple_query("DROP TABLE t").await.unwrap();
    client.simple_query(&create(&three)).await.unwrap();
    let n: i64 = client.query_one(&counted, &[]).await.unwrap().get(0);
    assert_eq!(n, 3, "the table created again, not the dropped one");
    assert_eq!(count(&client, "EXECUTE t_count").await, 3);
    assert_eq!(client.query(&rows, &[]).await.unwrap().len(), 3);

    // Different columns: the client was told the old ones.
    client.simple_query("DROP TABLE t").await.unwrap();
    client.simple_query(&create(&other)).await.unwrap();
    let changed = client.query(&rows, &[]).await.unwrap_err();
    assert_eq!(
        code(&changed),
        Some(&PgState::FEATURE_NOT_SUPPORTED),
        "{changed:?}"
    );
    let n: i64 = client.query_one(&counted, &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
    let error = client.simple_query("DROP TABLE t").await;
    assert!(error.is_ok(), "{error:?}");
    let gone = client.query(&counted, &[]).await.unwrap_err();
    assert_eq!(code(&gone), Some(&PgState::UNDEFINED_TABLE), "{gone:?}");

    // A table over a directory sees files added after it was prepared.
    let dir = files.path().join("grows");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("1.csv"), "a,b\n1,x\n").unwrap();
    client
        .simple_query(&format!(
            "CREATE EXTERNAL TABLE g STORED AS CSV LOCATION '{}/' \
             OPTIONS ('format.has_header' 'true')",
            dir.display()
        ))
        .await
        .unwrap();
    let grown = client.prepare("SELECT count(*) FROM g").await.unwrap();
    let n: i64 = client.query_one(&grown, &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
    std::fs::write(dir.join("2.csv"), "a,b\n2,y\n3,z\n").unwrap();
    let n: i64 = client.query_one(&grown, &[]).await.unwrap().get(0);
    assert_eq!(n, 3, "a file added to the table's directory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_prepare_execute_and_deallocate() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    client
        .simple_query(
            "PREPARE cheap(DOUBLE) AS SELECT name FROM items WHERE price < $1 ORDER BY id",
        )
        .await
        .unwrap();
    assert_eq!(
        texts(&client, "EXECUTE cheap(2)").await,
        vec![vec![s("apple")]]
    );
    assert_eq!(
        texts(&client, "EXECUTE cheap(1 + 2)").await,
        vec![vec![s("apple")], vec![s("pear")]]
    );
    // Through the extended protocol too (the client describes it first).
    let rows = client.query("EXECUTE cheap(3)", &[]).await.unwrap();
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(names, ["apple", "pear"]);
    let again = client
        .simple_query("PREPARE cheap AS SELECT 1")
        .await
        .unwrap_err();
    assert_eq!(
        code(&again),
        Some(&PgState::DUPLICATE_PSTATEMENT),
        "{again:?}"
    );
    let arity = client
        .simple_query("EXECUTE cheap(1, 2)")
        .await
        .unwrap_err();
    assert_eq!(
        code(&arity),
        Some(&PgState::UNDEFINED_PARAMETER),
        "{arity:?}"
    );
    let unknown = client.simple_query("EXECUTE nothing(1)").await.unwrap_err();
    assert_eq!(
        code(&unknown),
        Some(&PgState::INVALID_SQL_STATEMENT_NAME),
        "{unknown:?}"
    );
    client.simple_query("DEALLOCATE cheap").await.unwrap();
    let gone = client.simple_query("EXECUTE cheap(2)").await.unwrap_err();
    assert_eq!(
        code(&gone),
        Some(&PgState::INVALID_SQL_STATEMENT_NAME),
        "{gone:?}"
    );
    client
        .simple_query("PREPARE cheap AS SELECT count(*) FROM items")
        .await
        .unwrap();
    assert_eq!(count(&client, "EXECUTE cheap").await, 3);
    client.simple_query("DEALLOCATE ALL").await.unwrap();
    assert!(client.simple_query("EXECUTE cheap").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_wide_and_deep_statements_get_an_answer_or_an_error() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    // Over the statement size limit: a clear error, the connection stays.
    let huge = format!("SELECT 1 -- {}", "x".repeat(100 << 20));
    let error = client.simple_query(&huge).await.unwrap_err();
    assert_eq!(
        code(&error),
        Some(&PgState::PROGRAM_LIMIT_EXCEEDED),
        "{error:?}"
    );
    drop(huge);
    assert_eq!(texts(&client, "SELECT 7").await, vec![vec![s("7")]]);

    // A list of 100,000 literals is planned and run.
    let list: Vec<String> = (0..100_000).map(|n| n.to_string()).collect();
    let sql = format!(
        "SELECT count(*) FROM items WHERE id IN ({})",
        list.join(",")
    );
    assert_eq!(count(&client, &sql).await, 3);

    // Deep nesting of every kind: an answer or an error with a SQLSTATE,
    // never a crash.
    let depth = 500;
    let parens = format!("SELECT {}1{}", "(".repeat(depth), ")".repeat(depth));
    let subqueries = format!(
        "SELECT count(*) FROM {}items{}",
        "(SELECT * FROM ".repeat(depth),
        ") AS t".repeat(depth)
    );
    // A chain as long as the server plans answers; a longer one is refused.
    let planned = vec!["id"; 1001].join(" + ");
    let sum = count(&client, &format!("SELECT sum({planned}) FROM items")).await;
    assert_eq!(sum, 6 * 1001);
    let ors: Vec<String> = (0..500).map(|n| format!("id = {n}")).collect();
    let sql = format!("SELECT count(*) FROM items WHERE {}", ors.join(" OR "));
    assert_eq!(count(&client, &sql).await, 3);
    let chain = format!("SELECT {} FROM items", vec!["id"; 20_000].join(" + "));
    let error = client.simple_query(&chain).await.unwrap_err();
    assert_eq!(
        code(&error),
        Some(&PgState::STATEMENT_TOO_COMPLEX),
        "{error:?}"
    );
    let calls = format!(
        "SELECT {}id{} FROM items",
        "abs(".repeat(300),
        ")".repeat(300)
    );
    for (what, sql) in [
        ("parentheses", &parens),
        ("subqueries", &subqueries),
        ("a chain of additions", &chain),
        ("nested calls", &calls),
    ] {
        match client.simple_query(sql).await {
            Ok(_) => {}
            Err(e) => assert_eq!(
                code(&e),
                Some(&PgState::STATEMENT_TOO_COMPLEX),
                "{what}: {e:?}"
            ),
        }
        assert_eq!(
            texts(&client, "SELECT 7").await,
            vec![vec![s("7")]],
            "after {what}"
        );
    }
    // The worker is still there too.
    assert_eq!(count(&client, "SELECT count(*) FROM items").await, 3);
}

/// A bare PostgreSQL connection speaking the protocol by hand: what COPY's
/// sub-protocol needs that tokio-postgres does only through the extended
/// protocol.
struct Wire {
    stream: tokio::net::TcpStream,
}

impl Wire {
    async fn connect(pg: SocketAddr) -> Wire {
        let mut stream = tokio::net::TcpStream::connect(pg).await.unwrap();
        let mut body = 196_608i32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0skiff\0database\0skiff\0\0");
        let mut startup = (body.len() as i32 + 4).to_be_bytes().to_vec();
        startup.extend_from_slice(&body);
        stream.write_all(&startup).await.unwrap();
        let mut raw = Wire { stream };
        raw.until(b'Z').await;
        raw
    }

    async fn send(&mut self, kind: u8, body: &[u8]) {
        let mut message = vec![kind];
        message.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        message.extend_from_slice(body);
        self.stream.write_all(&message).await.unwrap();
    }

    /// Read messages up to one of type `kind`; the types seen, in order.
    /// The server has 30 s to send it.
    async fn until(&mut self, kind: u8) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let read = async {
            let mut seen = Vec::new();
            loop {
                let mut head = [0u8; 5];
                self.stream.read_exact(&mut head).await.unwrap();
                let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
                let mut body = vec![0u8; len - 4];
                self.stream.read_exact(&mut body).await.unwrap();
                seen.push(head[0]);
                if head[0] == kind {
                    return seen;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .unwrap_or_else(|_| panic!("no message '{}' within 30 s", kind as char))
    }
}

/// A COPY FROM STDIN the client aborts (CopyFail), or whose connection
/// breaks mid-way, writes nothing; the connection stays usable after a
/// CopyFail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_copy_from_stdin_writes_nothing() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    client
        .batch_execute("CREATE TABLE t (a int)")
        .await
        .unwrap();
    let mut raw = Wire::connect(cluster.pg).await;
    raw.send(b'Q', b"COPY t FROM STDIN\0").await;
    raw.until(b'G').await;
    raw.send(b'd', b"1\n2\n3\n").await;
    raw.send(b'f', b"the client gave up\0").await;
    let seen = raw.until(b'Z').await;
    assert!(
        seen.contains(&b'E'),
        "no ErrorResponse after CopyFail: {seen:?}"
    );
    raw.send(b'Q', b"SELECT 1\0").await;
    let seen = raw.until(b'Z').await;
    assert!(
        seen.contains(&b'D'),
        "the connection is not usable: {seen:?}"
    );
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 0);
    drop(raw);
    // A client that vanishes in the middle of its rows.
    let mut raw = Wire::connect(cluster.pg).await;
    raw.send(b'Q', b"COPY t FROM STDIN\0").await;
    raw.until(b'G').await;
    raw.send(b'd', b"4\n5\n").await;
    drop(raw);
    wait_until("the broken connection's session closed", || {
        cluster.coordinator.open_sessions() == 1
    })
    .await;
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 0);
    // And a whole one commits.
    let mut raw = Wire::connect(cluster.pg).await;
    raw.send(b'Q', b"COPY t FROM STDIN\0").await;
    raw.until(b'G').await;
    raw.send(b'd', b"6\n7\n").await;
    raw.send(b'c', b"").await;
    let seen = raw.until(b'Z').await;
    assert!(seen.contains(&b'C') && !seen.contains(&b'E'), "{seen:?}");
    assert_eq!(count(&client, "SELECT count(*) FROM t").await, 2);
}

/// COPY through the extended protocol, as tokio-postgres sends it
/// (Parse, Describe, Bind, Execute, Sync): `copy_in` loads rows in one
/// commit, `copy_out` reads them back, an aborted `copy_in` writes nothing,
/// and the connection serves statements after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_through_the_extended_protocol() {
    use futures::{SinkExt, StreamExt};
    let cluster = cluster(Users::default(), Limits::default()).await;
    let client = connect(cluster.pg).await;
    client
        .batch_execute("CREATE TABLE t (a int, b varchar)")
        .await
        .unwrap();
    let sink = client
        .copy_in("COPY t FROM STDIN WITH (FORMAT csv)")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"1,one\n2,\"two, too\"\n"))
        .await
        .unwrap();
    sink.send(bytes::Bytes::from_static(b"3,\n")).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 3);
    let count: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 3);

    let out = client
        .copy_out("COPY (SELECT a, b FROM t ORDER BY a) TO STDOUT WITH (FORMAT csv)")
        .await
        .unwrap();
    let chunks: Vec<bytes::Bytes> = out.map(|c| c.unwrap()).collect().await;
    let text: String = chunks
        .iter()
        .map(|c| String::from_utf8_lossy(c).to_string())
        .collect();
    assert_eq!(text, "1,one\n2,\"two, too\"\n3,\n");

    // Dropped before `finish`: tokio-postgres sends CopyFail.
    {
        let sink = client.copy_in("COPY t FROM STDIN").await.unwrap();
        futures::pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"4\tfour\n"))
            .await
            .unwrap();
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 3, "an aborted copy_in wrote rows");
    let bad = client
        .copy_in::<_, bytes::Bytes>("COPY t FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(bad);
    bad.send(bytes::Bytes::from_static(b"x\ty\n"))
        .await
        .unwrap();
    let failed = bad.finish().await.unwrap_err();
    assert_eq!(
        failed.code(),
        Some(&PgState::INVALID_TEXT_REPRESENTATION),
        "{failed:?}"
    );
    let count: i64 = client
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 3);
}
