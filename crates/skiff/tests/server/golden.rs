//! TPC-H answers through the front doors match DuckDB's golden answers.

use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use skiff_gen::Benchmark;
use skiff_testkit::{
    Expected, Row, compare, dataset, load_golden, queries, render_rows, repo_root, same_failure,
};

use crate::support::{Options, Server, partitioned_dataset, simple_rows, wait_for_workers};

/// Rows and column count of every statement of `sql`, sent one statement
/// per simple query.
pub(crate) async fn run_pg(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<(Vec<Row>, usize)>, String> {
    let mut results = Vec::new();
    for statement in skiff_engine::statement::split_statements(sql) {
        let messages = client
            .simple_query(statement)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let mut rows = Vec::new();
        let mut columns = 0;
        for message in messages {
            match message {
                tokio_postgres::SimpleQueryMessage::RowDescription(description) => {
                    columns = description.len();
                }
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    columns = row.len();
                    rows.push(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_string))
                            .collect(),
                    );
                }
                _ => {}
            }
        }
        results.push((rows, columns));
    }
    Ok(results)
}

/// Rows and column count of every statement of `sql` through Flight SQL.
async fn run_flight(
    client: &mut FlightSqlServiceClient<tonic::transport::Channel>,
    sql: &str,
) -> Result<Vec<(Vec<Row>, usize)>, String> {
    let mut results = Vec::new();
    for statement in skiff_engine::statement::split_statements(sql) {
        let info = client
            .execute(statement.to_string(), None)
            .await
            .map_err(|e| e.to_string())?;
        let columns = info
            .clone()
            .try_decode_schema()
            .map_err(|e| e.to_string())?
            .fields()
            .len();
        let mut batches = Vec::new();
        for endpoint in info.endpoint {
            let Some(ticket) = endpoint.ticket else {
                continue;
            };
            let stream = client.do_get(ticket).await.map_err(|e| e.to_string())?;
            batches.extend(
                stream
                    .try_collect::<Vec<_>>()
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        results.push((render_rows(&batches), columns));
    }
    Ok(results)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_through_flight_sql_matches_duckdb() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let server = Server::start(&data, Options::default());
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.flight))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = FlightSqlServiceClient::new(channel);
    let mut failures = Vec::new();
    let all = queries("tpch");
    for (query, sql) in &all {
        let outcome = check(query, run_flight(&mut client, sql).await);
        if let Err(reason) = outcome {
            failures.push(format!("{query}: {reason}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}/{} TPC-H queries through Flight SQL differ from DuckDB:\n{}\nserver log:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n"),
        server.log_text()
    );
}

/// Judge one TPC-H query file's results against its golden answers.
pub(crate) fn check(
    query: &str,
    results: Result<Vec<(Vec<Row>, usize)>, String>,
) -> Result<(), String> {
    check_in("tpch", query, results)
}

/// Judge one query file of `bench` (SF 0.01) against its golden answers.
pub(crate) fn check_in(
    bench: &str,
    query: &str,
    results: Result<Vec<(Vec<Row>, usize)>, String>,
) -> Result<(), String> {
    let golden_dir = repo_root().join(format!("tests/golden/{bench}/sf0.01"));
    match load_golden(&golden_dir, query)? {
        // DuckDB's answer is an error (a division by zero): skiff must fail
        // the same way.
        Expected::Error(duckdb) => match results {
            Ok(_) => Err(format!("DuckDB failed ({duckdb}) but skiff answered")),
            Err(skiff) if same_failure(&duckdb, &skiff) => Ok(()),
            Err(skiff) => Err(format!(
                "DuckDB failed ({duckdb}), skiff differently: {skiff}"
            )),
        },
        Expected::Answers(answers) => {
            let results = results.map_err(|e| format!("skiff failed: {e}"))?;
            answers.iter().try_for_each(|golden| {
                let (rows, columns) = results
                    .get(golden.statement - 1)
                    .ok_or_else(|| format!("no statement {}", golden.statement))?;
                compare(golden, rows.clone(), *columns)
                    .map_err(|e| format!("statement {}: {e}", golden.statement))
            })
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_through_postgres_matches_duckdb() {
    let data = dataset(Benchmark::Tpch, 0.01);
    let server = Server::start(&data, Options::default());
    let client = server.pg().await;
    suite_matches_duckdb(&server, &client, "tpch", "through PostgreSQL").await;
}

/// With `skiff.distribute = on`, TPC-H runs across three worker processes
/// (its plans are cut into stages whose tasks the workers run) and still
/// matches DuckDB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_distributed_over_three_workers_matches_duckdb() {
    let (server, client) = distributed_over_three(Benchmark::Tpch).await;
    let explained = run_pg(
        &client,
        "EXPLAIN SELECT l_returnflag, count(*) FROM lineitem GROUP BY 1",
    )
    .await
    .expect("explain");
    let text = format!("{explained:?}");
    assert!(
        text.contains("DistributedExec") && text.contains("tasks=3"),
        "no stages in {text}"
    );
    suite_matches_duckdb(&server, &client, "tpch", "distributed").await;
}

/// With `skiff.stage_checkpoints = all`, every stage output a consumer
/// reads is committed to the memory node's store first
/// (`skiff_node::checkpoints`); with `auto`, only those of stages that do
/// work which their consumer reads whole anyway (`stage_commits`; from
/// the start here, not after a second: these queries are short). The
/// answers match DuckDB's both ways, the store took the commits, and
/// `auto` commits fewer than `all`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_distributed_with_stage_checkpoints_matches_duckdb() {
    let (server, client) = distributed_over_three(Benchmark::Tpch).await;
    let memnode = simple_rows(
        &client,
        "SELECT address FROM skiff.workers WHERE role = 'memnode' AND state = 'alive'",
    )
    .await
    .expect("skiff.workers");
    let store = memnode
        .first()
        .and_then(|r| r[0].clone())
        .expect("a memory node");
    client
        .simple_query("SET skiff.stage_checkpoints_after_ms = 0")
        .await
        .expect("set");
    let mut commits = Vec::new();
    for mode in ["all", "auto"] {
        let before = skiff_flight::cache_stats(&store)
            .await
            .expect("cache stats");
        client
            .simple_query(&format!("SET skiff.stage_checkpoints = '{mode}'"))
            .await
            .expect("set");
        let name = format!("with stage checkpoints ({mode})");
        suite_matches_duckdb(&server, &client, "tpch", &name).await;
        let after = skiff_flight::cache_stats(&store)
            .await
            .expect("cache stats");
        println!(
            "{mode}: {} stage outputs committed",
            after.puts - before.puts
        );
        commits.push(after.puts - before.puts);
    }
    // `all`: each query's stages over three workers, a read of each
    // remote task's partitions at least; `auto`: the build sides and
    // aggregations among them.
    let (all, auto) = (commits[0], commits[1]);
    assert!(all >= 22, "{all} commits for 22 distributed queries");
    assert!(0 < auto && auto < all, "auto {auto}, all {all}");
    let refused = client
        .simple_query("SET skiff.stage_checkpoints = 'sometimes'")
        .await
        .expect_err("an unknown mode");
    let message = refused.as_db_error().map(|e| e.message().to_string());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("off, auto, all")),
        "{refused:?}"
    );
}

/// TPC-H on tables written by `skiff gen --partitions 8`, over three
/// workers with the default `skiff.distribute = auto`: queries over the
/// partitioned tables are distributed, each scan task runs on the owner of
/// the partitions it reads (EXPLAIN against `skiff.partitions`), and every
/// answer matches DuckDB's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_on_partitioned_tables_over_three_workers_matches_duckdb() {
    let (server, client) = over_three(&partitioned_dataset(Benchmark::Tpch, 8)).await;
    let map = simple_rows(
        &client,
        "SELECT partition, worker, tables FROM skiff.partitions WHERE partitions = 8",
    )
    .await
    .expect("skiff.partitions");
    assert_eq!(map.len(), 8, "{map:?}");
    let owner = |p: u32| -> String {
        map.iter()
            .find(|r| r[0].as_deref() == Some(&p.to_string()))
            .and_then(|r| r[1].clone())
            .expect("every partition has an owner")
    };
    let owners: std::collections::BTreeSet<String> = (0..8).map(owner).collect();
    assert_eq!(owners.len(), 3, "8 partitions over 3 workers: {map:?}");
    let tables = map[0][2].clone().unwrap_or_default();
    assert_eq!(tables, "customer,lineitem,orders,part,partsupp");

    let explained = run_pg(
        &client,
        "EXPLAIN SELECT l_returnflag, count(*) FROM lineitem GROUP BY 1",
    )
    .await
    .expect("explain");
    let rows = &explained[0].0;
    let text = format!("{rows:?}");
    assert!(text.contains("DistributedExec"), "not distributed: {text}");
    let placement = rows
        .iter()
        .find(|r| r[0].as_deref() == Some("placement"))
        .and_then(|r| r[1].clone())
        .expect("a placement row");
    let tasks: Vec<&str> = placement
        .lines()
        .filter(|l| l.trim_start().starts_with("task "))
        .collect();
    assert_eq!(tasks.len(), 3, "{placement}");
    let mut read = Vec::new();
    for task in tasks {
        // "task i: worker W (addr) partitions a,b,c"
        let worker = task
            .split("worker ")
            .nth(1)
            .and_then(|s| s.split(' ').next());
        let parts = task.rsplit("partitions ").next().unwrap_or_default();
        for p in parts.split(',').filter(|p| !p.is_empty()) {
            let p: u32 = p.parse().expect("a partition number");
            assert_eq!(Some(owner(p).as_str()), worker, "{placement}");
            read.push(p);
        }
    }
    read.sort_unstable();
    assert_eq!(read, (0..8).collect::<Vec<_>>(), "{placement}");
    suite_matches_duckdb(&server, &client, "tpch", "on partitioned tables").await;
    // skiff.queries says where each distributed query ran: its workers and
    // epoch, and its stages' tasks per worker (every worker of the query
    // runs a task of the lineitem scan at least).
    let said = simple_rows(
        &client,
        "SELECT decision, tasks FROM skiff.queries \
         WHERE sql LIKE '%lineitem%' AND state = 'finished'",
    )
    .await
    .expect("skiff.queries");
    let mut distributed = 0;
    for row in &said {
        let decision = row[0].as_deref().unwrap_or_default();
        let Some(workers) = decision.strip_prefix("distributed over workers ") else {
            continue;
        };
        distributed += 1;
        assert!(decision.contains("epoch"), "{row:?}");
        let tasks = row[1].as_deref().unwrap_or_default();
        assert!(tasks.contains(" stage"), "{row:?}");
        for worker in workers.split(' ').next().unwrap_or_default().split(',') {
            assert!(tasks.contains(&format!("worker {worker}: ")), "{row:?}");
        }
    }
    assert!(distributed > 0, "{said:?}");
    every_scan_file_counted(&client).await;
    workers_read_through_their_pools(&client).await;

    // EXPLAIN routes every stage as the query does when it starts: its
    // summary is the run's `tasks`.
    let join = "SELECT o_orderpriority, count(*) FROM orders JOIN lineitem \
                ON o_orderkey = l_orderkey GROUP BY 1";
    let placement = explain_row(&client, join, "placement").await;
    assert!(placement.contains("stage 1: workers "), "{placement}");
    let planned = placement
        .lines()
        .find_map(|l| l.strip_prefix("tasks: "))
        .expect("a tasks line")
        .to_string();
    run_pg(&client, join).await.expect("the join");
    let ran = simple_rows(
        &client,
        &format!("SELECT tasks FROM skiff.queries WHERE sql = '{join}' AND state = 'finished'"),
    )
    .await
    .expect("skiff.queries");
    assert_eq!(ran[0][0].as_deref(), Some(planned.as_str()), "{placement}");

    // Partitioned joins even at SF 0.01 (no build side is small enough to
    // broadcast): joins on the partition key of co-located tables run in
    // the stage of their scans, on the partitions' owners, without a
    // shuffle; every other join repartitions both sides.
    partitioned_joins_only(&client).await;
    let plan = explain_row(&client, join, "distributed_plan").await;
    assert!(plan.contains("HashJoinExec: mode=Partitioned"), "{plan}");
    assert_eq!(
        plan.matches("NetworkShuffleExec").count(),
        1,
        "only the group-by shuffles: {plan}"
    );
    suite_matches_duckdb(&server, &client, "tpch", "with partitioned joins").await;

    // `off` keeps one worker, and runs the co-located joins on Skiff's
    // pipeline executor.
    client
        .simple_query("SET skiff.distribute = 'off'")
        .await
        .expect("set");
    let explained = run_pg(&client, "EXPLAIN SELECT count(*) FROM lineitem")
        .await
        .expect("explain");
    assert!(!format!("{explained:?}").contains("DistributedExec"));
    suite_matches_duckdb(&server, &client, "tpch", "on one worker").await;
}

/// TPC-DS on tables written by `skiff gen --partitions 8` (fact tables and
/// item by item key), over three workers with `skiff.distribute = auto`,
/// then again with every join partitioned (slow: run with
/// `SKIFF_SLOW_TESTS=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_on_partitioned_tables_over_three_workers_matches_duckdb() {
    if !skiff_testkit::slow_tests("tpcds on partitioned tables") {
        return;
    }
    let (server, client) = over_three(&partitioned_dataset(Benchmark::Tpcds, 8)).await;
    suite_matches_duckdb(&server, &client, "tpcds", "on partitioned tables").await;
    // Every join partitioned: the fact tables' joins on the item key run
    // co-located, every other one repartitions both sides.
    partitioned_joins_only(&client).await;
    suite_matches_duckdb(&server, &client, "tpcds", "with partitioned joins").await;
}

/// The text of row `name` (`placement`, `distributed_plan`, ...) of
/// `EXPLAIN sql`.
async fn explain_row(client: &tokio_postgres::Client, sql: &str, name: &str) -> String {
    let explained = run_pg(client, &format!("EXPLAIN {sql}"))
        .await
        .expect("explain");
    explained[0]
        .0
        .iter()
        .find(|r| r[0].as_deref() == Some(name))
        .and_then(|r| r[1].clone())
        .unwrap_or_else(|| panic!("no {name} row in {explained:?}"))
}

/// No build side is small enough to broadcast: every join of the session
/// is partitioned, even at SF 0.01.
async fn partitioned_joins_only(client: &tokio_postgres::Client) {
    client
        .batch_execute(
            "SET datafusion.optimizer.hash_join_single_partition_threshold = 0; \
             SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0",
        )
        .await
        .expect("set");
}

/// `skiff.queries` counts the files a distributed query's scans finished:
/// a query that reads every row of lineitem counts all its files, and no
/// finished query more than its scans have (a join whose build side is
/// empty never reads its probe side's files). The workers' last counts
/// come with their next heartbeats, after the query ended.
async fn every_scan_file_counted(client: &tokio_postgres::Client) {
    let full = "SELECT count(*) FROM lineitem WHERE l_comment LIKE '%a%'";
    run_pg(client, full).await.expect("a full scan");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let rows = simple_rows(
            client,
            "SELECT sql, scan_files_done, scan_files_total, progress FROM skiff.queries \
             WHERE decision LIKE 'distributed over%' AND state = 'finished'",
        )
        .await
        .expect("skiff.queries");
        let number = |v: &Option<String>| v.as_deref().and_then(|t| t.parse::<u64>().ok());
        let sane = rows.iter().all(|r| {
            let (done, total) = (number(&r[1]), number(&r[2]));
            total.is_some_and(|t| t > 0)
                && done.is_some_and(|d| Some(d) <= total)
                && r[3].as_deref() == Some("1")
        });
        assert!(sane, "(sql, done, total, progress): {rows:?}");
        let whole = rows
            .iter()
            .any(|r| r[0].as_deref() == Some(full) && r[1] == r[2]);
        if whole {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the full scan's files are not all counted: {rows:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The queries so far read through the three workers' buffer pools;
/// `skiff.clear_cache()` empties them all and answers the bytes they held.
async fn workers_read_through_their_pools(client: &tokio_postgres::Client) {
    let totals = "SELECT count(DISTINCT worker), sum(hits), sum(bytes) FROM skiff.cache";
    let number = |rows: &[Vec<Option<String>>], column: usize| -> u64 {
        rows.first()
            .and_then(|r| r[column].as_deref())
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    };
    let rows = simple_rows(client, totals).await.expect("skiff.cache");
    assert_eq!(number(&rows, 0), 3, "pools of every worker: {rows:?}");
    assert!(number(&rows, 1) > 0, "no block was read twice: {rows:?}");
    let held = number(&rows, 2);
    assert!(held > 0, "{rows:?}");
    let freed = simple_rows(client, "SELECT skiff.clear_cache()")
        .await
        .expect("skiff.clear_cache()");
    assert_eq!(number(&freed, 0), held);
    let rows = simple_rows(client, totals).await.expect("skiff.cache");
    assert_eq!(number(&rows, 2), 0, "{rows:?}");
}

/// Every query of `bench` through `client` matches its golden answers.
pub(crate) async fn suite_matches_duckdb(
    server: &Server,
    client: &tokio_postgres::Client,
    bench: &str,
    how: &str,
) {
    // One session: one query at a time.
    suite_in_batches_matches_duckdb(server, std::slice::from_ref(client), bench, how).await;
}

/// Every query of `bench` matches its golden answers when the queries are
/// sent as many at a time as there are `sessions`, one per session (when
/// the sessions batch, `skiff.batch_window_ms` and `skiff.batch_max_queries`
/// at most their number, each batch's pipelines run grouped).
pub(crate) async fn suite_in_batches_matches_duckdb(
    server: &Server,
    sessions: &[tokio_postgres::Client],
    bench: &str,
    how: &str,
) {
    let mut failures = Vec::new();
    let all = queries(bench);
    for batch in all.chunks(sessions.len()) {
        let runs = batch
            .iter()
            .zip(sessions)
            .map(|((_, sql), session)| run_pg(session, sql));
        let results = futures::future::join_all(runs).await;
        for ((query, _), result) in batch.iter().zip(results) {
            if let Err(reason) = check_in(bench, query, result) {
                failures.push(format!("{query}: {reason}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}/{} {bench} queries {how} differ from DuckDB:\n{}\nserver log:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n"),
        server.log_text()
    );
}

/// The same for TPC-DS, distributed over three workers (slow: run with
/// `SKIFF_SLOW_TESTS=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_distributed_over_three_workers_matches_duckdb() {
    if !skiff_testkit::slow_tests("tpcds distributed") {
        return;
    }
    let (server, client) = distributed_over_three(Benchmark::Tpcds).await;
    suite_matches_duckdb(&server, &client, "tpcds", "distributed").await;
}

/// A server over `bench` at SF 0.01 with three live workers, and a client
/// whose session distributes every query.
async fn distributed_over_three(bench: Benchmark) -> (Server, tokio_postgres::Client) {
    let (server, client) = over_three(&dataset(bench, 0.01)).await;
    client
        .simple_query("SET skiff.distribute = 'on'")
        .await
        .expect("set");
    (server, client)
}

/// A server over the tables of `data` with three live workers, and a
/// client.
async fn over_three(data: &std::path::Path) -> (Server, tokio_postgres::Client) {
    let server = Server::start(
        data,
        Options {
            workers: Some(3),
            ..Options::default()
        },
    );
    let client = server.pg().await;
    wait_for_workers(&client, 3).await;
    (server, client)
}
