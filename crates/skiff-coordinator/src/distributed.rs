//! One query across several workers (issue 16), on datafusion-distributed:
//! the coordinator cuts the physical plan into stages at its shuffles and
//! merges, sends each stage's tasks to the workers its membership lists,
//! and runs the head stage itself; workers serve the library's worker
//! service on their Flight port (`skiff-worker`). Not written here: the
//! exchange operators and the stage scheduler are the library's.
//!
//! A distributed query has fewer of the state separation features of a
//! single-worker one: the library streams between stages and has no pause
//! or retry, so a query that loses a worker, is vacated or is suspended
//! runs again (`rerun`), and it cannot migrate or snapshot. It runs again
//! from the start, or, when it commits stage checkpoints, from the stage
//! outputs it committed (`stage_reuse`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::source_as_provider;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion_distributed::{
    DistributedExec, DistributedExt, SessionStateBuilderExt, WorkerResolver, display_plan_ascii,
};
use futures::StreamExt;
use skiff_engine::options::{Distribute, SkiffOptions, StageCheckpoints};
use skiff_flight::delete_states_under;
use skiff_node::checkpoints::{CheckpointResolver, Target};
use skiff_state::Compression;
use skiff_tables::ManagedTable;
use tonic::codegen::http::HeaderMap;
use tracing::{debug, warn};
use url::Url;

use super::claims::RunGuard;
use super::membership::Membership;
use super::placement::{self, Placement};
use super::queries::{QueryEntry, ScansSeen};
use super::rerun::{self, Attempt, Replan};
use super::stage_commits;
use super::stage_reuse;
use super::window_keys::WindowSortKeys;
use crate::config::CHECKPOINT_DELETE_TIMEOUT;
use crate::inner::Inner;
use skiff_node::error::{Result, ServerError};
use skiff_node::scan_progress::{CountScans, ScanCountCodec, ScanKey, files_in};

/// The library's view of the cluster: the workers that took queries when
/// the query was planned (its [`Placement`]), for its task counts (every
/// stage is routed by [`placement::route`]). One snapshot for the whole
/// query, the one its [`RunGuard`] holds.
struct SnapshotResolver(Vec<Url>);

impl WorkerResolver for SnapshotResolver {
    fn get_urls(&self) -> DfResult<Vec<Url>> {
        Ok(self.0.clone())
    }
}

/// The classes (numbers of partitions) of the hash-partitioned tables
/// `plan` reads. A plan that cannot be walked reads none.
fn classes_read(plan: &LogicalPlan) -> BTreeSet<u32> {
    let mut classes = BTreeSet::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node
            && let Ok(provider) = source_as_provider(&scan.source)
            && let Some(hash) = provider
                .downcast_ref::<ManagedTable>()
                .and_then(ManagedTable::partitioning)
        {
            classes.insert(hash.partitions);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    classes
}

/// When the session wants it (`skiff.distribute`), plans `plan` in stages
/// over the workers that take queries and starts it, the head stage here;
/// an `EXPLAIN` of it shows its stages. Scans of hash-partitioned tables
/// run on their partitions' owners under the current partition map
/// ([`placement`]). `None` when it is not wanted or the plan has no stage
/// boundary (one worker, or nothing to split): it runs, or is explained,
/// as on one worker. A query that loses a worker or is vacated runs again
/// ([`rerun`]).
pub(crate) async fn start(
    state: &SessionState,
    inner: &Arc<Inner>,
    entry: &Arc<QueryEntry>,
    plan: &LogicalPlan,
) -> Result<Option<SendableRecordBatchStream>> {
    let (query, explain) = match plan {
        LogicalPlan::Explain(explain) => (explain.plan.as_ref(), true),
        plan => (plan, false),
    };
    let options = state.config().options().extensions.get::<SkiffOptions>();
    let mode = options.map_or(Distribute::Auto, |s| s.distribute);
    let hold = options.is_some_and(|s| s.test_hold_distributed);
    // `auto` distributes a query that reads a hash-partitioned table whose
    // partitions several workers that take queries own. Most queries read
    // none: they are let go before any placement work.
    let classes = match mode {
        Distribute::Off => return Ok(None),
        Distribute::On => BTreeSet::new(),
        Distribute::Auto => classes_read(query),
    };
    if mode == Distribute::Auto && classes.is_empty() {
        return Ok(None);
    }
    let (placement, guard) = Placement::now(inner);
    // One worker has nothing to split: the library makes no stage, and
    // planning for it would only be thrown away.
    if placement.urls.len() < 2 {
        return Ok(None);
    }
    if mode == Distribute::Auto && !classes.iter().any(|&c| placement.spans_workers(c)) {
        return Ok(None);
    }
    let name = uuid::Uuid::new_v4().to_string();
    let checkpoints = checkpointing(state, inner, name.clone());
    let planned = plan_on(state, inner, entry.id, query, placement, mode, &checkpoints).await?;
    if planned.physical.downcast_ref::<DistributedExec>().is_none() {
        return Ok(None);
    }
    if explain {
        return Ok(Some(explained(
            query,
            &planned.physical,
            &planned.placement,
        )?));
    }
    let retry = options.is_none_or(|s| s.retry_on_worker_loss);
    entry.update(|info| info.retry_on_loss = retry);
    // What runs again over the committed stage outputs, if it may.
    let reuse = match &planned.commits {
        Some(commits) if stage_reuse::reusable(&planned.physical) => Some(Arc::new(Reuse {
            physical: Arc::clone(&planned.physical),
            session: planned.session.clone(),
            commits: commits.clone(),
        })),
        _ => None,
    };
    // Held by the planning of every attempt: the checkpoints go with the
    // query (a later plan's may commit where the first did not).
    let forget = checkpoints.map(|c| ForgetCheckpoints {
        store: c.store,
        name: name.clone(),
    });
    let first = begin(inner, entry, planned, guard, false)?;
    let replan: Replan = {
        let (state, inner, entry) = (state.clone(), Arc::clone(inner), Arc::clone(entry));
        let query = Arc::new(query.clone());
        Box::new(move || {
            // Owned by the closure, so dropped with the query's stream.
            let _held = &forget;
            let (state, inner, entry) = (state.clone(), Arc::clone(&inner), Arc::clone(&entry));
            let (query, reuse, name) = (Arc::clone(&query), reuse.clone(), name.clone());
            Box::pin(async move { again(&state, &inner, &entry, &query, mode, reuse, &name).await })
        })
    };
    Ok(Some(rerun::run(
        Arc::clone(inner),
        Arc::clone(entry),
        first,
        replan,
        hold,
    )))
}

/// A distributed query planned for its placement, with the session that
/// runs it.
struct Planned {
    physical: Arc<dyn ExecutionPlan>,
    session: SessionState,
    placement: Arc<Placement>,
    /// What it commits, if it commits any stage's output.
    commits: Option<Commits>,
}

/// A query's first plan, as planned, its session and what it commits:
/// what runs again over its committed stage outputs (`stage_reuse`).
struct Reuse {
    physical: Arc<dyn ExecutionPlan>,
    session: SessionState,
    commits: Commits,
}

/// The stage outputs a planned query commits ([`Target`]), how
/// compressed, and the headers its tasks carry besides the target's.
#[derive(Clone)]
struct Commits {
    target: Target,
    compression: Compression,
    headers: HeaderMap,
}

impl Commits {
    /// Set `session` up to commit: its tasks' headers name the target,
    /// and the head stage (run here) reads the last stage through the
    /// store too.
    fn apply(&self, session: &mut SessionState, inner: &Inner) -> Result<()> {
        let mut headers = self.headers.clone();
        skiff_node::checkpoints::add_target(&mut headers, &self.target)?;
        session.set_distributed_passthrough_headers(headers)?;
        let connections = &inner.checkpoint_connections;
        let resolver = CheckpointResolver::new(connections, self.target.clone(), self.compression);
        session.set_distributed_channel_resolver(resolver);
        Ok(())
    }
}

/// Where a query would commit its stage outputs, under what name, how
/// compressed, and in which mode (`skiff.stage_checkpoints`); which
/// stages do is known once it is planned (`stage_commits`).
struct Checkpointing {
    store: String,
    name: String,
    compression: Compression,
    mode: StageCheckpoints,
    /// How long a task runs before its reads commit ([`Target::after`]).
    after: Duration,
}

/// A query's stage checkpoints (those named `name`, and the names that
/// begin with it), deleted from `store` when the query ends: when its
/// rows stream, with every attempt's planning, goes. In the background,
/// neither the query nor its client waits; one not deleted expires with
/// its time to live.
struct ForgetCheckpoints {
    store: String,
    name: String,
}

impl Drop for ForgetCheckpoints {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = std::mem::take(&mut self.store);
        let prefix = skiff_node::checkpoints::prefix(&self.name);
        runtime.spawn(async move {
            let deleted = tokio::time::timeout(
                CHECKPOINT_DELETE_TIMEOUT,
                delete_states_under(&store, &prefix),
            )
            .await;
            match deleted {
                Ok(Ok(())) => debug!(%prefix, "stage checkpoints deleted"),
                Ok(Err(e)) => warn!(%prefix, error = %e.message(), "stage checkpoints not deleted"),
                Err(_) => warn!(%prefix, "stage checkpoints not deleted: the store did not answer"),
            }
        });
    }
}

/// Plan `query` in stages over `placement`'s workers.
async fn plan_on(
    state: &SessionState,
    inner: &Arc<Inner>,
    query_id: u64,
    query: &LogicalPlan,
    placement: Placement,
    mode: Distribute,
    checkpoints: &Option<Checkpointing>,
) -> Result<Planned> {
    let resolver = SnapshotResolver(placement.urls.values().cloned().collect());
    let headers = skiff_node::carried::headers(state.config().options())?;
    let scan_key = ScanKey {
        run: inner.scan_run,
        query: query_id,
    };
    let mut builder = SessionStateBuilder::new_from_existing(state.clone())
        .with_distributed_worker_resolver(resolver)
        // After DataFusion's rules, before the library cuts stages.
        .with_physical_optimizer_rule(Arc::new(WindowSortKeys))
        .with_physical_optimizer_rule(Arc::new(CountScans::new(
            scan_key,
            Arc::clone(&inner.scans),
        )))
        .with_distributed_user_codec(ScanCountCodec::new(Arc::clone(&inner.scans)))
        .with_distributed_planner()
        .with_distributed_desired_task_count_handler(placement::desired)
        .with_distributed_scale_up_leaf_node_handler(placement::scale_up)
        .with_distributed_route_tasks_handler(placement::route)
        .with_distributed_passthrough_headers(headers.clone())?;
    if mode == Distribute::On {
        // `on` spreads every other scan over every worker, however small:
        // one task per byte is capped at one per worker (the library sizes
        // a scan's tasks by its bytes, 16 MiB each by default).
        builder = builder.with_distributed_file_scan_config_bytes_per_partition(1)?;
    }
    let mut session = builder.build();
    let placement = Arc::new(placement);
    session.config_mut().set_extension(Arc::clone(&placement));
    // DataFusion's EXPLAIN renders the plan before the library cuts it into
    // stages: the stages are rendered here.
    let physical = session.create_physical_plan(query).await?;
    let stages = checkpoints
        .as_ref()
        .map(|c| stage_commits::committed(&physical, c.mode))
        .filter(|stages| !stages.is_empty());
    let (Some(checkpoints), Some(stages)) = (checkpoints, stages) else {
        return Ok(Planned {
            physical,
            session,
            placement,
            commits: None,
        });
    };
    // Its stages' outputs are committed where `stage_commits` says. Under
    // `all` their URLs are marked apart, so that reads between two tasks
    // on one worker are committed too; `auto` leaves those in-process:
    // marked, they cost a join-heavy query about a fifth more even when
    // it ends before anything commits (bench/README.md, "Faults").
    let marks = match checkpoints.mode {
        StageCheckpoints::All => stage_commits::marks(&physical, &stages),
        _ => Vec::new(),
    };
    let placement = Arc::new(Placement {
        marks,
        ..placement.as_ref().clone()
    });
    session.config_mut().set_extension(Arc::clone(&placement));
    let commits = Commits {
        target: Target {
            store: checkpoints.store.clone(),
            query: checkpoints.name.clone(),
            stages,
            // A first attempt: nothing of it is committed yet.
            lookup: false,
            after: checkpoints.after,
        },
        compression: checkpoints.compression,
        headers,
    };
    commits.apply(&mut session, inner)?;
    Ok(Planned {
        physical,
        session,
        placement,
        commits: Some(commits),
    })
}

/// Where `state`'s query commits its stage outputs, under the checkpoint
/// name `name`: with `skiff.stage_checkpoints` on and a memory node alive.
/// Without one there is nowhere to commit, and the query runs as with
/// `off`.
fn checkpointing(state: &SessionState, inner: &Inner, name: String) -> Option<Checkpointing> {
    let options = state.config().options().extensions.get::<SkiffOptions>()?;
    let mode = options.stage_checkpoints;
    if mode == StageCheckpoints::Off {
        return None;
    }
    let Some(store) = inner.membership.memory_node() else {
        warn!("skiff.stage_checkpoints = {mode} without a memory node: nothing is committed");
        return None;
    };
    Some(Checkpointing {
        store,
        name,
        compression: options.state_compression.into(),
        mode,
        after: match mode {
            StageCheckpoints::Auto => Duration::from_millis(options.stage_checkpoints_after_ms),
            _ => Duration::ZERO,
        },
    })
}

/// Start a planned distributed query, the head stage here; it holds its
/// workers (`guard`) until it ends. `reused`: it runs an earlier attempt's
/// plan over its committed stage outputs.
fn begin(
    inner: &Arc<Inner>,
    entry: &QueryEntry,
    planned: Planned,
    guard: RunGuard,
    reused: bool,
) -> Result<Attempt> {
    let Planned {
        physical,
        session,
        placement,
        ..
    } = planned;
    let scans = ScansSeen {
        key: ScanKey {
            run: inner.scan_run,
            query: entry.id,
        },
        total: files_in(&physical),
        by_node: BTreeMap::new(),
        local: Some(Arc::clone(&inner.scans)),
        local_done: 0,
    };
    entry.update(|info| info.scans = Some(scans));
    let settle = SettleScans {
        inner: Arc::clone(inner),
        query: entry.id,
    };
    let stream = physical.execute(0, session.task_ctx())?;
    // `skiff.queries` says where it runs (its `worker` names one).
    let workers: Vec<String> = placement.urls.keys().map(u64::to_string).collect();
    let epoch = placement.manager.epoch();
    let over = match reused {
        true => ", over its committed stage outputs",
        false => "",
    };
    let placed = format!(
        "distributed over workers {} (partition map epoch {epoch}){over}",
        workers.join(",")
    );
    entry.update(|info| {
        info.decision = after_restart(&info.decision, placed);
        info.routes = Some(Arc::clone(&placement.routes));
    });
    let schema = stream.schema();
    let settled = stream.map(move |batch| {
        let _ = &settle;
        batch
    });
    Ok(Attempt {
        stream: Box::pin(RecordBatchStreamAdapter::new(schema, settled)),
        guard: Some(guard),
        workers: placement.urls.clone(),
    })
}

/// The query started again on the workers that take queries now: its
/// first plan over its committed stage outputs when it may (`reuse`,
/// [`stage_reuse`]; one worker can run every task), or planned anew. With
/// one worker left, the library makes no stage of a new plan: the
/// coordinator runs it itself rather than fail a query that could answer.
async fn again(
    state: &SessionState,
    inner: &Arc<Inner>,
    entry: &Arc<QueryEntry>,
    query: &LogicalPlan,
    mode: Distribute,
    reuse: Option<Arc<Reuse>>,
    name: &str,
) -> Result<Attempt> {
    let (mut placement, guard) = Placement::now(inner);
    if placement.urls.is_empty() {
        return Err(ServerError::worker_gone(
            "no worker takes queries to run the query again on",
        ));
    }
    if let Some(reuse) = reuse {
        // Every committed stage marked, under `auto` too: a read between
        // two tasks on one worker must look in the store, or a consumer
        // placed beside its committed producer would run it again.
        placement.marks = stage_commits::marks(&reuse.physical, &reuse.commits.target.stages);
        let placement = Arc::new(placement);
        let mut session = reuse.session.clone();
        session.config_mut().set_extension(Arc::clone(&placement));
        // An earlier attempt committed outputs: each read looks first.
        let mut commits = reuse.commits.clone();
        commits.target.lookup = true;
        commits.apply(&mut session, inner)?;
        let planned = Planned {
            physical: stage_reuse::another_attempt(&reuse.physical)?,
            session,
            placement,
            commits: Some(commits),
        };
        return begin(inner, entry, planned, guard, true);
    }
    // A new plan under a new checkpoint name (that begins with the
    // query's, so that its deletion takes it too): an earlier attempt's
    // outputs are not its stages'.
    let name = format!("{name}.{}", uuid::Uuid::new_v4());
    let checkpoints = checkpointing(state, inner, name);
    let planned = plan_on(state, inner, entry.id, query, placement, mode, &checkpoints).await?;
    if planned.physical.downcast_ref::<DistributedExec>().is_some() {
        return begin(inner, entry, planned, guard, false);
    }
    let placed = "run on the coordinator (one worker was left)".to_string();
    entry.update(|info| info.decision = after_restart(&info.decision, placed));
    let stream =
        datafusion::physical_plan::execute_stream(planned.physical, planned.session.task_ctx())?;
    Ok(Attempt {
        stream,
        guard: None,
        workers: BTreeMap::new(),
    })
}

/// A query's decision `placed`, after the reason it started over (the
/// decision before, when it says it started over).
fn after_restart(before: &str, placed: String) -> String {
    if !before.starts_with(rerun::STARTED_OVER) {
        return placed;
    }
    // An earlier attempt's placement is dropped, the reason kept.
    let why = ["; distributed over", "; run on the coordinator"]
        .iter()
        .filter_map(|m| before.find(m))
        .min()
        .map_or(before, |end| &before[..end]);
    format!("{why}; {placed}")
}

/// Held by a distributed query's stream: when the stream goes, the
/// coordinator's own scan count moves into the query's record.
struct SettleScans {
    inner: Arc<Inner>,
    query: u64,
}

impl Drop for SettleScans {
    fn drop(&mut self) {
        self.inner.queries.settle_scans(self.query);
    }
}

impl Placement {
    /// The current partition map and the workers that take queries, with
    /// the query's claim on them. The claim is taken before the workers
    /// are looked at again, and only workers in both looks are used: a
    /// removal marks its worker draining before it checks for claims, so
    /// either it sees this claim and waits, or the second look leaves its
    /// worker out.
    fn now(inner: &Inner) -> (Placement, RunGuard) {
        let manager = inner.partition_map();
        let first = usable_urls(&inner.membership);
        let guard = inner.distributed_runs.enter(first.keys().copied());
        let again = usable_urls(&inner.membership);
        let urls: BTreeMap<u64, Url> = first
            .into_iter()
            .filter(|(id, _)| again.contains_key(id))
            .collect();
        guard.narrow(urls.keys().copied());
        let placement = Placement {
            manager,
            urls,
            routes: Arc::default(),
            marks: Vec::new(),
        };
        (placement, guard)
    }

    /// Whether several workers that take queries own partitions of class
    /// `partitions`.
    fn spans_workers(&self, partitions: u32) -> bool {
        self.manager.mapping(partitions).is_some_and(|mapping| {
            let owners: BTreeSet<_> = mapping
                .owners()
                .iter()
                .filter(|w| self.urls.contains_key(w))
                .collect();
            owners.len() > 1
        })
    }
}

/// The workers that take queries, by id, with their URLs; a worker whose
/// address is not a URL (it registered it) is left out, with a warning.
fn usable_urls(membership: &Membership) -> BTreeMap<u64, Url> {
    membership
        .usable_workers()
        .into_iter()
        .filter_map(|(id, addr)| match Url::parse(&format!("http://{addr}")) {
            Ok(url) => Some((id, url)),
            Err(e) => {
                warn!(worker = id, %addr, error = %e, "worker address is not a URL; not used");
                None
            }
        })
        .collect()
}

/// `EXPLAIN`'s rows: the logical plan, the stages with their tasks, and
/// where the scans of partitioned tables run.
fn explained(
    query: &LogicalPlan,
    physical: &Arc<dyn ExecutionPlan>,
    placement: &Placement,
) -> Result<SendableRecordBatchStream> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("plan_type", DataType::Utf8, false),
        Field::new("plan", DataType::Utf8, false),
    ]));
    let kinds = StringArray::from(vec!["logical_plan", "distributed_plan", "placement"]);
    let plans = StringArray::from(vec![
        query.display_indent().to_string(),
        display_plan_ascii(physical.as_ref(), false),
        placement::explain(physical, placement),
    ]);
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(kinds), Arc::new(plans)])
        .map_err(DataFusionError::from)?;
    let stream = futures::stream::iter([Ok(batch)]);
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_after_a_restart_keeps_the_reason_and_the_newest_placement() {
        let first = "distributed over workers 1,2,3 (partition map epoch 4)";
        let placed = || "distributed over workers 1,2 (partition map epoch 5)".to_string();
        // No restart: the placement alone.
        assert_eq!(after_restart(first, placed()), placed());
        let why = format!("{}it lost worker 3", rerun::STARTED_OVER);
        let once = after_restart(&why, placed());
        assert_eq!(once, format!("{why}; {}", placed()));
        // A later attempt's placement replaces the earlier one.
        let again = after_restart(&once, "run on the coordinator (one worker was left)".into());
        assert_eq!(
            again,
            format!("{why}; run on the coordinator (one worker was left)")
        );
    }
}
