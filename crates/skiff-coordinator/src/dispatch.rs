//! Shipping a plan to a worker and streaming its rows back, and the
//! tracking every statement's stream gets: cancel, timeout, row counts, and
//! the end of the query recorded whichever way it ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use datafusion::common::config::ConfigExtension;
use datafusion::error::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::StreamExt;
use skiff_engine::{SkiffOptions, explain};
use skiff_flight::protocol::{RunQuery, RunningQuery};
use tracing::debug;

use super::membership::Placement;
use super::relay::{self, Relay};
use crate::config::{BATCH_MAX_QUERIES_MAX, BATCH_WINDOW_MAX};
use crate::inner::Inner;
use crate::queries::{QueryEntry, QueryStatus};
use crate::session::ClientSession;
use skiff_node::error::{Result, ServerError, SqlState};

/// What the worker returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Rows,
    ExplainAnalyze,
}

/// Run `plan` on the least-loaded worker; returns the result stream and the
/// worker (id, address). The worker stays assigned until [`track`]'s stream
/// ends.
pub(crate) async fn run_on_worker(
    inner: &Arc<Inner>,
    session: &ClientSession,
    entry: &Arc<QueryEntry>,
    plan: Arc<dyn ExecutionPlan>,
    mode: Mode,
) -> Result<(SendableRecordBatchStream, (u64, String))> {
    let schema: SchemaRef = match mode {
        Mode::Rows => plan.schema(),
        Mode::ExplainAnalyze => explain::schema(true),
    };
    // The coordinator knows the pipeline count before the first heartbeat
    // does, so short queries show their progress too.
    let pipelines_total = skiff_engine::split(Arc::clone(&plan))?.len() as u32;
    entry.update(|info| {
        info.progress = Some(RunningQuery {
            query_id: entry.id,
            pipelines_total,
            ..RunningQuery::default()
        })
    });
    let bytes = skiff_flight::encode_plan(plan)?;
    let options: HashMap<String, String> = session
        .ctx
        .state()
        .config_options()
        .entries()
        .into_iter()
        .filter_map(|e| e.value.map(|v| (qualified(e.key), v)))
        .collect();
    let mut ticket = RunQuery {
        query_id: entry.id,
        plan: bytes,
        options,
        memory_limit: inner.limits.query_memory_limit.unwrap_or(0),
        explain_analyze: mode == Mode::ExplainAnalyze,
        sql: entry.sql.clone(),
        ..RunQuery::default()
    };
    let placement = batch(inner, session, entry, &mut ticket).await?;
    let (relay, worker) =
        Relay::start(Arc::clone(inner), Arc::clone(entry), ticket, placement).await?;
    let stream = Box::pin(RecordBatchStreamAdapter::new(schema, relay::stream(relay)));
    Ok((stream, worker))
}

/// Wait for the query's batch to close when the session batches queries
/// (`skiff.batch_window_ms`), and mark the ticket with it; where the query
/// goes: the batch's worker, else any.
async fn batch(
    inner: &Arc<Inner>,
    session: &ClientSession,
    entry: &QueryEntry,
    ticket: &mut RunQuery,
) -> Result<Placement> {
    let state = session.ctx.state();
    let Some(options) = state.config_options().extensions.get::<SkiffOptions>() else {
        return Ok(Placement::Any);
    };
    if options.batch_window_ms == 0 || options.batch_max_queries < 2 {
        return Ok(Placement::Any);
    }
    let window = Duration::from_millis(options.batch_window_ms).min(BATCH_WINDOW_MAX);
    let membership = Arc::clone(&inner.membership);
    let most = options.batch_max_queries.min(BATCH_MAX_QUERIES_MAX);
    let joined = inner.batcher.join(window, most, move || membership.pick());
    let token = entry.token().clone();
    let closed = tokio::select! {
        () = token.cancelled() => return Err(entry.cancel_reason()),
        closed = joined => closed,
    };
    if closed.size < 2 {
        return Ok(Placement::Any);
    }
    ticket.batch_id = closed.id;
    ticket.batch_size = u32::try_from(closed.size).unwrap_or(u32::MAX);
    Ok(closed.worker.map_or(Placement::Any, Placement::Prefer))
}

/// A config entry's full key: extension entries come without their
/// namespace, and Skiff's settings are the only extension with entries
/// (the session's caller has none: it never travels to a worker).
fn qualified(key: String) -> String {
    if key.starts_with("datafusion.") {
        key
    } else {
        format!(
            "{}.{key}",
            <skiff_engine::SkiffOptions as ConfigExtension>::PREFIX
        )
    }
}

/// State carried through a tracked stream.
struct Tracked {
    inner: Arc<Inner>,
    entry: Arc<QueryEntry>,
    stream: SendableRecordBatchStream,
    /// The query runs on workers: release the one it is on at the end.
    on_workers: bool,
    deadline: Option<tokio::time::Instant>,
    timeout: Option<Duration>,
    done: bool,
}

impl Tracked {
    /// Record the end once: status, worker load, registry.
    fn end(&mut self, status: QueryStatus) {
        if self.done {
            return;
        }
        self.done = true;
        let canceled = matches!(status, QueryStatus::Canceled(_));
        self.entry.finish(status);
        // A relay moves the query between workers; it is on this one now.
        let worker = self.entry.info().worker.filter(|_| self.on_workers);
        if let Some((worker, _)) = worker {
            self.inner.membership.release(worker);
            if canceled && let Some((_, addr)) = self.entry.info().worker {
                let workers = Arc::clone(&self.inner.workers);
                let id = self.entry.id;
                // Dropping the stream already stops the worker; the action
                // makes sure even if the stream was never polled. Detached:
                // nothing waits for a best-effort message.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(workers.cancel(addr, id));
                }
            }
        }
        self.inner.queries.retire(self.entry.id);
        crate::metrics::query_ended(&self.entry);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // The client went away before the end of the result.
        self.end(QueryStatus::Canceled("the client closed the result".into()));
    }
}

/// Wrap a statement's stream with cancel, timeout and end-of-query
/// bookkeeping.
pub(crate) fn track(
    inner: Arc<Inner>,
    entry: Arc<QueryEntry>,
    stream: SendableRecordBatchStream,
    worker: Option<u64>,
    timeout: Option<Duration>,
) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let state = Tracked {
        inner,
        entry,
        stream,
        on_workers: worker.is_some(),
        deadline: timeout.map(|t| tokio::time::Instant::now() + t),
        timeout,
        done: false,
    };
    let rows = futures::stream::unfold(state, |mut st| async move {
        if st.done {
            return None;
        }
        let deadline = st.deadline;
        let timed_out = async move {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let token = st.entry.token().clone();
        let item = tokio::select! {
            biased;
            _ = token.cancelled() => Err(st.entry.cancel_reason()),
            _ = timed_out => Err(ServerError::canceled(format!(
                "canceling statement due to statement timeout ({} ms)",
                st.timeout.map_or(0, |t| t.as_millis())
            ))),
            item = st.stream.next() => match item {
                Some(Ok(batch)) => Ok(Some(batch)),
                Some(Err(e)) => Err(ServerError::from(e)),
                None => Ok(None),
            },
        };
        match item {
            Ok(Some(batch)) => {
                let n = batch.num_rows() as u64;
                st.entry.update(|info| info.rows_sent += n);
                Some((Ok(batch), st))
            }
            Ok(None) => {
                st.end(QueryStatus::Finished);
                None
            }
            Err(error) => {
                debug!(query = st.entry.id, %error, "query ended with an error");
                let status = if error.state == SqlState::QueryCanceled {
                    QueryStatus::Canceled(error.message.clone())
                } else {
                    QueryStatus::Failed(error.message.clone())
                };
                st.end(status);
                Some((Err(DataFusionError::from(error)), st))
            }
        }
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, rows))
}
