//! Which stage outputs a distributed query commits to the store
//! (`skiff.stage_checkpoints`, `skiff_node::checkpoints`), and how its
//! stages' worker URLs are marked so that those reads pass through it.
//!
//! A commit makes its consumer wait for a whole partition before it
//! starts on it, and sends the bytes to the store. `all` pays that at
//! every stage boundary. `auto` pays it only where it pays back:
//! - where the consumer waits for all of its input anyway: the build side
//!   of a hash join (or of a nested loop or cross join), an aggregation,
//!   a sort — each reads every row before it gives one, so reading a
//!   partition whole first costs it no time, only the bytes; a streaming
//!   consumer (a join's probe side, a filter on the way to the client)
//!   reads as without checkpoints;
//! - of a stage that does more than read ([`does_work`]): a stage that
//!   only scans and filters runs again for about what its output costs
//!   to commit;
//! - once the task has run `skiff.stage_checkpoints_after_ms` (1 s by
//!   default; `skiff_node::checkpoints` counts it): a query lost sooner runs again
//!   from the start at little cost, and most short queries commit
//!   nothing.
//!
//! A query that loses a worker runs a stage that did not commit again,
//! over its committed inputs where there are some (`stage_reuse`). Under
//! `auto` a read between two tasks on one worker stays in-process and
//! uncommitted: only `all` marks the stages' URLs apart ([`marks`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::joins::{CrossJoinExec, HashJoinExec, NestedLoopJoinExec};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::union::{InterleaveExec, UnionExec};
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::{ExecutionPlan, InputOrderMode};
use datafusion_distributed::{NetworkBoundaryExt, Stage};
use skiff_engine::options::StageCheckpoints;

/// The stages (the library's stage numbers) of `plan`, a distributed
/// plan as planned, whose outputs the query commits in `mode`.
pub(crate) fn committed(plan: &Arc<dyn ExecutionPlan>, mode: StageCheckpoints) -> BTreeSet<usize> {
    let mut stages = BTreeSet::new();
    if mode != StageCheckpoints::Off {
        visit(plan, false, mode, &mut stages);
    }
    stages
}

/// Record `node`'s stages that commit: `waits`, its consumer reads all of
/// `node`'s output before it gives a row.
fn visit(
    node: &Arc<dyn ExecutionPlan>,
    waits: bool,
    mode: StageCheckpoints,
    stages: &mut BTreeSet<usize>,
) {
    if let Some(boundary) = node.as_network_boundary() {
        if let Stage::Local(stage) = boundary.input_stage()
            && (mode == StageCheckpoints::All || waits && does_work(&stage.plan))
        {
            stages.insert(stage.num);
        }
        // A stage's head streams its rows to whichever task reads them.
        for child in node.children() {
            visit(child, false, mode, stages);
        }
        return;
    }
    for (i, child) in node.children().into_iter().enumerate() {
        visit(child, reads_whole(node, i, waits), mode, stages);
    }
}

/// Whether `node` reads all of its `child`-th input before it gives its
/// first row, or passes on its own consumer's wait (`waits`): a node that
/// streams its one input passes it on, as does a union; a join that
/// streams both inputs (sort-merge, symmetric hash) waits for neither.
/// By type, not by DataFusion's emission type, which a node inherits
/// from its input (a projection over a sort says it emits at the end).
fn reads_whole(node: &Arc<dyn ExecutionPlan>, child: usize, waits: bool) -> bool {
    // These joins build on their first input and stream the second.
    if node.downcast_ref::<HashJoinExec>().is_some()
        || node.downcast_ref::<NestedLoopJoinExec>().is_some()
        || node.downcast_ref::<CrossJoinExec>().is_some()
    {
        return child == 0;
    }
    if let Some(aggregate) = node.downcast_ref::<AggregateExec>() {
        // Over sorted input an aggregation emits each group as it ends.
        return *aggregate.input_order_mode() == InputOrderMode::Linear || waits;
    }
    if node.downcast_ref::<SortExec>().is_some() || node.downcast_ref::<WindowAggExec>().is_some() {
        return true;
    }
    waits && (node.children().len() == 1 || is_union(node))
}

fn is_union(node: &Arc<dyn ExecutionPlan>) -> bool {
    node.downcast_ref::<UnionExec>().is_some() || node.downcast_ref::<InterleaveExec>().is_some()
}

/// Whether the stage plan rooted at `node` does more than read: it joins,
/// aggregates, sorts or computes a window (its own nodes, not those of
/// the stages it reads). A stage that only scans, filters and projects
/// costs little more to run again than its output costs to commit.
fn does_work(node: &Arc<dyn ExecutionPlan>) -> bool {
    if node.is_network_boundary() {
        return false;
    }
    let works = node.downcast_ref::<AggregateExec>().is_some()
        || node.downcast_ref::<SortExec>().is_some()
        || node.downcast_ref::<WindowAggExec>().is_some()
        || node.downcast_ref::<BoundedWindowAggExec>().is_some()
        || node.children().len() > 1 && !is_union(node);
    works || node.children().into_iter().any(does_work)
}

/// For each stage of `plan` in the order the library routes them (a
/// walk of the plan's stages, inputs first, as its static planning
/// makes), whether its output is committed: its worker URLs are marked
/// apart (`skiff_node::checkpoints::marked`), so that no read of it is
/// answered in-process, past the store.
pub(crate) fn marks(plan: &Arc<dyn ExecutionPlan>, committed: &BTreeSet<usize>) -> Vec<bool> {
    fn walk(node: &Arc<dyn ExecutionPlan>, committed: &BTreeSet<usize>, marks: &mut Vec<bool>) {
        for child in node.children() {
            walk(child, committed, marks);
        }
        if let Some(boundary) = node.as_network_boundary()
            && let Stage::Local(stage) = boundary.input_stage()
        {
            marks.push(committed.contains(&stage.num));
        }
    }
    let mut marks = Vec::new();
    walk(plan, committed, &mut marks);
    marks
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::common::Result;
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::prelude::{SessionConfig, SessionContext};

    /// `(node, input, reads it whole)` for every node of `plan` with an
    /// input, its own consumer streaming (`waits` false) or not.
    fn whole_reads(plan: &Arc<dyn ExecutionPlan>, waits: bool) -> Vec<(String, usize, bool)> {
        let mut reads = Vec::new();
        let _ = plan.apply(|node| {
            for i in 0..node.children().len() {
                reads.push((node.name().to_string(), i, reads_whole(node, i, waits)));
            }
            Ok(TreeNodeRecursion::Continue)
        });
        reads
    }

    #[tokio::test]
    async fn a_join_builds_whole_and_probes_streaming_and_an_aggregate_reads_whole() -> Result<()> {
        // A hash join, partitioned: the build side behind a repartition.
        let config = SessionConfig::new()
            .with_target_partitions(4)
            .set_usize(
                "datafusion.optimizer.hash_join_single_partition_threshold",
                0,
            )
            .set_usize(
                "datafusion.optimizer.hash_join_single_partition_threshold_rows",
                0,
            );
        let ctx = SessionContext::new_with_config(config);
        ctx.sql("CREATE TABLE a (k INT, x INT) AS VALUES (1, 10), (2, 20)")
            .await?;
        ctx.sql("CREATE TABLE b (k INT, y INT) AS VALUES (1, 5), (3, 7)")
            .await?;
        let plan = ctx
            .sql("SELECT a.k, sum(y) FROM a JOIN b ON a.k = b.k WHERE x > 1 GROUP BY a.k")
            .await?
            .create_physical_plan()
            .await?;
        let reads = whole_reads(&plan, false);
        let of = |name: &str| -> Vec<(usize, bool)> {
            reads
                .iter()
                .filter(|(n, _, _)| n == name)
                .map(|(_, i, whole)| (*i, *whole))
                .collect()
        };
        assert_eq!(of("HashJoinExec"), vec![(0, true), (1, false)], "{reads:?}");
        let aggregates = of("AggregateExec");
        assert!(!aggregates.is_empty(), "{reads:?}");
        assert!(aggregates.iter().all(|(_, whole)| *whole), "{reads:?}");
        // A node that streams its one input passes its consumer's wait on.
        let streaming = ["RepartitionExec", "ProjectionExec", "FilterExec"];
        for name in streaming {
            assert!(
                of(name).iter().all(|(_, whole)| !whole),
                "{name}: {reads:?}"
            );
        }
        let waited = whole_reads(&plan, true);
        for (name, _, whole) in &waited {
            if streaming.contains(&name.as_str()) {
                assert!(
                    whole,
                    "{name} under a consumer that reads whole: {waited:?}"
                );
            }
        }
        // The join's and the aggregation's stage would do work; a scan's
        // would not.
        assert!(does_work(&plan));
        let scan = ctx
            .sql("SELECT k FROM a WHERE x > 1")
            .await?
            .create_physical_plan()
            .await?;
        assert!(!does_work(&scan), "{scan:?}");
        // Nothing is committed without stages, whatever the mode.
        for mode in [
            StageCheckpoints::Off,
            StageCheckpoints::Auto,
            StageCheckpoints::All,
        ] {
            assert!(committed(&plan, mode).is_empty());
            assert!(marks(&plan, &committed(&plan, mode)).is_empty());
        }
        Ok(())
    }
}
