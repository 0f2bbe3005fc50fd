//! An S3-compatible server for the tests of `s3://` data directories:
//! `s3s-fs` (the S3 API over a local directory, from crates.io), built on
//! first use under `target/skiff-testenv/` like the client environments,
//! and started by each test on a port of its own.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::clients::{locked, run};

/// The s3s-fs release the tests use.
pub const S3S_FS_VERSION: &str = "0.14.1";

/// The bucket every server starts with.
pub const BUCKET: &str = "skiff";

const ACCESS_KEY: &str = "skiff-test";
const SECRET_KEY: &str = "skiff-test-secret";

/// How long a started server may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// The s3s-fs binary, built with `cargo install` when missing (about a
/// minute on two cores). The install counts as complete only once a
/// marker naming the version is written after it.
pub fn s3s_fs() -> PathBuf {
    let (root, _lock) = locked("s3s-fs");
    let dir = root.join("s3s-fs");
    let binary = dir.join("bin/s3s-fs");
    let marker = dir.join("skiff-complete");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(S3S_FS_VERSION) && binary.is_file()
    {
        return binary;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // CI lints Skiff's crates as it builds them (`.ci/run` names clippy as
    // the workspace's compiler); the install builds someone else's crate.
    run(Command::new(cargo)
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .args(["install", "--quiet", "--debug", "--features", "binary"])
        .args(["--version", &format!("={S3S_FS_VERSION}"), "--root"])
        .arg(&dir)
        .arg("s3s-fs"));
    std::fs::write(&marker, S3S_FS_VERSION).expect("s3s-fs marker");
    binary
}

/// A running s3s-fs over a temporary directory, killed when dropped. Its
/// objects are files under [`S3Server::bucket_dir`].
pub struct S3Server {
    child: Child,
    root: tempfile::TempDir,
    port: u16,
}

impl S3Server {
    /// Start a server holding an empty [`BUCKET`], with signature checks
    /// on (the keys of [`S3Server::env`]).
    pub fn start() -> Self {
        let binary = s3s_fs();
        let root = tempfile::tempdir().expect("s3 root");
        std::fs::create_dir(root.path().join(BUCKET)).expect("bucket directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs");
        let server = Self { child, root, port };
        let deadline = Instant::now() + START_DEADLINE;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// The environment a Skiff process needs to use this server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// `s3://skiff/PREFIX`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// The directory holding the bucket's objects.
    pub fn bucket_dir(&self) -> PathBuf {
        self.root.path().join(BUCKET)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
