//! The memory-node role. For now it registers and keeps its heartbeat, so
//! the cluster has its shape; the state cache (state separation) and table
//! chunks (pipeline groups) are served from here as they arrive.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::Action;
use skiff_flight::protocol::Role;
use skiff_flight::{Handler, flight_server};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::info;

use crate::error::{Result, ServerError};
use crate::node::{NodeIdentity, bind, local_addr, report_to_coordinator};

/// Settings of a memory node.
#[derive(Clone, Debug)]
pub struct MemnodeConfig {
    pub coordinator: String,
    pub listen: SocketAddr,
    /// Memory offered for cached state and chunks, in bytes.
    pub memory: u64,
}

struct MemnodeService;

#[tonic::async_trait]
impl Handler for MemnodeService {
    async fn action(&self, action: Action) -> std::result::Result<bytes::Bytes, Status> {
        Err(Status::unimplemented(format!(
            "memory node has no action {}",
            action.r#type
        )))
    }
}

/// Run a memory node until `shutdown`.
pub async fn run_memnode(config: MemnodeConfig, shutdown: CancellationToken) -> Result<()> {
    let listener = bind(config.listen).await?;
    let addr = local_addr(&listener)?;
    info!(%addr, coordinator = %config.coordinator, "memory node listening");
    let identity = NodeIdentity {
        role: Role::MemoryNode,
        addr: addr.to_string(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        memory: config.memory,
    };
    let server = tonic::transport::Server::builder()
        .add_service(flight_server(Arc::new(MemnodeService)))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            shutdown.clone().cancelled_owned(),
        );
    let heartbeats =
        report_to_coordinator(&config.coordinator, identity, Vec::new, shutdown.clone());
    tokio::select! {
        served = server => served.map_err(|e| ServerError::internal(format!("memnode: {e}")))?,
        () = heartbeats => {}
    }
    Ok(())
}
