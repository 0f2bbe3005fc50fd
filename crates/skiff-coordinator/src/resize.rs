//! Workers joining and leaving online (issue 16, VectorH §5): each change
//! of the live workers makes the partition map's next epoch (`partitions`).
//! A worker joins by registering (`skiff worker --coordinator ADDR`, or
//! `skiff.add_workers(n)`, which asks the launcher of `skiff serve` for
//! local ones). `skiff.remove_worker(w)` first vacates it (its
//! single-worker queries migrate away, its distributed queries run again
//! without it; it takes no new query and no new distributed task), then
//! waits until nothing runs there, then removes it: its partitions move to
//! the others, and its next heartbeat tells it to leave. Nothing waits for a
//! cluster-wide pause: queries planned before keep their epoch's map.

use std::sync::Arc;
use std::time::{Duration, Instant};

use skiff_flight::protocol::ShipTable;
use tracing::{info, warn};

use super::vacate::{self, Vacate};
use crate::config::{ADD_WORKERS_MAX, REMOVE_WAIT_MAX};
use crate::inner::Inner;
use crate::matching;
use skiff_node::error::{Result, ServerError, SqlState};
use skiff_node::sync::lock;

/// How often a removal checks whether the worker is free.
const POLL: Duration = Duration::from_millis(5);

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

impl Inner {
    /// The partition manager for the live workers now (a new epoch when
    /// they changed).
    pub(crate) fn partition_map(&self) -> Arc<skiff_cluster::PartitionManager> {
        let (map, moves) = self
            .partitions
            .follow_moves(|| self.membership.live_workers());
        if moves.is_empty() || !self.matching.on() {
            return map;
        }
        let addresses = matching::addresses(&self.membership, None);
        if matching::any_sender(&addresses, &moves) {
            // Detached: the first queries after the resize do not wait
            // for it (`matching`); `skiff.matchings` shows it running.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let ctx = self.engine.context().clone();
                let log = Arc::clone(&self.matching);
                let id = log.begin(format!("epoch {}", map.epoch()), moves.len());
                let pause_ms = log.pause_ms();
                runtime.spawn(async move {
                    let shipped = matching::ship(&ctx, &addresses, &moves, pause_ms).await;
                    log.finish(id, shipped);
                });
            }
        }
        map
    }
}

/// What worker `id` owns of every hash-partitioned table whose class the
/// map has (with no partitions where it owns none), for its heartbeat's
/// reply.
pub(crate) async fn owned_by(inner: &Inner, id: u64) -> Vec<ShipTable> {
    let map = inner.partition_map();
    let mut owned = Vec::new();
    for (class, locations) in matching::locations_by_class(inner.engine.context()).await {
        let Some(mapping) = map.mapping(class) else {
            continue;
        };
        let partitions: Vec<u32> = mapping.owned_by(id).collect();
        for location in locations {
            owned.push(ShipTable {
                location,
                partitions: partitions.clone(),
            });
        }
    }
    owned
}
