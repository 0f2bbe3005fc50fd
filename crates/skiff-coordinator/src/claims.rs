//! What holds workers back from leaving or comes to start them: the
//! distributed queries placed on each worker, the removals under way, and
//! the launcher of local workers (`skiff serve`'s children).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use skiff_node::sync::lock;

/// Starts and forgets local worker processes (`skiff serve`'s children).
pub trait WorkerLauncher: Send + Sync {
    /// Start `n` more workers; each joins when it registers.
    fn start(&self, n: usize) -> std::result::Result<(), String>;
    /// Worker process `pid` leaves for good: do not restart it when it
    /// exits.
    fn forget(&self, pid: u32);
}

/// How many running distributed queries may have tasks on each worker
/// (every worker that took queries when the query was planned).
#[derive(Debug, Default)]
pub(crate) struct DistributedRuns {
    runs: Arc<Mutex<BTreeMap<u64, usize>>>,
}

/// The workers being removed: one removal each at a time.
#[derive(Debug, Default)]
pub(crate) struct Removals(pub(crate) Mutex<BTreeSet<u64>>);

/// One distributed query's claim on its workers, released when dropped
/// (with the query's stream).
pub(crate) struct RunGuard {
    runs: Arc<Mutex<BTreeMap<u64, usize>>>,
    workers: Vec<u64>,
}

impl DistributedRuns {
    pub(crate) fn enter(&self, workers: impl IntoIterator<Item = u64>) -> RunGuard {
        let workers: Vec<u64> = workers.into_iter().collect();
        let mut runs = lock(&self.runs);
        for w in &workers {
            *runs.entry(*w).or_default() += 1;
        }
        RunGuard {
            runs: Arc::clone(&self.runs),
            workers,
        }
    }

    pub(crate) fn using(&self, worker: u64) -> usize {
        lock(&self.runs).get(&worker).copied().unwrap_or(0)
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let mut runs = lock(&self.runs);
        for w in &self.workers {
            if let Some(n) = runs.get_mut(w) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    runs.remove(w);
                }
            }
        }
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
}
