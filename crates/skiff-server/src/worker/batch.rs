//! Batches of queries the coordinator's batcher sent together: a worker
//! waits for all of a batch's queries (at most [`BATCH_ASSEMBLY_WAIT`]),
//! groups their pipelines ([`skiff_engine::grouping`]) and starts each with
//! its grouped pipelines reading through their group's cache.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use skiff_engine::PipelineGraph;
use skiff_engine::buffer::ChunkSource;
use skiff_engine::grouping::{self, GroupAssignment, Grouping};
use tokio::sync::watch;
use tracing::info;

use crate::config::{BATCH_ASSEMBLY_WAIT, CLOSED_BATCHES_KEPT};

/// Batches being assembled, and those closed short.
#[derive(Default)]
pub(crate) struct Batches {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    open: HashMap<u64, Open>,
    closed: VecDeque<u64>,
}

struct Open {
    size: usize,
    graphs: Vec<PipelineGraph>,
    grouped: watch::Sender<Option<Arc<Grouping>>>,
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
}

impl Batches {
    /// Add query `graph` to batch `batch` of `size` queries and wait for the
    /// batch's grouping; `None` when the batch was closed before it came.
    pub(crate) async fn arrive(
        &self,
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
                grouped: watch::channel(None).0,
            });
            open.graphs.push(graph.clone());
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
    let grouping = grouping::group(&graphs, source, budget);
    info!(
        batch,
        queries = graphs.len(),
        expected = open.size,
        groups = grouping.groups.len(),
        "batch grouped"
    );
    for (nth, group) in grouping.groups.iter().enumerate() {
        info!(
            batch,
            group = nth,
            members = %group.member_names(),
            shared = %group.shared_names(),
            bytes = group.bytes,
            "pipeline group"
        );
    }
    open.grouped.send_replace(Some(Arc::new(grouping)));
}
