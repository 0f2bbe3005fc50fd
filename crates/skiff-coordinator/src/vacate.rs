//! Vacating a worker: `skiff.drain(w)`, a spot notice, or SIGTERM to the
//! worker. It takes no new query, every query it runs is asked to migrate
//! at its next pipeline boundary, and the time until it holds no query is
//! the vacate latency (`skiff.workers.vacate_ms`, and the log). A query
//! whose result already streams cannot move (no boundary is left): it
//! finishes where it is, and the vacate waits for it. Under a spot notice
//! the migrations abort running pipelines (they are redone on the target)
//! once half the notice has passed. A distributed query with tasks there
//! runs again from the start without the worker (`rerun`), unless its
//! rows already go out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use skiff_flight::protocol::HandoffReason;
use tracing::{info, warn};

use super::relay::request_handoff;
use crate::config::VACATE_WAIT_MAX;
use crate::inner::Inner;
use skiff_node::error::{Result, ServerError, SqlState};

/// How often a vacate checks whether the worker is empty.
const POLL: Duration = Duration::from_millis(2);

/// How a vacate treats pipelines that are running.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Vacate {
    /// Let them finish: nothing is redone.
    Finish,
    /// Abort them: the worker empties sooner, the target redoes them.
    Abort,
    /// Finish, and abort when half of this notice has passed.
    Notice(Duration),
}

/// Start vacating worker `id`.
pub(crate) fn vacate(inner: &Arc<Inner>, id: u64, how: Vacate) -> Result<()> {
    if !inner.membership.start_draining(id) {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            format!("no worker {id}"),
        ));
    }
    let started = Instant::now();
    let moved =
        ask_all(inner, id, matches!(how, Vacate::Abort)) + inner.distributed_runs.vacate(id);
    info!(worker = id, queries = moved, ?how, "vacating worker");
    let notice = match how {
        Vacate::Notice(notice) => Some(notice),
        Vacate::Finish | Vacate::Abort => None,
    };
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| ServerError::internal(format!("no runtime to vacate: {e}")))?;
    let inner = Arc::clone(inner);
    // Detached: the outcome is recorded on the worker and in the log.
    runtime.spawn(async move {
        let escalate_at = notice.map(|n| started + n / 2);
        let mut escalated = false;
        loop {
            if started.elapsed() >= VACATE_WAIT_MAX {
                warn!(
                    worker = id,
                    queries = queries_on(&inner, id),
                    "worker not empty after {VACATE_WAIT_MAX:?}; stopped waiting (it stays drained)"
                );
                return;
            }
            if queries_on(&inner, id) + inner.distributed_runs.using(id) == 0 {
                let ms = started.elapsed().as_millis() as u64;
                inner.membership.vacated(id, ms);
                info!(worker = id, queries = moved, ms, "worker vacated");
                return;
            }
            if !escalated && escalate_at.is_some_and(|at| Instant::now() >= at) {
                escalated = true;
                let left = ask_all(&inner, id, true);
                warn!(
                    worker = id,
                    queries = left,
                    "spot notice half gone: migrating now"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    });
    Ok(())
}

/// Ask every query on worker `id` to migrate; returns how many were asked.
fn ask_all(inner: &Arc<Inner>, id: u64, abort: bool) -> usize {
    let mut asked = 0;
    for entry in inner.queries.live() {
        if entry.info().worker.is_some_and(|(w, _)| w == id) {
            let _ = request_handoff(inner, entry.id, HandoffReason::Migrate, None, abort);
            asked += 1;
        }
    }
    asked
}

pub(crate) fn queries_on(inner: &Inner, id: u64) -> usize {
    inner
        .queries
        .live()
        .iter()
        .filter(|e| e.info().worker.is_some_and(|(w, _)| w == id))
        .count()
}
