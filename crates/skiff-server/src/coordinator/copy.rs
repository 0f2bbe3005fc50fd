//! `COPY` through the coordinator: loading a server-side file into a
//! table (admins only, as reading the server's files is in PostgreSQL).
//! `COPY ... FROM STDIN` and `COPY ... TO STDOUT` need the client's
//! connection, so the front doors drive those.

use std::path::Path;
use std::sync::Arc;

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use skiff_tables::copy::{Copy, CopySourceKind};

use crate::coordinator::session::{Caller, ClientSession};
use crate::coordinator::{Coordinator, Output};
use crate::error::{Result, ServerError, SqlState};

impl Coordinator {
    /// Run a `COPY` Skiff handles itself.
    pub(super) async fn copy(&self, session: &ClientSession, copy: Copy) -> Result<Output> {
        let from = match copy {
            Copy::From(from) => from,
            Copy::ToStdout(_) => {
                return Err(ServerError::new(
                    SqlState::FeatureNotSupported,
                    "COPY ... TO STDOUT is answered by the PostgreSQL port only",
                ));
            }
        };
        let CopySourceKind::File(file) = &from.source else {
            return Err(ServerError::new(
                SqlState::FeatureNotSupported,
                "COPY ... FROM STDIN is answered by the PostgreSQL port only",
            ));
        };
        let caller = Caller::of(session.ctx.state().config_options());
        if !caller.is_admin() {
            return Err(ServerError::new(
                SqlState::InsufficientPrivilege,
                "permission denied to COPY from a file on the server: only admins may; \
                 use COPY ... FROM STDIN (psql's \\copy)",
            ));
        }
        // A relative path names a file under the data directory.
        let path = match self.inner.engine.tables() {
            Some(tables) if Path::new(file).is_relative() => tables.root().join(file),
            _ => Path::new(file).to_path_buf(),
        };
        let path = path.to_string_lossy().to_string();
        let rows = skiff_tables::copy::load_file(&session.ctx, &from, &path).await?;
        Ok(counted("COPY", rows))
    }
}

/// A command's output carrying the rows it touched.
pub(super) fn counted(tag: &str, rows: u64) -> Output {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![Arc::new(UInt64Array::from(vec![rows]))],
    );
    let stream = futures::stream::iter(vec![batch.map_err(Into::into)]);
    Output {
        stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
        command: Some(tag.to_string()),
        worker: None,
    }
}
