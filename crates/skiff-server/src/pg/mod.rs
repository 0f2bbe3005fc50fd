//! The PostgreSQL wire front door, built on `pgwire`: psql, psycopg and
//! JDBC connect here unchanged.
//!
//! A connection goes through startup ([`auth`]: TLS if configured,
//! SCRAM-SHA-256 or loopback trust, one coordinator session per
//! connection), then runs statements with the simple and the extended
//! query protocol ([`handler`]), rows encoded batch by batch as they arrive
//! ([`types`]). The session lives in the connection's pgwire extensions and
//! ends with it; dropping a connection drops its result streams, which
//! cancels their queries. A cancel request names a connection by the
//! backend key handed out at startup ([`CancelKeys`]) and cancels that
//! session's running query.
//!
//! Nothing a client sends may take the server down: protocol errors end
//! that one connection, statement errors are reported and the connection
//! goes on, and a connection task that fails is only logged.

mod auth;
mod copy_in;
mod copy_out;
mod handler;
mod types;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{ClientInfo, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult, SEVERITY_ERROR, SEVERITY_FATAL};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use pgwire::tokio::TlsAcceptor;
use pgwire::tokio::tokio_rustls::rustls;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use skiff_coordinator::config::TlsFiles;
use skiff_node::sync::lock;

use skiff_coordinator::{ClientSession, Coordinator};
use skiff_node::error::{Result, ServerError, SqlState};

/// Connection tasks beyond the session limit: clients still in startup (a
/// connection that never authenticates holds a task for pgwire's startup
/// timeout) and cancel requests, which arrive on connections of their own.
const CONNECTION_TASKS_SPARE: usize = 64;

/// Pause after a failed `accept` (say, out of file descriptors) so the loop
/// does not spin while the condition lasts.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Serve PostgreSQL clients on `listener` until `shutdown`; then every open
/// connection is closed.
pub async fn serve(
    coordinator: Coordinator,
    listener: TcpListener,
    tls: Option<TlsFiles>,
    shutdown: CancellationToken,
) -> Result<()> {
    let (acceptor, cert_pem) = match &tls {
        Some(files) => {
            let (acceptor, pem) = tls_acceptor(files)?;
            (Some(acceptor), Some(pem))
        }
        None => (None, None),
    };
    let tasks_max = coordinator.limits().max_connections + CONNECTION_TASKS_SPARE;
    let front = Arc::new(Front::new(coordinator, cert_pem.as_deref()));
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, tls = acceptor.is_some(), "PostgreSQL clients accepted");
    }
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(ended) = connections.join_next(), if !connections.is_empty() => {
                if let Err(e) = ended {
                    warn!(error = %e, "a PostgreSQL connection task failed");
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) if connections.len() >= tasks_max => {
                    warn!(%peer, tasks_max, "too many PostgreSQL connections; closing a new one");
                    drop(socket);
                }
                Ok((socket, peer)) => {
                    let (acceptor, front) = (acceptor.clone(), Arc::clone(&front));
                    connections.spawn(async move {
                        if let Err(e) = pgwire::tokio::process_socket(socket, acceptor, front).await
                        {
                            debug!(%peer, error = %e, "PostgreSQL connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "cannot accept a PostgreSQL connection");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
        }
    }
    connections.shutdown().await;
    Ok(())
}

/// The TLS acceptor for `files`, and the certificate chain's PEM (SCRAM
/// channel binding needs it).
fn tls_acceptor(files: &TlsFiles) -> Result<(TlsAcceptor, Vec<u8>)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            ServerError::new(
                SqlState::InvalidParameterValue,
                format!("cannot read {}: {e}", path.display()),
            )
        })
    };
    let bad = |what: String| ServerError::new(SqlState::InvalidParameterValue, what);
    let cert_pem = read(&files.cert)?;
    let key_pem = read(&files.key)?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("certificate {}: {e}", files.cert.display())))?;
    if certs.is_empty() {
        return Err(bad(format!("no certificate in {}", files.cert.display())));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| bad(format!("private key {}: {e}", files.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ServerError::internal(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(format!("TLS certificate and key: {e}")))?;
    // Clients that open with TLS directly (PostgreSQL 17's
    // sslnegotiation=direct) must name this protocol.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok((TlsAcceptor::from(Arc::new(config)), cert_pem))
}

/// The handlers every connection shares.
struct Front {
    startup: Arc<auth::Startup>,
    queries: Arc<Queries>,
    cancel: Arc<Cancel>,
}

impl Front {
    fn new(coordinator: Coordinator, cert_pem: Option<&[u8]>) -> Self {
        let keys = Arc::new(CancelKeys::default());
        Self {
            startup: Arc::new(auth::Startup::new(
                coordinator.clone(),
                Arc::clone(&keys),
                cert_pem,
            )),
            queries: Arc::new(Queries::new(coordinator.clone())),
            cancel: Arc::new(Cancel { coordinator, keys }),
        }
    }
}

impl PgWireServerHandlers for Front {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::clone(&self.queries)
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::clone(&self.queries)
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::clone(&self.startup)
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::clone(&self.cancel)
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        Arc::clone(&self.queries)
    }
}

/// One authenticated connection: its session, and its place among the
/// cancelable connections (left when the connection ends).
pub(super) struct Connection {
    session: ClientSession,
    keys: Arc<CancelKeys>,
    key: (i32, Bytes),
    copy_in: copy_in::CopyInSlot,
}

impl Connection {
    /// The connection, registered under its backend key.
    fn new(
        session: ClientSession,
        keys: Arc<CancelKeys>,
        pid: i32,
        secret: &SecretKey,
    ) -> Arc<Self> {
        let key = (pid, secret.to_bytes());
        let connection = Arc::new(Self {
            session,
            keys: Arc::clone(&keys),
            key: key.clone(),
            copy_in: copy_in::CopyInSlot::default(),
        });
        lock(&keys.connections).insert(key, Arc::downgrade(&connection));
        connection
    }

    pub(super) fn session(&self) -> &ClientSession {
        &self.session
    }

    /// Its `COPY ... FROM STDIN` in progress.
    fn copy_in(&self) -> &copy_in::CopyInSlot {
        &self.copy_in
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        lock(&self.keys.connections).remove(&self.key);
    }
}

/// Open connections by backend key (process id, secret key); at most one
/// entry per open session.
#[derive(Default)]
pub(super) struct CancelKeys {
    connections: Mutex<HashMap<(i32, Bytes), Weak<Connection>>>,
}

/// Cancel requests: stop the query the named connection runs, if any.
struct Cancel {
    coordinator: Coordinator,
    keys: Arc<CancelKeys>,
}

#[async_trait]
impl CancelHandler for Cancel {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes());
        let connection = lock(&self.keys.connections)
            .get(&key)
            .and_then(Weak::upgrade);
        // Like PostgreSQL, say nothing either way: a wrong key learns nothing.
        let Some(connection) = connection else {
            debug!(pid = request.pid, "cancel request for no open connection");
            return;
        };
        if let Some(query) = connection.session.current_query() {
            let canceled = self.coordinator.cancel(query);
            debug!(pid = request.pid, query, canceled, "cancel request");
        }
    }
}

/// A statement's error as the client sees it: SQLSTATE and message, with
/// severity ERROR (the connection goes on).
pub(super) fn error(error: ServerError) -> PgWireError {
    with_severity(error, SEVERITY_ERROR)
}

/// An error that ends the connection (severity FATAL).
pub(super) fn fatal(error: ServerError) -> PgWireError {
    with_severity(error, SEVERITY_FATAL)
}

fn with_severity(error: ServerError, severity: &str) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        severity.to_string(),
        error.state.code().to_string(),
        error.message,
    )))
}

/// Simple and extended query handling for every connection.
struct Queries {
    coordinator: Coordinator,
    parser: Arc<handler::Parser>,
}

impl Queries {
    fn new(coordinator: Coordinator) -> Self {
        Self {
            parser: Arc::new(handler::Parser {
                coordinator: coordinator.clone(),
            }),
            coordinator,
        }
    }
}

/// The connection a message arrived on; every query message comes after
/// startup opened it.
fn connection<C: ClientInfo>(client: &C) -> PgWireResult<Arc<Connection>> {
    client
        .session_extensions()
        .get::<Arc<Connection>>()
        .map(|c| Arc::clone(c.as_ref()))
        .ok_or_else(|| {
            fatal(ServerError::new(
                SqlState::ProtocolViolation,
                "query before the session was established",
            ))
        })
}

#[cfg(test)]
pub(crate) mod tests;
