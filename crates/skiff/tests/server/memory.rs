//! Tables in memory nodes (pipeline groups, the data side): loaded with
//! `skiff.load_to_memory`, read by the workers' scans from the memory
//! nodes instead of storage, with the same answers as DuckDB's; a memory
//! node too small refuses a load whole, one that dies leaves its tables to
//! storage without a wrong answer; a selective scan is sent only the chunks
//! its predicate does not rule out.

use std::time::{Duration, Instant};

use skiff_gen::Benchmark;
use skiff_testkit::dataset;

use crate::golden::{suite_in_batches_matches_duckdb, suite_matches_duckdb};
use crate::support::{
    Options, Server, partitioned_dataset, simple_rows, sqlstate, wait_for_workers,
};

const TPCH_TABLES: [&str; 8] = [
    "region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem",
];

/// The sum of metric `name` over an `EXPLAIN ANALYZE` answer's text.
fn metric_sum(text: &str, name: &str) -> u64 {
    text.split(&format!("{name}="))
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

/// The one number a query answers.
/// The live memory node's process id.
async fn memnode_pid(client: &tokio_postgres::Client) -> i32 {
    simple_rows(
        client,
        "SELECT pid FROM skiff.workers WHERE role = 'memnode' AND state = 'alive'",
    )
    .await
    .expect("skiff.workers")[0][0]
        .as_deref()
        .and_then(|p| p.parse().ok())
        .expect("pid")
}

async fn number(client: &tokio_postgres::Client, sql: &str) -> i64 {
    let rows = simple_rows(client, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    rows.first()
        .and_then(|r| r[0].as_deref())
        .unwrap_or("0")
        .parse()
        .unwrap_or_else(|e| panic!("{sql}: {rows:?}: {e}"))
}

/// Chunks the memory nodes sent of `table`'s `column` so far.
async fn served(client: &tokio_postgres::Client, table: &str, column: &str) -> i64 {
    number(
        client,
        &format!(
            "SELECT coalesce(sum(served_chunks), 0) FROM skiff.memory_tables \
             WHERE \"table\" = '{table}' AND \"column\" = '{column}'"
        ),
    )
    .await
}

/// `n` sessions that send queries in batches of at most `n` (waiting at
/// most 3 s for one another), run on one worker, reading every column
/// from the memory nodes.
async fn batching_sessions(server: &Server, n: usize) -> Vec<tokio_postgres::Client> {
    let mut sessions = Vec::new();
    for _ in 0..n {
        let session = server.pg().await;
        for sql in [
            "SET skiff.buffer_pool = false".to_string(),
            "SET skiff.distribute = off".to_string(),
            "SET skiff.batch_window_ms = 3000".to_string(),
            format!("SET skiff.batch_max_queries = {n}"),
        ] {
            session.simple_query(&sql).await.expect("set");
        }
        sessions.push(session);
    }
    sessions
}

/// Bytes the memory nodes sent of `columns` of `table` so far, together.
async fn served_bytes_of(client: &tokio_postgres::Client, table: &str, columns: &[&str]) -> i64 {
    let names: Vec<String> = columns.iter().map(|c| format!("'{c}'")).collect();
    number(
        client,
        &format!(
            "SELECT coalesce(sum(served_bytes), 0) FROM skiff.memory_tables \
             WHERE \"table\" = '{table}' AND \"column\" IN ({})",
            names.join(", ")
        ),
    )
    .await
}

/// Chunks the memory nodes sent of each of `columns` of table `li`.
async fn served_all(client: &tokio_postgres::Client, columns: &[&str]) -> Vec<i64> {
    let mut now = Vec::new();
    for column in columns {
        now.push(served(client, "li", column).await);
    }
    now
}

/// TPC-H in hash partitions over two memory nodes, each holding half of
/// every partitioned table, through small chunks and the emulated link:
/// every answer matches DuckDB's with the workers' pools off (every column
/// from the memory nodes) and again after a partial reload with the pools
/// on; a query reading a column once fetches each of its chunks exactly
/// once; bad calls are refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_through_memory_nodes_matches_duckdb() {
    let server = Server::start(
        &partitioned_dataset(Benchmark::Tpch, 8),
        Options {
            extra: [
                "--memory-nodes",
                "2",
                "--chunk-size",
                "64K",
                "--link-bandwidth",
                "10Gbit",
            ]
            .map(String::from)
            .to_vec(),
            ..Options::default()
        },
    );
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    for table in TPCH_TABLES {
        let bytes = number(&client, &format!("SELECT skiff.load_to_memory('{table}')")).await;
        assert!(bytes > 0, "{table}: {bytes} bytes loaded");
    }
    let lineitem = simple_rows(
        &client,
        "SELECT count(DISTINCT node), sum(chunks), sum(rows), \
         bool_and(node_bytes <= node_capacity) FROM skiff.memory_tables \
         WHERE \"table\" = 'lineitem'",
    )
    .await
    .expect("skiff.memory_tables");
    assert_eq!(lineitem[0][0].as_deref(), Some("2"), "{lineitem:?}");
    assert_eq!(lineitem[0][3].as_deref(), Some("t"), "{lineitem:?}");
    let rows = number(&client, "SELECT count(*) FROM lineitem").await;
    let held_rows: i64 = lineitem[0][2].as_deref().unwrap_or("0").parse().unwrap();
    assert_eq!(
        held_rows,
        rows * 16,
        "every row of every column: {lineitem:?}"
    );

    // Pools off: each scan reads every column from the memory nodes, and
    // each chunk of a column read once is fetched once.
    client
        .simple_query("SET skiff.buffer_pool = false")
        .await
        .expect("set");
    let chunks = number(
        &client,
        "SELECT sum(chunks) FROM skiff.memory_tables \
         WHERE \"table\" = 'lineitem' AND \"column\" = 'l_quantity'",
    )
    .await;
    assert!(chunks > 8, "64 KiB chunks: {chunks}");
    // Asked for as each row group is read, and ahead of it: either way
    // every chunk crosses once.
    for depth in [0, 1, 4] {
        client
            .simple_query(&format!("SET skiff.prefetch_depth = {depth}"))
            .await
            .expect("set");
        let before = served(&client, "lineitem", "l_quantity").await;
        let sum = "SELECT CAST(sum(l_quantity) AS BIGINT) FROM lineitem";
        number(&client, sum).await;
        let after = served(&client, "lineitem", "l_quantity").await;
        assert_eq!(
            after - before,
            chunks,
            "each chunk fetched once, depth {depth}; log:\n{}",
            server.log_text()
        );
    }
    // The same over a copy in row groups of 1000 rows, where scans do ask
    // ahead (lineitem's files here are one row group each).
    for sql in [
        "SET datafusion.execution.parquet.max_row_group_size = 1000",
        "CREATE TABLE small_groups AS SELECT l_orderkey, l_quantity FROM lineitem",
        "SELECT skiff.load_to_memory('small_groups')",
    ] {
        client.simple_query(sql).await.expect(sql);
    }
    let chunks = number(
        &client,
        "SELECT sum(chunks) FROM skiff.memory_tables \
         WHERE \"table\" = 'small_groups' AND \"column\" = 'l_quantity'",
    )
    .await;
    assert!(chunks >= 60, "a chunk per row group at least: {chunks}");
    let total = number(
        &client,
        "SELECT CAST(sum(l_quantity) AS BIGINT) FROM lineitem",
    )
    .await;
    for depth in [0, 1, 4] {
        client
            .simple_query(&format!("SET skiff.prefetch_depth = {depth}"))
            .await
            .expect("set");
        let before = served(&client, "small_groups", "l_quantity").await;
        let sum = "SELECT CAST(sum(l_quantity) AS BIGINT) FROM small_groups";
        assert_eq!(number(&client, sum).await, total);
        let after = served(&client, "small_groups", "l_quantity").await;
        assert_eq!(
            after - before,
            chunks,
            "each chunk fetched once, depth {depth}"
        );
    }
    // Row groups whose fetch started ahead of their turn show on the scan.
    let explained = simple_rows(
        &client,
        "EXPLAIN ANALYZE SELECT CAST(sum(l_quantity) AS BIGINT) FROM small_groups",
    )
    .await
    .expect("explain analyze");
    let text = format!("{explained:?}");
    let ahead = metric_sum(&text, "memory_node_prefetched");
    assert!(ahead > 0, "no row group fetched ahead: {text}");
    client
        .simple_query("SET skiff.prefetch_depth = 2")
        .await
        .expect("set");

    // A selective predicate on a column in order within each file: the
    // memory nodes send only the rows of the zones whose min/max it does
    // not rule out, and the answer is the one read whole.
    let low = number(&client, "SELECT max(l_orderkey) / 10 FROM lineitem").await;
    let selective = format!(
        "SELECT count(*), CAST(sum(l_quantity) AS BIGINT), min(l_comment) FROM lineitem \
         WHERE l_orderkey BETWEEN {low} AND {low} + 100"
    );
    let mut answers = Vec::new();
    let mut sent = Vec::new();
    for pruning in [true, false] {
        client
            .simple_query(&format!("SET skiff.chunk_pruning = {pruning}"))
            .await
            .expect("set");
        let before = served_bytes_of(&client, "lineitem", &["l_quantity", "l_comment"]).await;
        answers.push(simple_rows(&client, &selective).await.expect("selective"));
        let after = served_bytes_of(&client, "lineitem", &["l_quantity", "l_comment"]).await;
        sent.push(after - before);
    }
    assert_eq!(answers[0], answers[1], "pruned and whole answers differ");
    assert!(
        answers[0][0][0].as_deref().is_some_and(|n| n != "0"),
        "the range holds rows: {answers:?}"
    );
    assert!(
        sent[0] * 2 < sent[1],
        "bytes sent pruned {} against whole {}",
        sent[0],
        sent[1],
    );
    client
        .simple_query("SET skiff.chunk_pruning = true")
        .await
        .expect("set");
    let explained = simple_rows(&client, &format!("EXPLAIN ANALYZE {selective}"))
        .await
        .expect("explain analyze");
    let text = format!("{explained:?}");
    let pruned = metric_sum(&text, "memory_node_rows_pruned");
    assert!(pruned > 0, "no rows pruned: {text}");

    suite_matches_duckdb(&server, &client, "tpch", "through memory nodes").await;
    // Four at a time in batches, pipelines grouped.
    let sessions = batching_sessions(&server, 4).await;
    suite_in_batches_matches_duckdb(&server, &sessions, "tpch", "in batches").await;
    let log = server.log_text();
    assert!(
        log.matches("pipeline group").count() >= 5,
        "batches of TPC-H queries share columns; log:\n{log}"
    );
    for table in TPCH_TABLES {
        let read = number(
            &client,
            &format!(
                "SELECT sum(served_chunks) FROM skiff.memory_tables WHERE \"table\" = '{table}'"
            ),
        )
        .await;
        assert!(read > 0, "nothing of {table} was read from memory");
    }

    // Two columns of orders only: its scans read the rest from storage,
    // and with the pools on, from them once warm.
    let held = number(
        &client,
        "SELECT sum(bytes) FROM skiff.memory_tables WHERE \"table\" = 'orders'",
    )
    .await;
    let freed = number(&client, "SELECT skiff.unload_from_memory('orders')").await;
    assert_eq!(freed, held);
    let some = number(
        &client,
        "SELECT skiff.load_to_memory('orders', 'o_orderdate', 'o_orderkey')",
    )
    .await;
    assert!(0 < some && some < held, "{some} of {held}");
    let columns = simple_rows(
        &client,
        "SELECT DISTINCT \"column\" FROM skiff.memory_tables \
         WHERE \"table\" = 'orders' ORDER BY 1",
    )
    .await
    .expect("skiff.memory_tables");
    assert_eq!(
        columns,
        vec![
            vec![Some("o_orderdate".into())],
            vec![Some("o_orderkey".into())]
        ]
    );
    client
        .simple_query("SET skiff.buffer_pool = true")
        .await
        .expect("set");
    suite_matches_duckdb(&server, &client, "tpch", "partly in memory, pools on").await;

    for (sql, why) in [
        ("SELECT skiff.load_to_memory('nope')", "no table nope"),
        (
            "SELECT skiff.load_to_memory('lineitem', 'nope')",
            "has no column nope",
        ),
        (
            "SELECT skiff.load_to_memory('skiff.workers')",
            "not a table of Parquet files",
        ),
        (
            "SELECT skiff.unload_from_memory('a', 'b')",
            "unload_from_memory('table')",
        ),
    ] {
        let error = client.simple_query(sql).await.expect_err(sql);
        assert_eq!(sqlstate(&error), "22023", "{sql}: {error:?}");
        let text = error.as_db_error().map(|e| e.message().to_string());
        assert!(
            text.as_deref().is_some_and(|t| t.contains(why)),
            "{sql}: {text:?}"
        );
    }
}

/// `skiff memnode calibrate` on a corpus of `fragments` over 8192 rows,
/// for two offload threads, its models written to `path`.
fn calibrate(path: &std::path::Path, fragments: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args([
            "memnode",
            "calibrate",
            "--rows",
            "8192",
            "--offload-threads",
            "2",
        ])
        .args(["--fragments", fragments, "--out"])
        .arg(path)
        .output()
        .expect("skiff memnode calibrate")
}

/// Models from a small calibration at `path`; what it printed.
fn calibrated(path: &std::path::Path) -> String {
    let trained = calibrate(path, "20");
    let said = String::from_utf8_lossy(&trained.stdout).to_string();
    assert!(
        trained.status.success(),
        "{said}\n{}",
        String::from_utf8_lossy(&trained.stderr)
    );
    said
}

/// A server whose memory node runs fragments on two threads with the
/// models at `models`.
fn offloading_server(data: &std::path::Path, models: &std::path::Path) -> Server {
    Server::start(
        data,
        Options {
            extra: vec![
                "--offload-threads".to_string(),
                "2".to_string(),
                "--offload-models".to_string(),
                models.display().to_string(),
            ],
            ..Options::default()
        },
    )
}

/// The particle data set (the SmartNIC paper's) in a memory node: the
/// paper's case studies and the bench's kinds of random fragment give the
/// same answer pushed back, offloaded, decided by the node's models, and
/// with the aggregation on the node or not (the rows kept are compared
/// exactly, the aggregates' sums by their integers and extremes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn particles_answer_alike_in_every_offload_mode() {
    let models = tempfile::tempdir().expect("a directory for the models");
    let path = models.path().join("models.json");
    calibrated(&path);
    let server = offloading_server(&dataset(Benchmark::Particles, 0.01), &path);
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    let bytes = number(&client, "SELECT skiff.load_to_memory('particles')").await;
    assert!(bytes > 0, "particles: {bytes} bytes loaded");
    let predicates = [
        "x >= 0.7 AND y < 0.3 AND z <= 0.1",
        "x >= 0.5 AND y < 0.6 AND z <= 0.613",
        "x BETWEEN 0.2 AND 0.35 AND y BETWEEN 0.1 AND 0.9",
        "charge = 1 AND y >= 0.8",
        "vx > 1.5 OR mass > 50",
        "x * vx + y * vy > 0.5 OR id % 97 = 0",
        "mass > 0.5",
    ];
    let mut compared = 0;
    for predicate in predicates {
        let queries = [
            format!("SELECT id FROM particles WHERE {predicate} ORDER BY id"),
            format!(
                "SELECT count(*), sum(id), min(x), max(vy), sum(charge) \
                 FROM particles WHERE {predicate}"
            ),
            format!(
                "SELECT charge, count(*), sum(id), max(mass) FROM particles \
                 WHERE {predicate} GROUP BY charge ORDER BY charge"
            ),
        ];
        for sql in &queries {
            let mut answers = Vec::new();
            for (mode, aggregations) in [
                ("never", true),
                ("always", false),
                ("always", true),
                ("auto", false),
                ("auto", true),
            ] {
                for set in [
                    format!("SET skiff.offload = {mode}"),
                    format!("SET skiff.offload_aggregations = {aggregations}"),
                ] {
                    client.simple_query(&set).await.expect("set");
                }
                let rows = simple_rows(&client, sql).await.expect(sql);
                answers.push((mode, aggregations, rows));
            }
            let (_, _, first) = &answers[0];
            assert!(!first.is_empty(), "{sql}");
            for (mode, aggregations, rows) in &answers[1..] {
                assert_eq!(rows, first, "{sql} in {mode} (aggregations {aggregations})");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, predicates.len() * 3 * 4);
    let offloaded = number(
        &client,
        "SELECT count(*) FROM skiff.memory_fragments WHERE offloaded",
    )
    .await;
    assert!(offloaded > 0, "nothing offloaded");
}

/// Fragments (a scan, its filter and projection, perhaps aggregated)
/// offloaded to the memory node holding their table: `EXPLAIN ANALYZE` shows them offloaded, every
/// TPC-H answer equals DuckDB's; with `never` nothing is offered; with
/// `auto` the node decides by the cost models `skiff memnode calibrate`
/// trained, the same answer, its predictions in `EXPLAIN ANALYZE`,
/// `skiff.memory_fragments` and `skiff.queries`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_offloaded_to_the_memory_node_matches_duckdb() {
    let models = tempfile::tempdir().expect("a directory for the models");
    let path = models.path().join("models.json");
    // Too small a corpus is refused; a small one trains models.
    let refused = calibrate(&path, "3");
    assert!(!refused.status.success() && !path.exists());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--fragments"));
    let said = calibrated(&path);
    assert!(
        said.contains("models saved") && said.contains("held out"),
        "{said}"
    );
    let server = offloading_server(&dataset(Benchmark::Tpch, 0.01), &path);
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    for table in TPCH_TABLES {
        let bytes = number(&client, &format!("SELECT skiff.load_to_memory('{table}')")).await;
        assert!(bytes > 0, "{table}: {bytes} bytes loaded");
    }
    let selective = "SELECT count(*), CAST(sum(l_extendedprice * l_discount) AS BIGINT) \
                     FROM lineitem WHERE l_quantity < 5 AND l_discount > 0.05";
    let mut answers = Vec::new();
    for mode in ["never", "always", "auto"] {
        client
            .simple_query(&format!("SET skiff.offload = {mode}"))
            .await
            .expect("set");
        answers.push(simple_rows(&client, selective).await.expect("selective"));
        let explained = simple_rows(&client, &format!("EXPLAIN ANALYZE {selective}"))
            .await
            .expect("explain analyze");
        let text = format!("{explained:?}");
        let offloaded = metric_sum(&text, "fragments_offloaded");
        match mode {
            "never" => assert!(!text.contains("OffloadExec"), "{text}"),
            "always" => assert!(offloaded > 0, "nothing offloaded: {text}"),
            _ => {
                // Decided either way, by predictions of both paths.
                let decided = offloaded + metric_sum(&text, "fragments_pushed_back");
                assert!(decided > 0, "nothing decided: {text}");
                assert!(text.contains("fragment_predicted_push_back"), "{text}");
            }
        }
    }
    assert_eq!(answers[0], answers[1], "offloaded and local answers differ");
    assert_eq!(answers[0], answers[2], "decided and local answers differ");
    let predicted = number(
        &client,
        "SELECT count(*) FROM skiff.memory_fragments \
         WHERE mode = 'auto' AND predicted_offload_ms > 0 AND predicted_push_back_ms > 0 \
         AND query_id IS NOT NULL",
    )
    .await;
    assert!(predicted > 0, "no predictions recorded");
    let described = simple_rows(
        &client,
        "SELECT offload FROM skiff.queries WHERE offload LIKE '%predicted%'",
    )
    .await
    .expect("skiff.queries");
    assert!(!described.is_empty(), "skiff.queries names no decision");
    assert!(
        answers[0][0][0].as_deref().is_some_and(|n| n != "0"),
        "the filter keeps rows: {answers:?}"
    );
    // The node's own record of the offloaded runs: rows estimated, kept.
    let recorded = simple_rows(
        &client,
        "SELECT count(*), sum(rows), sum(estimated_rows), sum(estimation_ms) \
         FROM skiff.memory_fragments WHERE offloaded",
    )
    .await
    .expect("skiff.memory_fragments");
    let number = |i: usize| -> f64 {
        recorded[0][i]
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        number(0) >= 2.0 && number(1) > 0.0 && number(2) > 0.0 && number(3) > 0.0,
        "{recorded:?}"
    );
    // Every TPC-H query: decided (mixed), then all offered fragments run
    // on the node, aggregations' partial halves included.
    suite_matches_duckdb(&server, &client, "tpch", "decided").await;
    client
        .simple_query("SET skiff.offload = always")
        .await
        .expect("set");
    suite_matches_duckdb(&server, &client, "tpch", "offloaded").await;
    let log = server.log_text();
    assert!(log.contains("fragment offloaded"), "log:\n{log}");
    // No node's rows were refused for their types (partial states as the
    // worker's own) and no node failed a fragment.
    assert!(
        !log.contains("rows unlike") && !log.contains("fragment lost"),
        "log:\n{log}"
    );
    let pricing = "EXPLAIN ANALYZE SELECT l_returnflag, sum(l_quantity), avg(l_discount), \
                   count(*) FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' \
                   GROUP BY l_returnflag";
    // With aggregations (the default) the node runs the partial half;
    // without, the scan and its filter alone.
    for aggregations in [true, false] {
        client
            .simple_query(&format!("SET skiff.offload_aggregations = {aggregations}"))
            .await
            .expect("set");
        let explained = format!(
            "{:?}",
            simple_rows(&client, pricing).await.expect("explain")
        );
        assert_eq!(
            explained.contains("partial aggregation"),
            aggregations,
            "{explained}"
        );
        assert!(
            metric_sum(&explained, "fragments_offloaded") > 0,
            "{explained}"
        );
    }

    // The memory node SIGKILLed while offloaded queries run: every answer
    // is still right, the fragments the node no longer answers run on the
    // workers from storage.
    client
        .simple_query("SET skiff.offload = always")
        .await
        .expect("set");
    let pid = memnode_pid(&client).await;
    let expected = &answers[0];
    let reading = async {
        let until = Instant::now() + Duration::from_secs(3);
        let mut count = 0;
        while Instant::now() < until {
            let got = simple_rows(&client, selective).await.expect("an answer");
            assert_eq!(&got, expected, "answer {count} around the kill");
            count += 1;
        }
        count
    };
    let killing = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    };
    let (read, ()) = tokio::join!(reading, killing);
    assert!(read > 1, "{read} answers");
    let log = server.log_text();
    assert!(
        log.contains("running it here") || log.contains("offloaded fragment lost"),
        "no fragment fell back to storage; log:\n{log}"
    );
}

/// A load that does not fit a memory node is refused whole (the table
/// stays on storage); a memory node SIGKILLed while queries read from it,
/// in grouped batches, costs no answer: reads fall back to storage, the coordinator takes its
/// files out of the routes, and `serve`'s restarted node loads its
/// `--preload` table again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_node_too_small_or_killed_leaves_every_answer_right() {
    let server = Server::start(
        &dataset(Benchmark::Tpch, 0.01),
        Options {
            extra: ["--table-memory", "4M", "--preload", "orders"]
                .map(String::from)
                .to_vec(),
            ..Options::default()
        },
    );
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    let error = client
        .simple_query("SELECT skiff.load_to_memory('lineitem')")
        .await
        .expect_err("lineitem does not fit 4 MiB");
    assert_eq!(sqlstate(&error), "53000", "{error:?}");
    let text = format!("{error:?}");
    assert!(text.contains("does not fit"), "{text}");
    let held = number(
        &client,
        "SELECT count(*) FROM skiff.memory_tables WHERE \"table\" = 'lineitem'",
    )
    .await;
    assert_eq!(held, 0, "nothing of a refused load is held");

    let sql = "SELECT o_orderpriority, count(*), sum(o_totalprice) FROM orders \
               GROUP BY 1 ORDER BY 1";
    let expected = simple_rows(&client, sql).await.expect("from storage");
    assert_eq!(expected.len(), 5);
    // Loaded as operators do, from a terminal.
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
    let loaded = ctl(&["load-to-memory", "orders"]);
    let said = String::from_utf8_lossy(&loaded.stdout);
    assert!(loaded.status.success(), "{loaded:?}");
    assert!(
        said.starts_with("orders: ") && said.contains(" bytes in the memory nodes"),
        "{said}"
    );
    let listed = ctl(&["memory-tables"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(
        listed.lines().filter(|l| l.contains(",orders,")).count(),
        9,
        "a row per column of orders: {listed}"
    );
    client
        .simple_query("SET skiff.buffer_pool = false")
        .await
        .expect("set");
    assert_eq!(
        simple_rows(&client, sql).await.expect("from memory"),
        expected
    );
    assert!(served(&client, "orders", "o_totalprice").await > 0);

    let pid = memnode_pid(&client).await;
    // Queries from two clients while the node dies under them, paired in
    // batches whenever both are waiting (their scans share one group
    // cache, whose fetches then fail together).
    let other = server.pg().await;
    other
        .simple_query("SET skiff.buffer_pool = false")
        .await
        .expect("set");
    for session in [&client, &other] {
        for sql in [
            "SET skiff.batch_window_ms = 200",
            "SET skiff.batch_max_queries = 2",
        ] {
            session.simple_query(sql).await.expect(sql);
        }
    }
    let reading = async {
        let until = Instant::now() + Duration::from_secs(4);
        let mut answers = 0;
        while Instant::now() < until {
            let got = simple_rows(&other, sql).await.expect("an answer");
            assert_eq!(got, expected, "answer {answers} while the node died");
            answers += 1;
        }
        answers
    };
    let killing = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let mut answers = 0;
        for _ in 0..5 {
            let got = simple_rows(&client, sql).await.expect("an answer");
            assert_eq!(got, expected, "answer {answers} after the kill");
            answers += 1;
        }
        answers
    };
    let (read, after) = tokio::join!(reading, killing);
    assert!(read > 0 && after == 5);
    assert!(
        server.log_text().contains("pipeline group"),
        "queries of the two clients ran grouped; log:\n{}",
        server.log_text()
    );
    client
        .simple_query("SET skiff.batch_window_ms = 0")
        .await
        .expect("set");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.log_text().contains("memory node lost") {
        assert!(Instant::now() < deadline, "log:\n{}", server.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Reads did meet the dead node (and went to storage), before the
    // coordinator took its files out of the routes.
    assert!(
        server.log_text().contains("reading storage"),
        "log:\n{}",
        server.log_text()
    );
    assert_eq!(simple_rows(&client, sql).await.expect("after"), expected);
    // `serve` restarts the node; registering, it asks for orders again
    // (`--preload`), and reads come from it once more.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(simple_rows(&client, sql).await.expect("later"), expected);
        if served(&client, "orders", "o_totalprice").await > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "log:\n{}", server.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(server.log_text().contains("preloaded"));
}

/// Queries sent at once in one batch (`skiff.batch_window_ms`) run on one
/// worker with their pipelines grouped by the columns they share: each
/// answer is the one it has alone, and each chunk of a column several of
/// them read crosses from the memory node once for the batch (the node's
/// own counters), where alone every query fetches it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_fetches_each_shared_chunk_once() {
    let server = Server::start(
        &dataset(Benchmark::Tpch, 0.01),
        Options {
            extra: ["--chunk-size", "64K"].map(String::from).to_vec(),
            ..Options::default()
        },
    );
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    for sql in [
        "SET datafusion.execution.parquet.max_row_group_size = 2000",
        "CREATE TABLE li AS SELECT l_orderkey, l_quantity, l_extendedprice, l_returnflag \
         FROM lineitem",
        "SELECT skiff.load_to_memory('li')",
    ] {
        client.simple_query(sql).await.expect(sql);
    }
    // Three read l_quantity, two l_extendedprice, one each of the others.
    let queries = [
        "SELECT l_returnflag, CAST(sum(l_quantity) AS BIGINT) FROM li GROUP BY 1 ORDER BY 1",
        "SELECT count(*) FROM li WHERE l_quantity > 25",
        "SELECT CAST(sum(l_extendedprice * l_quantity) AS BIGINT) FROM li",
        "SELECT CAST(max(l_extendedprice) AS BIGINT), min(l_orderkey) FROM li",
    ];
    let columns = [
        "l_orderkey",
        "l_quantity",
        "l_extendedprice",
        "l_returnflag",
    ];
    let mut chunks = Vec::new();
    for column in columns {
        chunks.push(
            number(
                &client,
                &format!(
                    "SELECT sum(chunks) FROM skiff.memory_tables \
                     WHERE \"table\" = 'li' AND \"column\" = '{column}'"
                ),
            )
            .await,
        );
    }
    assert!(
        chunks.iter().all(|c| *c >= 20),
        "row groups of 2000 rows: {chunks:?}"
    );
    let mut sessions = Vec::new();
    for _ in &queries {
        let session = server.pg().await;
        for sql in [
            "SET skiff.buffer_pool = false",
            "SET skiff.distribute = off",
            "SET skiff.batch_max_queries = 4",
        ] {
            session.simple_query(sql).await.expect(sql);
        }
        sessions.push(session);
    }
    // Alone: each query fetches what it reads.
    let before = served_all(&client, &columns).await;
    let mut alone = Vec::new();
    for (session, sql) in sessions.iter().zip(queries) {
        alone.push(simple_rows(session, sql).await.expect(sql));
    }
    let after = served_all(&client, &columns).await;
    let readers = [1, 3, 2, 1];
    for (at, column) in columns.iter().enumerate() {
        assert_eq!(
            after[at] - before[at],
            readers[at] * chunks[at],
            "{column} read by {} queries, one after another",
            readers[at]
        );
    }
    // In one batch: each chunk once, whatever the queries' pace.
    for round in 0..3 {
        for session in &sessions {
            session
                .simple_query("SET skiff.batch_window_ms = 10000")
                .await
                .expect("set");
        }
        let before = served_all(&client, &columns).await;
        let runs = sessions
            .iter()
            .zip(queries)
            .map(|(session, sql)| simple_rows(session, sql));
        let answers = futures::future::join_all(runs).await;
        for ((answer, expected), sql) in answers.into_iter().zip(&alone).zip(queries) {
            assert_eq!(&answer.expect(sql), expected, "{sql}");
        }
        let after = served_all(&client, &columns).await;
        for (at, column) in columns.iter().enumerate() {
            assert_eq!(
                after[at] - before[at],
                chunks[at],
                "round {round}: {column} once for the batch; log:\n{}",
                server.log_text()
            );
        }
    }
    let log = server.log_text();
    assert!(
        log.contains("pipeline group") && log.contains("li.l_quantity"),
        "the group and what it shares are logged:\n{log}"
    );
    // The worker's own counters: the last batch's one group fetched each
    // row group's column once (a row group's column is one 64 KiB chunk
    // here) and served the other readers from its cache.
    assert!(chunks.iter().all(|c| *c == chunks[0]), "{chunks:?}");
    let groups = simple_rows(
        &client,
        "SELECT pipeline_group, members, shared, chunks_fetched, chunks_shared, \
         bytes_fetched FROM skiff.pipeline_groups ORDER BY pipeline_group",
    )
    .await
    .expect("skiff.pipeline_groups");
    assert_eq!(groups.len(), 3, "one group a round: {groups:?}");
    let last = &groups[2];
    let field = |at: usize| last[at].clone().unwrap_or_default();
    let count = |at: usize| field(at).parse::<i64>().unwrap_or(-1);
    assert_eq!(field(1).split(' ').count(), 4, "{last:?}");
    assert_eq!(field(2), "li.l_extendedprice, li.l_quantity", "{last:?}");
    assert_eq!(count(3), 4 * chunks[0], "{last:?}");
    // l_quantity read by three (two from the cache), l_extendedprice by two.
    assert_eq!(count(4), 3 * chunks[0], "{last:?}");
    assert!(count(5) > 0);
    // EXPLAIN ANALYZE of queries sent in one batch names their group.
    for session in &sessions[..2] {
        session
            .simple_query("SET skiff.batch_max_queries = 2")
            .await
            .expect("set");
    }
    let explain = "EXPLAIN ANALYZE PIPELINES SELECT count(*) FROM li WHERE l_quantity > 25";
    let explained = futures::future::join_all(
        sessions[..2]
            .iter()
            .map(|session| simple_rows(session, explain)),
    )
    .await;
    for rows in explained {
        let text = format!("{:?}", rows.expect(explain));
        assert!(text.contains(", in pipeline group "), "{text}");
    }
}

/// TPC-DS with every table in a memory node, its 99 queries sent four at
/// a time in batches whose pipelines run grouped, then each alone with
/// every fragment offloaded to the node, then decided by its cost models:
/// every answer matches DuckDB's (slow: run with `SKIFF_SLOW_TESTS=1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_in_grouped_batches_matches_duckdb() {
    if !skiff_testkit::slow_tests("tpcds in grouped batches") {
        return;
    }
    let models = tempfile::tempdir().expect("a directory for the models");
    let path = models.path().join("models.json");
    calibrated(&path);
    let server = offloading_server(&dataset(Benchmark::Tpcds, 0.01), &path);
    let client = server.pg().await;
    wait_for_workers(&client, 2).await;
    let tables = simple_rows(
        &client,
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY 1",
    )
    .await
    .expect("tables");
    assert!(tables.len() >= 24, "{tables:?}");
    for table in tables.iter().filter_map(|r| r[0].as_deref()) {
        let bytes = number(&client, &format!("SELECT skiff.load_to_memory('{table}')")).await;
        assert!(bytes > 0, "{table}: {bytes} bytes loaded");
    }
    let sessions = batching_sessions(&server, 4).await;
    suite_in_batches_matches_duckdb(&server, &sessions, "tpcds", "in batches").await;
    let log = server.log_text();
    assert!(
        log.matches("pipeline group").count() >= 20,
        "batches of TPC-DS queries share columns; log:\n{log}"
    );
    // Each query alone, every fragment offered run on the node (scans,
    // filters, projections and aggregations' partial halves), and each
    // decided by the node's models: two sessions at once (the suite runs
    // one query at a time and leaves the machine half idle).
    let decided_client = server.pg().await;
    for (c, mode) in [(&client, "always"), (&decided_client, "auto")] {
        c.simple_query(&format!("SET skiff.offload = {mode}"))
            .await
            .expect("set");
    }
    tokio::join!(
        suite_matches_duckdb(&server, &client, "tpcds", "offloaded"),
        suite_matches_duckdb(&server, &decided_client, "tpcds", "decided"),
    );
    let decided = number(
        &client,
        "SELECT count(*) FROM skiff.memory_fragments WHERE mode = 'auto'",
    )
    .await;
    assert!(decided > 0, "no fragment decided");
    let log = server.log_text();
    assert!(
        log.contains("fragment offloaded") && !log.contains("rows unlike"),
        "log:\n{log}"
    );
}
