//! The statements managed tables have that DataFusion's SQL does not:
//! `COPY` through the coordinator, loading a server-side file into a
//! table (admins only, as reading the server's files is in PostgreSQL),
//! and `ALTER TABLE ... ADD COLUMN`. `COPY ... FROM STDIN` and `COPY ...
//! TO STDOUT` need the client's connection, so the PostgreSQL front door
//! drives them (`pg/copy_in.rs`, `pg/copy_out.rs`).

use std::path::Path;
use std::sync::Arc;

use datafusion::common::TableReference;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use skiff_tables::alter::AddColumns;
use skiff_tables::copy::{Copy, CopySourceKind};
use skiff_tables::ingest::{IfExists, IfMissing};

use crate::inner::{Coordinator, Output};
use crate::session::{Caller, ClientSession};
use skiff_node::error::{Result, ServerError, SqlState};

/// A statement `skiff-tables` parses and runs.
pub(super) enum TableStatement {
    Copy(Copy),
    AddColumns(AddColumns),
}

/// `sql` as a [`TableStatement`], if it is one.
pub(super) fn table_statement(sql: &str) -> datafusion::common::Result<Option<TableStatement>> {
    if let Some(copy) = Copy::parse(sql)? {
        return Ok(Some(TableStatement::Copy(copy)));
    }
    Ok(AddColumns::parse(sql)?.map(TableStatement::AddColumns))
}

impl Coordinator {
    /// Bulk ingest of a client's Arrow batches into a managed table (Flight
    /// SQL's `CommandStatementIngest`, Flight `DoPut`); the rows written.
    pub async fn ingest(
        &self,
        session: &ClientSession,
        table: &TableReference,
        if_missing: IfMissing,
        if_exists: IfExists,
        batches: SendableRecordBatchStream,
    ) -> Result<u64> {
        let Some(tables) = self.inner.engine.tables() else {
            return Err(ServerError::new(
                SqlState::FeatureNotSupported,
                "this server has no data directory to keep tables in",
            ));
        };
        let rows = skiff_tables::ingest::ingest(
            tables,
            &session.ctx,
            table,
            if_missing,
            if_exists,
            batches,
        )
        .await?;
        Ok(rows)
    }

    /// `ALTER TABLE ... ADD COLUMN`: one commit to the table's schema.
    pub(super) async fn alter(&self, session: &ClientSession, alter: AddColumns) -> Result<Output> {
        alter.run(&session.ctx).await?;
        let schema = Arc::new(arrow::datatypes::Schema::empty());
        Ok(Output {
            stream: Box::pin(RecordBatchStreamAdapter::new(
                schema,
                futures::stream::empty(),
            )),
            command: Some("ALTER TABLE".to_string()),
            worker: None,
        })
    }

    /// Run a `COPY` Skiff handles itself.
    pub(super) async fn copy(&self, session: &ClientSession, copy: Copy) -> Result<Output> {
        let from = match copy {
            Copy::From(from) => from,
            Copy::ToStdout(_) => {
                return Err(ServerError::new(
                    SqlState::FeatureNotSupported,
                    "COPY ... TO STDOUT needs a PostgreSQL connection (psql's \\copy, \
                     psycopg's cursor.copy()); elsewhere use COPY ... TO 'file'",
                ));
            }
        };
        let CopySourceKind::File(file) = &from.source else {
            return Err(ServerError::new(
                SqlState::FeatureNotSupported,
                "COPY ... FROM STDIN needs a PostgreSQL connection (psql's \\copy, \
                 psycopg's cursor.copy()); over Flight SQL use bulk ingest",
            ));
        };
        let caller = Caller::of(session.ctx.copied_config().options());
        if !caller.is_admin() {
            return Err(ServerError::new(
                SqlState::InsufficientPrivilege,
                "permission denied to COPY from a file on the server: only admins may; \
                 use COPY ... FROM STDIN (psql's \\copy)",
            ));
        }
        // A relative path names a file under the data directory.
        let path = match self.inner.engine.tables().map(|t| t.location()) {
            Some(location) if Path::new(file).is_relative() => match location.local_dir() {
                Some(dir) => dir.join(file),
                None => {
                    return Err(ServerError::new(
                        SqlState::InvalidParameterValue,
                        format!(
                            "a relative COPY path names a file under the data directory, \
                             which is {}: give an absolute path on the server, or use \
                             COPY ... FROM STDIN (psql's \\copy)",
                            location.display()
                        ),
                    ));
                }
            },
            _ => Path::new(file).to_path_buf(),
        };
        let path = path.to_string_lossy().to_string();
        let rows = skiff_tables::copy::load_file(&session.ctx, &from, &path).await?;
        counted("COPY", rows)
    }
}

/// A command's output carrying the rows it touched.
fn counted(tag: &str, rows: u64) -> Result<Output> {
    let batch = skiff_tables::copy::count_batch(rows)?;
    let schema = batch.schema();
    let stream = futures::stream::iter(vec![Ok(batch)]);
    Ok(Output {
        stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
        command: Some(tag.to_string()),
        worker: None,
    })
}
