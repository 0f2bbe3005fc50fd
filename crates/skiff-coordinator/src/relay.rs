//! The coordinator's side of state separation: it relays a query's result
//! stream from whichever worker runs it. When the worker hands the query
//! off (a migration, a suspension), the relay starts the remaining plan on
//! the next worker and goes on reading there, so the client sees one
//! uninterrupted result. A hand-off comes before the result pipeline
//! starts, so no row has been relayed yet and none is sent twice. When a
//! worker dies, a query with a snapshot continues from it the same way;
//! when state is lost or damaged, the query starts over from its plan.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::record_batch::RecordBatch;
use arrow_flight::Ticket;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use datafusion::error::DataFusionError;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use skiff_flight::protocol::{Handoff, HandoffReason, PauseQuery, PauseReply, RunQuery, action};
use tracing::{debug, info, warn};

use super::cost::{Choice, Snapshot, choose};
use super::membership::Placement;
use super::queries::HopKind;
use super::workers::{flight_error, lost_or};
use crate::config::SNAPSHOT_DELETE_TIMEOUT;
use crate::inner::Inner;
use crate::queries::{QueryEntry, QueryInfo, QueryStatus};
use skiff_engine::options::{REPEATING_HOOKS, TEST_HOOKS};
use skiff_flight::delete_state;
use skiff_node::error::{Cause, Result, ServerError, SqlState};

/// One run of (part of) the query on one worker.
struct Attempt {
    worker: u64,
    data: FlightDataDecoder,
}

/// The relay of one query's result.
pub(crate) struct Relay {
    inner: Arc<Inner>,
    entry: Arc<QueryEntry>,
    /// The query as first shipped, without its one-shot triggers: what a
    /// restart runs.
    original: RunQuery,
    current: Option<Attempt>,
}

impl Relay {
    /// Ship `ticket` and start relaying.
    pub(crate) async fn start(
        inner: Arc<Inner>,
        entry: Arc<QueryEntry>,
        ticket: RunQuery,
        placement: Placement,
    ) -> Result<(Self, (u64, String))> {
        let retry = ticket
            .options
            .get("skiff.retry_on_worker_loss")
            .is_none_or(|v| !v.eq_ignore_ascii_case("false"));
        entry.update(|info| info.retry_on_loss = retry);
        let attempt = dispatch(&inner, &entry, &ticket, placement).await?;
        let worker = (attempt.worker, address(&entry));
        let mut original = ticket;
        original.options = without_triggers(&original.options);
        let relay = Self {
            inner,
            entry,
            original,
            current: Some(attempt),
        };
        Ok((relay, worker))
    }

    /// The next batch of the result, from whichever worker has the query.
    pub(crate) async fn next(&mut self) -> Option<std::result::Result<RecordBatch, ServerError>> {
        loop {
            let attempt = self.current.as_mut()?;
            let worker = attempt.worker;
            let message = tokio::select! {
                biased;
                () = self.entry.lost(worker) => Some(Err(FlightError::Tonic(Box::new(
                    tonic::Status::unavailable("the worker was declared dead"),
                )))),
                message = attempt.data.next() => message,
            };
            let decoded = match message {
                None => {
                    self.current = None;
                    forget_snapshot(&self.inner, &self.entry);
                    return None;
                }
                Some(Ok(decoded)) => decoded,
                Some(Err(e)) => {
                    let error = flight_error(worker, e);
                    if let Err(e) = self.after_failure(worker, error).await {
                        self.current = None;
                        forget_snapshot(&self.inner, &self.entry);
                        return Some(Err(e));
                    }
                    continue;
                }
            };
            match decoded.payload {
                DecodedPayload::RecordBatch(batch) => return Some(Ok(batch)),
                DecodedPayload::None if !decoded.inner.app_metadata.is_empty() => {
                    let handoff = match Handoff::decode(decoded.inner.app_metadata) {
                        Ok(handoff) => handoff,
                        Err(e) => {
                            return Some(Err(ServerError::internal(format!(
                                "bad hand-off from worker {worker}: {e}"
                            ))));
                        }
                    };
                    if handoff.reason == HandoffReason::Snapshot as i32 {
                        let elapsed_ms = self.entry.elapsed().as_secs_f64() * 1000.0;
                        self.entry
                            .record(HopKind::Snapshot, Some(worker), Some(&handoff));
                        let mut older = None;
                        self.entry.update(|info| {
                            info.snapshots += 1;
                            info.state_bytes += handoff.state_bytes;
                            older = info.snapshot.replace(handoff);
                            info.snapshot_elapsed_ms = elapsed_ms;
                            // Progress: losses from here on are a new row.
                            info.losses_in_a_row = 0;
                        });
                        if let Some(older) = older {
                            forget(&self.inner, self.entry.id, &older);
                        }
                        continue;
                    }
                    self.current = None;
                    self.inner.membership.release(worker);
                    self.entry.update(|info| info.worker = None);
                    match self.after_handoff(worker, handoff).await {
                        Ok(attempt) => self.current = Some(attempt),
                        Err(e) => return Some(Err(e)),
                    }
                }
                _ => {}
            }
        }
    }

    /// Continue after the worker handed the query off.
    async fn after_handoff(&mut self, source: u64, handoff: Handoff) -> Result<Attempt> {
        let id = self.entry.id;
        let info = self.entry.info();
        if handoff.state_key.is_empty() {
            let placement = info
                .migrate_to
                .map_or(Placement::Avoid(source), Placement::Prefer);
            if let Some(snapshot) = info.snapshot.filter(|_| info.use_snapshot) {
                info!(query = id, "continuing from the older snapshot, as chosen");
                self.entry
                    .record(HopKind::Migrated, Some(source), Some(&snapshot));
                self.entry.update(|info| {
                    info.migrations += 1;
                    info.use_snapshot = false;
                    info.migrate_to = None;
                    info.state_bytes += snapshot.state_bytes;
                });
                return self.continue_from(&snapshot, placement).await;
            }
            warn!(query = id, error = %handoff.error, "state not handed off; starting over");
            return self.restart(placement, &handoff.error).await;
        }
        self.inner
            .bandwidth
            .record(handoff.state_bytes, handoff.extract_ms + handoff.put_ms);
        let reason = HandoffReason::try_from(handoff.reason).unwrap_or(HandoffReason::Migrate);
        let placement = match reason {
            HandoffReason::Suspend => {
                self.entry
                    .record(HopKind::Suspended, Some(source), Some(&handoff));
                self.entry.update(|info| {
                    info.suspensions += 1;
                    info.state_bytes += handoff.state_bytes;
                    info.status = QueryStatus::Suspended;
                    info.awaits_resume = true;
                    // "at N ms" tells a client when the boundary was reached
                    // (the bench's restart baseline).
                    info.decision = describe("suspended", &handoff);
                });
                info!(query = id, key = %handoff.state_key, "query suspended");
                let token = self.entry.token().clone();
                tokio::select! {
                    () = self.entry.resumed() => {}
                    () = token.cancelled() => return Err(self.entry.cancel_reason()),
                }
                // `resume` marked it running and chose where it goes.
                let target = self.entry.info().migrate_to;
                self.entry.update(|info| info.migrate_to = None);
                info!(query = id, "query resumed");
                self.entry.record(HopKind::Resumed, None, None);
                target.map_or(Placement::Any, Placement::Prefer)
            }
            _ => {
                let target = self.entry.info().migrate_to;
                self.entry
                    .record(HopKind::Migrated, Some(source), Some(&handoff));
                self.entry.update(|info| {
                    info.migrations += 1;
                    info.state_bytes += handoff.state_bytes;
                    info.migrate_to = None;
                    let chosen = std::mem::take(&mut info.decision);
                    let chosen = if chosen.starts_with("cost model") {
                        format!("; {chosen}")
                    } else {
                        String::new()
                    };
                    info.decision = describe("migrated", &handoff) + &chosen;
                });
                target.map_or(Placement::Avoid(source), Placement::Prefer)
            }
        };
        self.continue_from(&handoff, placement).await
    }

    /// Start the remaining plan of `handoff` on a worker; start over when
    /// that fails (the state is gone, damaged or unreachable).
    async fn continue_from(&mut self, handoff: &Handoff, placement: Placement) -> Result<Attempt> {
        self.hold_until_a_worker().await?;
        let ticket = RunQuery {
            plan: handoff.plan.clone(),
            state_key: handoff.state_key.clone(),
            ..self.original.clone()
        };
        match dispatch(&self.inner, &self.entry, &ticket, placement).await {
            Ok(attempt) => {
                info!(
                    query = self.entry.id,
                    worker = attempt.worker,
                    key = %handoff.state_key,
                    "query continues from its state"
                );
                Ok(attempt)
            }
            Err(e) if e.state == SqlState::QueryCanceled => Err(e),
            Err(e) => {
                warn!(
                    query = self.entry.id,
                    key = %handoff.state_key,
                    error = %e,
                    "cannot continue from the state; starting the query over"
                );
                self.restart(Placement::Any, &e.message).await
            }
        }
    }

    /// The worker's stream broke. When the worker is lost and no row was
    /// sent yet, continue from the latest snapshot, or else start over on
    /// another worker (`skiff.retry_on_worker_loss`, a bounded number of
    /// times); otherwise fail.
    async fn after_failure(&mut self, worker: u64, error: ServerError) -> Result<()> {
        let lost = matches!(
            error.state,
            SqlState::CannotConnectNow | SqlState::ConnectionFailure
        );
        if !lost || !self.entry.recoverable() {
            return Err(error);
        }
        self.current = None;
        self.inner.membership.release(worker);
        self.entry.record(HopKind::WorkerLost, Some(worker), None);
        // Its stream broke: do not wait for its heartbeats to stop.
        if self.inner.membership.mark_dead(worker) {
            self.inner.node_lost(worker);
        }
        let Some(snapshot) = self.entry.info().snapshot else {
            self.entry.update(|info| {
                info.worker = None;
                info.losses_in_a_row += 1;
            });
            warn!(
                query = self.entry.id,
                worker, "worker lost before any row was sent; starting the query over"
            );
            let why = format!("worker {worker} was lost before any row was sent");
            self.current = Some(self.restart(Placement::Avoid(worker), &why).await?);
            return Ok(());
        };
        self.entry.update(|info| {
            info.worker = None;
            info.losses_in_a_row += 1;
            info.migrations += 1;
            info.state_bytes += snapshot.state_bytes;
            info.decision = format!(
                "worker {worker} lost; continued from the snapshot after {}/{} pipelines",
                snapshot.pipelines_finished, snapshot.pipelines_total
            );
        });
        warn!(
            query = self.entry.id,
            worker, "worker lost; continuing from the snapshot"
        );
        let attempt = self
            .continue_from(&snapshot, Placement::Avoid(worker))
            .await?;
        self.current = Some(attempt);
        Ok(())
    }

    /// With no worker to run it (the last one was drained or lost), a
    /// query that is moving on (its state in the cache, or starting over)
    /// is suspended until a worker can take it: one registers, restarts or
    /// is undrained. Only a cancel, the statement timeout or the client
    /// going away end the wait; the client just waits longer.
    async fn hold_until_a_worker(&mut self) -> Result<()> {
        if self.inner.membership.any_usable_worker() {
            return Ok(());
        }
        let id = self.entry.id;
        warn!(
            query = id,
            "no worker takes queries; suspended until one does"
        );
        self.entry.record(HopKind::Suspended, None, None);
        self.entry.update(|info| {
            info.status = QueryStatus::Suspended;
            info.suspensions += 1;
            info.decision = "suspended: no worker takes queries; resumes when one does".into();
        });
        let token = self.entry.token().clone();
        while !self.inner.membership.any_usable_worker() {
            tokio::select! {
                () = token.cancelled() => return Err(self.entry.cancel_reason()),
                () = tokio::time::sleep(WORKER_POLL) => {}
            }
        }
        self.entry.update(|info| info.status = QueryStatus::Running);
        self.entry.record(HopKind::Resumed, None, None);
        info!(query = id, "a worker takes queries again; resuming");
        Ok(())
    }

    async fn restart(&mut self, placement: Placement, why: &str) -> Result<Attempt> {
        forget_snapshot(&self.inner, &self.entry);
        self.hold_until_a_worker().await?;
        self.entry.record(HopKind::StartedOver, None, None);
        self.entry.update(|info| {
            info.restarts += 1;
            info.snapshot = None;
            info.migrate_to = None;
            info.decision = if info.decision.starts_with("cost model") {
                format!("started over; {}", info.decision)
            } else {
                format!("started over: {why}")
            };
        });
        dispatch(&self.inner, &self.entry, &self.original, placement).await
    }
}

/// `skiff.suspend` and `skiff.migrate` of a distributed query, which
/// moves only by running again from the start (`rerun`): a suspension
/// lets its workers go and runs it again on resume, on the workers there
/// are then; a migration has no one worker to go to, and is refused.
fn move_distributed(entry: &QueryEntry, reason: HandoffReason, info: &QueryInfo) -> Result<()> {
    let id = entry.id;
    if reason != HandoffReason::Suspend {
        return Err(ServerError::new(
            SqlState::FeatureNotSupported,
            format!(
                "query {id} runs distributed over several workers and cannot migrate to one: \
                 skiff.suspend({id}) and skiff.resume({id}) run it again on the workers there \
                 are then, and skiff.remove_worker or skiff.drain move it off a worker"
            ),
        ));
    }
    if info.rows_released {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            format!("query {id} already sends its rows to its client: it can no longer suspend"),
        ));
    }
    if info.status == QueryStatus::Suspended {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            format!("query {id} is suspended already"),
        ));
    }
    entry.ask_suspend();
    Ok(())
}

fn address(entry: &QueryEntry) -> String {
    entry.info().worker.map(|(_, a)| a).unwrap_or_default()
}

/// The query no longer needs its latest snapshot (it ended, or starts
/// over): delete it from the state cache.
fn forget_snapshot(inner: &Inner, entry: &QueryEntry) {
    let mut snapshot = None;
    entry.update(|info| snapshot = info.snapshot.take());
    if let Some(snapshot) = snapshot {
        forget(inner, entry.id, &snapshot);
    }
}

/// Delete a snapshot nobody will continue from, so that adaptive
/// snapshots (on by default) do not fill the cache until their TTL. In the
/// background: neither the query nor its client waits for the cache.
fn forget(inner: &Inner, query: u64, snapshot: &Handoff) {
    let Some(cache) = inner.membership.memory_node() else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let key = snapshot.state_key.clone();
    // Detached: a failure leaves the snapshot to its TTL, and says so.
    runtime.spawn(async move {
        let deleted =
            tokio::time::timeout(SNAPSHOT_DELETE_TIMEOUT, delete_state(&cache, &key)).await;
        match deleted {
            Ok(Ok(())) => debug!(query, key = %key, "snapshot deleted"),
            Ok(Err(e)) => warn!(query, key = %key, error = %e.message(), "snapshot not deleted"),
            Err(_) => warn!(
                query,
                key = %key,
                "snapshot not deleted: the state cache did not answer in time"
            ),
        }
    });
}

/// The session's options without its one-shot test hooks: what a query
/// that continues or starts over runs with.
fn without_triggers(options: &HashMap<String, String>) -> HashMap<String, String> {
    options
        .iter()
        .filter(|(k, _)| {
            let hook = k.as_str();
            !TEST_HOOKS.contains(&hook) || REPEATING_HOOKS.contains(&hook)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// How often a query waiting for a worker looks for one.
const WORKER_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Ship `ticket` to a worker chosen by `placement`, waiting up to
/// [`Limits::worker_wait`](crate::config::Limits) for one to be alive; the
/// worker is assigned until the caller releases it.
async fn dispatch(
    inner: &Arc<Inner>,
    entry: &QueryEntry,
    ticket: &RunQuery,
    placement: Placement,
) -> Result<Attempt> {
    let mut ticket = ticket.clone();
    ticket.state_cache = inner.membership.memory_node().unwrap_or_default();
    let wait = inner.limits.worker_wait;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let Some((worker, addr)) = inner.membership.assign_to(placement) else {
            // Workers restart, register late or come back from a drain:
            // wait for one rather than fail at once.
            if tokio::time::Instant::now() >= deadline {
                return Err(ServerError::new(
                    SqlState::CannotConnectNow,
                    format!(
                        "no worker is available to run the query (waited {:.1} s, \
                         --worker-wait-timeout)",
                        wait.as_secs_f64()
                    ),
                ));
            }
            let token = entry.token().clone();
            tokio::select! {
                () = token.cancelled() => return Err(entry.cancel_reason()),
                () = tokio::time::sleep(WORKER_POLL) => {}
            }
            continue;
        };
        match ship(inner, entry, &ticket, worker, &addr).await {
            // A worker that cannot be reached is gone (killed, restarting):
            // do not wait for its heartbeats to stop, try another.
            Err(e) if e.cause == Cause::WorkerGone => {
                warn!(worker, error = %e, "worker unreachable; declared dead");
                if inner.membership.mark_dead(worker) {
                    inner.node_lost(worker);
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(e);
                }
            }
            shipped => return shipped,
        }
    }
}

/// A stored hand-off as `skiff.queries.decision` shows it.
fn describe(what: &str, handoff: &Handoff) -> String {
    format!(
        "{what} after {}/{} pipelines at {} ms: {} B of state, paused in {} ms \
         (extract {} ms, store {} ms)",
        handoff.pipelines_finished,
        handoff.pipelines_total,
        handoff.ran_ms,
        handoff.state_bytes,
        handoff.pause_ms,
        handoff.extract_ms,
        handoff.put_ms
    )
}

async fn ship(
    inner: &Arc<Inner>,
    entry: &QueryEntry,
    ticket: &RunQuery,
    worker: u64,
    addr: &str,
) -> Result<Attempt> {
    entry.update(|info| info.worker = Some((worker, addr.to_string())));
    entry.record(HopKind::Runs, Some(worker), None);
    let started = async {
        let mut client = inner.workers.get(addr).await?;
        let response = client
            .do_get(Ticket::new(ticket.encode_to_vec()))
            .await
            .map_err(|s| lost_or(worker, &s))?;
        Ok::<_, ServerError>(response.into_inner())
    };
    match started.await {
        Ok(flight) => {
            info!(query = entry.id, worker, "query shipped");
            let data = FlightDataDecoder::new(flight.map_err(FlightError::from));
            Ok(Attempt { worker, data })
        }
        Err(e) => {
            inner.membership.release(worker);
            entry.update(|info| info.worker = None);
            Err(e)
        }
    }
}

/// Ask the worker running query `id` to hand it off for `reason`. Returns
/// at once; the hand-off shows in `skiff.queries` when it happens.
pub(crate) fn request_handoff(
    inner: &Arc<Inner>,
    id: u64,
    reason: HandoffReason,
    target: Option<u64>,
    abort: bool,
) -> Result<()> {
    let Some(entry) = inner.queries.get(id) else {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            format!("no query {id} is running"),
        ));
    };
    let info = entry.info();
    if info.distributed {
        return move_distributed(&entry, reason, &info);
    }
    if reason == HandoffReason::Migrate && info.status == QueryStatus::Suspended {
        // A suspended query runs nowhere: migrating it resumes it there.
        if entry.resume(target) {
            return Ok(());
        }
        if entry.info().status == QueryStatus::Suspended {
            return Err(ServerError::new(
                SqlState::CannotConnectNow,
                format!(
                    "query {id} waits for a worker that takes queries; it goes on when one does"
                ),
            ));
        }
        // It was resumed meanwhile: it moves like any running query.
    }
    let Some((_, addr)) = entry.info().worker else {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            format!("query {id} does not run on a worker"),
        ));
    };
    let mut discard_state = false;
    if reason == HandoffReason::Migrate {
        let info = entry.info();
        let snapshot = info.snapshot.as_ref().map(|handoff| Snapshot {
            state_bytes: handoff.state_bytes,
            elapsed_ms: info.snapshot_elapsed_ms,
        });
        let elapsed_ms = entry.elapsed().as_secs_f64() * 1000.0;
        let estimate = choose(
            info.progress.as_ref(),
            elapsed_ms,
            snapshot,
            inner.bandwidth.get(),
        );
        info!(query = id, decision = %estimate.describe(), "leaving the worker");
        discard_state = estimate.choice != Choice::MigrateNow;
        entry.update(|info| {
            info.migrate_to = target;
            info.use_snapshot = estimate.choice == Choice::FromSnapshot;
            info.decision = estimate.describe();
        });
    }
    let inner = Arc::clone(inner);
    let ask = async move {
        let request = PauseQuery {
            query_id: id,
            reason: reason as i32,
            abort,
            discard_state,
        };
        let reply = match inner.workers.get(&addr).await {
            Ok(mut client) => {
                skiff_flight::do_action::<_, PauseReply>(&mut client, action::PAUSE, &request)
                    .await
                    .map_err(|s| s.message().to_string())
            }
            Err(e) => Err(e.message),
        };
        let detail = match reply {
            Ok(reply) if reply.accepted => return,
            Ok(reply) => reply.detail,
            Err(e) => e,
        };
        info!(query = id, ?reason, %detail, "hand-off not possible");
        entry.update(|info| info.decision = format!("{reason:?} refused: {detail}"));
    };
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| ServerError::internal(format!("no runtime for the hand-off: {e}")))?;
    // Detached: the outcome is recorded on the query, nothing waits for it.
    runtime.spawn(ask);
    Ok(())
}

/// Wrap the relay as a batch stream.
pub(crate) fn stream(
    relay: Relay,
) -> impl futures::Stream<Item = std::result::Result<RecordBatch, DataFusionError>> {
    futures::stream::unfold(relay, |mut relay| async move {
        relay
            .next()
            .await
            .map(|item| (item.map_err(DataFusionError::from), relay))
    })
}
