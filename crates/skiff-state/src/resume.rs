//! Continuing a query on the target: the remaining plan (decoded against the
//! target's own session) plus the loaded state, run by the target's engine.

use std::sync::Arc;

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, plan_err};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use skiff_engine::materialized::{MaterializedExec, Source};
use skiff_engine::{MigratedState, QueryExecution};

/// `ctx` with `state` in its session config, where the remaining plan's
/// migrated `MaterializedExec` leaves look for it.
pub fn resume_context(ctx: &TaskContext, state: MigratedState) -> Arc<TaskContext> {
    let mut config = ctx.session_config().clone();
    config.set_extension(Arc::new(state));
    skiff_engine::executor::with_config(ctx, config)
}

/// Split the remaining `plan` into pipelines that read `state`, ready to
/// execute. Leaves of migrated state stay inside the pipelines that read
/// them, so no finished pipeline runs again. Fails before running when a
/// leaf has no state, or state of another shape: the plan keeps the
/// source's partitioning, so each output must arrive with the partition
/// count its leaf declares (a target with fewer cores runs those
/// partitions on fewer threads).
pub fn resume(
    plan: Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
    state: MigratedState,
) -> Result<Arc<QueryExecution>> {
    check_state(&plan, &state)?;
    let graph = skiff_engine::split(plan)?;
    QueryExecution::new(graph, &resume_context(ctx, state))
}

/// Every migrated `MaterializedExec` in `plan` finds its output in `state`, with
/// its schema's fields and its partition count.
fn check_state(plan: &Arc<dyn ExecutionPlan>, state: &MigratedState) -> Result<()> {
    let mut problem = None;
    plan.apply(|node| {
        let Some(leaf) = MaterializedExec::of(node.as_ref(), Source::Migrated) else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let id = leaf.pipeline();
        let declared = leaf.properties().partitioning.partition_count();
        problem = match state.get(id) {
            None => Some(format!("no state for {id}")),
            Some(table) if table.schema.fields() != leaf.schema().fields() => {
                Some(format!("state for {id} has another schema"))
            }
            Some(table) if table.partitions.len() != declared => Some(format!(
                "state for {id} has {} partitions, the plan reads {declared}",
                table.partitions.len()
            )),
            Some(_) => None,
        };
        Ok(match problem {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match problem {
        Some(problem) => plan_err!("cannot resume: {problem}"),
        None => Ok(()),
    }
}
