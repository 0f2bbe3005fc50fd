//! What the server says about itself and its catalog: `GetSqlInfo`, and
//! catalogs, schemas, tables and table types, read from
//! `information_schema` through the coordinator like any other query.
//! The Flight SQL builders apply the client's filters to the rows; tables
//! are filtered in SQL as well, so only matching tables are planned when
//! the client asks for their schemas.

use std::sync::{Arc, LazyLock};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Schema};
use arrow::record_batch::RecordBatch;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetTableTypes, CommandGetTables, SqlInfo,
    SqlSupportedTransaction,
};
use futures::TryStreamExt;

use super::sessions::Conn;
use skiff_coordinator::Coordinator;
use skiff_node::error::{Result, ServerError, SqlState};

/// Rows a metadata listing may have.
const METADATA_ROWS_MAX: usize = 100_000;

/// `information_schema` names base tables `BASE TABLE`; Flight SQL and
/// JDBC clients expect `TABLE`.
const TABLE_TYPES: [&str; 3] = ["TABLE", "VIEW", "LOCAL TEMPORARY"];

static SQL_INFO: LazyLock<Result<SqlInfoData, String>> = LazyLock::new(|| {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "Skiff");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow IPC format version (Schema.fbs MetadataVersion V5).
    info.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
    info.append(SqlInfo::FlightSqlServerReadOnly, false);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    info.append(SqlInfo::FlightSqlServerCancel, true);
    info.append(SqlInfo::FlightSqlServerBulkIngestion, false);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.build().map_err(|e| e.to_string())
});

/// The answers to `GetSqlInfo`.
pub(super) fn sql_info() -> Result<&'static SqlInfoData> {
    SQL_INFO
        .as_ref()
        .map_err(|e| ServerError::internal(format!("server information: {e}")))
}

pub(super) async fn catalogs(
    coordinator: &Coordinator,
    conn: &Conn,
    query: CommandGetCatalogs,
) -> Result<(Arc<Schema>, RecordBatch)> {
    let sql = "SELECT DISTINCT catalog_name FROM information_schema.schemata ORDER BY 1";
    let rows = strings(coordinator, conn, sql).await?;
    let mut builder = query.into_builder();
    for row in rows {
        builder.append(&row[0]);
    }
    let schema = builder.schema();
    Ok((schema, builder.build().map_err(arrow_error)?))
}

pub(super) async fn db_schemas(
    coordinator: &Coordinator,
    conn: &Conn,
    query: CommandGetDbSchemas,
) -> Result<(Arc<Schema>, RecordBatch)> {
    // `schemata` leaves out `information_schema` itself, whose tables
    // `GetTables` lists.
    let sql = "SELECT catalog_name, schema_name FROM information_schema.schemata \
               UNION SELECT table_catalog, table_schema FROM information_schema.tables \
               ORDER BY 1, 2";
    let rows = strings(coordinator, conn, sql).await?;
    let mut builder = query.into_builder();
    for row in rows {
        builder.append(&row[0], &row[1]);
    }
    let schema = builder.schema();
    Ok((schema, builder.build().map_err(arrow_error)?))
}

pub(super) async fn tables(
    coordinator: &Coordinator,
    conn: &Conn,
    query: CommandGetTables,
) -> Result<(Arc<Schema>, RecordBatch)> {
    let mut sql = "SELECT table_catalog, table_schema, table_name, table_type \
                   FROM information_schema.tables WHERE true"
        .to_string();
    if let Some(catalog) = &query.catalog {
        sql += &format!(" AND table_catalog = {}", literal(catalog));
    }
    if let Some(pattern) = &query.db_schema_filter_pattern {
        sql += &format!(" AND table_schema LIKE {}", literal(pattern));
    }
    if let Some(pattern) = &query.table_name_filter_pattern {
        sql += &format!(" AND table_name LIKE {}", literal(pattern));
    }
    sql += " ORDER BY 1, 2, 3";
    let rows = strings(coordinator, conn, &sql).await?;
    let types = query.table_types.clone();
    let with_schema = query.include_schema;
    let mut builder = query.into_builder();
    for row in rows {
        let kind = if row[3] == "BASE TABLE" {
            "TABLE"
        } else {
            row[3].as_str()
        };
        if !types.is_empty() && !types.iter().any(|t| t == kind) {
            continue;
        }
        let schema = match with_schema {
            true => table_schema(coordinator, conn, &row[0], &row[1], &row[2]).await,
            false => Schema::empty(),
        };
        builder
            .append(&row[0], &row[1], &row[2], kind, &schema)
            .map_err(arrow_error)?;
    }
    let schema = builder.schema();
    Ok((schema, builder.build().map_err(arrow_error)?))
}

pub(super) fn table_types(query: CommandGetTableTypes) -> Result<(Arc<Schema>, RecordBatch)> {
    let mut builder = query.into_builder();
    for kind in TABLE_TYPES {
        builder.append(kind);
    }
    let schema = builder.schema();
    Ok((schema, builder.build().map_err(arrow_error)?))
}

/// The columns of a table, planned but not read. A table that cannot be
/// planned (its files vanished, say) is listed with no columns rather than
/// failing the whole listing.
async fn table_schema(
    coordinator: &Coordinator,
    conn: &Conn,
    catalog: &str,
    schema: &str,
    table: &str,
) -> Schema {
    let sql = format!(
        "SELECT * FROM {}.{}.{}",
        identifier(catalog),
        identifier(schema),
        identifier(table)
    );
    match coordinator.prepare(&conn.session, &sql).await {
        Ok(prepared) => prepared.schema.as_ref().clone(),
        Err(_) => Schema::empty(),
    }
}

/// Run `sql` and read every column as text (NULL as the empty string).
async fn strings(coordinator: &Coordinator, conn: &Conn, sql: &str) -> Result<Vec<Vec<String>>> {
    let mut stream = coordinator.execute(&conn.session, sql).await?.stream;
    let mut rows = Vec::new();
    while let Some(batch) = stream.try_next().await? {
        if rows.len() + batch.num_rows() > METADATA_ROWS_MAX {
            return Err(ServerError::new(
                SqlState::InsufficientResources,
                format!("metadata listing exceeds {METADATA_ROWS_MAX} rows; filter it"),
            ));
        }
        let columns = batch
            .columns()
            .iter()
            .map(|c| arrow::compute::cast(c, &DataType::Utf8))
            .collect::<Result<Vec<_>, _>>()
            .map_err(arrow_error)?;
        for row in 0..batch.num_rows() {
            let values = columns.iter().map(|c| {
                let text = c.as_string::<i32>();
                if text.is_null(row) {
                    String::new()
                } else {
                    text.value(row).to_string()
                }
            });
            rows.push(values.collect());
        }
    }
    Ok(rows)
}

fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// An Arrow or Flight encoding failure: a bug, not the client's doing.
pub(super) fn arrow_error(error: impl std::fmt::Display) -> ServerError {
    ServerError::internal(skiff_node::error::one_line(&error.to_string()))
}
