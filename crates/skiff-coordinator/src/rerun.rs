//! A distributed query runs again, from the start, when it loses a worker
//! or is moved off one (`skiff.remove_worker`, `skiff.drain`,
//! `skiff.spot_notice`: a vacate), as Trino's `retry-policy=QUERY` does.
//! The library streams between stages and keeps no stage output, so a
//! lost task cannot run again alone (`shared/notes/round3-research.md`).
//! So that the client never sees a row twice, the coordinator holds an
//! attempt's rows back until the attempt ends, up to
//! [`RERUN_BUFFER_BYTES`]; a query whose rows already went out cannot run
//! again: it fails when it loses a worker (57P03), and a vacate waits for
//! it. Attempts are bounded and counted in `skiff.queries` (`restarts`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use futures::future::BoxFuture;
use tracing::warn;
use url::Url;

use super::claims::RunGuard;
use super::queries::{HopKind, QueryEntry, QueryStatus};
use crate::config::{
    RERUN_BUFFER_BYTES, RERUN_PROBE_AGAIN, RERUNS_MAX, WORKER_LOSSES_IN_A_ROW, WORKER_PROBE_TIMEOUT,
};
use crate::inner::Inner;
use skiff_node::error::{Result, ServerError};

/// How a query's decision begins once it started over.
pub(crate) const STARTED_OVER: &str = "started over: ";

/// One run of a distributed query.
pub(crate) struct Attempt {
    pub(crate) stream: SendableRecordBatchStream,
    /// Its claim on the workers it was planned on; none for an attempt
    /// the coordinator runs alone (fewer than two workers were left).
    pub(crate) guard: Option<RunGuard>,
    /// Those workers, probed when the attempt fails.
    pub(crate) workers: BTreeMap<u64, Url>,
}

/// Plans and starts the query again on the workers that take queries now.
pub(crate) type Replan = Box<dyn FnMut() -> BoxFuture<'static, Result<Attempt>> + Send>;

/// The rows of `first`, or of the attempts after it when it loses a
/// worker or is vacated before any row went out. `hold` is the test hook
/// `skiff.test_hold_distributed`: the first attempt, once its first batch
/// arrived, waits for a vacate (or for the client to go).
pub(crate) fn run(
    inner: Arc<Inner>,
    entry: Arc<QueryEntry>,
    first: Attempt,
    replan: Replan,
    hold: bool,
) -> SendableRecordBatchStream {
    let schema = first.stream.schema();
    entry.update(|info| info.distributed = true);
    let state = Rerun {
        inner,
        entry,
        replan,
        attempt: Some(first),
        held: Vec::new(),
        held_bytes: 0,
        ready: VecDeque::new(),
        released: false,
        done: false,
        hold,
        restarts: 0,
    };
    let rows = futures::stream::unfold(state, |mut st| async move {
        let item = st.next().await?;
        Some((item, st))
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, rows))
}

struct Rerun {
    inner: Arc<Inner>,
    entry: Arc<QueryEntry>,
    replan: Replan,
    attempt: Option<Attempt>,
    /// The current attempt's rows, not sent yet.
    held: Vec<RecordBatch>,
    held_bytes: usize,
    /// Rows to send now.
    ready: VecDeque<RecordBatch>,
    /// Rows went out: the query can no longer run again.
    released: bool,
    done: bool,
    hold: bool,
    /// Times it started over (its `restarts` in `skiff.queries`), kept
    /// here so that each batch need not read the query's record.
    restarts: u32,
}

enum Step {
    Batch(Option<DfResult<RecordBatch>>),
    Vacated,
    Suspend,
}

impl Rerun {
    async fn next(&mut self) -> Option<DfResult<RecordBatch>> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                return Some(Ok(batch));
            }
            if self.done {
                return None;
            }
            if self.attempt.is_none() {
                match (self.replan)().await {
                    Ok(attempt) => self.attempt = Some(attempt),
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e.into()));
                    }
                }
            }
            let may_move = !self.released && self.restarts < RERUNS_MAX;
            let holding = self.hold && may_move && !self.held.is_empty();
            let Some(Attempt { stream, guard, .. }) = self.attempt.as_mut() else {
                continue;
            };
            let vacated = async {
                match guard {
                    Some(guard) => guard.vacated().await,
                    None => std::future::pending().await,
                }
            };
            let entry = Arc::clone(&self.entry);
            let step = tokio::select! {
                biased;
                () = entry.suspend_asked(), if !self.released => Step::Suspend,
                () = vacated, if may_move => Step::Vacated,
                batch = stream.next(), if !holding => Step::Batch(batch),
            };
            match step {
                Step::Batch(Some(Ok(batch))) => {
                    if self.released {
                        assert!(self.held.is_empty(), "rows held after they went out");
                        return Some(Ok(batch));
                    }
                    self.held_bytes += batch.get_array_memory_size();
                    self.held.push(batch);
                    if self.held_bytes > RERUN_BUFFER_BYTES {
                        // Too much to hold: from here on, rows go out as
                        // they come, and the query cannot run again.
                        self.release();
                    }
                }
                Step::Batch(None) => {
                    // Its workers are free before its rows are sent.
                    self.attempt = None;
                    self.release();
                    self.done = true;
                }
                Step::Batch(Some(Err(error))) => {
                    if let Err(error) = self.after_failure(error).await {
                        self.done = true;
                        return Some(Err(error));
                    }
                }
                Step::Vacated => self.start_over_elsewhere(),
                Step::Suspend => self.suspend().await,
            }
        }
    }

    fn release(&mut self) {
        self.released = true;
        self.entry.update(|info| info.rows_released = true);
        self.held_bytes = 0;
        self.ready.extend(self.held.drain(..));
    }

    /// `skiff.suspend`: let the attempt and its workers go, wait for
    /// `skiff.resume` (a cancel or the client going away ends the wait, by
    /// dropping this stream), then run again on the workers there are then.
    async fn suspend(&mut self) {
        self.attempt = None;
        self.held.clear();
        self.held_bytes = 0;
        self.hold = false;
        let id = self.entry.id;
        self.entry.record(HopKind::Suspended, None, None);
        self.entry.update(|info| {
            info.status = QueryStatus::Suspended;
            info.awaits_resume = true;
            info.suspensions += 1;
            info.decision =
                "suspended by skiff.suspend; runs again from the start on resume".into();
        });
        tracing::info!(query = id, "a distributed query is suspended");
        self.entry.resumed().await;
        self.entry.record(HopKind::Resumed, None, None);
        tracing::info!(query = id, "a distributed query resumes: it runs again");
        self.entry
            .update(|info| info.decision = format!("{STARTED_OVER}resumed after skiff.suspend"));
    }

    /// The attempt failed. When a worker of its is gone (or the network
    /// failed it) and no row went out, run it again (at most
    /// `WORKER_LOSSES_IN_A_ROW` times, `skiff.retry_on_worker_loss`); a
    /// failure of the query's own (its data, its plan) fails it.
    async fn after_failure(&mut self, error: DataFusionError) -> DfResult<()> {
        let attempt = self.attempt.take();
        if own_failure(&error) {
            return Err(error);
        }
        let workers = attempt
            .as_ref()
            .map(|a| a.workers.clone())
            .unwrap_or_default();
        // A worker found gone is what failed the query; the others are
        // let go with the attempt before it runs again.
        let mut gone = declare_gone(&self.inner, &workers).await;
        if gone.is_empty() && transient(&error) {
            // A killed worker's connections break before its port
            // refuses: look once more before running again with it.
            tokio::time::sleep(RERUN_PROBE_AGAIN).await;
            gone = declare_gone(&self.inner, &workers).await;
        }
        drop(attempt);
        let info = self.entry.info();
        let again = !self.released
            && info.retry_on_loss
            && info.losses_in_a_row < WORKER_LOSSES_IN_A_ROW
            && self.restarts < RERUNS_MAX
            && (!gone.is_empty() || transient(&error));
        if !again {
            // Said as a query that lost its single worker says it (57P03).
            return Err(match gone.first() {
                Some(id) => ServerError::worker_gone(format!(
                    "worker {id} was lost while running the query ({})",
                    ServerError::from(error).message
                ))
                .into(),
                None => error,
            });
        }
        for &id in &gone {
            self.entry.record(HopKind::WorkerLost, Some(id), None);
        }
        let why = match gone.as_slice() {
            [] => format!(
                "the network failed it ({})",
                ServerError::from(error).message
            ),
            ids => format!("it lost worker {}", join(ids)),
        };
        warn!(query = self.entry.id, %why, "a distributed query starts over");
        self.entry.update(|info| info.losses_in_a_row += 1);
        self.start_over(&why);
        Ok(())
    }

    /// A vacate rang: let the attempt go and run again on the workers
    /// that take queries now, which leave the vacated one out.
    fn start_over_elsewhere(&mut self) {
        let leaving: Vec<u64> = match self.attempt.take() {
            Some(attempt) => {
                let usable = self.inner.membership.usable_workers();
                attempt
                    .workers
                    .keys()
                    .copied()
                    .filter(|id| !usable.iter().any(|(w, _)| w == id))
                    .collect()
            }
            None => Vec::new(),
        };
        let why = format!("moved off worker {} (vacated)", join(&leaving));
        tracing::info!(query = self.entry.id, %why, "a distributed query starts over");
        self.start_over(&why);
    }

    fn start_over(&mut self, why: &str) {
        self.held.clear();
        self.held_bytes = 0;
        self.hold = false;
        self.restarts += 1;
        self.entry.record(HopKind::StartedOver, None, None);
        self.entry.update(|info| {
            info.restarts += 1;
            info.decision = format!("{STARTED_OVER}{why}");
        });
    }
}

fn join(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    if ids.is_empty() {
        "?".to_string()
    } else {
        ids.join(",")
    }
}

/// Whether `error` is the query's own (its data or its plan), not a
/// worker's or the network's.
fn own_failure(error: &DataFusionError) -> bool {
    matches!(
        error.find_root(),
        DataFusionError::ArrowError(..)
            | DataFusionError::Plan(_)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_)
            | DataFusionError::ResourcesExhausted(_)
    )
}

/// Whether `error` came from the transport (a broken stream, a refused or
/// reset connection) rather than from running the plan: worth a second
/// attempt even when no worker was found gone. The library sends a
/// worker's own errors as DataFusion errors of their kind; a transport
/// failure arrives as an external (gRPC) or I/O error.
fn transient(error: &DataFusionError) -> bool {
    matches!(
        error.find_root(),
        DataFusionError::External(_) | DataFusionError::IoError(_)
    )
}

/// Each of `workers` whose address refuses connections (its process is
/// gone) is declared dead, and the partition map follows; the ones found
/// gone. The workers are probed at once; one that accepts is alive and
/// left alone.
async fn declare_gone(inner: &Inner, workers: &BTreeMap<u64, Url>) -> Vec<u64> {
    let probes = workers.iter().map(|(&id, url)| async move {
        let (Some(host), Some(port)) = (url.host_str(), url.port()) else {
            return None;
        };
        let probe = tokio::net::TcpStream::connect((host, port));
        // Accepted, timed out or failed otherwise: not known to be gone
        // (the failure detector decides).
        match tokio::time::timeout(WORKER_PROBE_TIMEOUT, probe).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(id),
            _ => None,
        }
    });
    let gone: Vec<u64> = futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect();
    for &id in &gone {
        if inner.membership.mark_dead(id) {
            warn!(
                worker = id,
                "a distributed query's worker refuses connections; declared dead"
            );
            inner.node_lost(id);
        }
    }
    inner.partition_map();
    gone
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::error::ArrowError;

    #[test]
    fn only_a_transport_failure_is_worth_a_second_attempt_without_a_worker_gone() {
        let network = DataFusionError::External("h2 protocol error".into());
        let io = DataFusionError::IoError(std::io::Error::other("connection reset"));
        let data = DataFusionError::ArrowError(Box::new(ArrowError::DivideByZero), None);
        let plan = DataFusionError::Plan("no such column".into());
        let run = DataFusionError::Execution("cannot cast".into());
        for error in [&network, &io] {
            assert!(!own_failure(error) && transient(error), "{error}");
        }
        for error in [&data, &plan] {
            assert!(own_failure(error) && !transient(error), "{error}");
        }
        // Neither: runs again only when a worker of its was found gone.
        assert!(!own_failure(&run) && !transient(&run));
        // Wrapped errors are judged by their root.
        let wrapped = DataFusionError::Context("stage 2".into(), Box::new(network));
        assert!(transient(&wrapped));
        let wrapped = DataFusionError::Context("stage 2".into(), Box::new(data));
        assert!(own_failure(&wrapped));
    }

    #[test]
    fn worker_lists_read_as_the_decision_says_them() {
        assert_eq!(join(&[3]), "3");
        assert_eq!(join(&[1, 4]), "1,4");
        assert_eq!(join(&[]), "?");
    }
}
