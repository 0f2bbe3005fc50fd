//! Starting a coordinator: its cluster service, the dead-node sweep, the
//! front doors and the metrics endpoint, all stopped by one token.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use skiff_console::limits::CONSOLE_PODS_MAX;
use skiff_coordinator::config::{CoordinatorConfig, Listening};
use skiff_coordinator::{ClusterService, Coordinator};
use skiff_node::error::{Result, ServerError, SqlState};
use skiff_node::presence::{bind, local_addr};

/// Bind every port of `config`, then serve until `shutdown`. `ready` hears
/// the bound addresses once all ports accept connections.
pub async fn serve_coordinator(
    config: CoordinatorConfig,
    shutdown: CancellationToken,
    ready: impl FnOnce(&Coordinator, &Listening),
) -> Result<()> {
    if !config.pods.is_empty() && config.http_addr.is_none() {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            "--pod draws a pod on the web console, which --http-addr off turns off",
        ));
    }
    if config.pods.len() > CONSOLE_PODS_MAX {
        return Err(ServerError::new(
            SqlState::InvalidParameterValue,
            format!(
                "{} pods to watch; the console watches at most {CONSOLE_PODS_MAX}",
                config.pods.len()
            ),
        ));
    }
    let coordinator = Coordinator::new(&config).await?;
    let metrics_listener = match config.metrics_addr {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let http_listener = match config.http_addr {
        Some(addr) => Some(bind(addr).await.map_err(|e| {
            ServerError::new(
                e.state,
                format!(
                    "{} (the web console; pass --http-addr ADDR, or --http-addr off)",
                    e.message
                ),
            )
        })?),
        None => None,
    };
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
        http: http_listener.as_ref().map(local_addr).transpose()?,
    };
    if let Some(listener) = &metrics_listener {
        info!(addr = %local_addr(listener)?, "metrics at /metrics");
    }
    if let Some(addr) = listening.http {
        info!(%addr, "web console (and /metrics)");
    }
    if coordinator.users().required() {
        info!("clients must authenticate (SCRAM-SHA-256 / basic)");
    } else {
        warn!(
            "no users configured: accepting loopback connections only, without a password \
             (set SKIFF_USER and SKIFF_PASSWORD or pass --users FILE)"
        );
    }
    let cluster = skiff_flight::server_builder()
        .add_service(skiff_flight::flight_server(Arc::new(ClusterService::new(
            &coordinator,
        ))))
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
    let console = async {
        match http_listener {
            Some(listener) => {
                let listening = listening.clone();
                let pods = config.pods.clone();
                skiff_console::serve(
                    coordinator.clone(),
                    listener,
                    listening,
                    pods,
                    shutdown.clone(),
                )
                .await
            }
            None => Ok(()),
        }
    };
    let metrics = async {
        match metrics_listener {
            Some(listener) => skiff_console::serve_metrics(listener, shutdown.clone()).await,
            None => Ok(()),
        }
    };
    let upkeep = async {
        if listening.http.is_some() || config.metrics_addr.is_some() {
            skiff_coordinator::metrics::upkeep_until(shutdown.clone()).await;
        }
    };
    ready(&coordinator, &listening);
    let (cluster, pg, flight, console, metrics, (), ()) = tokio::join!(
        cluster,
        pg,
        flight,
        console,
        metrics,
        upkeep,
        coordinator.sweep_until(shutdown.clone())
    );
    cluster.map_err(|e| ServerError::internal(format!("cluster service: {e}")))?;
    pg?;
    flight?;
    console?;
    metrics?;
    Ok(())
}
