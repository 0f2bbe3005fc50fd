//! The workers' buffer pools as the coordinator shows them: `skiff.cache`
//! (asked of every live worker when a query reads it) and
//! `skiff.clear_cache()` (admins only: it slows every query after it).

use std::sync::{Arc, Weak};

use arrow::array::{Int64Array, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::ScalarUDF;
use futures::future::join_all;
use skiff_engine::buffer::system::{CLEAR_CACHE, ClearCache, cache_rows, cache_schema};
use skiff_flight::protocol::BufferTable;

use super::matching::addresses;
use super::session::Caller;
use crate::config::BUFFER_CALL_TIMEOUT;
use crate::inner::Inner;
use skiff_node::error::{ServerError, SqlState};

/// `skiff.cache`: `worker`, then the engine's columns, a row per table
/// each live worker's pool has seen. A worker that does not answer in
/// time is left out (its pool is empty to the reader, not an error).
pub(crate) async fn cache_table(inner: &Inner) -> Result<RecordBatch> {
    let workers = addresses(&inner.membership, None);
    let asked = workers.values().map(|addr| async move {
        tokio::time::timeout(BUFFER_CALL_TIMEOUT, skiff_flight::buffer_stats(addr)).await
    });
    let answers = join_all(asked).await;
    let schema = schema();
    let mut batches = Vec::with_capacity(workers.len());
    for ((id, addr), answer) in workers.iter().zip(answers) {
        let stats = match answer {
            Ok(Ok(stats)) => stats,
            Ok(Err(e)) => {
                tracing::debug!(worker = id, %addr, error = %e, "no buffer pool counters");
                continue;
            }
            Err(_) => continue,
        };
        let tables: Vec<_> = stats.tables.iter().map(BufferTable::to_pool).collect();
        let rows = cache_rows(&tables)?;
        let worker = Arc::new(Int64Array::from(vec![*id as i64; rows.num_rows()]));
        let mut columns = vec![worker as _];
        columns.extend(rows.columns().iter().cloned());
        batches.push(RecordBatch::try_new(Arc::clone(&schema), columns)?);
    }
    Ok(concat_batches(&schema, &batches)?)
}

fn schema() -> SchemaRef {
    let mut fields = vec![Field::new("worker", DataType::Int64, false)];
    fields.extend(cache_schema().fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

/// `skiff.clear_cache()`: empties every live worker's pool; the bytes
/// freed. Admins only.
pub(crate) fn clear_cache(coordinator: Weak<Inner>) -> ScalarUDF {
    ClearCache::udf(Arc::new(move |options| {
        let Some(inner) = coordinator.upgrade() else {
            return exec_err!("the coordinator is shutting down");
        };
        if !Caller::of(options).is_admin() {
            return Err(ServerError::new(
                SqlState::InsufficientPrivilege,
                format!("permission denied for {CLEAR_CACHE}: only admin users may call it"),
            )
            .into());
        }
        // A scalar function is not async; the workers answer within
        // `BUFFER_CALL_TIMEOUT` each, asked together.
        let handle = tokio::runtime::Handle::current();
        if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
            return exec_err!("{CLEAR_CACHE} needs the server's multi-threaded runtime");
        }
        let workers = addresses(&inner.membership, None);
        let cleared = tokio::task::block_in_place(|| {
            handle.block_on(join_all(workers.values().map(|addr| async move {
                tokio::time::timeout(BUFFER_CALL_TIMEOUT, skiff_flight::clear_buffer(addr)).await
            })))
        });
        let mut freed = 0u64;
        for (id, answer) in workers.keys().zip(cleared) {
            match answer {
                Ok(Ok(bytes)) => freed += bytes,
                Ok(Err(e)) => return exec_err!("worker {id} did not clear its buffer pool: {e}"),
                Err(_) => return exec_err!("worker {id} did not clear its buffer pool in time"),
            }
        }
        Ok(freed)
    }))
}
