//! `skiff serve`, `skiff coordinator`, `skiff worker`, `skiff memnode`:
//! the cluster roles as processes. `serve` is a whole cluster on loopback:
//! the coordinator in this process, workers and a memory node as child
//! processes it restarts when they die.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use datafusion::error::{DataFusionError, Result};
use skiff_coordinator::{CoordinatorConfig, Limits, TlsFiles, Users, WorkerLauncher};
use skiff_engine::options::parse_bytes;
use skiff_memnode::MemnodeConfig;
use skiff_node::ServerError;
use skiff_tables::DataLocation;
use skiff_worker::WorkerConfig;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use crate::args::{DataArg, MemoryLimitArg, PartitionsArg, SessionArgs};

/// How long `serve` waits for its nodes to register before saying so.
const REGISTER_WAIT: Duration = Duration::from_secs(20);
/// Pause before restarting a child that died.
const RESTART_DELAY: Duration = Duration::from_secs(1);
/// `skiff.add_workers` requests that may wait for `serve` to start them.
const ADD_REQUESTS: usize = 16;

/// Front doors and limits; shared by `serve` and `coordinator`.
#[derive(Args, Debug, Clone)]
pub struct FrontArgs {
    /// PostgreSQL wire protocol address.
    #[arg(long, default_value = "127.0.0.1:5433")]
    pub pg_addr: SocketAddr,
    /// Arrow Flight SQL address.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub flight_addr: SocketAddr,
    /// Prometheus metrics endpoint (`/metrics`) alone; off unless given
    /// (the console serves `/metrics` too).
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
    /// The web console (cluster, queries, pipelines, actions) and
    /// `/metrics`; `off` disables it. Without users only loopback peers
    /// are served, as on the PostgreSQL port.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR|off")]
    pub http_addr: HttpAddr,
    /// A pod file (`skiff pod run --shm PATH`) whose transactions the
    /// console's pod page draws live: throughput, aborts and CXL misses per
    /// transaction type and host. Repeat for several; the file may appear
    /// later.
    #[arg(long, value_name = "PATH")]
    pub pod: Vec<PathBuf>,
    /// Users file, one `name:password` or `name:role:password` per line
    /// (role `admin` or `user`, the default). SKIFF_USER/SKIFF_PASSWORD add
    /// an admin. Without any user only loopback clients may connect.
    #[arg(long)]
    pub users: Option<PathBuf>,
    /// Most client connections open at once.
    #[arg(long, default_value_t = 100)]
    pub max_connections: usize,
    /// Cancel statements running longer than this many seconds.
    #[arg(long)]
    pub statement_timeout: Option<f64>,
    /// Seconds a query waits for a worker when none is alive before it
    /// fails.
    #[arg(long, default_value_t = skiff_coordinator::config::WORKER_WAIT.as_secs_f64())]
    pub worker_wait_timeout: f64,
    /// Memory one query may use on its worker, e.g. 2G.
    #[arg(long, value_parser = parse_bytes)]
    pub query_memory_limit: Option<usize>,
    /// TLS certificate chain (PEM) for the PostgreSQL port.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Accept the test hooks (`SET skiff.kill_worker_after_pipelines`, ...)
    /// that make queries migrate, suspend or fail and workers die at chosen
    /// points. For test suites and benches; never on a server users reach.
    #[arg(long)]
    pub fault_injection: bool,

    /// Where the coordinator keeps its catalog, lock and spilled state:
    /// DATA/.skiff for a local data directory; for an s3:// one,
    /// $SKIFF_HOME/remote/BUCKET/PREFIX unless given.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

/// An address to listen on, or `off`.
#[derive(Clone, Copy, Debug)]
pub struct HttpAddr(pub Option<SocketAddr>);

impl std::str::FromStr for HttpAddr {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "off" => Ok(Self(None)),
            addr => addr
                .parse()
                .map(|a| Self(Some(a)))
                .map_err(|e| format!("'{addr}' is not host:port or off: {e}")),
        }
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:
  skiff serve --data DIR
  psql -h 127.0.0.1 -p 5433 -U skiff
  open http://127.0.0.1:8080/ (the console)
  SKIFF_USER=skiff SKIFF_PASSWORD=secret skiff serve --data DIR --workers 4")]
pub struct ServeArgs {
    #[command(flatten)]
    pub data: DataArg,
    #[command(flatten)]
    pub partitions: PartitionsArg,
    #[command(flatten)]
    pub memory: MemoryLimitArg,
    /// Worker processes to start.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Memory node processes to start (they hold the state of moving
    /// queries and tables loaded into memory; several split a table).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub memory_nodes: u32,
    #[command(flatten)]
    pub tables: TableMemoryArgs,
    /// Internal address workers register at; a free port by default.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub cluster_addr: SocketAddr,
    #[command(flatten)]
    pub front: FrontArgs,
}

#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    #[command(flatten)]
    pub data: DataArg,
    #[command(flatten)]
    pub partitions: PartitionsArg,
    /// Internal address workers and memory nodes register at.
    #[arg(long, default_value = "127.0.0.1:50052")]
    pub cluster_addr: SocketAddr,
    #[command(flatten)]
    pub front: FrontArgs,
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// The coordinator's cluster address (its --cluster-addr).
    #[arg(long)]
    pub coordinator: String,
    /// Where this worker listens for plans.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub partitions: PartitionsArg,
    #[command(flatten)]
    pub memory: MemoryLimitArg,
    /// Directory for spill files; the system temporary directory by default.
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct MemnodeArgs {
    #[command(subcommand)]
    pub command: Option<MemnodeCommand>,
    /// The coordinator's cluster address (its --cluster-addr).
    #[arg(long, required = true)]
    pub coordinator: Option<String>,
    /// Where this memory node listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Memory offered for cached state and chunks, e.g. 4G; state beyond
    /// it spills to --state-dir.
    #[arg(long, value_parser = parse_bytes)]
    pub memory: Option<usize>,
    /// Directory for spilled and durable query state (durable state found
    /// there is reloaded at start). A fresh temporary directory by default.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Seconds cached state lives when its put names no time to live.
    #[arg(long, default_value_t = skiff_memnode::DEFAULT_STATE_TTL.as_secs_f64())]
    pub state_ttl: f64,
    #[command(flatten)]
    pub tables: TableMemoryArgs,
}

/// What else `skiff memnode` does.
#[derive(clap::Subcommand, Debug)]
pub enum MemnodeCommand {
    /// Train this machine's offload cost models (`SET skiff.offload =
    /// auto`): run a generated corpus of fragments and time them, then
    /// save the models where memory nodes load them at start.
    Calibrate(crate::calibrate::CalibrateArgs),
}

/// How memory nodes hold tables (`SELECT skiff.load_to_memory('t')`).
#[derive(Args, Debug, Clone)]
pub struct TableMemoryArgs {
    /// Memory for tables' chunks, e.g. 8G; by default --memory when given,
    /// else a quarter of the machine's memory. A load that does not fit
    /// is refused whole.
    #[arg(long, value_parser = parse_bytes)]
    pub table_memory: Option<usize>,
    /// Largest chunk of a column, e.g. 4M.
    #[arg(long, value_parser = parse_bytes, default_value = "4M")]
    pub chunk_size: usize,
    /// Emulate a network link of this bandwidth between memory node and
    /// workers, e.g. 10Gbit (bit, Kbit, Mbit, Gbit); off by default.
    #[arg(long, value_parser = skiff_memnode::parse_bandwidth)]
    pub link_bandwidth: Option<u64>,
    /// Tables to load into the memory nodes when a memory node starts,
    /// e.g. lineitem,orders (every column; split over the memory nodes).
    #[arg(long, value_delimiter = ',')]
    pub preload: Vec<String>,
    /// Threads a memory node runs offloaded query fragments on (`SET
    /// skiff.offload`): the few cores it spares beside serving chunks.
    #[arg(long, default_value_t = skiff_memnode::limits::DEFAULT_OFFLOAD_THREADS)]
    pub offload_threads: usize,
    /// The cost models that decide `SET skiff.offload = auto` (`skiff
    /// memnode calibrate` writes them); by default
    /// $SKIFF_HOME/offload-models.json when it exists.
    #[arg(long)]
    pub offload_models: Option<PathBuf>,
}

impl TableMemoryArgs {
    /// The same settings as a child's arguments.
    fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--chunk-size".to_string(),
            self.chunk_size.to_string(),
            "--offload-threads".to_string(),
            self.offload_threads.to_string(),
        ];
        if let Some(bytes) = self.table_memory {
            args.extend(["--table-memory".to_string(), bytes.to_string()]);
        }
        if let Some(bits) = self.link_bandwidth {
            args.extend(["--link-bandwidth".to_string(), format!("{bits}bit")]);
        }
        if !self.preload.is_empty() {
            args.extend(["--preload".to_string(), self.preload.join(",")]);
        }
        if let Some(path) = &self.offload_models {
            args.extend(["--offload-models".to_string(), path.display().to_string()]);
        }
        args
    }
}

/// Log to stderr; `SKIFF_LOG` filters (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SKIFF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn server_error(e: ServerError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The default state directory of an object-store data directory: one
/// local directory per bucket and prefix.
fn remote_state_dir(url: &url::Url) -> PathBuf {
    let mut dir = crate::session::skiff_home().join("remote");
    dir.push(url.host_str().unwrap_or("bucket"));
    for segment in url.path_segments().into_iter().flatten() {
        if !segment.is_empty() {
            dir.push(segment);
        }
    }
    dir
}

fn coordinator_config(
    session: &SessionArgs,
    front: &FrontArgs,
    cluster_addr: SocketAddr,
) -> Result<CoordinatorConfig> {
    let data = crate::session::data_location(session)?;
    let state_dir = match (&data, &front.state_dir) {
        (_, Some(dir)) => dir.clone(),
        (DataLocation::Local(dir), None) => {
            if !dir.is_dir() {
                return Err(DataFusionError::External(
                    format!(
                        "data directory {} does not exist \
                         (pass --data DIR, or run `skiff demo` once)",
                        dir.display()
                    )
                    .into(),
                ));
            }
            dir.join(".skiff")
        }
        (DataLocation::Object(root), None) => remote_state_dir(root.url()),
    };
    let users = Users::load(front.users.as_deref()).map_err(server_error)?;
    Ok(CoordinatorConfig {
        data,
        state_dir,
        cluster_addr,
        pg_addr: Some(front.pg_addr),
        flight_addr: Some(front.flight_addr),
        metrics_addr: front.metrics_addr,
        http_addr: front.http_addr.0,
        pods: front.pod.clone(),
        partitions: session.partitions(),
        limits: Limits {
            max_connections: front.max_connections,
            statement_timeout: front
                .statement_timeout
                .filter(|s| *s > 0.0)
                .map(Duration::from_secs_f64),
            query_memory_limit: front.query_memory_limit.map(|b| b as u64),
            worker_wait: Duration::try_from_secs_f64(front.worker_wait_timeout).map_err(|e| {
                DataFusionError::Configuration(format!("--worker-wait-timeout: {e}"))
            })?,
        },
        users,
        tls: match (&front.tls_cert, &front.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        },
        fault_injection: front.fault_injection,
    })
}

/// Cancelled on Ctrl-C, SIGTERM, SIGHUP or SIGQUIT, with the signal in the
/// log: a server never ends without saying why (SIGHUP and SIGQUIT would
/// otherwise end it in silence, for instance when the terminal or the job
/// that started it goes away).
fn shutdown_on_signal() -> CancellationToken {
    use tokio::signal::unix::{SignalKind, signal};
    let token = CancellationToken::new();
    let cancel = token.clone();
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let on = |kind: SignalKind, name: &'static str| async move {
                match signal(kind) {
                    Ok(mut s) => {
                        s.recv().await;
                        name
                    }
                    Err(e) => {
                        warn!(signal = name, error = %e, "cannot listen for the signal");
                        std::future::pending().await
                    }
                }
            };
            let name = tokio::select! {
                name = on(SignalKind::interrupt(), "SIGINT") => name,
                name = on(SignalKind::terminate(), "SIGTERM") => name,
                name = on(SignalKind::hangup(), "SIGHUP") => name,
                name = on(SignalKind::quit(), "SIGQUIT") => name,
            };
            info!(signal = name, "shutting down");
            cancel.cancel();
        });
    }
    token
}

pub async fn coordinator(session: &SessionArgs, args: &CoordinatorArgs) -> Result<()> {
    init_logging();
    let config = coordinator_config(session, &args.front, args.cluster_addr)?;
    let shutdown = shutdown_on_signal();
    skiff_server::serve_coordinator(config, shutdown, |_, listening| {
        announce(listening, None);
    })
    .instrument(info_span!("coordinator"))
    .await
    .map_err(server_error)
}

pub async fn worker(session: &SessionArgs, args: &WorkerArgs) -> Result<()> {
    init_logging();
    let config = WorkerConfig {
        coordinator: args.coordinator.clone(),
        listen: args.listen,
        partitions: session.partitions(),
        memory_limit: session.memory_limit(),
        spill_dir: args.spill_dir.clone(),
        cache_memory: session.cache_memory(),
    };
    let span = info_span!("worker", pid = std::process::id());
    skiff_worker::run_worker(config, shutdown_on_signal())
        .instrument(span)
        .await
        .map_err(server_error)
}

pub async fn memnode(args: &MemnodeArgs) -> Result<()> {
    if let Some(MemnodeCommand::Calibrate(calibrate)) = &args.command {
        return crate::calibrate::run(calibrate).await;
    }
    init_logging();
    let Some(coordinator) = args.coordinator.clone() else {
        return Err(DataFusionError::Configuration(
            "skiff memnode: --coordinator is required".to_string(),
        ));
    };
    let offload_models = match &args.tables.offload_models {
        Some(path) => Some(path.clone()),
        None => Some(crate::calibrate::default_models_path()).filter(|p| p.exists()),
    };
    let config = MemnodeConfig {
        coordinator,
        offload_models,
        listen: args.listen,
        memory: args.memory.unwrap_or(0) as u64,
        state_dir: args.state_dir.clone(),
        state_ttl: Duration::try_from_secs_f64(args.state_ttl)
            .ok()
            .filter(|t| !t.is_zero())
            .unwrap_or(skiff_memnode::DEFAULT_STATE_TTL),
        table_memory: args.tables.table_memory.map(|b| b as u64),
        chunk_size: args.tables.chunk_size.max(1),
        link_bandwidth: args.tables.link_bandwidth,
        preload: args.tables.preload.clone(),
        offload_threads: args.tables.offload_threads.max(1),
    };
    let span = info_span!("memnode", pid = std::process::id());
    skiff_memnode::run_memnode(config, shutdown_on_signal())
        .instrument(span)
        .await
        .map_err(server_error)
}

fn announce(listening: &skiff_coordinator::Listening, nodes: Option<(usize, usize, usize)>) {
    let pg = listening.pg.map_or("off".to_string(), |a| a.to_string());
    let flight = listening
        .flight
        .map_or("off".to_string(), |a| a.to_string());
    let console = listening
        .http
        .map_or("off".to_string(), |a| format!("http://{a}/"));
    let mut line = format!(
        "skiff: PostgreSQL on {pg}, Flight SQL on {flight}, cluster on {}, console on {console}",
        listening.cluster
    );
    if let Some((workers, memnodes, cache)) = nodes {
        line.push_str(&format!(
            ", {workers} workers ({} MiB buffer pool each), {memnodes} memory node{}",
            cache >> 20,
            if memnodes == 1 { "" } else { "s" }
        ));
    }
    // The announcement is the one line scripts wait for.
    println!("{line}");
}

/// The whole cluster on loopback.
pub async fn serve(session: &SessionArgs, args: &ServeArgs) -> Result<()> {
    init_logging();
    let config = coordinator_config(session, &args.front, args.cluster_addr)?;
    let state_dir = config.state_dir.join("state");
    let shutdown = shutdown_on_signal();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let coordinator = skiff_server::serve_coordinator(config, shutdown.clone(), move |c, l| {
        let _ = ready_tx.send((c.clone(), l.clone()));
    })
    .instrument(info_span!("coordinator"));
    let children = async {
        let Ok((coordinator, listening)) = ready_rx.await else {
            return Ok(());
        };
        let mut kids = JoinSet::new();
        let cluster = listening.cluster.to_string();
        // The default pool is a share of the machine for all its workers.
        let cache = session.cache_memory().unwrap_or_else(|| {
            skiff_engine::buffer::default_budget(session.memory_limit(), args.workers as usize)
        });
        let children = Children::default();
        let worker = |n: u32| -> Result<_> {
            let mut command = child_command("worker", &cluster)?;
            if let Some(p) = session.partitions() {
                command.arg("--partitions").arg(p.to_string());
            }
            if let Some(m) = session.memory_limit() {
                command.arg("--memory-limit").arg(m.to_string());
            }
            command.arg("--cache-memory").arg(cache.to_string());
            Ok(supervise(
                format!("worker {n}"),
                command,
                shutdown.clone(),
                children.clone(),
            ))
        };
        for n in 0..args.workers {
            kids.spawn(worker(n)?);
        }
        // A few requests at most wait: each is handled at once.
        let (start_tx, mut start_rx) = tokio::sync::mpsc::channel(ADD_REQUESTS);
        coordinator.set_launcher(Arc::new(LocalWorkers {
            start: start_tx,
            children: children.clone(),
        }));
        // Spills and durable state (suspended queries) live with the data,
        // so they outlive a restart of the memory node.
        for n in 0..args.memory_nodes {
            let mut memnode = child_command("memnode", &cluster)?;
            // The first keeps the durable state where a restart finds it.
            let dir = match n {
                0 => state_dir.clone(),
                n => state_dir.join(format!("memnode-{n}")),
            };
            memnode.arg("--state-dir").arg(&dir);
            memnode.args(args.tables.to_args());
            kids.spawn(supervise(
                format!("memory node {n}"),
                memnode,
                shutdown.clone(),
                children.clone(),
            ));
        }
        wait_for_nodes(
            &coordinator,
            args.workers as usize,
            args.memory_nodes as usize,
            &shutdown,
        )
        .await;
        let workers = coordinator
            .membership()
            .live(skiff_flight::protocol::Role::Worker);
        let memnodes = coordinator
            .membership()
            .live(skiff_flight::protocol::Role::MemoryNode);
        announce(&listening, Some((workers, memnodes, cache)));
        // `skiff.add_workers(n)` until shutdown.
        let mut started = args.workers;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                asked = start_rx.recv() => {
                    let Some(n) = asked else { break };
                    for _ in 0..n {
                        kids.spawn(worker(started)?);
                        started += 1;
                    }
                }
                // Removed workers' supervisors end; nothing to keep of them.
                Some(_) = kids.join_next() => {}
            }
        }
        while kids.join_next().await.is_some() {}
        Ok::<_, DataFusionError>(())
    };
    let (served, children) = tokio::join!(coordinator, children);
    shutdown.cancel();
    children?;
    served.map_err(server_error)?;
    info!("stopped");
    Ok(())
}

async fn wait_for_nodes(
    coordinator: &skiff_coordinator::Coordinator,
    workers: usize,
    memnodes: usize,
    shutdown: &CancellationToken,
) {
    let deadline = tokio::time::Instant::now() + REGISTER_WAIT;
    let membership = coordinator.membership();
    while membership.live(skiff_flight::protocol::Role::Worker) < workers
        || membership.live(skiff_flight::protocol::Role::MemoryNode) < memnodes
    {
        if tokio::time::Instant::now() >= deadline {
            warn!("not every node registered in time; serving anyway");
            return;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

fn child_command(role: &str, cluster: &str) -> Result<tokio::process::Command> {
    let exe = std::env::current_exe()
        .map_err(|e| DataFusionError::External(format!("cannot find own binary: {e}").into()))?;
    let mut command = tokio::process::Command::new(exe);
    command
        .arg(role)
        .arg("--coordinator")
        .arg(cluster)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    // A child must not outlive `serve`, even when `serve` is killed.
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(command)
}

/// The pids of `serve`'s running children, and those of them removed from
/// the cluster (`skiff.remove_worker`), which are not restarted when they
/// exit. Only a child's own pid can be marked: a remote worker's reported
/// pid may equal a local child's.
#[derive(Clone, Default)]
struct Children(Arc<Mutex<Pids>>);

#[derive(Default)]
struct Pids {
    running: HashSet<u32>,
    leaving: HashSet<u32>,
}

impl Children {
    fn pids(&self) -> std::sync::MutexGuard<'_, Pids> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn started(&self, pid: u32) {
        self.pids().running.insert(pid);
    }

    /// Child `pid` exited: whether it was leaving the cluster.
    fn exited(&self, pid: u32) -> bool {
        let mut pids = self.pids();
        pids.running.remove(&pid);
        pids.leaving.remove(&pid)
    }
}

/// `skiff serve`'s workers as the coordinator starts and removes them.
struct LocalWorkers {
    start: tokio::sync::mpsc::Sender<u32>,
    children: Children,
}

impl WorkerLauncher for LocalWorkers {
    fn start(&self, n: usize) -> std::result::Result<(), String> {
        let n = u32::try_from(n).map_err(|_| format!("{n} workers"))?;
        self.start.try_send(n).map_err(|e| match e {
            tokio::sync::mpsc::error::TrySendError::Full(_) => {
                "too many skiff.add_workers calls at once; try again".to_string()
            }
            tokio::sync::mpsc::error::TrySendError::Closed(_) => {
                "skiff serve is shutting down".to_string()
            }
        })
    }

    fn forget(&self, pid: u32) {
        let mut pids = self.children.pids();
        if pids.running.contains(&pid) {
            pids.leaving.insert(pid);
        }
    }
}

/// Keep one child running until `shutdown`, restarting it when it dies,
/// unless it was removed from the cluster.
/// A command to fork, and where the command and its child go back.
type SpawnRequest = (
    tokio::process::Command,
    tokio::sync::oneshot::Sender<(
        tokio::process::Command,
        std::io::Result<tokio::process::Child>,
    )>,
);

/// The thread `serve`'s children are forked from. `PR_SET_PDEATHSIG` (a
/// child must not outlive `serve`) fires when the *thread* that forked the
/// child exits, not the process, and the runtime's threads come and go: a
/// thread that ran `block_in_place` (the coordinator's admin functions do)
/// may end later, and with it went healthy workers and memory nodes,
/// SIGKILLed. This thread lives as long as the process.
static SPAWNER: std::sync::OnceLock<std::io::Result<std::sync::mpsc::Sender<SpawnRequest>>> =
    std::sync::OnceLock::new();

fn spawner() -> std::io::Result<&'static std::sync::mpsc::Sender<SpawnRequest>> {
    let started = SPAWNER.get_or_init(|| {
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("skiff-spawner".into())
            .spawn(move || {
                // Children are registered with the runtime's process driver.
                let _runtime = runtime.enter();
                while let Ok((mut command, reply)) = rx.recv() {
                    let spawned = command.spawn();
                    let _ = reply.send((command, spawned));
                }
            })?;
        Ok(tx)
    });
    started
        .as_ref()
        .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
}

/// Fork `command` from the [`spawner`] thread; the command back, and its
/// child (`None`: the spawner thread died holding the command).
async fn spawn_child(
    command: tokio::process::Command,
) -> Option<(
    tokio::process::Command,
    std::io::Result<tokio::process::Child>,
)> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sent = match spawner() {
        Ok(spawner) => spawner.send((command, tx)).map_err(|e| e.0),
        Err(e) => return Some((command, Err(e))),
    };
    if let Err((command, _)) = sent {
        let gone = std::io::Error::other("the spawner thread is gone");
        return Some((command, Err(gone)));
    }
    rx.await.ok()
}

async fn supervise(
    name: String,
    mut command: tokio::process::Command,
    shutdown: CancellationToken,
    children: Children,
) {
    loop {
        let Some((returned, spawned)) = spawn_child(command).await else {
            warn!(%name, "cannot start: the spawner thread is gone");
            return;
        };
        command = returned;
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                warn!(%name, error = %e, "cannot start");
                return;
            }
        };
        let pid = child.id();
        if let Some(pid) = pid {
            children.started(pid);
        }
        tokio::select! {
            _ = shutdown.cancelled() => {
                let _ = child.kill().await;
                return;
            }
            status = child.wait() => {
                if pid.is_some_and(|p| children.exited(p)) {
                    info!(%name, ?status, "left the cluster");
                    return;
                }
                warn!(%name, ?status, "exited; restarting");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RESTART_DELAY) => {}
        }
    }
}
