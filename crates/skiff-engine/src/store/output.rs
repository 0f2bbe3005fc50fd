//! One pipeline's materialized output: per-partition Arrow batches, held in
//! memory under a reservation in DataFusion's memory pool, with the tail of a
//! partition spilled to an Arrow IPC file once the pool refuses to grow.

use std::sync::{Arc, Mutex, MutexGuard};

use arrow::compute::concat_batches;
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
    /// Seal each in-memory partition as one batch (see `Pipeline::read_whole`).
    concat_on_seal: bool,
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
        concat_on_seal: bool,
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
            concat_on_seal,
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
        if self.concat_on_seal && buffer.batches.len() > 1 && buffer.spilling.is_none() {
            self.concat(&mut buffer)?;
        }
        if let Some(file) = buffer.spilling.take() {
            let file = file.finish()?;
            buffer.size.spilled_bytes = file.size().unwrap_or_default();
            buffer.spilled = Some(file);
        }
        buffer.finished = true;
        Ok(())
    }

    /// Replace the partition's batches by their concatenation. The memory is
    /// reserved for the copy before the pieces are released.
    fn concat(&self, buffer: &mut PartitionBuffer) -> Result<()> {
        let batch = concat_batches(&self.schema, &buffer.batches)?;
        let bytes = get_record_batch_memory_size(&batch);
        let reservation = self.reservation.lock().unwrap_or_else(|e| e.into_inner());
        if reservation.try_grow(bytes).is_err() {
            // No room for the copy: the reader will concatenate instead.
            return Ok(());
        }
        reservation.shrink(buffer.size.memory_bytes as usize);
        buffer.size.memory_bytes = bytes as u64;
        buffer.batches = vec![batch];
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

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::memory_pool::GreedyMemoryPool;
    use datafusion::execution::runtime_env::RuntimeEnvBuilder;
    use futures::TryStreamExt;

    use super::*;

    fn batch(schema: &SchemaRef, start: i64, rows: i64) -> RecordBatch {
        let ids = Int64Array::from_iter_values(start..start + rows);
        let names =
            StringArray::from_iter_values((start..start + rows).map(|i| format!("row-{i}")));
        RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(ids), Arc::new(names)]).unwrap()
    }

    fn runtime(pool_bytes: usize) -> Arc<RuntimeEnv> {
        RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(GreedyMemoryPool::new(pool_bytes)))
            .build_arc()
            .unwrap()
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
        ]))
    }

    async fn read_ids(output: &PipelineOutput, partition: usize) -> Vec<i64> {
        let batches: Vec<RecordBatch> =
            output.read(partition).unwrap().try_collect().await.unwrap();
        batches
            .iter()
            .flat_map(|b| {
                let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                ids.values().to_vec()
            })
            .collect()
    }

    #[tokio::test]
    async fn partition_over_the_pool_spills_its_tail_and_keeps_order() {
        let schema = schema();
        let one = get_record_batch_memory_size(&batch(&schema, 0, 1000));
        // Room for two batches of the first partition, not three.
        let runtime = runtime(one * 2 + one / 2);
        let output = PipelineOutput::new(PipelineId(0), Arc::clone(&schema), 2, false, &runtime);
        for i in 0..5 {
            output.push(0, batch(&schema, i * 1000, 1000)).unwrap();
        }
        output.push(1, batch(&schema, 90_000, 10)).unwrap();
        output.finish_partition(0).unwrap();
        output.finish_partition(1).unwrap();

        let size = output.size();
        assert_eq!(size.rows, 5010);
        assert!(size.spilled_bytes > 0, "{size:?}");
        assert!(size.memory_bytes > 0, "{size:?}");
        assert_eq!(size.location(), Location::Mixed);
        // Read twice: reads do not consume.
        for _ in 0..2 {
            assert_eq!(read_ids(&output, 0).await, (0..5000).collect::<Vec<_>>());
        }
        // The pool is still full, so partition 1's only batch went to disk
        // as well, and reads back whole.
        assert_eq!(
            read_ids(&output, 1).await,
            (90_000..90_010).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn dropping_an_output_returns_its_memory() {
        let schema = schema();
        let runtime = runtime(1 << 30);
        let output = PipelineOutput::new(PipelineId(0), Arc::clone(&schema), 1, false, &runtime);
        output.push(0, batch(&schema, 0, 1000)).unwrap();
        output.finish_partition(0).unwrap();
        assert!(runtime.memory_pool.reserved() > 0);
        drop(output);
        assert_eq!(runtime.memory_pool.reserved(), 0);
    }

    #[tokio::test]
    async fn build_outputs_are_sealed_as_one_batch() {
        let schema = schema();
        let runtime = runtime(1 << 30);
        let output = PipelineOutput::new(PipelineId(0), Arc::clone(&schema), 1, true, &runtime);
        for i in 0..4 {
            output.push(0, batch(&schema, i * 100, 100)).unwrap();
        }
        output.finish_partition(0).unwrap();
        let batches: Vec<RecordBatch> = output.read(0).unwrap().try_collect().await.unwrap();
        assert_eq!(batches.len(), 1);
        assert_eq!(read_ids(&output, 0).await, (0..400).collect::<Vec<_>>());
        assert_eq!(
            runtime.memory_pool.reserved() as u64,
            output.size().memory_bytes
        );
    }

    #[tokio::test]
    async fn misuse_is_an_internal_error_not_a_panic() {
        let schema = schema();
        let runtime = runtime(1 << 30);
        let output = PipelineOutput::new(PipelineId(3), Arc::clone(&schema), 1, false, &runtime);
        assert!(output.read(0).is_err(), "read before seal");
        assert!(
            output.push(5, batch(&schema, 0, 1)).is_err(),
            "no partition 5"
        );
        output.finish_partition(0).unwrap();
        assert!(
            output.push(0, batch(&schema, 0, 1)).is_err(),
            "push after seal"
        );
    }
}
