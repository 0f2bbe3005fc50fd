//! Tables in memory nodes on the wire (pipeline groups,
//! `../shared/papers/pipeline-groups-disaggregated.txt`): a memory node holds
//! the columns of a table's row groups cut into *chunks* of at most a
//! chunk size each, every chunk one message as a buffer-matching block is
//! (a [`crate::protocol::BlockHeader`] naming file version, row group,
//! column and the chunk's first row, then its Arrow IPC frame, CRC-32
//! checked). A worker asks for one row group's columns at a time
//! ([`ChunkRequest`]) and gets them back whole or, when it sends the
//! scan's predicate, the rows that the min/max of the node's chunks do not
//! rule out ([`ChunkSelection`]); the coordinator loads and unloads tables
//! and asks what is held.

use std::ops::Range;
use std::time::Duration;

use arrow::array::{Array, ArrayRef};
use arrow_flight::{FlightData, Ticket};
use futures::TryStreamExt;
use prost::Message;
use skiff_engine::buffer::{Block, BlockKey, FileVersion, every_row};
use tonic::Status;

use crate::blocks::{piece_message, read_piece};
use crate::protocol::{
    ChunkFile, ChunkPrune, ChunkRequest, ChunkSelection, LoadTable, MemoryStats, TableLoaded,
    UnloadTable, action,
};

/// The default chunk size (the paper's 4 MiB).
pub const DEFAULT_CHUNK_SIZE: usize = 4 << 20;

/// Times a row group's chunks are asked for again after one arrived with a
/// bad checksum.
const REFETCHES: usize = 1;

/// The file version a [`ChunkFile`] names, as the buffer pool keys it.
pub fn file_version(file: &ChunkFile) -> FileVersion {
    FileVersion {
        path: file.path.clone(),
        size: file.size,
        modified: file.modified,
        e_tag: file.e_tag.clone(),
        partition: file.partition,
    }
}

/// A [`ChunkFile`] naming `version`.
pub fn chunk_file(version: &FileVersion) -> ChunkFile {
    ChunkFile {
        path: version.path.clone(),
        size: version.size,
        modified: version.modified,
        e_tag: version.e_tag.clone(),
        partition: version.partition,
    }
}

/// Where one whole column of one row group (`block`) is cut into chunks
/// of at most `chunk_size` bytes of Arrow buffers each (by rows, evenly: a
/// chunk of wide strings may pass it by the unevenness of its rows): each
/// chunk's first row and rows.
pub fn chunk_cuts(block: &Block, chunk_size: usize) -> Vec<(usize, usize)> {
    let rows = block.array.len();
    let bytes = block.array.to_data().get_slice_memory_size().unwrap_or(0);
    let pieces = bytes.div_ceil(chunk_size.max(1)).clamp(1, rows.max(1));
    let per_piece = rows.div_ceil(pieces).max(1);
    let mut cuts = Vec::with_capacity(pieces);
    let mut at = 0;
    loop {
        let len = per_piece.min(rows - at);
        cuts.push((at, len));
        at += len;
        if at >= rows {
            return cuts;
        }
    }
}

/// `block` cut at `cuts` ([`chunk_cuts`]), a message per chunk.
pub fn chunk_messages(block: &Block, cuts: &[(usize, usize)]) -> Result<Vec<FlightData>, String> {
    cuts.iter()
        .map(|&(at, len)| slice_message(block, at, len, at))
        .collect()
}

/// Rows `at..at + len` of `block`'s column, as a chunk starting at row
/// `first_row` of its row group.
fn slice_message(
    block: &Block,
    at: usize,
    len: usize,
    first_row: usize,
) -> Result<FlightData, String> {
    let piece = Block {
        table: block.table.clone(),
        key: block.key.clone(),
        array: block.array.slice(at, len),
    };
    piece_message(&piece, first_row as u64)
}

/// What of chunk `message` (rows `first..first + rows` of its row group)
/// a pruned answer sends for the rows `kept`: the message itself when it
/// holds only kept rows, nothing when none, else a message per kept range
/// it meets, cut from it (decoded and encoded again: a node's 4 MiB chunk
/// of a narrow column holds half a million rows, and a selective range
/// needs few of them).
pub fn trim(
    message: &FlightData,
    (first, rows): (usize, usize),
    kept: &[Range<usize>],
) -> Result<Vec<FlightData>, String> {
    let end = first + rows;
    let meets: Vec<Range<usize>> = kept
        .iter()
        .filter(|r| r.start < end && first < r.end)
        .map(|r| r.start.max(first)..r.end.min(end))
        .collect();
    match meets.as_slice() {
        [] => return Ok(Vec::new()),
        [all] if *all == (first..end) => return Ok(vec![message.clone()]),
        _ => {}
    }
    let (block, at) = read_piece(message)?;
    if at != first as u64 || block.array.len() != rows {
        return Err(format!(
            "a chunk of rows {at}.. ({} rows), not {first}.. ({rows} rows)",
            block.array.len()
        ));
    }
    meets
        .iter()
        .map(|r| slice_message(&block, r.start - first, r.len(), r.start))
        .collect()
}

/// Columns put together again from a memory node's chunk messages: for each
/// of `columns` (as asked), the column's rows in `kept` (sorted, disjoint
/// row ranges of the row group; all its rows for an answer that was not
/// pruned), or `None` when the node sent none of it.
pub fn assemble(
    messages: &[FlightData],
    file: &FileVersion,
    row_group: usize,
    columns: &[usize],
    kept: &[Range<usize>],
) -> Result<Vec<Option<ArrayRef>>, String> {
    let mut pieces: Vec<Vec<(u64, ArrayRef)>> = vec![Vec::new(); columns.len()];
    for message in messages {
        let (block, first_row) = read_piece(message)?;
        let BlockKey {
            file: got,
            row_group: got_group,
            column,
            ..
        } = &block.key;
        if got.path != file.path || got.size != file.size || got.modified != file.modified {
            return Err(format!("a chunk of {} instead of {}", got.path, file.path));
        }
        if *got_group != row_group {
            return Err(format!("a chunk of row group {got_group}, not {row_group}"));
        }
        let Some(slot) = columns.iter().position(|c| c == column) else {
            return Err(format!(
                "a chunk of column {column}, which was not asked for"
            ));
        };
        pieces[slot].push((first_row, block.array));
    }
    pieces
        .into_iter()
        .zip(columns)
        .map(|(mut parts, column)| {
            if parts.is_empty() {
                return Ok(None);
            }
            parts.sort_by_key(|(first, _)| *first);
            let mut slices: Vec<ArrayRef> = Vec::new();
            for range in kept {
                // Every row of the range, from the chunks that meet it, in
                // order and without a gap or an overlap.
                let mut next = range.start;
                for (first, array) in &parts {
                    let first = usize::try_from(*first).map_err(|e| e.to_string())?;
                    let end = first + array.len();
                    if end <= range.start || first >= range.end {
                        continue;
                    }
                    let from = first.max(range.start);
                    if from != next {
                        return Err(format!(
                            "column {column} of row group {row_group}: chunks do not meet at row \
                             {next}"
                        ));
                    }
                    let to = end.min(range.end);
                    slices.push(array.slice(from - first, to - from));
                    next = to;
                }
                if next != range.end {
                    return Err(format!(
                        "column {column} of row group {row_group}: rows {next} to {} missing",
                        range.end
                    ));
                }
            }
            let array = match slices.as_slice() {
                [one] => one.clone(),
                _ => {
                    let arrays: Vec<&dyn Array> = slices.iter().map(|a| a.as_ref()).collect();
                    arrow::compute::concat(&arrays).map_err(|e| format!("chunks joined: {e}"))?
                }
            };
            Ok(Some(array))
        })
        .collect()
}

/// The rows a [`ChunkSelection`] names, checked against the row group's
/// `rows`.
pub fn selection_ranges(
    selection: &ChunkSelection,
    rows: usize,
) -> Result<Vec<Range<usize>>, String> {
    if !selection.ranges.len().is_multiple_of(2) {
        return Err("a selection of an odd number of bounds".to_string());
    }
    let mut ranges = Vec::with_capacity(selection.ranges.len() / 2);
    let mut after = 0;
    for pair in selection.ranges.chunks_exact(2) {
        let (start, end) = (pair[0] as usize, pair[1] as usize);
        if start < after || end <= start || end > rows {
            return Err(format!(
                "a selection of rows {start} to {end} after {after}, in {rows} rows"
            ));
        }
        ranges.push(start..end);
        after = end;
    }
    Ok(ranges)
}

/// The message that opens a pruned answer ([`ChunkSelection`]).
pub fn selection_message(kept: &[Range<usize>]) -> FlightData {
    let selection = ChunkSelection {
        ranges: kept
            .iter()
            .flat_map(|r| [r.start as u64, r.end as u64])
            .collect(),
    };
    FlightData {
        app_metadata: selection.encode_to_vec().into(),
        ..FlightData::default()
    }
}

/// What a memory node sent of a row group: the rows sent (all of them
/// unless the request pruned) and, for each asked column, those rows of it
/// or `None` when the node holds none of it.
pub type Sent = (Vec<Range<usize>>, Vec<Option<ArrayRef>>);

/// Ask the memory node at `addr` for `columns` of `row_group` of `file`
/// (`rows` rows), pruned by `prune` when given; each column whole (or the
/// selection's rows of it), or `None` when the node holds none of it. A
/// row group whose chunks arrive corrupted is asked for again
/// ([`REFETCHES`] times). Fails past `deadline`.
pub async fn fetch_chunks(
    client: &mut arrow_flight::flight_service_client::FlightServiceClient<
        tonic::transport::Channel,
    >,
    file: &FileVersion,
    row_group: usize,
    columns: &[usize],
    rows: usize,
    prune: Option<ChunkPrune>,
    deadline: Duration,
) -> Result<Sent, Status> {
    let pruned = prune.is_some();
    let request = ChunkRequest {
        file: Some(chunk_file(file)),
        row_group: row_group as u64,
        columns: columns.iter().map(|&c| c as u64).collect(),
        prune,
        chunks: true,
    };
    let mut tries = 0;
    loop {
        let ticket = Ticket::new(request.encode_to_vec());
        let fetched = async {
            let stream = client.do_get(ticket).await?.into_inner();
            stream.try_collect::<Vec<FlightData>>().await
        };
        let messages = match tokio::time::timeout(deadline, fetched).await {
            Ok(messages) => messages?,
            Err(_) => {
                return Err(Status::deadline_exceeded(format!(
                    "chunks of {} row group {row_group}: not sent within {deadline:?}",
                    file.path
                )));
            }
        };
        let (kept, chunks) = if pruned {
            let Some((first, chunks)) = messages.split_first() else {
                return Err(Status::data_loss("a pruned answer without its selection"));
            };
            let selection = ChunkSelection::decode(first.app_metadata.clone())
                .map_err(|e| Status::data_loss(format!("bad chunk selection: {e}")))?;
            let kept = selection_ranges(&selection, rows).map_err(Status::data_loss)?;
            (kept, chunks)
        } else {
            (every_row(rows), messages.as_slice())
        };
        match assemble(chunks, file, row_group, columns, &kept) {
            Ok(columns) => return Ok((kept, columns)),
            Err(e) if tries < REFETCHES && e.contains("checksum") => {
                tracing::warn!(path = %file.path, row_group, error = %e, "refetching chunks");
                tries += 1;
            }
            Err(e) => return Err(Status::data_loss(e)),
        }
    }
}

/// Whether a `DoGet` ticket asks for chunks (not a cached state).
pub fn chunk_request(ticket: &Ticket) -> Option<ChunkRequest> {
    ChunkRequest::decode(ticket.ticket.clone())
        .ok()
        .filter(|r| r.chunks)
}

/// Load a table's files into the memory node at `addr`.
pub async fn load_table(addr: &str, request: &LoadTable) -> Result<TableLoaded, Status> {
    let mut client = crate::connect(addr).await?;
    crate::do_action(&mut client, action::TABLE_LOAD, request).await
}

/// Drop a table's chunks from the memory node at `addr`.
pub async fn unload_table(addr: &str, table: &str) -> Result<TableLoaded, Status> {
    let mut client = crate::connect(addr).await?;
    let request = UnloadTable {
        table: table.to_string(),
    };
    crate::do_action(&mut client, action::TABLE_UNLOAD, &request).await
}

/// What the memory node at `addr` holds.
pub async fn memory_stats(addr: &str) -> Result<MemoryStats, Status> {
    let mut client = crate::connect(addr).await?;
    crate::do_action(&mut client, action::TABLE_STATS, &UnloadTable::default()).await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};

    use super::*;

    fn block(array: ArrayRef) -> Block {
        Block {
            table: Arc::from("file:///data/t"),
            key: BlockKey {
                file: Arc::new(FileVersion {
                    path: "data/t/a.parquet".into(),
                    size: 100,
                    modified: 7,
                    e_tag: None,
                    partition: None,
                }),
                row_group: 1,
                column: 2,
                data_type: array.data_type().clone(),
            },
            array,
        }
    }

    #[test]
    fn a_column_cut_into_chunks_comes_back_whole() {
        let rows = 100_000;
        let ints: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
        let strings: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("row {i}")),
        ));
        for array in [ints, strings] {
            let sent = block(Arc::clone(&array));
            for chunk_size in [1 << 10, 64 << 10, 64 << 20] {
                let messages = chunk_messages(&sent, &chunk_cuts(&sent, chunk_size)).unwrap();
                let bytes = array.to_data().get_slice_memory_size().unwrap();
                // No more chunks than the size needs, and each within it.
                assert!(messages.len() <= bytes.div_ceil(chunk_size).min(rows));
                for m in &messages {
                    let (piece, _) = read_piece(m).unwrap();
                    let size = piece.array.to_data().get_slice_memory_size().unwrap();
                    // Even cuts by rows: within a row's width of the size.
                    assert!(size <= chunk_size + 64, "{size} > {chunk_size}");
                }
                let file = sent.key.file.as_ref().clone();
                let got = assemble(&messages, &file, 1, &[5, 2], &every_row(rows)).unwrap();
                assert!(got[0].is_none(), "a column not sent is None");
                assert_eq!(got[1].as_deref().unwrap(), array.as_ref());
            }
        }
    }

    #[test]
    fn a_missing_or_foreign_chunk_is_refused() {
        let array: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let sent = block(array);
        let mut messages = chunk_messages(&sent, &chunk_cuts(&sent, 1024)).unwrap();
        assert!(messages.len() > 2);
        let file = sent.key.file.as_ref().clone();
        let gap = messages.remove(1);
        let error = assemble(&messages, &file, 1, &[2], &every_row(1000)).unwrap_err();
        assert!(error.contains("do not meet"), "{error}");
        messages.insert(1, gap);
        let error = assemble(&messages, &file, 2, &[2], &every_row(1000)).unwrap_err();
        assert!(error.contains("row group"), "{error}");
        let other = FileVersion {
            size: 101,
            ..file.clone()
        };
        assert!(assemble(&messages, &other, 1, &[2], &every_row(1000)).is_err());
        let mut body = messages[0].data_body.to_vec();
        let last = body.len() - 9;
        body[last] ^= 1;
        messages[0].data_body = body.into();
        let error = assemble(&messages, &file, 1, &[2], &every_row(1000)).unwrap_err();
        assert!(error.contains("checksum"), "{error}");
    }

    #[test]
    fn a_selection_takes_its_rows_from_the_chunks_that_meet_them() {
        let array: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
        let sent = block(Arc::clone(&array));
        let cuts = chunk_cuts(&sent, 1024);
        assert!(cuts.len() > 4, "{cuts:?}");
        let kept = vec![100..300, 600..610];
        let meets =
            |&(at, len): &(usize, usize)| kept.iter().any(|r| r.start < at + len && at < r.end);
        let all = chunk_messages(&sent, &cuts).unwrap();
        let messages: Vec<FlightData> = all
            .iter()
            .zip(&cuts)
            .filter(|(_, cut)| meets(cut))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(messages.len() < all.len());
        let file = sent.key.file.as_ref().clone();
        let got = assemble(&messages, &file, 1, &[2], &kept).unwrap();
        let want =
            arrow::compute::concat(&[&array.slice(100, 200), &array.slice(600, 10)]).unwrap();
        assert_eq!(got[0].as_deref().unwrap(), want.as_ref());
        // Cut to the kept rows, the same rows in fewer bytes.
        let trimmed: Vec<FlightData> = all
            .iter()
            .zip(&cuts)
            .flat_map(|(m, cut)| trim(m, *cut, &kept).unwrap())
            .collect();
        let size = |ms: &[FlightData]| ms.iter().map(|m| m.data_body.len()).sum::<usize>();
        assert!(
            size(&trimmed) < size(&messages),
            "{} of {}",
            size(&trimmed),
            size(&messages)
        );
        let got = assemble(&trimmed, &file, 1, &[2], &kept).unwrap();
        assert_eq!(got[0].as_deref().unwrap(), want.as_ref());
        // A chunk wholly kept goes as it is.
        assert_eq!(
            trim(&all[1], cuts[1], &every_row(1000)).unwrap(),
            vec![all[1].clone()]
        );
        // A chunk that a kept range needs, missing, is refused.
        let error = assemble(&messages[1..], &file, 1, &[2], &kept).unwrap_err();
        assert!(
            error.contains("do not meet") || error.contains("missing"),
            "{error}"
        );

        let selection = ChunkSelection::decode(selection_message(&kept).app_metadata).unwrap();
        assert_eq!(selection_ranges(&selection, 1000).unwrap(), kept);
        for bad in [
            vec![5, 3],
            vec![1, 2, 2],
            vec![10, 20, 15, 30],
            vec![0, 1001],
        ] {
            let selection = ChunkSelection { ranges: bad };
            assert!(selection_ranges(&selection, 1000).is_err());
        }
    }

    #[test]
    fn a_state_ticket_is_not_a_chunk_request() {
        let state = crate::protocol::StateKey { key: "q1".into() };
        assert!(chunk_request(&Ticket::new(state.encode_to_vec())).is_none());
        let request = ChunkRequest {
            chunks: true,
            ..ChunkRequest::default()
        };
        assert!(chunk_request(&Ticket::new(request.encode_to_vec())).is_some());
    }
}
