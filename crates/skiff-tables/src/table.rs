//! A managed table as DataFusion sees it: scans, `INSERT`, `UPDATE`,
//! `DELETE` and `TRUNCATE` over one Delta table, each write one commit.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use arrow::datatypes::{Field, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::{DFSchema, Result};
use datafusion::datasource::sink::{DataSink, DataSinkExec};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::expr_rewriter::unnormalize_col;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType};
use datafusion::prelude::SessionContext;
use deltalake_core::DeltaTable;
use deltalake_core::kernel::StructField;
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel;
use tokio::sync::{Mutex, OwnedRwLockReadGuard, OwnedRwLockWriteGuard};
use tracing::warn;
use url::Url;

use crate::command::CommandExec;
use crate::error::TableError;
use crate::partition::HashPartitioning;
use crate::scan::{self, Layout};

/// Field metadata key holding a column's default, as SQL text.
pub(crate) const DEFAULT_KEY: &str = "skiff.default";

/// One Delta table. Every scan and write starts from the latest commit, so
/// other sessions' and other writers' commits are seen at once.
#[derive(Debug)]
pub struct ManagedTable {
    name: String,
    url: Url,
    /// Skiff's to delete on `DROP TABLE`: a table in the data directory.
    /// A Delta table registered with `CREATE EXTERNAL TABLE` is not.
    owned: bool,
    table: Mutex<DeltaTable>,
    layout: RwLock<Layout>,
    /// Held shared by every write while it runs and exclusively by `DROP
    /// TABLE`, which sets it (true: dropped). A write still running when
    /// the table is dropped would commit into the removed table's place.
    writes: Arc<tokio::sync::RwLock<bool>>,
    defaults: HashMap<String, Expr>,
}

impl ManagedTable {
    /// Open the Delta table at `url` under `name`: one of the data
    /// directory's, which `DROP TABLE` deletes.
    pub async fn open(name: &str, url: Url) -> Result<Self, TableError> {
        let table = deltalake_core::open_table(url)
            .await
            .map_err(|e| TableError::delta(name, e))?;
        Self::from_table(name, table)
    }

    /// Open a Delta table kept elsewhere: `DROP TABLE` only forgets it.
    pub async fn open_external(name: &str, url: Url) -> Result<Self, TableError> {
        let mut table = Self::open(name, url).await?;
        table.owned = false;
        Ok(table)
    }

    /// Whether `DROP TABLE` deletes the table's files.
    pub fn owned(&self) -> bool {
        self.owned
    }

    pub(crate) fn from_table(name: &str, table: DeltaTable) -> Result<Self, TableError> {
        let layout = Layout::of(&table)?;
        let defaults = defaults(name, &layout.table_schema)?;
        Ok(Self {
            name: name.to_string(),
            url: table.table_url().clone(),
            owned: true,
            table: Mutex::new(table),
            writes: Arc::default(),
            layout: RwLock::new(layout),
            defaults,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `PARTITION BY HASH`, when the table has it (as of its latest commit
    /// read).
    pub fn partitioning(&self) -> Option<HashPartitioning> {
        match self.layout.read() {
            Ok(layout) => layout.partitioning.clone(),
            Err(poisoned) => poisoned.get_ref().partitioning.clone(),
        }
    }

    /// Where the table lives.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The table at its latest commit.
    pub async fn latest(&self) -> Result<DeltaTable, TableError> {
        let mut table = self.table.lock().await;
        table
            .update_incremental(None)
            .await
            .map_err(|e| TableError::delta(&self.name, e))?;
        let layout = Layout::of(&table)?;
        if let Ok(mut current) = self.layout.write() {
            *current = layout;
        }
        Ok(table.clone())
    }

    /// The table's columns at its latest commit.
    pub(crate) async fn schema_now(&self) -> Result<SchemaRef, TableError> {
        self.latest().await?;
        Ok(self.schema())
    }

    /// Add nullable columns: one commit changing only the schema.
    pub(crate) async fn add_columns(&self, fields: Vec<Field>) -> Result<(), TableError> {
        let _writing = open_for_writing(Arc::clone(&self.writes), &self.name).await?;
        let table = self.latest().await?;
        let mut kernel: Vec<StructField> = Vec::with_capacity(fields.len());
        for field in &fields {
            let converted = field.try_into_kernel().map_err(|e| {
                TableError::Unsupported(format!(
                    "column \"{}\" of type {}: {e}",
                    field.name(),
                    field.data_type()
                ))
            })?;
            kernel.push(converted);
        }
        table
            .add_columns()
            .with_fields(kernel)
            .await
            .map_err(|e| TableError::delta(&self.name, e))?;
        // Plans made from now on see the new columns.
        self.latest().await?;
        Ok(())
    }

    /// Wait for the table's writes to end and keep new ones out; set the
    /// guard to true once the table is gone.
    pub(crate) async fn close_for_drop(&self) -> OwnedRwLockWriteGuard<bool> {
        Arc::clone(&self.writes).write_owned().await
    }

    /// A plan deleting the rows `filters` match (all rows for none).
    async fn delete_where(&self, what: &str, filters: Vec<Expr>) -> Result<Arc<dyn ExecutionPlan>> {
        let table = self.latest().await?;
        let name = self.name.clone();
        let predicate = predicate(filters);
        Ok(self.command(
            what,
            Box::pin(async move {
                let mut delete = table.delete();
                if let Some(predicate) = predicate {
                    delete = delete.with_predicate(predicate);
                }
                let (_, metrics) = delete.await.map_err(|e| TableError::delta(&name, e))?;
                Ok(deleted(&name, metrics.num_deleted_rows))
            }),
        ))
    }

    fn command(&self, what: &str, run: crate::command::Command) -> Arc<dyn ExecutionPlan> {
        let (gate, name) = (Arc::clone(&self.writes), self.name.clone());
        let gated = Box::pin(async move {
            let _writing = open_for_writing(gate, &name).await?;
            run.await
        });
        Arc::new(CommandExec::new(format!("{what} {}", self.name), gated))
    }
}

/// Enter a write: refused once the table is dropped.
async fn open_for_writing(
    gate: Arc<tokio::sync::RwLock<bool>>,
    name: &str,
) -> Result<OwnedRwLockReadGuard<bool>, TableError> {
    let writing = gate.read_owned().await;
    if *writing {
        return Err(TableError::Io(format!(
            "table \"{name}\" was dropped while this statement waited to write"
        )));
    }
    Ok(writing)
}

/// deltalake's sink for an `INSERT`, entered through the table's write
/// gate (see `ManagedTable::writes`).
#[derive(Debug)]
struct GatedSink {
    name: String,
    gate: Arc<tokio::sync::RwLock<bool>>,
    /// deltalake's `DataSinkExec`, whose sink does the writing.
    inner: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
}

impl DisplayAs for GatedSink {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ManagedTableSink: {}", self.name)
    }
}

#[async_trait]
impl DataSink for GatedSink {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn write_all(
        &self,
        data: SendableRecordBatchStream,
        context: &Arc<TaskContext>,
    ) -> Result<u64> {
        let _writing = open_for_writing(Arc::clone(&self.gate), &self.name).await?;
        let Some(inner) = self.inner.downcast_ref::<DataSinkExec>() else {
            return Err(
                TableError::Io(format!("table \"{}\": no sink to write to", self.name)).into(),
            );
        };
        inner.sink().write_all(data, context).await
    }
}

/// Column defaults kept in the fields' metadata, parsed back to
/// expressions over the table's columns.
fn defaults(name: &str, schema: &SchemaRef) -> Result<HashMap<String, Expr>, TableError> {
    let mut out = HashMap::new();
    let ctx = SessionContext::new();
    let df_schema = DFSchema::try_from(schema.as_ref().clone())
        .map_err(|e| TableError::Io(format!("table \"{name}\": {e}")))?;
    for field in schema.fields() {
        if let Some(sql) = field.metadata().get(DEFAULT_KEY) {
            let expr = ctx.parse_sql_expr(sql, &df_schema).map_err(|e| {
                TableError::Io(format!(
                    "table \"{name}\": default of column \"{}\" ({sql}) does not parse: {e}",
                    field.name()
                ))
            })?;
            out.insert(field.name().clone(), expr);
        }
    }
    Ok(out)
}

/// The filters as one predicate over unqualified columns (what deltalake
/// resolves against its own schema); `None` for all rows.
fn predicate(filters: Vec<Expr>) -> Option<Expr> {
    conjunction(filters.into_iter().map(unnormalize_col))
}

#[async_trait]
impl TableProvider for ManagedTable {
    fn schema(&self) -> SchemaRef {
        match self.layout.read() {
            Ok(layout) => Arc::clone(&layout.table_schema),
            Err(poisoned) => Arc::clone(&poisoned.get_ref().table_schema),
        }
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let table = self.latest().await?;
        scan::plan(&table, state, projection, limit).await
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Row groups are pruned by the Parquet scan; rows are still
        // filtered above it.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn insert_into(
        &self,
        state: &dyn Session,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let table = self.latest().await?;
        let provider = table.table_provider().build().await?;
        let input = match self.partitioning() {
            Some(p) => p.add_to_input(
                input,
                provider.schema().as_ref(),
                Arc::new(state.config_options().clone()),
            )?,
            None => input,
        };
        let plan = provider.insert_into(state, input, insert_op).await?;
        let Some(exec) = plan.downcast_ref::<DataSinkExec>() else {
            return Ok(plan);
        };
        let sink = GatedSink {
            name: self.name.clone(),
            gate: Arc::clone(&self.writes),
            schema: Arc::clone(exec.sink().schema()),
            inner: Arc::clone(&plan),
        };
        Ok(Arc::new(DataSinkExec::new(
            Arc::clone(exec.input()),
            Arc::new(sink),
            exec.sort_order().clone(),
        )))
    }

    async fn delete_from(
        &self,
        _state: &dyn Session,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.delete_where("DELETE FROM", filters).await
    }

    async fn update(
        &self,
        _state: &dyn Session,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let table = self.latest().await?;
        // A row whose key changed would stay in its old partition's files.
        if let Some(p) = self.partitioning()
            && let Some((key, _)) = assignments.iter().find(|(c, _)| p.columns.contains(c))
        {
            return Err(TableError::Unsupported(format!(
                "cannot UPDATE partition key \"{key}\" of partitioned table \"{}\": \
                 DELETE the rows and INSERT them again",
                self.name
            ))
            .into());
        }
        let name = self.name.clone();
        let predicate = predicate(filters);
        Ok(self.command(
            "UPDATE",
            Box::pin(async move {
                let mut update = table.update();
                if let Some(predicate) = predicate {
                    update = update.with_predicate(predicate);
                }
                for (column, value) in assignments {
                    update = update.with_update(column, unnormalize_col(value));
                }
                let (_, metrics) = update.await.map_err(|e| TableError::delta(&name, e))?;
                Ok(metrics.num_updated_rows as u64)
            }),
        ))
    }

    async fn truncate(&self, _state: &dyn Session) -> Result<Arc<dyn ExecutionPlan>> {
        self.delete_where("TRUNCATE", Vec::new()).await
    }
}

/// Rows a delete removed; deltalake counts whole files from their
/// statistics, which a file written without them lacks.
fn deleted(name: &str, rows: Option<usize>) -> u64 {
    rows.map(|n| n as u64).unwrap_or_else(|| {
        warn!(table = name, "a delete removed files without row counts");
        0
    })
}
