//! What the console's pages show, as JSON: the system tables' rows (the
//! same views SQL reads, so the page and `SELECT * FROM skiff.workers`
//! never disagree), a query's pipeline graph and its timeline of
//! hand-offs, and the same pushed live as server-sent events.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow::array::RecordBatch;
use arrow_json::writer::{JsonArray, WriterBuilder};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::{CONSOLE_FEEDS_MAX, CONSOLE_TICK};
use crate::login;
use crate::state::{Console, refuse};
use skiff_coordinator::Hop;

/// A batch's rows as JSON objects, nulls written out.
fn rows(batch: &RecordBatch) -> Result<Value, String> {
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, JsonArray>(Vec::new());
    writer.write(batch).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    let bytes = writer.into_inner();
    if bytes.is_empty() {
        return Ok(Value::Array(Vec::new()));
    }
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

async fn table(console: &Console, name: &str) -> Result<Value, String> {
    match console.coordinator.system_table(name).await {
        Ok(Some(batch)) => rows(&batch),
        Ok(None) => Err(format!("no system table {name}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The coordinator's own line of the cluster page.
#[derive(Serialize)]
struct CoordinatorView {
    version: &'static str,
    cluster: String,
    pg: Option<String>,
    flight: Option<String>,
    uptime_ms: u64,
    open_sessions: usize,
    running_queries: usize,
}

async fn cluster_view(console: &Console) -> Result<Value, String> {
    let listening = &console.listening;
    let coordinator = CoordinatorView {
        version: env!("CARGO_PKG_VERSION"),
        cluster: listening.cluster.to_string(),
        pg: listening.pg.map(|a| a.to_string()),
        flight: listening.flight.map(|a| a.to_string()),
        uptime_ms: console.started.elapsed().as_millis() as u64,
        open_sessions: console.coordinator.open_sessions(),
        running_queries: console.coordinator.queries().live().len(),
    };
    Ok(serde_json::json!({
        "coordinator": coordinator,
        "nodes": table(console, "workers").await?,
        "partitions": table(console, "partitions").await?,
    }))
}

fn queries_view(console: &Console) -> Result<Value, String> {
    let batch = console
        .coordinator
        .queries_table()
        .map_err(|e| e.to_string())?;
    rows(&batch)
}

/// One pipeline of a query's graph, as its worker last reported it.
#[derive(Serialize)]
struct PipelineView {
    id: u32,
    breaker: String,
    status: String,
    output_rows: u64,
    output_bytes: u64,
    spilled_bytes: u64,
    elapsed_ms: u64,
    /// Pipelines whose outputs this one reads.
    inputs: Vec<u32>,
    group: String,
}

/// A query's page: its row of `skiff.queries` (among `rows`, with its
/// offload record), its pipeline graph and its timeline. `None` when the
/// coordinator does not know it (any more).
async fn query_view(console: &Console, id: u64, rows: &Value) -> Result<Option<Value>, String> {
    let Some(entry) = console.coordinator.queries().live_or_recent(id) else {
        return Ok(None);
    };
    let mut row = rows
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r.get("id").and_then(Value::as_u64) == Some(id))
        })
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(offload) = console.coordinator.offload_of(id).await
        && let Some(fields) = row.as_object_mut()
    {
        fields.insert("offload".into(), Value::String(offload));
    }
    let info = entry.info();
    let pipelines: Vec<PipelineView> = info
        .progress
        .iter()
        .flat_map(|p| &p.pipelines)
        .map(|p| PipelineView {
            id: p.id,
            breaker: p.breaker.clone(),
            status: p.status.clone(),
            output_rows: p.output_rows,
            output_bytes: p.output_bytes,
            spilled_bytes: p.spilled_bytes,
            elapsed_ms: p.elapsed_ms,
            inputs: p.inputs.clone(),
            group: p.group.clone(),
        })
        .collect();
    // A distributed query's stages: the worker of each task.
    let stages = info.stages();
    // The addresses of the workers its timeline and stages name, while
    // they are known.
    let workers: BTreeMap<u64, String> = console
        .coordinator
        .membership()
        .nodes()
        .into_iter()
        .filter(|n| {
            info.timeline.iter().any(|h| h.worker == Some(n.id))
                || stages.iter().flatten().any(|w| *w == n.id)
        })
        .map(|n| (n.id, n.addr))
        .collect();
    let timeline: &[Hop] = &info.timeline;
    Ok(Some(serde_json::json!({
        "query": row,
        "pipelines": pipelines,
        "timeline": timeline,
        "stages": stages,
        "pipelines_reported_ms": info.progress_at_ms,
        "pipelines_worker": info.progress_from,
        "workers": workers,
        "elapsed_ms": entry.elapsed().as_millis() as u64,
    })))
}

fn answer(result: Result<Value, String>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `GET /api/cluster`: the coordinator, every node, the partition map.
pub(crate) async fn cluster(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(refused) = login::viewer(&console, &headers) {
        return refused.into_response();
    }
    answer(cluster_view(&console).await)
}

/// `GET /api/queries`: running and recent queries (`skiff.queries`).
pub(crate) async fn queries(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(refused) = login::viewer(&console, &headers) {
        return refused.into_response();
    }
    answer(queries_view(&console))
}

/// `GET /api/queries/{id}`: one query's page.
pub(crate) async fn query(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    if let Err(refused) = login::viewer(&console, &headers) {
        return refused.into_response();
    }
    let rows = match queries_view(&console) {
        Ok(rows) => rows,
        Err(e) => return refuse(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    match query_view(&console, id, &rows).await {
        Ok(Some(value)) => Json(value).into_response(),
        Ok(None) => refuse(StatusCode::NOT_FOUND, format!("no query {id} is known")),
        Err(e) => refuse(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `GET /api/pod`: the watched pods' live figures (`pod`).
pub(crate) async fn pod(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(refused) = login::viewer(&console, &headers) {
        return refused.into_response();
    }
    Json(console.pods.view()).into_response()
}

#[derive(Deserialize)]
pub(crate) struct EventParams {
    /// Also send this query's page.
    query: Option<u64>,
}

/// One of the live streams open; the count goes down when it ends.
struct FeedSlot(Arc<AtomicUsize>);

impl FeedSlot {
    /// A slot when fewer than `CONSOLE_FEEDS_MAX` streams are open.
    fn take(open: &Arc<AtomicUsize>) -> Option<FeedSlot> {
        let before = open.fetch_add(1, Ordering::SeqCst);
        let slot = FeedSlot(Arc::clone(open));
        (before < CONSOLE_FEEDS_MAX).then_some(slot)
    }
}

impl Drop for FeedSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Where one live stream is.
struct Feed {
    _slot: FeedSlot,
    console: Arc<Console>,
    headers: HeaderMap,
    query: Option<u64>,
    /// Each part as last sent: an unchanged part is not sent again.
    last: HashMap<&'static str, String>,
    /// Events of this tick not sent yet.
    pending: VecDeque<Event>,
    first: bool,
    ended: bool,
}

/// The parts of the state, each its own event: the cluster, the running
/// queries (which change every tick while they run), the ended ones (which
/// change only when a query ends), the pods and the query's page.
async fn parts_now(feed: &Feed) -> Result<Vec<(&'static str, Value)>, String> {
    let rows = queries_view(&feed.console)?;
    let (ended, running): (Vec<Value>, Vec<Value>) = rows
        .as_array()
        .into_iter()
        .flatten()
        .cloned()
        .partition(|row| {
            matches!(
                row.get("state").and_then(Value::as_str),
                Some("finished" | "failed" | "canceled")
            )
        });
    let page = match feed.query {
        Some(id) => Some(
            query_view(&feed.console, id, &rows)
                .await?
                .unwrap_or(Value::Null),
        ),
        None => None,
    };
    let mut parts = vec![
        ("cluster", cluster_view(&feed.console).await?),
        ("running", Value::Array(running)),
        ("ended", Value::Array(ended)),
        ("pod", feed.console.pods.view()),
    ];
    parts.extend(page.map(|page| ("query", page)));
    Ok(parts)
}

/// The next event of a feed: each part of the state that changed, `logout`
/// when the login ended (then the stream ends), nothing once the server
/// stops.
async fn next_event(mut feed: Feed) -> Option<(Result<Event, Infallible>, Feed)> {
    loop {
        if let Some(event) = feed.pending.pop_front() {
            return Some((Ok(event), feed));
        }
        if feed.ended {
            return None;
        }
        if !feed.first {
            tokio::select! {
                () = tokio::time::sleep(CONSOLE_TICK) => {}
                () = feed.console.shutdown.cancelled() => return None,
            }
        }
        feed.first = false;
        if login::viewer(&feed.console, &feed.headers).is_err() {
            feed.ended = true;
            return Some((Ok(Event::default().event("logout").data("{}")), feed));
        }
        match parts_now(&feed).await {
            Ok(parts) => {
                for (name, value) in parts {
                    let text = value.to_string();
                    if feed.last.get(name) != Some(&text) {
                        feed.pending
                            .push_back(Event::default().event(name).data(&text));
                        feed.last.insert(name, text);
                    }
                }
            }
            Err(e) => feed.pending.push_back(
                Event::default()
                    .event("failure")
                    .data(serde_json::json!({ "error": e }).to_string()),
            ),
        }
    }
}

/// `GET /api/events[?query=ID]`: events `cluster`, `running`, `ended` (the
/// queries' rows), `pod` (the pod page) and `query` (the query's page),
/// each whenever it changed, checked every `CONSOLE_TICK`.
pub(crate) async fn events(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(params): Query<EventParams>,
) -> Response {
    if let Err(refused) = login::viewer(&console, &headers) {
        return refused.into_response();
    }
    let Some(slot) = FeedSlot::take(&console.feeds) else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{CONSOLE_FEEDS_MAX} live pages are open already; close one"),
        );
    };
    let feed = Feed {
        _slot: slot,
        console,
        headers,
        query: params.query,
        last: HashMap::new(),
        pending: VecDeque::new(),
        first: true,
        ended: false,
    };
    let stream: std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>> =
        Box::pin(futures::stream::unfold(feed, next_event));
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
