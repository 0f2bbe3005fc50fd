//! `skiff bench load`: `COPY lineitem FROM` TPC-H's lineitem as CSV into a
//! managed table, against DuckDB's `COPY` into its own database file, each
//! engine in a child process of its own (time and peak memory honest, as
//! for the queries). Each run drops the table, creates it, loads the file
//! and counts the rows; DuckDB also checkpoints, so both have their rows in
//! their storage when the run ends.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow::datatypes::{DataType, Schema};
use datafusion::config::CsvOptions;
use datafusion::dataframe::DataFrameWriteOptions;
use datafusion::prelude::{ParquetReadOptions, SessionContext};

use crate::args::{BenchArgs, BenchEngine};
use crate::harness::{BenchError, cores, data_tag, default_data_dir, ensure_data};
use crate::report::{self, Measurement};
use crate::{child, duckdb};

/// The table loaded.
const TABLE: &str = "lineitem";

pub async fn run(args: &BenchArgs) -> Result<(), BenchError> {
    let session = &args.engine;
    let data = session
        .data
        .clone()
        .unwrap_or_else(|| default_data_dir(args.suite(), args.sf));
    ensure_data(&data, args.suite(), args.sf, None)?;
    let (csv, schema) = csv_of_lineitem(&data).await?;
    let bytes = fs::metadata(&csv).map(|m| m.len()).unwrap_or(0);
    let scratch = beside(&data, "load-scratch");
    let _ = fs::remove_dir_all(&scratch);
    let skiff_dir = scratch.join("skiff");
    fs::create_dir_all(&skiff_dir).map_err(|source| BenchError::Write {
        path: skiff_dir.clone(),
        source,
    })?;
    let columns = column_list(&schema)?;
    let csv_text = csv.display().to_string().replace('\'', "''");
    let threads = session.partitions.unwrap_or_else(cores).max(1);
    let timeout = Duration::from_secs(args.timeout.max(1));
    let (engines, skipped) =
        crate::harness::available_engines(&[BenchEngine::Skiff, BenchEngine::Duckdb]);
    let title = format!("COPY {TABLE} FROM CSV, TPC-H {}", data_tag(args));
    let mut header = format!(
        "{title}: {} ({:.0} MB), runs {}{}, {threads} partitions\n",
        csv.display(),
        bytes as f64 / 1e6,
        args.runs,
        if args.runs > 1 {
            " (first is a warm-up)"
        } else {
            ""
        },
    );
    if let Some(note) = &skipped {
        header.push_str(&format!("duckdb skipped: {note}\n"));
    }
    eprint!("{header}");
    let mut measurements = Vec::new();
    for engine in &engines {
        eprintln!("loading with {}...", report::engine_name(*engine));
        let outcome = match engine {
            BenchEngine::Duckdb => {
                let statements = [
                    format!("DROP TABLE IF EXISTS {TABLE}"),
                    format!("CREATE TABLE {TABLE} ({columns})"),
                    format!("COPY {TABLE} FROM '{csv_text}' (FORMAT csv, HEADER true)"),
                    "CHECKPOINT".to_string(),
                    format!("SELECT count(*) FROM {TABLE}"),
                ];
                let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
                // A directory of its own: DuckDB registers the tables it
                // finds there, and Skiff's managed table needs its `delta`
                // extension.
                let duckdb_dir = scratch.join("duckdb");
                fs::create_dir_all(&duckdb_dir).map_err(|source| BenchError::Write {
                    path: duckdb_dir.clone(),
                    source,
                })?;
                let database = duckdb_dir.join("load.duckdb").display().to_string();
                duckdb::command(
                    &duckdb_dir,
                    &statements,
                    args.runs,
                    threads,
                    session.memory_limit,
                    Some(&database),
                    false,
                )
                .and_then(|(command, job)| child::collect(command, Some(job), timeout))
            }
            _ => {
                let script = scratch.join("load.sql");
                let text = format!(
                    "DROP TABLE IF EXISTS {TABLE};\nCREATE TABLE {TABLE} ({columns});\n\
                     COPY {TABLE} FROM '{csv_text}' WITH (FORMAT csv, HEADER true);\n\
                     SELECT count(*) FROM {TABLE};\n"
                );
                fs::write(&script, text).map_err(|source| BenchError::Write {
                    path: script.clone(),
                    source,
                })?;
                child::command(session, &skiff_dir, *engine, &script, args.runs)
                    .and_then(|command| child::collect(command, None, timeout))
            }
        };
        measurements.push(Measurement::new(
            &format!("copy {TABLE}"),
            *engine,
            args.runs,
            outcome,
        ));
    }
    report::check_rows(&mut measurements);
    let text = summary(&header, &measurements, bytes);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    let stem = format!("load-{}", data_tag(args));
    let mut csv_out = Vec::new();
    report::write_csv(&mut csv_out, &measurements).map_err(|source| BenchError::Write {
        path: args.results.join(format!("{stem}.csv")),
        source,
    })?;
    let files = crate::harness::publish(&args.results, &stem, args.archive, &csv_out, |png| {
        crate::plot::draw(png, &title, &measurements, &engines)
    })?;
    println!("\nwrote {}", files.join(", "));
    let _ = fs::remove_dir_all(&scratch);
    Ok(())
}

/// lineitem as one CSV file with a header, beside the Parquet data
/// (`<data>-csv/lineitem.csv`), written once; and its schema.
async fn csv_of_lineitem(data: &Path) -> Result<(PathBuf, Schema), BenchError> {
    let ctx = SessionContext::new();
    let parquet = data.join(TABLE);
    let frame = ctx
        .read_parquet(parquet.display().to_string(), ParquetReadOptions::default())
        .await
        .map_err(|e| BenchError::Data(format!("cannot read {}: {e}", parquet.display())))?;
    let schema = frame.schema().as_arrow().clone();
    let dir = beside(data, "csv");
    let csv = dir.join(format!("{TABLE}.csv"));
    if csv.is_file() {
        return Ok((csv, schema));
    }
    eprintln!("writing {} (first use only)", csv.display());
    fs::create_dir_all(&dir).map_err(|source| BenchError::Write {
        path: dir.clone(),
        source,
    })?;
    // Written aside and renamed: a cut-off write is never taken for data.
    let partial = dir.join(format!(".{TABLE}.csv.partial"));
    let options = CsvOptions::default().with_has_header(true);
    frame
        .write_csv(
            &partial.display().to_string(),
            DataFrameWriteOptions::new().with_single_file_output(true),
            Some(options),
        )
        .await
        .map_err(|e| BenchError::Data(format!("cannot write {}: {e}", partial.display())))?;
    fs::rename(&partial, &csv).map_err(|source| BenchError::Write {
        path: csv.clone(),
        source,
    })?;
    Ok((csv, schema))
}

/// A directory next to `data`: `bench/data/tpch-sf1` gives
/// `bench/data/tpch-sf1-<suffix>`.
fn beside(data: &Path, suffix: &str) -> PathBuf {
    let name = data
        .file_name()
        .map_or_else(|| "data".into(), |n| n.to_string_lossy());
    data.with_file_name(format!("{name}-{suffix}"))
}

/// `name type, ...` for `CREATE TABLE`, in SQL both engines read.
fn column_list(schema: &Schema) -> Result<String, BenchError> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let sql = match field.data_type() {
            DataType::Int8 | DataType::Int16 => "SMALLINT".to_string(),
            DataType::Int32 => "INTEGER".to_string(),
            DataType::Int64 => "BIGINT".to_string(),
            DataType::Float32 => "REAL".to_string(),
            DataType::Float64 => "DOUBLE".to_string(),
            DataType::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".to_string(),
            DataType::Date32 => "DATE".to_string(),
            DataType::Boolean => "BOOLEAN".to_string(),
            other => {
                return Err(BenchError::Data(format!(
                    "column {} of type {other} has no SQL spelling here",
                    field.name()
                )));
            }
        };
        columns.push(format!("{} {sql}", field.name()));
    }
    Ok(columns.join(", "))
}

/// The table printed at the end: time, throughput, peak memory, ratio.
fn summary(header: &str, measurements: &[Measurement], bytes: u64) -> String {
    let mut text = format!("\n{header}\n");
    text.push_str(&format!(
        "{:<8} {:>10} {:>10} {:>12} {:>12}\n",
        "engine", "median s", "MB/s", "rows", "peak RSS MB"
    ));
    let baseline = measurements
        .iter()
        .find(|m| m.engine == BenchEngine::Duckdb)
        .and_then(Measurement::median_ms);
    for m in measurements {
        let Some(ms) = m.median_ms() else {
            text.push_str(&format!(
                "{:<8} failed: {}\n",
                report::engine_name(m.engine),
                m.error.as_deref().unwrap_or("no time")
            ));
            continue;
        };
        text.push_str(&format!(
            "{:<8} {:>10.2} {:>10.1} {:>12} {:>12.0}\n",
            report::engine_name(m.engine),
            ms / 1e3,
            bytes as f64 / 1e6 / (ms / 1e3),
            m.rows.map_or("?".to_string(), |r| r.to_string()),
            m.peak_rss_bytes.unwrap_or(0) as f64 / 1e6,
        ));
    }
    let skiff = measurements
        .iter()
        .find(|m| m.engine == BenchEngine::Skiff)
        .and_then(Measurement::median_ms);
    if let (Some(skiff), Some(duckdb)) = (skiff, baseline) {
        text.push_str(&format!(
            "\nskiff / duckdb time: {:.2}x (target: within 1.5x)\n",
            skiff / duckdb
        ));
    }
    if let Some(m) = measurements.iter().find_map(|m| m.row_mismatch.as_ref()) {
        text.push_str(&format!("ROW COUNTS DIFFER: {m}\n"));
    }
    text
}
