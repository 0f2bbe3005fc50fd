//! The Flight SQL calls. Each authenticates its caller first (see
//! [`FlightSqlFrontDoor::caller`]), then hands the statement to the
//! coordinator; errors reach the client as [`to_status`] statuses, the
//! SQLSTATE in brackets at the start of the message.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use arrow::array::{Array, UInt64Array};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandPreparedStatementQuery, CommandPreparedStatementUpdate,
    CommandStatementIngest, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, DoPutUpdateResult, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, FlightData,
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, PutResult,
    Ticket, flight_descriptor::DescriptorType,
};
use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use datafusion::execution::SendableRecordBatchStream;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, warn};

use super::ingest::{self, Target};
use super::metadata;
use super::params::{flight_schema, param_schema, read_rows, schema_bytes};
use super::sessions::{Conn, Registry, StreamingGuard, query_of};
use skiff_coordinator::{ClientSession, Coordinator, StatementResult};
use skiff_node::error::{Result, ServerError, SqlState, to_status};

/// The user of sessions that did not name one (no users configured).
const ANONYMOUS: &str = "anonymous";

/// The Flight RPC action (not Flight SQL's `CancelQuery`) that newer
/// clients, the ADBC driver among them, cancel with.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

type FlightStream<T> = Pin<Box<dyn Stream<Item = std::result::Result<T, Status>> + Send>>;

/// The Flight SQL service on top of a [`Coordinator`].
pub(super) struct FlightSqlFrontDoor {
    coordinator: Coordinator,
    registry: Arc<Registry>,
}

fn status(error: ServerError) -> Status {
    to_status(&error)
}

fn denied(message: &str) -> ServerError {
    ServerError::new(SqlState::InvalidAuthorization, message)
}

impl FlightSqlFrontDoor {
    /// Ingest the request's batches into `target`; the rows written.
    async fn ingest(
        &self,
        conn: &Conn,
        target: Target,
        stream: PeekableFlightDataStream,
    ) -> Result<i64> {
        let batches = ingest::batches(stream).await?;
        let rows = self
            .coordinator
            .ingest(
                &conn.session,
                &target.table,
                target.if_missing,
                target.if_exists,
                batches,
            )
            .await?;
        Ok(i64::try_from(rows).unwrap_or(i64::MAX))
    }

    pub(super) fn new(coordinator: Coordinator, registry: Arc<Registry>) -> Self {
        Self {
            coordinator,
            registry,
        }
    }

    /// The session of the caller: by its bearer token, or (without users)
    /// the anonymous session of its loopback connection.
    fn caller<T>(&self, request: &Request<T>) -> Result<Arc<Conn>, Status> {
        let peer = request.remote_addr();
        let conn = match bearer(request.metadata()).map_err(status)? {
            Some(token) => self.registry.by_token(token, peer),
            None => self.anonymous(peer),
        };
        conn.map_err(status)
    }

    fn anonymous(&self, peer: Option<SocketAddr>) -> Result<Arc<Conn>> {
        let users = self.coordinator.users();
        if users.required() {
            return Err(denied(
                "authentication required: handshake with basic credentials, \
                 then send the bearer token it returns",
            ));
        }
        users.admit(peer)?;
        let Some(peer) = peer else {
            return Err(denied("the client's address is unknown"));
        };
        self.registry
            .anonymous(peer, || self.open_session(ANONYMOUS, Some(peer)))
    }

    /// Open a coordinator session; at the connection limit, first make room
    /// by closing a session whose client is gone.
    fn open_session(&self, user: &str, peer: Option<SocketAddr>) -> Result<ClientSession> {
        match self.coordinator.open_session(user, peer) {
            Err(e)
                if e.state == SqlState::TooManyConnections && self.registry.reclaim_detached() =>
            {
                self.coordinator.open_session(user, peer)
            }
            opened => opened,
        }
    }

    /// Who a handshake authenticates: the verified user, or without users
    /// any name a loopback client gives (`anonymous` if none).
    fn authenticate(
        &self,
        basic: Option<(String, String)>,
        peer: Option<SocketAddr>,
    ) -> Result<String> {
        let users = self.coordinator.users();
        if !users.required() {
            users.admit(peer)?;
            let name = basic.map(|(user, _)| user).filter(|user| !user.is_empty());
            return Ok(name.unwrap_or_else(|| ANONYMOUS.to_string()));
        }
        let Some((user, password)) = basic else {
            return Err(denied("authentication required: send basic credentials"));
        };
        if let Err(e) = users.verify(&user, &password) {
            warn!(%user, peer = ?peer, "Flight SQL authentication failed");
            return Err(e);
        }
        Ok(user)
    }

    /// Park a started statement and describe it: its schema and the ticket
    /// that fetches it.
    fn describe(
        &self,
        conn: &Conn,
        result: StatementResult,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = flight_schema(&result.schema);
        let handle = self
            .registry
            .park(conn, Arc::clone(&schema), result)
            .map_err(status)?;
        let ticket = TicketStatementQuery {
            statement_handle: handle,
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| status(metadata::arrow_error(e)))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    /// Cancel the statements of `info`'s tickets that `conn`'s user runs;
    /// false when there were none.
    fn cancel(&self, conn: &Conn, info: &FlightInfo) -> bool {
        let mut canceled = false;
        for endpoint in &info.endpoint {
            let Some(ticket) = &endpoint.ticket else {
                continue;
            };
            let Ok(any) = Any::decode(ticket.ticket.clone()) else {
                continue;
            };
            let Ok(Some(ticket)) = any.unpack::<TicketStatementQuery>() else {
                continue;
            };
            let handle = &ticket.statement_handle;
            // Dropping a parked result cancels its query too.
            let discarded = self.registry.discard(conn, handle);
            let running = query_of(handle).is_some_and(|id| {
                let owned = self.coordinator.queries().get(id);
                owned.is_some_and(|q| q.user == conn.session.user()) && self.coordinator.cancel(id)
            });
            canceled |= discarded || running;
        }
        canceled
    }

    /// Run a prepared statement once per bound row (once without any) and
    /// count the rows it changed.
    async fn update_prepared(
        &self,
        conn: &Conn,
        handle: &[u8],
        put: PeekableFlightDataStream,
    ) -> Result<i64> {
        let prepared = conn.prepared(handle)?;
        let mut rows = read_rows(put, &prepared.statement.param_types).await?;
        if rows.is_empty() {
            rows = prepared.params;
        }
        if rows.is_empty() {
            rows.push(Vec::new());
        }
        let mut total = None;
        for row in rows {
            let result = self
                .coordinator
                .execute_prepared(&conn.session, &prepared.statement, row)
                .await?;
            if let Some(n) = affected(result).await? {
                total = Some(total.unwrap_or(0) + n);
            }
        }
        Ok(total.unwrap_or(-1))
    }
}

/// The `authorization: Bearer ...` token of a call, if any.
fn bearer(metadata: &MetadataMap) -> Result<Option<&str>> {
    Ok(authorization(metadata)?
        .and_then(|value| strip_scheme(value, "Bearer"))
        .map(str::trim))
}

/// Basic credentials are standard base64, with or without the padding:
/// Go's Flight client (the ADBC driver) leaves it out.
const BASIC_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The `authorization: Basic ...` user and password of a handshake.
pub(super) fn basic(metadata: &MetadataMap) -> Result<Option<(String, String)>> {
    let Some(encoded) = authorization(metadata)?.and_then(|v| strip_scheme(v, "Basic")) else {
        return Ok(None);
    };
    let malformed = || denied("malformed basic credentials");
    let decoded = BASIC_BASE64
        .decode(encoded.trim())
        .map_err(|_| malformed())?;
    let text = String::from_utf8(decoded).map_err(|_| malformed())?;
    let (user, password) = text.split_once(':').ok_or_else(malformed)?;
    Ok(Some((user.to_string(), password.to_string())))
}

fn authorization(metadata: &MetadataMap) -> Result<Option<&str>> {
    match metadata.get("authorization") {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(Some)
            .map_err(|_| denied("the authorization header is not text")),
    }
}

/// `value` without its case-insensitive `scheme ` prefix.
fn strip_scheme<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let head = value.get(..scheme.len())?;
    let rest = value.get(scheme.len()..)?;
    (head.eq_ignore_ascii_case(scheme) && rest.starts_with(' ')).then_some(rest)
}

/// Rows a statement changed: the `count` DML returns, or `None` for
/// commands that report no count (DDL, `SET`). A query's rows are counted.
async fn affected(result: StatementResult) -> Result<Option<i64>> {
    let command = result.command.is_some();
    let mut stream = result.stream;
    let (mut rows, mut count) = (0i64, None::<i64>);
    while let Some(batch) = stream.try_next().await? {
        rows += i64::try_from(batch.num_rows()).unwrap_or(i64::MAX);
        let counts = batch.column_by_name("count");
        if let Some(counts) = counts.and_then(|c| c.as_any().downcast_ref::<UInt64Array>()) {
            let n: u64 = counts.iter().flatten().sum();
            count = Some(count.unwrap_or(0) + i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
    Ok(match (count, command) {
        (Some(n), _) => Some(n),
        (None, true) => None,
        (None, false) => Some(rows),
    })
}

/// Stream `stream` as Flight data. Errors carry their SQLSTATE; dropping
/// the returned stream (the client went away) drops `stream`, which
/// cancels its query.
fn encode(
    schema: SchemaRef,
    stream: SendableRecordBatchStream,
    guard: Option<StreamingGuard>,
) -> FlightStream<FlightData> {
    let batches = stream.map(move |batch| {
        let _streaming = &guard;
        batch.map_err(|e| FlightError::Tonic(Box::new(to_status(&ServerError::from(e)))))
    });
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches)
        .map_err(Status::from);
    Box::pin(data)
}

fn encode_batch(schema: Arc<Schema>, batch: RecordBatch) -> FlightStream<FlightData> {
    let data = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(futures::stream::iter([Ok(batch)]))
        .map_err(Status::from);
    Box::pin(data)
}

/// A `FlightInfo` whose ticket is the command itself (metadata calls).
fn command_info(
    command: &impl ProstMessageExt,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let ticket = Ticket::new(command.as_any().encode_to_vec());
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| status(metadata::arrow_error(e)))?
        .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

fn listing(
    listed: Result<(Arc<Schema>, RecordBatch)>,
) -> Result<Response<FlightStream<FlightData>>, Status> {
    let (schema, batch) = listed.map_err(status)?;
    Ok(Response::new(encode_batch(schema, batch)))
}

#[tonic::async_trait]
impl FlightSqlService for FlightSqlFrontDoor {
    type FlightService = FlightSqlFrontDoor;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<FlightStream<HandshakeResponse>>, Status> {
        let peer = request.remote_addr();
        let credentials = basic(request.metadata()).map_err(status)?;
        let user = self.authenticate(credentials, peer).map_err(status)?;
        let session = self.open_session(&user, peer).map_err(status)?;
        let token = self.registry.open_token(session, peer);
        debug!(%user, peer = ?peer, "Flight SQL session opened");
        let header = MetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| status(ServerError::internal("token is not a header value")))?;
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: token.into_bytes().into(),
        };
        let stream: FlightStream<HandshakeResponse> = Box::pin(futures::stream::iter([Ok(reply)]));
        let mut response = Response::new(stream);
        response.metadata_mut().insert("authorization", header);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let conn = self.caller(&request)?;
        let result = self
            .coordinator
            .execute(&conn.session, &query.query)
            .await
            .map_err(status)?;
        self.describe(&conn, result, request.into_inner())
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let conn = self.caller(&request)?;
        let prepared = conn
            .prepared(&query.prepared_statement_handle)
            .map_err(status)?;
        let params = match prepared.params.as_slice() {
            [] => Vec::new(),
            [row] => row.clone(),
            rows => {
                return Err(status(ServerError::new(
                    SqlState::FeatureNotSupported,
                    format!(
                        "a query runs with one row of parameters; {} are bound",
                        rows.len()
                    ),
                )));
            }
        };
        let result = self
            .coordinator
            .execute_prepared(&conn.session, &prepared.statement, params)
            .await
            .map_err(status)?;
        self.describe(&conn, result, request.into_inner())
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        let conn = self.caller(&request)?;
        let parked = self
            .registry
            .claim(&conn, &ticket.statement_handle)
            .map_err(status)?;
        let guard = conn.streaming();
        Ok(Response::new(encode(
            parked.schema,
            parked.stream,
            Some(guard),
        )))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let conn = self.caller(&request)?;
        let result = self
            .coordinator
            .execute(&conn.session, &command.query)
            .await
            .map_err(status)?;
        Ok(affected(result).await.map_err(status)?.unwrap_or(-1))
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let conn = self.caller(&request)?;
        let target = Target::of_command(&command).map_err(status)?;
        self.ingest(&conn, target, request.into_inner())
            .await
            .map_err(status)
    }

    /// A plain Flight `DoPut` (not a Flight SQL command): its descriptor's
    /// path names the table the batches go into.
    async fn do_put_fallback(
        &self,
        mut request: Request<PeekableFlightDataStream>,
        message: Any,
    ) -> Result<
        Response<<Self as arrow_flight::flight_service_server::FlightService>::DoPutStream>,
        Status,
    > {
        let conn = self.caller(&request)?;
        let path = match request.get_mut().peek().await {
            Some(Ok(first)) => first
                .flight_descriptor
                .as_ref()
                .filter(|d| d.r#type == DescriptorType::Path as i32)
                .map(|d| d.path.clone()),
            Some(Err(e)) => return Err(e.clone()),
            None => None,
        };
        let Some(path) = path else {
            return Err(Status::unimplemented(format!(
                "DoPut of {} is not supported; name a table with a path descriptor",
                message.type_url
            )));
        };
        let target = Target::of_path(&path).map_err(status)?;
        let rows = self
            .ingest(&conn, target, request.into_inner())
            .await
            .map_err(status)?;
        let result = PutResult {
            app_metadata: DoPutUpdateResult { record_count: rows }
                .encode_to_vec()
                .into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(result)]))))
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let conn = self.caller(&request)?;
        let handle = query.prepared_statement_handle;
        let prepared = conn.prepared(&handle).map_err(status)?;
        let rows = read_rows(request.into_inner(), &prepared.statement.param_types)
            .await
            .map_err(status)?;
        conn.bind(&handle, rows).map_err(status)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(handle),
        })
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let conn = self.caller(&request)?;
        let handle = query.prepared_statement_handle;
        self.update_prepared(&conn, &handle, request.into_inner())
            .await
            .map_err(status)
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let conn = self.caller(&request)?;
        let prepared = self
            .coordinator
            .prepare(&conn.session, &query.query)
            .await
            .map_err(status)?;
        let dataset_schema = schema_bytes(&flight_schema(&prepared.schema)).map_err(status)?;
        let parameter_schema =
            schema_bytes(&param_schema(&prepared.param_types)).map_err(status)?;
        let handle = conn.add_prepared(prepared).map_err(status)?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle,
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let conn = self.caller(&request)?;
        conn.close_prepared(&query.prepared_statement_handle);
        Ok(())
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let conn = self.caller(&request)?;
        let info = FlightInfo::decode(query.info)
            .map_err(|e| Status::invalid_argument(format!("CancelQuery: bad FlightInfo: {e}")))?;
        // `CancelResult` (not exported by arrow-flight) numbers its values
        // as `CancelStatus` does.
        let result = match self.cancel(&conn, &info) {
            true => CancelStatus::Cancelled,
            false => CancelStatus::NotCancellable,
        };
        Ok(ActionCancelQueryResult {
            result: result as i32,
        })
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<FlightStream<arrow_flight::Result>>, Status> {
        if request.get_ref().r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::invalid_argument(format!(
                "unknown action {:?}",
                request.get_ref().r#type
            )));
        }
        let conn = self.caller(&request)?;
        let info = CancelFlightInfoRequest::decode(request.get_ref().body.clone())
            .ok()
            .and_then(|r| r.info)
            .ok_or_else(|| Status::invalid_argument("CancelFlightInfo: bad request"))?;
        let status = match self.cancel(&conn, &info) {
            true => CancelStatus::Cancelled,
            false => CancelStatus::NotCancellable,
        };
        let body = CancelFlightInfoResult {
            status: status as i32,
        };
        let result = arrow_flight::Result {
            body: body.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(result)]))))
    }

    async fn list_custom_actions(&self) -> Option<Vec<Result<ActionType, Status>>> {
        Some(vec![Ok(ActionType {
            r#type: CANCEL_FLIGHT_INFO.to_string(),
            description: "Cancel the statement of a FlightInfo.\n\
                Request Message: CancelFlightInfoRequest\n\
                Response Message: CancelFlightInfoResult"
                .to_string(),
        })])
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let info = metadata::sql_info().map_err(status)?;
        let schema = query.clone().into_builder(info).schema();
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
        let builder = query.into_builder(metadata::sql_info().map_err(status)?);
        let schema = builder.schema();
        let batch = builder
            .build()
            .map_err(|e| status(metadata::arrow_error(e)))?;
        Ok(Response::new(encode_batch(schema, batch)))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        let conn = self.caller(&request)?;
        listing(metadata::catalogs(&self.coordinator, &conn, query).await)
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        let conn = self.caller(&request)?;
        listing(metadata::db_schemas(&self.coordinator, &conn, query).await)
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.clone().into_builder().schema();
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        let conn = self.caller(&request)?;
        listing(metadata::tables(&self.coordinator, &conn, query).await)
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.caller(&request)?;
        let schema = query.into_builder().schema();
        command_info(&query, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<FlightStream<FlightData>>, Status> {
        self.caller(&request)?;
        listing(metadata::table_types(query))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
