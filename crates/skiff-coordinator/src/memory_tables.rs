//! Tables in memory nodes, as the coordinator keeps them: which memory
//! node holds which file version of which loaded table (the *routes*), and
//! the epoch workers learn them by. A worker's heartbeat names the epoch it
//! reads with; a reply to a worker behind carries the routes. A memory node
//! that dies takes its files out of the routes (its scans read storage).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use skiff_flight::protocol::{ChunkFile, MemoryRoute, MemoryRoutes};

use skiff_node::sync::lock;

/// One loaded table.
#[derive(Clone, Debug)]
pub(crate) struct Loaded {
    /// Its location, as scans name it.
    pub location: String,
    pub files: Vec<HeldFile>,
}

/// A file version and the memory node holding it.
#[derive(Clone, Debug)]
pub(crate) struct HeldFile {
    pub file: ChunkFile,
    pub node: u64,
    pub addr: String,
}

#[derive(Debug)]
struct State {
    /// Changes with every change of the routes; workers start at 0.
    epoch: u64,
    tables: BTreeMap<String, Loaded>,
    /// The epoch each worker last said it reads with.
    acked: HashMap<u64, u64>,
}

/// The registry.
#[derive(Debug)]
pub(crate) struct MemoryTables {
    state: Mutex<State>,
    /// Held by each load and unload: one at a time, so that the memory
    /// nodes hold what the routes say.
    pub(crate) changing: tokio::sync::Mutex<()>,
}

impl Default for MemoryTables {
    fn default() -> Self {
        Self {
            // Not 0: a new worker's first heartbeat gets the routes.
            state: Mutex::new(State {
                epoch: 1,
                tables: BTreeMap::new(),
                acked: HashMap::new(),
            }),
            changing: tokio::sync::Mutex::new(()),
        }
    }
}

impl MemoryTables {
    /// The routes now.
    #[cfg(test)]
    fn routes(&self) -> MemoryRoutes {
        let state = lock(&self.state);
        routes(&state)
    }

    #[cfg(test)]
    fn epoch(&self) -> u64 {
        lock(&self.state).epoch
    }

    /// Worker `node` reads with routes of `epoch`: the routes, when those
    /// are not the current ones.
    pub(crate) fn heartbeat(&self, node: u64, epoch: u64) -> Option<MemoryRoutes> {
        let mut state = lock(&self.state);
        state.acked.insert(node, epoch);
        (epoch != state.epoch).then(|| routes(&state))
    }

    /// Whether every one of `workers` reads with routes of `epoch` (or a
    /// later one).
    pub(crate) fn taken_by(&self, workers: &[u64], epoch: u64) -> bool {
        let state = lock(&self.state);
        workers
            .iter()
            .all(|w| state.acked.get(w).is_some_and(|e| *e >= epoch))
    }

    /// Whether any table was held since the coordinator started (only
    /// then can a fragment have been offered).
    pub(crate) fn ever_held(&self) -> bool {
        // Every load, unload and loss moves the epoch on from 1.
        lock(&self.state).epoch > 1
    }

    /// Whether memory nodes hold a version of every file of `paths`.
    pub(crate) fn holds_all(&self, paths: &[String]) -> bool {
        let state = lock(&self.state);
        let held: std::collections::HashSet<&str> = state
            .tables
            .values()
            .flat_map(|t| t.files.iter().map(|f| f.file.path.as_str()))
            .collect();
        paths.iter().all(|p| held.contains(p.as_str()))
    }

    /// Table `name` is held as `loaded` from now on; the new epoch.
    pub(crate) fn set(&self, name: &str, loaded: Loaded) -> u64 {
        let mut state = lock(&self.state);
        state.tables.insert(name.to_string(), loaded);
        state.epoch += 1;
        state.epoch
    }

    /// Table `name` is not held any more; the new epoch, when it was.
    pub(crate) fn remove(&self, name: &str) -> Option<(Loaded, u64)> {
        let mut state = lock(&self.state);
        let loaded = state.tables.remove(name)?;
        state.epoch += 1;
        Some((loaded, state.epoch))
    }

    /// Memory node `node` is gone: its files leave the routes. The tables
    /// that lost files, with how many each.
    pub(crate) fn node_lost(&self, node: u64) -> Vec<(String, usize)> {
        let mut state = lock(&self.state);
        let mut lost = Vec::new();
        for (name, table) in &mut state.tables {
            let before = table.files.len();
            table.files.retain(|f| f.node != node);
            if table.files.len() < before {
                lost.push((name.clone(), before - table.files.len()));
            }
        }
        if !lost.is_empty() {
            state.epoch += 1;
        }
        // A worker that leaves says nothing any more.
        state.acked.remove(&node);
        lost
    }
}

fn routes(state: &State) -> MemoryRoutes {
    let files = state
        .tables
        .values()
        .flat_map(|table| {
            table.files.iter().map(|held| MemoryRoute {
                location: table.location.clone(),
                file: Some(held.file.clone()),
                addr: held.addr.clone(),
            })
        })
        .collect();
    MemoryRoutes {
        epoch: state.epoch,
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(nodes: &[u64]) -> Loaded {
        Loaded {
            location: "file:///data/t".into(),
            files: nodes
                .iter()
                .enumerate()
                .map(|(i, &node)| HeldFile {
                    file: ChunkFile {
                        path: format!("data/t/{i}.parquet"),
                        size: 10,
                        ..ChunkFile::default()
                    },
                    node,
                    addr: format!("127.0.0.1:{node}"),
                })
                .collect(),
        }
    }

    #[test]
    fn workers_behind_get_the_routes_until_they_take_them() {
        let tables = MemoryTables::default();
        // A new worker (epoch 0) hears of the empty routes.
        let first = tables.heartbeat(7, 0).unwrap();
        assert!(first.files.is_empty());
        assert!(tables.heartbeat(7, first.epoch).is_none());
        let epoch = tables.set("t", loaded(&[1, 2, 1]));
        assert!(!tables.taken_by(&[7], epoch));
        let routes = tables.heartbeat(7, first.epoch).unwrap();
        assert_eq!(routes.epoch, epoch);
        assert_eq!(routes.files.len(), 3);
        assert!(tables.heartbeat(7, epoch).is_none());
        assert!(tables.taken_by(&[7], epoch));
    }

    #[test]
    fn a_lost_memory_node_takes_only_its_files_away() {
        let tables = MemoryTables::default();
        let epoch = tables.set("t", loaded(&[1, 2, 1]));
        assert!(tables.node_lost(3).is_empty());
        assert_eq!(tables.epoch(), epoch, "nothing changed");
        assert_eq!(tables.node_lost(1), vec![("t".to_string(), 2)]);
        let routes = tables.routes();
        assert!(routes.epoch > epoch);
        assert_eq!(routes.files.len(), 1);
        assert_eq!(routes.files[0].addr, "127.0.0.1:2");
        let (gone, _) = tables.remove("t").unwrap();
        assert_eq!(gone.files.len(), 1);
        assert!(tables.remove("t").is_none());
        assert!(tables.routes().files.is_empty());
    }
}
