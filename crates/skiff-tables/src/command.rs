//! A plan that runs one table command (a Delta delete, update, truncate)
//! when executed, not when planned, and answers the rows it touched: the
//! `count` row DataFusion's DML plans give. Planning a `DELETE` (for
//! `EXPLAIN` or a prepared statement) must change nothing.

use std::fmt;
use std::sync::{Arc, Mutex};

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, internal_err};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    ReplaceChildrenOptions, SendableRecordBatchStream,
};
use futures::future::BoxFuture;

/// The command, run at most once.
pub(crate) type Command = BoxFuture<'static, Result<u64>>;

pub(crate) struct CommandExec {
    /// What it does, for `EXPLAIN`.
    label: String,
    command: Mutex<Option<Command>>,
    properties: Arc<PlanProperties>,
}

impl CommandExec {
    pub(crate) fn new(label: String, command: Command) -> Self {
        let schema = count_schema();
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Self {
            label,
            command: Mutex::new(Some(command)),
            properties: Arc::new(properties),
        }
    }
}

/// DataFusion's DML result: one row, one `count` column.
pub(crate) fn count_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::UInt64,
        false,
    )]))
}

/// The one-row `count` batch a command answers with, as DataFusion's DML
/// plans do.
pub fn count_batch(rows: u64) -> Result<RecordBatch> {
    let column = Arc::new(UInt64Array::from(vec![rows]));
    Ok(RecordBatch::try_new(count_schema(), vec![column])?)
}

impl fmt::Debug for CommandExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CommandExec: {}", self.label)
    }
}

impl DisplayAs for CommandExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "CommandExec: {}", self.label)
    }
}

impl ExecutionPlan for CommandExec {
    fn name(&self) -> &str {
        "CommandExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !children.is_empty() {
            return internal_err!("CommandExec has no children");
        }
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(datafusion::physical_plan::ChildrenPropertiesMode::Keep),
        )
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return internal_err!("CommandExec has one partition, not {partition}");
        }
        let command = self
            .command
            .lock()
            .map_err(|_| DataFusionError::Internal("command lock poisoned".into()))?
            .take()
            .ok_or_else(|| DataFusionError::Execution(format!("{} already ran", self.label)))?;
        let schema = count_schema();
        let stream = futures::stream::once(async move { count_batch(command.await?) });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}
