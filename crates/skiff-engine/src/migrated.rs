//! Migrated state: the outputs of finished pipelines brought over from
//! another execution (migration, resume, snapshot), which
//! [`MaterializedExec`](crate::materialized::MaterializedExec) leaves of
//! source [`Migrated`](crate::materialized::Source::Migrated) read. Pipeline
//! ids are numbered in the *source* execution's graph.

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::pipeline::PipelineId;

/// The tuples of one migrated output, per partition, in their original order.
#[derive(Debug, Clone)]
pub struct MigratedTable {
    pub schema: SchemaRef,
    pub partitions: Vec<Vec<RecordBatch>>,
}

/// Migrated outputs by source pipeline id: a session-config extension that
/// migrated leaves read from. Reads do not consume.
#[derive(Debug, Default)]
pub struct MigratedState {
    tables: BTreeMap<PipelineId, MigratedTable>,
}

impl MigratedState {
    pub fn new(tables: BTreeMap<PipelineId, MigratedTable>) -> Self {
        Self { tables }
    }

    pub fn get(&self, pipeline: PipelineId) -> Option<&MigratedTable> {
        self.tables.get(&pipeline)
    }

    pub fn pipelines(&self) -> impl Iterator<Item = PipelineId> + '_ {
        self.tables.keys().copied()
    }
}
