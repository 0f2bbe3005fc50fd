//! State extraction: the tuples of selected outputs as checksummed Arrow IPC
//! frames, and loading them back on the target.
//!
//! Extraction reads the intermediate store the way a pipeline reads its
//! inputs (in memory and from spill files); a read does not consume, so the
//! query can go on locally afterwards (snapshots). Each batch becomes one
//! frame: a self-contained Arrow IPC stream (schema, one batch, end marker),
//! optionally lz4- or zstd-compressed, with the CRC-32 of its bytes. The
//! loader checks every checksum before decoding, and rebuilds each output
//! partition by partition, in order, as a [`MigratedState`] for the
//! migrated `MaterializedExec` leaves of the remaining plan.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ipc::CompressionType;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow::record_batch::RecordBatch;
use datafusion::common::{Result, internal_err};
use futures::TryStreamExt;
use skiff_engine::morsel::Cut;
use skiff_engine::store::PipelineOutput;
use skiff_engine::{IntermediateStore, MigratedState, MigratedTable, PipelineId};

/// Compression of the frames' IPC buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    #[default]
    None,
    Lz4,
    Zstd,
}

impl From<skiff_engine::options::StateCompression> for Compression {
    fn from(setting: skiff_engine::options::StateCompression) -> Self {
        use skiff_engine::options::StateCompression;
        match setting {
            StateCompression::None => Compression::None,
            StateCompression::Lz4 => Compression::Lz4,
            StateCompression::Zstd => Compression::Zstd,
        }
    }
}

impl Compression {
    fn ipc(self) -> Option<CompressionType> {
        match self {
            Compression::None => None,
            Compression::Lz4 => Some(CompressionType::LZ4_FRAME),
            Compression::Zstd => Some(CompressionType::ZSTD),
        }
    }
}

/// One batch as an Arrow IPC stream, with the CRC-32 of those bytes.
#[derive(Clone, Debug)]
pub struct Frame {
    pub bytes: Vec<u8>,
    pub checksum: u32,
    pub rows: usize,
}

/// The frames of one pipeline's output, per partition.
#[derive(Clone, Debug)]
pub struct ExtractedOutput {
    pub pipeline: PipelineId,
    pub schema: SchemaRef,
    pub partitions: Vec<Vec<Frame>>,
}

/// The extracted state of one query.
#[derive(Clone, Debug, Default)]
pub struct ExtractedState {
    pub outputs: Vec<ExtractedOutput>,
}

impl ExtractedState {
    fn frames(&self) -> impl Iterator<Item = &Frame> {
        self.outputs
            .iter()
            .flat_map(|o| o.partitions.iter().flatten())
    }

    /// Bytes of all frames: what travels.
    pub fn bytes(&self) -> u64 {
        self.frames().map(|f| f.bytes.len() as u64).sum()
    }

    pub fn rows(&self) -> u64 {
        self.frames().map(|f| f.rows as u64).sum()
    }
}

/// Extract the outputs of `pipelines` from `store` (they must be finished
/// and live). Non-destructive.
pub async fn extract(
    store: &IntermediateStore,
    pipelines: &BTreeSet<PipelineId>,
    compression: Compression,
) -> Result<ExtractedState> {
    let options = IpcWriteOptions::default().try_with_compression(compression.ipc())?;
    let mut outputs = Vec::with_capacity(pipelines.len());
    for &pipeline in pipelines {
        let output = store.output(pipeline)?;
        outputs.push(encode_output(pipeline, &output, &options).await?);
    }
    Ok(ExtractedState { outputs })
}

/// Extract the partial work of pipelines a cut ended in the middle (see
/// `QueryExecution::cuts`): the tapped partial aggregation rows of an
/// aggregation, else the pipeline's output so far. Non-destructive.
pub async fn extract_cuts(
    cuts: &BTreeMap<PipelineId, (Cut, Arc<PipelineOutput>)>,
    compression: Compression,
) -> Result<ExtractedState> {
    let options = IpcWriteOptions::default().try_with_compression(compression.ipc())?;
    let mut outputs = Vec::with_capacity(cuts.len());
    for (&pipeline, (cut, output)) in cuts {
        outputs.push(match &cut.tapped {
            Some((schema, batches)) => encode_batches(pipeline, schema, batches, &options)?,
            None => encode_output(pipeline, output, &options).await?,
        });
    }
    Ok(ExtractedState { outputs })
}

/// Extract the state an earlier hop brought that the remaining plan still
/// reads ([`RemainingPlan::carried`](crate::RemainingPlan)), under its new
/// ids. `migrated` is the execution's migrated state.
pub fn extract_carried(
    migrated: Option<&MigratedState>,
    carried: &[(PipelineId, PipelineId)],
    compression: Compression,
) -> Result<ExtractedState> {
    let options = IpcWriteOptions::default().try_with_compression(compression.ipc())?;
    let mut outputs = Vec::with_capacity(carried.len());
    for &(from, to) in carried {
        let Some(table) = migrated.and_then(|m| m.get(from)) else {
            return internal_err!("the plan carries state {from} that this execution lacks");
        };
        outputs.push(encode_batches(
            to,
            &table.schema,
            &table.partitions,
            &options,
        )?);
    }
    Ok(ExtractedState { outputs })
}

/// `batches` as a state of one output with one partition, under
/// `pipeline`: how a distributed query's committed stage output travels
/// to and from the memory node (`skiff_node::checkpoints`), checked by
/// [`load`] like any state.
pub fn extract_batches(
    pipeline: PipelineId,
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
    compression: Compression,
) -> Result<ExtractedState> {
    let options = IpcWriteOptions::default().try_with_compression(compression.ipc())?;
    let output = encode_batches(pipeline, schema, &[batches], &options)?;
    Ok(ExtractedState {
        outputs: vec![output],
    })
}

fn encode_batches(
    pipeline: PipelineId,
    schema: &SchemaRef,
    partitions: &[Vec<RecordBatch>],
    options: &IpcWriteOptions,
) -> Result<ExtractedOutput> {
    let partitions = partitions
        .iter()
        .map(|batches| {
            batches
                .iter()
                .map(|batch| encode_frame(batch, options))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ExtractedOutput {
        pipeline,
        schema: Arc::clone(schema),
        partitions,
    })
}

async fn encode_output(
    pipeline: PipelineId,
    output: &Arc<PipelineOutput>,
    options: &IpcWriteOptions,
) -> Result<ExtractedOutput> {
    let schema = Arc::clone(output.schema());
    let mut partitions = Vec::with_capacity(output.partition_count());
    for partition in 0..output.partition_count() {
        let mut frames = Vec::new();
        let mut stream = output.read(partition)?;
        while let Some(batch) = stream.try_next().await? {
            frames.push(encode_frame(&batch, options)?);
        }
        partitions.push(frames);
    }
    Ok(ExtractedOutput {
        pipeline,
        schema,
        partitions,
    })
}

fn encode_frame(batch: &RecordBatch, options: &IpcWriteOptions) -> Result<Frame> {
    // Operators emit zero-copy slices whose view columns reference every
    // data buffer of their source batch, and IPC writes those buffers in
    // full for each slice: without this a 145 MiB state (TPC-DS q67)
    // extracted to 15.6 GB.
    let batch = &skiff_engine::batch::compact(batch.clone())?;
    let mut bytes = Vec::new();
    let mut writer =
        StreamWriter::try_new_with_options(&mut bytes, &batch.schema(), options.clone())?;
    writer.write(batch)?;
    writer.finish()?;
    drop(writer);
    let checksum = crc32fast::hash(&bytes);
    Ok(Frame {
        bytes,
        checksum,
        rows: batch.num_rows(),
    })
}

/// Why extracted state could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{pipeline} partition {partition} frame {frame}: checksum mismatch")]
    Checksum {
        pipeline: PipelineId,
        partition: usize,
        frame: usize,
    },
    #[error("{pipeline} partition {partition} frame {frame}: {reason}")]
    Frame {
        pipeline: PipelineId,
        partition: usize,
        frame: usize,
        reason: String,
    },
    #[error("{pipeline} partition {partition} frame {frame}: {source}")]
    Ipc {
        pipeline: PipelineId,
        partition: usize,
        frame: usize,
        source: ArrowError,
    },
}

/// Verify every frame and rebuild the outputs for migrated `MaterializedExec` leaves.
pub fn load(state: &ExtractedState) -> Result<MigratedState, LoadError> {
    let mut tables = BTreeMap::new();
    for output in &state.outputs {
        let mut partitions = Vec::with_capacity(output.partitions.len());
        for (partition, frames) in output.partitions.iter().enumerate() {
            let mut batches = Vec::with_capacity(frames.len());
            for (frame, bytes) in frames.iter().enumerate() {
                let at = FrameAt {
                    pipeline: output.pipeline,
                    partition,
                    frame,
                };
                batches.push(decode_frame(bytes, &output.schema, at)?);
            }
            partitions.push(batches);
        }
        let table = MigratedTable {
            schema: Arc::clone(&output.schema),
            partitions,
        };
        tables.insert(output.pipeline, table);
    }
    Ok(MigratedState::new(tables))
}

#[derive(Clone, Copy)]
struct FrameAt {
    pipeline: PipelineId,
    partition: usize,
    frame: usize,
}

impl FrameAt {
    fn invalid(self, reason: impl Into<String>) -> LoadError {
        LoadError::Frame {
            pipeline: self.pipeline,
            partition: self.partition,
            frame: self.frame,
            reason: reason.into(),
        }
    }

    fn ipc(self, source: ArrowError) -> LoadError {
        LoadError::Ipc {
            pipeline: self.pipeline,
            partition: self.partition,
            frame: self.frame,
            source,
        }
    }
}

/// One frame's batch, after its checksum, schema and row count check out.
fn decode_frame(frame: &Frame, schema: &SchemaRef, at: FrameAt) -> Result<RecordBatch, LoadError> {
    if crc32fast::hash(&frame.bytes) != frame.checksum {
        return Err(LoadError::Checksum {
            pipeline: at.pipeline,
            partition: at.partition,
            frame: at.frame,
        });
    }
    let mut reader =
        StreamReader::try_new(Cursor::new(&frame.bytes), None).map_err(|e| at.ipc(e))?;
    let batch = match reader.next() {
        Some(batch) => batch.map_err(|e| at.ipc(e))?,
        None => return Err(at.invalid("no batch")),
    };
    if reader.next().is_some() {
        return Err(at.invalid("more than one batch"));
    }
    if batch.schema().fields() != schema.fields() {
        return Err(at.invalid("schema differs from the output's"));
    }
    if batch.num_rows() != frame.rows {
        return Err(at.invalid(format!(
            "{} rows, {} announced",
            batch.num_rows(),
            frame.rows
        )));
    }
    // The leaf's schema (with its metadata) is the output's.
    RecordBatch::try_new(Arc::clone(schema), batch.columns().to_vec()).map_err(|e| at.ipc(e))
}

#[cfg(test)]
mod tests {
    use arrow::array::StringViewArray;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    /// A slice of a few rows ships those rows, not the buffers of the batch
    /// it was cut from.
    #[test]
    fn a_slice_of_view_strings_ships_only_its_rows() {
        let long: Vec<String> = (0..10_000).map(|i| format!("{i:0>64}")).collect();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let column = Arc::new(StringViewArray::from_iter_values(long));
        let batch = RecordBatch::try_new(schema, vec![column]).expect("batch");
        let slice = batch.slice(100, 10);
        let frame = encode_frame(&slice, &IpcWriteOptions::default()).expect("frame");
        assert!(
            frame.bytes.len() < 16 * 1024,
            "{} bytes for 10 rows",
            frame.bytes.len()
        );
        let decoded = decode_frame(
            &frame,
            &slice.schema(),
            FrameAt {
                pipeline: PipelineId(0),
                partition: 0,
                frame: 0,
            },
        )
        .expect("decode");
        assert_eq!(decoded, slice);
    }
}
