//! Starting `skiff serve` on free ports and connecting clients to it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use skiff_bench::launch::{Coordinator, START_TIMEOUT};

/// A running `skiff serve`; killed (with its children) on drop.
pub struct Server {
    process: Coordinator,
    pub pg: SocketAddr,
    pub flight: SocketAddr,
    pub cluster: SocketAddr,
    /// The web console.
    pub console: Option<SocketAddr>,
    /// The server's stderr (its log), for failure messages.
    pub log: PathBuf,
    _log_dir: tempfile::TempDir,
    _data_dir: Option<tempfile::TempDir>,
}

/// Options of a test server.
#[derive(Default, Clone)]
pub struct Options {
    pub workers: Option<u32>,
    /// Start the server as users do, without `--fault-injection` (test
    /// servers accept the test hooks unless this is set).
    pub as_users_run_it: bool,
    pub extra: Vec<String>,
    pub env: Vec<(String, String)>,
    /// A limit on each process's data memory (RLIMIT_DATA, bytes): heap
    /// and private mappings, what a load that buffered its input would
    /// outgrow.
    pub data_limit: Option<u64>,
}

/// A data directory of its own whose tables are links to `data`'s.
pub fn linked_data_dir(data: &Path) -> tempfile::TempDir {
    let own = tempfile::tempdir().expect("data dir");
    for entry in std::fs::read_dir(data).expect("dataset") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_owned();
        if !name.to_string_lossy().starts_with('.') {
            std::os::unix::fs::symlink(&path, own.path().join(name)).expect("link table");
        }
    }
    own
}

/// Run `command` (and what it starts) with at most `bytes` of data memory.
pub fn limit_data(command: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit is async-signal-safe, as pre_exec requires.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

impl Server {
    /// A server over the tables of `data`, in a data directory of its own
    /// (links to those tables): one coordinator per data directory, and
    /// tests run many servers at once.
    pub fn start(data: &Path, options: Options) -> Server {
        let own = linked_data_dir(data);
        let mut server = Server::start_in(own.path(), options);
        server._data_dir = Some(own);
        server
    }

    /// A server whose data directory is `data` itself.
    pub fn start_in(data: &Path, options: Options) -> Server {
        let log_dir = tempfile::tempdir().expect("log dir");
        let log = log_dir.path().join("serve.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_skiff"));
        command
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--pg-addr", "127.0.0.1:0", "--flight-addr", "127.0.0.1:0"])
            .args(["--http-addr", "127.0.0.1:0"])
            .args(["--partitions", "2"])
            .arg("--workers")
            .arg(options.workers.unwrap_or(2).to_string())
            .args((!options.as_users_run_it).then_some("--fault-injection"))
            .args(&options.extra)
            .env_remove("SKIFF_USER")
            .env_remove("SKIFF_PASSWORD")
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        if let Some(limit) = options.data_limit {
            limit_data(&mut command, limit);
        }
        let process = match Coordinator::start(&mut command, START_TIMEOUT) {
            Ok(process) => process,
            Err(e) => panic!(
                "skiff serve did not start: {e}; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ),
        };
        let at = process.at;
        Server {
            pg: at.pg.expect("a PostgreSQL front door"),
            flight: at.flight.expect("a Flight SQL front door"),
            cluster: at.cluster,
            console: at.console,
            process,
            log,
            _log_dir: log_dir,
            _data_dir: None,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The coordinator process is still running.
    pub fn alive(&mut self) -> bool {
        self.process.alive()
    }

    pub fn pg_config(&self, user: &str) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(self.pg.ip().to_string())
            .port(self.pg.port())
            .user(user)
            .dbname("skiff")
            .connect_timeout(Duration::from_secs(10));
        config
    }

    /// A PostgreSQL client as `skiff` (no password: loopback trust).
    pub async fn pg(&self) -> tokio_postgres::Client {
        connect(self.pg_config("skiff")).await.expect("connect")
    }
}

/// Connect and drive the connection in the background.
pub async fn connect(
    config: tokio_postgres::Config,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::runtime::Handle::current().spawn(connection);
    Ok(client)
}

/// Rows of a simple query as text cells.
pub async fn simple_rows(
    client: &tokio_postgres::Client,
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>, tokio_postgres::Error> {
    let messages = client.simple_query(sql).await?;
    Ok(messages
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

/// Waits (up to a minute) until `n` workers are alive.
pub async fn wait_for_workers(client: &tokio_postgres::Client, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let sql = "SELECT count(*) FROM skiff.workers WHERE role = 'worker' AND state = 'alive'";
    loop {
        let rows = simple_rows(client, sql).await.expect("skiff.workers");
        let alive: usize = rows[0][0]
            .as_deref()
            .unwrap_or("0")
            .parse()
            .expect("a count");
        if alive >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{alive} of {n} workers alive"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// SQLSTATE of a failed call, or "none".
pub fn sqlstate(error: &tokio_postgres::Error) -> String {
    error
        .code()
        .map_or_else(|| format!("none ({error})"), |c| c.code().to_string())
}

/// Run one psql command (SQL or a meta-command) against `server`; its output, or a panic
/// with what psql said.
pub fn psql(server: &Server, command: &str) -> String {
    let output = psql_command(server, command)
        .output()
        .expect("run psql (the PostgreSQL client must be installed)");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "psql -c '{command}' failed:\n{stdout}{stderr}\nserver log:\n{}",
        server.log_text()
    );
    stdout
}

/// The psql invocation [`psql`] runs, to start without waiting.
pub fn psql_command(server: &Server, command: &str) -> Command {
    let mut psql = Command::new("psql");
    psql.args(["-h", &server.pg.ip().to_string()])
        .args(["-p", &server.pg.port().to_string()])
        .args(["-U", "skiff", "-d", "skiff", "-X", "-v", "ON_ERROR_STOP=1"])
        .args(["-c", command])
        .env("PGCONNECT_TIMEOUT", "10");
    psql
}

/// `bench` at SF 0.01 written by `skiff gen --partitions P` (its big tables
/// hash-partitioned managed tables), generated once per machine like
/// `skiff_testkit::dataset`.
pub fn partitioned_dataset(bench: skiff_gen::Benchmark, partitions: u32) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let name = skiff_testkit::bench_name(bench);
    let root = skiff_testkit::repo_root().join("target/skiff-testdata");
    std::fs::create_dir_all(&root).expect("test data directory");
    let lock = std::fs::File::create(root.join(format!("{name}-sf0.01-p{partitions}.lock")))
        .expect("lock file");
    lock.lock().expect("lock test data");
    let dir = root.join(format!("{name}-sf0.01-p{partitions}"));
    let complete = dir.join(".complete");
    if !complete.exists() {
        let output = Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["gen", name, "--sf", "0.01", "--force", "--out"])
            .arg(&dir)
            .args(["--partitions", &partitions.to_string()])
            .output()
            .expect("skiff gen");
        assert!(
            output.status.success(),
            "skiff gen --partitions failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(&complete, b"").expect("mark complete");
    }
    dir
}
