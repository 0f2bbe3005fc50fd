//! Connecting to a Flight peer and calling its actions, and the transport
//! settings (HTTP/2 windows and frames) every internal link uses on both
//! ends.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use arrow_flight::Action;
use arrow_flight::flight_service_client::FlightServiceClient;
use futures::TryStreamExt;
use prost::Message;
use tonic::transport::{Channel, Endpoint};

use crate::protocol::{BufferCleared, BufferStats, PipelineGroups, action};

/// How long establishing a connection to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// HTTP/2 flow-control windows and frame size for Skiff's internal links.
/// States and result streams run to hundreds of megabytes over loopback or
/// a LAN; with hyper's defaults (1 MiB windows, 16 KiB frames) a 26 MB state
/// moved at about 500 MB/s, stalled on window updates.
const STREAM_WINDOW: u32 = 16 << 20;
/// See [`STREAM_WINDOW`]; one connection may carry several streams.
const CONNECTION_WINDOW: u32 = 64 << 20;
/// See [`STREAM_WINDOW`].
const MAX_FRAME: u32 = 1 << 20;

/// A server builder with Skiff's internal transport settings: large windows
/// and frames. (No-delay is set on the listener's `TcpIncoming`, which
/// overrides the builder's.)
pub fn server_builder() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
}

/// A Flight client for `addr` (`host:port`, no scheme).
pub async fn connect(addr: &str) -> Result<FlightServiceClient<Channel>, tonic::Status> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| tonic::Status::invalid_argument(format!("bad address {addr}: {e}")))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("cannot reach {addr}: {e}")))?;
    Ok(FlightServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX))
}

/// Flight clients by peer address, each connected once and shared by
/// every call to that peer (a client is a handle on one HTTP/2
/// connection, which carries many calls at once): a connection per call
/// costs a TCP and an HTTP/2 handshake, a round trip or more, on calls
/// that may themselves be one round trip. A client whose call failed is
/// forgotten ([`Clients::forget`]) and the next call connects anew.
#[derive(Debug, Default)]
pub struct Clients(Mutex<HashMap<String, FlightServiceClient<Channel>>>);

impl Clients {
    /// The client of `addr`, connected now if there is none.
    pub async fn get(&self, addr: &str) -> Result<FlightServiceClient<Channel>, tonic::Status> {
        if let Some(client) = lock(&self.0).get(addr) {
            return Ok(client.clone());
        }
        let client = connect(addr).await?;
        lock(&self.0).insert(addr.to_string(), client.clone());
        Ok(client)
    }

    /// Connect to `addr` anew on its next call: a call to it failed.
    pub fn forget(&self, addr: &str) {
        lock(&self.0).remove(addr);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Call action `kind` with a protobuf `request`; decode the first result as
/// `R` (the default value when the action returns nothing).
pub async fn do_action<Q: Message, R: Message + Default>(
    client: &mut FlightServiceClient<Channel>,
    kind: &str,
    request: &Q,
) -> Result<R, tonic::Status> {
    let action = Action {
        r#type: kind.to_string(),
        body: request.encode_to_vec().into(),
    };
    let mut results = client.do_action(action).await?.into_inner();
    match results.try_next().await? {
        Some(result) => R::decode(result.body)
            .map_err(|e| tonic::Status::internal(format!("bad {kind} reply: {e}"))),
        None => Ok(R::default()),
    }
}

/// The counters of the buffer pool of the worker at `addr`.
pub async fn buffer_stats(addr: &str) -> Result<BufferStats, tonic::Status> {
    let mut client = connect(addr).await?;
    do_action::<_, BufferStats>(&mut client, action::BUFFER_STATS, &()).await
}

/// The latest pipeline groups of the worker at `addr`.
pub async fn pipeline_groups(addr: &str) -> Result<PipelineGroups, tonic::Status> {
    let mut client = connect(addr).await?;
    do_action::<_, PipelineGroups>(&mut client, action::PIPELINE_GROUPS, &()).await
}

/// Empty the buffer pool of the worker at `addr`; the bytes it freed.
pub async fn clear_buffer(addr: &str) -> Result<u64, tonic::Status> {
    let mut client = connect(addr).await?;
    let cleared = do_action::<_, BufferCleared>(&mut client, action::BUFFER_CLEAR, &()).await?;
    Ok(cleared.bytes)
}

/// `DoPut` the messages `send` pushes into the queue `rx` reads (tonic
/// wants a `'static` request stream; a bounded queue lets a borrowing
/// future copy messages in as they are sent); the single reply's
/// `app_metadata`. `what` names the put in errors.
pub async fn put_queued(
    client: &mut FlightServiceClient<Channel>,
    rx: tokio::sync::mpsc::Receiver<arrow_flight::FlightData>,
    send: impl std::future::Future<Output = ()>,
    what: &str,
) -> Result<bytes::Bytes, tonic::Status> {
    let requests = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|message| (message, rx))
    });
    let call = async {
        let mut replies = client.do_put(requests).await?.into_inner();
        replies.try_next().await
    };
    let ((), reply) = tokio::join!(send, call);
    let reply = reply?.ok_or_else(|| tonic::Status::internal(format!("{what}: no reply")))?;
    Ok(reply.app_metadata)
}
