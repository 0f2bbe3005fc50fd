//! Plan modification (paper Algorithm 2): the plan that continues a query
//! from its state.
//!
//! The engine cut the plan into pipelines whose plans read each other's
//! outputs through `IntermediateScanExec` leaves. Walking down from the
//! result pipeline, a leaf of an unfinished pipeline is expanded into that
//! pipeline's plan, and a leaf of a finished one becomes a
//! [`MigratedStateExec`] with the leaf's exact properties (schema,
//! partitioning, ordering). The walk never descends below a finished
//! pipeline, so the top-most replacement wins and the state the plan reads
//! ([`RemainingPlan::reads`]) is exactly what must be extracted: a subset of
//! Algorithm 1's choice (build sides that only fed a dynamic filter are left
//! out). Scan-optimized and index-optimized operators need no distinction
//! here: the engine materializes a join's build *input*, so the leaf replaces
//! the build-side subtree and the join rebuilds its hash table.
//!
//! Scalar subqueries: the engine dissolved each `ScalarSubqueryExec` and
//! bound the values into a shared container that the plan's expressions
//! read; datafusion-proto can only decode those expressions inside their
//! exec. So the remaining plan is wrapped in one `ScalarSubqueryExec` per
//! container: a value already bound becomes a one-row literal subplan (the
//! value travels in the plan, the subquery is not re-run); a subquery not
//! yet finished keeps its (expanded) plan.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, internal_err};
use datafusion::logical_expr::physical_planning_context::ScalarSubqueryResults;
use datafusion::physical_expr::expressions::{UnKnownColumn, lit};
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::scalar_subquery::{ScalarSubqueryExec, ScalarSubqueryLink};
use datafusion::physical_plan::{ExecutionPlan, Partitioning};
use skiff_engine::pipeline::SubqueryBinding;
use skiff_engine::scan::IntermediateScanExec;
use skiff_engine::{MigratedStateExec, PipelineGraph, PipelineId};

/// The plan that continues a query from its state.
#[derive(Debug, Clone)]
pub struct RemainingPlan {
    /// Never executed; serialize it (or cut it) before running.
    pub plan: Arc<dyn ExecutionPlan>,
    /// Source pipelines whose outputs the plan reads: the state to extract.
    pub reads: BTreeSet<PipelineId>,
    /// Scalar subquery values bound on the source and carried as literals.
    pub inlined_values: usize,
}

/// Algorithm 2 over `graph` with `finished` pipelines done. The result
/// pipeline must not be finished (then there is nothing left to run).
pub fn remaining_plan(
    graph: &PipelineGraph,
    finished: &BTreeSet<PipelineId>,
) -> Result<RemainingPlan> {
    let result = graph.result();
    if finished.contains(&result.id) {
        return internal_err!("the query has finished: no plan remains");
    }
    let mut rewrite = Rewrite {
        graph,
        finished,
        reads: BTreeSet::new(),
        inlined_values: 0,
    };
    let mut plan = rewrite.expand(&result.plan)?;
    for group in subquery_groups(graph.bindings()) {
        plan = rewrite.wrap_subqueries(plan, &group)?;
    }
    Ok(RemainingPlan {
        plan,
        reads: rewrite.reads,
        inlined_values: rewrite.inlined_values,
    })
}

struct Rewrite<'a> {
    graph: &'a PipelineGraph,
    finished: &'a BTreeSet<PipelineId>,
    reads: BTreeSet<PipelineId>,
    inlined_values: usize,
}

impl Rewrite<'_> {
    /// `plan` with every leaf of a finished pipeline replaced by migrated
    /// state and every leaf of an unfinished one by its expanded plan.
    fn expand(&mut self, plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        Arc::clone(plan)
            .transform_up(|node| {
                let Some(leaf) = node.downcast_ref::<IntermediateScanExec>() else {
                    return Ok(Transformed::no(node));
                };
                let id = leaf.pipeline();
                if self.finished.contains(&id) {
                    self.reads.insert(id);
                    let statistics = leaf.statistics().as_ref().clone();
                    let state = MigratedStateExec::new(id, leaf.properties(), statistics);
                    Ok(Transformed::yes(Arc::new(state)))
                } else {
                    let producer = Arc::clone(&self.graph.get(id).plan);
                    Ok(Transformed::yes(self.expand(&producer)?))
                }
            })
            .map(|t| t.data)
    }

    /// Wrap `plan` in a `ScalarSubqueryExec` for one results container.
    fn wrap_subqueries(
        &mut self,
        plan: Arc<dyn ExecutionPlan>,
        group: &[&SubqueryBinding],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // A container none of whose readers is left needs no exec.
        let needed = group.iter().any(|b| {
            self.graph
                .readers(b.source)
                .any(|r| !self.finished.contains(&r))
        });
        let Some(first) = group.first() else {
            return Ok(plan);
        };
        if !needed {
            return Ok(plan);
        }
        let mut links = Vec::with_capacity(group.len());
        for binding in group {
            let subquery = &self.graph.get(binding.source).plan;
            let plan = if self.finished.contains(&binding.source) {
                let Some(value) = binding.results.get(binding.index) else {
                    return internal_err!("{} finished but its value is unbound", binding.source);
                };
                self.inlined_values += 1;
                let name = subquery.schema().field(0).name().clone();
                let row: Arc<dyn ExecutionPlan> =
                    Arc::new(PlaceholderRowExec::new(Arc::new(Schema::empty())));
                let literal = ProjectionExpr::new(lit(value), name);
                Arc::new(ProjectionExec::try_new([literal], row)?)
            } else {
                self.expand(subquery)?
            };
            links.push(ScalarSubqueryLink {
                plan,
                index: binding.index,
            });
        }
        Ok(Arc::new(ScalarSubqueryExec::new(
            plan,
            links,
            first.results.clone(),
        )))
    }
}

/// `plan` (a remaining plan) re-partitioned for a target that runs
/// `partitions` partitions: every hash or round-robin `RepartitionExec`
/// gets the new count, and a hash-partitioned state leaf with another count
/// is re-hashed by a `RepartitionExec` above it (order-preserving when the
/// leaf is sorted). Base-table scans keep their file groups; operators above
/// recompute their properties from the new inputs. The state itself arrives
/// with the source's partitions.
pub fn with_partitions(
    plan: Arc<dyn ExecutionPlan>,
    partitions: usize,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if let Some(repartition) = node.downcast_ref::<RepartitionExec>() {
            let partitioning = match repartition.partitioning() {
                Partitioning::Hash(exprs, n) if *n != partitions => {
                    Partitioning::Hash(exprs.clone(), partitions)
                }
                Partitioning::RoundRobinBatch(n) if *n != partitions => {
                    Partitioning::RoundRobinBatch(partitions)
                }
                _ => return Ok(Transformed::no(node)),
            };
            let input = Arc::clone(repartition.input());
            let mut changed = RepartitionExec::try_new(input, partitioning)?;
            if repartition.preserve_order() {
                changed = changed.with_preserve_order();
            }
            return Ok(Transformed::yes(Arc::new(changed) as Arc<dyn ExecutionPlan>));
        }
        let Some(leaf) = node.downcast_ref::<MigratedStateExec>() else {
            return Ok(Transformed::no(node));
        };
        let properties = leaf.properties();
        let Partitioning::Hash(exprs, n) = &properties.partitioning else {
            return Ok(Transformed::no(node));
        };
        // Keys projected away above the cut (`UnKnownColumn`) cannot be
        // hashed; nothing above can depend on them, so the leaf keeps its
        // partitions.
        let unknown = exprs
            .iter()
            .any(|e| e.downcast_ref::<UnKnownColumn>().is_some());
        if *n == partitions || unknown {
            return Ok(Transformed::no(node));
        }
        let sorted = properties.output_ordering().is_some();
        let hash = Partitioning::Hash(exprs.clone(), partitions);
        let mut rehash = RepartitionExec::try_new(Arc::clone(&node), hash)?;
        if sorted {
            rehash = rehash.with_preserve_order();
        }
        Ok(Transformed::yes(Arc::new(rehash) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// Bindings grouped by the container they write, in order of appearance.
fn subquery_groups(bindings: &[SubqueryBinding]) -> Vec<Vec<&SubqueryBinding>> {
    let mut groups: Vec<(ScalarSubqueryResults, Vec<&SubqueryBinding>)> = Vec::new();
    for binding in bindings {
        match groups.iter_mut().find(|(r, _)| *r == binding.results) {
            Some((_, group)) => group.push(binding),
            None => groups.push((binding.results.clone(), vec![binding])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}
