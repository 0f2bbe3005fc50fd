//! The embedded engine: a DataFusion session whose queries run as pipeline
//! graphs. Entry point for the shell, the benchmark and (later) workers.

use std::borrow::Cow;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use arrow::datatypes::Schema;

use datafusion::catalog::{MemorySchemaProvider, SchemaProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::memory_pool::{
    GreedyMemoryPool, MemoryPool, TrackConsumersPool, UnboundedMemoryPool,
};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::physical_optimizer::optimizer::PhysicalOptimizer;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream, execute_stream};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::TryStreamExt;
use skiff_tables::alter::AddColumns;
use skiff_tables::copy::{Copy, CopySourceKind, LoadProgress};
use skiff_tables::{DataLocation, TableStore};

use crate::buffer::{self, BufferPool};
use crate::catalog::{self, FoundTable};
use crate::executor::QueryExecution;
use crate::explain;
use crate::options::SkiffOptions;
use crate::statement::{StatementKind, classify};
use crate::store::{Relieve, SkiffMemoryPool};

/// Memory consumers named in an out-of-memory error.
const TOP_CONSUMERS_REPORTED: NonZeroUsize = NonZeroUsize::new(5).expect("non-zero");

/// The memory pool a query runs in: bounded by `limit` (naming the largest
/// consumers when it refuses) or unbounded, and able to ask intermediate
/// stores to spill when an operator cannot grow.
pub fn memory_pool(limit: Option<usize>) -> Arc<dyn MemoryPool> {
    skiff_memory_pool(limit)
}

fn skiff_memory_pool(limit: Option<usize>) -> Arc<SkiffMemoryPool> {
    let pool: Arc<dyn MemoryPool> = match limit {
        Some(limit) => Arc::new(TrackConsumersPool::new(
            GreedyMemoryPool::new(limit),
            TOP_CONSUMERS_REPORTED,
        )),
        None => Arc::new(UnboundedMemoryPool::default()),
    };
    Arc::new(SkiffMemoryPool::new(pool))
}

/// Settings of an [`Engine`].
#[derive(Clone, Debug, Default)]
pub struct EngineConfig {
    /// Partitions per pipeline; defaults to the number of cores.
    pub target_partitions: Option<usize>,
    /// Memory pool limit in bytes; unbounded when `None`.
    pub memory_limit: Option<usize>,
    /// Where spill files go; the system temporary directory when `None`.
    pub spill_dir: Option<PathBuf>,
    /// Bytes of the buffer pool (`buffer`); `buffer::default_budget` for
    /// one process when `None`, no pool at 0.
    pub cache_memory: Option<usize>,
}

/// What running a statement gives back.
pub struct QueryOutput {
    pub stream: SendableRecordBatchStream,
    /// The running pipeline graph, for progress and state; `None` for
    /// output computed without running a graph (`EXPLAIN PIPELINES`).
    pub execution: Option<Arc<QueryExecution>>,
    /// How far a `COPY ... FROM` file has read, for its progress.
    pub load: Option<Arc<LoadProgress>>,
}

/// An embedded Skiff engine.
#[derive(Clone)]
pub struct Engine {
    ctx: SessionContext,
    /// Managed tables, once a data directory is registered.
    tables: Arc<OnceLock<TableStore>>,
    buffer: Option<Arc<BufferPool>>,
}

impl Engine {
    pub fn new(config: &EngineConfig) -> Result<Self> {
        let mut session = SessionConfig::new()
            .with_information_schema(true)
            .with_default_catalog_and_schema(catalog::DATABASE, catalog::DEFAULT_SCHEMA)
            .with_option_extension(SkiffOptions::default());
        if let Some(partitions) = config.target_partitions {
            session = session.with_target_partitions(partitions.max(1));
        }
        // `s3://` data directories: deltalake learns the scheme, and the
        // registry builds a bucket's store when a plan first reads it.
        skiff_tables::location::install();
        // No cache of directory listings: DataFusion's keeps them forever
        // by default, so a table over a directory never saw files added
        // after its first scan (a silent wrong answer). A listing per scan
        // is what correctness costs until tables carry versions.
        let memory = skiff_memory_pool(config.memory_limit);
        let budget = config
            .cache_memory
            .unwrap_or_else(|| buffer::default_budget(config.memory_limit, 1));
        let buffer = (budget > 0).then(|| {
            let dyn_memory: Arc<dyn MemoryPool> = Arc::clone(&memory) as _;
            let pool = BufferPool::new(budget, &dyn_memory);
            // Under memory pressure blocks go first, before any spill.
            memory.register_store(Arc::downgrade(&pool) as Weak<dyn Relieve>);
            pool
        });
        if let Some(pool) = &buffer {
            session = session.with_extension(Arc::clone(pool));
        }
        let mut runtime = RuntimeEnvBuilder::new()
            .with_object_store_registry(Arc::new(skiff_tables::location::Stores::default()))
            .with_memory_pool(memory)
            .with_object_list_cache_limit(0);
        if let Some(dir) = &config.spill_dir {
            runtime = runtime.with_temp_file_path(dir);
        }
        // Scans of hash-partitioned tables declare their partitioning;
        // Skiff's rules keep joins over them sound (`co_location`).
        let rules = skiff_tables::co_location::with_rules(PhysicalOptimizer::new().rules);
        let state = SessionStateBuilder::new()
            .with_config(session)
            .with_runtime_env(runtime.build_arc()?)
            .with_default_features()
            .with_physical_optimizer_rules(rules)
            .build();
        let ctx = SessionContext::new_with_state(state);
        {
            let state = ctx.state_ref();
            let mut state = state.write();
            let factories = state.table_factories_mut();
            // A mistyped LOCATION is an error, not an empty table.
            for factory in factories.values_mut() {
                *factory = Arc::new(skiff_tables::CheckedLocation(Arc::clone(factory)));
            }
            factories.insert(
                skiff_tables::DELTA_FORMAT.to_string(),
                Arc::new(skiff_tables::DeltaFactory),
            );
        }
        // `skiff.table_history`; the server's coordinator replaces the
        // schema with one that also shows its own state.
        let skiff = MemorySchemaProvider::new();
        skiff.register_table(
            skiff_tables::history::NAME.to_string(),
            Arc::new(skiff_tables::history::TableHistory),
        )?;
        if let Some(pool) = &buffer {
            skiff.register_table(
                buffer::system::CACHE_TABLE.to_string(),
                Arc::new(buffer::system::CacheTable(Arc::downgrade(pool))),
            )?;
            ctx.register_udf(buffer::system::ClearCache::of_pool(pool));
        }
        if let Some(catalog) = ctx.catalog(catalog::DATABASE) {
            catalog.register_schema(catalog::SYSTEM_SCHEMA, Arc::new(skiff))?;
        }
        Ok(Self {
            ctx,
            tables: Arc::new(OnceLock::new()),
            buffer,
        })
    }

    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The process's buffer pool; `None` when its budget is 0.
    pub fn buffer_pool(&self) -> Option<&Arc<BufferPool>> {
        self.buffer.as_ref()
    }

    /// Register every table found in `dir` (see [`catalog::discover`]);
    /// `CREATE TABLE` makes managed tables there from now on.
    pub async fn register_data_dir(&self, dir: &Path) -> Result<Vec<FoundTable>> {
        let found = catalog::register_data_dir(&self.ctx, dir).await?;
        if self.tables.get().is_none() {
            let _ = self.tables.set(TableStore::open(dir)?);
        }
        Ok(found)
    }

    /// Register the managed tables at `location`, a directory (see
    /// [`Engine::register_data_dir`]) or an object-store prefix; returns how
    /// many tables were registered.
    pub async fn register_data(&self, location: &DataLocation) -> Result<usize> {
        let root = match location {
            DataLocation::Local(dir) => return Ok(self.register_data_dir(dir).await?.len()),
            DataLocation::Object(root) => root,
        };
        let (store, tables) = TableStore::open_object(root).await?;
        let mut registered = 0;
        for (name, url) in tables {
            // One table that cannot be opened (a log damaged by another
            // writer) must not keep every other one from being served.
            let managed = match skiff_tables::ManagedTable::open(&name, url.clone()).await {
                Ok(managed) => managed,
                Err(e) => {
                    let error = e.to_string();
                    tracing::error!(table = %name, %url, %error, "table skipped: cannot open it");
                    continue;
                }
            };
            let quoted = catalog::quoted(&name);
            self.ctx
                .register_table(quoted.as_str(), Arc::new(managed))?;
            registered += 1;
        }
        if self.tables.get().is_none() {
            let _ = self.tables.set(store);
        }
        Ok(registered)
    }

    /// Where managed tables are made; `None` before a data directory is
    /// registered.
    pub fn tables(&self) -> Option<&TableStore> {
        self.tables.get()
    }

    /// Plan one SQL statement. DDL and `SET` take effect here, as in
    /// DataFusion; creating and dropping managed tables too.
    pub async fn physical_plan(&self, sql: &str) -> Result<Arc<dyn ExecutionPlan>> {
        crate::statement::check_complexity(sql).map_err(DataFusionError::Plan)?;
        let (sql, partitioning) = match skiff_tables::partition::split_clause(sql)? {
            Some((rest, partitioning)) => (Cow::Owned(rest), Some(partitioning)),
            None => (Cow::Borrowed(sql), None),
        };
        let plan = self.ctx.state().create_logical_plan(&sql).await?;
        if let Some(tables) = self.tables.get()
            && tables
                .execute_ddl(&self.ctx, &plan, partitioning.as_ref())
                .await?
        {
            return Ok(Arc::new(EmptyExec::new(Arc::new(Schema::empty()))));
        }
        self.ctx
            .execute_logical_plan(plan)
            .await?
            .create_physical_plan()
            .await
    }

    /// Run one statement on the pipeline executor.
    pub async fn execute(&self, statement: &str) -> Result<QueryOutput> {
        if let Some(copy) = Copy::parse(statement)? {
            return self.copy(copy).await;
        }
        if let Some(alter) = AddColumns::parse(statement)? {
            alter.run(&self.ctx).await?;
            let schema = Arc::new(arrow::datatypes::Schema::empty());
            return Ok(QueryOutput {
                stream: Box::pin(RecordBatchStreamAdapter::new(
                    schema,
                    futures::stream::empty(),
                )),
                execution: None,
                load: None,
            });
        }
        match classify(statement) {
            StatementKind::Sql(sql) => {
                let plan = self.physical_plan(sql).await?;
                let execution = self.start(plan)?;
                Ok(QueryOutput {
                    stream: execution.execute()?,
                    execution: Some(execution),
                    load: None,
                })
            }
            StatementKind::ExplainPipelines { analyze, query } => {
                self.explain_pipelines(query, analyze).await
            }
        }
    }

    /// `COPY t FROM 'file'` loads the file (a relative path is read from
    /// the current directory); `COPY ... TO STDOUT` shows the rows.
    async fn copy(&self, copy: Copy) -> Result<QueryOutput> {
        match copy {
            Copy::From(from) => {
                let CopySourceKind::File(path) = &from.source else {
                    return Err(DataFusionError::Plan(
                        "COPY ... FROM STDIN needs a client connection; use COPY ... FROM 'file'"
                            .into(),
                    ));
                };
                // The load runs as the output is read, so the caller can
                // show its progress, and cancels it by dropping the stream.
                let schema = skiff_tables::copy::count_batch(0)?.schema();
                let progress = Arc::new(LoadProgress::default());
                let (ctx, path, reporting) =
                    (self.ctx.clone(), path.clone(), Arc::clone(&progress));
                let stream = futures::stream::once(async move {
                    let rows =
                        skiff_tables::copy::load_file_reporting(&ctx, &from, &path, reporting)
                            .await?;
                    skiff_tables::copy::count_batch(rows)
                });
                Ok(QueryOutput {
                    stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
                    execution: None,
                    load: Some(progress),
                })
            }
            Copy::ToStdout(to) => Box::pin(self.execute(&to.query)).await,
        }
    }

    /// Split `plan` into pipelines, ready to execute.
    pub fn start(&self, plan: Arc<dyn ExecutionPlan>) -> Result<Arc<QueryExecution>> {
        let graph = crate::split(plan)?;
        QueryExecution::new(graph, &self.ctx.task_ctx())
    }

    /// Run one statement as DataFusion would, streaming the same physical
    /// plan: the baseline the pipeline executor is measured against.
    pub async fn execute_streaming(&self, sql: &str) -> Result<SendableRecordBatchStream> {
        let plan = self.physical_plan(sql).await?;
        execute_stream(plan, self.ctx.task_ctx())
    }

    async fn explain_pipelines(&self, query: &str, analyze: bool) -> Result<QueryOutput> {
        // Planning runs DDL and DML at once; explaining must not.
        let read_only = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let plan = self
            .ctx
            .sql_with_options(query, read_only)
            .await?
            .create_physical_plan()
            .await?;
        let execution = self.start(plan)?;
        let batch = if analyze {
            // Run to completion; the rows themselves are not shown.
            let mut stream = execution.execute()?;
            while stream.try_next().await?.is_some() {}
            explain::render(execution.graph(), Some(&execution.state()))?
        } else {
            explain::render(execution.graph(), None)?
        };
        let schema = batch.schema();
        let stream = futures::stream::once(async move { Ok(batch) });
        Ok(QueryOutput {
            stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
            execution: analyze.then_some(execution),
            load: None,
        })
    }
}
