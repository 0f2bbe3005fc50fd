//! `skiff.table_history`: every managed table's commits as rows, newest
//! first, read from each table's `_delta_log` when scanned. The log keeps
//! each commit's operation, its parameters and metrics as the writer
//! recorded them; commits the log's retention has removed are not shown.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMillisecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, exec_err};
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::execution::SessionState;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use deltalake_core::kernel::CommitInfo;

use crate::ManagedTable;
use crate::error::TableError;
use crate::store::{CATALOG, SCHEMA};

/// The table's name in the `skiff` schema.
pub const NAME: &str = "table_history";

/// One commit of a table.
#[derive(Clone, Debug)]
pub struct Commit {
    pub version: u64,
    pub info: CommitInfo,
}

impl ManagedTable {
    /// The table's commits, newest first, as far back as its log goes.
    pub async fn history(&self) -> Result<Vec<Commit>, TableError> {
        let table = self.latest().await?;
        let Some(latest) = table.version() else {
            return Ok(Vec::new());
        };
        let log = table.log_store();
        let mut commits = Vec::new();
        for version in (0..=latest).rev() {
            let entry = log
                .read_commit_entry(version)
                .await
                .map_err(|e| TableError::delta(self.name(), e))?;
            // Older commits were removed by the log's retention.
            let Some(bytes) = entry else { break };
            commits.push(Commit {
                version,
                info: commit_info(&bytes).unwrap_or_default(),
            });
        }
        Ok(commits)
    }
}

/// The `commitInfo` action of a commit file, if its writer wrote one.
fn commit_info(commit: &[u8]) -> Option<CommitInfo> {
    commit.split(|&b| b == b'\n').find_map(|line| {
        let mut action: serde_json::Value = serde_json::from_slice(line).ok()?;
        serde_json::from_value(action.get_mut("commitInfo")?.take()).ok()
    })
}

/// `skiff.table_history`, computed when scanned.
#[derive(Debug, Default)]
pub struct TableHistory;

impl TableHistory {
    pub fn schema() -> SchemaRef {
        let utc = Some(Arc::from("UTC"));
        Arc::new(Schema::new(vec![
            Field::new("table_name", DataType::Utf8, false),
            Field::new("version", DataType::Int64, false),
            Field::new(
                "committed_at",
                DataType::Timestamp(TimeUnit::Millisecond, utc),
                true,
            ),
            Field::new("operation", DataType::Utf8, true),
            Field::new("parameters", DataType::Utf8, true),
            Field::new("metrics", DataType::Utf8, true),
            Field::new("engine", DataType::Utf8, true),
        ]))
    }

    /// The rows: each managed table of the session's catalog, its commits.
    async fn rows(state: &SessionState) -> Result<RecordBatch> {
        let mut table_name = StringBuilder::new();
        let mut version = Int64Builder::new();
        let mut committed_at = TimestampMillisecondBuilder::new().with_timezone("UTC");
        let mut operation = StringBuilder::new();
        let mut parameters = StringBuilder::new();
        let mut metrics = StringBuilder::new();
        let mut engine = StringBuilder::new();
        let schema = state
            .catalog_list()
            .catalog(CATALOG)
            .and_then(|catalog| catalog.schema(SCHEMA));
        let mut names = schema.as_ref().map(|s| s.table_names()).unwrap_or_default();
        names.sort();
        for name in names {
            let Some(provider) = schema.as_ref().map(|s| s.table(&name)) else {
                continue;
            };
            let Ok(Some(provider)) = provider.await else {
                continue;
            };
            let Some(table) = provider.downcast_ref::<ManagedTable>() else {
                continue;
            };
            for commit in table.history().await? {
                let info = &commit.info;
                table_name.append_value(&name);
                version.append_value(i64::try_from(commit.version).unwrap_or(i64::MAX));
                committed_at.append_option(info.timestamp);
                operation.append_option(info.operation.as_deref());
                parameters.append_option(
                    info.operation_parameters
                        .as_ref()
                        .and_then(|p| serde_json::to_string(p).ok()),
                );
                metrics.append_option(
                    info.info
                        .get("operationMetrics")
                        .and_then(|m| serde_json::to_string(m).ok()),
                );
                engine.append_option(info.engine_info.as_deref());
            }
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(table_name.finish()),
            Arc::new(version.finish()),
            Arc::new(committed_at.finish()),
            Arc::new(operation.finish()),
            Arc::new(parameters.finish()),
            Arc::new(metrics.finish()),
            Arc::new(engine.finish()),
        ];
        Ok(RecordBatch::try_new(Self::schema(), columns)?)
    }
}

#[async_trait]
impl TableProvider for TableHistory {
    fn schema(&self) -> SchemaRef {
        Self::schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(state) = state.as_any().downcast_ref::<SessionState>() else {
            return exec_err!("{NAME} needs a DataFusion session");
        };
        let batch = Self::rows(state).await?;
        let schema = batch.schema();
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            schema,
            projection.cloned(),
        )?)
    }
}
