//! A query's extracted state on the wire, and the client side of the
//! memory node's state cache.
//!
//! Owns the encoding of a [`skiff_state::ExtractedState`] as Flight
//! messages and the calls that put, get and delete one. A state is a stream
//! of messages, never one message, so it has no size cap:
//!
//! 1. a header: the `DoPut` descriptor's command is a [`StatePut`] (key and
//!    options); `app_metadata` is a [`StateHeader`] listing the outputs
//!    (pipeline, schema as an Arrow IPC stream with no batches, partition
//!    count);
//! 2. one message per frame, in order: `app_metadata` a [`StateFrame`]
//!    (output index, partition, checksum, rows), `data_body` the frame's
//!    bytes.
//!
//! The memory node stores the messages as they came (metadata and body,
//! with a CRC-32 of its own) and streams them back on a get, so it never
//! decodes Arrow; the receiver checks every frame's own checksum when it
//! loads the state (`skiff_state::load`).

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::{FlightData, FlightDescriptor, Ticket};
use futures::TryStreamExt;
use prost::Message;
use skiff_engine::PipelineId;
use skiff_state::{ExtractedOutput, ExtractedState, Frame};
use tonic::Status;
use tonic::transport::Channel;

pub use crate::protocol::CacheStats;
use crate::protocol::{
    StateFrame, StateHeader, StateKey, StateOutput, StatePut, StateStored, action,
};

/// Messages queued between building them and the gRPC transport: enough to
/// keep the connection busy, few enough that a put holds little more than
/// the state itself.
const PUT_QUEUE: usize = 4;

/// How a state is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// Time to live; zero means the memory node's default. Durable entries
    /// never expire.
    pub ttl: Duration,
    /// Delete the entry once a get has streamed it completely (migration).
    pub read_once: bool,
    /// On disk (fsync, atomic rename), kept until deleted, reloaded when
    /// the memory node restarts (suspended queries).
    pub durable: bool,
}

/// What the cache holds for a key after a put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Bytes of all messages (header and frames, metadata and bodies).
    pub bytes: u64,
    pub frames: u64,
}

/// Put `state` under `key` in the cache of the memory node at `addr`
/// (`host:port`), replacing what the key held. The messages are built one
/// at a time as the transport takes them.
pub async fn put_state(
    addr: &str,
    key: &str,
    options: &PutOptions,
    state: &ExtractedState,
) -> Result<Stored, Status> {
    put_state_with(crate::connect(addr).await?, key, options, state).await
}

/// [`put_state`] through `client`, a connection already made.
pub async fn put_state_with(
    mut client: FlightServiceClient<Channel>,
    key: &str,
    options: &PutOptions,
    state: &ExtractedState,
) -> Result<Stored, Status> {
    let put = StatePut {
        key: key.to_string(),
        ttl_ms: ttl_ms(options.ttl),
        read_once: options.read_once,
        durable: options.durable,
        messages: 1 + frame_count(state),
    };
    let mut first = header_message(state)?;
    first.flight_descriptor = Some(FlightDescriptor::new_cmd(put.encode_to_vec()));
    // tonic wants a 'static request stream and the state is borrowed: a
    // bounded queue lets this future copy frames in as they are sent.
    let (tx, rx) = tokio::sync::mpsc::channel::<FlightData>(PUT_QUEUE);
    let send = async move {
        if tx.send(first).await.is_err() {
            return;
        }
        for message in frame_messages(state) {
            // A closed queue means the call ended; its status says why.
            if tx.send(message).await.is_err() {
                return;
            }
        }
    };
    let reply = crate::client::put_queued(&mut client, rx, send, &format!("put {key}")).await?;
    let stored = StateStored::decode(reply)
        .map_err(|e| Status::internal(format!("put {key}: bad reply: {e}")))?;
    Ok(Stored {
        bytes: stored.bytes,
        frames: stored.chunks.saturating_sub(1),
    })
}

/// The state under `key`: `NotFound` when absent or expired, `DataLoss`
/// when the cache finds a stored chunk damaged.
pub async fn get_state(addr: &str, key: &str) -> Result<ExtractedState, Status> {
    get_state_with(crate::connect(addr).await?, key).await
}

/// [`get_state`] through `client`, a connection already made.
pub async fn get_state_with(
    mut client: FlightServiceClient<Channel>,
    key: &str,
) -> Result<ExtractedState, Status> {
    let ticket = Ticket {
        ticket: StateKey {
            key: key.to_string(),
        }
        .encode_to_vec()
        .into(),
    };
    let mut messages = client.do_get(ticket).await?.into_inner();
    let mut decoder = StateDecoder::default();
    while let Some(message) = messages.try_next().await? {
        decoder.push(message)?;
    }
    decoder.finish()
}

/// Delete `key`; fine when it is absent.
pub async fn delete_state(addr: &str, key: &str) -> Result<(), Status> {
    let mut client = crate::connect(addr).await?;
    let request = StateKey {
        key: key.to_string(),
    };
    crate::do_action::<_, ()>(&mut client, action::STATE_DELETE, &request).await
}

/// Drop every state whose key begins with `prefix` (fine when none does).
pub async fn delete_states_under(addr: &str, prefix: &str) -> Result<(), Status> {
    let mut client = crate::connect(addr).await?;
    let request = StateKey {
        key: prefix.to_string(),
    };
    crate::do_action::<_, ()>(&mut client, action::STATE_DELETE_PREFIX, &request).await
}

/// The counters of the memory node's state cache.
pub async fn cache_stats(addr: &str) -> Result<CacheStats, Status> {
    let mut client = crate::connect(addr).await?;
    crate::do_action::<_, CacheStats>(&mut client, action::STATE_STATS, &()).await
}

/// `ttl` in whole milliseconds, rounded up: a sub-millisecond TTL must not
/// become 0, which means the node's default.
fn ttl_ms(ttl: Duration) -> u64 {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 && !ttl.is_zero() { 1 } else { ms }
}

/// The first message of `state`'s stream (no descriptor yet).
pub fn header_message(state: &ExtractedState) -> Result<FlightData, Status> {
    let outputs = state
        .outputs
        .iter()
        .map(|output| {
            Ok(StateOutput {
                pipeline: output.pipeline.0 as u64,
                schema: encode_schema(&output.schema)?.into(),
                partitions: u32::try_from(output.partitions.len())
                    .map_err(|_| Status::invalid_argument("too many partitions"))?,
            })
        })
        .collect::<Result<Vec<_>, Status>>()?;
    Ok(FlightData {
        app_metadata: StateHeader {
            outputs,
            frames: frame_count(state),
        }
        .encode_to_vec()
        .into(),
        ..FlightData::default()
    })
}

/// Frames in `state`: the messages after the header.
pub fn frame_count(state: &ExtractedState) -> u64 {
    state
        .outputs
        .iter()
        .flat_map(|o| &o.partitions)
        .map(|p| p.len() as u64)
        .sum()
}

/// One message per frame of `state`, in order, each built when asked for.
pub fn frame_messages(state: &ExtractedState) -> impl Iterator<Item = FlightData> + '_ {
    state.outputs.iter().enumerate().flat_map(|(o, output)| {
        output
            .partitions
            .iter()
            .enumerate()
            .flat_map(move |(p, frames)| {
                frames.iter().map(move |frame| FlightData {
                    app_metadata: StateFrame {
                        output: o as u32,
                        partition: p as u32,
                        checksum: frame.checksum,
                        rows: frame.rows as u64,
                    }
                    .encode_to_vec()
                    .into(),
                    data_body: bytes::Bytes::copy_from_slice(&frame.bytes),
                    ..FlightData::default()
                })
            })
    })
}

/// Rebuilds a state from its messages, in order.
#[derive(Default)]
pub struct StateDecoder {
    outputs: Option<Vec<ExtractedOutput>>,
    /// Frames announced by the header, and received so far.
    announced: u64,
    received: u64,
}

impl StateDecoder {
    pub fn push(&mut self, message: FlightData) -> Result<(), Status> {
        let Some(outputs) = self.outputs.as_mut() else {
            let header = StateHeader::decode(message.app_metadata)
                .map_err(|e| Status::data_loss(format!("bad state header: {e}")))?;
            let outputs = header
                .outputs
                .into_iter()
                .map(|output| {
                    Ok(ExtractedOutput {
                        pipeline: PipelineId(output.pipeline as usize),
                        schema: decode_schema(&output.schema)?,
                        partitions: vec![Vec::new(); output.partitions as usize],
                    })
                })
                .collect::<Result<Vec<_>, Status>>()?;
            self.outputs = Some(outputs);
            self.announced = header.frames;
            return Ok(());
        };
        let frame = StateFrame::decode(message.app_metadata)
            .map_err(|e| Status::data_loss(format!("bad state frame: {e}")))?;
        let partition = outputs
            .get_mut(frame.output as usize)
            .and_then(|o| o.partitions.get_mut(frame.partition as usize))
            .ok_or_else(|| {
                Status::data_loss(format!(
                    "state frame for output {} partition {}, which the header lacks",
                    frame.output, frame.partition
                ))
            })?;
        self.received += 1;
        partition.push(Frame {
            bytes: message.data_body.into(),
            checksum: frame.checksum,
            rows: frame.rows as usize,
        });
        Ok(())
    }

    /// The state; an error if not even the header came.
    pub fn finish(self) -> Result<ExtractedState, Status> {
        let outputs = self
            .outputs
            .ok_or_else(|| Status::data_loss("state stream without a header"))?;
        if self.received != self.announced {
            return Err(Status::data_loss(format!(
                "state stream ended after {} of {} frames",
                self.received, self.announced
            )));
        }
        Ok(ExtractedState { outputs })
    }
}

pub(crate) fn encode_schema(schema: &SchemaRef) -> Result<Vec<u8>, Status> {
    let ipc = |e: arrow::error::ArrowError| Status::internal(format!("encode schema: {e}"));
    let mut bytes = Vec::new();
    let mut writer = StreamWriter::try_new(&mut bytes, schema).map_err(ipc)?;
    writer.finish().map_err(ipc)?;
    drop(writer);
    Ok(bytes)
}

pub(crate) fn decode_schema(bytes: &[u8]) -> Result<SchemaRef, Status> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)
        .map_err(|e| Status::data_loss(format!("bad state schema: {e}")))?;
    Ok(Arc::clone(&reader.schema()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::collections::HashMap;

    fn frame(batch: &RecordBatch) -> Frame {
        let mut bytes = Vec::new();
        let mut writer = StreamWriter::try_new(&mut bytes, &batch.schema()).unwrap();
        writer.write(batch).unwrap();
        writer.finish().unwrap();
        drop(writer);
        Frame {
            checksum: crc32fast::hash(&bytes),
            bytes,
            rows: batch.num_rows(),
        }
    }

    #[test]
    fn a_state_survives_its_messages() {
        let metadata = HashMap::from([("k".to_string(), "v".to_string())]);
        let schema = Arc::new(
            Schema::new(vec![
                Field::new("a", DataType::Int64, false),
                Field::new("s", DataType::Utf8, true),
            ])
            .with_metadata(metadata),
        );
        let batch = |n: i64| {
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(Int64Array::from_iter_values(0..n)),
                    Arc::new(StringArray::from_iter_values((0..n).map(|i| i.to_string()))),
                ],
            )
            .unwrap()
        };
        let state = ExtractedState {
            outputs: vec![
                ExtractedOutput {
                    pipeline: PipelineId(3),
                    schema: Arc::clone(&schema),
                    partitions: vec![vec![frame(&batch(5)), frame(&batch(7))], vec![]],
                },
                ExtractedOutput {
                    pipeline: PipelineId(1),
                    schema: Arc::clone(&schema),
                    partitions: vec![vec![frame(&batch(1))]],
                },
            ],
        };
        let mut decoder = StateDecoder::default();
        decoder.push(header_message(&state).unwrap()).unwrap();
        assert_eq!(frame_messages(&state).count(), 3);
        assert_eq!(frame_count(&state), 3);
        for message in frame_messages(&state) {
            decoder.push(message).unwrap();
        }
        let back = decoder.finish().unwrap();
        assert_eq!(back.outputs.len(), 2);
        for (a, b) in state.outputs.iter().zip(&back.outputs) {
            assert_eq!(a.pipeline, b.pipeline);
            assert_eq!(a.schema, b.schema);
            assert_eq!(a.partitions.len(), b.partitions.len());
            for (pa, pb) in a.partitions.iter().zip(&b.partitions) {
                let bytes = |p: &Vec<Frame>| {
                    p.iter()
                        .map(|f| (f.bytes.clone(), f.checksum, f.rows))
                        .collect::<Vec<_>>()
                };
                assert_eq!(bytes(pa), bytes(pb));
            }
        }
        assert_eq!(back.rows(), 13);
        skiff_state::load(&back).unwrap();
    }

    #[test]
    fn a_frame_the_header_does_not_announce_is_refused() {
        let state = ExtractedState::default();
        let mut decoder = StateDecoder::default();
        decoder.push(header_message(&state).unwrap()).unwrap();
        let stray = FlightData {
            app_metadata: StateFrame {
                output: 0,
                partition: 0,
                checksum: 0,
                rows: 0,
            }
            .encode_to_vec()
            .into(),
            ..FlightData::default()
        };
        let error = decoder.push(stray).unwrap_err();
        assert_eq!(error.code(), tonic::Code::DataLoss);
        assert!(StateDecoder::default().finish().is_err());
    }

    #[test]
    fn a_stream_short_of_its_frames_is_refused() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(Int64Array::from_iter_values(0..3))],
        )
        .unwrap();
        let state = ExtractedState {
            outputs: vec![ExtractedOutput {
                pipeline: PipelineId(0),
                schema,
                partitions: vec![vec![frame(&batch), frame(&batch)]],
            }],
        };
        let mut decoder = StateDecoder::default();
        decoder.push(header_message(&state).unwrap()).unwrap();
        for message in frame_messages(&state).take(1) {
            decoder.push(message).unwrap();
        }
        let error = decoder.finish().unwrap_err();
        assert_eq!(error.code(), tonic::Code::DataLoss);
        assert!(error.message().contains("1 of 2"), "{}", error.message());
    }
}
