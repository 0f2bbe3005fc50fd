//! The coordinator's record of queries: running ones, and the most recent
//! finished ones, for `skiff.queries` and cancellation.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use skiff_node::sync::lock;
use std::time::{Duration, Instant, SystemTime};

use skiff_flight::protocol::{Handoff, RunningQuery, ScanFiles};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::placement::Routes;
use skiff_node::error::ServerError;
use skiff_node::scan_progress::{ScanKey, ScanTally};

/// Finished queries kept for `skiff.queries`.
const RECENT_KEPT: usize = 200;
/// Steps kept in one query's timeline; a query that moves more often
/// keeps its first steps and its last ones.
const TIMELINE_KEPT: usize = 64;
// `QueryEntry::record` keeps the first step when it drops one.
const _: () = assert!(TIMELINE_KEPT >= 2);

/// One step of a query's life on the workers (the console's timeline of
/// hand-offs).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Hop {
    /// Milliseconds since the query began.
    pub at_ms: u64,
    pub kind: HopKind,
    /// The worker the step happened on: where it runs from now, or where
    /// the hand-off came from.
    pub worker: Option<u64>,
    /// State shipped through the state cache.
    pub state_bytes: u64,
    /// A hand-off's pause, extraction and upload, milliseconds.
    pub took_ms: u64,
    pub pipelines_finished: u32,
    pub pipelines_total: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HopKind {
    /// The query started (or continued) on `worker`.
    Runs,
    /// It handed its state off to move to another worker.
    Migrated,
    Suspended,
    Resumed,
    Snapshot,
    WorkerLost,
    StartedOver,
}

/// Where a query is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryStatus {
    Planning,
    Running,
    /// Handed off to the state cache; waits for `skiff.resume(id)`.
    Suspended,
    Finished,
    Failed(String),
    Canceled(String),
}

impl QueryStatus {
    pub fn name(&self) -> &'static str {
        match self {
            QueryStatus::Planning => "planning",
            QueryStatus::Running => "running",
            QueryStatus::Suspended => "suspended",
            QueryStatus::Finished => "finished",
            QueryStatus::Failed(_) => "failed",
            QueryStatus::Canceled(_) => "canceled",
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(
            self,
            QueryStatus::Finished | QueryStatus::Failed(_) | QueryStatus::Canceled(_)
        )
    }
}

/// The mutable part of a query's record.
#[derive(Clone, Debug)]
pub struct QueryInfo {
    pub status: QueryStatus,
    /// Worker node id and address, once assigned; `None` while planning or
    /// when the coordinator runs the query itself (system tables).
    pub worker: Option<(u64, String)>,
    pub rows_sent: u64,
    /// The worker's last report on the query, when it came (milliseconds
    /// since the query began) and from which worker.
    pub progress: Option<RunningQuery>,
    pub progress_at_ms: u64,
    pub progress_from: Option<u64>,
    pub ended: Option<Instant>,
    /// State separation: hand-offs that moved the query to another worker,
    /// suspensions, starts from scratch after a failed hand-off, snapshots
    /// taken, and state bytes shipped through the state cache.
    pub migrations: u32,
    pub suspensions: u32,
    pub restarts: u32,
    pub snapshots: u32,
    pub state_bytes: u64,
    /// The last decision taken about moving the query, with its reasons.
    pub decision: String,
    /// A distributed query's stages and where their tasks run.
    pub(crate) routes: Option<Arc<Routes>>,
    /// How far a distributed query's scans have got.
    pub(crate) scans: Option<ScansSeen>,
    /// Where an asked-for migration goes.
    pub migrate_to: Option<u64>,
    /// Suspended by a hand-off (`skiff.suspend`, or the test hook
    /// `skiff.suspend_after_pipelines`): only [`QueryEntry::resume`] wakes
    /// it. A query held for lack of a worker is `Suspended` too, but goes
    /// on by itself when one takes queries.
    pub awaits_resume: bool,
    /// The latest snapshot of the query's state, and the query's running
    /// time when it arrived.
    pub snapshot: Option<Handoff>,
    pub snapshot_elapsed_ms: f64,
    /// The cost model chose to continue from the snapshot.
    pub use_snapshot: bool,
    /// Start over when the worker dies and no snapshot carries the query
    /// on (`skiff.retry_on_worker_loss`); how often it did.
    pub retry_on_loss: bool,
    /// A distributed query (`rerun`): it moves by running again, and can
    /// no longer once its rows went out (`rows_released`).
    pub distributed: bool,
    pub rows_released: bool,
    /// Workers lost since the latest snapshot (or the start):
    /// [`WORKER_LOSSES_IN_A_ROW`](crate::config::WORKER_LOSSES_IN_A_ROW)
    /// bounds them.
    pub losses_in_a_row: u32,
    /// Where the query ran and how it moved, oldest first.
    pub timeline: Vec<Hop>,
}

impl QueryInfo {
    /// A distributed query's stages in the order they were routed: the
    /// worker of each task. Empty for a query on one worker.
    pub fn stages(&self) -> Vec<Vec<u64>> {
        self.routes.as_ref().map(|r| r.stages()).unwrap_or_default()
    }
}

/// The files a distributed query's scans read, and how many of them its
/// tasks finished: by worker as their heartbeats said, and in the
/// coordinator's own process (`scan_progress`): its tally while the query
/// runs, the count taken from it when the query ended.
#[derive(Clone, Debug)]
pub(crate) struct ScansSeen {
    pub key: ScanKey,
    pub total: u64,
    pub by_node: BTreeMap<u64, u64>,
    pub local: Option<Arc<ScanTally>>,
    pub local_done: u64,
}

impl ScansSeen {
    pub fn done(&self) -> u64 {
        let local = self
            .local
            .as_ref()
            .map_or(self.local_done, |t| t.files_done(self.key));
        self.by_node
            .values()
            .fold(local, |sum, files| sum.saturating_add(*files))
    }
}

/// One query.
#[derive(Debug)]
pub struct QueryEntry {
    pub id: u64,
    pub user: String,
    pub sql: String,
    pub started: SystemTime,
    started_at: Instant,
    token: CancellationToken,
    cancel_reason: Mutex<Option<ServerError>>,
    info: Mutex<QueryInfo>,
    /// Wakes a suspended query.
    resumed: Notify,
    /// Asks a distributed query to suspend (`skiff.suspend`).
    suspend: Notify,
    /// A worker it ran on died while a snapshot can carry it on.
    lost: Notify,
    lost_workers: Mutex<Vec<u64>>,
}

impl QueryEntry {
    pub fn info(&self) -> QueryInfo {
        lock(&self.info).clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut QueryInfo)) {
        f(&mut lock(&self.info));
    }

    pub fn elapsed(&self) -> Duration {
        let info = lock(&self.info);
        info.ended.unwrap_or_else(Instant::now) - self.started_at
    }

    /// Resolved when the query must stop; [`QueryEntry::cancel_reason`]
    /// says why.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Ask the query to stop with `reason`; the first reason wins.
    pub fn cancel(&self, reason: ServerError) {
        lock(&self.cancel_reason).get_or_insert(reason);
        self.token.cancel();
    }

    /// Wake a query that awaits a resume, on `target` when given; false
    /// for any other (running, ended, or held until a worker takes
    /// queries). The query counts as running from this call on, so a
    /// second resume before it has moved is refused instead of waking a
    /// later suspension.
    pub fn resume(&self, target: Option<u64>) -> bool {
        let mut info = lock(&self.info);
        if info.status != QueryStatus::Suspended || !info.awaits_resume {
            return false;
        }
        info.awaits_resume = false;
        info.status = QueryStatus::Running;
        if target.is_some() {
            info.migrate_to = target;
        }
        drop(info);
        self.resumed.notify_one();
        true
    }

    pub(crate) async fn resumed(&self) {
        self.resumed.notified().await;
    }

    /// Ask a distributed query to suspend (`rerun` hears it).
    pub(crate) fn ask_suspend(&self) {
        self.suspend.notify_one();
    }

    pub(crate) async fn suspend_asked(&self) {
        self.suspend.notified().await;
    }

    /// Resolves when `worker` is declared dead.
    pub(crate) async fn lost(&self, worker: u64) {
        loop {
            let notified = self.lost.notified();
            if lock(&self.lost_workers).contains(&worker) {
                return;
            }
            notified.await;
        }
    }

    /// The query can go on elsewhere when its worker dies: no row reached
    /// the client yet (rows come only after the last boundary), it has
    /// not lost too many workers since its last progress, and a snapshot
    /// carries it on or it may start over.
    pub fn recoverable(&self) -> bool {
        let info = lock(&self.info);
        info.rows_sent == 0
            && info.losses_in_a_row < crate::config::WORKER_LOSSES_IN_A_ROW
            && (info.snapshot.is_some() || info.retry_on_loss)
    }

    pub fn cancel_reason(&self) -> ServerError {
        lock(&self.cancel_reason)
            .clone()
            .unwrap_or_else(|| ServerError::canceled("canceling statement due to user request"))
    }

    /// Add a step to the query's timeline; `handoff` gives a hand-off's
    /// figures.
    pub fn record(&self, kind: HopKind, worker: Option<u64>, handoff: Option<&Handoff>) {
        let at_ms = self.started_at.elapsed().as_millis() as u64;
        let hop = Hop {
            at_ms,
            kind,
            worker,
            state_bytes: handoff.map_or(0, |h| h.state_bytes),
            took_ms: handoff.map_or(0, |h| h.pause_ms + h.extract_ms + h.put_ms),
            pipelines_finished: handoff.map_or(0, |h| h.pipelines_finished),
            pipelines_total: handoff.map_or(0, |h| h.pipelines_total),
        };
        let mut info = lock(&self.info);
        if info.timeline.len() >= TIMELINE_KEPT {
            // Keep the start; forget the oldest of the later steps.
            info.timeline.remove(1);
        }
        info.timeline.push(hop);
    }

    /// Record the end of the query; the first end recorded wins.
    pub fn finish(&self, status: QueryStatus) {
        let mut info = lock(&self.info);
        if !info.status.is_done() {
            info.status = status;
            info.ended = Some(Instant::now());
        }
    }
}

/// All queries the coordinator knows.
#[derive(Debug, Default)]
pub struct QueryRegistry {
    next_id: AtomicU64,
    live: Mutex<BTreeMap<u64, Arc<QueryEntry>>>,
    recent: Mutex<VecDeque<Arc<QueryEntry>>>,
}

impl QueryRegistry {
    pub fn begin(&self, user: &str, sql: &str) -> Arc<QueryEntry> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(QueryEntry {
            id,
            user: user.to_string(),
            sql: sql.trim().to_string(),
            started: SystemTime::now(),
            started_at: Instant::now(),
            token: CancellationToken::new(),
            cancel_reason: Mutex::new(None),
            info: Mutex::new(QueryInfo {
                status: QueryStatus::Planning,
                worker: None,
                rows_sent: 0,
                progress: None,
                progress_at_ms: 0,
                progress_from: None,
                ended: None,
                migrations: 0,
                suspensions: 0,
                snapshots: 0,
                restarts: 0,
                state_bytes: 0,
                decision: String::new(),
                routes: None,
                scans: None,
                migrate_to: None,
                snapshot: None,
                snapshot_elapsed_ms: 0.0,
                use_snapshot: false,
                retry_on_loss: false,
                distributed: false,
                rows_released: false,
                awaits_resume: false,
                losses_in_a_row: 0,
                timeline: Vec::new(),
            }),
            resumed: Notify::new(),
            suspend: Notify::new(),
            lost: Notify::new(),
            lost_workers: Mutex::new(Vec::new()),
        });
        lock(&self.live).insert(id, Arc::clone(&entry));
        entry
    }

    /// Move a finished query from the live set to the recent list.
    pub fn retire(&self, id: u64) {
        let Some(entry) = lock(&self.live).remove(&id) else {
            return;
        };
        let mut recent = lock(&self.recent);
        recent.push_back(entry);
        while recent.len() > RECENT_KEPT {
            recent.pop_front();
        }
    }

    pub fn get(&self, id: u64) -> Option<Arc<QueryEntry>> {
        lock(&self.live).get(&id).cloned()
    }

    /// Live queries, then recent finished ones, each by id.
    pub fn all(&self) -> Vec<Arc<QueryEntry>> {
        let mut all: Vec<_> = lock(&self.recent).iter().cloned().collect();
        all.extend(lock(&self.live).values().cloned());
        all.sort_by_key(|e| e.id);
        all.dedup_by_key(|e| e.id);
        all
    }

    pub fn live(&self) -> Vec<Arc<QueryEntry>> {
        lock(&self.live).values().cloned().collect()
    }

    pub fn cancel(&self, id: u64, reason: ServerError) -> bool {
        match self.get(id) {
            Some(entry) => {
                entry.cancel(reason);
                true
            }
            None => false,
        }
    }

    /// Store how far node `node`'s tasks of a distributed query scanned.
    /// The report may come after the query ended: its last files. A
    /// report of another coordinator run's query is not this one's.
    pub fn scanned(&self, node: u64, report: &ScanFiles, run: u64) {
        if report.run != run {
            return;
        }
        if let Some(entry) = self.live_or_recent(report.query_id) {
            entry.update(|info| {
                if let Some(scans) = info.scans.as_mut() {
                    let files = scans.by_node.entry(node).or_default();
                    *files = (*files).max(report.files_done);
                }
            });
        }
    }

    /// A distributed query's stream ended: keep the files the
    /// coordinator's own tasks scanned, and let its tally forget them.
    pub fn settle_scans(&self, id: u64) {
        if let Some(entry) = self.live_or_recent(id) {
            entry.update(|info| {
                if let Some(scans) = info.scans.as_mut()
                    && let Some(tally) = scans.local.take()
                {
                    scans.local_done = tally.finish(scans.key);
                }
            });
        }
    }

    pub fn live_or_recent(&self, id: u64) -> Option<Arc<QueryEntry>> {
        self.get(id)
            .or_else(|| lock(&self.recent).iter().find(|e| e.id == id).cloned())
    }

    /// Store the progress a worker reported.
    /// Only the worker the query runs on (or ended on) is heard: a worker
    /// it was handed off from reports the plan it no longer runs.
    pub fn report(&self, node: u64, report: &RunningQuery) {
        if let Some(entry) = self.live_or_recent(report.query_id) {
            let at_ms = entry.started_at.elapsed().as_millis() as u64;
            entry.update(|info| {
                if info.worker.as_ref().map(|(id, _)| *id) != Some(node) {
                    return;
                }
                info.progress = Some(report.clone());
                info.progress_at_ms = info.ended.map_or(at_ms, |ended| {
                    ended
                        .saturating_duration_since(entry.started_at)
                        .as_millis() as u64
                });
                info.progress_from = Some(node);
            });
        }
    }

    /// Move every live query assigned to `worker` on (from its snapshot,
    /// or from the start), or fail it when it cannot go on.
    pub fn worker_lost(&self, worker: u64, reason: &ServerError) {
        for entry in self.live() {
            if entry
                .info()
                .worker
                .as_ref()
                .is_some_and(|(w, _)| *w == worker)
            {
                if entry.recoverable() {
                    lock(&entry.lost_workers).push(worker);
                    entry.lost.notify_waiters();
                } else {
                    entry.cancel(reason.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[test]
    fn a_resume_wakes_a_suspended_query_once() {
        let queries = QueryRegistry::default();
        let entry = queries.begin("skiff", "SELECT 1");
        assert!(!entry.resume(None), "a planning query is not suspended");
        // As the relay suspends a query whose worker handed it off.
        entry.update(|info| {
            info.status = QueryStatus::Suspended;
            info.awaits_resume = true;
        });
        assert!(entry.resume(Some(7)));
        let info = entry.info();
        assert_eq!(
            info.status,
            QueryStatus::Running,
            "running from the resume on"
        );
        assert_eq!(info.migrate_to, Some(7));
        assert!(!entry.resume(None), "a second resume wakes nothing");
        assert!(entry.resumed().now_or_never().is_some(), "woken");
        // One wake-up only: a later suspension waits for its own resume.
        assert!(
            entry.resumed().now_or_never().is_none(),
            "a stored wake-up resumed a later suspension"
        );
    }

    #[test]
    fn a_query_held_for_a_worker_is_not_resumed() {
        let queries = QueryRegistry::default();
        let entry = queries.begin("skiff", "SELECT 1");
        // As `hold_until_a_worker` holds it: suspended, awaiting a worker.
        entry.update(|info| info.status = QueryStatus::Suspended);
        assert!(!entry.resume(Some(3)));
        let info = entry.info();
        assert_eq!(info.status, QueryStatus::Suspended);
        assert_eq!(info.migrate_to, None);
    }
}
