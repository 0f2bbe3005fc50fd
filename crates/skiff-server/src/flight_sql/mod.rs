//! Arrow Flight SQL front door: ADBC, JDBC and any Flight SQL client reach
//! the coordinator here. It owns authentication for Flight (basic auth in
//! the handshake, then a bearer token), the mapping from tokens and
//! connections to coordinator sessions, and the results parked between
//! `GetFlightInfo` and `DoGet`. It knows nothing of planning or workers:
//! every statement goes through [`Coordinator`].
//!
//! A statement runs when the client asks for its `FlightInfo` (so errors
//! such as a syntax error come back from that call, and the schema in the
//! `FlightInfo` is exactly the schema of the stream, which the ADBC driver
//! checks). Its stream waits under a one-shot ticket until the client's
//! `DoGet` claims it, or is dropped (which cancels the query) after
//! [`RESULT_UNCLAIMED_MAX`]. Rows then flow to the client batch by batch;
//! nothing buffers the whole result.
//!
//! Files: [`sessions`] (who is calling, what a session keeps between
//! calls, expiry), `service` (the Flight SQL calls), `metadata` (`GetSqlInfo`,
//! catalogs, schemas, tables), `params` (prepared-statement parameters).

mod ingest;
mod metadata;
mod params;
mod service;
mod sessions;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{debug, info, warn};

use service::FlightSqlFrontDoor;
use sessions::Registry;
use skiff_coordinator::Coordinator;
use skiff_node::error::{Result, ServerError};

/// A session nobody has used for this long is closed (its token stops
/// working), so tokens of clients that never say goodbye do not pile up.
pub const SESSION_IDLE_MAX: Duration = Duration::from_secs(30 * 60);

/// A token session whose every TCP connection has closed is closed after
/// this much idleness: short-lived clients (a script per query) would
/// otherwise hold `max_connections` slots for [`SESSION_IDLE_MAX`].
pub const SESSION_DETACHED_IDLE_MAX: Duration = Duration::from_secs(60);

/// A result not claimed by `DoGet` within this time is dropped, which
/// cancels its query and frees its worker.
pub const RESULT_UNCLAIMED_MAX: Duration = Duration::from_secs(60);

/// How often expired sessions and unclaimed results are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// HTTP/2 pings find clients that vanished without closing the connection
/// (a result stream blocked on flow control would otherwise wait forever).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// After shutdown, calls still streaming get this long before the server
/// stops waiting for them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serve Flight SQL clients on `listener` until `shutdown`.
pub async fn serve(
    coordinator: Coordinator,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<()> {
    let registry = Arc::new(Registry::default());
    let door = FlightSqlFrontDoor::new(coordinator, Arc::clone(&registry));
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "Flight SQL listening");
    }
    // Not `skiff_flight::server_builder`: its large receive windows are for
    // internal links; a client could make this public port buffer that much.
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(FlightServiceServer::new(door))
        .serve_with_incoming_shutdown(
            incoming(listener, Arc::clone(&registry)),
            shutdown.clone().cancelled_owned(),
        );
    // Sweep until shutdown, then give streaming calls a grace period.
    let sweep_then_grace = async {
        let mut tick = tokio::time::interval(SWEEP_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => registry.sweep(),
            }
        }
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        served = server => served,
        () = sweep_then_grace => {
            warn!("Flight SQL calls still streaming at shutdown were cut off");
            Ok(())
        }
    };
    served.map_err(|e| ServerError::internal(format!("Flight SQL server: {e}")))
}

/// Accepted connections, each tracked so the registry hears when it
/// closes. Accept errors (a peer that reset before `accept`, no file
/// descriptors left) are logged and skipped: they must not stop the server.
fn incoming(
    listener: TcpListener,
    registry: Arc<Registry>,
) -> impl Stream<Item = std::io::Result<TrackedStream>> {
    futures::stream::unfold((listener, registry), |(listener, registry)| async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let tracked = TrackedStream {
                        inner: stream,
                        peer,
                        registry: Arc::clone(&registry),
                    };
                    return Some((Ok(tracked), (listener, registry)));
                }
                Err(e) => {
                    debug!(error = %e, "Flight SQL accept failed");
                    // Out of descriptors: give closing connections a moment.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
}

/// A client's TCP connection; tells the registry when it closes, which ends
/// the connection's anonymous session and detaches its token sessions.
struct TrackedStream {
    inner: TcpStream,
    peer: SocketAddr,
    registry: Arc<Registry>,
}

impl Drop for TrackedStream {
    fn drop(&mut self) {
        self.registry.connection_closed(self.peer);
    }
}

impl Connected for TrackedStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
