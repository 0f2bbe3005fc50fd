//! The coordinator's settings (`CoordinatorConfig`, `Limits`, `TlsFiles`), where it
//! listens, and its limits and timeouts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use skiff_tables::DataLocation;

use crate::auth::Users;

/// Losses of its worker a query survives in a row, continuing from its
/// latest snapshot or starting over (`skiff.retry_on_worker_loss`); the
/// next fails it. A snapshot taken since the last loss is progress and
/// begins a new row (`relay`): a query that loses this many workers with
/// no progress between is likely what kills them.
pub const WORKER_LOSSES_IN_A_ROW: u32 = 3;

/// How long the coordinator waits for the state cache to delete a
/// snapshot that a newer one replaced or whose query ended; one that is
/// not deleted expires with its TTL.
pub const SNAPSHOT_DELETE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the deletion of an ended query's stage checkpoints may take,
/// in the background; past it they are left to their time to live.
pub const CHECKPOINT_DELETE_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes of a distributed query's rows the coordinator holds back until
/// the attempt that makes them ends (`rerun`), so that the query can run
/// again from the start without the client seeing a row twice (Trino's
/// `retry-policy=QUERY` holds 32 MB). A query with more rows sends them
/// as they come past this, and can no longer run again.
pub const RERUN_BUFFER_BYTES: usize = 32 << 20;

/// Times a distributed query runs again, for lost workers and vacates
/// together; a lost worker's share is also bounded by
/// [`WORKER_LOSSES_IN_A_ROW`].
pub const RERUNS_MAX: u32 = 8;

/// How long after a transport failure that found no worker gone a
/// distributed query's workers are probed again before it runs again: a
/// SIGKILLed worker's connections break a moment before its port refuses
/// (measured: about 80 ms later the second attempt found it gone), and
/// running again with it would fail once more.
pub const RERUN_PROBE_AGAIN: Duration = Duration::from_millis(100);

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
    /// The web console (`skiff-console`), which serves `/metrics` too.
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
/// away (a distributed query runs again without it); past this the worker
/// leaves anyway, and what still ran there fails: a query whose result
/// already streams, which cannot move.
pub const REMOVE_WAIT_MAX: Duration = Duration::from_secs(60);

/// Most workers one `skiff.add_workers(n)` starts.
pub const ADD_WORKERS_MAX: usize = 64;

/// How often the Prometheus recorder drains its histograms (without it they
/// grow with every query).
pub const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// How long the coordinator tries to connect to a worker of a failed
/// distributed query: a refused connection declares the worker dead (a
/// connection that only times out is left to the failure detector).
pub const WORKER_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the coordinator waits for an old owner to answer that its
/// shipments ended: its own deadline for them, and a margin to answer.
pub const SHIP_ANSWER_DEADLINE: Duration =
    Duration::from_secs(2 * skiff_node::limits::MATCHING_DEADLINE.as_secs());

/// Bytes of blocks an old owner sends one new owner at most per resize,
/// most important first: about what a worker's pool holds by default on a
/// small machine; more would only be evicted on arrival.
pub const MATCHING_BYTES_MAX: u64 = 4 << 30;

/// How many buffer matchings `skiff.matchings` remembers (the latest).
pub const MATCHINGS_KEPT: usize = 64;

/// How long the coordinator waits for one worker's buffer pool counters
/// (`skiff.cache`) or for it to empty its pool (`skiff.clear_cache()`).
pub const BUFFER_CALL_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Most queries one batch holds, whatever a session sets
/// (`skiff.batch_max_queries`): the worker groups a batch's pipelines in
/// time cubic in their number.
pub const BATCH_MAX_QUERIES_MAX: usize = 64;

/// Longest a query waits for its batch, whatever a session sets
/// (`skiff.batch_window_ms`): the wait comes before the statement's
/// timeout starts counting.
pub const BATCH_WINDOW_MAX: Duration = Duration::from_secs(10);

/// Where a started coordinator listens (ports chosen when 0 was asked).
#[derive(Clone, Debug)]
pub struct Listening {
    pub cluster: SocketAddr,
    pub pg: Option<SocketAddr>,
    pub flight: Option<SocketAddr>,
    /// The web console (and `/metrics`).
    pub http: Option<SocketAddr>,
}
