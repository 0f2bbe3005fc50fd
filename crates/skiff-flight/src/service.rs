//! One Flight service shape for every internal role: a role implements
//! [`Handler`] for the calls it answers; everything else is "unimplemented".

use std::sync::Arc;

use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::stream::BoxStream;
use tonic::{Request, Response, Status, Streaming};

/// A stream of Flight data as a handler returns it.
pub type FlightStream = BoxStream<'static, Result<FlightData, Status>>;

/// The calls an internal role answers.
#[tonic::async_trait]
pub trait Handler: Send + Sync + 'static {
    /// `DoGet`: a stream for `ticket`.
    async fn get(&self, ticket: Ticket) -> Result<FlightStream, Status> {
        let _ = ticket;
        Err(Status::unimplemented("this node serves no streams"))
    }

    /// `DoPut`: consume `data` (the client's messages, the first carrying
    /// the descriptor) and return the `app_metadata` of the single reply.
    async fn put(&self, data: FlightStream) -> Result<bytes::Bytes, Status> {
        let _ = data;
        Err(Status::unimplemented("this node takes no puts"))
    }

    /// `DoAction`: the body of the single result (empty for none).
    async fn action(&self, action: Action) -> Result<bytes::Bytes, Status>;
}

/// A tonic service around a [`Handler`].
pub struct FlightNode<H> {
    handler: Arc<H>,
}

/// The gRPC service for `handler`, with no message size caps (plans and
/// batches can be large).
pub fn flight_server<H: Handler>(handler: Arc<H>) -> FlightServiceServer<FlightNode<H>> {
    FlightServiceServer::new(FlightNode { handler })
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

#[tonic::async_trait]
impl<H: Handler> FlightService for FlightNode<H> {
    type HandshakeStream = BoxStream<'static, Result<HandshakeResponse, Status>>;
    type ListFlightsStream = BoxStream<'static, Result<FlightInfo, Status>>;
    type DoGetStream = FlightStream;
    type DoPutStream = BoxStream<'static, Result<PutResult, Status>>;
    type DoExchangeStream = FlightStream;
    type DoActionStream = BoxStream<'static, Result<arrow_flight::Result, Status>>;
    type ListActionsStream = BoxStream<'static, Result<ActionType, Status>>;

    async fn handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("handshake"))
    }

    async fn list_flights(
        &self,
        _request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("list_flights"))
    }

    async fn get_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("get_flight_info"))
    }

    async fn poll_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("poll_flight_info"))
    }

    async fn get_schema(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("get_schema"))
    }

    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<FlightStream>, Status> {
        let stream = self.handler.get(request.into_inner()).await?;
        Ok(Response::new(stream))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let data: FlightStream = Box::pin(request.into_inner());
        let app_metadata = self.handler.put(data).await?;
        let result = PutResult { app_metadata };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(result)]))))
    }

    async fn do_exchange(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<FlightStream>, Status> {
        Err(Status::unimplemented("do_exchange"))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        let body = self.handler.action(request.into_inner()).await?;
        let result = arrow_flight::Result { body };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(result)]))))
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Ok(Response::new(Box::pin(futures::stream::empty())))
    }
}
