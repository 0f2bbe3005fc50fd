//! The web console (`--http-addr`): pages that watch the cluster, the
//! queries and their pipelines move (`api`, pushed live by server-sent
//! events), the actions admins take on them (`actions`, each the SQL
//! function of the same name), who is logged in (`login`), the embedded
//! page (`assets`) and `/metrics`.
//!
//! Every response carries the security headers (a CSP without inline
//! scripts); every request but the page itself and `/metrics` needs a
//! login, and with no users configured only loopback peers are served,
//! each as an admin, as on the PostgreSQL port.

mod actions;
mod api;
mod assets;
pub mod limits;
mod login;
mod logins;
mod pod;
mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::limits::CONSOLE_BODY_MAX;
use skiff_coordinator::Coordinator;
use skiff_coordinator::config::Listening;
use skiff_node::error::{Result, ServerError};

pub use login::CSRF_HEADER;
use state::Console;

/// The console's routes over `console`.
fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(assets::page))
        .route("/assets/{file}", get(assets::file))
        .route("/metrics", get(metrics))
        .route("/api/session", get(login::session))
        .route("/api/login", post(login::login))
        .route("/api/logout", post(login::logout))
        .route("/api/cluster", get(api::cluster))
        .route("/api/queries", get(api::queries))
        .route("/api/queries/{id}", get(api::query))
        .route("/api/pod", get(api::pod))
        .route("/api/events", get(api::events))
        .route("/api/actions/{action}", post(actions::act))
        .layer(DefaultBodyLimit::max(CONSOLE_BODY_MAX))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&console),
            admit_and_harden,
        ))
        .with_state(console)
}

/// Serve the console on `listener` until `shutdown`.
pub async fn serve(
    coordinator: Coordinator,
    listener: TcpListener,
    listening: Listening,
    pods: Vec<PathBuf>,
    shutdown: CancellationToken,
) -> Result<()> {
    skiff_coordinator::metrics::handle();
    let console = Arc::new(Console {
        coordinator,
        logins: logins::Logins::default(),
        listening,
        started: Instant::now(),
        shutdown: shutdown.clone(),
        feeds: Arc::default(),
        pods: pod::PodWatch::new(pods),
    });
    let app = router(Arc::clone(&console)).into_make_service_with_connect_info::<SocketAddr>();
    let served =
        axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let (served, ()) = tokio::join!(served, console.pods.sample_until(shutdown));
    served.map_err(|e| ServerError::internal(format!("console: {e}")))
}

/// Serve `/metrics` alone (`--metrics-addr`) until `shutdown`.
pub async fn serve_metrics(listener: TcpListener, shutdown: CancellationToken) -> Result<()> {
    skiff_coordinator::metrics::handle();
    let app = Router::new().route("/metrics", get(metrics));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|e| ServerError::internal(format!("metrics endpoint: {e}")))
}

async fn metrics() -> Response {
    match skiff_coordinator::metrics::handle() {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "another metrics recorder is installed in this process",
        )
            .into_response(),
    }
}

/// Refuse peers the database would refuse (no users: loopback only), then
/// add the security headers to whatever the handler answered.
async fn admit_and_harden(
    State(console): State<Arc<Console>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = match console.coordinator.users().admit(Some(peer)) {
        Ok(()) => next.run(request).await,
        Err(e) => (StatusCode::FORBIDDEN, e.message).into_response(),
    };
    let headers = response.headers_mut();
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// No inline script or style, nothing from elsewhere, no framing; the page
/// talks to this server only.
const SECURITY_HEADERS: [(header::HeaderName, &str); 5] = [
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::REFERRER_POLICY, "no-referrer"),
    (header::CACHE_CONTROL, "no-store"),
];
