//! The migration decision (paper §5.3): when a query must leave its worker,
//! is it cheaper to ship its state now, to continue from an older (often
//! smaller) snapshot and redo the work since, or to start over? The model
//! alone, from numbers: the coordinator feeds it a worker's report and the
//! measured state bandwidth, the migration benchmark judges it against
//! what each choice measurably cost.

use std::sync::atomic::{AtomicU64, Ordering};

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

/// A snapshot the query could continue from.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    /// Bytes of its state.
    pub state_bytes: u64,
    /// The query's running time when the snapshot arrived.
    pub elapsed_ms: f64,
}

/// The choice from its inputs: `progress` in 0..=1 (finished pipelines
/// over all), the bytes of the state Algorithm 1 selects now, the time the
/// query has run, an older snapshot if any, and the state bandwidth in
/// bytes/s.
pub fn estimate(
    progress: f64,
    state_bytes: u64,
    elapsed_ms: f64,
    snapshot: Option<Snapshot>,
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
    let snapshot_ms =
        snapshot.map(|s| ship_ms(s.state_bytes) + (elapsed_ms - s.elapsed_ms) + remaining_ms);
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

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1024 * 1024;

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

    #[test]
    fn shipping_costs_against_redoing_the_work_done() {
        let bandwidth = 100.0 * MB as f64;
        // 1 MB ships in 20 ms (put and get): cheaper than redoing 100 ms.
        let small = estimate(0.5, MB, 100.0, None, bandwidth);
        assert_eq!(small.choice, Choice::MigrateNow, "{}", small.describe());
        // 4 GB takes 80 s: starting over is cheaper.
        let huge = estimate(0.5, 4096 * MB, 100.0, None, bandwidth);
        assert_eq!(huge.choice, Choice::Restart, "{}", huge.describe());
        // A small snapshot taken just before beats both.
        let snapshot = Snapshot {
            state_bytes: MB,
            elapsed_ms: 99.0,
        };
        let resumed = estimate(0.5, 4096 * MB, 100.0, Some(snapshot), bandwidth);
        assert_eq!(
            resumed.choice,
            Choice::FromSnapshot,
            "{}",
            resumed.describe()
        );
    }
}
