//! An S3-compatible server for the tests of `s3://` data directories:
//! `s3s-fs` (the S3 API over a local directory, from crates.io), served in
//! the test's own process on a thread of its own and a port of its own:
//! as a `cargo install`ed binary it cost the tests about two minutes of
//! building, and crates.io while they ran.

use std::net::TcpListener;
use std::path::PathBuf;
use std::thread::JoinHandle;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::sync::oneshot;

/// The bucket every server starts with.
pub const BUCKET: &str = "skiff";

const ACCESS_KEY: &str = "skiff-test";
const SECRET_KEY: &str = "skiff-test-secret";

/// A running s3s-fs over a temporary directory, stopped when dropped. Its
/// objects are files under [`S3Server::bucket_dir`].
pub struct S3Server {
    root: tempfile::TempDir,
    port: u16,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl S3Server {
    /// Start a server holding an empty [`BUCKET`], with signature checks
    /// on (the keys of [`S3Server::env`]). It accepts connections once
    /// this returns: the socket is bound before.
    pub fn start() -> Self {
        let root = tempfile::tempdir().expect("s3 root");
        std::fs::create_dir(root.path().join(BUCKET)).expect("bucket directory");
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("the bound address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let fs = s3s_fs::FileSystem::new(root.path()).expect("s3s-fs over the root");
        let mut builder = S3ServiceBuilder::new(fs);
        builder.set_auth(SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("s3s-fs".into())
            .spawn(move || serve(listener, service, stopped))
            .expect("the S3 server's thread");
        Self {
            root,
            port,
            stop: Some(stop),
            thread: Some(thread),
        }
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
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves `service` on `listener` until `stopped` fires; the connections
/// still open then are dropped with the runtime.
fn serve(listener: TcpListener, service: S3Service, mut stopped: oneshot::Receiver<()>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the S3 server");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        let http = ConnBuilder::new(TokioExecutor::new());
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((socket, _)) = accepted else { continue };
                    let connection = http
                        .serve_connection(TokioIo::new(socket), service.clone())
                        .into_owned();
                    connections.spawn(async move {
                        let _ = connection.await;
                    });
                }
                _ = &mut stopped => break,
            }
            while connections.try_join_next().is_some() {}
        }
    });
}
