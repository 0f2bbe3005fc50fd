//! `skiff.cache` and `skiff.clear_cache()` over one process's pool.

use std::sync::{Arc, Weak};

use arrow::array::{BooleanArray, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, exec_err};
use datafusion::config::ConfigOptions;
use datafusion::datasource::TableType;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_plan::ExecutionPlan;

use super::pool::{BufferPool, CacheScope, TableCache};

/// The system table's name in the `skiff` schema.
pub const CACHE_TABLE: &str = "cache";
/// The function that empties the pool.
pub const CLEAR_CACHE: &str = "skiff.clear_cache";

/// `skiff.cache`'s columns.
pub fn cache_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("location", DataType::Utf8, false),
        Field::new("partition", DataType::Int64, true),
        Field::new("blocks", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
        Field::new("hits", DataType::UInt64, false),
        Field::new("misses", DataType::UInt64, false),
        Field::new("evictions", DataType::UInt64, false),
        Field::new("sent", DataType::UInt64, false),
        Field::new("received", DataType::UInt64, false),
        Field::new("owned", DataType::Boolean, false),
    ]))
}

/// `skiff.cache` rows: one per table location (and partition, for a
/// hash-partitioned table) the pool has seen.
pub fn cache_rows(tables: &[(CacheScope, TableCache)]) -> Result<RecordBatch> {
    let name = |location: &str| {
        let trimmed = location.trim_end_matches('/');
        trimmed.rsplit('/').next().unwrap_or(trimmed).to_string()
    };
    let column = |f: fn(&TableCache) -> u64| {
        Arc::new(UInt64Array::from_iter_values(
            tables.iter().map(|(_, t)| f(t)),
        ))
    };
    Ok(RecordBatch::try_new(
        cache_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                tables.iter().map(|(s, _)| name(&s.location)),
            )),
            Arc::new(StringArray::from_iter_values(
                tables.iter().map(|(s, _)| s.location.to_string()),
            )),
            Arc::new(Int64Array::from_iter(
                tables.iter().map(|(s, _)| s.partition.map(i64::from)),
            )),
            column(|t| t.blocks),
            column(|t| t.bytes),
            column(|t| t.hits),
            column(|t| t.misses),
            column(|t| t.evictions),
            column(|t| t.sent),
            column(|t| t.received),
            Arc::new(BooleanArray::from_iter(
                tables.iter().map(|(_, t)| Some(t.owned)),
            )),
        ],
    )?)
}

/// `skiff.cache` of this process.
#[derive(Debug)]
pub struct CacheTable(pub Weak<BufferPool>);

#[async_trait]
impl TableProvider for CacheTable {
    fn schema(&self) -> SchemaRef {
        cache_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let tables = self.0.upgrade().map(|p| p.tables()).unwrap_or_default();
        let batch = cache_rows(&tables)?;
        let schema = batch.schema();
        Ok(MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            schema,
            projection.cloned(),
        )?)
    }
}

/// What `skiff.clear_cache()` does, given the caller's session settings:
/// the bytes it freed.
pub type Clear = Arc<dyn Fn(&ConfigOptions) -> Result<u64> + Send + Sync>;

/// `skiff.clear_cache()`: empties a pool (this process's, or every
/// worker's on a coordinator) and answers the bytes freed.
pub struct ClearCache {
    clear: Clear,
    signature: Signature,
}

impl ClearCache {
    pub fn udf(clear: Clear) -> ScalarUDF {
        ScalarUDF::from(Self {
            clear,
            signature: Signature::exact(vec![], Volatility::Volatile),
        })
    }

    /// Over this process's `pool`.
    pub fn of_pool(pool: &Arc<BufferPool>) -> ScalarUDF {
        let pool: Weak<BufferPool> = Arc::downgrade(pool);
        Self::udf(Arc::new(move |_| match pool.upgrade() {
            Some(pool) => Ok(pool.clear() as u64),
            None => exec_err!("the buffer pool is gone"),
        }))
    }
}

impl std::fmt::Debug for ClearCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClearCache").finish_non_exhaustive()
    }
}

impl PartialEq for ClearCache {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.clear, &other.clear)
    }
}

impl Eq for ClearCache {}

impl std::hash::Hash for ClearCache {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.signature.hash(state);
    }
}

impl ScalarUDFImpl for ClearCache {
    fn name(&self) -> &str {
        CLEAR_CACHE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let freed = (self.clear)(&args.config_options)?;
        let freed = i64::try_from(freed).unwrap_or(i64::MAX);
        Ok(ColumnarValue::Array(Arc::new(Int64Array::from(vec![
            freed;
            args.number_rows.max(1)
        ]))))
    }
}
