//! The memory node's Flight service: the state cache and the chunk store
//! over the wire.
//!
//! Owns the mapping of Flight calls onto [`StateCache`] and [`ChunkStore`]:
//! `DoGet` of a [`ChunkRequest`] ticket streams a row group's chunks, of
//! a [`FragmentRequest`] a fragment's answer (both through the emulated
//! [`Link`] when one is set); the table actions load,
//! unload and count. For the state cache: `DoPut` (a
//! [`StatePut`] descriptor, then the messages `skiff_flight::state_cache`
//! defines, stored as they come), `DoGet` (a [`StateKey`] ticket; the
//! stored messages streamed back), and the delete and stats actions; plus
//! the periodic sweep of expired entries. Cache calls that touch the disk
//! run on blocking threads, fed through bounded queues so neither side
//! holds more than a few messages.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_flight::{Action, FlightData, Ticket};
use datafusion::common::runtime::SpawnedTask;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use skiff_flight::fragments::decision_message;
use skiff_flight::protocol::{
    FragmentDecision, FragmentRequest, LoadTable, StateKey, StatePut, StateStored, UnloadTable,
    action,
};
use skiff_flight::{FlightStream, Handler, flight_server};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{debug, warn};

use super::cache::{CacheError, EntryOptions, PutInfo, Reader, StateCache};
use super::chunks::ChunkStore;
use super::fragments::{self, Offloader};
use super::link::Link;
use skiff_node::error::{Result, ServerError};

/// Messages between the network and a blocking writer or reader.
const QUEUE: usize = 8;
/// How often expired entries are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The memory node's [`Handler`].
pub struct MemnodeService {
    cache: Arc<StateCache>,
    chunks: Arc<ChunkStore>,
    link: Option<Arc<Link>>,
    /// Where fragments run; `None`: every fragment is pushed back.
    offloader: Option<Arc<Offloader>>,
    /// Chunk messages still to send with a flipped byte (tests only).
    #[cfg(test)]
    corrupt: Arc<std::sync::atomic::AtomicUsize>,
}

impl MemnodeService {
    /// A service of `cache` and an empty chunk store that holds nothing.
    pub fn new(cache: Arc<StateCache>) -> Self {
        Self {
            cache,
            chunks: Arc::new(ChunkStore::new(0, skiff_flight::chunks::DEFAULT_CHUNK_SIZE)),
            link: None,
            offloader: None,
            #[cfg(test)]
            corrupt: Arc::default(),
        }
    }

    /// The next `n` chunk messages sent leave with a flipped byte.
    #[cfg(test)]
    pub(crate) fn corrupting(self, n: Arc<std::sync::atomic::AtomicUsize>) -> Self {
        Self { corrupt: n, ..self }
    }

    pub fn with_chunks(mut self, chunks: Arc<ChunkStore>) -> Self {
        self.chunks = chunks;
        self
    }

    /// Chunks leave through `link`.
    pub fn with_link(mut self, link: Option<Arc<Link>>) -> Self {
        self.link = link;
        self
    }

    /// Fragments run on `offloader`'s threads.
    pub fn with_offloader(mut self, offloader: Option<Arc<Offloader>>) -> Self {
        self.offloader = offloader;
        self
    }

    /// A fragment's answer, each message sent once the link has room.
    fn fragment_stream(
        &self,
        request: FragmentRequest,
    ) -> std::result::Result<FlightStream, Status> {
        let messages = match &self.offloader {
            Some(offloader) => fragments::answer(offloader, &self.chunks, request)?,
            None => {
                let decision = FragmentDecision {
                    offload: false,
                    reason: "this node runs no fragments".to_string(),
                    ..FragmentDecision::default()
                };
                let (tx, rx) = mpsc::channel(1);
                let _ = tx.try_send(Ok(decision_message(&decision)));
                rx
            }
        };
        let link = self.link.clone();
        let stream = tokio_stream_of(messages).then(move |message| {
            let link = link.clone();
            async move {
                if let (Some(link), Ok(message)) = (&link, &message) {
                    link.send(message.data_body.len() + message.app_metadata.len())
                        .await;
                }
                message
            }
        });
        Ok(Box::pin(stream))
    }

    /// A row group's chunks, each sent once the link has room for it.
    fn chunk_stream(
        &self,
        request: &skiff_flight::protocol::ChunkRequest,
    ) -> std::result::Result<FlightStream, Status> {
        #[allow(unused_mut)]
        let mut messages = self.chunks.chunks(request)?;
        #[cfg(test)]
        for message in &mut messages {
            use std::sync::atomic::Ordering;
            let left = self.corrupt.load(Ordering::SeqCst);
            if left > 0 && self.corrupt.fetch_sub(1, Ordering::SeqCst) > 0 {
                let mut body = message.data_body.to_vec();
                let at = body.len() / 2;
                body[at] ^= 1;
                message.data_body = body.into();
            }
        }
        let link = self.link.clone();
        let stream = futures::stream::iter(messages).then(move |message| {
            let link = link.clone();
            async move {
                if let Some(link) = link {
                    link.send(message.data_body.len() + message.app_metadata.len())
                        .await;
                }
                Ok(message)
            }
        });
        Ok(Box::pin(stream))
    }
}

/// A queue's messages as a stream.
fn tokio_stream_of<T: Send + 'static>(
    rx: mpsc::Receiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}

enum PutItem {
    Chunk(bytes::Bytes, bytes::Bytes),
    End,
}

/// What a get's reader thread sends: a message, or the reader once it has
/// read every chunk (so the stream can record the get as complete only
/// after the transport has taken the last message).
enum GetItem {
    Message(Result<FlightData, Status>),
    Done(Box<Reader>),
}

struct GetState {
    key: String,
    ended: bool,
    cache: Arc<StateCache>,
    rx: mpsc::Receiver<GetItem>,
    _reading: SpawnedTask<()>,
}

#[tonic::async_trait]
impl Handler for MemnodeService {
    async fn put(&self, mut data: FlightStream) -> std::result::Result<bytes::Bytes, Status> {
        let first = data
            .try_next()
            .await?
            .ok_or_else(|| Status::invalid_argument("empty state put"))?;
        let put = match &first.flight_descriptor {
            Some(descriptor) => StatePut::decode(descriptor.cmd.clone())
                .map_err(|e| Status::invalid_argument(format!("bad state put: {e}")))?,
            None => return Err(Status::invalid_argument("state put without a descriptor")),
        };
        let key = put.key.clone();
        let messages = put.messages;
        let options = EntryOptions {
            ttl: (put.ttl_ms > 0).then(|| Duration::from_millis(put.ttl_ms)),
            read_once: put.read_once,
            durable: put.durable,
        };
        let (tx, mut rx) = mpsc::channel::<PutItem>(QUEUE);
        let cache = Arc::clone(&self.cache);
        let writing = SpawnedTask::spawn_blocking(move || -> std::result::Result<_, CacheError> {
            let mut writer = cache.begin_put(&put.key, options)?;
            while let Some(item) = rx.blocking_recv() {
                match item {
                    PutItem::Chunk(meta, body) => writer.push(meta, body)?,
                    PutItem::End => return writer.finish(),
                }
            }
            // The stream failed: dropping the writer leaves nothing.
            Err(CacheError::Aborted { key: put.key })
        });
        let forwarded = async {
            let mut received = 0;
            let mut next = Some(first);
            while let Some(message) = next {
                received += 1;
                let item = PutItem::Chunk(message.app_metadata, message.data_body);
                if tx.send(item).await.is_err() {
                    // The writer stopped; its result says why.
                    return Ok(());
                }
                next = data.try_next().await?;
            }
            if received != messages {
                return Err(Status::aborted(format!(
                    "state put {key} ended after {received} of {messages} messages"
                )));
            }
            let _ = tx.send(PutItem::End).await;
            Ok::<_, Status>(())
        }
        .await;
        if let Err(e) = forwarded {
            warn!(%key, error = e.message(), "state put broke off; nothing stored");
            return Err(e);
        }
        drop(tx);
        let stored: PutInfo = writing
            .join()
            .await
            .map_err(|e| Status::internal(format!("state put {key}: {e}")))??;
        Ok(StateStored {
            bytes: stored.bytes,
            chunks: stored.chunks,
        }
        .encode_to_vec()
        .into())
    }

    async fn get(&self, ticket: Ticket) -> std::result::Result<FlightStream, Status> {
        if let Some(request) = skiff_flight::fragments::fragment_request(&ticket) {
            return self.fragment_stream(request);
        }
        if let Some(request) = skiff_flight::chunks::chunk_request(&ticket) {
            return self.chunk_stream(&request);
        }
        let key = StateKey::decode(ticket.ticket)
            .map_err(|e| Status::invalid_argument(format!("bad state ticket: {e}")))?
            .key;
        // Absent keys fail the call itself, before any stream.
        let mut reader = self.cache.get(&key)?;
        let (tx, rx) = mpsc::channel::<GetItem>(QUEUE);
        let reading = SpawnedTask::spawn_blocking(move || {
            loop {
                let item = match reader.next_chunk() {
                    Ok(Some(chunk)) => GetItem::Message(Ok(FlightData {
                        app_metadata: chunk.meta,
                        data_body: chunk.body,
                        ..FlightData::default()
                    })),
                    Ok(None) => {
                        let _ = tx.blocking_send(GetItem::Done(Box::new(reader)));
                        return;
                    }
                    Err(e) => {
                        warn!(error = %e, "state get failed");
                        let _ = tx.blocking_send(GetItem::Message(Err(e.into())));
                        return;
                    }
                };
                // A closed queue: the client went away; the entry stays.
                if tx.blocking_send(item).is_err() {
                    return;
                }
            }
        });
        let state = GetState {
            key,
            ended: false,
            cache: Arc::clone(&self.cache),
            rx,
            _reading: reading,
        };
        let stream = futures::stream::unfold(state, |mut state| async move {
            if state.ended {
                return None;
            }
            let Some(item) = state.rx.recv().await else {
                // The reader stopped without its last word (it panicked):
                // never let that pass for a complete state.
                state.ended = true;
                let error = Status::internal(format!("state get {} broke off", state.key));
                return Some((Err(error), state));
            };
            match item {
                GetItem::Message(message) => {
                    state.ended = message.is_err();
                    Some((message, state))
                }
                GetItem::Done(reader) => {
                    debug!(key = reader.key(), "state get complete");
                    let cache = Arc::clone(&state.cache);
                    // May delete a read-once entry's file: off the runtime.
                    let done = SpawnedTask::spawn_blocking(move || cache.finish_read(&reader));
                    if let Err(e) = done.join().await {
                        warn!(error = %e, "recording a complete state get failed");
                    }
                    None
                }
            }
        });
        Ok(Box::pin(stream))
    }

    async fn action(&self, action: Action) -> std::result::Result<bytes::Bytes, Status> {
        match action.r#type.as_str() {
            action::STATE_DELETE => {
                let key = StateKey::decode(action.body)
                    .map_err(|e| Status::invalid_argument(format!("bad state key: {e}")))?
                    .key;
                let cache = Arc::clone(&self.cache);
                SpawnedTask::spawn_blocking(move || cache.delete(&key))
                    .join()
                    .await
                    .map_err(|e| Status::internal(format!("state delete: {e}")))?;
                Ok(bytes::Bytes::new())
            }
            action::STATE_DELETE_PREFIX => {
                let prefix = StateKey::decode(action.body)
                    .map_err(|e| Status::invalid_argument(format!("bad state key prefix: {e}")))?
                    .key;
                if prefix.is_empty() {
                    return Err(Status::invalid_argument(
                        "an empty prefix would delete every state",
                    ));
                }
                let cache = Arc::clone(&self.cache);
                SpawnedTask::spawn_blocking(move || cache.delete_under(&prefix))
                    .join()
                    .await
                    .map_err(|e| Status::internal(format!("state delete: {e}")))?;
                Ok(bytes::Bytes::new())
            }
            action::STATE_STATS => Ok(self.cache.stats().encode_to_vec().into()),
            action::TABLE_LOAD => {
                let request = LoadTable::decode(action.body)
                    .map_err(|e| Status::invalid_argument(format!("bad table load: {e}")))?;
                let loaded = self.chunks.load(&request).await?;
                Ok(loaded.encode_to_vec().into())
            }
            action::TABLE_UNLOAD => {
                let request = UnloadTable::decode(action.body)
                    .map_err(|e| Status::invalid_argument(format!("bad table unload: {e}")))?;
                Ok(self.chunks.unload(&request.table).encode_to_vec().into())
            }
            action::TABLE_STATS => {
                let mut stats = self.chunks.stats();
                if let Some(offloader) = &self.offloader {
                    stats.fragments = offloader.recent();
                }
                Ok(stats.encode_to_vec().into())
            }
            other => Err(Status::unimplemented(format!(
                "memory node has no action {other}"
            ))),
        }
    }
}

/// Serve the state cache (and no chunks) on `listener` until `shutdown`,
/// sweeping expired entries meanwhile. Needs no coordinator.
pub async fn serve_cache(
    listener: TcpListener,
    cache: Arc<StateCache>,
    shutdown: CancellationToken,
) -> Result<()> {
    serve(listener, MemnodeService::new(cache), shutdown).await
}

/// Serve `service` on `listener` until `shutdown`, sweeping expired state
/// meanwhile. Needs no coordinator.
pub async fn serve(
    listener: TcpListener,
    service: MemnodeService,
    shutdown: CancellationToken,
) -> Result<()> {
    let cache = Arc::clone(&service.cache);
    let server = skiff_flight::server_builder()
        .add_service(flight_server(Arc::new(service)))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.cancelled_owned(),
        );
    tokio::select! {
        served = server => served.map_err(|e| ServerError::internal(format!("memnode: {e}"))),
        () = sweep_forever(cache) => Ok(()),
    }
}

async fn sweep_forever(cache: Arc<StateCache>) {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let cache = Arc::clone(&cache);
        // Expired entries' files are removed here: off the runtime.
        let swept = SpawnedTask::spawn_blocking(move || cache.sweep(Instant::now()));
        if let Err(e) = swept.join().await {
            warn!(error = %e, "state sweep failed");
        }
    }
}
