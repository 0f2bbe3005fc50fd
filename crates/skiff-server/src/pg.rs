//! PostgreSQL wire front door (being written).

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::TlsFiles;
use crate::coordinator::Coordinator;
use crate::error::{Result, ServerError, SqlState};

/// Serve PostgreSQL clients on `listener` until `shutdown`.
pub async fn serve(
    _coordinator: Coordinator,
    _listener: TcpListener,
    _tls: Option<TlsFiles>,
    _shutdown: CancellationToken,
) -> Result<()> {
    Err(ServerError::new(SqlState::FeatureNotSupported, "the PostgreSQL front door is not built yet"))
}
