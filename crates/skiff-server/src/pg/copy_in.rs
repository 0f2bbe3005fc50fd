//! `COPY t FROM STDIN` (what `psql \copy ... from` and psycopg's
//! `cursor.copy()` send): the client's CopyData chunks flow through a
//! bounded channel into the row decoder and on into the table's insert, so
//! memory holds a few chunks and one batch whatever the load's size. The
//! load commits only when the client says CopyDone; CopyFail (or a broken
//! connection) ends it with an error and nothing written.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use datafusion::error::DataFusionError;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{Sink, SinkExt};
use pgwire::api::copy::{CopyHandler, send_copy_in_response};
use pgwire::api::results::{CopyResponse, Tag};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use skiff_tables::copy::{CopyFrom, Format, decode_rows};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Connection, Queries, connection, error};
use skiff_coordinator::config::COPY_IN_CHUNKS;
use skiff_node::error::{ServerError, SqlState};

/// A load in progress on a connection. Dropped unfinished (the
/// connection broke), it aborts the load before ending the rows, so
/// nothing is committed.
pub(super) struct CopyIn {
    chunks: Option<ChunkSender>,
    load: Option<LoadHandle>,
}

type ChunkSender = mpsc::Sender<Result<Bytes, DataFusionError>>;
type LoadHandle = JoinHandle<Result<u64, DataFusionError>>;

impl CopyIn {
    /// The channel and the load, handed over to finish the copy.
    fn into_parts(mut self) -> Option<(ChunkSender, LoadHandle)> {
        Some((self.chunks.take()?, self.load.take()?))
    }
}

impl Drop for CopyIn {
    fn drop(&mut self) {
        if let Some(load) = self.load.take() {
            load.abort();
        }
    }
}

/// The connection's load in progress, if any.
#[derive(Default)]
pub(super) struct CopyInSlot(Mutex<Option<CopyIn>>);

impl CopyInSlot {
    fn put(&self, copy: CopyIn) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(copy);
        }
    }

    fn take(&self) -> Option<CopyIn> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }

    fn sender(&self) -> Option<ChunkSender> {
        self.0.lock().ok()?.as_ref()?.chunks.clone()
    }
}

/// Start `COPY ... FROM STDIN`: the load runs as the rows arrive; the
/// client is told to send them. `extended`: the statement came as an
/// Execute, so the copy's end waits for the client's Sync to answer
/// ReadyForQuery (pgwire's connection loop does that).
pub(super) async fn start<C>(
    client: &mut C,
    conn: &Connection,
    from: CopyFrom,
    extended: bool,
) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let ctx = conn.session().context().clone();
    let schema = skiff_tables::copy::decode_schema(&ctx, &from)
        .await
        .map_err(|e| error(e.into()))?;
    let columns = schema.fields().len();
    let format = from.options.format.unwrap_or(Format::Text);
    let (chunks, receiver) = mpsc::channel(COPY_IN_CHUNKS);
    let bytes = Box::pin(futures::stream::unfold(receiver, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    let source = "STDIN".to_string();
    let decoded = decode_rows(bytes, Arc::clone(&schema), &from.options, format, source)
        .map_err(|e| error(e.into()))?;
    let batches = Box::pin(RecordBatchStreamAdapter::new(schema, decoded));
    let load = tokio::runtime::Handle::current()
        .spawn(async move { skiff_tables::copy::load_batches(&ctx, &from, batches).await });
    conn.copy_in().put(CopyIn {
        chunks: Some(chunks),
        load: Some(load),
    });
    // Overall format 0: the rows arrive as text or CSV, never binary
    // (`decode_rows` refuses any other format).
    let response = CopyResponse::new(0, columns, futures::stream::empty());
    send_copy_in_response(client, response).await?;
    client.set_state(PgWireConnectionState::CopyInProgress(extended));
    Ok(())
}

#[async_trait::async_trait]
impl CopyHandler for Queries {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let conn = connection(client)?;
        if let Some(chunks) = conn.copy_in().sender() {
            // A closed channel means the load already failed; CopyDone
            // reports why.
            let _ = chunks.send(Ok(copy_data.data)).await;
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let conn = connection(client)?;
        let Some((chunks, load)) = conn.copy_in().take().and_then(CopyIn::into_parts) else {
            return Err(error(ServerError::new(
                SqlState::ProtocolViolation,
                "CopyDone without a COPY in progress",
            )));
        };
        // The end of the rows: the load flushes its last batch and commits.
        drop(chunks);
        let rows = match load.await {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => return Err(error(e.into())),
            Err(e) => return Err(error(ServerError::internal(format!("COPY load: {e}")))),
        };
        let tag = Tag::new("COPY").with_rows(rows as usize);
        client
            .send(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let message = format!("COPY from stdin failed: {}", fail.message);
        if let Ok(conn) = connection(client)
            && let Some((chunks, load)) = conn.copy_in().take().and_then(CopyIn::into_parts)
        {
            // An error, not the end of the rows: ending the stream would
            // commit what arrived.
            let _ = chunks
                .send(Err(DataFusionError::Execution(message.clone())))
                .await;
            drop(chunks);
            let _ = load.await;
        }
        error(ServerError::new(SqlState::QueryCanceled, message))
    }
}
