//! A Python environment with the client libraries the client tests drive
//! (SQLAlchemy, psycopg, pandas), made on first use under
//! `target/skiff-testenv/` from PyPI, like the test data: the README's one
//! test command needs nothing installed beforehand but Python itself.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use crate::data::repo_root;

/// What the client tests import; pinned to major versions whose APIs the
/// scripts use.
pub const CLIENT_PACKAGES: [&str; 3] = [
    "sqlalchemy>=2,<3",
    "psycopg[binary]>=3.1,<4",
    "pandas>=2,<4",
];

/// The interpreter of the client test environment, creating it (and
/// installing [`CLIENT_PACKAGES`]) when it is missing or incomplete. Test
/// binaries running at once share it through a lock file; the environment
/// counts as complete only once a marker file is written after the install.
pub fn client_python() -> PathBuf {
    static LOCK: OnceLock<Mutex<()>> = OnceLock::new();
    let _guard = LOCK
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let root = repo_root().join("target/skiff-testenv");
    std::fs::create_dir_all(&root).expect("test environment directory");
    let lock_file = std::fs::File::create(root.join("python.lock")).expect("lock file");
    lock_file.lock().expect("lock the test environment");
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

fn run(command: &mut Command) {
    let output = command.output().expect("run python3 (is it installed?)");
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
