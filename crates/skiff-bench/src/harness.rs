//! The harness every bench shares: the data it needs
//! (generated once per benchmark and scale factor), the query files,
//! measuring each (query, engine) pair in a child process, and writing
//! and publishing the results (CSV, PNG, and the `-latest` copies).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::ProgressBar;
use skiff_engine::catalog;
use skiff_engine::statement::split_statements;

use crate::args::{BenchArgs, BenchEngine, BenchmarkName, EngineFlags, GenArgs};
pub use crate::error::BenchError;
use crate::progress::stderr_bar;
use crate::{child, duckdb, generate, plot};

use crate::report::{self, Measurement, engine_name};

/// One query file of the benchmark.
#[derive(Clone)]
pub(crate) struct QueryFile {
    /// `q01`: zero-padded so that names sort like numbers.
    pub(crate) name: String,
    pub(crate) number: usize,
    pub(crate) path: PathBuf,
}

/// `(name, text)` of every query file, for the benches that send scripts
/// to a server.
pub(crate) fn read_scripts(queries: &[QueryFile]) -> Result<Vec<(String, String)>, BenchError> {
    queries
        .iter()
        .map(|q| {
            fs::read_to_string(&q.path)
                .map(|text| (q.name.clone(), text))
                .map_err(|e| BenchError::Queries(format!("{}: {e}", q.path.display())))
        })
        .collect()
}

/// Everything a measurement needs besides the query and the engine.
pub(crate) struct Setup<'a> {
    pub(crate) session: &'a EngineFlags,
    pub(crate) data: PathBuf,
    pub(crate) runs: u32,
    pub(crate) timeout: Duration,
    pub(crate) threads: usize,
    /// DuckDB's own storage for `duckdb-native`: a database file of this
    /// run, removed when it ends.
    pub(crate) duckdb_database: PathBuf,
}

/// What the results are named after: `sf<SF>` for the generated data,
/// the directory's name for `--data DIR` (without a leading
/// `<benchmark>-`, so `bench/data/tpch-sf10` gives `tpch-sf10`, not
/// `tpch-tpch-sf10`).
pub(crate) fn data_tag(args: &BenchArgs) -> String {
    let Some(dir) = &args.engine.data else {
        return format!("sf{}", args.sf);
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let slug = format!("{}-", bench_slug(args.suite()));
    let name = name.trim_start_matches('.');
    let name = name.strip_prefix(&slug).unwrap_or(name);
    // A file name of its own: no separators, nothing a shell would trip on.
    let tag: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if tag.is_empty() {
        "data".to_string()
    } else {
        tag
    }
}

/// `<benchmark>-<data>`: the stem of every result file of `args`.
pub(crate) fn results_stem(args: &BenchArgs) -> String {
    format!("{}-{}", bench_slug(args.suite()), data_tag(args))
}

/// `TPC-H SF1`, or `TPC-H (mydata)` for `--data DIR`.
pub(crate) fn title(args: &BenchArgs) -> String {
    match &args.engine.data {
        None => format!("{} SF{}", bench_title(args.suite()), args.sf),
        Some(_) => format!("{} ({})", bench_title(args.suite()), data_tag(args)),
    }
}

pub(crate) fn default_data_dir(benchmark: BenchmarkName, sf: f64) -> PathBuf {
    PathBuf::from("bench/data").join(format!("{}-sf{sf}", bench_slug(benchmark)))
}

pub(crate) fn bench_slug(benchmark: BenchmarkName) -> &'static str {
    match benchmark {
        BenchmarkName::Tpch => "tpch",
        BenchmarkName::Tpcds => "tpcds",
        BenchmarkName::Particles => "particles",
    }
}

pub(crate) fn bench_title(benchmark: BenchmarkName) -> &'static str {
    match benchmark {
        BenchmarkName::Tpch => "TPC-H",
        BenchmarkName::Tpcds => "TPC-DS",
        BenchmarkName::Particles => "particles",
    }
}

pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(crate) fn names(engines: &[BenchEngine]) -> String {
    let names: Vec<&str> = engines.iter().map(|e| engine_name(*e)).collect();
    names.join(", ")
}

/// Generate the tables into `dir` (hash-partitioned into `partitions`, when
/// given: `skiff gen --partitions`) unless they are all there. Half a data
/// set (an interrupted `skiff gen`) is refused rather than silently
/// measured.
pub(crate) fn ensure_data(
    dir: &Path,
    benchmark: BenchmarkName,
    sf: f64,
    partitions: Option<u32>,
) -> Result<(), BenchError> {
    let present: Vec<String> = if dir.is_dir() {
        catalog::discover(dir)
            .map_err(|e| BenchError::Data(e.to_string()))?
            .into_iter()
            .map(|t| t.name)
            .collect()
    } else {
        Vec::new()
    };
    let expected = skiff_gen::table_names(benchmark.into());
    let missing: Vec<&str> = expected
        .iter()
        .copied()
        .filter(|t| !present.iter().any(|p| p == t))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if missing.len() < expected.len() {
        return Err(BenchError::Data(format!(
            "{} has only some of the {} tables (missing: {}); regenerate them with \
             `skiff gen {} --sf {sf} --out {} --force{}`",
            dir.display(),
            bench_title(benchmark),
            missing.join(", "),
            bench_slug(benchmark),
            dir.display(),
            partitions.map_or(String::new(), |p| format!(" --partitions {p}"))
        )));
    }
    eprintln!(
        "generating {} SF {sf} into {} (first run only)",
        bench_title(benchmark),
        dir.display()
    );
    let args = GenArgs {
        benchmark,
        sf,
        out: dir.to_path_buf(),
        force: false,
        partitions,
    };
    generate::run(&args)?;
    Ok(())
}

/// `q1.sql` or `q01.sql` files of `dir`, by number.
pub(crate) fn find_queries(dir: &Path) -> Result<Vec<QueryFile>, BenchError> {
    let entries = fs::read_dir(dir).map_err(|e| {
        BenchError::Queries(format!(
            "cannot read the query directory {} ({e}); run from the repository root or \
             pass --query-dir",
            dir.display()
        ))
    })?;
    let mut queries: Vec<QueryFile> = entries
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let number = query_number(path.file_name()?.to_str()?)?;
            Some(QueryFile {
                name: format!("q{number:02}"),
                number,
                path,
            })
        })
        .collect();
    queries.sort_by_key(|q| q.number);
    if queries.is_empty() {
        return Err(BenchError::Queries(format!(
            "no qNN.sql files in {}",
            dir.display()
        )));
    }
    Ok(queries)
}

/// `q07.sql` -> 7.
pub(crate) fn query_number(file_name: &str) -> Option<usize> {
    let digits = file_name.strip_prefix('q')?.strip_suffix(".sql")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The requested queries, in the order asked; all of them when none are.
pub(crate) fn select_queries(
    all: &[QueryFile],
    wanted: &[usize],
    dir: &Path,
) -> Result<Vec<QueryFile>, BenchError> {
    let pick = QueryFile::clone;
    if wanted.is_empty() {
        return Ok(all.iter().map(pick).collect());
    }
    // Run and report in query order, each once, however they were asked for.
    let mut wanted = wanted.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    wanted
        .iter()
        .map(|n| {
            all.iter()
                .find(|q| q.number == *n)
                .map(pick)
                .ok_or_else(|| {
                    BenchError::Queries(format!("no query {n} (q{n:02}.sql) in {}", dir.display()))
                })
        })
        .collect()
}

/// The requested engines, each once, minus DuckDB when it cannot run; the
/// note says why it was skipped.
pub(crate) fn available_engines(requested: &[BenchEngine]) -> (Vec<BenchEngine>, Option<String>) {
    let mut engines: Vec<BenchEngine> = Vec::new();
    for engine in requested {
        if !engines.contains(engine) {
            engines.push(*engine);
        }
    }
    if !engines.iter().any(|e| e.is_duckdb()) {
        return (engines, None);
    }
    match duckdb::probe() {
        Ok(version) => {
            eprintln!("duckdb {version} found (python3 module)");
            (engines, None)
        }
        Err(note) => {
            engines.retain(|e| !e.is_duckdb());
            (engines, Some(note))
        }
    }
}

pub(crate) fn measure_all(
    setup: &Setup,
    queries: &[QueryFile],
    engines: &[BenchEngine],
) -> Vec<Measurement> {
    let bar = progress_bar((queries.len() * engines.len()) as u64);
    let mut all = Vec::new();
    for query in queries {
        let mut results: Vec<Measurement> = Vec::new();
        for engine in engines {
            bar.set_message(format!("{} on {}", query.name, engine_name(*engine)));
            results.push(measure(setup, query, *engine));
            bar.inc(1);
        }
        report::check_rows(&mut results);
        let line = progress_line(&query.name, &results);
        // indicatif drops println on a hidden bar (stderr not a terminal);
        // a log file still gets one line per query.
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        all.extend(results);
    }
    bar.finish_and_clear();
    all
}

pub(crate) fn progress_bar(len: u64) -> ProgressBar {
    let bar = stderr_bar("{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} query runs  {msg}");
    bar.set_length(len);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// One line per finished query, printed above the progress bar.
pub(crate) fn progress_line(query: &str, results: &[Measurement]) -> String {
    let mut line = query.to_string();
    for m in results {
        let figure = match (&m.error, m.median_ms()) {
            (Some(e), _) => format!("FAILED ({e})"),
            (None, Some(ms)) => format!("{ms:.1} ms"),
            (None, None) => "-".to_string(),
        };
        line.push_str(&format!("  {} {figure}", engine_name(m.engine)));
    }
    if let Some(mismatch) = results.iter().find_map(|m| m.row_mismatch.as_ref()) {
        line.push_str(&format!("  !! {mismatch}"));
    } else if let Some(rows) = results.iter().find_map(|m| m.rows) {
        line.push_str(&format!("  rows {rows}"));
    }
    line
}

pub(crate) fn measure(setup: &Setup, query: &QueryFile, engine: BenchEngine) -> Measurement {
    let outcome = match engine {
        BenchEngine::Duckdb => duckdb_outcome(setup, query, None),
        BenchEngine::DuckdbNative => {
            let database = setup.duckdb_database.to_string_lossy();
            duckdb_outcome(setup, query, Some(&database))
        }
        _ => child::command(setup.session, &setup.data, engine, &query.path, setup.runs)
            .and_then(|command| child::collect(command, None, setup.timeout)),
    };
    Measurement::new(&query.name, engine, setup.runs, outcome)
}

/// DuckDB's run of `query`: over the Parquet files (views), or with
/// `database`, over tables copied into that file by the first query that
/// finds them missing (before its timed runs).
pub(crate) fn duckdb_outcome(
    setup: &Setup,
    query: &QueryFile,
    database: Option<&str>,
) -> child::ChildOutcome {
    let script = fs::read_to_string(&query.path)
        .map_err(|e| format!("cannot read {}: {e}", query.path.display()))?;
    // Split here, as the Rust children do, so all engines run the same statements.
    let statements = split_statements(&script);
    let (command, job) = duckdb::command(
        &setup.data,
        &statements,
        setup.runs,
        setup.threads,
        setup.session.memory_limit,
        database,
        database.is_some(),
    )?;
    child::collect(command, Some(job), setup.timeout)
}

/// The text printed at the end: the table, failures, mismatches, totals.
pub(crate) fn summary(
    header: &str,
    measurements: &[Measurement],
    engines: &[BenchEngine],
) -> String {
    let mut text = format!("\n{header}\n");
    text.push_str(&report::table(measurements, engines));
    let failures: Vec<String> = measurements
        .iter()
        .filter_map(|m| {
            let error = m.error.as_ref()?;
            Some(format!(
                "  {} {}: {error}\n",
                m.query,
                engine_name(m.engine)
            ))
        })
        .collect();
    if !failures.is_empty() {
        text.push_str(&format!("\n{} FAILED:\n", failures.len()));
        text.extend(failures);
    }
    let mut mismatches: Vec<String> = measurements
        .iter()
        .filter_map(|m| Some(format!("  {}: {}\n", m.query, m.row_mismatch.as_ref()?)))
        .collect();
    mismatches.dedup();
    if !mismatches.is_empty() {
        text.push_str(&format!(
            "\n!! ROW COUNT MISMATCH in {} queries:\n",
            mismatches.len()
        ));
        text.extend(mismatches);
    }
    text.push('\n');
    text.push_str(&report::totals(measurements, engines));
    text
}

/// Write the CSV and PNG of a run.
pub(crate) fn write_results(
    dir: &Path,
    args: &BenchArgs,
    title: &str,
    measurements: &[Measurement],
    engines: &[BenchEngine],
) -> Result<Vec<String>, BenchError> {
    let stem = results_stem(args);
    let mut csv = Vec::new();
    report::write_csv(&mut csv, measurements).map_err(|source| BenchError::Write {
        path: dir.join(format!("{stem}.csv")),
        source,
    })?;
    publish(dir, &stem, args.archive, &csv, |png| {
        plot::draw(png, title, measurements, engines)
    })
}

/// Write `STEM-latest.csv` and `.png` (drawn by `draw`) into `dir`; with
/// `archive`, copies named after the run's time (`STEM-<timestamp>.*`)
/// too, for figures a document cites. Only those and the latest live in
/// `bench/results/`. Returns the paths written.
pub(crate) fn publish(
    dir: &Path,
    stem: &str,
    archive: bool,
    csv_bytes: &[u8],
    draw: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<Vec<String>, BenchError> {
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BenchError::Write { path, source }
    };
    fs::create_dir_all(dir).map_err(write_err(dir))?;
    let csv = dir.join(format!("{stem}-latest.csv"));
    fs::write(&csv, csv_bytes).map_err(write_err(&csv))?;
    let png = dir.join(format!("{stem}-latest.png"));
    draw(&png).map_err(|message| BenchError::Plot {
        path: png.clone(),
        message,
    })?;
    let mut written = vec![csv.display().to_string(), png.display().to_string()];
    if archive {
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
        for (file, extension) in [(&csv, "csv"), (&png, "png")] {
            let kept = dir.join(format!("{stem}-{stamp}.{extension}"));
            fs::copy(file, &kept).map_err(write_err(&kept))?;
            written.push(kept.display().to_string());
        }
    }
    Ok(written)
}

/// `skiff bench`'s command line alone, parsed: for tests.
#[cfg(test)]
pub(crate) fn bench_args<S: AsRef<str>>(line: &[S]) -> BenchArgs {
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Bench {
        #[command(flatten)]
        args: BenchArgs,
    }
    Bench::try_parse_from(line.iter().map(AsRef::as_ref))
        .expect("command line")
        .args
}

/// A file removed when this goes out of scope (DuckDB's database of a run,
/// and its write-ahead log).
pub(crate) struct RemoveOnDrop(pub(crate) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
        let _ = fs::remove_file(self.0.with_extension("duckdb.wal"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stem(line: &[&str]) -> String {
        results_stem(&bench_args(line))
    }

    #[test]
    fn results_are_named_after_the_data() {
        assert_eq!(stem(&["bench", "tpch"]), "tpch-sf1");
        assert_eq!(stem(&["bench", "tpcds", "--sf", "0.1"]), "tpcds-sf0.1");
        // A run over SF 10 data without --sf 10 is still named after it.
        let sf10 = ["bench", "tpch", "--data", "bench/data/tpch-sf10"];
        assert_eq!(stem(&sf10), "tpch-sf10");
        assert_eq!(
            stem(&["bench", "tpch", "--data", "/x/my data/"]),
            "tpch-my_data"
        );
        assert_eq!(
            stem(&["bench", "load", "--data", "/x/.tmpAb1"]),
            "tpch-tmpAb1"
        );
    }

    #[test]
    fn query_files_are_numbered() {
        assert_eq!(query_number("q1.sql"), Some(1));
        assert_eq!(query_number("q07.sql"), Some(7));
        assert_eq!(query_number("q99.sql"), Some(99));
        assert_eq!(query_number("q.sql"), None);
        assert_eq!(query_number("q1a.sql"), None);
        assert_eq!(query_number("q1.sql.bak"), None);
        assert_eq!(query_number("x1.sql"), None);
    }

    #[test]
    fn default_data_dir_names_benchmark_and_scale() {
        assert_eq!(
            default_data_dir(BenchmarkName::Tpch, 1.0),
            PathBuf::from("bench/data/tpch-sf1")
        );
        assert_eq!(
            default_data_dir(BenchmarkName::Tpcds, 0.1),
            PathBuf::from("bench/data/tpcds-sf0.1")
        );
    }
}
