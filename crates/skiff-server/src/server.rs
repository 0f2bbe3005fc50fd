//! Starting a coordinator: its cluster service, the dead-node sweep, the
//! front doors and the metrics endpoint, all stopped by one token.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::CoordinatorConfig;
use crate::coordinator::{ClusterService, Coordinator};
use crate::error::{Result, ServerError};
use crate::node::{bind, local_addr};

/// Where a started coordinator listens (ports chosen when 0 was asked).
#[derive(Clone, Debug)]
pub struct Listening {
    pub cluster: SocketAddr,
    pub pg: Option<SocketAddr>,
    pub flight: Option<SocketAddr>,
}

/// Bind every port of `config`, then serve until `shutdown`. `ready` hears
/// the bound addresses once all ports accept connections.
pub async fn serve_coordinator(
    config: CoordinatorConfig,
    shutdown: CancellationToken,
    ready: impl FnOnce(&Coordinator, &Listening),
) -> Result<()> {
    let coordinator = Coordinator::new(&config).await?;
    if let Some(addr) = config.metrics_addr {
        crate::metrics::install(addr)?;
        info!(%addr, "metrics at /metrics");
    }
    let cluster_listener = bind(config.cluster_addr).await?;
    let pg_listener = match config.pg_addr {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let flight_listener = match config.flight_addr {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let listening = Listening {
        cluster: local_addr(&cluster_listener)?,
        pg: pg_listener.as_ref().map(local_addr).transpose()?,
        flight: flight_listener.as_ref().map(local_addr).transpose()?,
    };
    if coordinator.users().required() {
        info!("clients must authenticate (SCRAM-SHA-256 / basic)");
    } else {
        warn!(
            "no users configured: accepting loopback connections only, without a password \
             (set SKIFF_USER and SKIFF_PASSWORD or pass --users FILE)"
        );
    }
    let cluster = skiff_flight::server_builder()
        .add_service(skiff_flight::flight_server(Arc::new(ClusterService {
            inner: Arc::clone(coordinator.inner()),
        })))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(cluster_listener).with_nodelay(Some(true)),
            shutdown.clone().cancelled_owned(),
        );
    let pg = async {
        match pg_listener {
            Some(listener) => {
                crate::pg::serve(
                    coordinator.clone(),
                    listener,
                    config.tls.clone(),
                    shutdown.clone(),
                )
                .await
            }
            None => Ok(()),
        }
    };
    let flight = async {
        match flight_listener {
            Some(listener) => {
                crate::flight_sql::serve(coordinator.clone(), listener, shutdown.clone()).await
            }
            None => Ok(()),
        }
    };
    ready(&coordinator, &listening);
    let (cluster, pg, flight, ()) = tokio::join!(
        cluster,
        pg,
        flight,
        coordinator.sweep_until(shutdown.clone())
    );
    cluster.map_err(|e| ServerError::internal(format!("cluster service: {e}")))?;
    pg?;
    flight?;
    Ok(())
}
