//! The memory-node role: registers and keeps its heartbeat, and serves the
//! state cache (state separation: a running query's state on its way
//! between workers, or kept while the query is suspended). Table chunks
//! (pipeline groups) will be served from here too.
//!
//! [`cache`] is the store (memory, capacity, spill, TTL, read-once,
//! durability, checksums; no network), [`service`] its Flight service.

pub mod cache;
pub mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use skiff_flight::protocol::{Heartbeat, HeartbeatReply, Role};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use cache::{CacheConfig, StateCache};
pub use service::{MemnodeService, serve_cache};

use crate::error::{Result, ServerError};
use crate::node::{NodeIdentity, bind, local_addr, report_from_own_thread};

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
    let listener = bind(config.listen).await?;
    let addr = local_addr(&listener)?;
    info!(
        %addr,
        coordinator = %config.coordinator,
        state_dir = %dir.display(),
        memory = config.memory,
        "memory node listening"
    );
    let identity = NodeIdentity {
        role: Role::MemoryNode,
        addr: addr.to_string(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory: config.memory,
    };
    let server = serve_cache(listener, Arc::new(cache), shutdown.clone());
    let heartbeats = report_from_own_thread(
        config.coordinator.clone(),
        identity,
        Heartbeat::default,
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
mod tests;
