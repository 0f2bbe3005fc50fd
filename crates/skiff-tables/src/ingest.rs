//! Bulk ingest of Arrow batches (Flight SQL's `CommandStatementIngest`,
//! what ADBC's `adbc_ingest` sends, and a plain Flight `DoPut`): create
//! the table from the batches' schema, append to it, or replace it, each
//! in one commit made after the last batch arrived, so an ingest that
//! fails or is cut off changes nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::common::{Result, TableReference, plan_err};
use datafusion::logical_expr::CreateMemoryTable;
use datafusion::physical_plan::SendableRecordBatchStream;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use deltalake_core::operations::write::{SchemaMode, WriteBuilder};
use deltalake_core::protocol::SaveMode;
use futures::StreamExt;

use crate::copy::{append_batches, one_shot};
use crate::error::TableError;
use crate::{ManagedTable, TableStore};

/// What to do when the table is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfMissing {
    Create,
    Fail,
}

/// What to do when the table exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfExists {
    Fail,
    Append,
    /// Its rows and columns become the batches'.
    Replace,
}

/// Ingest `batches` into `table`; the rows written.
pub async fn ingest(
    store: &TableStore,
    ctx: &SessionContext,
    table: &TableReference,
    if_missing: IfMissing,
    if_exists: IfExists,
    batches: SendableRecordBatchStream,
) -> Result<u64> {
    let exists = ctx.table_exist(table.clone())?;
    match (exists, if_exists, if_missing) {
        (true, IfExists::Fail, _) => Err(TableError::Exists(table.to_string()).into()),
        (true, IfExists::Append, _) => {
            let columns: Vec<String> = batches
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            append_batches(ctx, table, &columns, batches).await
        }
        (true, IfExists::Replace, _) => replace(ctx, table, batches).await,
        (false, _, IfMissing::Fail) => plan_err!("table \"{table}\" does not exist"),
        (false, _, IfMissing::Create) => {
            let (counted, rows) = counting(batches);
            let input = one_shot(ctx, counted.schema(), counted)?.into_unoptimized_plan();
            let create = CreateMemoryTable {
                name: table.clone(),
                constraints: Default::default(),
                input: Arc::new(input),
                if_not_exists: false,
                or_replace: false,
                column_defaults: Vec::new(),
                temporary: false,
            };
            store.create(ctx, &create, None).await?;
            Ok(rows.load(Ordering::SeqCst))
        }
    }
}

/// Overwrite a managed table's rows and schema with `batches`: one commit.
async fn replace(
    ctx: &SessionContext,
    name: &TableReference,
    batches: SendableRecordBatchStream,
) -> Result<u64> {
    let provider = ctx.table_provider(name.clone()).await?;
    let Some(managed) = provider.downcast_ref::<ManagedTable>() else {
        return plan_err!("cannot replace \"{name}\": it is read from files, not a managed table");
    };
    let table = managed.latest().await?;
    if managed.partitioning().is_some() {
        return plan_err!(
            "cannot replace partitioned table \"{name}\" by ingest (its partitioning would be \
             lost): drop it and create it again"
        );
    }
    let (counted, rows) = counting(batches);
    let input = one_shot(ctx, counted.schema(), counted)?.into_unoptimized_plan();
    let snapshot = table.snapshot().ok().map(|s| s.snapshot().clone());
    let written = WriteBuilder::new(table.log_store(), snapshot)
        .with_writer_properties(crate::store::writer_properties(ctx))
        .with_input_plan(input)
        .with_save_mode(SaveMode::Overwrite)
        .with_schema_mode(SchemaMode::Overwrite)
        .await
        .map_err(|e| TableError::delta(managed.name(), e))?;
    // A new schema may change the columns and their defaults: plans from
    // now on use the table as written.
    let reopened = ManagedTable::from_table(managed.name(), written)?;
    ctx.deregister_table(name.clone())?;
    ctx.register_table(name.clone(), Arc::new(reopened))?;
    Ok(rows.load(Ordering::SeqCst))
}

/// `batches`, counting the rows that pass.
fn counting(batches: SendableRecordBatchStream) -> (SendableRecordBatchStream, Arc<AtomicU64>) {
    let rows = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&rows);
    let schema = batches.schema();
    let counted = batches.inspect(move |batch| {
        if let Ok(batch) = batch {
            seen.fetch_add(batch.num_rows() as u64, Ordering::SeqCst);
        }
    });
    (
        Box::pin(RecordBatchStreamAdapter::new(schema, counted)),
        rows,
    )
}
