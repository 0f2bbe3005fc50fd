//! The coordinator: front doors hand it statements; it plans them with
//! DataFusion, runs commands and system-table queries itself, ships every
//! other plan to the least-loaded worker and streams the rows back.

mod catalog_store;
mod cluster_service;
pub mod cost;
pub(crate) use cluster_service::ClusterService;
mod dispatch;
mod membership;
mod queries;
mod relay;
pub(crate) use queries::lock;
mod session;
mod system_tables;
mod vacate;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{DdlStatement, LogicalPlan, Statement};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use skiff_engine::statement::{StatementKind, classify};
use skiff_engine::{Engine, EngineConfig, explain, pipeline};
use tracing::{info, warn};

pub use catalog_store::{CatalogEntry, CatalogStore};
pub use membership::{Membership, Node, NodeState, Placement};
pub use queries::{QueryEntry, QueryInfo, QueryRegistry, QueryStatus};
pub use session::ClientSession;

use crate::auth::Users;
use crate::config::{CoordinatorConfig, Limits};
use crate::error::{Result, ServerError, SqlState};

/// What a statement gives back to a client.
pub struct StatementResult {
    /// The query's id in `skiff.queries`.
    pub query_id: u64,
    pub schema: SchemaRef,
    pub stream: SendableRecordBatchStream,
    /// For statements that return no rows (DDL, `SET`): the command tag.
    pub command: Option<String>,
}

/// A statement planned once and run many times with parameters.
#[derive(Clone, Debug)]
pub struct PreparedStatement {
    pub sql: String,
    /// Types of `$1`, `$2`, ...; `None` where DataFusion could not infer one.
    pub param_types: Vec<Option<DataType>>,
    /// Columns of the result (empty for commands).
    pub schema: SchemaRef,
    plan: Option<LogicalPlan>,
}

/// The coordinator role. Cheap to clone.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    engine: Engine,
    catalog: CatalogStore,
    pub(crate) membership: Membership,
    pub(crate) queries: QueryRegistry,
    limits: Limits,
    users: Users,
    open_sessions: Arc<AtomicUsize>,
    next_session: AtomicU64,
    clients: Mutex<HashMap<String, dispatch::WorkerClient>>,
    /// Measured state hand-off bandwidth, for the migration decision.
    pub(crate) bandwidth: cost::Bandwidth,
}

impl Coordinator {
    /// Build the coordinator: register the data directory's tables, replay
    /// the persisted catalog, install the system tables. Serving starts with
    /// [`crate::server::serve_coordinator`].
    pub async fn new(config: &CoordinatorConfig) -> Result<Self> {
        let engine = Engine::new(&EngineConfig {
            target_partitions: config.partitions,
            memory_limit: None,
            spill_dir: None,
        })?;
        let found = engine.register_data_dir(&config.data_dir).await?;
        info!(tables = found.len(), dir = %config.data_dir.display(), "data directory registered");
        let catalog = CatalogStore::open(&config.data_dir)?;
        let inner = Arc::new_cyclic(|weak| {
            system_tables::install(engine.context(), weak.clone());
            Inner {
                engine,
                catalog,
                membership: Membership::default(),
                queries: QueryRegistry::default(),
                limits: config.limits.clone(),
                users: config.users.clone(),
                open_sessions: Arc::new(AtomicUsize::new(0)),
                next_session: AtomicU64::new(0),
                clients: Mutex::new(HashMap::new()),
                bandwidth: cost::Bandwidth::default(),
            }
        });
        let coordinator = Self { inner };
        coordinator.replay_catalog().await;
        Ok(coordinator)
    }

    async fn replay_catalog(&self) {
        let ctx = self.inner.engine.context();
        for entry in self.inner.catalog.entries() {
            let replayed = async {
                let plan = ctx.state().create_logical_plan(&entry.sql).await?;
                ctx.execute_logical_plan(plan).await?.collect().await
            };
            match replayed.await {
                Ok(_) => info!(name = %entry.name, "catalog entry restored"),
                Err(e) => warn!(name = %entry.name, error = %e, "catalog entry not restored"),
            }
        }
    }

    pub fn users(&self) -> &Users {
        &self.inner.users
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    pub fn membership(&self) -> &Membership {
        &self.inner.membership
    }

    pub fn queries(&self) -> &QueryRegistry {
        &self.inner.queries
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Open a session for `user` (already authenticated by the front
    /// door). Fails when the connection limit is reached.
    pub fn open_session(&self, user: &str, peer: Option<SocketAddr>) -> Result<ClientSession> {
        let open = &self.inner.open_sessions;
        let max = self.inner.limits.max_connections;
        if open.fetch_add(1, Ordering::SeqCst) >= max {
            open.fetch_sub(1, Ordering::SeqCst);
            return Err(ServerError::new(
                SqlState::TooManyConnections,
                format!("sorry, too many clients already (max_connections = {max})"),
            ));
        }
        crate::metrics::sessions(open.load(Ordering::SeqCst));
        let state =
            SessionStateBuilder::new_from_existing(self.inner.engine.context().state()).build();
        let id = self.inner.next_session.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(ClientSession::new(
            id,
            user,
            peer,
            SessionContext::new_with_state(state),
            Arc::clone(open),
        ))
    }

    pub fn open_sessions(&self) -> usize {
        self.inner.open_sessions.load(Ordering::SeqCst)
    }

    /// Run one statement (no trailing semicolon needed).
    pub async fn execute(&self, session: &ClientSession, sql: &str) -> Result<StatementResult> {
        let entry = self.inner.queries.begin(session.user(), sql);
        let outcome = match classify(sql) {
            StatementKind::ExplainPipelines { analyze, query } => {
                self.explain_pipelines(session, &entry, query, analyze)
                    .await
            }
            StatementKind::Sql(sql) => match session.ctx.state().create_logical_plan(sql).await {
                Ok(plan) => self.run_logical(session, &entry, sql, plan).await,
                Err(e) => Err(e.into()),
            },
        };
        self.finish_start(session, entry, outcome)
    }

    /// Plan `sql` without running it.
    pub async fn prepare(&self, session: &ClientSession, sql: &str) -> Result<PreparedStatement> {
        if let StatementKind::ExplainPipelines { analyze, .. } = classify(sql) {
            return Ok(PreparedStatement {
                sql: sql.to_string(),
                param_types: Vec::new(),
                schema: explain::schema(analyze),
                plan: None,
            });
        }
        let numbered = skiff_engine::statement::number_placeholders(sql);
        let plan = session.ctx.state().create_logical_plan(&numbered).await?;
        let types = plan.get_parameter_types()?;
        let mut param_types = Vec::with_capacity(types.len());
        for n in 1..=types.len() {
            match types.get(&format!("${n}")) {
                Some(t) => param_types.push(t.clone()),
                None => {
                    return Err(ServerError::new(
                        SqlState::UndefinedParameter,
                        format!("parameters must be numbered $1..${}", types.len()),
                    ));
                }
            }
        }
        let schema = if returns_rows(&plan) {
            Arc::new(plan.schema().as_arrow().clone())
        } else {
            Arc::new(Schema::empty())
        };
        Ok(PreparedStatement {
            sql: sql.to_string(),
            param_types,
            schema,
            plan: Some(plan),
        })
    }

    /// Run a prepared statement with `params` bound to `$1..`.
    pub async fn execute_prepared(
        &self,
        session: &ClientSession,
        prepared: &PreparedStatement,
        params: Vec<ScalarValue>,
    ) -> Result<StatementResult> {
        let Some(plan) = &prepared.plan else {
            return self.execute(session, &prepared.sql).await;
        };
        if params.len() != prepared.param_types.len() {
            return Err(ServerError::new(
                SqlState::UndefinedParameter,
                format!(
                    "statement has {} parameters, {} given",
                    prepared.param_types.len(),
                    params.len()
                ),
            ));
        }
        let entry = self.inner.queries.begin(session.user(), &prepared.sql);
        let outcome = match plan.clone().with_param_values(ParamValues::List(
            params.into_iter().map(Into::into).collect(),
        )) {
            Ok(plan) => self.run_logical(session, &entry, &prepared.sql, plan).await,
            Err(e) => Err(e.into()),
        };
        self.finish_start(session, entry, outcome)
    }

    /// Cancel query `id`; false when no such query is running.
    pub fn cancel(&self, id: u64) -> bool {
        self.inner.queries.cancel(
            id,
            ServerError::canceled("canceling statement due to user request"),
        )
    }

    /// Attach tracking (progress, cancel, timeout, end of query) to a
    /// started statement, or record its failure.
    fn finish_start(
        &self,
        session: &ClientSession,
        entry: Arc<QueryEntry>,
        outcome: Result<Output>,
    ) -> Result<StatementResult> {
        match outcome {
            Ok(output) => {
                session.set_current(Some(entry.id));
                entry.update(|info| info.status = QueryStatus::Running);
                let schema = output.stream.schema();
                let stream = dispatch::track(
                    Arc::clone(&self.inner),
                    Arc::clone(&entry),
                    output.stream,
                    output.worker.map(|(id, _)| id),
                    self.inner.limits.statement_timeout,
                );
                Ok(StatementResult {
                    query_id: entry.id,
                    schema,
                    stream,
                    command: output.command,
                })
            }
            Err(error) => {
                entry.finish(QueryStatus::Failed(error.message.clone()));
                self.inner.queries.retire(entry.id);
                Err(error)
            }
        }
    }

    async fn run_logical(
        &self,
        session: &ClientSession,
        entry: &Arc<QueryEntry>,
        sql: &str,
        plan: LogicalPlan,
    ) -> Result<Output> {
        if let Some(tag) = command_tag(&plan) {
            return self.run_command(session, sql, plan, tag).await;
        }
        let state = session.ctx.state();
        let physical = state.create_physical_plan(&plan).await?;
        if runs_on_coordinator(&plan) {
            let graph = pipeline::cut(physical)?;
            let execution = skiff_engine::QueryExecution::new(graph, &session.ctx.task_ctx())?;
            return Ok(Output::rows(execution.execute()?));
        }
        let (stream, worker) =
            dispatch::run_on_worker(&self.inner, session, entry, physical, dispatch::Mode::Rows)
                .await?;
        Ok(Output {
            stream,
            command: None,
            worker: Some(worker),
        })
    }

    async fn run_command(
        &self,
        session: &ClientSession,
        sql: &str,
        plan: LogicalPlan,
        tag: &'static str,
    ) -> Result<Output> {
        let persisted = persisted_change(&plan);
        let frame = session.ctx.execute_logical_plan(plan).await?;
        let batches = frame.collect().await?;
        match persisted {
            Some(Change::Put(name)) => self.inner.catalog.put(&name, sql)?,
            Some(Change::Remove(name)) => {
                self.inner.catalog.remove(&name)?;
            }
            None => {}
        }
        let schema = batches
            .first()
            .map(|b| b.schema())
            .unwrap_or_else(|| Arc::new(Schema::empty()));
        let stream = futures::stream::iter(batches.into_iter().map(Ok)).boxed();
        Ok(Output {
            stream: Box::pin(RecordBatchStreamAdapter::new(schema, stream)),
            command: Some(tag.to_string()),
            worker: None,
        })
    }

    async fn explain_pipelines(
        &self,
        session: &ClientSession,
        entry: &Arc<QueryEntry>,
        query: &str,
        analyze: bool,
    ) -> Result<Output> {
        let plan = session.ctx.state().create_logical_plan(query).await?;
        if !returns_rows(&plan) {
            return Err(ServerError::new(
                SqlState::FeatureNotSupported,
                "EXPLAIN PIPELINES explains queries only",
            ));
        }
        let physical = session.ctx.state().create_physical_plan(&plan).await?;
        if !analyze {
            let batch = explain::render(&pipeline::cut(physical)?, None)?;
            let schema = batch.schema();
            let stream = futures::stream::iter([Ok(batch)]).boxed();
            return Ok(Output::rows(Box::pin(RecordBatchStreamAdapter::new(
                schema, stream,
            ))));
        }
        let (stream, worker) = dispatch::run_on_worker(
            &self.inner,
            session,
            entry,
            physical,
            dispatch::Mode::ExplainAnalyze,
        )
        .await?;
        Ok(Output {
            stream,
            command: None,
            worker: Some(worker),
        })
    }

    /// Let the coordinator run: sweep dead nodes until `shutdown`.
    pub async fn sweep_until(&self, shutdown: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            for id in self.inner.membership.sweep(Instant::now()) {
                warn!(node = id, "node missed its heartbeats; declared dead");
                self.inner.node_lost(id);
            }
        }
    }
}

impl Inner {
    /// Fail the queries of a node that is gone.
    pub(crate) fn node_lost(&self, id: u64) {
        let reason = ServerError::new(
            SqlState::CannotConnectNow,
            format!("worker {id} was lost while running the query"),
        );
        self.queries.worker_lost(id, &reason);
        crate::metrics::node_lost();
    }
}

/// A started statement before tracking.
struct Output {
    stream: SendableRecordBatchStream,
    command: Option<String>,
    worker: Option<(u64, String)>,
}

impl Output {
    fn rows(stream: SendableRecordBatchStream) -> Self {
        Self {
            stream,
            command: None,
            worker: None,
        }
    }
}

/// The command tag of a plan that returns no rows to a client, or `None`
/// for a query.
fn command_tag(plan: &LogicalPlan) -> Option<&'static str> {
    Some(match plan {
        LogicalPlan::Ddl(ddl) => match ddl {
            DdlStatement::CreateExternalTable(_) | DdlStatement::CreateMemoryTable(_) => {
                "CREATE TABLE"
            }
            DdlStatement::CreateView(_) => "CREATE VIEW",
            DdlStatement::CreateCatalogSchema(_) => "CREATE SCHEMA",
            DdlStatement::CreateCatalog(_) => "CREATE DATABASE",
            DdlStatement::CreateIndex(_) => "CREATE INDEX",
            DdlStatement::DropTable(_) => "DROP TABLE",
            DdlStatement::DropView(_) => "DROP VIEW",
            DdlStatement::DropCatalogSchema(_) => "DROP SCHEMA",
            DdlStatement::CreateFunction(_) => "CREATE FUNCTION",
            DdlStatement::DropFunction(_) => "DROP FUNCTION",
        },
        LogicalPlan::Statement(statement) => match statement {
            Statement::SetVariable(_) | Statement::ResetVariable(_) => "SET",
            Statement::TransactionStart(_) => "BEGIN",
            Statement::TransactionEnd(_) => "COMMIT",
            Statement::Prepare(_) => "PREPARE",
            Statement::Deallocate(_) => "DEALLOCATE",
            Statement::Execute(_) => return None,
        },
        LogicalPlan::Dml(_) | LogicalPlan::Copy(_) => "INSERT",
        _ => return None,
    })
}

fn returns_rows(plan: &LogicalPlan) -> bool {
    command_tag(plan).is_none()
}

enum Change {
    Put(String),
    Remove(String),
}

/// Catalog changes that must survive a restart.
fn persisted_change(plan: &LogicalPlan) -> Option<Change> {
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(t)) => {
            Some(Change::Put(t.name.to_string()))
        }
        LogicalPlan::Ddl(DdlStatement::CreateView(v)) => Some(Change::Put(v.name.to_string())),
        LogicalPlan::Ddl(DdlStatement::DropTable(t)) => Some(Change::Remove(t.name.to_string())),
        LogicalPlan::Ddl(DdlStatement::DropView(v)) => Some(Change::Remove(v.name.to_string())),
        _ => None,
    }
}

/// Queries over tables that only the coordinator has (system tables, the
/// information schema), and queries that read no table at all (constants,
/// admin functions such as `skiff.cancel`), run on the coordinator.
fn runs_on_coordinator(plan: &LogicalPlan) -> bool {
    let mut scans = 0;
    let mut local = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            scans += 1;
            if matches!(
                scan.table_name.schema(),
                Some(system_tables::SCHEMA) | Some("information_schema")
            ) {
                local = true;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    local || scans == 0
}
