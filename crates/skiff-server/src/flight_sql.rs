//! Arrow Flight SQL front door (being written).

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::coordinator::Coordinator;
use crate::error::{Result, ServerError, SqlState};

/// Serve Flight SQL clients on `listener` until `shutdown`.
pub async fn serve(
    _coordinator: Coordinator,
    _listener: TcpListener,
    _shutdown: CancellationToken,
) -> Result<()> {
    Err(ServerError::new(SqlState::FeatureNotSupported, "the Flight SQL front door is not built yet"))
}
