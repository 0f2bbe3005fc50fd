//! Query fragments on the wire (opportunistic offload): the ticket a worker
//! sends a memory node ([`FragmentRequest`]) and the answer's messages, a
//! [`FragmentDecision`], then for an offloaded fragment the rows as an
//! Arrow IPC stream with a [`FragmentMark`] after each row group's rows,
//! read back as the engine's [`FragmentEvent`]s.

use std::time::Duration;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::writer::{DictionaryTracker, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use arrow_flight::{FlightData, SchemaAsIpc, Ticket};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use skiff_engine::offload::{Costs, FragmentEvent};
use tonic::Status;

use crate::protocol::{
    FragmentCosts, FragmentDecision, FragmentMark, FragmentRequest, metadata_message,
};

/// Whether a `DoGet` ticket asks to run a fragment.
pub fn fragment_request(ticket: &Ticket) -> Option<FragmentRequest> {
    FragmentRequest::decode(ticket.ticket.clone())
        .ok()
        .filter(|r| r.fragment)
}

/// The events of an offloaded fragment's answer.
pub type FragmentEvents = BoxStream<'static, Result<FragmentEvent, Status>>;

/// Send `request` to the node `client` speaks to: its decision, and when
/// it offloaded, the events that follow. The decision must arrive within
/// `deadline`, and each message after it within `idle` of the one before
/// (the node marks every row group it finishes).
pub async fn run_fragment(
    client: &mut arrow_flight::flight_service_client::FlightServiceClient<
        tonic::transport::Channel,
    >,
    request: &FragmentRequest,
    deadline: Duration,
    idle: Duration,
) -> Result<(FragmentDecision, FragmentEvents), Status> {
    let ticket = Ticket::new(request.encode_to_vec());
    let opened = async {
        let mut stream = client.do_get(ticket).await?.into_inner();
        let first = stream.message().await?;
        Ok::<_, Status>((first, stream))
    };
    let (first, stream) = tokio::time::timeout(deadline, opened).await.map_err(|_| {
        Status::deadline_exceeded(format!("no fragment decision within {deadline:?}"))
    })??;
    let first = first.ok_or_else(|| Status::data_loss("a fragment answer without its decision"))?;
    let decision = FragmentDecision::decode(first.app_metadata)
        .map_err(|e| Status::data_loss(format!("bad fragment decision: {e}")))?;
    let flight = futures::stream::unfold(stream, move |mut stream| async move {
        let next = match tokio::time::timeout(idle, stream.message()).await {
            Ok(next) => next.transpose()?,
            Err(_) => Err(Status::deadline_exceeded(format!(
                "the fragment's node sent nothing for {idle:?}"
            ))),
        };
        Some((next, stream))
    })
    .map_err(|e| FlightError::Tonic(Box::new(e)));
    let events = FlightDataDecoder::new(flight)
        .map_err(|e| match e {
            FlightError::Tonic(status) => *status,
            other => Status::data_loss(format!("fragment rows: {other}")),
        })
        .try_filter_map(|data| async move {
            match data.payload {
                DecodedPayload::RecordBatch(batch) => Ok(Some(FragmentEvent::Rows(batch))),
                DecodedPayload::Schema(_) => Ok(None),
                DecodedPayload::None => {
                    let mark = FragmentMark::decode(data.inner.app_metadata)
                        .map_err(|e| Status::data_loss(format!("bad fragment mark: {e}")))?;
                    Ok(Some(if mark.end {
                        FragmentEvent::End {
                            measured: mark.measured.as_ref().map(costs).unwrap_or_default(),
                        }
                    } else {
                        FragmentEvent::Done {
                            file: mark.file as usize,
                            row_group: mark.row_group as usize,
                        }
                    }))
                }
            }
        })
        .boxed();
    Ok((decision, events))
}

/// `costs` as the engine counts them.
pub fn costs(costs: &FragmentCosts) -> Costs {
    Costs {
        execution: Duration::from_nanos(costs.execution_nanos),
        serialization: Duration::from_nanos(costs.serialization_nanos),
        network: Duration::from_nanos(costs.network_nanos),
        push_back_network: Duration::from_nanos(costs.push_back_network_nanos),
        push_back_execution: Duration::from_nanos(costs.push_back_execution_nanos),
    }
}

/// The message that opens a fragment's answer.
pub fn decision_message(decision: &FragmentDecision) -> FlightData {
    FlightData {
        app_metadata: decision.encode_to_vec().into(),
        ..FlightData::default()
    }
}

/// A mark's message.
pub fn mark_message(mark: &FragmentMark) -> FlightData {
    metadata_message(mark.encode_to_vec().into())
}

/// Encodes an offloaded fragment's rows: the schema once, then each batch
/// (with the dictionaries it needs first).
pub struct RowEncoder {
    options: IpcWriteOptions,
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    context: IpcWriteContext,
}

impl Default for RowEncoder {
    fn default() -> Self {
        Self {
            options: IpcWriteOptions::default(),
            generator: IpcDataGenerator::default(),
            dictionaries: DictionaryTracker::new(false),
            context: IpcWriteContext::default(),
        }
    }
}

impl RowEncoder {
    /// The schema message, sent before any batch.
    pub fn schema(&self, schema: &Schema) -> FlightData {
        SchemaAsIpc::new(schema, &self.options).into()
    }

    /// `batch`'s messages.
    pub fn batch(&mut self, batch: &RecordBatch) -> Result<Vec<FlightData>, Status> {
        let (dictionaries, encoded) = self
            .generator
            .encode(
                batch,
                &mut self.dictionaries,
                &self.options,
                &mut self.context,
            )
            .map_err(|e| Status::internal(format!("encoding fragment rows: {e}")))?;
        let mut messages: Vec<FlightData> = dictionaries.into_iter().map(Into::into).collect();
        messages.push(encoded.into());
        Ok(messages)
    }
}

/// `schema` as an Arrow IPC schema message (a request's `input_schema`).
pub fn schema_bytes(schema: &SchemaRef) -> Result<Vec<u8>, Status> {
    crate::state_cache::encode_schema(schema)
}

/// The schema [`schema_bytes`] encoded.
pub fn schema_of(bytes: &[u8]) -> Result<SchemaRef, Status> {
    crate::state_cache::decode_schema(bytes)
}
