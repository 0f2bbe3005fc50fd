//! The Flight SQL front door against a real in-process cluster (one
//! coordinator, one worker) through arrow-flight's Flight SQL client, plus
//! the session registry's expiry rules on their own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::sql::{ActionCancelQueryRequest, CommandGetDbSchemas, CommandGetTables, SqlInfo};
use arrow_flight::{Action, CancelFlightInfoRequest, FlightInfo, IpcMessage};
use datafusion::prelude::SessionContext;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};

use super::sessions::Registry;
use super::{SESSION_DETACHED_IDLE_MAX, SESSION_IDLE_MAX};
use crate::serve_coordinator;
use skiff_coordinator::ClientSession;
use skiff_coordinator::{Coordinator, CoordinatorConfig, Limits, Users};
use skiff_worker::{WorkerConfig, run_worker};

/// Rows of table `t` (`n` = 1.., `s` = the number as text).
const T_ROWS: i64 = 20_000;

/// Polls (50 ms apart) for a condition the cluster reaches by itself.
const POLLS_MAX: usize = 400;

/// A coordinator with one worker, serving Flight SQL; stopped on drop.
struct Cluster {
    flight: SocketAddr,
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

fn write_data(dir: &std::path::Path) {
    let mut t = String::from("n,s\n");
    for n in 1..=T_ROWS {
        t += &format!("{n},n{n}\n");
    }
    std::fs::write(dir.join("t.csv"), t).unwrap();
    std::fs::write(dir.join("names.csv"), "n,name\n1,one\n2,two\n3,three\n").unwrap();
}

async fn cluster(users: Users, limits: Limits) -> Cluster {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let config = CoordinatorConfig {
        data: skiff_tables::DataLocation::Local(data.path().to_path_buf()),
        state_dir: data.path().join(".skiff"),
        cluster_addr: "127.0.0.1:0".parse().unwrap(),
        pg_addr: None,
        flight_addr: Some("127.0.0.1:0".parse().unwrap()),
        metrics_addr: None,
        http_addr: None,
        pods: Vec::new(),
        partitions: Some(2),
        limits,
        users,
        tls: None,
        fault_injection: false,
    };
    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let (ready, listening) = tokio::sync::oneshot::channel();
    let stop = shutdown.clone();
    tasks.spawn(async move {
        let served = serve_coordinator(config, stop, move |coordinator, listening| {
            let _ = ready.send((coordinator.clone(), listening.clone()));
        });
        served.await.unwrap();
    });
    let (coordinator, listening) = listening.await.unwrap();
    let worker = WorkerConfig {
        coordinator: listening.cluster.to_string(),
        listen: "127.0.0.1:0".parse().unwrap(),
        partitions: Some(2),
        memory_limit: None,
        spill_dir: None,
        cache_memory: Some(64 << 20),
    };
    let stop = shutdown.clone();
    tasks.spawn(async move { run_worker(worker, stop).await.unwrap() });
    for _ in 0..POLLS_MAX {
        if coordinator
            .membership()
            .live(skiff_flight::protocol::Role::Worker)
            > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Cluster {
        flight: listening.flight.unwrap(),
        coordinator,
        shutdown,
        _tasks: tasks,
        _data: data,
    }
}

fn skiff_user() -> Users {
    Users::parse("skiff:secret\n").unwrap()
}

async fn client(addr: SocketAddr) -> FlightSqlServiceClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    FlightSqlServiceClient::new(channel)
}

async fn signed_in(cluster: &Cluster) -> FlightSqlServiceClient<Channel> {
    let mut client = client(cluster.flight).await;
    client.handshake("skiff", "secret").await.unwrap();
    client
}

/// Fetch every endpoint of `info`; checks each stream has the schema the
/// `FlightInfo` promised (the ADBC driver insists on it).
async fn fetch(
    client: &mut FlightSqlServiceClient<Channel>,
    info: FlightInfo,
) -> Result<Vec<RecordBatch>, String> {
    let promised = Schema::try_from(info.clone()).map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for endpoint in info.endpoint {
        let ticket = endpoint.ticket.ok_or("no ticket")?;
        let mut stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| e.to_string())?;
            assert_eq!(batch.schema().as_ref(), &promised);
            batches.push(batch);
        }
    }
    Ok(batches)
}

async fn query(
    client: &mut FlightSqlServiceClient<Channel>,
    sql: &str,
) -> Result<Vec<RecordBatch>, String> {
    let info = client
        .execute(sql.to_string(), None)
        .await
        .map_err(|e| e.to_string())?;
    fetch(client, info).await
}

fn int_column(batches: &[RecordBatch], column: usize) -> Vec<i64> {
    let mut values = Vec::new();
    for batch in batches {
        let array = arrow::compute::cast(batch.column(column), &DataType::Int64).unwrap();
        values.extend(array.as_primitive::<Int64Type>().iter().map(|v| v.unwrap()));
    }
    values
}

fn text_column(batches: &[RecordBatch], column: usize) -> Vec<String> {
    let mut values = Vec::new();
    for batch in batches {
        let array = arrow::compute::cast(batch.column(column), &DataType::Utf8).unwrap();
        let text = array.as_string::<i32>();
        values.extend((0..text.len()).map(|i| text.value(i).to_string()));
    }
    values
}

#[tokio::test]
async fn query_streams_rows_after_basic_auth() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    let mut client = signed_in(&cluster).await;
    let rows = query(
        &mut client,
        "SELECT n, name FROM names WHERE n <= 2 ORDER BY n",
    )
    .await
    .unwrap();
    assert_eq!(int_column(&rows, 0), vec![1, 2]);
    assert_eq!(text_column(&rows, 1), vec!["one", "two"]);
    // A result of many batches streams whole, in order.
    let rows = query(&mut client, "SELECT n FROM t ORDER BY n")
        .await
        .unwrap();
    assert!(
        rows.len() > 1,
        "one batch only; the stream was not exercised"
    );
    assert_eq!(int_column(&rows, 0), (1..=T_ROWS).collect::<Vec<_>>());
    // The query ran on the worker and was recorded under the user.
    let recorded = cluster.coordinator.queries().all();
    let ours = recorded
        .iter()
        .find(|q| q.sql == "SELECT n FROM t ORDER BY n")
        .unwrap();
    assert_eq!(ours.user, "skiff");
    assert!(ours.info().worker.is_some());
}

#[tokio::test]
async fn wrong_password_missing_and_bogus_tokens_are_rejected() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    let mut client = client(cluster.flight).await;
    let wrong = client
        .handshake("skiff", "nope")
        .await
        .unwrap_err()
        .to_string();
    assert!(wrong.contains("[28P01]"), "{wrong}");
    let unknown = client
        .handshake("eve", "secret")
        .await
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("[28P01]"), "{unknown}");
    let anonymous = query(&mut client, "SELECT 1").await.unwrap_err();
    assert!(anonymous.contains("[28000]"), "{anonymous}");
    client.set_token("not-a-token".to_string());
    let bogus = query(&mut client, "SELECT 1").await.unwrap_err();
    assert!(bogus.contains("[28000]"), "{bogus}");
    // (The client would send its stale token instead of the credentials.)
    client.clear_token();
    client.handshake("skiff", "secret").await.unwrap();
    assert_eq!(
        int_column(&query(&mut client, "SELECT 7").await.unwrap(), 0),
        vec![7]
    );
}

#[tokio::test]
async fn errors_carry_their_sqlstate() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    let mut client = signed_in(&cluster).await;
    let missing = query(&mut client, "SELECT * FROM missing")
        .await
        .unwrap_err();
    assert!(missing.contains("[42P01]"), "{missing}");
    let syntax = query(&mut client, "SELEC 1").await.unwrap_err();
    assert!(syntax.contains("[42601]"), "{syntax}");
    let column = query(&mut client, "SELECT nope FROM t").await.unwrap_err();
    assert!(column.contains("[42703]"), "{column}");
    // Statements too deep to plan: refused before they are parsed.
    let deep = format!("SELECT {}", vec!["1"; 5000].join(" + "));
    let deep = query(&mut client, &deep).await.unwrap_err();
    assert!(deep.contains("[54001]"), "{deep}");
    let nested = format!("SELECT {}1{}", "(".repeat(400), ")".repeat(400));
    let nested = query(&mut client, &nested).await.unwrap_err();
    assert!(nested.contains("[54001]"), "{nested}");
    // The session still works after errors.
    assert_eq!(
        int_column(&query(&mut client, "SELECT 1").await.unwrap(), 0),
        vec![1]
    );
}

#[tokio::test]
async fn prepared_statement_binds_parameters() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    let mut client = signed_in(&cluster).await;
    let sql = "SELECT name FROM names WHERE n = $1";
    let mut statement = client.prepare(sql.to_string(), None).await.unwrap();
    assert_eq!(statement.parameter_schema().unwrap().fields().len(), 1);
    assert_eq!(statement.dataset_schema().unwrap().field(0).name(), "name");
    for (n, name) in [(2, "two"), (3, "three")] {
        let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)]));
        let column = Arc::new(Int64Array::from(vec![n]));
        statement
            .set_parameters(RecordBatch::try_new(schema, vec![column]).unwrap())
            .unwrap();
        let info = statement.execute().await.unwrap();
        let rows = fetch(&mut client, info).await.unwrap();
        assert_eq!(text_column(&rows, 0), vec![name]);
    }
    statement.close().await.unwrap();
    // Without its parameter the statement fails with a clear error.
    let mut unbound = client.prepare(sql.to_string(), None).await.unwrap();
    let error = unbound.execute().await.unwrap_err().to_string();
    assert!(error.contains("[42P02]"), "{error}");
}

#[tokio::test]
async fn updates_report_counts_and_ddl_takes_effect() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    let mut client = signed_in(&cluster).await;
    let created = client
        .execute_update("CREATE TABLE m (x BIGINT)".to_string(), None)
        .await
        .unwrap();
    assert_eq!(created, -1, "DDL reports no count");
    let inserted = client
        .execute_update("INSERT INTO m VALUES (1), (2), (3)".to_string(), None)
        .await
        .unwrap();
    assert_eq!(inserted, 3);
    let mut insert = client
        .prepare("INSERT INTO m VALUES ($1)".to_string(), None)
        .await
        .unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("$1", DataType::Int64, false)]));
    let column = Arc::new(Int64Array::from(vec![10]));
    insert
        .set_parameters(RecordBatch::try_new(schema, vec![column]).unwrap())
        .unwrap();
    assert_eq!(insert.execute_update().await.unwrap(), 1);
    let rows = query(&mut client, "SELECT sum(x) FROM m").await.unwrap();
    assert_eq!(int_column(&rows, 0), vec![16]);
}

#[tokio::test]
async fn metadata_calls_describe_the_catalog() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    let mut client = signed_in(&cluster).await;
    let info = client
        .get_sql_info(vec![SqlInfo::FlightSqlServerName])
        .await
        .unwrap();
    let rows = fetch(&mut client, info).await.unwrap();
    assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    let info = client.get_catalogs().await.unwrap();
    let catalogs = text_column(&fetch(&mut client, info).await.unwrap(), 0);
    assert!(!catalogs.is_empty());
    let info = client
        .get_db_schemas(CommandGetDbSchemas::default())
        .await
        .unwrap();
    let schemas = text_column(&fetch(&mut client, info).await.unwrap(), 1);
    assert!(schemas.iter().any(|s| s == "public"), "{schemas:?}");
    assert!(
        schemas.iter().any(|s| s == "information_schema"),
        "{schemas:?}"
    );
    let request = CommandGetTables {
        table_name_filter_pattern: Some("name%".to_string()),
        include_schema: true,
        ..Default::default()
    };
    let info = client.get_tables(request).await.unwrap();
    let tables = fetch(&mut client, info).await.unwrap();
    assert_eq!(text_column(&tables, 2), vec!["names"]);
    assert_eq!(text_column(&tables, 3), vec!["TABLE"]);
    let ipc = tables[0].column(4).as_binary::<i32>().value(0).to_vec();
    let schema = Schema::try_from(IpcMessage(ipc.into())).unwrap();
    let names: Vec<_> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, vec!["n", "name"]);
    let info = client.get_table_types().await.unwrap();
    let types = text_column(&fetch(&mut client, info).await.unwrap(), 0);
    assert!(types.iter().any(|t| t == "TABLE"));
}

#[tokio::test]
async fn loopback_clients_need_no_credentials_without_users() {
    let cluster = cluster(Users::default(), Limits::default()).await;
    let mut client = client(cluster.flight).await;
    assert_eq!(
        int_column(&query(&mut client, "SELECT 2").await.unwrap(), 0),
        vec![2]
    );
    // Settings stick to the connection's session.
    client
        .execute_update(
            "SET datafusion.execution.batch_size = 1000".to_string(),
            None,
        )
        .await
        .unwrap();
    let rows = query(&mut client, "SHOW datafusion.execution.batch_size")
        .await
        .unwrap();
    assert_eq!(text_column(&rows, 1), vec!["1000"]);
    // A handshake with any name also works, and names the session.
    client.handshake("alice", "").await.unwrap();
    query(&mut client, "SELECT 3").await.unwrap();
    let recorded = cluster.coordinator.queries().all();
    assert!(
        recorded
            .iter()
            .any(|q| q.sql == "SELECT 3" && q.user == "alice")
    );
    assert!(
        recorded
            .iter()
            .any(|q| q.sql == "SELECT 2" && q.user == "anonymous")
    );
}

#[tokio::test]
async fn connection_limit_is_reported() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let cluster = cluster(skiff_user(), limits).await;
    // (A closed connection's session makes room: see
    // `detached_sessions_make_room_at_the_limit`.)
    let _first = signed_in(&cluster).await;
    let mut second = client(cluster.flight).await;
    let error = second
        .handshake("skiff", "secret")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("[53300]"), "{error}");
}

/// Cancel with the Flight SQL action and with `CancelFlightInfo`: the
/// parked result is gone and its query is no longer running.
#[tokio::test]
async fn statements_can_be_canceled() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    let mut client = signed_in(&cluster).await;
    let heavy = "SELECT count(*) FROM t a, t b WHERE a.n + b.n = 0";
    for action in ["CancelQuery", "CancelFlightInfo"] {
        let info = client.execute(heavy.to_string(), None).await.unwrap();
        let body = match action {
            "CancelQuery" => {
                use arrow_flight::sql::ProstMessageExt;
                let request = ActionCancelQueryRequest {
                    info: info.encode_to_vec().into(),
                };
                request.as_any().encode_to_vec()
            }
            _ => CancelFlightInfoRequest {
                info: Some(info.clone()),
            }
            .encode_to_vec(),
        };
        let action = Action {
            r#type: action.to_string(),
            body: body.into(),
        };
        let results: Vec<_> = client
            .do_action(action)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(results.len(), 1);
        let error = fetch(&mut client, info).await.unwrap_err();
        assert!(error.contains("unknown ticket"), "{error}");
    }
    wait_until_no_query_runs(&cluster.coordinator).await;
}

async fn wait_until_no_query_runs(coordinator: &Coordinator) {
    for _ in 0..POLLS_MAX {
        if coordinator.queries().live().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("queries still live: {:?}", coordinator.queries().live());
}

/// A client that drops its result stream mid-way, and garbage bytes on the
/// port, leave the server serving.
#[tokio::test]
async fn vanishing_clients_and_garbage_do_not_hurt() {
    let cluster = cluster(skiff_user(), Limits::default()).await;
    {
        let mut client = signed_in(&cluster).await;
        let info = client
            .execute("SELECT a.n FROM t a, t b".to_string(), None)
            .await
            .unwrap();
        let ticket = info.endpoint[0].ticket.clone().unwrap();
        let mut stream = client.do_get(ticket).await.unwrap();
        stream.next().await.unwrap().unwrap();
        // Client and stream drop here, mid-result.
    }
    wait_until_no_query_runs(&cluster.coordinator).await;
    for garbage in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        &[0xff; 4096][..],
        b"PRI * HTTP/2.0\r\n",
    ] {
        let mut socket = tokio::net::TcpStream::connect(cluster.flight)
            .await
            .unwrap();
        let _ = socket.write_all(garbage).await;
        let _ = socket.shutdown().await;
        let mut sink = Vec::new();
        let _ = socket.read_to_end(&mut sink).await;
    }
    let mut client = signed_in(&cluster).await;
    assert_eq!(
        int_column(&query(&mut client, "SELECT 5").await.unwrap(), 0),
        vec![5]
    );
}

fn session(id: u64) -> ClientSession {
    let open = Arc::new(AtomicUsize::new(1));
    ClientSession::new(id, "skiff", None, SessionContext::new(), open)
}

#[test]
fn idle_sessions_expire() {
    let registry = Registry::default();
    let peer: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let attached = registry.open_token(session(1), Some(peer));
    let detached = registry.open_token(session(2), Some("127.0.0.1:4001".parse().unwrap()));
    registry.connection_closed("127.0.0.1:4001".parse().unwrap());
    let streaming = registry.open_token(session(3), None);
    let guard = registry.by_token(&streaming, None).unwrap().streaming();
    let now = Instant::now();
    registry.sweep_at(now + SESSION_DETACHED_IDLE_MAX + Duration::from_secs(1));
    assert!(registry.by_token(&attached, None).is_ok());
    assert!(registry.by_token(&detached, None).is_err());
    let later = Instant::now() + SESSION_IDLE_MAX + Duration::from_secs(1);
    registry.sweep_at(later);
    assert!(registry.by_token(&attached, None).is_err());
    assert!(
        registry.by_token(&streaming, None).is_ok(),
        "expired while streaming"
    );
    drop(guard);
    registry.sweep_at(Instant::now() + SESSION_IDLE_MAX + Duration::from_secs(1));
    assert_eq!(registry.counts(), (0, 0, 0));
}

#[test]
fn anonymous_sessions_end_with_their_connection() {
    let registry = Registry::default();
    let peer: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let first = registry.anonymous(peer, || Ok(session(1))).unwrap();
    let again = registry.anonymous(peer, || Ok(session(2))).unwrap();
    assert_eq!(first.session.id(), again.session.id());
    registry.connection_closed(peer);
    assert_eq!(registry.counts(), (0, 0, 0));
}

#[test]
fn basic_credentials_with_or_without_padding() {
    use tonic::metadata::MetadataMap;
    let mut metadata = MetadataMap::new();
    // "skiff:nope" in standard base64 needs padding; Go's client omits it.
    for encoded in ["c2tpZmY6bm9wZQ==", "c2tpZmY6bm9wZQ"] {
        metadata.insert("authorization", format!("Basic {encoded}").parse().unwrap());
        let (user, password) = super::service::basic(&metadata).unwrap().unwrap();
        assert_eq!((user.as_str(), password.as_str()), ("skiff", "nope"));
    }
    metadata.insert("authorization", "Basic !!!".parse().unwrap());
    assert!(super::service::basic(&metadata).is_err());
    metadata.insert("authorization", "Bearer abc".parse().unwrap());
    assert!(super::service::basic(&metadata).unwrap().is_none());
}

#[test]
fn detached_sessions_make_room_at_the_limit() {
    let registry = Registry::default();
    let gone: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    let live: SocketAddr = "127.0.0.1:4001".parse().unwrap();
    let detached = registry.open_token(session(1), Some(gone));
    let attached = registry.open_token(session(2), Some(live));
    assert!(
        !registry.reclaim_detached(),
        "every session still has its connection"
    );
    registry.connection_closed(gone);
    assert!(registry.reclaim_detached());
    assert!(registry.by_token(&detached, None).is_err());
    assert!(registry.by_token(&attached, None).is_ok());
    assert!(!registry.reclaim_detached());
}
