//! Handing a running query off at a pipeline boundary, and continuing one
//! that another worker handed off.
//!
//! A query's result stream has two phases. Until its result pipeline
//! starts, the worker watches the executor's pause point: when the query
//! pauses (asked by the coordinator, or at a boundary a session trigger
//! named), the state that unfinished pipelines still need is extracted,
//! put in the state cache on a memory node, and the remaining plan sent to
//! the coordinator as a [`Handoff`] in the stream (the `app_metadata` of a
//! message without data). A migration or suspension ends the stream there;
//! a snapshot lets the query go on. Once the result pipeline streams there
//! is no boundary left, so no row is ever sent before a hand-off: the
//! coordinator never has rows to take back.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow_flight::FlightData;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::runtime::SpawnedTask;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use skiff_engine::options::SkiffOptions;
use skiff_engine::store::PipelineStatus;
use skiff_engine::{Pause, PauseMode, QueryExecution};
use skiff_flight::FlightStream;
use skiff_flight::protocol::{Handoff, HandoffReason, PauseReply, RunQuery};
use skiff_flight::state_cache::{PutOptions, get_state, put_state};
use skiff_state::Compression;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{error, info, warn};

use crate::snapshot_pace::{Pace, Verdict};
use skiff_node::error::{Result, ServerError, SqlState, to_status};
use skiff_node::sync::lock;

/// How long migrated state waits in the cache for its target.
const MIGRATION_TTL: Duration = Duration::from_secs(600);
/// How long a snapshot stays useful.
const SNAPSHOT_TTL: Duration = Duration::from_secs(3600);
/// Suspended state is durable; the TTL only bounds a forgotten one.
const SUSPEND_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Makes cache keys unique within this process.
static HANDOFFS: AtomicU64 = AtomicU64::new(0);

/// The session triggers and hand-off settings of one query (see
/// `SkiffOptions`).
#[derive(Clone, Copy, Debug, Default)]
struct Triggers {
    migrate_after: Option<usize>,
    migrate_after_morsels: Option<u64>,
    suspend_after: Option<usize>,
    kill_after: Option<usize>,
    /// Pipelines after which each worker running the query dies (counted
    /// from where it started here).
    kill_every: Option<usize>,
    hold_after: Option<usize>,
    snapshot_every: Option<usize>,
    snapshot_period: Option<Duration>,
    adaptive: bool,
    corrupt: bool,
    compression: Compression,
}

/// What to do at a pause.
enum Step {
    HandOff(HandoffReason, Instant, bool),
    Snapshot,
    Kill,
    /// Wait here for a hand-off request (test trigger).
    Hold,
    /// Nothing asked for this pause (a request came and went): go on.
    GoOn,
}

/// A hand-off asked for by the coordinator.
#[derive(Clone, Copy)]
struct Request {
    reason: HandoffReason,
    at: Instant,
    /// Hand off without state (the coordinator restarts the query or
    /// continues it from a snapshot).
    discard: bool,
}

/// The hand-off side of one running query.
pub(super) struct Control {
    query_id: u64,
    /// The state cache's address; empty when the cluster has none.
    cache: String,
    triggers: Triggers,
    request: Mutex<Option<Request>>,
    requested: Notify,
    /// When the query started on this worker.
    started: Instant,
    /// The snapshot period has passed: the pause in progress is for one.
    snapshot_due: AtomicBool,
    /// The boundary of the latest snapshot (`usize::MAX`: none yet).
    snapshotted_at: AtomicUsize,
    /// Pipelines finished when the query started here.
    base: AtomicUsize,
    /// The query runs in pipeline groups with others, which a pause of
    /// its own would hold up: no adaptive snapshots.
    grouped: bool,
}

impl Control {
    pub(super) fn new(query_id: u64, cache: &str, options: &ConfigOptions, grouped: bool) -> Self {
        let triggers = options
            .extensions
            .get::<SkiffOptions>()
            .map(|o| Triggers {
                migrate_after: o.migrate_after_pipelines,
                migrate_after_morsels: o.migrate_after_morsels,
                suspend_after: o.suspend_after_pipelines,
                kill_after: o.kill_worker_after_pipelines,
                kill_every: o.test_kill_every_worker_after_pipelines.filter(|&k| k > 0),
                hold_after: o.test_hold_after_pipelines,
                snapshot_every: o.snapshot_every_pipelines.filter(|&k| k > 0),
                snapshot_period: o
                    .snapshot_every_seconds
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .filter(|d| !d.is_zero()),
                adaptive: o.adaptive_snapshots,
                corrupt: o.test_corrupt_state,
                compression: o.state_compression.into(),
            })
            .unwrap_or_default();
        Self {
            query_id,
            cache: cache.to_string(),
            triggers,
            request: Mutex::new(None),
            requested: Notify::new(),
            started: Instant::now(),
            snapshot_due: AtomicBool::new(false),
            snapshotted_at: AtomicUsize::new(usize::MAX),
            base: AtomicUsize::new(0),
            grouped,
        }
    }

    /// Set the first pause point the triggers ask for.
    pub(super) fn arm(&self, execution: &QueryExecution) {
        self.base
            .store(execution.progress().pipelines_finished, Ordering::SeqCst);
        if let Some(k) = self.next_point(None) {
            execution.pause_after(k);
        }
        if let Some(morsels) = self.triggers.migrate_after_morsels {
            execution.cut_after_morsels(morsels);
        }
    }

    /// The smallest boundary after `after` at which a trigger fires.
    fn next_point(&self, after: Option<usize>) -> Option<usize> {
        let t = &self.triggers;
        let later = |k: usize| after.is_none_or(|a| k > a);
        let snapshot = t.snapshot_every.map(|every| match after {
            Some(a) => (a / every + 1) * every,
            None => every,
        });
        [
            t.migrate_after,
            t.suspend_after,
            t.kill_after,
            self.kill_here(),
            t.hold_after,
            snapshot,
        ]
        .into_iter()
        .flatten()
        .filter(|&k| later(k))
        .min()
    }

    /// After a snapshot at `finished`: pause at the next trigger (still
    /// this boundary when one fires here) or run free.
    fn rearm(&self, execution: &QueryExecution, finished: usize) {
        // Held until the execution is re-armed, so that a request coming
        // meanwhile pauses it after this, never gets resumed away.
        let request = lock(&self.request);
        if request.is_some() {
            // A hand-off is pending; stay paused and take it next.
            return;
        }
        let t = &self.triggers;
        let here = [
            t.migrate_after,
            t.suspend_after,
            t.kill_after,
            self.kill_here(),
            t.hold_after,
        ]
        .contains(&Some(finished));
        let next = if here {
            Some(finished)
        } else {
            self.next_point(Some(finished))
        };
        match next {
            Some(k) => execution.pause_after(k),
            None => execution.resume(),
        }
        drop(request);
    }

    /// What to do at a pause with `finished` pipelines done; `cut` when the
    /// running pipelines were cut (the query cannot go on here).
    fn at_pause(&self, finished: usize, cut: bool) -> Step {
        if let Some(request) = *lock(&self.request) {
            return Step::HandOff(request.reason, request.at, request.discard);
        }
        if cut {
            // Only the morsel trigger cuts without a request.
            return Step::HandOff(HandoffReason::Migrate, Instant::now(), false);
        }
        let t = &self.triggers;
        // A snapshot comes first, so that the query can go on from this
        // boundary whatever fires here next (a killed worker included); the
        // triggers of this boundary fire at the pause right after it.
        // A period that passed while the query stood at a boundary already
        // snapshotted stays due for the next one.
        let due = self.snapshot_due.load(Ordering::SeqCst)
            || t.snapshot_every
                .is_some_and(|every| finished > 0 && finished.is_multiple_of(every));
        if due && self.snapshotted_at.swap(finished, Ordering::SeqCst) != finished {
            self.snapshot_due.store(false, Ordering::SeqCst);
            return Step::Snapshot;
        }
        if t.kill_after == Some(finished) || self.kill_here() == Some(finished) {
            return Step::Kill;
        }
        if t.hold_after == Some(finished) {
            return Step::Hold;
        }
        if t.migrate_after == Some(finished) {
            return Step::HandOff(HandoffReason::Migrate, Instant::now(), false);
        }
        if t.suspend_after == Some(finished) {
            return Step::HandOff(HandoffReason::Suspend, Instant::now(), false);
        }
        Step::GoOn
    }

    /// The boundary at which this worker dies
    /// (`skiff.test_kill_every_worker_after_pipelines`).
    fn kill_here(&self) -> Option<usize> {
        let base = self.base.load(Ordering::SeqCst);
        self.triggers.kill_every.map(|k| base + k)
    }

    /// Adaptive snapshots pace this query: asked for, a memory node to
    /// hold them, no snapshot setting of the session's own, and not in
    /// pipeline groups.
    fn adaptive(&self) -> Option<Pace> {
        let t = &self.triggers;
        (t.adaptive
            && !self.grouped
            && !self.cache.is_empty()
            && t.snapshot_every.is_none()
            && t.snapshot_period.is_none())
        .then(|| Pace::new(self.started))
    }

    /// The snapshot period passed: pause at the next boundary (letting the
    /// running pipelines finish) for a snapshot. Once the result streams
    /// there is no boundary left, and nothing to snapshot.
    fn snapshot_at_next_boundary(&self, execution: &QueryExecution) {
        if self.snapshot_due_here(execution) {
            execution.pause_now(PauseMode::Finish);
        }
    }

    /// The snapshot period passed: the pause at hand (or the next one)
    /// takes a snapshot, unless the result already streams.
    fn snapshot_due_here(&self, execution: &QueryExecution) -> bool {
        let result = execution.graph().result().id;
        if execution.store().status()[result.0] != PipelineStatus::Waiting {
            return false;
        }
        self.snapshot_due.store(true, Ordering::SeqCst);
        true
    }

    /// The coordinator asks for a hand-off.
    pub(super) fn request(
        &self,
        execution: &QueryExecution,
        reason: HandoffReason,
        mode: PauseMode,
        discard: bool,
    ) -> PauseReply {
        let result = execution.graph().result().id;
        if execution.store().status()[result.0] != PipelineStatus::Waiting {
            return PauseReply {
                accepted: false,
                detail: "its result is streaming to the client; it finishes here".into(),
            };
        }
        if self.cache.is_empty() && !discard {
            return PauseReply {
                accepted: false,
                detail: "the cluster has no memory node to hold its state".into(),
            };
        }
        lock(&self.request).get_or_insert(Request {
            reason,
            at: Instant::now(),
            discard,
        });
        // With cut points an aborting hand-off keeps the running
        // pipelines' partial work: cut where they can be cut (the others
        // are aborted) instead of throwing it all away.
        if mode == PauseMode::Abort && execution.can_cut() && !discard {
            execution.cut_now();
        } else {
            execution.pause_now(mode);
        }
        self.requested.notify_one();
        PauseReply {
            accepted: true,
            detail: String::new(),
        }
    }
}

/// The stream the coordinator reads for a query: hand-offs while the query
/// may still pause, then its rows. `guard` is dropped when the query ends
/// here, however it ends (the worker forgets the query then).
pub(super) fn serve(
    execution: Arc<QueryExecution>,
    rows: SendableRecordBatchStream,
    control: Arc<Control>,
    token: CancellationToken,
    guard: impl Send + 'static,
) -> FlightStream {
    let (tx, rx) = mpsc::channel(4);
    let task = SpawnedTask::spawn(produce(execution, rows, control, token, guard, tx));
    // The task lives as long as the stream: dropping it stops the query.
    Box::pin(futures::stream::unfold(
        (rx, task),
        |(mut rx, task)| async move { rx.recv().await.map(|item| (item, (rx, task))) },
    ))
}

type Sender = mpsc::Sender<std::result::Result<FlightData, Status>>;

async fn produce(
    execution: Arc<QueryExecution>,
    rows: SendableRecordBatchStream,
    control: Arc<Control>,
    token: CancellationToken,
    guard: impl Send + 'static,
    tx: Sender,
) {
    let _guard = guard;
    let canceled = || {
        Err(to_status(&ServerError::canceled(
            "canceling statement due to user request",
        )))
    };
    let period = control.triggers.snapshot_period;
    let mut pace = control.adaptive();
    let mut next_snapshot = period
        .map(|p| tokio::time::Instant::now() + p)
        .or_else(|| pace.map(|p| p.first_check().into()));
    // When the pending snapshot was asked for: its cost counts from there.
    let mut snapshot_asked = None;
    loop {
        let due = async {
            match next_snapshot {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let pause = tokio::select! {
            biased;
            _ = token.cancelled() => {
                let _ = tx.send(canceled()).await;
                return;
            }
            pause = execution.paused() => pause,
            () = due => {
                next_snapshot = None;
                let verdict = pace.map_or(Verdict::Snapshot, |p| {
                    p.check(Instant::now(), execution.state().state_bytes())
                });
                match verdict {
                    Verdict::Snapshot => {
                        snapshot_asked = Some(Instant::now());
                        control.snapshot_at_next_boundary(&execution);
                    }
                    Verdict::CheckAt(at) => next_snapshot = Some(at.into()),
                }
                continue;
            }
        };
        let Pause::Paused { finished } = pause else {
            break;
        };
        // The timer ticks by the millisecond and may be served late, while
        // pipelines can finish within one tick: a pause for another reason
        // that comes after the period takes the snapshot too.
        if pace.is_none()
            && next_snapshot.is_some_and(|at| tokio::time::Instant::now() >= at)
            && control.snapshot_due_here(&execution)
        {
            next_snapshot = None;
        }
        match control.at_pause(finished, execution.cut_requested()) {
            Step::HandOff(reason, at, discard) => {
                let handoff = if discard {
                    Handoff {
                        reason: reason as i32,
                        error: "state discarded at the coordinator's request".into(),
                        pause_ms: at.elapsed().as_millis() as u64,
                        ran_ms: at.saturating_duration_since(control.started).as_millis() as u64,
                        ..Handoff::default()
                    }
                } else {
                    hand_off(&execution, &control, reason, at).await
                };
                let _ = tx.send(Ok(metadata(&handoff))).await;
                return;
            }
            Step::Snapshot => {
                // The pause let running pipelines finish, whose outputs may
                // have grown the state past what the check saw: judge the
                // state at the boundary itself.
                if let Some(Verdict::CheckAt(later)) =
                    pace.map(|p| p.check(Instant::now(), execution.state().state_bytes()))
                {
                    snapshot_asked = None;
                    next_snapshot = Some(later.into());
                    control.rearm(&execution, finished);
                    continue;
                }
                let at = Instant::now();
                next_snapshot = period.map(|p| tokio::time::Instant::now() + p);
                let handoff = hand_off(&execution, &control, HandoffReason::Snapshot, at).await;
                if let Some(pace) = &mut pace {
                    let asked = snapshot_asked.take().unwrap_or(at);
                    next_snapshot = Some(pace.taken(Instant::now(), asked.elapsed()).into());
                }
                if handoff.error.is_empty() {
                    if tx.send(Ok(metadata(&handoff))).await.is_err() {
                        return;
                    }
                } else {
                    warn!(query = control.query_id, error = %handoff.error, "no snapshot");
                }
                control.rearm(&execution, finished);
            }
            Step::Kill => {
                error!(
                    query = control.query_id,
                    finished, "skiff.kill_worker_after_pipelines: the worker process dies now"
                );
                // Let the messages already sent (snapshots) leave first: the
                // stream has taken them all, then the transport gets a
                // moment to write them out.
                let deadline = Instant::now() + Duration::from_secs(5);
                while tx.capacity() < tx.max_capacity() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                std::process::exit(137);
            }
            Step::Hold => {
                tokio::select! {
                    biased;
                    _ = token.cancelled() => {
                        let _ = tx.send(canceled()).await;
                        return;
                    }
                    () = control.requested.notified() => {}
                }
            }
            Step::GoOn => control.rearm(&execution, finished),
        }
    }
    let mut flight = encode(rows);
    loop {
        let item = tokio::select! {
            biased;
            _ = token.cancelled() => {
                let _ = tx.send(canceled()).await;
                return;
            }
            item = flight.next() => item,
        };
        let Some(item) = item else { return };
        if tx.send(item).await.is_err() {
            return;
        }
    }
}

fn metadata(handoff: &Handoff) -> FlightData {
    skiff_flight::protocol::metadata_message(handoff.encode_to_vec().into())
}

/// Extract the paused query's state, store it, and describe the hand-off;
/// a failure is described too (the coordinator then starts the query over).
async fn hand_off(
    execution: &QueryExecution,
    control: &Control,
    reason: HandoffReason,
    requested: Instant,
) -> Handoff {
    let progress = execution.progress();
    let mut handoff = Handoff {
        reason: reason as i32,
        pipelines_finished: progress.pipelines_finished as u32,
        pipelines_total: progress.pipelines_total as u32,
        ran_ms: requested
            .saturating_duration_since(control.started)
            .as_millis() as u64,
        ..Handoff::default()
    };
    if let Err(e) = store_state(execution, control, reason, &mut handoff).await {
        warn!(query = control.query_id, ?reason, error = %e, "state not handed off");
        handoff.state_key.clear();
        handoff.error = e.to_string();
    } else {
        info!(
            query = control.query_id,
            ?reason,
            key = %handoff.state_key,
            bytes = handoff.state_bytes,
            rows = handoff.state_rows,
            finished = handoff.pipelines_finished,
            "state handed off"
        );
    }
    handoff.pause_ms = requested.elapsed().as_millis() as u64;
    handoff
}

async fn store_state(
    execution: &QueryExecution,
    control: &Control,
    reason: HandoffReason,
    handoff: &mut Handoff,
) -> Result<()> {
    let started = Instant::now();
    let separated = skiff_state::separate(execution, control.triggers.compression).await?;
    if !separated.cut.is_empty() {
        info!(
            query = control.query_id,
            cut = separated.cut.len(),
            "running pipelines cut mid-way; their partial work moves with the state"
        );
    }
    let mut state = separated.state;
    if control.triggers.corrupt {
        corrupt(&mut state);
    }
    handoff.extract_ms = started.elapsed().as_millis() as u64;
    handoff.plan = skiff_flight::encode_plan(separated.remaining.plan)?;
    handoff.state_rows = state.rows();
    if control.cache.is_empty() {
        return Err(ServerError::new(
            SqlState::CannotConnectNow,
            "the cluster has no memory node to hold the state",
        ));
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let key = format!(
        "q{}-{}-{nanos:x}-{}",
        control.query_id,
        format!("{reason:?}").to_ascii_lowercase(),
        HANDOFFS.fetch_add(1, Ordering::Relaxed)
    );
    let options = PutOptions {
        ttl: match reason {
            HandoffReason::Migrate => MIGRATION_TTL,
            HandoffReason::Suspend => SUSPEND_TTL,
            HandoffReason::Snapshot => SNAPSHOT_TTL,
        },
        read_once: reason == HandoffReason::Migrate,
        // Suspended state and snapshots outlive the memory node's process.
        durable: reason != HandoffReason::Migrate,
    };
    let started = Instant::now();
    let stored = put_state(&control.cache, &key, &options, &state)
        .await
        .map_err(|s| {
            ServerError::new(
                SqlState::CannotConnectNow,
                format!("state cache at {}: {}", control.cache, s.message()),
            )
        })?;
    handoff.put_ms = started.elapsed().as_millis() as u64;
    handoff.state_bytes = stored.bytes;
    handoff.state_key = key;
    Ok(())
}

/// Flip one bit in the middle of the first frame with rows (test trigger).
fn corrupt(state: &mut skiff_state::ExtractedState) {
    let frame = state
        .outputs
        .iter_mut()
        .flat_map(|o| o.partitions.iter_mut().flatten())
        .find(|f| !f.bytes.is_empty());
    if let Some(frame) = frame {
        let middle = frame.bytes.len() / 2;
        frame.bytes[middle] ^= 0x10;
    }
}

/// The execution of a remaining plan (already re-partitioned for this
/// worker) over the state another worker handed off: fetched from the
/// cache, every frame verified.
pub(super) async fn continue_from_state(
    request: &RunQuery,
    plan: Arc<dyn ExecutionPlan>,
    task_ctx: &TaskContext,
) -> Result<Arc<QueryExecution>> {
    let key = &request.state_key;
    let started = Instant::now();
    let state = get_state(&request.state_cache, key).await.map_err(|s| {
        let state = match s.code() {
            tonic::Code::DataLoss => SqlState::DataCorrupted,
            _ => SqlState::CannotConnectNow,
        };
        ServerError::new(
            state,
            format!("state {key} from {}: {}", request.state_cache, s.message()),
        )
    })?;
    let fetched = started.elapsed();
    let loaded = skiff_state::load(&state)
        .map_err(|e| ServerError::new(SqlState::DataCorrupted, format!("state {key}: {e}")))?;
    info!(
        query = request.query_id,
        key = %key,
        bytes = state.bytes(),
        get_ms = fetched.as_millis() as u64,
        load_ms = (started.elapsed() - fetched).as_millis() as u64,
        "state loaded"
    );
    Ok(skiff_state::resume(plan, task_ctx, loaded)?)
}

/// Rows as Flight data: view columns compacted, errors as statuses.
pub(super) fn encode(rows: SendableRecordBatchStream) -> FlightStream {
    let rows = rows
        .map(|batch| batch.and_then(|b| Ok(skiff_engine::batch::compact(b)?)))
        .map_err(|e| FlightError::from(to_status(&ServerError::from(e))));
    let flight = FlightDataEncoderBuilder::new()
        .build(rows)
        .map_err(Status::from);
    Box::pin(flight)
}
