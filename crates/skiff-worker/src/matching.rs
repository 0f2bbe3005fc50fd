//! A worker's side of buffer matching (VectorH §6): sending the blocks of
//! partitions it lost to their new owners (`skiff.buffer.ship`, asked by
//! the coordinator after a resize), and keeping the blocks an old owner
//! sends (a `DoPut` of blocks). Nothing waits on either: a block that does
//! not arrive is read from storage by the first scan that needs it.

use std::sync::Arc;

use arrow_flight::FlightData;
use futures::TryStreamExt;
use prost::Message;
use skiff_engine::buffer::BufferPool;
use skiff_flight::FlightStream;
use skiff_flight::blocks::{read_block, send_blocks};
use skiff_flight::protocol::{BlocksShipped, BlocksStored, ShipBlocks};
use tonic::Status;
use tracing::{info, warn};

use skiff_node::limits::MATCHING_DEADLINE;

/// Keep the blocks of a `DoPut` whose first message is `first`.
pub(super) async fn receive(
    pool: Option<&Arc<BufferPool>>,
    first: FlightData,
    mut rest: FlightStream,
) -> Result<bytes::Bytes, Status> {
    let mut stored = BlocksStored::default();
    let mut next = Some(first);
    while let Some(message) = next {
        // The descriptor travels alone when no block does.
        if !message.data_body.is_empty() {
            stored.sent += 1;
            match read_block(&message) {
                Ok(block) => {
                    let bytes = block.array.get_array_memory_size() as u64;
                    if pool.is_some_and(|p| p.receive(block)) {
                        stored.kept += 1;
                        stored.bytes += bytes;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "a matched block refused");
                    stored.refused += 1;
                }
            }
        }
        next = rest.try_next().await?;
    }
    Ok(stored.encode_to_vec().into())
}

/// Send each target the blocks of its partitions, all targets at once;
/// what each took. The blocks leave this pool whether or not they arrive.
pub(super) async fn ship(pool: Option<&Arc<BufferPool>>, request: &ShipBlocks) -> BlocksShipped {
    let Some(pool) = pool else {
        return BlocksShipped {
            targets: vec![BlocksStored::default(); request.targets.len()],
        };
    };
    let bytes_max = usize::try_from(request.bytes_max).unwrap_or(usize::MAX);
    let pause = std::time::Duration::from_millis(request.pause_ms);
    let sends = request.targets.iter().map(|target| {
        let blocks = pool.take_partitions(
            |location, partition| {
                target
                    .tables
                    .iter()
                    .any(|t| t.location == location && t.partitions.contains(&partition))
            },
            bytes_max,
        );
        async move {
            let started = std::time::Instant::now();
            let answer = send_blocks(&target.addr, &blocks, MATCHING_DEADLINE, pause).await;
            match answer {
                Ok(stored) => {
                    for block in &blocks {
                        pool.note_sent(block);
                    }
                    info!(
                        to = %target.addr,
                        blocks = blocks.len(),
                        kept = stored.kept,
                        ms = started.elapsed().as_millis() as u64,
                        "matched blocks sent"
                    );
                    stored
                }
                Err(e) => {
                    warn!(to = %target.addr, blocks = blocks.len(), error = %e.message(),
                        "matched blocks not taken");
                    BlocksStored {
                        sent: blocks.len() as u64,
                        error: e.message().to_string(),
                        ..BlocksStored::default()
                    }
                }
            }
        }
    });
    BlocksShipped {
        targets: futures::future::join_all(sends).await,
    }
}
