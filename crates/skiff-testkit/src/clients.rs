//! The client software the client tests drive, fetched on first use under
//! `target/skiff-testenv/` like the test data, so the README's one test
//! command needs nothing installed beforehand but Python and Java: a
//! Python environment with SQLAlchemy, psycopg, pandas, deltalake, ADBC's
//! Flight SQL driver and DuckDB with its delta extension (from PyPI), and
//! PostgreSQL's JDBC driver (from Maven Central).

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::data::repo_root;

/// What the client tests import; pinned to major versions whose APIs the
/// scripts use.
pub const CLIENT_PACKAGES: [&str; 9] = [
    "sqlalchemy>=2,<3",
    "psycopg[binary]>=3.1,<4",
    "pandas>=2,<4",
    // An independent Delta Lake reader and writer, for the interop tests.
    "deltalake>=1,<2",
    "pyarrow>=14",
    // ADBC's Flight SQL driver: bulk ingest as ADBC clients send it.
    "adbc-driver-flightsql>=1,<2",
    // DuckDB reading Skiff's Delta tables: its delta extension from PyPI
    // (DuckDB's own download needs the network), built for one DuckDB
    // version, hence the exact pins.
    "duckdb==1.5.5",
    "duckdb-extensions==1.5.5",
    "duckdb-extension-delta==1.5.5",
];

/// The interpreter of the client test environment, creating it (and
/// installing [`CLIENT_PACKAGES`]) when it is missing or incomplete. Test
/// binaries running at once share it through a lock file; the environment
/// counts as complete only once a marker file is written after the install.
pub fn python() -> PathBuf {
    let (root, _lock) = locked("python");
    let env = root.join("python");
    let python = env.join("bin/python");
    let marker = env.join("skiff-complete");
    let wanted = CLIENT_PACKAGES.join("\n");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&env);
    run(Command::new("python3").args(["-m", "venv"]).arg(&env));
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(CLIENT_PACKAGES));
    std::fs::write(&marker, wanted).expect("environment marker");
    python
}

/// PostgreSQL's JDBC driver, the version pinned here.
pub const JDBC_DRIVER: &str = "org/postgresql/postgresql/42.7.4/postgresql-42.7.4.jar";

/// The JDBC driver's jar, downloaded from Maven Central when missing (into
/// a temporary name, renamed when complete).
pub fn jdbc_driver() -> PathBuf {
    let (root, _lock) = locked("jdbc");
    let name = JDBC_DRIVER.rsplit('/').next().unwrap_or("postgresql.jar");
    let jar = root.join(name);
    if jar.is_file() {
        return jar;
    }
    let partial = root.join(format!("{name}.partial"));
    run(Command::new("curl")
        .args(["-fsSL", "--retry", "3", "-o"])
        .arg(&partial)
        .arg(format!("https://repo1.maven.org/maven2/{JDBC_DRIVER}")));
    std::fs::rename(&partial, &jar).expect("jar into place");
    jar
}

/// The environment directory, locked against other test threads and
/// binaries preparing `what` at the same time (the lock lasts as long as
/// the returned file).
pub(crate) fn locked(what: &str) -> (PathBuf, std::fs::File) {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let _guard = LOCK
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let root = repo_root().join("target/skiff-testenv");
    std::fs::create_dir_all(&root).expect("test environment directory");
    let file = std::fs::File::create(root.join(format!("{what}.lock"))).expect("lock file");
    file.lock().expect("lock the test environment");
    (root, file)
}

/// Run `command` to the end; a panic with its output when it fails.
pub(crate) fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?} (is it installed?): {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
