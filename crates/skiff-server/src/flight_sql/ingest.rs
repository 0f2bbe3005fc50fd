//! Bulk ingest over Flight: Flight SQL's `CommandStatementIngest` (ADBC's
//! `adbc_ingest`) and a plain Flight `DoPut` whose descriptor is a path
//! naming the table. The client's Arrow batches stream into the table's
//! write as they arrive; the commit comes after the last one.

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{CommandStatementIngest, TableExistsOption, TableNotExistOption};
use datafusion::common::{DataFusionError, TableReference};
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{StreamExt, TryStreamExt};
use skiff_tables::ingest::{IfExists, IfMissing};

use skiff_node::error::{Result, ServerError, SqlState, from_status};

/// Where an ingest writes and what it does with the table.
#[derive(Debug)]
pub(super) struct Target {
    pub table: TableReference,
    pub if_missing: IfMissing,
    pub if_exists: IfExists,
}

impl Target {
    /// The target of a Flight SQL ingest command.
    pub(super) fn of_command(command: &CommandStatementIngest) -> Result<Target> {
        if command.temporary {
            return Err(unsupported("temporary tables cannot be ingested into"));
        }
        if command.transaction_id.is_some() {
            return Err(unsupported("ingest within a transaction is not supported"));
        }
        let options = command.table_definition_options.unwrap_or_default();
        let if_missing = match TableNotExistOption::try_from(options.if_not_exist) {
            Ok(TableNotExistOption::Create) => IfMissing::Create,
            Ok(TableNotExistOption::Fail) => IfMissing::Fail,
            _ => {
                return Err(invalid(
                    "the ingest does not say what to do if the table is missing",
                ));
            }
        };
        let if_exists = match TableExistsOption::try_from(options.if_exists) {
            Ok(TableExistsOption::Fail) => IfExists::Fail,
            Ok(TableExistsOption::Append) => IfExists::Append,
            Ok(TableExistsOption::Replace) => IfExists::Replace,
            _ => {
                return Err(invalid(
                    "the ingest does not say what to do if the table exists",
                ));
            }
        };
        let table = match (&command.catalog, &command.schema) {
            (Some(catalog), Some(schema)) => {
                TableReference::full(catalog.as_str(), schema.as_str(), command.table.as_str())
            }
            (None, Some(schema)) => {
                TableReference::partial(schema.as_str(), command.table.as_str())
            }
            _ => TableReference::bare(command.table.as_str()),
        };
        Ok(Target {
            table,
            if_missing,
            if_exists,
        })
    }

    /// The target of a plain `DoPut`: the descriptor's path names the table
    /// (`[table]`, `[schema, table]` or `[catalog, schema, table]`),
    /// created if missing, appended to if not.
    pub(super) fn of_path(path: &[String]) -> Result<Target> {
        let table = match path {
            [table] => TableReference::bare(table.as_str()),
            [schema, table] => TableReference::partial(schema.as_str(), table.as_str()),
            [catalog, schema, table] => {
                TableReference::full(catalog.as_str(), schema.as_str(), table.as_str())
            }
            _ => {
                return Err(invalid(
                    "a DoPut's descriptor path names the table: [table], [schema, table] or \
                     [catalog, schema, table]",
                ));
            }
        };
        Ok(Target {
            table,
            if_missing: IfMissing::Create,
            if_exists: IfExists::Append,
        })
    }
}

/// The client's batches as a stream with their schema known (the first
/// IPC message carries it).
pub(super) async fn batches(stream: PeekableFlightDataStream) -> Result<SendableRecordBatchStream> {
    // The first message may be the descriptor alone, with no IPC message.
    let messages = stream.try_filter(|data| std::future::ready(!data.data_header.is_empty()));
    let mut decoded =
        FlightRecordBatchStream::new_from_flight_data(messages.map_err(FlightError::from).boxed());
    let first = decoded.next().await.transpose().map_err(flight_error)?;
    let Some(schema) = decoded.schema().cloned() else {
        return Err(invalid("the ingest sent no schema"));
    };
    let rest = decoded.map_err(|e| DataFusionError::External(Box::new(flight_error(e))));
    let all = futures::stream::iter(first.map(Ok)).chain(rest);
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, all)))
}

fn flight_error(error: FlightError) -> ServerError {
    match error {
        FlightError::Tonic(status) => from_status(&status),
        other => ServerError::new(
            SqlState::BadCopyFileFormat,
            format!("cannot read the ingested batches: {other}"),
        ),
    }
}

fn unsupported(message: &str) -> ServerError {
    ServerError::new(SqlState::FeatureNotSupported, message)
}

fn invalid(message: &str) -> ServerError {
    ServerError::new(SqlState::InvalidParameterValue, message)
}
