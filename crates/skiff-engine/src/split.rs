//! Splitting a physical plan into a [`PipelineGraph`] at its breakers.
//!
//! The walk goes top-down from the result. Each child edge is either kept
//! inside the current pipeline or split off: the child subtree becomes its own
//! pipeline (recursively) and is replaced by a `MaterializedExec` leaf
//! with the child's exact properties (schema, partitioning, orderings,
//! statistics), so the operators above see the same input they were planned
//! for and nothing is re-optimized.

use std::ops::Range;
use std::sync::Arc;

use datafusion::common::{NullEquality, Result};
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::{ExecutionPlan, replace_children_if_necessary};

use crate::materialized::{MaterializedExec, Source};
use crate::pipeline::{
    Breaker, FilterFeed, Pipeline, PipelineGraph, PipelineId, SubqueryBinding, input_breaker,
    is_opaque, output_breaker,
};

/// Split `plan` (an optimized physical plan, never executed) into pipelines.
pub fn split(plan: Arc<dyn ExecutionPlan>) -> Result<PipelineGraph> {
    let mut splitter = Splitter::default();
    match output_breaker(&plan) {
        // A breaker at the root gets its own pipeline; the result pipeline
        // then only streams its materialized output.
        Some(breaker) => {
            let (input, leaf) = splitter.split_edge(&plan, breaker)?;
            splitter.push(leaf, Breaker::Result, vec![input]);
        }
        None => {
            splitter.pipeline(plan, Breaker::Result)?;
        }
    }
    Ok(PipelineGraph::new(
        splitter.pipelines,
        splitter.bindings,
        splitter.feeds,
    ))
}

#[derive(Default)]
struct Splitter {
    pipelines: Vec<Pipeline>,
    bindings: Vec<SubqueryBinding>,
    feeds: Vec<FilterFeed>,
}

impl Splitter {
    fn last_id(&self) -> PipelineId {
        PipelineId(self.pipelines.len() - 1)
    }

    fn push(&mut self, plan: Arc<dyn ExecutionPlan>, breaker: Breaker, inputs: Vec<PipelineId>) {
        let id = PipelineId(self.pipelines.len());
        self.pipelines.push(Pipeline {
            id,
            plan,
            breaker,
            inputs,
            read_whole: false,
        });
    }

    /// Make `root` (whose sink is `breaker`) a pipeline; returns its id.
    fn pipeline(&mut self, root: Arc<dyn ExecutionPlan>, breaker: Breaker) -> Result<PipelineId> {
        let mut inputs = Vec::new();
        let plan = self.body(root, &mut inputs)?;
        self.push(plan, breaker, inputs);
        Ok(self.last_id())
    }

    /// Turn `child` into its own pipeline and return the leaf that reads it.
    fn split_edge(
        &mut self,
        child: &Arc<dyn ExecutionPlan>,
        breaker: Breaker,
    ) -> Result<(PipelineId, Arc<dyn ExecutionPlan>)> {
        let id = self.pipeline(Arc::clone(child), breaker)?;
        Ok((id, Arc::new(MaterializedExec::replacing(id, child))))
    }

    /// The part of the pipeline rooted at `node`: non-blocking edges are
    /// followed, blocking ones split off.
    fn body(
        &mut self,
        node: Arc<dyn ExecutionPlan>,
        inputs: &mut Vec<PipelineId>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if is_opaque(&node) || node.children().is_empty() {
            return Ok(node);
        }
        if let Some(subqueries) = node.downcast_ref::<ScalarSubqueryExec>() {
            return self.scalar_subqueries(subqueries, inputs);
        }
        let children: Vec<_> = node.children().into_iter().cloned().collect();
        let mut new_children = Vec::with_capacity(children.len());
        // Pipelines split from each child, by range of ids.
        let mut split_from = Vec::with_capacity(children.len());
        for (index, child) in children.into_iter().enumerate() {
            let first = self.pipelines.len();
            // A child that is itself a sink (e.g. an aggregate feeding a join
            // build) is named by its own breaker: that is where its tuples stop.
            let build = input_breaker(&node, index);
            // Migrated state is materialized already: the leaf is read where
            // it stands, never split into a pipeline that would copy it.
            let breaker = if MaterializedExec::of(child.as_ref(), Source::Migrated).is_some() {
                None
            } else {
                output_breaker(&child).or(build)
            };
            let new_child = match breaker {
                Some(breaker) => {
                    let (id, leaf) = self.split_edge(&child, breaker)?;
                    // A join collects its whole build side and concatenates it.
                    self.pipelines[id.0].read_whole = build.is_some_and(|b| b.is_join_build());
                    inputs.push(id);
                    leaf
                }
                None => self.body(child, inputs)?,
            };
            new_children.push(new_child);
            split_from.push(first..self.pipelines.len());
        }
        self.feed_filter(&node, &split_from);
        replace_children_if_necessary(node, new_children)
    }

    /// Record a hash join's dynamic filter as fed by its build pipeline, and
    /// make the pipelines below its probe side wait for that pipeline.
    fn feed_filter(&mut self, node: &Arc<dyn ExecutionPlan>, split_from: &[Range<usize>]) {
        let Some(join) = node.downcast_ref::<HashJoinExec>() else {
            return;
        };
        let produced = node.dynamic_expressions_produced();
        let filter = produced
            .into_iter()
            .find(|e| e.downcast_ref::<DynamicFilterPhysicalExpr>().is_some());
        let (Some(filter), [build, probe]) = (filter, split_from) else {
            return;
        };
        // Keys that are NULL never match under NullEqualsNothing, which a
        // bounds filter encodes; anything else keeps the join's own filter.
        if join.null_equality() != NullEquality::NullEqualsNothing || probe.is_empty() {
            return;
        }
        // The build side is the last pipeline split from child 0.
        let Some(source) = build.clone().last().map(PipelineId) else {
            return;
        };
        for pipeline in &mut self.pipelines[probe.clone()] {
            // The executor counts inputs to know when a pipeline is ready.
            if !pipeline.inputs.contains(&source) {
                pipeline.inputs.push(source);
            }
        }
        self.feeds.push(FilterFeed {
            source,
            filter,
            build_keys: join.on().iter().map(|(b, _)| Arc::clone(b)).collect(),
            probe_keys: join.on().iter().map(|(_, p)| Arc::clone(p)).collect(),
        });
    }

    /// A `ScalarSubqueryExec` runs its subqueries before executing its input,
    /// because expressions anywhere in the input read their values. Once the
    /// input is split off, pipelines below the node would run before it, so the
    /// node is dissolved: each subquery becomes a pipeline whose value the
    /// executor binds into the shared results container when it finishes,
    /// and every pipeline of the input waits for those pipelines.
    fn scalar_subqueries(
        &mut self,
        node: &ScalarSubqueryExec,
        inputs: &mut Vec<PipelineId>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut feeds = Vec::with_capacity(node.subqueries().len());
        for link in node.subqueries() {
            let breaker = output_breaker(&link.plan).unwrap_or(Breaker::ScalarSubquery);
            let source = self.pipeline(Arc::clone(&link.plan), breaker)?;
            feeds.push(source);
            self.bindings.push(SubqueryBinding {
                source,
                results: node.results().clone(),
                index: link.index,
            });
        }
        let first_below = self.pipelines.len();
        // The node goes away, so its input is now a child of the node's
        // parent: split it off if it is itself a sink.
        let input = match output_breaker(node.input()) {
            Some(breaker) => {
                let (id, leaf) = self.split_edge(node.input(), breaker)?;
                inputs.push(id);
                leaf
            }
            None => self.body(Arc::clone(node.input()), inputs)?,
        };
        for pipeline in &mut self.pipelines[first_below..] {
            pipeline.inputs.extend_from_slice(&feeds);
        }
        inputs.extend_from_slice(&feeds);
        Ok(input)
    }
}
