//! Spill files of the intermediate store: Arrow IPC streams in files from
//! DataFusion's disk manager, read back with its `SpillManager`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BinaryViewArray, StringViewArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::ipc::MetadataVersion;
use arrow::ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow::record_batch::RecordBatch;
use datafusion::common::Result;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SpillFile, SpillWriter};

/// Buffers are aligned for the strictest Arrow type (view arrays need 16
/// bytes) so that batches read back need no realignment copy.
const SPILL_ALIGNMENT: usize = 64;

/// A spill file being written.
pub struct SpillFileWriter {
    writer: StreamWriter<Box<dyn SpillWriter>>,
    file: Arc<dyn SpillFile>,
}

impl SpillFileWriter {
    pub fn create(runtime: &RuntimeEnv, schema: &SchemaRef, description: &str) -> Result<Self> {
        let file = runtime.disk_manager.create_tmp_file(description)?;
        let options = IpcWriteOptions::try_new(SPILL_ALIGNMENT, false, MetadataVersion::V5)?;
        let writer = StreamWriter::try_new_with_options(file.open_writer()?, schema, options)?;
        Ok(Self { writer, file })
    }

    pub fn append(&mut self, batch: &RecordBatch) -> Result<()> {
        let compacted = compact_views(batch)?;
        self.writer.write(&compacted)?;
        Ok(())
    }

    /// Close the stream; the file is then ready to read.
    pub fn finish(mut self) -> Result<Arc<dyn SpillFile>> {
        self.writer.finish()?;
        self.writer.get_mut().finish()?;
        Ok(self.file)
    }
}

/// A sliced view array still points at its whole data buffers; writing it
/// as is would spill all of them.
fn compact_views(batch: &RecordBatch) -> Result<RecordBatch> {
    let has_views = batch
        .schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Utf8View | DataType::BinaryView));
    if !has_views {
        return Ok(batch.clone());
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| {
            if let Some(a) = c.as_any().downcast_ref::<StringViewArray>() {
                Arc::new(a.gc()) as ArrayRef
            } else if let Some(a) = c.as_any().downcast_ref::<BinaryViewArray>() {
                Arc::new(a.gc()) as ArrayRef
            } else {
                Arc::clone(c)
            }
        })
        .collect();
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}
