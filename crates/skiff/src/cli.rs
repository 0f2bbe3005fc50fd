//! Command-line definitions.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "skiff",
    version,
    about = "Skiff: an elastic SQL database. Without a subcommand, opens a SQL shell.",
    after_help = "Examples:
  skiff demo                 generate TPC-H SF 0.1 once and open the shell
  skiff --data DIR -c \"SELECT count(*) FROM lineitem\"
  skiff --data DIR -f queries.sql --format csv
  skiff gen tpch --sf 1 --out DIR
  skiff bench tpch --sf 1"
)]
pub struct Cli {
    #[command(flatten)]
    pub session: SessionArgs,

    /// Run this SQL (one or more statements) and exit.
    #[arg(short = 'c', long = "command", conflicts_with = "file")]
    pub command: Option<String>,

    /// Run the statements in this file and exit.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,

    #[command(subcommand)]
    pub subcommand: Option<Command>,
}

/// How the session is set up; shared by the shell, -c, -f and bench.
#[derive(Args, Debug, Clone)]
pub struct SessionArgs {
    /// Data directory: every Parquet/CSV table in it is registered.
    /// Defaults to the embedded default directory ($SKIFF_HOME/data, or ~/.skiff/data).
    #[arg(long, global = true, env = "SKIFF_DATA")]
    pub data: Option<PathBuf>,

    /// Output format of query results.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    pub format: Format,

    /// Memory limit for query execution, e.g. 512M or 4G; unbounded by default.
    #[arg(long, value_parser = parse_bytes, global = true)]
    pub memory_limit: Option<usize>,

    /// Partitions (parallelism) per pipeline; defaults to the number of cores.
    /// A `skiff worker` also computes on this many threads.
    #[arg(long, global = true)]
    pub partitions: Option<usize>,

    /// Run statements with DataFusion's streaming executor instead of
    /// Skiff's pipelines (for comparisons; no progress, no EXPLAIN PIPELINES).
    #[arg(long, global = true, hide = true)]
    pub streaming: bool,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate TPC-H SF 0.1 into the default data directory (first use only) and open the shell.
    Demo,
    /// Generate benchmark data as Parquet, one subdirectory per table.
    Gen(GenArgs),
    /// Measure Skiff against baselines on a benchmark.
    Bench(BenchArgs),
    /// Serve a whole cluster on loopback: coordinator (PostgreSQL and Flight
    /// SQL front doors), worker processes and a memory node.
    Serve(crate::server::ServeArgs),
    /// Run only the coordinator role (workers join with `skiff worker`).
    Coordinator(crate::server::CoordinatorArgs),
    /// Run a worker that joins a coordinator.
    Worker(crate::server::WorkerArgs),
    /// Run a memory node that joins a coordinator.
    Memnode(crate::server::MemnodeArgs),
    /// Look at and steer a running cluster: workers, queries, cancel.
    Ctl(crate::ctl::CtlArgs),
    /// Transactions on an emulated CXL pod (TPC-C NewOrder/Payment).
    #[command(subcommand)]
    Pod(crate::pod::PodCommand),
    /// Internal: one engine runs one query file in a fresh process for
    /// `skiff bench`, printing its timings and peak memory as a JSON line.
    #[command(name = "bench-child", hide = true)]
    BenchChild(BenchChildArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchmarkName {
    Tpch,
    Tpcds,
}

/// What `skiff bench` measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchTarget {
    Tpch,
    Tpcds,
    /// Loading TPC-H's lineitem from CSV (`COPY`).
    Load,
}

impl BenchArgs {
    /// The benchmark whose data and queries are used (`load` uses TPC-H's).
    pub fn suite(&self) -> BenchmarkName {
        match self.benchmark {
            BenchTarget::Tpcds => BenchmarkName::Tpcds,
            BenchTarget::Tpch | BenchTarget::Load => BenchmarkName::Tpch,
        }
    }
}

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Which benchmark's tables to generate.
    #[arg(value_enum)]
    pub benchmark: BenchmarkName,
    /// Scale factor (1 = about 1 GB of raw data).
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Output directory; one subdirectory per table is created in it.
    #[arg(long)]
    pub out: PathBuf,
    /// Replace tables that already exist in the output directory.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
#[command(after_long_help = BENCH_HELP)]
pub struct BenchArgs {
    /// Which benchmark to run: TPC-H or TPC-DS queries, or `load`, a COPY of
    /// TPC-H's lineitem from CSV into a managed table against DuckDB's COPY
    /// into its own storage.
    #[arg(value_enum)]
    pub benchmark: BenchTarget,
    /// Scale factor. Without --data, data lives in bench/data/<benchmark>-sf<SF>
    /// under the current directory and is generated there when missing.
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Runs per query and engine (the first is a warm-up and not counted when > 1).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Only these queries (comma-separated numbers, e.g. 1,5,18).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<usize>,
    /// Where CSV and PNG results go.
    #[arg(long, default_value = "bench/results")]
    pub results: PathBuf,
    /// Engines to measure (comma-separated). DuckDB is skipped, with a note,
    /// when python3 cannot import its `duckdb` module.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "skiff,datafusion,duckdb"
    )]
    pub engines: Vec<BenchEngine>,
    /// Directory of the query files q1.sql/q01.sql ...; defaults to
    /// tests/queries/<benchmark> under the current directory.
    #[arg(long)]
    pub query_dir: Option<PathBuf>,
    /// Measure the server path instead: queries through `skiff serve` over
    /// the PostgreSQL wire or Flight SQL, against the embedded engine, then
    /// throughput with --clients concurrent clients.
    #[arg(long, value_enum)]
    pub via: Option<Via>,
    /// Measure query migration instead (issue 4): runtimes with a migration
    /// after every pipeline boundary against local runs and restarts, to an
    /// identical and to a faster worker, the latency of vacating a worker
    /// running 1-8 queries, and the cost when nothing migrates. Starts its
    /// own clusters; results in RESULTS/<benchmark>-sf<SF>-migration-*.
    #[arg(long, conflicts_with = "via")]
    pub migration: bool,
    /// With --migration: run nothing, re-read a migration CSV written by an
    /// earlier run and print its summary again (with the current analysis).
    #[arg(long, value_name = "CSV", requires = "migration")]
    pub summarize: Option<PathBuf>,
    /// With --migration: only the vacate experiment (after one local run of
    /// each query to pick the longest), in every mode: drain, immediate and
    /// cut (immediate with mid-pipeline cut points on).
    #[arg(long, requires = "migration", conflicts_with = "summarize")]
    pub vacate_only: bool,
    /// Concurrent clients for the --via throughput runs.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub clients: Vec<usize>,
    /// Seconds allowed for all runs of one query on one engine; the engine's
    /// process is killed after that and the query reported as failed.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Measure state sizes instead: run every query once in this process
    /// on Skiff, pause it after each pipeline, and measure the state
    /// on-demand state separation would extract there (rows, bytes, bytes
    /// shipped lz4/uncompressed) against full state separation.
    #[arg(long, conflicts_with = "via")]
    pub state_sizes: bool,
}

const BENCH_HELP: &str = "\
What is measured:
  Every (engine, query) pair runs in a fresh child process, so engines share no
  caches and each has its own peak memory. The child runs the whole query file
  (all its statements) --runs times and reports wall times, rows returned, its
  RSS after registering the tables (the fixed overhead) and its peak RSS
  (VmHWM). The reported time is the median of the runs after the first.

Engines:
  skiff       Skiff's pipeline executor
  datafusion  plain DataFusion streaming execution of the same physical plan
  duckdb      DuckDB (python3 module) over the same Parquet files

Session flags that apply: --data DIR (use this data instead of bench/data/...),
--partitions N (parallelism of every engine, DuckDB threads included) and
--memory-limit SIZE (every engine).

Output: a table per query and totals on stdout, progress on stderr, and
RESULTS/<benchmark>-sf<SF>-<timestamp>.csv/.png plus -latest.csv/.png copies.
See bench/README.md for how to read them.

--state-sizes (in process, Skiff only; --runs and --engines do not apply):
  Every query runs once paused after each pipeline k (0 < k < pipelines): the
  state Algorithm 1 selects there is measured (rows, bytes in memory, bytes
  extracted with lz4 and uncompressed, extraction time), as is full state
  separation (every finished pipeline's output written out once; and, as the
  paper ran it, the whole state extracted at every boundary). A second,
  unpaused run gives each boundary's progress in time. Output: per-query and
  overall tables on stdout, RESULTS/<benchmark>-sf<SF>-state-sizes-<timestamp>
  .csv/.png plus -latest copies.

load (COPY lineitem FROM its TPC-H CSV; Skiff and DuckDB, each in a child):
  Each run drops the table, creates it and loads the CSV (written once from
  the Parquet data, beside it as <data>-csv/lineitem.csv) into a managed
  table; DuckDB does the same into a database file and checkpoints. Output:
  RESULTS/load-sf<SF>-<timestamp>.csv/.png plus -latest copies.

Examples:
  skiff bench tpch --sf 1
  skiff bench load --sf 1
  skiff bench tpch --sf 0.1 --queries 1,3 --runs 5
  skiff bench tpcds --sf 1 --engines skiff,datafusion --timeout 300
  skiff bench tpch --sf 1 --state-sizes";

/// A client protocol for `skiff bench --via`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Via {
    Pg,
    Flight,
}

/// An engine `skiff bench` can measure.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchEngine {
    Skiff,
    Datafusion,
    Duckdb,
}

#[derive(Args, Debug)]
pub struct BenchChildArgs {
    /// skiff or datafusion (DuckDB runs in python3, not here).
    #[arg(long, value_enum)]
    pub engine: BenchEngine,
    /// The query file; all of its statements run, in order.
    #[arg(long)]
    pub query: PathBuf,
    /// How many times to run the whole file.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
}

/// Parse a byte size such as `512M`, `4G`, `1.5GiB` or `1000000`.
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 512M or 4G"))?;
    let multiplier = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1u64,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        other => return Err(format!("unknown size unit '{other}' (use K, M, G or T)")),
    };
    let bytes = number * multiplier as f64;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(format!("'{text}' is not a positive size"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("5X").is_err());
        assert!(parse_bytes("0").is_err());
    }
}
