//! One query across several workers (issue 16), on datafusion-distributed:
//! the coordinator cuts the physical plan into stages at its shuffles and
//! merges, sends each stage's tasks to the workers its membership lists,
//! and runs the head stage itself; workers serve the library's worker
//! service on their Flight port (`skiff-worker`). Not written here: the
//! exchange operators and the stage scheduler are the library's.
//!
//! A distributed query has none of the state separation features of a
//! single-worker one (no migration, suspend or snapshot): the library
//! streams between stages and has no pause or retry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

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
use skiff_engine::options::{Distribute, SkiffOptions};
use skiff_tables::ManagedTable;
use tracing::warn;
use url::Url;

use super::claims::RunGuard;
use super::membership::Membership;
use super::placement::{self, Placement};
use super::queries::{QueryEntry, ScansSeen};
use super::window_keys::WindowSortKeys;
use crate::config::WORKER_PROBE_TIMEOUT;
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
/// as on one worker.
pub(crate) async fn start(
    state: &SessionState,
    inner: &Arc<Inner>,
    entry: &QueryEntry,
    plan: &LogicalPlan,
) -> Result<Option<SendableRecordBatchStream>> {
    let (query, explain) = match plan {
        LogicalPlan::Explain(explain) => (explain.plan.as_ref(), true),
        plan => (plan, false),
    };
    let mode = state
        .config()
        .options()
        .extensions
        .get::<SkiffOptions>()
        .map_or(Distribute::Auto, |s| s.distribute);
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
    let resolver = SnapshotResolver(placement.urls.values().cloned().collect());
    let scan_key = ScanKey {
        run: inner.scan_run,
        query: entry.id,
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
        .with_distributed_passthrough_headers(skiff_node::carried::headers(
            state.config().options(),
        )?)?;
    if mode == Distribute::On {
        // `on` spreads every other scan over every worker, however small:
        // one task per byte is capped at one per worker (the library sizes
        // a scan's tasks by its bytes, 16 MiB each by default).
        builder = builder.with_distributed_file_scan_config_bytes_per_partition(1)?;
    }
    let mut distributed = builder.build();
    let placement = Arc::new(placement);
    distributed
        .config_mut()
        .set_extension(Arc::clone(&placement));
    // DataFusion's EXPLAIN renders the plan before the library cuts it into
    // stages: the stages are rendered here.
    let physical = distributed.create_physical_plan(query).await?;
    if physical.downcast_ref::<DistributedExec>().is_none() {
        return Ok(None);
    }
    if explain {
        return Ok(Some(explained(query, &physical, &placement)?));
    }
    let scans = ScansSeen {
        key: scan_key,
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
    let stream = physical.execute(0, distributed.task_ctx())?;
    // `skiff.queries` says where it runs (its `worker` names one).
    let workers: Vec<String> = placement.urls.keys().map(u64::to_string).collect();
    let epoch = placement.manager.epoch();
    entry.update(|info| {
        info.decision = format!(
            "distributed over workers {} (partition map epoch {epoch})",
            workers.join(",")
        );
        info.routes = Some(Arc::clone(&placement.routes));
    });
    // The query holds its workers until its stream is dropped: a removal
    // waits for it (`resize`). When it fails, a worker of its that no
    // longer listens is declared dead at once, not when its heartbeats
    // stop, so the next query is not planned with it.
    let schema = stream.schema();
    let inner = Arc::clone(inner);
    let held = stream
        .map(move |batch| {
            let _ = (&guard, &settle);
            batch
        })
        .then(move |batch| {
            // A failure of the query's own (its data, its plan) says
            // nothing of the workers.
            let failed = batch
                .as_ref()
                .err()
                .filter(|e| !own_failure(e))
                .map(|_| (Arc::clone(&inner), Arc::clone(&placement)));
            async move {
                let Some((inner, placement)) = failed else {
                    return batch;
                };
                // A worker found gone is what failed the query: say so, as
                // a query that lost its single worker does (57P03).
                match (declare_gone(&inner, &placement.urls).await.first(), batch) {
                    (Some(id), Err(e)) => Err(ServerError::worker_gone(format!(
                        "worker {id} was lost while running the query ({})",
                        ServerError::from(e).message
                    ))
                    .into()),
                    (_, batch) => batch,
                }
            }
        });
    Ok(Some(Box::pin(RecordBatchStreamAdapter::new(schema, held))))
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

/// Whether `error` is the query's own (its data or its plan), not a
/// worker's or the network's.
fn own_failure(error: &DataFusionError) -> bool {
    matches!(
        error.find_root(),
        DataFusionError::ArrowError(..)
            | DataFusionError::Plan(_)
            | DataFusionError::SchemaError(..)
            | DataFusionError::NotImplemented(_)
            | DataFusionError::ResourcesExhausted(_)
    )
}

/// Each of `workers` whose address refuses connections (its process is
/// gone) is declared dead, and the partition map follows; the ones found
/// gone. The workers are probed at once; one that accepts is alive and
/// left alone.
async fn declare_gone(inner: &Inner, workers: &BTreeMap<u64, Url>) -> Vec<u64> {
    let probes = workers.iter().map(|(&id, url)| async move {
        let (Some(host), Some(port)) = (url.host_str(), url.port()) else {
            return None;
        };
        let probe = tokio::net::TcpStream::connect((host, port));
        // Accepted, timed out or failed otherwise: not known to be gone
        // (the failure detector decides).
        match tokio::time::timeout(WORKER_PROBE_TIMEOUT, probe).await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(id),
            _ => None,
        }
    });
    let gone: Vec<u64> = futures::future::join_all(probes)
        .await
        .into_iter()
        .flatten()
        .collect();
    for &id in &gone {
        if inner.membership.mark_dead(id) {
            warn!(
                worker = id,
                "a distributed query's worker refuses connections; declared dead"
            );
            inner.node_lost(id);
        }
    }
    inner.partition_map();
    gone
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
        let urls = first
            .into_iter()
            .filter(|(id, _)| again.contains_key(id))
            .collect();
        let placement = Placement {
            manager,
            urls,
            routes: Arc::default(),
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
