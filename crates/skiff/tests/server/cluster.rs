//! The cluster's behaviour under failure: killed workers, garbage on the
//! ports, restarts, many clients.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use skiff_gen::Benchmark;
use skiff_testkit::dataset;

use crate::support::{Options, Server, simple_rows, sqlstate};

/// A query that runs for minutes on SF 0.01 (a nested-loop join over
/// lineitem twice), so it is surely running when it is interfered with.
const LONG_QUERY: &str = "SELECT count(*) FROM lineitem a, lineitem b \
                          WHERE a.l_partkey + b.l_partkey = 7";

/// Poll `f` every 50 ms until it returns `Some`, for at most `limit`.
async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (query id, worker address) of running queries whose text is `sql`.
async fn running(client: &tokio_postgres::Client, sql: &str) -> Vec<(String, String)> {
    let text = sql.replace('\'', "''");
    let q = format!(
        "SELECT id, worker FROM skiff.queries WHERE state = 'running' AND sql = '{text}' \
         AND worker IS NOT NULL ORDER BY id"
    );
    simple_rows(client, &q)
        .await
        .expect("skiff.queries")
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap_or_default(),
                r[1].clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_fails_only_its_query_and_cancel_stops_the_other() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let mut server = Server::start(&data, Options::default());
    let admin = server.pg().await;
    // Two long queries: least-loaded assignment puts them on both workers.
    // The victim opts out of starting over on another worker, so that it
    // fails as a query that already sent rows would.
    let victim_client = server.pg().await;
    simple_rows(&victim_client, "SET skiff.retry_on_worker_loss = false")
        .await
        .expect("set");
    let other_client = server.pg().await;
    let victim = tokio::runtime::Handle::current()
        .spawn(async move { victim_client.simple_query(LONG_QUERY).await.map(|_| ()) });
    eventually(
        Duration::from_secs(30),
        "the first query to run",
        || async {
            let r = running(&admin, LONG_QUERY).await;
            (r.len() == 1).then_some(())
        },
    )
    .await;
    let other = tokio::runtime::Handle::current()
        .spawn(async move { other_client.simple_query(LONG_QUERY).await.map(|_| ()) });
    let queries = eventually(Duration::from_secs(30), "both queries to run", || async {
        let r = running(&admin, LONG_QUERY).await;
        (r.len() == 2).then_some(r)
    })
    .await;
    assert_ne!(queries[0].1, queries[1].1, "both queries on one worker");
    let (victim_id, victim_worker) = queries[0].clone();
    let (other_id, _) = queries[1].clone();
    let pid = simple_rows(
        &admin,
        &format!("SELECT pid FROM skiff.workers WHERE address = '{victim_worker}'"),
    )
    .await
    .expect("skiff.workers")[0][0]
        .clone()
        .expect("pid");
    let killed_at = Instant::now();
    assert_eq!(
        unsafe { libc::kill(pid.parse().expect("pid"), libc::SIGKILL) },
        0
    );

    let error = victim
        .await
        .expect("join")
        .expect_err("the killed worker's query failed");
    assert_eq!(sqlstate(&error), "57P03", "{error:?}");
    // The coordinator marks the silent worker dead.
    eventually(
        Duration::from_secs(10),
        "the worker to be marked dead",
        || async {
            let rows = simple_rows(
                &admin,
                &format!("SELECT state FROM skiff.workers WHERE address = '{victim_worker}'"),
            )
            .await
            .ok()?;
            (rows.first()?.first()?.as_deref() == Some("dead")).then_some(())
        },
    )
    .await;
    eprintln!("worker marked dead {:?} after SIGKILL", killed_at.elapsed());
    // The other query is untouched and still running; cancel it.
    let still = running(&admin, LONG_QUERY).await;
    assert_eq!(still.len(), 1, "{still:?}");
    assert_eq!(still[0].0, other_id);
    let canceled = simple_rows(&admin, &format!("SELECT skiff.cancel({other_id})"))
        .await
        .expect("cancel");
    assert_eq!(canceled[0][0].as_deref(), Some("t"));
    let error = other
        .await
        .expect("join")
        .expect_err("canceled query fails");
    assert_eq!(sqlstate(&error), "57014", "{error:?}");
    // New queries keep working.
    let rows = simple_rows(&admin, "SELECT count(*) FROM nation")
        .await
        .expect("count");
    assert_eq!(rows[0][0].as_deref(), Some("25"));
    let states = simple_rows(
        &admin,
        &format!(
            "SELECT state FROM skiff.queries WHERE id IN ({victim_id}, {other_id}) ORDER BY id"
        ),
    )
    .await
    .expect("states");
    assert_eq!(
        states,
        vec![vec![Some("failed".into())], vec![Some("canceled".into())]]
    );
    assert!(server.alive());
}

/// Random bytes to each port, then the server still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_on_every_port_leave_the_server_up() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let mut server = Server::start(&data, Options::default());
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for addr in [server.pg, server.flight, server.cluster] {
        for round in 0..4 {
            let mut stream = std::net::TcpStream::connect(addr).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut junk = vec![0u8; 4096 * (round + 1)];
            for byte in junk.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *byte = seed as u8;
            }
            let _ = stream.write_all(&junk);
            let mut sink = [0u8; 1024];
            let _ = stream.read(&mut sink);
        }
    }
    assert!(server.alive(), "coordinator died:\n{}", server.log_text());
    let client = server.pg().await;
    let rows = simple_rows(&client, "SELECT count(*) FROM region")
        .await
        .expect("query");
    assert_eq!(rows[0][0].as_deref(), Some("5"));
}

/// A table created by SQL is still there after the coordinator restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_survives_a_restart() {
    let source = dataset(Benchmark::Tpch, 0.01);
    let data = tempfile::tempdir().expect("data dir");
    let location = source.join("nation");
    let create = format!(
        "CREATE EXTERNAL TABLE countries STORED AS PARQUET LOCATION '{}/'",
        location.display()
    );
    {
        let server = Server::start_in(data.path(), Options::default());
        let client = server.pg().await;
        client.simple_query(&create).await.expect("create");
        let rows = simple_rows(&client, "SELECT count(*) FROM countries")
            .await
            .expect("count");
        assert_eq!(rows[0][0].as_deref(), Some("25"));
    }
    let server = Server::start_in(data.path(), Options::default());
    let client = server.pg().await;
    let rows = simple_rows(&client, "SELECT count(*) FROM countries")
        .await
        .expect("count");
    assert_eq!(rows[0][0].as_deref(), Some("25"));
    client
        .simple_query("DROP TABLE countries")
        .await
        .expect("drop");
    drop(client);
    drop(server);
    let server = Server::start_in(data.path(), Options::default());
    let client = server.pg().await;
    let error = client
        .simple_query("SELECT count(*) FROM countries")
        .await
        .expect_err("dropped table is gone");
    assert_eq!(sqlstate(&error), "42P01", "{error:?}");
}

/// 64 clients at once, each running queries for a while: no errors, and
/// the coordinator's memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_clients() {
    const CLIENTS: usize = 64;
    const ROUNDS: usize = 5;
    let data = dataset(Benchmark::Tpch, 0.01);
    let server = Server::start(&data, Options::default());
    let admin = server.pg().await;
    let pid = coordinator_pid(&admin).await;
    let mut tasks = Vec::new();
    for n in 0..CLIENTS {
        let config = server.pg_config("skiff");
        tasks.push(tokio::runtime::Handle::current().spawn(async move {
            let client = crate::support::connect(config)
                .await
                .map_err(|e| e.to_string())?;
            for round in 0..ROUNDS {
                let sql = match (n + round) % 3 {
                    0 => "SELECT count(*) FROM lineitem WHERE l_quantity < 10",
                    1 => {
                        "SELECT n_name, count(*) FROM nation JOIN customer \
                          ON n_nationkey = c_nationkey GROUP BY n_name ORDER BY n_name"
                    }
                    _ => "SELECT max(o_totalprice) FROM orders",
                };
                let rows = simple_rows(&client, sql)
                    .await
                    .map_err(|e| format!("{e:?}"))?;
                if rows.is_empty() {
                    return Err(format!("no rows for {sql}"));
                }
            }
            Ok::<_, String>(rss_kib(pid))
        }));
    }
    let mut errors = Vec::new();
    let mut peak = 0;
    for task in tasks {
        match task.await.expect("join") {
            Ok(rss) => peak = peak.max(rss),
            Err(e) => errors.push(e),
        }
    }
    assert!(
        errors.is_empty(),
        "{} clients failed: {errors:?}",
        errors.len()
    );
    // The coordinator only plans and forwards: a small fraction of a GiB.
    assert!(peak < 1024 * 1024, "coordinator RSS {peak} KiB");
}

async fn coordinator_pid(client: &tokio_postgres::Client) -> u32 {
    // Workers are children of the coordinator.
    let rows = simple_rows(client, "SELECT pid FROM skiff.workers LIMIT 1")
        .await
        .expect("workers");
    let worker: u32 = rows[0][0].as_deref().expect("pid").parse().expect("pid");
    let stat = std::fs::read_to_string(format!("/proc/{worker}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    after
        .split(' ')
        .nth(1)
        .expect("ppid")
        .parse()
        .expect("ppid")
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_give_clear_errors() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let options = Options {
        extra: [
            "--max-connections",
            "3",
            "--statement-timeout",
            "1",
            "--query-memory-limit",
            "256K",
        ]
        .map(String::from)
        .to_vec(),
        ..Options::default()
    };
    let mut server = Server::start(&data, options);
    let first = server.pg().await;
    let error = first.simple_query(LONG_QUERY).await.expect_err("timed out");
    assert_eq!(sqlstate(&error), "57014", "{error:?}");
    assert!(
        format!("{error:?}").contains("statement timeout"),
        "{error:?}"
    );
    // A hash join's build side cannot spill: 256 KiB is too little for it.
    let error = first
        .simple_query("SELECT count(*) FROM lineitem JOIN orders ON l_orderkey = o_orderkey")
        .await
        .expect_err("out of memory");
    assert_eq!(sqlstate(&error), "53200", "{error:?}");
    let _second = server.pg().await;
    let _third = server.pg().await;
    let error = crate::support::connect(server.pg_config("skiff"))
        .await
        .expect_err("fourth connection refused");
    assert_eq!(sqlstate(&error), "53300", "{error:?}");
    // The session that hit the limits still works.
    let rows = simple_rows(&first, "SELECT count(*) FROM region")
        .await
        .expect("query");
    assert_eq!(rows[0][0].as_deref(), Some("5"));
    assert!(server.alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_counts_queries() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let options = Options {
        extra: vec!["--metrics-addr".into(), format!("127.0.0.1:{port}")],
        ..Options::default()
    };
    let server = Server::start(&data, options);
    let client = server.pg().await;
    simple_rows(&client, "SELECT count(*) FROM nation")
        .await
        .expect("query");
    let body = eventually(Duration::from_secs(10), "metrics", || async {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        stream.read_to_string(&mut body).ok()?;
        body.contains("skiff_queries_total").then_some(body)
    })
    .await;
    assert!(body.contains("status=\"finished\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_rejected() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let options = Options {
        env: vec![
            ("SKIFF_USER".into(), "alice".into()),
            ("SKIFF_PASSWORD".into(), "s3cret".into()),
        ],
        ..Options::default()
    };
    let server = Server::start(&data, options);
    let mut wrong = server.pg_config("alice");
    wrong.password("guess");
    let error = crate::support::connect(wrong)
        .await
        .expect_err("wrong password");
    assert_eq!(sqlstate(&error), "28P01", "{error:?}");
    let mut nobody = server.pg_config("mallory");
    nobody.password("s3cret");
    let error = crate::support::connect(nobody)
        .await
        .expect_err("unknown user");
    assert_eq!(sqlstate(&error), "28P01", "{error:?}");
    let mut right = server.pg_config("alice");
    right.password("s3cret");
    let client = crate::support::connect(right)
        .await
        .expect("right password");
    let rows = simple_rows(&client, "SELECT count(*) FROM region")
        .await
        .expect("query");
    assert_eq!(rows[0][0].as_deref(), Some("5"));
}

/// `skiff ctl` shows the system tables from a terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_lists_workers_and_queries_and_cancels() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let server = Server::start(&data, Options::default());
    let client = server.pg().await;
    simple_rows(&client, "SELECT count(*) FROM orders")
        .await
        .expect("query");
    let ctl = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_skiff"))
            .arg("ctl")
            .arg("--coordinator")
            .arg(server.flight.to_string())
            .args(["--format", "csv"])
            .args(args)
            .output()
            .expect("run skiff ctl")
    };
    let workers = ctl(&["workers"]);
    assert!(workers.status.success(), "{workers:?}");
    let text = String::from_utf8_lossy(&workers.stdout);
    let alive_workers = text
        .lines()
        .filter(|l| l.contains(",worker,") && l.contains(",alive,"))
        .count();
    assert_eq!(alive_workers, 2, "{text}");
    let queries = ctl(&["queries"]);
    assert!(queries.status.success(), "{queries:?}");
    let text = String::from_utf8_lossy(&queries.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("finished") && l.contains("FROM orders")),
        "{text}"
    );
    let cancel = ctl(&["cancel", "999999"]);
    assert!(!cancel.status.success());
    assert!(
        String::from_utf8_lossy(&cancel.stderr).contains("not running"),
        "{cancel:?}"
    );
}

/// `serve`'s children die with it (`PR_SET_PDEATHSIG`), which fires when
/// the *thread* that forked a child exits. Admin functions run
/// `block_in_place` on the coordinator's runtime, after which a runtime
/// thread may end (a blocking thread idle for 10 s): children forked from
/// it were SIGKILLed. They are forked from one thread that lives as long as
/// `serve` now: after such calls and the runtime's idle time, every node is
/// the one that started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_leave_every_child_of_serve_alive() {
    let server = Server::start(&dataset(Benchmark::Tpch, 0.01), Options::default());
    let client = server.pg().await;
    let nodes = "SELECT id, pid FROM skiff.workers WHERE state = 'alive' ORDER BY id";
    let before = simple_rows(&client, nodes).await.expect("skiff.workers");
    assert_eq!(before.len(), 3, "two workers and a memory node: {before:?}");
    for _ in 0..6 {
        simple_rows(&client, "SELECT skiff.clear_cache()")
            .await
            .expect("clear_cache");
        simple_rows(&client, "SELECT count(*) FROM lineitem")
            .await
            .expect("a query");
    }
    // Past tokio's keep-alive of idle blocking threads (10 s).
    tokio::time::sleep(Duration::from_secs(13)).await;
    let log = server.log_text();
    assert!(!log.contains("exited; restarting"), "log:\n{log}");
    let after = simple_rows(&client, nodes).await.expect("skiff.workers");
    assert_eq!(after, before, "log:\n{log}");
}
