//! The command lines of `skiff bench`, `skiff gen` and the hidden
//! `skiff bench-child`: each lists only its own options.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use skiff_engine::options::parse_bytes;

/// How the measured engines run and where their data is: the flags the
/// benches share with the shell (`--data`, `--partitions`,
/// `--memory-limit`), without the shell's output options.
#[derive(Args, Debug, Clone, Default)]
pub struct EngineFlags {
    /// Data directory of the benchmark's tables (else $SKIFF_DATA); without
    /// either, data lives in bench/data/<benchmark>-sf<SF> and is generated
    /// there when missing.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Memory limit of every engine, e.g. 512M or 4G; unbounded by default.
    #[arg(long, value_parser = parse_bytes)]
    pub memory_limit: Option<usize>,
    /// Partitions (parallelism) of every engine, DuckDB threads included;
    /// defaults to the number of cores.
    #[arg(long)]
    pub partitions: Option<usize>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchmarkName {
    Tpch,
    Tpcds,
    /// The SmartNIC paper's particle table (6,177,731 rows at `--sf 1`).
    Particles,
}

/// What `skiff bench` measures.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchTarget {
    Tpch,
    Tpcds,
    /// Loading TPC-H's lineitem from CSV (`COPY`).
    Load,
    /// Tables in memory nodes and pipeline groups (TPC-H's data): the
    /// paper's Figures 4 and 5 and concurrent TPC-H streams (`--parts`).
    Groups,
    /// Opportunistic offload on the particle data set: a calibration per
    /// link, the SmartNIC paper's case studies CQ1 and CQ2 (pushed back,
    /// offloaded, decided, aggregated on the node) and held-out decisions.
    Offload,
}

/// The parts of `skiff bench groups`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupsPart {
    /// Figure 4: one pipeline over a remote column, by fetch size.
    Fetch,
    /// Figure 5: four pipelines of three columns, by overlap.
    Overlap,
    /// Concurrent TPC-H streams, grouped and not.
    Streams,
    /// A selective scan, its chunks pruned by min/max or sent whole.
    Prune,
}

impl BenchArgs {
    /// The benchmark whose data and queries are used (`load` uses TPC-H's).
    pub fn suite(&self) -> BenchmarkName {
        match self.benchmark {
            BenchTarget::Tpcds => BenchmarkName::Tpcds,
            BenchTarget::Tpch | BenchTarget::Load | BenchTarget::Groups => BenchmarkName::Tpch,
            BenchTarget::Offload => BenchmarkName::Particles,
        }
    }
}

#[derive(Args, Debug, Clone)]
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
    /// Write the big tables as managed tables hash-partitioned on their
    /// join keys into this many partitions (1 to 1024), the small ones as
    /// Parquet; without it every table is Parquet.
    #[arg(long, value_name = "P")]
    pub partitions: Option<u32>,
}

#[derive(Args, Debug, Clone)]
#[command(after_long_help = BENCH_HELP)]
pub struct BenchArgs {
    /// Which benchmark to run: TPC-H or TPC-DS queries, or `load`, a COPY of
    /// TPC-H's lineitem from CSV into a managed table against DuckDB's COPY
    /// into its own storage.
    #[arg(value_enum)]
    pub benchmark: BenchTarget,
    #[command(flatten)]
    pub engine: EngineFlags,
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
    /// Besides the -latest files, archive this run's under its time
    /// (STEM-<YYYYmmddTHHMMSSZ>.*): for figures a document cites.
    #[arg(long)]
    pub archive: bool,
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
    /// With --migration: only the cost when nothing moves (experiment 4:
    /// a trigger that never fires, snapshots after every pipeline, adaptive
    /// snapshots, cut points), against runs with adaptive snapshots off;
    /// results in RESULTS/<benchmark>-sf<SF>-migration-zero-*.
    #[arg(long, requires = "migration", conflicts_with_all = ["summarize", "vacate_only"])]
    pub zero_only: bool,
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
    /// Measure scale-out instead (TPC-H or TPC-DS): every query
    /// distributed over each of these worker counts (comma-separated)
    /// against the single-worker path on the same `skiff serve`, then the
    /// resize experiment: adding a worker to 2 and removing one of 3 until
    /// the first answer, online (with buffer matching, the first query
    /// after the blocks arrived or meanwhile, and without) against a
    /// restart. Uses the data
    /// hash-partitioned for the counts (generated when missing); results
    /// in RESULTS/<benchmark>-<data>-scale-*.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N,...",
        conflicts_with_all = ["via", "migration", "state_sizes"]
    )]
    pub scale: Vec<usize>,
    /// With `--scale`: measure faults instead, at its largest count: each
    /// query with a worker SIGKILLed at 25, 50 and 75% of its latency (it
    /// runs again from the start) against its undisturbed latency, then
    /// `skiff.remove_worker` under 8 running distributed queries (the
    /// vacate latency) against how long they still ran undisturbed, and
    /// each query with `skiff.stage_checkpoints = all` and `auto` against
    /// its undisturbed latency, and the kills again with `auto`; results
    /// in RESULTS/<benchmark>-<data>-faults.*.
    #[arg(long, requires = "scale")]
    pub faults: bool,
    /// Measure buffer matching instead (TPC-H; VectorH's Figures 8-11 and
    /// Table 2): q1 repeatedly while the cluster grows 2->3->4 and shrinks
    /// back, with matching on and off; matching time against the bytes
    /// moved and the block size; resize with and without matching against
    /// a restart. Uses the
    /// data hash-partitioned into 12 (generated when missing); results in
    /// RESULTS/tpch-<data>-matching-*.
    #[arg(long, conflicts_with_all = ["via", "migration", "state_sizes", "scale"])]
    pub matching: bool,
    /// With `groups`: which parts to run (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "fetch,overlap,streams"
    )]
    pub parts: Vec<GroupsPart>,
    /// With `groups`: the batch windows (ms) of the grouped stream runs.
    #[arg(long, value_delimiter = ',', default_value = "20,500")]
    pub batch_windows: Vec<u64>,
    /// With `groups`: the memory node's emulated link in the stream runs
    /// (`10Gbit`, `1Gbit`, ...; `off` for none).
    #[arg(long, default_value = "10Gbit")]
    pub stream_link: String,
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

Output: a table per query and totals on stdout, progress on stderr, and
RESULTS/<benchmark>-<data>-latest.csv/.png, where <data> is sf<SF> for the
generated data and the directory's name for --data DIR (tpch-sf10 for
--data bench/data/tpch-sf10); --archive also writes a copy named after the
time of the run, for figures a document cites. See bench/README.md for how to
read them.

--state-sizes (in process, Skiff only; --runs and --engines do not apply):
  Every query runs once paused after each pipeline k (0 < k < pipelines): the
  state Algorithm 1 selects there is measured (rows, bytes in memory, bytes
  extracted with lz4 and uncompressed, extraction time), as is full state
  separation (every finished pipeline's output written out once; and, as the
  paper ran it, the whole state extracted at every boundary). A second,
  unpaused run gives each boundary's progress in time. Output: per-query and
  overall tables on stdout, RESULTS/<benchmark>-<data>-state-sizes-latest
  .csv/.png.

load (COPY lineitem FROM its TPC-H CSV; Skiff and DuckDB, each in a child):
  Each run drops the table, creates it and loads the CSV (written once from
  the Parquet data, beside it as <data>-csv/lineitem.csv) into a managed
  table; DuckDB does the same into a database file and checkpoints. Output:
  RESULTS/load-<data>-latest.csv/.png.

groups (tables in memory nodes, pipeline groups; `skiff serve` children;
  --parts fetch,overlap,streams,prune picks; prune is not run by default):
  fetch: Figure 4 of the paper: one pipeline (one worker, one partition) summing an
  expression over a copy of lineitem's l_orderkey written in row groups of 64
  KiB to 64 MiB (the bytes one fetch moves), read from storage (pool off),
  from a memory node on demand (skiff.prefetch_depth = 0) and prefetching 2
  row groups ahead, and from the worker's warm buffer pool (local); with the
  memory node's emulated link off, at 10 Gbit and at 1 Gbit. Median of --runs
  after the first. Output: RESULTS/tpch-<data>-groups-latest.csv/.png.
  overlap: Figure 5: four pipelines (one partition each) of three BIGINT
  columns of a 12-column copy of lineitem, sharing 0 to 3 of them: local (the
  pool warm) one after another and at once; from the memory node one
  alone, one after another, at once, and at once in one batch (grouped);
  link off and 10 Gbit; bytes the memory node sent. Output:
  RESULTS/tpch-<data>-groups-overlap-latest.csv/.png.
  streams: --clients concurrent TPC-H streams (each the queries in a rotated
  order) over one worker with every table in a memory node behind a link of
  --stream-link (default 10Gbit) and the pool off, ungrouped and batched in each of --batch-windows
  (skiff.batch_window_ms, default 20,500):
  throughput, latency p50/p99, bytes the memory node sent. Output:
  RESULTS/tpch-<data>-groups-streams-<link>-latest.csv/.png.
  prune: one scan of lineitem over a range of l_orderkey (0.1% to 100% of the
  keys) with four of its columns in a memory node, the pool off, its chunks
  sent whole (skiff.chunk_pruning = false) or pruned by the node's min/max;
  link off and 10 Gbit; answers checked equal. Output:
  RESULTS/tpch-<data>-groups-prune-latest.csv/.png.

Examples:
  skiff bench tpch --sf 1
  skiff bench load --sf 1
  skiff bench tpch --sf 0.1 --queries 1,3 --runs 5
  skiff bench tpcds --sf 1 --engines skiff,datafusion --timeout 300
  skiff bench tpch --sf 1 --state-sizes
  skiff bench tpch --sf 1 --scale 1,2,3,4
  skiff bench tpch --sf 1 --matching
  skiff bench groups --sf 1

--scale (TPC-H or TPC-DS over `skiff serve` children, via PostgreSQL):
  The tables are hash-partitioned on their join keys into the least common
  multiple of the counts (at least 8; 12 for 1,2,3,4): without --data they
  live in bench/data/<benchmark>-sf<SF>-p<P>, generated when missing. For each
  count a fresh `skiff serve --workers N` runs every query with
  skiff.distribute = on and then off (the single-worker path), --runs times
  each; `*` marks queries the planner did not split into stages. Then the
  resize experiment (VectorH's Table 2) with the benchmark's q1 and q9, --runs rounds:
  from 2 workers, skiff.add_workers(1) until q answers; from 3,
  skiff.remove_worker until q answers, online without buffer matching, with it
  (the first query as soon as the worker takes queries, and once its blocks
  arrived), against stopping the server and starting it with the new count.
  On a machine with fewer cores than workers the query figures are the cost
  of distribution, not a speedup. Output:
  RESULTS/<benchmark>-<data>-scale-latest.csv/.png.

--matching (TPC-H over `skiff serve` children, via PostgreSQL, queries
  distributed, tables in 12 hash partitions as for --scale 2,3,4):
  q1 max(--runs, 4) times at each of 2, 3, 4, 3, 2 workers on one cluster
  (skiff.add_workers / skiff.remove_worker between steps), once with
  skiff.buffer_matching on and once off: the first run after a resize
  against the step's steady state. Then lineitem buffered on 1, 2, 4, 8 and 16
  columns, and a copy of four of its columns in row groups of 16Ki, 64Ki,
  256Ki and 1Mi rows, each time a worker added and removed, each matching's
  time and bytes (from skiff.matchings). Then the resize table of --scale (online with and
  without matching, restart) for q1 and q9, --runs rounds. Output:
  RESULTS/tpch-<data>-matching-latest.csv/.png.";

/// A client protocol for `skiff bench --via`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Via {
    Pg,
    Flight,
}

/// An engine `skiff bench` can measure.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchEngine {
    /// Skiff's pipelines, scans through its buffer pool (warm after the
    /// first run).
    Skiff,
    /// Skiff without a buffer pool: every run reads and decodes Parquet.
    #[value(name = "skiff-cold")]
    SkiffCold,
    /// DataFusion's streaming executor over the same files.
    Datafusion,
    /// DuckDB over the same Parquet files (views).
    Duckdb,
    /// DuckDB on its own storage: the tables copied once into a database
    /// file (the copy is not timed).
    #[value(name = "duckdb-native")]
    DuckdbNative,
}

impl BenchEngine {
    /// Whether the engine is DuckDB (run by python3, not a Skiff child).
    pub fn is_duckdb(self) -> bool {
        matches!(self, BenchEngine::Duckdb | BenchEngine::DuckdbNative)
    }
}

#[derive(Args, Debug)]
pub struct BenchChildArgs {
    #[command(flatten)]
    pub session: EngineFlags,
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
