//! `skiff.pipeline_groups`: the latest pipeline groups of every live
//! worker (asked of each when a query reads the table), with what their
//! shared caches fetched and served.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Builder, Int64Builder, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::Result;
use futures::future::join_all;

use super::matching::addresses;
use crate::config::BUFFER_CALL_TIMEOUT;
use crate::inner::Inner;

/// A row per group: `worker`, `pipeline_group` (`batch.n`), `members`
/// (`query.Pn`), `shared` (`table.column` read by two or more members),
/// `column_bytes` (of every column the members read, by statistics),
/// `chunks_fetched`, `bytes_fetched`, `chunks_shared` (taken from the
/// group's cache instead), `wait_ms`, `held_max_bytes`. A worker that does
/// not answer in time is left out.
pub(crate) async fn pipeline_groups_table(inner: &Inner) -> Result<RecordBatch> {
    let workers = addresses(&inner.membership, None);
    let asked = workers.values().map(|addr| async move {
        tokio::time::timeout(BUFFER_CALL_TIMEOUT, skiff_flight::pipeline_groups(addr)).await
    });
    let answers = join_all(asked).await;
    let mut worker = Int64Builder::new();
    let mut text: [StringBuilder; 3] = Default::default();
    let mut counts: [Int64Builder; 5] = Default::default();
    let mut wait = Float64Builder::new();
    for (id, answer) in workers.keys().zip(answers) {
        let groups = match answer {
            Ok(Ok(groups)) => groups.groups,
            Ok(Err(e)) => {
                tracing::debug!(worker = id, error = %e, "no pipeline groups");
                continue;
            }
            Err(_) => continue,
        };
        for g in groups {
            worker.append_value(*id as i64);
            for (column, value) in text.iter_mut().zip([&g.group, &g.members, &g.shared]) {
                column.append_value(value);
            }
            let values = [
                g.column_bytes,
                g.chunks_fetched,
                g.bytes_fetched,
                g.chunks_shared,
                g.held_max_bytes,
            ];
            for (column, value) in counts.iter_mut().zip(values) {
                column.append_value(i64::try_from(value).unwrap_or(i64::MAX));
            }
            wait.append_value(g.wait_us as f64 / 1000.0);
        }
    }
    let mut fields = vec![Field::new("worker", DataType::Int64, false)];
    for name in ["pipeline_group", "members", "shared"] {
        fields.push(Field::new(name, DataType::Utf8, false));
    }
    for name in [
        "column_bytes",
        "chunks_fetched",
        "bytes_fetched",
        "chunks_shared",
    ] {
        fields.push(Field::new(name, DataType::Int64, false));
    }
    fields.push(Field::new("wait_ms", DataType::Float64, false));
    fields.push(Field::new("held_max_bytes", DataType::Int64, false));
    let [column_bytes, fetched, bytes, shared, held] = counts.map(|mut c| c.finish());
    let mut columns: Vec<ArrayRef> = vec![Arc::new(worker.finish())];
    columns.extend(text.map(|mut c| Arc::new(c.finish()) as ArrayRef));
    for c in [column_bytes, fetched, bytes, shared] {
        columns.push(Arc::new(c));
    }
    columns.push(Arc::new(wait.finish()));
    columns.push(Arc::new(held));
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}
