//! The migration decision for a query on a worker: the model
//! (`skiff_state::decision`) fed from the worker's last report (which
//! pipelines finished, their output sizes and dependencies), the measured
//! state bandwidth, the time the query has run and its progress.
//! Deterministic triggers (`skiff.migrate_after_pipelines`) bypass it;
//! on-demand migrations and vacates go through it.

use std::collections::BTreeSet;

use skiff_engine::PipelineId;
use skiff_flight::protocol::RunningQuery;
use skiff_state::decision::estimate;
pub(crate) use skiff_state::decision::{Bandwidth, Choice, Estimate, Snapshot};

/// Choose how query leaves its worker. `report` is the worker's last
/// report; `elapsed_ms` how long the query has run.
pub(crate) fn choose(
    report: Option<&RunningQuery>,
    elapsed_ms: f64,
    snapshot: Option<Snapshot>,
    bandwidth: f64,
) -> Estimate {
    let (done, total) = report.map_or((0, 0), |r| (r.pipelines_finished, r.pipelines_total));
    let progress = if total == 0 {
        0.0
    } else {
        f64::from(done) / f64::from(total)
    };
    let state_bytes = report.map_or(0, state_bytes);
    estimate(progress, state_bytes, elapsed_ms, snapshot, bandwidth)
}

/// Bytes of the state Algorithm 1 would select from the report: outputs of
/// finished pipelines that an unfinished pipeline reads.
fn state_bytes(report: &RunningQuery) -> u64 {
    let dependencies: Vec<Vec<PipelineId>> = report
        .pipelines
        .iter()
        .map(|p| p.inputs.iter().map(|&i| PipelineId(i as usize)).collect())
        .collect();
    let finished: BTreeSet<PipelineId> = report
        .pipelines
        .iter()
        .filter(|p| p.status == "finished")
        .map(|p| PipelineId(p.id as usize))
        .collect();
    skiff_state::select_state(&dependencies, &finished)
        .into_iter()
        .filter_map(|p| report.pipelines.get(p.0))
        .map(|p| p.output_bytes)
        .sum()
}

#[cfg(test)]
mod tests {
    use skiff_flight::protocol::PipelineReport;

    use super::*;

    const MB: u64 = 1024 * 1024;

    /// Pipelines 0 and 1 feed 2, which feeds the result 3; `done` of them
    /// finished, each with `bytes` of output.
    fn report(done: u32, bytes: u64) -> RunningQuery {
        let inputs = [vec![], vec![], vec![0, 1], vec![2]];
        RunningQuery {
            pipelines_finished: done,
            pipelines_total: 4,
            pipelines: inputs
                .iter()
                .enumerate()
                .map(|(i, inputs)| PipelineReport {
                    id: i as u32,
                    status: if (i as u32) < done {
                        "finished".into()
                    } else {
                        "waiting".into()
                    },
                    output_bytes: bytes,
                    inputs: inputs.clone(),
                    ..PipelineReport::default()
                })
                .collect(),
            ..RunningQuery::default()
        }
    }

    #[test]
    fn the_state_is_what_unfinished_pipelines_read() {
        // 0 and 1 feed 2, which has not run: both are state.
        assert_eq!(state_bytes(&report(2, MB)), 2 * MB);
        // 2 ran: its inputs are consumed, its own output is the state.
        assert_eq!(state_bytes(&report(3, MB)), MB);
    }

    #[test]
    fn a_small_state_late_in_the_query_migrates() {
        let e = choose(Some(&report(3, MB)), 3000.0, None, 100.0 * MB as f64);
        assert_eq!(e.choice, Choice::MigrateNow, "{}", e.describe());
    }

    #[test]
    fn a_huge_state_early_in_the_query_restarts() {
        let e = choose(Some(&report(2, 4096 * MB)), 200.0, None, 100.0 * MB as f64);
        assert_eq!(e.choice, Choice::Restart, "{}", e.describe());
    }

    #[test]
    fn a_recent_small_snapshot_beats_a_large_state() {
        let at = Snapshot {
            state_bytes: MB,
            elapsed_ms: 2900.0,
        };
        let e = choose(
            Some(&report(3, 2048 * MB)),
            3000.0,
            Some(at),
            100.0 * MB as f64,
        );
        assert_eq!(e.choice, Choice::FromSnapshot, "{}", e.describe());
    }
}
