//! The coordinator: the catalog, planning, membership and placement,
//! resizes, the system tables, and the plans it ships to workers and whose
//! rows it relays back.
//!
//! Front doors (`skiff-server`) hand it statements; it plans them with
//! DataFusion, runs commands and system-table queries itself, ships every
//! other plan to the least-loaded worker and streams the rows back. It
//! keeps users and their roles ([`auth`]), the persistent catalog (managed
//! tables and `COPY` loads themselves are `skiff-tables`'), PostgreSQL's
//! `pg_catalog` for client tools, the `skiff` system tables and admin
//! functions; it relays a query's result across migrations, suspensions
//! and restarts, runs queries across several workers on
//! datafusion-distributed (`skiff.distribute`) and runs them again when
//! they lose a worker or are vacated ([`rerun`]), keeps the partition map,
//! adds and removes workers online with buffer matching (old owners send
//! moved partitions' blocks to new owners), loads tables into memory nodes
//! and routes their scans, batches concurrent queries
//! (`skiff.batch_window_ms`), and cuts the fragments a memory node may run
//! (`skiff.offload`). Its limits are in [`config`], its Prometheus
//! figures in [`metrics`].
//!
//! A statement's route: [`session`] (the client's settings and role) →
//! this module (plan; commands, [`copy`] and [`system_tables`] run here) →
//! [`dispatch`] (pick a worker in [`membership`], ship the plan over a
//! connection of [`workers`], track the stream in [`queries`]) →
//! [`relay`] (follow the query across hand-offs, choosing with [`cost`]
//! whether it moves or starts over) → the client. [`vacate`] moves every
//! query off a worker; [`cluster_service`] is where nodes register and
//! send heartbeats; [`catalog_store`] and [`pg_catalog`] keep the catalog.
//! A query over partitioned tables may instead run across the workers
//! ([`distributed`], its scans placed by [`placement`] on the owners the
//! partition map of [`partitions`] names); [`resize`] adds and removes
//! workers.

pub mod auth;
mod batcher;
mod buffer_view;
mod catalog_store;
mod claims;
mod cluster_service;
pub mod config;
mod copy;
mod cost;
mod dispatch;
mod distributed;
pub(crate) mod fragments;
mod groups_view;
mod inner;
mod matching;
mod membership;
mod memory_tables;
mod memory_view;
pub mod metrics;
mod partitions;
mod pg_catalog;
mod placement;
mod queries;
mod relay;
mod rerun;
mod resize;
mod session;
mod stage_commits;
mod stage_reuse;
mod system_tables;
mod vacate;
mod window_keys;
mod workers;

pub use cluster_service::ClusterService;
use copy::{TableStatement, table_statement};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{ParamValues, ScalarValue};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::{DdlStatement, Execute, Expr, LogicalPlan, Statement, WriteOp};
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionContext;
use futures::StreamExt;
use skiff_engine::statement::{StatementKind, classify};
use skiff_engine::{Engine, EngineConfig, explain};
use skiff_tables::partition;
use tracing::{info, warn};

pub use catalog_store::{CatalogEntry, CatalogStore};
pub use claims::WorkerLauncher;
pub use inner::Coordinator;
use inner::{Inner, Output};
pub use membership::{Membership, Node, NodeState, Placement};
pub use queries::{Hop, HopKind, QueryEntry, QueryInfo, QueryRegistry, QueryStatus};
use session::Caller;
pub use session::ClientSession;

pub use auth::Users;
pub use config::{CoordinatorConfig, Limits, Listening, TlsFiles};
pub use pg_catalog::{SERVER_VERSION, TIME_ZONE};
use skiff_node::error::{Result, ServerError, SqlState};

/// What a statement gives back to a client.
pub struct StatementResult {
    /// The query's id in `skiff.queries`.
    pub query_id: u64,
    pub schema: SchemaRef,
    pub stream: SendableRecordBatchStream,
    /// For statements that return no rows (DDL, `SET`): the command tag.
    pub command: Option<String>,
}

/// A statement described once and run many times with parameters. Each
/// execution plans it afresh: what it reads may have changed since it was
/// prepared (system tables, a table dropped and created again, new files),
/// and a plan kept from then would answer from that moment.
#[derive(Clone, Debug)]
pub struct PreparedStatement {
    pub sql: String,
    /// Types of `$1`, `$2`, ...; `None` where DataFusion could not infer one.
    pub param_types: Vec<Option<DataType>>,
    /// Columns of the result (empty for commands).
    pub schema: SchemaRef,
    /// The statement with its placeholders numbered, as it is planned;
    /// `None` for statements [`Coordinator::execute`] runs whole.
    numbered: Option<String>,
}

impl Coordinator {
    /// Build the coordinator: register the data directory's tables, replay
    /// the persisted catalog, install the system tables. Serving starts with
    /// `skiff_server::serve_coordinator`.
    pub async fn new(config: &CoordinatorConfig) -> Result<Self> {
        let engine = Engine::new(&EngineConfig {
            target_partitions: config.partitions,
            memory_limit: None,
            spill_dir: None,
            // Workers scan; the coordinator reads only its system tables.
            cache_memory: Some(0),
        })?;
        let data = config.data.display();
        // The lock first: opening the tables finishes interrupted DROPs,
        // which must not run beside another coordinator's CREATEs.
        let catalog = CatalogStore::open(&config.state_dir, &data)?;
        let partitions = partitions::Partitions::open(&config.state_dir)?;
        let found = engine.register_data(&config.data).await?;
        info!(tables = found, dir = %data, "data directory registered");
        pg_catalog::install(engine.context(), &config.users)?;
        let inner = Arc::new_cyclic(|weak| {
            system_tables::install(engine.context(), weak.clone());
            Inner {
                engine,
                catalog,
                partitions,
                distributed_runs: claims::DistributedRuns::default(),
                removals: claims::Removals::default(),
                matching: Arc::default(),
                launcher: std::sync::OnceLock::new(),
                membership: Arc::default(),
                queries: QueryRegistry::default(),
                limits: config.limits.clone(),
                users: config.users.clone(),
                fault_injection: config.fault_injection,
                open_sessions: Arc::new(AtomicUsize::new(0)),
                next_session: AtomicU64::new(0),
                workers: Arc::default(),
                bandwidth: cost::Bandwidth::default(),
                catalog_sql: pg_catalog::CatalogSql::new(),
                scans: Arc::default(),
                scan_run: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
                checkpoint_connections: Default::default(),
                memory_tables: memory_tables::MemoryTables::default(),
                batcher: Arc::default(),
            }
        });
        let coordinator = Self { inner };
        coordinator.replay_catalog().await;
        for table in partitions::partitioned_tables(coordinator.inner.engine.context()).await {
            coordinator
                .inner
                .partitions
                .add_class(table.partitioning.partitions, Vec::new);
        }
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

    /// Let `skiff.add_workers` start local workers through `launcher`
    /// (`skiff serve` does); the first one set stays.
    pub fn set_launcher(&self, launcher: Arc<dyn WorkerLauncher>) {
        let _ = self.inner.launcher.set(launcher);
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

    /// The `skiff` system table `name` as it is now (`queries` with each
    /// query's offload record), or `None` when there is no such table.
    pub async fn system_table(&self, name: &str) -> Result<Option<RecordBatch>> {
        Ok(system_tables::rows_now(&self.inner, name).await?)
    }

    /// `skiff.queries` as it is now, without asking the memory nodes for
    /// the queries' offload records.
    pub fn queries_table(&self) -> Result<RecordBatch> {
        Ok(system_tables::queries_now(&self.inner)?)
    }

    /// Query `id`'s offload record, from the memory nodes.
    pub async fn offload_of(&self, id: u64) -> Option<String> {
        system_tables::offload_of(&self.inner, id).await
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
        let role = self.inner.users.role(user);
        let planner = fragments::FragmentPlanner::new(Arc::clone(&self.inner));
        let mut state = SessionStateBuilder::new_from_existing(self.inner.engine.context().state())
            .with_query_planner(Arc::new(planner))
            .build();
        state.config_mut().options_mut().extensions.insert(Caller {
            user: user.to_string(),
            role,
        });
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
        check_bounds(sql)?;
        let entry = self.inner.queries.begin(session.user(), sql);
        let outcome = match table_statement(sql) {
            Ok(Some(TableStatement::Copy(copy))) => self.copy(session, copy).await,
            Ok(Some(TableStatement::AddColumns(alter))) => self.alter(session, alter).await,
            Err(e) => Err(e.into()),
            Ok(None) => match classify(sql) {
                StatementKind::ExplainPipelines { analyze, query } => {
                    self.explain_pipelines(session, &entry, query, analyze)
                        .await
                }
                StatementKind::Sql(sql) => match self.plan_sql(session, sql).await {
                    Ok(plan) => self.run_logical(session, &entry, sql, plan).await,
                    Err(e) => Err(e),
                },
            },
        };
        self.finish_start(session, entry, outcome)
    }

    /// Plan `sql` without running it.
    pub async fn prepare(&self, session: &ClientSession, sql: &str) -> Result<PreparedStatement> {
        check_bounds(sql)?;
        if table_statement(sql)?.is_some() {
            // Run by `execute` when bound: no parameters, no result rows.
            return Ok(PreparedStatement {
                sql: sql.to_string(),
                param_types: Vec::new(),
                schema: Arc::new(arrow::datatypes::Schema::empty()),
                numbered: None,
            });
        }
        if let StatementKind::ExplainPipelines { analyze, .. } = classify(sql) {
            return Ok(PreparedStatement {
                sql: sql.to_string(),
                param_types: Vec::new(),
                schema: explain::schema(analyze),
                numbered: None,
            });
        }
        let numbered = skiff_engine::statement::number_placeholders(sql);
        let plan = self.plan_sql(session, &numbered).await?;
        // The placeholders of `PREPARE name AS ...` are bound by `EXECUTE`.
        let types = match &plan {
            LogicalPlan::Statement(Statement::Prepare(_)) => Default::default(),
            plan => plan.get_parameter_types()?,
        };
        let mut count = skiff_engine::statement::highest_placeholder(&numbered);
        for name in types.keys() {
            match name.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => count = count.max(n),
                None => {
                    return Err(ServerError::new(
                        SqlState::UndefinedParameter,
                        format!("parameters must be numbered $1, $2, ...: {name}"),
                    ));
                }
            }
        }
        // A placeholder the plan does not use (a catalog query's rewrite
        // dropped it, or the statement skips a number) has no known type;
        // the client still sends a value for it.
        let param_types = (1..=count)
            .map(|n| types.get(&format!("${n}")).cloned().flatten())
            .collect();
        let described = self.resolve_named(session, plan).await?;
        Ok(PreparedStatement {
            sql: sql.to_string(),
            param_types,
            schema: result_schema(&described),
            numbered: Some(numbered.into_owned()),
        })
    }

    /// Run a prepared statement with `params` bound to `$1..`.
    pub async fn execute_prepared(
        &self,
        session: &ClientSession,
        prepared: &PreparedStatement,
        params: Vec<ScalarValue>,
    ) -> Result<StatementResult> {
        let Some(numbered) = &prepared.numbered else {
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
        let outcome = async {
            let plan = self.plan_sql(session, numbered).await?;
            let plan = self.resolve_named(session, plan).await?;
            if !same_columns(&result_schema(&plan), &prepared.schema) {
                // The client decodes rows by the columns it was told at
                // prepare time (PostgreSQL refuses the same way).
                return Err(ServerError::new(
                    SqlState::FeatureNotSupported,
                    "cached plan must not change result type: what the statement reads \
                     changed since it was prepared; prepare it again",
                ));
            }
            let plan = if params.is_empty() {
                plan
            } else {
                let values = ParamValues::List(params.into_iter().map(Into::into).collect());
                plan.with_param_values(values)?
            };
            self.run_logical(session, &entry, &prepared.sql, plan).await
        };
        let outcome = outcome.await;
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
        let plan = match plan {
            LogicalPlan::Statement(Statement::Prepare(prepare)) => {
                if !session.name_statement(&prepare.name, sql) {
                    return Err(ServerError::new(
                        SqlState::DuplicatePreparedStatement,
                        format!("prepared statement \"{}\" already exists", prepare.name),
                    ));
                }
                return Ok(Output::command("PREPARE"));
            }
            LogicalPlan::Statement(Statement::Deallocate(deallocate)) => {
                if !session.deallocate(Some(&deallocate.name)) {
                    return Err(unknown_statement(&deallocate.name));
                }
                return Ok(Output::command("DEALLOCATE"));
            }
            plan => self.resolve_named(session, plan).await?,
        };
        if let Some(tag) = command_tag(&plan) {
            return self.run_command(session, sql, plan, tag).await;
        }
        let state = session.ctx.state();
        if !runs_on_coordinator(&plan)
            && let Some(stream) = distributed::start(&state, &self.inner, entry, &plan).await?
        {
            return Ok(Output::rows(stream));
        }
        let physical = state.create_physical_plan(&plan).await?;
        if runs_on_coordinator(&plan) {
            let graph = skiff_engine::split(physical)?;
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
        if let LogicalPlan::Statement(Statement::SetVariable(set)) = &plan {
            self.check_setting(session, &set.variable)?;
        }
        let persisted = persisted_change(&plan);
        let managed = match self.inner.engine.tables() {
            Some(tables) => {
                let partitioning = partition::split_clause(sql)
                    .map_err(datafusion::error::DataFusionError::from)?
                    .map(|(_, p)| p);
                let managed = tables
                    .execute_ddl(&session.ctx, &plan, partitioning.as_ref())
                    .await?;
                if let Some(p) = partitioning.filter(|_| managed) {
                    let membership = &self.inner.membership;
                    self.inner
                        .partitions
                        .add_class(p.partitions, || membership.live_workers());
                }
                managed
            }
            None => false,
        };
        let batches = if managed {
            Vec::new()
        } else {
            let frame = session.ctx.execute_logical_plan(plan).await?;
            frame.collect().await?
        };
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

    /// The logical plan of one statement: `SHOW` of a PostgreSQL parameter
    /// as its value, catalog queries through their rewrites, the rest as
    /// DataFusion plans it.
    async fn plan_sql(&self, session: &ClientSession, sql: &str) -> Result<LogicalPlan> {
        let state = session.ctx.state();
        if let Some(select) = pg_catalog::show_as_select(sql) {
            return Ok(state.create_logical_plan(&select).await?);
        }
        if pg_catalog::CatalogSql::is_catalog_query(sql) {
            let statement = self.inner.catalog_sql.parse(sql)?;
            return Ok(state.statement_to_plan(statement).await?);
        }
        // `PARTITION BY HASH` is Skiff's: DataFusion plans the rest, and
        // the table store reads it from the statement (`run_command`).
        if let Some((rest, _)) =
            partition::split_clause(sql).map_err(datafusion::error::DataFusionError::from)?
        {
            return Ok(state.create_logical_plan(&rest).await?);
        }
        Ok(state.create_logical_plan(sql).await?)
    }

    /// `EXECUTE name(args)` as the plan it runs; any other plan as it is.
    async fn resolve_named(
        &self,
        session: &ClientSession,
        plan: LogicalPlan,
    ) -> Result<LogicalPlan> {
        match plan {
            LogicalPlan::Statement(Statement::Execute(execute)) => {
                self.bind_named(session, &execute).await
            }
            plan => Ok(plan),
        }
    }

    /// The plan of `EXECUTE name(args)`: the statement prepared as `name`
    /// planned afresh, with the arguments bound (literals, or expressions
    /// that fold to one, cast to the declared types).
    async fn bind_named(&self, session: &ClientSession, execute: &Execute) -> Result<LogicalPlan> {
        let Some(text) = session.named_statement(&execute.name) else {
            return Err(unknown_statement(&execute.name));
        };
        let state = session.ctx.state();
        let numbered = skiff_engine::statement::number_placeholders(&text);
        let LogicalPlan::Statement(Statement::Prepare(prepare)) =
            self.plan_sql(session, &numbered).await?
        else {
            return Err(ServerError::internal(format!(
                "prepared statement \"{}\" is no longer a PREPARE",
                execute.name
            )));
        };
        let wanted = if prepare.fields.is_empty() {
            prepare.input.get_parameter_names()?.len()
        } else {
            prepare.fields.len()
        };
        if execute.parameters.len() != wanted {
            return Err(ServerError::new(
                SqlState::UndefinedParameter,
                format!(
                    "wrong number of parameters for prepared statement \"{}\": \
                     expected {wanted}, got {}",
                    execute.name,
                    execute.parameters.len()
                ),
            ));
        }
        let context = SimplifyContext::builder()
            .with_schema(Arc::clone(prepare.input.schema()))
            .with_config_options(Arc::clone(state.config_options()))
            .build();
        let simplifier = ExprSimplifier::new(context);
        let mut values = Vec::with_capacity(wanted);
        for (n, parameter) in execute.parameters.iter().enumerate() {
            let Expr::Literal(value, _) = simplifier.simplify(parameter.clone())? else {
                return Err(ServerError::new(
                    SqlState::FeatureNotSupported,
                    format!(
                        "EXECUTE parameter {} must be a constant: {parameter}",
                        n + 1
                    ),
                ));
            };
            let value = match prepare.fields.get(n) {
                Some(field) => value.cast_to(field.data_type())?,
                None => value,
            };
            values.push(value.into());
        }
        let input = Arc::unwrap_or_clone(prepare.input);
        Ok(input.with_param_values(ParamValues::List(values))?)
    }

    /// Test hooks make queries move or fail and workers die on demand:
    /// only a server started for tests accepts them.
    fn check_setting(&self, session: &ClientSession, variable: &str) -> Result<()> {
        let name = variable.trim().to_ascii_lowercase();
        let admin = Caller::of(session.ctx.copied_config().options()).is_admin();
        if !admin && skiff_engine::options::ADMIN_SETTINGS.contains(&name.as_str()) {
            return Err(ServerError::new(
                SqlState::InsufficientPrivilege,
                format!("only an admin may set {name}: it spends what every session shares"),
            ));
        }
        if self.inner.fault_injection || !skiff_engine::options::TEST_HOOKS.contains(&name.as_str())
        {
            return Ok(());
        }
        Err(ServerError::new(
            SqlState::InsufficientPrivilege,
            format!(
                "{name} is a test hook: it is accepted only by a server started with \
                 --fault-injection"
            ),
        ))
    }

    async fn explain_pipelines(
        &self,
        session: &ClientSession,
        entry: &Arc<QueryEntry>,
        query: &str,
        analyze: bool,
    ) -> Result<Output> {
        let plan = self.plan_sql(session, query).await?;
        if !returns_rows(&plan) {
            return Err(ServerError::new(
                SqlState::FeatureNotSupported,
                "EXPLAIN PIPELINES explains queries only",
            ));
        }
        let physical = session.ctx.state().create_physical_plan(&plan).await?;
        if !analyze {
            let batch = explain::render(&skiff_engine::split(physical)?, None)?;
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
            // Workers that registered, died or were marked dead elsewhere.
            self.inner.partition_map();
        }
    }
}

/// Statements too long or too deep are refused before they are parsed:
/// parsing takes memory in proportion, and a tree deeper than a thread's
/// stack would crash the process in whatever walks it first.
fn check_bounds(sql: &str) -> Result<()> {
    let max = crate::config::MAX_STATEMENT_BYTES;
    if sql.len() > max {
        return Err(ServerError::new(
            SqlState::ProgramLimitExceeded,
            format!(
                "statement is {} bytes, more than the {} MiB the server plans; \
                 load data with COPY or Flight SQL ingest",
                sql.len(),
                max >> 20
            ),
        ));
    }
    skiff_engine::statement::check_complexity(sql)
        .map_err(|message| ServerError::new(SqlState::StatementTooComplex, message))
}

fn unknown_statement(name: &str) -> ServerError {
    ServerError::new(
        SqlState::InvalidStatementName,
        format!("prepared statement \"{name}\" does not exist"),
    )
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
        LogicalPlan::Dml(dml) => match dml.op {
            WriteOp::Insert(_) | WriteOp::Ctas => "INSERT",
            WriteOp::Update => "UPDATE",
            WriteOp::Delete => "DELETE",
            WriteOp::Truncate => "TRUNCATE TABLE",
            WriteOp::MergeInto(_) => "MERGE",
            // A write DataFusion adds later: its result rows show as rows.
            _ => return None,
        },
        LogicalPlan::Copy(_) => "COPY",
        _ => return None,
    })
}

fn returns_rows(plan: &LogicalPlan) -> bool {
    command_tag(plan).is_none()
}

/// The columns a plan gives a client (none for commands).
fn result_schema(plan: &LogicalPlan) -> SchemaRef {
    if returns_rows(plan) {
        Arc::new(plan.schema().as_arrow().clone())
    } else {
        Arc::new(Schema::empty())
    }
}

/// Same column names and types, in order; nullability may differ.
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
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
/// information schema, `pg_catalog`), and queries that read no table at
/// all (constants, admin functions such as `skiff.cancel`), run on the
/// coordinator. A view counts as the tables it reads.
fn runs_on_coordinator(plan: &LogicalPlan) -> bool {
    let (mut scans, mut local) = (0, false);
    count_scans(plan, &mut scans, &mut local);
    local || scans == 0
}

fn count_scans(plan: &LogicalPlan, scans: &mut usize, local: &mut bool) {
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            if let Some(view) = scan.source.get_logical_plan() {
                count_scans(&view, scans, local);
            } else {
                *scans += 1;
                *local |= matches!(
                    scan.table_name.schema(),
                    Some(system_tables::SCHEMA | pg_catalog::SCHEMA | "information_schema")
                );
            }
            if *local {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
}
