//! Structural invariants every pipeline graph must satisfy, checked on every
//! plan the tests cut (hand-written ones and every TPC-H/TPC-DS query).

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use skiff_engine::materialized::{MaterializedExec, Source};
use skiff_engine::morsel::{MorselGateExec, SinkTapExec};
use skiff_engine::pipeline::{Breaker, PipelineGraph, input_breaker, is_opaque, output_breaker};

/// Panics with a description of the first broken invariant.
pub fn check(graph: &PipelineGraph, original: &Arc<dyn ExecutionPlan>) {
    let pipelines = graph.pipelines();
    assert!(!pipelines.is_empty(), "empty graph");
    assert_eq!(
        graph.result().breaker,
        Breaker::Result,
        "last pipeline is the result"
    );
    for (index, pipeline) in pipelines.iter().enumerate() {
        assert_eq!(pipeline.id.0, index, "ids are positions");
        // The executor counts inputs to know when a pipeline is ready.
        let mut unique = pipeline.inputs.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            pipeline.inputs.len(),
            "{} reads an input twice",
            pipeline.id
        );
        // Acyclic: every input is numbered before its reader.
        for input in &pipeline.inputs {
            assert!(input.0 < index, "{} reads later {input}", pipeline.id);
        }
        let is_result = pipeline.breaker == Breaker::Result;
        assert_eq!(
            is_result,
            index == pipelines.len() - 1,
            "only the last is the result"
        );
        // Every breaker input comes from a pipeline: each leaf that reads a
        // materialized output is a declared input, and every other declared
        // input is a scalar subquery whose value the pipeline reads.
        let leaves = scans(&pipeline.plan);
        for leaf in &leaves {
            assert!(
                pipeline.inputs.contains(leaf),
                "{} reads undeclared {leaf}",
                pipeline.id
            );
        }
        for input in &pipeline.inputs {
            let is_subquery = graph.bindings().iter().any(|b| b.source == *input);
            let feeds_filter = graph.feeds().iter().any(|f| f.source == *input);
            assert!(
                leaves.contains(input) || is_subquery || feeds_filter,
                "{} declares {input} but never reads it",
                pipeline.id
            );
        }
        if !is_result {
            assert!(
                graph.readers(pipeline.id).count() >= 1,
                "{} unread",
                pipeline.id
            );
        }
        assert_no_uncut_breaker(&pipeline.plan, true);
    }
    // Splitting loses nothing: putting every pipeline back in place of its
    // leaf gives the original plan.
    // Scalar subquery nodes are dissolved into bindings, one per subquery.
    let stitched = stitch(graph, &graph.result().plan);
    let (original, subqueries) = without_scalar_subqueries(original);
    assert_eq!(
        graph.bindings().len(),
        subqueries,
        "one binding per scalar subquery"
    );
    assert_eq!(
        displayable(stitched.as_ref()).indent(true).to_string(),
        displayable(original.as_ref()).indent(true).to_string(),
        "stitched graph differs from the plan"
    );
}

fn scans(plan: &Arc<dyn ExecutionPlan>) -> Vec<skiff_engine::PipelineId> {
    let mut found = Vec::new();
    plan.apply(|node| {
        if let Some(scan) = MaterializedExec::of(node.as_ref(), Source::Store) {
            found.push(scan.pipeline());
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .expect("walk");
    found
}

/// No blocking edge is left inside a pipeline (below its own root).
fn assert_no_uncut_breaker(node: &Arc<dyn ExecutionPlan>, is_root: bool) {
    if !is_root {
        assert!(
            output_breaker(node).is_none(),
            "uncut breaker {} inside a pipeline",
            node.name()
        );
    }
    if is_opaque(node) {
        return;
    }
    for (index, child) in node.children().into_iter().enumerate() {
        if input_breaker(node, index).is_some() || output_breaker(child).is_some() {
            assert!(
                MaterializedExec::of(child.as_ref(), Source::Store).is_some(),
                "{} child {index} ({}) is a breaker edge but not cut",
                node.name(),
                child.name()
            );
        } else {
            assert_no_uncut_breaker(child, false);
        }
    }
}

fn without_scalar_subqueries(plan: &Arc<dyn ExecutionPlan>) -> (Arc<dyn ExecutionPlan>, usize) {
    let mut subqueries = 0;
    let plan = Arc::clone(plan)
        .transform_up(|node| {
            Ok(match node.downcast_ref::<ScalarSubqueryExec>() {
                Some(exec) => {
                    subqueries += exec.subqueries().len();
                    Transformed::yes(Arc::clone(exec.input()))
                }
                None => Transformed::no(node),
            })
        })
        .expect("dissolve")
        .data;
    (plan, subqueries)
}

/// The plan put back together; cut points (gates and taps, which only
/// pass tuples through) are left out.
fn stitch(graph: &PipelineGraph, plan: &Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    Arc::clone(plan)
        .transform_up(|node| {
            if let Some(gate) = node.downcast_ref::<MorselGateExec>() {
                return Ok(Transformed::yes(Arc::clone(gate.input())));
            }
            if let Some(tap) = node.downcast_ref::<SinkTapExec>() {
                return Ok(Transformed::yes(Arc::clone(tap.input())));
            }
            Ok(match MaterializedExec::of(node.as_ref(), Source::Store) {
                Some(scan) => Transformed::yes(stitch(graph, &graph.get(scan.pipeline()).plan)),
                None => Transformed::no(node),
            })
        })
        .expect("stitch")
        .data
}
