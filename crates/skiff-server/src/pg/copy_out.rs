//! `COPY { table | (query) } TO STDOUT` (what `psql \copy ... to` and
//! psycopg's `cursor.copy()` send): the query runs like any other, on a
//! worker when it reads tables, and each result row goes to the client as
//! one CopyData message in text or CSV format, as PostgreSQL sends them.

use std::fmt::Debug;

use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::ClientInfo;
use pgwire::api::results::Tag;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use skiff_tables::copy::{CopyOptions, CopyTo, Format, Spelling};

use super::types::{copy_header, encode_copy_batch};
use super::{Connection, error};
use skiff_coordinator::{Coordinator, StatementResult};
use skiff_node::error::{ServerError, SqlState};

/// Run `to`'s query and stream its rows out. `Ok(Some(error))`: the
/// statement failed, before or during the rows (reported by the caller,
/// which ends the copy as PostgreSQL does, with an ErrorResponse);
/// `Err`: the connection failed.
pub(super) async fn send<C>(
    client: &mut C,
    coordinator: &Coordinator,
    conn: &Connection,
    to: CopyTo,
) -> PgWireResult<Option<PgWireError>>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let format = match out_format(&to.options) {
        Ok(format) => format,
        Err(e) => return Ok(Some(error(e))),
    };
    let StatementResult {
        schema, mut stream, ..
    } = match coordinator.execute(conn.session(), &to.query).await {
        Ok(result) => result,
        Err(e) => return Ok(Some(error(e))),
    };
    let columns = schema.fields().len();
    let Ok(width) = i16::try_from(columns) else {
        let e = ServerError::new(SqlState::ProgramLimitExceeded, "too many columns to COPY");
        return Ok(Some(error(e)));
    };
    // Overall format 0 (text) with every column in text: CSV is text too.
    let response = CopyOutResponse::new(0, width, vec![0; columns]);
    client
        .feed(PgWireBackendMessage::CopyOutResponse(response))
        .await?;
    if to.options.header {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        let header = copy_header(&names, &format);
        client
            .feed(PgWireBackendMessage::CopyData(CopyData::new(header)))
            .await?;
    }
    let mut rows = 0usize;
    while let Some(batch) = stream.next().await {
        let lines = batch
            .map_err(ServerError::from)
            .and_then(|batch| encode_copy_batch(&batch, &format));
        let lines = match lines {
            Ok(lines) => lines,
            Err(e) => return Ok(Some(error(e))),
        };
        rows += lines.len();
        for line in lines {
            client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(line)))
                .await?;
        }
    }
    client
        .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    let tag = Tag::new("COPY").with_rows(rows);
    client
        .feed(PgWireBackendMessage::CommandComplete(tag.into()))
        .await?;
    Ok(None)
}

/// The row spelling `options` ask for; text and CSV only, as PostgreSQL's
/// binary COPY format and Parquet/JSON are not spoken on this port.
fn out_format(options: &CopyOptions) -> skiff_node::error::Result<Spelling> {
    let format = options.format.unwrap_or(Format::Text);
    if !matches!(format, Format::Text | Format::Csv) {
        return Err(ServerError::new(
            SqlState::FeatureNotSupported,
            "COPY ... TO STDOUT writes text or csv; use COPY ... TO 'file' for Parquet and JSON",
        ));
    }
    options.spelling(format).map_err(|e| ServerError {
        state: SqlState::InvalidParameterValue,
        ..ServerError::from(e)
    })
}
