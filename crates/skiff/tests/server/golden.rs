//! TPC-H answers through the front doors match DuckDB's golden answers.

use arrow_flight::sql::client::FlightSqlServiceClient;
use futures::TryStreamExt;
use skiff_gen::Benchmark;
use skiff_testkit::{
    Expected, Row, compare, dataset, load_golden, queries, render_rows, repo_root,
};

use crate::support::{Options, Server};

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
        Expected::Error(duckdb) => Err(format!("unexpected golden error {duckdb}")),
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
    let mut failures = Vec::new();
    let all = queries("tpch");
    for (query, sql) in &all {
        let outcome = check(query, run_pg(&client, sql).await);
        if let Err(reason) = outcome {
            failures.push(format!("{query}: {reason}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{}/{} TPC-H queries through PostgreSQL differ from DuckDB:\n{}\nserver log:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n"),
        server.log_text()
    );
}
