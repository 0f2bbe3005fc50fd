//! Small inputs for the engine's unit tests: one `Int64` column `v`.

use std::sync::Arc;

use arrow::array::{Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::physical_plan::ExecutionPlan;

pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
}

pub(crate) fn batch(values: &[i64]) -> RecordBatch {
    let column = Arc::new(Int64Array::from(values.to_vec()));
    RecordBatch::try_new(schema(), vec![column]).expect("batch")
}

/// A memory scan with one partition per entry, each of those batches.
pub(crate) fn scan(partitions: &[&[&[i64]]]) -> Arc<dyn ExecutionPlan> {
    let partitions: Vec<Vec<RecordBatch>> = partitions
        .iter()
        .map(|batches| batches.iter().map(|b| batch(b)).collect())
        .collect();
    MemorySourceConfig::try_new_exec(&partitions, schema(), None).expect("memory scan")
}

/// The values of `v` in `batches`, in order.
pub(crate) fn values(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let column = b.column(0).as_any().downcast_ref::<Int64Array>();
            column.map(|c| c.values().to_vec()).unwrap_or_default()
        })
        .collect()
}
