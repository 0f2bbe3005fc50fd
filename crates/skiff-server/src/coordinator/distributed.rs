//! One query across several workers (issue 16), on datafusion-distributed:
//! the coordinator cuts the physical plan into stages at its shuffles and
//! merges, sends each stage's tasks to the workers its membership lists,
//! and runs the head stage itself; workers serve the library's worker
//! service on their Flight port (`crate::worker`). Not written here: the
//! exchange operators and the stage scheduler are the library's.
//!
//! A distributed query has none of the state separation features of a
//! single-worker one (no migration, suspend or snapshot): the library
//! streams between stages and has no pause or retry.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion_distributed::{
    DistributedExec, DistributedExt, SessionStateBuilderExt, WorkerResolver, display_plan_ascii,
};
use skiff_engine::options::{Distribute, SkiffOptions};
use url::Url;

use super::membership::Membership;
use crate::error::Result;

/// The library's view of the cluster: the workers that take queries now.
struct MembershipResolver(Arc<Membership>);

impl WorkerResolver for MembershipResolver {
    fn get_urls(&self) -> DfResult<Vec<Url>> {
        self.0
            .usable_workers()
            .into_iter()
            .map(|(id, addr)| {
                Url::parse(&format!("http://{addr}")).map_err(|e| {
                    DataFusionError::Internal(format!("worker {id} has a bad address {addr}: {e}"))
                })
            })
            .collect()
    }
}

/// Whether the session asks for `plan` to be distributed.
pub(crate) fn wanted(state: &SessionState) -> bool {
    let skiff = state.config().options().extensions.get::<SkiffOptions>();
    // `auto` distributes queries over partitioned tables whose partitions
    // several workers own; until such tables exist it keeps one worker.
    skiff.is_some_and(|s| s.distribute == Distribute::On)
}

/// Plans `plan` in stages over the usable workers and starts it, the head
/// stage here; an `EXPLAIN` of it shows its stages. `None` when the plan has
/// no stage boundary (one worker, or nothing to split): it runs, or is
/// explained, as on one worker.
pub(crate) async fn start(
    state: &SessionState,
    membership: &Arc<Membership>,
    plan: &LogicalPlan,
) -> Result<Option<SendableRecordBatchStream>> {
    // `on` spreads every scan over every worker, however small: one task
    // per byte is capped at one per worker (the library sizes a scan's
    // tasks by its bytes, 16 MiB each by default).
    let distributed = SessionStateBuilder::new_from_existing(state.clone())
        .with_distributed_worker_resolver(MembershipResolver(Arc::clone(membership)))
        .with_distributed_planner()
        .with_distributed_file_scan_config_bytes_per_partition(1)?
        .build();
    // DataFusion's EXPLAIN renders the plan before the library cuts it into
    // stages: the stages are rendered here.
    let (query, explain) = match plan {
        LogicalPlan::Explain(explain) => (explain.plan.as_ref(), true),
        plan => (plan, false),
    };
    let physical = distributed.create_physical_plan(query).await?;
    if physical.downcast_ref::<DistributedExec>().is_none() {
        return Ok(None);
    }
    if explain {
        return Ok(Some(explained(query, physical.as_ref())?));
    }
    Ok(Some(physical.execute(0, distributed.task_ctx())?))
}

/// `EXPLAIN`'s two columns: the logical plan, and the stages with their
/// tasks.
fn explained(
    query: &LogicalPlan,
    physical: &dyn ExecutionPlan,
) -> Result<SendableRecordBatchStream> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("plan_type", DataType::Utf8, false),
        Field::new("plan", DataType::Utf8, false),
    ]));
    let kinds = StringArray::from(vec!["logical_plan", "distributed_plan"]);
    let plans = StringArray::from(vec![
        query.display_indent().to_string(),
        display_plan_ascii(physical, false),
    ]);
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(kinds), Arc::new(plans)])
        .map_err(DataFusionError::from)?;
    let stream = futures::stream::iter([Ok(batch)]);
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
}
