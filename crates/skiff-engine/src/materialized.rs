//! `MaterializedExec`: the leaf that stands for a finished pipeline's
//! materialized output inside the plans of the pipelines that read it.
//!
//! It carries only the producing pipeline's id, where the tuples will come
//! from ([`Source`]) and the exact properties of the subtree it replaced;
//! the tuples come at execution time from the task's session config: this
//! execution's [`IntermediateStore`], or the [`MigratedState`] another
//! execution's output arrived in (migration, resume, snapshot). That keeps
//! the leaf small and position-independent: state separation turns a
//! store leaf into a migrated one with the same properties.
//!
//! A migrated leaf never runs as a pipeline of its own: the splitter keeps
//! it inside the pipeline that reads it (the tuples are already
//! materialized), so a resumed query never re-runs a pipeline whose output
//! it was given.

use std::fmt;
use std::sync::Arc;

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
    SendableRecordBatchStream, StatisticsArgs, StatisticsContext,
};
use futures::StreamExt;

use crate::migrated::MigratedState;
use crate::pipeline::PipelineId;
use crate::store::IntermediateStore;

/// Where a [`MaterializedExec`] reads its tuples at execution time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// This execution's [`IntermediateStore`]: the output of one of its own
    /// finished pipelines.
    Store,
    /// [`MigratedState`]: an output another execution produced, under that
    /// execution's pipeline id.
    Migrated,
}

/// Reads the materialized output of pipeline `pipeline` from `source`.
#[derive(Debug)]
pub struct MaterializedExec {
    pipeline: PipelineId,
    source: Source,
    properties: Arc<PlanProperties>,
    statistics: Arc<Statistics>,
    metrics: ExecutionPlanMetricsSet,
}

impl MaterializedExec {
    /// A store leaf with the properties of `replaced`, the subtree whose
    /// output pipeline `pipeline` materializes.
    pub fn replacing(pipeline: PipelineId, replaced: &Arc<dyn ExecutionPlan>) -> Self {
        let statistics = estimate(replaced)
            .unwrap_or_else(|_| Arc::new(Statistics::new_unknown(&replaced.schema())));
        Self::new(pipeline, Source::Store, replaced.properties(), statistics)
    }

    /// A migrated-state leaf with `properties` (those of the subtree it
    /// stands for) and `statistics`.
    pub fn migrated(
        pipeline: PipelineId,
        properties: &PlanProperties,
        statistics: Statistics,
    ) -> Self {
        Self::new(pipeline, Source::Migrated, properties, Arc::new(statistics))
    }

    fn new(
        pipeline: PipelineId,
        source: Source,
        properties: &PlanProperties,
        statistics: Arc<Statistics>,
    ) -> Self {
        // The leaf keeps the ordering, partitioning and constraints of what
        // it replaced; only how it emits changes.
        let properties = properties
            .clone()
            .with_emission_type(EmissionType::Incremental)
            .with_boundedness(Boundedness::Bounded)
            .with_scheduling_type(SchedulingType::Cooperative);
        Self {
            pipeline,
            source,
            properties: Arc::new(properties),
            statistics,
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// `plan` as a leaf reading from `source`, if it is one.
    pub fn of(plan: &dyn ExecutionPlan, source: Source) -> Option<&Self> {
        plan.downcast_ref::<Self>()
            .filter(|leaf| leaf.source == source)
    }

    pub fn pipeline(&self) -> PipelineId {
        self.pipeline
    }

    pub fn source(&self) -> Source {
        self.source
    }

    /// The planner's estimate of the replaced subtree's output.
    pub fn statistics(&self) -> &Arc<Statistics> {
        &self.statistics
    }

    fn read_store(
        &self,
        partition: usize,
        context: &TaskContext,
    ) -> Result<SendableRecordBatchStream> {
        let Some(store) = context
            .session_config()
            .get_extension::<IntermediateStore>()
        else {
            return internal_err!(
                "MaterializedExec for {} run without an intermediate store",
                self.pipeline
            );
        };
        store.output(self.pipeline)?.read(partition)
    }

    fn read_migrated(
        &self,
        partition: usize,
        context: &TaskContext,
    ) -> Result<SendableRecordBatchStream> {
        let Some(state) = context.session_config().get_extension::<MigratedState>() else {
            return internal_err!(
                "MaterializedExec for migrated {} run without migrated state",
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
        // Reads do not consume: the state may be read again (a snapshot).
        let batches: Vec<Result<RecordBatch>> = batches.iter().cloned().map(Ok).collect();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&table.schema),
            futures::stream::iter(batches),
        )))
    }
}

/// The planner's estimate of `plan`'s whole output.
pub fn estimate(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<Statistics>> {
    StatisticsContext::new().compute(plan.as_ref(), &StatisticsArgs::new())
}

impl DisplayAs for MaterializedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let source = match self.source {
            Source::Store => "store",
            Source::Migrated => "migrated",
        };
        write!(
            f,
            "MaterializedExec: pipeline={}, source={source}, partitions={}",
            self.pipeline,
            self.properties.partitioning.partition_count()
        )
    }
}

impl ExecutionPlan for MaterializedExec {
    fn name(&self) -> &str {
        "MaterializedExec"
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
            return internal_err!("MaterializedExec has no children");
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
        let input = match self.source {
            Source::Store => self.read_store(partition, &context)?,
            Source::Migrated => self.read_migrated(partition, &context)?,
        };
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
    use datafusion::prelude::SessionConfig;
    use futures::TryStreamExt;

    use super::*;
    use crate::migrated::MigratedTable;
    use crate::test_rows::{batch, scan, schema, values};

    fn properties(partitions: usize) -> PlanProperties {
        PlanProperties::new(
            EquivalenceProperties::new(schema()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Final,
            Boundedness::Bounded,
        )
    }

    fn leaf(pipeline: usize, partitions: usize) -> MaterializedExec {
        let statistics = Statistics::new_unknown(&schema());
        MaterializedExec::migrated(PipelineId(pipeline), &properties(partitions), statistics)
    }

    /// A task context holding pipeline 7's output: partition 0 has two
    /// batches, partition 1 none.
    fn with_state() -> Arc<TaskContext> {
        let table = MigratedTable {
            schema: schema(),
            partitions: vec![vec![batch(&[1, 2]), batch(&[3])], vec![]],
        };
        let state = MigratedState::new(BTreeMap::from([(PipelineId(7), table)]));
        let config = SessionConfig::new().with_extension(Arc::new(state));
        Arc::new(TaskContext::default().with_session_config(config))
    }

    async fn rows(leaf: &MaterializedExec, partition: usize, ctx: Arc<TaskContext>) -> Vec<i64> {
        let stream = leaf.execute(partition, ctx).expect("execute");
        let batches: Vec<RecordBatch> = stream.try_collect().await.expect("rows");
        values(&batches)
    }

    #[tokio::test]
    async fn a_migrated_leaf_reads_its_partitions_again_and_again() {
        let leaf = leaf(7, 2);
        let ctx = with_state();
        assert_eq!(rows(&leaf, 0, Arc::clone(&ctx)).await, vec![1, 2, 3]);
        assert_eq!(rows(&leaf, 1, Arc::clone(&ctx)).await, Vec::<i64>::new());
        // Reads do not consume.
        assert_eq!(rows(&leaf, 0, ctx).await, vec![1, 2, 3]);
        let metrics = leaf.metrics().expect("metrics");
        assert_eq!(metrics.output_rows(), Some(6));
    }

    #[tokio::test]
    async fn a_leaf_without_its_source_says_so() {
        let missing = leaf(8, 2)
            .execute(0, with_state())
            .err()
            .expect("no state for 8");
        assert!(
            missing.to_string().contains("no migrated state for"),
            "{missing}"
        );
        let beyond = leaf(7, 3)
            .execute(2, with_state())
            .err()
            .expect("partition 2");
        assert!(beyond.to_string().contains("has 2 partitions"), "{beyond}");
        let bare = Arc::new(TaskContext::default());
        let no_state = leaf(7, 2)
            .execute(0, Arc::clone(&bare))
            .err()
            .expect("no state");
        assert!(
            no_state.to_string().contains("without migrated state"),
            "{no_state}"
        );
        let replaced = source_plan();
        let store_leaf = MaterializedExec::replacing(PipelineId(0), &replaced);
        let no_store = store_leaf.execute(0, bare).err().expect("no store");
        assert!(
            no_store
                .to_string()
                .contains("without an intermediate store"),
            "{no_store}"
        );
    }

    #[test]
    fn leaves_are_told_apart_by_source_and_keep_the_replaced_properties() {
        let replaced = source_plan();
        let store_leaf: Arc<dyn ExecutionPlan> =
            Arc::new(MaterializedExec::replacing(PipelineId(3), &replaced));
        let found = MaterializedExec::of(store_leaf.as_ref(), Source::Store).expect("a store leaf");
        assert_eq!(found.pipeline(), PipelineId(3));
        assert!(MaterializedExec::of(store_leaf.as_ref(), Source::Migrated).is_none());
        assert!(MaterializedExec::of(replaced.as_ref(), Source::Store).is_none());
        assert_eq!(store_leaf.schema(), replaced.schema());
        assert_eq!(
            store_leaf.properties().partitioning.partition_count(),
            replaced.properties().partitioning.partition_count()
        );
        assert_eq!(
            store_leaf.properties().emission_type,
            EmissionType::Incremental
        );
    }

    /// A two-partition memory scan standing for a replaced subtree.
    fn source_plan() -> Arc<dyn ExecutionPlan> {
        scan(&[&[&[1]], &[&[2]]])
    }
}
