//! The coordinator's internal Flight service: workers and memory nodes
//! register and send heartbeats here.

use std::sync::Arc;

use arrow_flight::Action;
use prost::Message;
use skiff_flight::Handler;
use skiff_flight::protocol::{
    Heartbeat, HeartbeatReply, Register, Registered, Role, VacateWorker, action,
};
use tonic::Status;
use tracing::info;

use super::membership::NodeState;
use crate::inner::Inner;
use skiff_node::error::to_status;

/// Where nodes register and send their heartbeats: the coordinator's
/// cluster port.
pub struct ClusterService {
    inner: Arc<Inner>,
}

impl ClusterService {
    pub fn new(coordinator: &crate::Coordinator) -> Self {
        Self {
            inner: Arc::clone(&coordinator.inner),
        }
    }
}

#[tonic::async_trait]
impl Handler for ClusterService {
    async fn action(&self, action: Action) -> Result<bytes::Bytes, Status> {
        let bad = |e: prost::DecodeError| Status::invalid_argument(format!("bad message: {e}"));
        match action.r#type.as_str() {
            action::REGISTER => {
                let request = Register::decode(action.body).map_err(bad)?;
                let role = Role::try_from(request.role)
                    .map_err(|_| Status::invalid_argument("unknown role"))?;
                let node_id = self.inner.membership.register(&request);
                info!(
                    node = node_id,
                    role = role.name(),
                    addr = %request.addr,
                    cores = request.cores,
                    "node registered"
                );
                if role == Role::Worker {
                    self.inner.partition_map();
                }
                if role == Role::MemoryNode && !request.preload.is_empty() {
                    super::memory_view::preload(&self.inner, node_id, request.preload.clone());
                }
                Ok(Registered { node_id }.encode_to_vec().into())
            }
            action::HEARTBEAT => {
                let beat = Heartbeat::decode(action.body).map_err(bad)?;
                let state = self.inner.membership.heartbeat(&beat);
                let known = state == Some(NodeState::Alive);
                if known {
                    for query in beat.queries.iter().chain(&beat.ended) {
                        self.inner.queries.report(beat.node_id, query);
                    }
                    for scan in &beat.scans {
                        let run = self.inner.scan_run;
                        self.inner.queries.scanned(beat.node_id, scan, run);
                    }
                }
                let removed = state == Some(NodeState::Removed);
                let worker =
                    known && self.inner.membership.role(beat.node_id) == Some(Role::Worker);
                let owned = if worker {
                    super::resize::owned_by(&self.inner, beat.node_id).await
                } else {
                    Vec::new()
                };
                let memory = worker
                    .then(|| {
                        self.inner
                            .memory_tables
                            .heartbeat(beat.node_id, beat.memory_epoch)
                    })
                    .flatten();
                Ok(HeartbeatReply {
                    known,
                    removed,
                    owned,
                    memory,
                }
                .encode_to_vec()
                .into())
            }
            action::VACATE => {
                let request = VacateWorker::decode(action.body).map_err(bad)?;
                let Some(id) = self.inner.membership.resolve_worker(&request.addr) else {
                    return Err(Status::not_found(format!("no worker at {}", request.addr)));
                };
                super::vacate::vacate(&self.inner, id, super::vacate::Vacate::Finish)
                    .map_err(|e| to_status(&e))?;
                Ok(bytes::Bytes::new())
            }
            other => Err(Status::unimplemented(format!("unknown action {other}"))),
        }
    }
}
