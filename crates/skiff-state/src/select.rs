//! State selection (paper Algorithm 1, Definitions 2 and 5).
//!
//! The query state is the output of every finished pipeline that at least
//! one unfinished pipeline directly depends on. Dependencies are the graph's
//! input edges: outputs read through a leaf, scalar subquery values, and the
//! build sides that feed a dynamic filter below a join's probe side. The
//! last kind is a scheduling edge only; [`crate::rewrite`] narrows the
//! selection to what the remaining plan actually reads.

use std::collections::BTreeSet;

use datafusion::common::{Result, internal_err};
use skiff_engine::{PipelineGraph, PipelineId, QueryState};

/// Direct dependencies (Definition 5) of every pipeline, indexed by id.
pub fn dependencies(graph: &PipelineGraph) -> Vec<Vec<PipelineId>> {
    graph.pipelines().iter().map(|p| p.inputs.clone()).collect()
}

/// Algorithm 1: the finished pipelines with at least one unfinished
/// dependent. `dependencies[i]` lists the pipelines pipeline `i` directly
/// depends on.
pub fn select_state(
    dependencies: &[Vec<PipelineId>],
    finished: &BTreeSet<PipelineId>,
) -> BTreeSet<PipelineId> {
    // Invert the dependency mapping: dependents of each pipeline.
    let mut dependents = vec![Vec::new(); dependencies.len()];
    for (pipeline, inputs) in dependencies.iter().enumerate() {
        for input in inputs {
            if let Some(list) = dependents.get_mut(input.0) {
                list.push(PipelineId(pipeline));
            }
        }
    }
    finished
        .iter()
        .copied()
        .filter(|p| {
            dependents
                .get(p.0)
                .is_some_and(|deps| deps.iter().any(|d| !finished.contains(d)))
        })
        .collect()
}

/// The state of a running query, chosen from its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    pub finished: BTreeSet<PipelineId>,
    /// Algorithm 1's choice: outputs some unfinished pipeline depends on.
    pub pipelines: BTreeSet<PipelineId>,
    pub rows: u64,
    /// Bytes the outputs hold, in memory plus spilled.
    pub bytes: u64,
}

/// Select the state of an execution from its graph and store record. The
/// store drops an output once its last reader finishes, so its live outputs
/// must be exactly Algorithm 1's choice; a difference is a broken invariant.
pub fn select(graph: &PipelineGraph, state: &QueryState) -> Result<Selection> {
    let finished: BTreeSet<PipelineId> = state.finished().collect();
    let pipelines = select_state(&dependencies(graph), &finished);
    let live: BTreeSet<PipelineId> = state.outputs.iter().map(|o| o.pipeline).collect();
    if live != pipelines {
        return internal_err!("store holds outputs {live:?}, Algorithm 1 selects {pipelines:?}");
    }
    let rows = state.outputs.iter().map(|o| o.size.rows).sum();
    Ok(Selection {
        finished,
        pipelines,
        rows,
        bytes: state.state_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[usize]) -> BTreeSet<PipelineId> {
        list.iter().copied().map(PipelineId).collect()
    }

    /// The paper's Figure 2 with 0-based ids: P0 builds the customer side,
    /// P1 probes it with orders into the revenue aggregate, P2 takes the max
    /// over P1, P3 builds the `max <= revenue` join from P2, P4 builds the
    /// outer customer side, and P5 (the result) reads P1, P3 and P4.
    fn figure_2() -> Vec<Vec<PipelineId>> {
        vec![
            vec![],
            vec![PipelineId(0)],
            vec![PipelineId(1)],
            vec![PipelineId(2)],
            vec![],
            vec![PipelineId(1), PipelineId(3), PipelineId(4)],
        ]
    }

    #[test]
    fn nothing_finished_selects_nothing() {
        assert!(select_state(&figure_2(), &ids(&[])).is_empty());
    }

    #[test]
    fn paper_example_after_pipeline_four() {
        // Paper (1-based): after pipelines 1..4, 1 and 3 are dropped (their
        // dependents finished); the aggregate (2) and the max build (4) remain.
        let state = select_state(&figure_2(), &ids(&[0, 1, 2, 3]));
        assert_eq!(state, ids(&[1, 3]));
    }

    #[test]
    fn shared_output_stays_until_its_last_reader_finishes() {
        let deps = figure_2();
        assert_eq!(select_state(&deps, &ids(&[0, 1])), ids(&[1]));
        assert_eq!(select_state(&deps, &ids(&[0, 1, 2, 3, 4])), ids(&[1, 3, 4]));
    }

    #[test]
    fn everything_finished_selects_nothing() {
        assert!(select_state(&figure_2(), &ids(&[0, 1, 2, 3, 4, 5])).is_empty());
    }

    #[test]
    fn pipeline_without_dependents_is_never_state() {
        // A finished pipeline nobody reads (the result) is not state.
        let deps = vec![vec![], vec![PipelineId(0)]];
        assert_eq!(select_state(&deps, &ids(&[0])), ids(&[0]));
        assert!(select_state(&deps, &ids(&[0, 1])).is_empty());
    }
}
