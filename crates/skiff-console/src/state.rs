//! What every handler shares: the console's state, and how a request is
//! refused.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use skiff_coordinator::Coordinator;
use skiff_coordinator::config::Listening;
use tokio_util::sync::CancellationToken;

use crate::logins::Logins;
use crate::pod::PodWatch;

/// What every handler shares.
pub(crate) struct Console {
    pub coordinator: Coordinator,
    pub logins: Logins,
    /// The coordinator's addresses, for the cluster page.
    pub listening: Listening,
    pub started: Instant,
    /// Ends the live streams when the server stops.
    pub shutdown: CancellationToken,
    /// Live streams open now (at most `CONSOLE_FEEDS_MAX`).
    pub feeds: Arc<AtomicUsize>,
    /// The pods of the pod page (`--pod`).
    pub pods: PodWatch,
}

/// Why a request is refused before its handler runs.
#[derive(Debug)]
pub(crate) struct Refusal(pub StatusCode, pub &'static str);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        refuse(self.0, self.1)
    }
}

/// A console error: a status and one line for the page.
pub(crate) fn refuse(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, axum::Json(body)).into_response()
}
