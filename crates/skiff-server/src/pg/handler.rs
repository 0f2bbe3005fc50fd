//! Statements over the simple and the extended query protocol.
//!
//! Both protocols end in [`Coordinator::execute`] or
//! [`Coordinator::execute_prepared`] and stream the result batch by batch:
//! no result is held whole. The front door answers a few statements itself
//! because clients send them and DataFusion has no use for them:
//! transaction control (Skiff runs every statement on its own; the
//! transaction status is still tracked so clients see what they expect),
//! and `SET`s of settings DataFusion does not know (JDBC's
//! `extra_float_digits`, `application_name`, ...), which succeed and change
//! nothing. `SET datafusion.*` and `SET skiff.*` are the engine's and fail
//! as they say (a mistyped value must not pass for a change).
//!
//! pgwire's defaults for Execute would collect a portal's rows before
//! sending them; [`Queries`] overrides the simple Query and the Execute
//! messages to stream instead.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::datatypes::{DataType, Schema};
use async_trait::async_trait;
use datafusion::common::ScalarValue;
use datafusion::execution::SendableRecordBatchStream;
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::portal::{Format, Portal, PortalExecutionState};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    FieldFormat, FieldInfo, QueryResponse, Response, SendableRowStream, Tag,
};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, DEFAULT_NAME, PgWireConnectionState, Type};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::RowDescription;
use pgwire::messages::extendedquery::{Execute, PortalSuspended};
use pgwire::messages::response::{EmptyQueryResponse, ReadyForQuery, TransactionStatus};
use pgwire::messages::simplequery::Query;
use skiff_engine::statement::split_statements;
use skiff_tables::copy::{Copy, CopySourceKind};
use tracing::debug;

use super::types::{ParamWire, decode_param, encode_batch, pg_type, type_size};
use super::{Connection, Queries, connection, error};
use skiff_coordinator::{Coordinator, PreparedStatement, StatementResult};
use skiff_node::error::{ServerError, SqlState};

/// A statement the extended protocol parsed.
#[derive(Debug)]
pub(super) enum Parsed {
    /// Answered by the front door: the command tag to send.
    Local(Local),
    /// Planned by the coordinator. `lenient`: a `SET` whose failure is
    /// reported as success.
    Planned {
        prepared: Box<PreparedStatement>,
        lenient: bool,
    },
}

/// Statements the front door answers itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Local {
    Begin,
    Commit,
    Rollback,
    /// `SAVEPOINT`, `RELEASE`, `ROLLBACK TO`: accepted, nothing to do.
    Savepoint(&'static str),
    /// A `SET` DataFusion rejected.
    IgnoredSet,
    Discard,
    /// `DEALLOCATE [PREPARE] name|ALL` (`None`: all; psycopg sends it on
    /// rollback): protocol-level statements are the client's to reuse or
    /// replace, so only statements of SQL `PREPARE` are forgotten, and an
    /// unknown name is no error.
    Deallocate(Option<String>),
}

impl Local {
    fn tag(&self) -> &'static str {
        match self {
            Local::Begin => "BEGIN",
            Local::Commit => "COMMIT",
            Local::Rollback => "ROLLBACK",
            Local::Savepoint(tag) => tag,
            Local::IgnoredSet => "SET",
            Local::Discard => "DISCARD ALL",
            Local::Deallocate(Some(_)) => "DEALLOCATE",
            Local::Deallocate(None) => "DEALLOCATE ALL",
        }
    }

    /// The transaction status after this statement.
    fn status(&self, before: TransactionStatus) -> TransactionStatus {
        match self {
            Local::Begin => before.to_in_transaction_state(),
            Local::Commit | Local::Rollback => before.to_idle_state(),
            Local::Savepoint("ROLLBACK") if before == TransactionStatus::Error => {
                TransactionStatus::Transaction
            }
            _ => before,
        }
    }
}

/// What the front door makes of a statement before DataFusion sees it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Local(Local),
    /// `SET`/`RESET`; `lenient` unless the setting is DataFusion's.
    Set {
        lenient: bool,
    },
    Sql,
}

/// What the front door does with one statement, by its leading keywords.
pub(super) fn front_door_kind(sql: &str) -> Kind {
    let mut words = Words(sql);
    let first = words.next().unwrap_or_default().to_ascii_uppercase();
    match first.as_str() {
        "BEGIN" | "START" => Kind::Local(Local::Begin),
        "COMMIT" | "END" => Kind::Local(Local::Commit),
        "ABORT" => Kind::Local(Local::Rollback),
        "ROLLBACK" => match words.next().map(|w| w.to_ascii_uppercase()).as_deref() {
            Some("TO") => Kind::Local(Local::Savepoint("ROLLBACK")),
            _ => Kind::Local(Local::Rollback),
        },
        "SAVEPOINT" => Kind::Local(Local::Savepoint("SAVEPOINT")),
        "RELEASE" => Kind::Local(Local::Savepoint("RELEASE")),
        "DISCARD" => Kind::Local(Local::Discard),
        "DEALLOCATE" => {
            let mut name = words.next().unwrap_or_default();
            if name.eq_ignore_ascii_case("PREPARE") {
                name = words.next().unwrap_or_default();
            }
            if name.eq_ignore_ascii_case("ALL") {
                Kind::Local(Local::Deallocate(None))
            } else {
                Kind::Local(Local::Deallocate(Some(name.to_string())))
            }
        }
        "SET" | "RESET" => {
            let mut name = words.next().unwrap_or_default();
            if name.eq_ignore_ascii_case("SESSION") || name.eq_ignore_ascii_case("LOCAL") {
                name = words.next().unwrap_or_default();
            }
            let name = name.to_ascii_lowercase();
            let lenient = !(name.starts_with("datafusion.") || name.starts_with("skiff."));
            Kind::Set { lenient }
        }
        _ => Kind::Sql,
    }
}

/// The words of a statement, skipping blanks and comments; a word is a run
/// of letters, digits, `_` and `.`.
struct Words<'a>(&'a str);

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        loop {
            let rest = self.0.trim_start();
            if let Some(comment) = rest.strip_prefix("--") {
                self.0 = comment.find('\n').map_or("", |n| &comment[n + 1..]);
            } else if let Some(comment) = rest.strip_prefix("/*") {
                self.0 = comment.find("*/").map_or("", |n| &comment[n + 2..]);
            } else {
                self.0 = rest;
                break;
            }
        }
        let end = self
            .0
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(self.0.len());
        if end == 0 {
            return None;
        }
        let (word, rest) = self.0.split_at(end);
        self.0 = rest;
        Some(word)
    }
}

/// The fields of `schema`, each in its result format.
fn fields(schema: &Schema, formats: &[FieldFormat]) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .zip(formats)
        .map(|(field, format)| {
            let (pg, typmod) = pg_type(field.data_type());
            let size = type_size(&pg);
            FieldInfo::new(field.name().clone(), None, None, pg, *format)
                .with_type_size(size)
                .with_type_modifier(typmod)
        })
        .collect()
}

/// Per-column formats from a Bind message: none (all text), one for all,
/// or one per column; any other count is a protocol error.
fn formats(format: &Format, columns: usize) -> Result<Vec<FieldFormat>, ServerError> {
    match format {
        Format::UnifiedText => Ok(vec![FieldFormat::Text; columns]),
        Format::UnifiedBinary => Ok(vec![FieldFormat::Binary; columns]),
        Format::Individual(codes) if codes.len() == columns => {
            Ok(codes.iter().map(|&c| FieldFormat::from(c)).collect())
        }
        Format::Individual(codes) => Err(ServerError::new(
            SqlState::ProtocolViolation,
            format!(
                "{} format codes for {columns} columns or parameters",
                codes.len()
            ),
        )),
    }
}

/// A result's rows as `DataRow`s, encoded one batch at a time as batches
/// arrive. Dropping it drops the batch stream, which stops the query.
fn row_stream(stream: SendableRecordBatchStream, formats: Vec<FieldFormat>) -> SendableRowStream {
    let rows = stream
        .map(move |batch| {
            let encoded = batch
                .map_err(ServerError::from)
                .and_then(|batch| encode_batch(&batch, &formats));
            let rows: Vec<PgWireResult<_>> = match encoded {
                Ok(rows) => rows.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(error(e))],
            };
            futures::stream::iter(rows)
        })
        .flatten();
    Box::pin(rows)
}

/// The command tag of a finished command; those that change rows report
/// how many (`INSERT 0 n`, `UPDATE n`, `DELETE n`, `COPY n`).
async fn command_tag(tag: &str, stream: SendableRecordBatchStream) -> Tag {
    let batches: Vec<_> = stream.collect().await;
    if !matches!(tag, "INSERT" | "UPDATE" | "DELETE" | "COPY" | "MERGE") {
        return Tag::new(tag);
    }
    let count = batches
        .iter()
        .filter_map(|b| b.as_ref().ok())
        .filter_map(|b| b.columns().first())
        .filter_map(|c| arrow::compute::cast(c, &DataType::UInt64).ok())
        .map(|c| arrow::compute::sum(c.as_any().downcast_ref::<arrow::array::UInt64Array>()?))
        .map(|n| n.unwrap_or(0))
        .sum::<u64>();
    let counted = Tag::new(tag).with_rows(count as usize);
    // Only INSERT's tag carries an OID (always 0).
    if tag == "INSERT" {
        counted.with_oid(0)
    } else {
        counted
    }
}

impl Queries {
    /// Run one statement of a simple Query message and send its response.
    /// `Ok(Some(error))`: the statement failed (reported by the caller);
    /// `Err`: the connection failed.
    async fn simple<C>(&self, client: &mut C, sql: &str) -> PgWireResult<Option<PgWireError>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let conn = connection(client)?;
        let lenient = match front_door_kind(sql) {
            Kind::Local(local) => {
                forget(&conn, &local);
                return local_command(client, &local).await.map(|()| None);
            }
            Kind::Set { lenient } => lenient,
            Kind::Sql => false,
        };
        match Copy::parse(sql) {
            Ok(Some(Copy::From(from))) if from.source == CopySourceKind::Stdin => {
                return match super::copy_in::start(client, &conn, from, false).await {
                    Ok(()) => Ok(None),
                    Err(PgWireError::UserError(info)) => Ok(Some(PgWireError::UserError(info))),
                    Err(e) => Err(e),
                };
            }
            Ok(Some(Copy::ToStdout(to))) => {
                return super::copy_out::send(client, &self.coordinator, &conn, to).await;
            }
            _ => {}
        }
        let result = match self.coordinator.execute(conn.session(), sql).await {
            Ok(result) => result,
            Err(e) if lenient => {
                debug!(error = %e, sql, "SET ignored");
                return local_command(client, &Local::IgnoredSet)
                    .await
                    .map(|()| None);
            }
            Err(e) => return Ok(Some(error(e))),
        };
        let StatementResult {
            schema,
            stream,
            command,
            ..
        } = result;
        if let Some(tag) = command {
            let tag = command_tag(&tag, stream).await;
            client
                .feed(PgWireBackendMessage::CommandComplete(tag.into()))
                .await?;
            return Ok(None);
        }
        let formats = vec![FieldFormat::Text; schema.fields().len()];
        let description = fields(&schema, &formats);
        let row_description = RowDescription::new(description.iter().map(Into::into).collect());
        client
            .feed(PgWireBackendMessage::RowDescription(row_description))
            .await?;
        let mut rows = row_stream(stream, formats);
        let mut sent = 0;
        while let Some(row) = rows.next().await {
            match row {
                Ok(row) => client.feed(PgWireBackendMessage::DataRow(row)).await?,
                Err(e) => return Ok(Some(e)),
            }
            sent += 1;
        }
        let tag = Tag::new("SELECT").with_rows(sent);
        client
            .feed(PgWireBackendMessage::CommandComplete(tag.into()))
            .await?;
        Ok(None)
    }
}

/// `DEALLOCATE` forgets the session's SQL-prepared statements it names.
fn forget(conn: &Connection, local: &Local) {
    if let Local::Deallocate(name) = local {
        conn.session().deallocate(name.as_deref());
    }
}

/// Answer a statement the front door handles itself.
async fn local_command<C>(client: &mut C, local: &Local) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    client.set_transaction_status(local.status(client.transaction_status()));
    client
        .feed(PgWireBackendMessage::CommandComplete(
            Tag::new(local.tag()).into(),
        ))
        .await?;
    Ok(())
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    /// Statements run one after the other, each streamed before the next
    /// starts; the first error ends the message, as in PostgreSQL.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let statements = split_statements(&query.query);
        if statements.is_empty() {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        for sql in statements {
            if matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
                // The rest of the message waits for no COPY: PostgreSQL
                // runs a COPY FROM STDIN as a message's last statement.
                break;
            }
            if let Some(failure) = self.simple(client, sql).await? {
                let info = ErrorInfo::from(failure);
                client
                    .feed(PgWireBackendMessage::ErrorResponse(info.into()))
                    .await?;
                let status = client.transaction_status().to_error_state();
                client.set_transaction_status(status);
                break;
            }
        }
        if matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            // The copy's end (CopyDone, CopyFail) sends ReadyForQuery.
            return client.flush().await.map_err(Into::into);
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        let status = client.transaction_status();
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // `on_query` runs statements itself.
        Err(error(ServerError::internal("simple query path not in use")))
    }
}

/// Plans statements for the extended protocol (the Parse message).
pub(super) struct Parser {
    pub(super) coordinator: Coordinator,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Arc<Parsed>;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let conn = connection(client)?;
        let statements = split_statements(sql);
        let sql = match statements.as_slice() {
            [] => return Ok(None),
            [one] => *one,
            _ => {
                return Err(error(ServerError::new(
                    SqlState::SyntaxError,
                    "cannot insert multiple commands into a prepared statement",
                )));
            }
        };
        let lenient = match front_door_kind(sql) {
            Kind::Local(local) => return Ok(Some(Arc::new(Parsed::Local(local)))),
            Kind::Set { lenient } => lenient,
            Kind::Sql => false,
        };
        match self.coordinator.prepare(conn.session(), sql).await {
            Ok(prepared) => Ok(Some(Arc::new(Parsed::Planned {
                prepared: Box::new(prepared),
                lenient,
            }))),
            Err(e) if lenient => {
                debug!(error = %e, sql, "SET ignored");
                Ok(Some(Arc::new(Parsed::Local(Local::IgnoredSet))))
            }
            Err(e) => Err(error(e)),
        }
    }

    fn get_parameter_types(&self, statement: &Self::Statement) -> PgWireResult<Vec<Type>> {
        Ok(match statement.as_ref() {
            Parsed::Local(_) => Vec::new(),
            Parsed::Planned { prepared, .. } => prepared
                .param_types
                .iter()
                .map(|t| t.as_ref().map_or(Type::TEXT, |t| pg_type(t).0))
                .collect(),
        })
    }

    fn get_result_schema(
        &self,
        statement: &Self::Statement,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let Parsed::Planned { prepared, .. } = statement.as_ref() else {
            return Ok(Vec::new());
        };
        let columns = prepared.schema.fields().len();
        let formats = formats(format.unwrap_or(&Format::UnifiedText), columns).map_err(error)?;
        Ok(fields(&prepared.schema, &formats))
    }
}

/// The parameters a Bind message supplied, decoded for `prepared`.
fn parameters(
    portal: &Portal<Arc<Parsed>>,
    prepared: &PreparedStatement,
) -> Result<Vec<ScalarValue>, ServerError> {
    let count = portal.parameters.len();
    if count != prepared.param_types.len() {
        return Err(ServerError::new(
            SqlState::ProtocolViolation,
            format!(
                "bind message supplies {count} parameters, but prepared statement requires {}",
                prepared.param_types.len()
            ),
        ));
    }
    let binary = formats(&portal.parameter_format, count)?;
    let declared = &portal.statement.parameter_types;
    let mut values = Vec::with_capacity(count);
    for (i, target) in prepared.param_types.iter().enumerate() {
        // Sent as the client declared it; else as the server described it.
        let pg = declared
            .get(i)
            .cloned()
            .flatten()
            .filter(|t| *t != Type::UNKNOWN)
            .unwrap_or_else(|| target.as_ref().map_or(Type::TEXT, |t| pg_type(t).0));
        let wire = ParamWire {
            value: portal.parameters[i].as_deref(),
            binary: binary[i] == FieldFormat::Binary,
            pg: &pg,
        };
        values.push(decode_param(&wire, target.as_ref())?);
    }
    Ok(values)
}

/// What starting a portal gave.
enum Started {
    /// A command: its CommandComplete is sent.
    Done,
    Rows(QueryResponse),
    /// `COPY ... FROM STDIN`: the client sends the rows next.
    CopyIn,
}

impl Queries {
    /// Run a portal's statement. Rows are not sent yet.
    async fn start<C>(&self, client: &mut C, portal: &Portal<Arc<Parsed>>) -> PgWireResult<Started>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (prepared, lenient) = match portal.statement.statement.as_ref() {
            Parsed::Local(local) => {
                forget(&*connection(client)?, local);
                local_command(client, local).await?;
                return Ok(Started::Done);
            }
            Parsed::Planned { prepared, lenient } => (prepared, *lenient),
        };
        let conn = connection(client)?;
        // COPY FROM STDIN and TO STDOUT talk to the client themselves, as
        // through the simple protocol (tokio-postgres' copy_in/copy_out).
        match Copy::parse(&prepared.sql) {
            Ok(Some(Copy::From(from))) if from.source == CopySourceKind::Stdin => {
                super::copy_in::start(client, &conn, from, true).await?;
                return Ok(Started::CopyIn);
            }
            Ok(Some(Copy::ToStdout(to))) => {
                return match super::copy_out::send(client, &self.coordinator, &conn, to).await? {
                    Some(failure) => Err(failure),
                    None => Ok(Started::Done),
                };
            }
            _ => {}
        }
        let params = parameters(portal, prepared).map_err(error)?;
        let result = match self
            .coordinator
            .execute_prepared(conn.session(), prepared, params)
            .await
        {
            Ok(result) => result,
            Err(e) if lenient => {
                debug!(error = %e, sql = %prepared.sql, "SET ignored");
                local_command(client, &Local::IgnoredSet).await?;
                return Ok(Started::Done);
            }
            Err(e) => return Err(error(e)),
        };
        if let Some(tag) = result.command {
            let tag = command_tag(&tag, result.stream).await;
            client
                .feed(PgWireBackendMessage::CommandComplete(tag.into()))
                .await?;
            return Ok(Started::Done);
        }
        let columns = result.schema.fields().len();
        let formats = formats(&portal.result_column_format, columns).map_err(error)?;
        let description = Arc::new(fields(&result.schema, &formats));
        Ok(Started::Rows(QueryResponse::new(
            description,
            row_stream(result.stream, formats),
        )))
    }
}

/// Send up to `max_rows` rows (0: all) of a started portal. True when the
/// rows ran out (CommandComplete sent), false when the portal is suspended.
async fn send_rows<C>(
    client: &mut C,
    response: &mut QueryResponse,
    max_rows: usize,
) -> PgWireResult<bool>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let mut sent = 0;
    while max_rows == 0 || sent < max_rows {
        match response.data_rows().next().await {
            Some(row) => client.feed(PgWireBackendMessage::DataRow(row?)).await?,
            None => {
                let tag = Tag::new("SELECT").with_rows(sent);
                client
                    .feed(PgWireBackendMessage::CommandComplete(tag.into()))
                    .await?;
                return Ok(true);
            }
        }
        sent += 1;
    }
    client
        .feed(PgWireBackendMessage::PortalSuspended(PortalSuspended::new()))
        .await?;
    Ok(false)
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = Arc<Parsed>;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        Arc::clone(&self.parser)
    }

    /// Start the portal on its first Execute, then send rows from its
    /// stream: at most `max_rows` per Execute, never more than one batch
    /// held.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal = match client.portal_store().get_portal(name) {
            Some(Entry::Value(portal)) => portal,
            Some(Entry::Empty) => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
                return Ok(());
            }
            None => return Err(PgWireError::PortalNotFound(name.to_string())),
        };
        // Negative means no limit, like 0.
        let max_rows = usize::try_from(message.max_rows).unwrap_or(0);
        let state = portal.state();
        let mut state = state.lock().await;
        if matches!(*state, PortalExecutionState::Initial) {
            client.set_state(PgWireConnectionState::QueryInProgress);
            let started = self.start(client, &portal).await;
            if !matches!(started, Ok(Started::CopyIn)) {
                client.set_state(PgWireConnectionState::ReadyForQuery);
            }
            *state = match started {
                Ok(Started::Rows(response)) => PortalExecutionState::Suspended(response),
                Ok(Started::Done | Started::CopyIn) => PortalExecutionState::Finished,
                Err(e) => {
                    *state = PortalExecutionState::Finished;
                    return Err(e);
                }
            };
        }
        match &mut *state {
            PortalExecutionState::Suspended(response) => {
                let sent = send_rows(client, response, max_rows).await;
                if !matches!(sent, Ok(false)) {
                    // Done, failed or the client is gone: drop the stream.
                    *state = PortalExecutionState::Finished;
                }
                sent.map(|_| ())
            }
            PortalExecutionState::Finished | PortalExecutionState::Initial => Ok(()),
        }
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        _portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // `on_execute` runs portals itself.
        Err(error(ServerError::internal(
            "extended query path not in use",
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_the_front_door_answers() {
        assert_eq!(front_door_kind("begin"), Kind::Local(Local::Begin));
        assert_eq!(
            front_door_kind("  START TRANSACTION"),
            Kind::Local(Local::Begin)
        );
        assert_eq!(
            front_door_kind("-- done\ncommit"),
            Kind::Local(Local::Commit)
        );
        assert_eq!(front_door_kind("ROLLBACK"), Kind::Local(Local::Rollback));
        assert_eq!(
            front_door_kind("DEALLOCATE ALL"),
            Kind::Local(Local::Deallocate(None))
        );
        assert_eq!(
            front_door_kind("deallocate prepare _pg3_0"),
            Kind::Local(Local::Deallocate(Some("_pg3_0".into())))
        );
        assert_eq!(
            front_door_kind("rollback to savepoint a"),
            Kind::Local(Local::Savepoint("ROLLBACK"))
        );
        assert_eq!(
            front_door_kind("SET extra_float_digits = 3"),
            Kind::Set { lenient: true }
        );
        assert_eq!(
            front_door_kind("set session application_name to 'x'"),
            Kind::Set { lenient: true }
        );
        assert_eq!(
            front_door_kind("SET datafusion.execution.batch_size = 1"),
            Kind::Set { lenient: false }
        );
        assert_eq!(front_door_kind("/* c */ select 1"), Kind::Sql);
        assert_eq!(front_door_kind("settings"), Kind::Sql);
        assert_eq!(front_door_kind(""), Kind::Sql);
    }

    #[test]
    fn transaction_status_follows_local_commands() {
        let idle = TransactionStatus::Idle;
        let open = Local::Begin.status(idle);
        assert_eq!(open, TransactionStatus::Transaction);
        assert_eq!(Local::Commit.status(open), TransactionStatus::Idle);
        assert_eq!(
            Local::IgnoredSet.status(open),
            TransactionStatus::Transaction
        );
        let failed = TransactionStatus::Error;
        assert_eq!(
            Local::Savepoint("ROLLBACK").status(failed),
            TransactionStatus::Transaction
        );
        assert_eq!(Local::Rollback.status(failed), TransactionStatus::Idle);
    }

    #[test]
    fn result_formats_must_match_the_columns() {
        assert_eq!(
            formats(&Format::UnifiedText, 2).unwrap(),
            vec![FieldFormat::Text; 2]
        );
        assert_eq!(
            formats(&Format::Individual(vec![0, 1]), 2).unwrap(),
            vec![FieldFormat::Text, FieldFormat::Binary]
        );
        let wrong = formats(&Format::Individual(vec![0, 1, 1]), 2).unwrap_err();
        assert_eq!(wrong.state, SqlState::ProtocolViolation);
    }
}
