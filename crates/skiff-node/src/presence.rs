//! What workers and memory nodes share: binding their Flight port and
//! keeping in touch with the coordinator.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use skiff_flight::protocol::{
    HEARTBEAT_INTERVAL, Heartbeat, HeartbeatReply, Register, Registered, Role, action,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::{Result, ServerError, SqlState};

/// How often an unreachable coordinator is mentioned in the log.
const COMPLAIN_EVERY: Duration = Duration::from_secs(10);

/// Who a node is, as it registers.
#[derive(Clone, Debug)]
pub struct NodeIdentity {
    pub role: Role,
    pub addr: String,
    pub cores: u32,
    pub memory: u64,
    /// Tables a memory node asks to hold (`--preload`).
    pub preload: Vec<String>,
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| {
        ServerError::new(
            SqlState::ConnectionFailure,
            format!("cannot listen on {addr}: {e}"),
        )
    })
}

pub fn local_addr(listener: &TcpListener) -> Result<SocketAddr> {
    listener
        .local_addr()
        .map_err(|e| ServerError::internal(format!("listening address unknown: {e}")))
}

/// [`report_to_coordinator`] on a thread of its own, with a runtime of its
/// own, until `shutdown` or until this future is dropped; `replies` sees
/// every reply to a heartbeat. Query work keeps
/// the node's runtime busy with long CPU-bound polls, and its timers and
/// sockets are only served between them: on a loaded machine heartbeats
/// then stalled for seconds and the coordinator declared live workers dead.
pub async fn report_from_own_thread(
    coordinator: String,
    identity: NodeIdentity,
    reports: impl Fn() -> Heartbeat + Send + 'static,
    replies: impl Fn(&HeartbeatReply) + Send + 'static,
    shutdown: CancellationToken,
) -> Result<()> {
    let stop = shutdown.child_token();
    let _stop_on_drop = stop.clone().drop_guard();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServerError::internal(format!("no runtime for heartbeats: {e}")))?;
    let span = tracing::Span::current();
    let (ended, on_end) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("skiff-heartbeat".into())
        .spawn(move || {
            let _span = span.enter();
            runtime.block_on(report_to_coordinator(
                &coordinator,
                identity,
                reports,
                replies,
                stop,
            ));
            drop(ended);
        })
        .map_err(|e| ServerError::internal(format!("no thread for heartbeats: {e}")))?;
    // Err only says the thread ended.
    let _ = on_end.await;
    Ok(())
}

/// Register with the coordinator at `coordinator` and send a heartbeat
/// every [`HEARTBEAT_INTERVAL`] (with what `reports()` says of running queries) until
/// `shutdown`, or until the coordinator says the node was removed (then the
/// node stops: its caller's serving ends with this). Registers again
/// whenever the coordinator no longer knows the node; never gives up on an
/// unreachable coordinator.
async fn report_to_coordinator(
    coordinator: &str,
    identity: NodeIdentity,
    reports: impl Fn() -> Heartbeat,
    replies: impl Fn(&HeartbeatReply),
    shutdown: CancellationToken,
) {
    let register = Register {
        role: identity.role as i32,
        addr: identity.addr.clone(),
        cores: identity.cores,
        memory: identity.memory,
        pid: std::process::id(),
        preload: identity.preload.clone(),
    };
    let mut client = None;
    let mut node_id = None;
    let mut removed = false;
    let mut last_complaint: Option<Instant> = None;
    let mut tick = tokio::time::interval(HEARTBEAT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut complain = |error: &tonic::Status| {
            if last_complaint.is_none_or(|t| t.elapsed() >= COMPLAIN_EVERY) {
                warn!(%coordinator, error = error.message(), "coordinator unreachable");
                last_complaint = Some(Instant::now());
            }
        };
        if client.is_none() {
            match skiff_flight::connect(coordinator).await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    complain(&e);
                    continue;
                }
            }
        }
        let Some(c) = client.as_mut() else {
            continue;
        };
        let outcome = match node_id {
            None => skiff_flight::do_action::<_, Registered>(c, action::REGISTER, &register)
                .await
                .map(|r| {
                    info!(node = r.node_id, role = identity.role.name(), "registered");
                    node_id = Some(r.node_id);
                }),
            Some(id) => {
                let beat = Heartbeat {
                    node_id: id,
                    ..reports()
                };
                skiff_flight::do_action::<_, HeartbeatReply>(c, action::HEARTBEAT, &beat)
                    .await
                    .map(|reply| {
                        if reply.removed {
                            info!(node = id, "removed from the cluster; leaving");
                            removed = true;
                        } else if !reply.known {
                            warn!(node = id, "coordinator forgot this node; registering again");
                            node_id = None;
                        } else {
                            replies(&reply);
                        }
                    })
            }
        };
        if let Err(e) = outcome {
            complain(&e);
            client = None;
        }
        if removed {
            return;
        }
    }
}
