//! `MigratedStateExec`: the leaf that stands for a finished pipeline's output
//! brought over from another execution (migration, resume, snapshot).
//!
//! Like [`IntermediateScanExec`](crate::scan::IntermediateScanExec) it
//! carries only the producing pipeline's id (numbered in the *source*
//! execution's graph) and the exact properties of the subtree it replaced;
//! the tuples come at execution time from a [`MigratedState`] found in the
//! task's session config. It never runs as a pipeline of its own: the
//! cutter keeps it inside the pipeline that reads it (the tuples are already
//! materialized), so a resumed query never re-runs a pipeline whose output
//! it was given.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics, internal_err};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    SendableRecordBatchStream, StatisticsArgs,
};
use futures::StreamExt;

use crate::pipeline::PipelineId;

/// The tuples of one migrated output, per partition, in their original order.
#[derive(Debug, Clone)]
pub struct MigratedTable {
    pub schema: SchemaRef,
    pub partitions: Vec<Vec<RecordBatch>>,
}

/// Migrated outputs by source pipeline id: a session-config extension that
/// [`MigratedStateExec`] leaves read from. Reads do not consume.
#[derive(Debug, Default)]
pub struct MigratedState {
    tables: BTreeMap<PipelineId, MigratedTable>,
}

impl MigratedState {
    pub fn new(tables: BTreeMap<PipelineId, MigratedTable>) -> Self {
        Self { tables }
    }

    pub fn get(&self, pipeline: PipelineId) -> Option<&MigratedTable> {
        self.tables.get(&pipeline)
    }

    pub fn pipelines(&self) -> impl Iterator<Item = PipelineId> + '_ {
        self.tables.keys().copied()
    }
}

/// Reads the migrated output of source pipeline `pipeline`.
#[derive(Debug)]
pub struct MigratedStateExec {
    pipeline: PipelineId,
    properties: Arc<PlanProperties>,
    statistics: Arc<Statistics>,
    metrics: ExecutionPlanMetricsSet,
}

impl MigratedStateExec {
    /// A leaf with `properties` (those of the subtree it replaces).
    pub fn new(pipeline: PipelineId, properties: &PlanProperties, statistics: Statistics) -> Self {
        let properties = properties
            .clone()
            .with_emission_type(EmissionType::Incremental)
            .with_boundedness(Boundedness::Bounded)
            .with_scheduling_type(SchedulingType::Cooperative);
        Self {
            pipeline,
            properties: Arc::new(properties),
            statistics: Arc::new(statistics),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn pipeline(&self) -> PipelineId {
        self.pipeline
    }

    pub fn statistics(&self) -> &Arc<Statistics> {
        &self.statistics
    }
}

impl DisplayAs for MigratedStateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "MigratedStateExec: pipeline={}, partitions={}",
            self.pipeline,
            self.properties.partitioning.partition_count()
        )
    }
}

impl ExecutionPlan for MigratedStateExec {
    fn name(&self) -> &str {
        "MigratedStateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return internal_err!("MigratedStateExec has no children");
        }
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(datafusion::physical_plan::ChildrenPropertiesMode::Keep),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(state) = context.session_config().get_extension::<MigratedState>() else {
            return internal_err!(
                "MigratedStateExec for {} run without migrated state",
                self.pipeline
            );
        };
        let Some(table) = state.get(self.pipeline) else {
            return internal_err!("no migrated state for {}", self.pipeline);
        };
        let Some(batches) = table.partitions.get(partition) else {
            return internal_err!(
                "migrated state for {} has {} partitions, partition {partition} read",
                self.pipeline,
                table.partitions.len()
            );
        };
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let stream = futures::stream::iter(batches.clone().into_iter().map(Ok)).inspect(
            move |batch: &Result<RecordBatch>| {
                if let Ok(batch) = batch {
                    metrics.record_output(batch.num_rows());
                }
            },
        );
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&table.schema),
            stream,
        )))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        Ok(match args.partition() {
            None => Arc::clone(&self.statistics),
            Some(_) => Arc::new(Statistics::new_unknown(&self.schema())),
        })
    }
}
