//! Batches ready for the wire. A string or binary view column can point
//! into data buffers far larger than its own values (a TopK's 20 rows still
//! reference every buffer the scan read); Arrow IPC writes those buffers in
//! full, so a 20-row result became a 10 MB message. Compacting first sends
//! only what the rows use.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use arrow::error::ArrowError;

/// Slack allowed before a view column is compacted: data buffers up to
/// twice the bytes the rows use, plus this, are sent as they are.
const SLACK_BYTES: usize = 64 * 1024;

/// `batch` with every view column that wastes space compacted.
pub fn compact(batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let wasteful = batch.columns().iter().any(|c| compacted(c).is_some());
    if !wasteful {
        return Ok(batch);
    }
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|c| compacted(c).unwrap_or_else(|| Arc::clone(c)))
        .collect();
    RecordBatch::try_new(batch.schema(), columns)
}

fn compacted(column: &ArrayRef) -> Option<ArrayRef> {
    match column.data_type() {
        DataType::Utf8View => {
            let array = column.as_string_view();
            wasteful(array.data_buffers(), array.total_buffer_bytes_used())
                .then(|| Arc::new(array.gc()) as ArrayRef)
        }
        DataType::BinaryView => {
            let array = column.as_binary_view();
            wasteful(array.data_buffers(), array.total_buffer_bytes_used())
                .then(|| Arc::new(array.gc()) as ArrayRef)
        }
        _ => None,
    }
}

fn wasteful(buffers: &[arrow::buffer::Buffer], used: usize) -> bool {
    let held: usize = buffers.iter().map(|b| b.len()).sum();
    held > 2 * used + SLACK_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::StringViewArray;
    use arrow::datatypes::{Field, Schema};

    #[test]
    fn a_small_slice_of_long_strings_is_compacted() {
        let long: Vec<String> = (0..10_000).map(|i| format!("{i:0>64}")).collect();
        let array = StringViewArray::from_iter_values(long.iter());
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(array)]).unwrap();
        let slice = batch.slice(100, 20);
        let before = slice.get_array_memory_size();
        let small = compact(slice.clone()).unwrap();
        assert!(small.get_array_memory_size() * 10 < before);
        assert_eq!(small, slice);
        // Already tight: returned as is.
        let again = compact(small.clone()).unwrap();
        assert_eq!(again, small);
    }
}
