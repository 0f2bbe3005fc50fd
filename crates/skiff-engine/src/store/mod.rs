//! The intermediate store: the materialized outputs of one query's pipelines,
//! and the record of which pipelines finished — the query state.
//!
//! Life cycle of an output: created when its pipeline starts, written by one
//! task per partition, sealed when the pipeline finishes, read by the
//! pipelines that depend on it, and dropped (memory returned to the pool,
//! spill files deleted) the moment its last reader finishes. So at any
//! instant the live outputs are exactly the tuples that finished pipelines
//! still owe to unfinished ones.

mod output;
mod pressure;
mod spill;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use datafusion::common::{Result, internal_err};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::physical_plan::ExecutionPlanProperties;

pub use output::{Location, OutputSize, PipelineOutput, StoreBudget};
pub use pressure::{BUFFER_POOL_CONSUMER, Relieve, SkiffMemoryPool};

use crate::pipeline::{PipelineGraph, PipelineId};

/// Where a pipeline is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineStatus {
    Waiting,
    Running {
        started: Instant,
    },
    Finished {
        elapsed: Duration,
        output: OutputSize,
    },
}

/// What the store knows of one live output.
#[derive(Clone, Debug)]
pub struct OutputInfo {
    pub pipeline: PipelineId,
    pub schema: SchemaRef,
    pub partitions: usize,
    pub size: OutputSize,
    /// Unfinished pipelines that still read this output.
    pub readers: Vec<PipelineId>,
}

/// A consistent picture of a query's progress and state at one instant.
#[derive(Clone, Debug)]
pub struct QueryState {
    pub status: Vec<PipelineStatus>,
    /// Live outputs of finished pipelines: the query state proper.
    pub outputs: Vec<OutputInfo>,
}

impl QueryState {
    pub fn finished(&self) -> impl Iterator<Item = PipelineId> + '_ {
        self.status
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, PipelineStatus::Finished { .. }))
            .map(|(i, _)| PipelineId(i))
    }

    pub fn state_bytes(&self) -> u64 {
        self.outputs.iter().map(|o| o.size.bytes()).sum()
    }
}

struct Inner {
    status: Vec<PipelineStatus>,
    outputs: BTreeMap<PipelineId, Arc<PipelineOutput>>,
}

/// What the store needs to know of each pipeline. The store keeps no plan:
/// running plans hold the task context, which holds the store, so a plan
/// here would make a reference cycle that keeps every operator's state (and
/// its memory reservations) alive after the query.
struct PipelineShape {
    schema: SchemaRef,
    partitions: usize,
    read_whole: bool,
    inputs: Vec<PipelineId>,
    readers: Vec<PipelineId>,
}

/// The per-query intermediate store.
pub struct IntermediateStore {
    pipelines: Vec<PipelineShape>,
    result: PipelineId,
    runtime: Arc<RuntimeEnv>,
    budget: Option<Arc<StoreBudget>>,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for IntermediateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntermediateStore").finish_non_exhaustive()
    }
}

impl IntermediateStore {
    /// A store for `graph`'s outputs; with `memory_max`, outputs beyond that
    /// many bytes in memory go to spill files.
    pub fn new(graph: &PipelineGraph, runtime: Arc<RuntimeEnv>, memory_max: Option<usize>) -> Self {
        let status = vec![PipelineStatus::Waiting; graph.len()];
        let pipelines = graph
            .pipelines()
            .iter()
            .map(|p| PipelineShape {
                schema: p.plan.schema(),
                partitions: p.plan.output_partitioning().partition_count(),
                read_whole: p.read_whole,
                inputs: p.inputs.clone(),
                readers: graph.readers(p.id).collect(),
            })
            .collect();
        Self {
            pipelines,
            result: graph.result().id,
            runtime,
            budget: memory_max.map(|max| Arc::new(StoreBudget::new(max))),
            inner: Mutex::new(Inner {
                status,
                outputs: BTreeMap::new(),
            }),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves `Inner` consistent, so a panic in
        // another holder does not invalidate it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mark `pipeline` running and, unless it is the result pipeline (whose
    /// tuples stream to the client), create its output.
    pub fn start(&self, pipeline: PipelineId) -> Result<Option<Arc<PipelineOutput>>> {
        let mut inner = self.inner();
        if inner.status[pipeline.0] != PipelineStatus::Waiting {
            return internal_err!("{pipeline} started twice");
        }
        inner.status[pipeline.0] = PipelineStatus::Running {
            started: Instant::now(),
        };
        if pipeline == self.result {
            return Ok(None);
        }
        let shape = &self.pipelines[pipeline.0];
        let output = Arc::new(PipelineOutput::new(
            pipeline,
            Arc::clone(&shape.schema),
            shape.partitions,
            shape.read_whole,
            self.budget.clone(),
            &self.runtime,
        ));
        inner.outputs.insert(pipeline, Arc::clone(&output));
        Ok(Some(output))
    }

    /// Mark `pipeline` finished and drop every input it was the last reader of.
    /// `streamed` is what the result pipeline sent to the client (it has no
    /// stored output); other pipelines pass the default.
    pub fn finish(&self, pipeline: PipelineId, streamed: OutputSize) -> Result<()> {
        let mut inner = self.inner();
        let PipelineStatus::Running { started } = inner.status[pipeline.0] else {
            return internal_err!("{pipeline} finished without running");
        };
        let output = inner
            .outputs
            .get(&pipeline)
            .map(|o| o.size())
            .unwrap_or(streamed);
        inner.status[pipeline.0] = PipelineStatus::Finished {
            elapsed: started.elapsed(),
            output,
        };
        for &input in &self.pipelines[pipeline.0].inputs {
            let all_read = self.pipelines[input.0]
                .readers
                .iter()
                .all(|r| matches!(inner.status[r.0], PipelineStatus::Finished { .. }));
            if all_read {
                inner.outputs.remove(&input);
            }
        }
        Ok(())
    }

    /// Put a started `pipeline` back to waiting and drop what it wrote so
    /// far: an immediate pause aborted it, so it starts over when the query
    /// goes on. Its inputs stay, since it has not read them to the end. Its
    /// task may have been aborted before it reached [`start`](Self::start).
    pub fn abort(&self, pipeline: PipelineId) -> Result<()> {
        let mut inner = self.inner();
        if matches!(inner.status[pipeline.0], PipelineStatus::Finished { .. }) {
            return internal_err!("{pipeline} aborted after it finished");
        }
        inner.status[pipeline.0] = PipelineStatus::Waiting;
        inner.outputs.remove(&pipeline);
        Ok(())
    }

    /// The sealed output of `pipeline`, for a reader.
    pub fn output(&self, pipeline: PipelineId) -> Result<Arc<PipelineOutput>> {
        let inner = self.inner();
        if !matches!(inner.status[pipeline.0], PipelineStatus::Finished { .. }) {
            return internal_err!("{pipeline} read before it finished");
        }
        match inner.outputs.get(&pipeline) {
            Some(output) => Ok(Arc::clone(output)),
            None => internal_err!("{pipeline} read after its last reader finished"),
        }
    }

    /// Let the engine's memory pool ask this store to spill while it lives.
    pub fn register_for_pressure(self: &Arc<Self>) {
        if let Some(pool) = self.runtime.memory_pool.downcast_ref::<SkiffMemoryPool>() {
            let relieve: Arc<dyn Relieve> = Arc::clone(self) as Arc<dyn Relieve>;
            pool.register_store(Arc::downgrade(&relieve));
        }
    }

    /// The query state at this instant.
    /// The status of every pipeline, indexed by pipeline id.
    pub fn status(&self) -> Vec<PipelineStatus> {
        self.inner().status.clone()
    }

    pub fn state(&self) -> QueryState {
        let inner = self.inner();
        let unfinished =
            |p: &PipelineId| !matches!(inner.status[p.0], PipelineStatus::Finished { .. });
        let outputs = inner
            .outputs
            .values()
            .filter(|o| {
                matches!(
                    inner.status[o.pipeline().0],
                    PipelineStatus::Finished { .. }
                )
            })
            .map(|o| OutputInfo {
                pipeline: o.pipeline(),
                schema: Arc::clone(o.schema()),
                partitions: o.partition_count(),
                size: o.size(),
                readers: self.pipelines[o.pipeline().0]
                    .readers
                    .iter()
                    .copied()
                    .filter(unfinished)
                    .collect(),
            })
            .collect();
        QueryState {
            status: inner.status.clone(),
            outputs,
        }
    }
}

impl Relieve for IntermediateStore {
    /// Spill first the outputs whose readers have not started (they hold
    /// memory longest), then outputs still being written, then outputs whose
    /// readers started (only partitions no stream is reading free anything);
    /// largest first within each tier.
    fn relieve(&self, wanted: usize) -> usize {
        let mut candidates: Vec<(u8, u64, Arc<PipelineOutput>)> = {
            let inner = self.inner();
            let started = |p: PipelineId| !matches!(inner.status[p.0], PipelineStatus::Waiting);
            inner
                .outputs
                .values()
                .map(|o| {
                    let tier = match inner.status[o.pipeline().0] {
                        PipelineStatus::Finished { .. } => {
                            if self.pipelines[o.pipeline().0]
                                .readers
                                .iter()
                                .copied()
                                .any(started)
                            {
                                2
                            } else {
                                0
                            }
                        }
                        _ => 1,
                    };
                    (tier, o.size().memory_bytes, Arc::clone(o))
                })
                .collect()
        };
        candidates.sort_by_key(|(tier, bytes, _)| (*tier, std::cmp::Reverse(*bytes)));
        let mut released = 0;
        for (_, _, output) in candidates {
            if released >= wanted {
                break;
            }
            released += output.spill_idle(wanted - released);
        }
        released
    }
}
