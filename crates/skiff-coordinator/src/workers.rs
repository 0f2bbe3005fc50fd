//! The coordinator's connections to its workers, and what a failed call to
//! one means: the worker's own error, or the worker gone (unreachable, or
//! its connection broke mid-call). Gone is an error's kind
//! ([`Cause::WorkerGone`](skiff_node::error::Cause::WorkerGone)), set where the
//! failure is seen and never read back from its text.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_flight::error::FlightError;
use arrow_flight::flight_service_client::FlightServiceClient;
use skiff_flight::protocol::{CancelQuery, action};
use tonic::transport::Channel;

use skiff_node::error::{Result, ServerError, SqlState, from_status};
use skiff_node::sync::lock;

pub(crate) type WorkerClient = FlightServiceClient<Channel>;

/// Connections by worker address, opened on first use and reused across
/// queries (a channel reconnects by itself).
#[derive(Default)]
pub(crate) struct WorkerClients(Mutex<HashMap<String, WorkerClient>>);

impl WorkerClients {
    /// A connection to the worker at `addr`; an error of kind
    /// [`Cause::WorkerGone`](skiff_node::error::Cause::WorkerGone) when it cannot be reached.
    pub(crate) async fn get(&self, addr: &str) -> Result<WorkerClient> {
        if let Some(client) = lock(&self.0).get(addr) {
            return Ok(client.clone());
        }
        let client = skiff_flight::connect(addr)
            .await
            .map_err(|s| ServerError::worker_gone(format!("worker at {addr}: {}", s.message())))?;
        lock(&self.0).insert(addr.to_string(), client.clone());
        Ok(client)
    }

    /// Ask the worker at `addr` to stop query `query_id`; best effort (a
    /// dropped result stream stops it anyway).
    pub(crate) async fn cancel(self: Arc<Self>, addr: String, query_id: u64) {
        if let Ok(mut client) = self.get(&addr).await {
            let _ = skiff_flight::do_action::<_, CancelQuery>(
                &mut client,
                action::CANCEL,
                &CancelQuery { query_id },
            )
            .await;
        }
    }
}

/// An error of worker `worker`'s result stream.
pub(crate) fn flight_error(worker: u64, error: FlightError) -> ServerError {
    match error {
        FlightError::Tonic(status) => lost_or(worker, &status),
        other => ServerError::internal(format!("bad result stream from worker {worker}: {other}")),
    }
}

/// A worker's error as it sent it, or
/// [`Cause::WorkerGone`](skiff_node::error::Cause::WorkerGone) when the transport
/// broke (the process died or the connection dropped).
pub(crate) fn lost_or(worker: u64, status: &tonic::Status) -> ServerError {
    let error = from_status(status);
    if error.state == SqlState::ConnectionFailure {
        return ServerError::worker_gone(format!(
            "worker {worker} was lost while running the query ({})",
            error.message
        ));
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_node::error::Cause;

    #[tokio::test]
    async fn an_unreachable_worker_is_gone() {
        // A port nothing listens on: bind one, then free it.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let clients = WorkerClients::default();
        let error = clients
            .get(&addr.to_string())
            .await
            .expect_err("nothing listens there");
        assert_eq!(error.cause, Cause::WorkerGone, "{error}");
        assert_eq!(error.state, SqlState::CannotConnectNow);
    }

    #[test]
    fn a_broken_transport_is_gone_and_a_worker_error_is_not() {
        let broken = tonic::Status::unavailable("connection reset");
        assert_eq!(lost_or(3, &broken).cause, Cause::WorkerGone);
        let refused = tonic::Status::invalid_argument("no such table");
        let error = lost_or(3, &refused);
        assert_eq!(error.cause, Cause::Other, "{error}");
    }
}
