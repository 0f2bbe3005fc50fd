//! Buffer matching on the wire (VectorH §6): an old owner sends the
//! buffered blocks of the partitions it lost to their new owner, as one
//! `DoPut` per sender and receiver. Each message carries one block: a
//! [`BlockHeader`] (what names it, the frame's CRC-32) in `app_metadata`,
//! an Arrow IPC stream of one one-column batch in `data_body`. A block
//! whose checksum or frame is bad is refused alone; a transfer that fails
//! or runs late loses only its blocks (their scans read storage).

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Field, Schema};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_flight::{FlightData, FlightDescriptor};
use prost::Message;
use skiff_engine::buffer::{Block, BlockKey, FileVersion};
use tonic::Status;

use crate::protocol::{BlockHeader, BlocksPut, BlocksStored};

/// Messages queued ahead of the gRPC stream while blocks are encoded.
const SEND_QUEUE: usize = 16;

/// Bytes an IPC stream of one one-column batch adds to its buffers: the
/// schema and batch messages, padding and the end marker (a guess for
/// the first allocation; the buffer grows if it is short).
const FRAME_OVERHEAD: usize = 4096;

/// One block as a message.
pub fn block_message(block: &Block) -> Result<FlightData, String> {
    piece_message(block, 0)
}

/// A block, or a memory node's chunk (a piece of one starting at
/// `first_row`: `block.array` holds the piece's rows), as a message.
pub fn piece_message(block: &Block, first_row: u64) -> Result<FlightData, String> {
    let field = Field::new("block", block.array.data_type().clone(), true);
    let schema = Arc::new(Schema::new(vec![field]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::clone(&block.array)])
        .map_err(|e| format!("block as a batch: {e}"))?;
    // Sized once: a block is up to tens of MiB, and a growing buffer
    // would copy it over and over (and fault in fresh pages each time).
    let mut frame = Vec::with_capacity(block.array.get_array_memory_size() + FRAME_OVERHEAD);
    {
        let mut writer =
            StreamWriter::try_new(&mut frame, &schema).map_err(|e| format!("IPC: {e}"))?;
        writer.write(&batch).map_err(|e| format!("IPC: {e}"))?;
        writer.finish().map_err(|e| format!("IPC: {e}"))?;
    }
    let file = &block.key.file;
    let header = BlockHeader {
        table: block.table.to_string(),
        path: file.path.clone(),
        size: file.size,
        modified: file.modified,
        e_tag: file.e_tag.clone(),
        partition: file.partition,
        row_group: block.key.row_group as u64,
        column: block.key.column as u64,
        checksum: crc32fast::hash(&frame),
        first_row,
    };
    Ok(FlightData {
        app_metadata: header.encode_to_vec().into(),
        data_body: frame.into(),
        ..FlightData::default()
    })
}

/// The block a message carries, checked against its checksum.
pub fn read_block(message: &FlightData) -> Result<Block, String> {
    read_piece(message).map(|(block, _)| block)
}

/// The block or chunk a message carries, checked against its checksum,
/// and the row it starts at.
pub fn read_piece(message: &FlightData) -> Result<(Block, u64), String> {
    let header = BlockHeader::decode(message.app_metadata.clone())
        .map_err(|e| format!("bad block header: {e}"))?;
    if crc32fast::hash(&message.data_body) != header.checksum {
        return Err(format!(
            "block of {} row group {} column {}: checksum mismatch",
            header.path, header.row_group, header.column
        ));
    }
    // The body is shared, not copied, into the reader.
    let mut reader = StreamReader::try_new(Cursor::new(message.data_body.clone()), None)
        .map_err(|e| format!("bad block frame: {e}"))?;
    let batch = match reader.next() {
        Some(Ok(batch)) if batch.num_columns() == 1 => batch,
        Some(Ok(_)) => return Err("a block frame of other than one column".to_string()),
        Some(Err(e)) => return Err(format!("bad block frame: {e}")),
        None => return Err("an empty block frame".to_string()),
    };
    let array: ArrayRef = Arc::clone(batch.column(0));
    let first_row = header.first_row;
    let key = BlockKey {
        file: Arc::new(FileVersion {
            path: header.path,
            size: header.size,
            modified: header.modified,
            e_tag: header.e_tag,
            partition: header.partition,
        }),
        row_group: usize::try_from(header.row_group).map_err(|e| e.to_string())?,
        column: usize::try_from(header.column).map_err(|e| e.to_string())?,
        data_type: array.data_type().clone(),
    };
    let block = Block {
        table: Arc::from(header.table.as_str()),
        key,
        array,
    };
    Ok((block, first_row))
}

/// Send `blocks` to the worker at `addr` within `deadline`; its answer.
pub async fn send_blocks(
    addr: &str,
    blocks: &[Block],
    deadline: Duration,
    pause: Duration,
) -> Result<BlocksStored, Status> {
    let sending = async {
        let mut client = crate::connect(addr).await?;
        let put = BlocksPut {
            blocks: blocks.len() as u64,
        };
        let descriptor = FlightDescriptor::new_cmd(put.encode_to_vec());
        let (tx, rx) = tokio::sync::mpsc::channel::<FlightData>(SEND_QUEUE);
        let send = async move {
            let mut first = FlightData {
                flight_descriptor: Some(descriptor),
                ..FlightData::default()
            };
            for block in blocks {
                let mut message = match block_message(block) {
                    Ok(message) => message,
                    // Not sent: the receiver counts it missing.
                    Err(_) => continue,
                };
                if let Some(descriptor) = first.flight_descriptor.take() {
                    message.flight_descriptor = Some(descriptor);
                }
                if tx.send(message).await.is_err() {
                    return;
                }
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            if first.flight_descriptor.is_some() {
                let _ = tx.send(first).await;
            }
        };
        let what = format!("blocks to {addr}");
        let reply = crate::client::put_queued(&mut client, rx, send, &what).await?;
        BlocksStored::decode(reply).map_err(|e| Status::internal(format!("{what}: bad reply: {e}")))
    };
    match tokio::time::timeout(deadline, sending).await {
        Ok(answer) => answer,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "blocks to {addr}: not taken within {deadline:?}"
        ))),
    }
}

/// Whether a `DoPut`'s descriptor announces blocks.
pub fn blocks_put(descriptor: &FlightDescriptor) -> Option<BlocksPut> {
    BlocksPut::decode(descriptor.cmd.clone()).ok()
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringViewArray};

    use super::*;

    fn block(array: ArrayRef) -> Block {
        Block {
            table: Arc::from("file:///data/t"),
            key: BlockKey {
                file: Arc::new(FileVersion {
                    path: "data/t/_skiff_partition=3/a.parquet".into(),
                    size: 100,
                    modified: 7,
                    e_tag: Some("e".into()),
                    partition: Some(3),
                }),
                row_group: 2,
                column: 1,
                data_type: array.data_type().clone(),
            },
            array,
        }
    }

    #[test]
    fn a_block_survives_the_trip_with_its_name() {
        for array in [
            Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])) as ArrayRef,
            Arc::new(StringViewArray::from(vec![
                "a",
                "a longer string than twelve",
            ])),
        ] {
            let sent = block(array);
            let got = read_block(&block_message(&sent).unwrap()).unwrap();
            assert_eq!(got.key, sent.key);
            assert_eq!(got.table, sent.table);
            assert_eq!(got.array.as_ref(), sent.array.as_ref());
        }
    }

    #[test]
    fn a_flipped_byte_is_refused() {
        let mut message = block_message(&block(Arc::new(Int64Array::from(vec![1, 2])))).unwrap();
        let mut body = message.data_body.to_vec();
        let last = body.len() - 9;
        body[last] ^= 1;
        message.data_body = body.into();
        let error = read_block(&message).unwrap_err();
        assert!(error.contains("checksum"), "{error}");
    }
}
