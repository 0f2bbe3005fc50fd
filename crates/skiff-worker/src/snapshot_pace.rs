//! When an adaptive snapshot pays (`skiff.adaptive_snapshots`).
//!
//! A snapshot pauses the query at a boundary, extracts the state that
//! unfinished pipelines owe and puts it in the state cache: a cost the
//! query pays whether or not its worker ever dies. It is taken only once
//! the query has run long enough, since the start or the last snapshot,
//! for that cost to be at most [`ADAPTIVE_SNAPSHOT_SHARE`] of the time: a
//! short query never pays, a long one keeps most of its progress when its
//! worker dies. The cost is the larger of an estimate from the state's
//! size and what the last snapshot took (its pause included: while running
//! pipelines finish, no new one starts).

use std::time::{Duration, Instant};

use crate::limits::{
    ADAPTIVE_SNAPSHOT_FIRST, ADAPTIVE_SNAPSHOT_FIXED, ADAPTIVE_SNAPSHOT_SHARE,
    SNAPSHOT_BANDWIDTH_GUESS,
};

/// The adaptive snapshots of one query on one worker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pace {
    /// Since when the query has run without a snapshot (its start here or
    /// the end of the last one).
    since: Instant,
    /// What the last snapshot took, pause to stored.
    last_cost: Duration,
}

/// What to do when a check comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Snapshot at the next boundary.
    Snapshot,
    /// Not worth it yet: check again then.
    CheckAt(Instant),
}

impl Pace {
    pub(crate) fn new(started: Instant) -> Self {
        Self {
            since: started,
            last_cost: Duration::ZERO,
        }
    }

    /// The first check: no snapshot comes sooner.
    pub(crate) fn first_check(&self) -> Instant {
        self.since + ADAPTIVE_SNAPSHOT_FIRST
    }

    /// Whether a snapshot of `state_bytes` pays at `now`.
    pub(crate) fn check(&self, now: Instant, state_bytes: u64) -> Verdict {
        let cost = estimate(state_bytes).max(self.last_cost);
        let due = self.since + ADAPTIVE_SNAPSHOT_FIRST.max(cost.div_f64(ADAPTIVE_SNAPSHOT_SHARE));
        if now >= due {
            Verdict::Snapshot
        } else {
            Verdict::CheckAt(due)
        }
    }

    /// A snapshot ended at `now` after `cost`; the next check.
    pub(crate) fn taken(&mut self, now: Instant, cost: Duration) -> Instant {
        self.since = now;
        self.last_cost = cost;
        now + ADAPTIVE_SNAPSHOT_FIRST.max(cost.div_f64(ADAPTIVE_SNAPSHOT_SHARE))
    }
}

/// What a snapshot of `state_bytes` is expected to take: a fixed part
/// (pause, round trip, the coordinator's bookkeeping) and the bytes at the
/// rate extraction and the put achieve one after the other.
fn estimate(state_bytes: u64) -> Duration {
    ADAPTIVE_SNAPSHOT_FIXED + Duration::from_secs_f64(state_bytes as f64 / SNAPSHOT_BANDWIDTH_GUESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn a_short_query_is_never_snapshotted() {
        let start = Instant::now();
        let pace = Pace::new(start);
        assert_eq!(pace.first_check(), start + ADAPTIVE_SNAPSHOT_FIRST);
        let early = start + ADAPTIVE_SNAPSHOT_FIRST / 2;
        assert!(matches!(pace.check(early, 0), Verdict::CheckAt(at) if at > early));
        // An empty state pays at the first check, a small one soon after.
        assert_eq!(pace.check(pace.first_check(), 0), Verdict::Snapshot);
        let soon = pace.first_check() + Duration::from_millis(200);
        assert!(matches!(pace.check(pace.first_check(), MB), Verdict::CheckAt(at) if at < soon));
        assert_eq!(pace.check(soon, MB), Verdict::Snapshot);
    }

    #[test]
    fn a_large_state_waits_until_it_costs_the_share() {
        let start = Instant::now();
        let pace = Pace::new(start);
        let bytes = 400 * MB;
        let cost = estimate(bytes);
        let Verdict::CheckAt(due) = pace.check(pace.first_check(), bytes) else {
            panic!("a {bytes} B state snapshotted at the first check");
        };
        // The snapshot is due when it costs the share of the time run.
        let share = cost.as_secs_f64() / (due - start).as_secs_f64();
        assert!((share - ADAPTIVE_SNAPSHOT_SHARE).abs() < 1e-6, "{share}");
        assert_eq!(pace.check(due, bytes), Verdict::Snapshot);
    }

    #[test]
    fn a_costly_snapshot_spaces_out_the_next() {
        let start = Instant::now();
        let mut pace = Pace::new(start);
        let end = start + Duration::from_secs(10);
        // Its pause waited for a long pipeline: 1 s for a small state.
        let next = pace.taken(end, Duration::from_secs(1));
        assert_eq!(
            next,
            end + Duration::from_secs(1).div_f64(ADAPTIVE_SNAPSHOT_SHARE)
        );
        let soon = end + Duration::from_secs(5);
        assert_eq!(pace.check(soon, MB), Verdict::CheckAt(next));
        assert_eq!(pace.check(next, MB), Verdict::Snapshot);
    }
}
