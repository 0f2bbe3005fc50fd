//! Counters and timings for the Prometheus endpoint (`--metrics-addr`,
//! served at `/metrics`). Recording is free when no exporter is installed.

use std::net::SocketAddr;

use metrics_exporter_prometheus::PrometheusBuilder;

use crate::coordinator::{QueryEntry, QueryStatus};
use crate::error::{Result, ServerError};

/// Serve `/metrics` on `addr` for the rest of the process's life.
pub fn install(addr: SocketAddr) -> Result<()> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| ServerError::internal(format!("metrics endpoint on {addr}: {e}")))
}

pub(crate) fn query_ended(entry: &QueryEntry) {
    let status = match entry.info().status {
        QueryStatus::Finished => "finished",
        QueryStatus::Failed(_) => "failed",
        QueryStatus::Canceled(_) => "canceled",
        QueryStatus::Planning | QueryStatus::Running | QueryStatus::Suspended => "unknown",
    };
    metrics::counter!("skiff_queries_total", "status" => status).increment(1);
    metrics::histogram!("skiff_query_seconds").record(entry.elapsed().as_secs_f64());
    metrics::counter!("skiff_rows_sent_total").increment(entry.info().rows_sent);
}

pub(crate) fn node_lost() {
    metrics::counter!("skiff_nodes_lost_total").increment(1);
}

pub(crate) fn sessions(open: usize) {
    metrics::gauge!("skiff_open_sessions").set(open as f64);
}
