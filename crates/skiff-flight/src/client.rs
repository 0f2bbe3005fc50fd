//! Connecting to a Flight peer and calling its actions.

use std::time::Duration;

use arrow_flight::Action;
use arrow_flight::flight_service_client::FlightServiceClient;
use futures::TryStreamExt;
use prost::Message;
use tonic::transport::{Channel, Endpoint};

/// How long establishing a connection to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A Flight client for `addr` (`host:port`, no scheme).
pub async fn connect(addr: &str) -> Result<FlightServiceClient<Channel>, tonic::Status> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| tonic::Status::invalid_argument(format!("bad address {addr}: {e}")))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("cannot reach {addr}: {e}")))?;
    Ok(FlightServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX))
}

/// Call action `kind` with a protobuf `request`; decode the first result as
/// `R` (the default value when the action returns nothing).
pub async fn do_action<Q: Message, R: Message + Default>(
    client: &mut FlightServiceClient<Channel>,
    kind: &str,
    request: &Q,
) -> Result<R, tonic::Status> {
    let action = Action {
        r#type: kind.to_string(),
        body: request.encode_to_vec().into(),
    };
    let mut results = client.do_action(action).await?.into_inner();
    match results.try_next().await? {
        Some(result) => R::decode(result.body)
            .map_err(|e| tonic::Status::internal(format!("bad {kind} reply: {e}"))),
        None => Ok(R::default()),
    }
}
