//! Plan modification (paper Algorithm 2): the plan that continues a query
//! from its state.
//!
//! The engine split the plan into pipelines whose plans read each other's
//! outputs through store `MaterializedExec` leaves. Walking down from the
//! result pipeline, a leaf of an unfinished pipeline is expanded into that
//! pipeline's plan, and a leaf of a finished one becomes a migrated
//! [`MaterializedExec`] with the leaf's exact properties (schema,
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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::datatypes::Schema;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Result, Statistics, internal_err};
use datafusion::logical_expr::physical_planning_context::ScalarSubqueryResults;
use datafusion::physical_expr::expressions::{UnKnownColumn, lit};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::placeholder_row::PlaceholderRowExec;
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::scalar_subquery::{ScalarSubqueryExec, ScalarSubqueryLink};
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{
    ExecutionPlan, Partitioning, PlanProperties, replace_children_if_necessary,
};
use skiff_engine::materialized::{MaterializedExec, Source};
use skiff_engine::morsel::{Cut, CutKind, MorselGateExec, SinkTapExec};
use skiff_engine::pipeline::SubqueryBinding;
use skiff_engine::{PipelineGraph, PipelineId};

/// The plan that continues a query from its state.
#[derive(Debug, Clone)]
pub struct RemainingPlan {
    /// Never executed; serialize it (or cut it) before running.
    pub plan: Arc<dyn ExecutionPlan>,
    /// Source pipelines whose outputs the plan reads: the state to extract.
    pub reads: BTreeSet<PipelineId>,
    /// Scalar subquery values bound on the source and carried as literals.
    pub inlined_values: usize,
    /// State an earlier hop brought that unfinished pipelines still read:
    /// (its id in this execution's migrated state, its id in the plan).
    /// Renumbered past this graph's ids, so that it never meets an output
    /// of this execution under the same id.
    pub carried: Vec<(PipelineId, PipelineId)>,
}

/// Algorithm 2 over `graph` with `finished` pipelines done. The result
/// pipeline must not be finished (then there is nothing left to run).
pub fn remaining_plan(
    graph: &PipelineGraph,
    finished: &BTreeSet<PipelineId>,
) -> Result<RemainingPlan> {
    remaining_plan_after_cut(graph, finished, &BTreeMap::new())
}

/// Algorithm 2 with `cuts`: pipelines a cut ended in the middle (see
/// `skiff_engine::morsel`). Each becomes its rest: its gates skip what was
/// consumed, and its sink reads its partial work (a state leaf under the
/// pipeline's id, in [`RemainingPlan::reads`]) together with the rest's:
/// * a join build side: the partial tuples and the rest's, re-distributed
///   as the build side was;
/// * a sort: both, sorted again;
/// * an aggregation: the tapped partial rows and the rest's partial
///   aggregation, merged by the final stage.
pub fn remaining_plan_after_cut(
    graph: &PipelineGraph,
    finished: &BTreeSet<PipelineId>,
    cuts: &BTreeMap<PipelineId, Cut>,
) -> Result<RemainingPlan> {
    let result = graph.result();
    if finished.contains(&result.id) {
        return internal_err!("the query has finished: no plan remains");
    }
    if let Some(id) = cuts.keys().find(|id| finished.contains(id)) {
        return internal_err!("{id} both finished and cut");
    }
    let mut rewrite = Rewrite {
        graph,
        finished,
        cuts,
        reads: BTreeSet::new(),
        inlined_values: 0,
        carried: Vec::new(),
    };
    let mut plan = rewrite.unfinished(result.id)?;
    for group in subquery_groups(graph.bindings()) {
        plan = rewrite.wrap_subqueries(plan, &group)?;
    }
    Ok(RemainingPlan {
        plan,
        reads: rewrite.reads,
        inlined_values: rewrite.inlined_values,
        carried: rewrite.carried,
    })
}

struct Rewrite<'a> {
    graph: &'a PipelineGraph,
    finished: &'a BTreeSet<PipelineId>,
    cuts: &'a BTreeMap<PipelineId, Cut>,
    reads: BTreeSet<PipelineId>,
    inlined_values: usize,
    carried: Vec<(PipelineId, PipelineId)>,
}

impl Rewrite<'_> {
    /// `plan` with every leaf of a finished pipeline replaced by migrated
    /// state and every leaf of an unfinished one by its expanded plan.
    fn expand(&mut self, plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        Arc::clone(plan)
            .transform_up(|node| {
                if let Some(leaf) = MaterializedExec::of(node.as_ref(), Source::Migrated) {
                    let id = PipelineId(self.graph.len() + self.carried.len());
                    self.carried.push((leaf.pipeline(), id));
                    let statistics = Statistics::new_unknown(&leaf.schema());
                    let carried = MaterializedExec::migrated(id, leaf.properties(), statistics);
                    return Ok(Transformed::yes(Arc::new(carried)));
                }
                let Some(leaf) = MaterializedExec::of(node.as_ref(), Source::Store) else {
                    return Ok(Transformed::no(node));
                };
                let id = leaf.pipeline();
                if self.finished.contains(&id) {
                    self.reads.insert(id);
                    let statistics = leaf.statistics().as_ref().clone();
                    let state = MaterializedExec::migrated(id, leaf.properties(), statistics);
                    Ok(Transformed::yes(Arc::new(state)))
                } else {
                    Ok(Transformed::yes(self.unfinished(id)?))
                }
            })
            .map(|t| t.data)
    }

    /// The expanded plan of unfinished pipeline `id`: the rest of it when a
    /// cut ended it in the middle.
    fn unfinished(&mut self, id: PipelineId) -> Result<Arc<dyn ExecutionPlan>> {
        let producer = Arc::clone(&self.graph.get(id).plan);
        let expanded = self.expand(&producer)?;
        match self.cuts.get(&id) {
            Some(cut) => {
                self.reads.insert(id);
                rest(expanded, cut)
            }
            None => without_cut_points(expanded),
        }
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
                self.unfinished(binding.source)?
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
        let Some(leaf) = MaterializedExec::of(node.as_ref(), Source::Migrated) else {
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

/// `plan` without this execution's cut points: taps go, gates stay only
/// where they skip what an earlier cut consumed.
fn without_cut_points(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    plan.transform_up(|node| {
        if let Some(tap) = node.downcast_ref::<SinkTapExec>() {
            return Ok(Transformed::yes(Arc::clone(tap.input())));
        }
        let Some(gate) = node.downcast_ref::<MorselGateExec>() else {
            return Ok(Transformed::no(node));
        };
        if gate.skip().iter().all(|&n| n == 0) {
            return Ok(Transformed::yes(Arc::clone(gate.input())));
        }
        if gate.slot().is_none() {
            return Ok(Transformed::no(node));
        }
        let kept = gate.skipping(gate.skip().to_vec());
        Ok(Transformed::yes(Arc::new(kept) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// The rest of cut pipeline `plan` (see [`remaining_plan_after_cut`]).
fn rest(plan: Arc<dyn ExecutionPlan>, cut: &Cut) -> Result<Arc<dyn ExecutionPlan>> {
    let mut tapped_from: Option<PlanProperties> = None;
    // This pipeline's gates are the ones still in a slot: the expansion
    // below already turned the nested pipelines' into plain ones.
    let plan = plan
        .transform_up(|node| {
            if let Some(tap) = node.downcast_ref::<SinkTapExec>() {
                tapped_from = Some(tap.input().properties().as_ref().clone());
                return Ok(Transformed::yes(Arc::clone(tap.input())));
            }
            let Some(gate) = node.downcast_ref::<MorselGateExec>() else {
                return Ok(Transformed::no(node));
            };
            let Some(slot) = gate.slot() else {
                return Ok(Transformed::no(node));
            };
            let Some((_, consumed)) = cut.consumed.iter().find(|(s, _)| *s == slot) else {
                return internal_err!("{}: no record of gate {slot}", cut.pipeline);
            };
            // A partition the cut stopped before it read anything is still
            // at the skip it started from.
            let from = consumed
                .iter()
                .enumerate()
                .map(|(i, &n)| n.max(gate.skip().get(i).copied().unwrap_or(0)))
                .collect();
            let skipping = gate.skipping(from);
            Ok(Transformed::yes(
                Arc::new(skipping) as Arc<dyn ExecutionPlan>
            ))
        })?
        .data;
    // The partial work carries no ordering the operators above could use
    // (a sort's partial rows are sorted on its keys, not its input's).
    let partial = |like: &PlanProperties| -> Arc<dyn ExecutionPlan> {
        let schema = Arc::clone(like.eq_properties.schema());
        let statistics = Statistics::new_unknown(&schema);
        let like = like
            .clone()
            .with_eq_properties(EquivalenceProperties::new(schema));
        Arc::new(MaterializedExec::migrated(cut.pipeline, &like, statistics))
    };
    let with_partial = |input: Arc<dyn ExecutionPlan>, like: &PlanProperties| {
        let union = UnionExec::try_new(vec![partial(like), Arc::clone(&input)])?;
        redistribute(union, input.properties())
    };
    match cut.kind {
        CutKind::Union => with_partial(Arc::clone(&plan), plan.properties()),
        CutKind::Sort => {
            let Some(input) = plan.children().first().map(|c| Arc::clone(*c)) else {
                return internal_err!("{}: a sort without input", cut.pipeline);
            };
            let input = with_partial(Arc::clone(&input), input.properties())?;
            replace_children_if_necessary(plan, vec![input])
        }
        CutKind::Aggregate => {
            let Some(tapped_from) = tapped_from else {
                return internal_err!("{}: a cut aggregation without its tap", cut.pipeline);
            };
            let mut done = false;
            plan.transform_down(|node| {
                let partial_stage = node
                    .downcast_ref::<AggregateExec>()
                    .is_some_and(|a| matches!(a.mode(), AggregateMode::Partial));
                if done || !partial_stage {
                    return Ok(Transformed::no(node));
                }
                done = true;
                let union = UnionExec::try_new(vec![partial(&tapped_from), Arc::clone(&node)])?;
                let merged = redistribute(union, node.properties())?;
                Ok(Transformed::new(merged, true, TreeNodeRecursion::Jump))
            })
            .map(|t| t.data)
        }
    }
}

/// `union` spread over the partitions of `like`, as the operators above
/// were planned for: re-hashed on the same keys, merged into one, or dealt
/// round-robin.
fn redistribute(
    union: Arc<dyn ExecutionPlan>,
    like: &PlanProperties,
) -> Result<Arc<dyn ExecutionPlan>> {
    let partitions = like.partitioning.partition_count();
    let hashable = |exprs: &[Arc<dyn PhysicalExpr>]| {
        !exprs
            .iter()
            .any(|e| e.downcast_ref::<UnKnownColumn>().is_some())
    };
    Ok(match &like.partitioning {
        Partitioning::Hash(exprs, n) if hashable(exprs) => Arc::new(RepartitionExec::try_new(
            union,
            Partitioning::Hash(exprs.clone(), *n),
        )?),
        _ if partitions == 1 => Arc::new(CoalescePartitionsExec::new(union)),
        _ => Arc::new(RepartitionExec::try_new(
            union,
            Partitioning::RoundRobinBatch(partitions),
        )?),
    })
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
