//! End-to-end tests of [`generate`]: files on disk, read back.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::Path;
use std::sync::Mutex;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{Date32Type, Int32Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::*;

/// Records what [`generate`] reports, to check the progress contract.
#[derive(Default)]
struct Recorder {
    started: Mutex<Option<u64>>,
    rows: Mutex<BTreeMap<String, u64>>,
}

impl GenProgress for Recorder {
    fn start(&self, total_rows: u64) {
        let mut started = self.started.lock().unwrap();
        assert!(started.is_none(), "start called twice");
        *started = Some(total_rows);
    }

    fn advance(&self, table: &str, rows: u64) {
        assert!(
            self.started.lock().unwrap().is_some(),
            "advance before start"
        );
        *self
            .rows
            .lock()
            .unwrap()
            .entry(table.to_string())
            .or_default() += rows;
    }
}

fn options(out: &Path, sf: f64) -> GenOptions {
    GenOptions {
        sf,
        out: out.to_path_buf(),
        force: false,
    }
}

fn row_counts(summary: &GenSummary) -> BTreeMap<String, u64> {
    summary
        .tables
        .iter()
        .map(|(name, rows, _)| (name.clone(), *rows))
        .collect()
}

fn parquet_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    files
}

fn read_table(out: &Path, table: &str) -> Vec<RecordBatch> {
    let mut batches = Vec::new();
    for file in parquet_files(&out.join(table)) {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(file).unwrap())
            .unwrap()
            .build()
            .unwrap();
        batches.extend(reader.map(|b| b.unwrap()));
    }
    batches
}

fn first_batch(out: &Path, table: &str) -> RecordBatch {
    let file = parquet_files(&out.join(table)).remove(0);
    ParquetRecordBatchReaderBuilder::try_new(File::open(file).unwrap())
        .unwrap()
        .build()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
}

/// Every table is a complete directory of non-empty Parquet files whose row
/// count matches the summary and the progress reports; nothing is staged.
fn assert_complete(bench: Benchmark, out: &Path, summary: &GenSummary, progress: &Recorder) {
    let names: Vec<_> = summary.tables.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names, table_names(bench));
    for (table, rows, bytes) in &summary.tables {
        assert!(*rows > 0, "{table} is empty");
        assert!(*bytes > 0, "{table} has no bytes");
        let read: usize = read_table(out, table).iter().map(|b| b.num_rows()).sum();
        assert_eq!(read as u64, *rows, "{table}");
    }
    assert_eq!(*progress.rows.lock().unwrap(), row_counts(summary));
    let mut entries: Vec<_> = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    entries.sort();
    assert_eq!(entries, table_names(bench), "stray entries in {out:?}");
}

#[test]
fn tpch_tiny_sf_writes_every_table() {
    let dir = tempfile::tempdir().unwrap();
    let progress = Recorder::default();
    let summary = generate(Benchmark::Tpch, &options(dir.path(), 0.01), &progress).unwrap();
    assert_complete(Benchmark::Tpch, dir.path(), &summary, &progress);

    let rows = row_counts(&summary);
    assert_eq!(rows["nation"], 25);
    assert_eq!(rows["region"], 5);
    assert_eq!(rows["customer"], 1_500);
    assert_eq!(rows["orders"], 15_000);
    assert_eq!(rows["part"], 2_000);
    assert_eq!(rows["partsupp"], 8_000);
    assert_eq!(rows["supplier"], 100);
    let batch = first_batch(dir.path(), "lineitem");
    assert_eq!(batch.schema().field(0).name(), "l_orderkey");
}

/// SF 0.01 is below the smallest official TPC-DS scale factor, but dsdgen
/// still gives every table rows; the counts here are those of the reference
/// generator at that scale.
#[test]
fn tpcds_tiny_sf_writes_every_table_and_is_deterministic() {
    let first = tempfile::tempdir().unwrap();
    let progress = Recorder::default();
    let summary = generate(Benchmark::Tpcds, &options(first.path(), 0.01), &progress).unwrap();
    assert_complete(Benchmark::Tpcds, first.path(), &summary, &progress);

    let rows = row_counts(&summary);
    assert_eq!(rows["call_center"], 2);
    assert_eq!(rows["customer"], 1_000);
    assert_eq!(rows["customer_demographics"], 1_920_800);
    assert_eq!(rows["date_dim"], 73_049);
    assert_eq!(rows["inventory"], 261_261);
    assert_eq!(rows["store_sales"], 120_527);
    assert_eq!(rows["store_returns"], 11_925);
    assert_eq!(rows["catalog_returns"], 8_923);
    assert_eq!(rows["time_dim"], 86_400);
    assert_date_dim_dates_match_their_keys(first.path());

    // A second run must reproduce the data exactly. Only the small tables
    // are compared batch by batch; counts cover the rest.
    let second = tempfile::tempdir().unwrap();
    let again = generate(Benchmark::Tpcds, &options(second.path(), 0.01), &NoProgress).unwrap();
    assert_eq!(row_counts(&again), rows);
    for table in table_names(Benchmark::Tpcds) {
        assert_eq!(
            first_batch(first.path(), table),
            first_batch(second.path(), table),
            "{table}"
        );
    }
}

/// `d_date_sk` is the Julian day number of `d_date`: a cross-check of the DAT
/// date parsing against the generator's own key.
fn assert_date_dim_dates_match_their_keys(out: &Path) {
    const UNIX_EPOCH_JULIAN_DAY: i32 = 2_440_588;
    for batch in read_table(out, "date_dim") {
        let keys = batch.column(0).as_primitive::<Int32Type>();
        let dates = batch.column(2).as_primitive::<Date32Type>();
        assert_eq!(dates.null_count(), 0);
        for (key, date) in keys.values().iter().zip(dates.values()) {
            assert_eq!(key - UNIX_EPOCH_JULIAN_DAY, *date);
        }
    }
}

#[test]
fn tpch_is_deterministic() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    let a = generate(Benchmark::Tpch, &options(first.path(), 0.01), &NoProgress).unwrap();
    let b = generate(Benchmark::Tpch, &options(second.path(), 0.01), &NoProgress).unwrap();
    assert_eq!(row_counts(&a), row_counts(&b));
    for table in table_names(Benchmark::Tpch) {
        assert_eq!(
            first_batch(first.path(), table),
            first_batch(second.path(), table),
            "{table}"
        );
    }
}

#[test]
fn refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("nation");
    fs::create_dir(&existing).unwrap();
    fs::write(existing.join("mine.txt"), "keep").unwrap();

    let error = generate(Benchmark::Tpch, &options(dir.path(), 0.01), &NoProgress)
        .err()
        .unwrap();
    assert!(matches!(&error, GenError::TableExists { path, more: 0 } if *path == existing));
    assert!(error.to_string().contains("nation"), "{error}");
    // Nothing else was created, and the existing directory is untouched.
    let entries: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        fs::read_to_string(existing.join("mine.txt")).unwrap(),
        "keep"
    );

    let forced = GenOptions {
        force: true,
        ..options(dir.path(), 0.01)
    };
    let summary = generate(Benchmark::Tpch, &forced, &NoProgress).unwrap();
    assert!(!existing.join("mine.txt").exists());
    assert_eq!(row_counts(&summary)["nation"], 25);
}

#[test]
fn stale_staging_directories_are_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join(".tmp-region");
    fs::create_dir(&stale).unwrap();
    fs::write(stale.join("part-9.parquet"), "half written").unwrap();

    generate(Benchmark::Tpch, &options(dir.path(), 0.01), &NoProgress).unwrap();
    assert!(!stale.exists());
    assert_eq!(parquet_files(&dir.path().join("region")).len(), 1);
}

#[test]
fn rejects_bad_scale_factors_before_touching_anything() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for sf in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        for bench in [Benchmark::Tpch, Benchmark::Tpcds] {
            let error = generate(bench, &options(&out, sf), &NoProgress)
                .err()
                .unwrap();
            assert!(matches!(error, GenError::BadScaleFactor(_)), "{error}");
        }
    }
    assert!(!out.exists());
}

#[test]
fn table_names_are_the_benchmarks_tables() {
    assert_eq!(table_names(Benchmark::Tpch).len(), 8);
    assert_eq!(table_names(Benchmark::Tpcds).len(), 24);
    assert!(!table_names(Benchmark::Tpcds).contains(&"dbgen_version"));
}
