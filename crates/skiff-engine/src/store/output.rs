//! One pipeline's materialized output: per-partition Arrow batches, held in
//! memory under a reservation in DataFusion's memory pool, with the tail of a
//! partition spilled to an Arrow IPC file once the pool refuses to grow.

use std::sync::{Arc, Mutex, MutexGuard};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::utils::memory::get_record_batch_memory_size;
use datafusion::common::{Result, internal_err};
use datafusion::execution::SpillFile;
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::SpillManager;
use datafusion::physical_plan::coop::make_cooperative;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, SpillMetrics};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;

use super::spill::SpillFileWriter;
use crate::pipeline::PipelineId;

/// Where an output's tuples are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Memory,
    Disk,
    /// In memory up to some batch of a partition, on disk after it.
    Mixed,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Location::Memory => "memory",
            Location::Disk => "disk",
            Location::Mixed => "memory+disk",
        })
    }
}

/// Size of a materialized output, summed over its partitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputSize {
    pub rows: u64,
    /// Bytes held in memory (as reserved in the memory pool).
    pub memory_bytes: u64,
    /// Bytes written to spill files.
    pub spilled_bytes: u64,
}

impl OutputSize {
    pub fn bytes(&self) -> u64 {
        self.memory_bytes + self.spilled_bytes
    }

    pub fn location(&self) -> Location {
        match (self.memory_bytes > 0, self.spilled_bytes > 0) {
            (_, false) => Location::Memory,
            (false, true) => Location::Disk,
            (true, true) => Location::Mixed,
        }
    }
}

#[derive(Default)]
struct PartitionBuffer {
    /// In-memory prefix of the partition, in arrival order.
    batches: Vec<RecordBatch>,
    /// Once one batch of a partition spills, every later batch follows it to
    /// disk so that the partition keeps its order (sorted runs depend on it).
    spilling: Option<SpillFileWriter>,
    spilled: Option<Arc<dyn SpillFile>>,
    size: OutputSize,
    finished: bool,
}

/// The materialized output of one pipeline.
pub struct PipelineOutput {
    pipeline: PipelineId,
    schema: SchemaRef,
    partitions: Vec<Mutex<PartitionBuffer>>,
    reservation: Mutex<MemoryReservation>,
    runtime: Arc<RuntimeEnv>,
    /// Reads spill files back.
    spill: SpillManager,
}

impl std::fmt::Debug for PipelineOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineOutput")
            .field("pipeline", &self.pipeline)
            .field("partitions", &self.partitions.len())
            .field("size", &self.size())
            .finish()
    }
}

impl PipelineOutput {
    pub(crate) fn new(
        pipeline: PipelineId,
        schema: SchemaRef,
        partition_count: usize,
        runtime: &Arc<RuntimeEnv>,
    ) -> Self {
        let reservation = MemoryConsumer::new(format!("IntermediateStore[{pipeline}]"))
            .with_can_spill(true)
            .register(&runtime.memory_pool);
        let metrics = SpillMetrics::new(&ExecutionPlanMetricsSet::new(), 0);
        let spill = SpillManager::new(Arc::clone(runtime), metrics, Arc::clone(&schema));
        Self {
            pipeline,
            schema,
            partitions: (0..partition_count).map(|_| Mutex::default()).collect(),
            reservation: Mutex::new(reservation),
            runtime: Arc::clone(runtime),
            spill,
        }
    }

    pub fn pipeline(&self) -> PipelineId {
        self.pipeline
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn partition_count(&self) -> usize {
        self.partitions.len()
    }

    fn partition(&self, partition: usize) -> Result<MutexGuard<'_, PartitionBuffer>> {
        let Some(buffer) = self.partitions.get(partition) else {
            return internal_err!(
                "{} has {} partitions, partition {partition} requested",
                self.pipeline,
                self.partitions.len()
            );
        };
        // A poisoned lock means a writer panicked mid-push; the buffer is
        // still a valid prefix of the partition.
        Ok(buffer.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Append `batch` to `partition`: in memory while the pool allows it,
    /// on disk afterwards.
    pub fn push(&self, partition: usize, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let mut buffer = self.partition(partition)?;
        if buffer.finished {
            return internal_err!(
                "{} partition {partition} written after finish",
                self.pipeline
            );
        }
        buffer.size.rows += batch.num_rows() as u64;
        if buffer.spilling.is_none() {
            let bytes = get_record_batch_memory_size(&batch);
            let granted = self
                .reservation
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .try_grow(bytes)
                .is_ok();
            if granted {
                buffer.size.memory_bytes += bytes as u64;
                buffer.batches.push(batch);
                return Ok(());
            }
            let description = format!("skiff {} partition {partition}", self.pipeline);
            let file = SpillFileWriter::create(&self.runtime, &self.schema, &description)?;
            buffer.spilling = Some(file);
        }
        if let Some(file) = buffer.spilling.as_mut() {
            file.append(&batch)?;
        }
        Ok(())
    }

    /// Seal `partition`: no more pushes, spill file closed.
    pub fn finish_partition(&self, partition: usize) -> Result<()> {
        let mut buffer = self.partition(partition)?;
        if let Some(file) = buffer.spilling.take() {
            let file = file.finish()?;
            buffer.size.spilled_bytes = file.size().unwrap_or_default();
            buffer.spilled = Some(file);
        }
        buffer.finished = true;
        Ok(())
    }

    pub fn size(&self) -> OutputSize {
        let mut total = OutputSize::default();
        for partition in &self.partitions {
            let size = partition.lock().unwrap_or_else(|e| e.into_inner()).size;
            total.rows += size.rows;
            total.memory_bytes += size.memory_bytes;
            total.spilled_bytes += size.spilled_bytes;
        }
        total
    }

    /// A stream over a sealed partition: in-memory batches, then the spilled
    /// tail. Reading does not consume: the output can be read again.
    pub fn read(&self, partition: usize) -> Result<SendableRecordBatchStream> {
        let buffer = self.partition(partition)?;
        if !buffer.finished {
            return internal_err!("{} partition {partition} read before finish", self.pipeline);
        }
        let memory = futures::stream::iter(buffer.batches.clone().into_iter().map(Ok));
        let stream: SendableRecordBatchStream = match &buffer.spilled {
            None => Box::pin(RecordBatchStreamAdapter::new(
                Arc::clone(&self.schema),
                memory,
            )),
            Some(file) => {
                let tail = self.spill.read_spill_as_stream(Arc::clone(file), None)?;
                Box::pin(RecordBatchStreamAdapter::new(
                    Arc::clone(&self.schema),
                    memory.chain(tail),
                ))
            }
        };
        Ok(make_cooperative(stream))
    }
}
