//! One generator part to one Parquet file.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::GenError;

/// The record batches of one part, in order.
pub(crate) type Batches = Box<dyn Iterator<Item = Result<RecordBatch, GenError>>>;

/// Rows per Parquet row group: small enough that a scan can prune and
/// parallelise within one file, large enough for good compression.
pub(crate) const ROW_GROUP_ROWS: usize = 128 * 1024;

pub(crate) struct PartStats {
    pub rows: u64,
    pub bytes: u64,
}

/// Writes every batch of `batches` to a new file at `path`, calling
/// `on_batch` with each batch's row count. Returns `Ok(None)` if `cancel` was
/// raised before the part finished; the partial file is then left for the
/// caller to remove with its directory.
pub(crate) fn write_part(
    path: &Path,
    schema: SchemaRef,
    batches: Batches,
    cancel: &AtomicBool,
    on_batch: &dyn Fn(u64),
) -> Result<Option<PartStats>, GenError> {
    let file = File::create(path).map_err(|e| GenError::io(path, e))?;
    let parquet_error = |error| GenError::Parquet {
        path: path.to_path_buf(),
        error,
    };
    let mut writer =
        ArrowWriter::try_new(file, schema, Some(writer_properties())).map_err(parquet_error)?;
    let mut rows = 0u64;
    for batch in batches {
        if cancel.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let batch = batch?;
        writer.write(&batch).map_err(parquet_error)?;
        let batch_rows = batch.num_rows() as u64;
        rows += batch_rows;
        on_batch(batch_rows);
    }
    // Writes the footer; the writer buffers internally, so `file` is unbuffered.
    let file = writer.into_inner().map_err(parquet_error)?;
    // A table directory is renamed into place only after all its parts are
    // written; syncing first means a crash after the rename cannot expose a
    // table whose files are still only in the page cache.
    file.sync_all().map_err(|e| GenError::io(path, e))?;
    let bytes = file.metadata().map_err(|e| GenError::io(path, e))?.len();
    Ok(Some(PartStats { rows, bytes }))
}

fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        // zstd level 1 compresses about as well as snappy's output gzipped
        // and decodes nearly as fast as snappy.
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_created_by(format!("skiff-gen {}", env!("CARGO_PKG_VERSION")))
        .build()
}
