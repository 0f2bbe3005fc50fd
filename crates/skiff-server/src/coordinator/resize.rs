//! Workers joining and leaving online (issue 16, VectorH §5): each change
//! of the live workers makes the partition map's next epoch (`partitions`).
//! A worker joins by registering (`skiff worker --coordinator ADDR`, or
//! `skiff.add_workers(n)`, which asks the launcher of `skiff serve` for
//! local ones). `skiff.remove_worker(w)` first vacates it (its
//! single-worker queries migrate away; it takes no new query and no new
//! distributed task), then waits for the distributed queries that were
//! placed on it to end, then removes it: its partitions move to the
//! others, and its next heartbeat tells it to leave. Nothing waits for a
//! cluster-wide pause: queries planned before keep their epoch's map.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::queries::lock;
use super::vacate::{self, Vacate};
use super::{Inner, matching};
use crate::config::{ADD_WORKERS_MAX, REMOVE_WAIT_MAX};
use crate::error::{Result, ServerError, SqlState};

/// How often a removal checks whether the worker is free.
const POLL: Duration = Duration::from_millis(5);

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
pub(crate) struct Removals(Mutex<BTreeSet<u64>>);

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

    fn using(&self, worker: u64) -> usize {
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

/// `skiff.add_workers(n)`: start `n` local workers.
pub(crate) fn add_workers(inner: &Inner, n: usize) -> Result<()> {
    if n == 0 || n > ADD_WORKERS_MAX {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            format!("skiff.add_workers takes 1 to {ADD_WORKERS_MAX} workers, not {n}"),
        ));
    }
    let Some(launcher) = inner.launcher.get() else {
        return Err(ServerError::new(
            SqlState::FeatureNotSupported,
            "this coordinator starts no workers (only `skiff serve` does): start \
             `skiff worker --coordinator ADDR` where the new worker should run",
        ));
    };
    launcher
        .start(n)
        .map_err(|e| ServerError::internal(format!("cannot start workers: {e}")))?;
    info!(workers = n, "starting workers");
    Ok(())
}

/// `skiff.remove_worker(w)`: vacate worker `id`, wait (in the background,
/// up to [`REMOVE_WAIT_MAX`]) until it runs nothing, then remove it. The
/// last live worker is not removed (drain it instead), nor one already
/// being removed.
pub(crate) fn remove_worker(inner: &Arc<Inner>, id: u64) -> Result<()> {
    let refused = |why: String| Err(ServerError::new(SqlState::InvalidParameterValue, why));
    if inner.membership.live_workers() == [id] {
        return refused(format!(
            "worker {id} is the last one: nobody would own its partitions or run queries \
             (skiff.drain stops it taking queries)"
        ));
    }
    if !lock(&inner.removals.0).insert(id) {
        return refused(format!("worker {id} is already being removed"));
    }
    if let Err(e) = vacate::vacate(inner, id, Vacate::Finish) {
        lock(&inner.removals.0).remove(&id);
        return Err(e);
    }
    let started = Instant::now();
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| ServerError::internal(format!("no runtime to remove a worker: {e}")))?;
    let inner = Arc::clone(inner);
    // Detached: the outcome shows in skiff.workers and the log.
    runtime.spawn(async move {
        finish_removal(&inner, id, started).await;
        lock(&inner.removals.0).remove(&id);
    });
    Ok(())
}

/// Wait until worker `id` runs nothing (or the deadline), then remove it.
async fn finish_removal(inner: &Arc<Inner>, id: u64, started: Instant) {
    loop {
        if !inner.membership.live_workers().contains(&id) {
            // Dead meanwhile: the failure detector moved its partitions.
            warn!(worker = id, "worker died before its removal");
            return;
        }
        let busy = vacate::queries_on(inner, id) + inner.distributed_runs.using(id);
        if busy == 0 {
            break;
        }
        if started.elapsed() >= REMOVE_WAIT_MAX {
            warn!(
                worker = id,
                queries = busy,
                "worker still busy after {REMOVE_WAIT_MAX:?}; removing it anyway"
            );
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    // The leaving worker's blocks go to its partitions' next owners
    // while it is still up: the survivors merge them into the room they
    // have (`matching`).
    if inner.matching.on() {
        let rest: Vec<u64> = inner
            .membership
            .live_workers()
            .into_iter()
            .filter(|w| *w != id)
            .collect();
        let moves: Vec<_> = inner
            .partitions
            .moves_to(&rest)
            .into_iter()
            .filter(|m| m.from == Some(id))
            .collect();
        if !moves.is_empty() {
            let ctx = inner.engine.context().clone();
            let addresses = matching::addresses(&inner.membership, Some(id));
            let record = inner
                .matching
                .begin(format!("worker {id} leaving"), moves.len());
            let pause_ms = inner.matching.pause_ms();
            let shipped = matching::ship(&ctx, &addresses, &moves, pause_ms).await;
            inner.matching.finish(record, shipped);
        }
    }
    // Forgotten before removed: the worker leaves at its next heartbeat
    // after the removal, and must not be restarted then.
    let pid = inner
        .membership
        .nodes()
        .into_iter()
        .find(|n| n.id == id)
        .map(|n| n.pid);
    if let (Some(pid), Some(launcher)) = (pid, inner.launcher.get()) {
        launcher.forget(pid);
    }
    if !inner.membership.remove(id) {
        warn!(worker = id, "worker was gone before its removal");
    }
    let map = inner.partition_map();
    info!(
        worker = id,
        epoch = map.epoch(),
        ms = started.elapsed().as_millis() as u64,
        "worker removed"
    );
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
