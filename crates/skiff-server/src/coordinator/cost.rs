//! The migration decision (paper §5.3): when a query must leave its worker,
//! is it cheaper to ship its state now, to continue from an older (often
//! smaller) snapshot and redo the work since, or to start over? Estimated
//! from the worker's last report (which pipelines finished, their output
//! sizes and dependencies), the measured state bandwidth, the time the
//! query has run and its progress. Deterministic triggers
//! (`skiff.migrate_after_pipelines`) bypass it; on-demand migrations and
//! vacates go through it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use skiff_engine::PipelineId;
use skiff_flight::protocol::{Handoff, RunningQuery};

/// Assumed state bandwidth until a hand-off has been measured, bytes/s.
const DEFAULT_BANDWIDTH: f64 = 200.0 * 1024.0 * 1024.0;
/// Weight of a new measurement in the running bandwidth estimate.
const SMOOTHING: f64 = 0.3;

/// The measured bytes per second of state hand-offs (extract + store).
#[derive(Debug)]
pub struct Bandwidth(AtomicU64);

impl Default for Bandwidth {
    fn default() -> Self {
        Self(AtomicU64::new(DEFAULT_BANDWIDTH.to_bits()))
    }
}

impl Bandwidth {
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    /// Fold in a hand-off that moved `bytes` in `ms`.
    pub fn record(&self, bytes: u64, ms: u64) {
        if bytes < 64 * 1024 {
            // Small states measure latency, not bandwidth.
            return;
        }
        let measured = bytes as f64 / (ms.max(1) as f64 / 1000.0);
        let blended = (1.0 - SMOOTHING) * self.get() + SMOOTHING * measured;
        self.0.store(blended.to_bits(), Ordering::Relaxed);
    }
}

/// What leaving the worker can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    MigrateNow,
    FromSnapshot,
    Restart,
}

/// The estimates behind a choice, in milliseconds until the query is done.
#[derive(Clone, Debug)]
pub struct Estimate {
    pub choice: Choice,
    pub progress: f64,
    pub state_bytes: u64,
    pub remaining_ms: f64,
    pub migrate_ms: f64,
    pub restart_ms: f64,
    pub snapshot_ms: Option<f64>,
    pub bandwidth: f64,
}

impl Estimate {
    pub fn describe(&self) -> String {
        let choice = match self.choice {
            Choice::MigrateNow => "migrate now",
            Choice::FromSnapshot => "continue from the snapshot",
            Choice::Restart => "restart",
        };
        let snapshot = self
            .snapshot_ms
            .map_or("none".to_string(), |ms| format!("{ms:.0} ms"));
        format!(
            "cost model: {choice} (progress {:.0}%, state {} B at {:.0} MB/s, remaining \
             {:.0} ms; migrate {:.0} ms, restart {:.0} ms, snapshot {snapshot})",
            self.progress * 100.0,
            self.state_bytes,
            self.bandwidth / 1e6,
            self.remaining_ms,
            self.migrate_ms,
            self.restart_ms,
        )
    }
}

/// The snapshot a query could continue from, with when it was taken.
pub struct SnapshotAt<'a> {
    pub handoff: &'a Handoff,
    /// The query's running time when the snapshot arrived.
    pub elapsed_ms: f64,
}

/// Choose how query leaves its worker. `report` is the worker's last
/// report; `elapsed_ms` how long the query has run.
pub fn choose(
    report: Option<&RunningQuery>,
    elapsed_ms: f64,
    snapshot: Option<SnapshotAt<'_>>,
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

/// The choice from its inputs: `progress` in 0..=1 (finished pipelines
/// over all), the bytes of the state Algorithm 1 selects now, the time the
/// query has run, an older snapshot if any, and the state bandwidth in
/// bytes/s. Public so that the migration benchmark can judge the choice
/// against the measured alternatives.
pub fn estimate(
    progress: f64,
    state_bytes: u64,
    elapsed_ms: f64,
    snapshot: Option<SnapshotAt<'_>>,
    bandwidth: f64,
) -> Estimate {
    // Time per unit of progress so far predicts the rest; with no progress
    // yet, assume the query is as long again as it has run.
    let remaining_ms = if progress > 0.0 {
        elapsed_ms * (1.0 - progress) / progress
    } else {
        elapsed_ms
    };
    let ship_ms = |bytes: u64| bytes as f64 / bandwidth * 1000.0;
    // Put on the source, get on the target.
    let migrate_ms = 2.0 * ship_ms(state_bytes) + remaining_ms;
    let restart_ms = elapsed_ms + remaining_ms;
    // Already stored: only the get, then redo the work since it was taken.
    let snapshot_ms = snapshot
        .map(|s| ship_ms(s.handoff.state_bytes) + (elapsed_ms - s.elapsed_ms) + remaining_ms);
    let mut choice = (Choice::MigrateNow, migrate_ms);
    if let Some(ms) = snapshot_ms.filter(|&ms| ms < choice.1) {
        choice = (Choice::FromSnapshot, ms);
    }
    if restart_ms < choice.1 {
        choice = (Choice::Restart, restart_ms);
    }
    Estimate {
        choice: choice.0,
        progress,
        state_bytes,
        remaining_ms,
        migrate_ms,
        restart_ms,
        snapshot_ms,
        bandwidth,
    }
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
        let snapshot = Handoff {
            state_bytes: MB,
            pipelines_finished: 2,
            ..Handoff::default()
        };
        let at = SnapshotAt {
            handoff: &snapshot,
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

    #[test]
    fn bandwidth_follows_measurements() {
        let b = Bandwidth::default();
        for _ in 0..20 {
            b.record(100 * MB, 1000);
        }
        assert!((b.get() / (100.0 * MB as f64) - 1.0).abs() < 0.01);
        b.record(10, 1000);
        assert!((b.get() / (100.0 * MB as f64) - 1.0).abs() < 0.01);
    }
}
