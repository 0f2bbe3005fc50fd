//! Batches of queries the coordinator's batcher sent together: a worker
//! waits for all of a batch's queries (at most [`BATCH_ASSEMBLY_WAIT`]),
//! groups their pipelines ([`skiff_engine::grouping`]) and starts each with
//! its grouped pipelines reading through their group's cache.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use skiff_engine::buffer::{ChunkSource, GroupStats};
use skiff_engine::grouping::{self, GroupAssignment, Grouping};
use skiff_engine::{PipelineGraph, PipelineId};
use skiff_flight::protocol::{PipelineGroupReport, PipelineGroups};
use tokio::sync::watch;
use tracing::info;

use crate::limits::{BATCH_ASSEMBLY_WAIT, CLOSED_BATCHES_KEPT, GROUP_REPORTS_KEPT};

/// Batches being assembled, and those closed short.
#[derive(Default)]
pub(crate) struct Batches {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: HashMap<u64, Open>,
    closed: VecDeque<u64>,
    /// The latest groups, newest last.
    reports: VecDeque<Report>,
}

struct Open {
    size: usize,
    graphs: Vec<PipelineGraph>,
    queries: Vec<u64>,
    grouped: watch::Sender<Option<Arc<Grouping>>>,
}

/// A group as `skiff.pipeline_groups` shows it.
struct Report {
    label: String,
    members: String,
    shared: String,
    column_bytes: usize,
    /// The group's counters (not its cache: that goes with its last scan).
    stats: Arc<GroupStats>,
}

/// One query's place in its batch once grouped.
pub(crate) struct Placed {
    pub grouping: Arc<Grouping>,
    pub index: usize,
}

impl Placed {
    pub(crate) fn assignment(&self) -> &GroupAssignment {
        &self.grouping.assignments[self.index]
    }

    /// The group of each of the query's grouped pipelines.
    pub(crate) fn labels(&self) -> HashMap<PipelineId, String> {
        self.assignment()
            .0
            .iter()
            .map(|(id, scans)| (*id, scans.label.to_string()))
            .collect()
    }
}

impl Batches {
    /// Add query `graph` to batch `batch` of `size` queries and wait for the
    /// batch's grouping; `None` when the batch was closed before it came.
    pub(crate) async fn arrive(
        &self,
        query: u64,
        batch: u64,
        size: usize,
        graph: &PipelineGraph,
        source: &Arc<dyn ChunkSource>,
        budget: usize,
    ) -> Option<Placed> {
        let (index, mut grouped) = {
            let mut state = self.lock();
            if state.closed.contains(&batch) {
                return None;
            }
            let open = state.open.entry(batch).or_insert_with(|| Open {
                size,
                graphs: Vec::new(),
                queries: Vec::new(),
                grouped: watch::channel(None).0,
            });
            open.graphs.push(graph.clone());
            open.queries.push(query);
            let index = open.graphs.len() - 1;
            let grouped = open.grouped.subscribe();
            if open.graphs.len() >= open.size {
                close(&mut state, batch, source, budget);
            }
            (index, grouped)
        };
        let waited = tokio::time::timeout(BATCH_ASSEMBLY_WAIT, grouped.wait_for(Option::is_some));
        if waited.await.is_err() {
            // Queries are missing: group the ones here (once, whoever
            // times out first).
            let mut state = self.lock();
            if state.open.contains_key(&batch) {
                close(&mut state, batch, source, budget);
                state.closed.push_back(batch);
                if state.closed.len() > CLOSED_BATCHES_KEPT {
                    state.closed.pop_front();
                }
            }
        }
        let grouping = grouped.borrow().clone()?;
        Some(Placed { grouping, index })
    }

    /// The latest groups and what their fetches did.
    pub(crate) fn reports(&self) -> PipelineGroups {
        let state = self.lock();
        let groups = state
            .reports
            .iter()
            .map(|r| {
                let counters = r.stats.counters();
                PipelineGroupReport {
                    group: r.label.clone(),
                    members: r.members.clone(),
                    shared: r.shared.clone(),
                    column_bytes: r.column_bytes as u64,
                    chunks_fetched: counters.chunks_fetched,
                    bytes_fetched: counters.bytes_fetched,
                    chunks_shared: counters.chunks_shared,
                    wait_us: counters.wait_ns / 1000,
                    held_max_bytes: counters.held_max_bytes,
                }
            })
            .collect();
        PipelineGroups { groups }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Group the open batch's queries and wake them. Under the lock, so that
/// a cancelled query cannot leave a batch removed but never grouped.
fn close(state: &mut State, batch: u64, source: &Arc<dyn ChunkSource>, budget: usize) {
    let Some(open) = state.open.remove(&batch) else {
        return;
    };
    let graphs: Vec<&PipelineGraph> = open.graphs.iter().collect();
    let grouping = grouping::group(batch, &graphs, source, budget);
    info!(
        batch,
        queries = graphs.len(),
        expected = open.size,
        groups = grouping.groups.len(),
        "batch grouped"
    );
    for group in &grouping.groups {
        let members: Vec<String> = group
            .members
            .iter()
            .map(|(at, pipeline)| format!("{}.{pipeline}", open.queries[*at]))
            .collect();
        let report = Report {
            label: group.label.clone(),
            members: members.join(" "),
            shared: group.shared_names(),
            column_bytes: group.bytes,
            stats: group.cache.stats(),
        };
        info!(
            group = %report.label,
            members = %report.members,
            shared = %report.shared,
            bytes = report.column_bytes,
            "pipeline group"
        );
        state.reports.push_back(report);
        if state.reports.len() > GROUP_REPORTS_KEPT {
            state.reports.pop_front();
        }
    }
    open.grouped.send_replace(Some(Arc::new(grouping)));
}
