//! Which (operator, child) edges of a DataFusion physical plan block.
//!
//! DataFusion does not declare blocking per child (`emission_type` describes an
//! operator's *output*; an inner hash join reports `Incremental` although it
//! drains its build side first), so Skiff keeps its own table. Two kinds of
//! split exist:
//!
//! * the operator itself is the pipeline's sink and its *output* is
//!   materialized (aggregation, sort, window): the pipeline ends at the
//!   operator;
//! * the operator keeps private state built from one child (a join's hash
//!   table): that child's *input tuples* are materialized, because the hash
//!   table cannot be read or injected from outside, and the consumer rebuilds it.

use std::fmt;
use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::InputOrderMode;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::analyze::AnalyzeExec;
use datafusion::physical_plan::joins::{
    CrossJoinExec, HashJoinExec, NestedLoopJoinExec, PartitionMode,
};
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::WindowAggExec;

/// What ends a pipeline: the operator whose sink its tuples feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Breaker {
    /// Build side of a hash join; `partitioned` when each output partition
    /// builds from its own input partition (else one shared build).
    HashJoinBuild { partitioned: bool },
    /// Left (buffered) side of a nested-loop join.
    NestedLoopJoinBuild,
    /// Left (buffered) side of a cross join.
    CrossJoinBuild,
    /// A hash aggregation (final stage; the partial stage runs inside the
    /// pipeline that feeds it).
    Aggregate,
    /// A full sort.
    Sort,
    /// A sort with a fetch limit: TopK.
    TopK { fetch: usize },
    /// A window aggregation that buffers its whole input partition.
    Window,
    /// A scalar subquery, evaluated before the plans that use its value
    /// (see the splitter: `ScalarSubqueryExec` nodes are dissolved).
    ScalarSubquery,
    /// The query result, streamed to the client.
    Result,
}

impl Breaker {
    /// The build side of a join: read whole and concatenated by the join.
    pub fn is_join_build(&self) -> bool {
        matches!(
            self,
            Breaker::HashJoinBuild { .. } | Breaker::NestedLoopJoinBuild | Breaker::CrossJoinBuild
        )
    }
}

impl fmt::Display for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Breaker::HashJoinBuild { partitioned: true } => {
                write!(f, "hash join build (partitioned)")
            }
            Breaker::HashJoinBuild { partitioned: false } => write!(f, "hash join build"),
            Breaker::NestedLoopJoinBuild => write!(f, "nested loop join build"),
            Breaker::CrossJoinBuild => write!(f, "cross join build"),
            Breaker::Aggregate => write!(f, "aggregate"),
            Breaker::Sort => write!(f, "sort"),
            Breaker::TopK { fetch } => write!(f, "topk (fetch {fetch})"),
            Breaker::Window => write!(f, "window"),
            Breaker::ScalarSubquery => write!(f, "scalar subquery"),
            Breaker::Result => write!(f, "result"),
        }
    }
}

/// The breaker `plan` itself is, when its own output must be materialized
/// (it emits nothing before its input is exhausted).
pub fn output_breaker(plan: &Arc<dyn ExecutionPlan>) -> Option<Breaker> {
    if let Some(agg) = plan.downcast_ref::<AggregateExec>() {
        // A partial aggregate feeds its final stage inside one pipeline, and an
        // aggregate over sorted input streams.
        let blocking = !matches!(agg.mode(), AggregateMode::Partial)
            && matches!(agg.input_order_mode(), InputOrderMode::Linear);
        return blocking.then_some(Breaker::Aggregate);
    }
    if let Some(sort) = plan.downcast_ref::<SortExec>() {
        return Some(match sort.fetch() {
            Some(fetch) => Breaker::TopK { fetch },
            None => Breaker::Sort,
        });
    }
    if plan.is::<WindowAggExec>() {
        return Some(Breaker::Window);
    }
    None
}

/// The breaker for child `index` of `plan`, when that child's tuples must be
/// materialized before `plan` can consume them.
pub fn input_breaker(plan: &Arc<dyn ExecutionPlan>, index: usize) -> Option<Breaker> {
    if let Some(join) = plan.downcast_ref::<HashJoinExec>() {
        let partitioned = matches!(join.partition_mode(), PartitionMode::Partitioned);
        return (index == 0).then_some(Breaker::HashJoinBuild { partitioned });
    }
    if plan.is::<NestedLoopJoinExec>() {
        return (index == 0).then_some(Breaker::NestedLoopJoinBuild);
    }
    if plan.is::<CrossJoinExec>() {
        return (index == 0).then_some(Breaker::CrossJoinBuild);
    }
    None
}

/// Subtrees that must never be split: a recursive query re-executes its
/// recursive term once per iteration, so a materialized copy would be stale;
/// DataFusion's own EXPLAIN ANALYZE reports the metrics of the plan below it,
/// which must stay one plan to be reported whole.
pub fn is_opaque(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<RecursiveQueryExec>() || plan.is::<AnalyzeExec>()
}
