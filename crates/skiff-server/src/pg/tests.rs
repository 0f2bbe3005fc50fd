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

use crate::auth::Users;
use crate::config::{CoordinatorConfig, Limits};
use crate::coordinator::{Coordinator, QueryStatus};
use crate::worker::{WorkerConfig, run_worker};

/// Polls of a condition the cluster reaches by itself, before a test gives
/// up (a guard against hanging, not a timing assertion).
const WAIT_POLLS_MAX: usize = 3000;
const WAIT_POLL: Duration = Duration::from_millis(10);

const ITEMS: &str = "id,name,price,day\n\
                     1,apple,1.25,2024-01-05\n\
                     2,pear,2.50,2024-02-29\n\
                     3,plum,,1999-12-31\n";

/// A coordinator with one worker, serving PostgreSQL on a free port.
struct Cluster {
    pg: SocketAddr,
    coordinator: Coordinator,
    shutdown: CancellationToken,
    _tasks: JoinSet<()>,
    _data: tempfile::TempDir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..WAIT_POLLS_MAX {
        if done() {
            return;
        }
        tokio::time::sleep(WAIT_POLL).await;
    }
    panic!("gave up waiting until {what}");
}

async fn cluster(users: Users, limits: Limits) -> Cluster {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("items.csv"), ITEMS).unwrap();
    let config = CoordinatorConfig {
        data_dir: data.path().to_path_buf(),
        cluster_addr: "127.0.0.1:0".parse().unwrap(),
        pg_addr: Some("127.0.0.1:0".parse().unwrap()),
        flight_addr: None,
        metrics_addr: None,
        partitions: Some(2),
        limits,
        users,
        tls: None,
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
    let worker = WorkerConfig {
        coordinator: listening.cluster.to_string(),
        listen: "127.0.0.1:0".parse().unwrap(),
        partitions: Some(2),
        memory_limit: None,
        spill_dir: None,
    };
    let token = shutdown.clone();
    tasks.spawn(async move {
        let _ = run_worker(worker, token).await;
    });
    wait_until("a worker registered", || {
        coordinator.membership().live(Role::Worker) > 0
    })
    .await;
    Cluster {
        pg: listening.pg.unwrap(),
        coordinator,
        shutdown,
        _tasks: tasks,
        _data: data,
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
        .simple_query("SET skiff.migrate_after_pipelines = 'soon'")
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
