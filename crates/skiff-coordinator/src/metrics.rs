//! Counters and timings for Prometheus, served at `/metrics` by the
//! console (`--http-addr`) and by `--metrics-addr`. Recording is free
//! until one of them installs the recorder.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

use crate::config::METRICS_UPKEEP;

use crate::queries::{QueryEntry, QueryStatus};

/// The process's recorder, installed by the first endpoint that serves it;
/// `None` when another recorder was installed first.
pub fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::warn!("metrics not recorded: {e}");
                None
            }
        })
        .as_ref()
}

/// Keep the recorder's histograms drained until `shutdown` (what its own
/// HTTP listener would do).
pub async fn upkeep_until(shutdown: CancellationToken) {
    let Some(handle) = handle() else {
        return;
    };
    loop {
        tokio::select! {
            () = tokio::time::sleep(METRICS_UPKEEP) => handle.run_upkeep(),
            () = shutdown.cancelled() => return,
        }
    }
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
