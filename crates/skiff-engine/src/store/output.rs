//! One pipeline's materialized output: per-partition Arrow batches, held in
//! memory under a reservation in DataFusion's memory pool, with the tail of a
//! partition spilled to an Arrow IPC file once the pool refuses to grow, and
//! whole partitions moved to disk when other consumers need the memory
//! ([`PipelineOutput::spill_idle`]).

use std::sync::{Arc, Mutex, MutexGuard};

use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::utils::memory::RecordBatchMemoryCounter;
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
use futures::stream::BoxStream;

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

impl Location {
    pub fn as_str(&self) -> &'static str {
        match self {
            Location::Memory => "memory",
            Location::Disk => "disk",
            Location::Mixed => "memory+disk",
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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

/// The store's own cap on the bytes its outputs keep in memory
/// (`skiff.store_memory_max`), shared by all outputs of one query.
#[derive(Debug)]
pub struct StoreBudget {
    max: usize,
    used: std::sync::atomic::AtomicUsize,
}

impl StoreBudget {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            used: Default::default(),
        }
    }

    fn try_take(&self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.used
            .fetch_update(Relaxed, Relaxed, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.max)
            })
            .is_ok()
    }

    /// Account bytes already in use, over the cap if need be.
    fn force_take(&self, bytes: usize) {
        self.used
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    fn give_back(&self, bytes: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let returned = self.used.fetch_update(Relaxed, Relaxed, |used| {
            debug_assert!(used >= bytes, "store budget returned more than taken");
            Some(used.saturating_sub(bytes))
        });
        debug_assert!(returned.is_ok());
    }
}

/// Prefix of the memory consumer names of outputs; the memory pool uses it
/// to tell the store's own requests from those of operators.
pub(crate) const CONSUMER_PREFIX: &str = "IntermediateStore";

#[derive(Default)]
struct PartitionBuffer {
    /// In-memory prefix of the partition, in arrival order.
    batches: Vec<RecordBatch>,
    /// Spill files after the in-memory prefix, in order. Once one incoming
    /// batch of a partition spills, every later one follows it to disk so
    /// that the partition keeps its order (sorted runs depend on it).
    files: Vec<Arc<dyn SpillFile>>,
    spilling: Option<SpillFileWriter>,
    size: OutputSize,
    /// Counts the memory of the in-memory batches, each shared buffer once
    /// (an aggregate emits one batch as many zero-copy slices).
    counter: RecordBatchMemoryCounter,
    finished: bool,
    /// Streams reading the partition now; they hold its batches, so moving
    /// the partition to disk would free nothing.
    readers: usize,
    /// A reader that keeps what it read (a join build) has read the whole
    /// partition, and its own reservation now accounts for the memory.
    held_by_reader: bool,
}

/// The materialized output of one pipeline.
pub struct PipelineOutput {
    pipeline: PipelineId,
    schema: SchemaRef,
    partitions: Vec<Mutex<PartitionBuffer>>,
    /// Read whole by a join build (see `Pipeline::read_whole`): sealed as one
    /// batch per partition, and accounted by the reader once read.
    read_whole: bool,
    reservation: MemoryReservation,
    budget: Option<Arc<StoreBudget>>,
    runtime: Arc<RuntimeEnv>,
    /// Reads spill files back.
    spill: SpillManager,
}

impl Drop for PipelineOutput {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.give_back(self.size().memory_bytes as usize);
        }
    }
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
        read_whole: bool,
        budget: Option<Arc<StoreBudget>>,
        runtime: &Arc<RuntimeEnv>,
    ) -> Self {
        let reservation = MemoryConsumer::new(format!("{CONSUMER_PREFIX}[{pipeline}]"))
            .with_can_spill(true)
            .register(&runtime.memory_pool);
        let metrics = SpillMetrics::new(&ExecutionPlanMetricsSet::new(), 0);
        let spill = SpillManager::new(Arc::clone(runtime), metrics, Arc::clone(&schema));
        Self {
            pipeline,
            schema,
            partitions: (0..partition_count).map(|_| Mutex::default()).collect(),
            read_whole,
            reservation,
            budget,
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

    /// Account `bytes` more in memory: within the store's budget and the
    /// memory pool, or not at all.
    fn take_memory(&self, bytes: usize) -> bool {
        if let Some(budget) = &self.budget
            && !budget.try_take(bytes)
        {
            return false;
        }
        if self.reservation.try_grow(bytes).is_ok() {
            return true;
        }
        if let Some(budget) = &self.budget {
            budget.give_back(bytes);
        }
        false
    }

    fn release_memory(&self, bytes: usize) {
        if let Some(budget) = &self.budget {
            budget.give_back(bytes);
        }
        self.reservation.shrink(bytes);
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
            let bytes = buffer.counter.count_batch(&batch);
            if self.take_memory(bytes) {
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
        if self.read_whole && buffer.batches.len() > 1 && buffer.spilling.is_none() {
            self.concat(&mut buffer)?;
        }
        if let Some(file) = buffer.spilling.take() {
            let file = file.finish()?;
            buffer.size.spilled_bytes += file.size().unwrap_or_default();
            buffer.files.push(file);
        }
        buffer.finished = true;
        Ok(())
    }

    /// Replace the partition's batches by their concatenation, which makes
    /// the join's own concatenation a zero-copy slice. The memory for the
    /// copy (at most the pieces' size) is reserved before it is made.
    fn concat(&self, buffer: &mut PartitionBuffer) -> Result<()> {
        let pieces = buffer.size.memory_bytes as usize;
        if !self.take_memory(pieces) {
            // No room for the copy: the reader will concatenate instead.
            return Ok(());
        }
        let batch = match concat_batches(&self.schema, &buffer.batches) {
            Ok(batch) => batch,
            Err(e) => {
                self.release_memory(pieces);
                return Err(e.into());
            }
        };
        buffer.counter = RecordBatchMemoryCounter::new();
        let bytes = buffer.counter.count_batch(&batch);
        buffer.batches = vec![batch];
        // Twice the pieces are reserved now; keep what the copy uses.
        let reserved = 2 * pieces;
        if bytes <= reserved {
            self.release_memory(reserved - bytes);
        } else {
            // The copy outgrew the estimate: account for it regardless, as
            // the memory is already in use.
            if let Some(budget) = &self.budget {
                budget.force_take(bytes - reserved);
            }
            self.reservation.grow(bytes - reserved);
        }
        buffer.size.memory_bytes = bytes as u64;
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

    /// A stream over a sealed partition: in-memory batches, then the spill
    /// files. Reading does not consume: the output can be read again.
    pub fn read(self: &Arc<Self>, partition: usize) -> Result<SendableRecordBatchStream> {
        let mut buffer = self.partition(partition)?;
        if !buffer.finished {
            return internal_err!("{} partition {partition} read before finish", self.pipeline);
        }
        buffer.readers += 1;
        let guard = ReadGuard {
            output: Arc::clone(self),
            partition,
        };
        let memory = futures::stream::iter(buffer.batches.clone().into_iter().map(Ok));
        let mut stream: BoxStream<'static, Result<RecordBatch>> = Box::pin(memory);
        for file in &buffer.files {
            let tail = self.spill.read_spill_as_stream(Arc::clone(file), None)?;
            stream = Box::pin(stream.chain(tail));
        }
        if self.read_whole {
            // The join keeps every batch it reads; once it has them all, its
            // reservation covers the memory and the store's would count it
            // twice.
            let output = Arc::clone(self);
            let handover = futures::stream::once(async move {
                output.hand_over(partition);
                None
            })
            .filter_map(|done: Option<Result<RecordBatch>>| async move { done });
            stream = Box::pin(stream.chain(handover));
        }
        let stream = stream.map(move |batch| {
            let _reading = &guard;
            batch
        });
        let stream = RecordBatchStreamAdapter::new(Arc::clone(&self.schema), stream);
        Ok(make_cooperative(Box::pin(stream)))
    }

    /// The join has read the whole partition. When that partition is a
    /// single in-memory batch, the join's concatenation was a zero-copy
    /// slice of it, so the join's reservation now covers its memory; in
    /// every other case the join made its own copy and the store keeps
    /// counting its own.
    fn hand_over(&self, partition: usize) {
        let Ok(mut buffer) = self.partition(partition) else {
            return;
        };
        let shared = buffer.batches.len() == 1 && buffer.files.is_empty();
        if shared && !buffer.held_by_reader {
            buffer.held_by_reader = true;
            self.reservation.shrink(buffer.size.memory_bytes as usize);
        }
    }

    /// Move the in-memory part of partitions to disk until about `wanted`
    /// bytes of reservation are released; returns the bytes released.
    /// Partitions locked by a writer right now, partitions being read and
    /// partitions whose memory a reader holds are left alone (moving them
    /// would free nothing); a partition still being written goes on on
    /// disk. Called when another consumer of the memory pool cannot grow.
    pub fn spill_idle(&self, wanted: usize) -> usize {
        let mut released = 0;
        for partition in &self.partitions {
            if released >= wanted {
                break;
            }
            // Never wait: the caller may be a writer of this very output.
            let mut buffer = match partition.try_lock() {
                Ok(buffer) => buffer,
                Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            if buffer.held_by_reader || buffer.readers > 0 || buffer.batches.is_empty() {
                continue;
            }
            match self.spill_prefix(&mut buffer) {
                Ok(bytes) => released += bytes,
                Err(e) => {
                    tracing::warn!(pipeline = %self.pipeline, error = %e, "cannot spill output");
                    return released;
                }
            }
        }
        released
    }

    /// Write the in-memory prefix of a partition to a spill file that goes
    /// before its other files. A partition still being written continues in
    /// a spill file of its own, after the prefix.
    fn spill_prefix(&self, buffer: &mut PartitionBuffer) -> Result<usize> {
        let description = format!("skiff {} idle partition", self.pipeline);
        if !buffer.finished && buffer.spilling.is_none() {
            let tail = format!("skiff {} partition tail", self.pipeline);
            buffer.spilling = Some(SpillFileWriter::create(&self.runtime, &self.schema, &tail)?);
        }
        let mut file = SpillFileWriter::create(&self.runtime, &self.schema, &description)?;
        for batch in &buffer.batches {
            file.append(batch)?;
        }
        let file = file.finish()?;
        let bytes = buffer.size.memory_bytes as usize;
        buffer.size.spilled_bytes += file.size().unwrap_or_default();
        buffer.size.memory_bytes = 0;
        buffer.files.insert(0, file);
        buffer.batches.clear();
        buffer.counter = RecordBatchMemoryCounter::new();
        self.release_memory(bytes);
        Ok(bytes)
    }
}

/// Keeps a partition's reader count up while a read stream lives.
struct ReadGuard {
    output: Arc<PipelineOutput>,
    partition: usize,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        if let Ok(mut buffer) = self.output.partition(self.partition) {
            buffer.readers -= 1;
        }
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

    fn output(
        pipeline: PipelineId,
        partitions: usize,
        read_whole: bool,
        budget: Option<Arc<StoreBudget>>,
        runtime: &Arc<RuntimeEnv>,
    ) -> Arc<PipelineOutput> {
        let output =
            PipelineOutput::new(pipeline, schema(), partitions, read_whole, budget, runtime);
        Arc::new(output)
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
        ]))
    }

    async fn read_ids(output: &Arc<PipelineOutput>, partition: usize) -> Vec<i64> {
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
        let one = datafusion::common::utils::memory::get_record_batch_memory_size(&batch(
            &schema, 0, 1000,
        ));
        // Room for two batches of the first partition, not three.
        let runtime = runtime(one * 2 + one / 2);
        let output = output(PipelineId(0), 2, false, None, &runtime);
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
        let output = output(PipelineId(0), 1, false, None, &runtime);
        output.push(0, batch(&schema, 0, 1000)).unwrap();
        output.finish_partition(0).unwrap();
        assert!(runtime.memory_pool.reserved() > 0);
        drop(output);
        assert_eq!(runtime.memory_pool.reserved(), 0);
    }

    #[tokio::test]
    async fn build_outputs_are_sealed_as_one_batch_and_handed_to_the_reader() {
        let schema = schema();
        let runtime = runtime(1 << 30);
        let output = output(PipelineId(0), 1, true, None, &runtime);
        for i in 0..4 {
            output.push(0, batch(&schema, i * 100, 100)).unwrap();
        }
        output.finish_partition(0).unwrap();
        assert_eq!(
            runtime.memory_pool.reserved() as u64,
            output.size().memory_bytes
        );
        let batches: Vec<RecordBatch> = output.read(0).unwrap().try_collect().await.unwrap();
        assert_eq!(batches.len(), 1);
        // The join that read it all now accounts for the memory.
        assert_eq!(runtime.memory_pool.reserved(), 0);
        assert_eq!(read_ids(&output, 0).await, (0..400).collect::<Vec<_>>());
        assert_eq!(runtime.memory_pool.reserved(), 0);
    }

    #[tokio::test]
    async fn idle_partitions_move_to_disk_on_request_and_read_back_in_order() {
        let schema = schema();
        let runtime = runtime(1 << 30);
        let output = output(PipelineId(0), 1, false, None, &runtime);
        output.push(0, batch(&schema, 0, 100)).unwrap();
        // Spilled while still being written: later batches follow on disk.
        assert!(output.spill_idle(1) > 0);
        output.push(0, batch(&schema, 100, 100)).unwrap();
        output.finish_partition(0).unwrap();
        assert_eq!(runtime.memory_pool.reserved(), 0);
        assert_eq!(output.size().location(), Location::Disk);
        assert_eq!(read_ids(&output, 0).await, (0..200).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_store_budget_of_zero_keeps_nothing_in_memory() {
        let schema = schema();
        let runtime = runtime(1 << 30);
        let budget = Arc::new(StoreBudget::new(0));
        let output = output(PipelineId(0), 1, false, Some(budget), &runtime);
        output.push(0, batch(&schema, 0, 100)).unwrap();
        output.finish_partition(0).unwrap();
        assert_eq!(output.size().memory_bytes, 0);
        assert_eq!(read_ids(&output, 0).await, (0..100).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn misuse_is_an_internal_error_not_a_panic() {
        let schema = schema();
        let runtime = runtime(1 << 30);
        let output = output(PipelineId(3), 1, false, None, &runtime);
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
