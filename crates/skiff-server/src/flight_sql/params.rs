//! Parameters of prepared statements: the client binds them with `DoPut`
//! as Arrow record batches, one row per execution, one column per `$n`.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use datafusion::common::ScalarValue;
use futures::{StreamExt, TryStreamExt};

use skiff_node::error::{Result, ServerError, SqlState, from_status};

/// Parameter rows one `DoPut` may bind (each row is one execution).
pub(super) const PARAM_ROWS_MAX: usize = 4096;

/// The schema a client binds parameters with: `$1`, `$2`, ... of the
/// inferred types (`Null` where DataFusion could not infer one).
pub(super) fn param_schema(types: &[Option<DataType>]) -> Schema {
    let fields: Vec<Field> = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Field::new(
                format!("${}", i + 1),
                t.clone().unwrap_or(DataType::Null),
                true,
            )
        })
        .collect();
    Schema::new(fields)
}

/// Read the parameter batches of a `DoPut` and turn them into rows of
/// values of `types`.
pub(super) async fn read_rows(
    stream: PeekableFlightDataStream,
    types: &[Option<DataType>],
) -> Result<Vec<Vec<ScalarValue>>> {
    // Some clients send only the descriptor, with no IPC message at all.
    let messages = stream.try_filter(|data| std::future::ready(!data.data_header.is_empty()));
    let mut batches =
        FlightRecordBatchStream::new_from_flight_data(messages.map_err(FlightError::from).boxed());
    let mut rows = Vec::new();
    while let Some(batch) = batches.try_next().await.map_err(flight_error)? {
        if rows.len() + batch.num_rows() > PARAM_ROWS_MAX {
            return Err(ServerError::new(
                SqlState::InsufficientResources,
                format!("at most {PARAM_ROWS_MAX} parameter rows may be bound at once"),
            ));
        }
        append_rows(&batch, types, &mut rows)?;
    }
    Ok(rows)
}

fn append_rows(
    batch: &RecordBatch,
    types: &[Option<DataType>],
    rows: &mut Vec<Vec<ScalarValue>>,
) -> Result<()> {
    // Clients without parameters may send an empty batch of no columns.
    if batch.num_rows() > 0 && batch.num_columns() != types.len() {
        return Err(ServerError::new(
            SqlState::UndefinedParameter,
            format!(
                "statement has {} parameters, {} columns were bound",
                types.len(),
                batch.num_columns()
            ),
        ));
    }
    for row in 0..batch.num_rows() {
        let mut values = Vec::with_capacity(types.len());
        for (column, wanted) in batch.columns().iter().zip(types) {
            let value = ScalarValue::try_from_array(column, row)?;
            values.push(match wanted {
                Some(t) if value.data_type() != *t => value.cast_to(t)?,
                _ => value,
            });
        }
        rows.push(values);
    }
    Ok(())
}

fn flight_error(error: FlightError) -> ServerError {
    match error {
        FlightError::Tonic(status) => from_status(&status),
        other => ServerError::new(
            SqlState::ProtocolViolation,
            format!("cannot read bound parameters: {other}"),
        ),
    }
}

/// An empty schema stands for "no result set" and "no parameters"; Flight
/// SQL sends those as empty bytes.
pub(super) fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes> {
    if schema.fields().is_empty() {
        return Ok(bytes::Bytes::new());
    }
    let options = arrow::ipc::writer::IpcWriteOptions::default();
    let message: arrow_flight::IpcMessage = arrow_flight::SchemaAsIpc::new(schema, &options)
        .try_into()
        .map_err(|e| ServerError::internal(format!("cannot encode schema: {e}")))?;
    Ok(message.0)
}

/// The schema the Flight encoder sends for `schema`: dictionaries are
/// sent as their values. A `FlightInfo` must carry exactly this schema
/// (the ADBC driver rejects a stream whose schema differs).
pub(super) fn flight_schema(schema: &Schema) -> Arc<Schema> {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, value) => f.as_ref().clone().with_data_type(*value.clone()),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(fields).with_metadata(schema.metadata().clone()))
}
