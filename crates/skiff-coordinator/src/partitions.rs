//! The coordinator's partition manager (issue 16; VectorH §5.2): which
//! worker owns each partition of the hash-partitioned tables, following the
//! membership. The bookkeeping is `skiff_cluster::PartitionManager`'s; this
//! keeps the current one, makes the next epoch when the live workers
//! change, and persists it beside the catalog
//! (`STATE_DIR/partitions.json`) so epochs do not repeat across restarts
//! (unless that write failed: it is logged, and the map is used anyway).
//!
//! Ownership is about locality, not about where data is: every partition's
//! files are in the data directory, readable by any worker. A query takes
//! the manager of the moment it is planned (an `Arc`: a later resize makes
//! a new one and leaves the query's alone).
//!
//! After a coordinator restart the workers register again; ids are handed
//! out from 1 again, so the same number of workers mostly gets the ids, and
//! the partitions, of before, but the first registrations resize the stored
//! map one worker at a time (nothing a worker held survives the restart
//! anyway).
//!
//! The live workers are read under the map's lock, so two callers that saw
//! the membership at different moments cannot resize back and forth.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use datafusion::prelude::SessionContext;
use skiff_cluster::{Move, PartitionManager, WorkerId};
use skiff_tables::ManagedTable;
use skiff_tables::partition::HashPartitioning;
use tracing::{info, warn};

use super::catalog_store::write_atomically;
use skiff_node::error::{Result, ServerError};
use skiff_node::sync::lock;

const FILE: &str = "partitions.json";

/// The current partition manager and the classes still waiting for a
/// worker to own them.
#[derive(Debug)]
pub(crate) struct Partitions {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<PartitionManager>,
    /// Classes of tables created while no worker was live: dealt when the
    /// first one registers.
    pending: BTreeSet<u32>,
}

impl Partitions {
    /// The manager stored in the state directory `dir`, or a new one (epoch
    /// 1, no class). A file that cannot be read or fails validation is an
    /// error, never silently replaced.
    pub(crate) fn open(dir: &Path) -> Result<Partitions> {
        let path = dir.join(FILE);
        let current = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<PartitionManager>(&bytes).map_err(|e| {
                ServerError::internal(format!("partition map {} is damaged: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => PartitionManager::new([]),
            Err(e) => {
                return Err(ServerError::internal(format!(
                    "cannot read partition map {}: {e}",
                    path.display()
                )));
            }
        };
        Ok(Partitions {
            path,
            state: Mutex::new(State {
                current: Arc::new(current),
                pending: BTreeSet::new(),
            }),
        })
    }

    /// The manager as it is now, without following the membership.
    #[cfg(test)]
    pub(crate) fn current(&self) -> Arc<PartitionManager> {
        Arc::clone(&lock(&self.state).current)
    }

    /// The manager for the live workers now (`live()`, read under the
    /// lock): the next epoch when they differ from the current one's (a
    /// resize, moving the fewest partitions), with any pending class dealt.
    /// With no live worker the current map stays: nobody could own a
    /// partition.
    pub(crate) fn follow(&self, live: impl FnOnce() -> Vec<WorkerId>) -> Arc<PartitionManager> {
        self.follow_moves(live).0
    }

    /// [`Self::follow`], and the partitions its resize moved (none when
    /// the map stayed).
    pub(crate) fn follow_moves(
        &self,
        live: impl FnOnce() -> Vec<WorkerId>,
    ) -> (Arc<PartitionManager>, Vec<Move>) {
        let mut state = lock(&self.state);
        let workers = live();
        let workers = workers.as_slice();
        let same = state.current.workers() == workers;
        if workers.is_empty() || (same && state.pending.is_empty()) {
            return (Arc::clone(&state.current), Vec::new());
        }
        let mut next = PartitionManager::clone(&state.current);
        let mut moved = Vec::new();
        if !same {
            match next.resize(workers.iter().copied()) {
                Ok(moves) => {
                    info!(
                        epoch = next.epoch(),
                        workers = ?next.workers(),
                        moves = moves.len(),
                        "partitions resized"
                    );
                    moved = moves;
                }
                Err(e) => {
                    warn!(error = %e, "partitions not resized");
                    return (Arc::clone(&state.current), Vec::new());
                }
            }
        }
        for partitions in std::mem::take(&mut state.pending) {
            if let Err(e) = next.ensure_class(partitions) {
                warn!(partitions, error = %e, "partition class not dealt");
            }
        }
        (self.install(&mut state, next), moved)
    }

    /// The partitions a resize to `workers` would move now, without making
    /// it (a removal sends a leaving worker's blocks before it goes).
    pub(crate) fn moves_to(&self, workers: &[WorkerId]) -> Vec<Move> {
        let current = Arc::clone(&lock(&self.state).current);
        let mut next = PartitionManager::clone(&current);
        next.resize(workers.iter().copied()).unwrap_or_default()
    }

    /// A table of `partitions` partitions exists: deal its class over the
    /// live workers unless it already is (then nothing changes), or keep it
    /// for the first worker to register.
    pub(crate) fn add_class(&self, partitions: u32, live: impl FnOnce() -> Vec<WorkerId>) {
        {
            let mut state = lock(&self.state);
            if state.current.mapping(partitions).is_some() {
                return;
            }
            state.pending.insert(partitions);
        }
        self.follow(live);
    }

    /// Make `next` current and persist it. A failed write is logged and
    /// the map used anyway: the membership has changed whether or not the
    /// file says so, and the next change writes it again.
    fn install(&self, state: &mut State, next: PartitionManager) -> Arc<PartitionManager> {
        debug_assert!(next.validate().is_ok());
        match serde_json::to_vec_pretty(&next) {
            Ok(bytes) => {
                if let Err(e) = write_atomically(&self.path, &bytes) {
                    warn!(error = %e, "partition map not persisted");
                }
            }
            Err(e) => warn!(error = %e, "partition map not encoded"),
        }
        state.current = Arc::new(next);
        Arc::clone(&state.current)
    }
}

/// A hash-partitioned managed table.
pub(crate) struct PartitionedTable {
    pub name: String,
    pub partitioning: HashPartitioning,
    /// Its files' directory, as buffer pools name the table.
    pub location: String,
}

/// The managed tables of `ctx`'s default schema that are hash-partitioned,
/// by name.
pub(crate) async fn partitioned_tables(ctx: &SessionContext) -> Vec<PartitionedTable> {
    let Some(schema) = ctx
        .catalog(skiff_engine::catalog::DATABASE)
        .and_then(|c| c.schema(skiff_engine::catalog::DEFAULT_SCHEMA))
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for name in schema.table_names() {
        let Ok(Some(table)) = schema.table(&name).await else {
            continue;
        };
        let Some(managed) = table.downcast_ref::<ManagedTable>() else {
            continue;
        };
        if let Some(partitioning) = managed.partitioning() {
            let location = managed.url().as_str().trim_end_matches('/').to_string();
            found.push(PartitionedTable {
                name,
                partitioning,
                location,
            });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_workers_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let partitions = Partitions::open(dir.path()).unwrap();
        // A class before any worker waits for the first one.
        partitions.add_class(8, Vec::new);
        assert!(partitions.current().mapping(8).is_none());
        let one = partitions.follow(|| vec![1]);
        assert_eq!(one.mapping(8).unwrap().owned_by(1).count(), 8);
        let three = partitions.follow(|| vec![1, 2, 3]);
        assert!(three.epoch() > one.epoch());
        for w in [1, 2, 3] {
            let n = three.mapping(8).unwrap().owned_by(w).count();
            assert!((2..=3).contains(&n), "worker {w} owns {n}");
        }
        // The same workers: the same manager, no new epoch.
        assert!(Arc::ptr_eq(&three, &partitions.follow(|| vec![1, 2, 3])));
        // No live worker keeps the map.
        assert!(Arc::ptr_eq(&three, &partitions.follow(Vec::new)));
        partitions.add_class(4, || vec![1, 2, 3]);
        let stored = partitions.current();
        assert_eq!(stored.epoch(), three.epoch(), "a new class is no resize");
        drop(partitions);
        let again = Partitions::open(dir.path()).unwrap();
        assert_eq!(*again.current(), *stored);
        std::fs::write(dir.path().join(FILE), b"{\"epoch\": 1").unwrap();
        assert!(Partitions::open(dir.path()).is_err());
    }
}
