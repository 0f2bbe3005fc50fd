//! The worker's side of tables in memory nodes: which node holds which
//! file version (the routes the coordinator's heartbeat replies carry) and
//! the fetch of a row group's columns from it over Flight, as the engine's
//! remote tier ([`ChunkSource`]), with the scan's predicate when it prunes.
//! It is also where fragments are offered ([`FragmentTarget`]): to the
//! node holding every file of a partition. A node that fails a fetch or a
//! fragment is left alone
//! for [`MEMORY_NODE_BACKOFF`]; its scans read storage meanwhile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use arrow_flight::flight_service_client::FlightServiceClient;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use skiff_engine::buffer::{ChunkFetch, ChunkSource, Fetched, Prune, Pruned};
use skiff_engine::offload::{Answer, FragmentTarget, Offer};
use skiff_flight::chunks::chunk_file;
use skiff_flight::fragments::{costs, run_fragment, schema_bytes};
use skiff_flight::protocol::{
    ChunkFile, ChunkPrune, FragmentFile, FragmentRequest, MemoryRoutes, OffloadMode,
};
use tonic::transport::Channel;
use tracing::{info, warn};

use crate::limits::{
    CHUNK_FETCH_DEADLINE, FRAGMENT_DECISION_DEADLINE, FRAGMENT_IDLE_DEADLINE, MEMORY_NODE_BACKOFF,
};

/// The routes and connections; cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemoryTier {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    routes: RwLock<Routes>,
    clients: skiff_flight::Clients,
    /// Nodes whose last fetch failed, and when they are tried again.
    down: Mutex<HashMap<String, Instant>>,
}

#[derive(Debug, Default)]
struct Routes {
    epoch: u64,
    /// By path: the version held and the node's address.
    files: HashMap<String, (ChunkFile, String)>,
    locations: HashSet<String>,
}

impl MemoryTier {
    /// The epoch of the routes in use (0: none received yet).
    pub(crate) fn epoch(&self) -> u64 {
        read(&self.inner.routes).epoch
    }

    /// Use `routes` from now on.
    pub(crate) fn apply(&self, routes: &MemoryRoutes) {
        let mut files = HashMap::with_capacity(routes.files.len());
        let mut locations = HashSet::new();
        for route in &routes.files {
            let Some(file) = &route.file else { continue };
            files.insert(file.path.clone(), (file.clone(), route.addr.clone()));
            locations.insert(route.location.clone());
        }
        info!(
            epoch = routes.epoch,
            files = files.len(),
            tables = locations.len(),
            "memory routes"
        );
        *self.inner.routes.write().unwrap_or_else(|p| p.into_inner()) = Routes {
            epoch: routes.epoch,
            files,
            locations,
        };
    }
}

fn read(routes: &RwLock<Routes>) -> std::sync::RwLockReadGuard<'_, Routes> {
    routes.read().unwrap_or_else(|p| p.into_inner())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inner {
    async fn client(&self, addr: &str) -> Result<FlightServiceClient<Channel>, tonic::Status> {
        self.clients.get(addr).await
    }

    /// Leave `addr` alone for a while, and connect anew after.
    fn failed(&self, addr: &str, error: &tonic::Status) {
        let first = lock(&self.down)
            .insert(addr.to_string(), Instant::now() + MEMORY_NODE_BACKOFF)
            .is_none();
        self.clients.forget(addr);
        if first {
            warn!(%addr, error = error.message(), "memory node failed a fetch; reading storage");
        }
    }

    fn is_down(&self, addr: &str) -> bool {
        let mut down = lock(&self.down);
        match down.get(addr) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                down.remove(addr);
                false
            }
            None => false,
        }
    }
}

impl MemoryTier {
    /// The address of the node holding `file`'s version, when one does and
    /// is not left alone after a failure.
    fn route(&self, file: &skiff_engine::buffer::FileVersion) -> Option<String> {
        let addr = {
            let routes = read(&self.inner.routes);
            let (held, addr) = routes.files.get(&file.path)?;
            // Another version of the file: the node's chunks are not it.
            if held.size != file.size || held.modified != file.modified {
                return None;
            }
            addr.clone()
        };
        (!self.inner.is_down(&addr)).then_some(addr)
    }

    /// `fetch` from the node at `addr`, pruned by `prune` when given.
    fn fetch_from(
        &self,
        addr: String,
        fetch: ChunkFetch,
        prune: Option<ChunkPrune>,
    ) -> BoxFuture<'static, Pruned> {
        let inner = Arc::clone(&self.inner);
        async move {
            let fetched = async {
                let mut client = inner.client(&addr).await?;
                skiff_flight::chunks::fetch_chunks(
                    &mut client,
                    &fetch.file,
                    fetch.row_group,
                    &fetch.columns,
                    fetch.rows,
                    prune,
                    CHUNK_FETCH_DEADLINE,
                )
                .await
            }
            .await;
            fetched.map_err(|e| {
                // A file the node does not hold is not the node's fault.
                if e.code() != tonic::Code::NotFound {
                    inner.failed(&addr, &e);
                }
                format!("memory node {addr}: {}", e.message())
            })
        }
        .boxed()
    }
}

/// `prune` on the wire, for a row group of `rows` rows.
fn chunk_prune(prune: &Prune, rows: usize) -> ChunkPrune {
    ChunkPrune {
        schema: prune.schema.clone(),
        predicate: prune.predicate.clone(),
        names: prune.columns.iter().map(|(n, _)| n.to_string()).collect(),
        roots: prune.columns.iter().map(|(_, r)| *r as u64).collect(),
        rows: rows as u64,
    }
}

impl FragmentTarget for MemoryTier {
    fn offer(&self, offer: Offer) -> Option<BoxFuture<'static, Result<Answer, String>>> {
        let mut addr: Option<String> = None;
        for file in &offer.files {
            let held = self.route(&file.version)?;
            if addr.get_or_insert_with(|| held.clone()) != &held {
                // Files on several nodes: the partition runs here.
                return None;
            }
        }
        let addr = addr?;
        let input_schema = schema_bytes(&offer.fragment.input_schema).ok()?;
        let request = FragmentRequest {
            plan: offer.fragment.plan.clone(),
            input_schema,
            files: offer
                .files
                .iter()
                .map(|f| FragmentFile {
                    file: Some(chunk_file(&f.version)),
                    ranged: f.range.is_some(),
                    start: f.range.map_or(0, |r| r.0),
                    end: f.range.map_or(0, |r| r.1),
                })
                .collect(),
            mode: if offer.auto {
                OffloadMode::Auto
            } else {
                OffloadMode::Always
            } as i32,
            query_id: offer.query_id,
            fragment: true,
        };
        let inner = Arc::clone(&self.inner);
        Some(
            async move {
                let answered = async {
                    let mut client = inner.client(&addr).await?;
                    run_fragment(
                        &mut client,
                        &request,
                        FRAGMENT_DECISION_DEADLINE,
                        FRAGMENT_IDLE_DEADLINE,
                    )
                    .await
                }
                .await;
                let (decision, events) = answered.map_err(|e| {
                    inner.failed(&addr, &e);
                    format!("memory node {addr}: {}", e.message())
                })?;
                let failing = Arc::clone(&inner);
                let events = events
                    .map_err(move |e| {
                        failing.failed(&addr, &e);
                        e.message().to_string()
                    })
                    .boxed();
                Ok(Answer {
                    offloaded: decision.offload,
                    reason: decision.reason,
                    row_groups: decision.row_groups.iter().map(|&n| n as usize).collect(),
                    estimated_rows: decision.estimated_rows,
                    predicted: decision.predicted.as_ref().map(costs),
                    events,
                })
            }
            .boxed(),
        )
    }
}

impl ChunkSource for MemoryTier {
    fn holds(&self, table: &str) -> bool {
        read(&self.inner.routes).locations.contains(table)
    }

    fn fetch(&self, fetch: ChunkFetch) -> Option<BoxFuture<'static, Fetched>> {
        let addr = self.route(&fetch.file)?;
        let whole = self.fetch_from(addr, fetch, None);
        Some(async move { whole.await.map(|(_, columns)| columns) }.boxed())
    }

    fn fetch_pruned(
        &self,
        fetch: ChunkFetch,
        prune: Arc<Prune>,
    ) -> Option<BoxFuture<'static, Pruned>> {
        let addr = self.route(&fetch.file)?;
        let prune = chunk_prune(&prune, fetch.rows);
        Some(self.fetch_from(addr, fetch, Some(prune)))
    }
}
