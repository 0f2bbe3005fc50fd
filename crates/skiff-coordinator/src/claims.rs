//! What holds workers back from leaving or comes to start them: the
//! distributed queries placed on each worker, the removals under way, and
//! the launcher of local workers (`skiff serve`'s children).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use skiff_node::sync::lock;

/// Starts and forgets local worker processes (`skiff serve`'s children).
pub trait WorkerLauncher: Send + Sync {
    /// Start `n` more workers; each joins when it registers.
    fn start(&self, n: usize) -> std::result::Result<(), String>;
    /// Worker process `pid` leaves for good: do not restart it when it
    /// exits.
    fn forget(&self, pid: u32);
}

/// The running distributed queries, each with the workers it may have
/// tasks on (every worker that took queries when it was planned), and a
/// bell a vacate rings to move it off one of them (`rerun`).
#[derive(Debug, Default)]
pub(crate) struct DistributedRuns {
    runs: Arc<Mutex<Runs>>,
}

#[derive(Debug, Default)]
struct Runs {
    next: u64,
    by_id: BTreeMap<u64, Run>,
}

#[derive(Debug)]
struct Run {
    workers: Vec<u64>,
    vacated: Arc<Notify>,
}

/// The workers being removed: one removal each at a time.
#[derive(Debug, Default)]
pub(crate) struct Removals(pub(crate) Mutex<BTreeSet<u64>>);

/// One distributed query's claim on its workers, released when dropped
/// (with the attempt that holds it).
pub(crate) struct RunGuard {
    runs: Arc<Mutex<Runs>>,
    id: u64,
    vacated: Arc<Notify>,
}

impl DistributedRuns {
    pub(crate) fn enter(&self, workers: impl IntoIterator<Item = u64>) -> RunGuard {
        let vacated = Arc::new(Notify::new());
        let mut runs = lock(&self.runs);
        runs.next += 1;
        let id = runs.next;
        let run = Run {
            workers: workers.into_iter().collect(),
            vacated: Arc::clone(&vacated),
        };
        runs.by_id.insert(id, run);
        RunGuard {
            runs: Arc::clone(&self.runs),
            id,
            vacated,
        }
    }

    pub(crate) fn using(&self, worker: u64) -> usize {
        lock(&self.runs)
            .by_id
            .values()
            .filter(|r| r.workers.contains(&worker))
            .count()
    }

    /// Ring the bell of every run that may have tasks on `worker`; how
    /// many. A run that can move starts again without it; one that cannot
    /// (its rows already went out) runs on, and the caller waits for it.
    pub(crate) fn vacate(&self, worker: u64) -> usize {
        let runs = lock(&self.runs);
        let mut rung = 0;
        for run in runs.by_id.values().filter(|r| r.workers.contains(&worker)) {
            // A permit is kept if the run is not listening yet.
            run.vacated.notify_one();
            rung += 1;
        }
        rung
    }
}

impl RunGuard {
    /// Resolves once a vacate of one of the run's workers rang (at once
    /// if one rang before).
    pub(crate) async fn vacated(&self) {
        self.vacated.notified().await;
    }

    /// The same claim, narrowed to `workers` (those of its first look
    /// that a second look still found usable).
    pub(crate) fn narrow(&self, workers: impl IntoIterator<Item = u64>) {
        if let Some(run) = lock(&self.runs).by_id.get_mut(&self.id) {
            let keep: BTreeSet<u64> = workers.into_iter().collect();
            run.workers.retain(|w| keep.contains(w));
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        lock(&self.runs).by_id.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_count_until_their_guards_drop() {
        let runs = DistributedRuns::default();
        let first = runs.enter([1, 2]);
        let second = runs.enter([2]);
        assert_eq!((runs.using(1), runs.using(2), runs.using(3)), (1, 2, 0));
        drop(first);
        assert_eq!((runs.using(1), runs.using(2)), (0, 1));
        drop(second);
        assert_eq!(runs.using(2), 0);
    }

    #[test]
    fn a_vacate_rings_the_runs_on_its_worker_only_and_is_kept_until_heard() {
        use futures::FutureExt;
        let runs = DistributedRuns::default();
        let on_one = runs.enter([1, 2]);
        let elsewhere = runs.enter([2, 3]);
        assert_eq!(runs.vacate(1), 1);
        // Rung before anyone listened: heard at once, and once.
        assert!(on_one.vacated().now_or_never().is_some(), "not rung");
        assert!(on_one.vacated().now_or_never().is_none(), "rung twice");
        assert!(
            elsewhere.vacated().now_or_never().is_none(),
            "a run not on worker 1 was rung"
        );
        elsewhere.narrow([3]);
        assert_eq!((runs.using(2), runs.using(3)), (1, 1));
        assert_eq!(runs.vacate(2), 1);
    }
}
