//! A distributed query that runs again over its committed stage outputs
//! (issue 42). With `skiff.stage_checkpoints = all`, every stage output a
//! consumer read was committed to the store under the query's checkpoint
//! name (`skiff_node::checkpoints`). An attempt after a lost worker or a
//! vacate runs the first attempt's plan again, the same stages, tasks and
//! partitions, on the workers there are now: a consumer whose input is
//! committed reads it from the store and its producer never runs, so
//! only what was not committed runs again.
//!
//! That holds only where every stage below the head gives the same rows
//! each time it runs: two consumers of one stage may read it from two
//! attempts. A limit (which of tied rows it keeps), a window function (the
//! order of ties), an aggregate that depends on its input's order
//! (`first_value`, `array_agg`) or a volatile function (`random()`) could
//! give other rows, so a plan with one of them in a stage below the head
//! ([`reusable`]) runs again from the start under a new checkpoint name.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, internal_err};
use datafusion::physical_expr_common::physical_expr::is_volatile;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::metrics::MetricsSet;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion_distributed::{NetworkBoundaryExt, Stage};
use uuid::Uuid;

/// Aggregate functions whose result depends on the order of their input
/// even without an ORDER BY (DataFusion's own flag, `order_sensitivity`,
/// says "hard requirement" for every function that does not declare
/// otherwise, `sum` among them, so it cannot tell).
const ORDER_DEPENDENT: &[&str] = &[
    "first_value",
    "last_value",
    "nth_value",
    "array_agg",
    "string_agg",
    "any_value",
];

/// Whether every stage below `plan`'s head gives the same rows each time
/// it runs (the module's doc).
pub(crate) fn reusable(plan: &Arc<dyn ExecutionPlan>) -> bool {
    fn visit(node: &Arc<dyn ExecutionPlan>, below_head: bool) -> bool {
        if below_head && !repeatable(node) {
            return false;
        }
        let below = below_head || node.is_network_boundary();
        node.children().into_iter().all(|child| visit(child, below))
    }
    visit(plan, false)
}

/// Whether `node` gives the same rows for the same input rows, whatever
/// their order.
fn repeatable(node: &Arc<dyn ExecutionPlan>) -> bool {
    if node.fetch().is_some()
        || node.downcast_ref::<WindowAggExec>().is_some()
        || node.downcast_ref::<BoundedWindowAggExec>().is_some()
    {
        return false;
    }
    // An aggregate with an ORDER BY of its own keeps one order of ties.
    if let Some(aggregate) = node.downcast_ref::<AggregateExec>()
        && aggregate
            .aggr_expr()
            .iter()
            .any(|a| !a.order_bys().is_empty() || ORDER_DEPENDENT.contains(&a.fun().name()))
    {
        return false;
    }
    let mut volatile = false;
    let _ = node.apply_expressions(&mut |expr| {
        volatile = is_volatile(expr);
        Ok(if volatile {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    !volatile
}

/// `plan` (a distributed plan, as planned) ready to run once more: every
/// operator's run state reset, and every stage under a new library query
/// id, so that no worker takes the new tasks for those of an earlier
/// attempt still winding down. Stage numbers, task counts and partitions
/// stay, and with them the checkpoints' keys.
pub(crate) fn another_attempt(plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let query_id = Uuid::new_v4();
    reset_plan_states(Arc::clone(plan))?
        .transform_up(|node| {
            let Some(boundary) = node.as_network_boundary() else {
                return Ok(Transformed::no(node));
            };
            let Stage::Local(stage) = boundary.input_stage() else {
                return internal_err!("a stage of a plan to run again was already sent");
            };
            // The library exports the stage's type only inside `Stage`.
            let mut stage = stage.clone();
            stage.query_id = query_id;
            stage.metrics_set = MetricsSet::new();
            let node: Arc<dyn ExecutionPlan> = boundary.with_input_stage(Stage::Local(stage))?;
            Ok(Transformed::yes(node))
        })
        .map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::limit::GlobalLimitExec;

    fn empty() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        Arc::new(EmptyExec::new(schema))
    }

    #[test]
    fn a_limit_makes_a_node_unrepeatable_and_a_plan_without_stages_is_reusable() {
        let limit: Arc<dyn ExecutionPlan> = Arc::new(GlobalLimitExec::new(empty(), 0, Some(3)));
        assert!(!repeatable(&limit));
        assert!(repeatable(&empty()));
        // Only what lies below a network boundary counts: a limit in the
        // head stage runs once per attempt on the coordinator.
        assert!(reusable(&limit));
    }
}
