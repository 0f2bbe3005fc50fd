//! The whole of on-demand state separation in one call: what a worker's
//! hand-off does, and what the tests check, step for step the same.

use std::collections::BTreeSet;

use datafusion::common::{Result, internal_err};
use skiff_engine::{PipelineId, QueryExecution};

use crate::extract::{Compression, ExtractedState, extract, extract_carried, extract_cuts};
use crate::rewrite::{RemainingPlan, remaining_plan_after_cut};
use crate::select::{Selection, select};

/// A paused execution's state and the plan that continues the query from it.
#[derive(Debug)]
pub struct Separated {
    /// Algorithm 1's choice at the pause.
    pub selection: Selection,
    /// The plan that continues the query (Algorithm 2), with the rests of
    /// the pipelines a cut ended.
    pub remaining: RemainingPlan,
    /// Everything the remaining plan reads: the finished outputs, the cut
    /// pipelines' partial work, and the state an earlier hop brought.
    pub state: ExtractedState,
    /// Pipelines a cut ended in the middle; their partial work is in
    /// `state` under their own ids.
    pub cut: BTreeSet<PipelineId>,
}

/// Separate a paused (or cut) `execution` from its state: select the state
/// (Algorithm 1), rewrite the plan to read it (Algorithm 2, cut pipelines
/// becoming their rests), and extract, with `compression`, the finished
/// outputs the plan reads, the cut pipelines' partial work and the carried
/// state. Non-destructive: a paused execution can still go on here (one a
/// cut ended cannot).
pub async fn separate(execution: &QueryExecution, compression: Compression) -> Result<Separated> {
    let graph = execution.graph();
    let selection = select(graph, &execution.state())?;
    let cuts = execution.cuts();
    let cut_plans = cuts
        .iter()
        .map(|(id, (cut, _))| (*id, cut.clone()))
        .collect();
    let remaining = remaining_plan_after_cut(graph, &selection.finished, &cut_plans)?;
    let cut: BTreeSet<PipelineId> = cuts.keys().copied().collect();
    if !cut.is_subset(&remaining.reads) {
        return internal_err!(
            "the remaining plan reads {:?}, not the partial work of every cut pipeline {cut:?}",
            remaining.reads
        );
    }
    let finished_reads: BTreeSet<PipelineId> = remaining.reads.difference(&cut).copied().collect();
    let mut state = extract(execution.store(), &finished_reads, compression).await?;
    state
        .outputs
        .extend(extract_cuts(&cuts, compression).await?.outputs);
    let migrated = execution.migrated_state();
    let carried = extract_carried(migrated.as_deref(), &remaining.carried, compression)?;
    state.outputs.extend(carried.outputs);
    Ok(Separated {
        selection,
        remaining,
        state,
        cut,
    })
}
