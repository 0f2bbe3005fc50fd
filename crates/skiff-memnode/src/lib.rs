//! The memory node: the state cache, tables held as chunks, the fragments
//! it runs in workers' place, and the Flight service that serves them.
//!
//! It registers and keeps its heartbeat, serves the
//! state cache (state separation: a running query's state on its way
//! between workers, or kept while the query is suspended) and holds
//! tables' columns as chunks for workers' scans (pipeline groups).
//!
//! [`cache`] is the state store (memory, capacity, spill, TTL, read-once,
//! durability, checksums; no network), [`chunks`] the chunk store,
//! [`fragments`] the query fragments it runs in workers' place (their
//! output estimated from the sketches, and whether to run them decided, by
//! `skiff-offload`'s models; [`calibrate`] trains them on this machine),
//! [`link`] the emulated network link, [`service`] the Flight service,
//! [`zones`] the min/max per chunk that prunes what a scan is sent,
//! with `skiff-offload`'s sketches of each column of each file held.

pub mod cache;
pub mod calibrate;
pub mod chunks;
pub mod fragments;
pub mod limits;
pub mod link;
pub mod service;
mod zones;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use skiff_flight::protocol::{Heartbeat, HeartbeatReply, Role};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use cache::{CacheConfig, StateCache};
pub use chunks::ChunkStore;
pub use link::{Link, parse_bandwidth};
pub use service::{MemnodeService, serve, serve_cache};

use skiff_node::error::{Result, ServerError};
use skiff_node::presence::{NodeIdentity, bind, local_addr, report_from_own_thread};

/// Time to live of cached state put without one.
pub const DEFAULT_STATE_TTL: Duration = Duration::from_secs(3600);

/// Settings of a memory node.
#[derive(Clone, Debug)]
pub struct MemnodeConfig {
    pub coordinator: String,
    pub listen: SocketAddr,
    /// Memory offered for cached state and chunks, in bytes (0 = no limit).
    pub memory: u64,
    /// Where cached state spills and durable state lives. `None`: a fresh
    /// directory under the system temporary directory, removed at exit
    /// (nothing durable can outlive the process there anyway).
    pub state_dir: Option<PathBuf>,
    /// Time to live of state put without one.
    pub state_ttl: Duration,
    /// Bytes of tables' chunks it may hold; by default `memory` when that
    /// is set, else [`DEFAULT_TABLE_SHARE`] of the machine's memory.
    pub table_memory: Option<u64>,
    /// Largest chunk, in bytes.
    pub chunk_size: usize,
    /// The emulated link's bandwidth in bits per second; `None`: as fast
    /// as the network.
    pub link_bandwidth: Option<u64>,
    /// Tables the coordinator loads into the memory nodes whenever this one
    /// registers (at start, and after a restart).
    pub preload: Vec<String>,
    /// Threads offloaded fragments run on.
    pub offload_threads: usize,
    /// The cost models that decide `auto` fragments (refits are saved
    /// there too); `None`: such fragments are pushed back.
    pub offload_models: Option<PathBuf>,
}

/// The share of the machine's memory tables' chunks may take when neither
/// `--table-memory` nor `--memory` says.
pub const DEFAULT_TABLE_SHARE: f64 = 0.25;

impl MemnodeConfig {
    /// Bytes of the chunk store.
    pub fn table_capacity(&self) -> u64 {
        match (self.table_memory, self.memory) {
            (Some(bytes), _) => bytes,
            (None, memory) if memory > 0 => memory,
            (None, _) => {
                let machine = skiff_engine::buffer::machine_memory().unwrap_or(4 << 30);
                (machine as f64 * DEFAULT_TABLE_SHARE) as u64
            }
        }
    }
}

/// Run a memory node until `shutdown`.
pub async fn run_memnode(config: MemnodeConfig, shutdown: CancellationToken) -> Result<()> {
    let (dir, own_dir) = match &config.state_dir {
        Some(dir) => (dir.clone(), false),
        None => {
            let name = format!(
                "skiff-state-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            );
            (std::env::temp_dir().join(name), true)
        }
    };
    let cache = StateCache::open(CacheConfig {
        dir: dir.clone(),
        capacity: config.memory,
        default_ttl: config.state_ttl,
    })
    .map_err(|e| ServerError::internal(format!("memnode: {e}")))?;
    let chunks = Arc::new(ChunkStore::new(
        config.table_capacity(),
        config.chunk_size.max(1),
    ));
    let link = config.link_bandwidth.map(|bits| Arc::new(Link::new(bits)));
    let listener = bind(config.listen).await?;
    let addr = local_addr(&listener)?;
    info!(
        %addr,
        coordinator = %config.coordinator,
        state_dir = %dir.display(),
        memory = config.memory,
        table_memory = config.table_capacity(),
        chunk_size = config.chunk_size,
        link_bits_per_second = config.link_bandwidth.unwrap_or(0),
        offload_threads = config.offload_threads,
        "memory node listening"
    );
    let identity = NodeIdentity {
        role: Role::MemoryNode,
        addr: addr.to_string(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory: config.memory,
        preload: config.preload.clone(),
    };
    let mut offloader = fragments::Offloader::new(config.offload_threads)
        .map_err(|e| ServerError::internal(format!("memnode: offload threads: {e}")))?;
    if let Some(path) = &config.offload_models {
        let models = skiff_offload::costs::CostModels::load(path)
            .map_err(|e| ServerError::internal(format!("memnode: offload cost models: {e}")))?;
        if models.threads != config.offload_threads {
            warn!(
                calibrated = models.threads,
                offload_threads = config.offload_threads,
                "the cost models were calibrated for another number of offload threads"
            );
        }
        match models.stale() {
            // Refitting them would mix features: `auto` pushes back until
            // a calibration replaces them.
            Some(why) => warn!(path = %path.display(), "offload cost models not used: {why}"),
            None => {
                info!(path = %path.display(), "offload cost models loaded");
                offloader = offloader.with_models(models, Some(path.clone()));
            }
        }
    }
    let cache = Arc::new(cache);
    let reports = {
        let (cache, chunks) = (Arc::clone(&cache), Arc::clone(&chunks));
        move || {
            let states = cache.stats();
            Heartbeat {
                memory_used: chunks.bytes() + states.memory_bytes,
                cache_bytes: states.memory_bytes + states.disk_bytes,
                ..Heartbeat::default()
            }
        }
    };
    let service = MemnodeService::new(cache)
        .with_chunks(chunks)
        .with_link(link)
        .with_offloader(Some(Arc::new(offloader)));
    let server = serve(listener, service, shutdown.clone());
    let heartbeats = report_from_own_thread(
        config.coordinator.clone(),
        identity,
        reports,
        |_: &HeartbeatReply| {},
        shutdown.clone(),
    );
    let outcome = tokio::select! {
        served = server => served,
        beat = heartbeats => beat,
    };
    if own_dir && let Err(e) = std::fs::remove_dir_all(&dir) {
        warn!(dir = %dir.display(), error = %e, "cannot remove the state directory");
    }
    outcome
}

#[cfg(test)]
mod checkpoint_tests;
#[cfg(test)]
mod chunk_tests;
#[cfg(test)]
mod fragment_tests;
#[cfg(test)]
mod tests;
