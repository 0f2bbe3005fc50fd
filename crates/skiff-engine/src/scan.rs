//! `IntermediateScanExec`: the leaf that stands for a finished pipeline's
//! materialized output inside the plans of the pipelines that read it.
//!
//! It carries only the producing pipeline's id and the exact properties of
//! the subtree it replaced; the tuples come at execution time from the
//! query's [`IntermediateStore`], found in the task's session config. That
//! keeps the leaf small and position-independent: the same leaf can later
//! read migrated state on another worker.

use std::fmt;
use std::sync::Arc;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result, Statistics, internal_err};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::metrics::{BaselineMetrics, ExecutionPlanMetricsSet, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
    SendableRecordBatchStream, StatisticsArgs, StatisticsContext,
};
use futures::StreamExt;

use crate::pipeline::PipelineId;
use crate::store::IntermediateStore;

/// Reads the materialized output of pipeline `pipeline`.
#[derive(Debug)]
pub struct IntermediateScanExec {
    pipeline: PipelineId,
    properties: Arc<PlanProperties>,
    statistics: Arc<Statistics>,
    metrics: ExecutionPlanMetricsSet,
}

impl IntermediateScanExec {
    /// A leaf with the properties of `replaced`, the subtree whose output
    /// pipeline `pipeline` materializes.
    pub fn new(pipeline: PipelineId, replaced: &Arc<dyn ExecutionPlan>) -> Self {
        // The leaf keeps the ordering, partitioning and constraints of what
        // it replaced; only how it emits changes.
        let properties = PlanProperties::clone(replaced.properties())
            .with_emission_type(EmissionType::Incremental)
            .with_boundedness(Boundedness::Bounded)
            .with_scheduling_type(SchedulingType::Cooperative);
        let statistics = estimate(replaced)
            .unwrap_or_else(|_| Arc::new(Statistics::new_unknown(&replaced.schema())));
        Self {
            pipeline,
            properties: Arc::new(properties),
            statistics,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    pub fn pipeline(&self) -> PipelineId {
        self.pipeline
    }

    /// The planner's estimate of the replaced subtree's output.
    pub fn statistics(&self) -> &Arc<Statistics> {
        &self.statistics
    }
}

/// The planner's estimate of `plan`'s whole output.
pub fn estimate(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<Statistics>> {
    StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new())
}

impl DisplayAs for IntermediateScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "IntermediateScanExec: pipeline={}, partitions={}",
            self.pipeline,
            self.properties.partitioning.partition_count()
        )
    }
}

impl ExecutionPlan for IntermediateScanExec {
    fn name(&self) -> &str {
        "IntermediateScanExec"
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
            return internal_err!("IntermediateScanExec has no children");
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
        let Some(store) = context
            .session_config()
            .get_extension::<IntermediateStore>()
        else {
            return internal_err!(
                "IntermediateScanExec for {} run without an intermediate store",
                self.pipeline
            );
        };
        let input = store.output(self.pipeline)?.read(partition)?;
        let metrics = BaselineMetrics::new(&self.metrics, partition);
        let schema = input.schema();
        let counted = input.inspect(move |batch| {
            if let Ok(batch) = batch {
                metrics.record_output(batch.num_rows());
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, counted)))
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
