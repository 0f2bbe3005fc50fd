//! TPC-H and TPC-DS answers against DuckDB's, stored as golden files under
//! `tests/golden/<bench>/sf<X>/` (see tests/golden/README.md for the format
//! and how to regenerate them). Every query is run on the pipeline executor
//! after its graph passes the structural invariants; each failure is named
//! with its reason in one summary, never skipped.

use std::panic::AssertUnwindSafe;
use std::path::Path;

use arrow::record_batch::RecordBatch;
use futures::TryStreamExt;
use skiff_engine::Engine;
use skiff_engine::store::PipelineStatus;
use skiff_gen::Benchmark;

use crate::invariants;
use crate::support::{dataset, engine, queries, render_rows, repo_root};

/// Relative tolerance for numbers: DuckDB and DataFusion round decimal
/// averages and float sums differently in the last digits.
const RELATIVE_TOLERANCE: f64 = 1e-6;

type Row = Vec<Option<String>>;

/// Polls (10 ms apart) for the memory pool to be empty after a query.
const RELEASE_POLLS_MAX: usize = 500;

struct Golden {
    /// 1-based index of the statement of the query file this answers.
    statement: usize,
    columns: Vec<String>,
    rows: Vec<Row>,
    /// How the final ORDER BY fixes the row order; `None` when unordered.
    order: Option<Order>,
}

enum Order {
    /// Row order must match exactly (the sort keys could not be told).
    Strict,
    /// Rows are ordered by these columns; rows with equal keys may come in
    /// any order, and with `limit_ties` the last run of equal keys may hold
    /// different rows (a LIMIT cut through it).
    Keys {
        columns: Vec<usize>,
        limit_ties: bool,
    },
}

/// What DuckDB said about one query file.
enum Expected {
    /// One answer per row-returning statement.
    Answers(Vec<Golden>),
    /// DuckDB raised this error (say, a division by zero at this scale);
    /// Skiff must fail too.
    Error(String),
}

fn load_golden(dir: &Path, query: &str) -> Result<Expected, String> {
    let meta_path = dir.join("meta.json");
    let text =
        std::fs::read_to_string(&meta_path).map_err(|e| format!("{}: {e}", meta_path.display()))?;
    let meta: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", meta_path.display()))?;
    let entry = meta
        .get("queries")
        .and_then(|q| q.get(query))
        .ok_or_else(|| format!("no golden entry for {query}"))?;
    if let Some(error) = entry.get("error").and_then(|e| e.as_str()) {
        return Ok(Expected::Error(error.to_string()));
    }
    let mut answers = vec![load_answer(dir, entry)?];
    if let Some(extra) = entry.get("extra_results").and_then(|e| e.as_array()) {
        for entry in extra {
            answers.push(load_answer(dir, entry)?);
        }
    }
    Ok(Expected::Answers(answers))
}

fn load_answer(dir: &Path, entry: &serde_json::Value) -> Result<Golden, String> {
    let field = |name: &str| {
        entry
            .get(name)
            .ok_or_else(|| format!("golden entry lacks {name}"))
    };
    let statement = field("statement")?.as_u64().ok_or("bad statement")? as usize;
    let file = field("file")?.as_str().ok_or("bad file")?;
    let order = match entry.get("ordered").and_then(|o| o.as_bool()) {
        Some(true) => Some(match entry.get("order_keys").and_then(|k| k.as_array()) {
            Some(keys) => Order::Keys {
                columns: keys
                    .iter()
                    .filter_map(|k| k.get(0).and_then(|i| i.as_u64()))
                    .map(|i| i as usize)
                    .collect(),
                limit_ties: entry
                    .get("limit_ties")
                    .and_then(|t| t.as_bool())
                    .unwrap_or(false),
            },
            None => Order::Strict,
        }),
        _ => None,
    };
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut records = parse_csv(&text)?.into_iter();
    let columns = records
        .next()
        .ok_or_else(|| format!("{}: no header", path.display()))?
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    Ok(Golden {
        statement,
        columns,
        rows: records.collect(),
        order,
    })
}

/// The golden CSV dialect (tests/golden/README.md): fields separated by
/// commas, records by newlines; a quoted field is always a string (so `""`
/// is the empty string and `"NULL"` the word); the unquoted token NULL is
/// SQL NULL.
fn parse_csv(text: &str) -> Result<Vec<Row>, String> {
    let mut records = Vec::new();
    let mut record: Row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    loop {
        match chars.next() {
            Some('"') if field.is_empty() && !quoted => {
                quoted = true;
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            field.push('"');
                        }
                        Some('"') => break,
                        Some(c) => field.push(c),
                        None => return Err("unterminated quoted field".to_string()),
                    }
                }
            }
            Some(',') => record.push(finish_field(&mut field, &mut quoted)),
            Some('\r') => {}
            Some('\n') => {
                record.push(finish_field(&mut field, &mut quoted));
                records.push(std::mem::take(&mut record));
            }
            None => {
                if !record.is_empty() || !field.is_empty() || quoted {
                    record.push(finish_field(&mut field, &mut quoted));
                    records.push(record);
                }
                return Ok(records);
            }
            Some(c) => field.push(c),
        }
    }
}

fn finish_field(field: &mut String, quoted: &mut bool) -> Option<String> {
    let text = std::mem::take(field);
    let was_quoted = std::mem::replace(quoted, false);
    (was_quoted || text != "NULL").then_some(text)
}

fn numbers_match(a: &str, b: &str) -> Option<bool> {
    let (x, y) = (a.trim().parse::<f64>().ok()?, b.trim().parse::<f64>().ok()?);
    let scale = x.abs().max(y.abs()).max(1.0);
    Some((x - y).abs() <= RELATIVE_TOLERANCE * scale)
}

fn cells_match(expected: &Option<String>, actual: &Option<String>) -> bool {
    match (expected, actual) {
        (None, None) => true,
        (Some(e), Some(a)) => numbers_match(e, a).unwrap_or_else(|| e.trim_end() == a.trim_end()),
        _ => false,
    }
}

/// Sort key that puts rows equal within tolerance next to each other.
fn sort_key(row: &Row) -> Vec<String> {
    row.iter()
        .map(|cell| match cell {
            None => "\u{0}NULL".to_string(),
            Some(text) => match text.trim().parse::<f64>() {
                Ok(n) => format!("{n:+.5e}"),
                Err(_) => text.trim_end().to_string(),
            },
        })
        .collect()
}

fn rows_match(expected: &Row, actual: &Row) -> bool {
    expected.iter().zip(actual).all(|(e, a)| cells_match(e, a))
}

fn compare(golden: &Golden, mut actual: Vec<Row>, actual_columns: usize) -> Result<(), String> {
    if actual_columns != golden.columns.len() {
        return Err(format!(
            "{actual_columns} columns, expected {}",
            golden.columns.len()
        ));
    }
    if actual.len() != golden.rows.len() {
        return Err(format!(
            "{} rows, expected {}",
            actual.len(),
            golden.rows.len()
        ));
    }
    let mut expected = golden.rows.clone();
    match &golden.order {
        None => {
            expected.sort_by_key(sort_key);
            actual.sort_by_key(sort_key);
            compare_rows(&expected, &actual, 0)
        }
        Some(Order::Strict) => compare_rows(&expected, &actual, 0),
        Some(Order::Keys {
            columns,
            limit_ties,
        }) => compare_by_keys(&expected, &actual, columns, *limit_ties),
    }
}

fn compare_rows(expected: &[Row], actual: &[Row], offset: usize) -> Result<(), String> {
    for (index, (e, a)) in expected.iter().zip(actual).enumerate() {
        if !rows_match(e, a) {
            return Err(format!("row {}: got {a:?}, expected {e:?}", offset + index));
        }
    }
    Ok(())
}

/// Ordered comparison that lets rows with equal sort keys come in any
/// order: the key columns must match row by row, and each run of equal keys
/// must hold the same rows.
fn compare_by_keys(
    expected: &[Row],
    actual: &[Row],
    keys: &[usize],
    limit_ties: bool,
) -> Result<(), String> {
    let key = |row: &Row| -> Row {
        keys.iter()
            .map(|&k| row.get(k).cloned().flatten())
            .collect()
    };
    for (index, (e, a)) in expected.iter().zip(actual).enumerate() {
        if !rows_match(&key(e), &key(a)) {
            return Err(format!(
                "row {index} out of order: got {a:?}, expected {e:?}"
            ));
        }
    }
    let mut start = 0;
    while start < expected.len() {
        let mut end = start + 1;
        while end < expected.len() && rows_match(&key(&expected[start]), &key(&expected[end])) {
            end += 1;
        }
        // With a LIMIT cutting through the last run of ties, either engine
        // may keep any of the tied rows.
        let cut_by_limit = limit_ties && end == expected.len();
        if !cut_by_limit {
            let mut e = expected[start..end].to_vec();
            let mut a = actual[start..end].to_vec();
            e.sort_by_key(sort_key);
            a.sort_by_key(sort_key);
            compare_rows(&e, &a, start)?;
        }
        start = end;
    }
    Ok(())
}

/// What one query file gave back.
#[derive(Default)]
struct QueryRun {
    /// Per statement (0-based): its batches and column count.
    results: Vec<(Vec<RecordBatch>, usize)>,
    /// Bytes its pipelines wrote to spill files.
    spilled_bytes: u64,
}

/// Run every statement of one query file; checks the graph invariants of
/// each and that the store holds nothing once the query is done.
async fn run_query(engine: &Engine, sql: &str) -> Result<QueryRun, String> {
    let run = run_statements(engine, sql).await?;
    // Every reservation taken for the query is returned once it is done.
    // Operator tasks wind down just after the last batch, so allow them a
    // moment; a leak stays reserved for good.
    let pool = &engine.context().runtime_env().memory_pool;
    for _ in 0..RELEASE_POLLS_MAX {
        if pool.reserved() == 0 {
            return Ok(run);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err(format!(
        "{} bytes still reserved after the query",
        pool.reserved()
    ))
}

async fn run_statements(engine: &Engine, sql: &str) -> Result<QueryRun, String> {
    let mut run = QueryRun::default();
    for statement in skiff_engine::statement::split_statements(sql) {
        let plan = engine
            .physical_plan(statement)
            .await
            .map_err(|e| e.to_string())?;
        let execution = engine.start(plan.clone()).map_err(|e| e.to_string())?;
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            invariants::check(execution.graph(), &plan)
        }))
        .map_err(|panic| format!("invariant broken: {}", panic_message(&panic)))?;
        let stream = execution.execute().map_err(|e| e.to_string())?;
        let columns = stream.schema().fields().len();
        let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| e.to_string())?;
        let state = execution.state();
        if !state.outputs.is_empty() {
            return Err(format!("{} outputs left in the store", state.outputs.len()));
        }
        run.spilled_bytes += state
            .status
            .iter()
            .map(|s| match s {
                PipelineStatus::Finished { output, .. } => output.spilled_bytes,
                _ => 0,
            })
            .sum::<u64>();
        run.results.push((batches, columns));
    }
    Ok(run)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Both engines failed for the same reason. The only expected failures are
/// divisions by zero, which each engine words its own way.
fn same_failure(duckdb: &str, skiff: &str) -> bool {
    let by_zero = |e: &str| e.to_ascii_lowercase().contains("by zero");
    by_zero(duckdb) && by_zero(skiff)
}

fn compare_all(answers: &[Golden], run: &QueryRun) -> Result<(), String> {
    for golden in answers {
        let Some((batches, columns)) = run.results.get(golden.statement - 1) else {
            return Err(format!("no statement {}", golden.statement));
        };
        compare(golden, render_rows(batches), *columns)
            .map_err(|e| format!("statement {}: {e}", golden.statement))?;
    }
    Ok(())
}

/// Run the whole benchmark at `sf` after the `setup` statements; panics
/// with the list of failures. Returns the bytes spilled over all queries.
async fn check_benchmark(bench: Benchmark, name: &str, sf: &str, setup: &[&str]) -> u64 {
    let data = dataset(bench, sf.parse().expect("sf"));
    let golden_dir = repo_root().join(format!("tests/golden/{name}/sf{sf}"));
    // More partitions than cores, so that partition parallelism is exercised
    // on any machine.
    let engine = engine(Some(&data), 4).await;
    for statement in setup {
        engine.execute(statement).await.expect(statement);
    }
    let queries = queries(name);
    assert!(!queries.is_empty(), "no {name} queries");
    let mut failures = Vec::new();
    let mut spilled_bytes = 0;
    for (query, sql) in &queries {
        let outcome = match load_golden(&golden_dir, query) {
            Err(e) => Err(e),
            Ok(Expected::Error(duckdb)) => match run_query(&engine, sql).await {
                Ok(_) => Err(format!("DuckDB failed ({duckdb}) but skiff answered")),
                Err(skiff) if same_failure(&duckdb, &skiff) => Ok(()),
                Err(skiff) => Err(format!(
                    "DuckDB failed ({duckdb}), skiff differently: {skiff}"
                )),
            },
            Ok(Expected::Answers(answers)) => match run_query(&engine, sql).await {
                Ok(run) => {
                    spilled_bytes += run.spilled_bytes;
                    compare_all(&answers, &run)
                }
                Err(e) => Err(format!("skiff failed: {e}")),
            },
        };
        if let Err(reason) = outcome {
            failures.push(format!("{query}: {reason}"));
        }
    }
    let passed = queries.len() - failures.len();
    let setup = setup.join("; ");
    println!(
        "{name} sf{sf} [{setup}]: {passed}/{} match DuckDB",
        queries.len()
    );
    assert!(
        failures.is_empty(),
        "{name} sf{sf} [{setup}]: {passed}/{} match DuckDB; failures:\n{}",
        queries.len(),
        failures.join("\n")
    );
    spilled_bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_matches_duckdb() {
    check_benchmark(Benchmark::Tpch, "tpch", "0.01", &[]).await;
}

/// With no memory for the store, every materialized output goes through a
/// spill file: the answers must not change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_01_with_every_output_spilled_matches_duckdb() {
    let setup = ["SET skiff.store_memory_max = 0"];
    let spilled = check_benchmark(Benchmark::Tpch, "tpch", "0.01", &setup).await;
    assert!(spilled > 0, "nothing was spilled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_with_every_output_spilled_matches_duckdb() {
    let setup = ["SET skiff.store_memory_max = 0"];
    let spilled = check_benchmark(Benchmark::Tpcds, "tpcds", "0.01", &setup).await;
    assert!(spilled > 0, "nothing was spilled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_sf0_1_matches_duckdb() {
    check_benchmark(Benchmark::Tpch, "tpch", "0.1", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf0_01_matches_duckdb() {
    check_benchmark(Benchmark::Tpcds, "tpcds", "0.01", &[]).await;
}

/// SF 1 is where every TPC-DS query returns rows; it takes minutes, so it
/// runs when SKIFF_SLOW_TESTS is set (CI sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpcds_sf1_matches_duckdb() {
    if std::env::var_os("SKIFF_SLOW_TESTS").is_none() {
        eprintln!("tpcds sf1: set SKIFF_SLOW_TESTS=1 to run (CI does)");
        return;
    }
    check_benchmark(Benchmark::Tpcds, "tpcds", "1", &[]).await;
}
