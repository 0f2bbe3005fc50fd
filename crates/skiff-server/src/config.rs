//! Settings of the roles.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use skiff_tables::DataLocation;

use crate::auth::Users;

/// Times a query starts over because the worker running it died
/// (`skiff.retry_on_worker_loss`); a query that loses this many workers in
/// a row is likely what kills them.
pub const WORKER_LOSS_RESTARTS: u32 = 3;

/// Limits the coordinator enforces, each with a clear error when hit.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Open client sessions (both front doors together).
    pub max_connections: usize,
    /// A statement running longer is canceled (SQLSTATE 57014).
    pub statement_timeout: Option<Duration>,
    /// Memory one query may use on its worker, in bytes.
    pub query_memory_limit: Option<u64>,
    /// How long a query waits for a worker when none is alive (all
    /// restarting, drained or not yet registered) before it fails.
    pub worker_wait: Duration,
}

/// CopyData chunks a `COPY ... FROM STDIN` buffers ahead of its decoder;
/// the client waits beyond that (each chunk is what the client sent, a few
/// KiB in psql's and psycopg's case).
pub const COPY_IN_CHUNKS: usize = 16;

/// The longest statement the coordinator plans, in bytes. Parsing takes
/// several times a statement's size in memory; data belongs in `COPY` or
/// Flight SQL ingest, not in statement text.
pub const MAX_STATEMENT_BYTES: usize = 64 << 20;

/// How long a vacate waits for its worker to empty. A query whose result
/// already streams cannot move and keeps the worker busy until it ends;
/// past this the vacate stops waiting (the worker stays drained) and says
/// so in the log.
pub const VACATE_WAIT_MAX: Duration = Duration::from_secs(3600);

/// Default of [`Limits::worker_wait`] (`--worker-wait-timeout`).
pub const WORKER_WAIT: Duration = Duration::from_secs(30);

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 100,
            statement_timeout: None,
            query_memory_limit: None,
            worker_wait: WORKER_WAIT,
        }
    }
}

/// TLS for the PostgreSQL front door: PEM certificate chain and key.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Everything a coordinator needs.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Tables are discovered here: a directory or an `s3://` prefix.
    pub data: DataLocation,
    /// Local state: the catalog and its lock (`DATA/.skiff` for a local
    /// data directory).
    pub state_dir: PathBuf,
    /// Internal Flight service workers and memory nodes register with.
    pub cluster_addr: SocketAddr,
    pub pg_addr: Option<SocketAddr>,
    pub flight_addr: Option<SocketAddr>,
    /// Prometheus metrics endpoint (`/metrics`).
    pub metrics_addr: Option<SocketAddr>,
    /// The web console (`crate::console`), which serves `/metrics` too.
    pub http_addr: Option<SocketAddr>,
    /// Pod files (`skiff pod run --shm PATH`) whose live figures the
    /// console's pod page draws; a missing file is a pod not started yet.
    pub pods: Vec<PathBuf>,
    /// Partitions per pipeline in plans made here; defaults to the cores.
    pub partitions: Option<usize>,
    pub limits: Limits,
    pub users: Users,
    pub tls: Option<TlsFiles>,
    /// Accept the test hooks (`skiff_engine::options::TEST_HOOKS`); off
    /// for users, on for test suites and benches.
    pub fault_injection: bool,
}

/// How long `skiff.remove_worker` waits for the worker's queries to move
/// away and for the distributed queries that use it to end; past this the
/// worker leaves anyway, and what still ran there fails (a single-worker
/// query whose result already streams, or a distributed query, which
/// cannot move).
pub const REMOVE_WAIT_MAX: Duration = Duration::from_secs(60);

/// Most workers one `skiff.add_workers(n)` starts.
pub const ADD_WORKERS_MAX: usize = 64;

/// How often the console's live pages hear the cluster's state.
pub const CONSOLE_TICK: Duration = Duration::from_millis(500);

/// How long a console login lasts without logging in again.
pub const CONSOLE_LOGIN_TTL: Duration = Duration::from_secs(8 * 3600);

/// Console logins kept at once; the oldest goes when a new one comes.
pub const CONSOLE_LOGINS_MAX: usize = 1024;

/// The pause before the console answers a wrong password: guessing is slow.
pub const CONSOLE_REFUSAL_DELAY: Duration = Duration::from_millis(300);

/// Largest request body the console reads (logins and actions are small).
pub const CONSOLE_BODY_MAX: usize = 16 * 1024;

/// How long a console action (one SQL function call) may take.
pub const CONSOLE_ACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Live streams (`/api/events`) open at once, for all logins together: each
/// reads the cluster every tick, so a visitor may not open them without end.
pub const CONSOLE_FEEDS_MAX: usize = 64;

/// Readings of each pod the console keeps (one a `CONSOLE_TICK` while it
/// runs): a minute of throughput for the pod page's chart.
pub const CONSOLE_POD_HISTORY: usize = 120;

/// The pod page's rates are over the last this long.
pub const CONSOLE_POD_RATE_WINDOW: Duration = Duration::from_secs(1);

/// Pod files one console watches (`--pod`).
pub const CONSOLE_PODS_MAX: usize = 16;

/// How often the Prometheus recorder drains its histograms (without it they
/// grow with every query).
pub const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// How long the coordinator tries to connect to a worker of a failed
/// distributed query: a refused connection declares the worker dead (a
/// connection that only times out is left to the failure detector).
pub const WORKER_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a partition's old owner tries to hand its blocks to the new
/// owner (buffer matching); blocks not taken by then are read from storage.
pub const MATCHING_DEADLINE: Duration = Duration::from_secs(30);

/// How long the coordinator waits for an old owner to answer that its
/// shipments ended: its own deadline for them, and a margin to answer.
pub const SHIP_ANSWER_DEADLINE: Duration = Duration::from_secs(2 * MATCHING_DEADLINE.as_secs());

/// Bytes of blocks an old owner sends one new owner at most per resize,
/// most important first: about what a worker's pool holds by default on a
/// small machine; more would only be evicted on arrival.
pub const MATCHING_BYTES_MAX: u64 = 4 << 30;

/// How many buffer matchings `skiff.matchings` remembers (the latest).
pub const MATCHINGS_KEPT: usize = 64;

/// How long the coordinator waits for one worker's buffer pool counters
/// (`skiff.cache`) or for it to empty its pool (`skiff.clear_cache()`).
pub const BUFFER_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a node keeps reporting the scan counts of a distributed query
/// whose scans there have not moved (`scan_progress`): the query has
/// ended there, or its scans are done and only the coordinator's last
/// figure matters.
pub const SCAN_TALLY_FORGET_AFTER: Duration = Duration::from_secs(60);

/// How many forgotten queries' scan counters a node keeps, for a scan of
/// theirs that starts after they were forgotten.
pub const SCAN_TALLY_RETIRED_MAX: usize = 1024;

/// Rows a memory node keeps one min/max for, at most (each chunk is cut
/// into zones of this many rows): a narrow column's 4 MiB chunk holds half
/// a million rows, too many for its bounds to rule any out.
pub const ZONE_ROWS: usize = 1024;

/// How long a worker waits for a memory node's chunks of one row group
/// before it reads them from storage.
pub const CHUNK_FETCH_DEADLINE: Duration = Duration::from_secs(30);

/// How long a worker waits for a memory node's decision on a fragment it
/// offered, before it runs the fragment itself.
pub const FRAGMENT_DECISION_DEADLINE: Duration = Duration::from_secs(10);

/// How long a worker waits for the next message of an offloaded fragment
/// (a node marks every row group it finishes) before it reads the row
/// groups not yet marked from storage.
pub const FRAGMENT_IDLE_DEADLINE: Duration = Duration::from_secs(30);

/// Fragments a memory node remembers for `skiff.memory_fragments`.
pub const FRAGMENT_HISTORY: usize = 256;

/// Threads a memory node runs offloaded fragments on, when
/// `--offload-threads` does not say: the paper's embedded cores are few.
pub const DEFAULT_OFFLOAD_THREADS: usize = 2;

/// A memory node's sketches of each column of each file it holds
/// (`memnode::sketches`): theta sketches keep 2^`SKETCH_THETA_LG_K` hashes
/// (a relative standard error of about 1/sqrt(4096), 1.6%, on distinct
/// counts), KLL sketches `SKETCH_KLL_K` (a rank error of about 0.4%, what
/// range selectivity is estimated with), frequent-items sketches track up
/// to `SKETCH_FREQUENT_ITEMS` heavy hitters (a power of two).
pub const SKETCH_THETA_LG_K: u8 = 12;
pub const SKETCH_KLL_K: u16 = 1000;
pub const SKETCH_FREQUENT_ITEMS: usize = 64;

/// Cost models (`memnode::costs`): trees per random forest, and the most
/// samples one keeps (the oldest go first when refits add the node's own
/// measurements).
pub const COST_MODEL_TREES: usize = 24;
pub const COST_MODEL_SAMPLES: usize = 4096;

/// A memory node refits its cost models when, over its last
/// `DRIFT_WINDOW` offloaded fragments, the median measured execution time
/// is off its prediction by more than `DRIFT_FACTOR` either way.
pub const DRIFT_WINDOW: usize = 16;
pub const DRIFT_FACTOR: f64 = 2.0;

/// Fragments `skiff memnode calibrate` runs by default, and the most rows
/// one reads.
pub const CALIBRATION_FRAGMENTS: usize = 240;
pub const CALIBRATION_ROWS: usize = 1 << 20;

/// Each of calibration's timed transfers must end within twice its time
/// on the emulated link plus this.
pub const CALIBRATION_TRANSFER_SLACK: Duration = Duration::from_secs(10);

/// How long a worker leaves a memory node alone after a fetch from it
/// failed (its scans read storage meanwhile).
pub const MEMORY_NODE_BACKOFF: Duration = Duration::from_secs(5);

/// How long loading a table into the memory nodes may take.
pub const TABLE_LOAD_DEADLINE: Duration = Duration::from_secs(600);

/// How long a load or unload waits for every live worker to take the new
/// memory routes (in a heartbeat) before it returns anyway.
pub const ROUTES_WAIT: Duration = Duration::from_secs(5);

/// How often a memory node's `--preload` is tried before it is given up
/// (a node that died but is not declared dead yet fails a load), and the
/// pause between tries: past the failure detector's few seconds.
pub const PRELOAD_TRIES: usize = 5;
pub const PRELOAD_RETRY: Duration = Duration::from_secs(2);

/// How long a worker waits for the rest of a batch's queries (sent at the
/// same moment by the coordinator's batcher) before it groups the ones
/// that came; a late one runs outside the groups.
pub const BATCH_ASSEMBLY_WAIT: Duration = Duration::from_secs(1);

/// Most queries one batch holds, whatever a session sets
/// (`skiff.batch_max_queries`): the worker groups a batch's pipelines in
/// time cubic in their number.
pub const BATCH_MAX_QUERIES_MAX: usize = 64;

/// Longest a query waits for its batch, whatever a session sets
/// (`skiff.batch_window_ms`): the wait comes before the statement's
/// timeout starts counting.
pub const BATCH_WINDOW_MAX: Duration = Duration::from_secs(10);

/// Batches a worker remembers having closed short, so that their late
/// queries run at once instead of waiting for a batch of their own.
pub const CLOSED_BATCHES_KEPT: usize = 1024;

/// Groups whose reports a worker keeps for `skiff.pipeline_groups`.
pub const GROUP_REPORTS_KEPT: usize = 64;
